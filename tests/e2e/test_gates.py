"""Gated fields: with the policy saying a feature gate is off, an object using its field is denied with a
message the client shows; with the gate on (as on this API server: AllAlpha, AllBeta) it is created and the
API server keeps the field.

DRAConsumableCapacity (beta in 1.36/1.37, on by default) gates a request's ``capacity.requests``.
"""

from __future__ import annotations

from tests.e2e.conftest import policy_variant
from tests.e2e.objects import claim

CAPACITY = {"requests": {"memory": "1Gi"}}
GATES_OFF = policy_variant({"    GenericWorkload: false\n": "    GenericWorkload: false\n"
                                                           "    DRAConsumableCapacity: false\n"})


def test_gate_off_in_the_policy_denies_the_field_with_a_message(kube, namespace, policy):
    ns = namespace("pilot")
    policy(GATES_OFF)
    denied = kube.denial(claim("shared", ns, capacity=CAPACITY))
    assert denied.status == 403
    assert "denied the request" in denied.message and "dra-migration.io" in denied.message
    assert "DRAConsumableCapacity" in denied.message, denied.message
    assert kube.get_or_none("resource.k8s.io/v1", "ResourceClaim", "shared", ns) is None


def test_gate_on_in_the_policy_lets_the_api_server_store_the_field(kube, namespace):
    ns = namespace("pilot")
    created = kube.create(claim("shared", ns, capacity=CAPACITY))
    stored = kube.get("resource.k8s.io/v1", "ResourceClaim", "shared", ns)
    assert stored["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == CAPACITY
    assert not [w for w in created.warnings if "DRAConsumableCapacity" in w], created.warnings


POOL_STATUS_OFF = policy_variant({"    GenericWorkload: false\n": "    GenericWorkload: false\n"
                                                                "    DRAResourcePoolStatus: false\n"})


def pool_status_request(name: str) -> dict:
    """A ResourcePoolStatusRequest (resource.k8s.io/v1alpha3, cluster-scoped; DRAResourcePoolStatus)."""
    return {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "ResourcePoolStatusRequest",
            "metadata": {"name": name}, "spec": {"driver": "gpu.example.com", "limit": 10}}


def test_resource_pool_status_request_is_sent_and_its_gate_reported(kube, policy):
    """Issue 25 item 5: the kind is routed (before, no webhook rule named it and the API server stored it)."""
    policy(POOL_STATUS_OFF)
    denied = kube.denial(pool_status_request("gpu-pools"))
    assert denied.status == 403, denied.message
    assert "DRAResourcePoolStatus" in denied.message, denied.message
    assert kube.get_or_none("resource.k8s.io/v1alpha3", "ResourcePoolStatusRequest", "gpu-pools") is None


POOL_STATUS_ON = policy_variant({"    GenericWorkload: false\n": "    GenericWorkload: false\n"
                                                               "    DRAResourcePoolStatus: true\n"})


def test_resource_pool_status_request_with_the_gate_on_is_stored(kube, policy):
    policy(POOL_STATUS_ON)
    kube.create(pool_status_request("gpu-pools-on"))
    assert kube.get("resource.k8s.io/v1alpha3", "ResourcePoolStatusRequest", "gpu-pools-on")["spec"]["driver"]

