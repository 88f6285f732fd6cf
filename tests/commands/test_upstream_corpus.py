"""Issue 14 item 9, issue 24: published manifests (GPU/DRA drivers, other schedulers, GPU sharing, CPU/NIC DRA
drivers, exporters, JobSet, Kueue, Kubeflow, Volcano, LWS, KubeRay, HAMi) get the decision a platform engineer
expects. Each file names its source and license; tests/data/upstream/SOURCES lists them all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "upstream"
CASES: list[dict[str, Any]] = yaml.safe_load((DATA / "cases.yaml").read_text())
AT = "2026-12-03"


def _annotations(patch: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The annotations a JSON patch writes on the object and its pod templates (``.../metadata/annotations`` or
    one key below it); a workload's ``node-pool`` is written on its template."""
    out: dict[str, Any] = {}
    for op in patch or []:
        if op["path"].endswith("/metadata/annotations") and isinstance(op.get("value"), dict):
            out.update(op["value"])
        elif "/metadata/annotations/" in op["path"]:
            out[op["path"].rsplit("/", 1)[1].replace("~1", "/").replace("~0", "~")] = op.get("value")
    return out


def _params(case: dict[str, Any]) -> Any:
    """A case with ``gap`` is a known wrong decision no item fixes yet: strict xfail, so a fix makes it fail."""
    marks = [pytest.mark.xfail(strict=True, reason=case["gap"])] if case.get("gap") else []
    return pytest.param(case, id=f"{case['file']}@{case.get('namespace', '-')}", marks=marks)


def test_every_corpus_file_names_its_source_and_has_a_case():
    files = {p.name for p in DATA.glob("*.yaml")} - {"policy.yaml", "cases.yaml"}
    assert files == {c["file"] for c in CASES}
    listed = {line.split()[0]: line.split() for line in (DATA / "SOURCES").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert set(listed) == files
    for name in files:
        head = (DATA / name).read_text().split("\n---")[0]
        assert "# Source" in head, name
        assert listed[name][-1] in {"Apache-2.0", "MIT", "MIT-0", "BSD-3-Clause", "BSD-2-Clause"}, name
        assert f"# License: {listed[name][-1]}" in head, name


@pytest.mark.parametrize("case", [_params(c) for c in CASES])
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
        notes = _annotations(got["patch"])
        for key, field in (("pool", "node-pool"), ("path", "path")):
            if key in want:
                assert notes.get(f"dra-migration.io/{field}") == want[key], (where, key, notes)
        text = " | ".join(f["message"] for f in got["findings"])
        for s in want.get("says", []):
            assert s in text, (where, s, text)
    assert code == (0 if all(o.get("allowed", True) for o in case["objects"]) else 1)
