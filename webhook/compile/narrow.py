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
PodGroups), and the claim, DeviceClass and ResourceSlice webhooks (``*.resources``/``resourceslices``): the
condition is added to ``workloads.validate`` and ``workloads.mutate`` only, beside their ``uses-devices``.

Where it goes: the install's compiled mode (deploy/compiled, chart ``mode: compiled``) carries it, and
``compile --webhook-config FILE --narrow-webhooks`` adds it to a cluster's own configurations. It depends on
the code's coverage, not on the policy or the date, so it is static; the reconciler never writes webhook
configurations (the webhook may not change its own configurations: admission good practices).

CEL: webhook matchConditions (kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/
matchconditions/matcher.go, ``matcher.Match``) see ``object`` untyped; an evaluation error under failurePolicy
Ignore skips the webhook, so every field is read behind ``has()`` (as ``uses-devices`` does), which
tests/test_narrow.py evaluates with the same CEL library as tests/test_match_conditions.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from webhook.compile import coverage
from webhook.compile.layouts import CRONJOB, JOB, LAYOUTS, POD, TEMPLATE, Layout
from webhook.compile.shared import Namespaces
from webhook.objects import DEVICECLASS_PREFIX
from webhook.rules import ids

CONDITION_NAME = "not-compiled"
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


def named(spec: str) -> str:
    """A container or init container asks for a resource named with '/' (extended resources, implicit
    DeviceClass names)."""
    return (f"{_containers(spec)}.exists(c, has(c.resources) && ("
            "(has(c.resources.limits) && c.resources.limits.exists(n, n.contains('/'))) || "
            "(has(c.resources.requests) && c.resources.requests.exists(n, n.contains('/')))))")


def implicit(spec: str) -> str:
    """A container or init container asks for a DeviceClass by its implicit extended-resource name."""
    return named(spec).replace("n.contains('/')", f"n.startsWith('{DEVICECLASS_PREFIX}')")


def claims(spec: str) -> str:
    """The pod spec names ResourceClaims (``spec.resourceClaims`` or a container's ``resources.claims``)."""
    return (f"(has({spec}.resourceClaims) && size({spec}.resourceClaims) > 0) || {_containers(spec)}.exists(c, "
            "has(c.resources) && has(c.resources.claims) && size(c.resources.claims) > 0)")


def group(spec: str) -> str:
    """``schedulingGroup`` (gate GenericWorkload)."""
    return f"has({spec}.schedulingGroup)"


def job_scheduling(layout: Layout) -> str:
    """A Job's or a CronJob's job template's ``spec.scheduling`` (gate WorkloadWithJob); never on other kinds."""
    if not layout.job:
        return "false"
    steps, guards = "object", []
    for part in [*layout.job.split(".")[1:], "scheduling"]:
        steps = f"{steps}.{part}"
        guards.append(f"has({steps})")
    return " && ".join(guards)


ATOMS: dict[str, Callable[[Layout, str], str]] = {
    "named": lambda layout, spec: named(spec),
    "implicit": lambda layout, spec: implicit(spec),
    "claims": lambda layout, spec: claims(spec),
    "group": lambda layout, spec: group(spec),
    "job-scheduling": lambda layout, spec: job_scheduling(layout),
}
"""What a rule's predicate is made of: CEL on one layout's object, its pod spec at ``spec`` (guarded)."""

DEVICES = frozenset({"named", "claims"})
CLAIMS = frozenset({"claims"})
NAMED = frozenset({"named"})
FIRES: dict[str, frozenset[str]] = {
    ids.LEGACY_RESOURCE_NAME: NAMED,
    ids.UNMAPPED_EXTENDED_RESOURCE: NAMED,
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
    ids.UNSATISFIABLE_CLAIM: CLAIMS,
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


def predicate(layout: Layout, not_compiled: Any = None, compiled: Any = None) -> str:
    """CEL: this layout's object goes to the webhook."""
    guard, spec = _guarded(layout)
    cel = [ATOMS[a](layout, spec) for a in atoms(layout, not_compiled, compiled)]
    terms = [f"({c})" for c in cel if c != "false"]
    return f"{guard} && ({' || '.join(terms)})" if terms else "false"


def expression(not_compiled: Any = None, compiled: Any = None) -> str:
    """The matchCondition's CEL: kinds outside the layouts always go; a layout's kind when ``predicate``."""
    expr = "true"
    for layout in reversed(LAYOUTS):
        kinds = LAYOUT_KINDS[layout.name]
        kind = f"request.kind.kind == '{kinds[0]}'" if len(kinds) == 1 else \
            "request.kind.kind in [" + ", ".join(f"'{k}'" for k in kinds) + "]"
        test = f"request.kind.group == '{LAYOUT_GROUPS[layout.name]}' && {kind}"
        expr = f"({test}) ? ({predicate(layout, not_compiled, compiled)}) :\n{expr}"
    return f"object == null ||\n{expr}"


def condition() -> dict[str, str]:
    """The matchCondition (name, expression) deploy/compiled and ``compile --narrow-webhooks`` add."""
    return {"name": CONDITION_NAME, "expression": expression()}


def patch_yaml() -> str:
    """deploy/compiled/narrowing.yaml: the JSON patch adding ``condition()`` to ``webhooks[0]`` (the workloads
    webhook of each configuration in deploy/base/webhooks.yaml); tests/test_deploy_compiled.py keeps it equal."""
    body = "\n".join(f"      {line}" for line in expression().splitlines())
    return ("# Generated by webhook/compile/narrow.py patch_yaml(): do not edit (tests/test_deploy_compiled.py).\n"
            f"- op: add\n  path: /webhooks/0/matchConditions/-\n  value:\n    name: {CONDITION_NAME}\n"
            f"    expression: |-\n{body}\n")


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


def narrow_configs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the Mutating/ValidatingWebhookConfigurations in ``docs`` with ``condition()`` in each webhook of
    ``NARROWED_HOOKS`` (replacing one of the same name); other webhooks unchanged."""
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        for hook in doc.get("webhooks") or []:
            if hook.get("name") in NARROWED_HOOKS:
                kept = [c for c in hook.get("matchConditions") or [] if c.get("name") != CONDITION_NAME]
                hook["matchConditions"] = [*kept, condition()]
        doc.get("metadata", {}).pop("resourceVersion", None)
        out.append(doc)
    return out
