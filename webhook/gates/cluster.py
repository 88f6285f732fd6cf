"""Feature gates as the cluster has them, and which value is in force for ``featureGates: auto``.

The API server publishes its own gate states on ``/metrics`` as
``kubernetes_feature_enabled{name="X",stage="ALPHA"} 1`` (component-base/metrics/prometheus/feature,
registered for every gate of the server's registry; verified on the v1.36.2 control plane in
../shared/k8s: 247 gates, GA ones with ``stage=""``). ``webhook.cluster.api`` fetches the text in the
background; this module parses it and merges it with the policy, with no client import, so the rule and
the ``gates`` command share one definition of "in force":

1. a value the policy sets explicitly (``true``/``false``) always wins;
2. else, for a gate the policy leaves to the cluster (``auto``), the cluster's value when known;
3. else the policy's Kubernetes version default.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

METRIC = "kubernetes_feature_enabled"
_LINE = re.compile(r'^kubernetes_feature_enabled\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ClusterGates:
    """One reading of the API server: gate -> enabled, gate -> stage, the served group/versions."""

    enabled: Mapping[str, bool]
    stages: Mapping[str, str] = field(default_factory=dict)
    served: frozenset[str] = frozenset()  # "group/version" ("v1" for core) from discovery; empty: unknown
    read_at: float = field(default_factory=time.time)  # epoch seconds


def parse_metrics(lines: Iterable[str]) -> tuple[dict[str, bool], dict[str, str]]:
    """Gate states and stages from Prometheus text lines; other metrics are skipped.

    Raises ValueError when no ``kubernetes_feature_enabled`` sample is present (not an API server's
    /metrics, or a proxy's error page): an empty reading must never look like "every gate off".
    """
    enabled: dict[str, bool] = {}
    stages: dict[str, str] = {}
    for line in lines:
        m = _LINE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group("labels")))
        name = labels.get("name")
        if not name:
            continue
        try:
            enabled[name] = float(m.group("value")) != 0
        except ValueError:
            continue
        stages[name] = labels.get("stage", "") or "GA"
    if not enabled:
        raise ValueError(f"no {METRIC} samples in the API server's /metrics")
    return enabled, stages


def served_versions(discovery: Mapping[str, Any]) -> frozenset[str]:
    """``group/version`` strings from an ``/apis`` APIGroupList (core ``v1`` added: always served)."""
    out = {"v1"}
    for group in discovery.get("groups") or []:
        for ver in (group or {}).get("versions") or []:
            gv = (ver or {}).get("groupVersion")
            if isinstance(gv, str):
                out.add(gv)
    return frozenset(out)


@dataclass(frozen=True)
class GateSources:
    """What the policy says about gates, compiled: explicit values, and the gates left to the cluster."""

    fallback: Mapping[str, bool]  # explicit values, else version defaults: the state with no cluster data
    explicit: Mapping[str, bool]
    auto: frozenset[str]


def in_force(sources: GateSources, cluster: Mapping[str, bool] | None, gate: str) -> tuple[bool, str]:
    """(enabled, where from): ``policy``, ``cluster`` or ``default`` (no cluster value known)."""
    if gate in sources.explicit:
        return sources.explicit[gate], "policy"
    if gate in sources.auto and cluster is not None and gate in cluster:
        return cluster[gate], "cluster"
    return sources.fallback.get(gate, False), "default"


def merged(sources: GateSources, cluster: Mapping[str, bool] | None) -> Mapping[str, bool]:
    """Every gate's value in force (see ``in_force``)."""
    return MappingProxyType({g: in_force(sources, cluster, g)[0] for g in sources.fallback})


class MergeCache:
    """The merged map for the latest (policy, cluster reading) pair, so the request path only looks up."""

    def __init__(self) -> None:
        # Holding the objects (not their ids) keeps an id from being reused by a newer policy.
        self._entry: tuple[GateSources, Mapping[str, bool], Mapping[str, bool]] | None = None

    def get(self, sources: GateSources, cluster: Mapping[str, bool]) -> Mapping[str, bool]:
        entry = self._entry
        if entry is None or entry[0] is not sources or entry[1] is not cluster:
            # Benign race between threads: both compute the same value; the assignment is atomic.
            entry = self._entry = (sources, cluster, merged(sources, cluster))
        return entry[2]


def contradictions(sources: GateSources, cluster: Mapping[str, bool]) -> list[tuple[str, bool, bool]]:
    """(gate, policy value, cluster value) where an explicit policy value differs from the cluster."""
    return [
        (gate, value, cluster[gate])
        for gate, value in sorted(sources.explicit.items())
        if gate in cluster and cluster[gate] != value
    ]
