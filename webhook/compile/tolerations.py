"""``inject-device-tolerations`` compiled: a MutatingAdmissionPolicy per claim kind (ResourceClaim, template).

The rule (``rules/tolerations.py``) in CEL, for the claims the object itself shows to be a training job's and the
migration's:

- a training job's: by the claim's own labels (a template's overlaid with ``spec.metadata.labels``, as
  ``claim_objects.claim_labels``). A claim a template generated, whose labels do not say, is a training job's when
  its owner Pod is: that needs the cluster view, so the webhook keeps it (a matchCondition).
- the migration's: every request and subrequest names a DeviceClass of the policy's scope (``spec.migration.
  deviceClasses``, else the classes ``resources`` map). A request for another class may still be the migration's
  when the cluster's DeviceClass selects a driver in scope (``migration_scope.MigrationScope.covers``): the
  webhook keeps such claims. A policy that scopes nothing (every class) compiles for every claim.
- a request that would pass 16 tolerations gets an advisory finding from the webhook and nothing added; claims
  with one are left to the webhook (not compiled yet: a validating companion per request).

Requests and device tolerations are atomic lists (k8s.io/api resource/v1 ``DeviceClaim.Requests``,
``ExactDeviceRequest.Tolerations``: ``+listType=atomic``), so the mutation is a ``JSONPatch`` writing each
request's whole toleration list, and the ``<prefix>/tolerations-injected`` count (on a template also in
``spec.metadata``, for the claims it generates). ``reinvocationPolicy: IfNeeded``, as the webhook
(``resources.mutate``, deploy/base/webhooks.yaml); a second run changes nothing. Only CREATE: claim specs are
immutable. Skipped, as by the webhook, when the policy has ``DRADeviceTaints`` off. The bindings take the
``workloads.mutate`` namespaces (``Namespaces.mutating``), which deploy/base gives ``resources.mutate`` too.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from webhook.compile.cel import glob_regex, lit, str_list
from webhook.compile.checks import STAGES
from webhook.compile.shared import API, excepted, mutating_pairs, namespace_variables
from webhook.objects.claims import (
    MAX_TOLERATIONS_PER_REQUEST,
    POD_CLAIM_NAME_ANNOTATION,
    SCHEDULER_CLAIM_ANNOTATION,
    normalize_toleration,
    toleration_identity,
)
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action
from webhook.rules.tolerations import INJECTED_ANNOTATION

MAX_REQUESTS = 32  # resource/v1 DeviceRequestsMaxSize
MAX_SUBREQUESTS = 8  # resource/v1 FirstAvailableDeviceRequestMaxSize


@dataclass(frozen=True, slots=True)
class ClaimLayout:
    """Where a claim kind keeps its ResourceClaimSpec (CEL on ``object``, and the JSON pointer)."""

    name: str
    resource: str
    spec: str
    pointer: str


CLAIM = ClaimLayout("claims", "resourceclaims", "object.spec", "/spec")
TEMPLATE = ClaimLayout("claimtemplates", "resourceclaimtemplates", "object.spec.spec", "/spec/spec")


def tolerations_stages(policy: CompiledPolicy) -> list[str]:
    """Stages where the rule injects (``engine``: it runs unless Off; patches unless overridden to Audit or Off)."""
    if not policy.device_tolerations or not policy.gate_enabled("DRADeviceTaints"):
        return []
    if policy.rule_actions.get(ids.INJECT_DEVICE_TOLERATIONS) in (Action.Off, Action.Audit):
        return []
    return [s for s in STAGES if policy.action_for(ids.INJECT_DEVICE_TOLERATIONS, s) is not Action.Off]


def _label(layout: ClaimLayout, key: str) -> str:
    own = f"object.metadata.?labels[?{lit(key)}]"
    return own if layout is CLAIM else f"object.spec.?metadata.?labels[?{lit(key)}].or({own})"


def _training(policy: CompiledPolicy, layout: ClaimLayout) -> str:
    """``CompiledPolicy.is_training_job`` on ``claim_labels`` (a claim has no deadline of its own)."""
    terms = []
    if policy.training_labels:
        terms.append(" && ".join(f"{_label(layout, k)} == optional.of({lit(v)})" for k, v in policy.training_labels))
    terms += [f"{_label(layout, k)}.hasValue()" for k in policy.training_keys]
    return " || ".join(f"({t})" for t in terms) or "false"


def _not_scheduler_claim(policy: CompiledPolicy) -> str:
    """``claims.judged``: not kube-scheduler's extended-resource claim (``claim_objects.is_scheduler_claim``)."""
    ann = "object.metadata.?annotations"
    owner = ("object.metadata.?ownerReferences.orValue([]).filter(r, r.?controller.orValue(false))")
    return (f"!((request.userInfo.username == '' || request.userInfo.username in "
            f"{str_list(sorted(policy.scheduler_usernames))}) && "
            f"{ann}[?{lit(SCHEDULER_CLAIM_ANNOTATION)}] == optional.of('true') && "
            f"!{ann}[?{lit(POD_CLAIM_NAME_ANNOTATION)}].hasValue() && size({owner}) > 0 && "
            f"{owner}[0].kind == 'Pod' && {owner}[0].apiVersion == 'v1')")


