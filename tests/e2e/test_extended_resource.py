"""The extended-resource path (DRAExtendedResource): a Pod asking only for `example.com/gpu` in its limits is
bound by the real scheduler through the DeviceClass that maps that name, the scheduler creates the Pod's
claim with the webhook installed, and the webhook leaves that claim alone.
"""

from __future__ import annotations

import pytest

from tests.e2e.objects import GPU_CLASS, GPU_NODE, pod
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers
EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"


# Only steered namespaces: a legacy Pod is not steered, and the device-plugin Node (which advertises
# example.com/gpu itself) may take it without any claim, which is right but not this path.
@pytest.mark.parametrize("prefix", ["pilot", "mig"])
def test_scheduler_claim_is_created_and_left_alone(kube, namespace, prefix):
    ns = namespace(prefix)
    kube.create(pod("gpu", ns))

    def bound_with_claim() -> dict | None:
        p = kube.get("v1", "Pod", "gpu", ns)
        status = p.get("status", {}).get("extendedResourceClaimStatus")
        return p if p["spec"].get("nodeName") and status else None
    p = eventually(bound_with_claim, "Pod bound with status.extendedResourceClaimStatus", 30)
    assert p["spec"]["nodeName"] == GPU_NODE
    claims = kube.list("resource.k8s.io/v1", "ResourceClaim", ns)
    assert [c["metadata"]["name"] for c in claims] == [p["status"]["extendedResourceClaimStatus"]["resourceClaimName"]]
    c = claims[0]
    # Exactly what kube-scheduler wrote: its annotation only, owned by the Pod, one request of the class.
    assert c["metadata"]["annotations"] == {EXTENDED_CLAIM: "true"}
    assert c["metadata"]["ownerReferences"][0]["uid"] == p["metadata"]["uid"]
    assert c["spec"]["devices"]["requests"] == [{
        "name": "container-0-request-0",
        "exactly": {"deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": 1},
    }]
    assert c["status"]["allocation"]["devices"]["results"][0]["driver"] == "gpu.example.com"
    # The user's Pod was decided by the webhook (steered to the dra pool); the scheduler's claim was not.
    assert p["metadata"]["annotations"]["dra-migration.io/path"] == "dra-extended-resource"
