"""`webhook/offline/inputs.py`: the reader `check`, `test`, `replay` and `explain` share refuses YAML aliases.

A billion-laughs file is a few hundred bytes whose aliases expand to gigabytes once an AdmissionReview in it is
serialised (issue 47 item 2). The CLI test runs in a subprocess under a memory limit and a timeout, and its bomb
is small enough that the old reader merely expands it (about 100 MB) and exits 0 instead of refusing it.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT
from webhook.offline.inputs import InputError, read_items


def _bomb(levels: int) -> str:
    """An AdmissionReview whose request holds 9**levels strings through ``levels`` lines of aliases."""
    lines = ["apiVersion: admission.k8s.io/v1", "kind: AdmissionReview", "request:", "  uid: u1",
             "  kind: {group: '', version: v1, kind: Pod}", "  resource: {group: '', version: v1, resource: pods}",
             "  operation: CREATE", "  namespace: default", "  x0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  x{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    lines.append("  object: {apiVersion: v1, kind: Pod, metadata: {name: b},"
                 " spec: {containers: [{name: c, image: i}]}}")
    return "\n".join(lines) + "\n"


def _limit_memory() -> None:  # in the child: 1 GiB of address space, so even a runaway expansion stops early
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_check_refuses_a_billion_laughs_review_with_exit_2_and_the_line(tmp_path: Path) -> None:
    bomb = tmp_path / "laughs.yaml"
    bomb.write_text(_bomb(6))
    assert len(bomb.read_bytes()) < 1000
    result = subprocess.run([sys.executable, "-m", "webhook", "check", str(bomb)], capture_output=True, text=True,
                            cwd=ROOT, timeout=60, preexec_fn=_limit_memory)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"{bomb}:10: document 1: YAML alias *l0 refused" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_alias_is_named_with_its_document_and_the_other_files_still_read(tmp_path: Path) -> None:
    f = tmp_path / "two.yaml"
    f.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n"
                 "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, labels: &l {x: y}}\ndata: *l\n")
    with pytest.raises(InputError, match=r"two.yaml:8: document 2: YAML alias \*l refused"):
        read_items(str(f), None, "CREATE")
    errors: list[str] = []
    assert read_items(str(f), None, "CREATE", errors) == [] and len(errors) == 1


def test_anchors_globs_and_cron_schedules_are_not_aliases(tmp_path: Path) -> None:
    f = tmp_path / "ok.yaml"
    f.write_text("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: c, labels: &unused {a: b}}\n"
                 "spec:\n  schedule: '*/5 * * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec:\n"
                 "          containers:\n          - {name: c, image: i, args: ['*.txt', 'a &b', \"x *y\"]}\n")
    (item,) = read_items(str(f), None, "CREATE")
    assert item.request.object is not None and item.request.object["spec"]["schedule"] == "*/5 * * * *"


def test_syntax_errors_keep_their_line_with_the_c_loader(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [a\n")
    with pytest.raises(InputError, match=r"bad.yaml:4: not valid YAML or JSON"):
        read_items(str(f), None, "CREATE")
