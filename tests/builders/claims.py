"""The claim-rule helpers (tests/data/claims): library objects, the policy, contexts and the single-rule runner."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import yaml

from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.rules.base import Context, Outcome, RuleFn
from webhook.rules.view import ClusterView, OfflineView

DATA = Path(__file__).parents[1] / "data" / "claims"
NOW = dt.datetime(2026, 12, 15, 12, 0, tzinfo=dt.UTC)  # pilot stage for ml-*


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / name).read_text())


def make_policy(**claims_overrides: Any) -> CompiledPolicy:
    doc = load("policy.yaml")
    doc["spec"]["claims"].update(claims_overrides)
    return compile_policy(MigrationPolicy.model_validate(doc), yaml.safe_dump(doc).encode())


POLICY = make_policy()


def make_ctx(
    kind: str,
    *,
    policy: CompiledPolicy = POLICY,
    operation: str = "CREATE",
    namespace: str = "ml-a",
    phase: str = "validate",
    view: ClusterView | None = None,
    old: dict[str, Any] | None = None,
) -> Context:
    cohort = policy.cohort_for(namespace, None)
    return Context(
        policy=policy,
        kind=kind,
        group="resource.k8s.io",
        version="v1",
        operation=operation,
        namespace=namespace,
        phase=phase,  # type: ignore[arg-type]
        now=NOW,
        cohort=cohort,
        stage=policy.stage_for(cohort, NOW),
        view=view or OfflineView(),
        old_object=old,
    )


def run(fn: RuleFn, obj: dict[str, Any], **ctx_args: Any) -> Outcome:
    """Run a rule and check it kept its promise not to touch the request object."""
    before = copy.deepcopy(obj)
    out = fn(obj, make_ctx(obj["kind"], **ctx_args))
    assert obj == before, "a rule modified the request object"
    return out
