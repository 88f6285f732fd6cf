"""featureGates auto on the real control plane (issue 18 item 1).

This API server runs with AllAlpha=true,AllBeta=true, so its /metrics reports the alpha gate
DRAListTypeAttributes on. A claim whose CEL selector uses ``includes()`` (that gate's field) in a migrated
namespace is stored when the policy says ``auto`` (only the cluster's value can allow it: the 1.37 default
is off, so a webhook that fell back would deny it), and denied when the policy sets the gate off explicitly.
The webhook reads /metrics with the shipped RBAC (the ``kube`` fixture fails the test on any 403).
"""

from __future__ import annotations

from tests.e2e.conftest import policy_variant
from tests.e2e.objects import claim
from tests.e2e.waits import eventually

GATES = "    DRAWorkloadResourceClaims: false\n    GenericWorkload: false\n"
AUTO = policy_variant({GATES: '    "*": auto\n'})
AUTO_BUT_OFF = policy_variant({GATES: '    "*": auto\n    DRAListTypeAttributes: false\n'})
SELECTOR = [{"cel": {"expression": 'device.attributes["gpu.example.com"].models.includes("a100")'}}]


def _gates_read(cluster) -> None:
    eventually(lambda: (cluster.webhook.readyz().get("cluster") or {}).get("featureGates", {}).get("read"),
               "the webhook's cluster view has read the API server's feature gates", 30)


def test_alpha_field_allowed_with_auto_because_the_cluster_has_the_gate_on(cluster, kube, namespace, policy):
    ns = namespace("mig")
    policy(AUTO)
    _gates_read(cluster)
    created = kube.create(claim("listy", ns, selectors=SELECTOR))
    assert not [w for w in created.warnings if "DRAListTypeAttributes" in w], created.warnings
    stored = kube.get("resource.k8s.io/v1", "ResourceClaim", "listy", ns)
    assert stored["spec"]["devices"]["requests"][0]["exactly"]["selectors"] == SELECTOR


def test_alpha_field_denied_when_the_policy_sets_the_gate_off_explicitly(cluster, kube, namespace, policy):
    ns = namespace("mig")
    policy(AUTO_BUT_OFF)
    _gates_read(cluster)
    denied = kube.denial(claim("listy", ns, selectors=SELECTOR))
    assert denied.status == 403 and "DRAListTypeAttributes" in denied.message, denied.message
    assert kube.get_or_none("resource.k8s.io/v1", "ResourceClaim", "listy", ns) is None
