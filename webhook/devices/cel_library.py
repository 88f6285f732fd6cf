"""The parts of the scheduler's CEL environment for device selectors that ``cel-expr-python`` lacks.

Upstream (kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go, ``newCompiler``
and ``mapper``/``newStringInterfaceMapWithDefault``; tests in compile_test.go at 052bb7dc) builds the
environment from k8s.io/apiserver/pkg/cel/environment's base set. Here:

* ``rewrite_lookups``: ``device.attributes[D]`` and ``device.capacity[D]`` on a domain the device does not
  have give an empty map, as the scheduler's map-with-default ``Find`` does; ``in``, ``size()`` and iteration
  see the real map ("domain-check-negative": ``"no-such-domain" in device.attributes`` is false). Done by
  rewriting the index expression to ``(D in device.X ? device.X[D] : {})`` before compiling (``[?D]``, an
  optional index, gives ``optional.of`` that map: ``Find`` never reports the domain absent). Not covered: a
  lookup through an alias (``cel.bind(m, device.attributes, m["d"])``) or the select form
  ``device.attributes.d``; a missing domain there is an error (unknown), never a wrong "no match".
* ``includes`` (``DRAListTypeAttributes``): a list attribute includes a value when one element equals it, a
  scalar when it equals it (compile_test.go "includes-function-on-*").
* Kubernetes' list library (k8s.io/apiserver/pkg/cel/library/lists.go): ``isSorted``, ``sum``, ``min``,
  ``max`` (not its list ``indexOf``/``lastIndexOf``: the runtime's strings extension owns those names and
  cannot take another overload); ``sets.contains``/``equivalent``/``intersects`` (cel-go ext/sets.go);
  regex ``find``/``findAll`` (library/regex.go; Python ``re`` instead of RE2: the same for the
  expressions selectors use, not for RE2-only or Python-only syntax).
* The IP and CIDR libraries (library/ip.go, cidr.go): ``ip``, ``isIP``, ``family``, ``is*`` tests (Go's
  netip definitions), ``cidr``, ``isCIDR``, ``containsIP``, ``containsCIDR``, ``ip()``, ``masked``,
  ``prefixLength``; zones and IPv4-mapped IPv6 addresses refused as ip.go's ``parseIPAddr`` does.

* Two-variable comprehensions (cel-go ext.TwoVarComprehensions): ``all``, ``exists``, ``existsOne`` and
  ``transformList`` with two variables, rewritten onto the one-variable macros over [index or key, value]
  pairs.

Not available (the selector's answer stays *unknown*, never "no match"): ``transformMap``/``transformMapEntry``,
URLs,
``string(ip)``/``string(cidr)``, and a cost measurement (see ``webhook.devices.selectors`` module docstring).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable
from typing import Any

from cel_expr_python import cel  # type: ignore[import-untyped]

_LOOKUP = re.compile(r"\bdevice\s*\.\s*(attributes|capacity)\s*\[")
_OPEN, _CLOSE = "([{", ")]}"
# cel-go ext.TwoVarComprehensions (in the base environment): X.all(i, v, p), X.exists(...), X.existsOne(...),
# X.transformList(i, v, [filter,] e). transformMap/transformMapEntry build maps and are not rewritten (unknown).
_TWO_VAR = re.compile(r"\.\s*(all|exists|existsOne|transformList)\s*\(")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _string_end(text: str, i: int) -> int:
    """Index just past the string literal starting at ``text[i]`` (a quote, maybe after r/b prefixes)."""
    j = i
    while j < len(text) and text[j] in "rRbB":
        j += 1
    raw = any(c in "rR" for c in text[i:j])
    quote = text[j:j + 3] if text[j:j + 3] in ('"""', "'''") else text[j]
    k = j + len(quote)
    while k < len(text):
        if not raw and text[k] == "\\":
            k += 2
            continue
        if text.startswith(quote, k):
            return k + len(quote)
        k += 1
    raise ValueError("unterminated string literal")


