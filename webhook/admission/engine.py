"""Pick the rules for a request, run them, and turn their findings into one decision.

The engine is where policy meets rules (Kyverno-style): rules report findings; the engine applies the
policy's action per finding (stage default, rule override, exceptions), chains the mutated copies of
mutating rules and diffs the final object against the one received, so the patch always applies.
A rule that raises never escapes: it becomes a verdict of that rule with status ``rule-error``, whose action
the policy's ``enforcement.ruleErrors`` picks (capped by the rule's own action; exceptions apply). A finding a
rule marks ``unjudged`` (a lookup it needed was unknown) is treated the same way.
The answer sent back (message, warnings, auditAnnotations) is built from the decision in ``admission``.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Any

from webhook.admission.review import AdmissionRequest, loggable
from webhook.objects.patch import make_patch
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action
from webhook.policy.rule_ids import RULE_ERROR
from webhook.rules.base import Context, Finding, Rule
from webhook.rules.ruleset import RuleSet, standard_rules
from webhook.rules.view import ClusterView, OfflineView

log = logging.getLogger("webhook.engine")

#: Kinds never denied, whatever the policy says (issue 13 item 4): a denial is honoured under any failure
#: policy, and refusing a ResourceSlice stops a DRA driver publishing its devices. Deny becomes Warn.
NEVER_DENIED_KINDS = frozenset({"ResourceSlice"})


@dataclass(frozen=True, slots=True)
class Verdict:
    """A finding with the action the policy gave it (``excepted`` names the exception that switched it off)."""

    finding: Finding
    action: Action
    excepted: str = ""
    failed: bool = False  # status rule-error: the rule raised or could not judge; the finding says so

    @property
    def status(self) -> str:
        """``rule-error`` for a rule that raised, else ``finding`` (the rule judged the object)."""
        return RULE_ERROR if self.failed else "finding"

    @property
    def rule(self) -> str:
        return self.finding.rule


@dataclass(slots=True)
class Decision:
    """What the rules found and what the policy made of it; ``admission.answer`` turns it into the answer."""

    allowed: bool
    verdicts: list[Verdict] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    notes: dict[str, str] = field(default_factory=dict)  # auditAnnotations rules asked for, and degradation
    stage: str = ""
    cohort: str = ""
    mutated: dict[str, Any] | None = None  # the final object when a patch was made


def evaluate(
    request: AdmissionRequest,
    policy: CompiledPolicy,
    view: ClusterView | None = None,
    phase: str = "validate",
    now: dt.datetime | None = None,
    rules: RuleSet | None = None,
) -> Decision:
    """Evaluate one admission request under a policy with ``rules`` (default: the standard set).

    Never raises for a rule's failure.
    """
    return _evaluate(request, policy, view, phase, now, rules or standard_rules())


def handled_kinds(rules: RuleSet | None = None) -> frozenset[str]:
    """Every kind some rule looks at (for webhook configurations and `check`)."""
    return (rules or standard_rules()).kinds()


def _evaluate(
    req: AdmissionRequest, policy: CompiledPolicy, view: ClusterView | None, phase: str, now: dt.datetime | None,
    rules: RuleSet,
) -> Decision:
    obj = req.object
    if obj is None or req.operation in ("DELETE", "CONNECT") or req.sub_resource:
        return Decision(allowed=True)
    selected = _select(req, policy, phase, rules)
    if not selected:
        return Decision(allowed=True)
    now = now or dt.datetime.now(dt.UTC)
    meta_ns = (obj.get("metadata") or {}).get("namespace")
    namespace = req.namespace or (meta_ns if isinstance(meta_ns, str) else "")
    ctx, degraded = _context(req, policy, view or OfflineView(), phase, now, namespace)
    verdicts: list[Verdict] = []
    notes: dict[str, str] = {}
    current = obj
    for rule in selected:  # inline, not a helper per rule: this loop is the per-request hot path
        base = policy.action_for(rule.id, ctx.stage)
        if base is Action.Off:
            continue
        try:
            outcome = rule.fn(current, ctx)
        except Exception as exc:  # a broken rule must not take the request down
            verdicts.append(_rule_failed(rule.id, exc, req, ctx, _capped(req.kind, base)))
            continue
        for finding in outcome.findings:
            verdicts.append(_verdict(finding, _capped(req.kind, base), policy, namespace, now))
        notes.update(outcome.notes)
        degraded += outcome.degraded
        if outcome.mutated is not None and rule.mutating and _mutation_enabled(policy, rule.id, namespace, now):
            current = outcome.mutated
    return _decide(obj, current, ctx, verdicts, notes, degraded)


def _rule_failed(rule_id: str, exc: Exception, req: AdmissionRequest, ctx: Context, base: Action) -> Verdict:
    """Log a rule that raised and turn it into its rule-error verdict."""
    # The exception text may quote request values (a bad quantity, a secret-looking string):
    # name the failure at ERROR, keep the traceback for DEBUG.
    log.error("rule %s failed on request uid=%s (%s %s/%s): %s", rule_id, *map(loggable, (
        req.uid, req.kind, ctx.namespace, req.name or "<generated>")), type(exc).__name__)
    log.debug("rule %s traceback (uid=%s)", rule_id, loggable(req.uid), exc_info=True)
    return _failure(rule_id, type(exc).__name__, base, ctx.policy, ctx.namespace, ctx.now, req.uid)


def _decide(
    obj: dict[str, Any], current: dict[str, Any], ctx: Context, verdicts: list[Verdict], notes: dict[str, str],
    degraded: tuple[str, ...],
) -> Decision:
    """The decision from the rules' verdicts: denied if any verdict denies, patched only when allowed."""
    decision = Decision(
        allowed=not any(v.action is Action.Deny for v in verdicts),
        verdicts=verdicts,
        notes=notes,
        # Cluster-scoped objects (DeviceClasses, slices, taint rules) belong to no cohort: their findings take
        # the default stage's action, but they carry no stage of their own (issue 14 item 8).
        stage=ctx.stage if ctx.namespace else "",
        cohort=ctx.cohort.name if ctx.cohort else "",
    )
    if current is not obj and decision.allowed:
        ops = make_patch(obj, current)
        if ops:
            decision.patch = ops
            decision.mutated = current
    if degraded:
        decision.notes["cluster-view-degraded"] = "; ".join(dict.fromkeys(degraded))
    return decision


