"""rules.memo: what the rules of one request share is computed once per object, and never for another object."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT
from webhook.admission import engine
from webhook.admission.review import parse
from webhook.policy import placement
from webhook.policy.loader import load
from webhook.rules import memo as memo_module
from webhook.rules.memo import Memo
from webhook.rules.ruleset import RuleSet

REVIEWS = ROOT / "bench" / "reviews"
NOW = dt.datetime(2026, 12, 8, tzinfo=dt.UTC)


def test_an_answer_is_kept_for_its_object_and_an_equal_copy_gets_its_own() -> None:
    memo = Memo()
    calls: list[int] = []
    spec: dict[str, Any] = {"containers": []}
    copy = dict(spec)
    assert memo.get("n", spec, lambda: calls.append(1) or 1) == 1
    assert memo.get("n", spec, lambda: calls.append(2) or 2) == 1  # the same object: the first answer
    assert memo.get("n", copy, lambda: calls.append(3) or 3) == 3  # equal, but another object (a mutated copy)
    assert memo.get("m", spec, lambda: calls.append(4) or 4) == 4  # another question about the same object
    assert calls == [1, 3, 4]


@pytest.mark.parametrize(("review", "templates"), [("gpu-pod.json", 1), ("deployment.json", 1)])
def test_one_usage_per_template_and_request(review: str, templates: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every rule of a request reads the same usage (issue 51: each rule computed the template's usage again); the
    mutating phase's copy of the template is a new object and gets one of its own only where a rule asks of it."""
    policy = load(ROOT / "policies" / "default.yaml")
    request = parse((REVIEWS / review).read_bytes())
    counted: list[int] = []
    real = placement.usage

    def counting(podspec: Any, pol: Any, names: Any = None) -> placement.Usage:
        counted.append(id(podspec))
        return real(podspec, pol, names)

    monkeypatch.setattr(memo_module, "usage", counting)
    for phase in ("validate", "mutate"):
        counted.clear()
        decision = engine.evaluate(request, policy, None, phase, NOW)
        assert len(counted) == len(set(counted)), f"{phase}: usage computed twice for one spec"
        assert len(set(counted)) <= templates + (1 if decision.patch else 0)
    assert decision.patch, "the mutating phase patched: the usage above was shared by the rules that patch"


def test_the_memo_changes_no_answer() -> None:
    """The bench reviews answer as without a memo: a fresh memo per rule (nothing shared) gives the same decision."""
    policy = load(ROOT / "policies" / "default.yaml")
    for path in sorted(Path(REVIEWS).glob("*.json")):
        request = parse(path.read_bytes())
        for phase in ("mutate", "validate"):
            shared = engine.evaluate(request, policy, None, phase, NOW)
            unshared = engine.evaluate(request, policy, None, phase, NOW, rules=_unshared(engine.standard_rules()))
            assert json.dumps(shared.patch) == json.dumps(unshared.patch), path.name
            assert [v.finding for v in shared.verdicts] == [v.finding for v in unshared.verdicts], path.name
            assert shared.notes == unshared.notes


def _unshared(rules: Any) -> Any:
    """The same rules, each given a context with a memo of its own."""
    def fresh(fn: Any) -> Any:
        return lambda obj, ctx: fn(obj, replace(ctx, memo=Memo()))

    return RuleSet(tuple(replace(r, fn=fresh(r.fn)) for r in rules.rules))


def test_a_steered_copy_shares_the_requested_names_of_the_containers_it_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """steer-node-pool's copy of the GPU Pod has a new affinity and the same containers: track-rollout reads the
    names the first rule computed (usage itself is computed again: the slice pin reads the affinity)."""
    policy = load(ROOT / "policies" / "default.yaml")
    request = parse((REVIEWS / "gpu-pod.json").read_bytes())
    counted: list[int] = []
    real = memo_module.requested_names
    monkeypatch.setattr(memo_module, "requested_names", lambda spec: counted.append(1) or real(spec))
    assert engine.evaluate(request, policy, None, "mutate", NOW).patch
    assert counted == [1]