def _is_string_start(text: str, i: int) -> bool:
    if text[i] in "\"'":
        return True
    m = re.match(r"[rRbB]{1,2}[\"']", text[i:i + 3])
    return m is not None and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))


def _close(text: str, i: int) -> int:
    """Index of the bracket closing the one just before ``i``."""
    depth = 1
    while i < len(text):
        c = text[i]
        if _is_string_start(text, i):
            i = _string_end(text, i)
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError("unbalanced brackets")


def _split_args(text: str) -> list[str]:
    """The top-level comma-separated parts of a call's argument text."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if _is_string_start(text, i):
            i = _string_end(text, i)
            continue
        c = text[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return [*parts, text[start:]]


def _two_var(macro: str, names: list[str], bodies: list[str], depth: int) -> str:
    """``.all(i, v, p)`` -> ``.draPairs().all(P, cel.bind(i, P[0], cel.bind(v, P[1], p)))`` (``draPairs``:
    [index, element] of a list, [key, value] of a map), so the one-variable macros do the iterating."""
    pair = f"dra_pair{depth}"

    def bind(body: str) -> str:
        return f"cel.bind({names[0]}, {pair}[0], cel.bind({names[1]}, {pair}[1], {body}))"
    if macro == "transformList":
        if len(bodies) == 2:
            return f".draPairs().filter({pair}, {bind(bodies[0])}).map({pair}, {bind(bodies[1])})"
        return f".draPairs().map({pair}, {bind(bodies[0])})"
    if len(bodies) != 1:
        raise ValueError(f"{macro} takes three arguments")
    return f".draPairs().{'exists_one' if macro == 'existsOne' else macro}({pair}, {bind(bodies[0])})"


def _pairs(container: Any) -> list[list[Any]]:
    if isinstance(container, dict):
        return [[k, v] for k, v in container.items()]
    return [[i, v] for i, v in enumerate(container)]


def rewrite_lookups(expression: str) -> str:
    """``device.attributes[D]`` -> ``(D in device.attributes ? device.attributes[D] : {})`` (and capacity),
    and two-variable comprehensions onto one-variable ones (``_two_var``), outside string literals and
    comments; other text is kept as it is."""
    out, i = [], 0
    while i < len(expression):
        if _is_string_start(expression, i):
            end = _string_end(expression, i)
            out.append(expression[i:end])
            i = end
            continue
        if expression.startswith("//", i):
            end = expression.find("\n", i)
            end = len(expression) if end < 0 else end
            out.append(expression[i:end])
            i = end
            continue
        two = _TWO_VAR.match(expression, i)
        if two:
            end = _close(expression, two.end())
            args = _split_args(expression[two.end():end])
            if len(args) in (3, 4) and all(_IDENT.fullmatch(a.strip()) for a in args[:2]):
                out.append(_two_var(two.group(1), [a.strip() for a in args[:2]],
                                    [rewrite_lookups(a) for a in args[2:]], expression.count("(", 0, i)))
                i = end + 1
                continue
        m = _LOOKUP.match(expression, i)
        if m and (i == 0 or expression[i - 1] not in "._" and not expression[i - 1].isalnum()):
            end = _close(expression, m.end())
            key = rewrite_lookups(expression[m.end():end])
            field = f"device.{m.group(1)}"
            optional = key.lstrip().startswith("?")  # m[?d]: Find gives a present (maybe empty) map
            key = key.lstrip()[1:] if optional else key
            found = f"(({key}) in {field} ? {field}[{key}] : {{}})"
            out.append(f"optional.of{found}" if optional else found)
            i = end + 1
            continue
        out.append(expression[i])
        i += 1
    return "".join(out)


# -- functions -------------------------------------------------------------------------------------------


def _sortable(compare: Callable[[Any, Any], int]) -> Callable[[Any], Any]:
    def cmp(a: Any, b: Any) -> int:
        if isinstance(a, dict):
            return compare(a, b)
        if type(a) is not type(b) and not {type(a), type(b)} <= {int, float}:
            raise ValueError("no such overload")
        return int(a > b) - int(a < b)
    return functools.cmp_to_key(cmp)


def _includes(container: Any, value: Any) -> bool:
    return value in container if isinstance(container, list) else container == value


def _sum(items: list[Any]) -> Any:
    if any(isinstance(x, dict) or isinstance(x, (str, bool)) for x in items):
        raise ValueError("sum: no such overload")
    return sum(items) if items else 0


def _extreme(pick: Callable[..., Any], compare: Callable[[Any, Any], int]) -> Callable[[list[Any]], Any]:
    def run(items: list[Any]) -> Any:
        if not items:
            raise ValueError("min/max of an empty list")
        return pick(items, key=_sortable(compare))
    return run


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex: {exc}") from exc


def _find(text: str, pattern: str) -> str:
    m = _regex(pattern).search(text)
    return m.group(0) if m else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    found = [m.group(0) for m in _regex(pattern).finditer(text)]
    return found if limit < 0 else found[:limit]


def library_functions(fn: Callable[..., Any], compare: Callable[[Any, Any], int]) -> list[Any]:
    """FunctionDecls for ``webhook.devices.selectors._env``; ``compare`` orders two quantities or two semvers."""
    T = cel.Type
    L = T.List(T.DYN)
    key = _sortable(compare)
    kinds = [("string", T.STRING), ("int", T.INT), ("bool", T.BOOL), ("semver", T.Map(T.STRING, T.DYN))]

    def is_sorted(items: list[Any]) -> bool:
        return all(key(a) <= key(b) for a, b in zip(items, items[1:], strict=False))

    return [
        # One overload per element type: the runtime matches no (list, dyn) overload at run time.
        fn("includes", *[(f"dra_includes_list_{n}", T.BOOL, [T.List(t), t], True, _includes) for n, t in kinds],
           *[(f"dra_includes_{n}", T.BOOL, [t, t], True, _includes) for n, t in kinds]),
        fn("draPairs", ("dra_pairs_list", L, [L], True, _pairs),
           ("dra_pairs_map", L, [T.Map(T.DYN, T.DYN)], True, _pairs)),
        fn("isSorted", ("k8s_list_is_sorted", T.BOOL, [L], True, is_sorted)),
        fn("sum", ("k8s_list_sum", T.DYN, [L], True, _sum)),
        fn("min", ("k8s_list_min", T.DYN, [L], True, _extreme(min, compare))),
        fn("max", ("k8s_list_max", T.DYN, [L], True, _extreme(max, compare))),
        fn("sets.contains", ("sets_contains", T.BOOL, [L, L], False, lambda a, b: all(x in a for x in b))),
        fn("sets.equivalent", ("sets_equivalent", T.BOOL, [L, L], False,
                               lambda a, b: all(x in a for x in b) and all(x in b for x in a))),
        fn("sets.intersects", ("sets_intersects", T.BOOL, [L, L], False, lambda a, b: any(x in a for x in b))),
        fn("find", ("k8s_regex_find", T.STRING, [T.STRING, T.STRING], True, _find)),
        fn("findAll", ("k8s_regex_find_all", L, [T.STRING, T.STRING], True, _find_all),
           ("k8s_regex_find_all_n", L, [T.STRING, T.STRING, T.INT], True, _find_all)),
    ]


# -- IP and CIDR (k8s.io/apiserver/pkg/cel/library/ip.go and cidr.go): one-key maps, as quantities are --------

IP_KEY, CIDR_KEY = "@ip", "@cidr"


def _parse_ip(text: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """netip.ParseAddr as ip.go's ``parseIPAddr`` uses it: no zone, no IPv4-mapped IPv6 address."""
    if not isinstance(text, str) or "%" in text:
        raise ValueError(f"IP address {text!r} with zone value is not allowed" if "%" in str(text)
                         else "not an IP")
    addr = ipaddress.ip_address(text)
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return addr


