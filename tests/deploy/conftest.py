"""Fixtures of the chart tests (tests/deploy/test_chart.py, tests/deploy/test_compiled.py): helm and its home."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import helm_cli


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_cli.require()


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm-home")
