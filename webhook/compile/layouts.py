"""Where the pod spec sits in each kind the compiled policies cover, and when the webhook examines it.

Four layouts, one ValidatingAdmissionPolicy each (per action): a CEL expression is type-checked against
every kind its policy matches, so ``object.spec.jobTemplate`` may only appear in a policy that matches
CronJobs alone, and ``object.spec.suspend`` one that matches Jobs alone. The kinds are the built-in ones of
``objects.KINDS``; workload CRDs (JobSet, Kubeflow, KubeRay, LeaderWorkerSet, Volcano and the policy's
``workloadKinds``) stay with the webhook (``coverage``).
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.compile.cel import lit, str_list
from webhook.objects.pods import KINDS
from webhook.rules.workloads import POD_OPERATIONS, WEBHOOK_ANNOTATIONS, WORKLOAD_OPERATIONS


@dataclass(frozen=True, slots=True)
class Layout:
    """Kinds whose pod template is at ``template`` (CEL on ``object``; ``""`` for a Pod, its own spec)."""

    name: str
    rules: tuple[tuple[str, tuple[str, ...]], ...]  # (apiGroup, resources)
    operations: tuple[str, ...]
    template: str
    job: str | None = None  # the enclosing batch/v1 JobSpec (CEL on ``object``), for activeDeadlineSeconds

    def spec(self, root: str = "object") -> str:
        return f"{root}{self.template}.spec"

    def resource_rules(self) -> list[dict[str, object]]:
        return [{"apiGroups": [group], "apiVersions": ["v1"], "operations": list(self.operations),
                 "resources": list(resources)} for group, resources in self.rules]


POD = Layout("pods", (("", ("pods",)),), POD_OPERATIONS, "")
TEMPLATE = Layout("workloads", (("apps", ("deployments", "replicasets", "statefulsets", "daemonsets")),),
                  WORKLOAD_OPERATIONS, ".spec.template")
JOB = Layout("jobs", (("batch", ("jobs",)),), WORKLOAD_OPERATIONS, ".spec.template", ".spec")
CRONJOB = Layout("cronjobs", (("batch", ("cronjobs",)),), WORKLOAD_OPERATIONS, ".spec.jobTemplate.spec.template",
                 ".spec.jobTemplate.spec")
LAYOUTS = (POD, TEMPLATE, JOB, CRONJOB)
COMPILED_KINDS = ("Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob")
"""Kinds the compiled policies judge (``objects.KINDS`` of groups core, apps and batch)."""


def _owners() -> list[str]:
    """``group/Kind`` of every workload kind whose controlled objects the webhook leaves to their owner."""
    return sorted(f"{k.group}/{k.kind}" for k in KINDS if k.kind != "Pod")


def owned() -> str:
    """CEL: a workload kind the webhook knows controls this object (``workloads.examined_owner``)."""
    return ("object.metadata.?ownerReferences.orValue([]).exists(r, r.?controller.orValue(false) && "
            "r.kind != 'Pod' && (r.apiVersion.contains('/') ? r.apiVersion.substring(0, r.apiVersion.indexOf('/'))"
            f" : '') + '/' + r.kind in {str_list(_owners())})")


def template_changed(layout: Layout, ignored: list[str]) -> str:
    """CEL, on UPDATE: the template differs from the old one in more than the annotations ``ignored``
    (``workloads.template_unchanged``). Compared: spec, labels and annotations; a change of other template
    metadata (name, finalizers) is not seen."""
    own = str_list(ignored)
    new, old = f"object{layout.template}", f"oldObject{layout.template}"
    ann_new, ann_old = f"{new}.?metadata.?annotations.orValue({{}})", f"{old}.?metadata.?annotations.orValue({{}})"
    same_ann = (f"{ann_new}.filter(k, !(k in {own})).all(k, k in {ann_old} && {ann_old}[k] == {ann_new}[k]) && "
                f"size({ann_new}.filter(k, !(k in {own}))) == size({ann_old}.filter(k, !(k in {own})))")
    return (f"({new}.spec != {old}.spec || {new}.?metadata.?labels.orValue({{}}) != "
            f"{old}.?metadata.?labels.orValue({{}}) || !({same_ann}))")


def uses_devices(layout: Layout) -> str:
    """CEL: the pod spec asks for a device: a resource name with '/' in a container or init container, a
    ``resources.claims`` entry, or ``spec.resourceClaims`` (the ``uses-devices`` matchCondition of
    deploy/base/webhooks.yaml, on the typed built-in kinds). The webhook is never sent anything else, so the
    compiled policies leave it too: a plain Pod pays no CEL evaluation (bench/results.md, issue 28 item 5)."""
    s = layout.spec()
    named = "n.contains('/')"
    container = (f"c.?resources.?claims.orValue([]).size() > 0 || "
                 f"c.?resources.?limits.orValue({{}}).exists(n, {named}) || "
                 f"c.?resources.?requests.orValue({{}}).exists(n, {named})")
    return (f"{s}.?resourceClaims.orValue([]).size() > 0 || "
            f"({s}.?containers.orValue([]) + {s}.?initContainers.orValue([])).exists(c, {container})")


def examined(layout: Layout, prefix: str) -> str:
    """CEL: whether the webhook judges this object's template (``workloads.examined_templates``).

    A Pod always (CREATE only). A workload: not when a workload kind the webhook knows controls it (``owned``: a
    Deployment's ReplicaSet, a CronJob's Job); on UPDATE only when the template changed, not counting the
    webhook's own annotations.
    """
    if layout is POD:
        return "true"
    changed = template_changed(layout, [f"{prefix}/{k}" for k in WEBHOOK_ANNOTATIONS])
    return f"!({owned()}) && (request.operation == {lit('CREATE')} || oldObject == null || {changed})"
