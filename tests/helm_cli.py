"""The real `helm` for the tests: Helm v4.2.3 from the project's ``../shared/helm`` folder.

Found like the control-plane binaries (tests/e2e/binaries.py): ``$DRA_HELM`` (a helm binary), else
``shared/helm`` next to the repository root or one of its parents, unpacked once by its own ``unpack.sh``
(into ``~/.cache/helm-v4.2.3``). With ``CI=true`` a missing helm fails the test; elsewhere it skips with one
line. Every call runs with HOME and the HELM_* cache, config and data directories in a temporary folder, so
no developer's repositories, plugins or kubeconfig leak in.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "chart"
HOW_TO_GET = ("no helm: put the project's shared/helm folder (helm.xz + unpack.sh) next to the repository, "
              "or set DRA_HELM")


def shared_dir() -> Path | None:
    from tests.shared_dirs import candidates

    return next((c for c in candidates("helm") if (c / "unpack.sh").is_file()), None)


def find() -> Path | None:
    """The helm binary, unpacked on first use; None when there is none."""
    override = os.environ.get("DRA_HELM")
    if override:
        return Path(override) if os.access(override, os.X_OK) else None
    shared = shared_dir()
    if shared is None:
        return None
    proc = subprocess.run(["bash", str(shared / "unpack.sh")], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{shared}/unpack.sh failed: {proc.stderr.strip()}")
    helm = Path(proc.stdout.strip().splitlines()[-1]) / "helm"
    return helm if os.access(helm, os.X_OK) else None


def require() -> Path:
    """The helm binary, or a skip (a failure with CI=true) naming how to get one."""
    helm = find()
    if helm is None:
        if os.environ.get("CI") == "true":
            pytest.fail(HOW_TO_GET)
        pytest.skip(HOW_TO_GET)
    return helm


def env(home: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    """The environment for one helm call: everything Helm writes stays under ``home``."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("HELM_") and k != "KUBECONFIG"}
    out.update(HOME=str(home), HELM_CACHE_HOME=str(home / "cache"), HELM_CONFIG_HOME=str(home / "config"),
               HELM_DATA_HOME=str(home / "data"), HELM_PLUGINS=str(home / "plugins"),
               XDG_CACHE_HOME=str(home / "xdg-cache"))
    if kubeconfig is not None:
        out["KUBECONFIG"] = str(kubeconfig)
    return out


def run(helm: Path, home: Path, *args: str, kubeconfig: Path | None = None,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=300,
                          env=env(home, kubeconfig), cwd=ROOT)
    if check:
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stderr}"
    return proc
