"""What ``dra-webhook audit`` reads: every object the webhook judges, kind by kind, page by page.

Pods, the built-in workload kinds (``webhook.objects.pods.KINDS``: apps, batch and the training / serving CRDs
the webhook knows), the policy's ``workloadKinds``, ResourceClaims and ResourceClaimTemplates, each as a lazy
stream (``webhook.cluster.lists``: one page in memory). A kind the API server does not serve (HTTP 404: the CRD
is not installed) is an empty stream and a note in ``notes``. A policy-named kind whose versions are ``*`` is read
at the version the API server prefers (``/apis`` discovery).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook.cluster import lists
from webhook.cluster.api import call_raw
from webhook.objects.pods import KINDS

#: (group, version, kind, objects): the shape ``webhook.offline.audit.audit`` takes.
Listed = tuple[str, str, str, Iterator[dict[str, Any]]]


def namespace_labels(api: client.ApiClient, namespace: str | None = None) -> dict[str, dict[str, str]]:
    """Every Namespace's labels by name (``namespace``: only that one's; empty when it does not exist)."""
    def labels(obj: dict[str, Any]) -> tuple[str, dict[str, str]]:
        meta = obj.get("metadata") or {}
        return str(meta.get("name")), dict(meta.get("labels") or {})

    found = dict(lists.stream(api, "namespaces", project=labels))
    return {k: v for k, v in found.items() if namespace is None or k == namespace}


def workload_resources(
    custom: Iterable[tuple[str, str, str, tuple[str, ...]]],
) -> dict[tuple[str, str, str, str], bool]:
    """(group, version or ``*``, kind, plural) of every workload kind but Pod -> whether the policy names it: the
    built-in ones, then ``custom`` ((group, kind, plural, versions) of the policy's workloadKinds)."""
    out = {(k.group, k.versions[0], k.kind, k.resource): False for k in KINDS if k.kind != "Pod"}
    for group, kind, plural, versions in custom:
        out.setdefault((group, versions[0] if versions else "*", kind, plural), True)
    return out


def audit_lists(api: client.ApiClient, custom: Iterable[tuple[str, str, str, tuple[str, ...]]],
                namespace: str | None, notes: list[str], on_page: lists.OnPage | None = None) -> Iterator[Listed]:
    """Every kind ``audit`` judges, each a lazy stream (see the module docstring)."""
    yield "", "v1", "Pod", lists.stream(api, "pods", namespace, on_page=on_page)
    preferred: dict[str, str] | None = None
    for (group, version, kind, plural), named in workload_resources(custom).items():
        if version == "*":
            preferred = preferred if preferred is not None else preferred_versions(api)
            if group not in preferred:
                notes.append(f"{kind}.{group}: not served by the API server (no such API group); not audited")
                continue
            version = preferred[group]
        objects = lists.stream_custom(api, group, version, plural, namespace, on_page)
        # A known CRD not installed is the usual case: only a kind the policy names is worth a note.
        yield group, version, kind, _served(objects, f"{plural}.{group}/{version}", notes if named else [])
    for resource, kind in (("resourceclaims", "ResourceClaim"), ("resourceclaimtemplates", "ResourceClaimTemplate")):
        yield "resource.k8s.io", "v1", kind, _served(lists.stream(api, resource, namespace, on_page=on_page),
                                                      f"{resource}.resource.k8s.io/v1", notes)


def _served(objects: Iterator[dict[str, Any]], what: str, notes: list[str]) -> Iterator[dict[str, Any]]:
    """``objects``, or nothing and a note when the API server does not serve them (404)."""
    try:
        yield from objects
    except ApiException as exc:
        if exc.status != 404:
            raise
        notes.append(f"{what}: not served by the API server; not audited")


def preferred_versions(api: client.ApiClient) -> dict[str, str]:
    """API group -> the version the API server prefers (``GET /apis``)."""
    body = call_raw(client.ApisApi(api).get_api_versions)
    out = {}
    for group in body.get("groups") or ():
        version = (group.get("preferredVersion") or {}).get("version")
        if isinstance(group.get("name"), str) and isinstance(version, str):
            out[group["name"]] = version
    return out
