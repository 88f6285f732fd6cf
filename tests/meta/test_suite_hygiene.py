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


def test_kubernetes_client_is_imported_only_by_commands_that_talk_to_a_cluster():
    """`dra-webhook --help`, `check`, `test`, `replay` never pay for the kubernetes client (0.3 s)."""
    code = ("import sys; from webhook.cli import build_parser; build_parser(); "
            "from webhook.commands import check, replay, test, explain, lint, schema; "
            "import webhook.admission.answer, webhook.offline.suites; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes' "
            "or m in ('webhook.cluster.api', 'webhook.cluster.informer', 'webhook.cluster.live_view')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
