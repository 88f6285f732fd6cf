"""``unsatisfiable-claim``: a request no device in the cluster could ever serve.

For each request of a ResourceClaim or ResourceClaimTemplate (each ``exactly`` and ``firstAvailable``
subrequest), and for a Pod's extended resources served by a DeviceClass, the DeviceClass selectors and
then the request's own CEL selectors are evaluated, in the scheduler's order, against every device of the
cluster's ResourceSlices (webhook.devices.selectors; the answers are precomputed when slices change). A request
is reported when fewer devices could match than it asks for: none at all, or fewer than ``count`` on any
one node (a claim's devices are allocated for one node). Everything the scheduler would also weigh and
this does not (devices already allocated, taints, counters, node affinity) can only lower the real number,
so a report is never wrong for lack of them. Unknown answers fail open: a selector this runtime does not
support, a device it cannot evaluate, slices not synced, or the time budget spent -> no report (the reason
goes to the audit annotation).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from webhook.devices.selectors import DeviceAnswers, class_selectors, compile_selector
from webhook.objects import claims as claim_objects
from webhook.objects.pods import extended_requests
from webhook.policy.rule_ids import UNSATISFIABLE_CLAIM
from webhook.rules.base import NO_OUTCOME, Context, Finding, Outcome, rule

BUDGET_SECONDS = 0.05  # selector evaluation per request that was not precomputed; past it: unknown


def _need(body: Mapping[str, Any]) -> int:
    """Devices a request slot needs: ``count`` (default 1); allocationMode All needs at least one."""
    if body.get("allocationMode") == "All":
        return 1
    count = body.get("count", 1)
    return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1


def _shortfall(
    index: DeviceAnswers, classes: Mapping[str, dict[str, Any]], class_name: str, own: list[str], need: int,
    deadline: float, unknown: list[str],
) -> str | None:
    """Why ``need`` devices of ``class_name`` with selectors ``own`` can never be found; None if they can
    (or if that is unknown, then the reason is appended to ``unknown``)."""
    cls = classes.get(class_name)
    if cls is None:
        unknown.append(f"DeviceClass {class_name} not known")  # device-class rules and the API report it
        return None
    exprs = (*class_selectors(cls), *own)
    for expr in exprs:
        err = compile_selector(expr).error
        if err is not None:
            unknown.append(f"selector not supported here ({err})")
            return None
    cap = index.capacity(exprs, deadline)
    if cap is None:
        unknown.append(f"selector evaluation exceeded the {round(BUDGET_SECONDS * 1000)} ms budget")
        return None
    if cap.possible == 0:
        return f"no device in the cluster matches (0 of {index.devices} devices)"
    if cap.per_node < need and not cap.multiple:
        return (f"{need} devices needed on one node, but at most {cap.per_node} matching devices are on any node "
                f"({cap.possible} in the cluster)")
    return None


def _own_selectors(body: Mapping[str, Any]) -> list[str]:
    sels = body.get("selectors")
    return [e for s in sels if isinstance(e := (s.get("cel") or {}).get("expression") if isinstance(s, dict) else None,
                                            str)] if isinstance(sels, list) else []


def _claim_findings(obj: dict[str, Any], ctx: Context, index: DeviceAnswers,
                    classes: Mapping[str, dict[str, Any]], unknown: list[str]) -> list[Finding]:
    deadline = time.perf_counter() + BUDGET_SECONDS
    findings: list[Finding] = []
    alternatives: dict[str, list[tuple[str, str]]] = {}  # firstAvailable request -> (path, why) per subrequest
    satisfiable: set[str] = set()
    drivers = ctx.policy.scope.drivers_with(classes)
    for slot in claim_objects.iter_requests(obj, ctx.kind):
        class_name = slot.body.get("deviceClassName")
        if not isinstance(class_name, str) or not class_name:
            continue
        if not ctx.policy.scope.covers(class_name, classes, drivers):
            continue  # another DRA driver's request (CPU, NIC): not the migration's to judge
        own = _own_selectors(slot.body)
        why = _shortfall(index, classes, class_name, own, _need(slot.body), deadline, unknown)
        request = slot.name.split("/", 1)[0]
        if not slot.subrequest:
            if why:
                findings.append(_finding(f"request {slot.name}", class_name, why, slot.path))
        elif why:
            alternatives.setdefault(request, []).append((slot.path, why))
        else:
            satisfiable.add(request)
    for request, subs in alternatives.items():
        if request in satisfiable or len(subs) == 0:
            continue
        # Only when no alternative can be served: the scheduler tries each one in order.
        paths = tuple(p for p, _ in subs)
        findings.append(Finding(
            UNSATISFIABLE_CLAIM,
            f"request {request}: none of its {len(subs)} firstAvailable alternatives can ever be allocated "
            f"({'; '.join(w for _, w in subs)[:300]}): the claim stays unallocated and its Pods Pending",
            "Loosen the selectors or the count, or ask for a DeviceClass whose devices exist in the cluster "
            "(kubectl get resourceslices).",
            paths,
        ))
    return findings


def _finding(what: str, class_name: str, why: str, path: str) -> Finding:
    return Finding(
        UNSATISFIABLE_CLAIM,
        f"{what} (DeviceClass {class_name}) can never be allocated: {why}: the claim stays unallocated and its "
        "Pods Pending",
        "Loosen the selectors or the count, or ask for a DeviceClass whose devices exist in the cluster "
        "(kubectl get resourceslices).",
        (path,),
    )


def _pod_requests(obj: dict[str, Any], ctx: Context) -> dict[str, int]:
    """DeviceClass -> devices the scheduler's claim for this Pod would ask for (extended-resource path)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not extended_requests(spec):
        return {}
    ext = ctx.view.extended_resource_classes().value
    return extended_requests(spec, group=ext.get) if ext else {}