def _parse_cidr(text: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """netip.ParsePrefix as cidr.go uses it: host bits may be set (``ip()`` keeps them, ``masked()`` drops)."""
    if not isinstance(text, str) or "/" not in text or not text.rsplit("/", 1)[1].isdigit():
        raise ValueError(f"network address parse error: {text!r}")
    _parse_ip(text.rsplit("/", 1)[0])
    return ipaddress.ip_interface(text)


def _ip(value: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return _parse_ip(value[IP_KEY] if isinstance(value, dict) and IP_KEY in value else value)


def _cidr(value: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    return _parse_cidr(value[CIDR_KEY] if isinstance(value, dict) and CIDR_KEY in value else value)


def _is_link_local_multicast(value: Any) -> bool:
    a = _ip(value)
    net = "224.0.0.0/24" if a.version == 4 else "ff02::/16"
    return a in ipaddress.ip_network(net) if a.version == 4 else (int(a) >> 112) & 0xFF0F == 0xFF02


def _is_global_unicast(value: Any) -> bool:
    """Go's netip.Addr.IsGlobalUnicast (not Python's is_global: private ranges count as global unicast)."""
    a = _ip(value)
    if a.version == 4 and str(a) in ("0.0.0.0", "255.255.255.255"):
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local)


def _valid(parse: Callable[[Any], Any], text: Any) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


def ip_functions(fn: Callable[..., Any]) -> list[Any]:
    """FunctionDecls of the IP and CIDR libraries (``string(ip)``/``string(cidr)`` excepted)."""
    T = cel.Type
    M = T.Map(T.STRING, T.DYN)
    S, B = T.STRING, T.BOOL
    return [
        fn("ip", ("string_to_ip", M, [S], False, lambda s: {IP_KEY: str(_parse_ip(s))}),
           ("cidr_ip", M, [M], True, lambda c: {IP_KEY: str(_cidr(c).ip)})),
        fn("isIP", ("is_ip", B, [S], False, lambda s: _valid(_parse_ip, s))),
        fn("family", ("ip_family", T.INT, [M], True, lambda a: _ip(a).version)),
        fn("isUnspecified", ("ip_is_unspecified", B, [M], True, lambda a: _ip(a).is_unspecified)),
        fn("isLoopback", ("ip_is_loopback", B, [M], True, lambda a: _ip(a).is_loopback)),
        fn("isLinkLocalMulticast", ("ip_is_link_local_multicast", B, [M], True, _is_link_local_multicast)),
        fn("isLinkLocalUnicast", ("ip_is_link_local_unicast", B, [M], True, lambda a: _ip(a).is_link_local)),
        fn("isGlobalUnicast", ("ip_is_global_unicast", B, [M], True, _is_global_unicast)),
        fn("cidr", ("string_to_cidr", M, [S], False, lambda s: {CIDR_KEY: str(_parse_cidr(s))})),
        fn("isCIDR", ("is_cidr", B, [S], False, lambda s: _valid(_parse_cidr, s))),
        fn("containsIP", ("cidr_contains_ip_string", B, [M, S], True, lambda c, a: _ip(a) in _cidr(c).network),
           ("cidr_contains_ip_ip", B, [M, M], True, lambda c, a: _ip(a) in _cidr(c).network)),
        fn("containsCIDR",
           ("cidr_contains_cidr_string", B, [M, S], True,
            lambda c, o: _cidr(o).network.subnet_of(_cidr(c).network)),  # type: ignore[arg-type]
           ("cidr_contains_cidr", B, [M, M], True,
            lambda c, o: _cidr(o).network.subnet_of(_cidr(c).network))),  # type: ignore[arg-type]
        fn("masked", ("cidr_masked", M, [M], True, lambda c: {CIDR_KEY: str(_cidr(c).network)})),
        fn("prefixLength", ("cidr_prefix_length", T.INT, [M], True, lambda c: _cidr(c).network.prefixlen)),
    ]
