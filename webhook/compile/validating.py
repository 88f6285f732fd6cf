"""ValidatingAdmissionPolicies and their bindings for the compiled checks (``checks``), as of one date.

A binding carries the action (``validationActions``), so each action the policy gives a rule gets its own
ValidatingAdmissionPolicy, one per layout (``layouts``): ``<policy>-<layout>-<action>.dra-migration.io``.
Kubernetes v1.36 ``ValidatingAdmissionPolicyBindingSpec.validationActions`` (k8s.io/api admissionregistration/v1):
Deny fails the request, Warn returns the message as an HTTP warning, Audit records it in the audit event.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from webhook.compile.cel import glob_regex, lit, str_list
from webhook.compile.checks import STAGES, Check, all_checks
from webhook.compile.claims import (
    CLAIM_LAYOUTS,
    FINDINGS_PER_CLAIM,
    ClaimRule,
    claim_conditions,
    claim_rules,
    claim_variables,
    compiled_for_claims,
)
from webhook.compile.layouts import LAYOUTS, POD, examined, uses_devices
from webhook.compile.plan import plan_variables, training_variables
from webhook.compile.shared import (
    API,
    binding_spec,
    container_variables,
    excepted,
    inline_variables,
    metadata,
    namespace_variables,
    outside_stages,
    settled_stages,
    skip_settled,
    stages_on,
    standalone,
    used_variables,
)
from webhook.compile.steering import steering_checks, steering_variables
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action

ACTIONS = (Action.Deny, Action.Warn, Action.Audit)


def compile_validating(policy: CompiledPolicy, day: dt.date, until: dt.date | None,
                       namespaces: dict[str, Any], existing: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Every ValidatingAdmissionPolicy and binding for ``policy`` on ``day``; the bindings take ``namespaces``
    but those of ``existing`` settled in stages where their policy does nothing (``shared.skip_settled``)."""
    objects: list[dict[str, Any]] = []
    settled = settled_stages(policy, day, existing)
    # The mutating rule's checks first: the webhook's mutating call denies before its validating call runs
    # (``admission.admit``: no validate phase after a denied mutate), and the API server's message is the
    # first denying validation's (kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/
    # validating/dispatcher.go ``Dispatch``: ``deniedDecisions[0]``). So a Pod both rules deny is denied for the
    # same reason by both engines.
    steering = steering_checks(policy)
    denial = _mutate_denial(steering, policy, day)
    checks = [*steering, *(_after_mutate(c, denial) for c in all_checks(policy))]
    for layout in LAYOUTS:
        conditions = [{"name": "uses-devices", "expression": uses_devices(layout)}]
        if layout is not POD:  # a Pod is always examined: no condition to evaluate
            conditions.append({"name": "examined", "expression": examined(layout, policy.prefix)})
        for action, used in _by_action(checks, policy, day):
            plan = (*plan_variables(policy), *training_variables(policy, layout)) if any(c.plan for c in used) else ()
            if any(c.steer for c in used):
                plan = (*plan, *steering_variables(policy, layout))
            variables = [*namespace_variables(policy, day), *container_variables(layout), *plan]
            stages = frozenset(s for c in used for s in _stages(c, action, policy, day))
            objects += _pair(policy, day, until, skip_settled(namespaces, settled, stages),
                             layout.name, action, used, variables,
                             {"resourceRules": layout.resource_rules()}, [*_in_use(policy, day, stages), *conditions])
    if compiled_for_claims(policy):
        rules = claim_rules(policy)
        for claims in CLAIM_LAYOUTS:
            for action in ACTIONS:
                own, validations = _claim_policy(policy, day, action, rules)
                if not validations:
                    continue
                meta = metadata(f"{policy.name}-{claims.name}-{action.value.lower()}.dra-migration.io", policy, day,
                                until)
                variables = [*namespace_variables(policy, day), *claim_variables(claims), *own]
                stages = frozenset(s for r in rules for s in _stages(Check(r.rule, STAGES, "", "", r.fix), action,
                                                                     policy, day))
                objects += [_policy(meta, {"resourceRules": claims.resource_rules()},
                                    [*_in_use(policy, day, stages), *claim_conditions(policy, claims)], validations,
                                    variables),
                            _binding(meta, action, skip_settled(namespaces, settled, stages))]
    return objects


