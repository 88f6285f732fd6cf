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
