"""Rule modules. ``ruleset.standard_rules()`` imports every one (``ruleset.MODULES``) and collects its rules.

Kept import-light on purpose: ``webhook.policy.model`` imports ``webhook.rules.ids``, and rule modules
import the policy package, so importing rule modules here would make a cycle.
"""

from webhook.rules.base import Context, Finding, Outcome, Rule, rule

__all__ = ["Context", "Finding", "Outcome", "Rule", "rule"]
