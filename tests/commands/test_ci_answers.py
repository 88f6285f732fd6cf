"""Issue 49 item 4: CI answers that say when they do not know (check's unknown stage, lint's schedule, replay's
baseline, convert --stage due). Dates are fixed (``--at``), never today's."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT
from webhook.cli import main
from webhook.policy.loader import load

POLICY = ROOT / "tests" / "data" / "ci-answers" / "policy.yaml"


def pod(name: str, namespace: str, resource: str = "vendor.example.com/gpu") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "registry.example.com/x:1",
                                     "resources": {"limits": {resource: 1}}}]}}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def write(path: Path, *docs: Any) -> str:
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


# check ---------------------------------------------------------------------------------------------------------


def test_a_label_selected_namespace_without_its_namespace_is_stage_unknown(tmp_path, capsys):
    app = write(tmp_path / "app.yaml", pod("p", "ml-a"))
    code, out, _ = run(capsys, "check", "--policy", str(POLICY), "--at", "2030-02-01", app)
    assert code == 0  # judged by its name (pilot): allowed, but said to be a guess
    assert "ALLOWED [stage pilot, cohort ml-by-name]" in out
    assert ("stage unknown: cohort ml-by-label (migrated) selects namespaces by labels and may select ml-a before "
            "cohort ml-by-name (pilot, as judged here); pass the Namespace with --cluster-objects") in out
    assert "1 stage unknown" in out
    code, _, _ = run(capsys, "check", "--policy", str(POLICY), "--at", "2030-02-01", "--fail-on-unknown-stage", app)
    assert code == 3
    code, out, _ = run(capsys, "check", "--policy", str(POLICY), "--at", "2030-02-01", "-o", "json", app)
    doc = json.loads(out)
    assert doc["summary"]["stage unknown"] == 1 and doc["results"][0]["stageUnknown"].startswith("stage unknown:")


@pytest.mark.parametrize("where", ["cluster-objects", "input"])
def test_the_namespace_given_settles_the_stage(tmp_path, capsys, where):
    app = write(tmp_path / "app.yaml", pod("p", "ml-a"))
    ns = write(tmp_path / "ns.yaml", namespace("ml-a", team="ml"))
    files = ["--cluster-objects", ns, app] if where == "cluster-objects" else [ns, app]
    code, out, _ = run(capsys, "check", "--policy", str(POLICY), "--at", "2030-02-01", "--fail-on-unknown-stage",
                       "-o", "json", *files)
    doc = json.loads(out)
    judged = [r for r in doc["results"] if r["object"] == "Pod ml-a/p"][0]
    assert code == 1 and judged["stage"] == "migrated" and judged["cohort"] == "ml-by-label"
    assert judged["stageUnknown"] == "" and doc["summary"]["stage unknown"] == 0
    other = write(tmp_path / "other.yaml", namespace("ml-a", team="web"))
    code, out, _ = run(capsys, "check", "--policy", str(POLICY), "--at", "2030-02-01", "--fail-on-unknown-stage",
                       "--cluster-objects", other, app)
    assert code == 0 and "ALLOWED [stage pilot, cohort ml-by-name]" in out and "stage unknown:" not in out


def test_a_stage_is_known_when_no_selector_can_change_it(tmp_path, capsys):
    # pilot-b: its name matches the first cohort, before any selector; ops: ruled out by the selector's
    # kubernetes.io/metadata.name NotIn; ml-a before 2029-06-01: legacy whichever cohort it is in.
    app = write(tmp_path / "app.yaml", pod("a", "pilot-b"), pod("b", "ops"), pod("c", "ml-a"))
    code, out, _ = run(capsys, "check", "--policy", str(POLICY), "--at", "2029-01-01", "--fail-on-unknown-stage",
                       "-o", "json", app)
    doc = json.loads(out)
    assert code == 0 and doc["summary"]["stage unknown"] == 0, doc
    code, out, _ = run(capsys, "check", "--policy", str(POLICY), "--at", "2030-02-01", "-o", "json", app)
    unknown = [r["object"] for r in json.loads(out)["results"] if r["stageUnknown"]]
    assert unknown == ["Pod ml-a/c"]


def test_stage_candidates_follow_first_match_wins():
    policy = load(POLICY)
    day = dt.date(2030, 2, 1)
    assert [(c.name if c else None, s) for c, s in policy.stage_candidates("ml-a", day)] == [
        ("ml-by-label", "migrated"), ("ml-by-name", "pilot")]
    assert [(c.name if c else None, s) for c, s in policy.stage_candidates("web", day)] == [
        ("ml-by-label", "migrated"), (None, "legacy")]
    assert [(c.name if c else None, s) for c, s in policy.stage_candidates("pilot-x", day)] == [
        ("first-pilots", "pilot")]
    assert [(c.name if c else None, s) for c, s in policy.stage_candidates("ops", day)] == [(None, "legacy")]


# lint ----------------------------------------------------------------------------------------------------------


def lint(capsys: pytest.CaptureFixture[str], path: Path, *args: str) -> tuple[int, list[str], str]:
    code, out, err = run(capsys, "lint", *args, str(path))
    return code, out.splitlines(), err


def policy_copy(directory: Path, old: str = "", new: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "policy.yaml"
    path.write_text(POLICY.read_text().replace(old, new))
    return path


def test_lint_prints_each_cohorts_stage_and_next_change(tmp_path, capsys):
    code, out, _ = lint(capsys, POLICY, "--at", "2029-07-01")
    assert code == 0
    assert "  cohort first-pilots: pilot on 2029-07-01; no change scheduled" in out
    assert "  cohort ml-by-label: legacy on 2029-07-01; next: migrated from 2030-01-01 (Deny)" in out
    assert "  cohort ml-by-name: pilot on 2029-07-01; no change scheduled" in out
    assert "  namespaces in no cohort: legacy (spec.defaultStage)" in out


@pytest.mark.parametrize(("at", "when"), [("2029-12-25", "in 7 days"), ("2029-12-31", "in 1 day"),
                                          ("2030-01-01", "today"), ("2029-12-24", None), ("2030-01-02", None)])
def test_lint_warns_when_a_stage_that_denies_starts_within_a_week(tmp_path, capsys, at, when):
    code, out, _ = lint(capsys, POLICY, "--at", at)
    warned = [line for line in out if "warning:" in line]
    assert code == 0
    if when is None:
        assert warned == []
    else:
        assert warned == [f"{POLICY}:31: warning: spec.cohorts[1].schedule[0].from: cohort 'ml-by-label' enters "
                          f"stage migrated on 2030-01-01 ({when}), whose findings are denied (enforcement.migrated: "
                          "Deny): objects only warned about in stage legacy will be refused from then on"]


def test_lint_does_not_warn_for_a_stage_that_only_warns(tmp_path, capsys):
    code, out, _ = lint(capsys, POLICY, "--at", "2029-05-30")  # ml-by-name enters pilot (Warn) on 2029-06-01
    assert code == 0 and not [line for line in out if "warning:" in line]


def git(repo: Path, *args: str, date: str = "2029-12-01T00:00:00Z") -> None:
    import subprocess

    env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def test_lint_since_a_ref_warns_for_a_change_that_denies_at_once(tmp_path, capsys):
    repo = tmp_path / "repo"
    path = policy_copy(repo)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v1")
    policy_copy(repo, 'stage: migrated, from: "2030-01-01"', 'stage: migrated, from: "2029-12-10"')
    code, out, err = lint(capsys, path, "--at", "2029-12-15", "--since", "HEAD")
    assert code == 0 and err == ""
    assert (f"{path}:31: warning: spec.cohorts[1].schedule[0].from: cohort 'ml-by-label' is in stage migrated "
            "today, whose findings are denied, but under the policy at HEAD it is in stage legacy: this change "
            "starts denying as soon as it is applied") in out
    code, out, _ = lint(capsys, path, "--at", "2029-12-15")  # without --since: the date has passed, nothing said
    assert not [line for line in out if "warning:" in line]


def test_lint_since_a_ref_warns_for_a_deny_stage_that_started_after_it(tmp_path, capsys):
    repo = tmp_path / "repo"
    path = policy_copy(repo)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v1")  # committed 2029-12-01; ml-by-label migrated from 2030-01-01
    code, out, _ = lint(capsys, path, "--at", "2030-01-20", "--since", "HEAD")
    assert code == 0
    assert (f"{path}:31: warning: spec.cohorts[1].schedule[0].from: cohort 'ml-by-label' entered stage migrated, "
            "whose findings are denied, on 2030-01-01, after the policy last changed (HEAD, 2029-12-01)") in out


def test_lint_since_says_when_git_or_the_ref_is_unavailable(tmp_path, capsys, monkeypatch):
    path = policy_copy(tmp_path / "plain")
    code, out, err = lint(capsys, path, "--at", "2029-07-01", "--since", "HEAD")
    assert code == 0 and err.startswith(f"warning: --since HEAD skipped: git cannot show {path} at HEAD: ")
    assert out[0].startswith("policy OK: ")
    repo = tmp_path / "repo"
    path = policy_copy(repo)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "v1")
    code, _, err = lint(capsys, path, "--at", "2029-07-01", "--since", "no-such-ref")
    assert code == 0 and "warning: --since no-such-ref skipped: git cannot show" in err
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, _, err = lint(capsys, path, "--at", "2029-07-01", "--since", "HEAD")
    assert code == 0 and err == "warning: --since HEAD skipped: git is not installed (not on PATH)\n"


def test_lint_kubeconfig_warns_for_cohorts_and_name_patterns_that_match_no_live_namespace(tmp_path, capsys):
    from tests.fakeapi import FakeAPI
    from tests.fakeapi import namespace as live_namespace

    path = policy_copy(tmp_path / "p", 'names: ["ml-*"]', 'names: ["ml-*", "mlops-*"]')
    with FakeAPI() as api:
        api.put(live_namespace("ml-a"), live_namespace("web"))
        kubeconfig = api.write_kubeconfig(tmp_path)
        code, out, _ = lint(capsys, path, "--at", "2029-07-01", "--kubeconfig", kubeconfig)
    warned = [line.split(": warning: ", 1)[1] for line in out if ": warning: " in line]
    assert code == 0
    assert "spec.cohorts[0].namespaces: cohort 'first-pilots' matches no namespace of the cluster (2 namespaces)" \
        in warned
    assert "spec.cohorts[0].namespaces.names[0]: name pattern 'pilot-*' of cohort 'first-pilots' matches no " \
        "namespace of the cluster" in warned
    assert "spec.cohorts[1].namespaces: cohort 'ml-by-label' matches no namespace of the cluster (2 namespaces)" \
        in warned  # ml-a has no team: ml label
    assert "spec.cohorts[2].namespaces.names[1]: name pattern 'mlops-*' of cohort 'ml-by-name' matches no " \
        "namespace of the cluster" in warned
    assert not any("'ml-*'" in w or w.startswith("spec.cohorts[2].namespaces: ") for w in warned)


# convert --stage due -------------------------------------------------------------------------------------------


def deployment(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.example.com/x:1",
                                         "resources": {"limits": {"vendor.example.com/gpu": 1}}}]}}}}


def convert(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    return run(capsys, "convert", "--policy", str(POLICY), *args)


def test_convert_check_stage_due_passes_for_a_team_not_due(tmp_path, capsys):
    app = write(tmp_path / "app.yaml", namespace("ml-a", team="web"), deployment("d", "ml-a"))
    code, _, err = convert(capsys, "--check", "--stage", "due", "--at", "2029-01-01", app)
    assert code == 0, err
    assert (f"{app}#2: Deployment ml-a/d: not due: namespace ml-a is in cohort ml-by-name, stage legacy on "
            "2029-01-01; next: pilot from 2029-06-01") in err
    code, _, _ = convert(capsys, "--check", "--at", "2029-01-01", app)  # --stage migrated: fails for years
    assert code == 1
    code, _, err = convert(capsys, "--check", "--stage", "due", "--at", "2029-07-01", app)
    assert code == 1 and f"{app}#2: Deployment ml-a/d: rename" in err and "would convert" in err
    code, out, _ = convert(capsys, "--stage", "due", "--at", "2029-01-01", "-o", "json", app)
    doc = json.loads(out)
    assert code == 0 and doc["stage"] == "due" and doc["files"][0]["changed"] is False
    assert [o["status"] for o in doc["files"][0]["objects"]] == ["not due"]


def test_convert_stage_due_converts_each_object_to_its_cohorts_stage(tmp_path, capsys):
    app = write(tmp_path / "app.yaml", deployment("a", "pilot-x"), deployment("b", "ops"))
    code, out, err = convert(capsys, "--stage", "due", "--at", "2030-02-01", "-o", "json", app)
    objects = {o["object"]: o for o in json.loads(out)["files"][0]["objects"]}
    assert code == 0, err
    assert objects["Deployment pilot-x/a"]["status"] == "converted"  # first-pilots: pilot since 2000
    assert objects["Deployment ops/b"]["status"] == "not due"  # no cohort can select ops: the default, legacy
    assert "no cohort (spec.defaultStage), stage legacy" in objects["Deployment ops/b"]["reason"]


def test_convert_stage_due_of_a_label_selected_namespace(tmp_path, capsys):
    alone = write(tmp_path / "alone.yaml", deployment("d", "ml-a"))
    code, _, err = convert(capsys, "--check", "--stage", "due", "--at", "2029-07-01", alone)
    assert code == 0, err  # ml-by-label (legacy) or ml-by-name (pilot): unknown, left as it is
    assert f"{alone}#1: Deployment ml-a/d: stage unknown: cohort(s) ml-by-label (legacy) select namespaces by " \
        "labels and may select ml-a; put its Namespace (with its labels) in the same file" in err
    labelled = write(tmp_path / "labelled.yaml", namespace("ml-a", team="ml"), deployment("d", "ml-a"))
    code, _, err = convert(capsys, "--check", "--stage", "due", "--at", "2030-02-01", labelled)
    assert code == 1 and f"{labelled}#2: Deployment ml-a/d: rename" in err
