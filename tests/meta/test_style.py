"""The code base stays ruff clean (DEVELOPERS.md: Style)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers import ROOT


def test_ruff_clean():
    """A missing ruff fails (a skipped style check is a style check nobody runs)."""
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed in this interpreter: pip install -e '.[test]'")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "webhook", "tests", "bench", "policies"],
                            cwd=ROOT, capture_output=True, text=True)
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
            "print(sorted(m for m in sys.modules if m.startswith('prometheus_client') "
            "or m == 'webhook.serve.metrics'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
