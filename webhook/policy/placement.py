"""The placement model: which path the scheduler takes for a Pod's devices, and which node pool serves it.

README "Which path, which pool". A pod spec's device requests (``Usage``) and the policy's statement of what
each pool's nodes advertise (``CompiledPolicy.advertised``) decide the pool ``steer-node-pool`` sends the
Pod to and the ``path`` annotation ``track-rollout`` writes (``plan``). Pure functions of the spec and the
policy, so the answer is the same online and offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.objects.pods import DEVICECLASS_PREFIX, pod_claims, requested_names
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Resource
from webhook.policy.slices import SlicePin, slice_pin


def hardware(policy: CompiledPolicy, name: str) -> Resource | None:
    """The policy resource a requested name means: itself, a legacy name, or its class's implicit name."""
    res = policy.resources.get(name) or policy.legacy.get(name)
    if res is None and name.startswith(DEVICECLASS_PREFIX):
        res = policy.by_class.get(name[len(DEVICECLASS_PREFIX) :])
    return res


DEFAULT_SCHEDULER = "default-scheduler"
"""What the API server defaults an empty ``spec.schedulerName`` to (kubernetes v1.36 pkg/apis/core/v1/defaults.go
``SetDefaults_PodSpec``: ``v1.DefaultSchedulerName``)."""


@dataclass(frozen=True, slots=True)
class Usage:
    """How a pod spec asks for devices under the policy."""

    er: dict[str, Resource]  # requested name -> resource, on the extended-resource path (DRA-servable)
    legacy: dict[str, Resource]  # legacy device-plugin names requested
    claims: tuple[str, ...]  # spec.resourceClaims[].name
    scheduler: str = DEFAULT_SCHEDULER  # spec.schedulerName
    shared: tuple[str, ...] = ()  # other names some pool advertises (HAMi nvidia.com/gpumem, nvidia.com/gpu.shared)
    slice: SlicePin | None = None  # the spec pins nodes where a requested name is a slice (spec.sliceNodeLabels)

    @property
    def gpu(self) -> bool:
        return bool(self.er or self.legacy)

    @property
    def dra_only(self) -> bool:
        """A class's implicit name (``deviceclass.resource.kubernetes.io/<class>``) is requested: only DRA serves
        it, whatever the stage, since no device plugin can advertise a ``kubernetes.io`` name (issue 14 item 2;
        upstream pkg/scheduler/framework/plugins/dynamicresources/extended maps it to the class)."""
        return any(n.startswith(DEVICECLASS_PREFIX) for n in self.er)

    @property
    def uses_devices(self) -> bool:
        return self.gpu or bool(self.claims)


def usage(podspec: Mapping[str, Any], policy: CompiledPolicy, names: Mapping[str, Any] | None = None) -> Usage:
    """Which of the spec's requested names the policy knows (legacy or DRA-servable) and which claims it has.

    ``names`` is ``requested_names(podspec)`` when the caller has it already (``rules.memo``)."""
    er: dict[str, Resource] = {}
    legacy: dict[str, Resource] = {}
    shared: list[str] = []
    for name in requested_names(podspec) if names is None else names:
        if name in policy.legacy:
            legacy[name] = policy.legacy[name]
            continue
        res = hardware(policy, name)
        if res is not None:
            er[name] = res
        elif any(name in names for names in policy.advertised.values()):
            shared.append(name)
    claims = tuple(str(c.get("name", "")) for c in pod_claims(podspec))
    pin = slice_pin(podspec, (*er, *legacy), policy.slices) if er or legacy else None
    return Usage(er, legacy, claims, str(podspec.get("schedulerName") or DEFAULT_SCHEDULER), tuple(shared), pin)


def dra_pool_allowed(u: Usage, policy: CompiledPolicy) -> bool:
    """Whether ``plan`` may send the Pod to the DRA pool: its scheduler allocates DRA devices (``serves_dra``) and it
    pins no slice nodes (``slices.slice_pin``: there the name is a MIG device or a time-shared GPU, on the DRA pool
    a whole GPU; issue 45 item 5)."""
    return serves_dra(u, policy) and u.slice is None


def serves_dra(u: Usage, policy: CompiledPolicy) -> bool:
    """Whether the Pod's scheduler allocates DRA devices (``spec.draSchedulers``).

    Only the scheduler named in ``spec.schedulerName`` places the Pod (kubernetes v1.36
    pkg/scheduler/eventhandlers.go ``responsibleForPod``: ``profiles.HandlesSchedulerName(pod.Spec.SchedulerName)``),
    and DRA claims, including the extended-resource claim, are allocated by kube-scheduler's DynamicResources plugin
    (pkg/scheduler/framework/plugins/dynamicresources).
    Another scheduler may not allocate them at all (docs/running-beside-other-systems.md).
    """
    return u.scheduler in policy.dra_schedulers


