"""What every compiled admission policy has: the namespace's cohort and stage on one date, exceptions, names,
labels and the binding's namespaces.

CEL in admission has no clock, so the stage of each cohort is worked out here for one day and written into
the policies as a constant per cohort; ``valid_until`` says when that stops being true (a schedule entry or an
exception's expiry), and the objects must be compiled again by then (issue #28 item 2).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.compile.cel import glob_regex, lit, selector
from webhook.compile.layouts import Layout
from webhook.policy.compiled import CompiledCohort, CompiledPolicy
from webhook.policy.delivery import NAME_LABEL, SHIPPED_EXCLUDED

API = "admissionregistration.k8s.io/v1"
FIELD_MANAGER = "dra-webhook-compile"


def valid_until(policy: CompiledPolicy, day: dt.date) -> dt.date | None:
    """The first day after ``day`` on which a cohort's stage or an exception changes, or None."""
    dates = [e.from_ for c in policy.cohorts for e in c.schedule if e.from_ > day]
    dates += [e.expires + dt.timedelta(days=1) for e in policy.exceptions if e.expires and e.expires >= day]
    return min(dates, default=None)


def stage_expression(policy: CompiledPolicy, day: dt.date) -> str:
    """CEL for the namespace's stage on ``day``: the first matching cohort's (``cohort_for``), else the default."""
    default = policy.spec.defaultStage.value
    return _first_cohort(policy, lambda c: lit(c.stage_on(day, default)), lit(default))


def cohort_expression(policy: CompiledPolicy) -> str:
    """CEL for the name of the namespace's cohort (``cohort_for``), ``none`` outside every cohort."""
    return _first_cohort(policy, lambda c: lit(c.name), lit("none"))


def _first_cohort(policy: CompiledPolicy, value: Callable[[CompiledCohort], str], otherwise: str) -> str:
    expr = otherwise
    for cohort, spec in reversed(list(zip(policy.cohorts, policy.spec.cohorts, strict=True))):
        terms = []
        if spec.namespaces.names:
            terms.append(f"variables.ns.matches({lit(glob_regex(spec.namespaces.names))})")
        if spec.namespaces.selector is not None:
            terms.append(f"({selector(spec.namespaces.selector, 'variables.labels')})")
        expr = f"({' || '.join(terms)}) ? {value(cohort)} : {expr}"
    return expr


def named_cohort(policy: CompiledPolicy) -> str:
    """CEL over ``request.namespace`` alone, true when ``stage_expression`` and ``cohort_expression`` decide the
    namespace without its labels: a cohort's name glob matches before any cohort with a label selector is tried, or
    no cohort has one. A matchCondition has no ``namespaceObject`` (``outside_stages``), so what it computes from the
    stage must first read this."""
    expr = "true"
    for spec in reversed(policy.spec.cohorts):
        names = (f"request.namespace.matches({lit(glob_regex(spec.namespaces.names))})"
                 if spec.namespaces.names else "false")
        if spec.namespaces.selector is not None:  # not matched by name: its labels would be read
            expr = names
        elif names != "false" and expr != "true":  # names || expr
            expr = names if expr == "false" else f"{names} || {expr}"
    return expr if expr == "true" else f"({expr})"


def namespace_variables(policy: CompiledPolicy, day: dt.date) -> list[dict[str, str]]:
    """``ns``, ``labels`` (of ``namespaceObject``) and ``stage``: what every compiled policy reads first."""
    return [
        {"name": "ns", "expression": "request.namespace"},
        {"name": "labels", "expression": "namespaceObject.metadata.?labels.orValue({})"},
        {"name": "stage", "expression": stage_expression(policy, day)},
    ]


def container_variables(layout: Layout) -> list[dict[str, str]]:
    """``spec`` (the layout's pod spec) and its ``init``, ``main`` and ``containers`` (init first, as
    ``objects.iter_containers``)."""
    spec = layout.spec()
    return [
        {"name": "spec", "expression": spec},
        {"name": "init", "expression": f"{spec}.?initContainers.orValue([])"},
        {"name": "main", "expression": f"{spec}.containers"},
        {"name": "containers", "expression": "variables.init + variables.main"},
    ]


