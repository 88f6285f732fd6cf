"""Which gated fields an object uses: one check per (gate, kind), ``(obj) -> [JSON path, ...]``.

The checks of the feature-gate catalogue (``webhook.gates.catalogue``, whose table ``GATES`` names them per
gate and kind). Written against the 1.37 wire shapes (resource.k8s.io/v1 ``exactly``/``firstAvailable``,
scheduling.k8s.io v1beta1/v1alpha3) over raw dicts, since offline input may be anything. A field counts as
used when it is present and not null, false or empty: that is also when the API server's drop logic would
change anything. It imports only the raw-object helpers (``webhook.objects``); the catalogue imports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from webhook.objects.jsonish import as_dict as _d
from webhook.objects.jsonish import as_list as _l
from webhook.objects.pods import field_path, pod_templates
from webhook.objects.quantity import from_json

Check = Callable[[dict[str, Any]], list[str]]

# Path shown (and put in Finding.paths) when the kind itself is gated rather than a field.
KIND_PATH = "kind"


# --- helpers over raw dicts (never trust shapes: offline input may be anything) --------------------


def _used(value: Any) -> bool:
    return value is not None and value is not False and value != [] and value != {} and value != ""


def _key(name: str) -> str:
    """Map keys (attribute/capacity names contain dots and slashes) in bracket form."""
    return f'["{name}"]'


def kind_key(obj: dict[str, Any]) -> str:
    api_version = obj.get("apiVersion") or ""
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    kind = obj.get("kind") or ""
    return f"{group}/{kind}" if group else str(kind)


def _at(obj: dict[str, Any], path: str) -> list[str]:
    """[path] when the dotted path (plain keys only) is used."""
    node: Any = obj
    for part in path.split("."):
        node = _d(node).get(part)
    return [path] if _used(node) else []


def kind_itself(obj: dict[str, Any]) -> list[str]:
    return [KIND_PATH]


# --- claims ------------------------------------------------------------------------------------


def _devices(obj: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    spec = _d(obj.get("spec"))
    if obj.get("kind") == "ResourceClaimTemplate":
        return "spec.spec.devices", _d(_d(spec.get("spec")).get("devices"))
    return "spec.devices", _d(spec.get("devices"))


def _request_parts(obj: dict[str, Any], exact_only: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every ``exactly`` and ``firstAvailable[j]`` of a claim or template, with its path."""
    base, devices = _devices(obj)
    for i, req in enumerate(_l(devices.get("requests"))):
        req = _d(req)
        exact = req.get("exactly")
        if isinstance(exact, dict):
            yield f"{base}.requests[{i}].exactly", exact
        if exact_only:
            continue
        for j, sub in enumerate(_l(req.get("firstAvailable"))):
            if isinstance(sub, dict):
                yield f"{base}.requests[{i}].firstAvailable[{j}]", sub


def request_field(name: str, exact_only: bool = False) -> Check:
    def check(obj: dict[str, Any]) -> list[str]:
        return [f"{p}.{name}" for p, part in _request_parts(obj, exact_only) if _used(part.get(name))]

    return check


def claim_consumable(obj: dict[str, Any]) -> list[str]:
    paths = request_field("capacity")(obj)
    base, devices = _devices(obj)
    for i, constraint in enumerate(_l(devices.get("constraints"))):
        if _used(_d(constraint).get("distinctAttribute")):
            paths.append(f"{base}.constraints[{i}].distinctAttribute")
    return paths


def first_available(obj: dict[str, Any]) -> list[str]:
    base, devices = _devices(obj)
    return [
        f"{base}.requests[{i}].firstAvailable"
        for i, req in enumerate(_l(devices.get("requests")))
        if _used(_d(req).get("firstAvailable"))
    ]


_INCLUDES = re.compile(r"\bincludes\s*\(")


