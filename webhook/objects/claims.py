"""Helpers over raw ResourceClaim / ResourceClaimTemplate / DeviceClass dicts (resource.k8s.io/v1).

The claim rules all walk the same structure: ``spec.devices`` of a claim (``spec.spec.devices`` of a
template), each request's ``exactly`` and each ``firstAvailable`` subrequest, their CEL selectors and
tolerations, and the claim-level constraints. Walking it in one place keeps the JSON paths in findings
identical across rules (``spec.devices.requests[1].firstAvailable[0].deviceClassName``).

The iterators yield live references into the object they were given: rules that only read pass the
request object; a mutating rule passes its deep copy and edits what it gets back.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.objects.jsonish import as_dict as _dict
from webhook.objects.jsonish import as_list as _list
from webhook.objects.jsonish import metadata_annotations

SCHEDULER_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
STANDARD_NUMA_DOMAIN = "resource.kubernetes.io"
STANDARD_NUMA_NAME = "numaNode"
STANDARD_NUMA_ATTRIBUTE = f"{STANDARD_NUMA_DOMAIN}/{STANDARD_NUMA_NAME}"
# The documented maximum ("The maximum number of tolerations is 16", k8s.io/api resource/v1 DeviceRequest and
# DeviceTolerationsMaxLength). validateExactDeviceRequest / validateDeviceSubRequest (kubernetes/kubernetes
# pkg/apis/resource/validation/validation.go, master for 1.37) do not count them, and 1.36.2 accepts 17
# (tests/e2e/test_api_facts_136.py): kept as documented.
MAX_TOLERATIONS_PER_REQUEST = 16
TEMPLATE_KIND = "ResourceClaimTemplate"
CLAIM_KINDS = frozenset({"ResourceClaim", TEMPLATE_KIND})


@dataclass(frozen=True, slots=True)
class RequestSlot:
    """One place that asks for devices: a request's ``exactly`` or one ``firstAvailable`` subrequest.

    ``body`` is the dict holding ``deviceClassName``, ``count``, ``tolerations``...; ``path`` is its JSON
    path (append ``.deviceClassName`` etc.); ``name`` is how the API refers to it (``req`` or ``req/sub``).
    """

    path: str
    name: str
    body: dict[str, Any]
    subrequest: bool


def spec_prefix(kind: str) -> str:
    """Path of the ResourceClaimSpec: ``spec`` for a claim, ``spec.spec`` for a template."""
    return "spec.spec" if kind == TEMPLATE_KIND else "spec"


def claim_spec(obj: Mapping[str, Any], kind: str) -> dict[str, Any]:
    spec = _dict(obj.get("spec"))
    return _dict(spec.get("spec")) if kind == TEMPLATE_KIND else spec


def devices(obj: Mapping[str, Any], kind: str) -> tuple[dict[str, Any], str]:
    """``(spec.devices, its path)``; an empty dict when the claim asks for nothing."""
    return _dict(claim_spec(obj, kind).get("devices")), f"{spec_prefix(kind)}.devices"


def iter_requests(obj: Mapping[str, Any], kind: str) -> Iterator[RequestSlot]:
    """Every ``exactly`` and every ``firstAvailable`` subrequest, in document order.

    A v1beta1-shaped request (fields flat on the request, no ``exactly``) is yielded as the request
    itself, so offline ``check`` of old manifests still sees it; the API server converts to v1 before a
    webhook registered for v1 is called, so live traffic always has ``exactly``.
    """
    devs, base = devices(obj, kind)
    for i, req in enumerate(_list(devs.get("requests"))):
        if not isinstance(req, dict):
            continue
        req_name = str(req.get("name", ""))
        path = f"{base}.requests[{i}]"
        if isinstance(req.get("exactly"), dict):
            yield RequestSlot(f"{path}.exactly", req_name, req["exactly"], False)
        elif "firstAvailable" in req:
            for j, sub in enumerate(_list(req.get("firstAvailable"))):
                if isinstance(sub, dict):
                    name = f"{req_name}/{sub.get('name', '')}"
                    yield RequestSlot(f"{path}.firstAvailable[{j}]", name, sub, True)
        elif "deviceClassName" in req:
            yield RequestSlot(path, req_name, req, False)


INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class BadCount:
    """A request's ``count`` that is no integer: ``field`` (kubectl style), the value as sent."""

    field: str
    value: Any

    def __str__(self) -> str:
        shown = repr(self.value) if isinstance(self.value, str) else str(self.value).lower() \
            if isinstance(self.value, bool) else str(self.value)
        past = isinstance(self.value, int) and not isinstance(self.value, bool)
        return f"{self.field} is {shown}, {'past int64' if past else 'not an integer'}"


