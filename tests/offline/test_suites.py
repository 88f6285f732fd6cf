"""`dra-webhook test`: the shipped suites pass and cover every rule; passing, failing and broken suites."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import ROOT
from webhook.cli import main
from webhook.offline.suites import run_suites
from webhook.policy.rule_ids import RULE_IDS

POLICY = ROOT / "policies" / "default.yaml"

LEGACY_POD = """\
apiVersion: v1
kind: Pod
metadata: {name: legacy-0}
spec:
  containers:
  - name: trainer
    image: registry.example.com/trainer:1.0
    resources: {limits: {vendor.example.com/gpu: "2"}}
"""


def _suite(tmp: Path, name: str, body: str, policy: Path = POLICY) -> Path:
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    head = textwrap.dedent(f"""\
        apiVersion: dra-migration.io/v1alpha1
        kind: MigrationPolicyTest
        metadata: {{name: {path.stem}}}
        policy: {policy}
        at: "2027-02-15"
        namespace: ml-vision
        """)
    path.write_text(head + textwrap.dedent(body))
    return path


def _run(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["test", *args])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_shipped_suites_pass_and_cover_every_rule() -> None:
    """The project's own test command runs policies/tests, as platform teams would in CI."""
    proc = subprocess.run([sys.executable, "-m", "webhook", "test", "--require-all-rules", "policies/tests"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"rules covered: {len(RULE_IDS)}/{len(RULE_IDS)}" in proc.stdout
    report = run_suites([ROOT / "policies" / "tests"])
    assert not report.broken and not report.failed
    assert set(RULE_IDS) <= report.covered, sorted(set(RULE_IDS) - report.covered)
    # Every shipped suite is judged on a fixed date, so a schedule date passing cannot break it.
    for suite in (ROOT / "policies" / "tests").glob("*.yaml"):
        assert '\nat: "' in suite.read_text(), f"{suite.name} needs a suite-level `at:` date"


def test_default_dir_is_policies_tests(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)
    code, out = _run("-q", capsys=capsys)
    assert code == 0, out


def test_passing_suite_prints_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "objects").mkdir()
    (tmp_path / "objects" / "pod.yaml").write_text(LEGACY_POD + "---\n" + LEGACY_POD.replace("legacy-0", "legacy-1"))
    _suite(tmp_path, "pass.yaml", """\
        cases:
        - name: legacy name refused
          files: [objects/pod.yaml]
          expect:
            allowed: false
            rules: [legacy-resource-name]
            message: vendor.example.com/gpu
        - name: pilot warns and patches
          at: "2026-12-15"
          files: [objects/pod.yaml]
          expect:
            allowed: true
            rules: {legacy-resource-name: Warn}
            warnings: ["instead of vendor.example.com/gpu"]
            patched: {/metadata/annotations/dra-migration.io~1stage: pilot}
            mutatedBy: [track-rollout, steer-node-pool]
            idempotent: true
        """)
    code, out = _run(str(tmp_path), capsys=capsys)
    assert code == 0, out
    rows = [line for line in out.splitlines() if line.startswith("PASS")]
    assert len(rows) == 4  # two cases x two objects in the file
    assert "Pod ml-vision/legacy-1" in rows[1]
    assert "4 passed, 0 failed (1 suite)" in out


def test_failing_suite_shows_expected_and_actual(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _suite(tmp_path, "fail.yaml", f"""\
        cases:
        - name: wrong action and wrong patch
          resource:
            {LEGACY_POD.replace(chr(10), chr(10) + "            ").rstrip()}
          expect:
            allowed: true
            rules: {{legacy-resource-name: Warn}}
            patched: {{/metadata/annotations/dra-migration.io~1stage: pilot}}
            mutatedBy: [inject-device-tolerations]
        - name: right
          resource:
            {LEGACY_POD.replace(chr(10), chr(10) + "            ").rstrip()}
          expect: {{allowed: false}}
        """)
    code, out = _run(str(suite), capsys=capsys)
    assert code == 1, out
    assert f"FAIL    {suite}:8 " in out and f"PASS    {suite}:23 " in out
    diff = out[out.index(f"FAIL {suite}:8: wrong action and wrong patch"):]
    for line in ("-allowed: true", "+allowed: false",
                 "-  legacy-resource-name: Warn", "+  legacy-resource-name: Deny",
                 "-  /metadata/annotations/dra-migration.io~1stage: pilot",
                 "+  /metadata/annotations/dra-migration.io~1stage: migrated",
                 "-- inject-device-tolerations", "+mutatedBy: []"):
        assert f"    {line}" in diff, (line, diff)
    assert "1 passed, 1 failed" in out


def test_unexpected_warning_and_rule_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pod.yaml").write_text(LEGACY_POD)
    suite = _suite(tmp_path, "strict.yaml", """\
        cases:
        - name: expects silence in the pilot
          at: "2026-12-15"
          files: [pod.yaml]
          expect: {rules: {}, warnings: []}
        """)
    code, out = _run(str(suite), capsys=capsys)
    assert code == 1, out
    assert "+  legacy-resource-name: Warn" in out and "+- 'legacy-resource-name (pilot)" in out


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("cases:\n- name: x\n  resource: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n  expect: {allowd: true}\n",
         10, "cases[0].expect.allowd: unknown key 'allowd' (did you mean 'allowed'?)"),
        ("cases:\n- name: x\n  resource: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
         "  expect:\n    rules: [legacy-resource-nam]\n",
         11, "cases[0].expect.rules[0]: unknown rule 'legacy-resource-nam' (did you mean 'legacy-resource-name'?)"),
        ("cases:\n- name: x\n  resource: {apiVersion: v1, kind: Pod, metadata: {name: p}}\n"
         "  expect:\n    patched: {metadata/name: p}\n",
         11, "is not a JSON pointer"),
        ("cases:\n- name: x\n  files: [missing.yaml]\n  expect: {allowed: true}\n",
         9, "file missing.yaml not found"),
        ("cases:\n- name: x\n  resource: {metadata: {name: p}}\n  expect: {allowed: true}\n",
         9, "cases[0] (x): object has no apiVersion/kind"),
        ("cases:\n- name: x\n  at: 2027-02-30\n  resource: {apiVersion: v1, kind: Pod}\n  expect: {}\n",
         9, "'2027-02-30' is not a date"),
        ("cases:\n- name: x\n  resource: [oops\n- name: y\n", 10, "YAML syntax error"),
        ("cases: []\n", 7, "cases: list should have at least 1 item"),
    ],
)
def test_broken_suite_says_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, line: int, message: str
) -> None:
    suite = _suite(tmp_path, "broken.yaml", body)
    code, out = _run(str(suite), capsys=capsys)
    assert code == 2, out
    found = [x.strip() for x in out.splitlines() if x.strip().startswith(f"{suite}:")]
    assert found and found[0].startswith(f"{suite}:{line}: "), (found, out)
    assert message in found[0], found


