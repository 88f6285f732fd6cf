"""Issue 14 item 5 on the real control plane: a second DeviceClass with the policy resource's
extendedResourceName takes the name over (Kubernetes serves it with the newest class:
``staging/src/k8s.io/api/resource/v1/types.go`` ``DeviceClassSpec.ExtendedResourceName``, the scheduler's
``deviceclass/extendedresourcecache/extendedresourcecache.go`` ``updateResourceName2class``), and the webhook
reports it when the class is created.
"""

from __future__ import annotations

import pytest

# The harness lives on branch `e2e` (tests/e2e/conftest.py); until it is merged this module is skipped.
_conftest = pytest.importorskip("tests.e2e.conftest", reason="the e2e harness (tests/e2e/conftest.py) is not here yet")
_objects = pytest.importorskip("tests.e2e.objects")
_waits = pytest.importorskip("tests.e2e.waits")
policy_variant, eventually = _conftest.policy_variant, _waits.eventually
GPU_CLASS, GPU_NODE, device_class, pod = _objects.GPU_CLASS, _objects.GPU_NODE, _objects.device_class, _objects.pod

pytestmark = pytest.mark.controllers
TAKER = "mig.gpu.example.com"


def _condition(kube, name: str, ns: str) -> dict:
    p = kube.get("v1", "Pod", name, ns)
    return next((c for c in p.get("status", {}).get("conditions") or [] if c["type"] == "PodScheduled"), {})


def test_a_takeover_class_is_reported_and_wins_the_name(kube, namespace, policy):
    policy(policy_variant({"rules: {gated-feature: Deny,":
                           "rules: {gated-feature: Deny, device-class-takeover: Warn,"}))
    ns = namespace("mig")
    kube.create(pod("before", ns))
    before = eventually(lambda: (p := kube.get("v1", "Pod", "before", ns))["spec"].get("nodeName") and p,
                        "a Pod asking for example.com/gpu is bound through gpu.example.com", 30)
    assert before["spec"]["nodeName"] == GPU_NODE

    # A class for MIG slices that claims the same name (NVIDIA/k8s-dra-driver-gpu's mig-1g-12gb demo does);
    # here it selects no device, so whoever gets it cannot be scheduled.
    taker = device_class(TAKER, "mig.example.com", "example.com/gpu")
    try:
        created = kube.create(taker)
        reported = [w for w in created.warnings if "device-class-takeover" in w and "takes over example.com/gpu" in w]
        assert reported, created.warnings

        kube.create(pod("after", ns))
        cond = eventually(lambda: (c := _condition(kube, "after", ns)).get("reason") == "Unschedulable" and c,
                          "the scheduler serves example.com/gpu with the newest class, which has no devices", 30)
        assert kube.get("v1", "Pod", "after", ns)["spec"].get("nodeName") is None, cond
    finally:
        kube.delete("resource.k8s.io/v1", "DeviceClass", TAKER)
        # The scheduler drops every name of a deleted class; an update of the policy class maps it again,
        # so the session's later tests see gpu.example.com serving example.com/gpu as before.
        kube.patch("resource.k8s.io/v1", "DeviceClass", GPU_CLASS, {"metadata": {"labels": {"e2e/touched": "1"}}})
    kube.create(pod("again", ns))
    eventually(lambda: kube.get("v1", "Pod", "again", ns)["spec"].get("nodeName") == GPU_NODE,
               "gpu.example.com serves example.com/gpu again", 30)


def test_dropping_the_taken_name_leaves_it_served_by_no_class_until_the_other_class_changes(kube, namespace, policy):
    """Issue 46 item 5: kubernetes/kubernetes#141103 on v1.36.2. Following device-class-takeover's advice (remove
    ``extendedResourceName`` from the newer class) deletes the name from kube-scheduler's cache and never re-adds
    gpu.example.com (``updateResourceName2class`` deletes the old object's names by key): a Pod asking for
    example.com/gpu is unschedulable as if no DeviceClass mapped it. The webhook warns on that UPDATE
    (``device-class-mapping-removed``, with the cluster view naming gpu.example.com); the next update of
    gpu.example.com maps the name again, as its remediation says (a restart would too)."""
    policy(policy_variant({"rules: {gated-feature: Deny,":
                           "rules: {gated-feature: Deny, device-class-mapping-removed: Warn,"}))
    ns = namespace("mig-drop")
    taker = device_class(TAKER, "mig.example.com", "example.com/gpu")
    try:
        kube.create(taker)
        demoted = kube.get("resource.k8s.io/v1", "DeviceClass", TAKER)
        del demoted["spec"]["extendedResourceName"]
        warned = [w for w in kube.replace(demoted).warnings if w.startswith("device-class-mapping-removed")]
        assert warned and "DeviceClass gpu.example.com also names it" in warned[0], warned

        kube.create(pod("unserved", ns))
        cond = eventually(lambda: (c := _condition(kube, "unserved", ns)).get("reason") == "Unschedulable" and c,
                          "the Pod asking for example.com/gpu Unschedulable", 30)
        # Not served through DRA at all: judged as a node's own extended resource, which the DRA node lacks.
        assert "Insufficient example.com/gpu" in cond.get("message", ""), cond
    finally:
        kube.delete("resource.k8s.io/v1", "DeviceClass", TAKER)
        kube.patch("resource.k8s.io/v1", "DeviceClass", GPU_CLASS, {"metadata": {"labels": {"e2e/touched": "2"}}})
    eventually(lambda: kube.get("v1", "Pod", "unserved", ns)["spec"].get("nodeName") == GPU_NODE,
               "gpu.example.com serves example.com/gpu again once it is updated", 60)
