"""One admission path: an AdmissionRequest in, the AdmissionResponse the webhook answers out.

``handle`` plays the role of controller-runtime's ``Handle`` beside ``ServeHTTP``: it knows nothing of HTTP,
metrics or the wall clock. The flask view only reads the body, calls it and writes the JSON; ``check``,
``replay``, ``test`` and ``explain`` call ``admit`` (the API server's order: mutate, then validate the
patched object), which calls the same function, so they show byte for byte the answer the server gives,
and all read one value, ``Admitted``, for what the two answers together decided.
The engine decides (rules, actions, patch); this module turns that decision into the answer: the denial
message and causes, warnings, auditAnnotations and the patch, and the answer when there is no decision
(no policy loaded, the evaluation itself failed).
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from webhook.admission import engine
from webhook.admission.engine import STRENGTH, Decision, Verdict
from webhook.admission.review import (
    API_VERSION,
    KIND,
    AdmissionRequest,
    RequestError,
    clean_audit,
    limit_warnings,
    loggable,
)
from webhook.objects.claims import BadCount, bad_counts
from webhook.objects.pods import BadQuantity, bad_quantities
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action
from webhook.policy.rule_ids import RULE_ERROR
from webhook.rules.ruleset import RuleSet
from webhook.rules.view import ClusterView, OfflineView

log = logging.getLogger("webhook.admission")

_REASONS = {400: "BadRequest", 403: "Forbidden", 413: "RequestEntityTooLarge", 500: "InternalError"}


@dataclass(frozen=True, slots=True)
class AdmissionResponse:
    """The answer to one request, and (``decision``) the findings behind it when rules ran.

    ``warnings`` holds all of them; ``review()`` is the wire form, which keeps what the API server keeps.
    """

    uid: str
    allowed: bool
    code: int = 403  # HTTP-style status code of a denial
    message: str = ""
    causes: list[dict[str, str]] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audit: dict[str, str] = field(default_factory=dict)
    decision: Decision | None = None

    @property
    def verdicts(self) -> list[Verdict]:
        return self.decision.verdicts if self.decision else []

    @property
    def denied_rules(self) -> list[str]:
        return [v.rule for v in self.verdicts if v.action is Action.Deny]

    @property
    def mutated(self) -> dict[str, Any] | None:
        """The object after this phase's mutations, when it patched."""
        return self.decision.mutated if self.decision and self.patch else None

    @property
    def stage(self) -> str:
        return self.decision.stage if self.decision else ""

    @property
    def cohort(self) -> str:
        return self.decision.cohort if self.decision else ""

    def review(self) -> dict[str, Any]:
        """The AdmissionReview v1 response, within the API server's limits."""
        resp: dict[str, Any] = {"uid": self.uid, "allowed": self.allowed}
        if not self.allowed:
            status: dict[str, Any] = {
                "code": self.code,
                "reason": _REASONS.get(self.code, "InternalError"),
                "message": self.message or "denied by dra-migration-webhook",
            }
            if self.causes:
                status["details"] = {"causes": self.causes}
            resp["status"] = status
        if self.patch:
            resp["patchType"] = "JSONPatch"
            resp["patch"] = base64.b64encode(orjson.dumps(self.patch)).decode("ascii")
        kept = limit_warnings(self.warnings)
        if kept:
            resp["warnings"] = kept
        if self.audit:
            resp["auditAnnotations"] = clean_audit(self.audit)
        return {"apiVersion": API_VERSION, "kind": KIND, "response": resp}

    def body(self) -> bytes:
        """The exact bytes the server writes."""
        return orjson.dumps(self.review())


def handle(
    request: AdmissionRequest, phase: str, policy: CompiledPolicy | None, view: ClusterView | None,
    now: dt.datetime, *, policy_error: str | None = None, rules: RuleSet | None = None,
) -> AdmissionResponse:
    """Answer one admission request in ``phase`` ("mutate" or "validate"). Never raises.

    Without a policy (``policy_error`` says why) or when the evaluation itself fails, mutation is best
    effort (allowed, with a warning) and validation fails closed (code 500), as the webhook
    configuration's comments explain.
    """
    if policy is None:
        why = f"no valid migration policy is loaded: {policy_error or 'not loaded yet'}"
        log.error("uid=%s %s: %s", loggable(request.uid), phase, why)
        return _no_decision(request.uid, phase, why if phase != "mutate" else f"dra-migration-webhook: {why}")
    undecodable = _undecodable(request, policy)
    if undecodable is not None:
        return undecodable
    try:
        decision = engine.evaluate(request, policy, view or OfflineView(), phase, now, rules)
    except Exception:
        log.exception("uid=%s: evaluation failed for %s %s/%s", *map(loggable, (
            request.uid, request.kind, request.namespace, request.name)))
        return _no_decision(request.uid, phase, f"dra-migration-webhook could not evaluate this request "
                                                f"(uid {request.uid}); see its logs")
    return answer(request.uid, phase, decision, policy)


