"""What ``dra-webhook audit`` reads: every object the webhook judges, kind by kind, page by page.

Pods, the built-in workload kinds (``webhook.objects.pods.KINDS``: apps, batch and the training / serving CRDs
the webhook knows), the policy's ``workloadKinds``, ResourceClaims and ResourceClaimTemplates, each as a lazy
stream (``webhook.cluster.lists``: one page in memory). A kind the API server does not serve (HTTP 404: the CRD
is not installed) is an empty stream and a note in ``notes``. A policy-named kind whose versions are ``*`` is read
at the version the API server prefers (``/apis`` discovery).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook.cluster import lists
from webhook.cluster.api import call_raw, describe_error
from webhook.objects.pods import KINDS
from webhook.rules.view import ABSENT, Autoscaler, ClusterView, Lookup

if TYPE_CHECKING:
    from webhook.devices.selectors import DeviceAnswers
    from webhook.gates.cluster import ClusterGates

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


class NamespaceClaims:
    """The live view, with ResourceClaim and ResourceClaimTemplate lookups answered from one namespace's paged list.

    ``audit`` judges objects namespace by namespace (a list comes in key order: namespace, then name), and a Pod's
    rules look up the claims and templates it names: one GET each through the live view, the webhook's way on the
    request path, is a round trip per claimed Pod. Here the first lookup in a namespace lists that namespace's
    claims (or templates) once and later ones in it are dictionary lookups; only the current namespace's are held.
    A list that fails answers unknown, as the live view's lookups do.
    """

    def __init__(self, view: ClusterView, api: client.ApiClient) -> None:
        self._view = view
        self._api = api
        self._held: dict[str, tuple[str, dict[str, dict[str, Any]] | str]] = {}  # resource -> (namespace, by name)

    def _named(self, resource: str, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        held = self._held.get(resource)
        if held is None or held[0] != namespace:
            held = self._held[resource] = (namespace, self._list(resource, namespace))
        by_name = held[1]
        if isinstance(by_name, str):
            return Lookup.unknown(by_name)
        found = by_name.get(name)
        return ABSENT if found is None else Lookup(found)

    def _list(self, resource: str, namespace: str) -> dict[str, dict[str, Any]] | str:
        try:
            objects: Iterator[dict[str, Any]] = lists.stream(self._api, resource, namespace)
            return {str((o.get("metadata") or {}).get("name")): o for o in objects}
        except Exception as exc:  # as the live view: a lookup never raises, it is unknown and says why
            return f"listing {resource} in {namespace}: {describe_error(exc)}"

    def get_resource_claim(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return self._named("resourceclaims", namespace, name)

    def get_resource_claim_template(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return self._named("resourceclaimtemplates", namespace, name)

    # -- the rest is the live view's

    def namespace_labels(self, name: str) -> Lookup[Mapping[str, str]]:
        return self._view.namespace_labels(name)

    def device_classes(self) -> Lookup[Mapping[str, dict[str, Any]]]:
        return self._view.device_classes()

    def extended_resource_classes(self) -> Lookup[Mapping[str, str]]:
        return self._view.extended_resource_classes()

    def device_index(self) -> Lookup[DeviceAnswers]:
        return self._view.device_index()

    def get_pod(self, namespace: str, name: str, uid: str | None = None) -> Lookup[dict[str, Any]]:
        return self._view.get_pod(namespace, name, uid)

    def get_podgroup(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return self._view.get_podgroup(namespace, name)

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Lookup[Autoscaler]:
        return self._view.autoscaler(namespace, group, kind, name)

    def feature_gates(self) -> Lookup[ClusterGates]:
        return self._view.feature_gates()

    def status(self) -> dict[str, Any]:
        return {**self._view.status(), "claims": "listed per namespace (audit)"}
