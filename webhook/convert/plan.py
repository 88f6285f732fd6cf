"""What ``dra-webhook convert`` does to one object: per pod template, the DRA form the policy prescribes.

Nothing here is a rule of its own: the decision reads the functions the webhook's rules read, on a policy whose
every cohort is pinned at the target stage (``pinned``): ``placement.usage`` and ``placement.plan`` (which names
the policy maps, which pool and path the scheduler takes), ``CompiledPolicy.is_training_job`` on the labels and
deadlines the ``training-job-extended-resource`` rule reads, and the pod templates ``objects.pod_templates``
finds (built-in kinds and the policy's ``workloadKinds``). The forms:

- ``claims``: the template's devices come from a ResourceClaimTemplate generated beside the workload (one
  request per container, as the scheduler's own extended-resource claim has), with the policy's
  ``trainingJobs.deviceTolerations`` for a training job (the tolerations ``inject-device-tolerations`` would
  add), and the container asks for it in ``resources.claims``. Always for a training job (the extended-resource
  path cannot carry device tolerations, README "The scheduler's claims are never touched"), and for every
  template with ``--claims``.
- ``rename``: the device plugin's name (``legacyNames``) becomes the policy resource's name, which a DeviceClass
  maps: the extended-resource-via-DRA form of the pilot and migrated stages.
- none: the template already asks for the policy resource's own name and the scheduler serves it through DRA
  at the target stage (path ``dra-extended-resource``): it stays as it is, and ``convert`` says so.

A template ``convert`` cannot rewrite without changing what it means is left alone with the reason; so is a job
Kueue queues whose claims' DeviceClass the policy does not say Kueue maps (``spec.quota.kueue``,
``webhook/policy/quota.py``): as claims Kueue would keep it suspended or not count it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from webhook.objects.pods import (
    ContainerRef,
    PodTemplateRef,
    active_deadlines,
    container_extended,
    get_path,
    iter_containers,
    kueue_queue,
    pod_claims,
    pod_labels,
    pod_templates,
    requested_names,
)
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Resource, ScheduleEntry, Stage
from webhook.policy.placement import hardware, plan, serves_dra, usage
from webhook.policy.quota import kueue_advice, kueue_unmapped
from webhook.rules.workloads import examined_owner

CLAIMS, RENAME = "claims", "rename"
STAGES = (Stage.pilot.value, Stage.migrated.value)
"""Target stages: the legacy stage's form is the device plugin's, nothing to convert to."""


DUE = "due"
"""``--stage due``: each object in the stage its namespace's cohort is in on ``--at``, if pilot or migrated."""


def due_stage(policy: CompiledPolicy, namespace: str, labels: Mapping[str, str] | None,
              now: dt.datetime) -> tuple[str, str]:
    """The stage to convert an object of ``namespace`` to under ``--stage due`` (pilot or migrated, the stage its
    cohort is in on ``now``), or ``""`` and why not: its cohort is not due yet, or (``labels`` unknown) a cohort
    that selects namespaces by labels may place it in a stage other than the one its name gives
    (``CompiledPolicy.stage_candidates``: first match wins)."""
    day = now.astimezone(dt.UTC).date()
    if labels is None and policy.uses_namespace_labels:
        candidates = policy.stage_candidates(namespace, day)
        if len({stage for _, stage in candidates}) > 1:
            by_labels = ", ".join(f"{c.name} ({s})" for c, s in candidates[:-1] if c is not None)
            return "", (f"stage unknown: cohort(s) {by_labels} select namespaces by labels and may select "
                        f"{namespace}; put its Namespace (with its labels) in the same file")
    cohort = policy.cohort_for(namespace, labels)
    stage = policy.stage_for(cohort, now)
    if stage in STAGES:
        return stage, ""
    nxt = cohort.next_change(day) if cohort is not None else None
    who = f"cohort {cohort.name}" if cohort is not None else "no cohort (spec.defaultStage)"
    then = f"next: {nxt.stage.value} from {nxt.from_}" if nxt is not None else "no change scheduled"
    return "", f"not due: namespace {namespace} is in {who}, stage {stage} on {day}; {then}"


