"""Live migration gauges: what runs in the cluster now, computed from the cluster, not from admission events.

Counters of admission events restart at zero with the process and say nothing about Pods admitted before
it started; these gauges are recomputed from a full read of the cluster (Namespaces, Pods, ResourceClaims,
DeviceClasses) through the same ``webhook.report.build_report`` as ``dra-webhook report``, so both always
agree and are right after a restart.

**One exporter per webhook Pod.** Every gunicorn worker is a process with its own cluster view. Had each
worker set multiprocess gauges, ``livesum`` would count every Pod once per worker, and the other modes keep
label sets forever (a multiprocess gauge cannot drop a series, so a cohort that emptied would show its last
value). Instead one worker wins an exclusive ``flock`` on ``<dir>/migration.lock`` and is the exporter: it
reads the cluster every ``interval`` seconds and replaces ``<dir>/migration.json`` atomically (write, then
rename). Every worker's /metrics renders that one file, so whichever worker answers a scrape, each Pod is
counted once and vanished label sets vanish. The other workers retry the lock every interval: when the
exporter dies the kernel releases its lock and another worker takes over. Across replicas each webhook Pod
exports the same numbers: aggregate with ``max``, never ``sum``, over instances (deploy/monitoring does).

Labels are bounded: cohort (from the policy, or ``none``), stage, path values. No Pod, namespace or other
object names.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.policy.compiled import CompiledPolicy
from webhook.report import NO_COHORT, Report, build_report

log = logging.getLogger(__name__)

SNAPSHOT = "migration.json"
LOCK = "migration.lock"
NONE = "none"  # cohort label of namespaces in no cohort, intended label of Pods nobody annotated

# name -> (help, label names). The exposition order; the deploy/monitoring test checks rules against these.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "dra_webhook_migration_pods": (
        "Running or pending Pods that use devices, by cohort, stage, intended path (our annotation; 'none' when "
        "not annotated) and actual path (Pod status; 'pending' until bound).",
        ("cohort", "stage", "intended", "actual"),
    ),
    "dra_webhook_migration_drifted_pods": (
        "Pods whose actual path differs from the intended one (bound Pods only).",
        ("cohort", "stage"),
    ),
    "dra_webhook_migration_claims_injected_tolerations": (
        "ResourceClaims that carry device tolerations the webhook injected.",
        ("cohort",),
    ),
    "dra_webhook_migration_taint_unevictable_pods": (
        "Bound Pods on the DRA extended-resource path: a NoExecute device taint does not evict them, because "
        "the eviction controller only follows spec.resourceClaims (kubernetes issue 141290).",
        ("cohort",),
    ),
    "dra_webhook_migration_cohort_stage": (
        "The stage each cohort is in today (value 1; the stage is the label).",
        ("cohort", "stage"),
    ),
    "dra_webhook_migration_stage_since_timestamp_seconds": (
        "When the cohort's current stage began (00:00 UTC of its schedule date), as a Unix timestamp.",
        ("cohort", "stage"),
    ),
    "dra_webhook_migration_next_stage_change_timestamp_seconds": (
        "When the cohort's next scheduled stage change happens (00:00 UTC), as a Unix timestamp; the label "
        "is the stage it changes to. Absent when no change is scheduled.",
        ("cohort", "stage"),
    ),
    "dra_webhook_migration_last_success_timestamp_seconds": (
        "When the gauges were last computed from a complete read of the cluster.",
        (),
    ),
    "dra_webhook_migration_refresh_ok": (
        "1 when the last read of the cluster succeeded, 0 when it failed (the other gauges then keep the "
        "last good read until they are stale).",
        (),
    ),
}

Sample = tuple[str, dict[str, str], float]


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """What one refresh reads; each iterable is read once, so they may be streams of paged lists."""

    namespaces: Iterable[dict[str, Any]]
    pods: Iterable[dict[str, Any]]
    claims: Iterable[dict[str, Any]]
    device_classes: Iterable[dict[str, Any]] | None


def _midnight(day: dt.date) -> float:
    return dt.datetime.combine(day, dt.time(0), tzinfo=dt.UTC).timestamp()


def samples(policy: CompiledPolicy, now: dt.datetime, objs: ClusterObjects) -> list[Sample]:
    """Every gauge sample for this read of the cluster (pure; one pass over each list)."""
    report = build_report(policy, now, objs.namespaces, objs.pods, objs.claims, objs.device_classes)
    return _from_report(policy, report, now)


def _cohort(name: str | None) -> str:
    return NONE if not name or name == NO_COHORT else name


def _from_report(policy: CompiledPolicy, report: Report, now: dt.datetime) -> list[Sample]:
    by_ns = {n.name: n for n in report.namespaces}
    paths: Counter[tuple[str, str, str, str]] = Counter()
    for p in report.pods:
        ns = by_ns[p.namespace]
        paths[(_cohort(ns.cohort), ns.stage, p.intended or NONE, p.actual)] += 1
    drift: Counter[tuple[str, str]] = Counter()
    injected: Counter[str] = Counter()
    unevictable: Counter[str] = Counter()
    for ns in report.namespaces:
        drift[(_cohort(ns.cohort), ns.stage)] += ns.drift
        injected[_cohort(ns.cohort)] += ns.injected_claims
        unevictable[_cohort(ns.cohort)] += ns.taint_unevictable

    out: list[Sample] = []
    for (cohort, stage, intended, actual), n in sorted(paths.items()):
        out.append(("dra_webhook_migration_pods", {"cohort": cohort, "stage": stage, "intended": intended,
                                                   "actual": actual}, n))
    out += [("dra_webhook_migration_drifted_pods", {"cohort": c, "stage": s}, n) for (c, s), n in sorted(drift.items())]
    cohorts = sorted({_cohort(c.name) for c in report.cohorts} | set(injected) | set(unevictable))
    out += [("dra_webhook_migration_claims_injected_tolerations", {"cohort": c}, injected[c]) for c in cohorts]
    out += [("dra_webhook_migration_taint_unevictable_pods", {"cohort": c}, unevictable[c]) for c in cohorts]
    today = now.astimezone(dt.UTC).date()
    for c in policy.cohorts:
        stage = policy.stage_for(c, now)
        out.append(("dra_webhook_migration_cohort_stage", {"cohort": c.name, "stage": stage}, 1))
        began = [e for e in c.schedule if e.from_ <= today]
        if began:
            out.append(("dra_webhook_migration_stage_since_timestamp_seconds", {"cohort": c.name, "stage": stage},
                        _midnight(began[-1].from_)))
        nxt = c.next_change(today)
        if nxt is not None:
            out.append(("dra_webhook_migration_next_stage_change_timestamp_seconds",
                        {"cohort": c.name, "stage": nxt.stage.value}, _midnight(nxt.from_)))
    return out


# -- the snapshot file ------------------------------------------------------------------------------------


def write_snapshot(directory: str, data: dict[str, Any]) -> None:
    """Replace the snapshot atomically: readers see the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=".migration-", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, os.path.join(directory, SNAPSHOT))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_snapshot(directory: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(directory, SNAPSHOT)) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(directory: str | None, now: float) -> bytes:
    """The gauges as Prometheus text exposition, from the snapshot in ``directory``.

    Counts older than ``staleAfter`` seconds are left out (an exporter that stopped must not show old
    numbers as current); the timestamp of the last good read and ``refresh_ok`` are always there.
    """
    snap = read_snapshot(directory) if directory else None
    if snap is None:
        return b""
    fresh = now - float(snap.get("successAt") or 0) <= float(snap.get("staleAfter") or 0)
    rows: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in FAMILIES}
    for name, labels, value in (snap.get("samples") or []) if fresh else []:
        if name in rows:
            rows[name].append((labels, value))
    if snap.get("successAt"):
        rows["dra_webhook_migration_last_success_timestamp_seconds"] = [({}, float(snap["successAt"]))]
    rows["dra_webhook_migration_refresh_ok"] = [({}, 0.0 if snap.get("error") else 1.0)]
    lines: list[str] = []
    for name, (help_text, _) in FAMILIES.items():
        if not rows[name]:
            continue
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for labels, value in rows[name]:
            inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{inner}}} {float(value)!r}" if inner else f"{name} {float(value)!r}")
    return ("\n".join(lines) + "\n").encode() if lines else b""


