"""Where the migration stands: the pure half of ``dra-webhook report``.

Objects in (raw Namespace, Pod, ResourceClaim and DeviceClass JSON, gathered by ``webhook.cluster.api``),
a ``Report`` out. Per cohort and namespace: the stage today and the next scheduled change. Per Pod: the
path the webhook intended (our ``<prefix>/path`` annotation, docs/design.md §5) against the path it actually
took, read from the status the scheduler and the resourceclaim controller write:

- ``status.extendedResourceClaimStatus`` set: DRA served an extended resource (``dra-extended-resource``);
- a claim (``spec.resourceClaims`` / ``status.resourceClaimStatuses``): ``dra-claim``;
- both, or a claim next to device-plugin resources: ``mixed``;
- a device resource requested, the Pod bound to a node, no DRA status: the device plugin served it;
- not bound yet: ``pending`` (nothing to compare yet).
"""

from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from webhook.objects.claims import iter_requests
from webhook.policy.compiled import CompiledCohort, CompiledPolicy
from webhook.policy.scope import class_drivers
from webhook.rules.view import extended_resource_map

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
PENDING = "pending"
NO_COHORT = "(no cohort)"
_TERMINAL = ("Succeeded", "Failed")


# -- reading objects --------------------------------------------------------------------------------------


def device_resource_names(policy: CompiledPolicy, classes: Iterable[dict[str, Any]] = ()) -> frozenset[str]:
    """Extended resource names that mean devices: the policy's resources and legacy names, and every
    name a DeviceClass serves (``spec.extendedResourceName``). Implicit class names are matched by prefix."""
    names = set(policy.resources) | set(policy.legacy)
    for cls in classes:
        ern = (cls.get("spec") or {}).get("extendedResourceName")
        if ern:
            names.add(ern)
    return frozenset(names)


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def requested_devices(pod: dict[str, Any], names: frozenset[str]) -> set[str]:
    """Device extended resources the Pod's containers request (requests or limits)."""
    found: set[str] = set()
    for c in _containers(pod):
        res = c.get("resources") or {}
        for section in ("requests", "limits"):
            for name in res.get(section) or {}:
                if name in names or name.startswith(IMPLICIT_PREFIX):
                    found.add(name)
    return found


