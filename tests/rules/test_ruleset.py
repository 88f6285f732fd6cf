"""Rules by value (issue #26 item 4) and one result for "mutate, then validate" (item 3).

The engine runs the ``RuleSet`` it is given: a test injects a rule by building a set with it, never by
patching a registry, and importing the engine imports no rule module. ``admission.admit`` returns one
``Admitted`` that `check`, `test`, `replay` and `explain` all read.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import types
from typing import Any

from tests.helpers import ROOT, gpu_pod, review
from webhook.admission import engine
from webhook.admission.answer import admit, validate_only
from webhook.admission.review import parse_request
from webhook.cli import main as cli
from webhook.commands import EXIT_CODES
from webhook.policy import rule_ids as ids
from webhook.policy.loader import load
from webhook.policy.model import Action
from webhook.rules.base import Context, Finding, Outcome, Rule, rule
from webhook.rules.ruleset import MODULES, RuleSet, standard_rules

POLICY = load(ROOT / "tests" / "data" / "live-policy.yaml")  # mig-a migrated, pilot-a pilot
NOW = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
LEGACY = "vendor.example.com/gpu"  # a legacy resource name under this policy


def _request(namespace: str, resource: str | None = None) -> Any:
    pod = gpu_pod(namespace=namespace, **({"resource": resource} if resource else {}))
    return parse_request(review(pod, namespace=namespace)["request"])


def _flag(obj: dict[str, Any], ctx: Context) -> Outcome:
    return Outcome([Finding("injected", f"saw {ctx.kind} in {ctx.namespace}")])


def test_importing_the_engine_imports_no_rule_module() -> None:
    code = ("import sys, webhook.admission.engine, webhook.admission.answer; "
            f"print(sorted(m for m in sys.modules if m.startswith('webhook.rules.') "
            f"and m.rpartition('.')[2] in {MODULES!r}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_engine_runs_the_rule_set_it_is_given_and_the_standard_set_by_default() -> None:
    injected = RuleSet((Rule("injected", frozenset({"Pod"}), frozenset({"validate"}), _flag),))
    req = _request("mig-a", LEGACY)
    mine = engine.evaluate(req, POLICY, None, "validate", NOW, injected)
    assert [(v.rule, v.finding.message, v.action) for v in mine.verdicts] == [
        ("injected", "saw Pod in mig-a", Action.Deny)]  # a migrated namespace: the stage default is Deny
    standard = engine.evaluate(req, POLICY, None, "validate", NOW)
    assert "injected" not in {v.rule for v in standard.verdicts}
    assert ids.LEGACY_RESOURCE_NAME in {v.rule for v in standard.verdicts}


def test_a_rule_set_is_collected_from_the_decorated_functions_in_declaration_order(monkeypatch) -> None:
    module = types.ModuleType("rules_under_test")

    @rule("late", ("Pod",))
    @rule("early", ("Deployment",), phases=("mutate",), mutating=True)
    def both(obj: dict[str, Any], ctx: Context) -> Outcome:
        return Outcome()

    def plain(obj: dict[str, Any], ctx: Context) -> Outcome:
        return Outcome()

    for fn in (both, plain):
        fn.__module__ = module.__name__
        setattr(module, fn.__name__, fn)
    module.imported = _flag  # declared nowhere, and from another module: not collected
    monkeypatch.setitem(sys.modules, module.__name__, module)
    rules = RuleSet.of_modules([module.__name__])
    assert [(r.id, r.mutating, sorted(r.kinds)) for r in rules.rules] == [
        ("early", True, ["Deployment"]), ("late", False, ["Pod"])]
    assert rules.kinds() == {"Deployment", "Pod"} and [r.id for r in rules.named("late")] == ["late"]


def test_selection_puts_mutating_rules_last_and_track_rollout_at_the_very_end() -> None:
    def fn(obj: dict[str, Any], ctx: Context) -> Outcome:
        return Outcome()

    pod = frozenset({"Pod"})
    mutate = frozenset({"mutate"})
    rules = RuleSet((Rule(ids.TRACK_ROLLOUT, pod, mutate, fn, mutating=True), Rule("m", pod, mutate, fn, mutating=True),
                     Rule("v", pod, mutate, fn), Rule("other-kind", frozenset({"Job"}), mutate, fn)))
    assert [r.id for r in rules.select("Pod", "mutate", "CREATE")] == ["v", "m", ids.TRACK_ROLLOUT]
    assert rules.select("Pod", "mutate", "DELETE") == () and rules.select("Pod", "validate", "CREATE") == ()


def test_replaced_swaps_one_rule_and_leaves_the_standard_set_alone() -> None:
    broken = standard_rules().replaced(ids.MAX_DEVICES_PER_POD, _flag)
    assert {r.fn for r in broken.named(ids.MAX_DEVICES_PER_POD)} == {_flag}
    assert _flag not in {r.fn for r in standard_rules().rules}
    assert len(broken.rules) == len(standard_rules().rules)


def test_admitted_reads_mutate_then_validate_as_one_result() -> None:
    steered = admit(_request("pilot-a"), POLICY, None, NOW)
    assert steered.allowed and steered.validate is not None and steered.patch
    assert steered.final is steered.mutated and steered.final != steered.request.object
    assert [a.uid for a in steered.answers] == [steered.request.uid] * 2
    denied = admit(_request("mig-a", LEGACY), POLICY, None, NOW)
    assert not denied.allowed and denied.strongest()[ids.LEGACY_RESOURCE_NAME] is Action.Deny
    assert denied.message.startswith(f"{ids.LEGACY_RESOURCE_NAME} (migrated")
    phases = [phase for phase, _ in denied.findings()]
    assert len(phases) == len({(v.rule, v.finding.message) for _, v in denied.findings()})  # each finding once
    alone = validate_only(_request("mig-a", LEGACY), POLICY, None, NOW)
    assert alone.mutate.verdicts == [] and alone.patch == [] and alone.final == alone.request.object
    assert not alone.allowed and alone.message == denied.validate.message  # type: ignore[union-attr]


def test_cli_errors_print_their_message_and_exit_with_their_code(tmp_path, capsys) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("kind: MigrationPolicy\n")
    assert cli(["check", "--policy", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("policy error:\n") and f"{bad}:" in err and "Traceback" not in err
    assert cli(["explain", "no-such-rule"]) == 2
    assert "unknown rule 'no-such-rule'" in capsys.readouterr().err
    assert cli(["replay", "--policy", str(ROOT / "policies"), str(tmp_path / "missing.jsonl")]) == 2
    assert capsys.readouterr().err == f"input error: {tmp_path / 'missing.jsonl'}: no such file\n"


def test_help_lists_every_exit_code(capsys) -> None:
    try:
        cli(["--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    for code, meaning in EXIT_CODES.items():
        assert f"{code:<3} {meaning[:30]}" in out
