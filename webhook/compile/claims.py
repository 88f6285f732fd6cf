"""The claim rules that read only the object, as CEL checks on ResourceClaims and ResourceClaimTemplates.

``device-class-not-allowed``, ``device-count-exceeds``, ``allocation-mode-all``, ``admin-access-namespace`` and
``toleration-too-broad`` (``rules/claims.py``, ``rules/tolerations.py``) give one finding per request,
subrequest or toleration, each its own warning. A validation gives one message, so each rule's findings are
worked out as a list of messages (in document order, as ``claim_objects.iter_requests`` walks them), the lists of
the rules in force are joined into one (``validating``: worded as the webhook words them), and validation ``k``
fails when that list has more than ``k`` entries, with entry ``k`` as its message: the API server then returns the
webhook's warnings word for word, for up to ``FINDINGS_PER_CLAIM`` findings in one claim; past that the last
validation names how many more ``check`` lists. A claim may have 32 requests of 8 subrequests, each with 16
tolerations (kubernetes v1.36 ``staging/src/k8s.io/api/resource/v1/types.go``: ``DeviceRequestsMaxSize = 32``,
``FirstAvailableDeviceRequestMaxSize = 8``, ``DeviceTolerationsMaxLength = 16``), but a validation per possible
finding is not cheap: the policy status controller type-checks every expression with every variable compiled
again (``staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/typechecking.go``
``TypeChecker.CheckExpression`` calls ``CompileAndStoreVariables`` per expression); 32 validations per rule took
kube-controller-manager v1.36.2 over a minute on 2 cores, and 8 per claim still added half a minute to every
``compile --validate`` on a busy 2-core machine.

Which requests belong to the migration (``MigrationScope.covers``) needs the cluster's DeviceClasses for any class
the policy does not name: the live webhook counts a class whose DeviceClass selects a driver of the scope (the
drivers of ``spec.migration.drivers``, else those the named classes select), and leaves one of another driver alone
(``foreign``). So the compiled policies take only claims whose every request names a class of the scope's
``classes`` (``spec.migration.deviceClasses``, else the classes ``resources`` map; every claim when the scope is
everything); a claim naming any other class stays with the webhook (matchCondition ``scope-decidable``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webhook.compile.cel import glob_regex, lit, str_list
from webhook.objects.claims import POD_CLAIM_NAME_ANNOTATION, SCHEDULER_CLAIM_ANNOTATION, normalize_toleration
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy

FINDINGS_PER_CLAIM = 4
"""Warn validations per claim: how many of the webhook's findings in one claim the API server repeats exactly."""


@dataclass(frozen=True, slots=True)
class ClaimLayout:
    """A claim kind: its resource and where its ``DeviceClaim`` (``spec.devices``) sits, CEL on ``object``."""

    name: str
    resource: str
    devices: str

    def resource_rules(self) -> list[dict[str, object]]:
        # Claim and template specs are immutable: the webhook judges CREATE only (rules/claims.py ``judged``).
        return [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                 "resources": [self.resource]}]


CLAIM = ClaimLayout("claims", "resourceclaims", "object.spec.devices")
TEMPLATE = ClaimLayout("claimtemplates", "resourceclaimtemplates", "object.spec.spec.devices")
CLAIM_LAYOUTS = (CLAIM, TEMPLATE)

# (slot body, its name as the API refers to it: 'req' or 'req/sub', whether it is a subrequest) -> CEL list(string)
SlotFindings = Callable[[str, str, bool], str]


def _per_slot(findings: SlotFindings) -> str:
    """CEL list(string): ``findings`` of every ``exactly`` and every ``firstAvailable`` subrequest, in order."""
    sub = findings("s", "r.name + '/' + s.name", True)
    return (f"variables.requests.map(r, has(r.exactly) ? {findings('r.exactly', 'r.name', False)} : "
            f"r.?firstAvailable.orValue([]).map(s, {sub}).flatten()).flatten()")


def _one(condition: str, message: str) -> str:
    return f"({condition} ? [{message}] : [])"


