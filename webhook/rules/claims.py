"""Validation rules for ResourceClaims and ResourceClaimTemplates (docs/design.md §3), and the NUMA check on
DeviceClasses.

Only CREATE is evaluated for claims and templates: their specs are immutable, so every UPDATE is a
status write by the scheduler or a driver, or a finalizer change, and must never be held up.

The scheduler's own claims (``resource.kubernetes.io/extended-resource-claim: "true"``) are never
judged here: kube-scheduler computes their allocation before it creates them, so refusing one only
fails the Pod's binding and retries it forever, and nothing about them is the Pod author's to fix.
Teams steer those Pods with explicit ResourceClaimTemplates instead (see the README).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from webhook.gates.class_mapping import judge_mapping, restart_advice, unserved_until_restart
from webhook.objects.claims import (
    CLAIM_KINDS,
    STANDARD_NUMA_ATTRIBUTE,
    STANDARD_NUMA_DOMAIN,
    TEMPLATE_KIND,
    RequestSlot,
    is_nonstandard_numa_attribute,
    is_scheduler_claim,
    iter_cel_selectors,
    iter_constraint_attributes,
    iter_device_class_selectors,
    iter_requests,
    nonstandard_numa_in_cel,
)
from webhook.objects.pods import DEVICECLASS_PREFIX, field_path, pod_claims
from webhook.policy import rule_ids as ids
from webhook.policy.placement import Usage
from webhook.policy.scope import MigrationScope
from webhook.rules.base import NO_OUTCOME, Context, Finding, Outcome, rule
from webhook.rules.memo import names_of, usage_of
from webhook.rules.workloads import examined_templates, pod_rule

_CLAIM_KINDS = tuple(sorted(CLAIM_KINDS))


def judged(obj: dict[str, Any], ctx: Context) -> bool:
    """Whether claim rules look at this object at all: a CREATE of a claim that is not the scheduler's."""
    return ctx.operation == "CREATE" and not is_scheduler_claim(obj, ctx.user, ctx.policy.scheduler_usernames)


def scoped_requests(obj: dict[str, Any], ctx: Context) -> Iterator[RequestSlot]:
    """Requests and subrequests for a DeviceClass under migration (``webhook.policy.scope``): claims of
    other DRA drivers (CPU, NIC, Neuron) are none of the migration's business and are left alone."""
    scope = ctx.policy.scope
    known = None if scope.everything else ctx.view.device_classes().value
    drivers = scope.drivers_with(known)
    for slot in iter_requests(obj, ctx.kind):
        if scope.covers(slot.body.get("deviceClassName"), known, drivers):
            yield slot


def foreign_claims(podspec: Mapping[str, Any], ctx: Context) -> frozenset[str]:
    """Names of a pod spec's claim entries that the cluster view shows ask only for another driver's devices.

    A claim or template the view cannot produce (offline, not created yet, over budget) counts as the
    migration's, as before: only what the cluster shows is left out. Looked up only for specs with claims.
    """
    scope = ctx.policy.scope
    entries = pod_claims(podspec)
    if scope.everything or not entries:
        return frozenset()
    known = ctx.view.device_classes().value
    drivers = scope.drivers_with(known)
    out: set[str] = set()
    for entry in entries:
        if entry.get("resourceClaimName"):
            kind, found = "ResourceClaim", ctx.view.get_resource_claim(ctx.namespace, str(entry["resourceClaimName"]))
        elif entry.get("resourceClaimTemplateName"):
            kind, found = TEMPLATE_KIND, ctx.view.get_resource_claim_template(
                ctx.namespace, str(entry["resourceClaimTemplateName"]))
        else:
            continue
        slots = list(iter_requests(found.value, kind)) if found.value is not None else []
        if slots and not any(scope.covers(s.body.get("deviceClassName"), known, drivers) for s in slots):
            out.add(str(entry.get("name", "")))
    return frozenset(out)


def scoped_usage(podspec: Mapping[str, Any], ctx: Context) -> Usage:
    """``placement.usage`` without the claims of other DRA drivers (``foreign_claims``): a GPU Pod that also
    has a CPU driver's claim takes the GPU path, not ``mixed``; a Pod with only such claims takes none."""
    u = usage_of(podspec, ctx.policy, ctx.memo)
    if not u.claims:
        return u
    foreign = foreign_claims(podspec, ctx)
    return replace(u, claims=tuple(c for c in u.claims if c not in foreign)) if foreign else u