def pinned(policy: CompiledPolicy, stage: str) -> CompiledPolicy:
    """The policy with every cohort, and namespaces outside all cohorts, in ``stage`` on every date (same identity):
    what the webhook will decide once the schedule has reached that stage."""
    entry = ScheduleEntry.model_validate({"stage": stage, "from": dt.date.min})
    source = policy.source.model_copy(update={
        "spec": policy.source.spec.model_copy(update={"defaultStage": Stage(stage)})})
    return replace(policy, source=source, cohorts=tuple(replace(c, schedule=(entry,)) for c in policy.cohorts))


@dataclass(frozen=True)
class DeviceAsk:
    """One container's ask for one policy resource: the names it uses (legacy and own) and the device count."""

    container: ContainerRef
    resource: Resource
    names: tuple[str, ...]
    count: int


@dataclass(frozen=True)
class TemplateEdit:
    """How one pod template changes: ``form`` is ``claims`` or ``rename``."""

    ref: PodTemplateRef
    form: str
    asks: tuple[DeviceAsk, ...]
    tolerations: tuple[dict[str, Any], ...] = ()
    training: bool = False


@dataclass
class Plan:
    """The edits for an object, what stays as it is (``notes``), and why a template cannot be converted."""

    edits: list[TemplateEdit] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def plan_object(obj: Mapping[str, Any], kind: str, group: str, policy: CompiledPolicy, stage: str,
                claims: bool) -> Plan:
    """The edits that put ``obj``'s pod templates in the target stage's DRA form (``policy`` pinned at ``stage``)."""
    out = Plan()
    owner = examined_owner(obj, kind, policy.template_finders)
    if owner is not None:
        out.reasons.append(f"controlled by {owner}: convert the owner's manifest, its controller writes this one")
        return out
    for ref in pod_templates(obj, kind, group, policy.template_finders):
        _plan_template(obj, kind, group, ref, policy, stage, claims, out)
    if out.reasons:
        out.edits.clear()  # all or nothing: half a workload in one form and half in another helps nobody
    return out


def _plan_template(obj: Mapping[str, Any], kind: str, group: str, ref: PodTemplateRef, policy: CompiledPolicy,
                   stage: str, claims: bool, out: Plan) -> None:
    spec = ref.spec(obj)
    u = usage(spec, policy)
    if not u.gpu:
        return
    where = ref.where()
    problem = _cannot(spec, u.shared, policy) or (
        None if serves_dra(u, policy) else f'schedulerName "{u.scheduler}" does not allocate DRA devices (not in '
        "spec.draSchedulers): the device plugin keeps serving it")
    if problem is None and u.slice is not None:  # issue 45 item 5: on the DRA pool the name is a whole GPU
        problem = (f"pins {u.slice.where}, nodes where the name is a {u.slice.entry.sharing} slice: DRA would give a "
                   f"whole device; ask DeviceClass {u.slice.entry.deviceClassName} by claim instead")
    if problem:
        out.reasons.append(where + problem)
        return
    asks = tuple(_asks(spec, policy))
    deadlines = active_deadlines(obj, ref)
    training = policy.is_training_job(pod_labels(obj, kind, ref, group), max(deadlines) if deadlines else None)
    if claims or training:
        # kube-scheduler's claim lets a non-sidecar init container reuse the devices of the containers started after
        # it (extendeddynamicresources.go ``createRequestsAndMappings``, master for 1.37); claims written per
        # container would not, so such a template is not rewritten.
        blocked = [a.container.name for a in asks if a.container.field == "initContainers" and not a.container.sidecar]
        if blocked:
            out.reasons.append(f"{where}init container {', '.join(blocked)} asks for devices: as a claim they would "
                               "come on top of the containers' (the scheduler reuses an init container's extended "
                               "resources)")
            return
        ray = _ray_gpus_unstated(obj, group, ref, asks)
        if ray:
            out.reasons.append(where + ray)
            return
        queue = kueue_queue(obj, ref)
        unmapped = kueue_unmapped(policy, (a.resource.deviceClassName for a in asks)) if queue else []
        if unmapped:
            out.reasons.append(where + kueue_advice(queue, unmapped))
            return
        tolerations = tuple(policy.device_tolerations) if training else ()
        out.edits.append(TemplateEdit(ref, CLAIMS, asks, tolerations, training))
    elif u.legacy:
        out.edits.append(TemplateEdit(ref, RENAME, asks))
    else:
        path = plan(u, stage, policy).path
        names = ", ".join(sorted(u.er))
        out.notes.append(f"{where}stays as it is: {names} is served through DRA as an extended resource in the {stage} "
                         f"stage (path {path}; kube-scheduler creates the claim); --claims writes explicit claims")


