"""Feature-gate catalogue and the ``gated-feature`` rule (design.md §4, dra-1.37.md §4).

The API server silently drops a field whose feature gate is off (or rejects it, e.g.
``partitionTypeAttribute``) *before* validating webhooks run, and answers 201 without a warning
(dra-1.37.md §11). A workload that depends on a beta/alpha field therefore breaks quietly on every
cluster that does not have the gate. The policy's ``kubernetesVersion`` + ``featureGates`` say what the
fleet has on; this rule names each guarded field an object uses while its gate is off there.

One table, ``GATES``, one row per gate: stage/default per Kubernetes version, and per kind
("group/Kind", core kinds bare) a check ``(obj) -> [JSON path, ...]`` of the guarded fields the object
uses. Checks are written against the 1.37 wire shapes (resource.k8s.io/v1 ``exactly``/``firstAvailable``,
scheduling.k8s.io v1beta1/v1alpha3). A field counts as used when it is present and not null, false or
empty: that is also when the API server's drop logic would change anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from webhook.objects import KINDS as POD_TEMPLATE_KINDS
from webhook.objects import field_path, pod_templates
from webhook.rules.base import NO_OUTCOME, Context, Finding, Outcome, rule
from webhook.rules.gate_state import gates_in_force
from webhook.rules.ids import GATED_FEATURE

VERSIONS: tuple[str, ...] = ("1.36", "1.37")

Check = Callable[[dict[str, Any]], list[str]]

# Path shown (and put in Finding.paths) when the kind itself is gated rather than a field.
KIND_PATH = "kind"

_CONTROL_PLANE = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
_WITH_KUBELET = (*_CONTROL_PLANE, "kubelet")

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
    v1_37: GateStage
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
        check = self._by_kind.get(_kind_key(obj))
        return check(obj) if check is not None else []


# --- helpers over raw dicts (never trust shapes: offline input may be anything) --------------------


def _d(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _l(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _used(value: Any) -> bool:
    return value is not None and value is not False and value != [] and value != {} and value != ""


def _key(name: str) -> str:
    """Map keys (attribute/capacity names contain dots and slashes) in bracket form."""
    return f'["{name}"]'


def _kind_key(obj: dict[str, Any]) -> str:
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


_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei)|([numkMGTPE]?)|[eE]([+-]?\d+))$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def is_fractional(quantity: Any) -> bool:
    """True for a Quantity whose value is not an integer (``500m``, ``0.5``; not ``1.5Gi``, ``1000m``)."""
    if isinstance(quantity, bool):
        return False
    if isinstance(quantity, int):
        return False
    if isinstance(quantity, float):
        return not quantity.is_integer()
    m = _QUANTITY.match(str(quantity).strip())
    if not m:
        return False  # not a quantity at all: the API server rejects it, nothing gated to report
    try:
        value = Decimal(m.group(1))
    except InvalidOperation:
        return False
    if m.group(2):
        value *= _BINARY[m.group(2)]
    elif m.group(4) is not None:
        value = value.scaleb(int(m.group(4)))
    else:
        value = value.scaleb(_DECIMAL[m.group(3)])
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


# 1.36 spelling kept so a 1.36 policy flags it too; 1.37 renamed it (dra-1.37.md §2.4).
_slice_node_allocatable = _device_fields("nodeAllocatableResources", "nodeAllocatableResourceMappings")
_slice_binding = _device_fields("bindsToNode", "bindingConditions", "bindingFailureConditions")


# --- Pod / Job / scheduling.k8s.io -------------------------------------------------------------


def _pod_claims_in_group(obj: dict[str, Any]) -> list[str]:
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
            (POD, _pod_claims_in_group),
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
        # gate off; its range arithmetic changes (_slice_fractional), so findings are advisory.
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
        components=_WITH_KUBELET,
    ),
    Gate(
        "DRAOptionalNodeOperations",
        None,
        _ALPHA_OFF,
        ((SLICE, _spec_field("skipNodeOperations")),),
        "slice skipNodeOperations",
        components=_WITH_KUBELET,
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
    # DRAOptionalNodeOperations needs it (gate_deps); the fields it guards are the Node's, not judged here.
    Gate("NodeDeclaredFeatures", _BETA_ON, _GA_LOCKED, (), "(no field the webhook judges)", components=_WITH_KUBELET),
)

GATES_BY_NAME: Mapping[str, Gate] = {g.name: g for g in GATES}

# What the API server does with a guarded field while its gate is off, where it is not a silent drop.
_OFF_EFFECT: Mapping[str, str] = {
    # k8s.io/api resource/v1: +k8s:ifDisabled(DRAPartitionableDevicesType)=+k8s:forbidden (dra-1.37.md §4).
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
# is not in the 1.36 API (the 1.36 OpenAPI of kubernetes-validate rejects it); the API server drops it there
# as an unknown field whatever WorkloadWithJob says.
_FIELD_SINCE: Mapping[tuple[str, str], str] = {("WorkloadWithJob", JOB): "1.37"}


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
             f"{', '.join(c for c in _WITH_KUBELET if c in components)}")
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
    """The catalogue gates ``gate`` needs (transitively, webhook.rules.gate_deps) that exist in ``version`` and
    can be switched: locked gates are always on."""
    from webhook.rules.gate_deps import needs

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
    for gate, check in rows:
        if ctx.kind in gate.semantic_kinds:
            continue
        paths = check(obj)
        # The API server keeps gated fields an object already uses (its "in use by old" check), so
        # only a first use is worth reporting.
        if not paths or (old is not None and check(old)):
            continue
        since = _FIELD_SINCE.get((gate.name, _kind_key(obj)))
        if since is not None and version < since:
            findings.append(_absent_in(gate, paths, version, since))
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
                remediation(gate, version, kind_level=paths == [KIND_PATH]),
                tuple(paths),
                advisory=gate.name in _KEPT,
            )
        )
    if ctx.kind == "Pod" and ctx.group == "":
        findings += _podgroup_findings(obj, ctx)
    return Outcome(findings=findings) if findings else NO_OUTCOME


def _absent_in(gate: Gate, paths: list[str], version: str, since: str) -> Finding:
    """A field the version's API does not have at all: dropped as an unknown field, whatever the gate says."""
    shown = ", ".join(paths)
    return Finding(
        GATED_FEATURE,
        f"{'field' if len(paths) == 1 else 'fields'} {shown} {'does' if len(paths) == 1 else 'do'} not exist in "
        f"Kubernetes {version} (added in {since} behind feature gate {gate.name}): the API server drops "
        f"{'it' if len(paths) == 1 else 'them'} as unknown",
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
    entries = _pod_claims_in_group(pod)
    if not group_name or not entries:
        return []
    namespace = ctx.namespace or _d(pod.get("metadata")).get("namespace") or ""
    lookup = getattr(ctx.view, "get_podgroup", None)
    podgroup = lookup(namespace, group_name) if callable(lookup) else None
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
