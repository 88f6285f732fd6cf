"""Rules on Pods and pod templates: resource names, device counts, allocation paths, node pools.

Each rule walks ``objects.pod_templates`` so the same code judges a Pod and the templates of its
controllers (registration: ``workloads.pod_rule``). Findings name the container and the template;
paths are kubectl-style field paths into the object as received.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from webhook import claim_objects
from webhook.jsonish import metadata_annotations
from webhook.objects import (
    DEVICECLASS_PREFIX,
    ContainerRef,
    PodTemplateRef,
    active_deadlines,
    container_extended,
    extended_requests,
    field_path,
    get_path,
    iter_containers,
    object_name,
    pod_claims,
    pod_labels,
    requested_names,
)
from webhook.patch import clone, private_path
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Resource
from webhook.rules import ids
from webhook.rules.base import Context, Finding, Outcome
from webhook.rules.workloads import AFFINITY, examined_templates, pod_rule, template_writes

MESSAGE_MAX = 199
NODE_POOL_ANNOTATION = "node-pool"
"""``<prefix>/node-pool``: which pool ``steer-node-pool`` added affinity for (``dra`` | ``devicePlugin``).

It lets a later pass (a Pod made from a template steered in an earlier stage, or a workload UPDATE after
the stage moved) replace the webhook's own affinity instead of reporting it as the user's contradiction.
"""


# ---- what a pod spec uses ------------------------------------------------------------------------


def hardware(policy: CompiledPolicy, name: str) -> Resource | None:
    """The policy resource a requested name means: itself, a legacy name, or its class's implicit name."""
    res = policy.resources.get(name) or policy.legacy.get(name)
    if res is None and name.startswith(DEVICECLASS_PREFIX):
        res = policy.by_class.get(name[len(DEVICECLASS_PREFIX) :])
    return res


@dataclass(frozen=True, slots=True)
class Usage:
    """How a pod spec asks for devices under the policy."""

    er: dict[str, Resource]  # requested name -> resource, on the extended-resource path (DRA-servable)
    legacy: dict[str, Resource]  # legacy device-plugin names requested
    claims: tuple[str, ...]  # spec.resourceClaims[].name

    @property
    def gpu(self) -> bool:
        return bool(self.er or self.legacy)

    @property
    def dra_only(self) -> bool:
        """A class's implicit name (``deviceclass.resource.kubernetes.io/<class>``) is requested: only DRA serves
        it, whatever the stage, since no device plugin can advertise a ``kubernetes.io`` name (issue 14 item 2;
        upstream pkg/scheduler/framework/plugins/dynamicresources/extended maps it to the class)."""
        return any(n.startswith(DEVICECLASS_PREFIX) for n in self.er)

    @property
    def uses_devices(self) -> bool:
        return self.gpu or bool(self.claims)


def usage(podspec: Mapping[str, Any], policy: CompiledPolicy) -> Usage:
    er: dict[str, Resource] = {}
    legacy: dict[str, Resource] = {}
    for name in requested_names(podspec):
        if name in policy.legacy:
            legacy[name] = policy.legacy[name]
            continue
        res = hardware(policy, name)
        if res is not None:
            er[name] = res
    claims = tuple(str(c.get("name", "")) for c in pod_claims(podspec))
    return Usage(er, legacy, claims)


def _stage_path(u: Usage, stage: str) -> str | None:
    """docs/design.md §5 ``path`` from the stage alone: the fallback of ``plan`` when no pool can serve the Pod."""
    if u.gpu and u.claims:
        return "mixed"
    if u.legacy and u.dra_only:
        return "mixed"
    if u.legacy:
        return "device-plugin"
    if u.er:
        if stage != "legacy" or all(n.startswith(DEVICECLASS_PREFIX) for n in u.er):
            return "dra-extended-resource"
        return "mixed" if u.dra_only else "device-plugin"
    if u.claims:
        return "dra-claim"
    return None