def bad_counts(obj: Mapping[str, Any], kind: str) -> list[BadCount]:
    """Request and subrequest ``count`` values the API server refuses when it decodes the claim.

    ``ExactDeviceRequest.Count`` and ``DeviceSubRequest.Count`` are ``int64`` (kubernetes/api ``resource/v1/types.go``,
    read at 426b1b99): the JSON decoder refuses ``99.0``, ``"99"``, ``true`` or a number past int64 ("cannot
    unmarshal ... into Go struct field ... of type int64"), so no webhook ever sees such a claim from the API server,
    and ``check`` must not pass one silently. ``null`` is the field unset. Claims and templates only.
    """
    if kind not in CLAIM_KINDS:
        return []
    out = []
    for slot in iter_requests(obj, kind):
        count = slot.body.get("count")
        if count is None:
            continue
        if isinstance(count, bool) or not isinstance(count, int) or not -INT64_MAX - 1 <= count <= INT64_MAX:
            out.append(BadCount(f"{slot.path}.count", count))
    return out


def iter_cel_selectors(obj: Mapping[str, Any], kind: str) -> Iterator[tuple[str, str]]:
    """``(path, expression)`` of every CEL selector of every request slot."""
    for slot in iter_requests(obj, kind):
        yield from _cel_selectors(slot.body, slot.path)