# -- the exporter ------------------------------------------------------------------------------------------


class PolicySource(Protocol):
    @property
    def current(self) -> CompiledPolicy | None: ...


class Exporter:
    """Keeps ``<directory>/migration.json`` current, in exactly one process (see the module docstring)."""

    def __init__(
        self,
        directory: str,
        policies: PolicySource,
        read: Callable[[], ClusterObjects],
        interval: float = 60.0,
        clock: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self.directory = directory
        self.policies = policies
        self.read = read
        self.interval = interval
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._lock_fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_success: float | None = None
        self._last_samples: list[Sample] = []

    @property
    def leader(self) -> bool:
        return self._lock_fd is not None

    def try_lead(self) -> bool:
        """Take the exporter lock if nobody holds it (non-blocking). Held until this process exits."""
        if self._lock_fd is None:
            fd = os.open(os.path.join(self.directory, LOCK), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            self._lock_fd = fd
            log.info("pid %d exports the migration gauges (every %g s)", os.getpid(), self.interval)
        return True

    def refresh(self) -> bool:
        """Read the cluster once and write the snapshot; on failure keep the last good samples and say why."""
        now = self.clock()
        policy = self.policies.current
        error: str | None = None
        if policy is None:
            error = "no valid policy loaded"
        else:
            try:
                self._last_samples = samples(policy, now, self.read())
                self._last_success = now.timestamp()
            except Exception as exc:  # API down, RBAC missing: keep serving, report it in the gauges and logs
                error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("migration gauges: reading the cluster failed: %s", error)
        write_snapshot(self.directory, {
            "pid": os.getpid(),
            "at": now.timestamp(),
            "successAt": self._last_success,
            "staleAfter": max(3 * self.interval, 180.0),
            "error": error,
            "samples": self._last_samples,
        })
        return error is None

    def start(self) -> None:
        """Start the background thread in this process (call after fork, i.e. in the worker)."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="migration-gauges", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.try_lead():
                    self.refresh()
            except Exception:  # never let the thread die silently
                log.exception("migration gauges: refresh failed")
            self._stop.wait(self.interval)
