"""One writer per cluster: a coordination.k8s.io/v1 Lease, held the way client-go's leader election holds it.

Follows kubernetes staging/src/k8s.io/client-go/tools/leaderelection/leaderelection.go,
``LeaderElector.tryAcquireOrRenew`` and ``release`` (read at commit 0138c8288042, master after v1.36):

- no Lease: create it holding it (``leaseTransitions`` 0); creation races end in 409 AlreadyExists for all
  but one candidate;
- a Lease held by another identity is left alone while ``observedTime + leaseDurationSeconds`` is in the
  future, where ``observedTime`` is *our* clock when we last saw the record change (never the holder's
  ``renewTime``: clocks of different nodes disagree);
- otherwise update it with the resourceVersion we read (optimistic concurrency: a 409 Conflict means another
  candidate wrote first, and we are not the leader); a holder keeps ``acquireTime`` and ``leaseTransitions``,
  a new holder sets ``acquireTime`` and adds one to ``leaseTransitions``;
- the leader first tries the fast path (update from the record it last wrote, no GET);
- a leader that could not renew for ``renew_deadline`` stops acting as leader before its Lease can expire
  for the others (``renew_deadline < lease_duration``);
- on a clean stop the leader releases: holder emptied, ``leaseDurationSeconds`` 1, so a successor takes over
  within a retry period instead of a lease duration.

Why not ``kubernetes.leaderelection`` from the Python client: its ``run()`` blocks in ``time.sleep`` loops and
runs the leader's work on a thread, it reads the wall clock (no clock to inject in tests), formats times in
local time, never counts ``leaseTransitions`` and never releases. This class is one non-blocking ``tick()``
that the caller runs every retry period, so the gauge loop stays one thread.

The only Kubernetes calls are GET, POST and PUT of one Lease (RBAC: get and update on it, in the Lease's
namespace, and create only where the install does not ship the Lease; deploy/base/lease.yaml ships it). A holder
may carry ``annotations`` on the Lease with every write: the compiled-policy reconciler publishes its last pass
there (``webhook.serve.reconciler``), so the serving replicas read it without any write right of the reconciler's.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("webhook.leader")

LEASE_DURATION = 15.0  # seconds; kube-scheduler's and kube-controller-manager's defaults (15 / 10 / 2)
RENEW_DEADLINE = 10.0
RETRY_PERIOD = 2.0


def micro_time(when: dt.datetime) -> str:
    """metav1.MicroTime's wire format (RFC 3339 with exactly six fractional digits, UTC)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(holder: str, duration: float, now: dt.datetime, old: dict[str, Any] | None) -> dict[str, Any]:
    """The spec a candidate writes (pure): a holder renewing keeps acquireTime and leaseTransitions, a new holder
    takes them over with one more transition (client-go tryAcquireOrRenew, step 4)."""
    stamp = micro_time(now)
    spec: dict[str, Any] = {"holderIdentity": holder, "leaseDurationSeconds": max(1, int(duration)),
                            "acquireTime": stamp, "renewTime": stamp, "leaseTransitions": 0}
    if old is not None:
        transitions = int(old.get("leaseTransitions") or 0)
        if old.get("holderIdentity") == holder:
            spec["acquireTime"] = old.get("acquireTime") or stamp
            spec["leaseTransitions"] = transitions
        else:
            spec["leaseTransitions"] = transitions + 1
    return spec


def released_spec(now: dt.datetime, old: dict[str, Any]) -> dict[str, Any]:
    """What a leader writes when it stops cleanly (client-go ``release``): nobody holds it, expiring in 1 s."""
    stamp = micro_time(now)
    return {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": stamp, "renewTime": stamp,
            "leaseTransitions": int(old.get("leaseTransitions") or 0)}


