"""Rule modules. Importing this package registers every rule in ``base.REGISTRY``."""

from webhook.rules import claims, gates, pods, tolerations, tracking, workloads  # noqa: F401
from webhook.rules.base import REGISTRY, Context, Finding, Outcome, Rule, rule

__all__ = ["REGISTRY", "Context", "Finding", "Outcome", "Rule", "rule"]
