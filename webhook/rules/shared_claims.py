"""``shared-claim-limit``: more Pods share one named ResourceClaim than its ``status.reservedFor`` can hold.

A Pod that names a ResourceClaim directly (``spec.resourceClaims[].resourceClaimName``) shares it with
every other Pod that does. Each running consumer takes one entry of the claim's ``status.reservedFor``,
at most ``ResourceClaimReservedForMaxSize`` = 256 (kubernetes/kubernetes staging/src/k8s.io/api/resource/
v1beta1/types.go, read at the 1.34+ layout; enforced by pkg/apis/resource/validation
``validateResourceClaimStatusUpdate`` -> ``validateSet(status.ReservedFor, ResourceClaimReservedForMaxSize)``,
and kube-scheduler's DRA plugin (pkg/scheduler/framework/plugins/dynamicresources) does not check the count
before binding: ``CanBeReserved`` (staging/src/k8s.io/dynamic-resource-allocation/resourceclaim) is always
true, so Pod 257 is allocated, its PreBind update of ``status.reservedFor`` fails validation, and the Pod is
retried until a reservation frees). A workload that can run more Pods than that at once is reported when
it is applied. The count is what the controller can run at the same time:
replicas (+ maxSurge of a rolling Deployment), a Job's parallelism, the sum over a JobSet's replicated
jobs or a PyTorchJob's roles when their templates name the same claim. A CronJob whose
``concurrencyPolicy`` is ``Allow`` (the default) starts a Job on schedule even while the last one runs
(pkg/controller/cronjob ``syncCronJob``), so at least two Jobs count; ``Forbid`` and ``Replace`` run one.

Claims shared by a PodGroup (1.37, ``DRAWorkloadResourceClaims``): a Pod that joins a PodGroup
(``spec.schedulingGroup.podGroupName``) whose ``spec.resourceClaims`` lists an entry equal to the Pod's
(name, resourceClaimName, resourceClaimTemplateName) is reserved through the group: ``resourceclaim.BindTo``
(staging/src/k8s.io/dynamic-resource-allocation/resourceclaim, 1.37) returns one ``podgroups`` reference for
all of them, so the whole group is one ``reservedFor`` consumer. A Job's ``spec.scheduling.resourceClaims``
(``WorkloadWithJob``) becomes its PodGroup's claims (pkg/api/job ``WorkloadInputForJob*``), one consumer per
Job. When the view cannot show the PodGroup (offline, not created yet), the group is counted as one
consumer: the rule does not deny a layout whose group it cannot see.

A HorizontalPodAutoscaler whose ``scaleTargetRef`` names a Deployment, ReplicaSet or StatefulSet (the kinds
here with a built-in ``/scale`` subresource) can set its replicas up to ``maxReplicas`` whatever
``spec.replicas`` says, so the count is the larger of the two (+ maxSurge on top of it for a Deployment).
The HPA controller leaves a target at ``replicas: 0`` alone while ``minReplicas`` is not 0 ("scaling is
disabled since the replica count of the target is zero", kubernetes/kubernetes
pkg/controller/podautoscaler/horizontal.go ``reconcileAutoscaler``, read at commit 00067268). Other kinds
keep their own counts: Job and JobSet have no ``/scale``, and the ``/scale`` of workload CRDs
(LeaderWorkerSet, an elastic PyTorchJob's Worker role) is not modelled here. When the cluster view cannot
tell (offline, not synced), the count is what the object says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from webhook.objects.pods import WORKLOAD_KINDS, field_path, get_path, pod_templates
from webhook.policy.rule_ids import SHARED_CLAIM_LIMIT
from webhook.rules.base import NO_OUTCOME, Context, Finding, Outcome, rule
from webhook.rules.gate_state import gates_in_force
from webhook.rules.view import Autoscaler

RESERVED_FOR_MAX = 256  # ResourceClaimReservedForMaxSize (see the module docstring)
KINDS = tuple(sorted(WORKLOAD_KINDS - {"DaemonSet"}))  # a DaemonSet's Pod count is the node count
SCALABLE = frozenset({("apps", "Deployment"), ("apps", "ReplicaSet"), ("apps", "StatefulSet")})
"""(group, kind) of the rule's kinds an HPA scales through the built-in ``/scale`` subresource."""


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def _surge(obj: Mapping[str, Any], replicas: int) -> int:
    """Extra Pods a rolling Deployment may run (maxSurge: count or percentage, 25% by default, rounded up)."""
    strategy = get_path(obj, ("spec", "strategy")) or {}
    if not isinstance(strategy, dict) or strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0
    surge = get_path(strategy, ("rollingUpdate", "maxSurge"))
    if surge is None:
        surge = "25%"
    if isinstance(surge, str) and surge.endswith("%"):
        try:
            return math.ceil(replicas * int(surge[:-1]) / 100)
        except ValueError:
            return 0
    return _int(surge, 0)