def excepted(rule: str, policy: CompiledPolicy, day: dt.date) -> list[str]:
    """Namespace globs of the exceptions switching ``rule`` off on ``day`` (``CompiledException.covers``)."""
    return [g for e in policy.spec.exceptions if rule in e.rules and (e.expires is None or day <= e.expires)
            for g in e.namespaces]


def metadata(name: str, policy: CompiledPolicy, day: dt.date, until: dt.date | None) -> dict[str, Any]:
    """Name, our labels, and the policy identity, the date compiled for and the date it is valid until."""
    annotations = {policy.key("policy"): policy.identity, policy.key("compiled-for"): day.isoformat()}
    if until is not None:
        annotations[policy.key("valid-until")] = until.isoformat()
    return {"name": name, "labels": owner_labels(policy), "annotations": annotations}


def owner_labels(policy: CompiledPolicy) -> dict[str, str]:
    """The labels of every object compiled from ``policy``: ``--validate`` prunes by them."""
    return {"app.kubernetes.io/managed-by": FIELD_MANAGER, "app.kubernetes.io/part-of": "dra-migration-webhook",
            "app.kubernetes.io/instance": policy.name[:63].rstrip("-.")}


SHIPPED_NAMESPACES: dict[str, Any] = {"matchExpressions": [
    {"key": NAME_LABEL, "operator": "NotIn", "values": list(SHIPPED_EXCLUDED)}]}
"""The namespaceSelector of every webhook deploy/base installs (``delivery.SHIPPED_EXCLUDED``)."""


@dataclass(frozen=True, slots=True)
class Namespaces:
    """The namespaceSelectors the bindings copy: the validating and the mutating workloads webhook's, so the
    compiled policies see the namespaces the webhook sees (``compile --webhook-config``)."""

    validating: dict[str, Any] = field(default_factory=lambda: dict(SHIPPED_NAMESPACES))
    mutating: dict[str, Any] = field(default_factory=lambda: dict(SHIPPED_NAMESPACES))
    existing: frozenset[str] = frozenset()
    """Names of the namespaces the cluster has (``compile --kubeconfig``, the reconciler's pass): those whose name
    settles their stage are left out of the bindings of policies that do nothing there (``skip_settled``)."""


def binding_spec(name: str, selector: dict[str, Any]) -> dict[str, Any]:
    """The binding's policy and the namespaces it takes (an empty selector: all)."""
    return {"policyName": name, "matchResources": {"namespaceSelector": selector}}


def _named_walk(policy: CompiledPolicy) -> tuple[list[CompiledCohort], bool]:
    """The cohorts a namespace's name alone can place it in, in order (``cohort_for``: the first match wins): up to
    and including the first with a label selector, before the first with no names; and whether a name none of them
    matches is settled in the default stage (no cohort has a label selector)."""
    walked: list[CompiledCohort] = []
    for cohort in policy.cohorts:
        if cohort.names is None:
            return walked, False
        walked.append(cohort)
        if cohort.selector is not None:
            return walked, False
    return walked, True


def settled_stage(policy: CompiledPolicy, day: dt.date, namespace: str) -> str | None:
    """The stage of ``namespace`` on ``day`` when its name alone decides it (``_named_walk``), else None."""
    default = policy.spec.defaultStage.value
    walked, complete = _named_walk(policy)
    for cohort in walked:
        if cohort.names is not None and cohort.names.fullmatch(namespace):
            return cohort.stage_on(day, default)
    return default if complete else None


NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
"""A Namespace's name: an RFC 1123 label (kubernetes v1.36 staging/src/k8s.io/apimachinery/pkg/util/validation/
validation.go ``IsDNS1123Label``), so also a valid label value for ``kubernetes.io/metadata.name``."""


def named_in_policy(policy: CompiledPolicy) -> frozenset[str]:
    """The namespaces the cohorts name exactly: known without asking a cluster. A glob or a name no Namespace can
    have is left out (``NAMESPACE_NAME`` has no glob character): the API server refuses a selector value that is not
    a label value."""
    return frozenset(n for spec in policy.spec.cohorts for n in spec.namespaces.names if NAMESPACE_NAME.fullmatch(n))


