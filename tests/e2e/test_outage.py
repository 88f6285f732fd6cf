"""Outage: the webhook stopped (every connection to it reset, as with no ready endpoint behind the Service).

What the SHIPPED webhook configurations (deploy/base/webhooks.yaml, as installed) make the API server do,
per kind. The table below is the statement under test; when the failure policies or matchConditions change,
change the table (and only the table, unless a new kind is added).
"""

from __future__ import annotations

import pytest

from tests.e2e.kube import Kube
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
    # resources.validate: Fail, now that the rules list v1beta2/v1alpha3 (what 1.36 serves; issue 13 item 8).
    "DeviceTaintRule v1beta2": BLOCKED,
    # Claims other components create, for Pods that were themselves admitted:
    # matchCondition exclude-scheduler-extended-resource-claims (user system:kube-scheduler + annotation):
    "scheduler's extended-resource claim": CREATED,
    # matchCondition exclude-resourceclaim-controller (system:serviceaccount:kube-system:resource-claim-controller):
    "resourceclaim controller's claim": CREATED,
    # The same controller under a kube-controller-manager without --use-service-account-credentials writes as
    # system:kube-controller-manager (the harness runs it with the flag, so this identity is impersonated):
    "claim written as system:kube-controller-manager": CREATED,
}


# KNOWN_SCHEDULER_PANIC: kube-scheduler v1.36.2 (this build) panics and exits on a ResourceSlice event
# while a DeviceTaintRule exists ("interface {} is *v1beta2.DeviceTaintRule, not *v1alpha3.DeviceTaintRule",
# k8s.io/dynamic-resource-allocation/resourceslice/tracker/tracker.go syncSlice: its Tracker is typed for
# v1alpha3 rules). Seen with this suite; so no ResourceSlice is created, changed or deleted while a rule exists.
# Selects a driver nothing uses, so creating it evicts nothing.
TAINT_RULE = {
    "apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule", "metadata": {"name": "e2e-outage"},
    "spec": {"deviceSelector": {"driver": "outage.example.com"},
             "taint": {"key": "example.com/maintenance", "effect": "NoExecute"}},
}


def _attempt(kube, obj) -> str:
    try:
        kube.create(obj)
    except AssertionError as exc:  # Denied
        message = getattr(exc, "message", str(exc))
        assert "failed calling webhook" in message, message
        return BLOCKED
    return CREATED


def _as_controller_manager(cluster) -> Kube:
    """The admin acting as kube-controller-manager's own user. The group system:masters only gets past RBAC:
    the condition under test reads the username."""
    api = cluster.cp.api()
    api.set_default_header("Impersonate-User", "system:kube-controller-manager")
    api.set_default_header("Impersonate-Group", "system:masters")
    return Kube(api)


def _manager_claim(ns: str) -> dict:
    """A claim shaped like the resourceclaim controller's: annotated, controlled by a (here absent) Pod."""
    obj = claim("manager-made", ns)
    obj["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "gpu"}
    return obj


def _bound(kube, ns: str, name: str) -> bool:
    return bool(kube.get("v1", "Pod", name, ns)["spec"].get("nodeName"))


def _failure_event(kube, ns: str, name: str) -> str:
    """The scheduler's or the controller's own report (an Event) that creating a claim hit the webhook."""
    mine = [e for e in kube.list("v1", "Event", ns) if e["involvedObject"].get("name") == name]
    for event in mine:
        if "failed calling webhook" in event.get("message", ""):
            return event["message"]
    raise AssertionError(f"events of {name}: {[(e.get('reason'), e.get('message')) for e in mine]}")


def _generated_claim(kube, ns: str) -> bool:
    return any("resource.kubernetes.io/pod-claim-name" in (c["metadata"].get("annotations") or {})
               for c in kube.list("resource.k8s.io/v1", "ResourceClaim", ns))


def _settled(kube, ns: str, pod_name: str, created, what: str) -> str:
    """CREATED once ``created()`` holds, BLOCKED once the component reported the webhook refusing it."""
    def outcome() -> str | None:
        if created():
            return CREATED
        try:
            _failure_event(kube, ns, pod_name)
        except AssertionError:
            return None
        return BLOCKED
    return eventually(outcome, f"{what}: created or refused", 60)


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
        observed["scheduler's extended-resource claim"] = _settled(
            kube, ns, "extended", lambda: _bound(kube, ns, "extended"), "the extended-resource Pod")
        # The resourceclaim controller's claim for a Pod using a template.
        kube.create(claim_pod("templated", ns, "ready"))
        observed["resourceclaim controller's claim"] = _settled(
            kube, ns, "templated", lambda: _generated_claim(kube, ns), "the templated Pod's claim")
        observed["claim written as system:kube-controller-manager"] = _attempt(
            _as_controller_manager(cluster), _manager_claim(ns))
        # Last, after every ResourceSlice change of this test (see KNOWN_SCHEDULER_PANIC).
        observed["DeviceTaintRule v1beta2"] = _attempt(kube, TAINT_RULE)
    finally:
        cluster.webhook.start()
        cluster.wait_webhook_active()
        # The empty slice e2e-outage stays (see KNOWN_SCHEDULER_PANIC): no slice event while the rule may exist.
        kube.delete("resource.k8s.io/v1beta2", "DeviceTaintRule", TAINT_RULE["metadata"]["name"])
        kube.delete("resource.k8s.io/v1", "DeviceClass", "outage.example.com")
    assert observed == DURING_OUTAGE

    # What slipped through is visible: the Pod admitted during the outage carries no decision annotations.
    assert not [k for k in kube.get("v1", "Pod", "plain", ns)["metadata"].get("annotations") or {}
                if k.startswith("dra-migration.io/")]
    # After the restart everything works again, the retried claims included.
    kube.create(claim("claim", ns))
    eventually(lambda: _bound(kube, ns, "extended"), "the extended-resource Pod bound after the restart", 60)
    eventually(lambda: _bound(kube, ns, "templated"), "the templated Pod's claim created and bound", 60)
