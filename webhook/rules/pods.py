"""Rules on Pods and pod templates: resource names, device counts, allocation paths, node pools.

Each rule walks ``objects.pod_templates`` so the same code judges a Pod and the templates of its
controllers (registration: ``workloads.pod_rule``). Findings name the container and the template;
paths are kubectl-style field paths into the object as received.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import yaml

from webhook.gates.eviction import decide
from webhook.objects import claims as claim_objects
from webhook.objects.jsonish import metadata_annotations
from webhook.objects.node_affinity import steer
from webhook.objects.patch import clone, private_path
from webhook.objects.pods import (
    DEVICECLASS_PREFIX,
    ContainerRef,
    PodTemplateRef,
    active_deadlines,
    container_extended,
    extended_requests,
    field_path,
    iter_containers,
    kueue_queue,
    object_name,
    pod_claims,
    pod_labels,
)
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Resource
from webhook.policy.placement import (
    DEFAULT_SCHEDULER,
    Usage,
    hardware,
    per_node,
    plan,
    serves_dra,
)
from webhook.policy.quota import kueue_advice, kueue_unmapped
from webhook.rules.base import Context, Finding, Outcome
from webhook.rules.memo import names_of, usage_of
from webhook.rules.view import OFFLINE, Lookup
from webhook.rules.workloads import AFFINITY, examined_templates, pod_rule, template_writes

MESSAGE_MAX = 199
NODE_POOL_ANNOTATION = "node-pool"
"""``<prefix>/node-pool``: which pool ``steer-node-pool`` added affinity for (``dra`` | ``devicePlugin``).

It lets a later pass (a Pod made from a template steered in an earlier stage, or a workload UPDATE after
the stage moved) replace the webhook's own affinity instead of reporting it as the user's contradiction.
"""


# ---- message helpers -------------------------------------------------------------------------------


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."


def _who(containers: list[ContainerRef], verb: str = "request") -> str:
    """``container "a" requests`` / ``containers "a", "b" request`` (at most three names)."""
    names = [f'"{c.name}"' for c in containers]
    shown = ", ".join(names[:3]) + (f" +{len(names) - 3} more" if len(names) > 3 else "")
    if len(names) == 1:
        return f"container {shown} {verb}s"
    return f"containers {shown} {verb}"


def _resource_paths(ref: PodTemplateRef, containers: list[ContainerRef]) -> tuple[str, ...]:
    return tuple(field_path(ref.at("spec", c.field, c.index, "resources")) for c in containers)


# ---- validate rules --------------------------------------------------------------------------------


@pod_rule(ids.LEGACY_RESOURCE_NAME)
def legacy_resource_name(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A Pod or pod template requests a device-plugin name (``legacyNames``) in a pilot or migrated cohort.

    Those names are served only by the device plugin, which the cohort is leaving; the finding names
    the policy resource that means the same hardware and is served by DRA. Legacy stage: no finding.
    """
    if ctx.stage == "legacy":
        return Outcome()
    findings = []
    for ref in examined_templates(obj, ctx):
        for name, containers in names_of(ref.spec(obj), ctx.memo).items():
            res = ctx.policy.legacy.get(name)
            if res is None:
                continue
            findings.append(
                Finding(
                    ids.LEGACY_RESOURCE_NAME,
                    _clip(f"{ref.where()}{_who(containers)} legacy device-plugin resource {name}"),
                    f"request {res.name} instead of {name} (same hardware, served by DeviceClass "
                    f"{res.deviceClassName})",
                    _resource_paths(ref, containers),
                )
            )
    return Outcome(findings)