MAX_SKIPPED = 5000
"""Names one binding leaves out at most (about 100 KiB): a binding stays far below the API server's request size
limit in a fleet of many thousand namespaces; the ones past it are still skipped by ``stage-in-use``."""


def settled_stages(policy: CompiledPolicy, day: dt.date, existing: frozenset[str]) -> dict[str, str]:
    """Namespace -> its stage on ``day``, for the names (of ``existing`` and ``named_in_policy``) whose name alone
    decides it: worked out once per compile, for every binding's ``skip_settled``."""
    out = {}
    for name in existing | named_in_policy(policy):
        stage = settled_stage(policy, day, name)
        if stage is not None:
            out[name] = stage
    return out


def skip_settled(selector: dict[str, Any], settled: Mapping[str, str], stages: frozenset[str]) -> dict[str, Any]:
    """A binding's ``selector`` that also leaves out the ``settled`` namespaces (``settled_stages``) in a stage
    outside ``stages``, where the policy does nothing. The API server then skips the policy for them at the
    binding's namespaceSelector, before any of its CEL (matchConditions included) runs
    (kubernetes v1.36 staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/dispatcher.go
    ``Dispatch``: ``BindingMatches`` before ``Validate``); its ``stage-in-use`` matchCondition (``outside_stages``)
    still skips a namespace created since, and the list is only ever of names whose stage cannot change before the
    objects' valid-until date. ``kubernetes.io/metadata.name`` is the label the API server sets on every Namespace
    to its name (v1.36 pkg/apis/core/v1/defaults.go ``SetDefaults_Namespace``)."""
    out = sorted(n for n, stage in settled.items() if stage not in stages)[:MAX_SKIPPED]
    if not out:
        return selector
    return {**selector, "matchExpressions": [*(selector.get("matchExpressions") or []),
                                             {"key": NAME_LABEL, "operator": "NotIn", "values": out}]}


def stages_on(policy: CompiledPolicy, day: dt.date) -> frozenset[str]:
    """The stages some namespace can be in on ``day``: the default, and each cohort's."""
    default = policy.spec.defaultStage.value
    return frozenset({default, *(c.stage_on(day, default) for c in policy.cohorts)})


def outside_stages(policy: CompiledPolicy, day: dt.date, stages: frozenset[str]) -> str | None:
    """CEL on ``request.namespace`` alone, true when the namespace's name settles its cohort and that cohort's stage on
    ``day`` is none of ``stages``; None when no name does. A matchCondition has no ``namespaceObject`` (a v1.36.2 API
    server answers ``no such key: metadata``), so labels cannot be read there: the cohorts of ``_named_walk``, and past
    them, when none has a label selector, the default stage. A policy whose validations act in ``stages`` only is then
    skipped for such a namespace before any other CEL runs (bench/results.md, issue 28 item 5); ``skip_settled``
    skips the names known when compiling before even this condition."""
    default = policy.spec.defaultStage.value
    cohorts, complete = _named_walk(policy)
    walked = [(glob_regex(policy.spec.cohorts[c.index].namespaces.names), c.stage_on(day, default) not in stages)
              for c in cohorts]
    any_outside = any(outside for _, outside in walked) or (complete and default not in stages)
    chain = "true" if complete and default not in stages else "false"
    for regex, outside in reversed(walked):
        named = f"request.namespace.matches({lit(regex)})"
        if chain == "false":
            chain = named if outside else "false"
        elif chain == "true":
            chain = "true" if outside else f"!{named}"
        else:
            chain = f"{named} ? {'true' if outside else 'false'} : ({chain})"
    return chain if any_outside else None


@dataclass(frozen=True, slots=True)
class Part:
    """One mutating rule's share of a layout's MutatingAdmissionPolicy (``pod_mutations``, where the rules of one
    layout share a policy so the API server computes the placement plan once per evaluation).

    ``on`` names the variable that is true when the rule acts: ``guard`` (its stages, exceptions) and those of its
    ``conditions`` (its matchConditions as a policy of its own) that the layout's other rules do not share.
    ``before``/``after``: JSONPatch CEL lists, every rule's ``before`` applied ahead of every rule's ``after``;
    ``apply``: an ApplyConfiguration, in a mutation of its own after the patches."""

    rule: str
    on: str
    guard: str
    conditions: list[dict[str, str]]
    variables: list[dict[str, str]]
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    apply: str | None = None


