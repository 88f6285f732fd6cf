"""Migration policy: model, loader with file:line errors, compiled form and hot reload.

Names are resolved lazily (PEP 562) so importing the package pulls in nothing it does not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.policy.compiled import CompiledPolicy, CompileError, compile_policy
    from webhook.policy.loader import PolicyError, Problem, lint, lint_report, load
    from webhook.policy.model import MigrationPolicy
    from webhook.policy.reload import PolicyStore

_EXPORTS = {
    "CompiledPolicy": "webhook.policy.compiled",
    "CompileError": "webhook.policy.compiled",
    "compile_policy": "webhook.policy.compiled",
    "MigrationPolicy": "webhook.policy.model",
    "PolicyError": "webhook.policy.loader",
    "Problem": "webhook.policy.loader",
    "lint": "webhook.policy.loader",
    "lint_report": "webhook.policy.loader",
    "load": "webhook.policy.loader",
    "PolicyStore": "webhook.policy.reload",
}

__all__ = [
    "CompileError",
    "CompiledPolicy",
    "MigrationPolicy",
    "PolicyError",
    "PolicyStore",
    "Problem",
    "compile_policy",
    "lint",
    "lint_report",
    "load",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
