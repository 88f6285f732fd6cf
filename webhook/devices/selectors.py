"""DRA device selectors in CEL, evaluated against the devices of the cluster's ResourceSlices.

The environment follows the scheduler's (kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/
cel/compile.go, read at commit 00faa5e7 and its tests at 052bb7dc: ``newCompiler`` and
``CompilationResult.DeviceMatches``): one variable ``device`` with ``driver``, ``attributes[domain][id]`` and
``capacity[domain][id]`` (a Quantity), plus ``allowMultipleAllocations`` (1.34+, consumable capacity);
unqualified attribute names take the driver as domain (``parseQualifiedName``); looking up a domain the device
does not have gives an empty map while ``in``/``size()``/iteration see the real map (``mapper.Find``; done by
``webhook.devices.cel_library.rewrite_lookups``); version attributes are semvers; list attributes
(``DRAListTypeAttributes``) are lists, with ``includes``. Supported beyond standard CEL: ``cel.bind``
(ext.Bindings), the strings extension (with ``format``), optional types, Kubernetes' Quantity library
(``quantity``, ``isQuantity``, ``compareTo``, ``isGreaterThan``, ``isLessThan``, ``sign``, ``isInteger``,
``asInteger``, ``asApproximateFloat``, ``add``, ``sub``), Semver library (``semver``, ``isSemver``, ``major``,
``minor``, ``patch``, ``compareTo``, ``isGreaterThan``, ``isLessThan``), and webhook/devices/cel_library.py's list,
sets, regex, IP/CIDR functions and two-variable comprehensions. Anything else (``transformMap``, URLs, list
``indexOf``) fails to compile here and the selector's answer is *unknown*, never "no match".

Cost limit (``resourceapi.CELSelectorExpressionMaxCost`` = 1,000,000): the runtime exposes no cost, so none is
measured. It is exact for what the webhook judges: the API server rejects a selector whose worst-case estimate
exceeds the limit ("too complex, exceeds cost limit", validation.go ``validateCELSelector``) before
validating admission runs, and the estimate bounds the runtime cost the scheduler's ``cel.CostLimit`` checks
(tests/e2e/test_satisfiable.py). Not exact offline (``check`` on files): such a selector is evaluated here
although the API server would refuse it.

Runtime: ``cel-expr-python`` (Google's C++ CEL runtime; bench/results.md "CEL runtime" and
docs/cel-runtimes.md have the comparisons). Quantities and semvers travel through CEL as one-key maps
(``{"@quantity": "<exact decimal>"}``) because the runtime cannot carry Python objects; the custom functions
unwrap them.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import orjson
from cel_expr_python import cel  # type: ignore[import-untyped]
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings  # type: ignore[import-untyped]

from webhook.devices.cel_library import ip_functions, library_functions, rewrite_lookups
from webhook.objects.quantity import from_json, parse_quantity  # resource.ParseQuantity, as the CEL library uses it

Q_KEY, V_KEY = "@quantity", "@semver"

# -- Quantity (webhook/objects/quantity.py parses; CEL sees a one-key map) ----------------------------------------


def quantity_value(value: Decimal) -> dict[str, str]:
    """A quantity as a CEL value: equal quantities ("1", "1000m") give equal maps."""
    return {Q_KEY: format(value.normalize(), "f") if value else "0"}


def _q(value: Any) -> Decimal:
    if isinstance(value, dict) and Q_KEY in value:
        return Decimal(value[Q_KEY])
    raise ValueError("not a quantity")


# -- Semver (github.com/blang/semver/v4 as used by k8s.io/apiserver/pkg/cel/library/semverlib.go) ----------

_SEMVER = re.compile(
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


def parse_semver(text: str, normalize: bool = False) -> tuple[int, int, int, tuple[str, ...]]:
    """(major, minor, patch, prerelease parts); ``normalize`` accepts "v1", "1.2" and leading zeros."""
    if normalize and isinstance(text, str):
        # semverlib.go's normalization: an optional "v", missing minor/patch, leading zeros.
        core, rest = re.match(r"^v?([0-9.]*)(.*)$", text, re.S).groups()  # type: ignore[union-attr]
        parts = [p.lstrip("0") or "0" for p in core.split(".")] if core else []
        text = ".".join(parts + ["0"] * (3 - len(parts))) + rest if 0 < len(parts) <= 3 else text
    m = _SEMVER.match(text) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"invalid semver {text!r}")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), pre


def semver_value(text: str, normalize: bool = False) -> dict[str, str]:
    major, minor, patch, pre = parse_semver(text, normalize)
    return {V_KEY: f"{major}.{minor}.{patch}" + (f"-{'.'.join(pre)}" if pre else "")}


def _v(value: Any) -> tuple[int, int, int, tuple[str, ...]]:
    if isinstance(value, dict) and V_KEY in value:
        return parse_semver(value[V_KEY])
    raise ValueError("not a semver")


def _cmp_pre(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """Semver 2.0 precedence of prerelease parts: none > some; numeric < alphanumeric; shorter < longer."""
    if not a or not b:
        return (not a) - (not b)
    for x, y in zip(a, b, strict=False):
        if x == y:
            continue
        if x.isdigit() and y.isdigit():
            return (int(x) > int(y)) - (int(x) < int(y))
        if x.isdigit() != y.isdigit():
            return -1 if x.isdigit() else 1
        return (x > y) - (x < y)
    return (len(a) > len(b)) - (len(a) < len(b))


def _compare(a: Any, b: Any) -> int:
    """compareTo of two quantities or two semvers (the member functions are shared by both types)."""
    if isinstance(a, dict) and Q_KEY in a:
        x, y = _q(a), _q(b)
        return (x > y) - (x < y)
    va, vb = _v(a), _v(b)
    if va[:3] != vb[:3]:
        return (va[:3] > vb[:3]) - (va[:3] < vb[:3])
    return _cmp_pre(va[3], vb[3])


def _q_add(a: Any, b: Any) -> dict[str, str]:
    return quantity_value(_q(a) + (Decimal(b) if isinstance(b, int) else _q(b)))


def _q_sub(a: Any, b: Any) -> dict[str, str]:
    return quantity_value(_q(a) - (Decimal(b) if isinstance(b, int) else _q(b)))


def _as_integer(a: Any) -> int:
    value = _q(a)
    if value != value.to_integral_value() or not -(2**63) <= value < 2**63:
        raise ValueError("cannot convert value to integer")
    return int(value)


def _valid(fn: Any, *args: Any) -> bool:
    try:
        fn(*args)
    except (ValueError, InvalidOperation):
        return False
    return True


def _env() -> Any:
    T = cel.Type
    M = T.Map(T.STRING, T.DYN)  # a quantity or a semver at run time (see the module docstring)

    def fn(name: str, *overloads: tuple[str, Any, list[Any], bool, Any]) -> Any:
        return cel.FunctionDecl(name, [
            cel.Overload(oid, ret, params, is_member=member, impl=impl) for oid, ret, params, member, impl in overloads
        ])

    functions = [
        fn("quantity", ("k8s_quantity", M, [T.STRING], False, lambda s: quantity_value(parse_quantity(s)))),
        fn("isQuantity", ("k8s_is_quantity", T.BOOL, [T.STRING], False, lambda s: _valid(parse_quantity, s))),
        fn("semver", ("k8s_semver", M, [T.STRING], False, semver_value),
           ("k8s_semver_normalize", M, [T.STRING, T.BOOL], False, semver_value)),
        fn("isSemver", ("k8s_is_semver", T.BOOL, [T.STRING], False, lambda s: _valid(parse_semver, s)),
           ("k8s_is_semver_normalize", T.BOOL, [T.STRING, T.BOOL], False, lambda s, n: _valid(parse_semver, s, n))),
        fn("compareTo", ("k8s_compare_to", T.INT, [M, M], True, _compare)),
        fn("isGreaterThan", ("k8s_is_greater_than", T.BOOL, [M, M], True, lambda a, b: _compare(a, b) > 0)),
        fn("isLessThan", ("k8s_is_less_than", T.BOOL, [M, M], True, lambda a, b: _compare(a, b) < 0)),
        fn("major", ("k8s_semver_major", T.INT, [M], True, lambda a: _v(a)[0])),
        fn("minor", ("k8s_semver_minor", T.INT, [M], True, lambda a: _v(a)[1])),
        fn("patch", ("k8s_semver_patch", T.INT, [M], True, lambda a: _v(a)[2])),
        fn("sign", ("k8s_quantity_sign", T.INT, [M], True, lambda a: (_q(a) > 0) - (_q(a) < 0))),
        fn("isInteger", ("k8s_quantity_is_integer", T.BOOL, [M], True, lambda a: _valid(_as_integer, a))),
        fn("asInteger", ("k8s_quantity_as_integer", T.INT, [M], True, _as_integer)),
        fn("asApproximateFloat", ("k8s_quantity_as_float", T.DOUBLE, [M], True, lambda a: float(_q(a)))),
        fn("add", ("k8s_quantity_add", M, [M, M], True, _q_add), ("k8s_quantity_add_int", M, [M, T.INT], True, _q_add)),
        fn("sub", ("k8s_quantity_sub", M, [M, M], True, _q_sub), ("k8s_quantity_sub_int", M, [M, T.INT], True, _q_sub)),
        *library_functions(fn, _compare),
        *ip_functions(fn),
    ]
    return cel.NewEnv(
        variables={"device": T.Map(T.STRING, T.DYN)},
        functions=functions,
        extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings(), ext_optional.ExtOptional()],
    )


_ENV_LOCK = threading.Lock()
_ENV: Any = None
_COMPILED: dict[str, Selector] = {}
COMPILE_CACHE_SIZE = 1024  # distinct selector texts kept compiled (class selectors + recent request selectors)
CARRY = 256  # request selectors re-evaluated ahead of requests when slices change


@dataclass(frozen=True, slots=True)
class Selector:
    """One compiled CEL selector; ``error`` (then ``program`` is None) when it cannot be evaluated here."""

    expression: str
    program: Any
    error: str | None


def compile_selector(expression: str) -> Selector:
    """Compile once; later calls with the same text return the same Selector (bounded cache)."""
    hit = _COMPILED.get(expression)
    if hit is not None:
        return hit
    global _ENV
    with _ENV_LOCK:
        if _ENV is None:
            _ENV = _env()
        try:
            program, error = _ENV.compile(rewrite_lookups(expression)), None
        except (RuntimeError, ValueError) as exc:
            program, error = None, _short(str(exc))
    sel = Selector(expression, program, error)
    if len(_COMPILED) >= COMPILE_CACHE_SIZE:
        _COMPILED.pop(next(iter(_COMPILED)), None)
    _COMPILED[expression] = sel
    return sel


def _short(text: str) -> str:
    first = text.replace("INVALID_ARGUMENT: ", "").strip().splitlines()[0] if text.strip() else "compile error"
    return first if len(first) <= 200 else first[:197] + "..."


# -- devices ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice, as CEL sees it; ``data`` is None when it cannot be (bad version)."""

    name: str
    driver: str
    node: str | None  # the node it is on; None: reachable from several nodes (allNodes, nodeSelector)
    data: Mapping[str, Any] | None
    multiple: bool = False  # allowMultipleAllocations: may be counted more than once


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _attribute(value: Any) -> Any:
    """One DeviceAttribute as CEL sees it; the list forms (``DRAListTypeAttributes``, 1.36+) are CEL lists
    (compile.go ``newCompiler``/``getAttributeValue``; compile_test.go "list-of-int", "list-of-semver")."""
    if not isinstance(value, dict):
        raise ValueError("unsupported attribute value")
    for key in ("int", "bool", "string"):
        if key in value:
            return value[key]
    if "version" in value:
        return semver_value(value["version"])
    for key in ("ints", "bools", "strings"):
        if isinstance(value.get(key), list):
            return list(value[key])
    if isinstance(value.get("versions"), list):
        return [semver_value(v) for v in value["versions"]]
    raise ValueError("unsupported attribute value")