def pods_per_template(obj: Mapping[str, Any], kind: str, path: tuple[str | int, ...],
                      autoscaler: Autoscaler | None = None) -> int:
    """How many Pods of the template at ``path`` can run at once (the controller's upper bound), with the
    ``autoscaler`` that scales the workload, if any."""
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        replicas = _int(get_path(obj, ("spec", "replicas")), 1)
        if autoscaler is not None and _scaled(replicas, autoscaler):
            replicas = max(replicas, autoscaler.max_replicas)
        return replicas + (_surge(obj, replicas) if kind == "Deployment" else 0)
    if kind in ("Job", "CronJob"):
        return jobs_at_once(obj, kind) * _int(get_path(obj, (*path[:-1], "parallelism")), 1)
    if kind == "JobSet":  # path: spec.replicatedJobs[i].template.spec.template
        jobs = _int(get_path(obj, (*path[:3], "replicas")), 1)
        return jobs * _int(get_path(obj, (*path[:-1], "parallelism")), 1)
    if kind == "PyTorchJob":  # path: spec.pytorchReplicaSpecs.<role>.template
        return _int(get_path(obj, (*path[:-1], "replicas")), 1)
    return 1


_ENTRY_FIELDS = ("name", "resourceClaimName", "resourceClaimTemplateName")


def _entry(e: Any) -> tuple[Any, ...]:
    return tuple(e.get(f) or None for f in _ENTRY_FIELDS) if isinstance(e, dict) else ()


def jobs_at_once(obj: Mapping[str, Any], kind: str) -> int:
    """Jobs of a CronJob that may run at once: two or more under ``Allow`` (the default), else one."""
    if kind != "CronJob":
        return 1
    policy = get_path(obj, ("spec", "concurrencyPolicy"))
    return 2 if policy in (None, "Allow") else 1


class GroupLookup:
    """Which PodGroup reserves a template's claim entry (issue 25 item 1): ``None`` when each Pod does."""

    def __init__(self, ctx: Context | None) -> None:
        gates = gates_in_force(ctx)[0] if ctx is not None else {}
        self.ctx = ctx
        self.on = bool(gates.get("DRAWorkloadResourceClaims", False))
        self.jobs = self.on and bool(gates.get("WorkloadWithJob", False))

    def group(self, obj: Mapping[str, Any], kind: str, ref: Any, entry: dict[str, Any]) -> str | None:
        if not self.on or self.ctx is None:
            return None
        if self.jobs and ref.job_path is not None:
            listed = get_path(obj, (*ref.job_path, "scheduling", "resourceClaims"))
            if _entry(entry) in {_entry(e) for e in (listed if isinstance(listed, list) else [])}:
                return f"job:{field_path(ref.job_path)}"
        name = get_path(ref.spec(obj), ("schedulingGroup", "podGroupName"))
        if not isinstance(name, str) or not name:
            return None
        found = self.ctx.view.get_podgroup(self.ctx.namespace, name)
        if found.value is None:  # not visible: counted as the group it names
            return f"podgroup:{name}"
        listed = get_path(found.value, ("spec", "resourceClaims"))
        listed_entries = {_entry(e) for e in (listed if isinstance(listed, list) else [])}
        return f"podgroup:{name}" if _entry(entry) in listed_entries else None


def _scaled(replicas: int, autoscaler: Autoscaler) -> bool:
    """Whether the HPA acts on a target with these replicas (not on 0 while its minReplicas is not 0)."""
    return replicas != 0 or autoscaler.min_replicas == 0


def shared_claims(obj: Mapping[str, Any], kind: str, autoscaler: Autoscaler | None = None,
                  groups: GroupLookup | None = None) -> dict[str, tuple[int, list[str], int]]:
    """claim name -> (consumers that can hold it at once, paths of the entries naming it, of which groups).

    A Pod is one consumer; every Pod reserved through one PodGroup together is one (``groups``)."""
    pods_of: dict[str, int] = {}
    groups_of: dict[str, dict[str, int]] = {}
    paths_of: dict[str, list[str]] = {}
    for ref in pod_templates(obj, kind):
        entries = ref.spec(obj).get("resourceClaims")
        named = {
            e["resourceClaimName"]: (i, e)
            for i, e in enumerate(entries if isinstance(entries, list) else [])
            if isinstance(e, dict) and isinstance(e.get("resourceClaimName"), str) and e["resourceClaimName"]
        }
        for name, (i, e) in named.items():
            paths_of.setdefault(name, []).append(field_path(ref.at("spec", "resourceClaims", i)))
            group = groups.group(obj, kind, ref, e) if groups is not None else None
            if group is None:
                pods_of[name] = pods_of.get(name, 0) + pods_per_template(obj, kind, ref.path, autoscaler)
            else:  # one consumer per group; a Job's own group once per Job running at once
                held = groups_of.setdefault(name, {})
                held[group] = max(held.get(group, 0), _jobs(obj, kind, ref) if group.startswith("job:") else 1)
    out = {}
    for name, paths in paths_of.items():
        grouped = sum(groups_of.get(name, {}).values())
        out[name] = (pods_of.get(name, 0) + grouped, paths, grouped)
    return out