def actual_path(pod: dict[str, Any], names: frozenset[str]) -> str | None:
    """The path the Pod really took (see the module docstring); None for a Pod that uses no devices."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    dra_extended = bool((status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName"))
    claim = bool(spec.get("resourceClaims")) or any(
        s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []
    )
    extended = bool(requested_devices(pod, names))
    if claim and (dra_extended or extended):
        return "mixed"
    if dra_extended:
        return "dra-extended-resource"
    if claim:
        return "dra-claim"
    if extended:
        return "device-plugin" if spec.get("nodeName") else PENDING
    return None


# -- the report ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NextChange:
    stage: str
    date: dt.date
    in_days: int


@dataclass(slots=True)
class CohortRow:
    name: str
    stage: str
    next: NextChange | None
    namespaces: list[str] = field(default_factory=list)

    @property
    def summary(self) -> str:
        """``pilot-teams: pilot, migrated in 12 days``."""
        if self.next is None:
            return f"{self.name}: {self.stage}, no change scheduled"
        n = self.next.in_days
        days = "today" if n == 0 else f"in {n} day{'s' if n != 1 else ''}"
        return f"{self.name}: {self.stage}, {self.next.stage} {days} ({self.next.date.isoformat()})"


@dataclass(slots=True)
class NamespaceRow:
    name: str
    cohort: str | None
    stage: str
    intended: Counter[str] = field(default_factory=Counter)
    actual: Counter[str] = field(default_factory=Counter)
    drift: int = 0
    unannotated: int = 0
    injected_claims: int = 0
    # Bound Pods on the extended-resource path, which a NoExecute device taint does not evict (the gauges'
    # taint_unevictable_pods; counted here so one pass over a streamed list serves both).
    taint_unevictable: int = 0


@dataclass(frozen=True, slots=True)
class PodRow:
    namespace: str
    name: str
    intended: str | None
    actual: str


@dataclass(frozen=True, slots=True)
class ClaimRow:
    namespace: str
    name: str
    tolerations: str  # the annotation's value (a count)
    owner: str


@dataclass(frozen=True, slots=True)
class ResourceCheck:
    resource: str
    device_class: str
    ok: bool
    message: str


@dataclass(slots=True)
class Report:
    generated: dt.datetime
    policy: str
    cohorts: list[CohortRow]
    namespaces: list[NamespaceRow]
    drift: list[PodRow]
    unannotated: list[PodRow]
    injected: list[ClaimRow]
    resources: list[ResourceCheck] | None  # None: DeviceClasses not looked at
    pods: list[PodRow] = field(default_factory=list)  # every Pod compared (drift and unannotated included)

    def to_json(self) -> dict[str, Any]:
        def nxt(n: NextChange | None) -> dict[str, Any] | None:
            return None if n is None else {"stage": n.stage, "from": n.date.isoformat(), "inDays": n.in_days}

        def pod(p: PodRow) -> dict[str, Any]:
            return {"namespace": p.namespace, "pod": p.name, "intended": p.intended, "actual": p.actual}

        return {
            "generatedAt": self.generated.isoformat(),
            "policy": self.policy,
            "cohorts": [
                {
                    "name": c.name,
                    "stage": c.stage,
                    "next": nxt(c.next),
                    "summary": c.summary,
                    "namespaces": c.namespaces,
                }
                for c in self.cohorts
            ],
            "namespaces": [
                {
                    "name": n.name,
                    "cohort": n.cohort,
                    "stage": n.stage,
                    "intended": dict(sorted(n.intended.items())),
                    "actual": dict(sorted(n.actual.items())),
                    "drift": n.drift,
                    "unannotated": n.unannotated,
                    "claimsWithInjectedTolerations": n.injected_claims,
                }
                for n in self.namespaces
            ],
            "drift": [pod(p) for p in self.drift],
            "unannotated": [pod(p) for p in self.unannotated],
            "injectedTolerations": [
                {"namespace": c.namespace, "claim": c.name, "tolerations": c.tolerations, "owner": c.owner}
                for c in self.injected
            ],
            "resources": None
            if self.resources is None
            else [
                {"resource": r.resource, "deviceClassName": r.device_class, "ok": r.ok, "message": r.message}
                for r in self.resources
            ],
        }


def next_change(cohort: CompiledCohort, today: dt.date) -> NextChange | None:
    entry = cohort.next_change(today)
    if entry is None:
        return None
    return NextChange(entry.stage.value, entry.from_, (entry.from_ - today).days)


def build_report(
    policy: CompiledPolicy,
    now: dt.datetime,
    namespaces: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]] | JudgedPods,
    claims: Iterable[dict[str, Any]] | JudgedClaims = (),
    device_classes: Iterable[dict[str, Any]] | None = None,
) -> Report:
    """The report over the objects given (the caller decides the scope: one namespace or all).

    Namespaces listed are those in a cohort or with device Pods; terminal Pods (Succeeded/Failed) are left
    out, since the report is about what runs now. Each iterable is read once, in order (DeviceClasses,
    Namespaces, claims, Pods), and only output rows are kept: they may be streams of paged lists
    (``webhook.cluster.lists``), so memory follows the report, not the cluster. Of the claims only the names of
    those outside the migration's scope are kept (``webhook.policy.scope``): a Pod whose claims are all
    another driver's (CPU, NIC) did not take the ``dra-claim`` path of the migration.
    """
    classes = list(device_classes) if device_classes is not None else None
    rows = _Rows(policy, now, {n["metadata"]["name"]: (n["metadata"].get("labels") or {}) for n in namespaces})
    foreign: set[tuple[str, str]] = set()
    claim_judge = ClaimJudge(policy, classes)
    injected = _injected_claims(rows, _judged(claims, claim_judge), foreign)
    pod_judge = PodJudge(device_resource_names(policy, classes or ()), policy.key("path"), frozenset(foreign))
    drift, unannotated, compared = _tally_pods(rows, _judged(pods, pod_judge))
    return Report(
        generated=now,
        policy=policy.identity,
        cohorts=_cohort_rows(policy, rows, now),
        namespaces=[rows.by_name[ns] for ns in sorted(rows.by_name)],
        drift=sorted(drift, key=lambda p: (p.namespace, p.name)),
        unannotated=sorted(unannotated, key=lambda p: (p.namespace, p.name)),
        injected=sorted(injected, key=lambda c: (c.namespace, c.name)),
        resources=None if classes is None else check_resources(policy, classes),
        pods=sorted(compared, key=lambda p: (p.namespace, p.name)),
    )


def _judged(objs: Any, judge: Any) -> Iterable[Any]:
    """Each object's judgement: the objects' own (stores that keep judgements), else the judge's, one by one."""
    return objs.judged(judge) if isinstance(objs, JudgedPods | JudgedClaims) else map(judge, objs)


