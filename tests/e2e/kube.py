"""A thin REST helper over the official client: raw JSON in and out, with the API server's warnings.

The generated typed APIs drop the ``Warning`` response headers and round-trip objects through models;
the tests need both the exact stored JSON and the warnings the client would print, so they go through
``ApiClient.call_api`` with ``_preload_content=False``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kubernetes import client

#: kind -> (plural, namespaced). Enough for what the suite creates; extend as needed.
RESOURCES: dict[str, tuple[str, bool]] = {
    "Namespace": ("namespaces", False), "Node": ("nodes", False), "Pod": ("pods", True),
    "ServiceAccount": ("serviceaccounts", True), "ConfigMap": ("configmaps", True), "Event": ("events", True),
    "Deployment": ("deployments", True), "ReplicaSet": ("replicasets", True),
    "StatefulSet": ("statefulsets", True), "DaemonSet": ("daemonsets", True),
    "Job": ("jobs", True), "CronJob": ("cronjobs", True),
    "ResourceClaim": ("resourceclaims", True), "ResourceClaimTemplate": ("resourceclaimtemplates", True),
    "DeviceClass": ("deviceclasses", False), "ResourceSlice": ("resourceslices", False),
    "DeviceTaintRule": ("devicetaintrules", False),
    "ResourcePoolStatusRequest": ("resourcepoolstatusrequests", False),
    "PodGroup": ("podgroups", True), "Workload": ("workloads", True),
    "MutatingWebhookConfiguration": ("mutatingwebhookconfigurations", False),
    "ValidatingWebhookConfiguration": ("validatingwebhookconfigurations", False),
    "ClusterRole": ("clusterroles", False), "PodTemplate": ("podtemplates", True),
    "HorizontalPodAutoscaler": ("horizontalpodautoscalers", True), "Lease": ("leases", True),
    "ClusterRoleBinding": ("clusterrolebindings", False), "SubjectAccessReview": ("subjectaccessreviews", False),
    "MutatingAdmissionPolicy": ("mutatingadmissionpolicies", False),
    "MutatingAdmissionPolicyBinding": ("mutatingadmissionpolicybindings", False),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False),
}

_WARNING = re.compile(r'^\d{3} \S+ "(?P<text>(?:[^"\\]|\\.)*)"')


@dataclass
class Result:
    obj: dict[str, Any]
    warnings: list[str]


class Denied(AssertionError):
    """The API server refused a request; ``status`` and ``message`` are what ``kubectl`` would show."""

    def __init__(self, status: int, message: str, body: dict[str, Any], warnings: list[str] | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message, self.body = status, message, body
        self.warnings = warnings or []  # the API server sends the admission warnings with a refusal too


def path_of(api_version: str, kind: str, namespace: str | None = None, name: str | None = None) -> str:
    plural, namespaced = RESOURCES[kind]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        if not namespace:
            raise ValueError(f"{kind} is namespaced: give a namespace")
        base += f"/namespaces/{namespace}"
    base += f"/{plural}"
    return f"{base}/{name}" if name else base


def _warnings(headers: Any) -> list[str]:
    out = []
    for value in headers.getlist("Warning") if hasattr(headers, "getlist") else [headers.get("Warning")]:
        if not value:
            continue
        m = _WARNING.match(value)
        out.append(m.group("text").replace('\\"', '"') if m else value)
    return out


class Kube:
    """Create / get / patch / delete raw objects as one identity (admin unless another ApiClient is given)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def call(self, method: str, path: str, body: Any = None, query: list[tuple[str, Any]] | None = None,
             content_type: str = "application/json") -> Result:
        request = self.api.param_serialize(
            method, path, query_params=query or [], body=body,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            auth_settings=["BearerToken"],
        )
        resp = self.api.call_api(*request, _request_timeout=60)
        data = resp.read()
        try:
            doc = json.loads(data or b"{}")
        except ValueError:
            doc = {"message": data.decode(errors="replace")}
        if not 200 <= resp.status <= 299:
            raise Denied(resp.status, doc.get("message", ""), doc, _warnings(resp.headers))
        return Result(doc, _warnings(resp.headers))

    def create(self, obj: dict[str, Any], *, dry_run: bool = False, namespace: str | None = None) -> Result:
        ns = namespace or obj.get("metadata", {}).get("namespace")
        query = [("dryRun", "All")] if dry_run else []
        return self.call("POST", path_of(obj["apiVersion"], obj["kind"], ns), obj, query)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        return self.call("GET", path_of(api_version, kind, namespace, name)).obj

    def get_or_none(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.get(api_version, kind, name, namespace)
        except Denied as exc:
            if exc.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             selector: str | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", selector)] if selector else []
        return self.call("GET", path_of(api_version, kind, namespace), query=query).obj.get("items") or []

    def patch(self, api_version: str, kind: str, name: str, patch: dict[str, Any],
              namespace: str | None = None) -> Result:
        return self.call("PATCH", path_of(api_version, kind, namespace, name), patch,
                         content_type="application/merge-patch+json")

    def replace(self, obj: dict[str, Any]) -> Result:
        meta = obj["metadata"]
        return self.call("PUT", path_of(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"]), obj)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None,
               grace: int | None = 0, missing_ok: bool = True) -> None:
        body = {"gracePeriodSeconds": grace} if grace is not None else {}
        try:
            self.call("DELETE", path_of(api_version, kind, namespace, name), body)
        except Denied as exc:
            if not (missing_ok and exc.status == 404):
                raise

    def denial(self, obj: dict[str, Any], *, dry_run: bool = False) -> Denied:
        """Create ``obj`` expecting a refusal; returns it (fails the test if the object was created)."""
        try:
            created = self.create(obj, dry_run=dry_run)
        except Denied as exc:
            return exc
        raise AssertionError(f"expected {obj['kind']} {obj['metadata'].get('name')} to be denied; the API "
                             f"server stored it:\n{json.dumps(created.obj, indent=1)[:3000]}")