def _namespace(obj: dict[str, Any], ctx: Context) -> str:
    return ctx.namespace or str((obj.get("metadata") or {}).get("namespace") or "")


def _other_driver_hint(name: Any, scope: MigrationScope, known: Mapping[str, Mapping[str, Any]] | None,
                       drivers: frozenset[str] | None) -> str:
    """For a class outside the migration whose DeviceClass is not known (offline): it may be another driver's
    (CPU, NIC, TPU, memory), which the allowed list above, the migration's own classes, would not fit (issue 45
    item 6)."""
    if scope.covers(name, known, drivers) or (known and name in known):
        return ""
    return (f"; if {name!r} is another DRA driver's class (CPU, NIC, TPU, memory...), it is outside the migration "
            "once the webhook sees its DeviceClass: give check the DeviceClass (in the input or --cluster-objects) "
            "or list the class in claims.allowedDeviceClasses")


@rule(ids.DEVICE_CLASS_NOT_ALLOWED, _CLAIM_KINDS, operations=("CREATE",))
def device_class_not_allowed(obj: dict[str, Any], ctx: Context) -> Outcome:
    """Requests, subrequests and a Pod's implicit class names use a class from ``claims.allowedDeviceClasses``.

    Unset: any class. The implicit names (``deviceclass.resource.kubernetes.io/<class>``) of Pods and pod templates
    are judged by ``implicit_class_not_allowed``.

    Unlike the other claim rules this one also judges requests for classes outside the migration's scope,
    unless the cluster's DeviceClass shows they are another driver's (dra-driver-cpu's ``dra.cpu``): an
    allowlist exists to catch a mistyped or retired class, which offline looks like any unknown class.
    """
    allowed = ctx.policy.allowed_classes
    if allowed is None or not judged(obj, ctx):
        return NO_OUTCOME
    shown = ", ".join(sorted(allowed)) or "(none)"
    scope = ctx.policy.scope
    known = None if scope.everything else ctx.view.device_classes().value
    drivers = scope.drivers_with(known)
    findings = [
        Finding(
            ids.DEVICE_CLASS_NOT_ALLOWED,
            f"request {slot.name!r} uses DeviceClass {slot.body.get('deviceClassName')!r}, "
            "which the migration policy does not allow",
            f"use one of the allowed DeviceClasses: {shown}"
            + _other_driver_hint(slot.body.get("deviceClassName"), scope, known, drivers),
            (f"{slot.path}.deviceClassName",),
        )
        for slot in iter_requests(obj, ctx.kind)
        if slot.body.get("deviceClassName") not in allowed
        and not scope.foreign(slot.body.get("deviceClassName"), known, drivers)
    ]
    return Outcome(findings) if findings else NO_OUTCOME


@pod_rule(ids.DEVICE_CLASS_NOT_ALLOWED)
def implicit_class_not_allowed(obj: dict[str, Any], ctx: Context) -> Outcome:
    """``claims.allowedDeviceClasses`` also covers a class's implicit extended-resource name (issue 24 item 6).

    kube-scheduler serves ``deviceclass.resource.kubernetes.io/<class>`` with the DeviceClass ``<class>``, for
    every class whether or not it sets ``extendedResourceName`` (kubernetes/kubernetes
    ``staging/src/k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache/extendedresourcecache.go``
    ``(*ExtendedResourceCache).updateResourceName2class``: "Always add the default mapping",
    ``resourceapi.ResourceDeviceClassPrefix + newDeviceClass.Name``, read at 0e2e62fb, 1.36/1.37.0; before
    kubernetes/kubernetes#141110, 1.38, an older class that loses its explicit name to a newer one can miss it
    (``webhook/gates/fixes.py``); the prefix is
    ``staging/src/k8s.io/api/resource/v1/types.go`` ``ResourceDeviceClassPrefix``). It allocates the devices through
    a claim of its own, which the claim rules never judge (``judged``), so the Pod asking is where the allowlist
    holds. Classes the cluster view shows are another driver's are left alone, as for claims.
    """
    allowed = ctx.policy.allowed_classes
    if allowed is None:
        return NO_OUTCOME
    scope = ctx.policy.scope
    known: Mapping[str, dict[str, Any]] | None = None
    looked_up = scope.everything
    findings = []
    for ref in examined_templates(obj, ctx):
        for name, containers in names_of(ref.spec(obj), ctx.memo).items():
            cls = name[len(DEVICECLASS_PREFIX):] if name.startswith(DEVICECLASS_PREFIX) else None
            if cls is None or cls in allowed:
                continue
            if not looked_up:  # only for a Pod that asks for a class by its implicit name
                known, looked_up = ctx.view.device_classes().value, True
            if scope.foreign(cls, known, scope.drivers_with(known)):
                continue
            who = ", ".join(f'"{c.name}"' for c in containers[:3]) + (" ..." if len(containers) > 3 else "")
            findings.append(Finding(
                ids.DEVICE_CLASS_NOT_ALLOWED,
                f"{ref.where()}container{'s' if len(containers) > 1 else ''} {who} "
                f"request{'' if len(containers) > 1 else 's'} {name}: DeviceClass not allowed by the policy",
                f"allowed DeviceClasses: {', '.join(sorted(allowed)) or '(none)'}",
                tuple(field_path(ref.at("spec", c.field, c.index, "resources")) for c in containers),
            ))
    return Outcome(findings) if findings else NO_OUTCOME


