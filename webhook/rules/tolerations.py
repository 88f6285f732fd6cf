"""Device tolerations on ResourceClaims and ResourceClaimTemplates (docs/design.md §3, docs/dra-1.37.md §3).

Device maintenance puts a ``NoExecute`` taint on devices; the eviction controller then deletes every
Pod whose claim does not tolerate it. ``inject-device-tolerations`` gives long training jobs a bounded
toleration (a window to checkpoint) without anybody editing the job; ``toleration-too-broad`` keeps
users from opting out of maintenance altogether.

Both rules leave the scheduler's special claims (``resource.kubernetes.io/extended-resource-claim:
"true"``) alone: kube-scheduler computes their allocation before it creates them, so tolerations added
at admission would not have been considered when the devices were picked, and
``status.allocation.devices.results[].tolerations`` (the copy made at allocation time) would disagree
with the spec. Refusing one only fails the Pod's binding. Teams that need tolerations give those Pods an
explicit ResourceClaimTemplate instead. Only CREATE is handled: claim and template specs are immutable.
"""

from __future__ import annotations

from typing import Any

from webhook.gates.fixes import AFFECTED
from webhook.gates.taint_rules import blocks_allocation, judge_omitted
from webhook.objects.claims import (
    CLAIM_KINDS,
    MAX_TOLERATIONS_PER_REQUEST,
    TEMPLATE_KIND,
    RequestSlot,
    claim_labels,
    describe_toleration,
    normalize_toleration,
    template_owner,
    toleration_identity,
)
from webhook.objects.patch import clone
from webhook.policy import rule_ids as ids
from webhook.rules.base import NO_OUTCOME, Context, Finding, Outcome, rule
from webhook.rules.claims import judged, scoped_requests

_CLAIM_KINDS = tuple(sorted(CLAIM_KINDS))
INJECTED_ANNOTATION = "tolerations-injected"  # <prefix>/tolerations-injected


def _too_broad(tol: dict[str, Any], max_seconds: int | None) -> list[str]:
    key, operator, _, effect, seconds = normalize_toleration(tol)
    reasons = []
    # Tolerating every effect-None taint is harmless (None is informational), so that is not flagged.
    if not key and operator == "Exists" and effect != "None":
        reasons.append(f"an empty key with operator Exists tolerates every {effect or 'device'} taint")
    if effect == "" and (seconds is None or (max_seconds is not None and seconds > max_seconds)):
        # kubernetes pkg/controller/devicetainteviction/device_taint_eviction.go (ab3cec07), claimEvictionTime:
        # only tolerations with effect NoExecute delay an eviction; tolerationSeconds here protects nothing.
        reasons.append(
            "with no effect it lets the allocator place the claim on a NoExecute-tainted device, and the Pod is "
            "then evicted at once (only NoExecute tolerations delay eviction)"
        )
    elif effect == "NoExecute":
        if seconds is None:
            reasons.append("it tolerates NoExecute taints forever (no tolerationSeconds)")
        elif max_seconds is not None and seconds > max_seconds:
            reasons.append(f"tolerationSeconds {seconds} is above the limit of {max_seconds}")
    return reasons


def _monitoring(slot: RequestSlot, obj: dict[str, Any], ctx: Context) -> bool:
    """An ``adminAccess`` request in a namespace the policy allows admin access in (``claims.adminAccessNamespaces``).

    Monitoring agents (the GPU operator's DCGM exporter, node-health checks) claim devices that way: an admin-access
    request takes nothing from anyone (kubernetes/kubernetes ``staging/src/k8s.io/api/resource/v1/types.go``,
    ``ExactDeviceRequest.AdminAccess``, 1.34+) and has to keep watching a device while it is under maintenance, so
    tolerating every taint is its job, not an opt-out (issue 24 item 7). Subrequests cannot ask for admin access.
    """
    pattern = ctx.policy.admin_namespaces
    if pattern is None or slot.subrequest or slot.body.get("adminAccess") is not True:
        return False
    namespace = ctx.namespace or str((obj.get("metadata") or {}).get("namespace") or "")
    return pattern.fullmatch(namespace) is not None


