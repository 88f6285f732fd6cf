"""The rules the engine runs, as a value: built once from the rule modules and passed to the engine.

Like Kyverno's ``engine.NewEngine(...)``, which is handed everything it uses, ``engine.evaluate`` takes a
``RuleSet`` (default: ``standard_rules()``, every rule of ``MODULES``). Nothing registers itself in a
global: ``base.rule`` only marks the function, and ``RuleSet.of_modules`` collects the marks in module
order, so importing the engine imports no rule, and a test runs the engine with a rule of its own by
building a ``RuleSet`` with it (``replaced``, ``RuleSet((...))``) instead of patching a registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cache

from webhook.objects.pods import WORKLOAD_KINDS
from webhook.policy.rule_ids import TRACK_ROLLOUT
from webhook.rules.base import Rule, RuleFn, declared_rules

MODULES = ("gates", "claims", "tolerations", "pods", "workloads", "tracking", "shared_claims", "satisfiable",
           "node_devices")
"""The rule modules of the standard set, in the order their rules run (within each group of ``select``)."""


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Rules in declaration order, with the per-(kind, phase, operation) selection cached inside."""

    rules: tuple[Rule, ...]
    _index: dict[tuple[str, str, str], tuple[Rule, ...]] = field(default_factory=dict, compare=False, repr=False)
    _workload_index: dict[tuple[str, str], tuple[Rule, ...]] = field(default_factory=dict, compare=False,
                                                                      repr=False)

    @classmethod
    def of_modules(cls, names: Iterable[str]) -> RuleSet:
        """Every rule the modules (dotted names) declare (``base.rule``), module by module, in definition order."""
        rules: list[Rule] = []
        for name in names:
            module = importlib.import_module(name)
            for value in vars(module).values():
                if getattr(value, "__module__", None) == module.__name__:
                    rules.extend(declared_rules(value))
        return cls(tuple(rules))

    def select(self, kind: str, phase: str, operation: str) -> tuple[Rule, ...]:
        """Rules for a (kind, phase, operation), mutating ones last and track-rollout at the very end."""
        key = (kind, phase, operation)
        found = self._index.get(key)
        if found is None:
            chosen = sorted((r for r in self.rules if r.applies(kind, phase, operation)),
                            key=lambda r: (r.mutating, r.id == TRACK_ROLLOUT))
            found = self._index[key] = tuple(chosen)
        return found

    def for_workloads(self, phase: str, operation: str) -> tuple[Rule, ...]:
        """The rules every built-in workload kind gets: what a kind the policy names (``workloadKinds``) gets.

        Per-kind rules (``shared-claim-limit`` counts Pods the way each controller runs them) are left out.
        """
        key = (phase, operation)
        found = self._workload_index.get(key)
        if found is None:
            common = set.intersection(*(set(self.select(k, phase, operation)) for k in sorted(WORKLOAD_KINDS)))
            found = tuple(r for r in self.select("Deployment", phase, operation) if r in common)
            self._workload_index[key] = found
        return found

    def kinds(self) -> frozenset[str]:
        """Every kind some rule looks at (for webhook configurations and `check`)."""
        return frozenset(k for r in self.rules for k in r.kinds)

    def named(self, rule_id: str) -> tuple[Rule, ...]:
        """The declarations of one rule id (a rule may be declared for several kinds or phases)."""
        return tuple(r for r in self.rules if r.id == rule_id)

    def replaced(self, rule_id: str, fn: RuleFn) -> RuleSet:
        """The same set with ``rule_id`` running ``fn`` instead (for tests: a rule that raises, say)."""
        return RuleSet(tuple(replace(r, fn=fn) if r.id == rule_id else r for r in self.rules))


@cache
def standard_rules() -> RuleSet:
    """The rule set of ``MODULES``, built on first use (not at import) and shared after."""
    return RuleSet.of_modules(f"webhook.rules.{name}" for name in MODULES)
