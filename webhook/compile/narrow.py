"""The compiled mode's narrowed webhooks: a matchCondition that sends the workloads webhooks only what the
compiled admission policies cannot decide (issue #28 item 1, last sentence).

For every rule id, ``FIRES`` names the ``ATOMS`` (CEL predicates: extended-resource names, claims,
``schedulingGroup``, a Job's ``spec.scheduling``) of the pod specs the rule can act on (a superset: sending too
much costs a call, sending too little loses a finding). Whether the rule runs on a layout's kinds at all comes
from the rule set (``Rule.kinds``), so a claim-only rule is ``false`` on Pods without a line here. The
condition is the OR over the rules of ``coverage.NOT_COMPILED``, plus ``RESIDUAL``: what a compiled rule leaves
to the webhook (track-rollout: Pods and templates with claims). When a branch moves a rule into ``COMPILED``,
the narrowing follows; a rule compiled for only part of its objects adds its remainder to ``RESIDUAL``.

Never narrowed: kinds other than the four built-in layouts (workload CRDs, the policy's ``workloadKinds``,
PodGroups: the webhook's own ``uses-devices`` decides them), and the claim, DeviceClass and ResourceSlice webhooks
(``*.resources``/``resourceslices``): the condition takes the place of ``uses-devices`` in ``workloads.validate``
and ``workloads.mutate`` only (one walk over a Pod's containers, not two).

The policy: ``unmapped-extended-resource`` (needs the cluster's DeviceClasses) acts only on a name the policy does
not own (``placement.hardware``: a resource's name, a legacy name), so its atom, ``unowned``, leaves out the names
``owned`` lists, written in the condition; and a rule the policy switches Off in every stage
(``enforcement.rules``) needs nothing. ``unsatisfiable-claim`` (needs the ResourceSlices) acts on every extended
resource a DeviceClass maps, so while it is on, a Pod asking any extended-resource name is sent; templates are not
(it judges Pods and claims only). A policy edit that adds resources or retired names needs no new narrowing (a new
resource's names are sent until it is narrowed again: a call, not a lost finding); one that removes a resource or a
legacy name, or switches a rule back on, does: the reconciler compares the installed condition with the one this
code writes for the policy every pass (``drift``) and warns, with the metric
``dra_webhook_compiled_narrowing_stale``.

Where it goes: the install's compiled mode (deploy/compiled, chart ``mode: compiled``) carries it for the policy
the install ships (the chart: for its inline policy too; for an existing ConfigMap it owns no names), and
``compile --webhook-config FILE --narrow-webhooks`` adds it for ``--policy`` to a cluster's own configurations.
It does not depend on the date; the reconciler never writes webhook configurations (the webhook may not change
its own configurations: admission good practices, and a GitOps tool applying them would fight it).

CEL: webhook matchConditions (kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/
matchconditions/matcher.go, ``matcher.Match``) see ``object`` untyped; an evaluation error under failurePolicy
Ignore skips the webhook, so every field is read behind ``has()`` (as ``uses-devices`` does), which
tests/compile/test_narrow.py evaluates with the same CEL library as tests/deploy/test_match_conditions.py.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from webhook.compile import coverage
from webhook.compile.checks import STAGES
from webhook.compile.layouts import CRONJOB, JOB, LAYOUTS, POD, TEMPLATE, Layout
from webhook.compile.shared import Namespaces
from webhook.objects.pods import DEVICECLASS_PREFIX
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action

CONDITION_NAME = "not-compiled"
USES_DEVICES = "uses-devices"
NARROWED_HOOKS = ("workloads.validate.dra-migration.io", "workloads.mutate.dra-migration.io")
LAYOUT_KINDS: dict[str, tuple[str, ...]] = {
    POD.name: ("Pod",), TEMPLATE.name: ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"),
    JOB.name: ("Job",), CRONJOB.name: ("CronJob",)}
LAYOUT_GROUPS = {POD.name: "", TEMPLATE.name: "apps", JOB.name: "batch", CRONJOB.name: "batch"}


def _path(layout: Layout) -> list[str]:
    """The pod spec's path under ``object`` (``spec``, ``spec.template.spec``, ...)."""
    return layout.spec().split(".")[1:]


