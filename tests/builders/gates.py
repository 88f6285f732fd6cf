"""The gate-rule helpers (tests/data/gates): policies with chosen feature gates and the gated-feature runner."""

from __future__ import annotations

import copy
import datetime as dt
import functools
from typing import Any

from webhook.gates.catalogue import GATES
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.rules.base import Context, Finding
from webhook.rules.gates import gated_feature
from webhook.rules.view import OfflineView

NOW = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)


@functools.cache
def _policy(version: str, gates: tuple[tuple[str, bool], ...]) -> CompiledPolicy:
    doc = {
        "apiVersion": "dra-migration.io/v1alpha1",
        "kind": "MigrationPolicy",
        "metadata": {"name": "gates-test"},
        "spec": {"kubernetesVersion": version, "featureGates": dict(gates)},
    }
    return compile_policy(MigrationPolicy.model_validate(doc), repr(doc).encode())


def policy(version: str = "1.37", **gates: bool) -> CompiledPolicy:
    return _policy(version, tuple(sorted(gates.items())))


def all_on_except(*off: str, version: str = "1.37") -> CompiledPolicy:
    """Every gate ``version`` lets a cluster set, on, except ``off``; a locked gate stays at its lock (no
    cluster runs otherwise, and the loader refuses it) and a gate the version lacks is left out."""
    return policy(version, **{g.name: g.name not in off for g in GATES
                              if (st := g.stage_in(version)) is not None and not st.locked})


def run(
    obj: dict[str, Any],
    pol: CompiledPolicy,
    phase: str = "mutate",
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    view: Any = None,
) -> tuple[list[Finding], tuple[str, ...]]:
    """(findings, degraded notes) of gated-feature."""
    group, _, version = obj["apiVersion"].rpartition("/")
    ctx = Context(
        policy=pol,
        kind=obj["kind"],
        group=group,
        version=version,
        operation=operation,
        namespace=obj["metadata"].get("namespace", ""),
        phase=phase,  # type: ignore[arg-type]
        now=NOW,
        cohort=None,
        stage="pilot",
        view=view if view is not None else OfflineView(),
        old_object=old,
    )
    before = copy.deepcopy(obj)
    outcome = gated_feature(obj, ctx)
    assert obj == before, "a rule must never modify the object"
    assert outcome.mutated is None
    return outcome.findings, outcome.degraded
