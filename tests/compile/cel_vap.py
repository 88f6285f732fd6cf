"""ValidatingAdmissionPolicies evaluated in-process with ``cel_expr_python``, as the API server's plugin does.

A test double of kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating
(``dispatcher.go`` ``Dispatch``, ``validator.go`` ``Validate``), enough for what ``dra-webhook compile`` writes:

* matching: the policy's ``matchConstraints.resourceRules`` (group, version, operation, resource) and the
  binding's ``matchResources.namespaceSelector`` (matchLabels, matchExpressions) over the namespace's labels
  (with the ``kubernetes.io/metadata.name`` label the API server sets);
* ``matchConditions``: all must be true; an error is a policy error (``failurePolicy``);
* ``variables`` in order, reachable as ``variables.<name>``. The API server evaluates them lazily; here each is
  evaluated in order and one that fails is left out of the ``variables`` map, so an expression that reads it fails
  as it would there (a missing key), and one that does not is unaffected;
* each validation's ``expression``; a false one gives its ``messageExpression`` (else ``message``) under each of
  the binding's ``validationActions``. An error in a validation or its message, with ``failurePolicy: Ignore``,
  lets the request through with no message from that policy (the API server's ``Ignore``).

The CEL environment is the Kubernetes one as far as the compiled text uses it: ``object``, ``oldObject`` (null on
CREATE), ``request``, ``namespaceObject`` (no ``params``, no ``authorizer``: nothing compiled reads them; an
expression that does fails to compile here), the optional types, ``cel.bind``, the strings extension, the quantity
library (``webhook.devices.selectors``), Kubernetes' list library and the two-variable ``transformList``
(``webhook.devices.cel_library``), and cel-go's ``ext.Lists`` ``flatten`` and ``slice`` (defined here).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from cel_expr_python import cel  # type: ignore[import-untyped]
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings  # type: ignore[import-untyped]

from webhook.devices import selectors
from webhook.devices.cel_library import library_functions, rewrite_lookups
from webhook.objects.quantity import parse_quantity

VARIABLES = ("object", "oldObject", "request", "namespaceObject", "variables")


def _flatten(items: list[Any]) -> list[Any]:
    """cel-go ext.Lists ``flatten()``: one level of nested lists taken apart, other elements kept."""
    out: list[Any] = []
    for x in items:
        if isinstance(x, list):
            out.extend(x)
        else:
            out.append(x)
    return out


def _slice(items: list[Any], start: int, end: int) -> list[Any]:
    """cel-go ext.Lists ``slice(start, end)``: an error out of range, as there."""
    if start < 0 or end < start or end > len(items):
        raise ValueError(f"cannot slice({start}, {end}) a list of size {len(items)}")
    return list(items[start:end])


def _as_integer(q: Any) -> int:
    value = Decimal(q[selectors.Q_KEY])
    if value != value.to_integral_value() or abs(value) > 2**63 - 1:
        raise ValueError("cannot convert value to integer")
    return int(value)


def _compare(a: Any, b: Any) -> int:
    x, y = Decimal(a[selectors.Q_KEY]), Decimal(b[selectors.Q_KEY])
    return (x > y) - (x < y)


def _fn(name: str, *overloads: tuple[str, Any, list[Any], bool, Any]) -> Any:
    return cel.FunctionDecl(name, [cel.Overload(oid, ret, params, is_member=member, impl=impl)
                                   for oid, ret, params, member, impl in overloads])


@functools.cache
def env() -> Any:
    """The environment every compiled expression is compiled in (one, shared)."""
    T = cel.Type
    M, L = T.Map(T.STRING, T.DYN), T.List(T.DYN)
    functions = [
        _fn("quantity", ("k8s_quantity", M, [T.STRING], False,
                         lambda s: selectors.quantity_value(parse_quantity(s)))),
        _fn("asInteger", ("k8s_quantity_as_integer", T.INT, [M], True, _as_integer)),
        _fn("compareTo", ("k8s_compare_to", T.INT, [M, M], True, _compare)),
        _fn("isGreaterThan", ("k8s_is_greater_than", T.BOOL, [M, M], True, lambda a, b: _compare(a, b) > 0)),
        _fn("isLessThan", ("k8s_is_less_than", T.BOOL, [M, M], True, lambda a, b: _compare(a, b) < 0)),
        _fn("flatten", ("ext_lists_flatten", L, [L], True, _flatten)),
        _fn("slice", ("ext_lists_slice", L, [L, T.INT, T.INT], True, _slice)),
        *library_functions(_fn, _compare),
    ]
    return cel.NewEnv(variables={n: T.DYN for n in VARIABLES}, functions=functions,
                      extensions=[ext_bindings.ExtBindings(), ext_strings.ExtStrings(), ext_optional.ExtOptional()])


class CelError(Exception):
    """An expression failed to compile or to evaluate."""


@functools.cache
def program(expression: str) -> Any:
    """``expression`` compiled (two-variable comprehensions rewritten first, ``cel_library.rewrite_lookups``)."""
    try:
        return env().compile(rewrite_lookups(expression))
    except (RuntimeError, ValueError) as exc:
        raise CelError(f"compile: {exc}: {expression[:200]}") from None


def evaluate(expression: str, data: Mapping[str, Any]) -> Any:
    """The value of ``expression`` over ``data`` as plain Python; an evaluation error raises CelError."""
    try:
        result = program(expression).eval(data=dict(data))
        if result.type() == cel.Type.ERROR:
            raise CelError(f"eval: {result.plain_value()}")
        return result.plain_value()
    except (RuntimeError, ValueError, TypeError, SystemError) as exc:
        raise CelError(f"eval: {exc}") from None


# ------------------------------------------------------------------------------------------------ matching


def _rule_matches(rule: Mapping[str, Any], group: str, version: str, resource: str, operation: str) -> bool:
    def has(key: str, value: str) -> bool:
        listed = rule.get(key) or []
        return "*" in listed or value in listed
    return (has("apiGroups", group) and has("apiVersions", version) and has("resources", resource)
            and has("operations", operation))


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (absent: everything)."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values or op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels or op == "DoesNotExist" and key in labels:
            return False
    return True


# ------------------------------------------------------------------------------------------------ the plugin

QUANTITY_MAPS = ("limits", "requests", "overhead")


def typed(obj: Any) -> Any:
    """``obj`` as the API server's typed object gives it to CEL: a resource quantity a manifest wrote as a number
    (``nvidia.com/gpu: 1``) is a string (``"1"``), as every ``resource.Quantity`` is in CEL."""
    if isinstance(obj, list):
        return [typed(x) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        if k in QUANTITY_MAPS and isinstance(v, dict):
            v = {n: str(q) if isinstance(q, (int, float)) and not isinstance(q, bool) else q for n, q in v.items()}
        out[k] = typed(v)
    return out



@dataclass(frozen=True, slots=True)
class Request:
    """What the API server gives a policy: the object, the old one (UPDATE), and the request's attributes."""

    group: str
    version: str
    kind: str
    resource: str
    operation: str
    namespace: str
    name: str
    object: dict[str, Any]
    old_object: dict[str, Any] | None
    namespace_labels: dict[str, str]
    username: str = "dra-webhook-test"

    def request(self) -> dict[str, Any]:
        """The ``request`` variable (admission.k8s.io/v1 AdmissionRequest's fields)."""
        gvk = {"group": self.group, "version": self.version, "kind": self.kind}
        return {"kind": gvk, "resource": {"group": self.group, "version": self.version, "resource": self.resource},
                "requestKind": gvk, "name": self.name, "namespace": self.namespace, "operation": self.operation,
                "userInfo": {"username": self.username}, "dryRun": True}

    def labels(self) -> dict[str, str]:
        return {**self.namespace_labels, "kubernetes.io/metadata.name": self.namespace}

    def namespace_object(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace, "labels": self.labels()}}


