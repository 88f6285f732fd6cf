"""How the Pod rules reach workload controllers.

Every Pod rule also runs on the pod templates of the workload kinds in ``objects.KINDS`` (apps/v1,
batch/v1, JobSet, Kubeflow training jobs, LeaderWorkerSet, KubeRay, Volcano), dispatched on API group
and kind, so a bad Deployment is refused when it is applied rather than when its ReplicaSet silently
fails to make Pods.

Operations differ on purpose:
- Pods: CREATE only. A Pod's spec is immutable after creation, and UPDATEs of existing Pods (labels,
  finalizers, ownerReferences by controllers) must never be refused for what the Pod asked for when it
  was admitted, possibly in an earlier stage.
- Workload controllers: CREATE and UPDATE, but on UPDATE only the templates the request itself changed
  (``examined_templates``). A label change by Argo CD, a finalizer, Kueue unsuspending a queued JobSet:
  none of them may be refused or rewritten because the cohort's stage moved since the object was
  admitted. Rewriting an unchanged Deployment template rolls out every replica; the Pods a controller
  makes later are judged at their own CREATE anyway.
- Even a changed template is written only where the kind's own validation allows it
  (``template_writes``): a batch/v1 Job's template is immutable once it has started, and JobSet's
  webhook refuses any affinity change.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from webhook.objects.pods import (
    NO_NAMED_KINDS,
    WORKLOAD_KINDS,
    PodTemplateRef,
    TemplateFinder,
    get_path,
    pod_templates,
    workload_kind,
)
from webhook.rules.base import Context, RuleFn, rule
from webhook.rules.memo import templates_of

POD_OPERATIONS = ("CREATE",)
WORKLOAD_OPERATIONS = ("CREATE", "UPDATE")
WEBHOOK_ANNOTATIONS = ("path", "stage", "cohort", "policy", "node-pool")
"""Template annotations (under the policy's prefix) the webhook itself writes: never a user's change."""

AFFINITY = "affinity"
ANNOTATIONS = "annotations"
_ALL_WRITES = frozenset({AFFINITY, ANNOTATIONS})


def pod_rule(
    rule_id: str, phases: Iterable[str] = ("validate",), mutating: bool = False
) -> Callable[[RuleFn], RuleFn]:
    """Register one rule function for Pods (CREATE) and for workload controllers (CREATE, UPDATE)."""
    phases = tuple(phases)

    def register(fn: RuleFn) -> RuleFn:
        rule(rule_id, ("Pod",), phases, POD_OPERATIONS, mutating)(fn)
        rule(rule_id, WORKLOAD_KINDS, phases, WORKLOAD_OPERATIONS, mutating)(fn)
        return fn

    return register


def template_unchanged(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None, ref: PodTemplateRef, ignore: Iterable[str]
) -> bool:
    """Whether an UPDATE leaves this pod template as it was, not counting the annotations ``ignore``.

    Used to keep webhook-written template annotations stable: a Deployment whose template changes
    rolls out new Pods, so the webhook must not be the one changing it (e.g. a new stage or policy
    identity) when the user's own update left the template alone.
    """
    if old is None:
        return False
    new_t, old_t = get_path(obj, ref.path), get_path(old, ref.path)
    if not isinstance(new_t, dict) or not isinstance(old_t, dict):
        return False
    return _strip(new_t, ignore) == _strip(old_t, ignore)


def _strip(template: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    keys = frozenset(keys)
    out = copy.copy(template)
    meta = out.get("metadata")
    if not isinstance(meta, dict):
        return out
    meta = out["metadata"] = dict(meta)
    ann = meta.get("annotations")
    if isinstance(ann, dict):
        ann = {k: v for k, v in ann.items() if k not in keys}
        if ann:
            meta["annotations"] = ann
        else:
            meta.pop("annotations")
    if not meta:
        out.pop("metadata")
    return out


def examined_owner(obj: Mapping[str, Any], kind: str,
                   named: Mapping[tuple[str, str], TemplateFinder] = NO_NAMED_KINDS) -> str | None:
    """``Kind/name`` of the object's controlling owner when that is a workload kind the webhook examines, else None.

    Such an object (a Deployment's ReplicaSet, a CronJob's Job, a JobSet's Jobs) is decided at its top-level
    owner and at its Pods, never itself (issue 24 item 2): its controller compares the template it wrote with
    the owner's, and a rewritten one makes it create another. kubernetes/kubernetes v1.36
    pkg/controller/deployment/sync.go ``getNewReplicaSet`` and util/deployment_util.go ``FindNewReplicaSet`` match
    a ReplicaSet to the Deployment by ``EqualIgnoreHash`` of the templates; a mismatch under the same name bumps
    ``status.collisionCount`` and makes a new ReplicaSet, endlessly (kubernetes/kubernetes#57167). Pods are never
    skipped: a Pod is where the scheduler decides.
    """
    if kind == "Pod":
        return None
    refs = get_path(obj, ("metadata", "ownerReferences"))
    for ref in refs if isinstance(refs, list) else ():
        if not isinstance(ref, dict) or ref.get("controller") is not True:
            continue
        owner_kind, api_version = str(ref.get("kind", "")), str(ref.get("apiVersion", ""))
        group = api_version.rpartition("/")[0]
        if owner_kind != "Pod" and (workload_kind(group, owner_kind) is not None
                                    or (group, owner_kind) in named):
            return f"{owner_kind}/{ref.get('name', '')}"
    return None


def examined_templates(obj: Mapping[str, Any], ctx: Context) -> list[PodTemplateRef]:
    """The pod templates the rules judge: every one on CREATE; on UPDATE only those the request changed.

    A template that differs from the old object only in the webhook's own annotations is unchanged. None of an
    object a workload the webhook examines controls (``examined_owner``): that owner was judged already.
    """
    return templates_of(obj, "examined", lambda: _examined(obj, ctx), ctx.memo)


def _examined(obj: Mapping[str, Any], ctx: Context) -> list[PodTemplateRef]:
    if examined_owner(obj, ctx.kind, ctx.policy.template_finders) is not None:
        return []
    refs = pod_templates(obj, ctx.kind, ctx.group, ctx.policy.template_finders)
    if ctx.operation != "UPDATE" or not refs:
        return refs
    ignore = [ctx.policy.key(k) for k in WEBHOOK_ANNOTATIONS]
    return [r for r in refs if not template_unchanged(obj, ctx.old_object, r, ignore)]


def template_writes(obj: Mapping[str, Any], ctx: Context) -> frozenset[str]:
    """What the webhook may write into this object's pod templates: ``affinity`` and/or ``annotations``.

    Everything on CREATE. On UPDATE, what the kind's own validation accepts:

    - batch/v1 Job: the template is immutable unless the old Job is suspended and has never started
      (then node affinity, node selector, tolerations, labels, annotations and scheduling gates may
      change). Read in kubernetes/kubernetes v1.36 ``pkg/apis/batch/validation/validation.go``
      (``ValidateJobSpecUpdate`` -> ``validatePodTemplateUpdate``, ``opts.AllowMutableSchedulingDirectives``)
      and ``pkg/registry/batch/job/strategy.go`` (``validationOptionsForJob``:
      ``suspended := oldJob.Spec.Suspend``, ``notStarted := oldJob.Status.StartTime == nil``).
    - JobSet: ``replicatedJobs`` are immutable; while the old or new JobSet is suspended (Kueue) only
      template annotations, labels, nodeSelector, tolerations and scheduling gates may change, never
      affinity. Read in kubernetes-sigs/jobset main ``pkg/webhooks/jobset_webhook.go``
      (``jobSetWebhook.ValidateUpdate``).
    - every other kind: no template immutability (a Deployment rolls out the changed template).

    Nothing for an object a workload the webhook examines controls (``examined_owner``): annotate, never fight.
    """
    if examined_owner(obj, ctx.kind, ctx.policy.template_finders) is not None:
        return frozenset()
    if ctx.operation != "UPDATE":
        return _ALL_WRITES
    old = ctx.old_object or {}
    if ctx.group == "batch" and ctx.kind == "Job":
        suspended = get_path(old, ("spec", "suspend")) is True
        started = get_path(old, ("status", "startTime")) is not None
        return _ALL_WRITES if suspended and not started else frozenset()
    if ctx.group == "jobset.x-k8s.io" and ctx.kind == "JobSet":
        suspended = get_path(old, ("spec", "suspend")) is True or get_path(obj, ("spec", "suspend")) is True
        return frozenset({ANNOTATIONS}) if suspended else frozenset()
    return _ALL_WRITES
