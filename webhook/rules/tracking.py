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
  out every Pod of a Deployment on an unrelated ``kubectl apply``. The controller's own stage, cohort and
  policy are always current (its metadata does not trigger rollouts), but its ``path`` is that of its
  templates as they will be stored: never a path this stage would choose that the kept template does not
  take (issue 24 item 14). Each new Pod is annotated at its own CREATE.
- The path of a template follows the pool its webhook-written affinity selects (``<prefix>/node-pool``),
  so a template whose affinity could not be rewritten (a suspended JobSet) is not annotated with the
  path of a pool it does not select.
- A ResourceClaimTemplate is annotated in its own ``metadata``, not ``spec.metadata``: ``spec`` is
  immutable, so values copied into every generated claim could never be corrected, and each generated
  claim is annotated at its own CREATE anyway. Claims are annotated ``dra-claim`` on CREATE only.
- The scheduler's extended-resource claim is never touched (issue 4: never mutated): its Pod carries
  the ``dra-extended-resource`` path already, and ``report`` reads the actual path from Pod status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.objects import claims as claim_objects
from webhook.objects.jsonish import as_dict, metadata_annotations
from webhook.objects.patch import private_path
from webhook.objects.pods import pod_templates
from webhook.policy import rule_ids as ids
from webhook.policy.placement import Usage, plan, pool_path
from webhook.rules.base import Context, Outcome, rule
from webhook.rules.claims import scoped_requests, scoped_usage
from webhook.rules.memo import templates_of
from webhook.rules.pods import NODE_POOL_ANNOTATION
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


def _path(template: dict[str, Any], u: Usage, ctx: Context) -> str | None:
    """The path the template (or Pod) takes as it will be stored: on the pool its webhook-written affinity selects.

    ``steer-node-pool`` runs first and records the pool it steered to (``<prefix>/node-pool``). Where it could not
    write (a started Job, a suspended JobSet's affinity, a template the UPDATE left alone), the affinity, and so the
    pool, is the earlier stage's: the path is the one the scheduler takes there (``placement.pool_path``), never the
    one this stage would have chosen (issue 24 item 14). Otherwise ``plan`` decides.
    """
    planned = plan(u, ctx.stage, ctx.policy)
    if not u.gpu:
        return planned.path  # claims only (or no devices): no pool, nothing steered
    marker = metadata_annotations(template).get(ctx.policy.key(NODE_POOL_ANNOTATION))
    if marker in ("dra", "devicePlugin") and marker != planned.pool:
        there = pool_path(u, str(marker), ctx.policy)
        if there is not None:
            return "mixed" if u.claims else there
    return planned.path


def _stored_path(annotations: Mapping[str, str], path: str, ctx: Context) -> str:
    """The path a template's annotations will state: its own where it keeps one, else ``path``."""
    return annotations.get(ctx.policy.key("path"), path)


def _summary(paths: list[str], ctx: Context) -> dict[str, str]:
    """The object's own annotations: the path of its templates as they will be stored (one, else ``mixed``), so it
    never claims a path its templates do not take; stage, cohort and policy of this request (metadata of the
    controller does not roll anything out)."""
    return tracking_values(ctx, paths[0] if len(set(paths)) == 1 else "mixed")


@rule(ids.TRACK_ROLLOUT, claim_objects.CLAIM_KINDS, ("mutate",), ("CREATE",), mutating=True)
@pod_rule(ids.TRACK_ROLLOUT, phases=("mutate",), mutating=True)
def track_rollout(obj: dict[str, Any], ctx: Context) -> Outcome:
    """Annotate device-using objects with their path, stage, cohort and policy, so the rollout can be tracked.

    ``<prefix>/path`` is ``device-plugin``, ``dra-extended-resource``, ``dra-claim`` or ``mixed``;
    written on Pods, workload controllers and their pod templates, and claims. ``dra-webhook report``
    compares it with the path the Pod actually got. Idempotent: a second pass is an empty patch. The
    controller's own annotations summarize its templates as they will be stored (``_summary``).
    """
    if ctx.kind in claim_objects.CLAIM_KINDS and ctx.group == "resource.k8s.io":  # not a CRD called so
        return _claim_outcome(obj, ctx)
    mutated = dict(obj)  # copy-on-write: only the metadata maps written below are new
    changed = False
    stored: list[str] = []  # the path of each template (or the Pod) as it will be stored
    frozen = ANNOTATIONS not in template_writes(obj, ctx)  # e.g. a started Job's template is immutable
    finders = ctx.policy.template_finders
    for ref in templates_of(obj, "templates", lambda: pod_templates(obj, ctx.kind, ctx.group, finders), ctx.memo):
        template = ref.template(obj) if ref.path else obj
        path = _path(template, scoped_usage(ref.spec_as_run(obj), ctx), ctx)
        if path is None:
            continue
        values = tracking_values(ctx, path)
        if not ref.path or frozen:
            # A Pod: its metadata is the object's, written below. A frozen template: untouched, as it is.
            stored.append(path if not ref.path else _stored_path(metadata_annotations(template), path, ctx))
            continue
        desired = values
        if ctx.operation == "UPDATE" and template_unchanged(obj, ctx.old_object, ref, values):
            old = metadata_annotations(ref.template(ctx.old_object or {}))
            desired = {k: old[k] for k in values if k in old}
        changed |= _set_annotations(private_path(mutated, ref.path), desired, values)
        stored.append(_stored_path(desired, path, ctx))
    if stored:
        summary = _summary(stored, ctx)
        changed |= _set_annotations(mutated, summary, summary)
    return Outcome(mutated=mutated if changed else None)
