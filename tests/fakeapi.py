"""A small local Kubernetes API server for tests: real JSON over real HTTP, no cluster needed.

It speaks what ``webhook.cluster.api``, ``webhook.cluster.lists`` and ``webhook.cluster.leader`` use: POST (409
AlreadyExists) and PUT (409 Conflict
on a stale ``metadata.resourceVersion``), list endpoints (``kind: XList``, ``metadata.resourceVersion``,
``limit``/``continue``), GET by name, and ``?watch=true`` streams of ``{"type", "object"}`` JSON lines
in a chunked response. Tests drive it: ``put``/``delete`` objects (watchers get ADDED/MODIFIED/DELETED),
``expire()`` to force a 410 Gone (as an ERROR event or an HTTP 410), ``expire_next_continue()`` for a
list's continue token, ``hang(...)``/``fail(...)`` to make
chosen resources slow or failing. Every object goes through kubernetes-validate 1.37 strict, so the
fixtures are objects a 1.37 API server could really return. The client is never patched.
"""

from __future__ import annotations

import copy
import json
import queue
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kubernetes_validate
import yaml

K8S_VERSION = "1.37.0"


@dataclass(frozen=True)
class Kind:
    resource: str
    api_version: str
    kind: str
    namespaced: bool

    @property
    def prefix(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"


KINDS = {
    k.resource: k
    for k in (
        Kind("namespaces", "v1", "Namespace", False),
        Kind("pods", "v1", "Pod", True),
        Kind("deviceclasses", "resource.k8s.io/v1", "DeviceClass", False),
        Kind("resourceclaims", "resource.k8s.io/v1", "ResourceClaim", True),
        Kind("resourceclaimtemplates", "resource.k8s.io/v1", "ResourceClaimTemplate", True),
        Kind("resourceslices", "resource.k8s.io/v1", "ResourceSlice", False),
        Kind("podgroups", "scheduling.k8s.io/v1beta1", "PodGroup", True),
        Kind("horizontalpodautoscalers", "autoscaling/v2", "HorizontalPodAutoscaler", True),
        Kind("leases", "coordination.k8s.io/v1", "Lease", True),
        *(Kind(plural, "apps/v1", kind, True) for kind, plural in (
            ("Deployment", "deployments"), ("ReplicaSet", "replicasets"), ("StatefulSet", "statefulsets"),
            ("DaemonSet", "daemonsets"))),
        Kind("jobs", "batch/v1", "Job", True),
        Kind("cronjobs", "batch/v1", "CronJob", True),
        *(Kind(plural, "admissionregistration.k8s.io/v1", kind, False) for kind, plural in (
            ("ValidatingAdmissionPolicy", "validatingadmissionpolicies"),
            ("ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings"),
            ("MutatingAdmissionPolicy", "mutatingadmissionpolicies"),
            ("MutatingAdmissionPolicyBinding", "mutatingadmissionpolicybindings"),
            ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
            ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"))),
    )
}
BY_KIND = {k.kind: k for k in KINDS.values()}

_CLOSE = object()  # sentinel that ends a watch stream


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status as the API server sends it for errors."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def validate(obj: dict[str, Any]) -> None:
    """Reject anything a 1.37 API server would not serve (unknown fields included)."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:  # pragma: no cover - a broken fixture
        first = str(exc).splitlines()[0]
        raise AssertionError(f"fixture {obj.get('kind')} {obj['metadata'].get('name')} is invalid: {first}") from None


class _Watch:
    def __init__(self, kind: Kind, namespace: str | None) -> None:
        self.kind = kind
        self.namespace = namespace
        self.events: queue.Queue[Any] = queue.Queue()

    def wants(self, kind: Kind, obj: dict[str, Any]) -> bool:
        return kind is self.kind and (self.namespace is None or obj["metadata"].get("namespace") == self.namespace)


class FakeAPI:
    """The server and its state. Use as a context manager, or call ``start()``/``stop()``."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._rv = 100
        self._compacted = 0  # watches from a resourceVersion below this get 410 Gone
        self._expire_as_http = False
        self._expire_next_continue = False
        self._store: dict[str, dict[tuple[str, str], dict[str, Any]]] = {r: {} for r in KINDS}
        self._history: list[tuple[int, Kind, str, dict[str, Any]]] = []
        self._watches: list[_Watch] = []
        self._hang: set[str] = set()
        self._fail: set[str] = set()
        self._release = threading.Event()
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (resource, verb, query)
        # GET /metrics answers this text (None: 403, as without the nonResourceURL rule).
        self.metrics_text: str | None = None
        self.git_version: str | None = "v1.37.0"  # discovery /version; None: answered 404
        # Called as (resource, verb) before a POST or PUT is judged: lets a test write first (a lost race).
        self.before_write: Callable[[str, str], None] | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> FakeAPI:
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakeapi", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        with self._lock:
            for w in self._watches:
                w.events.put(_CLOSE)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def write_kubeconfig(self, directory: Path) -> str:
        """A kubeconfig pointing at this server (plain HTTP, a bearer token)."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester", "namespace": "default"}}],
            "current-context": "fake",
        }
        path = Path(directory) / "kubeconfig"
        path.write_text(yaml.safe_dump(cfg))
        return str(path)

    # -- state changes -----------------------------------------------------------------------------

    def put(self, *objs: dict[str, Any]) -> list[dict[str, Any]]:
        """Create or replace objects; watchers get ADDED or MODIFIED. Returns the stored copies."""
        out = []
        for obj in objs:
            kind = BY_KIND[obj["kind"]]
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            key = (meta.get("namespace", "") if kind.namespaced else "", meta["name"])
            with self._lock:
                old = self._store[kind.resource].get(key)
                self._rv += 1
                meta["resourceVersion"] = str(self._rv)
                meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
                meta.setdefault(
                    "creationTimestamp", old["metadata"]["creationTimestamp"] if old else "2026-09-01T00:00:00Z"
                )
                validate(obj)
                self._store[kind.resource][key] = obj
                self._emit(kind, "MODIFIED" if old else "ADDED", obj)
            out.append(copy.deepcopy(obj))
        return out

    def delete(self, kind_name: str, name: str, namespace: str = "") -> None:
        kind = BY_KIND[kind_name]
        with self._lock:
            obj = self._store[kind.resource].pop((namespace if kind.namespaced else "", name))
            self._rv += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self._rv)
            self._emit(kind, "DELETED", obj)

    def expire(self, as_http: bool = False) -> None:
        """Compact history, forcing a re-list. Open watches end, with a 410 ERROR event; with ``as_http``
        they just close (a dropped connection) and the watch request from the old resourceVersion that
        follows is refused with HTTP 410 instead of an ERROR event."""
        with self._lock:
            self._rv += 1
            self._compacted = self._rv
            self._expire_as_http = as_http
            self._history.clear()
            gone = status(410, "Expired", "too old resource version")
            for w in self._watches:
                if not as_http:
                    w.events.put({"type": "ERROR", "object": gone})
                w.events.put(_CLOSE)

    def expire_next_continue(self) -> None:
        """The next list request with a continue token gets 410 Expired, as after etcd compacted past it."""
        self._expire_next_continue = True

    def hang(self, *resources: str) -> None:
        """Requests for these resources wait (until ``heal()`` or ``stop()``) before being answered."""
        self._release.clear()
        self._hang.update(resources)

    def fail(self, *resources: str) -> None:
        """Requests for these resources get HTTP 500."""
        self._fail.update(resources)

    def heal(self) -> None:
        self._hang.clear()
        self._fail.clear()
        self._release.set()

    def count(self, resource: str, verb: str) -> int:
        with self._lock:
            return sum(1 for r, v, _ in self.requests if r == resource and v == verb)

    def _emit(self, kind: Kind, type_: str, obj: dict[str, Any]) -> None:
        self._history.append((self._rv, kind, type_, copy.deepcopy(obj)))
        for w in self._watches:
            if w.wants(kind, obj):
                w.events.put({"type": type_, "object": copy.deepcopy(obj)})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (budget, stop()) closes its socket: expected here, not worth a traceback


class _Handler(BaseHTTPRequestHandler):
    api: FakeAPI
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if url.path in ("/version", "/version/"):
            if self.api.git_version is None:
                return self._json(404, status(404, "NotFound", "the server could not find the requested resource"))
            return self._json(200, {"major": "1", "minor": "37", "gitVersion": self.api.git_version})
        if url.path in ("/metrics", "/apis", "/apis/"):
            return self._non_resource(url.path)
        route = _route(url.path)
        if route is None:
            message = f"the server could not find the requested resource {url.path}"
            return self._json(404, status(404, "NotFound", message))
        kind, namespace, name = route
        watching = query.get("watch") in ("true", "1")
        verb = "watch" if watching else ("get" if name else "list")
        api = self.api
        with api._lock:
            api.requests.append((kind.resource, verb, query))
        if kind.resource in api._hang:
            api._release.wait(timeout=30)
        if kind.resource in api._fail:
            return self._json(500, status(500, "InternalError", "an error on the server (fake failure)"))
        if name:
            return self._get(kind, namespace, name)
        if watching:
            return self._watch(kind, namespace, query)
        return self._list(kind, namespace, query)

    def do_POST(self) -> None:  # noqa: N802 - create: 409 AlreadyExists when the name is taken
        self._write("create")

    def do_PUT(self) -> None:  # noqa: N802 - replace: 409 Conflict unless metadata.resourceVersion is current
        self._write("update")

    def do_PATCH(self) -> None:  # noqa: N802 - server-side apply only: the applied object replaces the stored one
        url = urlsplit(self.path)
        route = _route(url.path)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        applying = str(self.headers.get("Content-Type")).startswith("application/apply-patch")
        if route is None or route[2] is None or not applying:
            return self._json(415, status(415, "UnsupportedMediaType", f"only apply patches on {url.path}"))
        kind, namespace, name = route
        with self.api._lock:
            self.api.requests.append((kind.resource, "patch", {k: v[-1] for k, v in parse_qs(url.query).items()}))
            if kind.resource in self.api._fail:
                return self._json(500, status(500, "InternalError", "an error on the server (fake failure)"))
            body.setdefault("metadata", {}).update(name=name)
            stored = self.api.put(body)[0]
        self._json(200, stored)

    def do_DELETE(self) -> None:  # noqa: N802
        route = _route(urlsplit(self.path).path)
        if route is None or route[2] is None:
            return self._json(405, status(405, "MethodNotAllowed", f"cannot delete {self.path}"))
        kind, namespace, name = route
        with self.api._lock:
            self.api.requests.append((kind.resource, "delete", {}))
            if (namespace or "", name) not in self.api._store[kind.resource]:
                return self._json(404, status(404, "NotFound", f'{kind.resource} "{name}" not found'))
            self.api.delete(kind.kind, name, namespace or "")
        self._json(200, status(200, "Success", "deleted") | {"status": "Success"})

    def _write(self, verb: str) -> None:
        url = urlsplit(self.path)
        route = _route(url.path)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        api = self.api
        if route is None or (verb == "create") != (route[2] is None):
            return self._json(405, status(405, "MethodNotAllowed", f"{verb} is not supported on {url.path}"))
        kind, namespace, name = route
        name = name or body.get("metadata", {}).get("name", "")
        if api.before_write is not None:
            api.before_write(kind.resource, verb)
        with api._lock:
            api.requests.append((kind.resource, verb, {}))
            if kind.resource in api._fail:
                return self._json(500, status(500, "InternalError", "an error on the server (fake failure)"))
            old = api._store[kind.resource].get((namespace or "", name))
            rv = (body.get("metadata") or {}).get("resourceVersion")
            if verb == "create" and old is not None:
                return self._json(409, status(409, "AlreadyExists", f'{kind.resource} "{name}" already exists'))
            if verb == "update" and old is None:
                return self._json(404, status(404, "NotFound", f'{kind.resource} "{name}" not found'))
            if verb == "update" and rv != old["metadata"]["resourceVersion"]:
                message = (f'Operation cannot be fulfilled on {kind.resource} "{name}": the object has been '
                           "modified; please apply your changes to the latest version and try again")
                return self._json(409, status(409, "Conflict", message))
            body.setdefault("metadata", {}).update(name=name, namespace=namespace)
            body["metadata"].pop("resourceVersion", None)
            stored = api.put(body)[0]
        self._json(201 if verb == "create" else 200, stored)

    def _non_resource(self, path: str) -> None:
        api = self.api
        with api._lock:
            api.requests.append((path, "get", {}))
            text = api.metrics_text
        if path.startswith("/apis"):
            groups = [{"name": "resource.k8s.io", "versions": [{"groupVersion": "resource.k8s.io/v1"}]}]
            return self._json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        if text is None:
            return self._json(403, status(403, "Forbidden", f'forbidden: User cannot get path "{path}"'))
        body = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _get(self, kind: Kind, namespace: str | None, name: str) -> None:
        with self.api._lock:
            obj = self.api._store[kind.resource].get((namespace or "", name))
            obj = copy.deepcopy(obj)
        if obj is None:
            return self._json(404, status(404, "NotFound", f'{kind.resource} "{name}" not found'))
        self._json(200, obj)

    def _list(self, kind: Kind, namespace: str | None, query: dict[str, str]) -> None:
        with self.api._lock:
            items = [
                copy.deepcopy(o)
                for (ns, _), o in sorted(self.api._store[kind.resource].items())
                if (namespace is None or ns == namespace) and _selected(o, query.get("labelSelector"))
            ]
            rv = str(self.api._rv)
        if query.get("continue") and self.api._expire_next_continue:
            self.api._expire_next_continue = False
            message = "The provided continue parameter is too old to display a consistent list result."
            return self._json(410, status(410, "Expired", message))
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0)
        meta: dict[str, Any] = {"resourceVersion": rv}
        if limit and start + limit < len(items):
            meta["continue"] = str(start + limit)
            meta["remainingItemCount"] = len(items) - start - limit
            items = items[start : start + limit]
        else:
            items = items[start:]
        self._json(200, {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": meta, "items": items})

    def _watch(self, kind: Kind, namespace: str | None, query: dict[str, str]) -> None:
        api = self.api
        timeout = float(query.get("timeoutSeconds") or 30)
        since = int(query.get("resourceVersion") or 0)
        w = _Watch(kind, namespace)
        with api._lock:
            if since and since < api._compacted:
                gone = status(410, "Expired", f"too old resource version: {since} ({api._compacted})")
                if api._expire_as_http:
                    return self._json(410, gone)
                w.events.put({"type": "ERROR", "object": gone})
                w.events.put(_CLOSE)
            else:
                for rv, k, type_, obj in api._history:
                    if rv > since and w.wants(k, obj):
                        w.events.put({"type": type_, "object": copy.deepcopy(obj)})
                api._watches.append(w)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self._stream(w, timeout)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with api._lock:
                if w in api._watches:
                    api._watches.remove(w)

    def _stream(self, w: _Watch, timeout: float) -> None:
        try:
            while True:
                try:
                    event = w.events.get(timeout=timeout)
                except queue.Empty:
                    break  # the server-side timeoutSeconds ran out: a normal end of stream
                if event is _CLOSE:
                    break
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
        finally:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            self.close_connection = True

    def _json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _selected(obj: dict[str, Any], selector: str | None) -> bool:
    """``labelSelector`` of ``k=v`` terms (all the fake understands)."""
    labels = obj.get("metadata", {}).get("labels") or {}
    terms = [t.split("=", 1) for t in (selector or "").split(",") if t]
    return all(labels.get(k) == v for k, v in terms)


def _route(path: str) -> tuple[Kind, str | None, str | None] | None:
    """Map an API path to (kind, namespace or None for all, name or None for a collection)."""
    for kind in KINDS.values():
        prefix = kind.prefix
        if not path.startswith(prefix + "/"):
            continue
        parts = path[len(prefix) + 1 :].strip("/").split("/")
        if kind.resource == "namespaces" and parts[0] == "namespaces" and len(parts) <= 2:
            return kind, None, parts[1] if len(parts) == 2 else None
        if parts == [kind.resource]:
            return kind, None, None
        if not kind.namespaced and len(parts) == 2 and parts[0] == kind.resource:
            return kind, None, parts[1]
        if kind.namespaced and len(parts) in (3, 4) and parts[0] == "namespaces" and parts[2] == kind.resource:
            return kind, parts[1], parts[3] if len(parts) == 4 else None
    return None


# -- object builders (shapes of docs/dra-1.37.md §2, §6, §9) -------------------------------------------------


def hpa(ns: str, name: str, target: str, max_replicas: int, kind: str = "Deployment",
        api_version: str = "apps/v1") -> dict[str, Any]:
    """An autoscaling/v2 HorizontalPodAutoscaler, the Kubernetes docs' walkthrough shape (php-apache, CPU 50%)."""
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target},
                     "minReplicas": 1, "maxReplicas": max_replicas,
                     "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}}


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def device_class(name: str, extended_resource_name: str | None = None, driver: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f"device.driver == '{driver or name}'"}}]}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def pod(
    ns: str,
    name: str,
    *,
    requests: dict[str, int] | None = None,
    claims: Iterable[tuple[str, str]] = (),
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    uid: str | None = None,
    node: str | None = "node-a",
    active_deadline: int | None = None,
    pod_group: str | None = None,
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Pod with one container. ``requests`` are extended resources (requests == limits); ``claims`` are
    ``(claim name, template name)`` pairs referenced by the container."""
    container: dict[str, Any] = {"name": "main", "image": "registry.example.com/trainer:1.0"}
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = {k: str(v) for k, v in requests.items()}
        resources["limits"] = {k: str(v) for k, v in requests.items()}
    claims = list(claims)
    if claims:
        resources["claims"] = [{"name": c} for c, _ in claims]
    if resources:
        container["resources"] = resources
    spec: dict[str, Any] = {"containers": [container]}
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimTemplateName": t} for c, t in claims]
    if node:
        spec["nodeName"] = node
    if active_deadline:
        spec["activeDeadlineSeconds"] = active_deadline
    if pod_group:
        spec["schedulingGroup"] = {"podGroupName": pod_group}
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if uid:
        meta["uid"] = uid
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if status:
        obj["status"] = status
    return obj


def resource_claim(
    ns: str,
    name: str,
    *,
    requests: list[dict[str, Any]],
    results: list[dict[str, Any]] | None = None,
    reserved_for: list[dict[str, Any]] | None = None,
    owner: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A v1 ResourceClaim. ``owner`` is a Pod (stored copy): the claim gets its controller ownerReference."""
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "spec": {"devices": {"requests": requests}},
    }
    st: dict[str, Any] = {}
    if results is not None:
        st["allocation"] = {"devices": {"results": results}}
    if reserved_for:
        st["reservedFor"] = reserved_for
    if st:
        obj["status"] = st
    return obj