def _undecodable(request: AdmissionRequest, policy: CompiledPolicy) -> AdmissionResponse | None:
    """The answer to an object the API server would not decode (no rule judges it), or None."""
    bad = bad_quantities(request.object or {}, request.kind, request.group, policy.template_finders)
    if bad:
        return not_quantities(request.uid, bad)
    counts = bad_counts(request.object or {}, request.kind)
    if counts:
        return not_integers(request.uid, counts)
    return None


def not_integers(uid: str, bad: list[BadCount]) -> AdmissionResponse:
    """The answer to a claim whose request ``count`` is no integer (``99.0``, ``"99"``): denied with code 400 naming
    each field, in both phases, as for quantities. The API server refuses such a claim when it decodes it (``count``
    is an int64), so this comes from a caller other than the API server, or from ``check`` of a manifest."""
    causes = [{"type": "FieldValueInvalid", "field": b.field, "message": str(b)} for b in bad]
    fields = "; ".join(str(b) for b in bad)
    return AdmissionResponse(uid, False, code=400, causes=causes,
                             message=f"a device count must be an integer (the API server refuses this claim when it "
                                     f"decodes it), so no rule judged this object: {fields}")


def malformed(exc: RequestError) -> AdmissionResponse:
    """The answer to a review whose request is malformed, or over the structural budget (``admission.budget``):
    denied with the error's code, 400 or 413 (shown to the user)."""
    return AdmissionResponse(exc.uid, False, code=exc.code, message=f"{exc.what}: {exc.message}")


def not_quantities(uid: str, bad: list[BadQuantity]) -> AdmissionResponse:
    """The answer to an object whose resource quantities are no quantities (``$GPU_PER_NODE``, ``""``): denied
    with code 400 naming each field and value, in both phases, and no rule runs (every GPU rule would fail on it).

    The API server never sends such a built-in object: it fails decoding (``Quantity.UnmarshalJSON``) with the
    same "quantities must match" error. A custom resource whose schema keeps the pod template unvalidated
    (``x-kubernetes-preserve-unknown-fields``) can arrive so; its controller could never create the Pods.
    """
    causes = [{"type": "FieldValueInvalid", "field": b.field, "message": b.message} for b in bad]
    fields = "; ".join(str(b) for b in bad)
    return AdmissionResponse(uid, False, code=400, causes=causes,
                             message=f"not a Kubernetes quantity, so no rule judged this object: {fields}")


@dataclass(frozen=True, slots=True)
class Admitted:
    """What the API server makes of one request: the mutating answer, then the validating answer on the
    patched object (None when the mutation was denied: the API server stops there).

    The one reading of "mutate, then validate" that ``check``, ``test``, ``replay`` and ``explain`` share.
    """

    request: AdmissionRequest
    mutate: AdmissionResponse
    validate: AdmissionResponse | None

    @property
    def answers(self) -> list[AdmissionResponse]:
        """The webhook's answers in the order the API server asks."""
        return [self.mutate, *([self.validate] if self.validate is not None else [])]

    @property
    def phases(self) -> list[tuple[str, AdmissionResponse]]:
        return [("mutate", self.mutate), *([("validate", self.validate)] if self.validate is not None else [])]

    @property
    def allowed(self) -> bool:
        return all(a.allowed for a in self.answers)

    @property
    def verdicts(self) -> list[Verdict]:
        """Both phases' verdicts, in order (a rule that runs in both reports twice)."""
        return [v for a in self.answers for v in a.verdicts]

    @property
    def message(self) -> str:
        return "; ".join(a.message for a in self.answers if a.message)

    @property
    def warnings(self) -> list[str]:
        """All warnings of both phases, each once (unlike the API server, which keeps a limited number)."""
        return list(dict.fromkeys(w for a in self.answers for w in a.warnings))

    @property
    def patch(self) -> list[dict[str, Any]]:
        """The mutating answer's patch (the API server applies none to an object it then denies)."""
        return self.mutate.patch

    @property
    def mutated(self) -> dict[str, Any] | None:
        """The object after mutation, when the mutating answer patched it."""
        return self.mutate.mutated

    @property
    def final(self) -> dict[str, Any]:
        """The object the validating phase judged: the mutated one, else the one submitted."""
        return self.mutate.mutated if self.mutate.mutated is not None else (self.request.object or {})

    @property
    def stage(self) -> str:
        return next((a.stage for a in self.answers if a.stage), "")  # cluster-scoped objects have none

    @property
    def cohort(self) -> str:
        return next((a.cohort for a in self.answers if a.cohort), "")

    @property
    def audit(self) -> dict[str, str]:
        return {k: v for a in self.answers for k, v in a.audit.items()}

    def findings(self) -> list[tuple[str, Verdict]]:
        """(phase, verdict) per distinct finding: rules that run in both phases (gated-feature) report the
        same finding twice, listed once under the first phase."""
        seen: dict[tuple[str, str, tuple[str, ...]], tuple[str, Verdict]] = {}
        for phase, answer in self.phases:
            for v in answer.verdicts:
                seen.setdefault((v.rule, v.finding.message, v.finding.paths), (phase, v))
        return list(seen.values())

    def strongest(self) -> dict[str, Action]:
        """rule -> the strongest action any of its verdicts got."""
        out: dict[str, Action] = {}
        for v in self.verdicts:
            if v.rule not in out or STRENGTH[v.action] > STRENGTH[out[v.rule]]:
                out[v.rule] = v.action
        return out


