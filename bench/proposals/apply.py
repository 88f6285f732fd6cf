"""Monkeypatch the proposals into the running process (for before/after figures only).

``install()`` makes the mutating rules copy objects with ``fastdiff.clone``, the engine diff with
``fastdiff.make_patch``, and drops the per-request INFO decision line for *allowed* requests (as if it
were logged at DEBUG; denials and warnings still log at INFO). It changes nothing on disk; the owners
of those files adopt the changes.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fastdiff  # noqa: E402


def install(which: str | None = None) -> list[str]:
    """Install the proposals named in ``which`` (default ``$BENCH_PROPOSALS`` or all: clone,diff,log)."""
    from webhook import engine
    from webhook.rules import pods, tolerations, tracking

    wanted = set((which or os.environ.get("BENCH_PROPOSALS") or "clone,diff,log").split(","))
    patched: list[str] = []
    if "clone" not in wanted:
        pods = tracking = tolerations = None  # type: ignore[assignment]
    fast_copy = SimpleNamespace(deepcopy=fastdiff.clone, copy=__import__("copy").copy)
    for module in (pods, tracking, tolerations):
        if module is not None and getattr(module, "copy", None) is not None:
            module.copy = fast_copy
            patched.append(f"{module.__name__}.copy.deepcopy")

    class _Patch:
        def __init__(self, ops: list[dict[str, Any]]) -> None:
            self.patch = ops

    if "diff" in wanted:
        engine.jsonpatch = SimpleNamespace(make_patch=lambda a, b: _Patch(fastdiff.make_patch(a, b)))
        patched.append("webhook.engine.jsonpatch.make_patch")
    if "log" in wanted:
        logging.getLogger("webhook.app").addFilter(_AllowedDecisionsAtDebug())
        patched.append("webhook.app decision log: allowed requests at DEBUG")
    return patched


class _AllowedDecisionsAtDebug(logging.Filter):
    """Drop app._observe's INFO line when the decision was allowed (its 7th argument)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or "allowed=%s" not in str(record.msg):
            return True
        args = record.args if isinstance(record.args, tuple) else ()
        return not (len(args) > 6 and args[6] is True)
