"""A DeviceClass asked for by its implicit extended-resource name, ``deviceclass.resource.kubernetes.io/<class>``, on
the real control plane (issue #24 items 5 and 6).

Item 5: until the webhook's DeviceClass watch has synced, such a Pod is not denied as unmapped. The webhook is
ready all the while (readiness never depends on the cluster view), the API server stores the Pod with the
``rule-error`` warning that ``enforcement.ruleErrors`` (Warn) gives it, and once the watch has synced the same Pod
is decided normally: denied while the class does not exist, admitted once it does. The watch is kept from syncing
the way a real cluster does it to a webhook: the API server refuses the list (its ClusterRole loses
``deviceclasses`` for a while, then gets it back).

Item 6: kube-scheduler serves the implicit name with that class through a claim of its own, which no claim rule
judges; so ``claims.allowedDeviceClasses`` holds at the Pod: a class the policy does not allow is denied in a
migrated namespace, and in a pilot namespace (Warn) the stored Pod shows the path it would have taken.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.e2e.conftest import Cluster, policy_variant
from tests.e2e.objects import GPU_DRIVER, GPU_NODE, device_class, pod
from tests.e2e.waits import eventually

CLASS = "e2e-implicit.example.com"
PREFIX = "deviceclass.resource.kubernetes.io/"
NAME = f"{PREFIX}{CLASS}"
WEBHOOK_SA = ("dra-webhook", "dra-webhook")
RBAC = "rbac.authorization.k8s.io/v1"


def _webhook_role(kube) -> dict[str, Any]:
    """The ClusterRole bound to the webhook's ServiceAccount (as the deploy/ overlay named it)."""
    for binding in kube.list(RBAC, "ClusterRoleBinding"):
        accounts = [(s.get("namespace"), s.get("name")) for s in binding.get("subjects") or []
                    if s.get("kind") == "ServiceAccount"]
        if WEBHOOK_SA in accounts:
            role = kube.get(RBAC, "ClusterRole", binding["roleRef"]["name"])
            if any("deviceclasses" in (r.get("resources") or []) for r in role["rules"]):
                return role
    raise AssertionError("no ClusterRole of the webhook's ServiceAccount grants deviceclasses")


def _set_rules(kube, name: str, rules: list[dict[str, Any]]) -> None:
    role = kube.get(RBAC, "ClusterRole", name)
    role["rules"] = rules
    kube.replace(role)


def _may_list_classes(kube) -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": f"system:serviceaccount:{WEBHOOK_SA[0]}:{WEBHOOK_SA[1]}",
                       "resourceAttributes": {"group": "resource.k8s.io", "resource": "deviceclasses",
                                              "verb": "list"}}}
    return bool(kube.create(review).obj["status"].get("allowed"))


def _classes_synced(cluster: Cluster) -> bool:
    return bool(((cluster.webhook.readyz().get("cluster") or {}).get("deviceclasses") or {}).get("synced"))