def admit(
    request: AdmissionRequest, policy: CompiledPolicy, view: ClusterView | None, now: dt.datetime,
    rules: RuleSet | None = None,
) -> Admitted:
    """What the API server does: the mutating answer, then the validating answer on the patched object."""
    mutate = handle(request, "mutate", policy, view, now, rules=rules)
    if not mutate.allowed:
        return Admitted(request, mutate, None)
    patched = request
    if mutate.mutated is not None:
        patched = replace(request, object=mutate.mutated)
    return Admitted(request, mutate, handle(patched, "validate", policy, view, now, rules=rules))


def validate_only(
    request: AdmissionRequest, policy: CompiledPolicy, view: ClusterView | None, now: dt.datetime,
    rules: RuleSet | None = None,
) -> Admitted:
    """The validating answer alone, for an object whose mutation is not known (taken as "no change")."""
    return Admitted(request, AdmissionResponse(request.uid, True),
                    handle(request, "validate", policy, view, now, rules=rules))


def answer(uid: str, phase: str, decision: Decision, policy: CompiledPolicy) -> AdmissionResponse:
    """The answer for a decision: each verdict goes to the denial, the warnings or the audit trail."""
    denials: list[str] = []
    causes: list[dict[str, str]] = []
    warnings: list[str] = []
    audit: dict[str, str] = {}
    stage = decision.stage or "cluster-scoped"  # the label in messages; a cluster-scoped object has no stage
    for v in decision.verdicts:
        f = v.finding
        error = f"{RULE_ERROR}, " if v.failed else ""
        if v.action is Action.Deny:
            denials.append(f"{f.rule} ({stage}: {error}Deny): {f.message}{_fix(f.remediation)}")
            cause = {"reason": f.rule, "message": f.remediation or f.message, "field": f.paths[0] if f.paths else ""}
            causes.append({k: val for k, val in cause.items() if val})
        elif v.action is Action.Warn:
            warnings.append(f"{f.rule} ({stage}{': ' + RULE_ERROR if v.failed else ''}): {f.message}"
                            f"{_fix(f.remediation)}")
        elif v.action is Action.Audit:
            _append(audit, f"{RULE_ERROR}-{f.rule}" if v.failed else f.rule, f.message)
        elif v.excepted:
            _append(audit, f"excepted-{f.rule}", f"{f.message} [exception: {v.excepted}]")
    audit.update(decision.notes)  # rules' own notes, and why the cluster view could not help
    patch = decision.patch if phase == "mutate" else []
    if decision.verdicts or patch:
        audit.setdefault("policy", policy.identity)
        if decision.stage:
            audit.setdefault("stage", decision.stage)
    return AdmissionResponse(uid, decision.allowed, message="; ".join(denials), causes=causes, patch=patch,
                             warnings=warnings, audit=audit, decision=decision)


def _no_decision(uid: str, phase: str, message: str) -> AdmissionResponse:
    if phase == "mutate":
        return AdmissionResponse(uid, True, warnings=[message])
    return AdmissionResponse(uid, False, code=500, message=message)


def _fix(remediation: str) -> str:
    if not remediation:
        return ""
    first = remediation.strip().splitlines()[0].strip()
    return f"; fix: {first}" if first else ""


def _append(audit: dict[str, str], key: str, message: str) -> None:
    audit[key] = f"{audit[key]}; {message}" if key in audit else message