@pod_rule(ids.UNMAPPED_EXTENDED_RESOURCE)
def unmapped_extended_resource(obj: dict[str, Any], ctx: Context) -> Outcome:
    """In a migrated cohort a Pod requests a retired name (``retiredResourceNames``) that no DeviceClass maps.

    Names outside the policy's ``resources`` are outside the migration (``amd.com/gpu``, ``google.com/tpu``,
    HAMi's ``nvidia.com/gpucores``): nodes may advertise them through their own device plugins, so they are
    judged only when the policy lists them as retired. A retired name is fine once a DeviceClass maps it
    (``extendedResourceName``); without cluster data only the policy counts, and the decision says so.
    ``deviceclass.resource.kubernetes.io/<class>`` is served only by DRA, so such a name whose class does not
    exist cannot be scheduled anywhere. When the DeviceClasses are unknown (offline, or the watch has not
    synced) the rule cannot tell (issue 24 item 5): the finding is ``unjudged`` and ``enforcement.ruleErrors``
    decides, never a denial as unmapped.
    """
    if ctx.stage != "migrated":
        return Outcome()
    policy = ctx.policy
    findings = []
    degraded: list[str] = []
    lookup = _MappedNames(ctx)
    for ref in examined_templates(obj, ctx):
        for name, containers in names_of(ref.spec(obj), ctx.memo).items():
            implicit = name[len(DEVICECLASS_PREFIX) :] if name.startswith(DEVICECLASS_PREFIX) else None
            pattern = policy.retires(name) if implicit is None else None
            if hardware(policy, name) is not None or (implicit is None and pattern is None):
                continue  # a policy resource (own rules), or a name outside the migration
            if lookup.maps(name, implicit):
                continue
            unknown = lookup.unknown(implicit)
            if unknown is not None:
                degraded.append(f"{ids.UNMAPPED_EXTENDED_RESOURCE}: DeviceClasses unknown ({unknown}), "
                                + ("not judged" if implicit else "only the policy's resources count"))
            what, fix = _unmapped_text(name, implicit, pattern, unknown, policy)
            findings.append(
                Finding(
                    ids.UNMAPPED_EXTENDED_RESOURCE,
                    _clip(f"{ref.where()}{_who(containers)} {what}"),
                    fix,
                    _resource_paths(ref, containers),
                    unjudged=implicit is not None and unknown is not None,
                )
            )
    return Outcome(findings, degraded=tuple(dict.fromkeys(degraded)))


class _MappedNames:
    """The cluster's extended-resource mappings and DeviceClasses, asked for once and only when needed."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._looked_up = False
        self._known: Lookup[Mapping[str, str]] = OFFLINE
        self._classes: Lookup[Mapping[str, Any]] = OFFLINE

    def _look_up(self) -> None:
        if not self._looked_up:
            view = self._ctx.view
            self._known, self._classes = view.extended_resource_classes(), view.device_classes()
            self._looked_up = True

    def unknown(self, implicit: str | None) -> str | None:
        """Why the data that would judge this name (mappings, or classes for an implicit name) is missing
        (``no cluster data`` offline); None when the view has it."""
        self._look_up()
        found = self._known if implicit is None else self._classes
        return None if found.value is not None else (found.reason or "no cluster data")

    def maps(self, name: str, implicit: str | None) -> bool:
        """Whether a DeviceClass maps ``name`` (or, for an implicit name, the class exists)."""
        self._look_up()
        known, classes = self._known.value, self._classes.value
        return (known is not None and name in known) or (
            implicit is not None and classes is not None and implicit in classes)


def _unmapped_text(
    name: str, implicit: str | None, pattern: str | None, unknown: str | None, policy: CompiledPolicy
) -> tuple[str, str]:
    """(what is wrong, how to fix it) for a retired or implicit name nothing maps, or whose class is unknown."""
    if implicit is not None and unknown is not None:
        return (f"{name}: not judged, the DeviceClasses are unknown ({unknown})",
                f"check that DeviceClass {implicit} exists")
    if implicit is not None:
        what = (f"{name}, but DeviceClass {implicit} does not exist; only DRA serves this name, "
                "so no node can run the Pod")
        return what, f"create DeviceClass {implicit}, or request an existing class"
    mapper = "no policy resource maps (DeviceClasses unknown)" if unknown is not None else (
        "no policy resource or DeviceClass maps")
    what = f"{name}, which the policy retires (retiredResourceNames {pattern}) and {mapper}"
    fix = (f"request a policy resource ({', '.join(sorted(policy.resources)) or 'none'}) or use a "
           f"ResourceClaim; or create a DeviceClass with extendedResourceName {name}")
    return what, fix


@pod_rule(ids.MAX_DEVICES_PER_POD)
def max_devices_per_pod(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A Pod would use more devices of a policy resource than its ``maxPerPod``.

    Counted as the scheduler does: limits imply requests, and the effective count is the larger of the
    biggest init container and all regular containers plus sidecars; legacy and implicit
    (``deviceclass.resource.kubernetes.io/<class>``) names of the same hardware are added up.
    """
    policy = ctx.policy

    def group(name: str) -> str | None:
        res = hardware(policy, name)
        return res.name if res is not None and res.maxPerPod else None

    findings = []
    for ref in examined_templates(obj, ctx):
        spec = ref.spec(obj)
        for res_name, count in extended_requests(spec, group).items():
            res = policy.resources[res_name]
            assert res.maxPerPod is not None
            if count <= res.maxPerPod:
                continue
            names = sorted({n for n in names_of(spec, ctx.memo) if group(n) == res_name})
            counted = f" ({' + '.join(names)})" if len(names) > 1 or names != [res_name] else ""
            containers = [c for c in iter_containers(spec) if set(container_extended(c.container)) & set(names)]
            findings.append(
                Finding(
                    ids.MAX_DEVICES_PER_POD,
                    _clip(f"{ref.where()}Pod needs {count} {res.name}{counted}, above maxPerPod {res.maxPerPod}"),
                    f"request at most {res.maxPerPod} {res.name} per Pod, or split the work across Pods\n"
                    "Counted as the scheduler does: limits imply requests; the effective request is the larger of "
                    "all containers plus sidecars and each init container plus the sidecars started before it.",
                    _resource_paths(ref, containers),
                )
            )
    return Outcome(findings)


