"""Rule modules. ``load_all()`` imports every one so it registers itself in ``base.REGISTRY``.

Kept import-light on purpose: ``webhook.policy.model`` imports ``webhook.rules.ids``, and rule modules
import the policy package, so importing rule modules here would make a cycle.
"""

import importlib

from webhook.rules.base import REGISTRY, Context, Finding, Outcome, Rule, rule

MODULES = ("gates", "claims", "tolerations", "pods", "workloads", "tracking", "shared_claims", "satisfiable")


def load_all() -> None:
    for name in MODULES:
        importlib.import_module(f"webhook.rules.{name}")


__all__ = ["MODULES", "REGISTRY", "Context", "Finding", "Outcome", "Rule", "load_all", "rule"]