@rule(ids.DEVICE_COUNT_EXCEEDS, _CLAIM_KINDS, operations=("CREATE",))
def device_count_exceeds(obj: dict[str, Any], ctx: Context) -> Outcome:
    """An ExactCount request (the default mode) asks for more than ``claims.maxDevicesPerRequest``."""
    limit = ctx.policy.spec.claims.maxDevicesPerRequest
    if limit is None or not judged(obj, ctx):
        return NO_OUTCOME
    findings = []
    for slot in scoped_requests(obj, ctx):
        count = slot.body.get("count", 1)
        if (slot.body.get("allocationMode") or "ExactCount") != "ExactCount" or not isinstance(count, int):
            continue
        if count > limit:
            findings.append(
                Finding(
                    ids.DEVICE_COUNT_EXCEEDS,
                    f"request {slot.name!r} asks for {count} devices, above the limit of {limit} per request",
                    f"request at most {limit} devices, or split the work across Pods",
                    (f"{slot.path}.count",),
                )
            )
    return Outcome(findings) if findings else NO_OUTCOME


@rule(ids.ALLOCATION_MODE_ALL, _CLAIM_KINDS, operations=("CREATE",))
def allocation_mode_all(obj: dict[str, Any], ctx: Context) -> Outcome:
    """``allocationMode: All`` takes every matching device on a node; refused unless the policy allows it.

    A request with ``adminAccess: true`` takes nothing from anyone: admin-access claims "ignore all
    ordinary claims to the device with respect to access modes and any resource allocations" and are
    ignored by them (kubernetes/kubernetes ``staging/src/k8s.io/api/resource/v1/types.go``,
    ``ExactDeviceRequest.AdminAccess``, 1.34+ GA). Monitoring agents such as the GPU operator's DCGM
    exporter claim every GPU that way, so it is not refused here; ``admin-access-namespace`` still
    decides where such claims may live.
    """
    if ctx.policy.spec.claims.allowAllocationModeAll or not judged(obj, ctx):
        return NO_OUTCOME
    findings = [
        Finding(
            ids.ALLOCATION_MODE_ALL,
            f"request {slot.name!r} uses allocationMode All, which claims every matching device on the node",
            "use allocationMode ExactCount with an explicit count",
            (f"{slot.path}.allocationMode",),
        )
        for slot in scoped_requests(obj, ctx)
        if slot.body.get("allocationMode") == "All" and slot.body.get("adminAccess") is not True
        and slot.body.get("deviceClassName") not in ctx.policy.spec.claims.allocationModeAllClasses
    ]
    return Outcome(findings) if findings else NO_OUTCOME


@rule(ids.ADMIN_ACCESS_NAMESPACE, _CLAIM_KINDS, operations=("CREATE",))
def admin_access_namespace(obj: dict[str, Any], ctx: Context) -> Outcome:
    """``exactly.adminAccess`` (access to devices in use by others) only in ``claims.adminAccessNamespaces``.

    Subrequests cannot ask for admin access (the API has no such field), so only ``exactly`` counts.
    """
    if not judged(obj, ctx):
        return NO_OUTCOME
    namespace = _namespace(obj, ctx)
    pattern = ctx.policy.admin_namespaces
    if pattern is not None and pattern.fullmatch(namespace):
        return NO_OUTCOME
    allowed = ", ".join(ctx.policy.spec.claims.adminAccessNamespaces) or "(none)"
    findings = [
        Finding(
            ids.ADMIN_ACCESS_NAMESPACE,
            f"request {slot.name!r} asks for adminAccess in namespace {namespace!r}, "
            "which is not an admin-access namespace",
            f"drop adminAccess, or create the claim in an admin-access namespace: {allowed}",
            (f"{slot.path}.adminAccess",),
        )
        for slot in scoped_requests(obj, ctx)
        if not slot.subrequest and slot.body.get("adminAccess") is True
    ]
    return Outcome(findings) if findings else NO_OUTCOME