def _guarded(layout: Layout) -> tuple[str, str]:
    """(CEL: every step to the pod spec is there, the spec's CEL)."""
    steps, guards = "object", []
    for part in _path(layout):
        steps = f"{steps}.{part}"
        guards.append(f"has({steps})")
    return " && ".join(guards), steps


def _containers(spec: str) -> str:
    return (f"((has({spec}.containers) ? {spec}.containers : []) + "
            f"(has({spec}.initContainers) ? {spec}.initContainers : []))")


OWNED_LIST = re.compile(r"!\(n in \[([^\]]*)\]\)")
"""How ``unowned`` writes the owned names, and how ``narrowed_names`` finds them again."""


def unowned(own: frozenset[str]) -> str:
    """CEL on a requested resource name ``n``: it has a '/' and is not one of ``own`` (the policy's ``owned``)."""
    if not own:
        return "n.contains('/')"
    listed = ", ".join(f"'{n}'" for n in sorted(own))  # extended-resource and class names: no quotes in them
    return f"n.contains('/') && !(n in [{listed}])"


def owned(policy: CompiledPolicy) -> frozenset[str]:
    """The names ``unmapped-extended-resource`` never acts on: those ``placement.hardware`` finds a resource for
    (its classes' implicit names left out: the ``implicit`` atom sends them anyway)."""
    return frozenset({*policy.resources, *policy.legacy})


def switched_off(policy: CompiledPolicy) -> frozenset[str]:
    """Rules the policy switches Off in every stage (``enforcement.rules``): the webhook skips them, so the narrowing
    needs nothing for them."""
    return frozenset(r for r in ids.RULE_IDS if all(policy.action_for(r, s) is Action.Off for s in STAGES))


def job_scheduling(layout: Layout) -> str:
    """A Job's or a CronJob's job template's ``spec.scheduling`` (gate WorkloadWithJob); never on other kinds."""
    if not layout.job:
        return "false"
    steps, guards = "object", []
    for part in [*layout.job.split(".")[1:], "scheduling"]:
        steps = f"{steps}.{part}"
        guards.append(f"has({steps})")
    return " && ".join(guards)


_NAMED_IN_C = ("((has(c.resources.limits) ? c.resources.limits.filter(k, k.contains('/')) : []) + "
               "(has(c.resources.requests) ? c.resources.requests.filter(k, k.contains('/')) : []))")
"""CEL: the names with '/' a container ``c`` limits or requests (a name in both is listed twice)."""


def _pinned_named(spec: str) -> str:
    """CEL: the spec pins nodes (a nodeSelector or a node affinity) and a container asks for a name with '/'."""
    return (f"(has({spec}.nodeSelector) || (has({spec}.affinity) && has({spec}.affinity.nodeAffinity))) && "
            f"{_containers(spec)}.exists(c, has(c.resources) && {_NAMED_IN_C}.size() > 0)")


@dataclass(frozen=True, slots=True)
class Atom:
    """A predicate a rule acts on, as CEL at one of three levels, so ``predicate`` walks the containers once: on the
    pod spec (``spec``: the layout and the spec's guarded CEL), on a container ``c`` (``container``), on a resource
    name ``n`` a container limits or requests (``name``: the policy's ``owned`` names)."""

    spec: Callable[[Layout, str], str] | None = None
    container: str | None = None
    name: Callable[[frozenset[str]], str] | None = None