def _cel_includes(selectors: Any, base: str) -> list[str]:
    return [
        f"{base}.selectors[{k}].cel.expression"
        for k, sel in enumerate(_l(selectors))
        if _INCLUDES.search(str(_d(_d(sel).get("cel")).get("expression") or ""))
    ]


def claim_list_attrs(obj: dict[str, Any]) -> list[str]:
    paths: list[str] = []
    for p, part in _request_parts(obj):
        paths += _cel_includes(part.get("selectors"), p)
    return paths


def class_list_attrs(obj: dict[str, Any]) -> list[str]:
    return _cel_includes(_d(obj.get("spec")).get("selectors"), "spec")


# --- ResourceSlice -------------------------------------------------------------------------------


def _slice_devices(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for i, dev in enumerate(_l(_d(obj.get("spec")).get("devices"))):
        if isinstance(dev, dict):
            yield f"spec.devices[{i}]", dev


def device_fields(*names: str) -> Check:
    def check(obj: dict[str, Any]) -> list[str]:
        return [f"{p}.{n}" for p, dev in _slice_devices(obj) for n in names if _used(dev.get(n))]

    return check


def slice_partitionable(obj: dict[str, Any]) -> list[str]:
    spec = _d(obj.get("spec"))
    paths = [f"spec.{n}" for n in ("sharedCounters", "perDeviceNodeSelection") if _used(spec.get(n))]
    return paths + device_fields("consumesCounters", "nodeName", "nodeSelector", "allNodes")(obj)


def slice_compat_groups(obj: dict[str, Any]) -> list[str]:
    return [
        f"{p}.consumesCounters[{j}].compatibilityGroups"
        for p, dev in _slice_devices(obj)
        for j, use in enumerate(_l(dev.get("consumesCounters")))
        if _used(_d(use).get("compatibilityGroups"))
    ]


def _capacities(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for p, dev in _slice_devices(obj):
        for name, cap in _d(dev.get("capacity")).items():
            yield f"{p}.capacity{_key(name)}", _d(cap)


def slice_consumable(obj: dict[str, Any]) -> list[str]:
    paths = device_fields("allowMultipleAllocations")(obj)
    return paths + [f"{p}.requestPolicy" for p, cap in _capacities(obj) if _used(cap.get("requestPolicy"))]


def is_fractional(quantity: Any) -> bool:
    """True for a Quantity whose value is not an integer (``500m``, ``0.5``; not ``1.5Gi``, ``1000m``)."""
    try:
        value = from_json(quantity)
    except ValueError:
        return False  # not a quantity at all: the API server rejects it, nothing gated to report
    return value != value.to_integral_value()


def slice_fractional(obj: dict[str, Any]) -> list[str]:
    """Fractional ``requestPolicy.default`` and ``validRange.{min,max,step}``: the range arithmetic the gate changes.

    kubernetes/kubernetes pkg/apis/resource/validation ``validateMultiAllocatableDeviceCapacity`` (tests
    ``fractional-range-gate-disabled-*``, master for 1.37): with the gate off the values are kept and checked
    in whole units, a value below 1 counting as 1; the default is checked against min and step too.
    """
    paths = []
    for p, cap in _capacities(obj):
        policy = _d(cap.get("requestPolicy"))
        if is_fractional(policy.get("default")) and policy.get("validRange") is not None:
            paths.append(f"{p}.requestPolicy.default")
        paths += [
            f"{p}.requestPolicy.validRange.{bound}"
            for bound, value in _d(policy.get("validRange")).items()
            if bound in ("min", "max", "step") and is_fractional(value)
        ]
    return paths


def slice_list_attrs(obj: dict[str, Any]) -> list[str]:
    return [
        f"{p}.attributes{_key(name)}.{form}"
        for p, dev in _slice_devices(obj)
        for name, attr in _d(dev.get("attributes")).items()
        for form in ("bools", "ints", "strings", "versions")
        if _used(_d(attr).get(form))
    ]


# 1.36 spelling kept so a 1.36 policy flags it too; 1.37 renamed it (docs/dra-1.37.md §2.4).
slice_node_allocatable = device_fields("nodeAllocatableResources", "nodeAllocatableResourceMappings")
slice_binding = device_fields("bindsToNode", "bindingConditions", "bindingFailureConditions")


# --- Pod / Job / scheduling.k8s.io -------------------------------------------------------------


def pod_claims_in_group(obj: dict[str, Any]) -> list[str]:
    """Pod claim entries that may resolve to the PodGroup's shared claim (all of them, offline)."""
    spec = _d(obj.get("spec"))
    if not _used(_d(spec.get("schedulingGroup")).get("podGroupName")):
        return []
    return [f"spec.resourceClaims[{i}]" for i, _ in enumerate(_l(spec.get("resourceClaims")))]


def pod_dra(obj: dict[str, Any]) -> list[str]:
    spec = _d(obj.get("spec"))
    paths = _at(obj, "spec.resourceClaims")
    for key in ("initContainers", "containers"):
        for i, c in enumerate(_l(spec.get(key))):
            if _used(_d(_d(c).get("resources")).get("claims")):
                paths.append(f"spec.{key}[{i}].resources.claims")
    return paths


def scheduling_group(obj: dict[str, Any]) -> list[str]:
    """``spec.schedulingGroup`` of every pod template the webhook knows (webhook.objects.pods), the Pod's own too.

    The API server drops it from a Pod (and from the pod template of a built-in workload) with
    GenericWorkload off; a CRD keeps it in its template and the Pods its controller creates lose it.
    """
    return [
        field_path(ref.at("spec", "schedulingGroup"))
        for ref in pod_templates(obj, str(obj.get("kind") or ""))
        if _used(ref.spec(obj).get("schedulingGroup"))
    ]


def _templates(spec: dict[str, Any], base: str) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """Workload pod-group templates and composite templates, nested: (path, template, composite?)."""
    for i, t in enumerate(_l(spec.get("podGroupTemplates"))):
        if isinstance(t, dict):
            yield f"{base}.podGroupTemplates[{i}]", t, False
    for i, t in enumerate(_l(spec.get("compositePodGroupTemplates"))):
        if isinstance(t, dict):
            path = f"{base}.compositePodGroupTemplates[{i}]"
            yield path, t, True
            yield from _templates(t, path)


def workload_field(name: str, composite_too: bool) -> Check:
    def check(obj: dict[str, Any]) -> list[str]:
        return [
            f"{p}.{name}"
            for p, t, composite in _templates(_d(obj.get("spec")), "spec")
            if (composite_too or not composite) and _used(t.get(name))
        ]

    return check


def spec_field(name: str) -> Check:
    return lambda obj: _at(obj, f"spec.{name}")


# kubernetes/kubernetes v1.36 pkg/registry/scheduling/podgroup/strategy.go dropDisabledDisruptionModeField,
# dropDisabledPriorityClassNameField, dropDisabledPriorityField (PodGroupSpec) and
# pkg/registry/scheduling/workload/strategy.go dropDisabledPodGroupTemplatesFields (each podGroupTemplate):
# with WorkloadAwarePreemption off the API server drops them on CREATE (and on UPDATE unless the old object
# used them). v1.36 staging/src/k8s.io/api/scheduling/v1alpha2 types: "available only when the
# WorkloadAwarePreemption feature gate is enabled".
_PREEMPTION_FIELDS = ("disruptionMode", "priorityClassName", "priority")


def podgroup_preemption(obj: dict[str, Any]) -> list[str]:
    return [path for name in _PREEMPTION_FIELDS for path in _at(obj, f"spec.{name}")]


def workload_preemption(obj: dict[str, Any]) -> list[str]:
    return [
        f"spec.podGroupTemplates[{i}].{name}"
        for i, t in enumerate(_l(_d(obj.get("spec")).get("podGroupTemplates")))
        for name in _PREEMPTION_FIELDS
        if _used(_d(t).get(name))
    ]
