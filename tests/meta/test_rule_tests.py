"""Every rule is tested where a maintainer looks (issue 44 item 3): `pytest -k <rule-id>` selects its tests.

tests/conftest.py marks each collected test with the ids of the rules it exercises (named in its source, its
parameters or a ``@pytest.mark.rule`` marker). Here, for every rule id: at least one unit test carries it, at
least one case of the bundled policy's suites (policies/tests) expects it, and a compiled rule is in the
compiled-equivalence tables: the one that runs in-process (tests/compile/test_cel_in_process.py, validating
policies) and the one on the real API server (tests/e2e/test_compiled_policies.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import NAMED_KEY, RULES_KEY
from tests.e2e.compiled_table import MUTATED, MUTATING_ONLY
from tests.helpers import ROOT
from webhook.compile import coverage
from webhook.policy.rule_ids import RULE_IDS

SUITES = ROOT / "policies" / "tests"


def _collected_everything(config: pytest.Config) -> bool:
    """Whether this session collected the whole suite (a run of one file sees only that file's tests)."""
    args = [Path(a.split("::")[0]).resolve() for a in config.args] or [ROOT]
    return any(a in (ROOT, ROOT / "tests") for a in args)


@pytest.fixture(scope="module")
def by_rule(request: pytest.FixtureRequest) -> dict[str, list[str]]:
    if not _collected_everything(request.config):
        pytest.skip("needs the whole suite collected (run `pytest` or `pytest tests`)")
    return request.config.stash[RULES_KEY]


@pytest.fixture(scope="module")
def named_by_rule(request: pytest.FixtureRequest, by_rule: dict[str, list[str]]) -> dict[str, list[str]]:
    return request.config.stash[NAMED_KEY]


def suite_rules() -> dict[str, list[str]]:
    """Rule id -> the policies/tests cases whose ``expect.rules`` or ``expect.mutatedBy`` names it."""
    out: dict[str, list[str]] = {}
    for path in sorted(SUITES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for case in doc.get("cases") or []:
            expect = case.get("expect") or {}
            for rid in [*(expect.get("rules") or {}), *(expect.get("mutatedBy") or [])]:
                out.setdefault(rid, []).append(f"{path.name}: {case.get('name')}")
    return out


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_every_rule_has_unit_tests(rule_id, named_by_rule):
    """A test that names the rule (not one run over every rule id, such as explain's examples)."""
    units = [n for n in named_by_rule.get(rule_id, []) if not n.startswith(("tests/e2e/", "tests/meta/"))]
    assert units, f"no unit test exercises {rule_id}: name it in a test (its id or ids.{rule_id.upper()})"


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_every_rule_has_a_policy_suite_case(rule_id):
    assert suite_rules().get(rule_id), f"no case in policies/tests expects {rule_id} (expect.rules, expect.mutatedBy)"


@pytest.mark.parametrize("rule_id", sorted(set(coverage.COMPILED) - set(MUTATING_ONLY)))
def test_every_compiled_validating_rule_is_in_the_in_process_equivalence_table(rule_id, by_rule):
    rows = [n for n in by_rule.get(rule_id, []) if n.startswith("tests/compile/test_cel_in_process.py::")]
    assert rows, f"the in-process compiled-equivalence table has no row for {rule_id}"


@pytest.mark.parametrize("rule_id", MUTATED)
def test_every_compiled_mutation_is_compared_by_the_e2e_test(rule_id):
    """The compiled mutations are compared on the real API server only (the e2e module is collected where a
    control plane is, as in CI): its code must compare what each one writes. The validating rules are judged on
    the same table (tests/e2e/compiled_table.py) in-process, above."""
    import ast

    tree = ast.parse((ROOT / "tests" / "e2e" / "test_compiled_policies.py").read_text(encoding="utf-8"))
    code = ast.unparse(ast.Module([n for n in tree.body if not isinstance(n, ast.Expr)], []))  # no docstrings
    from tests.conftest import _rule_patterns

    assert dict(_rule_patterns())[rule_id].search(code) or {"steer-node-pool": "placement(",
                                                            "track-rollout": "tracking(",
                                                            "inject-device-tolerations": "tolerated("}[rule_id] in code
    assert rule_id in coverage.COMPILED


def test_the_marking_sees_ids_constants_and_markers():
    from tests.conftest import _rule_patterns

    patterns = dict(_rule_patterns())
    assert patterns["allocation-mode-all"].search("assert paths(out, ids.ALLOCATION_MODE_ALL)")
    assert patterns["allocation-mode-all"].search("run(claims.allocation_mode_all, obj)")
    assert patterns["gated-feature"].search('{"rule": "gated-feature"}')
    assert not patterns["steer-node-pool"].search("steer-node-pools-other")
    assert not patterns["track-rollout"].search("RULE_IDS")
