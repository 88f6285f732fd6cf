"""Issue 14 item 8: `report` and `preflight` without a reachable cluster exit with one line, no library
noise; `explain RULE --policy P` judges its example under P."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

UNREACHABLE = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
users: [{name: u, user: {token: x}}]
"""


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env=env)


@pytest.mark.parametrize("command", [["report"], ["preflight", "--driver", "gpu.example.com"]])
def test_no_reachable_cluster_is_one_line(tmp_path: Path, command: list[str]) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE)
    proc = _cli(*command, "--kubeconfig", str(kubeconfig))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr  # one line: no urllib3 retry warnings, no traceback
    assert proc.stderr.startswith("error: ") and "cannot reach the API server at 127.0.0.1:1" in proc.stderr


def test_no_cluster_configuration_is_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = _cli("report", env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no cluster configuration" in proc.stderr


def test_explain_judges_the_example_under_the_given_policy(tmp_path: Path) -> None:
    text = (ROOT / "policies" / "default.yaml").read_text().replace("maxPerPod: 8 ", "maxPerPod: 4 ")
    assert "maxPerPod: 4 " in text
    (tmp_path / "p.yaml").write_text(text)
    given = _cli("explain", "max-devices-per-pod", "--policy", str(tmp_path / "p.yaml"))
    assert given.returncode == 0, given.stderr
    assert "above maxPerPod 4" in given.stdout and "above maxPerPod 8" not in given.stdout
    assert "bundled policy" not in given.stdout.split("Example that fires it")[1].splitlines()[0]
    bundled = _cli("explain", "max-devices-per-pod")
    assert "above maxPerPod 8" in bundled.stdout
