"""The ``gated-feature`` rule (design.md §4, dra-1.37.md §4).

The API server silently drops a field whose feature gate is off (or rejects it, e.g.
``partitionTypeAttribute``) *before* validating webhooks run, and answers 201 without a warning
(dra-1.37.md §11). A workload that depends on a beta/alpha field therefore breaks quietly on every
cluster that does not have the gate. The policy's ``kubernetesVersion`` + ``featureGates`` say what the
fleet has on; this rule names each guarded field an object uses while its gate is off there.

The catalogue itself (``GATES``: stages per version, the guarded fields per kind) lives in the leaf
module ``webhook.gate_catalogue``; its names are re-exported here for existing callers.
"""

from __future__ import annotations

from typing import Any

from webhook.gate_catalogue import (
    CLAIM,
    COMPOSITE,
    DEVICE_CLASS,
    GATES,
    GATES_BY_NAME,
    JOB,
    KIND_PATH,
    POD,
    PODGROUP,
    POOL_STATUS,
    SLICE,
    TAINT_RULE,
    TEMPLATE,
    VERSIONS,
    WORKLOAD,
    Check,
    Gate,
    GateStage,
    effective_gates,
    is_fractional,
    known_in,
    pod_claims_in_group,
)
from webhook.jsonish import as_dict as _d
from webhook.jsonish import as_list as _l
from webhook.rules.base import NO_OUTCOME, Context, Finding, Outcome, rule
from webhook.rules.gate_state import gates_in_force
from webhook.rules.ids import GATED_FEATURE

__all__ = [
    "CLAIM",
    "COMPOSITE",
    "DEVICE_CLASS",
    "GATES",
    "GATES_BY_NAME",
    "JOB",
    "KIND_PATH",
    "POD",
    "PODGROUP",
    "POOL_STATUS",
    "RULE_KINDS",
    "SLICE",
    "TAINT_RULE",
    "TEMPLATE",
    "VERSIONS",
    "WORKLOAD",
    "Check",
    "Gate",
    "GateStage",
    "effective_gates",
    "gated_feature",
    "is_fractional",
    "known_in",
    "near_miss",
    "remediation",
]



def _split(kind: str) -> tuple[str, str]:
    group, _, name = kind.rpartition("/")
    return group, name


def _index() -> dict[tuple[str, str], tuple[tuple[Gate, Check], ...]]:
    by_kind: dict[tuple[str, str], list[tuple[Gate, Check]]] = {}
    for gate in GATES:
        for kind, check in gate.checks:
            by_kind.setdefault(_split(kind), []).append((gate, check))
    return {k: tuple(v) for k, v in by_kind.items()}


# (group, Kind) -> rows: the rule's only per-request lookup.
_BY_KIND = _index()

# What the rule registers for (request.kind.kind); the group is checked against _BY_KIND, so a CRD that
# happens to be called Workload (Kueue's kueue.x-k8s.io/Workload) is left alone.
RULE_KINDS: tuple[str, ...] = tuple(sorted({kind for _, kind in _BY_KIND}))

# --- the rule ------------------------------------------------------------------------------------


def _state(gate: Gate, version: str, from_cluster: bool = False) -> str:
    """``beta, off by default in 1.37`` (+ ``; off in this policy`` / ``; off in the cluster``)."""
    stage = gate.stage_in(version)
    if from_cluster:
        return f"{stage.describe() + ' in ' + version if stage else 'not in ' + version}; off in the cluster"
    if stage is None:
        return f"not available in {version}"
    text = f"{stage.describe()} in {version}"
    return text if not stage.default else f"{text}; off in this policy"


def _from_cluster(gate: Gate, ctx: Context, note: str | None) -> bool:
    sources = ctx.policy.gate_sources
    return note is None and gate.name in sources.auto and gate.name not in sources.explicit


def _subject(paths: list[str], obj: dict[str, Any]) -> str:
    """``field X needs`` / ``fields X, Y need`` / ``kind K needs``."""
    if paths == [KIND_PATH]:
        return f"kind {obj.get('kind', '')} needs"
    if len(paths) == 1:
        return f"field {paths[0]} needs"
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return f"fields {shown} need"


def remediation(gate: Gate, version: str) -> str:
    """How to turn the gate on: the cluster first, then the policy (order matters: see §11)."""
    stage = gate.stage_in(version)
    if stage is None:
        return (
            f"{gate.name} does not exist in Kubernetes {version}: remove the field, or upgrade the "
            f'cluster to 1.37 and set spec.kubernetesVersion: "1.37" in the migration policy.'
        )
    if stage.locked:
        return (
            f"{gate.name} is locked on in {version} and cannot be disabled: remove "
            f"spec.featureGates.{gate.name} from the migration policy."
        )
    steps = f"--feature-gates={gate.name}=true on {', '.join(gate.components)}"
    if stage.runtime_config:
        steps += f", and --runtime-config={stage.runtime_config}=true on kube-apiserver"
    needs = f" ({gate.name} also needs {', '.join(gate.requires)})" if gate.requires else ""
    return (
        f"Enable it on the cluster first: {steps}{needs}; then set spec.featureGates.{gate.name}: true "
        "in the migration policy. Otherwise remove the field: with the gate off the API server "
        "drops or rejects it."
    )


