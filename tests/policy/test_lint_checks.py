"""`dra-webhook lint` warnings: each kind from a real policy file, printed as file:line: warning:, exit 0."""

from __future__ import annotations

import datetime as dt
import textwrap
from pathlib import Path

import pytest

from tests.fakeapi import FakeAPI, device_class, namespace
from tests.helpers import ROOT
from webhook.cli import main
from webhook.policy.lint_checks import covers
from webhook.policy.loader import lint_report

POLICY = """\
apiVersion: dra-migration.io/v1alpha1
kind: MigrationPolicy
metadata: {name: lint-test}
spec:
  kubernetesVersion: "1.37"
  resources:
  - {name: example.com/gpu, deviceClassName: gpu.example.com, legacyNames: [vendor.example.com/gpu]}
  claims:
    allowedDeviceClasses: [gpu.example.com]
  cohorts:
  - name: ml
    namespaces: {names: ["ml-*"]}
    schedule:
    - {stage: pilot, from: "2027-01-01"}
    - {stage: migrated, from: "2027-03-01"}
  exceptions:
  - {namespaces: [ml-a], rules: [legacy-resource-name], reason: "INC-1", expires: "2027-02-10"}
"""


def _write(tmp: Path, text: str) -> Path:
    path = tmp / "policy.yaml"
    path.write_text(text)
    return path


def _line(text: str, needle: str, nth: int = 1) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return lines[nth - 1]


def _warnings(tmp: Path, text: str, today: str = "2027-01-01", **kw: object) -> list[str]:
    report = lint_report(_write(tmp, text), today=dt.date.fromisoformat(today), **kw)
    assert report.errors == [], report.errors
    return [str(w) for w in report.warnings]


def test_clean_policy_has_no_warnings(tmp_path: Path) -> None:
    assert _warnings(tmp_path, POLICY) == []


@pytest.mark.parametrize(
    ("today", "expected"),
    [
        ("2027-01-26", None),  # 15 days left: quiet
        ("2027-01-27", "exception 'INC-1' expires on 2027-02-10 (14 days left); fix legacy-resource-name in ml-a"),
        ("2027-02-09", "(1 day left)"),
        ("2027-02-10", "(today is its last day)"),
        ("2027-02-11", "exception 'INC-1' expired on 2027-02-10 and no longer applies"),
    ],
)
def test_exception_expiry(tmp_path: Path, today: str, expected: str | None) -> None:
    found = _warnings(tmp_path, POLICY, today)
    if expected is None:
        assert found == []
    else:
        path = tmp_path / "policy.yaml"
        [w] = found
        assert w.startswith(f"{path}:{_line(POLICY, 'INC-1')}: spec.exceptions[0].expires: ") and expected in w


def test_cohort_shadowed_by_an_earlier_glob(tmp_path: Path) -> None:
    text = POLICY.replace('  exceptions:', textwrap.indent(textwrap.dedent("""\
        - name: vision
          namespaces: {names: ["ml-vision", "ml-vision-*"]}
        - name: labelled
          namespaces: {names: ["ml-x"], selector: {matchLabels: {team: x}}}
        - name: char-class
          namespaces: {names: ["ml-[ab]"]}
        - name: partly
          namespaces: {names: ["ml-b", "batch-*"]}
        """), "  ") + "  exceptions:")
    [w] = _warnings(tmp_path, text)
    assert w.startswith(f"{tmp_path / 'policy.yaml'}:{_line(text, 'ml-vision')}: spec.cohorts[1].namespaces.names: ")
    assert "cohort 'vision' can never match: every name it matches is matched first by the earlier cohort 'ml'" in w


def test_everything_after_a_catch_all_cohort_is_unreachable(tmp_path: Path) -> None:
    text = POLICY.replace('names: ["ml-*"]', 'names: ["*"]').replace("  exceptions:", textwrap.indent(
        "- name: research\n  namespaces: {selector: {matchLabels: {division: research}}}\n", "  ") + "  exceptions:")
    [w] = _warnings(tmp_path, text)
    assert f":{_line(text, 'name: research')}: spec.cohorts[1].name: cohort 'research' can never match" in w
    assert "matches every namespace name ('*')" in w


@pytest.mark.parametrize(
    ("earlier", "later", "covered"),
    [
        ("ml-*", "ml-team-*", True),
        ("ml-*", "ml-a", True),
        ("*-gpu", "team-*-gpu", True),
        ("ml-*", "ml*", False),
        ("ml-?", "ml-*", False),  # '?' matches the text '*' but not every name 'ml-*' matches
        ("ml-*", "ml-?", True),
        ("ml-*", "ml-[ab]", False),  # true, but not decided by text matching: left alone
        ("*b*", "a[bc]", False),  # literal 'b' inside a character class
        ("ml-a", "ml-a", True),
        ("ml-a", "ml-b", False),
    ],
)
def test_glob_cover_is_conservative(earlier: str, later: str, covered: bool) -> None:
    assert covers(earlier, later) is covered