def iter_device_class_selectors(obj: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(path, expression)`` of a DeviceClass's ``spec.selectors[].cel.expression``."""
    yield from _cel_selectors(_dict(obj.get("spec")), "spec")


def _cel_selectors(holder: Mapping[str, Any], path: str) -> Iterator[tuple[str, str]]:
    for k, sel in enumerate(_list(holder.get("selectors"))):
        expr = _dict(_dict(sel).get("cel")).get("expression")
        if isinstance(expr, str):
            yield f"{path}.selectors[{k}].cel.expression", expr


def iter_constraint_attributes(obj: Mapping[str, Any], kind: str) -> Iterator[tuple[str, str]]:
    """``(path, attribute)`` of every constraint's ``matchAttribute`` / ``distinctAttribute``."""
    devs, base = devices(obj, kind)
    for i, con in enumerate(_list(devs.get("constraints"))):
        for field in ("matchAttribute", "distinctAttribute"):
            attr = _dict(con).get(field)
            if isinstance(attr, str) and attr:
                yield f"{base}.constraints[{i}].{field}", attr


def controller_owner(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true``, if any (there is at most one)."""
    for ref in _list(_dict(obj.get("metadata")).get("ownerReferences")):
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


SCHEDULER_USER = "system:kube-scheduler"
"""The default of the policy's ``spec.schedulerUsernames``."""


def is_scheduler_claim(
    obj: Mapping[str, Any], user: Mapping[str, Any] | None = None,
    schedulers: Collection[str] = (SCHEDULER_USER,),
) -> bool:
    """kube-scheduler's special claim for a Pod on the extended-resource path (docs/dra-1.37.md §7).

    Recognised by the annotation ``resource.kubernetes.io/extended-resource-claim: "true"`` together
    with a controlling Pod owner and no ``pod-claim-name`` annotation: exactly what the scheduler
    writes. Requiring the owner narrows what a user can exempt by copying the annotation (the garbage
    collector deletes a claim whose owner Pod does not exist). When the requester is known (``user``,
    the AdmissionRequest's userInfo), it must be one of ``schedulers`` (the policy's ``schedulerUsernames``:
    kube-scheduler, or a second scheduler's ServiceAccount), so nobody else can exempt a claim from the
    policy by dressing it up as the scheduler's.
    """
    username = (user or {}).get("username")
    if username and username not in schedulers:
        return False
    ann = metadata_annotations(obj)
    if ann.get(SCHEDULER_CLAIM_ANNOTATION) != "true" or POD_CLAIM_NAME_ANNOTATION in ann:
        return False
    owner = controller_owner(obj)
    return owner is not None and owner.get("kind") == "Pod" and owner.get("apiVersion") == "v1"


def template_owner(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """For a claim the resourceclaim controller generated from a template: its controlling owner.

    The controller marks such claims with ``resource.kubernetes.io/pod-claim-name`` and a controller
    ownerReference to the Pod (or PodGroup) it was made for (docs/dra-1.37.md §6).
    """
    if POD_CLAIM_NAME_ANNOTATION not in metadata_annotations(obj):
        return None
    owner = controller_owner(obj)
    if owner is None or owner.get("kind") not in ("Pod", "PodGroup") or not owner.get("name"):
        return None
    return owner


def claim_labels(obj: Mapping[str, Any], kind: str) -> dict[str, str]:
    """Labels that say what a claim is for.

    For a template: the template's own labels overlaid with ``spec.metadata.labels`` (those the
    controller copies onto every generated claim, so they describe the claims the template makes).
    """
    labels = dict(_dict(_dict(obj.get("metadata")).get("labels")))
    if kind == TEMPLATE_KIND:
        labels.update(_dict(_dict(_dict(obj.get("spec")).get("metadata")).get("labels")))
    return labels


def toleration_identity(tol: Mapping[str, Any]) -> tuple[str, str]:
    """``(key, effect)``: two tolerations with the same pair address the same taints."""
    return str(tol.get("key") or ""), str(tol.get("effect") or "")


def normalize_toleration(tol: Mapping[str, Any]) -> tuple[str, str, str, str, int | None]:
    """A comparable form with the API defaults filled in (operator Equal, empty strings)."""
    seconds = tol.get("tolerationSeconds")
    return (
        str(tol.get("key") or ""),
        str(tol.get("operator") or "Equal"),
        str(tol.get("value") or ""),
        str(tol.get("effect") or ""),
        seconds if isinstance(seconds, int) else None,
    )


def describe_toleration(tol: Mapping[str, Any]) -> str:
    """A device toleration in full, API defaults filled in, for messages (issue 24 item 7): every field is named,
    so a reader can tell it from the user's other tolerations, e.g. ``key=(any) operator=Exists value=(none)
    effect=NoExecute tolerationSeconds=(unset: forever)``."""
    key, operator, value, effect, seconds = normalize_toleration(tol)
    if seconds is not None:
        lasts = str(seconds)
    else:
        lasts = "(unset: forever)" if effect in ("", "NoExecute") else "(unset)"
    return (f"key={key or '(any)'} operator={operator} value={value or '(none)'} effect={effect or '(all)'} "
            f"tolerationSeconds={lasts}")


# device.attributes["gpu.example.com"].numa, device.attributes['d']['numaNode'],
# 'numa' in device.attributes["d"]
_ATTR_ACCESS = re.compile(
    r"""attributes\s*\[\s*(?P<q1>["'])(?P<domain>[^"']+)(?P=q1)\s*\]\s*"""
    r"""(?:\.\s*(?P<dot>[A-Za-z_][A-Za-z0-9_]*)|\[\s*(?P<q2>["'])(?P<idx>[^"']+)(?P=q2)\s*\])"""
)
_ATTR_IN = re.compile(
    r"""(?P<q1>["'])(?P<name>[^"']+)(?P=q1)\s+in\s+device\s*\.\s*attributes\s*\[\s*"""
    r"""(?P<q2>["'])(?P<domain>[^"']+)(?P=q2)\s*\]"""
)
# A fully qualified name in a string literal: "gpu.example.com/numa"
_QUALIFIED_LITERAL = re.compile(
    r"""(?P<q>["'])(?P<domain>[a-z0-9][-a-z0-9.]*)/(?P<name>[A-Za-z0-9_.-]+)(?P=q)"""
)


def is_nonstandard_numa(domain: str, name: str) -> bool:
    """A NUMA-looking attribute that is not the standard ``resource.kubernetes.io/numaNode``."""
    return "numa" in name.lower() and (domain, name) != (STANDARD_NUMA_DOMAIN, STANDARD_NUMA_NAME)


def nonstandard_numa_in_cel(expression: str) -> list[str]:
    """Vendor NUMA attributes a CEL expression names, as ``domain/name``, in order, without repeats."""
    found: list[str] = []
    for m in _ATTR_ACCESS.finditer(expression):
        found.append(f"{m['domain']}/{m['dot'] or m['idx']}")
    for m in _ATTR_IN.finditer(expression):
        found.append(f"{m['domain']}/{m['name']}")
    for m in _QUALIFIED_LITERAL.finditer(expression):
        found.append(f"{m['domain']}/{m['name']}")
    out: list[str] = []
    for qualified in found:
        domain, _, name = qualified.partition("/")
        if is_nonstandard_numa(domain, name) and qualified not in out:
            out.append(qualified)
    return out


def is_nonstandard_numa_attribute(attribute: str) -> bool:
    """For a constraint's fully qualified ``matchAttribute`` / ``distinctAttribute``."""
    domain, sep, name = attribute.partition("/")
    if not sep:
        domain, name = "", attribute
    return is_nonstandard_numa(domain, name)
