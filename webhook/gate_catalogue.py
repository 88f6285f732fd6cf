"""The feature-gate catalogue: which gates each Kubernetes version has and which fields they guard.

A leaf module (it imports nothing from ``webhook``) so the policy compiler, loader and linter can
resolve gate defaults without reaching into the ``gated-feature`` rule (``webhook.rules.gates``).

The API server silently drops a field whose feature gate is off (or rejects it, e.g.
``partitionTypeAttribute``) *before* validating webhooks run, and answers 201 without a warning
(docs/dra-1.37.md §11). One table, ``GATES``, one row per gate: stage/default per Kubernetes version, and per
kind ("group/Kind", core kinds bare) a check ``(obj) -> [JSON path, ...]`` of the guarded fields the
object uses. Checks are written against the 1.37 wire shapes (resource.k8s.io/v1
``exactly``/``firstAvailable``, scheduling.k8s.io v1beta1/v1alpha3). A field counts as used when it is
present and not null, false or empty: that is also when the API server's drop logic would change anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.jsonish import as_dict as _d
from webhook.jsonish import as_list as _l
from webhook.objects import KINDS as POD_TEMPLATE_KINDS
from webhook.objects import field_path, pod_templates
from webhook.quantity import from_json

VERSIONS: tuple[str, ...] = ("1.36", "1.37")

Check = Callable[[dict[str, Any]], list[str]]

# Path shown (and put in Finding.paths) when the kind itself is gated rather than a field.
KIND_PATH = "kind"

_CONTROL_PLANE = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
WITH_KUBELET = (*_CONTROL_PLANE, "kubelet")

POD = "Pod"
JOB = "batch/Job"
PODGROUP = "scheduling.k8s.io/PodGroup"
WORKLOAD = "scheduling.k8s.io/Workload"
COMPOSITE = "scheduling.k8s.io/CompositePodGroup"
CLAIM = "resource.k8s.io/ResourceClaim"
TEMPLATE = "resource.k8s.io/ResourceClaimTemplate"
SLICE = "resource.k8s.io/ResourceSlice"
DEVICE_CLASS = "resource.k8s.io/DeviceClass"
TAINT_RULE = "resource.k8s.io/DeviceTaintRule"
POOL_STATUS = "resource.k8s.io/ResourcePoolStatusRequest"


@dataclass(frozen=True, slots=True)
class GateStage:
    """A gate in one Kubernetes version."""

    stage: str  # "alpha" | "beta" | "GA"
    default: bool
    locked: bool = False
    # The API version kube-apiserver must serve for the guarded kind/fields in this release.
    runtime_config: str | None = None

    def describe(self) -> str:
        if self.locked:
            return f"{self.stage}, locked {'on' if self.default else 'off'}"
        return f"{self.stage}, {'on' if self.default else 'off'} by default"


@dataclass(frozen=True, slots=True)
class Gate:
    """One row of the catalogue."""

    name: str
    v1_36: GateStage | None  # None: the gate does not exist in 1.36
    v1_37: GateStage | None  # None: the gate is gone in 1.37 (GONE_IN_1_37 says where its fields went)
    checks: tuple[tuple[str, Check], ...]  # ("group/Kind", check)
    guards: str  # short human list of the guarded fields, for `dra-webhook gates`
    requires: tuple[str, ...] = ()  # gates that must be on too for this one to work
    components: tuple[str, ...] = _CONTROL_PLANE
    # Kinds where the field is kept with the gate off but means something else (the Pod's claim entry
    # stays, it just is not shared): findings there are advisory.
    semantic_kinds: frozenset[str] = frozenset()
    _by_kind: Mapping[str, Check] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_kind", dict(self.checks))

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind, _ in self.checks)

    def stage_in(self, version: str) -> GateStage | None:
        if version == "1.36":
            return self.v1_36
        if version == "1.37":
            return self.v1_37
        raise ValueError(f"unknown Kubernetes version {version!r}; known: {', '.join(VERSIONS)}")

    def predicate(self, obj: dict[str, Any]) -> list[str]:
        """JSON paths of this gate's fields that ``obj`` uses (kind taken from the object itself)."""
        check = self._by_kind.get(kind_key(obj))
        return check(obj) if check is not None else []


