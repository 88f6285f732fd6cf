"""``check --cluster-objects FILE``: the cluster-aware rules answered offline from a snapshot (issue 25 item 8).

The snapshot is what ``kubectl get deviceclasses,resourceslices,podgroups,hpa -A -o yaml`` prints: a v1 List.
Its objects feed the StaticView (webhook/offline/views.py) and are not judged themselves. Objects: dra-example-driver's
slices and cel-selector template (tests/builders/satisfiable.py), the Kubernetes docs' HPA walkthrough shape
(tests/builders/shared_claims.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders.satisfiable import EXAMPLE_CLASS, EXAMPLE_MEMORY, EXAMPLE_MODEL, example_slice, template
from tests.builders.shared_claims import deployment, hpa
from webhook.cli import main


def snapshot(tmp_path: Path, *objs: dict[str, Any], name: str = "cluster.yaml") -> str:
    """A kubectl-style v1 List of ``objs``."""
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
                                    "items": list(objs)}, sort_keys=False))
    return str(path)


def manifest(tmp_path: Path, obj: dict[str, Any], name: str = "app.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return str(path)


def check_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    code = main(["check", "-o", "json", *args])
    captured = capsys.readouterr()
    return code, json.loads(captured.out)["results"], captured.err


def unscoped_policy(tmp_path: Path) -> str:
    """A policy that maps no DeviceClass: every driver's claims are in the migration's scope
    (webhook.policy.scope), so dra-example-driver's class is judged (the bundled policy maps gpu.example.com)."""
    return manifest(tmp_path, {"apiVersion": "dra-migration.io/v1alpha1", "kind": "MigrationPolicy",
                               "metadata": {"name": "unscoped"}, "spec": {}}, name="policy.yaml")


def rules(result: dict[str, Any]) -> list[str]:
    return [f["rule"] for f in result["findings"]]


def test_a_claim_unsatisfiable_against_the_snapshots_slices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = snapshot(tmp_path, EXAMPLE_CLASS, example_slice("node-1", 8), example_slice("node-2", 8, "40Gi"))
    strict = manifest(tmp_path, template(EXAMPLE_MODEL, EXAMPLE_MEMORY.replace("4Gi", "96Gi")))
    _, [result], _ = check_json(capsys, "--policy", unscoped_policy(tmp_path), strict, "--cluster-objects", cluster)
    assert "unsatisfiable-claim" in rules(result)
    [finding] = [f for f in result["findings"] if f["rule"] == "unsatisfiable-claim"]
    assert "no device in the cluster matches (0 of 16 devices)" in finding["message"]
    # The published template fits the same snapshot; and without the snapshot nothing is known.
    fits = manifest(tmp_path, template(EXAMPLE_MODEL, EXAMPLE_MEMORY), "fits.yaml")
    assert "unsatisfiable-claim" not in rules(check_json(capsys, fits, "--cluster-objects", cluster)[1][0])
    assert "unsatisfiable-claim" not in rules(check_json(capsys, strict)[1][0])


def test_a_shared_claim_limit_decision_with_an_hpa_from_the_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app = manifest(tmp_path, deployment(2))
    assert "shared-claim-limit" not in rules(check_json(capsys, app)[1][0])
    cluster = snapshot(tmp_path, hpa(400))
    _, [result], _ = check_json(capsys, app, "--cluster-objects", cluster)
    [finding] = [f for f in result["findings"] if f["rule"] == "shared-claim-limit"]
    assert "HorizontalPodAutoscaler gpu-hpa maxReplicas 400" in finding["message"]
    assert len(check_json(capsys, app, "--cluster-objects", cluster)[1]) == 1  # the snapshot is not judged


def test_other_kinds_in_the_snapshot_are_ignored_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}}
    cluster = snapshot(tmp_path, hpa(400), cm)
    _, results, err = check_json(capsys, manifest(tmp_path, deployment(2)), "--cluster-objects", cluster)
    assert len(results) == 1 and "1 ConfigMap ignored" in err


def test_an_unreadable_snapshot_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", manifest(tmp_path, deployment(2)), "--cluster-objects", str(tmp_path / "missing.yaml")])
    assert code == 2
    assert "missing.yaml: cannot read" in capsys.readouterr().err


def test_help_explains_the_snapshot(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "--cluster-objects FILE" in out and "kubectl get deviceclasses,resourceslices,podgroups,hpa -A -o" in out


def test_slices_in_the_input_itself_are_the_view_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    strict = template(EXAMPLE_MODEL, EXAMPLE_MEMORY.replace("4Gi", "96Gi"))
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump_all([EXAMPLE_CLASS, example_slice("node-1", 8), strict], sort_keys=False))
    _, results, _ = check_json(capsys, "--policy", unscoped_policy(tmp_path), str(path))
    [claim] = [r for r in results if r["object"].startswith("ResourceClaimTemplate")]
    assert "unsatisfiable-claim" in rules(claim)
