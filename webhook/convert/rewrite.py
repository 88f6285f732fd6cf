"""The edits of ``convert_plan`` carried out on a round-trip tree, and the ResourceClaimTemplates they need.

Only the keys that change are touched: a device name leaves ``resources.requests`` / ``limits`` (the map goes when
it empties), a renamed name keeps its place and its comment, ``resources.claims`` and ``spec.resourceClaims`` get
an entry. The generated ResourceClaimTemplate has one request per container with that container's count, the
shape of the claim kube-scheduler itself makes for an extended resource (``container-<i>-request-<j>``,
kubernetes/kubernetes master for 1.37, pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go
``createRequestsAndMappings`` / ``createResourceRequestAndMappings``), named after the container so
``resources.claims[].request`` reads well.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any

from webhook.convert.documents import Tree
from webhook.convert.plan import CLAIMS, RENAME, DeviceAsk, TemplateEdit, claim_names
from webhook.objects.pods import get_path

_NOT_DNS = re.compile(r"[^a-z0-9.-]+")


def dns_label(text: str, limit: int = 63) -> str:
    """``text`` as a DNS label (lower case, ``-`` for anything else), at most ``limit`` characters."""
    out = _NOT_DNS.sub("-", text.lower()).replace(".", "-").strip("-")
    return out[:limit].strip("-") or "devices"


def short_name(resource: str) -> str:
    """``nvidia.com/gpu`` -> ``gpu``: the claim's name in the pod spec."""
    return dns_label(resource.rsplit("/", 1)[-1])


def apply(tree: Tree, edit: TemplateEdit, template_name: str) -> dict[str, Any] | None:
    """Carry out ``edit`` on ``tree.data``; the ResourceClaimTemplate (plain data) the claims form needs."""
    spec = get_path(tree.data, (*edit.ref.path, "spec"))
    if edit.form == RENAME:
        for ask in edit.asks:
            for name in ask.names:
                if name != ask.resource.name:
                    _rename(_resources(spec, ask), name, ask.resource.name)
        return None
    assert edit.form == CLAIMS
    claim = _unique(short_name(edit.asks[0].resource.name), claim_names(spec))
    several = len({a.resource.name for a in edit.asks}) > 1
    requests = []
    for ask in edit.asks:
        request = dns_label(f"{ask.container.name}-{short_name(ask.resource.name)}" if several else ask.container.name)
        resources = _resources(spec, ask)
        for name in ask.names:
            _drop(resources, name)
        resources.setdefault("claims", tree.new([])).append(tree.new({"name": claim, "request": request}))
        exactly: dict[str, Any] = {"deviceClassName": ask.resource.deviceClassName, "allocationMode": "ExactCount",
                                   "count": ask.count}
        if edit.tolerations:
            exactly["tolerations"] = [_ordered(t) for t in edit.tolerations]
        requests.append({"name": request, "exactly": exactly})
    spec.setdefault("resourceClaims", tree.new([])).append(
        tree.new({"name": claim, "resourceClaimTemplateName": template_name}))
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": template_name}, "spec": {"spec": {"devices": {"requests": requests}}}}


_TOLERATION_ORDER = ("key", "operator", "value", "effect", "tolerationSeconds")


def _ordered(toleration: dict[str, Any]) -> dict[str, Any]:
    """A toleration with its keys in the API's order (``DeviceToleration``), as people write them."""
    first = {k: toleration[k] for k in _TOLERATION_ORDER if k in toleration}
    return {**first, **{k: v for k, v in toleration.items() if k not in first}}


def _resources(spec: Any, ask: DeviceAsk) -> MutableMapping[str, Any]:
    container = spec[ask.container.field][ask.container.index]
    resources: MutableMapping[str, Any] = container["resources"]
    return resources


def _rename(resources: MutableMapping[str, Any], old: str, new: str) -> None:
    for key in ("requests", "limits"):
        held = resources.get(key)
        if not isinstance(held, MutableMapping) or old not in held:
            continue
        position = list(held).index(old)
        value = held.pop(old)
        comments = getattr(held, "ca", None)
        insert = getattr(held, "insert", None)
        if insert is not None:
            insert(position, new, value)
        else:
            held[new] = value
        if comments is not None and old in comments.items:
            comments.items[new] = comments.items.pop(old)
            _shift(comments.items[new], len(new) - len(old))


def _shift(tokens: list[Any], by: int) -> None:
    """Move an end-of-line comment with its renamed key, so the gap before it stays as written."""
    token = tokens[2] if len(tokens) > 2 else None
    column = getattr(token, "column", None)
    if isinstance(column, int) and token is not None:
        token.column = max(0, column + by)


def _drop(resources: MutableMapping[str, Any], name: str) -> None:
    for key in ("requests", "limits"):
        held = resources.get(key)
        if isinstance(held, MutableMapping) and name in held:
            del held[name]
            if not held:
                del resources[key]


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name}-{n}" in taken:
        n += 1
    return f"{name}-{n}"


def template_name(base: str, ref_name: str, edit: TemplateEdit, taken: set[str]) -> str:
    """``<object>[-<template>]-<resource>``, unique among ``taken`` (which it joins). A template is named by its
    list entry (JobSet ``workers``) or role (``Worker``), or a policy kind's path by its last step
    (``spec.executor.template``: ``executor``)."""
    label = [p for p in re.split(r"[.\[\]*]+", ref_name) if p and p not in ("spec", "template")][-1:]
    parts = [base or "workload", *label, short_name(edit.asks[0].resource.name)]
    name = _unique(dns_label("-".join(parts), 253), taken)
    taken.add(name)
    return name