def slice_devices(obj: Mapping[str, Any]) -> tuple[Device, ...]:
    """The devices of one resource.k8s.io/v1 ResourceSlice (never raises on odd input: skips or marks)."""
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, Mapping):
        return ()
    driver = spec["driver"] if isinstance(spec.get("driver"), str) else ""
    node = spec["nodeName"] if isinstance(spec.get("nodeName"), str) and spec["nodeName"] else None
    out = []
    for dev in spec.get("devices") or ():
        if not isinstance(dev, Mapping) or not isinstance(dev.get("name"), str):
            continue
        dev_node = dev.get("nodeName") if isinstance(dev.get("nodeName"), str) and dev.get("nodeName") else node
        try:
            attributes: dict[str, dict[str, Any]] = {}
            for name, value in (dev.get("attributes") or {}).items():
                domain, ident = _qualified(name, driver)
                attributes.setdefault(domain, {})[ident] = _attribute(value)
            capacity: dict[str, dict[str, Any]] = {}
            for name, value in (dev.get("capacity") or {}).items():
                domain, ident = _qualified(name, driver)
                capacity.setdefault(domain, {})[ident] = quantity_value(from_json((value or {}).get("value")))
            data: dict[str, Any] | None = {
                "driver": driver, "attributes": attributes, "capacity": capacity,
                "allowMultipleAllocations": bool(dev.get("allowMultipleAllocations")),
            }
        except (ValueError, AttributeError, TypeError, InvalidOperation):
            data = None  # the scheduler's DeviceMatches fails on it too: unknown, never "no match"
        out.append(Device(dev["name"], driver, dev_node, data, bool(dev.get("allowMultipleAllocations"))))
    return tuple(out)