def _stage_pool(u: Usage, stage: str) -> str | None:
    """Node pool from the stage alone (``plan``'s fallback): ``devicePlugin`` in the legacy stage or when only legacy
    names are requested, ``dra`` otherwise and for a DRA-only name (issue 14 item 2); None for non-GPU Pods."""
    if not u.gpu:
        return None
    if u.dra_only:
        return "dra"
    if stage == "legacy" or _stage_path(u, stage) == "device-plugin":
        return "devicePlugin"
    return "dra"


def pool_path(u: Usage, pool: str, policy: CompiledPolicy) -> str | None:
    """How kube-scheduler serves the Pod's extended resources on a node of ``pool``; None: no node there fits it.

    Per name, as the scheduler decides per node (kubernetes/kubernetes, read on master after v1.36:
    pkg/scheduler/framework/plugins/noderesources/fit.go ``shouldDelegateResourceToDRA`` and
    dynamicresources/extendeddynamicresources.go ``filterExtendedResources``): a name with allocatable > 0 on the
    node is the device plugin's (NodeResourcesFit counts it); one the node lacks (absent or 0) goes to DRA when a
    DeviceClass maps it (``hasDeviceClassMappedExtendedResource``), which needs ResourceSlices: the ``dra`` pool.
    What a pool's nodes advertise is the policy's statement (``CompiledPolicy.advertised``), so the decision is
    the same online and offline (README "Which path, which pool").
    """
    advertised = policy.advertised[pool]
    plugin = dra = False
    for name in (*u.er, *u.legacy):
        if name in advertised:
            plugin = True
        elif name in u.er and pool == "dra":  # mapped: a policy resource's name or a policy class's implicit name
            dra = True
        else:
            return None
    if plugin and dra:
        return "mixed"
    return "device-plugin" if plugin else "dra-extended-resource"


@dataclass(frozen=True, slots=True)
class Plan:
    """Where ``steer-node-pool`` sends a Pod (``pool``) and the ``path`` annotation ``track-rollout`` writes."""

    pool: str | None
    path: str | None


def plan(u: Usage, stage: str, policy: CompiledPolicy) -> Plan:
    """The stage's pool (legacy: ``devicePlugin``, else ``dra``) if it can serve every name the Pod requests, else
    the other pool if that can, with the path the scheduler takes there. A legacy-stage Pod asking for a DRA-mapped
    name the device-plugin nodes do not advertise runs only on the DRA pool, through DRA. When neither pool can
    serve the Pod, the stage decides alone (other rules say what is wrong with it)."""
    if u.gpu:
        order = ("devicePlugin", "dra") if stage == "legacy" else ("dra", "devicePlugin")
        for pool in order:
            path = pool_path(u, pool, policy)
            if path is not None:
                return Plan(pool, "mixed" if u.claims else path)
    return Plan(_stage_pool(u, stage), _stage_path(u, stage))


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
        for name, containers in requested_names(ref.spec(obj)).items():
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
    (``extendedResourceName``). ``deviceclass.resource.kubernetes.io/<class>`` is served only by DRA, so
    such a name whose class does not exist cannot be scheduled anywhere. Without cluster data only the
    policy counts, and the decision says so.
    """
    if ctx.stage != "migrated":
        return Outcome()
    policy = ctx.policy
    findings = []
    lookup = _MappedNames(ctx)
    for ref in examined_templates(obj, ctx):
        for name, containers in requested_names(ref.spec(obj)).items():
            implicit = name[len(DEVICECLASS_PREFIX) :] if name.startswith(DEVICECLASS_PREFIX) else None
            pattern = policy.retires(name) if implicit is None else None
            if hardware(policy, name) is not None or (implicit is None and pattern is None):
                continue  # a policy resource (own rules), or a name outside the migration
            if lookup.maps(name, implicit):
                continue
            offline = lookup.offline(implicit)
            if offline:
                ctx.degraded.append(
                    f"{ids.UNMAPPED_EXTENDED_RESOURCE}: DeviceClasses unknown, only the policy's resources count"
                )
            what, fix = _unmapped_text(name, implicit, pattern, offline, policy)
            findings.append(
                Finding(
                    ids.UNMAPPED_EXTENDED_RESOURCE,
                    _clip(f"{ref.where()}{_who(containers)} {what}"),
                    fix,
                    _resource_paths(ref, containers),
                )
            )
    return Outcome(findings)


class _MappedNames:
    """The cluster's extended-resource mappings and DeviceClasses, asked for once and only when needed."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._looked_up = False
        self._known: Mapping[str, str] | None = None
        self._classes: Mapping[str, Any] | None = None

    def _look_up(self) -> None:
        if not self._looked_up:
            view = self._ctx.view
            self._known, self._classes = view.extended_resource_classes(), view.device_classes()
            self._looked_up = True

    def offline(self, implicit: str | None) -> bool:
        """Whether the data that would judge this name (mappings, or classes for an implicit name) is missing."""
        self._look_up()
        return self._known is None if implicit is None else self._classes is None

    def maps(self, name: str, implicit: str | None) -> bool:
        """Whether a DeviceClass maps ``name`` (or, for an implicit name, the class exists)."""
        self._look_up()
        return (self._known is not None and name in self._known) or (
            implicit is not None and self._classes is not None and implicit in self._classes)