@rule(ids.NONSTANDARD_NUMA_ATTRIBUTE, _CLAIM_KINDS, operations=("CREATE",))
@rule(ids.NONSTANDARD_NUMA_ATTRIBUTE, ("DeviceClass",), operations=("CREATE", "UPDATE"))
def nonstandard_numa_attribute(obj: dict[str, Any], ctx: Context) -> Outcome:
    """CEL selectors and constraints should align devices on ``resource.kubernetes.io/numaNode``.

    Vendor NUMA attributes (``gpu.example.com/numa``) only match devices of one driver, so a GPU and a
    NIC from different vendors can never be aligned with them. Claims are judged on CREATE only. A
    DeviceClass spec is mutable: on UPDATE only expressions that are new are reported, so a class that
    already has one can still be edited (e.g. to fix it).
    """
    if ctx.kind == "DeviceClass":
        old = {expr for _, expr in iter_device_class_selectors(ctx.old_object or {})}
        new = ctx.operation == "CREATE"
        hits = [(p, e) for p, e in iter_device_class_selectors(obj) if new or e not in old]
        return _numa_findings(hits, [])
    if not judged(obj, ctx) or next(scoped_requests(obj, ctx), None) is None:
        return NO_OUTCOME
    selectors = list(iter_cel_selectors(obj, ctx.kind))
    return _numa_findings(selectors, list(iter_constraint_attributes(obj, ctx.kind)))


def _numa_findings(selectors: list[tuple[str, str]], constraints: list[tuple[str, str]]) -> Outcome:
    findings = []
    for path, expr in selectors:
        for attr in nonstandard_numa_in_cel(expr):
            domain, _, name = attr.partition("/")
            findings.append(
                Finding(
                    ids.NONSTANDARD_NUMA_ATTRIBUTE,
                    f"CEL selector uses the vendor NUMA attribute {attr!r}",
                    f'use device.attributes["{STANDARD_NUMA_DOMAIN}"].numaNode instead of '
                    f'device.attributes["{domain}"].{name}; to keep devices on one NUMA node use a '
                    f"constraint with matchAttribute: {STANDARD_NUMA_ATTRIBUTE}",
                    (path,),
                )
            )
    for path, attr in constraints:
        if is_nonstandard_numa_attribute(attr):
            findings.append(
                Finding(
                    ids.NONSTANDARD_NUMA_ATTRIBUTE,
                    f"constraint aligns devices on the vendor NUMA attribute {attr!r}",
                    f"use {path.rsplit('.', 1)[-1]}: {STANDARD_NUMA_ATTRIBUTE}, the standard name "
                    "(Kubernetes 1.37) under which drivers publish NUMA placement, so devices of "
                    "different drivers can be aligned",
                    (path,),
                )
            )
    return Outcome(findings) if findings else NO_OUTCOME