def _quoted(expr: str) -> str:
    """Python's ``repr`` of a name the API validated (a DNS label or subdomain: no quote in it)."""
    return f"\"'\" + {expr} + \"'\""


def _class_not_allowed(policy: CompiledPolicy) -> SlotFindings | None:
    allowed = policy.allowed_classes
    if allowed is None:
        return None
    return lambda b, name, sub: _one(
        f"!({b}.deviceClassName in {str_list(sorted(allowed))})",
        f"'request ' + {_quoted(name)} + ' uses DeviceClass ' + {_quoted(b + '.deviceClassName')} + "
        f"', which the migration policy does not allow'")


def _count_exceeds(policy: CompiledPolicy) -> SlotFindings | None:
    limit = policy.spec.claims.maxDevicesPerRequest
    if limit is None:
        return None
    count = "{b}.?count.orValue(1)"
    return lambda b, name, sub: _one(
        f"{b}.?allocationMode.orValue('ExactCount') == 'ExactCount' && {count.format(b=b)} > {limit}",
        f"'request ' + {_quoted(name)} + ' asks for ' + string({count.format(b=b)}) + "
        f"{lit(f' devices, above the limit of {limit} per request')}")


def _mode_all(policy: CompiledPolicy) -> SlotFindings | None:
    if policy.spec.claims.allowAllocationModeAll:
        return None
    exempt = str_list(policy.spec.claims.allocationModeAllClasses)
    return lambda b, name, sub: _one(
        f"{b}.?allocationMode.orValue('') == 'All' && " + ("" if sub else f"!{b}.?adminAccess.orValue(false) && ")
        + f"!({b}.deviceClassName in {exempt})",
        f"'request ' + {_quoted(name)} + ' uses allocationMode All, which claims every matching device on the node'")


def _admin_namespace() -> str:
    return "variables.ns"


def _admin_elsewhere(policy: CompiledPolicy) -> str:
    """CEL: the namespace is not one of ``claims.adminAccessNamespaces`` (globs)."""
    globs = policy.spec.claims.adminAccessNamespaces
    return f"!{_admin_namespace()}.matches({lit(glob_regex(globs))})" if globs else "true"


def _admin_access(policy: CompiledPolicy) -> SlotFindings:
    elsewhere = _admin_elsewhere(policy)
    return lambda b, name, sub: "[''].filter(x, false)" if sub else _one(
        f"{b}.?adminAccess.orValue(false) && {elsewhere}",
        f"'request ' + {_quoted(name)} + ' asks for adminAccess in namespace ' + {_quoted(_admin_namespace())} + "
        "', which is not an admin-access namespace'")


def _toleration_reasons(t: str, max_seconds: int | None) -> str:
    """``tolerations._too_broad`` in CEL: the reasons (list(string)) a toleration ``t`` is too broad."""
    key, op, effect = f"{t}.?key.orValue('')", f"{t}.?operator.orValue('Equal')", f"{t}.?effect.orValue('')"
    seconds = f"{t}.?tolerationSeconds"
    over = f" || {seconds}.orValue(0) > {max_seconds}" if max_seconds is not None else ""
    every = (f"({key} == '' && {op} == 'Exists' && {effect} != 'None' ? ['an empty key with operator Exists '"
             f" + 'tolerates every ' + ({effect} == '' ? 'device' : {effect}) + ' taint'] : [])")
    no_effect = lit("with no effect it lets the allocator place the claim on a NoExecute-tainted device, and the "
                    "Pod is then evicted at once (only NoExecute tolerations delay eviction)")
    above = (f"{seconds}.hasValue() && {seconds}.value() > {max_seconds} ? ['tolerationSeconds ' + "
             f"string({seconds}.value()) + {lit(f' is above the limit of {max_seconds}')}] : []"
             if max_seconds is not None else "[]")
    effects = (f"({effect} == '' && (!{seconds}.hasValue(){over}) ? [{no_effect}] : {effect} == 'NoExecute' ? "
               f"(!{seconds}.hasValue() ? ['it tolerates NoExecute taints forever (no tolerationSeconds)'] : "
               f"{above}) : [])")
    return f"{every} + {effects}"


