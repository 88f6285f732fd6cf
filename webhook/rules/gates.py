"""The ``gated-feature`` rule (docs/design.md §4, docs/dra-1.37.md §4).

The API server silently drops a field whose feature gate is off (or rejects it, e.g.
``partitionTypeAttribute``) *before* validating webhooks run, and answers 201 without a warning
(docs/dra-1.37.md §11). A workload that depends on a beta/alpha field therefore breaks quietly on every
cluster that does not have the gate. The policy's ``kubernetesVersion`` + ``featureGates`` say what the
fleet has on; this rule names each guarded field an object uses while its gate is off there.

The catalogue itself (``GATES``: stages per version, the guarded fields per kind) lives in
``webhook.gates.catalogue``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.gates.catalogue import CRONJOB, GATES, GATES_BY_NAME, JOB, WITH_KUBELET, Gate, gone_in, needs
from webhook.gates.fields import KIND_PATH, Check, kind_key, pod_claims_in_group
from webhook.objects.jsonish import as_dict as _d
from webhook.objects.jsonish import as_list as _l
from webhook.policy.rule_ids import GATED_FEATURE
from webhook.rules.base import NO_OUTCOME, Context, Finding, Outcome, rule
from webhook.rules.gate_state import gates_in_force

__all__ = ["RULE_KINDS", "gated_feature", "near_miss", "remediation"]



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

# What the API server does with a guarded field while its gate is off, where it is not a silent drop.
_OFF_EFFECT: Mapping[str, str] = {
    # k8s.io/api resource/v1: +k8s:ifDisabled(DRAPartitionableDevicesType)=+k8s:forbidden (docs/dra-1.37.md §4).
    "DRAPartitionableDevicesType": "rejects the object (422)",
    "DRAFractionalCapacityRange": "keeps the values but works the range out in whole units (a value below 1 "
    "counts as 1), so claims get other amounts than the driver meant",
}
# Gates whose fields are kept with the gate off (only their meaning changes): findings are advisory.
_KEPT: frozenset[str] = frozenset({"DRAFractionalCapacityRange"})
# Gates on by default under a condition the version default does not show.
_DEFAULT_NOTE: Mapping[str, str] = {
    "DRAFractionalCapacityRange": "on by default only when every component runs with --min-compatibility-version=1.37",
}
# Fields younger than their gate: (gate, kind) -> first version whose API has the field. Job spec.scheduling
# is not in the 1.36 API (the 1.36 OpenAPI of kubernetes-validate rejects it; tests/e2e/test_api_facts_136.py
# shows 1.36.2 drop it); the API server drops it there as an unknown field whatever WorkloadWithJob says.
_FIELD_SINCE: Mapping[tuple[str, str], str] = {("WorkloadWithJob", JOB): "1.37", ("WorkloadWithJob", CRONJOB): "1.37"}

# --- the rule ------------------------------------------------------------------------------------


def _state(gate: Gate, version: str, from_cluster: bool = False) -> str:
    """``beta, off by default in 1.37`` (+ ``; off in this policy`` / ``; off in the cluster``)."""
    stage = gate.stage_in(version)
    if from_cluster:
        return f"{stage.describe() + ' in ' + version if stage else 'not in ' + version}; off in the cluster"
    if stage is None:
        return f"not available in {version}"
    text = f"{stage.describe()} in {version}"
    if gate.name in _DEFAULT_NOTE:
        text += f", {_DEFAULT_NOTE[gate.name]}"
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


def remediation(gate: Gate, version: str, kind_level: bool = False) -> str:
    """How to turn the gate on: the cluster first, then the policy (order matters: see §11)."""
    stage = gate.stage_in(version)
    if stage is None and (gone := gone_in(version, gate.name)):
        return f"{gate.name} does not exist in Kubernetes {version} ({gone}): remove spec.featureGates.{gate.name}."
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
    deps = _dependencies(gate, version)
    turn_on = [gate, *(d for d in deps if not _default_on(d, version))]
    components = {c for g in turn_on for c in g.components}
    steps = (f"--feature-gates={','.join(f'{g.name}=true' for g in turn_on)} on "
             f"{', '.join(c for c in WITH_KUBELET if c in components)}")
    configs = dict.fromkeys(c for g in turn_on if (c := _runtime_config(g, version)))
    if configs:
        steps += f", and --runtime-config={','.join(f'{c}=true' for c in configs)} on kube-apiserver"
    also = "".join(f", {g.name}: true" for g in turn_on[1:])
    return (
        f"Enable it on the cluster first: {steps}{_needs_text(gate, deps, version)}; then set "
        f"spec.featureGates.{gate.name}: true{also} in the migration policy. {_otherwise(gate, kind_level)}"
    )


def _otherwise(gate: Gate, kind_level: bool) -> str:
    """What happens to the object when the gate stays off: not served, rejected, dropped, or kept."""
    if kind_level:
        return "Otherwise do not create it: with the gate off the API server does not serve this kind."
    if gate.name in _KEPT:
        return f"Otherwise use whole numbers: with the gate off the API server {_OFF_EFFECT[gate.name]}."
    effect = _OFF_EFFECT.get(gate.name, "drops the field without a warning")
    return f"Otherwise remove the field: with the gate off the API server {effect}."


def _needs_text(gate: Gate, deps: list[Gate], version: str) -> str:
    """`` (G also needs A, B; keep B on)``: the gates on by default are named so nobody switches them off."""
    if not deps:
        return ""
    kept = [d.name for d in deps if _default_on(d, version)]
    keep = f"; keep {', '.join(kept)} on" if kept else ""
    return f" ({gate.name} also needs {', '.join(d.name for d in deps)}{keep})"


def _dependencies(gate: Gate, version: str) -> list[Gate]:
    """The catalogue gates ``gate`` needs (transitively, webhook.gates.catalogue) that exist in ``version`` and
    can be switched: locked gates are always on."""
    rows = [GATES_BY_NAME[name] for name in (*gate.requires, *needs(gate.name)) if name in GATES_BY_NAME]
    return [g for g in dict.fromkeys(rows) if (st := g.stage_in(version)) is not None and not st.locked]


def _default_on(gate: Gate, version: str) -> bool:
    stage = gate.stage_in(version)
    return stage is not None and stage.default


def _runtime_config(gate: Gate, version: str) -> str | None:
    stage = gate.stage_in(version)
    return stage.runtime_config if stage is not None else None


@rule(GATED_FEATURE, kinds=RULE_KINDS, phases=("mutate", "validate"), operations=("CREATE", "UPDATE"))
def gated_feature(obj: dict[str, Any], ctx: Context) -> Outcome:
    """An object uses a field whose feature gate the cluster has off (per the policy's ``featureGates``).

    The API server drops most such fields silently (a few it rejects, a gated kind it does not serve),
    so the author's manifest would not do what it says (e.g. a shared PodGroup claim silently becomes a
    per-Pod claim). The check runs in the mutating phase too, because validating webhooks only ever see
    the object with the field already gone.
    """
    rows = _BY_KIND.get((ctx.group, ctx.kind))
    if not rows:
        return NO_OUTCOME
    gates, note = gates_in_force(ctx)
    auto = ctx.policy.gate_sources.auto
    version = ctx.policy.spec.kubernetesVersion
    old = ctx.old_object if ctx.operation == "UPDATE" else None
    findings: list[Finding] = []
    degraded: list[str] = []
    for gate, check in rows:
        if ctx.kind in gate.semantic_kinds or gone_in(version, gate.name):
            continue  # a gate the version no longer has: another gate guards its fields there
        paths = check(obj)
        # The API server keeps gated fields an object already uses (its "in use by old" check), so
        # only a first use is worth reporting.
        if not paths or (old is not None and check(old)):
            continue
        since = _FIELD_SINCE.get((gate.name, kind_key(obj)))
        if since is not None and version < since:
            findings.append(_absent_in(gate, paths, version, since))
            continue
        if note is not None and gate.name in auto:
            degraded.append(note)  # this decision wanted the cluster's value and did not have it
        if gates.get(gate.name, False):
            continue
        findings.append(
            Finding(
                GATED_FEATURE,
                f"{_subject(paths, obj)} feature gate {gate.name} "
                f"({_state(gate, version, _from_cluster(gate, ctx, note))})",
                remediation(gate, version, kind_level=paths == [KIND_PATH]),
                tuple(paths),
                advisory=gate.name in _KEPT,
            )
        )
    if ctx.kind == "Pod" and ctx.group == "":
        found, lacked = _podgroup_findings(obj, ctx)
        findings += found
        degraded += lacked
    return Outcome(findings=findings, degraded=tuple(degraded)) if findings or degraded else NO_OUTCOME


def _absent_in(gate: Gate, paths: list[str], version: str, since: str) -> Finding:
    """A field the version's API does not have at all: dropped as an unknown field, whatever the gate says."""
    shown = ", ".join(paths)
    one = len(paths) == 1
    return Finding(
        GATED_FEATURE,
        f"{'field' if one else 'fields'} {shown} {'does' if one else 'do'} not exist in "
        f"Kubernetes {version} (added in {since} behind feature gate {gate.name}): the API server drops "
        f"{'it' if one else 'them'} as unknown",
        f"Remove it, or upgrade the cluster to {since}, enable {gate.name} there and set "
        f'spec.kubernetesVersion: "{since}" and spec.featureGates.{gate.name}: true in the migration policy.',
        tuple(paths),
    )


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

    Sharing needs all fields equal (docs/dra-1.37.md §2.6); a near miss silently gets a per-Pod claim.
    """
    return [f"spec.resourceClaims[{i}]" for i, _, _ in _near_miss_pairs(pod, podgroup)]


def _describe_ref(entry: dict[str, Any]) -> str:
    for key in _CLAIM_REF:
        if entry.get(key):
            return f"{key} {entry[key]}"
    return "no claim reference"


def _podgroup_findings(pod: dict[str, Any], ctx: Context) -> tuple[list[Finding], list[str]]:
    """Advisories for a Pod joining a PodGroup, and what the cluster view lacked to judge them: checked once,
    on CREATE in the validate phase.

    The Pod's claim entries are never dropped (only their meaning changes) and are immutable, so the
    final object at CREATE is the one place to look, and one phase avoids duplicate warnings.
    """
    if ctx.phase != "validate" or ctx.operation != "CREATE":
        return [], []
    group_name = _d(_d(pod.get("spec")).get("schedulingGroup")).get("podGroupName")
    entries = pod_claims_in_group(pod)
    if not group_name or not entries:
        return [], []
    namespace = ctx.namespace or _d(pod.get("metadata")).get("namespace") or ""
    podgroup = ctx.view.get_podgroup(namespace, group_name).value
    gate = GATES_BY_NAME["DRAWorkloadResourceClaims"]
    version = ctx.policy.spec.kubernetesVersion
    findings: list[Finding] = []
    degraded: list[str] = []

    gates, note = gates_in_force(ctx)
    if note is not None and gate.name in ctx.policy.gate_sources.auto:
        degraded.append(note)
    if not gates.get(gate.name, False):
        if podgroup is None:
            degraded.append(f"podgroup {namespace}/{group_name} unknown: all Pod claims assumed shared")
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
    return findings, degraded
