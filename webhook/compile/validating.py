"""ValidatingAdmissionPolicies and their bindings for the compiled checks (``checks``), as of one date.

A binding carries the action (``validationActions``), so each action the policy gives a rule gets its own
ValidatingAdmissionPolicy, one per layout (``layouts``): ``<policy>-<layout>-<action>.dra-migration.io``.
Kubernetes v1.36 ``ValidatingAdmissionPolicyBindingSpec.validationActions`` (k8s.io/api admissionregistration/v1):
Deny fails the request, Warn returns the message as an HTTP warning, Audit records it in the audit event.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from webhook.compile.cel import glob_regex, lit, str_list
from webhook.compile.checks import Check, all_checks
from webhook.compile.layouts import LAYOUTS, Layout, examined, uses_devices
from webhook.compile.plan import plan_variables, training_variables
from webhook.compile.shared import (
    API,
    binding_spec,
    container_variables,
    excepted,
    metadata,
    namespace_variables,
    stages_on,
)
from webhook.compile.steering import steering_checks, steering_variables
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action

ACTIONS = (Action.Deny, Action.Warn, Action.Audit)


def compile_validating(policy: CompiledPolicy, day: dt.date, until: dt.date | None,
                       namespaces: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ValidatingAdmissionPolicy and binding for ``policy`` on ``day``; the bindings take ``namespaces``."""
    objects: list[dict[str, Any]] = []
    checks = [*all_checks(policy), *steering_checks(policy)]
    for layout in LAYOUTS:
        for action in ACTIONS:
            used = [c for c in checks if _stages(c, action, policy, day)]
            if not used:
                continue
            name = f"{policy.name}-{layout.name}-{action.value.lower()}.dra-migration.io"
            meta = metadata(name, policy, day, until)
            plan = (*plan_variables(policy), *training_variables(policy, layout)) if any(c.plan for c in used) else ()
            if any(c.steer for c in used):
                plan = (*plan, *steering_variables(policy, layout))
            variables = [*namespace_variables(policy, day), *container_variables(layout), *plan,
                         *({"name": n, "expression": e} for c in used for n, e in c.variables)]
            validations = [_validation(c, action, policy, day) for c in used]
            objects.append(_policy(meta, layout, validations, variables, policy))
            objects.append(_binding(meta, action, namespaces))
    return objects


def _stages(check: Check, action: Action, policy: CompiledPolicy, day: dt.date) -> list[str]:
    """The stages, in use on ``day``, in which ``check``'s rule has ``action``."""
    used = stages_on(policy, day)
    return [s for s in check.stages if s in used and _action(check, policy, s) is action]


def _action(check: Check, policy: CompiledPolicy, stage: str) -> Action:
    """The rule's action in ``stage``; Deny becomes Warn for an advisory check (``engine._verdict``)."""
    action = policy.action_for(check.rule, stage)
    return Action.Warn if check.advisory and action is Action.Deny else action


def _validation(check: Check, action: Action, policy: CompiledPolicy, day: dt.date) -> dict[str, Any]:
    """The validation for ``check`` under ``action`` (in the stages that give the rule that action)."""
    stages = _stages(check, action, policy, day)
    guard = f"variables.stage in {str_list(stages)}"
    globs = excepted(check.rule, policy, day)
    if globs:
        guard += f" && !variables.ns.matches({lit(glob_regex(globs))})"
    # admission.answer: "<rule> (<stage>: Deny): <message>; fix: <fix>"; warnings "<rule> (<stage>): ...".
    label = ": Deny" if action is Action.Deny else ""
    text = f"{lit(check.rule + ' (')} + variables.stage + {lit(label + '): ')} + {check.message}"
    if action is not Action.Audit:
        text += f" + {lit('; fix: ' + check.fix)}" if check.fix_expression is None else \
            f" + '; fix: ' + {check.fix_expression}"
    return {
        "expression": f"!({guard}) || !({check.finding})",
        "messageExpression": text,
        "message": f"{check.rule}: {check.fix}",
        "reason": "Forbidden",
    }


def _policy(meta: dict[str, Any], layout: Layout, validations: list[dict[str, Any]],
            variables: list[dict[str, str]], policy: CompiledPolicy) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": meta,
        "spec": {
            # As the validating webhook for workloads (deploy/base/webhooks.yaml): fail open.
            "failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": layout.resource_rules()},
            "matchConditions": [{"name": "uses-devices", "expression": uses_devices(layout)},
                                {"name": "examined", "expression": examined(layout, policy.prefix)}],
            "variables": variables,
            "validations": validations,
        },
    }


def _binding(meta: dict[str, Any], action: Action, namespaces: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {**meta},
            "spec": {**binding_spec(meta["name"], namespaces), "validationActions": [action.value]}}
