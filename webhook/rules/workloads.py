"""How the Pod rules reach workload controllers.

Every Pod rule also runs on the pod templates of Deployment, StatefulSet, DaemonSet, ReplicaSet, Job,
CronJob, JobSet and PyTorchJob (``objects.pod_templates``), so a bad Deployment is refused when it is
applied rather than when its ReplicaSet silently fails to make Pods.

Operations differ on purpose:
- Pods: CREATE only. A Pod's spec is immutable after creation, and UPDATEs of existing Pods (labels,
  finalizers, ownerReferences by controllers) must never be refused for what the Pod asked for when it
  was admitted, possibly in an earlier stage.
- Workload controllers: CREATE and UPDATE. An UPDATE carries the new pod template, which the
  controller will stamp into new Pods, so it is re-evaluated in the current stage.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from webhook.objects import WORKLOAD_KINDS, PodTemplateRef, get_path
from webhook.rules.base import RuleFn, rule

POD_OPERATIONS = ("CREATE",)
WORKLOAD_OPERATIONS = ("CREATE", "UPDATE")


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