def _stage_path(u: Usage, stage: str) -> str | None:
    """docs/design.md §5 ``path`` from the stage alone: the fallback of ``plan`` when no pool can serve the Pod."""
    if u.gpu and u.claims:
        return "mixed"
    if u.legacy and u.dra_only:
        return "mixed"
    if u.legacy:
        return "device-plugin"
    if u.er:
        if stage != "legacy" or all(n.startswith(DEVICECLASS_PREFIX) for n in u.er):
            return "dra-extended-resource"
        return "mixed" if u.dra_only else "device-plugin"
    if u.claims:
        return "dra-claim"
    return None


def _stage_pool(u: Usage, stage: str) -> str | None:
    """Node pool from the stage alone (``plan``'s fallback): ``devicePlugin`` in the legacy stage or when only legacy
    names are requested, ``dra`` otherwise and for a DRA-only name (issue 14 item 2); None for non-GPU Pods."""
    if not u.gpu:
        return None
    if u.dra_only:
        return "dra"
    if stage == "legacy" or _stage_path(u, stage) == "device-plugin":
        return "devicePlugin"
    return "dra"


def pool_path(u: Usage, pool: str, policy: CompiledPolicy) -> str | None:
    """How kube-scheduler serves the Pod's extended resources on a node of ``pool``; None: no node there fits it.

    Per name, as the scheduler decides per node (kubernetes/kubernetes 1.37:
    pkg/scheduler/framework/plugins/helper/resource_fit.go ``helper.ShouldDelegateResourceToDRA``, in 1.36
    noderesources/fit.go ``shouldDelegateResourceToDRA``; and
    dynamicresources/extendeddynamicresources.go ``filterExtendedResources``): a name with allocatable > 0 on the
    node is the device plugin's (NodeResourcesFit counts it); one the node lacks (absent or 0) goes to DRA when a
    DeviceClass maps it (``hasDeviceClassMappedExtendedResource``), which needs ResourceSlices: the ``dra`` pool.
    What a pool's nodes advertise is the policy's statement (``CompiledPolicy.advertised``), so the decision is
    the same online and offline (README "Which path, which pool").
    """
    advertised = policy.advertised[pool]
    if any(name not in advertised for name in u.shared):
        return None  # a sharing stack's name (issue 24 item 4): served only where a pool says it advertises it
    plugin = dra = False
    for name in (*u.er, *u.legacy):
        if name in advertised:
            plugin = True
        elif name in u.er and pool == "dra":  # mapped: a policy resource's name or a policy class's implicit name
            dra = True
        else:
            return None
    if plugin and dra:
        return "mixed"
    return "device-plugin" if plugin else "dra-extended-resource"


@dataclass(frozen=True, slots=True)
class Plan:
    """Where ``steer-node-pool`` sends a Pod (``pool``) and the ``path`` annotation ``track-rollout`` writes."""

    pool: str | None
    path: str | None


def plan(u: Usage, stage: str, policy: CompiledPolicy) -> Plan:
    """The stage's pool (legacy: ``devicePlugin``, else ``dra``) if it can serve every name the Pod requests, else
    the other pool if that can, with the path the scheduler takes there. A legacy-stage Pod asking for a DRA-mapped
    name the device-plugin nodes do not advertise runs only on the DRA pool, through DRA. When neither pool can
    serve the Pod, the stage decides alone (other rules say what is wrong with it). A Pod whose scheduler does not
    allocate DRA devices (``serves_dra``, issue 24 item 3) or that pins slice nodes (issue 45 item 5) is never
    planned for the DRA pool (``dra_pool_allowed``)."""
    if u.gpu:
        order: tuple[str, ...] = ("devicePlugin", "dra") if stage == "legacy" else ("dra", "devicePlugin")
        if not dra_pool_allowed(u, policy):
            order = ("devicePlugin",)
        for pool in order:
            path = pool_path(u, pool, policy)
            if path is not None:
                return Plan(pool, "mixed" if u.claims else path)
    fallback = _stage_pool(u, stage)
    if (fallback == "dra" and not dra_pool_allowed(u, policy)) or u.shared:
        fallback = None  # never a pool that cannot serve it: the scheduler's, a slice's, or a sharing name's

    return Plan(fallback, _stage_path(u, stage))


def per_node(kind: str, group: str, obj: Mapping[str, Any]) -> bool:
    """A DaemonSet, or a Pod a DaemonSet controls: it runs on every node it selects, so no pool confines it.

    GPU-node agents (DCGM exporter, device monitors, node-health checks) are DaemonSets that must reach the
    nodes of both pools. The DaemonSet controller picks the nodes from the template's own nodeSelector and
    affinity, then pins each Pod to its node with a required ``metadata.name`` matchFields term (kubernetes
    v1.36 pkg/controller/daemon/util/daemonset_util.go ``ReplaceDaemonSetPodNodeNameNodeAffinity``, called
    from daemon_controller.go ``syncNodes``): a pool term added to the template would drop the other pool's
    nodes, and one added to a Pod would leave a Pod meant for the other pool's node unschedulable.
    """
    if group == "apps" and kind == "DaemonSet":
        return True
    if kind != "Pod":
        return False
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref.get("kind") == "DaemonSet" and str(ref.get("apiVersion", "")).startswith("apps/")
    return False

