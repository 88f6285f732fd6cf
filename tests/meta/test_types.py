"""The package type-checks: ``mypy`` (strict for ``webhook/``, configured in pyproject.toml) reports nothing."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers import ROOT


def test_mypy_clean() -> None:
    """A missing mypy fails (a skipped type check is a type check nobody runs)."""
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed in this interpreter: pip install -e '.[test]'")
    # The incremental cache under the checkout makes reruns take about a second instead of a cold run.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--cache-dir", str(ROOT / ".mypy_cache"), "--no-error-summary", "--no-pretty", "webhook"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert result.returncode == 0, f"mypy found errors:\n{result.stdout}{result.stderr}"
