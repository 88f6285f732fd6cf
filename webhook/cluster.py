"""The only module that talks to the API server (official ``kubernetes`` client).

Two users: the webhook, through ``LiveView`` (a ``webhook.view.ClusterView`` backed by list+watch caches of
Namespaces, DeviceClasses, ResourceSlices and HorizontalPodAutoscalers, and by briefly cached, strictly
budgeted GETs of owner Pods, PodGroups and the ResourceClaims / ResourceClaimTemplates a Pod names), and the
``report``/``preflight`` commands, through the ``list_*`` functions. Everything comes back as raw JSON dicts
(``_preload_content=False``): lossless, and the same shape the rules see in AdmissionReviews. On the request
path nothing here may block longer than the lookup budget or raise: an answer that is not there in time is
``None``, and ``degraded_reason(kind)`` says why.
"""

from __future__ import annotations

import collections
import concurrent.futures
import copy
import enum
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final

from kubernetes import client, config, watch
from kubernetes.client import rest as kube_rest
from kubernetes.client.exceptions import ApiException as ApiException  # re-exported: commands catch it

from webhook.cel_devices import DeviceAnswers, DeviceIndex, build_index
from webhook.cluster_gates import ClusterGates, parse_metrics, served_versions
from webhook.device_client import SharedDevices
from webhook.device_store import SliceKeeper, over_budget_reason, stored_slices
from webhook.view import Autoscaler, ScaleTarget, autoscaler_index, autoscaler_target, extended_resource_map

log = logging.getLogger(__name__)

# What the webhook and the report/preflight commands read, as ClusterRole rules. The webhook itself needs
# namespaces (list/watch, get on cache misses), deviceclasses (list/watch), pods (get: owner lookups),
# podgroups (get: shared-claim lookups), resourceclaims and resourceclaimtemplates (get: the DeviceClasses a
# Pod's claims ask for, for mixed-allocation), horizontalpodautoscalers (list/watch: shared-claim-limit counts an
# autoscaler's maxReplicas); `report` and `preflight` list pods, resourceclaims, namespaces
# and deviceclasses. Nothing is ever written.
REQUIRED_RBAC: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["namespaces", "pods"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["deviceclasses", "resourceclaims"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"], "verbs": ["get"]},
    # unsatisfiable-claim: the devices of every driver (list/watch).
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list", "watch"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups"], "verbs": ["get"]},
    # shared-claim-limit: the HPAs that scale a workload naming a shared claim (list/watch).
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list", "watch"]},
    # featureGates auto: the API server's kubernetes_feature_enabled samples (discovery needs no rule).
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
)

PAGE_SIZE = 500


class ClusterError(RuntimeError):
    """The cluster could not be reached or configured; the message is meant for a human."""