@dataclass
class Decision:
    """What the compiled policies answered: denied (the first denial's message, as the API server returns it),
    the Warn messages, the Audit messages, and policy errors (ignored: ``failurePolicy: Ignore``)."""

    denials: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    audits: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)  # policies whose matchConditions let the object through

    @property
    def allowed(self) -> bool:
        return not self.denials


@dataclass(frozen=True, slots=True)
class Bound:
    """A ValidatingAdmissionPolicy with its binding."""

    policy: dict[str, Any]
    binding: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.policy["metadata"]["name"])

    def matches(self, req: Request) -> bool:
        rules = self.policy["spec"]["matchConstraints"].get("resourceRules") or []
        if not any(_rule_matches(r, req.group, req.version, req.resource, req.operation) for r in rules):
            return False
        ns = (self.binding["spec"].get("matchResources") or {}).get("namespaceSelector")
        return selector_matches(ns, req.labels())


def bound(objects: list[dict[str, Any]]) -> list[Bound]:
    """Each ValidatingAdmissionPolicy of ``objects`` with its binding, in the given order."""
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    return [Bound(policies[b["spec"]["policyName"]], b) for b in objects
            if b["kind"] == "ValidatingAdmissionPolicyBinding"]


def run(bound_policies: list[Bound], req: Request) -> Decision:
    """Every bound policy on ``req``, as ``Dispatch`` runs them."""
    out = Decision()
    data: dict[str, Any] = {"object": typed(req.object), "oldObject": typed(req.old_object), "request": req.request(),
                            "namespaceObject": req.namespace_object()}
    for b in bound_policies:
        if b.matches(req):
            _one(b, data, out)
    return out


