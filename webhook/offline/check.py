"""What ``dra-webhook check`` decides for each object of its input, offline: every object through both phases of
the one admission path, with the input's cluster objects as the view. ``commands/check`` prints it and sets the
exit code; ``check -o json`` is these results as they are.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from webhook.admission import review
from webhook.offline.inputs import Item, meta_of
from webhook.offline.views import examined, input_view
from webhook.policy import delivery

if TYPE_CHECKING:
    from webhook.admission.answer import Admitted
    from webhook.policy.compiled import CompiledPolicy
    from webhook.rules.view import ClusterView

VIEW_ONLY = {
    ("", "Namespace"): "used as the cluster view (namespace labels) for the other objects",
    ("autoscaling", "HorizontalPodAutoscaler"): "used as the cluster view (the replicas its scale target can "
    "reach) for the other objects",
}
"""Kinds in the input that only describe the cluster: listed with what they are used for, not judged."""


def check_items(items: list[Item], policy: CompiledPolicy, now: dt.datetime,
                 sent: delivery.Delivery | None = None,
                 cluster: Sequence[review.AdmissionRequest] = ()) -> list[dict[str, Any]]:
    """Each object through both phases, with the snapshot's and the input's cluster objects as the view; objects
    the cluster would never send to the webhook (``sent``: the webhook configuration's namespaceSelectors) are
    only listed."""
    from webhook.admission.answer import admit

    view = input_view([*cluster, *(i.request for i in items)])
    labels = _namespace_labels(items)
    results = []
    for item in items:
        view_use = VIEW_ONLY.get((item.request.group, item.request.kind))
        unsent = None if sent is None or view_use else sent.why_not_sent(
            item.request.namespace, labels.get(item.request.namespace))
        if view_use:
            results.append(_unexamined(item, view_use))
        elif unsent:
            results.append({**_unexamined(item, unsent), "examined": False, "sent": False})
        elif not examined(item.request.group, item.request.kind, policy.workload_kinds):
            results.append(_unexamined(item))
        else:
            unknown = stage_unknown(policy, view, item.request.namespace, now)
            results.append({**_result(item, admit(item.request, policy, view, now)), "stageUnknown": unknown})
    return results


def stage_unknown(policy: CompiledPolicy, view: ClusterView, namespace: str, now: dt.datetime) -> str:
    """Why the namespace's stage on ``now`` is not known offline ("" when it is): a cohort with a label selector
    may select it before the cohort its name matches (first match wins, ``stage_candidates``), the view does not
    hold its Namespace, and the cohorts it may be in have different stages then."""
    if not namespace or not policy.uses_namespace_labels or view.namespace_labels(namespace).is_found:
        return ""
    candidates = policy.stage_candidates(namespace, now.astimezone(dt.UTC).date())
    if len({stage for _, stage in candidates}) < 2:
        return ""
    *maybe, (cohort, stage) = candidates
    by_labels = ", ".join(f"{c.name} ({s})" for c, s in maybe if c is not None)
    judged = f"cohort {cohort.name}" if cohort else "the default stage"
    plural = "s" if len(maybe) > 1 else ""
    return (f"stage unknown: cohort{plural} {by_labels} select{'' if plural else 's'} namespaces by labels and "
            f"may select {namespace} before {judged} ({stage}, as judged here); pass the Namespace with "
            "--cluster-objects")


def _namespace_labels(items: list[Item]) -> dict[str, dict[str, str]]:
    """Labels of the Namespaces in the input (the namespaceSelector sees them), by name."""
    return {str(meta_of(i.request.object or {}).get("name")): dict(meta_of(i.request.object or {}).get("labels") or {})
            for i in items if i.request.group == "" and i.request.kind == "Namespace"}


def _not_examined_hint(req: review.AdmissionRequest) -> str:
    """What to do about a kind the webhook has no rules for: ``workloadKinds`` only names kinds with pod templates."""
    if "." not in req.group:
        return ""
    if delivery.has_pod_template(req.object or {}):
        return " (a CRD with pod templates: name it in the policy's spec.workloadKinds)"
    return " (it has no pod template, so spec.workloadKinds cannot name it)"


def _unexamined(item: Item, view_use: str = "") -> dict[str, Any]:
    req = item.request
    gk = f"{req.group}/{req.kind}" if req.group else req.kind
    return {
        "source": item.source, "object": _describe(item), "allowed": True, "examined": bool(view_use),
        "stage": "", "cohort": "", "message": view_use or f"not examined: the webhook has no rules for {gk}"
        + _not_examined_hint(req),
        "findings": [], "warnings": [], "patch": [], "auditAnnotations": {},
    }


def _describe(item: Item) -> str:
    req = item.request
    meta = (req.object or {}).get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    return f"{req.kind} {req.namespace + '/' if req.namespace else ''}{name}"


def _result(item: Item, admitted: Admitted) -> dict[str, Any]:
    """One object's entry: what the webhook's answers (mutate, then validate) decided together."""
    findings = [{"phase": phase, "rule": v.rule, "action": v.action.value, "message": v.finding.message,
                 "remediation": v.finding.remediation, "paths": list(v.finding.paths),
                 **({"exception": v.excepted} if v.excepted else {}),
                 **({"status": "rule-error"} if v.failed else {})}
                for phase, v in admitted.findings()]
    return {
        "source": item.source,
        "object": _describe(item),
        "allowed": admitted.allowed,
        "examined": True,
        "stage": admitted.stage,
        "cohort": admitted.cohort,
        "message": admitted.message,
        "findings": findings,
        "warnings": admitted.warnings,  # all, unlike the API server
        "patch": admitted.patch if admitted.allowed else [],  # the API server applies no patch to a denied object
        "auditAnnotations": admitted.audit,
        # The AdmissionReview responses the webhook sends, byte for byte what `serve` answers.
        "responses": {phase: a.review() for phase, a in admitted.phases},
    }