def _select(req: AdmissionRequest, policy: CompiledPolicy, phase: str, rules: RuleSet) -> tuple[Rule, ...]:
    """The rules for this request: by kind, or the common workload rules for a kind the policy names."""
    if (req.group, req.kind) in policy.workload_kinds:
        return rules.for_workloads(phase, req.operation)
    return rules.select(req.kind, phase, req.operation)


def _context(
    req: AdmissionRequest, policy: CompiledPolicy, view: ClusterView, phase: str, now: dt.datetime, namespace: str
) -> tuple[Context, tuple[str, ...]]:
    """The request's context, and what was degraded building it (namespace labels the view lacked)."""
    degraded: tuple[str, ...] = ()
    labels = None
    cohort = None
    if namespace:
        if policy.uses_namespace_labels:
            labels = view.namespace_labels(namespace)
        cohort = policy.cohort_for(namespace, labels.value if labels is not None else None)
        if labels is not None and not labels.is_found and not isinstance(view, OfflineView):
            # Only worth saying when a selector cohort could have matched before the one we found.
            limit = cohort.index if cohort else len(policy.cohorts)
            if any(c.selector is not None for c in policy.cohorts[:limit]):
                why = labels.reason if labels.reason is not None else f"namespace {namespace} not found"
                degraded = (f"labels of namespace {namespace} unknown ({why or 'no data'}); "
                            "cohorts matched by name only",)
    return Context(
        policy=policy,
        kind=req.kind,
        group=req.group,
        version=req.version,
        operation=req.operation,
        namespace=namespace,
        phase=phase,  # type: ignore[arg-type]
        now=now,
        cohort=cohort,
        stage=policy.stage_for(cohort, now),
        view=view,
        old_object=req.old_object,
        uid=req.uid,
        dry_run=req.dry_run,
        user=req.user,
    ), degraded


def _capped(kind: str, action: Action) -> Action:
    return Action.Warn if action is Action.Deny and kind in NEVER_DENIED_KINDS else action


def _verdict(finding: Finding, base: Action, policy: CompiledPolicy, namespace: str, now: dt.datetime) -> Verdict:
    exc = policy.exception_for(finding.rule, namespace, now)
    if exc is not None:
        return Verdict(finding, Action.Off, excepted=exc.reason, failed=finding.unjudged)
    if finding.unjudged:  # as for a rule that raised: ruleErrors decides, never stronger than the rule's action
        return Verdict(finding, min(policy.rule_error_action, base, key=STRENGTH.__getitem__), failed=True)
    action = base
    if finding.advisory and action is Action.Deny:
        action = Action.Warn
    return Verdict(finding, action)


STRENGTH = {Action.Off: 0, Action.Audit: 1, Action.Warn: 2, Action.Deny: 3}
"""How strong an action is: what "never stronger than" and "the strongest action" compare."""


def _failure(rule_id: str, error: str, base: Action, policy: CompiledPolicy, namespace: str, now: dt.datetime,
             uid: str) -> Verdict:
    """A rule that raised: status rule-error, under the rule's id, subject to the rule's exceptions.

    Its action is the policy's ``ruleErrors`` (default Warn), never stronger than the rule's own action in
    this stage: a broken rule must not block a namespace where the rule itself would only have warned.
    """
    finding = Finding(rule_id, f"rule {rule_id} could not evaluate this object ({error})",
                      "report this to the platform team with the request uid " + uid)
    exc = policy.exception_for(rule_id, namespace, now)
    if exc is not None:
        return Verdict(finding, Action.Off, excepted=exc.reason, failed=True)
    action = min(policy.rule_error_action, base, key=STRENGTH.__getitem__)
    return Verdict(finding, action, failed=True)


def _mutation_enabled(policy: CompiledPolicy, rule_id: str, namespace: str, now: dt.datetime) -> bool:
    """Mutations follow the rule's own override, not the stage default: Audit means "report, don't patch"."""
    override = policy.rule_actions.get(rule_id)
    if override in (Action.Off, Action.Audit):
        return False
    return policy.exception_for(rule_id, namespace, now) is None