def _describe(t: str) -> str:
    """``claim_objects.describe_toleration`` in CEL."""
    key, value, effect = f"{t}.?key.orValue('')", f"{t}.?value.orValue('')", f"{t}.?effect.orValue('')"
    seconds = f"{t}.?tolerationSeconds"
    lasts = (f"({seconds}.hasValue() ? string({seconds}.value()) : {effect} in ['', 'NoExecute'] ? "
             "'(unset: forever)' : '(unset)')")
    return (f"'key=' + ({key} == '' ? '(any)' : {key}) + ' operator=' + {t}.?operator.orValue('Equal') + "
            f"' value=' + ({value} == '' ? '(none)' : {value}) + ' effect=' + ({effect} == '' ? '(all)' : {effect})"
            f" + ' tolerationSeconds=' + {lasts}")


def _sanctioned(policy: CompiledPolicy, t: str) -> str:
    """CEL: ``t`` is one of the policy's own ``trainingJobs.deviceTolerations`` (compared normalized)."""
    terms = []
    for tol in policy.device_tolerations:
        key, op, value, effect, seconds = normalize_toleration(tol)
        s = (f"{t}.?tolerationSeconds == optional.of({seconds})" if seconds is not None
             else f"!{t}.?tolerationSeconds.hasValue()")
        terms.append(f"({t}.?key.orValue('') == {lit(key)} && {t}.?operator.orValue('Equal') == {lit(op)} && "
                     f"{t}.?value.orValue('') == {lit(value)} && {t}.?effect.orValue('') == {lit(effect)} && {s})")
    return " || ".join(terms) or "false"


def _too_broad(policy: CompiledPolicy) -> SlotFindings:
    max_seconds = policy.spec.claims.maxTolerationSeconds
    reasons = _toleration_reasons("t", max_seconds)
    monitoring_ns = f"{_admin_namespace()}.matches({lit(glob_regex(policy.spec.claims.adminAccessNamespaces))})" \
        if policy.spec.claims.adminAccessNamespaces else "false"

    def findings(b: str, name: str, sub: bool) -> str:
        tolerations = (f"{b}.?tolerations.orValue([]).filter(t, !({_sanctioned(policy, 't')}) && "
                       f"size({reasons}) > 0).map(t, 'request ' + {_quoted(name)} + ' toleration (' + "
                       f"{_describe('t')} + ') is too broad: ' + ({reasons}).join('; '))")
        if sub:
            return tolerations
        return f"({b}.?adminAccess.orValue(false) && {monitoring_ns} ? [''].filter(x, false) : {tolerations})"
    return findings


def _fixes(policy: CompiledPolicy) -> dict[str, str]:
    """Each rule's remediation, as ``rules/claims.py`` and ``rules/tolerations.py`` write it."""
    c = policy.spec.claims
    limit = f"at most {c.maxTolerationSeconds}" if c.maxTolerationSeconds is not None else "a bounded value"
    return {
        ids.DEVICE_CLASS_NOT_ALLOWED: "use one of the allowed DeviceClasses: "
                                      f"{', '.join(sorted(policy.allowed_classes or ())) or '(none)'}",
        ids.DEVICE_COUNT_EXCEEDS: f"request at most {c.maxDevicesPerRequest} devices, or split the work across Pods",
        ids.ALLOCATION_MODE_ALL: "use allocationMode ExactCount with an explicit count",
        ids.ADMIN_ACCESS_NAMESPACE: "drop adminAccess, or create the claim in an admin-access namespace: "
                                    f"{', '.join(c.adminAccessNamespaces) or '(none)'}",
        ids.TOLERATION_TOO_BROAD: f"tolerate a specific taint key with effect NoExecute and tolerationSeconds {limit}: "
                                  "a toleration without an effect lets the allocator place the claim on a "
                                  "NoExecute-tainted device, but only NoExecute tolerations delay eviction, so the "
                                  "Pod is then evicted at once",
    }