def evaluate(selector: Selector, device: Device) -> bool | None:
    """True/False as the scheduler would decide for this device; None when unknown (unsupported, error)."""
    if selector.program is None or device.data is None:
        return None
    try:
        result = selector.program.eval(data={"device": device.data}).value()
    except RuntimeError:
        return None
    return result if isinstance(result, bool) else None


# -- the index: per-expression bit masks over every device, per node --------------------------------------


def project_slice(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the view keeps of a ResourceSlice: the fields ``slice_devices`` reads, nothing else.

    Selectors read ``driver``, ``attributes``, ``capacity`` and ``allowMultipleAllocations``; the rule reads
    where each device is (``nodeName`` of the slice or the device; none: shared by several nodes). Everything
    else (metadata, managedFields, pool, taints, counters, capacity request policies) is dropped.
    """
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, Mapping):
        return {}
    devices = []
    for dev in spec.get("devices") or ():
        if not isinstance(dev, Mapping):
            continue
        kept = {k: dev[k] for k in ("name", "nodeName", "attributes", "allowMultipleAllocations") if k in dev}
        capacity = dev.get("capacity")
        if isinstance(capacity, Mapping):
            kept["capacity"] = {n: {"value": v.get("value")} if isinstance(v, Mapping) else v
                                for n, v in capacity.items()}
        elif capacity is not None:
            kept["capacity"] = capacity  # malformed: slice_devices marks the device unknown, as before
        devices.append(kept)
    return {"spec": {k: spec[k] for k in ("driver", "nodeName") if k in spec} | {"devices": devices}}


class _SliceCache:
    """One slice as the index keeps it: the projection as compact JSON (parsed again only to evaluate a
    selector it has not seen), where each device is, and per selector text (true bits, unknown bits)."""

    __slots__ = ("payload", "count", "nodes", "multi", "masks")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        projected = project_slice(obj)
        devices = slice_devices(projected)
        self.payload = bytes(memoryview(orjson.dumps(projected)))  # an exact-size copy: orjson's buffer has slack
        self.count = len(devices)
        self.nodes = tuple(d.node for d in devices)
        self.multi = sum(1 << i for i, d in enumerate(devices) if d.multiple)
        self.masks: dict[str, tuple[int, int]] = {}

    def masks_for(self, selector: Selector) -> tuple[int, int]:
        hit = self.masks.get(selector.expression)
        if hit is None:
            true = unknown = 0
            for i, dev in enumerate(slice_devices(orjson.loads(self.payload))):
                r = evaluate(selector, dev)
                if r is None:
                    unknown |= 1 << i
                elif r:
                    true |= 1 << i
            if len(self.masks) >= 2 * COMPILE_CACHE_SIZE:
                self.masks.clear()
            hit = self.masks[selector.expression] = (true, unknown)
        return hit


def slice_cache(obj: Mapping[str, Any]) -> _SliceCache:
    """What the cluster view keeps per ResourceSlice (its ``keep`` function): the projection, no raw JSON."""
    return _SliceCache(obj)


@dataclass(frozen=True, slots=True)
class Capacity:
    """How many devices could ever serve a request: in the cluster, and at most on one node."""

    possible: int  # devices whose selectors are true or unknown
    per_node: int  # the most of those one node can reach (node-local + shared ones)
    unknown: int  # of ``possible``, devices whose answer is unknown
    multiple: bool  # some possible device allows multiple allocations (a count can reuse it)


class DeviceAnswers(Protocol):
    """What the unsatisfiable-claim rule reads of an index: a ``DeviceIndex``, or one in another process
    (``webhook.cluster.device_client.RemoteIndex``)."""

    @property
    def devices(self) -> int: ...

    def capacity(self, expressions: tuple[str, ...], deadline: float = ...) -> Capacity | None: ...


class DeviceIndex:
    """An immutable snapshot of the cluster's devices, built when slices change (at watch time).

    ``capacity(selectors)`` answers from per-(selector, slice) masks computed once and carried over to the
    next snapshot for slices that did not change; the answer per selector list is cached too.
    """

    def __init__(self, slices: Iterable[_SliceCache]) -> None:
        self.slices = tuple(slices)
        self.devices = sum(s.count for s in self.slices)
        # Each slice's bits start on a byte boundary, so a slice's part of a mask is a byte range
        # (``_per_node``): a node's devices are (slice, bits in that slice), never a mask as wide as the cluster.
        offsets, offset = [], 0
        node_bits: dict[str, list[tuple[int, int]]] = {}
        everything = shared = multi = 0
        for k, s in enumerate(self.slices):
            offsets.append(offset)
            local: dict[str, int] = {}
            for i, node in enumerate(s.nodes):
                if node is None:
                    shared |= 1 << (offset + i)
                else:
                    local[node] = local.get(node, 0) | 1 << i
            for node, bits in local.items():
                node_bits.setdefault(node, []).append((k, bits))
            everything |= ((1 << s.count) - 1) << offset
            multi |= s.multi << offset
            offset += (s.count + 7) // 8 * 8
        self._offsets = tuple(offsets)
        self._node_bits = tuple(tuple(v) for v in node_bits.values())
        self._shared = shared
        self._all = everything
        self._multi = multi
        self._masks: dict[str, tuple[int, int]] = {}
        self._answers: dict[tuple[str, ...], Capacity] = {}
        self._lock = threading.Lock()

    def precompute(self, expressions: Iterable[str]) -> None:
        """Evaluate these selectors against every device now (the watch thread, not a request)."""
        for expr in expressions:
            self._mask(compile_selector(expr), float("inf"))

    def expressions(self) -> list[str]:
        """The most recent selector texts evaluated on this snapshot (carried over to the next one)."""
        return list(self._masks)[-CARRY:]

    def _mask(self, selector: Selector, deadline: float) -> tuple[int, int] | None:
        hit = self._masks.get(selector.expression)
        if hit is not None:
            return hit
        true = unknown = 0
        for s, offset in zip(self.slices, self._offsets, strict=True):
            if time.perf_counter() > deadline:
                return None
            t, u = s.masks_for(selector)
            true |= t << offset
            unknown |= u << offset
        with self._lock:
            if len(self._masks) >= COMPILE_CACHE_SIZE:
                self._masks.pop(next(iter(self._masks)), None)
            self._masks[selector.expression] = (true, unknown)
        return true, unknown

    def _per_node(self, possible: int) -> int:
        """The most of ``possible`` one node reaches: its own devices plus the shared ones."""
        raw = possible.to_bytes((possible.bit_length() + 7) // 8 or 1, "little")
        best = 0
        for parts in self._node_bits:
            n = 0
            for k, bits in parts:
                start = self._offsets[k] // 8
                n += (int.from_bytes(raw[start:start + (self.slices[k].count + 7) // 8], "little") & bits).bit_count()
            best = max(best, n)
        return best + (possible & self._shared).bit_count()

    def capacity(self, expressions: tuple[str, ...], deadline: float = float("inf")) -> Capacity | None:
        """Devices all ``expressions`` (class selectors, then the request's) allow, in order; None past
        ``deadline`` (time.perf_counter()) or when a selector cannot be compiled here."""
        hit = self._answers.get(expressions)
        if hit is not None:
            return hit
        possible = self._all
        sure = possible
        for expr in expressions:
            masks = self._mask(compile_selector(expr), deadline)
            if masks is None:
                return None
            possible &= masks[0] | masks[1]
            sure &= masks[0]
        answer = Capacity(
            possible=possible.bit_count(),
            per_node=self._per_node(possible),
            unknown=(possible & ~sure).bit_count(),
            multiple=bool(possible & self._multi),
        )
        with self._lock:
            if len(self._answers) >= COMPILE_CACHE_SIZE:
                self._answers.pop(next(iter(self._answers)), None)
            self._answers[expressions] = answer
        return answer


def class_selectors(device_class: Mapping[str, Any]) -> list[str]:
    """The CEL expressions of a DeviceClass's spec.selectors, in order."""
    spec = device_class.get("spec") if isinstance(device_class, Mapping) else None
    sels = spec.get("selectors") if isinstance(spec, Mapping) else None
    return [
        s["cel"]["expression"] for s in sels or ()
        if isinstance(s, Mapping) and isinstance(s.get("cel"), Mapping) and isinstance(s["cel"].get("expression"), str)
    ]


def build_index(
    slices: Iterable[Mapping[str, Any] | _SliceCache], classes: Iterable[Mapping[str, Any]], carry: Iterable[str] = ()
) -> DeviceIndex:
    """A snapshot over ``slices`` (raw or already parsed) with every class selector and ``carry`` precomputed."""
    index = DeviceIndex(s if isinstance(s, _SliceCache) else slice_cache(s) for s in slices)
    index.precompute([e for c in classes for e in class_selectors(c)])
    index.precompute(carry)
    return index