# --- helpers over raw dicts (never trust shapes: offline input may be anything) --------------------


def _used(value: Any) -> bool:
    return value is not None and value is not False and value != [] and value != {} and value != ""


def _key(name: str) -> str:
    """Map keys (attribute/capacity names contain dots and slashes) in bracket form."""
    return f'["{name}"]'


def kind_key(obj: dict[str, Any]) -> str:
    api_version = obj.get("apiVersion") or ""
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    kind = obj.get("kind") or ""
    return f"{group}/{kind}" if group else str(kind)


def _at(obj: dict[str, Any], path: str) -> list[str]:
    """[path] when the dotted path (plain keys only) is used."""
    node: Any = obj
    for part in path.split("."):
        node = _d(node).get(part)
    return [path] if _used(node) else []


def _kind_itself(obj: dict[str, Any]) -> list[str]:
    return [KIND_PATH]


# --- claims ------------------------------------------------------------------------------------


def _devices(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    spec = _d(obj.get("spec"))
    if obj.get("kind") == "ResourceClaimTemplate":
        return "spec.spec.devices", _d(_d(spec.get("spec")).get("devices"))
    return "spec.devices", _d(spec.get("devices"))


def _request_parts(obj: dict[str, Any], exact_only: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``exactly`` and ``firstAvailable[j]`` of a claim or template, with its path."""
    base, devices = _devices(obj)
    for i, req in enumerate(_l(devices.get("requests"))):
        req = _d(req)
        exact = req.get("exactly")
        if isinstance(exact, dict):
            yield f"{base}.requests[{i}].exactly", exact
        if exact_only:
            continue
        for j, sub in enumerate(_l(req.get("firstAvailable"))):
            if isinstance(sub, dict):
                yield f"{base}.requests[{i}].firstAvailable[{j}]", sub


def _request_field(name: str, exact_only: bool = False) -> Check:
    def check(obj: dict[str, Any]) -> list[str]:
        return [f"{p}.{name}" for p, part in _request_parts(obj, exact_only) if _used(part.get(name))]

    return check


def _claim_consumable(obj: dict[str, Any]) -> list[str]:
    paths = _request_field("capacity")(obj)
    base, devices = _devices(obj)
    for i, constraint in enumerate(_l(devices.get("constraints"))):
        if _used(_d(constraint).get("distinctAttribute")):
            paths.append(f"{base}.constraints[{i}].distinctAttribute")
    return paths


def _first_available(obj: dict[str, Any]) -> list[str]:
    base, devices = _devices(obj)
    return [
        f"{base}.requests[{i}].firstAvailable"
        for i, req in enumerate(_l(devices.get("requests")))
        if _used(_d(req).get("firstAvailable"))
    ]


_INCLUDES = re.compile(r"\bincludes\s*\(")


def _cel_includes(selectors: Any, base: str) -> list[str]:
    return [
        f"{base}.selectors[{k}].cel.expression"
        for k, sel in enumerate(_l(selectors))
        if _INCLUDES.search(str(_d(_d(sel).get("cel")).get("expression") or ""))
    ]


def _claim_list_attrs(obj: dict[str, Any]) -> list[str]:
    paths: list[str] = []
    for p, part in _request_parts(obj):
        paths += _cel_includes(part.get("selectors"), p)
    return paths


def _class_list_attrs(obj: dict[str, Any]) -> list[str]:
    return _cel_includes(_d(obj.get("spec")).get("selectors"), "spec")


# --- ResourceSlice -------------------------------------------------------------------------------


def _slice_devices(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for i, dev in enumerate(_l(_d(obj.get("spec")).get("devices"))):
        if isinstance(dev, dict):
            yield f"spec.devices[{i}]", dev


def _device_fields(*names: str) -> Check:
    def check(obj: dict[str, Any]) -> list[str]:
        return [f"{p}.{n}" for p, dev in _slice_devices(obj) for n in names if _used(dev.get(n))]

    return check


def _slice_partitionable(obj: dict[str, Any]) -> list[str]:
    spec = _d(obj.get("spec"))
    paths = [f"spec.{n}" for n in ("sharedCounters", "perDeviceNodeSelection") if _used(spec.get(n))]
    return paths + _device_fields("consumesCounters", "nodeName", "nodeSelector", "allNodes")(obj)


def _slice_compat_groups(obj: dict[str, Any]) -> list[str]:
    return [
        f"{p}.consumesCounters[{j}].compatibilityGroups"
        for p, dev in _slice_devices(obj)
        for j, use in enumerate(_l(dev.get("consumesCounters")))
        if _used(_d(use).get("compatibilityGroups"))
    ]


def _capacities(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for p, dev in _slice_devices(obj):
        for name, cap in _d(dev.get("capacity")).items():
            yield f"{p}.capacity{_key(name)}", _d(cap)


def _slice_consumable(obj: dict[str, Any]) -> list[str]:
    paths = _device_fields("allowMultipleAllocations")(obj)
    return paths + [f"{p}.requestPolicy" for p, cap in _capacities(obj) if _used(cap.get("requestPolicy"))]


def is_fractional(quantity: Any) -> bool:
    """True for a Quantity whose value is not an integer (``500m``, ``0.5``; not ``1.5Gi``, ``1000m``)."""
    try:
        value = from_json(quantity)
    except ValueError:
        return False  # not a quantity at all: the API server rejects it, nothing gated to report
    return value != value.to_integral_value()


def _slice_fractional(obj: dict[str, Any]) -> list[str]:
    """Fractional ``requestPolicy.default`` and ``validRange.{min,max,step}``: the range arithmetic the gate changes.

    kubernetes/kubernetes pkg/apis/resource/validation ``validateMultiAllocatableDeviceCapacity`` (tests
    ``fractional-range-gate-disabled-*``, master for 1.37): with the gate off the values are kept and checked
    in whole units, a value below 1 counting as 1; the default is checked against min and step too.
    """
    paths = []
    for p, cap in _capacities(obj):
        policy = _d(cap.get("requestPolicy"))
        if is_fractional(policy.get("default")) and policy.get("validRange") is not None:
            paths.append(f"{p}.requestPolicy.default")
        paths += [
            f"{p}.requestPolicy.validRange.{bound}"
            for bound, value in _d(policy.get("validRange")).items()
            if bound in ("min", "max", "step") and is_fractional(value)
        ]
    return paths


def _slice_list_attrs(obj: dict[str, Any]) -> list[str]:
    return [
        f"{p}.attributes{_key(name)}.{form}"
        for p, dev in _slice_devices(obj)
        for name, attr in _d(dev.get("attributes")).items()
        for form in ("bools", "ints", "strings", "versions")
        if _used(_d(attr).get(form))
    ]


# 1.36 spelling kept so a 1.36 policy flags it too; 1.37 renamed it (docs/dra-1.37.md §2.4).
_slice_node_allocatable = _device_fields("nodeAllocatableResources", "nodeAllocatableResourceMappings")
_slice_binding = _device_fields("bindsToNode", "bindingConditions", "bindingFailureConditions")


# --- Pod / Job / scheduling.k8s.io -------------------------------------------------------------


def pod_claims_in_group(obj: dict[str, Any]) -> list[str]:
    """Pod claim entries that may resolve to the PodGroup's shared claim (all of them, offline)."""
    spec = _d(obj.get("spec"))
    if not _used(_d(spec.get("schedulingGroup")).get("podGroupName")):
        return []
    return [f"spec.resourceClaims[{i}]" for i, _ in enumerate(_l(spec.get("resourceClaims")))]


def _pod_dra(obj: dict[str, Any]) -> list[str]:
    spec = _d(obj.get("spec"))
    paths = _at(obj, "spec.resourceClaims")
    for key in ("initContainers", "containers"):
        for i, c in enumerate(_l(spec.get(key))):
            if _used(_d(_d(c).get("resources")).get("claims")):
                paths.append(f"spec.{key}[{i}].resources.claims")
    return paths


def _scheduling_group(obj: dict[str, Any]) -> list[str]:
    """``spec.schedulingGroup`` of every pod template the webhook knows (webhook.objects), the Pod's own too.

    The API server drops it from a Pod (and from the pod template of a built-in workload) with
    GenericWorkload off; a CRD keeps it in its template and the Pods its controller creates lose it.
    """
    return [
        field_path(ref.at("spec", "schedulingGroup"))
        for ref in pod_templates(obj, str(obj.get("kind") or ""))
        if _used(ref.spec(obj).get("schedulingGroup"))
    ]


def _templates(spec: dict[str, Any], base: str) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Workload pod-group templates and composite templates, nested: (path, template, composite?)."""
    for i, t in enumerate(_l(spec.get("podGroupTemplates"))):
        if isinstance(t, dict):
            yield f"{base}.podGroupTemplates[{i}]", t, False
    for i, t in enumerate(_l(spec.get("compositePodGroupTemplates"))):
        if isinstance(t, dict):
            path = f"{base}.compositePodGroupTemplates[{i}]"
            yield path, t, True
            yield from _templates(t, path)


def _workload_field(name: str, composite_too: bool) -> Check:
    def check(obj: dict[str, Any]) -> list[str]:
        return [
            f"{p}.{name}"
            for p, t, composite in _templates(_d(obj.get("spec")), "spec")
            if (composite_too or not composite) and _used(t.get(name))
        ]

    return check


def _spec_field(name: str) -> Check:
    return lambda obj: _at(obj, f"spec.{name}")


# kubernetes/kubernetes v1.36 pkg/registry/scheduling/podgroup/strategy.go dropDisabledDisruptionModeField,
# dropDisabledPriorityClassNameField, dropDisabledPriorityField (PodGroupSpec) and
# pkg/registry/scheduling/workload/strategy.go dropDisabledPodGroupTemplatesFields (each podGroupTemplate):
# with WorkloadAwarePreemption off the API server drops them on CREATE (and on UPDATE unless the old object
# used them). v1.36 staging/src/k8s.io/api/scheduling/v1alpha2 types: "available only when the
# WorkloadAwarePreemption feature gate is enabled".
_PREEMPTION_FIELDS = ("disruptionMode", "priorityClassName", "priority")


def _podgroup_preemption(obj: dict[str, Any]) -> list[str]:
    return [path for name in _PREEMPTION_FIELDS for path in _at(obj, f"spec.{name}")]


def _workload_preemption(obj: dict[str, Any]) -> list[str]:
    return [
        f"spec.podGroupTemplates[{i}].{name}"
        for i, t in enumerate(_l(_d(obj.get("spec")).get("podGroupTemplates")))
        for name in _PREEMPTION_FIELDS
        if _used(_d(t).get(name))
    ]


# --- the table -----------------------------------------------------------------------------------

_ALPHA_OFF = GateStage("alpha", False)
_BETA_ON = GateStage("beta", True)
_BETA_OFF = GateStage("beta", False)
_GA_ON = GateStage("GA", True)
_GA_LOCKED = GateStage("GA", True, locked=True)
_SCHED_1_36 = "scheduling.k8s.io/v1alpha2"  # 1.36's Workload/PodGroup version, removed in 1.37
_SCHED_BETA = "scheduling.k8s.io/v1beta1"
_SCHED_ALPHA = "scheduling.k8s.io/v1alpha3"
_RESOURCE_ALPHA = "resource.k8s.io/v1alpha3"

_CLAIMS = (CLAIM, TEMPLATE)

GATES: tuple[Gate, ...] = (
    Gate(
        "DynamicResourceAllocation",
        _GA_LOCKED,
        _GA_LOCKED,
        ((POD, _pod_dra),),
        "Pod spec.resourceClaims, containers[].resources.claims",
    ),
    Gate(
        "DRAExtendedResource",
        _BETA_ON,
        _GA_LOCKED,
        ((DEVICE_CLASS, _spec_field("extendedResourceName")),),
        "DeviceClass spec.extendedResourceName",
    ),
    Gate(
        "DRADeviceTaints",
        _BETA_ON,
        _GA_ON,
        (
            (CLAIM, _request_field("tolerations")),
            (TEMPLATE, _request_field("tolerations")),
            (SLICE, _device_fields("taints")),
        ),
        "request tolerations (exactly, firstAvailable); slice devices[].taints",
    ),
    Gate(
        "DRADeviceTaintRules",
        GateStage("beta", False, runtime_config="resource.k8s.io/v1beta2"),
        _GA_ON,
        ((TAINT_RULE, _kind_itself),),
        "DeviceTaintRule",
        requires=("DRADeviceTaints",),
    ),
    Gate(
        "DRAResourceClaimDeviceStatus",
        _BETA_ON,
        _GA_LOCKED,
        # Claim status.devices is written through the status subresource, which no webhook here sees (and a
        # CREATE drops status): only the slice binding fields are reachable.
        ((SLICE, _slice_binding),),
        "co-gate of slice binding conditions (claim status.devices: status subresource, not judged)",
    ),
    Gate(
        "DRAWorkloadResourceClaims",
        GateStage("alpha", False, runtime_config=_SCHED_1_36),
        GateStage("beta", False, runtime_config=_SCHED_BETA),
        (
            (POD, pod_claims_in_group),
            (PODGROUP, _spec_field("resourceClaims")),
            (WORKLOAD, _workload_field("resourceClaims", composite_too=False)),
        ),
        "PodGroup spec.resourceClaims, Workload podGroupTemplates[].resourceClaims, "
        "Pod claims shared through a PodGroup",
        requires=("GenericWorkload",),
        semantic_kinds=frozenset({POD}),
    ),
    Gate(
        "GenericWorkload",
        GateStage("alpha", False, runtime_config=_SCHED_1_36),
        GateStage("beta", False, runtime_config=_SCHED_BETA),
        (
            *((k.api_group_kind, _scheduling_group) for k in POD_TEMPLATE_KINDS),
            (PODGROUP, _kind_itself),
            (WORKLOAD, _kind_itself),
        ),
        "Workload, PodGroup; spec.schedulingGroup of Pods and of every pod template",
    ),
    Gate(
        "CompositePodGroup",
        None,
        GateStage("alpha", False, runtime_config=_SCHED_ALPHA),
        (
            (COMPOSITE, _kind_itself),
            (WORKLOAD, _spec_field("compositePodGroupTemplates")),
            (PODGROUP, _spec_field("parentCompositePodGroupName")),
        ),
        "CompositePodGroup; Workload compositePodGroupTemplates; PodGroup parentCompositePodGroupName",
        requires=("GenericWorkload",),
    ),
    Gate(
        "WorkloadWithJob",
        _ALPHA_OFF,
        _ALPHA_OFF,
        ((JOB, _spec_field("scheduling")),),
        "Job spec.scheduling (1.37; absent from the 1.36 API)",
        requires=("GenericWorkload",),
    ),
    Gate(
        "TopologyAwareWorkloadScheduling",
        _ALPHA_OFF,
        _ALPHA_OFF,
        (
            (PODGROUP, _spec_field("schedulingConstraints")),
            (WORKLOAD, _workload_field("schedulingConstraints", composite_too=True)),
            (COMPOSITE, _spec_field("schedulingConstraints")),
        ),
        "schedulingConstraints (PodGroup, Workload templates, CompositePodGroup)",
        requires=("GenericWorkload",),
    ),
    Gate(
        "PodGroupPreemptionPolicy",
        None,
        _ALPHA_OFF,
        (
            (PODGROUP, _spec_field("preemptionPolicy")),
            (WORKLOAD, _workload_field("preemptionPolicy", composite_too=True)),
            (COMPOSITE, _spec_field("preemptionPolicy")),
        ),
        "preemptionPolicy (PodGroup, Workload templates, CompositePodGroup)",
        requires=("GenericWorkload",),
    ),
    Gate(
        # 1.36 only (kube_features.go v1.36: {1.36, false, Alpha}); 1.37 merged it into GenericWorkload.
        "WorkloadAwarePreemption",
        _ALPHA_OFF,
        None,
        ((PODGROUP, _podgroup_preemption), (WORKLOAD, _workload_preemption)),
        "PodGroup disruptionMode, priorityClassName, priority; the same in Workload podGroupTemplates[] (1.36)",
        requires=("GangScheduling",),
    ),
    Gate(
        "DRAAdminAccess",
        _GA_LOCKED,
        _GA_LOCKED,
        (
            (CLAIM, _request_field("adminAccess", exact_only=True)),
            (TEMPLATE, _request_field("adminAccess", exact_only=True)),
        ),
        "exactly.adminAccess",
    ),
    Gate(
        "DRAPrioritizedList",
        _GA_ON,
        _GA_LOCKED,
        ((CLAIM, _first_available), (TEMPLATE, _first_available)),
        "requests[].firstAvailable",
    ),
    Gate(
        "DRAConsumableCapacity",
        _BETA_ON,
        _BETA_ON,
        ((CLAIM, _claim_consumable), (TEMPLATE, _claim_consumable), (SLICE, _slice_consumable)),
        "request capacity, constraints distinctAttribute; slice allowMultipleAllocations, capacity requestPolicy",
    ),
    Gate(
        # kube_features.go (1.37): {1.37, false, Beta} and {1.37, true, Beta, MinCompatibilityVersion: 1.37}:
        # off unless every component runs with --min-compatibility-version=1.37. The field is kept with the
        # gate off; its range arithmetic changes (rules.gates _KEPT), so findings are advisory.
        "DRAFractionalCapacityRange",
        None,
        _BETA_OFF,
        ((SLICE, _slice_fractional),),
        "fractional capacity requestPolicy default and validRange min/max/step",
        requires=("DRAConsumableCapacity",),
    ),
    Gate(
        "DRAPartitionableDevices",
        _BETA_ON,
        _BETA_ON,
        ((SLICE, _slice_partitionable),),
        "slice sharedCounters, perDeviceNodeSelection, devices[].consumesCounters/nodeName/nodeSelector/allNodes",
    ),
    Gate(
        "DRAPartitionableDevicesType",
        None,
        _ALPHA_OFF,
        (
            (SLICE, _spec_field("partitionTypeAttribute")),
            (POOL_STATUS, _spec_field("defaultPartitionTypeAttribute")),
        ),
        "slice partitionTypeAttribute; ResourcePoolStatusRequest defaultPartitionTypeAttribute",
        requires=("DRAPartitionableDevices",),
    ),
    Gate(
        "DRADeviceCompatibilityGroups",
        None,
        _ALPHA_OFF,
        ((SLICE, _slice_compat_groups),),
        "slice consumesCounters[].compatibilityGroups",
        requires=("DRAPartitionableDevices",),
    ),
    Gate(
        "DRADeviceBindingConditions",
        _BETA_ON,
        _BETA_ON,
        ((SLICE, _slice_binding),),
        "slice devices[].bindsToNode, bindingConditions, bindingFailureConditions",
        requires=("DRAResourceClaimDeviceStatus",),
    ),
    Gate(
        "DRAListTypeAttributes",
        _ALPHA_OFF,
        _ALPHA_OFF,
        (
            (SLICE, _slice_list_attrs),
            (CLAIM, _claim_list_attrs),
            (TEMPLATE, _claim_list_attrs),
            (DEVICE_CLASS, _class_list_attrs),
        ),
        "slice attributes bools/ints/strings/versions; CEL includes() in selectors",
    ),
    Gate(
        "DRADerivedAttributes",
        None,
        _ALPHA_OFF,
        ((CLAIM, _request_field("derivedAttributes")), (TEMPLATE, _request_field("derivedAttributes"))),
        "request derivedAttributes (exactly, firstAvailable)",
    ),
    Gate(
        "DRANodeAllocatableResources",
        _ALPHA_OFF,
        _ALPHA_OFF,
        ((SLICE, _slice_node_allocatable),),
        "slice devices[].nodeAllocatableResources",
        components=WITH_KUBELET,
    ),
    Gate(
        "DRAOptionalNodeOperations",
        None,
        _ALPHA_OFF,
        ((SLICE, _spec_field("skipNodeOperations")),),
        "slice skipNodeOperations",
        components=WITH_KUBELET,
    ),
    Gate(
        "DRAResourcePoolStatus",
        GateStage("alpha", False, runtime_config=_RESOURCE_ALPHA),
        GateStage("alpha", False, runtime_config=_RESOURCE_ALPHA),
        ((POOL_STATUS, _kind_itself),),
        "ResourcePoolStatusRequest",
    ),
    # Gates without an API field: listed so a policy may record them without a lint error.
    Gate("DRAResourceClaimGranularStatusAuthorization", _BETA_ON, _BETA_ON, (), "(no API field)"),
    Gate("DRASchedulerFilterTimeout", _BETA_ON, _BETA_ON, (), "(no API field)"),
    Gate("SchedulerPreQueueingHints", None, _ALPHA_OFF, (), "(no API field)"),
    # 1.36 only (kube_features.go v1.36: {1.35, false, Alpha}): kube-scheduler's gang plugin. No API field:
    # the v1.36 scheduling strategies drop nothing for it (schedulingPolicy.gang is GenericWorkload's).
    Gate("GangScheduling", _ALPHA_OFF, None, (), "(no API field: kube-scheduler's gang plugin; 1.36)",
         requires=("GenericWorkload",)),
    # DRAOptionalNodeOperations needs it (gate_deps); the fields it guards are the Node's, not judged here.
    Gate("NodeDeclaredFeatures", _BETA_ON, _GA_LOCKED, (), "(no field the webhook judges)", components=WITH_KUBELET),
)

GATES_BY_NAME: Mapping[str, Gate] = {g.name: g for g in GATES}

# Gates 1.36 has and 1.37 does not: where their fields went (lint and remediation say it).
GONE_IN_1_37: Mapping[str, str] = {
    "WorkloadAwarePreemption": "1.37 merged it into GenericWorkload",
    "GangScheduling": "1.37 does not have it",
}


def gone_in(version: str, gate: str) -> str | None:
    """Why ``gate`` (known in an earlier version) is not in ``version``, or None."""
    row = GATES_BY_NAME.get(gate)
    if row is None or row.stage_in(version) is not None or version == VERSIONS[0]:
        return None
    return GONE_IN_1_37.get(gate)


def known_in(version: str, gate: str) -> bool:
    """Whether ``gate`` exists in Kubernetes ``version`` (enabling one that does not is a lint error)."""
    row = GATES_BY_NAME.get(gate)
    return row is not None and row.stage_in(version) is not None


def effective_gates(version: str, overrides: Mapping[str, bool]) -> dict[str, bool]:
    """Defaults for the Kubernetes version with the policy's overrides; KeyError on an unknown gate.

    A gate the version does not have defaults to off; an override of it is kept (lint reports it).
    """
    if version not in VERSIONS:
        raise ValueError(f"unknown Kubernetes version {version!r}; known: {', '.join(VERSIONS)}")
    gates: dict[str, bool] = {}
    for row in GATES:
        stage = row.stage_in(version)
        gates[row.name] = stage.default if stage is not None else False
    for name, value in overrides.items():
        if name not in gates:
            raise KeyError(name)
        gates[name] = value
    return gates