def _jobs(obj: Mapping[str, Any], kind: str, ref: Any) -> int:
    """Jobs built from the JobSpec holding ``ref`` that run at once (JobSet replicas, CronJob overlap)."""
    if kind == "JobSet":  # path: spec.replicatedJobs[i].template.spec.template
        return _int(get_path(obj, (*ref.path[:3], "replicas")), 1)
    return jobs_at_once(obj, kind)


@rule(SHARED_CLAIM_LIMIT, kinds=KINDS, phases=("validate",), operations=("CREATE", "UPDATE"))
def shared_claim_limit(obj: dict[str, Any], ctx: Context) -> Outcome:
    """More Pods can share a named ResourceClaim than its 256 `reservedFor` entries: the rest stay Pending."""
    if not shared_claims(obj, ctx.kind):  # no named claim: no gate or PodGroup lookup on the hot path
        return NO_OUTCOME
    groups = GroupLookup(ctx)
    claims = shared_claims(obj, ctx.kind, groups=groups)
    autoscaler, degraded = _autoscaler(obj, ctx) if claims else (None, ())
    if autoscaler is not None:
        claims = shared_claims(obj, ctx.kind, autoscaler, groups)
    findings = []
    for name, (consumers, paths, grouped) in sorted(claims.items()):
        if consumers <= RESERVED_FOR_MAX:
            continue
        podgroup = (
            "or a PodGroup claim (PodGroup spec.resourceClaims, the same entry in every Pod of the group), "
            "reserved once for the whole group"
            if groups.on
            else "(a PodGroup claim would also do, once DRAWorkloadResourceClaims is on in the cluster)"
        )
        findings.append(
            Finding(
                SHARED_CLAIM_LIMIT,
                f"up to {consumers} {_unit(grouped)}{_by(obj, ctx.kind, autoscaler)}{_cron(obj, ctx.kind)} can use "
                f"ResourceClaim {name} at once, but a claim's status.reservedFor holds at most {RESERVED_FOR_MAX}: "
                f"from consumer {RESERVED_FOR_MAX + 1} on, kube-scheduler allocates the Pod but its PreBind "
                "update of status.reservedFor fails validation, and the Pod stays Pending, retried until a "
                "reservation frees",
                f"Give each Pod its own claim with resourceClaimTemplateName instead of resourceClaimName {podgroup}; "
                f"or keep at most {RESERVED_FOR_MAX} consumers on the shared claim.",
                tuple(paths),
            )
        )
    return Outcome(findings=findings, degraded=degraded) if findings or degraded else NO_OUTCOME


def _unit(grouped: int) -> str:
    return f"consumers (Pods, and {grouped} reserved as PodGroups)" if grouped else "Pods"


def _cron(obj: Mapping[str, Any], kind: str) -> str:
    return " (concurrencyPolicy Allow: two or more Jobs at once)" if jobs_at_once(obj, kind) > 1 else ""


def _autoscaler(obj: Mapping[str, Any], ctx: Context) -> tuple[Autoscaler | None, tuple[str, ...]]:
    """The HPA scaling this workload, from the cluster view; None when there is none or it cannot tell
    (then a live view that lacked data says why in the second item; the count stays the object's)."""
    if (ctx.group, ctx.kind) not in SCALABLE:
        return None, ()
    name = get_path(obj, ("metadata", "name"))
    if not isinstance(name, str) or not name:  # generateName: no HPA can name it yet
        return None, ()
    found = ctx.view.autoscaler(ctx.namespace, ctx.group, ctx.kind, name)
    if found.degraded:
        return None, (f"{SHARED_CLAIM_LIMIT}: HorizontalPodAutoscalers unknown ({found.degraded}), counted "
                      "spec.replicas",)
    return found.value, ()


def _by(obj: Mapping[str, Any], kind: str, autoscaler: Autoscaler | None) -> str:
    """`` (HorizontalPodAutoscaler x maxReplicas N + maxSurge)`` when the HPA set the count, else ``""``."""
    if autoscaler is None:
        return ""
    replicas = _int(get_path(obj, ("spec", "replicas")), 1)
    if not _scaled(replicas, autoscaler) or autoscaler.max_replicas <= replicas:
        return ""
    surge = " + maxSurge" if kind == "Deployment" and _surge(obj, autoscaler.max_replicas) else ""
    return f" (HorizontalPodAutoscaler {autoscaler.name} maxReplicas {autoscaler.max_replicas}{surge})"
