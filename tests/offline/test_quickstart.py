"""The README's quick start runs as written from a fresh clone (issue 48 item 6), against examples/.

The commands are read from the README itself (the block after "Try it against the server started above"), with
``.venv/bin/`` taken as this interpreter's folder and the server's address as the live test server's."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, Server

BIN = str(Path(sys.executable).parent) + "/"


def _quickstart() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("Try it against the server started above:", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [re.sub(r"\s+#.*$", "", line) for line in block.strip().splitlines()]


def _run(command: str, server: Server) -> subprocess.CompletedProcess[str]:
    command = command.replace(".venv/bin/", BIN).replace("certs/ca.crt", str(server.ca))
    command = command.replace("127.0.0.1:8443", f"127.0.0.1:{server.port}")
    return subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_quickstart_commands_are_the_examples_ones() -> None:
    commands = _quickstart()
    assert len(commands) == 4
    assert commands[0].startswith("curl ") and all(c.startswith(".venv/bin/dra-webhook ") for c in commands[1:])
    for c in commands[1:]:
        for path in re.findall(r"examples/\S+", c):
            assert (ROOT / path).exists(), path


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_readyz_as_written(live_server: Server) -> None:
    proc = _run(_quickstart()[0], live_server)
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout.lower() or "ready" in proc.stdout.lower(), proc.stdout


def test_check_today_and_on_the_migration_day_as_written(live_server: Server) -> None:
    today, migrated = (_run(c, live_server) for c in _quickstart()[1:3])
    assert today.returncode in (0, 1), today.stderr  # the schedule moves on; never an input error
    assert "Deployment ml-vision/vision-serving" in today.stdout and not today.stderr.strip(), today.stderr
    assert migrated.returncode == 1, migrated.stdout + migrated.stderr
    denied = re.findall(r"^(\S+ \S+) \(.*\): DENIED \[stage migrated, cohort pilot-teams\]", migrated.stdout, re.M)
    assert sorted(denied) == ["Deployment ml-vision/vision-serving", "Job ml-vision/finetune-resnet",
                              "PyTorchJob ml-vision/detector-ddp"]


def test_convert_as_written_then_the_migration_day_admits_them(live_server: Server, tmp_path: Path) -> None:
    proc = _run(_quickstart()[3], live_server)
    assert proc.returncode == 0, proc.stderr
    assert "+++ b/examples/workloads/pytorchjob.yaml" in proc.stdout
    copy = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", copy)
    subprocess.run([sys.executable, "-m", "webhook", "convert", "-w", "--stage", "migrated", str(copy / "workloads")],
                   check=True, capture_output=True)
    after = subprocess.run([sys.executable, "-m", "webhook", "check", "--cluster-objects", str(copy / "cluster.yaml"),
                            "--at", "2027-02-01", str(copy / "workloads")], capture_output=True, text=True)
    assert after.returncode == 0, after.stdout
    assert "DENIED" not in after.stdout
