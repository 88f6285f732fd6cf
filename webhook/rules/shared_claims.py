"""``shared-claim-limit``: more Pods share one named ResourceClaim than its ``status.reservedFor`` can hold.

A Pod that names a ResourceClaim directly (``spec.resourceClaims[].resourceClaimName``) shares it with
every other Pod that does. Each running consumer takes one entry of the claim's ``status.reservedFor``,
at most ``ResourceClaimReservedForMaxSize`` = 256 (kubernetes/kubernetes staging/src/k8s.io/api/resource/
v1beta1/types.go, read at the 1.34+ layout; enforced by pkg/apis/resource/validation
``validateResourceClaimStatusUpdate`` -> ``validateSet(status.ReservedFor, ResourceClaimReservedForMaxSize)``,
and the scheduler's DRA plugin answers "resource claim ... has reached its maximum number of consumers
(256)"). Pod 257 stays Pending with that message, so a workload that can run more Pods than that at
once is reported when it is applied. The count is what the controller can run at the same time:
replicas (+ maxSurge of a rolling Deployment), a Job's parallelism, the sum over a JobSet's replicated
jobs or a PyTorchJob's roles when their templates name the same claim.

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

from webhook.objects import WORKLOAD_KINDS, field_path, get_path, pod_templates
from webhook.rules.base import NO_OUTCOME, Context, Finding, Outcome, rule
from webhook.rules.gate_state import gates_in_force
from webhook.rules.ids import SHARED_CLAIM_LIMIT
from webhook.view import Autoscaler

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
        return _int(get_path(obj, (*path[:-1], "parallelism")), 1)
    if kind == "JobSet":  # path: spec.replicatedJobs[i].template.spec.template
        jobs = _int(get_path(obj, (*path[:3], "replicas")), 1)
        return jobs * _int(get_path(obj, (*path[:-1], "parallelism")), 1)
    if kind == "PyTorchJob":  # path: spec.pytorchReplicaSpecs.<role>.template
        return _int(get_path(obj, (*path[:-1], "replicas")), 1)
    return 1


def _scaled(replicas: int, autoscaler: Autoscaler) -> bool:
    """Whether the HPA acts on a target with these replicas (not on 0 while its minReplicas is not 0)."""
    return replicas != 0 or autoscaler.min_replicas == 0


def shared_claims(obj: Mapping[str, Any], kind: str,
                  autoscaler: Autoscaler | None = None) -> dict[str, tuple[int, list[str]]]:
    """claim name -> (Pods that can use it at once, paths of the entries naming it)."""
    out: dict[str, tuple[int, list[str]]] = {}
    for ref in pod_templates(obj, kind):
        entries = ref.spec(obj).get("resourceClaims")
        names = {
            e["resourceClaimName"]: i
            for i, e in enumerate(entries if isinstance(entries, list) else [])
            if isinstance(e, dict) and isinstance(e.get("resourceClaimName"), str) and e["resourceClaimName"]
        }
        pods = pods_per_template(obj, kind, ref.path, autoscaler)
        for name, i in names.items():
            count, paths = out.get(name, (0, []))
            out[name] = (count + pods, [*paths, field_path(ref.at("spec", "resourceClaims", i))])
    return out


@rule(SHARED_CLAIM_LIMIT, kinds=KINDS, phases=("validate",), operations=("CREATE", "UPDATE"))
def shared_claim_limit(obj: dict[str, Any], ctx: Context) -> Outcome:
    """More Pods can share a named ResourceClaim than its 256 `reservedFor` entries: the rest stay Pending."""
    claims = shared_claims(obj, ctx.kind)
    autoscaler, degraded = _autoscaler(obj, ctx) if claims else (None, ())
    if autoscaler is not None:
        claims = shared_claims(obj, ctx.kind, autoscaler)
    findings = []
    for name, (pods, paths) in sorted(claims.items()):
        if pods <= RESERVED_FOR_MAX:
            continue
        gates, _ = gates_in_force(ctx)
        podgroup = (
            "or a PodGroup claim (PodGroup spec.resourceClaims), shared by the group rather than by each Pod"
            if gates.get("DRAWorkloadResourceClaims", False)
            else "(a PodGroup claim would also do, once DRAWorkloadResourceClaims is on in the cluster)"
        )
        findings.append(
            Finding(
                SHARED_CLAIM_LIMIT,
                f"up to {pods} Pods{_by(obj, ctx.kind, autoscaler)} can use ResourceClaim {name} at once, "
                "but a claim's status.reservedFor "
                f"holds at most {RESERVED_FOR_MAX} consumers: Pod {RESERVED_FOR_MAX + 1} onwards stays Pending "
                "(\"has reached its maximum number of consumers\")",
                f"Give each Pod its own claim with resourceClaimTemplateName instead of resourceClaimName {podgroup}; "
                f"or keep at most {RESERVED_FOR_MAX} Pods on the shared claim.",
                tuple(paths),
            )
        )
    return Outcome(findings=findings, degraded=degraded) if findings or degraded else NO_OUTCOME


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