def _mutate_denial(steering: list[Check], policy: CompiledPolicy, day: dt.date) -> str | None:
    """CEL: a check of the mutating rule (steer-node-pool) denies the object in its stage, or None where none can.
    The webhook then answers its mutating call with the denial and the API server never sends the validating call
    (``admission.admit``), so no validating rule's finding, warning or audit entry, comes with it; the API server
    runs every ValidatingAdmissionPolicy and returns the Warn policies' warnings beside the Deny policy's denial
    (kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/dispatcher.go
    ``Dispatch``)."""
    return " || ".join(f"!({_passes(c, _guard(c, Action.Deny, policy, day))})"
                       for c in steering if _stages(c, Action.Deny, policy, day)) or None


def _after_mutate(check: Check, denial: str | None) -> Check:
    """A validating rule's ``check``, failing only where the mutating rule let the object through (``denial``): read
    last, so only an object with the finding computes the steering's."""
    if denial is None:
        return check
    return replace(check, finding=f"({check.finding}) && !({denial})", plan=True, steer=True)


def _in_use(policy: CompiledPolicy, day: dt.date, stages: frozenset[str]) -> list[dict[str, str]]:
    """The first matchCondition: skip the policy in a namespace whose name alone puts it in a stage where the policy
    does nothing (``shared.outside_stages``): a GPU Pod in a pilot namespace then runs no CEL of the Audit policy."""
    outside = outside_stages(policy, day, stages)
    return [] if outside is None else [{"name": "stage-in-use", "expression": f"!({outside})"}]


def _by_action(checks: list[Check], policy: CompiledPolicy, day: dt.date) -> list[tuple[Action, list[Check]]]:
    """(action, the checks with that action in some stage in use on ``day``), for each action some check has."""
    out = []
    for action in ACTIONS:
        used = [c for c in checks if _stages(c, action, policy, day)]
        if used:
            out.append((action, used))
    return out


