"""Kubernetes 1.36 as it is (issue 13 item 8): PodGroup and Workload are served only as
``scheduling.k8s.io/v1alpha2``. With ``matchPolicy: Equivalent`` the API server converts a request only to a
version the webhook lists, so without v1alpha2 in deploy/base/webhooks.yaml no PodGroup ever reached the
webhook on 1.36. Here a PodGroup (kind gated by GenericWorkload, off in the e2e policy) is judged and denied
on the real v1.36.2 API server, and so is a field the 1.36-only gate WorkloadAwarePreemption guards.
"""

from __future__ import annotations

from tests.e2e.conftest import policy_variant

PODGROUP = {
    "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
}


def test_v1alpha2_podgroup_is_judged_on_1_36(kube, namespace):
    ns = namespace("pilot")
    obj = {**PODGROUP, "metadata": {"name": "trainers", "namespace": ns}}
    denied = kube.denial(obj)
    assert "dra-migration.io" in denied.message and "GenericWorkload" in denied.message, denied.message
    assert "gated-feature" in denied.message, denied.message


# A 1.36 policy: the Workload API on (so the kind itself passes), WorkloadAwarePreemption as the test says.
def _policy_1_36(preemption: bool) -> str:
    gates = "true" if preemption else "false"
    return policy_variant({
        'kubernetesVersion: "1.37"': 'kubernetesVersion: "1.36"',
        "    GenericWorkload: false\n": f"    GenericWorkload: true\n    GangScheduling: {gates}\n"
                                       f"    WorkloadAwarePreemption: {gates}\n",
    })


def test_1_36_only_gate_field_is_judged_on_1_36(kube, namespace, policy):
    """WorkloadAwarePreemption (1.36 only) guards PodGroup ``spec.disruptionMode``: v1.36
    pkg/registry/scheduling/podgroup/strategy.go dropDisabledDisruptionModeField drops it with the gate off."""
    ns = namespace("pilot")
    obj = {**PODGROUP, "metadata": {"name": "trainers", "namespace": ns},
           "spec": {**PODGROUP["spec"], "disruptionMode": "PodGroup"}}
    policy(_policy_1_36(preemption=False))
    denied = kube.denial(obj)
    assert "gated-feature" in denied.message and "WorkloadAwarePreemption" in denied.message, denied.message
    assert "spec.disruptionMode" in denied.message, denied.message
    assert "kind PodGroup needs" not in denied.message, denied.message  # the field, not the kind (GenericWorkload on)
    assert kube.get_or_none("scheduling.k8s.io/v1alpha2", "PodGroup", "trainers", ns) is None

    # Gate on in the policy as on this API server (AllAlpha): created, and the API server keeps the field.
    policy(_policy_1_36(preemption=True))
    created = kube.create(obj)
    stored = kube.get("scheduling.k8s.io/v1alpha2", "PodGroup", "trainers", ns)
    assert stored["spec"]["disruptionMode"] == "PodGroup"
    assert not [w for w in created.warnings if "WorkloadAwarePreemption" in w], created.warnings