def _cannot(spec: Mapping[str, Any], shared: tuple[str, ...], policy: CompiledPolicy) -> str | None:
    """Why a template's device asks cannot be rewritten: a name no policy resource maps, which goes with the
    GPUs (a sharing stack's, or one the policy retires), or one container asking for one resource twice."""
    for name in requested_names(spec):
        if hardware(policy, name) is None and (name in shared or policy.retires(name)):
            return f"asks for {name}, which no policy resource maps: convert cannot keep its meaning in DRA form"
    for c in iter_containers(spec):
        seen: dict[str, str] = {}
        for name, count in container_extended(c.container).items():
            res = hardware(policy, name)
            if res is None or count <= 0:
                continue
            if res.name in seen:
                return f"container {c.name} asks for {seen[res.name]} and {name}, the same hardware twice"
            seen[res.name] = name
    return None


def _asks(spec: Mapping[str, Any], policy: CompiledPolicy) -> list[DeviceAsk]:
    out = []
    for c in iter_containers(spec):
        for name, count in container_extended(c.container).items():
            res = hardware(policy, name)
            if res is not None and count > 0:
                out.append(DeviceAsk(c, res, (name,), count))
    return out


def _ray_gpus_unstated(obj: Mapping[str, Any], group: str, ref: PodTemplateRef, asks: tuple[DeviceAsk, ...]) -> str:
    """Why a KubeRay group's GPUs cannot become claims: Ray would no longer see them ("" when it would).

    KubeRay starts Ray with ``--num-gpus`` from the Ray container's (containers[0]) limits unless the group's
    ``rayStartParams`` sets ``num-gpus`` (ray-project/kuberay ``ray-operator/controllers/ray/common/pod.go``
    ``generateRayStartCommand`` -> ``addWellKnownAcceleratorResources``, "if _, ok := rayStartParams["num-gpus"];
    !ok", master read at the corpus commits), and the Ray autoscaler counts a group's GPUs the same way
    (ray-project/ray ``python/ray/autoscaler/_private/kuberay/autoscaling_config.py`` ``_get_num_gpus``: the
    ``num-gpus`` start param first, else a limit or request whose name ends in ``gpu``; read at 0219fc3e). Claims
    leave no GPU in the limits, so Ray would start with no GPUs and never scale the group. ``convert`` does not
    write ``rayStartParams`` itself (the Ray configuration is the Ray user's: a fractional or logical count there
    is deliberate); once it states ``num-gpus`` the claims change nothing in Ray's view.
    """
    if group != "ray.io" or len(ref.path) < 2:
        return ""
    params = get_path(obj, (*ref.path[:-1], "rayStartParams"))
    if isinstance(params, Mapping) and "num-gpus" in params:
        return ""
    count = sum(a.count for a in asks if a.container.field == "containers" and a.container.index == 0)
    if not count:
        return ""
    return (f"KubeRay starts Ray with --num-gpus from the Ray container's limits and the Ray autoscaler counts the "
            f"group's GPUs the same way: as claims Ray would see no GPU and never scale the group. Set the group's "
            f'rayStartParams num-gpus: "{count}" (what Ray reads first), then convert')


def claim_names(spec: Mapping[str, Any]) -> set[str]:
    """Names already taken in ``spec.resourceClaims``."""
    return {str(c.get("name")) for c in pod_claims(spec)}
