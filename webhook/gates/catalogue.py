"""The feature-gate catalogue: which gates each Kubernetes version has and which fields they guard.

It imports only the raw-object helpers and the field checks (``webhook.gates.fields``), so the policy
compiler, loader and linter resolve gate defaults without reaching into the ``gated-feature`` rule
(``webhook.rules.gates``).

The API server silently drops a field whose feature gate is off (or rejects it, e.g.
``partitionTypeAttribute``) *before* validating webhooks run, and answers 201 without a warning
(docs/dra-1.37.md §11). One table, ``GATES``, one row per gate: stage/default per Kubernetes version, and per
kind ("group/Kind", core kinds bare) a check ``(obj) -> [JSON path, ...]`` of the guarded fields the
object uses; the checks live in ``webhook.gates.fields``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.gates.fields import (
    Check,
    claim_consumable,
    claim_list_attrs,
    class_list_attrs,
    device_fields,
    first_available,
    kind_itself,
    kind_key,
    pod_claims_in_group,
    pod_dra,
    podgroup_preemption,
    request_field,
    scheduling_group,
    slice_binding,
    slice_compat_groups,
    slice_consumable,
    slice_fractional,
    slice_list_attrs,
    slice_node_allocatable,
    slice_partitionable,
    spec_field,
    workload_field,
    workload_preemption,
)
from webhook.objects.pods import KINDS as POD_TEMPLATE_KINDS

VERSIONS: tuple[str, ...] = ("1.36", "1.37", "1.38")
#: Versions whose rows are read from pre-releases (``gates`` marks them): 1.38 from kubernetes/kubernetes
#: CHANGELOG/CHANGELOG-1.38.md (v1.38.0-alpha.1, commit 0411cc70) on top of the newest stored kube_features.go
#: (staging/src/k8s.io/kube-scheduler/pkg/features/kube_features.go @ead35706, which has no 1.38 entry yet).
#: Drop a version from here once its .0 changelog has been read.
PROVISIONAL: frozenset[str] = frozenset({"1.38"})

_CONTROL_PLANE = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")
WITH_KUBELET = (*_CONTROL_PLANE, "kubelet")

POD = "Pod"
JOB = "batch/Job"
CRONJOB = "batch/CronJob"
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
class Change:
    """How a version after 1.37 changes a gate: its new stage (None: removed), and the upstream source."""

    stage: GateStage | None
    source: str
    # A removed gate whose fields stay served (it graduated): the value its fields have from then on.
    removed_on: bool = False


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
        if version not in VERSIONS:
            raise ValueError(f"unknown Kubernetes version {version!r}; known: {', '.join(VERSIONS)}")
        stage = self.v1_37
        for later in VERSIONS[2 : VERSIONS.index(version) + 1]:  # 1.38 on: the changes row by row
            changes = LATER_CHANGES.get(later, {})
            if self.name in changes:
                stage = changes[self.name].stage
        return stage

    def change_in(self, version: str) -> Change | None:
        """The change ``version`` makes to this gate (1.38 on), or None when it keeps the earlier row."""
        return LATER_CHANGES.get(version, {}).get(self.name)

    def predicate(self, obj: dict[str, Any]) -> list[str]:
        """JSON paths of this gate's fields that ``obj`` uses (kind taken from the object itself)."""
        check = self._by_kind.get(kind_key(obj))
        return check(obj) if check is not None else []


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
        ((POD, pod_dra),),
        "Pod spec.resourceClaims, containers[].resources.claims",
    ),
    Gate(
        "DRAExtendedResource",
        _BETA_ON,
        _GA_LOCKED,
        ((DEVICE_CLASS, spec_field("extendedResourceName")),),
        "DeviceClass spec.extendedResourceName",
    ),
    Gate(
        "DRADeviceTaints",
        _BETA_ON,
        _GA_ON,
        (
            (CLAIM, request_field("tolerations")),
            (TEMPLATE, request_field("tolerations")),
            (SLICE, device_fields("taints")),
        ),
        "request tolerations (exactly, firstAvailable); slice devices[].taints",
    ),
    Gate(
        "DRADeviceTaintRules",
        GateStage("beta", False, runtime_config="resource.k8s.io/v1beta2"),
        _GA_ON,
        ((TAINT_RULE, kind_itself),),
        "DeviceTaintRule",
        requires=("DRADeviceTaints",),
    ),
    Gate(
        "DRAResourceClaimDeviceStatus",
        _BETA_ON,
        _GA_LOCKED,
        # Claim status.devices is written through the status subresource, which no webhook here sees (and a
        # CREATE drops status): only the slice binding fields are reachable.
        ((SLICE, slice_binding),),
        "co-gate of slice binding conditions (claim status.devices: status subresource, not judged)",
    ),
    Gate(
        "DRAWorkloadResourceClaims",
        GateStage("alpha", False, runtime_config=_SCHED_1_36),
        GateStage("beta", False, runtime_config=_SCHED_BETA),
        (
            (POD, pod_claims_in_group),
            (PODGROUP, spec_field("resourceClaims")),
            (WORKLOAD, workload_field("resourceClaims", composite_too=False)),
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
            *((k.api_group_kind, scheduling_group) for k in POD_TEMPLATE_KINDS),
            (PODGROUP, kind_itself),
            (WORKLOAD, kind_itself),
        ),
        "Workload, PodGroup; spec.schedulingGroup of Pods and of every pod template",
    ),
    Gate(
        "CompositePodGroup",
        None,
        GateStage("alpha", False, runtime_config=_SCHED_ALPHA),
        (
            (COMPOSITE, kind_itself),
            (WORKLOAD, spec_field("compositePodGroupTemplates")),
            (PODGROUP, spec_field("parentCompositePodGroupName")),
        ),
        "CompositePodGroup; Workload compositePodGroupTemplates; PodGroup parentCompositePodGroupName",
        requires=("GenericWorkload",),
    ),
    Gate(
        "WorkloadWithJob",
        _ALPHA_OFF,
        _ALPHA_OFF,
        # The Job strategy's DropDisabledFields (kubernetes/kubernetes 1.37 pkg/api/job, "shared by the Job
        # and CronJob registry strategies") drops JobSpec.scheduling, so a CronJob's jobTemplate loses it too.
        ((JOB, spec_field("scheduling")), (CRONJOB, spec_field("jobTemplate.spec.scheduling"))),
        "Job spec.scheduling and CronJob spec.jobTemplate.spec.scheduling (1.37; absent from the 1.36 API)",
        requires=("GenericWorkload",),
    ),
    Gate(
        "TopologyAwareWorkloadScheduling",
        _ALPHA_OFF,
        _ALPHA_OFF,
        (
            (PODGROUP, spec_field("schedulingConstraints")),
            (WORKLOAD, workload_field("schedulingConstraints", composite_too=True)),
            (COMPOSITE, spec_field("schedulingConstraints")),
        ),
        "schedulingConstraints (PodGroup, Workload templates, CompositePodGroup)",
        requires=("GenericWorkload",),
    ),
    Gate(
        "PodGroupPreemptionPolicy",
        None,
        _ALPHA_OFF,
        (
            (PODGROUP, spec_field("preemptionPolicy")),
            (WORKLOAD, workload_field("preemptionPolicy", composite_too=True)),
            (COMPOSITE, spec_field("preemptionPolicy")),
        ),
        "preemptionPolicy (PodGroup, Workload templates, CompositePodGroup)",
        requires=("GenericWorkload",),
    ),
    Gate(
        # 1.36 only (kube_features.go v1.36: {1.36, false, Alpha}); 1.37 merged it into GenericWorkload.
        "WorkloadAwarePreemption",
        _ALPHA_OFF,
        None,
        ((PODGROUP, podgroup_preemption), (WORKLOAD, workload_preemption)),
        "PodGroup disruptionMode, priorityClassName, priority; the same in Workload podGroupTemplates[] (1.36)",
        requires=("GangScheduling",),
    ),
    Gate(
        "DRAAdminAccess",
        _GA_LOCKED,
        _GA_LOCKED,
        (
            (CLAIM, request_field("adminAccess", exact_only=True)),
            (TEMPLATE, request_field("adminAccess", exact_only=True)),
        ),
        "exactly.adminAccess",
    ),
    Gate(
        "DRAPrioritizedList",
        _GA_ON,
        _GA_LOCKED,
        ((CLAIM, first_available), (TEMPLATE, first_available)),
        "requests[].firstAvailable",
    ),
    Gate(
        "DRAConsumableCapacity",
        _BETA_ON,
        _BETA_ON,
        ((CLAIM, claim_consumable), (TEMPLATE, claim_consumable), (SLICE, slice_consumable)),
        "request capacity, constraints distinctAttribute; slice allowMultipleAllocations, capacity requestPolicy",
    ),
    Gate(
        # kube_features.go (1.37): {1.37, false, Beta} and {1.37, true, Beta, MinCompatibilityVersion: 1.37}:
        # off unless every component runs with --min-compatibility-version=1.37. The field is kept with the
        # gate off; its range arithmetic changes (rules.gates _KEPT), so findings are advisory.
        "DRAFractionalCapacityRange",
        None,
        _BETA_OFF,
        ((SLICE, slice_fractional),),
        "fractional capacity requestPolicy default and validRange min/max/step",
        requires=("DRAConsumableCapacity",),
    ),
    Gate(
        "DRAPartitionableDevices",
        _BETA_ON,
        _BETA_ON,
        ((SLICE, slice_partitionable),),
        "slice sharedCounters, perDeviceNodeSelection, devices[].consumesCounters/nodeName/nodeSelector/allNodes",
    ),
    Gate(
        "DRAPartitionableDevicesType",
        None,
        _ALPHA_OFF,
        (
            (SLICE, spec_field("partitionTypeAttribute")),
            (POOL_STATUS, spec_field("defaultPartitionTypeAttribute")),
        ),
        "slice partitionTypeAttribute; ResourcePoolStatusRequest defaultPartitionTypeAttribute",
        requires=("DRAPartitionableDevices",),
    ),
    Gate(
        "DRADeviceCompatibilityGroups",
        None,
        _ALPHA_OFF,
        ((SLICE, slice_compat_groups),),
        "slice consumesCounters[].compatibilityGroups",
        requires=("DRAPartitionableDevices",),
    ),
    Gate(
        "DRADeviceBindingConditions",
        _BETA_ON,
        _BETA_ON,
        ((SLICE, slice_binding),),
        "slice devices[].bindsToNode, bindingConditions, bindingFailureConditions",
        requires=("DRAResourceClaimDeviceStatus",),
    ),
    Gate(
        "DRAListTypeAttributes",
        _ALPHA_OFF,
        _ALPHA_OFF,
        (
            (SLICE, slice_list_attrs),
            (CLAIM, claim_list_attrs),
            (TEMPLATE, claim_list_attrs),
            (DEVICE_CLASS, class_list_attrs),
        ),
        "slice attributes bools/ints/strings/versions; CEL includes() in selectors",
    ),
    Gate(
        "DRADerivedAttributes",
        None,
        _ALPHA_OFF,
        ((CLAIM, request_field("derivedAttributes")), (TEMPLATE, request_field("derivedAttributes"))),
        "request derivedAttributes (exactly, firstAvailable)",
    ),
    Gate(
        "DRANodeAllocatableResources",
        _ALPHA_OFF,
        _ALPHA_OFF,
        ((SLICE, slice_node_allocatable),),
        "slice devices[].nodeAllocatableResources",
        components=WITH_KUBELET,
    ),
    Gate(
        "DRAOptionalNodeOperations",
        None,
        _ALPHA_OFF,
        ((SLICE, spec_field("skipNodeOperations")),),
        "slice skipNodeOperations",
        components=WITH_KUBELET,
    ),
    Gate(
        "DRAResourcePoolStatus",
        GateStage("alpha", False, runtime_config=_RESOURCE_ALPHA),
        GateStage("alpha", False, runtime_config=_RESOURCE_ALPHA),
        ((POOL_STATUS, kind_itself),),
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

# What each version after 1.37 changes, gate by gate (a version not listed keeps the rows before it). Read in
# kubernetes/kubernetes CHANGELOG/CHANGELOG-1.38.md, v1.38.0-alpha.1 (commit 0411cc70): provisional (PROVISIONAL).
_CL_1_38 = "CHANGELOG-1.38.md v1.38.0-alpha.1"
LATER_CHANGES: Mapping[str, Mapping[str, Change]] = {
    "1.38": {
        # "The DynamicResourceAllocation feature gate, which has been locked to default on since v1.35, has been
        # removed. Dynamic resource allocation is now unconditionally enabled."
        "DynamicResourceAllocation": Change(None, f"kubernetes/kubernetes#141946 ({_CL_1_38})", removed_on=True),
        # "DRADeviceTaints and DRADeviceTaintRules feature gates are now locked to true (GA) in 1.38."
        "DRADeviceTaints": Change(_GA_LOCKED, f"kubernetes/kubernetes#140256 ({_CL_1_38})"),
        "DRADeviceTaintRules": Change(_GA_LOCKED, f"kubernetes/kubernetes#140256 ({_CL_1_38})"),
    },
}


def gone_in(version: str, gate: str) -> str | None:
    """Why ``gate`` (known in an earlier version) is not in ``version``, or None (known there, or not yet added)."""
    row = GATES_BY_NAME.get(gate)
    if row is None or row.stage_in(version) is not None or version == VERSIONS[0]:
        return None
    for later in reversed(VERSIONS[2 : VERSIONS.index(version) + 1]):
        change = LATER_CHANGES.get(later, {}).get(gate)
        if change is not None and change.stage is None:
            kept = ": its fields are always served" if change.removed_on else ""
            return f"{later} removed it{kept}, {change.source}"
    return GONE_IN_1_37.get(gate)


def removed_on(version: str, gate: str) -> bool:
    """Whether ``gate`` is gone from ``version`` because it graduated: its fields are always served there."""
    if gone_in(version, gate) is None:
        return False
    return any((c := LATER_CHANGES.get(v, {}).get(gate)) is not None and c.removed_on
               for v in VERSIONS[2 : VERSIONS.index(version) + 1])


def fixed_value(version: str, gate: str) -> bool | None:
    """The value ``gate`` always has in ``version`` (locked, or removed because it graduated), else None.

    Neither a policy nor a cluster reading can change it: ``featureGates: auto`` leaves such a gate out."""
    stage = GATES_BY_NAME[gate].stage_in(version)
    if stage is not None:
        return stage.default if stage.locked else None
    return True if removed_on(version, gate) else None


def known_in(version: str, gate: str) -> bool:
    """Whether ``gate`` exists in Kubernetes ``version`` (enabling one that does not is a lint error)."""
    row = GATES_BY_NAME.get(gate)
    return row is not None and row.stage_in(version) is not None


def gate_setting_error(version: str, gate: str, value: bool) -> str | None:
    """Why no cluster of ``version`` runs with ``--feature-gates=gate=value`` as the policy says, or None.

    component-base ``featuregate`` (``(*featureGate).unsafeSetFromMap``, called by ``SetFromMap``) refuses a
    locked gate set to the other value ("cannot set feature gate %v to %v, feature is locked to %v"): the
    component exits at start. A gate the binary does not know is "unrecognized feature gate": the v1.36.2
    components log it as a warning and start with the setting ignored. tests/e2e/test_locked_gates.py shows
    both on v1.36.2. Either way the policy describes gate values no cluster of ``version`` has, so the loader
    refuses it. ``gate`` must be in the catalogue.
    """
    row = GATES_BY_NAME[gate]
    stage = row.stage_in(version)
    if stage is None:
        gone = gone_in(version, gate)
        why = f" ({gone})" if gone else f" (it is not added before {_first_version(row)})"
        return (f"feature gate {gate} does not exist in Kubernetes {version}{why}: its components do not know "
                "it (\"unrecognized feature gate\") and ignore the setting, so no cluster of that version has it "
                f"{'on' if value else 'off'}; remove it from spec.featureGates")
    if stage.locked and value != stage.default:
        on = "true" if stage.default else "false"
        return (f"feature gate {gate} is locked to {on} in Kubernetes {version} ({stage.describe()}): a component "
                f"started with {gate}={'true' if value else 'false'} does not start (\"cannot set feature gate "
                f"{gate} to {'true' if value else 'false'}, feature is locked to {on}\"); remove it or set it "
                f"to {on}")
    return None


def _first_version(row: Gate) -> str:
    return next((v for v in VERSIONS if row.stage_in(v) is not None), "a later release")


def effective_gates(version: str, overrides: Mapping[str, bool]) -> dict[str, bool]:
    """Defaults for the Kubernetes version with the policy's overrides; KeyError on an unknown gate.

    A gate the version does not have defaults to off, unless it was removed because it graduated (its fields
    are always served). A locked gate keeps its locked value whatever ``overrides`` say: no cluster runs
    otherwise (``gate_setting_error``; the loader refuses such a policy).
    """
    if version not in VERSIONS:
        raise ValueError(f"unknown Kubernetes version {version!r}; known: {', '.join(VERSIONS)}")
    gates: dict[str, bool] = {}
    for row in GATES:
        stage = row.stage_in(version)
        gates[row.name] = stage.default if stage is not None else removed_on(version, row.name)
    for name, value in overrides.items():
        if name not in gates:
            raise KeyError(name)
        if fixed_value(version, name) is None:
            gates[name] = value
    return gates


# --- Dependencies between gates
#
# Feature-gate dependencies: a gate works only when the gates it depends on are on too.
#
# Kubernetes enables a gate only when the gates it depends on are enabled too (``featuregate``
# ``AddDependencies``), so a policy that says otherwise describes a cluster that cannot exist, and a
# remediation that names one gate but not what it needs sends people round in circles.
#
# Copied from kubernetes/kubernetes ``pkg/features/kube_features.go``, ``defaultKubernetesFeatureGateDependencies``,
# newest copy readable (master during 1.36, with ``GangScheduling: {GenericWorkload}``): the DRA and
# workload rows, for the gates this catalogue knows. The 1.37 additions are not in
# that copy; they come from the 1.37 audit of issue 13 and the gates' own doc comments in the 1.37 feature
# list ("DRAResourceClaimDeviceStatus also needs to be enabled", "DRAPartitionableDevices also needs to be
# enabled"), and are marked ``1.37`` below.

DEPENDENCIES: Mapping[str, tuple[str, ...]] = {
    # kube_features.go (master, 1.36 cycle)
    "DRAAdminAccess": ("DynamicResourceAllocation",),
    "DRAConsumableCapacity": ("DynamicResourceAllocation",),
    "DRADeviceBindingConditions": ("DynamicResourceAllocation", "DRAResourceClaimDeviceStatus"),
    "DRADeviceTaintRules": ("DRADeviceTaints",),  # DynamicResourceAllocation is indirect
    "DRADeviceTaints": ("DynamicResourceAllocation",),
    "DRAExtendedResource": ("DynamicResourceAllocation",),
    "DRAPartitionableDevices": ("DynamicResourceAllocation",),
    "DRAPrioritizedList": ("DynamicResourceAllocation",),
    "DRAResourceClaimDeviceStatus": (),  # soft dependency on DynamicResourceAllocation upstream
    "DRASchedulerFilterTimeout": ("DynamicResourceAllocation",),
    "DynamicResourceAllocation": (),
    "GangScheduling": ("GenericWorkload",),  # 1.36 only
    "GenericWorkload": (),
    "NodeDeclaredFeatures": (),
    # 1.37 (issue 13 audit; the gates' doc comments in the 1.37 feature list)
    "CompositePodGroup": ("GenericWorkload", "TopologyAwareWorkloadScheduling"),
    "DRADeviceCompatibilityGroups": ("DRAPartitionableDevices",),
    "DRAFractionalCapacityRange": ("DRAConsumableCapacity",),
    "DRAOptionalNodeOperations": ("NodeDeclaredFeatures",),
    "DRAPartitionableDevicesType": ("DRAPartitionableDevices", "DRAResourcePoolStatus"),
    "DRAResourceClaimGranularStatusAuthorization": ("DRAResourceClaimDeviceStatus",),
    "DRAWorkloadResourceClaims": ("GenericWorkload",),
    "PodGroupPreemptionPolicy": ("GenericWorkload",),
    "TopologyAwareWorkloadScheduling": ("GenericWorkload",),
    "WorkloadWithJob": ("GenericWorkload",),
    # 1.36 only, not in the copy above: every upstream test of it (test/integration/scheduler/preemption
    # TestPodGroupPreemption, pkg/registry/scheduling/workload strategy tests) switches GangScheduling and
    # GenericWorkload on with it.
    "WorkloadAwarePreemption": ("GangScheduling", "GenericWorkload"),
}


def needs(gate: str) -> tuple[str, ...]:
    """Every gate ``gate`` needs, directly or through another, dependencies first (no duplicates)."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        for dep in DEPENDENCIES.get(name, ()):
            if dep in path or dep in order:
                continue
            visit(dep, (*path, dep))
            order.append(dep)

    visit(gate, (gate,))
    return tuple(order)