def connect(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from ``kubeconfig``, else ``$KUBECONFIG``, else in-cluster config, else ~/.kube/config.

    Reads configuration only: no request is made and no thread started (safe before gunicorn forks).
    """
    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    if path and not any(os.path.exists(os.path.expanduser(p)) for p in path.split(os.pathsep) if p):
        raise ClusterError(f"kubeconfig {path} does not exist")
    try:
        if path:
            config.load_kube_config(config_file=path, client_configuration=cfg, persist_config=False)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        elif os.path.exists(os.path.expanduser("~/.kube/config")):
            config.load_kube_config(
                config_file=os.path.expanduser("~/.kube/config"), client_configuration=cfg, persist_config=False
            )
        else:
            raise ClusterError(
                "no cluster configuration: pass --kubeconfig, set KUBECONFIG, or run in a Pod with a service account"
            )
    except config.ConfigException as exc:
        raise ClusterError(f"cannot load cluster configuration{f' from {path}' if path else ''}: {exc}") from None
    except OSError as exc:
        raise ClusterError(f"cannot read kubeconfig {path}: {exc.strerror or exc}") from None
    return client.ApiClient(configuration=cfg)


def describe_error(exc: BaseException) -> str:
    """One line for logs, status and audit annotations: HTTP status and the API's message, or the error."""
    if isinstance(exc, ApiException):
        message = ""
        try:
            message = (json.loads(exc.body or "") or {}).get("message", "")
        except (ValueError, AttributeError):
            pass
        text = f"HTTP {exc.status} {exc.reason or ''}".rstrip()
        return f"{text}: {message}" if message else text
    pool, reason = getattr(exc, "pool", None), getattr(exc, "reason", None)
    if type(exc).__name__ == "MaxRetryError" and pool is not None:
        # urllib3 gave up connecting: say where and why in a few words, not the retry machinery.
        why = str(reason).rsplit(": ", 1)[-1] if reason is not None else "no response"
        return f"cannot reach the API server at {pool.host}:{pool.port}: {why}"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def quiet_client_logs() -> None:
    """For one-shot commands: urllib3's per-retry WARNING lines are noise next to our one-line error."""
    logging.getLogger("urllib3").setLevel(logging.ERROR)


# -- raw JSON calls -------------------------------------------------------------------------------------


def _call_raw(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call a generated API method and return its JSON body as a dict (no model round trip)."""
    resp = fn(*args, _preload_content=False, **kwargs)
    try:
        body = json.loads(resp.data)
    finally:
        resp.release_conn()
    if not isinstance(body, dict):
        raise ValueError(f"the API server answered with a JSON {type(body).__name__}, expected an object")
    return body


def _list_raw(
    fn: Callable[..., Any], *args: Any, request_timeout: float | tuple[float, float] | None = None, **kwargs: Any
) -> tuple[list[dict[str, Any]], str]:
    """All items of a (paginated) list call and the list's resourceVersion."""
    items: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        page = _call_raw(fn, *args, limit=PAGE_SIZE, _continue=token, _request_timeout=request_timeout, **kwargs)
        items.extend(page.get("items") or [])
        meta = page.get("metadata") or {}
        token = meta.get("continue") or None
        if not token:
            return items, meta.get("resourceVersion", "")


def list_namespaces(api: client.ApiClient) -> list[dict[str, Any]]:
    return _list_raw(client.CoreV1Api(api).list_namespace)[0]


def get_namespace(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    """A Namespace, or None when it does not exist."""
    try:
        return _call_raw(client.CoreV1Api(api).read_namespace, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_pods(api: client.ApiClient, namespace: str | None = None) -> list[dict[str, Any]]:
    core = client.CoreV1Api(api)
    if namespace:
        return _list_raw(core.list_namespaced_pod, namespace)[0]
    return _list_raw(core.list_pod_for_all_namespaces)[0]


def list_claims(api: client.ApiClient, namespace: str | None = None) -> list[dict[str, Any]]:
    """resource.k8s.io/v1 ResourceClaims."""
    res = client.ResourceV1Api(api)
    if namespace:
        return _list_raw(res.list_namespaced_resource_claim, namespace)[0]
    return _list_raw(res.list_resource_claim_for_all_namespaces)[0]


def list_device_classes(api: client.ApiClient) -> list[dict[str, Any]]:
    return _list_raw(client.ResourceV1Api(api).list_device_class)[0]


def _get_text_lines(api: client.ApiClient, path: str, timeout: float | tuple[float, float]) -> Iterator[str]:
    """GET a non-resource text path (``/metrics``) with the client's credentials, line by line."""
    params = api.param_serialize(
        "GET", path, header_params={"Accept": "text/plain", "Accept-Encoding": "gzip"}, auth_settings=["BearerToken"]
    )
    resp = api.call_api(*params, _request_timeout=timeout).response  # the urllib3 response, not read yet
    if resp.status >= 300:
        resp.read()
        raise ApiException(http_resp=kube_rest.RESTResponse(resp))
    try:
        rest = b""
        for chunk in resp.stream(1 << 16, decode_content=True):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if line.startswith(b"kubernetes_feature_enabled"):
                    yield line.decode("utf-8", "replace")
        if rest.startswith(b"kubernetes_feature_enabled"):
            yield rest.decode("utf-8", "replace")
    finally:
        resp.release_conn()


def read_feature_gates(api: client.ApiClient, timeout: float | tuple[float, float] = (5.0, 30.0)) -> ClusterGates:
    """The API server's gate states (``/metrics``) and served group/versions (``/apis`` discovery).

    Raises ApiException (e.g. 403 without the nonResourceURL rule) or ValueError (no gate samples).
    """
    enabled, stages = parse_metrics(_get_text_lines(api, "/metrics", timeout))
    try:
        served = served_versions(_call_raw(client.ApisApi(api).get_api_versions, _request_timeout=timeout))
    except Exception as exc:  # discovery is informational: the gates stand without it
        log.info("API discovery failed, served versions unknown: %s", describe_error(exc))
        served = frozenset()
    return ClusterGates(MappingProxyType(enabled), MappingProxyType(stages), served)


def list_migration_objects(
    api: client.ApiClient,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Namespaces, Pods, ResourceClaims and DeviceClasses of the whole cluster (the live gauges' read).

    DeviceClasses are None when resource.k8s.io/v1 is not served (404): no mapping check then.
    """
    namespaces, pods, claims = list_namespaces(api), list_pods(api), list_claims(api)
    try:
        classes: list[dict[str, Any]] | None = list_device_classes(api)
    except ApiException as exc:
        if exc.status != 404:
            raise
        classes = None
    return namespaces, pods, claims, classes


def apply_policy_reports(
    api: client.ApiClient,
    reports: list[dict[str, Any]],
    group: str,
    version: str,
    plural: str,
    selector: str,
    namespace: str | None = None,
) -> list[str]:
    """Create or replace ``reports``, and delete our earlier reports (``selector``) for namespaces no longer
    reported, in ``namespace`` or everywhere. Returns one line per change. RBAC: get, list, create, update,
    delete on ``plural`` in ``group`` (deploy/policyreports/rbac.yaml).
    """
    custom = client.CustomObjectsApi(api)
    try:
        if namespace:
            existing = _call_raw(custom.list_namespaced_custom_object, group, version, namespace, plural,
                                 label_selector=selector)
        else:
            existing = _call_raw(custom.list_cluster_custom_object, group, version, plural, label_selector=selector)
    except ApiException as exc:
        if exc.status == 404:
            raise ClusterError(
                f"{plural}.{group}/{version} is not served by this cluster: install its CRD first "
                "(Kyverno or Policy Reporter install it)") from None
        raise
    current = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in existing.get("items") or []}
    done: list[str] = []
    for obj in reports:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        old = current.pop(key, None)
        if old is None:
            _call_raw(custom.create_namespaced_custom_object, group, version, key[0], plural, obj)
            done.append(f"created {plural}.{group} {key[0]}/{key[1]}")
        else:
            body = {**obj, "metadata": {**meta, "resourceVersion": old["metadata"]["resourceVersion"]}}
            _call_raw(custom.replace_namespaced_custom_object, group, version, key[0], plural, key[1], body)
            done.append(f"updated {plural}.{group} {key[0]}/{key[1]}")
    for ns, name in sorted(current):
        try:
            _call_raw(custom.delete_namespaced_custom_object, group, version, ns, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        done.append(f"deleted {plural}.{group} {ns}/{name} (namespace no longer in the report)")
    return done


# -- the live view --------------------------------------------------------------------------------------

class _Unknown(enum.Enum):
    """A lookup that did not answer (budget, error): distinct from "absent" (None)."""

    UNKNOWN = "unknown"


_UNKNOWN: Final = _Unknown.UNKNOWN
#: What a budgeted lookup gives: the object, None when absent (404), or _UNKNOWN.
_Answer = dict[str, Any] | None | _Unknown


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _namespaced_name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class _Informer:
    """List+watch state of one resource (all namespaces): objects by ``key``, resourceVersion, sync flags."""

    def __init__(self, name: str, list_fn: Callable[..., Any], keep: Callable[[dict[str, Any]], Any],
                 key: Callable[[dict[str, Any]], str] = _name) -> None:
        self.name = name
        self.list_fn = list_fn
        self.keep = keep  # what to store per object (labels only for namespaces)
        self.key = key  # the name; namespace/name for a namespaced resource
        self.lock = threading.Lock()
        self.store: dict[str, Any] = {}
        self.rv: str | None = None
        self.synced = False
        self.watching = False
        self.version = 0  # bumped on every change of a kept value, for snapshots
        self.relists = 0
        self.expired = 0
        self.errors = 0
        self.last_error: str | None = None
        self.watch = watch.Watch(return_type="object")  # "object": events stay raw dicts
        self.thread: threading.Thread | None = None
        self.changed: Callable[[], None] | None = None  # called (in the watch thread) after each change

    def replace(self, items: list[dict[str, Any]], rv: str) -> None:
        store = {self.key(o): self.keep(o) for o in items}
        with self.lock:
            self.store = store
            self.rv = rv
            self.synced = True
            self.version += 1
            self.relists += 1
        if self.changed is not None:
            self.changed()

    def apply(self, type_: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        with self.lock:
            if type_ in ("ADDED", "MODIFIED"):
                key, kept = self.key(obj), self.keep(obj)
                if key not in self.store or self.store[key] != kept:  # an HPA's status churn keeps the same
                    self.version += 1
                self.store[key] = kept
            elif type_ == "DELETED":
                self.store.pop(self.key(obj), None)
                self.version += 1
            if meta.get("resourceVersion"):
                self.rv = meta["resourceVersion"]
        if self.changed is not None and type_ in ("ADDED", "MODIFIED", "DELETED"):
            self.changed()

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {
                "synced": self.synced,
                "watching": self.watching,
                "resourceVersion": self.rv,
                "objects": len(self.store),
                "relists": self.relists,
                "expired": self.expired,
                "errors": self.errors,
                "lastError": self.last_error,
            }


def _labels(ns: dict[str, Any]) -> dict[str, str]:
    return dict((ns.get("metadata") or {}).get("labels") or {})


def _whole(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


class LiveView:
    """``ClusterView`` over the API server: watched caches plus budgeted, briefly cached GETs.

    Nothing starts at construction or import: ``start()`` (or the first lookup, or ``status()``) starts the
    watch threads in the calling process, and a fork (gunicorn worker) is detected and started afresh, so
    every worker has its own threads and connections. Lookups never raise and never wait longer than
    ``budget`` seconds; ``None`` means unknown or absent, and ``degraded_reason(kind)`` (kinds:
    ``namespace``, ``deviceclass``, ``pod``, ``podgroup``, ``resourceclaim``, ``resourceclaimtemplate``,
    ``resourceslice``, ``autoscaler``)
    tells the calling thread which, if unknown.
    """

    def __init__(
        self,
        api: client.ApiClient,
        *,
        budget: float = 0.2,
        cache_ttl: float = 5.0,
        cache_size: int = 2048,
        lookup_timeout: float = 2.0,
        max_inflight: int = 64,
        lookup_threads: int = 4,
        watch_timeout: int = 300,
        backoff: tuple[float, float] = (0.5, 30.0),
        gates_interval: float = 120.0,
        max_devices: int = 20_000,
        devices: SharedDevices | None = None,
    ) -> None:
        self.budget = budget
        # unsatisfiable-claim: devices stored and indexed (memory budget, README "Memory"); past it, unknown.
        self.max_devices = max_devices
        self._relist_slices_after = 0.0
        # This replica's device process (webhook.device_service) holds the slices: no ResourceSlice watch here.
        self._shared_devices = devices
        self._devices: DeviceIndex | None = None
        self._devices_reason: str | None = "ResourceSlices not synced yet"
        self._reindex_lock = threading.Lock()
        # Our own client over a copy of the configuration, without urllib3's hidden retries: the view
        # retries with its own backoff, and a retried GET would overrun the lookup budget unseen.
        self._configuration = copy.deepcopy(api.configuration)
        self._configuration.retries = False
        self._api = client.ApiClient(configuration=self._configuration)
        self._ttl = cache_ttl
        self._cache_size = cache_size
        self._lookup_timeout = (min(lookup_timeout, 5.0), lookup_timeout)  # (connect, read)
        self._max_inflight = max_inflight
        self._lookup_threads = lookup_threads
        self._watch_timeout = watch_timeout
        self._backoff = backoff
        self._lock = threading.Lock()
        self._local = threading.local()
        self._pid: int | None = None
        self._stop = threading.Event()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._cache: collections.OrderedDict[tuple[str, ...], tuple[float, dict[str, Any] | None]] = (
            collections.OrderedDict())
        self._inflight: dict[tuple[str, ...], concurrent.futures.Future[dict[str, Any] | None]] = {}
        self._recent_errors: collections.deque[str] = collections.deque(maxlen=5)
        self._dc_snapshot: tuple[int, Mapping[str, dict[str, Any]], Mapping[str, str]] | None = None
        self._hpa_snapshot: tuple[int, dict[ScaleTarget, Autoscaler]] | None = None
        # featureGates auto: the last good reading, kept when a later one fails (never read on requests).
        self._gates_interval = gates_interval
        self._gates: ClusterGates | None = None
        self._gates_error: str | None = None
        self._gates_thread: threading.Thread | None = None
        self._build_informers()

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None, **kwargs: Any) -> LiveView:
        """Load the configuration now (errors surface at startup); nothing connects until ``start()``."""
        return cls(connect(kubeconfig), **kwargs)

    def _build_informers(self) -> None:
        core = client.CoreV1Api(self._api)
        res = client.ResourceV1Api(self._api)
        self._namespaces = _Informer("namespaces", core.list_namespace, _labels)
        self._classes = _Informer("deviceclasses", res.list_device_class, _whole)
        # Slices are projected when they arrive (webhook.device_store: compact JSON of what selectors read, at
        # most max_devices devices stored) and
        # the index with every DeviceClass selector's answer is rebuilt in the watch thread, never on a request.
        self._keeper = SliceKeeper(self.max_devices)  # projects each slice; stores at most max_devices devices
        self._slices = _Informer("resourceslices", res.list_resource_slice, self._keeper)
        self._classes.changed = self._slices.changed = self._reindex
        # HPAs: only what shared-claim-limit needs (scale target and replica bounds), by namespace/name.
        self._hpas = _Informer("horizontalpodautoscalers",
                               client.AutoscalingV2Api(self._api).list_horizontal_pod_autoscaler_for_all_namespaces,
                               autoscaler_target, key=_namespaced_name)
        self._informers = (self._namespaces, self._classes, self._hpas) + (
            (self._slices,) if self._shared_devices is None else ())

    def _reindex(self) -> None:
        """Rebuild the device index after a slice or class change; keeps selector answers of unchanged slices.

        Both watch threads call it: one at a time, each reading the stores when it runs, so the last index
        set is built from the newest state.
        """
        if not self._slices.synced:
            return
        with self._reindex_lock:
            self._reindex_locked()

    def _reindex_locked(self) -> None:
        with self._slices.lock:
            values = list(self._slices.store.values())
            stored, over, refill = self._keeper.reconcile(self._slices.store)
        with self._classes.lock:
            classes = list(self._classes.store.values())
        if refill and time.monotonic() > self._relist_slices_after:
            # Slices went away and one left out would fit now: list again (at most once a minute) to store it.
            self._relist_slices_after = time.monotonic() + 60.0
            with self._slices.lock:
                self._slices.rv = None
            self._slices.watch.stop()
        if over:
            self._devices = None
            self._devices_reason = over_budget_reason(stored, over, self.max_devices)
            return
        caches = stored_slices(values)
        previous = self._devices
        self._devices = build_index(caches, classes, carry=previous.expressions() if previous else ())
        self._devices_reason = None

    def device_index(self) -> DeviceAnswers | None:
        self._ensure_started()
        if self._shared_devices is not None:
            index, reason = self._shared_devices.device_index()
            self._reason("resourceslice", reason)
            return index
        self._reason("resourceslice", self._devices_reason)
        return self._devices

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the watch threads and the lookup pool in this process (idempotent; restarts after fork)."""
        with self._lock:
            pid = os.getpid()
            if self._pid == pid:
                return
            if self._pid is not None:
                # Forked from a process that had started: its threads are gone and its sockets are shared.
                self._api = client.ApiClient(configuration=self._configuration)
                self._build_informers()
                self._cache.clear()
                self._inflight.clear()
                self._dc_snapshot = self._hpa_snapshot = None
                self._devices, self._devices_reason = None, "ResourceSlices not synced yet"
            self._pid = pid
            self._stop.clear()
            self._pool = concurrent.futures.ThreadPoolExecutor(self._lookup_threads, thread_name_prefix="cluster-get")
            for inf in self._informers:
                inf.thread = threading.Thread(target=self._run, args=(inf,), name=f"watch-{inf.name}", daemon=True)
                inf.thread.start()
            self._gates_thread = threading.Thread(target=self._refresh_gates, name="feature-gates", daemon=True)
            self._gates_thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads (tests, graceful shutdown). The view answers None afterwards."""
        with self._lock:
            if self._pid != os.getpid():
                return
            self._stop.set()
            pool, self._pool = self._pool, None
        deadline = time.monotonic() + timeout
        for inf in self._informers:
            while inf.thread is not None and inf.thread.is_alive() and time.monotonic() < deadline:
                inf.watch.stop()  # shuts the socket of a running stream; repeated in case one was starting
                inf.thread.join(0.05)
        if self._gates_thread is not None:
            self._gates_thread.join(max(0.0, deadline - time.monotonic()))
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        self._api.close()

    def _ensure_started(self) -> None:
        if self._pid != os.getpid():
            try:
                self.start()
            except Exception as exc:  # pragma: no cover - thread creation failure; never fail a request
                log.exception("cluster view could not start")
                self._note_error(f"start: {describe_error(exc)}")

    def wait_synced(self, timeout: float) -> bool:
        """Block until every cache has listed once (tests, and an optional startup wait)."""
        self._ensure_started()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(inf.synced for inf in self._informers):
                return True
            time.sleep(0.02)
        return all(inf.synced for inf in self._informers)

    # -- list + watch loop ------------------------------------------------------------------------------

    def _run(self, inf: _Informer) -> None:
        delay = self._backoff[0]
        expired_in_a_row = 0
        while not self._stop.is_set():
            try:
                if inf.rv is None:
                    items, rv = _list_raw(inf.list_fn, request_timeout=(5.0, 60.0))
                    inf.replace(items, rv)
                started = time.monotonic()
                events = self._watch_once(inf)
                expired_in_a_row = 0
                if events or time.monotonic() - started > 1.0:
                    delay = self._backoff[0]
                    continue
                # A watch that ends at once with nothing in it (a proxy cutting streams?): do not spin.
            except ApiException as exc:
                if exc.status == 410:
                    # Our resourceVersion is too old for the server: list again. Back off only if that
                    # keeps happening (a server that answers 410 to a fresh list's version).
                    with inf.lock:
                        inf.rv = None
                        inf.expired += 1
                    expired_in_a_row += 1
                    if expired_in_a_row == 1:
                        continue
                else:
                    self._watch_failed(inf, exc)
            except Exception as exc:  # connection refused, timeouts, bad JSON: keep the cache, retry later
                if self._stop.is_set():
                    break
                self._watch_failed(inf, exc)
            finally:
                inf.watching = False
            # Exponential backoff with jitter, so many workers do not retry in step.
            self._stop.wait(random.uniform(delay / 2, delay))
            delay = min(delay * 2, self._backoff[1])

    def _watch_once(self, inf: _Informer) -> int:
        """One watch request from ``inf.rv`` until the server ends it; 410 and errors raise.

        Returns the number of events received.
        """
        timeout = int(self._watch_timeout * (1 + random.random() / 2))
        stream = inf.watch.stream(
            inf.list_fn,
            resource_version=inf.rv,
            timeout_seconds=timeout,
            allow_watch_bookmarks=True,
            _request_timeout=(5.0, timeout + 30.0),
        )
        inf.watching = True
        events = 0
        for event in stream:
            if self._stop.is_set():
                break
            inf.apply(event["type"], event["raw_object"])
            events += 1
        return events

    def _watch_failed(self, inf: _Informer, exc: BaseException) -> None:
        text = describe_error(exc)
        with inf.lock:
            inf.errors += 1
            inf.last_error = text
        self._note_error(f"{inf.name}: {text}")
        log.warning("watch of %s failed, retrying with backoff: %s", inf.name, text)

    def _refresh_gates(self) -> None:
        """Read the cluster's feature gates now and every ``gates_interval`` s; keep the last good one."""
        delay = self._backoff[0]
        while not self._stop.is_set():
            try:
                self._gates = read_feature_gates(self._api)
                self._gates_error = None
                delay = self._backoff[0]
                wait = self._gates_interval
            except Exception as exc:
                if self._stop.is_set():
                    break
                self._gates_error = text = describe_error(exc)
                self._note_error(f"feature gates: {text}")
                log.warning("reading the cluster's feature gates from /metrics failed (%s): %s", (
                    "keeping the last reading" if self._gates else "policy values and version defaults apply"), text)
                wait = min(random.uniform(delay / 2, delay), self._gates_interval)
                delay = min(delay * 2, self._backoff[1])
            self._stop.wait(wait)

    def feature_gates(self) -> ClusterGates | None:
        """The last reading of the cluster's feature gates, or None before the first one succeeded."""
        self._ensure_started()
        self._reason("featuregates", None)
        if self._gates is None:
            why = self._gates_error or "not read yet"
            self._reason("featuregates", f"/metrics: {why}")
        return self._gates

    def _note_error(self, text: str) -> None:
        self._recent_errors.append(text)

    # -- degraded reasons (per calling thread: gthread workers serve requests concurrently) ---------------

    def degraded_reason(self, kind: str) -> str | None:
        """Why the last ``kind`` lookup on this thread answered None for lack of data (None: it did not)."""
        return getattr(self._local, "reasons", {}).get(kind)

    def _reason(self, kind: str, text: str | None) -> None:
        reasons = getattr(self._local, "reasons", None)
        if reasons is None:
            reasons = self._local.reasons = {}
        reasons[kind] = text

    # -- ClusterView --------------------------------------------------------------------------------------

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        self._ensure_started()
        self._reason("namespace", None)
        inf = self._namespaces
        if inf.synced:
            labels = inf.store.get(name)
            if labels is not None:
                return MappingProxyType(labels)
        # Not synced yet, or created after our last event: ask the API server, within the budget.
        obj = self._lookup("namespace", ("namespace", name), lambda: self._get(
            client.CoreV1Api(self._api).read_namespace, name))
        if obj is _UNKNOWN:
            if not inf.synced:
                self._reason("namespace", f"namespaces not synced yet; {self.degraded_reason('namespace')}")
            return None
        if obj is None:
            self._reason("namespace", f"namespace {name} not found")
            return None
        return MappingProxyType(_labels(obj))

    def device_classes(self) -> Mapping[str, dict[str, Any]] | None:
        self._ensure_started()
        snap = self._device_class_snapshot()
        return None if snap is None else snap[1]

    def extended_resource_classes(self) -> Mapping[str, str] | None:
        self._ensure_started()
        snap = self._device_class_snapshot()
        return None if snap is None else snap[2]

    def _synced(self, inf: _Informer, kind: str, what: str) -> bool:
        """Whether the informer has listed; if not, the degraded reason for ``kind`` says so (with its last error)."""
        if inf.synced:
            self._reason(kind, None)
            return True
        why = f" (last error: {inf.last_error})" if inf.last_error else ""
        self._reason(kind, f"{what} not synced yet{why}")
        return False

    def _device_class_snapshot(self) -> tuple[int, Mapping[str, dict[str, Any]], Mapping[str, str]] | None:
        inf = self._classes
        if not self._synced(inf, "deviceclass", "DeviceClasses"):
            return None
        snap = self._dc_snapshot
        if snap is None or snap[0] != inf.version:
            with inf.lock:
                version, classes = inf.version, dict(inf.store)
            snap = (version, MappingProxyType(classes), MappingProxyType(extended_resource_map(classes.values())))
            self._dc_snapshot = snap
        return snap

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Autoscaler | None:
        """From the watched HPAs (never a request to the API server); the index is rebuilt only after a
        scale target or replica bound changed, not on the HPA controller's status updates."""
        self._ensure_started()
        inf = self._hpas
        if not self._synced(inf, "autoscaler", "HorizontalPodAutoscalers"):
            return None
        snap = self._hpa_snapshot
        if snap is None or snap[0] != inf.version:
            with inf.lock:
                version, targets = inf.version, list(inf.store.values())
            snap = self._hpa_snapshot = (version, autoscaler_index(targets))
        return snap[1].get((namespace, group, kind, name))

    def get_pod(self, namespace: str, name: str, uid: str | None = None) -> dict[str, Any] | None:
        self._ensure_started()
        self._reason("pod", None)
        key = ("pod", namespace, name)

        def fetch() -> dict[str, Any]:
            return self._get(client.CoreV1Api(self._api).read_namespaced_pod, name, namespace)

        obj = self._lookup("pod", key, fetch)
        if uid and isinstance(obj, dict) and obj["metadata"].get("uid") != uid:
            # Perhaps a cached Pod that was replaced under the same name (StatefulSets do that): ask again.
            obj = self._lookup("pod", key, fetch, fresh=True)
        if obj is _UNKNOWN or obj is None:
            return None
        if uid and obj["metadata"].get("uid") != uid:
            return None
        return obj

    def get_podgroup(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_named("podgroup", namespace, name,
                               lambda: client.SchedulingV1beta1Api(self._api).read_namespaced_pod_group)

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_named("resourceclaim", namespace, name,
                               lambda: client.ResourceV1Api(self._api).read_namespaced_resource_claim)

    def get_resource_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_named("resourceclaimtemplate", namespace, name,
                               lambda: client.ResourceV1Api(self._api).read_namespaced_resource_claim_template)

    def _get_named(self, kind: str, namespace: str, name: str, reader: Callable[[], Any]) -> dict[str, Any] | None:
        """A budgeted, cached GET by name; None when absent or unknown (``degraded_reason(kind)`` says which)."""
        self._ensure_started()
        self._reason(kind, None)
        obj = self._lookup(kind, (kind, namespace, name), lambda: self._get(reader(), name, namespace))
        return None if obj is _UNKNOWN else obj

    def status(self) -> dict[str, Any]:
        """Sync state for /readyz and logs. Informational only: readiness never fails on it."""
        self._ensure_started()
        with self._lock:
            cached, inflight = len(self._cache), len(self._inflight)
        return {
            "mode": "live",
            "budgetMs": round(self.budget * 1000),
            "namespaces": self._namespaces.status(),
            "deviceclasses": self._classes.status(),
            "resourceslices": self._shared_devices.status() if self._shared_devices is not None else {
                **self._slices.status(), "devices": None if self._devices is None else self._devices.devices,
                "maxDevices": self.max_devices},
            "horizontalpodautoscalers": self._hpas.status(),
            "lookups": {"cached": cached, "inflight": inflight},
            "featureGates": self._gates_status(),
            "errors": list(self._recent_errors),
        }

    def _gates_status(self) -> dict[str, Any]:
        reading = self._gates
        return {
            "read": reading is not None,
            "readAt": None if reading is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reading.read_at)),
            "gates": 0 if reading is None else len(reading.enabled),
            "lastError": self._gates_error,
        }

    # -- budgeted lookups ----------------------------------------------------------------------------------

    def _get(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        return _call_raw(fn, *args, _request_timeout=self._lookup_timeout)

    def _lookup(
        self, kind: str, key: tuple[str, ...], fetch: Callable[[], dict[str, Any]], fresh: bool = False,
    ) -> _Answer:
        """The object (cached or fetched), None when absent (404), or _UNKNOWN past the budget or on error.

        The GET runs in the pool so the caller can stop waiting at the budget; a GET that finishes later
        still fills the cache for the next request. Concurrent lookups of one key share one GET.
        """
        label = "/".join(key[1:])
        with self._lock:
            if not fresh:
                hit = self._cache.get(key)
                if hit is not None and hit[0] > time.monotonic():
                    self._cache.move_to_end(key)
                    return hit[1]
            fut = self._inflight.get(key)
            if fut is None:
                if self._pool is None:
                    self._reason(kind, "cluster view is stopped")
                    return _UNKNOWN
                if len(self._inflight) >= self._max_inflight:
                    self._reason(kind, f"{kind} {label}: too many cluster lookups in flight")
                    return _UNKNOWN
                fut = self._pool.submit(self._fetch, key, fetch)
                self._inflight[key] = fut
        try:
            return fut.result(timeout=self.budget)
        except concurrent.futures.TimeoutError:
            self._reason(kind, f"{kind} {label} lookup exceeded the {round(self.budget * 1000)} ms budget")
        except Exception as exc:
            self._reason(kind, f"{kind} {label} lookup failed: {describe_error(exc)}")
        return _UNKNOWN

    def _fetch(self, key: tuple[str, ...], fetch: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        try:
            value: dict[str, Any] | None
            try:
                value = fetch()
            except ApiException as exc:
                if exc.status != 404:
                    self._note_error(f"GET {'/'.join(key)}: {describe_error(exc)}")
                    raise
                value = None  # absent is an answer too: cache it briefly
            with self._lock:
                self._cache[key] = (time.monotonic() + self._ttl, value)
                self._cache.move_to_end(key)
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            return value
        finally:
            with self._lock:
                self._inflight.pop(key, None)
