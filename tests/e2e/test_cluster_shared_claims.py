"""shared-claim-limit on the real control plane (issue 18 item 3): a Deployment whose Pods all name one
ResourceClaim is denied in a migrated namespace when it can run more than 256 Pods at once (the claim's
status.reservedFor limit), and a small one is stored.
"""

from __future__ import annotations

from tests.e2e.objects import claim, deployment, pod


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
