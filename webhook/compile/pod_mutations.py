"""``steer-node-pool`` and ``track-rollout`` compiled together: one MutatingAdmissionPolicy per layout.

Both rules read the placement plan (``plan.plan_variables``: the names asked for, the pools, the path). As two
policies the API server computed it in each, and with ``reinvocationPolicy: IfNeeded`` it ran the first policy
again after the second changed the object: three evaluations of the plan per GPU Pod (bench/results.md, issue 28
item 5). One policy per layout, ``<policy>-<layout>-mutate.dra-migration.io``, declares the plan once, and its
patches are one ``JSONPatch`` mutation: the API server's variables are lazy per mutation (kubernetes v1.36
``plugin/cel/composition.go``: ``compositionContext.Variables`` builds a new lazy map for each mutation's
evaluation), so a second mutation would compute the plan again. A template's annotations written by track-rollout
stay an ``ApplyConfiguration`` (a granular merge), in a second mutation for workloads only; a Pod has one.

The patches follow the webhook's order (``rules``: steer-node-pool, then track-rollout), except a Pod's node-pool
marker, which comes last and is written as one key of the map track-rollout has just put there
(``steering._marker_patch``): the stored object is the same. Neither rule reads what the other writes (the plan reads
no annotation; track-rollout's template test ignores only its own keys, so a template steering may change is one it
judges changed anyway, and one it would restore is one steering does not examine).

Each rule keeps its own matchConditions: those both have (``uses-devices``) stay matchConditions, the others become
part of the rule's ``<rule>On`` variable, which guards its patches (``shared.Part``). ``reinvocationPolicy`` stays
``IfNeeded``, as the webhook's: with one policy, none of ours changes the object after it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from webhook.compile.cel import lit
from webhook.compile.layouts import LAYOUTS, POD, Layout
from webhook.compile.mutating import tracking_part
from webhook.compile.plan import plan_variables
from webhook.compile.shared import (
    API,
    Part,
    container_variables,
    inline_variables,
    mutating_pairs,
    named_cohort,
    namespace_variables,
    standalone,
    used_variables,
)
from webhook.compile.steering import (
    marker_elsewhere,
    marker_variable,
    marker_written,
    pool_variables,
    steering_part,
    steering_settled,
    stored_path,
)
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy

RULE = "mutate"
"""The name's rule part: ``<policy>-<layout>-mutate.dra-migration.io``."""


def parts(layout: Layout, policy: CompiledPolicy, day: dt.date) -> list[Part]:
    """The rules that write on ``day`` in the webhook's order (steer-node-pool, then track-rollout)."""
    tracking = tracking_part(layout, policy, day)
    tracked = "variables.trkOn" if tracking is not None and layout is POD else "false"
    return [p for p in (steering_part(layout, policy, day, tracked), tracking) if p is not None]


def _on(part: Part, common: list[dict[str, str]]) -> dict[str, str]:
    """``<rule>On``: the rule's own matchConditions not shared (first: they were decided before any variable), then
    its guard."""
    own = [c["expression"] for c in part.conditions if c not in common]
    return {"name": part.on, "expression": " && ".join(f"({e})" for e in [*own, part.guard])}


def common_conditions(rules: list[Part]) -> list[dict[str, str]]:
    """The matchConditions every rule of the layout has: they stay the policy's matchConditions."""
    return [c for c in rules[0].conditions if all(c in p.conditions for p in rules[1:])]


def guards(layout: Layout, policy: CompiledPolicy, day: dt.date) -> dict[str, str]:
    """``<rule>On`` -> its expression as declared, before ``shared.inline_variables`` writes it into the patches."""
    rules = parts(layout, policy, day)
    return {p.on: _on(p, common_conditions(rules))["expression"] for p in rules}


