"""kubernetes#141620 by cluster version: a DeviceTaintRule without ``spec.deviceSelector`` is applied by
kube-scheduler's ResourceSlice tracker to every device before the fix (#141648, 1.38.0; the release-1.37
cherry-pick #141998 in a patch release not known yet), so no new claim is allocated anywhere while the eviction
controller evicts nothing (webhook/gates/taint_rules.py, the row in webhook/gates/fixes.py).

The pure judgement per version, and ``preflight -f`` against a fake ``/version`` of v1.38.0, v1.37.0 and a 1.37
patch release; ``deviceSelector: {}`` is "all devices" by design.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.builders.preflight import run_preflight
from webhook.gates import fixes
from webhook.gates.fixes import AFFECTED, FIXED, TAINT_RULE_WITHOUT_SELECTOR, UNKNOWN
from webhook.gates.taint_rules import blocks_allocation, judge_omitted, what_it_does

PENDING = "fixed in 1.37.x patch carrying kubernetes/kubernetes#141998, not yet known"


@pytest.mark.parametrize(("server", "state"), [
    ("v1.36.2", AFFECTED), ("v1.37.0", AFFECTED), ("v1.37.0-eks-1a2b", AFFECTED),
    ("v1.37.3", UNKNOWN),  # the cherry-pick's patch release is not known: never guessed
    ("v1.38.0", FIXED), ("v1.38.0-alpha.1", FIXED), ("v1.39.1", FIXED), (None, UNKNOWN),
])
def test_the_bug_by_cluster_version(server: str | None, state: str) -> None:
    assert judge_omitted(server).state == state


def test_the_policy_version_is_the_fallback() -> None:
    assert judge_omitted(None, "1.37").state == AFFECTED and judge_omitted(None, "1.38").state == FIXED
    assert judge_omitted("v1.38.0", "1.37").state == FIXED  # the cluster's answer first
    assert "policy kubernetesVersion 1.37.0 predates the fix" in judge_omitted(None, "1.37").describe()


def test_an_unknown_patch_release_says_so() -> None:
    text = what_it_does(judge_omitted("v1.37.3"), "NoExecute")
    assert PENDING in text and "not known whether it ships the fix for kubernetes/kubernetes#141620" in text
    assert text.startswith("where kube-scheduler lacks the fix, kube-scheduler applies its taint to every device")


def test_effects_that_block_nothing() -> None:
    j = judge_omitted("v1.37.0")
    assert blocks_allocation(j, "NoSchedule") and blocks_allocation(j, "NoExecute")
    assert not blocks_allocation(j, "None") and not blocks_allocation(judge_omitted("v1.38.0"), "NoExecute")
    assert "blocks nothing" in what_it_does(j, "None")


def test_a_patch_release_is_a_row_not_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the changelog names the 1.37.x release carrying #141998, it goes into ``fixed_in`` and the backport is
    cleared: that release and later are fixed, earlier 1.37 patches have the bug."""
    row = fixes.FIXES[TAINT_RULE_WITHOUT_SELECTOR]
    known = dataclasses.replace(row, fixed_in=((1, 37, 4), (1, 38, 0)), backport="", backport_minor=None)
    monkeypatch.setitem(fixes.FIXES, TAINT_RULE_WITHOUT_SELECTOR, known)  # type: ignore[index]
    assert [judge_omitted(v).state for v in ("v1.37.3", "v1.37.4", "v1.37.9", "v1.38.0")] == [
        AFFECTED, FIXED, FIXED, FIXED]
    assert "in 1.37.4, 1.38.0" in judge_omitted("v1.37.3").describe()


RULE = """apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: maintenance}
spec:
  taint: {key: example.com/maintenance, value: firmware, effect: NoExecute}
"""


def _rule(tmp_path: Path, text: str = RULE) -> str:
    path = tmp_path / "rule.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(("git_version", "bug", "said"), [
    ("v1.38.0", FIXED, "the rule has no deviceSelector: it selects no devices (cluster version 1.38.0 ships"),
    ("v1.37.0", AFFECTED, "the rule has no deviceSelector: kube-scheduler applies its taint to every device in the "
                          "cluster: no claim that does not tolerate it is allocated anywhere, while the eviction "
                          "controller selects no device and evicts nothing (cluster version 1.37.0 predates"),
    ("v1.37.2", UNKNOWN, PENDING),
])
def test_preflight_says_what_a_rule_without_a_selector_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], git_version: str, bug: str, said: str,
) -> None:
    """Issue 46 item 3: on v1.37.0 the rule stops every new allocation; on v1.38.0 it selects nothing."""
    code, out = run_preflight(tmp_path, capsys, [], ["-f", _rule(tmp_path)], git_version)
    assert code == 0 and out["selector"] is None and out["pods"] == []
    assert out["selectorOmitted"] == {"bug": bug, "version": git_version[1:],
                                      "blocksAllocation": bug != FIXED}
    assert any(said in n for n in out["notes"]), out["notes"]


def test_preflight_without_a_version_falls_back_to_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out = run_preflight(tmp_path, capsys, [], ["-f", _rule(tmp_path)], None)
    assert out["selectorOmitted"]["bug"] == AFFECTED  # the test policy says kubernetesVersion 1.37
    assert any("policy kubernetesVersion 1.37.0 predates the fix for kubernetes/kubernetes#141620" in n
               for n in out["notes"])


def test_an_empty_selector_is_every_device_by_design(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rule = RULE.replace("spec:\n", "spec:\n  deviceSelector: {}\n")
    _, out = run_preflight(tmp_path, capsys, [], ["-f", _rule(tmp_path, rule)], "v1.37.0")
    assert out["selector"] == {} and "selectorOmitted" not in out
    assert not any("deviceSelector" in n for n in out["notes"])


def test_the_table_heading_says_it_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fakeapi import FakeAPI, write_policy
    from webhook.cli import main

    with FakeAPI() as fake:
        fake.git_version = "v1.37.0"
        assert main(["preflight", "-f", _rule(tmp_path), "--kubeconfig", fake.write_kubeconfig(tmp_path),
                     "--policy", write_policy(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith(
        "Taint example.com/maintenance=firmware:NoExecute on no devices to evict, but every device for "
        "kube-scheduler's allocation (no deviceSelector)\n")
