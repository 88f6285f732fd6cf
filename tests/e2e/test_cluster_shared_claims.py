"""shared-claim-limit on the real control plane (issue 18 item 3): a Deployment whose Pods all name one
ResourceClaim is denied in a migrated namespace when it can run more than 256 Pods at once (the claim's
status.reservedFor limit), and a small one is stored; a small one that a HorizontalPodAutoscaler can scale
past the limit is denied, once the webhook's HPA watch (with the shipped RBAC) has seen the HPA.
"""

from __future__ import annotations

from typing import Any

from tests.e2e.objects import claim, deployment, pod
from tests.e2e.waits import eventually

FOLLOW_WITHIN = 15  # seconds; a watch event normally arrives in well under one


def _shared(name: str, ns: str, replicas: int) -> dict:
    p = pod("embed", ns, resource=None)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared-gpus"}]
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return deployment(name, ns, p, replicas=replicas)


def test_more_pods_than_reserved_for_holds_is_denied(kube, namespace):
    ns = namespace("mig")
    kube.create(claim("shared-gpus", ns))
    denied = kube.denial(_shared("embed", ns, 300))
    assert denied.status == 403, denied.message
    assert "up to 375 Pods can use ResourceClaim shared-gpus" in denied.message, denied.message
    assert kube.get_or_none("apps/v1", "Deployment", "embed", ns) is None


def test_a_small_deployment_on_a_shared_claim_is_stored(kube, namespace):
    ns = namespace("mig")
    kube.create(claim("shared-gpus", ns))
    created = kube.create(_shared("embed", ns, 2))
    assert not [w for w in created.warnings if "shared-claim-limit" in w], created.warnings
    assert kube.get("apps/v1", "Deployment", "embed", ns)["spec"]["replicas"] == 2


def _hpa(name: str, ns: str, target: str, max_replicas: int) -> dict[str, Any]:
    """kubernetes/website content/en/examples/application/hpa/php-apache.yaml (the HPA walkthrough,
    autoscaling/v2), retargeted and with another maxReplicas."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                     "minReplicas": 1, "maxReplicas": max_replicas,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                         "type": "Utilization", "averageUtilization": 50}}}]}}


def _dry_run(kube, obj) -> str:
    """'allowed' or the denial message of a dry-run create (nothing is stored)."""
    try:
        kube.create(obj, dry_run=True)
    except AssertionError as exc:
        return getattr(exc, "message", str(exc))
    return "allowed"


def test_an_autoscalers_maximum_counts(kube, namespace):
    ns = namespace("mig")
    kube.create(claim("shared-gpus", ns))
    small = _shared("x", ns, 2)
    assert _dry_run(kube, small) == "allowed"
    kube.create(_hpa("gpu-hpa", ns, "x", 300))
    # Wait for the webhook's HPA watch: the same dry run is denied once it has seen the HPA.
    eventually(lambda: _dry_run(kube, small) != "allowed", "the webhook seeing the HPA", FOLLOW_WITHIN)
    denied = kube.denial(small)
    assert denied.status == 403, denied.message
    assert ("up to 375 Pods (HorizontalPodAutoscaler gpu-hpa maxReplicas 300 + maxSurge) can use ResourceClaim "
            "shared-gpus") in denied.message, denied.message
    assert kube.get_or_none("apps/v1", "Deployment", "x", ns) is None
    # Without the HPA the same Deployment is stored (after the webhook saw the deletion).
    kube.delete("autoscaling/v2", "HorizontalPodAutoscaler", "gpu-hpa", ns)
    eventually(lambda: _dry_run(kube, small) == "allowed", "the webhook seeing the HPA deleted", FOLLOW_WITHIN)
    created = kube.create(small)
    assert not [w for w in created.warnings if "shared-claim-limit" in w], created.warnings
    assert kube.get("apps/v1", "Deployment", "x", ns)["spec"]["replicas"] == 2


def test_an_autoscaler_of_another_deployment_does_not_count(kube, namespace):
    ns = namespace("mig")
    kube.create(claim("shared-gpus", ns))
    kube.create(_hpa("other-hpa", ns, "other", 300))
    other = _shared("other", ns, 2)
    eventually(lambda: _dry_run(kube, other) != "allowed", "the webhook seeing the HPA", FOLLOW_WITHIN)
    created = kube.create(_shared("x", ns, 2))  # the HPA names "other", not "x"
    assert not [w for w in created.warnings if "shared-claim-limit" in w], created.warnings


# --- claims shared by a PodGroup (issue 25 item 1) ----------------------------------------------------
# The 1.36.2 API server serves PodGroup as scheduling.k8s.io/v1alpha2 (DRAWorkloadResourceClaims alpha, on
# with AllAlpha): spec.resourceClaims is stored. With the gate on in the policy, 300 Pods that join the group
# and list its claim entry are one reservedFor consumer (resourceclaim.BindTo: one podgroups reference).
GROUP_CLAIMS = {"    DRAWorkloadResourceClaims: false\n    GenericWorkload: false\n":
                "    DRAWorkloadResourceClaims: true\n    GenericWorkload: true\n"}
ENTRY = {"name": "gpu", "resourceClaimName": "shared-gpus"}


def test_pods_sharing_the_claim_through_their_podgroup_are_one_consumer(kube, namespace, policy):
    from tests.e2e.conftest import policy_variant

    policy(policy_variant(GROUP_CLAIMS))
    ns = namespace("mig")
    kube.create(claim("shared-gpus", ns))
    group = {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
             "metadata": {"name": "trainers", "namespace": ns},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": [ENTRY]}}
    kube.create(group)
    assert kube.get("scheduling.k8s.io/v1alpha2", "PodGroup", "trainers", ns)["spec"]["resourceClaims"] == [ENTRY]
    grouped = _shared("embed", ns, 300)
    grouped["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": "trainers"}
    created = kube.create(grouped)
    assert not [w for w in created.warnings if "shared-claim-limit" in w], created.warnings
    stored = kube.get("apps/v1", "Deployment", "embed", ns)["spec"]["template"]["spec"]
    assert stored["schedulingGroup"] == {"podGroupName": "trainers"} and stored["resourceClaims"] == [ENTRY]
    # The same Deployment without the group: 375 Pods each take an entry, and the message says what
    # kube-scheduler does at entry 257.
    denied = kube.denial(_shared("solo", ns, 300))
    assert "up to 375 Pods can use ResourceClaim shared-gpus" in denied.message, denied.message
    assert "PreBind update of status.reservedFor fails validation" in denied.message, denied.message
