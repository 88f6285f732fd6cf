"""A second scheduler's extended-resource claims during an outage (issue 13 item 11), on the real API server.

The shipped matchCondition ``exclude-scheduler-extended-resource-claims`` lets only ``system:kube-scheduler``'s
claims past a stopped webhook. A second scheduler under a ServiceAccount is added by the README's overlay patch
("A second scheduler"), applied here exactly as written (its JSON patch ops) to the installed configurations:
then that ServiceAccount's claims are stored while the webhook is down, and any other identity's claim of the
same shape is still refused (``resources.validate``: failurePolicy Fail).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.e2e.kube import Denied, Kube
from tests.e2e.objects import GPU_CLASS, pod
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers
ROOT = Path(__file__).resolve().parents[2]
CONFIGS = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
           "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}
SCHEDULER_SA = ("kube-system", "gpu-scheduler")  # the README's example
CREATED, BLOCKED = "created", "blocked"


def _readme_patches() -> dict[str, list[dict[str, Any]]]:
    """kind -> the JSON patch ops of the README's overlay snippet."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("#### A second scheduler"):]
    start = section.index("```yaml\n") + len("```yaml\n")
    doc = yaml.safe_load(section[start:section.index("```\n", start)])
    return {p["target"]["kind"]: yaml.safe_load(p["patch"]) for p in doc["patches"]}


def _json_patch(kube: Kube, kind: str, ops: list[dict[str, Any]]) -> None:
    kube.call("PATCH", f"/apis/admissionregistration.k8s.io/v1/{CONFIGS[kind]}/dra-migration-webhook", ops,
              content_type="application/json-patch+json")


def _acting_as(cluster: Any, kube: Kube, ns: str, sa_ns: str, name: str, tmp_path: Path) -> Kube:
    """A client authenticated as ServiceAccount ``sa_ns/name`` that may create ResourceClaims in ``ns``."""
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": sa_ns}})
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    kube.call("POST", f"{rbac}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": f"claims-{name}", "namespace": ns},
        "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["create", "get"]}]})
    kube.call("POST", f"{rbac}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"claims-{name}", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"claims-{name}"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": sa_ns}]})
    token = client.CoreV1Api(cluster.api).create_namespaced_service_account_token(
        name, sa_ns, {"spec": {"expirationSeconds": 3600}}).status.token
    kubeconfig = cluster.cp.pki.kubeconfig(tmp_path / f"{name}.kubeconfig", cluster.cp.server,
                                           f"system:serviceaccount:{sa_ns}:{name}", token=token)
    return Kube(cluster.cp.api(kubeconfig))


def _scheduler_claim(name: str, ns: str, owner: dict[str, Any]) -> dict[str, Any]:
    """What a scheduler writes in PreBind (extendeddynamicresources.go preFilterExtendedResources)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": owner["metadata"]["name"],
                                              "uid": owner["metadata"]["uid"], "controller": True}]},
            "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {
                "deviceClassName": GPU_CLASS, "allocationMode": "ExactCount", "count": 1}}]}}}


def _attempt(as_user: Kube, obj: dict[str, Any]) -> str:
    try:
        as_user.create(obj)
    except Denied as exc:
        assert "failed calling webhook" in exc.message, exc.message
        return BLOCKED
    return CREATED


def test_second_scheduler_claims_pass_an_outage_once_the_readme_patch_is_applied(cluster, kube, namespace, tmp_path):
    ns = namespace("pilot")
    owner = kube.create(pod("owner", ns, resource=None)).obj
    scheduler = _acting_as(cluster, kube, ns, *SCHEDULER_SA, tmp_path)
    other = _acting_as(cluster, kube, ns, ns, "not-a-scheduler", tmp_path)
    patches = _readme_patches()
    originals = {kind: kube.call("GET", f"/apis/admissionregistration.k8s.io/v1/{CONFIGS[kind]}/"
                                 "dra-migration-webhook").obj for kind in CONFIGS}
    cluster.webhook.stop()
    try:
        # Shipped configuration: only system:kube-scheduler is excluded, so the second scheduler is refused.
        assert _attempt(scheduler, _scheduler_claim("before", ns, owner)) == BLOCKED
        for kind, ops in patches.items():
            _json_patch(kube, kind, ops)
        # The API server picks the new configuration up from its informer: retry until it does.
        assert eventually(lambda: _attempt(scheduler, _scheduler_claim("after", ns, owner)) == CREATED,
                          "the second scheduler's claim stored during the outage", 30)
        assert _attempt(other, _scheduler_claim("other", ns, owner)) == BLOCKED
    finally:
        for kind, cfg in originals.items():  # restore the installed configuration exactly
            live = kube.call("GET", f"/apis/admissionregistration.k8s.io/v1/{CONFIGS[kind]}/dra-migration-webhook").obj
            cfg["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            kube.call("PUT", f"/apis/admissionregistration.k8s.io/v1/{CONFIGS[kind]}/dra-migration-webhook", cfg)
        cluster.webhook.start()
        cluster.wait_webhook_active()
        kube.delete("v1", "ServiceAccount", SCHEDULER_SA[1], SCHEDULER_SA[0])
    stored = kube.get("resource.k8s.io/v1", "ResourceClaim", "after", ns)
    assert stored["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
