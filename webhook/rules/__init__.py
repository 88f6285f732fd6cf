"""Rule modules. ``ruleset.standard_rules()`` imports every one (``ruleset.MODULES``) and collects its rules.

Importing the package imports no rule module: the engine is handed a ``RuleSet``, so a test can run it with
rules of its own (README.md beside this file: what a rule may do, what this folder may import).
"""

from webhook.rules.base import Context, Finding, Outcome, Rule, rule

__all__ = ["Context", "Finding", "Outcome", "Rule", "rule"]