def _slots(layout: ClaimLayout) -> str:
    """CEL list of ``{path, body}`` for every ``exactly`` and ``firstAvailable`` subrequest (``iter_requests``);
    indices enumerated up to the API's limits (CEL has no flatten)."""
    reqs = "variables.reqs"
    exact = (f"{list(range(MAX_REQUESTS))}.filter(i, i < size({reqs}) && has({reqs}[i].exactly))"
             f".map(i, {{'path': dyn({lit(layout.pointer + '/devices/requests/')} + string(i) + '/exactly'), "
             f"'body': dyn({reqs}[i].exactly)}})")
    n = MAX_SUBREQUESTS
    sub = (f"{list(range(MAX_REQUESTS * n))}.filter(k, k / {n} < size({reqs}) && has({reqs}[k / {n}].firstAvailable)"
           f" && k % {n} < size({reqs}[k / {n}].firstAvailable))"
           f".map(k, {{'path': dyn({lit(layout.pointer + '/devices/requests/')} + string(k / {n}) + "
           f"'/firstAvailable/' + string(k % {n})), 'body': dyn({reqs}[k / {n}].firstAvailable[k % {n}])}})")
    return f"{exact} + {sub}"


def _wanted(policy: CompiledPolicy) -> str:
    """The policy's tolerations as CEL maps (values ``dyn``: the API server's literals are homogeneous)."""
    def one(tol: dict[str, Any]) -> str:
        fields = []
        for k, v in tol.items():
            fields.append(f"{lit(k)}: dyn({lit(v) if isinstance(v, str) else v})")
        return "{" + ", ".join(fields) + "}"
    return "[" + ", ".join(one(t) for t in policy.device_tolerations) + "]"


def _field(t: str, name: str, default: str) -> str:
    """CEL: the toleration's string field, or the API default (``has``, so the ``cel`` package evaluates it too)."""
    return f"(has({t}.{name}) ? {t}.{name} : {lit(default)})"


def _same_identity(t: str, tol: dict[str, Any]) -> str:
    """CEL: ``toleration_identity`` of ``t`` is that of ``tol`` (same key and effect)."""
    key, effect = toleration_identity(tol)
    return f"({_field(t, 'key', '')} == {lit(key)} && {_field(t, 'effect', '')} == {lit(effect)})"


def _same_normalized(t: str, tol: dict[str, Any]) -> str:
    """CEL: ``normalize_toleration`` of ``t`` is that of ``tol`` (API defaults filled in)."""
    key, operator, value, effect, seconds = normalize_toleration(tol)
    lasts = f"has({t}.tolerationSeconds) && {t}.tolerationSeconds == {seconds}" if seconds is not None else \
        f"!has({t}.tolerationSeconds)"
    return (f"({_field(t, 'key', '')} == {lit(key)} && {_field(t, 'operator', 'Equal')} == {lit(operator)} && "
            f"{_field(t, 'value', '')} == {lit(value)} && {_field(t, 'effect', '')} == {lit(effect)} && {lasts})")


def _per_slot(policy: CompiledPolicy) -> tuple[str, str, str]:
    """CEL on a slot ``s``: (the tolerations it lacks, how many of them, how many policy tolerations it carries
    after the injection: ``inject_device_tolerations``'s ``carried``)."""
    existing = "s.body.?tolerations.orValue([])"
    wanted = policy.device_tolerations
    missing = " + ".join(
        f"(!{existing}.exists(t, {_same_identity('t', w)}) ? [variables.tolWanted[{i}]] : [])"
        for i, w in enumerate(wanted))
    count = " + ".join(f"(!{existing}.exists(t, {_same_identity('t', w)}) ? 1 : 0)" for w in wanted)
    carried = " + ".join(
        f"(!{existing}.exists(t, {_same_identity('t', w)}) || {existing}.exists(t, {_same_normalized('t', w)}) "
        "? 1 : 0)" for w in wanted)
    return missing, count, carried