_READS = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")


@functools.cache
def _reads(expression: str) -> tuple[str, ...]:
    """The variables ``expression`` names (``variables.<name>``), in order of first mention."""
    return tuple(dict.fromkeys(_READS.findall(expression)))


class _Lazy:
    """A policy's ``variables``, each evaluated when an expression naming it is evaluated (its own reads first),
    once. One that fails is left out of the map, so an expression reading it fails (a missing key), as the API
    server's lazy evaluation fails only what reads it. (An expression is given every variable it names, also one
    on a branch it does not take: a variable's error is then not an error of the expression.)"""

    def __init__(self, variables: list[dict[str, str]], data: dict[str, Any]) -> None:
        self.texts = {v["name"]: v["expression"] for v in variables}
        self.values: dict[str, Any] = {}
        self.failed: set[str] = set()
        self.data = data

    def _need(self, expression: str) -> None:
        for name in _reads(expression):
            if name in self.values or name in self.failed or name not in self.texts:
                continue
            self._need(self.texts[name])
            try:
                self.values[name] = evaluate(self.texts[name], {**self.data, "variables": self.values})
            except CelError:
                self.failed.add(name)

    def evaluate(self, expression: str) -> Any:
        self._need(expression)
        return evaluate(expression, {**self.data, "variables": self.values})


def _one(b: Bound, data: dict[str, Any], out: Decision) -> None:
    spec = b.policy["spec"]
    try:
        if not all(evaluate(c["expression"], {**data, "variables": {}}) is True
                   for c in spec.get("matchConditions") or []):
            return
    except CelError as exc:
        out.errors.append(f"{b.name}: matchConditions: {exc}")
        return
    out.matched.append(b.name)
    lazy = _Lazy(spec.get("variables") or [], data)
    messages = []
    for i, v in enumerate(spec["validations"]):
        try:
            ok = lazy.evaluate(v["expression"])
            if ok is not True and ok is not False:
                raise CelError(f"not a bool: {ok!r}")
        except CelError as exc:  # failurePolicy Ignore: this validation admits (validator.go, per validation)
            out.errors.append(f"{b.name}: validation {i}: {exc}")
            continue
        if ok:
            continue
        messages.append(_message(v, lazy, b.name, i, out))
    for action in b.binding["spec"]["validationActions"]:
        {"Deny": out.denials, "Warn": out.warnings, "Audit": out.audits}[action].extend(messages)


def _message(v: Mapping[str, Any], lazy: _Lazy, name: str, i: int, out: Decision) -> str:
    """The failed validation's messageExpression; its ``message`` where that fails or gives a blank or multi-line
    string (validator.go), else the expression's text."""
    fallback = v.get("message") or f"failed expression: {v['expression']}"
    if "messageExpression" not in v:
        return str(fallback)
    try:
        message = lazy.evaluate(v["messageExpression"])
    except CelError as exc:
        out.errors.append(f"{name}: messageExpression {i}: {exc}")
        return str(fallback)
    if not isinstance(message, str) or not message.strip() or "\n" in message:
        return str(fallback)
    return message