@dataclass(frozen=True, slots=True)
class ClaimRule:
    """One claim rule: ``findings`` is CEL for the list of its finding messages (in document order), declared as
    ``variables.<variable>``; ``fix`` the remediation's first line."""

    rule: str
    variable: str
    findings: str
    fix: str


def claim_rules(policy: CompiledPolicy) -> list[ClaimRule]:
    """The claim rules the policy gives findings for, in rule order."""
    rules: list[tuple[str, SlotFindings | None]] = [
        (ids.DEVICE_CLASS_NOT_ALLOWED, _class_not_allowed(policy)),
        (ids.DEVICE_COUNT_EXCEEDS, _count_exceeds(policy)),
        (ids.ALLOCATION_MODE_ALL, _mode_all(policy)),
        (ids.ADMIN_ACCESS_NAMESPACE, _admin_access(policy)),
        (ids.TOLERATION_TOO_BROAD, _too_broad(policy)),
    ]
    fixes = _fixes(policy)
    return [ClaimRule(rule, f"claim{i}", _per_slot(findings), fixes[rule])
            for i, (rule, findings) in enumerate(rules) if findings is not None]


def decidable_classes(policy: CompiledPolicy) -> frozenset[str] | None:
    """The classes whose claims the compiled policies judge (None: every class, the scope is everything)."""
    return None if policy.scope.everything else policy.scope.classes


def claim_variables(layout: ClaimLayout) -> list[dict[str, str]]:
    return [{"name": "requests", "expression": f"{layout.devices}.?requests.orValue([])"}]


def claim_conditions(policy: CompiledPolicy, layout: ClaimLayout) -> list[dict[str, str]]:
    """matchConditions: not kube-scheduler's own claim (``claim_objects.is_scheduler_claim``), and a scope the
    object alone decides (``decidable_classes``)."""
    ann = "object.metadata.?annotations.orValue({})"
    owner = ("object.metadata.?ownerReferences.orValue([]).exists(o, o.?controller.orValue(false) && "
             "o.kind == 'Pod' && o.apiVersion == 'v1')")
    scheduler = (f"request.userInfo.username in {str_list(sorted(policy.scheduler_usernames))} && "
                 f"{ann}[?{lit(SCHEDULER_CLAIM_ANNOTATION)}] == optional.of('true') && "
                 f"!({lit(POD_CLAIM_NAME_ANNOTATION)} in {ann}) && {owner}")
    out = [{"name": "not-scheduler-claim", "expression": f"!({scheduler})"}]
    classes = decidable_classes(policy)
    if classes is not None:
        named = str_list(sorted(classes))
        out.append({"name": "scope-decidable", "expression": (
            f"{layout.devices}.?requests.orValue([]).all(r, has(r.exactly) ? r.exactly.deviceClassName in {named} : "
            f"r.?firstAvailable.orValue([]).all(s, s.deviceClassName in {named}))")})
    return out


def compiled_for_claims(policy: CompiledPolicy) -> bool:
    """Whether any claim can be judged by the compiled policies (the scope names a class, or is everything)."""
    classes = decidable_classes(policy)
    return classes is None or bool(classes)


def scope_note(policy: CompiledPolicy) -> str:
    """What ``compile`` says on stderr about which claims it compiled."""
    classes = decidable_classes(policy)
    if classes is None:
        return "claims: every claim compiled (the migration scope is every DeviceClass)"
    if not classes:
        return ("claims: none compiled (spec.migration names drivers, no DeviceClass: which claims are the "
                "migration's needs the cluster's DeviceClasses); the webhook judges them")
    return (f"claims: compiled for claims whose every request names one of {', '.join(sorted(classes))}; a claim "
            "naming another DeviceClass stays with the webhook (whether it is the migration's, or another driver's, "
            "needs the cluster's DeviceClasses)")