def _annotations(layout: ClaimLayout, key: str) -> str:
    """JSONPatch CEL setting the count annotation on the object (and a template's ``spec.metadata``)."""
    value = "string(variables.tolCarried)"
    one = "/annotations/" + key.replace("~", "~0").replace("/", "~1")
    own = (f"(object.metadata.?annotations.hasValue() ? [JSONPatch{{op: 'add', path: {lit('/metadata' + one)}, "
           f"value: {value}}}] : [JSONPatch{{op: 'add', path: '/metadata/annotations', "
           f"value: {{{lit(key)}: {value}}}}}])")
    if layout is CLAIM:
        return own
    spec_meta = (f"(!object.spec.?metadata.hasValue() ? [JSONPatch{{op: 'add', path: '/spec/metadata', value: "
                 f"{{'annotations': {{{lit(key)}: {value}}}}}}}] : object.spec.?metadata.?annotations.hasValue() ? "
                 f"[JSONPatch{{op: 'add', path: {lit('/spec/metadata' + one)}, value: {value}}}] : "
                 f"[JSONPatch{{op: 'add', path: '/spec/metadata/annotations', value: {{{lit(key)}: {value}}}}}])")
    return f"{own} + {spec_meta}"


def _policy(layout: ClaimLayout, policy: CompiledPolicy, day: dt.date, meta: dict[str, Any]) -> dict[str, Any]:
    guard = f"variables.stage in {str_list(tolerations_stages(policy))}"
    globs = excepted(ids.INJECT_DEVICE_TOLERATIONS, policy, day)
    if globs:
        guard += f" && !variables.ns.matches({lit(glob_regex(globs))})"
    missing, count, carried = _per_slot(policy)
    scope = policy.scope
    in_scope = "true" if scope.everything else \
        f"variables.slots.all(s, s.body.?deviceClassName.orValue('') in {str_list(sorted(scope.classes))})"
    fits = f"variables.slots.all(s, size(s.body.?tolerations.orValue([])) + ({count}) <= {MAX_TOLERATIONS_PER_REQUEST})"
    ops = (f"variables.slots.filter(s, ({count}) > 0).map(s, JSONPatch{{op: 'add', path: s.path + '/tolerations', "
           f"value: dyn(s.body.?tolerations.orValue([])) + {missing}}})")
    return {
        "apiVersion": API, "kind": "MutatingAdmissionPolicy", "metadata": meta,
        "spec": {
            "failurePolicy": "Ignore",  # as resources.mutate (deploy/base/webhooks.yaml)
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": [layout.resource]}]},
            "matchConditions": [{"name": "training-job", "expression": _training(policy, layout)},
                                {"name": "not-scheduler-claim", "expression": _not_scheduler_claim(policy)}],
            "variables": [*namespace_variables(policy, day),
                          {"name": "reqs", "expression": f"{layout.spec}.?devices.?requests.orValue([])"},
                          {"name": "slots", "expression": _slots(layout)},
                          {"name": "tolWanted", "expression": _wanted(policy)},
                          {"name": "tolCarried", "expression": f"([0] + variables.slots.map(s, {carried})).sum()"}],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                f"{guard} && size(variables.slots) > 0 && {in_scope} && {fits} ? "
                f"{ops} + {_annotations(layout, policy.key(INJECTED_ANNOTATION))} : []")}}],
        },
    }


RULE = "inject-device-tolerations"
"""The name's rule part: ``<policy>-<claims|claimtemplates>-inject-device-tolerations.dra-migration.io``."""


def compile_tolerations(policy: CompiledPolicy, day: dt.date, until: dt.date | None,
                        namespaces: dict[str, Any]) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy and binding per claim kind, or none when the rule never injects."""
    if not tolerations_stages(policy):
        return []
    return mutating_pairs(policy, day, until, namespaces, [CLAIM, TEMPLATE], RULE,
                          lambda layout, meta: _policy(layout, policy, day, meta))
