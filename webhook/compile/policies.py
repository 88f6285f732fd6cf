"""ValidatingAdmissionPolicies and their bindings for the compiled checks, as of one date.

CEL in admission has no clock, so the stage of each cohort is worked out here for ``at`` and written into
the policies as a constant per cohort; ``valid-until`` says when that stops being true (a schedule entry or
an exception's expiry), and the objects must be compiled again by then (issue #28 item 2).

A binding carries the action (``validationActions``), so each action the policy gives a rule gets its own
ValidatingAdmissionPolicy, one per layout (``layouts``): ``<policy>-<layout>-<action>.dra-migration.io``.
Kubernetes v1.36 ``ValidatingAdmissionPolicyBindingSpec.validationActions`` (k8s.io/api admissionregistration/v1):
Deny fails the request, Warn returns the message as an HTTP warning, Audit records it in the audit event.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from webhook.compile.cel import glob_regex, lit, selector, str_list
from webhook.compile.checks import Check, all_checks
from webhook.compile.layouts import LAYOUTS, Layout, examined
from webhook.delivery import NAME_LABEL, SHIPPED_EXCLUDED
from webhook.policy.compiled import CompiledCohort, CompiledPolicy
from webhook.policy.model import Action

API = "admissionregistration.k8s.io/v1"
FIELD_MANAGER = "dra-webhook-compile"
ACTIONS = (Action.Deny, Action.Warn, Action.Audit)


@dataclass(frozen=True, slots=True)
class Compiled:
    """The objects to apply, and the date after which they are stale (None: no date in the policy changes them)."""

    objects: list[dict[str, Any]]
    valid_until: dt.date | None
    labels: dict[str, str] = field(default_factory=dict)  # ``owner_labels``: what marks these objects as ours


def compile_admission(policy: CompiledPolicy, at: dt.datetime) -> Compiled:
    """Every ValidatingAdmissionPolicy and binding for ``policy`` as of ``at`` (UTC)."""
    day = at.astimezone(dt.UTC).date()
    until = valid_until(policy, day)
    objects: list[dict[str, Any]] = []
    checks = all_checks(policy)
    for layout in LAYOUTS:
        for action in ACTIONS:
            used = [c for c in checks if _stages(c, action, policy, day)]
            validations = [_validation(c, action, policy, day) for c in used]
            if validations:
                name = f"{policy.name}-{layout.name}-{action.value.lower()}.dra-migration.io"
                meta = metadata(name, policy, day, until)
                variables = [*namespace_variables(policy, day), *container_variables(layout),
                             *({"name": n, "expression": e} for c in used for n, e in c.variables)]
                objects.append(_policy(meta, layout, validations, variables, policy))
                objects.append(_binding(meta, action))
    from webhook.compile.mutating import compile_tracking  # it builds on this module's helpers

    return Compiled([*compile_tracking(policy, day, until), *objects], until, owner_labels(policy))


def valid_until(policy: CompiledPolicy, day: dt.date) -> dt.date | None:
    """The first day after ``day`` on which a cohort's stage or an exception changes, or None."""
    dates = [e.from_ for c in policy.cohorts for e in c.schedule if e.from_ > day]
    dates += [e.expires + dt.timedelta(days=1) for e in policy.exceptions if e.expires and e.expires >= day]
    return min(dates, default=None)


def stage_expression(policy: CompiledPolicy, day: dt.date) -> str:
    """CEL for the namespace's stage on ``day``: the first matching cohort's (``cohort_for``), else the default."""
    default = policy.spec.defaultStage.value
    return _first_cohort(policy, lambda c: lit(c.stage_on(day, default)), lit(default))


def cohort_expression(policy: CompiledPolicy) -> str:
    """CEL for the name of the namespace's cohort (``cohort_for``), ``none`` outside every cohort."""
    return _first_cohort(policy, lambda c: lit(c.name), lit("none"))