def settled(layout: Layout, policy: CompiledPolicy, rules: list[Part]) -> str | None:
    """CEL over the policy's variables, true only where every patch of the Pod policy is empty: the Pod carries the
    four tracking annotations with the values track-rollout would write (or it writes none), and steering writes
    nothing (``steering_settled``). What a Pod is when the API server invokes the policy again after its own patch
    (kubernetes v1.36 plugin/policy/mutating/dispatcher.go: a policy with ``reinvocationPolicy: IfNeeded`` that
    changed the object is invoked again), which otherwise costs a whole evaluation, the patch's JSON round trip and
    defaulting (bench/results.md, issue 28 item 5). None for templates, and without track-rollout (whose ``policy``
    annotation is the cheap first test)."""
    names = {p.rule for p in rules}
    if layout is not POD or ids.TRACK_ROLLOUT not in names:
        return None
    def ann(key: str) -> str:
        return f"object.metadata.?annotations[?{lit(policy.key(key))}]"
    # the plan's path, where the marker leaves it the stored one (``steering.stored_path``): a Pod whose marker names
    # another pool is not taken for settled, so the test reads no steering decision
    written = " && ".join(f"{ann(k)} == optional.of(variables.{v})" for k, v in
                          (("path", "trkPlanPath"), ("stage", "stage"), ("cohort", "cohort")))
    written += f" && !{marker_elsewhere()}"
    out = [f"{ann('policy')} == optional.of({lit(policy.identity)})", f"(!variables.trkOn || ({written}))"]
    if ids.STEER_NODE_POOL in names:
        out.append(steering_settled(policy))
    return " && ".join(out)


def _unsettled(layout: Layout, policy: CompiledPolicy, rules: list[Part],
               variables: list[dict[str, str]]) -> list[dict[str, str]]:
    """The matchCondition ``unsettled``: not ``settled``, with the variables written in (``shared.standalone``), its
    first test (our ``policy`` annotation, absent from a Pod the policy has not seen) kept outside what is bound, then
    whether the namespace's name decides its cohort (``shared.named_cohort``): a matchCondition cannot read the
    namespace's labels, so a Pod in a namespace its labels place is never taken for settled."""
    test = settled(layout, policy, rules)
    if test is None:
        return []
    first, _, rest = test.partition(" && ")
    known = named_cohort(policy)
    first = first if known == "true" else f"{first} && {known}"
    return [{"name": "unsettled", "expression": f"!({first} && {standalone(rest, variables)})"}]


def _path_variables(policy: CompiledPolicy, layout: Layout, declared: set[str],
                    rules: list[Part]) -> list[dict[str, str]]:
    """``trkPath`` (``steering.stored_path``), and what it reads that the steering has not declared: a layout
    without steering still reads the plan's pool and the marker an earlier steering left."""
    steers = any(p.rule == ids.STEER_NODE_POOL for p in rules)
    needed = [*pool_variables(policy), marker_variable(policy, layout)]
    path = stored_path(marker_written(policy) if steers else "false")
    return [*(v for v in needed if v["name"] not in declared), path]


def _policy(layout: Layout, policy: CompiledPolicy, day: dt.date, meta: dict[str, Any]) -> dict[str, Any]:
    rules = parts(layout, policy, day)
    common = common_conditions(rules)
    patches = [*(b for p in rules for b in p.before), *(a for p in rules for a in p.after)]
    read = [" + ".join(f"({x})" for x in patches), *(p.apply for p in rules if p.apply)]
    variables = [*namespace_variables(policy, day), *container_variables(layout), *plan_variables(policy),
                 *(v for p in rules for v in p.variables), *(_on(p, common) for p in rules)]
    variables += _path_variables(policy, layout, {v["name"] for v in variables}, rules)
    conditions = [*common, *_unsettled(layout, policy, rules, variables)]
    variables, read = inline_variables(used_variables(variables, read), read)
    mutations = [{"patchType": "JSONPatch", "jsonPatch": {"expression": read[0]}},
                 *({"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": a}} for a in read[1:])]
    return {
        "apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": meta,
        "spec": {
            "failurePolicy": "Ignore",  # as workloads.mutate (deploy/base/webhooks.yaml)
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": layout.resource_rules()},
            "matchConditions": conditions,
            "variables": variables,
            "mutations": mutations,
        },
    }


def compile_pod_mutations(policy: CompiledPolicy, day: dt.date, until: dt.date | None,
                          namespaces: dict[str, Any]) -> list[dict[str, Any]]:
    """One MutatingAdmissionPolicy and binding per layout, or none when neither rule writes on ``day``."""
    if not parts(LAYOUTS[0], policy, day):
        return []
    return mutating_pairs(policy, day, until, namespaces, LAYOUTS, RULE,
                          lambda layout, meta: _policy(layout, policy, day, meta))