def test_broken_policy_is_a_broken_suite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.read_text().replace("maxPerPod: 8", "maxPerPod: eight"))
    suite = _suite(tmp_path / "t", "s.yaml", "cases:\n- name: x\n  resource: {apiVersion: v1, kind: Pod}\n"
                   "  expect: {}\n", policy=policy)
    code, out = _run(str(suite), capsys=capsys)
    assert code == 2
    assert f"{suite}:4: policy {policy} cannot be loaded:" in out
    assert f"{policy}:" in out and "spec.resources[0].maxPerPod: expected an integer, got 'eight'" in out


def test_no_suites_found_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pod.yaml").write_text(LEGACY_POD)  # object files next to suites are not suites
    code, out = _run(str(tmp_path), capsys=capsys)
    assert code == 2 and "no MigrationPolicyTest suites found" in out
    code, out = _run(str(tmp_path / "nope"), capsys=capsys)
    assert code == 2 and "no such file or directory" in out


def test_admission_reviews_and_cluster_view(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    review = ROOT / "policies" / "tests" / "objects" / "review-deployment-update.json"
    (tmp_path / "review.json").write_bytes(review.read_bytes())
    suite = _suite(tmp_path, "s.yaml", """\
        cases:
        - name: a recorded review keeps its own namespace and operation
          files: [review.json]
          expect: {allowed: false, rules: {max-devices-per-pod: Deny}}
        - name: labels from the cluster view pick the cohort
          namespace: team-x
          cluster: {namespaces: {team-x: {division: research, cost-center: "1"}}}
          resource: {apiVersion: v1, kind: Pod, metadata: {name: p},
                     spec: {containers: [{name: c, image: i, resources: {limits: {example.com/gpu: "1"}}}]}}
          expect:
            patched: {/metadata/annotations/dra-migration.io~1cohort: research}
        - name: without the view the namespace is in no cohort
          namespace: team-x
          resource: {apiVersion: v1, kind: Pod, metadata: {name: p},
                     spec: {containers: [{name: c, image: i, resources: {limits: {example.com/gpu: "1"}}}]}}
          expect:
            patched: {/metadata/annotations/dra-migration.io~1cohort: none}
        """)
    code, out = _run(str(suite), capsys=capsys)
    assert code == 0, out
    assert "Deployment ml-nlp/trainer" in out


def test_help_documents_the_format() -> None:
    proc = subprocess.run([sys.executable, "-m", "webhook", "test", "--help"], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    for word in ("MigrationPolicyTest", "mutatedBy", "patched", "exit status"):
        assert word in proc.stdout