def _pair(policy: CompiledPolicy, day: dt.date, until: dt.date | None, namespaces: dict[str, Any], layout: str,
          action: Action, used: list[Check], variables: list[dict[str, str]], match: dict[str, Any],
          conditions: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The policy ``<policy>-<layout>-<action>`` with the checks ``used`` (and the variables they read), and its
    binding."""
    meta = metadata(f"{policy.name}-{layout}-{action.value.lower()}.dra-migration.io", policy, day, until)
    own = {n: e for c in used for n, e in c.variables}  # checks of one rule may share a variable: declared once
    variables = [*variables, *({"name": n, "expression": e} for n, e in own.items())]
    return [_policy(meta, match, _may_find(conditions, used, variables), _validations(used, action, policy, day),
                    variables),
            _binding(meta, action, namespaces)]


def _may_find(conditions: list[dict[str, str]], used: list[Check],
              variables: list[dict[str, str]]) -> list[dict[str, str]]:
    """``conditions`` with ``uses-devices`` narrowed to objects on which some check of the policy can fail: every
    check's cheap necessary condition (``Check.could``), or'ed, written in as a matchCondition needs
    (``shared.standalone``). A GPU Pod no check can fail (most: steered by our own term, one container asking for a
    few devices, no training job) then costs the policy one pass of matchConditions, not its validations and
    messageExpressions, two more passes over a fresh conversion of the object (kubernetes v1.36 staging/src/k8s.io/
    apiserver/pkg/admission/plugin/policy/validating/validator.go ``Validate``). One condition, ``uses-devices``
    first: the API server evaluates every matchCondition of a policy (plugin/webhook/matchconditions/matcher.go
    ``Match``), so a plain Pod would pay a second one."""
    coulds = [c.could for c in used]
    if any(c is None for c in coulds):
        return conditions
    found = standalone(" || ".join(f"({c})" for c in dict.fromkeys(coulds)), variables)
    if "namespaceObject" in found:  # a matchCondition has none (``Check.could``: the object alone)
        raise ValueError(f"a check's cheap condition reads the namespace: {found}")
    return [{"name": "may-find", "expression": f"({c['expression']}) && ({found})"} if c["name"] == "uses-devices"
            else c for c in conditions]


def _stages(check: Check, action: Action, policy: CompiledPolicy, day: dt.date) -> list[str]:
    """The stages, in use on ``day``, in which ``check``'s rule has ``action``."""
    used = stages_on(policy, day)
    return [s for s in check.stages if s in used and _action(check, policy, s) is action]


def _action(check: Check, policy: CompiledPolicy, stage: str) -> Action:
    """The rule's action in ``stage``; Deny becomes Warn for an advisory check (``engine._verdict``)."""
    action = policy.action_for(check.rule, stage)
    return Action.Warn if check.advisory and action is Action.Deny else action


def _validations(used: list[Check], action: Action, policy: CompiledPolicy, day: dt.date) -> list[dict[str, Any]]:
    """A validation per check, in order, but one for the checks of an ``exclusive`` group (at its first)."""
    groups: dict[str | int, list[Check]] = {}
    for i, check in enumerate(used):
        groups.setdefault(check.exclusive or i, []).append(check)
    return [_validation(g[0], action, policy, day) if len(g) == 1 else _shared(g, action, policy, day)
            for g in groups.values()]


def _passes(check: Check, guard: str) -> str:
    """CEL: the object passes ``check`` (its cheap condition first: a passing object then skips the stage, the plan
    and the finding)."""
    expression = f"!({guard}) || !({check.finding})"
    return expression if check.could is None else f"!({check.could}) || {expression}"


def _validation(check: Check, action: Action, policy: CompiledPolicy, day: dt.date) -> dict[str, Any]:
    """The validation for ``check`` under ``action`` (in the stages that give the rule that action)."""
    guard = _guard(check, action, policy, day)
    expression = _passes(check, guard)
    return {
        "expression": expression,
        "messageExpression": _message(check, action, guard, expression),
        "message": f"{check.rule}: {check.fix}",
        "reason": "Forbidden",
    }


def _shared(checks: list[Check], action: Action, policy: CompiledPolicy, day: dt.date) -> dict[str, Any]:
    """One validation for checks that never fail together (``Check.exclusive``): it passes when each passes; its
    message is the failed one's words, the checks tried in order, each behind its cheap condition."""
    guards = [_guard(c, action, policy, day) for c in checks]
    # The last one's words as ``_message`` builds them: it failed if the validation did and no other one had.
    message = _message(checks[-1], action, guards[-1], _passes(checks[-1], guards[-1]))
    for check, guard in reversed(list(zip(checks[:-1], guards[:-1], strict=True))):
        failed = f"!({_passes(check, guard)})"
        message = f"{failed} ? ({_text(check, action, check.message)}) : ({message})"
    return {
        "expression": " && ".join(f"({_passes(c, g)})" for c, g in zip(checks, guards, strict=True)),
        "messageExpression": message,
        "message": f"{checks[0].rule}: " + "; or ".join(dict.fromkeys(c.fix for c in checks)),
        "reason": "Forbidden",
    }


def _message(check: Check, action: Action, guard: str, expression: str) -> str:
    """The validation's messageExpression. The API server evaluates every messageExpression of a policy whose
    validations it ran, failed or not, in a context of its own (kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/
    admission/plugin/policy/validating/validator.go: messageFilter.ForInput; plugin/cel/composition.go: a new lazy
    variable map per ForInput), and uses the result only for a failed one. So the words are built only behind the
    check's cheap necessary condition (``Check.could``: a failed check has it), else behind the validation itself
    (which is then computed twice), and only where the stage gives the rule this action (``guard``: its words read
    the stage anyway)."""
    text = _text(check, action, check.message)
    if check.could is None:
        return f"({expression}) ? '' : ({text})"
    return f"({check.could}) && ({guard}) ? ({text}) : ''"


def _guard(check: Check, action: Action, policy: CompiledPolicy, day: dt.date) -> str:
    """CEL: the namespace is in a stage giving ``check``'s rule ``action``, and no exception covers it."""
    guard = f"variables.stage in {str_list(_stages(check, action, policy, day))}"
    globs = excepted(check.rule, policy, day)
    if globs:
        guard += f" && !variables.ns.matches({lit(glob_regex(globs))})"
    return guard


def _text(check: Check, action: Action, message: str) -> str:
    """CEL: the finding as ``admission.answer`` words it: ``<rule> (<stage>: Deny): <message>; fix: <fix>``,
    warnings ``<rule> (<stage>): ...``, audit entries without the fix."""
    label = ": Deny" if action is Action.Deny else ""
    text = f"{lit(check.rule + ' (')} + variables.stage + {lit(label + '): ')} + {message}"
    if action is not Action.Audit:
        text += f" + {lit('; fix: ' + check.fix)}" if check.fix_expression is None else \
            f" + '; fix: ' + {check.fix_expression}"
    return text


def _claim_policy(policy: CompiledPolicy, day: dt.date, action: Action,
                  rules: list[ClaimRule]) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The variables and validations of a claim policy for ``action``: every rule's findings (``claims``), worded,
    in one list ``claimFindings``; Deny fails on its first entry, Warn gives one validation per entry (up to
    ``FINDINGS_PER_CLAIM``), Audit one entry with all of them."""
    variables, texts = [], []
    for r in rules:
        check = Check(r.rule, STAGES, "", "", r.fix)
        if not _stages(check, action, policy, day):
            continue
        variables.append({"name": r.variable, "expression": r.findings})
        texts.append(f"({_guard(check, action, policy, day)} ? variables.{r.variable}.map(m, "
                     f"{_text(check, action, 'm')}) : [''].filter(x, false))")
    if not texts:
        return [], []
    variables.append({"name": "claimFindings", "expression": " + ".join(texts)})
    found = "variables.claimFindings"
    shown = {Action.Deny: [f"{found}[0]"], Action.Audit: [f"{found}.join('; ')"],
             Action.Warn: [f"{found}[{k}]" for k in range(FINDINGS_PER_CLAIM)]}[action]
    shown[-1] += "" if action is not Action.Warn else (
        f" + (size({found}) > {FINDINGS_PER_CLAIM} ? ' (and ' + string(size({found}) - {FINDINGS_PER_CLAIM}) + "
        "' more: dra-webhook check lists them)' : '')")
    fallback = "a claim rule of the migration policy: dra-webhook check names it"
    validations = [{"expression": f"size({found}) <= {k}", "messageExpression": message, "message": fallback,
                    "reason": "Forbidden"} for k, message in enumerate(shown)]
    return variables, validations


def _policy(meta: dict[str, Any], match: dict[str, Any], conditions: list[dict[str, str]],
            validations: list[dict[str, Any]], variables: list[dict[str, str]]) -> dict[str, Any]:
    """The policy, declaring only the ``variables`` its validations read (``shared.used_variables``): a Warn policy
    whose checks never read the node pools declares no steering variable."""
    keys = [(i, k) for i, v in enumerate(validations) for k in ("expression", "messageExpression") if k in v]
    variables, read = inline_variables(used_variables(variables, [validations[i][k] for i, k in keys]),
                                       [validations[i][k] for i, k in keys])
    validations = [dict(v) for v in validations]
    for (i, k), text in zip(keys, read, strict=True):
        validations[i][k] = text
    return {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": meta,
        "spec": {
            # As the validating webhook for workloads (deploy/base/webhooks.yaml): fail open.
            "failurePolicy": "Ignore",
            "matchConstraints": match,
            "matchConditions": conditions,
            "variables": variables,
            "validations": validations,
        },
    }


def _binding(meta: dict[str, Any], action: Action, namespaces: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {**meta},
            "spec": {**binding_spec(meta["name"], namespaces), "validationActions": [action.value]}}