@rule(ids.DEVICE_CLASS_TAKEOVER, ("DeviceClass",), operations=("CREATE", "UPDATE"))
def device_class_takeover(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A DeviceClass claims the ``extendedResourceName`` of a policy resource (or a legacy name) it does not serve.

    Only one class serves an extended resource: "If two device classes have the same name, then the class
    created later is picked ... If two classes are created at the same time, then the name of the class
    lexicographically sorted first is picked" (kubernetes/kubernetes v1.36
    ``staging/src/k8s.io/api/resource/v1/types.go``, ``DeviceClassSpec.ExtendedResourceName``; the
    scheduler's
    ``staging/src/k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache/extendedresourcecache.go``
    ``(*ExtendedResourceCache).updateResourceName2class`` keeps the newest class, read at 0e2e62fb). A new
    class such as the NVIDIA DRA driver's MIG demo class (``extendedResourceName: nvidia.com/gpu``)
    silently hands every Pod asking for the policy resource devices of another kind. On UPDATE only a
    newly set name is reported. Where the policy's ``kubernetesVersion`` has kubernetes/kubernetes#141103 (1.36,
    1.37.0: webhook/gates/class_mapping.py), taking the name off a class that already has it in the cluster
    leaves the name served by no class until kube-scheduler restarts: the remediation says so.
    """
    if ctx.group != "resource.k8s.io":
        return NO_OUTCOME
    ern = (obj.get("spec") or {}).get("extendedResourceName")
    if not isinstance(ern, str) or not ern:
        return NO_OUTCOME
    if ctx.operation == "UPDATE" and ((ctx.old_object or {}).get("spec") or {}).get("extendedResourceName") == ern:
        return NO_OUTCOME
    policy = ctx.policy
    res = policy.resources.get(ern) or policy.legacy.get(ern)
    name = str((obj.get("metadata") or {}).get("name") or "")
    if res is None or name == res.deviceClassName:
        return NO_OUTCOME
    if ern == res.name:
        message = (f"DeviceClass {name} takes over {ern} from DeviceClass {res.deviceClassName}: Kubernetes "
                   "serves an extended resource with its newest class only")
    else:
        message = (f"DeviceClass {name} takes over {ern}, the device-plugin name of {res.name}: DRA would "
                   "serve it with this class")
    remediation = (f"remove spec.extendedResourceName from {name} (Pods can still request "
                   f"deviceclass.resource.kubernetes.io/{name}), or change the policy to serve {ern} with {name}")
    advice = restart_advice(judge_mapping(None, policy.spec.kubernetesVersion), ern,
                            res.deviceClassName if ern == res.name else "")
    if advice:
        remediation += f"; if {name} already has it in the cluster, then {advice}"
    return Outcome([Finding(ids.DEVICE_CLASS_TAKEOVER, message, remediation, ("spec.extendedResourceName",))])


def _ern(cls: Any) -> Any:
    """A DeviceClass's ``spec.extendedResourceName`` (None when absent or malformed)."""
    spec = cls.get("spec") if isinstance(cls, dict) else None
    return spec.get("extendedResourceName") if isinstance(spec, dict) else None


def _dropped_name(obj: dict[str, Any], ctx: Context) -> str | None:
    """The ``extendedResourceName`` a DeviceClass UPDATE removes or changes, or None."""
    if ctx.group != "resource.k8s.io" or ctx.operation != "UPDATE":
        return None
    before = _ern(ctx.old_object)
    return before if isinstance(before, str) and before and before != _ern(obj) else None


@rule(ids.DEVICE_CLASS_MAPPING_REMOVED, ("DeviceClass",), operations=("UPDATE",))
def device_class_mapping_removed(obj: dict[str, Any], ctx: Context) -> Outcome:
    """A DeviceClass drops an `extendedResourceName` another class shares: unserved until kube-scheduler restarts.

    kubernetes/kubernetes#141103 (1.36, 1.37.0; fixed by #141110 in 1.38.0 only): kube-scheduler's extended-resource
    cache (staging/src/k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache/extendedresourcecache.go
    ``(*ExtendedResourceCache).updateResourceName2class``, read at 0e2e62fb) deletes the old object's names by
    key on an update, whichever class the entry points to, and never re-adds the other class, so removing the
    name from either of two classes (what ``device-class-takeover`` advises) or changing it leaves the name
    served by no class; Pods asking for it stay Pending until kube-scheduler restarts. Judged for the policy's
    ``kubernetesVersion``; with the cluster view, only when another class still names it (alone, the name goes
    away as asked). DELETE of a class does the same (``removeResourceName2class``) but is not sent to the
    webhook (a webhook outage must not block deleting a class): README "Takeover".
    """
    before = _dropped_name(obj, ctx)
    if before is None:
        return NO_OUTCOME
    judgement = judge_mapping(None, ctx.policy.spec.kubernetesVersion)
    if not unserved_until_restart(judgement):
        return NO_OUTCOME
    name = str((obj.get("metadata") or {}).get("name") or "")
    known = ctx.view.device_classes()
    if known.value is not None:
        others = sorted(n for n, c in known.value.items() if n != name and _ern(c) == before)
        if not others:
            return NO_OUTCOME
        shared, keeper = f"DeviceClass {', '.join(others)} also names it", others[0] if len(others) == 1 else ""
    else:
        shared, keeper = "if another DeviceClass also names it", ""
    return Outcome([Finding(
        ids.DEVICE_CLASS_MAPPING_REMOVED,
        f"DeviceClass {name} drops extendedResourceName {before}: {shared}, kube-scheduler then serves {before} "
        "with no class until it restarts, and Pods asking for it stay Pending",
        restart_advice(judgement, before, keeper),
        ("spec.extendedResourceName",),
    )], degraded=(known.reason,) if known.reason else ())
