"""Where the project's ``shared/`` folder (the real Kubernetes binaries, helm) is found from a checkout.

Next to the repository root or one of its parents (worktrees live deeper); for a clone made elsewhere
(``git clone . /tmp/ci-check``), next to the local repository it was cloned from (its ``origin``)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _origin() -> Path | None:
    try:
        url = subprocess.run(["git", "-C", str(ROOT), "remote", "get-url", "origin"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    path = Path(url.removeprefix("file://"))
    return path.resolve() if url and path.is_absolute() and path.is_dir() else None


def candidates(*parts: str) -> Iterator[Path]:
    """``<parent>/shared/<parts>`` for every parent of this checkout, then of the local origin's."""
    origin = _origin()
    for root in (ROOT, *([origin] if origin else [])):
        for parent in root.parents:
            yield parent.joinpath("shared", *parts)
