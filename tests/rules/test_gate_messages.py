"""Issue 13 item 10: what ``gated-feature`` says matches what the API server does.

- DRAFractionalCapacityRange: beta, off unless the components run with ``--min-compatibility-version=1.37``
  (kube_features.go, 1.37); the values are kept and the range is worked out in whole units
  (pkg/apis/resource/validation ``validateMultiAllocatableDeviceCapacity``, tests ``fractional-range-gate-disabled-*``),
  so the finding is advisory, and a fractional ``requestPolicy.default`` counts too.
- Job ``spec.scheduling``: only ``scheduling`` itself is gated (WorkloadWithJob); the field does not exist in
  the 1.36 API at all.
- Claim ``status.devices`` is not judged: it is written through the status subresource, which no webhook
  here sees.
- "rejects" where the API rejects (``partitionTypeAttribute``), "does not serve" for a gated kind, "drops" for
  the rest; never "drops or rejects".
"""

from __future__ import annotations

from typing import Any

from tests.builders.gates import all_on_except, policy, run
from webhook.gates.catalogue import GATES, GATES_BY_NAME
from webhook.rules.gates import remediation


def _slice(request_policy: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-a-gpu"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "node-a",
            "devices": [{"name": "gpu-0", "allowMultipleAllocations": True,
                         "capacity": {"compute": {"value": "4", "requestPolicy": request_policy}}}],
        },
    }


def _job(scheduling: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {
            "scheduling": scheduling,
            "template": {"spec": {"restartPolicy": "Never",
                                  "containers": [{"name": "trainer", "image": "registry.example.com/trainer:1.0"}]}},
        },
    }


def test_fractional_default_is_reported_and_advisory() -> None:
    obj = _slice({"default": "1500m", "validRange": {"min": "1", "max": "4", "step": "1"}})
    (f,) = run(obj, all_on_except("DRAFractionalCapacityRange"))[0]
    assert f.paths == ('spec.devices[0].capacity["compute"].requestPolicy.default',)
    assert f.advisory is True
    assert "--min-compatibility-version=1.37" in f.message
    assert "keeps the values but works the range out in whole units" in f.remediation
    assert "Otherwise use whole numbers" in f.remediation


def test_fractional_default_without_a_range_is_not_range_arithmetic() -> None:
    obj = _slice({"default": "500m", "validValues": ["500m", "1"]})
    assert run(obj, all_on_except("DRAFractionalCapacityRange"))[0] == []


def test_job_scheduling_subfields_are_not_gated_separately() -> None:
    job = _job({"schedulingPolicy": {"gang": {"minCount": 2}},
                "resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "fabric-template"}],
                "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]}})
    pol = all_on_except("DRAWorkloadResourceClaims", "TopologyAwareWorkloadScheduling")
    assert run(job, pol)[0] == []
    (f,) = run(job, all_on_except("WorkloadWithJob"))[0]
    assert f.paths == ("spec.scheduling",)


def test_job_scheduling_does_not_exist_in_1_36() -> None:
    job = _job({"schedulingPolicy": {"gang": {"minCount": 2}}})
    (f,) = run(job, policy("1.36", WorkloadWithJob=True, GenericWorkload=True))[0]
    assert f.message == ("field spec.scheduling does not exist in Kubernetes 1.36 (added in 1.37 behind feature "
                         "gate WorkloadWithJob): the API server drops it as unknown")
    assert 'spec.kubernetesVersion: "1.37"' in f.remediation
    assert f.advisory is False


def test_claim_status_devices_is_not_judged() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}}]}},
        "status": {"devices": [{"driver": "nic.example.com", "pool": "node-a", "device": "nic-3"}]},
    }
    assert run(claim, policy("1.36", DRAResourceClaimDeviceStatus=False))[0] == []


def test_rejected_not_served_and_dropped_are_told_apart() -> None:
    assert "the API server rejects the object (422)" in remediation(GATES_BY_NAME["DRAPartitionableDevicesType"],
                                                                      "1.37")
    rule = GATES_BY_NAME["DRADeviceTaintRules"]
    assert "does not serve this kind" in remediation(rule, "1.36", kind_level=True)
    assert "drops the field without a warning" in remediation(GATES_BY_NAME["DRAListTypeAttributes"], "1.37")
    for gate in GATES:
        for version in ("1.36", "1.37"):
            assert "drops or rejects" not in remediation(gate, version)


def test_a_gated_kind_says_it_is_not_served() -> None:
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "maint"},
            "spec": {"deviceSelector": {"driver": "gpu.example.com"},
                     "taint": {"key": "example.com/maintenance", "effect": "NoExecute"}}}
    (f,) = run(rule, policy(DRADeviceTaintRules=False))[0]
    assert "does not serve this kind" in f.remediation