_REFERENCE = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")


def used_variables(variables: list[dict[str, str]], expressions: Iterable[str]) -> list[dict[str, str]]:
    """The ``variables`` that ``expressions`` read, directly or through other variables, in their order. The API
    server builds its lazy map of every declared variable on each evaluation and type-checks each one, so a policy
    declares only what it reads (bench/results.md, issue 28 item 5)."""
    declared = {v["name"]: v["expression"] for v in variables}
    needed: set[str] = set()
    todo = [n for e in expressions for n in _REFERENCE.findall(e)]
    while todo:
        name = todo.pop()
        if name in declared and name not in needed:
            needed.add(name)
            todo += _REFERENCE.findall(declared[name])
    return [v for v in variables if v["name"] in needed]


_MACROS = frozenset({"all", "exists", "exists_one", "existsOne", "map", "filter", "transformList", "transformMap",
                     "transformMapEntry", "sortBy"})
"""Macros and two-variable comprehensions: their arguments run once per element."""

_CHEAP_CALLS = frozenset({"orValue", "hasValue", "size", "has", "dyn", "startsWith"})
"""Calls a cheap expression (``_cheap``) may make: reads and sizes, no regex, quantity, macro or list building."""

_TOKEN = re.compile(r"""'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*"|(?<![\w.])variables\.(?P<name>[A-Za-z_]\w*)"""
                    r"""|(?P<dot>\.\s*)?(?P<id>[A-Za-z_]\w*)\s*(?P<call>\()?|(?P<open>\()|(?P<close>\))""")


def _scan(text: str) -> tuple[list[tuple[str, int, int, bool]], set[str]]:
    """``(name, start, end, in_loop)`` for each ``variables.<name>`` outside string literals, and the functions
    called. ``in_loop``: inside the parentheses of a macro (``_MACROS``), where an inlined expression would be
    evaluated once per element."""
    refs: list[tuple[str, int, int, bool]] = []
    calls: set[str] = set()
    stack: list[bool] = []
    for m in _TOKEN.finditer(text):
        if m.group("name"):
            refs.append((m.group("name"), m.start(), m.end(), any(stack)))
        elif m.group("call"):
            calls.add(m.group("id"))
            stack.append(m.group("dot") is not None and m.group("id") in _MACROS)
        elif m.group("open"):
            stack.append(False)
        elif m.group("close") and stack:
            stack.pop()
    return refs, calls


def _cheap(expression: str) -> bool:
    """An expression that costs less inline, even where it is read several times, than as a variable: the API server
    evaluates each variable as a program of its own (about 10 µs a variable on a v1.36.2 API server, bench/results.md,
    issue 28 item 5), a field read or a comparison far less. No macro, regex, quantity or list function."""
    return len(expression) <= 160 and _scan(expression)[1] <= _CHEAP_CALLS


def _substitute(text: str, values: dict[str, str]) -> str:
    parts, last = [], 0
    for name, start, end, _ in _scan(text)[0]:
        if name in values:
            parts += [text[last:start], values[name]]
            last = end
    return "".join(parts) + text[last:]


_OBJECT_PATH = re.compile(r"(?:object|oldObject|namespaceObject)(?:\.\??\w+|\[\??'[^']*'\])*"
                          r"(?:\.orValue\((?:\[\]|\{\}|'[^']*')\))?$")
"""A path into the object (or namespace): what the API server's type check sees with the schema's types."""