def _first_cohort(policy: CompiledPolicy, value: Callable[[CompiledCohort], str], otherwise: str) -> str:
    expr = otherwise
    for cohort, spec in reversed(list(zip(policy.cohorts, policy.spec.cohorts, strict=True))):
        terms = []
        if spec.namespaces.names:
            terms.append(f"variables.ns.matches({lit(glob_regex(spec.namespaces.names))})")
        if spec.namespaces.selector is not None:
            terms.append(f"({selector(spec.namespaces.selector, 'variables.labels')})")
        expr = f"({' || '.join(terms)}) ? {value(cohort)} : {expr}"
    return expr


def namespace_variables(policy: CompiledPolicy, day: dt.date) -> list[dict[str, str]]:
    """``ns``, ``labels`` (of ``namespaceObject``) and ``stage``: what every compiled policy reads first."""
    return [
        {"name": "ns", "expression": "request.namespace"},
        {"name": "labels", "expression": "namespaceObject.metadata.?labels.orValue({})"},
        {"name": "stage", "expression": stage_expression(policy, day)},
    ]


def container_variables(layout: Layout) -> list[dict[str, str]]:
    """``init``, ``main`` and ``containers`` (init first, as ``objects.iter_containers``) of the layout's pod spec."""
    spec = layout.spec()
    return [
        {"name": "init", "expression": f"{spec}.?initContainers.orValue([])"},
        {"name": "main", "expression": f"{spec}.containers"},
        {"name": "containers", "expression": "variables.init + variables.main"},
    ]


def excepted(rule: str, policy: CompiledPolicy, day: dt.date) -> list[str]:
    """Namespace globs of the exceptions switching ``rule`` off on ``day`` (``CompiledException.covers``)."""
    return [g for e in policy.spec.exceptions if rule in e.rules and (e.expires is None or day <= e.expires)
            for g in e.namespaces]


def metadata(name: str, policy: CompiledPolicy, day: dt.date, until: dt.date | None) -> dict[str, Any]:
    """Name, our labels, and the policy identity, the date compiled for and the date it is valid until."""
    annotations = {policy.key("policy"): policy.identity, policy.key("compiled-for"): day.isoformat()}
    if until is not None:
        annotations[policy.key("valid-until")] = until.isoformat()
    return {"name": name, "labels": owner_labels(policy), "annotations": annotations}


def owner_labels(policy: CompiledPolicy) -> dict[str, str]:
    """The labels of every object compiled from ``policy``: ``--validate`` prunes by them."""
    return {"app.kubernetes.io/managed-by": FIELD_MANAGER, "app.kubernetes.io/part-of": "dra-migration-webhook",
            "app.kubernetes.io/instance": policy.name[:63].rstrip("-.")}


def binding_spec(name: str) -> dict[str, Any]:
    """The binding's policy and namespaces: those the webhook configurations send (``delivery.SHIPPED_EXCLUDED``)."""
    return {"policyName": name, "matchResources": {"namespaceSelector": {"matchExpressions": [
        {"key": NAME_LABEL, "operator": "NotIn", "values": list(SHIPPED_EXCLUDED)}]}}}


def stages_on(policy: CompiledPolicy, day: dt.date) -> frozenset[str]:
    """The stages some namespace can be in on ``day``: the default, and each cohort's."""
    default = policy.spec.defaultStage.value
    return frozenset({default, *(c.stage_on(day, default) for c in policy.cohorts)})


def _stages(check: Check, action: Action, policy: CompiledPolicy, day: dt.date) -> list[str]:
    """The stages, in use on ``day``, in which ``check``'s rule has ``action``."""
    used = stages_on(policy, day)
    return [s for s in check.stages if s in used and policy.action_for(check.rule, s) is action]


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
        text += f" + {lit('; fix: ' + check.fix)}"
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
            "matchConditions": [{"name": "examined", "expression": examined(layout, policy.prefix)}],
            "variables": variables,
            "validations": validations,
        },
    }


def _binding(meta: dict[str, Any], action: Action) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {**meta},
            "spec": {**binding_spec(meta["name"]), "validationActions": [action.value]}}
