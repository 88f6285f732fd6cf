"""Helpers the end-to-end modules share: the hands-off policy, a dry-run create, the API server's own metrics."""

from __future__ import annotations

import copy
import re
from typing import Any

from tests.e2e.conftest import policy_variant
from tests.e2e.kube import RESOURCES, Denied
from webhook.objects.pods import get_path, pod_templates

ADMIN_ACCESS = {"resource.kubernetes.io/admin-access": "true"}
HANDS_OFF = policy_variant({
    "    pilot: Warn\n    migrated: Deny\n    rules: {gated-feature: Deny,":
    "    pilot: Audit\n    migrated: Audit\n"
    "    rules: {inject-device-tolerations: Off, steer-node-pool: Off, track-rollout: Off,"})
_SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "ownerReferences",
                  "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink")


def _prepared(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A copy ready to create: in ``namespace`` when namespaced, a generated name, no server-set fields."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    for key in _SERVER_FIELDS:
        meta.pop(key, None)
    meta.pop("name", None)
    meta["generateName"] = "corpus-"
    out.pop("status", None)
    namespaced = RESOURCES.get(out.get("kind", ""), ("", True))[1]
    if namespaced:
        meta["namespace"] = namespace
    else:
        meta.pop("namespace", None)
    return out


def _parts(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """What the webhook writes into a kind the API server does not serve: its metadata and pod templates."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k in ("labels", "annotations")}
    parts: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "generateName": "corpus-meta-"}}
    ]
    for ref in pod_templates(obj, str(obj.get("kind") or "")):
        template = copy.deepcopy(get_path(obj, ref.path))
        parts.append({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"generateName": "corpus-template-"},
                      "template": template})
    return parts


def _dry_run(kube: Any, obj: dict[str, Any], namespace: str) -> str | None:
    """None when the API server accepts ``obj`` (dry run), else what it said."""
    attempts = [_prepared(obj, namespace)] if obj.get("kind") in RESOURCES else []
    for attempt in attempts:
        try:
            kube.create(attempt, dry_run=True, namespace=attempt["metadata"].get("namespace"))
            return None
        except Denied as exc:
            if exc.status != 404:  # 404: this version of the kind is not served here
                return f"HTTP {exc.status}: {exc.message}"
    for part in _parts(obj):
        part["metadata"]["namespace"] = namespace
        try:
            kube.create(part, dry_run=True, namespace=namespace)
        except Denied as exc:
            return f"{part['kind']} of it: HTTP {exc.status}: {exc.message}"
    return None


def _apiserver_counts(kube: Any, metric: str) -> dict[str, float]:
    """A per-webhook counter of the API server's /metrics (CREATE only), summed over its other labels."""
    request = kube.api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    resp = kube.api.call_api(*request, _request_timeout=60)
    assert resp.status == 200, resp.status
    out: dict[str, float] = {}
    for line in resp.read().decode().splitlines():
        if line.startswith(metric + "{") and 'operation="CREATE"' in line:
            name = re.search(r'name="([^"]+)"', line)
            if name:
                out[name.group(1)] = out.get(name.group(1), 0.0) + float(line.rsplit(" ", 1)[1])
    return out
