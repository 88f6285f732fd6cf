"""The live ``ClusterView``: watched caches plus budgeted, briefly cached GETs against the API server.

Backed by list+watch caches (``webhook.cluster.informer``) of Namespaces, DeviceClasses, ResourceSlices and
HorizontalPodAutoscalers, and by strictly budgeted GETs of owner Pods, PodGroups and the ResourceClaims /
ResourceClaimTemplates a Pod names (``webhook.cluster.api``). On the request path nothing here may block longer
than the lookup budget or raise: an answer that is not there in time is an unknown ``Lookup`` that says why.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import copy
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from kubernetes import client

from webhook.cluster.api import ApiException, call_raw, connect, describe_error, read_feature_gates
from webhook.cluster.device_client import SharedDevices
from webhook.cluster.informer import Informer, keep_labels, keep_whole, namespaced_name
from webhook.devices.selectors import DeviceAnswers, DeviceIndex, build_index
from webhook.devices.store import SliceKeeper, over_budget_reason, stored_slices
from webhook.gates.cluster import ClusterGates
from webhook.rules.view import (
    ABSENT,
    Autoscaler,
    Lookup,
    ScaleTarget,
    autoscaler_index,
    autoscaler_target,
    extended_resource_map,
)

log = logging.getLogger("webhook.live_view")


class LiveView:
    """``ClusterView`` over the API server: watched caches plus budgeted, briefly cached GETs.

    Nothing starts at construction or import: ``start()`` (or the first lookup, or ``status()``) starts the
    watch threads in the calling process, and a fork (gunicorn worker) is detected and started afresh, so
    every worker has its own threads and connections. Lookups never raise and never wait longer than
    ``budget`` seconds; each answers a ``Lookup`` (found, absent, or unknown with the reason).
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
        # This replica's device process (webhook.cluster.device_service) holds the slices: no ResourceSlice watch here.
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
        self._pid: int | None = None
        self._stop = threading.Event()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._cache: collections.OrderedDict[tuple[str, ...], tuple[float, Lookup[dict[str, Any]]]] = (
            collections.OrderedDict())
        self._inflight: dict[tuple[str, ...], concurrent.futures.Future[Lookup[dict[str, Any]]]] = {}
        self._recent_errors: collections.deque[str] = collections.deque(maxlen=5)
        self._dc_snapshot: tuple[int, Lookup[Mapping[str, dict[str, Any]]], Lookup[Mapping[str, str]]] | None = None
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
        self._namespaces = Informer("namespaces", core.list_namespace, keep_labels)
        self._classes = Informer("deviceclasses", res.list_device_class, keep_whole)
        # Slices are projected when they arrive (webhook.devices.store: compact JSON of what selectors read, at
        # most max_devices devices stored) and the index with every DeviceClass selector's answer is rebuilt in
        # the watch thread, never on a request.
        self._keeper = SliceKeeper(self.max_devices)
        self._slices = Informer("resourceslices", res.list_resource_slice, self._keeper)
        self._classes.changed = self._slices.changed = self._reindex
        # HPAs: only what shared-claim-limit needs (scale target and replica bounds), by namespace/name.
        self._hpas = Informer("horizontalpodautoscalers",
                               client.AutoscalingV2Api(self._api).list_horizontal_pod_autoscaler_for_all_namespaces,
                               autoscaler_target, key=namespaced_name)
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

    def device_index(self) -> Lookup[DeviceAnswers]:
        self._ensure_started()
        if self._shared_devices is not None:
            index, reason = self._shared_devices.device_index()
            return Lookup(index) if index is not None else Lookup.unknown(reason or "ResourceSlices not indexed yet")
        devices = self._devices
        if devices is None:
            return Lookup.unknown(self._devices_reason or "ResourceSlices not indexed yet")
        return Lookup(devices)

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
                loop = (self._stop, self._backoff, self._watch_timeout, self._note_error)
                inf.thread = threading.Thread(target=inf.run, args=loop, name=f"watch-{inf.name}", daemon=True)
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

    def feature_gates(self) -> Lookup[ClusterGates]:
        """The last reading of the cluster's feature gates; unknown before the first one succeeded."""
        self._ensure_started()
        gates = self._gates
        if gates is None:
            return Lookup.unknown(f"/metrics: {self._gates_error or 'not read yet'}")
        return Lookup(gates)

    def _note_error(self, text: str) -> None:
        self._recent_errors.append(text)

    # -- ClusterView --------------------------------------------------------------------------------------

    def namespace_labels(self, name: str) -> Lookup[Mapping[str, str]]:
        self._ensure_started()
        inf = self._namespaces
        if inf.synced:
            labels = inf.store.get(name)
            if labels is not None:
                return Lookup(MappingProxyType(labels))
        # Not synced yet, or created after our last event: ask the API server, within the budget.
        got = self._lookup("namespace", ("namespace", name), lambda: self._get(
            client.CoreV1Api(self._api).read_namespace, name))
        if got.value is not None:
            return Lookup(MappingProxyType(keep_labels(got.value)))
        if got.reason is None:
            return ABSENT
        return Lookup.unknown(got.reason if inf.synced else f"namespaces not synced yet; {got.reason}")

    def device_classes(self) -> Lookup[Mapping[str, dict[str, Any]]]:
        self._ensure_started()
        return self._device_class_snapshot()[0]

    def extended_resource_classes(self) -> Lookup[Mapping[str, str]]:
        self._ensure_started()
        return self._device_class_snapshot()[1]

    def _unsynced(self, inf: Informer, what: str) -> Lookup[Any] | None:
        """The unknown answer while the informer has not listed yet (with its last error); None once it has."""
        if inf.synced:
            return None
        why = f" (last error: {inf.last_error})" if inf.last_error else ""
        return Lookup.unknown(f"{what} not synced yet{why}")

    def _device_class_snapshot(self) -> tuple[Lookup[Mapping[str, dict[str, Any]]], Lookup[Mapping[str, str]]]:
        inf = self._classes
        missing = self._unsynced(inf, "DeviceClasses")
        if missing is not None:
            return missing, missing
        snap = self._dc_snapshot
        if snap is None or snap[0] != inf.version:
            with inf.lock:
                version, classes = inf.version, dict(inf.store)
            snap = (version, Lookup(MappingProxyType(classes)),
                    Lookup(MappingProxyType(extended_resource_map(classes.values()))))
            self._dc_snapshot = snap
        return snap[1], snap[2]

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Lookup[Autoscaler]:
        """From the watched HPAs (never a request to the API server); the index is rebuilt only after a
        scale target or replica bound changed, not on the HPA controller's status updates."""
        self._ensure_started()
        inf = self._hpas
        missing = self._unsynced(inf, "HorizontalPodAutoscalers")
        if missing is not None:
            return missing
        snap = self._hpa_snapshot
        if snap is None or snap[0] != inf.version:
            with inf.lock:
                version, targets = inf.version, list(inf.store.values())
            snap = self._hpa_snapshot = (version, autoscaler_index(targets))
        return Lookup.of(snap[1].get((namespace, group, kind, name)))

    def get_pod(self, namespace: str, name: str, uid: str | None = None) -> Lookup[dict[str, Any]]:
        self._ensure_started()
        key = ("pod", namespace, name)

        def fetch() -> dict[str, Any]:
            return self._get(client.CoreV1Api(self._api).read_namespaced_pod, name, namespace)

        got = self._lookup("pod", key, fetch)
        if uid and got.value is not None and got.value["metadata"].get("uid") != uid:
            # Perhaps a cached Pod that was replaced under the same name (StatefulSets do that): ask again.
            got = self._lookup("pod", key, fetch, fresh=True)
            if got.value is not None and got.value["metadata"].get("uid") != uid:
                return ABSENT  # the owner with that uid is gone
        return got

    def get_podgroup(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return self._get_named("podgroup", namespace, name,
                               lambda: client.SchedulingV1beta1Api(self._api).read_namespaced_pod_group)

    def get_resource_claim(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return self._get_named("resourceclaim", namespace, name,
                               lambda: client.ResourceV1Api(self._api).read_namespaced_resource_claim)

    def get_resource_claim_template(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return self._get_named("resourceclaimtemplate", namespace, name,
                               lambda: client.ResourceV1Api(self._api).read_namespaced_resource_claim_template)

    def _get_named(self, kind: str, namespace: str, name: str, reader: Callable[[], Any]) -> Lookup[dict[str, Any]]:
        """A budgeted, cached GET by name."""
        self._ensure_started()
        return self._lookup(kind, (kind, namespace, name), lambda: self._get(reader(), name, namespace))

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
        return call_raw(fn, *args, _request_timeout=self._lookup_timeout)

    def _lookup(
        self, kind: str, key: tuple[str, ...], fetch: Callable[[], dict[str, Any]], fresh: bool = False,
    ) -> Lookup[dict[str, Any]]:
        """The object (cached or fetched), absent (404), or unknown past the budget or on error.

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
                    return Lookup.unknown("cluster view is stopped")
                if len(self._inflight) >= self._max_inflight:
                    return Lookup.unknown(f"{kind} {label}: too many cluster lookups in flight")
                fut = self._pool.submit(self._fetch, key, fetch)
                self._inflight[key] = fut
        try:
            return fut.result(timeout=self.budget)
        except concurrent.futures.TimeoutError:
            return Lookup.unknown(f"{kind} {label} lookup exceeded the {round(self.budget * 1000)} ms budget")
        except Exception as exc:
            return Lookup.unknown(f"{kind} {label} lookup failed: {describe_error(exc)}")

    def _fetch(self, key: tuple[str, ...], fetch: Callable[[], dict[str, Any]]) -> Lookup[dict[str, Any]]:
        try:
            value: Lookup[dict[str, Any]]
            try:
                value = Lookup(fetch())
            except ApiException as exc:
                if exc.status != 404:
                    self._note_error(f"GET {'/'.join(key)}: {describe_error(exc)}")
                    raise
                value = ABSENT  # absent is an answer too: cache it briefly
            with self._lock:
                self._cache[key] = (time.monotonic() + self._ttl, value)
                self._cache.move_to_end(key)
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            return value
        finally:
            with self._lock:
                self._inflight.pop(key, None)


# The API groups the cluster view and the gauge writer call. The kubernetes client (v37) imports an API group
# and builds its pydantic models on first use: about 2 s of CPU and 28 MB for these, per process.
_CLIENT_APIS = ("CoreV1Api", "ResourceV1Api", "AutoscalingV2Api", "SchedulingV1beta1Api")


def preload_client() -> None:
    """Import the cluster modules (this one imports the rest) and the client's API groups once, in the gunicorn
    master (no connection, no thread), instead of in every worker and the gauge writer: on a busy 2-core machine
    each worker otherwise spent over 25 s booting, and the pages stay shared after fork."""
    for name in _CLIENT_APIS:
        with contextlib.suppress(AttributeError):
            getattr(client, name)