class _Rows:
    """One row per namespace that is in a cohort or has something to report, created on first mention."""

    def __init__(self, policy: CompiledPolicy, now: dt.datetime, labels: dict[str, dict[str, str]]) -> None:
        self.policy, self.now, self.labels = policy, now, labels
        self.by_name: dict[str, NamespaceRow] = {}
        for ns in labels:
            if policy.cohort_for(ns, labels[ns]) is not None:
                self.row(ns)

    def row(self, ns: str) -> NamespaceRow:
        if ns not in self.by_name:
            cohort = self.policy.cohort_for(ns, self.labels.get(ns))
            stage = self.policy.stage_for(cohort, self.now)
            self.by_name[ns] = NamespaceRow(ns, cohort.name if cohort else None, stage)
        return self.by_name[ns]


@dataclass(frozen=True, slots=True)
class PodJudgement:
    """What the report takes from one running Pod: its namespace, its path annotation and, for a Pod that uses
    devices, its row (None: annotated, but no longer or never using devices; only the intended count)."""

    namespace: str
    intended: str | None
    row: PodRow | None
    unevictable: bool = False


@dataclass(frozen=True, slots=True)
class PodJudge:
    """How one report judges each Pod: the device resource names, the path annotation's key, and the claims
    of other drivers (``foreign``). A Pod's judgement depends on nothing else, so a caller that keeps Pods
    between reports (the gauge writer's watches) may keep judgements while these and the Pod stay the same,
    and while the same claims of the Pod are foreign (``webhook.fleet.gauge_watch``)."""

    names: frozenset[str]
    path_key: str
    foreign: frozenset[tuple[str, str]] = frozenset()

    def __call__(self, p: dict[str, Any]) -> PodJudgement | None:
        """None for a Pod the report leaves out: finished, no devices, or only another DRA driver's claims
        (whatever its annotation says)."""
        if (p.get("status") or {}).get("phase") in _TERMINAL:
            return None
        meta = p.get("metadata") or {}
        intended = (meta.get("annotations") or {}).get(self.path_key)
        seen = _without_foreign_claims(p, self.foreign) if self.foreign else p
        actual = actual_path(seen, self.names)
        if actual is None and (intended is None or seen is not p and _claim_count(seen) < _claim_count(p)):
            return None
        ns = meta.get("namespace", "")
        if actual is None:
            return PodJudgement(ns, intended, None)
        # One PodRow per device Pod is all a streamed report keeps: share the path strings between rows.
        row = PodRow(ns, meta.get("name", ""), None if intended is None else sys.intern(intended), actual)
        return PodJudgement(ns, intended, row, _taint_unevictable(p))


@runtime_checkable
class JudgedPods(Protocol):
    """Pods that judge themselves (the gauge writer's stores keep judgements between refreshes)."""

    def judged(self, judge: PodJudge) -> Iterable[PodJudgement | None]: ...


def _tally_pods(rows: _Rows, judged: Iterable[PodJudgement | None]) -> tuple[list[PodRow], list[PodRow], list[PodRow]]:
    """Count intended and actual paths per namespace; (drifted Pods, device Pods without the annotation,
    every Pod compared)."""
    drift: list[PodRow] = []
    unannotated: list[PodRow] = []
    compared: list[PodRow] = []
    for j in judged:
        if j is None:
            continue
        r = rows.row(j.namespace)
        if j.intended is not None:
            r.intended[j.intended] += 1
        pod_row = j.row
        if pod_row is None:
            continue  # annotated, but no longer (or never) using devices: nothing to compare
        r.actual[pod_row.actual] += 1
        if j.unevictable:
            r.taint_unevictable += 1
        compared.append(pod_row)
        if pod_row.intended is None:
            r.unannotated += 1
            unannotated.append(pod_row)
        elif pod_row.actual != PENDING and pod_row.intended != pod_row.actual:
            r.drift += 1
            drift.append(pod_row)
    return drift, unannotated, compared


