"""Kubernetes 1.36 as it is (issue 13 item 8): PodGroup and Workload are served only as
``scheduling.k8s.io/v1alpha2``. With ``matchPolicy: Equivalent`` the API server converts a request only to a
version the webhook lists, so without v1alpha2 in deploy/base/webhooks.yaml no PodGroup ever reached the
webhook on 1.36. Here a PodGroup (kind gated by GenericWorkload, off in the e2e policy) is judged and denied
on the real v1.36.2 API server.
"""

from __future__ import annotations

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