def _claim_classes(ctx: Context, entry: Mapping[str, Any]) -> tuple[set[str] | None, str]:
    """DeviceClasses a pod-level claim entry asks for (``exactly`` and every ``firstAvailable`` choice).

    ``(None, why)`` when the cluster view cannot tell: offline, absent (a template created in the same
    apply) or a lookup over budget; ``why`` names the object and, if the view says, the reason.
    """
    if entry.get("resourceClaimName"):
        kind, name = "ResourceClaim", str(entry["resourceClaimName"])
        found = ctx.view.get_resource_claim(ctx.namespace, name)
    elif entry.get("resourceClaimTemplateName"):
        kind, name = claim_objects.TEMPLATE_KIND, str(entry["resourceClaimTemplateName"])
        found = ctx.view.get_resource_claim_template(ctx.namespace, name)
    else:
        return set(), ""
    if found.value is None:
        # Absent: the view answered, the object does not exist (yet). OFFLINE: nothing more to say.
        why = "not found" if found.is_absent else found.reason
        return None, f"{kind} {name}" + (f": {why}" if why else "")
    return {
        str(slot.body["deviceClassName"])
        for slot in claim_objects.iter_requests(found.value, kind)
        if slot.body.get("deviceClassName")
    }, ""


@pod_rule(ids.MIXED_ALLOCATION)
def mixed_allocation(obj: dict[str, Any], ctx: Context) -> Outcome:
    """The same hardware asked for twice: as an extended resource (or legacy name) and by a claim.

    A Pod only names its claims; which DeviceClass they ask for is in separate objects. The rule fires
    only when the cluster view can read them; otherwise (offline, or claims not found yet, e.g. a
    template created in the same apply) it stays silent and records the degraded decision. It never
    guesses from claim names.
    """
    policy = ctx.policy
    ext: Mapping[str, str] | None = None  # looked up once, only when a Pod mixes
    findings = []
    degraded: list[str] = []
    for ref in examined_templates(obj, ctx):
        spec = ref.spec(obj)
        u = usage_of(spec, policy, ctx.memo)
        if not (u.gpu and u.claims):
            continue
        if ext is None:
            ext = ctx.view.extended_resource_classes().value or {}
        serving: dict[str, Resource] = {}
        for res in {**u.er, **u.legacy}.values():
            serving[res.deviceClassName] = res
            for name in (res.name, *res.legacyNames):
                if name in ext:
                    serving[ext[name]] = res
        for entry in pod_claims(spec):
            classes, why = _claim_classes(ctx, entry)
            if classes is None:
                degraded.append(f"{ids.MIXED_ALLOCATION}: content of claim {entry.get('name')!r} unknown ({why})")
                continue
            for cls in sorted(classes & set(serving)):
                res = serving[cls]
                names = sorted(n for n, r in {**u.er, **u.legacy}.items() if r is res)
                findings.append(
                    Finding(
                        ids.MIXED_ALLOCATION,
                        _clip(f"{ref.where()}Pod requests {', '.join(names)} and claim \"{entry.get('name')}\" "
                              f"asks for DeviceClass {cls}: the same hardware on two paths"),
                        f"use one path: {res.name} in resources, or claims on {cls} only",
                        (field_path(ref.at("spec", "resourceClaims")),),
                    )
                )
    return Outcome(findings, degraded=tuple(degraded))


def _dns_label(text: str) -> str:
    out = "".join(ch if ch.isalnum() else "-" for ch in text.lower()).strip("-")
    return out[:63].strip("-") or "devices"