def inline_variables(variables: list[dict[str, str]], expressions: list[str]
                     ) -> tuple[list[dict[str, str]], list[str]]:
    """Fewer variables, the same values: a cheap variable (``_cheap``), and one read once outside any macro, are
    written into what reads them, in parentheses. Every variable is a program the API server evaluates on its own,
    at a fixed cost per variable that outweighs a field read (bench/results.md, issue 28 item 5), and a variable read
    once saves nothing by being named. CEL has no side effects, so the values are the same; an error stays an error
    value where the variable's was. A path into the object goes in as ``dyn(...)``: the API server types a
    variable holding an object (or a list of objects) as dyn (plugin/cel/composition.go, ``convertCelTypeToDeclType``),
    and its type check rejects with the schema's own types what the variable allowed, e.g. ``initContainers +
    containers`` (lists of two schema types). Anything else keeps its type (``dyn`` would break a map literal's
    homogeneous values, e.g. the tracking annotations). Cheap variables go in one round, variables read once in
    the next (so an expensive one is never copied into a cheap one that is then copied several times), until
    neither changes."""
    declared = {v["name"]: v["expression"] for v in variables}
    cheap_round, idle = True, 0
    while idle < 2:
        reads: dict[str, list[bool]] = {}
        for text in [*declared.values(), *expressions]:
            for name, _, _, loop in _scan(text)[0]:
                reads.setdefault(name, []).append(loop)
        picks = [n for n, e in declared.items() if n in reads and
                 (_cheap(e) if cheap_round else reads[n] == [False])]
        cheap_round = not cheap_round
        idle = 0 if picks else idle + 1
        values: dict[str, str] = {}
        for name in picks:  # in declared order: what a variable reads is declared before it
            value = _substitute(declared.pop(name), values)
            values[name] = f"dyn({value})" if _OBJECT_PATH.match(value) else f"({value})"
        if values:
            declared = {n: _substitute(e, values) for n, e in declared.items()}
            expressions = [_substitute(e, values) for e in expressions]
    return [{"name": n, "expression": e} for n, e in declared.items()], expressions


def standalone(expression: str, variables: list[dict[str, str]]) -> str:
    """``expression`` with no variable left, for a matchCondition (the API server evaluates matchConditions without
    the policy's variables: kubernetes v1.36 plugin/policy/matching, ``Matcher.Match`` before any variable). A
    variable that is cheap (``_cheap``), or read once outside any macro, is written in as ``inline_variables`` does;
    any other is computed once, in a one-element comprehension around what reads it (``[dyn(value)].map(b_<name>,
    ...)[0]``: the API server's CEL has no ``cel.bind``), outermost first, so what a bound value reads is bound
    around it. Bound values are computed when the expression reaches them, not lazily: put a cheap test that decides
    most objects before the expression (``a && (standalone)``)."""
    needed = used_variables(variables, [expression])
    reads: dict[str, list[bool]] = {}
    for text in [*(v["expression"] for v in needed), expression]:
        for name, _, _, loop in _scan(text)[0]:
            reads.setdefault(name, []).append(loop)
    values: dict[str, str] = {}
    binds: list[tuple[str, str]] = []
    for v in needed:  # in declared order: what a variable reads is declared before it
        name, value = v["name"], _substitute(v["expression"], values)
        if _cheap(value) or reads.get(name) == [False]:
            values[name] = f"dyn({value})" if _OBJECT_PATH.match(value) else f"({value})"
        else:
            values[name] = f"b_{name}"
            binds.append((name, value))
    body = _substitute(expression, values)
    for name, value in reversed(binds):
        body = f"[dyn({value})].map(b_{name}, {body})[0]"
    return body


def mutating_pairs(policy: CompiledPolicy, day: dt.date, until: dt.date | None, namespaces: dict[str, Any],
                   layouts: Sequence[Any], rule: str,
                   build: Callable[[Any, dict[str, Any]], dict[str, Any]]) -> list[dict[str, Any]]:
    """Per layout (anything with a ``name``): the MutatingAdmissionPolicy ``<policy>-<layout>-<rule>`` that
    ``build(layout, metadata)`` makes, and its binding to ``namespaces``."""
    out = []
    for layout in layouts:
        name = f"{policy.name}-{layout.name}-{rule}.dra-migration.io"
        meta = metadata(name, policy, day, until)
        out += [build(layout, meta), {"apiVersion": API, "kind": "MutatingAdmissionPolicyBinding",
                                      "metadata": {**meta}, "spec": binding_spec(name, namespaces)}]
    return out
