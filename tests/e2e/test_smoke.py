"""Smoke: the installed webhook's denial reaches the client with the webhook's own message."""

from __future__ import annotations

from tests.e2e.objects import pod


def test_legacy_resource_name_denied_in_migrated_namespace(kube, namespace):
    ns = namespace("mig")
    denied = kube.denial(pod("legacy", ns, resource="vendor.example.com/gpu"))
    assert denied.status == 403  # a validating webhook's denial: Forbidden with the webhook's message
    assert 'admission webhook "workloads.validate.dra-migration.io" denied the request' in denied.message
    assert "vendor.example.com/gpu" in denied.message and "example.com/gpu" in denied.message
    assert kube.get_or_none("v1", "Pod", "legacy", ns) is None


def test_policy_switch_turns_the_denial_into_a_warning(kube, namespace, policy):
    # The same namespace and Pod; the policy now keeps mig-* in the pilot stage (Warn instead of Deny).
    from tests.e2e.conftest import policy_variant

    ns = namespace("mig")
    identity = policy(policy_variant({'    - {stage: migrated, from: "2000-02-01"}\n': ""}))
    created = kube.create(pod("legacy", ns, resource="vendor.example.com/gpu"))
    assert any(w.startswith("legacy-resource-name (pilot): ") and "vendor.example.com/gpu" in w
               for w in created.warnings), created.warnings
    annotations = created.obj["metadata"]["annotations"]
    assert annotations["dra-migration.io/policy"] == identity
    assert annotations["dra-migration.io/stage"] == "pilot"