def claim_template_snippet(
    base_name: str,
    namespace: str,
    res: Resource,
    counts: list[tuple[ContainerRef, int]],
    tolerations: list[dict[str, Any]],
    taken_claim_names: set[str],
) -> str:
    """A ResourceClaimTemplate with the policy's device tolerations, plus the pod spec change that uses it.

    One request per container, named after the container, with that container's count: the same devices
    the scheduler's extended-resource claim would give each container (``container-<i>-request-<j>``).
    """
    short = _dns_label(res.name.split("/")[-1])
    claim_name = short if short not in taken_claim_names else _dns_label(f"{short}-tolerant")
    template_name = _dns_label(f"{base_name or 'workload'}-{short}")[:63]
    requests = []
    for c, count in counts:
        exactly: dict[str, Any] = {"deviceClassName": res.deviceClassName, "allocationMode": "ExactCount",
                                   "count": count}
        if tolerations:
            exactly["tolerations"] = [dict(t) for t in tolerations]
        requests.append({"name": _dns_label(c.name), "exactly": exactly})
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name, **({"namespace": namespace} if namespace else {})},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }
    pod_change: dict[str, Any] = {"resourceClaims": [{"name": claim_name, "resourceClaimTemplateName": template_name}]}
    for c, _ in counts:
        pod_change.setdefault(c.field, []).append(
            {"name": c.name, "resources": {"claims": [{"name": claim_name, "request": _dns_label(c.name)}]}}
        )
    head = "" if tolerations else "# the policy lists no trainingJobs.deviceTolerations: add what your devices need\n"
    return (
        head
        + yaml.safe_dump(template, sort_keys=False)
        + f"---\n# in the pod spec: remove {res.name} from resources.requests/limits and add\n"
        + yaml.safe_dump({"spec": pod_change}, sort_keys=False)
    )


_NEVER_EVICTED = ("# Kubernetes 1.36/1.37 does not evict Pods on the extended-resource path for NoExecute\n"
                  "# device taints (kubernetes/kubernetes#141290): nothing moves the job, it must be drained by\n"
                  "# hand.\n")
_EVICTED_AT_ONCE = ("# With the fix for kubernetes/kubernetes#141290 (policy extendedResourceTaintEviction:\n"
                    "# evicted), a NoExecute device taint evicts the job at once: the scheduler's claim has no\n"
                    "# tolerations.\n")

_DRA_EXTENDED_PATHS = ("dra-extended-resource", "mixed")
"""Paths on which DRA serves an extended resource through the scheduler's claim (issue 24 item 9)."""


def _extended_on_dra(u: Usage, stage: str, policy: CompiledPolicy) -> bool:
    """Whether DRA serves one of the Pod's extended resources (through the scheduler's claim). Path ``mixed`` says
    so only when the plan without the spec's claims is not ``device-plugin``: a job whose GPUs stay on the
    device-plugin pool beside an IMEX channel claim is not on the extended-resource-via-DRA path (issue 45 item 6;
    the compiled form, ``compile/checks.py`` ``training_checks``, tests ``trkPlanPath`` the same way)."""
    if plan(u, stage, policy).path not in _DRA_EXTENDED_PATHS:
        return False
    return not u.claims or plan(replace(u, claims=()), stage, policy).path != "device-plugin"