def _pod_findings(requests: dict[str, int], ctx: Context, index: DeviceAnswers,
                  classes: Mapping[str, dict[str, Any]], unknown: list[str]) -> list[Finding]:
    """A Pod on the extended-resource path: the scheduler's claim asks for its count of the mapped class."""
    ext = ctx.view.extended_resource_classes().value or {}
    deadline = time.perf_counter() + BUDGET_SECONDS
    findings = []
    for class_name, count in sorted(requests.items()):
        why = _shortfall(index, classes, class_name, [], count, deadline, unknown)
        if why:
            names = sorted(n for n, c in ext.items() if c == class_name and not n.startswith("deviceclass."))
            findings.append(Finding(
                UNSATISFIABLE_CLAIM,
                f"{' / '.join(names) or class_name}: {count} devices of DeviceClass {class_name} can never be "
                f"allocated through DRA: {why}: the Pod stays Pending unless a node's device plugin serves it",
                "Request fewer devices, or check that the DeviceClass's driver publishes ResourceSlices "
                "(kubectl get resourceslices).",
                ("spec.containers",),
            ))
    return findings


@rule(UNSATISFIABLE_CLAIM, kinds=("ResourceClaim", "ResourceClaimTemplate", "Pod"), phases=("validate",),
      operations=("CREATE",))
def unsatisfiable_claim(obj: dict[str, Any], ctx: Context) -> Outcome:
    """No device in the cluster could ever match a request (or too few on one node): it would stay Pending."""
    if ctx.kind in claim_objects.CLAIM_KINDS and (
        claim_objects.is_scheduler_claim(obj, ctx.user) or claim_objects.template_owner(obj) is not None
    ):
        return NO_OUTCOME  # the scheduler's own claim, or one made from a template that was judged already
    pod_requests = _pod_requests(obj, ctx) if ctx.kind == "Pod" else {}
    if ctx.kind == "Pod" and not pod_requests:
        return NO_OUTCOME  # not on the extended-resource path
    index = ctx.view.device_index()
    classes = ctx.view.device_classes()
    if index.value is None or classes.value is None:
        why = index.degraded if index.value is None else classes.degraded
        return Outcome(degraded=(f"{UNSATISFIABLE_CLAIM}: not judged ({why})",)) if why else NO_OUTCOME
    unknown: list[str] = []
    if ctx.kind == "Pod":
        findings = _pod_findings(pod_requests, ctx, index.value, classes.value, unknown)
    else:
        findings = _claim_findings(obj, ctx, index.value, classes.value, unknown)
    degraded = tuple(f"{UNSATISFIABLE_CLAIM}: not judged ({why})" for why in dict.fromkeys(unknown))
    return Outcome(findings=findings, degraded=degraded) if findings or degraded else NO_OUTCOME
