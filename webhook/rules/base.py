"""What every rule gets and returns.

A rule is a pure function ``(obj, ctx) -> Outcome``: the raw object (a dict straight from the
AdmissionReview, never modified) and a read-only context in, findings and an optionally mutated copy
out. Rules never decide Deny vs Warn: the engine maps each finding to the policy's action.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from webhook.rules.memo import Memo

if TYPE_CHECKING:
    from webhook.policy.compiled import CompiledCohort, CompiledPolicy
    from webhook.rules.view import ClusterView

Phase = Literal["mutate", "validate"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem a rule found. ``message`` is one line; ``remediation`` says what to do instead."""

    rule: str
    message: str
    remediation: str = ""
    paths: tuple[str, ...] = ()
    # Advisory findings inform (a warning at most), whatever the stage says: e.g. "limit reached, nothing
    # injected". They are still switched off by `Off` and by exceptions.
    advisory: bool = False
    # The rule could not judge (a lookup it needed was unknown): not a statement about the object. Like a rule
    # that raised, its status is rule-error and the policy's enforcement.ruleErrors picks the action.
    unjudged: bool = False


@dataclass(slots=True)
class Outcome:
    """A rule's result: findings, and for mutating rules the changed copy (None = no change)."""

    findings: list[Finding] = field(default_factory=list)
    mutated: dict[str, Any] | None = None
    # Extra auditAnnotations the rule wants recorded (key without '/', see review.py).
    notes: dict[str, str] = field(default_factory=dict)
    # Lookups that fell back to offline behaviour, each with its reason (a ``Lookup``'s): the engine gathers
    # them into the ``cluster-view-degraded`` auditAnnotation, so operators see a decision made without data.
    degraded: tuple[str, ...] = ()


NO_OUTCOME = Outcome()


@dataclass(frozen=True, slots=True)
class Context:
    """Everything a rule may look at besides the object. Built once per request by the engine; read-only."""

    policy: CompiledPolicy
    kind: str  # request.kind.kind, e.g. "Pod"
    group: str  # request.kind.group, "" for core
    version: str
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    namespace: str
    phase: Phase
    now: dt.datetime
    cohort: CompiledCohort | None
    stage: str  # "legacy" | "pilot" | "migrated"
    view: ClusterView
    old_object: dict[str, Any] | None = None
    uid: str = ""
    dry_run: bool = False
    # request.userInfo: who is asking (e.g. system:kube-scheduler creating its own claims).
    user: dict[str, Any] = field(default_factory=dict)
    # What the rules of this request share (``rules.memo``: usage, requested names, templates per object), so
    # each is computed once per request. A cache of pure functions: it changes no rule's answer.
    memo: Memo = field(default_factory=Memo, compare=False, repr=False)


RuleFn = Callable[[dict[str, Any], Context], Outcome]


@dataclass(frozen=True, slots=True)
class Rule:
    """A registered rule: id, the kinds it looks at, the phases it runs in, and the function."""

    id: str
    kinds: frozenset[str]
    phases: frozenset[str]
    fn: RuleFn
    operations: frozenset[str] = frozenset({"CREATE", "UPDATE"})
    mutating: bool = False

    def applies(self, kind: str, phase: str, operation: str) -> bool:
        return kind in self.kinds and phase in self.phases and operation in self.operations


RULES_ATTR = "__dra_rules__"
"""Where ``rule`` leaves a function's registrations (a tuple of Rule, in decoration order) for ``RuleSet``."""


def rule(
    rule_id: str,
    kinds: Iterable[str],
    phases: Iterable[str] = ("validate",),
    operations: Iterable[str] = ("CREATE", "UPDATE"),
    mutating: bool = False,
) -> Callable[[RuleFn], RuleFn]:
    """Decorator that declares a rule function; ``ruleset.RuleSet.of_modules`` collects the declarations.

    It writes no global: a rule set is a value built from the modules (``ruleset.standard_rules``).
    """

    def declare(fn: RuleFn) -> RuleFn:
        declared = Rule(rule_id, frozenset(kinds), frozenset(phases), fn, frozenset(operations), mutating)
        setattr(fn, RULES_ATTR, (*declared_rules(fn), declared))
        return fn

    return declare


def declared_rules(fn: object) -> tuple[Rule, ...]:
    """The rules ``rule`` declared on ``fn`` (none for any other object)."""
    found = getattr(fn, RULES_ATTR, ())
    return found if isinstance(found, tuple) else ()
