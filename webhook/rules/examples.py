"""One object per rule that makes it fire under the bundled policy, and how to fix it (``dra-webhook explain``).

Each example is judged as of ``at`` in ``namespace`` under ``policies/default.yaml`` (cohort pilot-teams,
``ml-*``, is migrated from 2027-02-01, so findings there are denied). ``tests/commands/test_explain.py`` runs every
example through the engine and checks that its rule really fires, so an example cannot silently rot
when a rule or the default policy changes. ``cluster`` is what the cluster view knows, for rules that
need it (the format of a test suite's ``cluster:``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.policy import rule_ids as ids

AT = "2027-02-15"
NAMESPACE = "ml-vision"
IMAGE = "registry.example.com/trainer:1.0"


@dataclass(frozen=True)
class Example:
    rule: str
    object: dict[str, Any]
    fix: str
    namespace: str = NAMESPACE
    at: str = AT
    operation: str = "CREATE"
    cluster: dict[str, Any] | None = None
    old: dict[str, Any] | None = None  # an UPDATE's old object (default: the object itself)
    notes: tuple[str, ...] = field(default=())


def _device_class(name: str, ern: str | None, created: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"creationTimestamp": created} if created else {})}
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}
    if ern:
        spec["extendedResourceName"] = ern
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta, "spec": spec}


def _pod(name: str, limits: dict[str, str], labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {**spec, "containers": [{"name": "trainer", "image": IMAGE, "resources": {"limits": limits}}]},
    }


def _claim(name: str, exactly: dict[str, Any], kind: str = "ResourceClaim", **devices: Any) -> dict[str, Any]:
    body = {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.example.com",
                                                                   **exactly}}], **devices}}
    spec = {"spec": body} if kind == "ResourceClaimTemplate" else body
    return {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


EXAMPLES: dict[str, Example] = {
    e.rule: e
    for e in (
        Example(
            ids.LEGACY_RESOURCE_NAME,
            _pod("train-0", {"vendor.example.com/gpu": "2"}),
            "Request the mapped resource (example.com/gpu) instead of the device plugin's name: the same "
            "hardware, now served through DRA. A team that cannot move yet gets a dated exception in the policy.",
        ),
        Example(
            ids.UNMAPPED_EXTENDED_RESOURCE,
            _pod("mig-0", {"vendor.example.com/mig-1g.10gb": "1"}),
            "The policy retires this name (spec.retiredResourceNames): request a policy resource or use a "
            "ResourceClaim, or ask the platform team for a DeviceClass with spec.extendedResourceName set to it. "
            "Names the policy does not retire (amd.com/gpu, google.com/tpu...) are outside the migration.",
        ),
        Example(
            ids.MAX_DEVICES_PER_POD,
            _pod("big-0", {"example.com/gpu": "9"}),
            "Request at most maxPerPod devices per Pod (a node's worth), or split the work across Pods.",
        ),
        Example(
            ids.MIXED_ALLOCATION,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "mixed-0"},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-gpu"}],
                    "containers": [{"name": "trainer", "image": IMAGE,
                                    "resources": {"limits": {"example.com/gpu": "1"}, "claims": [{"name": "gpu"}]}}],
                },
            },
            "Use one path for the hardware: drop example.com/gpu from the limits and use the claim, or drop the "
            "claim and keep the extended resource.",
            cluster={"resourceClaims": [{
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": "shared-gpu", "namespace": NAMESPACE},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
            }]},
            notes=("fires only when the cluster view can read the claim (here: ResourceClaim shared-gpu on "
                   "DeviceClass gpu.example.com)",),
        ),
        Example(
            ids.DEVICE_CLASS_NOT_ALLOWED,
            _claim("fpga", {"deviceClassName": "fpga.example.com"}),
            "Request one of the DeviceClasses in claims.allowedDeviceClasses, or ask the platform team to allow "
            "the class in the policy.",
        ),
        Example(
            ids.DEVICE_COUNT_EXCEEDS,
            _claim("sixteen", {"allocationMode": "ExactCount", "count": 16}),
            "Request at most claims.maxDevicesPerRequest devices per request, or split the work across claims.",
        ),
        Example(
            ids.ALLOCATION_MODE_ALL,
            _claim("all-gpus", {"allocationMode": "All"}),
            "Use allocationMode: ExactCount with the count you need; node burn-in style jobs get an exception.",
        ),
        Example(
            ids.ADMIN_ACCESS_NAMESPACE,
            _claim("monitor", {"adminAccess": True}),
            "Drop adminAccess, or create the claim in one of claims.adminAccessNamespaces (monitoring and "
            "operations namespaces).",
        ),
        Example(
            ids.TOLERATION_TOO_BROAD,
            _claim("tolerate-all", {"tolerations": [{"operator": "Exists"}]}),
            "Tolerate a specific taint key with effect NoExecute and tolerationSeconds (at most "
            "claims.maxTolerationSeconds). A toleration with no effect lets the allocator place the claim on a "
            "NoExecute-tainted device, and the Pod is then evicted at once: only NoExecute tolerations delay it.",
        ),
        Example(
            ids.NONSTANDARD_NUMA_ATTRIBUTE,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "gpu-numa0.example.com"},
                "spec": {"selectors": [{"cel": {"expression":
                    'device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].numa == 0'}}]},
            },
            'Use device.attributes["resource.kubernetes.io"].numaNode in CEL, and matchAttribute: '
            "resource.kubernetes.io/numaNode in constraints: every DRA driver publishes that name.",
            namespace="",
        ),
        Example(
            ids.DEVICE_CLASS_TAKEOVER,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "mig-1g.gpu.example.com"},
                "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com" && '
                                                'device.attributes["gpu.example.com"].type == "mig"'}}],
                         "extendedResourceName": "example.com/gpu"},
            },
            "Drop spec.extendedResourceName from the new class (Pods can request it as "
            "deviceclass.resource.kubernetes.io/<class>), or give it a name of its own, e.g. example.com/mig-1g: "
            "one extended resource is served by exactly one DeviceClass, the newest.",
            namespace="",
        ),
        Example(
            ids.GATED_FEATURE,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "trainer-0"},
                "spec": {"schedulingGroup": {"podGroupName": "trainers"},
                         "containers": [{"name": "trainer", "image": IMAGE}]},
            },
            "Remove the field, or enable its feature gate on the cluster first and then in the policy's "
            "featureGates; with the gate off the API server drops the field silently.",
        ),
        Example(
            ids.TRAINING_JOB_EXTENDED_RESOURCE,
            _pod("train-0", {"example.com/gpu": "4"}, {"workload.example.com/kind": "training"}),
            "Request the devices through a ResourceClaimTemplate carrying the policy's device tolerations (the "
            "finding's remediation is a ready-to-apply template), so a maintenance taint gives the job time to "
            "checkpoint and is then moved, instead of running on unnoticed on a device under maintenance.",
        ),
        Example(
            ids.INJECT_DEVICE_TOLERATIONS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "resnet-gpus"},
                "spec": {"metadata": {"labels": {"workload.example.com/kind": "training"}},
                         "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                             "deviceClassName": "gpu.example.com", "count": 8}}]}}},
            },
            "Nothing to fix: the webhook adds the policy's trainingJobs.deviceTolerations. To choose your own, "
            "set a toleration with the same key and effect; yours is kept.",
        ),
        Example(
            ids.STEER_NODE_POOL,
            _pod("infer-0", {"example.com/gpu": "1"}),
            "Nothing to fix: the webhook adds the node affinity of the stage's pool. If it reports a conflict, "
            "remove your own nodeSelector or affinity that rules that pool out.",
        ),
        Example(
            ids.TRACK_ROLLOUT,
            _pod("infer-1", {"example.com/gpu": "1"}),
            "Nothing to fix: the annotations record the allocation path, stage, cohort and policy for "
            "`dra-webhook report`.",
        ),
        Example(
            ids.DEVICE_PLUGIN_NIC_BESIDE_DRA,
            _pod("nccl-0", {"example.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}),
            "Move the NIC to DRA too (a claim with a GPU and a NIC request and a matchAttribute constraint on "
            "resource.kubernetes.io/pcieRoot), or keep the job on the device-plugin pool until the NIC moves: the "
            "kubelet's Topology Manager does not align DRA devices with device-plugin ones.",
        ),
        Example(
            ids.DEVICE_PLUGIN_SLICE,
            _pod("mig-1", {"example.com/gpu": "1"}, nodeSelector={"gpu.example.com/mig-profile": "1g.10gb"}),
            "Nothing breaks: the Pod stays where the device plugin serves the name as a MIG slice. To move it, "
            "request the slice by claim on the MIG DeviceClass the finding names and drop the node pin.",
        ),
        Example(
            ids.TAINT_RULE_WITHOUT_SELECTOR,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "node-a-firmware"},
                "spec": {"taint": {"key": "example.com/maintenance", "value": "firmware", "effect": "NoExecute"}},
            },
            "Name the devices under maintenance: deviceSelector: {driver: gpu.example.com, pool: node-a}. On "
            "Kubernetes 1.36 and 1.37.0 kube-scheduler applies a rule without a selector to every device "
            "(kubernetes#141620); deviceSelector: {} selects every device on purpose.",
            namespace="",
        ),
        Example(
            ids.DEVICE_CLASS_MAPPING_REMOVED,
            _device_class("mig-1g.gpu.example.com", None),
            "Restart kube-scheduler after the change (on 1.36 and 1.37.0 it serves the name with no class until "
            "then, kubernetes#141103), or change the class while kube-scheduler can be restarted at once; "
            "1.38.0 picks the remaining class itself.",
            namespace="",
            operation="UPDATE",
            old=_device_class("mig-1g.gpu.example.com", "example.com/gpu"),
            cluster={"deviceClasses": [_device_class("gpu.example.com", "example.com/gpu", "2026-01-01T00:00:00Z"),
                                       _device_class("mig-1g.gpu.example.com", "example.com/gpu",
                                                     "2026-06-01T00:00:00Z")]},
        ),
        Example(
            ids.SHARED_CLAIM_LIMIT,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "embed"},
                "spec": {
                    "replicas": 300,
                    "selector": {"matchLabels": {"app": "embed"}},
                    "template": {
                        "metadata": {"labels": {"app": "embed"}},
                        "spec": {
                            "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-gpus"}],
                            "containers": [{"name": "embed", "image": IMAGE,
                                            "resources": {"claims": [{"name": "gpu"}]}}],
                        },
                    },
                },
            },
            "Replace resourceClaimName with resourceClaimTemplateName (a claim per Pod), or keep at most 256 Pods "
            "on the shared claim.",
        ),
        Example(
            ids.UNSATISFIABLE_CLAIM,
            _claim("h100", {"count": 2, "selectors": [
                {"cel": {"expression": "device.attributes['gpu.example.com'].model == 'H100'"}},
                {"cel": {"expression": "device.capacity['gpu.example.com'].memory.compareTo(quantity('80Gi')) >= 0"}},
            ]}),
            "Ask for what the cluster has: `kubectl get resourceslices -o yaml` lists every device's attributes and "
            "capacity. Here the only GPUs are A100s with 40Gi; drop the model selector or lower the memory.",
            cluster={
                "deviceClasses": [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                   "metadata": {"name": "gpu.example.com"},
                                   "spec": {"selectors": [{"cel": {
                                       "expression": "device.driver == 'gpu.example.com'"}}],
                                            "extendedResourceName": "example.com/gpu"}}],
                "resourceSlices": [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                                    "metadata": {"name": "node-1-gpu"},
                                    "spec": {"driver": "gpu.example.com", "nodeName": "node-1",
                                             "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
                                             "devices": [{"name": f"gpu-{i}",
                                                          "attributes": {"model": {"string": "A100"}},
                                                          "capacity": {"memory": {"value": "40Gi"}}}
                                                         for i in range(8)]}}],
            },
        ),
    )
}


def example_for(rule: str) -> Example:
    return EXAMPLES[rule]
