"""Live migration gauges: what runs in the cluster now, computed from the cluster, not from admission events.

Counters of admission events restart at zero with the process and say nothing about Pods admitted before
it started; these gauges are recomputed from the cluster (Namespaces, Pods, ResourceClaims, DeviceClasses)
through the same ``webhook.fleet.report.build_report`` as ``dra-webhook report``, so both always agree and are right
after a restart. The writer lists the cluster once and then follows watches of projected objects
(``webhook.fleet.gauge_watch``), as kube-state-metrics does; each refresh counts from its stores.

**One writer per cluster.** Each replica runs one gauge writer process beside its admission workers
(``webhook.serve.gauge_writer``, started and restarted by the gunicorn master); the writers elect one of them
with a Lease (``webhook.cluster.leader``), and only the Lease holder reads the cluster (one list, then watches),
recounts every ``interval`` seconds, and replaces ``<dir>/migration.json`` atomically (write, then
rename). The others write a snapshot saying they are not the writer. Every worker's /metrics renders its
replica's snapshot through ``MigrationCollector``: the holder's replica exports the counts and
``dra_webhook_migration_gauge_writer 1``, the other replicas only ``dra_webhook_migration_gauge_writer 0``.
So the API server serves one writer's list and watches for the whole cluster, each Pod is counted once,
and vanished label sets vanish. Aggregate with
``max`` over instances (deploy/monitoring does): during a handover two replicas may briefly both export.

Labels are bounded: cohort (from the policy, or ``none``), stage, path values. No Pod, namespace or other
object names.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from webhook.fleet.report import NO_COHORT, JudgedClaims, JudgedPods, Report, build_report
from webhook.policy.compiled import CompiledPolicy

log = logging.getLogger("webhook.gauges")

SNAPSHOT = "migration.json"
WRITER = "dra_webhook_migration_gauge_writer"
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
        "the eviction controller only follows spec.resourceClaims (kubernetes issue 141290); 0 on a cluster "
        "version with the fix (PR 142289, 1.38.0) or with policy extendedResourceTaintEviction: evicted.",
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
    "dra_webhook_compiled_policies_reconciled_timestamp_seconds": (
        "Start of the last successful reconcile of the compiled admission policies (dra-webhook reconcile), as a "
        "Unix timestamp, from the reconciler's Lease; exported by the gauge writer's replica.",
        (),
    ),
    "dra_webhook_compiled_policies_objects": (
        "Admission policies and bindings the last successful reconcile applied (from the reconciler's Lease).",
        (),
    ),
    "dra_webhook_compiled_narrowing_stale": (
        "1 while the installed webhook configurations' not-compiled matchCondition is not the one the policy needs "
        "(names it no longer owns, or a rule switched back on): the webhook may miss what the compiled policies "
        "leave to it; narrow them again (compile --narrow-webhooks). From the reconciler's Lease while it is held.",
        (),
    ),
    WRITER: (
        "1 on the replica whose gauge writer holds the Lease and exports the other migration gauges, 0 on the "
        "replicas that serve admission only (they export no other migration gauge).",
        (),
    ),
}

Sample = tuple[str, dict[str, str], float]
COMPILED = frozenset(n for n in FAMILIES if n.startswith("dra_webhook_compiled_"))
"""The compiled mode's families: what the reconciler's Lease says (``Exporter``'s ``compiled``), not counts."""


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """What one refresh reads; each iterable is read once, so they may be streams of paged lists."""

    namespaces: Iterable[dict[str, Any]]
    pods: Iterable[dict[str, Any]] | JudgedPods  # JudgedPods: the watched stores (webhook.fleet.gauge_watch)
    claims: Iterable[dict[str, Any]] | JudgedClaims
    device_classes: Iterable[dict[str, Any]] | None
    server_version: str | None = None  # discovery /version gitVersion: decides kubernetes#141290's outcome


def _midnight(day: dt.date) -> float:
    return dt.datetime.combine(day, dt.time(0), tzinfo=dt.UTC).timestamp()


def samples(policy: CompiledPolicy, now: dt.datetime, objs: ClusterObjects) -> list[Sample]:
    """Every gauge sample for this read of the cluster (pure; one pass over each list)."""
    from webhook.gates.eviction import decide

    report = build_report(policy, now, objs.namespaces, objs.pods, objs.claims, objs.device_classes)
    evicted = decide(policy.source.spec.extendedResourceTaintEviction, objs.server_version,
                     policy_version=policy.spec.kubernetesVersion).evicted
    return _from_report(policy, report, now, extended_evicted=evicted)


def _cohort(name: str | None) -> str:
    return NONE if not name or name == NO_COHORT else name


def _from_report(policy: CompiledPolicy, report: Report, now: dt.datetime,
                 extended_evicted: bool = False) -> list[Sample]:
    """The samples; ``extended_evicted`` (the cluster has the fix for kubernetes#141290) makes every
    extended-resource Pod evictable, so the unevictable gauge is 0."""
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
        unevictable[_cohort(ns.cohort)] += 0 if extended_evicted else ns.taint_unevictable

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


def _rows(snap: dict[str, Any], now: float) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples per family from one snapshot: a follower has only the writer gauge; counts older than
    ``staleAfter`` seconds are left out (a writer that stopped must not show old numbers as current), the time
    of the last good read and ``refresh_ok`` stay."""
    rows: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in FAMILIES}
    writer = bool(snap.get("writer", True))
    rows[WRITER] = [({}, 1.0 if writer else 0.0)]
    if not writer:
        return rows
    fresh = now - float(snap.get("successAt") or 0) <= float(snap.get("staleAfter") or 0)
    for name, labels, value in (snap.get("samples") or []) if fresh else []:
        if name in rows and name != WRITER:
            rows[name].append((labels, value))
    for name, labels, value in snap.get("compiled") or []:  # the reconciler's Lease: read each refresh, never stale
        if name in COMPILED:
            rows[name].append((labels, value))
    if snap.get("successAt"):
        rows["dra_webhook_migration_last_success_timestamp_seconds"] = [({}, float(snap["successAt"]))]
    rows["dra_webhook_migration_refresh_ok"] = [({}, 0.0 if snap.get("error") else 1.0)]
    return rows


class MigrationCollector(Collector):
    """The migration gauges for /metrics, read from the snapshot the gauge writer keeps in ``directory``.

    A prometheus_client collector (registered once per worker, beside the multiprocess collector), so the
    exposition format is the library's. Nothing is exported when no gauge writer runs (offline, or
    ``--gauge-interval 0``).
    """

    def __init__(self, directory: str, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        snap = read_snapshot(self.directory)
        if snap is None:
            return
        for name, rows in _rows(snap, self.clock()).items():
            if not rows:
                continue
            help_text, label_names = FAMILIES[name]
            family = GaugeMetricFamily(name, help_text, labels=label_names)
            for labels, value in rows:
                family.add_metric([labels[k] for k in label_names], float(value))
            yield family


# -- the writer ---------------------------------------------------------------------------------------------


class PolicySource(Protocol):
    @property
    def current(self) -> CompiledPolicy | None: ...


class Exporter:
    """Keeps ``<directory>/migration.json`` current while ``leading()`` says this process is the writer.

    ``read`` is the producer of the counts' input (the writer's watched stores, ``webhook.fleet.gauge_watch``), given
    the policy the refresh counts under (what the stores keep depends on its annotation prefix: one policy per
    refresh, even when a reload lands in the middle of it);
    ``leading`` is the Lease holder check (``webhook.cluster.leader``), always true when there is no election (tests,
    one replica); ``release`` is called when this process stops being the writer.
    """

    def __init__(
        self,
        directory: str,
        policies: PolicySource,
        read: Callable[[CompiledPolicy], ClusterObjects],
        interval: float = 60.0,
        clock: Callable[[], dt.datetime] | None = None,
        leading: Callable[[], bool] = lambda: True,
        release: Callable[[], None] = lambda: None,
        compiled: Callable[[], list[Sample]] = list,
    ) -> None:
        self.directory = directory
        self.compiled = compiled  # the compiled-mode samples (webhook.serve.reconciler.lease_samples), each refresh
        self.release = release  # drops what ``read`` keeps (the writer's watches) when the Lease is lost
        self.policies = policies
        self.read = read
        self.interval = interval
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self.leading = leading
        self._last_success: float | None = None
        self._last_samples: list[Sample] = []

    def refresh(self) -> bool:
        """Read the cluster once and write the snapshot; on failure keep the last good samples and say why.
        Leadership lost during the read: the result is dropped and the snapshot says we are not the writer."""
        now = self.clock()
        policy = self.policies.current
        error: str | None = None
        if policy is None:
            error = "no valid policy loaded"
        else:
            try:
                computed = samples(policy, now, self.read(policy))
                self._last_samples, self._last_success = computed, now.timestamp()
            except Exception as exc:  # API down, RBAC missing: keep serving, report it in the gauges and logs
                error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("migration gauges: reading the cluster failed: %s", error)
        if not self.leading():
            self.follow()
            return False
        write_snapshot(self.directory, {
            "pid": os.getpid(),
            "writer": True,
            "at": now.timestamp(),
            "successAt": self._last_success,
            "staleAfter": max(3 * self.interval, 180.0),
            "error": error,
            "samples": self._last_samples,
            "compiled": self._compiled(),
        })
        return error is None

    def _compiled(self) -> list[Sample]:
        try:
            return [s for s in self.compiled() if s[0] in COMPILED]
        except Exception as exc:  # the Lease unreadable (RBAC, API down): the counts still go out
            log.warning("migration gauges: reading the compiled-policy reconciler's Lease failed: %s",
                        f"{type(exc).__name__}: {exc}"[:300])
            return []

    def follow(self) -> None:
        """Not the writer: export no counts (the writer replica does), only ``gauge_writer 0``; stop reading."""
        self.release()
        self._last_samples, self._last_success = [], None
        write_snapshot(self.directory, {"pid": os.getpid(), "writer": False})

    def run(self, stop: threading.Event, poll: float = 1.0) -> None:
        """Refresh every ``interval`` seconds after the end of the previous refresh while leading, until ``stop``.

        The first refresh after taking the Lease waits for the writer's first lists (``webhook.fleet.gauge_watch``);
        later ones count the watched stores, so the API server serves one list per Lease holder, then events.
        """
        was_leading: bool | None = None
        due = 0.0
        while not stop.is_set():
            try:
                leading = self.leading()
                if leading != was_leading:
                    log.info("pid %d %s the migration gauges (every %g s)", os.getpid(),
                             "exports" if leading else "does not export", self.interval)
                    was_leading, due = leading, 0.0
                    if not leading:
                        self.follow()
                if leading and time.monotonic() >= due:
                    self.refresh()
                    due = time.monotonic() + self.interval
            except Exception:  # never let the loop die silently
                log.exception("migration gauges: refresh failed")
            stop.wait(poll)
