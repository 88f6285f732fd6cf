"""Issue 14 item 9: published manifests (GPU/DRA drivers, JobSet, Kueue, Kubeflow, Volcano, LWS, KubeRay,
HAMi) get the decision a platform engineer expects. Sources are named in each file of tests/data/upstream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli import main

DATA = Path(__file__).resolve().parent / "data" / "upstream"
CASES: list[dict[str, Any]] = yaml.safe_load((DATA / "cases.yaml").read_text())
AT = "2026-12-03"


def test_every_corpus_file_names_its_source_and_has_a_case():
    files = {p.name for p in DATA.glob("*.yaml")} - {"policy.yaml", "cases.yaml"}
    assert files == {c["file"] for c in CASES}
    for name in files:
        assert "# Source" in (DATA / name).read_text().split("\n---")[0], name


@pytest.mark.parametrize("case", CASES, ids=[f"{c['file']}@{c.get('namespace', '-')}" for c in CASES])
def test_decision(case: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    args = ["check", "-o", "json", "--policy", str(DATA / "policy.yaml"), "--at", AT]
    if case.get("namespace"):
        args += ["-n", case["namespace"]]
    code = main([*args, str(DATA / case["file"])])
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["object"] for r in results] == [o["object"] for o in case["objects"]]
    for got, want in zip(results, case["objects"], strict=True):
        where = want["object"]
        assert got["allowed"] is want.get("allowed", True), (where, got["message"])
        assert got["examined"] is want.get("examined", True), where
        assert got["stage"] == want.get("stage", ""), where
        assert {f["rule"]: f["action"] for f in got["findings"]} == want.get("findings", {}), where
        assert bool(got["patch"]) is want.get("patched", False), (where, got["patch"])
        text = " | ".join(f["message"] for f in got["findings"])
        for s in want.get("says", []):
            assert s in text, (where, s, text)
    assert code == (0 if all(o.get("allowed", True) for o in case["objects"]) else 1)