NAME_ATOMS = frozenset({"named", "unowned", "implicit"})
ATOMS: dict[str, Atom] = {
    "named": Atom(name=lambda own: "n.contains('/')"),  # extended resources, implicit DeviceClass names
    "unowned": Atom(name=unowned),
    "implicit": Atom(name=lambda own: f"n.startsWith('{DEVICECLASS_PREFIX}')"),
    "claims": Atom(spec=lambda layout, spec: f"has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0",
                   container="has(c.resources.claims) && size(c.resources.claims) > 0"),
    "group": Atom(spec=lambda layout, spec: f"has({spec}.schedulingGroup)"),  # gate GenericWorkload
    "job-scheduling": Atom(spec=lambda layout, spec: job_scheduling(layout)),  # gate WorkloadWithJob
    "two-named": Atom(container=f"{_NAMED_IN_C}.exists(a, {_NAMED_IN_C}.exists(b, a != b))"),
    "pinned-named": Atom(spec=lambda layout, spec: _pinned_named(spec)),
}
"""What a rule's predicate is made of: ``named`` (any name with '/'), ``unowned`` (one the policy does not own),
``implicit`` (a DeviceClass's implicit name), ``claims`` (``spec.resourceClaims`` or a container's
``resources.claims``), ``group`` (``schedulingGroup``), ``job-scheduling`` (a Job's ``spec.scheduling``),
``two-named`` (a container asking for two names with '/': a GPU beside a NIC), ``pinned-named`` (a spec pinning
nodes and asking for a name with '/': a slice pin)."""

DEVICES = frozenset({"named", "claims"})
CLAIMS = frozenset({"claims"})
NAMED = frozenset({"named"})
FIRES: dict[str, frozenset[str]] = {
    ids.LEGACY_RESOURCE_NAME: NAMED,
    ids.UNMAPPED_EXTENDED_RESOURCE: frozenset({"unowned"}),  # pods.unmapped_extended_resource skips hardware()
    ids.MAX_DEVICES_PER_POD: DEVICES,
    ids.MIXED_ALLOCATION: CLAIMS,
    ids.DEVICE_CLASS_NOT_ALLOWED: DEVICES,  # implicit class names (deviceclass.resource.kubernetes.io/...)
    ids.DEVICE_COUNT_EXCEEDS: CLAIMS,
    ids.ALLOCATION_MODE_ALL: CLAIMS,
    ids.ADMIN_ACCESS_NAMESPACE: CLAIMS,
    ids.TOLERATION_TOO_BROAD: CLAIMS,
    ids.NONSTANDARD_NUMA_ATTRIBUTE: CLAIMS,
    # The gate catalogue's fields on built-in kinds (rules.gates._BY_KIND): claims (DynamicResourceAllocation,
    # DRAWorkloadResourceClaims), schedulingGroup (GenericWorkload), Job spec.scheduling (WorkloadWithJob).
    ids.GATED_FEATURE: frozenset({"claims", "group", "job-scheduling"}),
    ids.TRAINING_JOB_EXTENDED_RESOURCE: NAMED,
    ids.INJECT_DEVICE_TOLERATIONS: CLAIMS,
    ids.STEER_NODE_POOL: DEVICES,
    ids.TRACK_ROLLOUT: DEVICES,
    ids.DEVICE_CLASS_TAKEOVER: DEVICES,
    ids.SHARED_CLAIM_LIMIT: CLAIMS,
    # Pods too: a Pod's extended resources that a DeviceClass maps (satisfiable._pod_requests), any name.
    ids.UNSATISFIABLE_CLAIM: DEVICES,
    ids.DEVICE_PLUGIN_NIC_BESIDE_DRA: frozenset({"two-named"}),  # a GPU name beside a NIC name in one container
    ids.DEVICE_PLUGIN_SLICE: frozenset({"pinned-named"}),  # a device name and a node pin
    # On DeviceClasses and DeviceTaintRules only, kinds no narrowed layout has: they never send a workload.
    ids.DEVICE_CLASS_MAPPING_REMOVED: frozenset(),
    ids.TAINT_RULE_WITHOUT_SELECTOR: frozenset(),
}
"""Rule id -> the ``ATOMS`` of the pod specs the rule can act on, when it runs on the layout's kinds."""

