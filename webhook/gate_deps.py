"""Feature-gate dependencies: a gate works only when the gates it depends on are on too.

Kubernetes enables a gate only when the gates it depends on are enabled too (``featuregate``
``AddDependencies``), so a policy that says otherwise describes a cluster that cannot exist, and a
remediation that names one gate but not what it needs sends people round in circles.

Copied from kubernetes/kubernetes ``pkg/features/kube_features.go``, ``defaultKubernetesFeatureGateDependencies``,
newest copy readable (master during 1.36, with ``GangScheduling: {GenericWorkload}``): the DRA and
workload rows, for the gates the catalogue (``webhook.gate_catalogue``) knows. The 1.37 additions are not in
that copy; they come from the 1.37 audit of issue 13 and the gates' own doc comments in the 1.37 feature
list ("DRAResourceClaimDeviceStatus also needs to be enabled", "DRAPartitionableDevices also needs to be
enabled"), and are marked ``1.37`` below. Leaf module: no imports from the rules.
"""

from __future__ import annotations

from collections.abc import Mapping

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
