"""The code base stays ruff clean (DEVELOPERS.md: Style)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT


def test_ruff_clean():
    ruff = shutil.which("ruff", path=str(ROOT / ".venv" / "bin")) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]' installs it)")
    result = subprocess.run([ruff, "check", "webhook", "tests", "bench", "policies"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cli_help_lists_every_command():
    out = subprocess.run([sys.executable, "-m", "webhook", "--help"], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    for verb in ("serve", "check", "lint", "test", "certs", "gates", "report", "preflight", "schema", "replay",
                 "explain"):
        assert verb in out


def test_cli_does_not_import_metrics_before_serve_sets_multiprocess_mode():
    """prometheus-client picks its value class at import: importing it before `serve` sets
    PROMETHEUS_MULTIPROC_DIR would silently give each gunicorn worker its own metrics."""
    code = ("import sys; from webhook import cli; cli.build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith('prometheus_client') or m == 'webhook.metrics'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
