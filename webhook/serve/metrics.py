"""Prometheus metrics (docs/design.md §6 names).

Under gunicorn every worker is a process, so prometheus-client runs in multiprocess mode: the server
sets ``PROMETHEUS_MULTIPROC_DIR`` before this module is imported, and /metrics aggregates the files.
Without it (unit tests, ``check``) the metrics live in this process only.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

MULTIPROC = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

REQUESTS = Counter(
    "dra_webhook_admission_requests_total",
    "Admission requests answered, by endpoint, kind, operation and whether they were allowed.",
    ["endpoint", "kind", "operation", "allowed"],
)
DURATION = Histogram(
    "dra_webhook_admission_duration_seconds",
    "Time to answer an admission request, parsing to response.",
    ["endpoint"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
FINDINGS = Counter(
    "dra_webhook_rule_findings_total",
    "Rule findings, by rule id and the action the policy gave them.",
    ["rule", "action"],
)
RULE_ERRORS = Counter(
    "dra_webhook_rule_errors_total",
    "Rules that failed to evaluate an object (status rule-error), by rule id; the log names the request uid.",
    ["rule"],
)
WORKLOADS = Counter(
    "dra_webhook_workloads_total",
    "Objects admitted with rollout-tracking annotations, by path, stage and cohort.",
    ["path", "stage", "cohort"],
)
RELOADS = Counter(
    "dra_webhook_policy_reloads_total",
    "Policy loads and reloads, by result (success or error).",
    ["result"],
)
CERT_EXPIRY = Gauge(
    "dra_webhook_certificate_expiry_timestamp_seconds",
    "notAfter of the serving certificate currently loaded, as a Unix timestamp.",
    multiprocess_mode="livemostrecent",  # the certificate a live process loaded last
)
BAD_REQUESTS = Counter(
    "dra_webhook_bad_requests_total",
    "Bodies rejected before evaluation, by HTTP status.",
    ["code"],
)


class Bound:
    """A labelled metric's children, each looked up once per label set: ``labels()`` on every request takes the
    metric's lock and validates the values again (issue 51). The label sets are bounded (endpoints, kinds the
    rules know or ``other``, operations, rule ids, actions), so the dict is too. Same children as ``labels()``."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: Counter | Histogram) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:  # two threads may both look it up: labels() hands both the same child
            child = self._children[values] = self._metric.labels(*values)
        return child


requests = Bound(REQUESTS)
duration = Bound(DURATION)
findings = Bound(FINDINGS)
rule_errors = Bound(RULE_ERRORS)
workloads = Bound(WORKLOADS)
bad_requests = Bound(BAD_REQUESTS)


_REGISTRY: list[CollectorRegistry] = []


def _registry() -> CollectorRegistry:
    """Built once per process: the workers' multiprocess files plus the live migration gauges
    (``webhook.fleet.gauges.MigrationCollector``, the snapshot of this replica's gauge writer)."""
    if not _REGISTRY:
        from webhook.fleet import gauges

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        registry.register(gauges.MigrationCollector(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
        _REGISTRY.append(registry)
    return _REGISTRY[0]


def render() -> tuple[bytes, str]:
    """The exposition text for /metrics: aggregated over workers in multiprocess mode, with the migration
    gauges (absent when no gauge writer runs); this process's metrics only otherwise."""
    return generate_latest(_registry() if MULTIPROC else REGISTRY), CONTENT_TYPE_LATEST


def worker_exit(pid: int) -> None:
    """gunicorn child_exit hook: drop a dead worker's live gauges."""
    if MULTIPROC:
        multiprocess.mark_process_dead(pid)
