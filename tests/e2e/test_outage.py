"""Outage: the webhook stopped (every connection to it reset, as with no ready endpoint behind the Service).

What the SHIPPED webhook configurations (deploy/base/webhooks.yaml, as installed) make the API server do,
per kind. The table below is the statement under test; when the failure policies or matchConditions change,
change the table (and only the table, unless a new kind is added).
"""

from __future__ import annotations

import pytest

from tests.e2e.objects import (
    GPU_DRIVER,
    GPU_NODE,
    claim,
    claim_pod,
    claim_template,
    deployment,
    device_class,
    pod,
    resource_slice,
)
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers

CREATED, BLOCKED = "created", "blocked"

#: kind -> what happens to a CREATE while the webhook is down, and which webhook decides it.
DURING_OUTAGE = {
    "Pod": CREATED,                     # workloads.mutate / workloads.validate: failurePolicy Ignore
    "Deployment": CREATED,              # workloads.*: Ignore
    "ResourceClaim": BLOCKED,           # resources.validate: Fail
    "ResourceClaimTemplate": BLOCKED,   # resources.validate: Fail
    "DeviceClass": BLOCKED,             # resources.validate: Fail (cluster-scoped: namespaceSelector n/a)
    "ResourceSlice": CREATED,           # resourceslices.validate: Ignore, resources.mutate: Ignore
    # Claims other components create, for Pods that were themselves admitted:
    "scheduler's extended-resource claim": BLOCKED,  # resources.validate: Fail (user system:kube-scheduler)
    "resourceclaim controller's claim": BLOCKED,     # resources.validate: Fail (the controller's account)
}


def _attempt(kube, obj) -> str:
    try:
        kube.create(obj)
    except AssertionError as exc:  # Denied
        message = getattr(exc, "message", str(exc))
        assert "failed calling webhook" in message, message
        return BLOCKED
    return CREATED


def _bound(kube, ns: str, name: str) -> bool:
    return bool(kube.get("v1", "Pod", name, ns)["spec"].get("nodeName"))


def _failure_event(kube, ns: str, name: str) -> str | None:
    """The scheduler's or the controller's own report (an Event) that creating a claim hit the webhook."""
    for event in kube.list("v1", "Event", ns):
        if event["involvedObject"].get("name") == name and "failed calling webhook" in event.get("message", ""):
            return event["message"]
    return None


def test_shipped_failure_policies_during_an_outage_and_recovery(cluster, kube, namespace):
    ns = namespace("pilot")
    kube.create(claim_template("ready", ns))  # made while the webhook is up, used during the outage
    observed: dict[str, str] = {}
    cluster.webhook.stop()
    try:
        observed["Pod"] = _attempt(kube, pod("plain", ns, resource=None))
        observed["Deployment"] = _attempt(kube, deployment("web", ns, pod("web", ns, resource=None), replicas=1))
        observed["ResourceClaim"] = _attempt(kube, claim("claim", ns))
        observed["ResourceClaimTemplate"] = _attempt(kube, claim_template("tmpl", ns))
        observed["DeviceClass"] = _attempt(kube, device_class("outage.example.com", "outage.example.com"))
        observed["ResourceSlice"] = _attempt(kube, resource_slice("e2e-outage", GPU_DRIVER, GPU_NODE, "e2e-outage", 0))
        # The scheduler's claim: a Pod pinned to the DRA Node asking for example.com/gpu (extended-resource path;
        # pinned because the mutating webhook that would steer it is down too).
        kube.create(pod("extended", ns, nodeSelector={"kubernetes.io/hostname": GPU_NODE}))
        eventually(lambda: _failure_event(kube, ns, "extended"), "the scheduler reporting its claim refused", 30)
        observed["scheduler's extended-resource claim"] = BLOCKED if not _bound(kube, ns, "extended") else CREATED
        # The resourceclaim controller's claim for a Pod using a template.
        kube.create(claim_pod("templated", ns, "ready"))
        eventually(lambda: _failure_event(kube, ns, "templated"), "the resourceclaim controller's claim refused", 30)
        observed["resourceclaim controller's claim"] = (
            BLOCKED if not kube.list("resource.k8s.io/v1", "ResourceClaim", ns) else CREATED)
    finally:
        cluster.webhook.start()
        cluster.wait_webhook_active()
        kube.delete("resource.k8s.io/v1", "ResourceSlice", "e2e-outage")
        kube.delete("resource.k8s.io/v1", "DeviceClass", "outage.example.com")
    assert observed == DURING_OUTAGE

    # What slipped through is visible: the Pod admitted during the outage carries no decision annotations.
    assert not [k for k in kube.get("v1", "Pod", "plain", ns)["metadata"].get("annotations") or {}
                if k.startswith("dra-migration.io/")]
    # After the restart everything works again, the retried claims included.
    kube.create(claim("claim", ns))
    eventually(lambda: _bound(kube, ns, "extended"), "the extended-resource Pod bound after the restart", 60)
    eventually(lambda: _bound(kube, ns, "templated"), "the templated Pod's claim created and bound", 60)
