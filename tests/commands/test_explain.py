"""`dra-webhook explain`: docstring, actions, an example that really fires, the fix; README's rule table."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import kubernetes_validate
import pytest

from tests.helpers import K8S_VERSION, ROOT
from webhook.cli import main
from webhook.commands.explain import fire, markdown_table, rule_info, summary
from webhook.policy.loader import load
from webhook.policy.rule_ids import RULE_IDS
from webhook.rules.examples import EXAMPLES

DEFAULT = load(ROOT / "policies" / "default.yaml")


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture()
def explain(capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    def run(*args: str) -> Ran:
        code = main(["explain", *args])
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)

    return run


def test_help_runs_as_a_command() -> None:
    proc = subprocess.run([sys.executable, "-m", "webhook", "explain", "--help"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert "--markdown" in proc.stdout and "exit status" in proc.stdout


def test_every_rule_has_an_example() -> None:
    assert sorted(EXAMPLES) == sorted(RULE_IDS)


@pytest.mark.parametrize("rule", RULE_IDS)
def test_example_fires_its_rule_through_the_engine(rule: str) -> None:
    example = EXAMPLES[rule]
    kubernetes_validate.validate(example.object, K8S_VERSION, strict=True)  # a real 1.37 object
    fired = fire(rule, DEFAULT)
    if rule_info(rule).mutating:
        assert fired.patch or fired.findings, f"{rule}: the example changes nothing"
    else:
        assert fired.findings, f"{rule}: the example does not fire under policies/default.yaml"
        assert all(action != "Off" for action, _, _ in fired.findings)
    assert example.fix.strip()


@pytest.mark.parametrize("rule", ["legacy-resource-name", "inject-device-tolerations", "gated-feature"])
def test_explain_prints_doc_actions_example_and_fix(rule: str, explain: Callable[..., Ran]) -> None:
    proc = explain(rule)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    info = rule_info(rule)
    assert out.startswith(rule + "\n")
    assert summary(info.doc) in " ".join(out.split())
    for stage in ("legacy", "pilot", "migrated"):
        assert f"\n  {stage} " in out
    assert "Example that fires it" in out and f"name: {EXAMPLES[rule].object['metadata']['name']}" in out
    assert "How to fix:" in out and EXAMPLES[rule].fix[:40] in out


def test_explain_shows_the_real_finding_and_patch(explain: Callable[..., Ran]) -> None:
    out = explain("legacy-resource-name").stdout
    assert "-> Deny: " in out and "vendor.example.com/gpu" in out
    assert "exception: ml-legacy-batch until 2027-03-01" in out
    out = explain("inject-device-tolerations").stdout
    assert "-> patch:" in out and "example.com/maintenance" in out
    out = explain("training-job-extended-resource").stdout
    assert "migrated  Warn (advisory)" in out


def test_explain_uses_the_given_policy(tmp_path: Path, explain: Callable[..., Ran]) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text((ROOT / "policies" / "default.yaml").read_text().replace(
        "      toleration-too-broad: Deny\n", "      toleration-too-broad: Warn\n      legacy-resource-name: Off\n"))
    out = explain("legacy-resource-name", "--policy", str(policy)).stdout
    assert "  migrated  Off    (enforcement.rules override)" in out
    assert f"under policy {load(policy).identity}" in out


def test_unknown_rule_suggests_and_exits_2(explain: Callable[..., Ran]) -> None:
    proc = explain("legacy-resource-nmae")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "unknown rule 'legacy-resource-nmae'; did you mean 'legacy-resource-name'?" in proc.stderr
    proc = explain("no-such-thing-at-all")
    assert proc.returncode == 2 and "known rules: legacy-resource-name" in proc.stderr


def test_listing_without_a_rule(explain: Callable[..., Ran]) -> None:
    proc = explain()
    assert proc.returncode == 0
    for rule in RULE_IDS:
        assert f"\n  {rule} " in proc.stdout


def test_readme_rule_table_is_generated(explain: Callable[..., Ran]) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = "<!-- rules:start -->\n", "<!-- rules:end -->"
    assert readme.count(start) == 1 and readme.count(end) == 1
    section = readme[readme.index(start) + len(start): readme.index(end)]
    assert section == markdown_table(), "README.md rules section is stale: regenerate it with " \
        "`dra-webhook explain --markdown` between the rules markers"
    assert explain("--markdown").stdout == section
    for rule in RULE_IDS:
        assert f"| `{rule}` |" in section