@rule(ids.TOLERATION_TOO_BROAD, _CLAIM_KINDS, operations=("CREATE",))
def toleration_too_broad(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A request toleration that would keep its Pods on devices under maintenance indefinitely.

    Tolerations identical to the policy's own ``trainingJobs.deviceTolerations`` are not reported: they
    are what ``inject-device-tolerations`` adds (whether they are bounded enough is ``lint``'s concern).
    Neither are those of monitoring claims (``_monitoring``). Each finding names its toleration in full.
    """
    if not judged(obj, ctx):
        return NO_OUTCOME
    max_seconds = ctx.policy.spec.claims.maxTolerationSeconds
    sanctioned = {normalize_toleration(t) for t in ctx.policy.device_tolerations}
    limit = f"at most {max_seconds}" if max_seconds is not None else "a bounded value"
    findings = []
    for slot in scoped_requests(obj, ctx):
        if _monitoring(slot, obj, ctx):
            continue
        tolerations = slot.body.get("tolerations")
        for j, tol in enumerate(tolerations if isinstance(tolerations, list) else []):
            if not isinstance(tol, dict) or normalize_toleration(tol) in sanctioned:
                continue
            reasons = _too_broad(tol, max_seconds)
            if reasons:
                findings.append(
                    Finding(
                        ids.TOLERATION_TOO_BROAD,
                        f"request {slot.name!r} toleration ({describe_toleration(tol)}) is too broad: "
                        + "; ".join(reasons),
                        f"tolerate a specific taint key with effect NoExecute and tolerationSeconds {limit}: "
                        "a toleration without an effect lets the allocator place the claim on a NoExecute-tainted "
                        "device, but only NoExecute tolerations delay eviction, so the Pod is then evicted at once",
                        (f"{slot.path}.tolerations[{j}]",),
                    )
                )
    return Outcome(findings) if findings else NO_OUTCOME


def is_training_job_claim(obj: dict[str, Any], ctx: Context) -> tuple[bool, str | None]:
    """Whether this is a claim or template of a long training job (docs/design.md §3), and, when the answer
    was a guess for lack of cluster data, the note saying so.

    Its own labels decide first (for a template, the ``spec.metadata.labels`` it stamps on generated
    claims, plus its own). A claim generated from a template is also one when its owner Pod (or
    PodGroup) is: the Pod's labels and ``spec.activeDeadlineSeconds`` count. An owner the cluster view
    cannot produce (offline, not synced, over budget, gone) means "not a training job", with the note:
    injecting on a guess would change claims of jobs the policy does not cover.
    """
    if ctx.policy.is_training_job(claim_labels(obj, ctx.kind)):
        return True, None
    if ctx.kind == TEMPLATE_KIND:
        return False, None
    owner = template_owner(obj)
    if owner is None:
        return False, None
    namespace = ctx.namespace or str((obj.get("metadata") or {}).get("namespace") or "")
    name = str(owner["name"])
    if owner["kind"] == "Pod":
        found = ctx.view.get_pod(namespace, name, owner.get("uid") or None).value
    else:
        found = ctx.view.get_podgroup(namespace, name).value
    if found is None:
        return False, (f"{ids.INJECT_DEVICE_TOLERATIONS}: owner {owner['kind']} {namespace}/{name} unknown, "
                       "claim not treated as a training job")
    labels = (found.get("metadata") or {}).get("labels") or {}
    deadline = (found.get("spec") or {}).get("activeDeadlineSeconds")
    return ctx.policy.is_training_job(labels, deadline if isinstance(deadline, int) else None), None


@rule(
    ids.INJECT_DEVICE_TOLERATIONS,
    _CLAIM_KINDS,
    phases=("mutate",),
    operations=("CREATE",),
    mutating=True,
)
def inject_device_tolerations(obj: dict[str, Any], ctx: Context) -> Outcome:
    """Add ``trainingJobs.deviceTolerations`` to every request and subrequest of a training job's claim.

    A toleration is added only where the request has none with the same key and effect, so a user's
    own choice always wins. A request that would pass the documented maximum of 16 tolerations gets
    nothing and an advisory finding. ``<prefix>/tolerations-injected`` records how many policy tolerations the claim
    carries in total (those added now and those present from an earlier pass), so a second pass changes
    nothing. On a template the count is written to the template's metadata and to ``spec.metadata``, so
    the claims generated from it carry the count together with the tolerations copied from its spec.

    Skipped when the policy has the ``DRADeviceTaints`` gate off: the API server would drop the field.
    """
    wanted = ctx.policy.device_tolerations
    if not wanted or not judged(obj, ctx) or not ctx.policy.gate_enabled("DRADeviceTaints"):
        return NO_OUTCOME
    if next(scoped_requests(obj, ctx), None) is None:
        return NO_OUTCOME  # no request under migration: another driver's claim is left as it is
    training, guessed = is_training_job_claim(obj, ctx)
    if not training:
        return Outcome(degraded=(guessed,)) if guessed else NO_OUTCOME
    mutated = clone(obj)
    findings: list[Finding] = []
    carried = added = 0
    for slot in scoped_requests(mutated, ctx):
        finding, added_here = _inject_into(slot, wanted)
        if finding is not None:
            findings.append(finding)
        added += added_here
        present = {normalize_toleration(t) for t in slot.body.get("tolerations") or [] if isinstance(t, dict)}
        carried += sum(1 for t in wanted if normalize_toleration(t) in present)

    key = ctx.policy.key(INJECTED_ANNOTATION)
    _annotate(mutated.setdefault("metadata", {}), key, str(carried))
    if ctx.kind == TEMPLATE_KIND:
        _annotate(mutated.setdefault("spec", {}).setdefault("metadata", {}), key, str(carried))
    if mutated == obj:
        return Outcome(findings) if findings else NO_OUTCOME
    notes = {INJECTED_ANNOTATION: str(added)} if added else {}
    return Outcome(findings, mutated, notes)


def _inject_into(slot: RequestSlot, wanted: tuple[dict[str, Any], ...]) -> tuple[Finding | None, int]:
    """Add to one request the wanted tolerations it lacks: (advisory when they would not fit, number added)."""
    existing = slot.body.get("tolerations")
    existing = [t for t in existing if isinstance(t, dict)] if isinstance(existing, list) else []
    have = {toleration_identity(t) for t in existing}
    missing = [dict(t) for t in wanted if toleration_identity(t) not in have]
    if not missing:
        return None, 0
    if len(existing) + len(missing) > MAX_TOLERATIONS_PER_REQUEST:
        return Finding(
            ids.INJECT_DEVICE_TOLERATIONS,
            f"request {slot.name!r} already has {len(existing)} tolerations; adding the policy's "
            f"{len(missing)} ({'; '.join(describe_toleration(t) for t in missing)}) would pass the documented "
            f"maximum of {MAX_TOLERATIONS_PER_REQUEST} tolerations per request (resource.k8s.io DeviceRequest), "
            "none were added",
            "remove tolerations this request does not need, or add the policy's device tolerations "
            "yourself in place of broader ones",
            (f"{slot.path}.tolerations",),
            advisory=True,
        ), 0
    slot.body["tolerations"] = [*(slot.body.get("tolerations") or []), *missing]
    return None, len(missing)


def _annotate(metadata: dict[str, Any], key: str, value: str) -> None:
    if not isinstance(metadata.get("annotations"), dict):
        metadata["annotations"] = {}
    metadata["annotations"][key] = value


@rule(ids.TAINT_RULE_WITHOUT_SELECTOR, ("DeviceTaintRule",), operations=("CREATE", "UPDATE"))
def taint_rule_without_selector(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A DeviceTaintRule without `deviceSelector` that kube-scheduler applies to every device (kubernetes#141620).

    The API says a rule without a selector matches no device, and the eviction controller keeps to it; but
    before kubernetes/kubernetes#141648 (1.38.0; the release-1.37 cherry-pick #141998 is in a patch release not
    known yet) kube-scheduler's ResourceSlice tracker applies it to every device of every slice
    (staging/src/k8s.io/dynamic-resource-allocation/resourceslice/tracker/tracker.go
    ``driverPoolDeviceIndexPatchKey``, ``(*Tracker).applyPatches``): with a NoSchedule or NoExecute taint no new
    claim that does not tolerate it is allocated anywhere, while nothing is evicted. Judged for the policy's
    ``kubernetesVersion`` (its .0 release; the versions are the row of webhook/gates/fixes.py); effect ``None``
    (or one unknown, treated like it) blocks nothing, and ``deviceSelector: {}`` is every device by design.
    """
    if ctx.group != "resource.k8s.io":
        return NO_OUTCOME
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("deviceSelector") is not None:
        return NO_OUTCOME
    found = spec.get("taint")
    taint: dict[str, Any] = found if isinstance(found, dict) else {}
    effect = str(taint.get("effect") or "")
    judgement = judge_omitted(None, ctx.policy.spec.kubernetesVersion)
    if not blocks_allocation(judgement, effect):
        return NO_OUTCOME
    name = str((obj.get("metadata") or {}).get("name") or "")
    key = str(taint.get("key") or "")
    taints = "taints" if judgement.state == AFFECTED else "may taint"
    return Outcome([Finding(
        ids.TAINT_RULE_WITHOUT_SELECTOR,
        f"DeviceTaintRule {name} has no deviceSelector: kube-scheduler {taints} every device with it, so no "
        f"new claim that does not tolerate {key or 'it'} is allocated anywhere, and nothing is evicted",
        "set spec.deviceSelector to the devices under maintenance (driver, pool, device); deviceSelector: {} "
        f"selects every device on purpose ({judgement.describe()})",
        ("spec.deviceSelector",),
    )])