class LeaseElector:
    """Leader election on one Lease; ``tick()`` is one attempt to acquire or renew, never blocking for long."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = LEASE_DURATION,
        renew_deadline: float = RENEW_DEADLINE,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        request_timeout: float = 5.0,
    ) -> None:
        if not 0 < renew_deadline < lease_duration:
            raise ValueError(f"renew deadline {renew_deadline} s must be below the lease duration {lease_duration} s")
        self._api = api
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration, self.renew_deadline = lease_duration, renew_deadline
        self._clock, self._wall, self._timeout = clock, wall, request_timeout
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written (with its resourceVersion)
        self._observed_at = 0.0  # our clock when the record last changed
        self._renewed_at: float | None = None  # our clock at our last successful write as holder
        self.last_error: str | None = None
        self.annotations: dict[str, str] = {}  # written onto the Lease with our next create or update (status)

    @property
    def leading(self) -> bool:
        """We hold the Lease and renewed it within the renew deadline."""
        return self._renewed_at is not None and self._clock() - self._renewed_at < self.renew_deadline

    @property
    def holder(self) -> str | None:
        spec = (self._lease or {}).get("spec") or {}
        return spec.get("holderIdentity") or None

    def tick(self) -> bool:
        """One tryAcquireOrRenew; returns whether we lead now. API errors count as a failed try and are logged
        when they change (a missing Role would otherwise log every retry period)."""
        error: str | None = None
        try:
            self._try_acquire_or_renew()
        except ApiException as exc:
            error = f"{exc.status} {exc.reason}"
            if exc.status == 409:  # another candidate wrote between our read and our write: theirs now
                self._renewed_at = None
        except Exception as exc:  # connection refused, timeout: try again next tick
            error = f"{type(exc).__name__}: {exc}"[:300]
        if error != self.last_error and error is not None and not error.startswith("409"):
            log.warning("lease %s/%s: %s", self.namespace, self.name, error)
        self.last_error = error
        return self.leading

    def release(self) -> None:
        """Give the Lease up if we lead, so a successor need not wait for it to expire (best effort)."""
        if not self.leading or self._lease is None:
            return
        try:
            self._write(released_spec(self._wall(), self._lease["spec"]))
            log.info("lease %s/%s released by %s", self.namespace, self.name, self.identity)
        except Exception as exc:  # the Lease simply expires
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
        self._renewed_at = None

    # -- one attempt ---------------------------------------------------------------------------------

    def _try_acquire_or_renew(self) -> None:
        now = self._wall()
        if self.leading and self._lease is not None:  # fast path: update what we wrote last
            try:
                self._write(lease_spec(self.identity, self.lease_duration, now, self._lease["spec"]))
                self._renewed_at = self._clock()
                return
            except ApiException as exc:
                log.info("lease %s/%s: fast renew failed (%s), reading it", self.namespace, self.name, exc.status)
        current = self._read()
        if current is None:
            self._create(lease_spec(self.identity, self.lease_duration, now, None))
            self._renewed_at = self._clock()
            return
        self._observe(current)
        spec = current.get("spec") or {}
        if spec.get("holderIdentity") and spec["holderIdentity"] != self.identity and self._valid():
            self._renewed_at = None
            return
        was = spec.get("holderIdentity")
        self._write(lease_spec(self.identity, self.lease_duration, now, spec))
        self._renewed_at = self._clock()
        if was != self.identity:
            log.info("lease %s/%s acquired by %s (was %s)", self.namespace, self.name, self.identity, was or "free")

    def _observe(self, lease: dict[str, Any]) -> None:
        old = (self._lease or {}).get("spec")
        if old != lease.get("spec"):
            self._observed_at = self._clock()
            if (old or {}).get("holderIdentity") == self.identity != (lease.get("spec") or {}).get("holderIdentity"):
                log.warning("lease %s/%s: lost to %s", self.namespace, self.name, lease["spec"].get("holderIdentity"))
        self._lease = lease

    def _valid(self) -> bool:
        duration = float(((self._lease or {}).get("spec") or {}).get("leaseDurationSeconds") or 0)
        return self._observed_at + duration > self._clock()

    # -- the three calls -----------------------------------------------------------------------------
    # Raw requests: the generated CoordinationV1Api validates a dict body into a V1Lease, turning the MicroTime
    # strings into datetimes that it then writes without the six fractional digits MicroTime needs.

    def _read(self) -> dict[str, Any] | None:
        try:
            return self._request("GET", f"{_LEASES}/{{name}}")
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _create(self, spec: dict[str, Any]) -> None:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": self._annotated({"name": self.name, "namespace": self.namespace}), "spec": spec}
        self._lease = self._request("POST", _LEASES, body)
        self._observed_at = self._clock()
        log.info("lease %s/%s created, held by %s", self.namespace, self.name, self.identity)

    def _write(self, spec: dict[str, Any]) -> None:
        """PUT with the resourceVersion we read: 409 Conflict if anyone wrote in between."""
        assert self._lease is not None
        body = {**self._lease, "metadata": self._annotated(self._lease.get("metadata") or {}), "spec": spec}
        self._lease = self._request("PUT", f"{_LEASES}/{{name}}", body)
        self._observed_at = self._clock()

    def _annotated(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """``metadata`` with ``annotations`` over the Lease's own (those we do not set stay as they are)."""
        if not self.annotations:
            return metadata
        return {**metadata, "annotations": {**(metadata.get("annotations") or {}), **self.annotations}}

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        req = self._api.param_serialize(method, path, path_params={"namespace": self.namespace, "name": self.name},
                                        header_params=headers, body=body, auth_settings=["BearerToken"])
        resp = self._api.call_api(*req, _request_timeout=self._timeout)
        data = resp.read()
        if not 200 <= resp.status <= 299:
            raise ApiException(http_resp=resp.response, body=data.decode(errors="replace") if data else None)
        parsed = json.loads(data)
        if not isinstance(parsed, dict):
            raise ValueError("the API server answered a Lease request with something other than an object")
        return parsed


_LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def campaign(elector: LeaseElector, stop: threading.Event) -> threading.Thread:
    """Start the thread that runs ``elector.tick()`` every retry period until ``stop`` (daemon: never blocks exit)."""
    def elect() -> None:
        while not stop.is_set():
            elector.tick()
            stop.wait(RETRY_PERIOD)

    thread = threading.Thread(target=elect, name="lease", daemon=True)
    thread.start()
    return thread
