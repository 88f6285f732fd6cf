"""The webhook's cluster view (list+watch of Namespaces and DeviceClasses, as the dra-webhook ServiceAccount)
follows the cluster within a bounded time, with no restart: a namespace relabelled into another cohort, a
new DeviceClass that maps an extended resource.
"""

from __future__ import annotations

from tests.e2e.objects import device_class, pod
from tests.e2e.waits import eventually

FOLLOW_WITHIN = 15  # seconds; a watch event normally arrives in well under one


def _decision(kube, obj) -> str:
    """'allowed' or the denial message, for a dry-run create (nothing is stored)."""
    try:
        kube.create(obj, dry_run=True)
    except AssertionError as exc:
        return getattr(exc, "message", str(exc))
    return "allowed"


def test_namespace_relabel_moves_it_to_another_cohort(kube, namespace):
    ns = namespace("team")  # legacy by name: a legacy resource name is only audited
    legacy_pod = pod("legacy", ns, resource="vendor.example.com/gpu")
    assert _decision(kube, legacy_pod) == "allowed"
    kube.patch("v1", "Namespace", ns, {"metadata": {"labels": {"gpu-migration": "migrated"}}})
    denied = eventually(lambda: (m := _decision(kube, legacy_pod)) != "allowed" and m,
                        "the webhook seeing the relabelled namespace as migrated", FOLLOW_WITHIN)
    assert "legacy-resource-name (migrated: Deny)" in denied
    kube.patch("v1", "Namespace", ns, {"metadata": {"labels": {"gpu-migration": None}}})
    eventually(lambda: _decision(kube, legacy_pod) == "allowed", "the label removal followed", FOLLOW_WITHIN)


def test_new_device_class_maps_an_extended_resource(kube, namespace):
    ns = namespace("mig")
    tpu_pod = pod("tpu", ns, resource="example.com/e2e-tpu")
    denied = _decision(kube, tpu_pod)
    assert "example.com/e2e-tpu" in denied and "no policy resource or DeviceClass maps" in denied, denied
    kube.create(device_class("e2e-tpu.example.com", "e2e-tpu.example.com", "example.com/e2e-tpu"))
    try:
        eventually(lambda: _decision(kube, tpu_pod) == "allowed",
                   "the webhook seeing the new DeviceClass", FOLLOW_WITHIN)
    finally:
        kube.delete("resource.k8s.io/v1", "DeviceClass", "e2e-tpu.example.com")
