"""``track-rollout``: record on each device-using object how it gets its devices (docs/design.md §5).

Annotations ``<prefix>/path``, ``/stage``, ``/cohort`` (``none`` outside every cohort) and ``/policy``
go on Pods, on workload controllers and on their pod templates, and on ResourceClaims and
ResourceClaimTemplates. ``dra-webhook report`` reads them back and compares with the Pod's status.

Choices:
- Pods created from an annotated template arrive with the keys already set; they are rewritten only
  where a value differs (e.g. the stage moved since the template was written), so no double work and
  an empty patch when nothing changed.
- On a workload UPDATE that leaves the pod template itself unchanged, or of a kind whose template may
  not change now (a started Job, a running JobSet: ``workloads.template_writes``), the template's
  annotations keep their old values: rewriting them (new stage, new policy identity) would change the template and roll
  out every Pod of a Deployment on an unrelated ``kubectl apply``. The controller's own metadata is
  always current (it does not trigger rollouts), and each new Pod is annotated at its own CREATE.
- A ResourceClaimTemplate is annotated in its own ``metadata``, not ``spec.metadata``: ``spec`` is
  immutable, so values copied into every generated claim could never be corrected, and each generated
  claim is annotated at its own CREATE anyway. Claims are annotated ``dra-claim`` on CREATE only.
- The scheduler's extended-resource claim is never touched (issue 4: never mutated): its Pod carries
  the ``dra-extended-resource`` path already, and ``report`` reads the actual path from Pod status.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webhook import claim_objects
from webhook.jsonish import as_dict, metadata_annotations
from webhook.objects import pod_templates
from webhook.patch import private_path
from webhook.placement import plan
from webhook.rules import ids
from webhook.rules.base import Context, Outcome, rule
from webhook.rules.claims import scoped_requests, scoped_usage
from webhook.rules.workloads import ANNOTATIONS, pod_rule, template_unchanged, template_writes

TRACK_NAMES = ("path", "stage", "cohort", "policy")


def tracking_values(ctx: Context, path: str) -> dict[str, str]:
    """The annotation keys and values for ``path`` in the request's stage, cohort and policy."""
    p = ctx.policy
    return {
        p.key("path"): path,
        p.key("stage"): ctx.stage,
        p.key("cohort"): ctx.cohort.name if ctx.cohort is not None else "none",
        p.key("policy"): p.identity,
    }


def _set_annotations(holder: dict[str, Any], desired: dict[str, str], keys: Iterable[str]) -> bool:
    """Make ``keys`` of ``holder.metadata.annotations`` equal ``desired`` (absent where not desired).

    ``holder`` must be a private copy; its metadata and annotations are replaced by new maps (never
    changed in place), so they may still be shared with the object received.
    """
    ann = metadata_annotations(holder)
    if all(ann.get(k) == desired.get(k) for k in keys):
        return False
    ann = dict(ann)
    for k in keys:
        if k in desired:
            ann[k] = desired[k]
        else:
            ann.pop(k, None)
    meta = dict(as_dict(holder.get("metadata")))
    if ann:
        meta["annotations"] = ann
    else:
        meta.pop("annotations", None)
    holder["metadata"] = meta
    return True


def _claim_outcome(obj: dict[str, Any], ctx: Context) -> Outcome:
    if claim_objects.is_scheduler_claim(obj, ctx.user, ctx.policy.scheduler_usernames):
        return Outcome()
    if next(scoped_requests(obj, ctx), None) is None:
        return Outcome()  # another DRA driver's claim (CPU, NIC): not part of the migration, not counted
    values = tracking_values(ctx, "dra-claim")
    mutated = dict(obj)
    if not _set_annotations(mutated, values, values):
        return Outcome()
    return Outcome(mutated=mutated)


@rule(ids.TRACK_ROLLOUT, claim_objects.CLAIM_KINDS, ("mutate",), ("CREATE",), mutating=True)
@pod_rule(ids.TRACK_ROLLOUT, phases=("mutate",), mutating=True)
def track_rollout(obj: dict[str, Any], ctx: Context) -> Outcome:
    """Annotate device-using objects with their path, stage, cohort and policy, so the rollout can be tracked.

    ``<prefix>/path`` is ``device-plugin``, ``dra-extended-resource``, ``dra-claim`` or ``mixed``;
    written on Pods, workload controllers and their pod templates, and claims. ``dra-webhook report``
    compares it with the path the Pod actually got. Idempotent: a second pass is an empty patch.
    """
    if ctx.kind in claim_objects.CLAIM_KINDS and ctx.group == "resource.k8s.io":  # not a CRD called so
        return _claim_outcome(obj, ctx)
    mutated = dict(obj)  # copy-on-write: only the metadata maps written below are new
    changed = False
    paths: list[str] = []
    frozen = ANNOTATIONS not in template_writes(obj, ctx)  # e.g. a started Job's template is immutable
    for ref in pod_templates(obj, ctx.kind, ctx.group, ctx.policy.template_finders):
        path = plan(scoped_usage(ref.spec(obj), ctx), ctx.stage, ctx.policy).path
        if path is None:
            continue
        paths.append(path)
        if not ref.path or frozen:
            continue  # a Pod: its metadata is the object's, written below; a frozen template: untouched
        values = tracking_values(ctx, path)
        desired = values
        if ctx.operation == "UPDATE" and template_unchanged(obj, ctx.old_object, ref, values):
            old = metadata_annotations(ref.template(ctx.old_object or {}))
            desired = {k: old[k] for k in values if k in old}
        changed |= _set_annotations(private_path(mutated, ref.path), desired, values)
    if paths:
        overall = paths[0] if len(set(paths)) == 1 else "mixed"
        values = tracking_values(ctx, overall)
        changed |= _set_annotations(mutated, values, values)
    return Outcome(mutated=mutated if changed else None)
