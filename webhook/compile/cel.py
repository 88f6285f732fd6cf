"""CEL text for the compiled admission policies: literals, namespace globs, label selectors, resource counts.

Everything here returns CEL source as a string. The expressions run in the API server's CEL environment for
admission policies (kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/cel/environment/base.go): optional
types (``.?field``, ``[?key]``, ``orValue``), the ``quantity`` library (``library/quantity.go``), the
Kubernetes list functions (``sum``, ``max``, ``library/lists.go``), ``ext.Strings`` (``join``) and two-variable
comprehensions (``transformList``). ``matches`` is RE2 and unanchored, so every regex here is anchored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from webhook.policy.model import LabelSelector


def lit(text: str) -> str:
    """A CEL string literal for ``text`` (single quotes; backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def str_list(items: Iterable[str]) -> str:
    """A CEL list of string literals; an empty one typed ``list(string)`` (``[]`` alone is not, and ``n in []``
    then fails the API server's compile step)."""
    listed = [lit(i) for i in items]
    return "[" + ", ".join(listed) + "]" if listed else "[''].filter(x, false)"


def glob_regex(patterns: Sequence[str]) -> str:
    """An anchored RE2 regex matching what ``fnmatch.fnmatchcase`` matches for any of ``patterns``.

    The same globs as ``CompiledPolicy`` (``*`` any run, ``?`` one character, ``[seq]``, ``[!seq]``); RE2 has
    no ``\\Z``, so the anchors are ``^`` and ``$``.
    """
    return "^(?:" + "|".join(_glob_one(p) for p in patterns) + ")$"


def _glob_one(pattern: str) -> str:
    """One glob as RE2, the way Python 3.11 ``fnmatch.translate`` reads it (whose output RE2 cannot take)."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        ch = pattern[i]
        i += 1
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = i + 1 if i < n and pattern[i] == "!" else i
            j = pattern.find("]", j + 1 if j < n and pattern[j] == "]" else j)
            if j < 0:
                out.append(re.escape(ch))
                continue
            out.append(_glob_class(pattern, i, j))
            i = j + 1
        else:
            out.append(re.escape(ch))
    return "".join(out)


def _glob_class(pattern: str, i: int, j: int) -> str:
    """``[...]`` between ``i`` and ``j`` as ``fnmatch.translate`` reads it: reversed ranges dropped, ``!`` negates,
    an empty set matches nothing (``\\b\\B``: RE2 has no lookahead) and a negated empty one any character."""
    if "-" not in pattern[i:j]:
        chunks = [pattern[i:j]]
    else:
        chunks, k = [], i + 2 if pattern[i] == "!" else i + 1
        while (k := pattern.find("-", k, j)) >= 0:
            chunks.append(pattern[i:k])
            i, k = k + 1, k + 3
        if pattern[i:j]:
            chunks.append(pattern[i:j])
        else:
            chunks[-1] += "-"
        for k in range(len(chunks) - 1, 0, -1):
            if chunks[k - 1][-1] > chunks[k][0]:
                chunks[k - 1] = chunks[k - 1][:-1] + chunks[k][1:]
                del chunks[k]
    stuff = "-".join(re.sub(r"([\\\-\[&~|^])", r"\\\1", c) for c in chunks)
    if not stuff:
        return "\\b\\B"
    if stuff == "!":
        return "."
    return "[^" + stuff[1:] + "]" if stuff[0] == "!" else "[" + stuff + "]"


def selector(sel: LabelSelector, labels: str) -> str:
    """CEL that is true when the map ``labels`` matches ``sel`` (matchLabels AND matchExpressions).

    The operators' meaning is ``CompiledSelector.matches`` (and metav1 ``LabelSelectorAsSelector``): NotIn and
    DoesNotExist also match a missing key.
    """
    terms = [f"({lit(k)} in {labels} && {labels}[{lit(k)}] == {lit(v)})" for k, v in sel.matchLabels.items()]
    for e in sel.matchExpressions:
        key = lit(e.key)
        if e.operator == "In":
            terms.append(f"({key} in {labels} && {labels}[{key}] in {str_list(e.values)})")
        elif e.operator == "NotIn":
            terms.append(f"(!({key} in {labels}) || !({labels}[{key}] in {str_list(e.values)}))")
        elif e.operator == "Exists":
            terms.append(f"({key} in {labels})")
        else:  # DoesNotExist
            terms.append(f"!({key} in {labels})")
    return " && ".join(terms) if terms else "true"


def quantity_of(container: str, name: str, key: str | None = None) -> str:
    """A container's quantity of resource ``name`` as the webhook reads it: the request, else the limit, else 0.

    Same as ``objects.container_extended`` (a limit without a request counts as the request). ``key``: CEL for
    the name instead (a comprehension variable).
    """
    key = key or lit(name)
    return (f"quantity({container}.?resources.?requests[?{key}]"
            f".orValue({container}.?resources.?limits[?{key}].orValue('0')))")


def names(container: str, name: str, key: str | None = None) -> str:
    """True when the container has ``name`` in its requests or limits: checked before any ``quantity()`` parse,
    the costly step, so a container without the name parses nothing (bench/results.md, issue 28 item 5)."""
    key = key or lit(name)
    return f"({container}.?resources.?requests[?{key}].hasValue() || {container}.?resources.?limits[?{key}].hasValue())"


def asks_for(container: str, name: str, key: str | None = None) -> str:
    """True when the container asks for more than zero of ``name`` (``objects.requested_names``)."""
    return f"({names(container, name, key)} && {quantity_of(container, name, key)}.isGreaterThan(quantity('0')))"


def count_of(container: str, names_: Sequence[str]) -> str:
    """The container's device count over ``names_`` added up (extended resources are integers: API validation)."""
    return " + ".join(f"({names(container, n)} ? {quantity_of(container, n)}.asInteger() : 0)" for n in names_)


def clip(expr: str, limit: int) -> str:
    """``rules.pods._clip`` in CEL: at most ``limit`` characters, the last three ``...`` when cut."""
    return (f"(size({expr}) <= {limit} ? {expr} : {expr}.substring(0, {limit - 3}) + '...')")