def test_implicit_class_name_before_and_after_the_device_class_watch_syncs(cluster, kube, namespace, policy):
    # The class is allowed (claims.allowedDeviceClasses) but no policy resource maps it: only
    # unmapped-extended-resource judges it, by whether the cluster has the class.
    policy(policy_variant({"allowedDeviceClasses: [gpu.example.com]":
                           f"allowedDeviceClasses: [gpu.example.com, {CLASS}]"}))
    ns = namespace("mig")  # migrated: Deny
    role = _webhook_role(kube)
    granted = copy.deepcopy(role["rules"])
    revoked = [{**r, "resources": [x for x in r["resources"] if x != "deviceclasses"]} if "deviceclasses" in
               (r.get("resources") or []) else r for r in granted]
    try:
        cluster.webhook.stop()
        _set_rules(kube, role["metadata"]["name"], revoked)
        eventually(lambda: not _may_list_classes(kube), "the API server refusing the webhook's DeviceClass list", 30)
        cluster.webhook.start(synced=("namespaces",))  # ready, its DeviceClass watch refused
        ready = cluster.webhook.readyz()
        assert ready["ready"] is True, ready
        assert ready["cluster"]["deviceclasses"]["synced"] is False, ready["cluster"]

        stored = kube.create(pod("unsynced", ns, resource=NAME))  # stored by the API server: not denied
        assert kube.get("v1", "Pod", "unsynced", ns)["metadata"]["uid"] == stored.obj["metadata"]["uid"]
        [warning] = [w for w in stored.warnings if "unmapped-extended-resource" in w]
        assert "(migrated: rule-error)" in warning and "not judged" in warning, warning
        assert "DeviceClasses not synced yet" in warning, warning

        _set_rules(kube, role["metadata"]["name"], granted)
        eventually(lambda: _classes_synced(cluster), "the webhook's DeviceClass watch synced after the grant", 90,
                   alive=cluster.webhook.dead)
        denied = kube.denial(pod("synced", ns, resource=NAME), dry_run=True)
        assert f"DeviceClass {CLASS} does not exist" in denied.message, denied.message
        assert "rule-error" not in denied.message

        kube.create(device_class(CLASS, GPU_DRIVER))
        admitted = eventually(lambda: (r := kube.create(pod("exists", ns, resource=NAME), dry_run=True))
                              and not r.warnings and r, "the Pod admitted without a finding once the class exists",
                              15)
        assert admitted.obj["metadata"]["name"] == "exists"
    finally:
        if kube.get_or_none("resource.k8s.io/v1", "DeviceClass", CLASS) is not None:
            kube.delete("resource.k8s.io/v1", "DeviceClass", CLASS)
        _set_rules(kube, role["metadata"]["name"], granted)
        if not _classes_synced(cluster):
            cluster.webhook.stop()
            cluster.webhook.start()
        # The refusals this test caused on purpose; any other 403 still fails it (fixture `kube`).
        cluster.reported_forbidden.update(f for f in cluster.forbidden() if "deviceclasses" in f)


OTHER = "e2e-unlisted.example.com"
EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"


@pytest.mark.controllers
def test_a_class_the_policy_does_not_allow_is_not_reachable_by_its_implicit_name(kube, namespace):
    """The e2e policy allows gpu.example.com only; OTHER selects the same driver's devices."""
    kube.create(device_class(OTHER, GPU_DRIVER))
    try:
        mig, pilot = namespace("mig"), namespace("pilot")
        denied = eventually(lambda: kube.denial(pod("other", mig, resource=f"{PREFIX}{OTHER}"), dry_run=True),
                            "the migrated namespace refusing the implicit name", 15)
        assert f"device-class-not-allowed (migrated: Deny): container \"trainer\" requests {PREFIX}{OTHER}: " \
            "DeviceClass not allowed by the policy" in denied.message, denied.message

        stored = kube.create(pod("other", pilot, resource=f"{PREFIX}{OTHER}"))
        assert any(w.startswith("device-class-not-allowed (pilot): ") for w in stored.warnings), stored.warnings

        def bound() -> dict | None:
            p = kube.get("v1", "Pod", "other", pilot)
            return p if p["spec"].get("nodeName") and p.get("status", {}).get("extendedResourceClaimStatus") else None
        p = eventually(bound, "the real scheduler binding the Pod through its own claim", 60)
        assert p["spec"]["nodeName"] == GPU_NODE
        [claim] = kube.list("resource.k8s.io/v1", "ResourceClaim", pilot)
        # What the allowlist must cover: the scheduler's claim asks for OTHER, and no claim rule ever judges it.
        assert claim["metadata"]["annotations"] == {EXTENDED_CLAIM: "true"}
        assert [r["exactly"]["deviceClassName"] for r in claim["spec"]["devices"]["requests"]] == [OTHER]
    finally:
        kube.delete("resource.k8s.io/v1", "DeviceClass", OTHER)