@pod_rule(ids.TRAINING_JOB_EXTENDED_RESOURCE)
def training_job_extended_resource(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A long training job on the extended-resource path cannot tolerate device taints (advisory).

    Judged on the path ``placement.plan`` chose for the Pod, not the stage: a job the device plugin serves is
    not on DRA at all, and a legacy-stage job asking for a name only DRA serves is.

    The scheduler's claim for an extended resource carries no tolerations and a DeviceClass cannot add
    any (docs/dra-1.37.md §7); and the device-taint eviction controller only follows ``pod.spec.resourceClaims``
    (kubernetes pkg/controller/devicetainteviction/device_taint_eviction.go, podEvictionTime; issue
    kubernetes/kubernetes#141290), so a NoExecute maintenance taint does not move the job at all: it keeps
    running on a device under maintenance. The remediation is a ready ResourceClaimTemplate with the
    policy's ``trainingJobs.deviceTolerations``, which gives a real checkpoint window. Where the policy states
    that the cluster has the fix (``extendedResourceTaintEviction: evicted``, or ``auto`` with a
    ``kubernetesVersion`` whose .0 release ships PR #142289, 1.38: webhook/gates/eviction.py), the job is evicted
    at once instead, still without a window: the advice stays, the reason changes. (The request path does not
    read the cluster's version.)
    """
    policy = ctx.policy
    evicted = decide(policy.source.spec.extendedResourceTaintEviction, None,
                     policy_version=policy.spec.kubernetesVersion).evicted
    findings = []
    for ref in examined_templates(obj, ctx):
        if not _extended_on_dra(usage_of(ref.spec_as_run(obj), policy, ctx.memo), ctx.stage, policy):
            continue  # the device plugin serves it (whatever the stage), or no extended resource at all
        deadlines = active_deadlines(obj, ref)
        if not policy.is_training_job(pod_labels(obj, ctx.kind, ref, ctx.group), max(deadlines) if deadlines else None):
            continue
        spec = ref.spec(obj)
        by_res: dict[str, list[tuple[ContainerRef, int]]] = {}
        for c in iter_containers(spec):
            for name, count in container_extended(c.container).items():
                res = policy.resources.get(name) or (hardware(policy, name) if name.startswith(DEVICECLASS_PREFIX)
                                                      else None)
                if res is not None and count > 0:
                    by_res.setdefault(res.name, []).append((c, count))
        queue = kueue_queue(obj, ref)
        for res_name, counts in by_res.items():
            res = policy.resources[res_name]
            unmapped = kueue_unmapped(policy, [res.deviceClassName]) if queue else []
            snippet = claim_template_snippet(
                object_name(obj), ctx.namespace, res, counts, list(policy.device_tolerations),
                {str(e.get("name")) for e in pod_claims(spec)},
            )
            findings.append(
                Finding(
                    ids.TRAINING_JOB_EXTENDED_RESOURCE,
                    _clip(f"{ref.where()}training job requests {res.name} as an extended resource: "
                          + ("a NoExecute device taint evicts it at once, with no checkpoint window" if evicted else
                             "no device taint moves it, it keeps running on a device under maintenance")),
                    "use a ResourceClaimTemplate with device tolerations instead\n"
                    + (f"# Not before Kueue counts it: {kueue_advice(queue, unmapped)} (dra-webhook convert leaves "
                       "it alone until then).\n" if unmapped else "")
                    + (_EVICTED_AT_ONCE if evicted else _NEVER_EVICTED)
                    + "# A claim with these tolerations is evicted after a checkpoint window. Ready to apply:\n"
                    f"{snippet}",
                    _resource_paths(ref, [c for c, _ in counts]),
                    advisory=True,
                )
            )
    return Outcome(findings)


# ---- steer-node-pool (mutate) ---------------------------------------------------------------------


def _bound(ref: PodTemplateRef, node: str, want: str | None, selector: Mapping[str, str]) -> Finding:
    """A Pod (or template) bound with ``spec.nodeName`` gets no required node affinity: the scheduler never sees
    it, and the kubelet rejects a bound Pod whose required affinity its node does not match (kubernetes v1.36
    pkg/kubelet/lifecycle/predicate.go ``GeneralPredicates``: ``pluginhelper.GetRequiredNodeAffinity(pod).Match``,
    reason ``NodeAffinity``). The webhook cannot see the node's labels, so it says which pool the Pod needs."""
    labels = ", ".join(f"{k}={v}" for k, v in selector.items())
    return Finding(
        ids.STEER_NODE_POOL,
        _clip(f'{ref.where()}Pod is bound to node "{node}" (spec.nodeName): not steered; it needs the {want} pool '
              f"({labels})"),
        f"bind it to a node of the {want} pool, or leave spec.nodeName unset and let the webhook steer it",
        (field_path(ref.at("spec", "nodeName")),),
        advisory=True,
    )


def _other_scheduler(ref: PodTemplateRef, u: Usage, want: str | None, ctx: Context) -> list[Finding]:
    """Why a Pod the DRA pool would serve is not sent there: its scheduler does not allocate DRA devices."""
    policy = ctx.policy
    if want == "dra" or serves_dra(u, policy) or policy.spec.nodePools.dra is None:
        return []
    if plan(replace(u, scheduler=DEFAULT_SCHEDULER), ctx.stage, policy).pool != "dra":
        return []
    kept = f"kept on the {want} pool" if want else "not steered"
    return [Finding(
        ids.STEER_NODE_POOL,
        _clip(f'{ref.where()}schedulerName "{u.scheduler}" is not known to allocate DRA devices: {kept}, '
              "not sent to the dra pool"),
        f'add "{u.scheduler}" to spec.draSchedulers once it allocates DRA claims',
        (field_path(ref.at("spec", "schedulerName")),),
        advisory=True,
    )]



def _steering_copy(template: dict[str, Any]) -> dict[str, Any]:
    """A copy of a pod template that ``steer`` may edit: new containers where it writes (the template, its
    metadata and annotations, its spec, the spec's affinity), everything else shared with the object received, so
    a Pod with 3 MiB of ``env`` costs what the steering changes, not a copy of it (issue 47 item 1)."""
    work = dict(template)
    meta = work.get("metadata")
    if isinstance(meta, dict):
        work["metadata"] = meta = dict(meta)
        if isinstance(meta.get("annotations"), dict):
            meta["annotations"] = dict(meta["annotations"])
    work["spec"] = spec = dict(work["spec"])
    if "affinity" in spec:
        spec["affinity"] = clone(spec["affinity"])
    return work


def _steerable(obj: dict[str, Any], ctx: Context) -> bool:
    """Whether node affinity may be written here: not into an immutable template (a started Job), not for a
    DaemonSet or its Pods, which serve the nodes of every pool (issue #24 item 12, ``placement.per_node``)."""
    return AFFINITY in template_writes(obj, ctx) and not per_node(ctx.kind, ctx.group, obj)


@pod_rule(ids.STEER_NODE_POOL, phases=("mutate",), mutating=True)
def steer_node_pool(obj: dict[str, Any], ctx: Context) -> Outcome:
    """GPU Pods go to a pool that serves them: the stage's (legacy ``devicePlugin``, else ``dra``), else the other.

    The scheduler serves a name through the device plugin on nodes whose allocatable has it, and through DRA
    on nodes that lack it when a DeviceClass maps it; the policy says what each pool advertises
    (``nodePools.<pool>.advertises``). So a legacy-stage Pod asking for a DRA-mapped name the device-plugin
    nodes lack goes to the ``dra`` pool. The webhook adds a required node affinity, ANDed into every
    nodeSelectorTerm and never duplicated.

    Pods that ask for no policy resource are left alone; a Pod whose own nodeSelector or affinity rules
    the pool out gets a finding instead of a silent rewrite. DaemonSets and their Pods are never steered
    (``placement.per_node``).
    """
    policy = ctx.policy
    pools = policy.spec.nodePools
    marker = policy.key(NODE_POOL_ANNOTATION)
    mutated: dict[str, Any] | None = None
    findings: list[Finding] = []
    if not _steerable(obj, ctx):
        return Outcome(findings)
    for ref in examined_templates(obj, ctx):
        u = usage_of(ref.spec_as_run(obj), policy, ctx.memo)
        want = plan(u, ctx.stage, policy).pool
        findings += _other_scheduler(ref, u, want, ctx)
        pool = getattr(pools, want) if want else None
        if pool is not None and ref.spec(obj).get("nodeName"):
            findings.append(_bound(ref, str(ref.spec(obj)["nodeName"]), want, pool.nodeSelector))
            continue
        if pool is None:
            continue
        assert want is not None
        prev_name = metadata_annotations(ref.template(obj)).get(marker)
        prev_pool = getattr(pools, prev_name, None) if prev_name in ("dra", "devicePlugin") else None
        previous = prev_pool.nodeSelector if prev_pool is not None and prev_name != want else None
        work = _steering_copy(ref.template(obj) if ref.path else {
            "metadata": obj.get("metadata") or {}, "spec": obj["spec"]})
        changed, conflict = steer(work, pool.nodeSelector, want, marker, previous)
        if conflict:
            wanted = ", ".join(f"{k}={v}" for k, v in pool.nodeSelector.items())
            findings.append(
                Finding(
                    ids.STEER_NODE_POOL,
                    _clip(f"{ref.where()}Pod selects {conflict}, which rules out the {want} node pool ({wanted})"),
                    f"remove that constraint: the webhook steers GPU Pods to the {want} pool itself",
                    (field_path(ref.at("spec", "affinity")), field_path(ref.at("spec", "nodeSelector"))),
                )
            )
            continue
        if not changed:
            continue
        if mutated is None:
            mutated = dict(obj)  # copy-on-write: only the containers above the template are new
        if ref.path:
            parent = private_path(mutated, ref.path[:-1])
            parent[ref.path[-1]] = work
        else:
            mutated["spec"] = work["spec"]
            if work.get("metadata") or "metadata" in mutated:
                mutated["metadata"] = work["metadata"]
    return Outcome(findings, mutated)
