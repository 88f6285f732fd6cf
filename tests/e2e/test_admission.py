"""What the API server does with the webhook's answers: denials, warnings and patches, as stored.

Stored means validated: the API server ran its own validation (and defaulting) on the patched object,
so a patch the API rejects would fail these tests with the API server's message.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import policy_variant
from tests.e2e.objects import GPU_NODE, claim, claim_template, pod
from tests.e2e.waits import eventually

DRA_POOL = {"key": "gpu.example.com/allocation", "operator": "In", "values": ["dra"]}
DP_POOL = {"key": "gpu.example.com/allocation", "operator": "In", "values": ["device-plugin"]}
TRAINING = {"workload.example.com/kind": "training"}
POLICY_TOLERATION = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute",
                     "tolerationSeconds": 3600}


def _required_terms(stored: dict) -> list[dict]:
    affinity = stored["spec"].get("affinity") or {}
    required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return [e for term in required.get("nodeSelectorTerms", []) for e in term.get("matchExpressions", [])]


def test_warning_reaches_the_client_and_the_pod_is_stored(kube, namespace):
    ns = namespace("pilot")
    created = kube.create(pod("legacy", ns, resource="vendor.example.com/gpu"))
    assert created.warnings == [
        'legacy-resource-name (pilot): container "trainer" requests legacy device-plugin resource '
        "vendor.example.com/gpu; fix: request example.com/gpu instead of vendor.example.com/gpu (same hardware, "
        "served by DeviceClass gpu.example.com)"
    ]
    assert kube.get("v1", "Pod", "legacy", ns)["metadata"]["uid"] == created.obj["metadata"]["uid"]


def test_denied_claim_reaches_the_client_and_nothing_is_stored(kube, namespace):
    ns = namespace("mig")
    denied = kube.denial(claim("other-class", ns, device_class_name="fpga.example.com"))
    assert denied.status == 403
    assert 'admission webhook "resources.validate.dra-migration.io" denied the request' in denied.message
    assert "fpga.example.com" in denied.message and "gpu.example.com" in denied.message
    assert kube.get_or_none("resource.k8s.io/v1", "ResourceClaim", "other-class", ns) is None


@pytest.mark.controllers
def test_dra_pod_is_stored_with_annotations_and_affinity_and_the_scheduler_honours_them(kube, namespace, cluster):
    ns = namespace("pilot")
    created = kube.create(pod("train", ns))
    stored = kube.get("v1", "Pod", "train", ns)
    annotations = stored["metadata"]["annotations"]
    assert {k: annotations[k] for k in annotations if k.startswith("dra-migration.io/")} == {
        "dra-migration.io/cohort": "pilot-teams", "dra-migration.io/stage": "pilot",
        "dra-migration.io/path": "dra-extended-resource", "dra-migration.io/node-pool": "dra",
        "dra-migration.io/policy": cluster.webhook.readyz()["policy"],
    }
    assert _required_terms(stored) == [DRA_POOL]
    assert created.warnings == []
    # The real scheduler reads the stored affinity: only the dra pool's Node qualifies.
    bound = eventually(lambda: kube.get("v1", "Pod", "train", ns)["spec"].get("nodeName"), "Pod bound", 30)
    assert bound == GPU_NODE


@pytest.mark.controllers
def test_device_plugin_pod_is_steered_to_the_device_plugin_pool(kube, namespace):
    ns = namespace("pilot")
    kube.create(pod("legacy", ns, resource="vendor.example.com/gpu"))
    stored = kube.get("v1", "Pod", "legacy", ns)
    assert stored["metadata"]["annotations"]["dra-migration.io/node-pool"] == "devicePlugin"
    assert stored["metadata"]["annotations"]["dra-migration.io/path"] == "device-plugin"
    assert _required_terms(stored) == [DP_POOL]
    assert eventually(lambda: kube.get("v1", "Pod", "legacy", ns)["spec"].get("nodeName"), "Pod bound", 30) \
        == "e2e-dp-1"


def test_training_template_is_stored_with_the_policy_tolerations(kube, namespace):
    ns = namespace("pilot")
    dry = kube.create(claim_template("train", ns, claim_labels=TRAINING), dry_run=True).obj
    kube.create(claim_template("train", ns, claim_labels=TRAINING))
    stored = kube.get("resource.k8s.io/v1", "ResourceClaimTemplate", "train", ns)
    request = stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["tolerations"] == [POLICY_TOLERATION]
    assert stored["metadata"]["annotations"]["dra-migration.io/tolerations-injected"] == "1"
    # The count also goes to the claims the template stamps out.
    assert stored["spec"]["metadata"]["annotations"]["dra-migration.io/tolerations-injected"] == "1"
    # A dry run goes through the same admission chain and shows the same object.
    assert dry["spec"] == stored["spec"]


def test_template_without_training_labels_is_stored_unchanged(kube, namespace):
    ns = namespace("pilot")
    kube.create(claim_template("plain", ns))
    stored = kube.get("resource.k8s.io/v1", "ResourceClaimTemplate", "plain", ns)
    assert "tolerations" not in stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert "dra-migration.io/tolerations-injected" not in (stored["metadata"].get("annotations") or {})


# Issue 45 item 5: the GPU feature discovery label of the NVIDIA device plugin's MIG "single" strategy, for the
# suite's example.com/gpu (the bundled defaults name nvidia.com/gpu).
MIG_POLICY = {"  defaultStage: legacy\n": (
    "  sliceNodeLabels:\n"
    "  - {key: nvidia.com/gpu.product, values: ['*-MIG-*'], sharing: MIG, deviceClassName: mig.example.com,\n"
    "     resourceNames: [example.com/gpu]}\n"
    "  defaultStage: legacy\n")}


@pytest.mark.rule("device-plugin-slice")
def test_mig_pinned_pod_stays_on_the_device_plugin_pool_with_the_mig_class(kube, namespace, policy):
    policy(policy_variant(MIG_POLICY))
    ns = namespace("pilot")
    pinned = kube.create(pod("mig", ns, nodeSelector={"nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb"}))
    stored = kube.get("v1", "Pod", "mig", ns)
    annotations = stored["metadata"]["annotations"]
    assert annotations["dra-migration.io/node-pool"] == "devicePlugin"
    assert annotations["dra-migration.io/path"] == "device-plugin"
    assert _required_terms(stored) == [DP_POOL]
    assert stored["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb"}
    assert pinned.warnings == [
        "device-plugin-slice (pilot): Pod pins nodeSelector nvidia.com/gpu.product=A100-SXM4-40GB-MIG-1g.5gb, where "
        "example.com/gpu is a MIG slice: kept on the devicePlugin pool; fix: to use DRA, claim DeviceClass "
        "mig.example.com and drop the node pin"]
    # The same Pod pinning a whole-GPU product goes to the dra pool as every pilot GPU Pod does.
    kube.create(pod("whole", ns, nodeSelector={"nvidia.com/gpu.product": "A100-SXM4-40GB"}))
    assert kube.get("v1", "Pod", "whole", ns)["metadata"]["annotations"]["dra-migration.io/node-pool"] == "dra"