def _unmapped_text(
    name: str, implicit: str | None, pattern: str | None, offline: bool, policy: CompiledPolicy
) -> tuple[str, str]:
    """(what is wrong, how to fix it) for a retired or implicit name nothing maps."""
    if implicit is not None:
        state = "is not known (DeviceClasses unknown)" if offline else "does not exist"
        what = (f"{name}, but DeviceClass {implicit} {state}; only DRA serves this name, "
                "so no node can run the Pod")
        return what, f"create DeviceClass {implicit}, or request an existing class"
    mapper = "no policy resource maps (DeviceClasses unknown)" if offline else (
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
            names = sorted({n for n in requested_names(spec) if group(n) == res_name})
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
    if not isinstance(found, dict):
        why = ctx.view.degraded_reason(kind.lower())
        if why is None:
            why = "not found"  # the view answered: the object does not exist (yet)
        return None, f"{kind} {name}" + (f": {why}" if why else "")
    return {
        str(slot.body["deviceClassName"])
        for slot in claim_objects.iter_requests(found, kind)
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
    for ref in examined_templates(obj, ctx):
        spec = ref.spec(obj)
        u = usage(spec, policy)
        if not (u.gpu and u.claims):
            continue
        if ext is None:
            ext = ctx.view.extended_resource_classes() or {}
        serving: dict[str, Resource] = {}
        for res in {**u.er, **u.legacy}.values():
            serving[res.deviceClassName] = res
            for name in (res.name, *res.legacyNames):
                if name in ext:
                    serving[ext[name]] = res
        for entry in pod_claims(spec):
            classes, why = _claim_classes(ctx, entry)
            if classes is None:
                ctx.degraded.append(f"{ids.MIXED_ALLOCATION}: content of claim {entry.get('name')!r} unknown ({why})")
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
    return Outcome(findings)


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


@pod_rule(ids.TRAINING_JOB_EXTENDED_RESOURCE)
def training_job_extended_resource(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A long training job on the extended-resource path cannot tolerate device taints (advisory).

    The scheduler's claim for an extended resource carries no tolerations and a DeviceClass cannot add
    any (docs/dra-1.37.md §7); and the device-taint eviction controller only follows ``pod.spec.resourceClaims``
    (kubernetes pkg/controller/devicetainteviction/device_taint_eviction.go, podEvictionTime; issue
    kubernetes/kubernetes#141290), so a NoExecute maintenance taint does not move the job at all: it keeps
    running on a device under maintenance. The remediation is a ready ResourceClaimTemplate with the
    policy's ``trainingJobs.deviceTolerations``, which gives a real checkpoint window.
    """
    if ctx.stage == "legacy":
        return Outcome()
    policy = ctx.policy
    findings = []
    for ref in examined_templates(obj, ctx):
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
        for res_name, counts in by_res.items():
            res = policy.resources[res_name]
            snippet = claim_template_snippet(
                object_name(obj), ctx.namespace, res, counts, list(policy.device_tolerations),
                {str(e.get("name")) for e in pod_claims(spec)},
            )
            findings.append(
                Finding(
                    ids.TRAINING_JOB_EXTENDED_RESOURCE,
                    _clip(f"{ref.where()}training job requests {res.name} as an extended resource: no device "
                          "taint moves it, it keeps running on a device under maintenance"),
                    "use a ResourceClaimTemplate with device tolerations instead\n"
                    "# Kubernetes 1.36/1.37 does not evict Pods on the extended-resource path for NoExecute\n"
                    "# device taints (kubernetes/kubernetes#141290): nothing moves the job, it must be drained by\n"
                    "# hand. A claim with these tolerations is evicted after a checkpoint window. Ready to apply:\n"
                    f"{snippet}",
                    _resource_paths(ref, [c for c, _ in counts]),
                    advisory=True,
                )
            )
    return Outcome(findings)


# ---- steer-node-pool (mutate) ---------------------------------------------------------------------

_REQUIRED = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


def _is_exact(expr: Any, key: str, value: str) -> bool:
    return (
        isinstance(expr, dict)
        and expr.get("key") == key
        and expr.get("operator") == "In"
        and expr.get("values") == [value]
    )


def _admits(expr: Mapping[str, Any], value: str) -> bool:
    """Whether a node whose label has ``value`` satisfies the node selector requirement."""
    op, values = expr.get("operator"), expr.get("values") or []
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "Exists":
        return True
    if op == "DoesNotExist":
        return False
    if op in ("Gt", "Lt"):
        try:
            have, bound = int(value), int(values[0])
        except (ValueError, IndexError, TypeError):
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _describe(expr: Mapping[str, Any]) -> str:
    values = expr.get("values") or []
    return f"{expr.get('key')} {expr.get('operator')}" + (f" [{', '.join(map(str, values))}]" if values else "")


def _steer(
    template: dict[str, Any], selector: Mapping[str, str], want: str, marker: str,
    previous: Mapping[str, str] | None,
) -> tuple[bool, str | None]:
    """Merge the pool's labels into every required nodeSelectorTerm of ``template`` (edited in place).

    Returns ``(changed, conflict)``; on a conflict nothing is changed. ``previous`` is the selector of
    the pool named by an existing marker annotation (the webhook's own earlier steering), whose exact
    ``key In [value]`` expressions are removed first.
    """
    spec = template["spec"]
    node_selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), dict) else {}
    old_terms = get_path(spec, (*_REQUIRED, "nodeSelectorTerms"))
    old_terms = old_terms if isinstance(old_terms, list) else []
    terms = _without_previous(old_terms, previous)
    conflict = _conflict(selector, node_selector, terms)
    if conflict is not None:
        return False, conflict
    terms, added = _add_pool(terms, {k: v for k, v in selector.items() if node_selector.get(k) != v})
    changed = terms != old_terms
    if changed:
        _write_terms(spec, terms)
    return _mark(template, marker, want, added, previous) or changed, None


def _without_previous(old_terms: list[Any], previous: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """Copies of the terms without the exact expressions of the ``previous`` pool; a term left empty goes."""
    terms: list[dict[str, Any]] = []
    for term in old_terms:
        term = clone(term) if isinstance(term, dict) else {}
        if previous:
            exprs = [e for e in term.get("matchExpressions") or []
                     if not any(_is_exact(e, k, v) for k, v in previous.items())]
            if len(exprs) != len(term.get("matchExpressions") or []):
                if exprs:
                    term["matchExpressions"] = exprs
                else:
                    term.pop("matchExpressions", None)
                if not term:
                    continue  # a term that held only our earlier steering
        terms.append(term)
    return terms


def _conflict(selector: Mapping[str, str], node_selector: Mapping[str, Any], terms: list[dict[str, Any]]) -> str | None:
    """The Pod's own constraint that rules out a node with the pool's labels, if any."""
    for key, value in selector.items():
        if key in node_selector and node_selector[key] != value:
            return f"nodeSelector {key}={node_selector[key]}"
        for term in terms:
            for expr in term.get("matchExpressions") or []:
                if isinstance(expr, dict) and expr.get("key") == key and not _admits(expr, value):
                    return f"node affinity {_describe(expr)}"
    return None


def _add_pool(terms: list[dict[str, Any]], need: Mapping[str, str]) -> tuple[list[dict[str, Any]], bool]:
    """ANDs ``key In [value]`` for each needed label into every term (one term if none): (terms, added any)."""
    if not need:
        return terms, False
    terms = terms or [{}]
    added = False
    for term in terms:
        exprs = term.setdefault("matchExpressions", [])
        for key, value in need.items():
            if not any(_is_exact(e, key, value) for e in exprs):
                exprs.append({"key": key, "operator": "In", "values": [value]})
                added = True
    return terms, added


def _write_terms(spec: dict[str, Any], terms: list[dict[str, Any]]) -> None:
    if terms:
        node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        required["nodeSelectorTerms"] = terms
    else:
        _drop_required(spec)


def _mark(template: dict[str, Any], marker: str, want: str, added: bool, previous: Mapping[str, str] | None) -> bool:
    """Set the marker to the pool steered to, or drop a stale one once nothing of ours is left; True if changed."""
    current = metadata_annotations(template).get(marker)
    if added and current != want:
        template.setdefault("metadata", {}).setdefault("annotations", {})[marker] = want
        return True
    if not added and current is not None and current != want and previous is not None:
        template["metadata"]["annotations"].pop(marker)
        if not template["metadata"]["annotations"]:
            template["metadata"].pop("annotations")
        return True
    return False


def _drop_required(spec: dict[str, Any]) -> None:
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        return
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, dict):
        return
    node_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    if not node_affinity:
        affinity.pop("nodeAffinity")
    if not affinity:
        spec.pop("affinity")


@pod_rule(ids.STEER_NODE_POOL, phases=("mutate",), mutating=True)
def steer_node_pool(obj: dict[str, Any], ctx: Context) -> Outcome:
    """GPU Pods go to a pool that serves them: the stage's (legacy ``devicePlugin``, else ``dra``), else the other.

    The scheduler serves a name through the device plugin on nodes whose allocatable has it, and through DRA
    on nodes that lack it when a DeviceClass maps it; the policy says what each pool advertises
    (``nodePools.<pool>.advertises``). So a legacy-stage Pod asking for a DRA-mapped name the device-plugin
    nodes lack goes to the ``dra`` pool. The webhook adds a required node affinity, ANDed into every
    nodeSelectorTerm and never duplicated.

    Pods that ask for no policy resource are left alone; a Pod whose own nodeSelector or affinity rules
    the pool out gets a finding instead of a silent rewrite.
    """
    policy = ctx.policy
    pools = policy.spec.nodePools
    marker = policy.key(NODE_POOL_ANNOTATION)
    mutated: dict[str, Any] | None = None
    findings: list[Finding] = []
    if AFFINITY not in template_writes(obj, ctx):
        return Outcome(findings)  # e.g. a started Job: its template is immutable
    for ref in examined_templates(obj, ctx):
        want = plan(usage(ref.spec(obj), policy), ctx.stage, policy).pool
        pool = getattr(pools, want) if want else None
        if pool is None:
            continue
        assert want is not None
        prev_name = metadata_annotations(ref.template(obj)).get(marker)
        prev_pool = getattr(pools, prev_name, None) if prev_name in ("dra", "devicePlugin") else None
        previous = prev_pool.nodeSelector if prev_pool is not None and prev_name != want else None
        work = clone(ref.template(obj)) if ref.path else {
            "metadata": clone(obj.get("metadata") or {}), "spec": clone(obj["spec"])}
        changed, conflict = _steer(work, pool.nodeSelector, want, marker, previous)
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