RESIDUAL: dict[str, frozenset[str]] = {
    ids.TRACK_ROLLOUT: CLAIMS,  # compiled for specs without claims only (coverage.COMPILED)
    ids.DEVICE_CLASS_NOT_ALLOWED: frozenset({"implicit"}),  # compiled on claims; a Pod's implicit names are not
    ids.INJECT_DEVICE_TOLERATIONS: CLAIMS,  # compiled on claims whose own labels decide; a Pod's claims are not
}
"""Compiled rule id -> the ``ATOMS`` of the objects its compiled policies leave to the webhook."""


def _runs_on(rule: str, layout: Layout) -> bool:
    from webhook.rules.ruleset import standard_rules

    kinds = set(LAYOUT_KINDS[layout.name])
    return any(r.kinds & kinds for r in standard_rules().named(rule))


def atoms(layout: Layout, not_compiled: Any = None, compiled: Any = None) -> list[str]:
    """The ``ATOMS`` that send this layout's object to the webhook: the rules the compiled policies leave."""
    left = coverage.NOT_COMPILED if not_compiled is None else not_compiled
    done = coverage.COMPILED if compiled is None else compiled
    found: set[str] = set()
    for rule in ids.RULE_IDS:
        if _runs_on(rule, layout):
            found |= FIRES[rule] if rule in left else RESIDUAL.get(rule, frozenset()) if rule in done else set()
    return [a for a in ATOMS if a in found]


def predicate(layout: Layout, not_compiled: Any = None, compiled: Any = None, own: Iterable[str] = ()) -> str:
    """CEL: this layout's object goes to the webhook (``own``: the policy's ``owned`` names). One pass over the
    containers: the API server evaluates every matchCondition of a webhook for every object its rules match."""
    guard, spec = _guarded(layout)
    found = atoms(layout, not_compiled, compiled)
    if "named" in found:  # any name with '/': the narrower name atoms add nothing
        found = [a for a in found if a not in NAME_ATOMS or a == "named"]
    chosen = [ATOMS[a] for a in found]
    names = [x.name(frozenset(own)) for x in chosen if x.name]
    name_test = " || ".join(f"({n})" for n in names) if len(names) > 1 else "".join(names)
    per_container = [x.container for x in chosen if x.container]
    if name_test:
        per_container += [f"(has(c.resources.{f}) && c.resources.{f}.exists(n, {name_test}))"
                          for f in ("limits", "requests")]
    terms = [f"({t})" for t in (x.spec(layout, spec) for x in chosen if x.spec) if t != "false"]
    if per_container:
        terms.append(f"({_containers(spec)}.exists(c, has(c.resources) && ({' || '.join(per_container)})))")
    return f"{guard} && ({' || '.join(terms)})" if terms else "false"


def expression(not_compiled: Any = None, compiled: Any = None, own: Iterable[str] = (), rest: str = "true") -> str:
    """The matchCondition's CEL: a layout's kind when ``predicate``; other kinds when ``rest`` (the hook's own
    ``uses-devices``, which the condition replaces: ``predicate`` already implies it for the layouts' kinds, and
    every matchCondition is evaluated, so keeping both would walk a Pod's containers twice)."""
    expr = rest
    for layout in reversed(LAYOUTS):
        kinds = LAYOUT_KINDS[layout.name]
        kind = f"request.kind.kind == '{kinds[0]}'" if len(kinds) == 1 else \
            "request.kind.kind in [" + ", ".join(f"'{k}'" for k in kinds) + "]"
        test = f"request.kind.group == '{LAYOUT_GROUPS[layout.name]}' && {kind}"
        expr = f"({test}) ? ({predicate(layout, not_compiled, compiled, own)}) :\n{expr}"
    return f"object == null ||\n{expr}"


