"""The resourceclaim controller's claims skip ``resources.validate`` under either of its identities.

kube-controller-manager gives each controller its own ServiceAccount only with
``--use-service-account-credentials`` (cmd/kube-controller-manager/app/controllermanager.go,
``createClientBuilders``, v1.36/1.37); without it every controller, the resourceclaim controller included,
writes as the manager's own user ``system:kube-controller-manager``. The matchCondition
``exclude-resourceclaim-controller`` of deploy/base/webhooks.yaml must hold for both, or template claims go to
the fail-closed webhook and an outage leaves their Pods Pending (README "Pods are never blocked").
Evaluated here with the same CEL library as tests/deploy/test_match_conditions.py; the real API server evaluates it
for both identities in tests/e2e/test_outage.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders.match_conditions import request, sent

VALIDATE = "resources.validate.dra-migration.io"
MUTATE = "resources.mutate.dra-migration.io"
CONTROLLER_SA = "system:serviceaccount:kube-system:resource-claim-controller"
MANAGER = "system:kube-controller-manager"


def _template_claim() -> dict[str, Any]:
    """A claim as the resourceclaim controller writes it (pkg/controller/resourceclaim/controller.go)."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "trainer-0-gpu-x7k2p", "namespace": "team-a",
                     "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "trainer-0", "uid": "u1",
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    }


def _claim_request(user: str, groups: list[str]) -> dict[str, Any]:
    req = request("ResourceClaim", group="resource.k8s.io", version="v1", user=user)
    req["userInfo"]["groups"] = groups
    return req


@pytest.mark.parametrize("user, groups", [
    (CONTROLLER_SA, ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]),
    (MANAGER, ["system:authenticated"]),
])
def test_template_claims_skip_validation_under_either_identity(user: str, groups: list[str]) -> None:
    assert not sent(VALIDATE, _claim_request(user, groups), _template_claim())
    # resources.mutate (Ignore) still sees them: it adds training tolerations.
    assert sent(MUTATE, _claim_request(user, groups), _template_claim())


def test_the_same_claim_from_a_user_is_validated() -> None:
    assert sent(VALIDATE, _claim_request("alice", ["system:authenticated"]), _template_claim())


def test_the_manager_identity_is_excluded_for_claims_only() -> None:
    """Without service-account credentials the manager writes many kinds; only its claims are skipped."""
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": "team-a"}, "spec": {"spec": {"devices": {}}}}
    req = request("ResourceClaimTemplate", group="resource.k8s.io", version="v1", user=MANAGER)
    assert sent(VALIDATE, req, template)