def test_schedule_out_of_order_and_same_date(tmp_path: Path) -> None:
    text = POLICY.replace(
        '    - {stage: pilot, from: "2027-01-01"}\n    - {stage: migrated, from: "2027-03-01"}\n',
        '    - {stage: migrated, from: "2027-03-01"}\n    - {stage: pilot, from: "2027-01-01"}\n'
        '    - {stage: legacy, from: "2027-01-01"}\n',
    )
    found = _warnings(tmp_path, text)
    assert len(found) == 2
    assert f":{_line(text, 'stage: pilot')}: spec.cohorts[0].schedule[1].from: schedule entry pilot from " \
           "2027-01-01 comes after migrated from 2027-03-01 but is earlier" in found[0]
    assert f":{_line(text, 'stage: legacy')}: spec.cohorts[0].schedule[2].from: two schedule entries" in found[1]


def test_device_class_mapped_twice(tmp_path: Path) -> None:
    text = POLICY.replace("  claims:", "  - {name: example.com/gpu-mig, deviceClassName: gpu.example.com}\n  claims:")
    [w] = _warnings(tmp_path, text)
    assert f":{_line(text, 'gpu-mig')}: spec.resources[1].deviceClassName: deviceClassName 'gpu.example.com' " \
           "is mapped twice (example.com/gpu and example.com/gpu-mig)" in w


def _gate_errors(tmp: Path, version: str, gates: str) -> list[str]:
    text = POLICY.replace('kubernetesVersion: "1.37"', f'kubernetesVersion: "{version}"\n  featureGates:\n{gates}')
    report = lint_report(_write(tmp, text), today=dt.date(2027, 1, 1))
    return [str(e) for e in report.errors]


@pytest.mark.parametrize(("version", "gate", "value", "why"), [
    ("1.36", "DRADerivedAttributes", "true", "(it is not added before 1.37)"),
    ("1.36", "DRADerivedAttributes", "false", "(it is not added before 1.37)"),  # unknown whatever the value
    ("1.37", "WorkloadAwarePreemption", "false", "(1.37 merged it into GenericWorkload)"),
    ("1.37", "GangScheduling", "true", "(1.37 does not have it)"),
    ("1.38", "DynamicResourceAllocation", "true",
     "(1.38 removed it: its fields are always served, kubernetes/kubernetes#141946"),
])
def test_gate_the_version_does_not_have_is_an_error(tmp_path: Path, version: str, gate: str, value: str,
                                                     why: str) -> None:
    """Issue 46 item 1: component-base featuregate refuses a gate the binary does not know ("unrecognized
    feature gate"), so no cluster of that version runs with it: lint errors at its line, exit 1."""
    [e] = _gate_errors(tmp_path, version, f"    DRAPrioritizedList: true\n    {gate}: {value}")
    text = (tmp_path / "policy.yaml").read_text()
    assert f":{_line(text, gate + ':')}: spec.featureGates.{gate}: feature gate {gate} does not exist in " \
           f"Kubernetes {version} {why}" in e
    assert '"unrecognized feature gate"' in e and "remove it from spec.featureGates" in e
    assert main(["lint", str(tmp_path / "policy.yaml")]) == 1


@pytest.mark.parametrize(("version", "gate"), [
    ("1.36", "DRAAdminAccess"),
    ("1.36", "DynamicResourceAllocation"),
    ("1.37", "DRAExtendedResource"),
    ("1.37", "DynamicResourceAllocation"),
    ("1.38", "DRADeviceTaints"),
    ("1.38", "DRADeviceTaintRules"),
])
def test_locked_gate_set_against_its_lock_is_an_error(tmp_path: Path, version: str, gate: str) -> None:
    """Issue 46 item 1: "cannot set feature gate X to false, feature is locked to true" (component-base
    featuregate; tests/e2e/test_locked_gates.py shows v1.36.2 refuse it); set to its lock it is fine."""
    [e] = _gate_errors(tmp_path, version, f"    {gate}: false")
    text = (tmp_path / "policy.yaml").read_text()
    assert f":{_line(text, gate + ':')}: spec.featureGates.{gate}: feature gate {gate} is locked to true in " \
           f"Kubernetes {version}" in e
    assert f'"cannot set feature gate {gate} to false, feature is locked to true"' in e
    assert main(["lint", str(tmp_path / "policy.yaml")]) == 1
    assert _gate_errors(tmp_path, version, f"    {gate}: true") == []


