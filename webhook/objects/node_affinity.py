"""Steer a pod template to a node pool: merge the pool's labels into its required node affinity.

``steer-node-pool`` decides the pool (``webhook.policy.placement.plan``); this module edits the template. The
pool's ``key In [value]`` expressions are ANDed into every required nodeSelectorTerm and never duplicated;
the webhook's own earlier steering (named by a marker annotation) is replaced rather than reported; a Pod
whose own nodeSelector or affinity rules the pool out is left unchanged and the conflict is returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.objects.jsonish import metadata_annotations
from webhook.objects.patch import clone
from webhook.objects.pods import get_path

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


def steer(
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
