"""Monkeypatch the proposals into the running process (for before/after figures only).

``install()`` makes the mutating rules copy objects with ``fastdiff.clone`` and the engine diff with
``fastdiff.make_patch``. It changes nothing on disk; the owners of those files adopt the changes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fastdiff  # noqa: E402


def install() -> list[str]:
    from webhook import engine
    from webhook.rules import pods, tolerations, tracking

    patched = []
    fast_copy = SimpleNamespace(deepcopy=fastdiff.clone, copy=__import__("copy").copy)
    for module in (pods, tracking, tolerations):
        if getattr(module, "copy", None) is not None:
            module.copy = fast_copy
            patched.append(f"{module.__name__}.copy.deepcopy")

    class _Patch:
        def __init__(self, ops: list[dict[str, Any]]) -> None:
            self.patch = ops

    engine.jsonpatch = SimpleNamespace(make_patch=lambda a, b: _Patch(fastdiff.make_patch(a, b)))
    patched.append("webhook.engine.jsonpatch.make_patch")
    return patched