@rule(GATED_FEATURE, kinds=RULE_KINDS, phases=("mutate", "validate"), operations=("CREATE", "UPDATE"))
def gated_feature(obj: dict[str, Any], ctx: Context) -> Outcome:
    """An object uses a field whose feature gate the cluster has off (per the policy's ``featureGates``).

    The API server drops such fields silently, so the author's manifest would not do what it says
    (e.g. a shared PodGroup claim silently becomes a per-Pod claim). The check runs in the mutating
    phase too, because validating webhooks only ever see the object with the field already gone.
    """
    rows = _BY_KIND.get((ctx.group, ctx.kind))
    if not rows:
        return NO_OUTCOME
    gates, note = gates_in_force(ctx)
    auto = ctx.policy.gate_sources.auto
    version = ctx.policy.spec.kubernetesVersion
    old = ctx.old_object if ctx.operation == "UPDATE" else None
    findings: list[Finding] = []
    for gate, check in rows:
        if ctx.kind in gate.semantic_kinds:
            continue
        paths = check(obj)
        # The API server keeps gated fields an object already uses (its "in use by old" check), so
        # only a first use is worth reporting.
        if not paths or (old is not None and check(old)):
            continue
        if note is not None and gate.name in auto:
            ctx.degraded.append(note)  # this decision wanted the cluster's value and did not have it
        if gates.get(gate.name, False):
            continue
        findings.append(
            Finding(
                GATED_FEATURE,
                f"{_subject(paths, obj)} feature gate {gate.name} "
                f"({_state(gate, version, _from_cluster(gate, ctx, note))})",
                remediation(gate, version),
                tuple(paths),
            )
        )
    if ctx.kind == "Pod" and ctx.group == "":
        findings += _podgroup_findings(obj, ctx)
    return Outcome(findings=findings) if findings else NO_OUTCOME


# --- Pods joining a PodGroup ---------------------------------------------------------------------

_CLAIM_REF = ("resourceClaimName", "resourceClaimTemplateName")


def _ref(entry: dict[str, Any]) -> tuple[str | None, ...]:
    return tuple(entry.get(k) or None for k in ("name", *_CLAIM_REF))


def _near_miss_pairs(pod: dict[str, Any], podgroup: dict[str, Any]) -> list[tuple[int, dict[str, Any], dict[str, Any]]]:
    shared = {e.get("name"): e for e in map(_d, _l(_d(podgroup.get("spec")).get("resourceClaims")))}
    out = []
    for i, entry in enumerate(_l(_d(pod.get("spec")).get("resourceClaims"))):
        entry = _d(entry)
        group_entry = shared.get(entry.get("name"))
        if group_entry is not None and _ref(entry) != _ref(group_entry):
            out.append((i, entry, group_entry))
    return out


def near_miss(pod: dict[str, Any], podgroup: dict[str, Any]) -> list[str]:
    """Paths of Pod claim entries named like a PodGroup claim but not equal to it field for field.

    Sharing needs all fields equal (dra-1.37.md §2.6); a near miss silently gets a per-Pod claim.
    """
    return [f"spec.resourceClaims[{i}]" for i, _, _ in _near_miss_pairs(pod, podgroup)]


def _describe_ref(entry: dict[str, Any]) -> str:
    for key in _CLAIM_REF:
        if entry.get(key):
            return f"{key} {entry[key]}"
    return "no claim reference"


def _podgroup_findings(pod: dict[str, Any], ctx: Context) -> list[Finding]:
    """Advisories for a Pod joining a PodGroup: checked once, on CREATE in the validate phase.

    The Pod's claim entries are never dropped (only their meaning changes) and are immutable, so the
    final object at CREATE is the one place to look, and one phase avoids duplicate warnings.
    """
    if ctx.phase != "validate" or ctx.operation != "CREATE":
        return []
    group_name = _d(_d(pod.get("spec")).get("schedulingGroup")).get("podGroupName")
    entries = pod_claims_in_group(pod)
    if not group_name or not entries:
        return []
    namespace = ctx.namespace or _d(pod.get("metadata")).get("namespace") or ""
    podgroup = ctx.view.get_podgroup(namespace, group_name)
    gate = GATES_BY_NAME["DRAWorkloadResourceClaims"]
    version = ctx.policy.spec.kubernetesVersion
    findings: list[Finding] = []

    gates, note = gates_in_force(ctx)
    if note is not None and gate.name in ctx.policy.gate_sources.auto:
        ctx.degraded.append(note)
    if not gates.get(gate.name, False):
        if podgroup is None:
            ctx.degraded.append(f"podgroup {namespace}/{group_name} unknown: all Pod claims assumed shared")
        else:
            shared = {_ref(_d(e)) for e in _l(_d(podgroup.get("spec")).get("resourceClaims"))}
            claims = _l(_d(pod.get("spec")).get("resourceClaims"))
            entries = [p for p, e in zip(entries, claims, strict=True) if _ref(_d(e)) in shared]
        if entries:
            findings.append(
                Finding(
                    GATED_FEATURE,
                    f"{_subject(entries, pod)} feature gate "
                    f"{gate.name} ({_state(gate, version, _from_cluster(gate, ctx, note))}) "
                    f"to use the shared claim of PodGroup {group_name}; "
                    "without it each Pod gets its own claim",
                    remediation(gate, version),
                    tuple(entries),
                    advisory=True,
                )
            )

    if podgroup is not None:
        for i, entry, group_entry in _near_miss_pairs(pod, podgroup):
            findings.append(
                Finding(
                    GATED_FEATURE,
                    f"spec.resourceClaims[{i}] ({entry.get('name')}) has {_describe_ref(entry)} but PodGroup "
                    f"{group_name}'s claim of that name has {_describe_ref(group_entry)}: the Pod silently "
                    "gets its own per-Pod claim instead of the shared one",
                    f"Copy the PodGroup's entry exactly ({_describe_ref(group_entry)}) to share its claim, "
                    "or rename the Pod's entry if a per-Pod claim is intended.",
                    (f"spec.resourceClaims[{i}]",),
                    advisory=True,
                )
            )
    return findings
