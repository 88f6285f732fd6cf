"""The suite's own rules (DEVELOPERS.md): deterministic in CI, warnings are errors."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT


def _profile(env: dict[str, str]) -> str:
    code = ("import tests.conftest; from hypothesis import settings; s = settings.default; "
            "print(s.derandomize, s.max_examples, s.database)")
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "HYPOTHESIS_PROFILE")}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**clean, **env}, capture_output=True,
                          text=True, check=True).stdout.strip()


def test_ci_runs_hypothesis_derandomized_with_a_fixed_budget():
    assert _profile({"CI": "true"}) == "True 100 None"
    assert _profile({}).startswith("False ")  # locally: new examples each run