def condition(policy: CompiledPolicy | None = None, rest: str = "true") -> dict[str, str]:
    """The matchCondition (name, expression) ``narrow_hook`` puts in place of ``uses-devices`` (``rest``: its
    expression) for ``policy``: the rules it switches off left out, its ``owned`` names kept from the webhook (None:
    the code's coverage alone, any extended-resource name sent)."""
    if policy is None:
        return {"name": CONDITION_NAME, "expression": _written((), (), rest)}
    return {"name": CONDITION_NAME, "expression": _written(switched_off(policy), owned(policy), rest)}


def _written(off: Iterable[str], own: Iterable[str], rest: str) -> str:
    """``expression`` for the code's coverage without the rules ``off``."""
    return expression(set(coverage.NOT_COMPILED) - set(off), set(coverage.COMPILED) - set(off), own=own, rest=rest)


def narrow_hook(hook: dict[str, Any], policy: CompiledPolicy | None = None) -> dict[str, Any]:
    """A copy of the workloads webhook ``hook`` with ``condition`` where its ``uses-devices`` was (its expression
    kept for the kinds outside the layouts), or appended when it has none; an earlier ``not-compiled`` is replaced."""
    hook = copy.deepcopy(hook)
    conds = list(hook.get("matchConditions") or [])
    named = {str(c.get("name")): c for c in conds}
    if USES_DEVICES in named:
        replaced, rest = named[USES_DEVICES], str(named[USES_DEVICES].get("expression"))
    elif CONDITION_NAME in named:  # narrowed before: its last branch is the uses-devices it replaced
        replaced, rest = named[CONDITION_NAME], _rest(str(named[CONDITION_NAME].get("expression")))
    else:
        replaced, rest = None, "true"
    narrowed = condition(policy, rest)
    kept = [narrowed if c is replaced else c for c in conds if c is replaced or c.get("name") != CONDITION_NAME]
    hook["matchConditions"] = kept if replaced is not None else [*kept, narrowed]
    return hook


def _rest(expr: str) -> str:
    """The last branch (kinds outside the layouts) of a ``not-compiled`` expression ``expression`` wrote; ``true``
    (send them all) if it is not one."""
    lines = expr.split("\n", 1 + len(LAYOUTS))
    ours = len(lines) == 2 + len(LAYOUTS) and lines[0] == "object == null ||" and \
        all(line.startswith("(request.kind.group ==") and line.endswith(" :") for line in lines[1:-1])
    return lines[-1] if ours else "true"


def patch_yaml(config: dict[str, Any], policy: CompiledPolicy | None = None) -> str:
    """deploy/compiled/narrowing-{mutating,validating}.yaml: the JSON patch putting ``narrow_hook``'s condition in
    place of ``uses-devices`` in ``webhooks[0]`` (the workloads webhook) of ``config`` (the configuration of that
    kind in deploy/base/webhooks.yaml), after testing that it is there; tests/deploy/test_compiled.py keeps them
    equal for the policy deploy/base installs."""
    hook = config["webhooks"][0]
    at = [c["name"] for c in hook["matchConditions"]].index(USES_DEVICES)
    narrowed = narrow_hook(hook, policy)["matchConditions"][at]
    body = "\n".join(f"      {line}" for line in narrowed["expression"].splitlines())
    where = f"/webhooks/0/matchConditions/{at}"
    return ("# Generated by webhook/compile/narrow.py patch_yaml(): do not edit (tests/deploy/test_compiled.py).\n"
            f"- op: test\n  path: {where}/name\n  value: {USES_DEVICES}\n"
            f"- op: replace\n  path: {where}\n  value:\n    name: {CONDITION_NAME}\n"
            f"    expression: |-\n{body}\n")