def test_switchable_gate_off_in_each_version_is_fine(tmp_path: Path) -> None:
    for version in ("1.36", "1.37", "1.38"):
        assert _gate_errors(tmp_path, version, "    DRAConsumableCapacity: false") == [], version


def test_unbounded_injected_toleration(tmp_path: Path) -> None:
    text = POLICY.replace("  cohorts:", "  trainingJobs:\n    labels: {kind: training}\n    deviceTolerations:\n"
                          "    - {key: example.com/maintenance, operator: Exists, effect: NoExecute}\n  cohorts:")
    [w] = _warnings(tmp_path, text)
    assert "spec.trainingJobs.deviceTolerations[0]: device toleration (key=example.com/maintenance operator=Exists " \
           "value=(none) effect=NoExecute tolerationSeconds=(unset: forever)) tolerates NoExecute taints forever" in w


def test_device_plugin_pool_that_does_not_say_what_it_advertises(tmp_path: Path) -> None:
    """Issue 24 item 1: steering of legacy-stage Pods rests on the guess, so lint spells it out."""
    text = POLICY.replace("  claims:", "  - {name: example.com/fpga, deviceClassName: fpga.example.com}\n"
                          "  nodePools:\n    dra: {nodeSelector: {pool: dra}}\n"
                          "    devicePlugin: {nodeSelector: {pool: dp}}\n  claims:", 1)
    [w] = _warnings(tmp_path, text)
    assert f":{_line(text, 'devicePlugin:')}: spec.nodePools.devicePlugin: nodePools.devicePlugin.advertises is " \
           "unset: assuming its nodes' device plugins advertise example.com/fpga, vendor.example.com/gpu" in w
    stated = text.replace("{nodeSelector: {pool: dp}}",
                          "{nodeSelector: {pool: dp}, advertises: [vendor.example.com/gpu]}")
    assert _warnings(tmp_path, stated) == []


def test_cluster_device_classes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = POLICY.replace("    allowedDeviceClasses: [gpu.example.com]",
                          "    allowedDeviceClasses: [gpu.example.com, nic.example.com]")
    text = text.replace("  claims:", "  - {name: example.com/fpga, deviceClassName: fpga.example.com}\n  claims:")
    path = _write(tmp_path, text)
    with FakeAPI() as api:
        api.put(device_class("gpu.example.com", "example.com/gpu-old"), device_class("other.example.com"),
                namespace("ml-a"))
        kubeconfig = api.write_kubeconfig(tmp_path)
        code = main(["lint", "--at", "2027-01-01", "--kubeconfig", kubeconfig, str(path)])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[:3] == [
        f"{path}:{_line(text, 'deviceClassName: gpu.example.com')}: warning: spec.resources[0].deviceClassName: "
        "DeviceClass gpu.example.com in the cluster has spec.extendedResourceName example.com/gpu-old, but the "
        "policy maps it to example.com/gpu: set extendedResourceName: example.com/gpu on the class",
        f"{path}:{_line(text, 'fpga.example.com')}: warning: spec.resources[1].deviceClassName: DeviceClass "
        "fpga.example.com does not exist in the cluster: Pods requesting example.com/fpga cannot be served "
        "through DRA",
        f"{path}:{_line(text, 'nic.example.com')}: warning: spec.claims.allowedDeviceClasses[1]: allowed "
        "DeviceClass nic.example.com does not exist in the cluster",
    ]
    assert out[3].startswith("policy OK: ") and out[3].endswith(", 3 warnings")


def test_unreachable_cluster_is_reported_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, POLICY)
    code = main(["lint", "--at", "2027-01-01", "--kubeconfig", str(tmp_path / "missing"), str(path)])
    captured = capsys.readouterr()
    assert code == 0 and "warning: cluster checks skipped:" in captured.err and "does not exist" in captured.err


def test_lint_command_prints_warnings_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, POLICY)
    assert main(["lint", "--at", "2027-02-11", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"{path}:{_line(POLICY, 'INC-1')}: warning: spec.exceptions[0].expires: exception 'INC-1' "
                      "expired on 2027-02-10 and no longer applies")
    assert out[1].endswith(", 1 warning")
    broken = _write(tmp_path, POLICY.replace("pilot", "pilott", 1))
    assert main(["lint", "--at", "2027-02-11", str(broken)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 error" and not any(": warning: " in line for line in out)


def test_shipped_policy_lints_clean_away_from_expiry_dates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "--at", "2026-12-01", str(ROOT / "policies")]) == 0
    out = capsys.readouterr().out
    assert "warning" not in out and out.startswith("policy OK: ")
