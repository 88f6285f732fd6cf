"""Issue #24 item 7 on the real control plane: a monitoring claim (the GPU operator's DCGM exporter shape, as in
tests/data/upstream/intel-monitor-admin-access.yaml: ``adminAccess: true``, ``allocationMode: All``, tolerating every
NoExecute and NoSchedule taint) is stored in a namespace the policy allows admin access in, and the API server's
own admin-access rule (the namespace label ``resource.kubernetes.io/admin-access: "true"``) lets it through too.
The same claim in a namespace the policy does not name is refused, and each toleration message names its
toleration in full.
"""

from __future__ import annotations

from tests.e2e.conftest import policy_variant
from tests.e2e.objects import claim

ADMIN_LABEL = {"resource.kubernetes.io/admin-access": "true"}  # what the API server requires for adminAccess
TOLERATIONS = [{"operator": "Exists", "effect": "NoExecute"}, {"operator": "Exists", "effect": "NoSchedule"}]


def _monitor(ns: str) -> dict:
    return claim("dcgm-exporter", ns, adminAccess=True, allocationMode="All", tolerations=TOLERATIONS)


def test_monitoring_claim_in_an_admin_access_namespace(kube, namespace, policy):
    policy(policy_variant({"adminAccessNamespaces: [gpu-ops]": 'adminAccessNamespaces: ["gpu-ops-*"]'}))
    ops = namespace("gpu-ops", ADMIN_LABEL)  # legacy stage by name; toleration-too-broad is Deny in every stage
    stored = kube.create(_monitor(ops))
    assert not [w for w in stored.warnings if "toleration-too-broad" in w], stored.warnings
    assert kube.get("resource.k8s.io/v1", "ResourceClaim", "dcgm-exporter", ops)["spec"]["devices"]["requests"][0][
        "exactly"]["tolerations"] == TOLERATIONS

    team = namespace("mig", ADMIN_LABEL)  # the API server would allow adminAccess here; the policy does not
    denied = kube.denial(_monitor(team))
    assert "admin-access-namespace (migrated: Deny)" in denied.message, denied.message
    assert ("toleration (key=(any) operator=Exists value=(none) effect=NoExecute tolerationSeconds=(unset: forever)) "
            "is too broad") in denied.message, denied.message
    assert ("toleration (key=(any) operator=Exists value=(none) effect=NoSchedule tolerationSeconds=(unset)) "
            "is too broad") in denied.message, denied.message
