"""The deploy/ tree rendered by the real kustomize, and the skip marker for a kubectl without kustomize v5."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.37.0"
KUBECTL = shutil.which("kubectl")


def _kustomize_major() -> int | None:
    if KUBECTL is None:
        return None
    out = subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True,
                         timeout=30)
    match = re.match(r"v(\d+)\.", json.loads(out.stdout or "{}").get("kustomizeVersion", ""))
    return int(match.group(1)) if match else None


KUSTOMIZE_MAJOR = _kustomize_major()
# The deploy tests' module marker: each of them says ``pytestmark = needs_kustomize``.
needs_kustomize = pytest.mark.skipif(
    KUSTOMIZE_MAJOR is None or KUSTOMIZE_MAJOR < 5,
    reason="needs kubectl with kustomize v5+ on PATH (found "
    + ("no kubectl" if KUBECTL is None else f"kubectl at {KUBECTL} with kustomize v{KUSTOMIZE_MAJOR}")
    + "); Debian's kubernetes-client 1.20 ships kustomize v2, too old for components and replacements",
)


def kustomize(path: Path) -> list[dict[str, Any]]:
    proc = subprocess.run([KUBECTL, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