def _taint_unevictable(pod: dict[str, Any]) -> bool:
    """Bound, and its devices come through status.extendedResourceClaimStatus (the caller skips finished Pods).

    kubernetes pkg/controller/devicetainteviction/device_taint_eviction.go, ``Controller.podEvictionTime``
    (read at commit 008b3652959c, master after v1.36): only ``pod.Spec.ResourceClaims`` are checked for
    NoExecute taints, so the claim the scheduler made for an extended resource never evicts its Pod.
    """
    status = pod.get("status") or {}
    return bool((pod.get("spec") or {}).get("nodeName")) and bool(
        (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName"))


@dataclass(frozen=True, slots=True)
class ClaimJudgement:
    """What the report takes from one ResourceClaim: whether it is another driver's (no request under
    migration) and, when the webhook injected tolerations into it, its row."""

    namespace: str
    name: str
    foreign: bool
    row: ClaimRow | None


class ClaimJudge:
    """How one report judges each ResourceClaim: the injected-tolerations annotation's key and the migration's
    scope over the cluster's DeviceClasses (``webhook.policy.scope``). ``context`` is everything a
    judgement depends on besides the claim: equal contexts judge equal claims equally."""

    def __init__(self, policy: CompiledPolicy, classes: list[dict[str, Any]] | None) -> None:
        self.scope, self.injected_key = policy.scope, policy.key("tolerations-injected")
        self.known = {str((c.get("metadata") or {}).get("name")): c for c in classes} if classes else None
        self.drivers = self.scope.drivers_with(self.known)
        known = None if self.known is None else frozenset(
            (name, class_drivers(c)) for name, c in self.known.items())
        self.context = (self.injected_key, self.scope, known)  # the drivers in scope follow from the last two

    def __call__(self, claim: dict[str, Any]) -> ClaimJudgement:
        meta = claim.get("metadata") or {}
        ns, name = sys.intern(str(meta.get("namespace", ""))), str(meta.get("name", ""))
        foreign = not self.scope.everything and not any(
            self.scope.covers(s.body.get("deviceClassName"), self.known, self.drivers)
            for s in iter_requests(claim, "ResourceClaim"))
        value = (meta.get("annotations") or {}).get(self.injected_key)
        if value is None:
            return ClaimJudgement(ns, name, foreign, None)
        owners = meta.get("ownerReferences") or []
        owner = next((f"{o.get('kind')}/{o.get('name')}" for o in owners if o.get("controller")), "")
        return ClaimJudgement(ns, name, foreign, ClaimRow(ns, name, value, owner))


@runtime_checkable
class JudgedClaims(Protocol):
    """ResourceClaims that judge themselves (see ``JudgedPods``)."""

    def judged(self, judge: ClaimJudge) -> Iterable[ClaimJudgement]: ...


def _claim_count(pod: dict[str, Any]) -> int:
    return len((pod.get("spec") or {}).get("resourceClaims") or [])


def _without_foreign_claims(pod: dict[str, Any], foreign: frozenset[tuple[str, str]]) -> dict[str, Any]:
    """The Pod as ``actual_path`` should see it: without the claims of other DRA drivers.

    A claim is named in ``spec.resourceClaims[].resourceClaimName`` or, made from a template, in
    ``status.resourceClaimStatuses[].resourceClaimName``; a template claim not made yet stays (unknown).
    """
    ns = str((pod.get("metadata") or {}).get("namespace", ""))
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    kept = [r for r in spec.get("resourceClaims") or []
            if (ns, str(r.get("resourceClaimName") or generated.get(r.get("name")) or "")) not in foreign]
    statuses = [s for s in status.get("resourceClaimStatuses") or []
                if (ns, str(s.get("resourceClaimName") or "")) not in foreign]
    return {**pod, "spec": {**spec, "resourceClaims": kept}, "status": {**status, "resourceClaimStatuses": statuses}}


def _injected_claims(rows: _Rows, judged: Iterable[ClaimJudgement],
                     foreign: set[tuple[str, str]]) -> list[ClaimRow]:
    """Claims the webhook injected device tolerations into, counted per namespace; the claims outside the
    migration are added to ``foreign``."""
    injected: list[ClaimRow] = []
    for j in judged:
        if j.foreign:
            foreign.add((j.namespace, j.name))
        if j.row is not None:
            injected.append(j.row)
            rows.row(j.namespace).injected_claims += 1
    return injected


def _cohort_rows(policy: CompiledPolicy, rows: _Rows, now: dt.datetime) -> list[CohortRow]:
    """The policy's cohorts with their namespaces; namespaces in none go to the default-stage row."""
    today = now.astimezone(dt.UTC).date()
    cohorts = [CohortRow(c.name, policy.stage_for(c, now), next_change(c, today)) for c in policy.cohorts]
    by_name = {c.name: c for c in cohorts}
    default = CohortRow(NO_COHORT, policy.source.spec.defaultStage.value, None)
    for ns in sorted(rows.by_name):
        by_name.get(rows.by_name[ns].cohort or "", default).namespaces.append(ns)
    if default.namespaces:
        cohorts.append(default)
    return cohorts


def check_resources(policy: CompiledPolicy, classes: list[dict[str, Any]]) -> list[ResourceCheck]:
    """Does the cluster serve each policy resource through the DeviceClass the policy names?"""
    by_name = {c["metadata"]["name"]: c for c in classes}
    served = extended_resource_map(classes)
    out = []
    for res in policy.resources.values():
        name, cls_name = res.name, res.deviceClassName
        cls = by_name.get(cls_name)
        ern = ((cls or {}).get("spec") or {}).get("extendedResourceName")
        if cls is None:
            ok, msg = False, f"DeviceClass {cls_name} does not exist: {name} would stay Pending on DRA nodes"
        elif ern != name:
            ok, msg = False, f"DeviceClass {cls_name} has extendedResourceName {ern or '(unset)'}, not {name}"
        elif served.get(name) != cls_name:
            ok, msg = False, f"{name} is served by DeviceClass {served.get(name)} (created later), not {cls_name}"
        else:
            ok, msg = True, f"{name} is served by DeviceClass {cls_name}"
        out.append(ResourceCheck(res.name, res.deviceClassName, ok, msg))
    return out


# -- text output ---------------------------------------------------------------------------------------------


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A kubectl-style table: upper-case headers, columns padded by three spaces."""
    cells = [headers, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("   ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _counts(c: Counter[str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(c.items())) or "-"


def render_text(report: Report) -> str:
    out = [f"Policy {report.policy}, as of {report.generated.astimezone(dt.UTC).date().isoformat()}", ""]
    out.append("COHORTS")
    out += [f"  {c.summary}  [{', '.join(c.namespaces) or 'no namespaces in scope'}]" for c in report.cohorts]
    out.append("")
    if report.namespaces:
        out.append(
            table(
                ["NAMESPACE", "COHORT", "STAGE", "INTENDED", "ACTUAL", "DRIFT", "UNANNOTATED", "INJECTED"],
                [
                    [n.name, n.cohort or NO_COHORT, n.stage, _counts(n.intended), _counts(n.actual), str(n.drift),
                     str(n.unannotated), str(n.injected_claims)]
                    for n in report.namespaces
                ],
            )
        )
    else:
        out.append("No namespaces in a cohort and no Pods using devices.")
    if report.drift:
        out += ["", "DRIFT (intended path != actual path)"]
        out.append(table(["NAMESPACE", "POD", "INTENDED", "ACTUAL"],
                         [[p.namespace, p.name, p.intended or "-", p.actual] for p in report.drift]))
    if report.unannotated:
        out += ["", "NOT ANNOTATED (created while the webhook was down, or excluded from it)"]
        out.append(table(["NAMESPACE", "POD", "ACTUAL"], [[p.namespace, p.name, p.actual] for p in report.unannotated]))
        out.append("  No rule judged these Pods when they were created: one may break a Deny rule of its stage. "
                   "Judge one (its namespace's labels included) with:")
        out.append("  (kubectl get ns NAMESPACE -o yaml; echo ---; kubectl get pod -n NAMESPACE POD -o yaml)"
                   " | dra-webhook check -")
    if report.injected:
        out += ["", "CLAIMS WITH INJECTED TOLERATIONS"]
        out.append(table(["NAMESPACE", "CLAIM", "TOLERATIONS", "OWNER"],
                         [[c.namespace, c.name, c.tolerations, c.owner or "-"] for c in report.injected]))
    if report.resources:
        out += ["", "RESOURCES"]
        out += [f"  {'ok ' if r.ok else 'BAD'} {r.message}" for r in report.resources]
    return "\n".join(out) + "\n"