def resource_claim_template(
    ns: str, name: str, *, requests: list[dict[str, Any]], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A v1 ResourceClaimTemplate: the claim spec sits under ``spec.spec``."""
    spec: dict[str, Any] = {"spec": {"devices": {"requests": requests}}}
    if labels:
        spec["metadata"] = {"labels": dict(labels)}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def exact_request(name: str, device_class: str, count: int = 1, tolerations: list[dict] | None = None) -> dict:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if tolerations:
        exactly["tolerations"] = tolerations
    return {"name": name, "exactly": exactly}


def first_available_request(name: str, device_classes: list[str], count: int = 1) -> dict[str, Any]:
    """A request satisfied by the first of several subrequests (one per class), in order of preference."""
    subs = [{"name": f"option-{i}", "deviceClassName": c, "allocationMode": "ExactCount", "count": count}
            for i, c in enumerate(device_classes)]
    return {"name": name, "firstAvailable": subs}


def reserved_pod(p: dict[str, Any]) -> dict[str, Any]:
    return {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}


def podgroup(ns: str, name: str, min_count: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


# -- a policy for the tests (docs/design.md §2 shape) -------------------------------------------------------------

POLICY_DOC: dict[str, Any] = {
    "apiVersion": "dra-migration.io/v1alpha1",
    "kind": "MigrationPolicy",
    "metadata": {"name": "test-fleet"},
    "spec": {
        "annotationPrefix": "dra-migration.io",
        "resources": [
            {"name": "example.com/gpu", "deviceClassName": "gpu.example.com", "legacyNames": ["vendor.example.com/gpu"]}
        ],
        "cohorts": [
            {
                "name": "pilot-teams",
                "namespaces": {"names": ["ml-*"], "selector": {"matchLabels": {"gpu-migration": "pilot"}}},
                "schedule": [{"stage": "pilot", "from": "2026-12-01"}, {"stage": "migrated", "from": "2027-02-01"}],
            },
            {
                "name": "research",
                "namespaces": {"selector": {"matchLabels": {"division": "research"}}},
                "schedule": [{"stage": "pilot", "from": "2027-01-15"}],
            },
        ],
        "defaultStage": "legacy",
        "trainingJobs": {
            "labels": {"workload.example.com/kind": "training"},
            "anyLabelKeys": ["training.kubeflow.org/job-name"],
            "minActiveDeadlineSeconds": 14400,
            "deviceTolerations": [
                {
                    "key": "example.com/maintenance",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 3600,
                }
            ],
        },
    },
}


def make_policy() -> Any:
    """POLICY_DOC compiled, as the server would hold it."""
    from webhook.policy.compiled import compile_policy
    from webhook.policy.model import MigrationPolicy

    return compile_policy(MigrationPolicy.model_validate(POLICY_DOC), b"test-fleet")


def write_policy(directory: Path) -> str:
    """POLICY_DOC as a policy file, for the CLI's --policy."""
    path = Path(directory) / "policy.yaml"
    path.write_text(yaml.safe_dump(POLICY_DOC, sort_keys=False))
    return str(path)