def _installed(configs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(webhook name, expression) of each ``not-compiled`` condition of ``NARROWED_HOOKS`` in ``configs``."""
    hooks = [h for doc in configs for h in doc.get("webhooks") or [] if h.get("name") in NARROWED_HOOKS]
    return [(str(h["name"]), str(c.get("expression", ""))) for h in hooks for c in h.get("matchConditions") or []
            if c.get("name") == CONDITION_NAME]


def _listed(expr: str) -> frozenset[str]:
    """The owned names a ``not-compiled`` expression lists (``unowned``)."""
    return frozenset(n for listed in OWNED_LIST.findall(expr) for n in re.findall(r"'([^']*)'", listed))


def narrowed_names(configs: list[dict[str, Any]]) -> frozenset[str] | None:
    """The names the installed ``not-compiled`` conditions of ``configs`` keep from the webhook (the union over
    ``NARROWED_HOOKS``); None when no such condition is installed (nothing is narrowed away)."""
    installed = _installed(configs)
    return frozenset().union(*(_listed(e) for _, e in installed)) if installed else None


def drift(configs: list[dict[str, Any]], policy: CompiledPolicy) -> list[str]:
    """What is wrong with the installed narrowing of ``configs`` for ``policy`` (empty: nothing): names it keeps from
    the webhook that ``policy`` does not own, or a condition other than the one this code writes for ``policy`` with
    those names (a rule switched back on, or another version's coverage): Pods the webhook should see may be kept
    from it until the configurations are narrowed again."""
    problems = []
    for hook, expr in _installed(configs):
        names = _listed(expr)
        # implicit class names are sent whatever the list says (the implicit atom)
        foreign = sorted(n for n in names - owned(policy) if not n.startswith(DEVICECLASS_PREFIX))
        if foreign:
            problems.append(f"{hook} keeps Pods asking for {', '.join(foreign)} from the webhook, which "
                            f"policy {policy.name} does not own")
        elif not _sends_enough(expr, policy, names):
            problems.append(f"{hook}'s {CONDITION_NAME} condition is not one this version writes for "
                            f"policy {policy.name} (a rule switched back on, or another version's narrowing)")
    return problems


def _sends_enough(expr: str, policy: CompiledPolicy, names: frozenset[str]) -> bool:
    """``expr`` is what this code writes for ``policy`` with the owned ``names``, or with fewer of the rules the
    policy switches off left out (it then sends more than needed, never less)."""
    off = sorted(switched_off(policy))
    rest = _rest(expr)
    masks = range(2 ** len(off)) if len(off) <= 6 else (0, 2 ** len(off) - 1)  # all subsets, or none and all
    return any(expr == _written([r for i, r in enumerate(off) if mask >> i & 1], names, rest) for mask in masks)


def hook_namespaces(configs: list[dict[str, Any]]) -> Namespaces:
    """The namespaceSelectors of the workloads webhooks in ``configs`` (what the bindings copy, so the compiled
    policies see the namespaces the webhook sees). ValueError naming a missing webhook."""
    hooks = {str(h.get("name")): h for d in configs for h in d.get("webhooks") or []}
    for name in NARROWED_HOOKS:
        if name not in hooks:
            raise ValueError(f"no webhook named {name}")
    validating, mutating = NARROWED_HOOKS
    return Namespaces(dict(hooks[validating].get("namespaceSelector") or {}),
                      dict(hooks[mutating].get("namespaceSelector") or {}))


def narrow_configs(docs: list[dict[str, Any]], policy: CompiledPolicy | None = None) -> list[dict[str, Any]]:
    """Copies of the Mutating/ValidatingWebhookConfigurations in ``docs`` with each webhook of ``NARROWED_HOOKS``
    narrowed for ``policy`` (``narrow_hook``); other webhooks unchanged."""
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        doc["webhooks"] = [narrow_hook(h, policy) if h.get("name") in NARROWED_HOOKS else h
                           for h in doc.get("webhooks") or []]
        doc.get("metadata", {}).pop("resourceVersion", None)
        out.append(doc)
    return out
