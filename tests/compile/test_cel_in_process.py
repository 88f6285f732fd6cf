"""Issue #44 item 4: the compiled ValidatingAdmissionPolicies decide as the webhook does, in-process, in seconds.

The compiled rules (webhook/compile/coverage.py ``COMPILED``) exist twice: as the Python rules ``dra-webhook check``
runs (webhook/admission/answer.py ``admit``) and as the CEL ``dra-webhook compile`` writes. The end-to-end test
tests/e2e/test_compiled_policies.py proves them equal on a real API server; this test proves the same, without a
control plane, by evaluating the compiled ValidatingAdmissionPolicies with ``cel_expr_python`` as the API server's
plugin does (tests/compile/cel_vap.py) and comparing with ``check``'s answer for the same object, policy and date:

* the policy and dates of the e2e test (``POLICY``, ``DATES``), compiled with ``compile_admission``;
* the corpora: every object of tests/data/** and of the policy test suites policies/tests/*.yaml (their cases'
  objects, namespaces and operations), the e2e test's fixed table (``cases``) and its seeded random Pods
  (``random_pods``), each with the namespace labels of its corpus (Namespace objects, a suite's
  ``cluster.namespaces``, the e2e ``NAMESPACES``), given to both sides;
* the comparison is the e2e test's (``_expected``, ``_left_to_the_webhook``): the same allowed/denied; the compiled
  rules' warnings word for word; a denial's message is one of ``check``'s denials of a compiled rule. The validating
  policies see the object as mutated: the webhook's own mutating answer (the e2e test shows the compiled
  MutatingAdmissionPolicies write the same), so the mutating policies themselves are not evaluated here.

Not compared (named in ``NOT_COMPARED``): requests the API server would convert before the policies see them (a
version the policy's resourceRules do not list: ``matchPolicy: Equivalent``) and subresources.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.compile import cel_vap
from tests.e2e import compiled_table as e2e
from webhook.commands import load_policy
from webhook.compile import compile_admission
from webhook.compile.coverage import COMPILED
from webhook.offline.check import check_items
from webhook.offline.inputs import item_from, read_items
from webhook.offline.suites import case_items, find_suites, parse_suite
from webhook.policy import delivery

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SUITES = ROOT / "policies" / "tests"
POLICY, DATES = e2e.POLICY, e2e.DATES
MUTATIONS = e2e.MUTATING_ONLY  # compiled as MutatingAdmissionPolicies only
RESOURCES = {"Pod": "pods", "Deployment": "deployments", "ReplicaSet": "replicasets", "StatefulSet": "statefulsets",
             "DaemonSet": "daemonsets", "Job": "jobs", "CronJob": "cronjobs", "ResourceClaim": "resourceclaims",
             "ResourceClaimTemplate": "resourceclaimtemplates", "Namespace": "namespaces"}
NOT_COMPARED = {"converted": "a version the compiled resourceRules do not list (the API server converts it first)",
                "subresource": "a subresource request (the compiled rules match the main resource only)"}


@dataclass(frozen=True)
class Case:
    """One object of a corpus: its AdmissionRequest (``check``'s Item) and the labels of its namespace."""

    corpus: str
    item: Any
    labels: dict[str, str]


@dataclass
class Seen:
    """What ``compare`` saw: mismatches, what was compared or not, and which compiled rules fired how."""

    mismatches: list[str] = field(default_factory=list)
    compared: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    fired: set[tuple[str, str]] = field(default_factory=set)  # (rule, action) of compiled findings check reported
    errors: list[str] = field(default_factory=list)  # the compiled policies' evaluation errors (failurePolicy Ignore)


# ------------------------------------------------------------------------------------------------ the corpora


def _namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _labelled(corpus: str, items: list[Any], labels: dict[str, dict[str, str]]) -> list[Case]:
    """The items, each with the labels of its namespace (``labels``, the corpus' Namespace objects, else none)."""
    known = {**labels}
    for i in items:
        r = i.request
        if r.group == "" and r.kind == "Namespace":
            known[r.name] = dict(((r.object or {}).get("metadata") or {}).get("labels") or {})
    return [Case(corpus, i, known.get(i.request.namespace, {})) for i in items]


#: Files under tests/data that hold no objects of their own: case tables that name the objects of another file.
CASE_TABLES = ("tests/data/pods/cases.yaml", "tests/data/upstream/cases.yaml")


def _table_objects(path: Path) -> list[dict[str, Any]]:
    """The objects of a file that is no manifest: a gate table's ``cases[].object`` (``objects[].object``), or a
    mapping of names to
    objects (tests/data/pods/objects.yaml)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    for key in ("cases", "objects"):
        if isinstance(doc, dict) and isinstance(doc.get(key), list):
            return [c["object"] for c in doc[key] if isinstance(c, dict) and isinstance(c.get("object"), dict)]
    if isinstance(doc, dict) and all(isinstance(v, dict) and "kind" in v for v in doc.values()):
        return list(doc.values())
    return []


@cache
def data_cases() -> tuple[Case, ...]:
    """Every object of every YAML/JSON file under tests/data, one corpus per file: manifests as ``check`` reads
    them, the objects of the gate tables and of the named-object file as they are; only ``CASE_TABLES`` hold none."""
    out: list[Case] = []
    for path in sorted(p for p in DATA.rglob("*") if p.suffix in (".yaml", ".yml", ".json")):
        where = str(path.relative_to(ROOT))
        errors: list[str] = []
        items = read_items(str(path), None, "CREATE", errors)
        if errors:
            objs = _table_objects(path)
            assert objs or where in CASE_TABLES, f"{where}: neither a manifest nor a table of objects: {errors[0]}"
            items = [item_from(obj, f"{where} object {k}", None, "CREATE") for k, obj in enumerate(objs)]
        out += _labelled(where, items, {})
    return tuple(out)


@cache
def suite_cases() -> tuple[Case, ...]:
    """Every case's objects of the suites under policies/tests, with the case's namespace, operation and oldObject,
    and the labels of the suite's (or the case's) ``cluster.namespaces``."""
    files, broken = find_suites([SUITES])
    assert files and not broken, broken
    out: list[Case] = []
    for file in files:
        suite, problems = parse_suite(file)
        assert suite is not None and not problems, problems
        m = suite.model
        for i, case in enumerate(m.cases):
            items = case_items(suite, i, case, case.namespace or m.namespace, case.operation or m.operation)
            for item in items:
                if case.oldObject is not None:
                    item.request.old_object = case.oldObject
            cluster = case.cluster or m.cluster
            labels = dict(cluster.namespaces) if cluster is not None and cluster.namespaces else {}
            out += _labelled(f"{file.relative_to(ROOT)}: {case.name}", items, labels)
    return tuple(out)


def _e2e_cases(objs: list[dict[str, Any]], corpus: str) -> tuple[Case, ...]:
    items = [item_from(o, f"{corpus}[{k}]", None, "CREATE") for k, o in enumerate(objs)]
    return tuple(_labelled(corpus, items, e2e.NAMESPACES))


@cache
def table_cases() -> tuple[Case, ...]:
    """The e2e test's fixed table (``cases``) in its namespaces."""
    return _e2e_cases(e2e.cases(), "e2e cases()")


@cache
def random_cases() -> tuple[Case, ...]:
    """The e2e test's seeded random Pods (``random_pods``, its default seed)."""
    return _e2e_cases(e2e.random_pods(), f"e2e random_pods(seed={e2e.RANDOM_SEED})")


CORPORA = {"tests-data": data_cases, "policy-suites": suite_cases, "e2e-table": table_cases,
           "e2e-random": random_cases}


# ------------------------------------------------------------------------------------------------ both sides


@cache
def compiled(at: str) -> tuple[cel_vap.Bound, ...]:
    """The e2e policy's ValidatingAdmissionPolicies and bindings on ``at``, as ``dra-webhook compile --at`` writes
    them (the shipped webhook configuration's namespaces)."""
    objects = compile_admission(load_policy(POLICY), dt.datetime.fromisoformat(at).replace(tzinfo=dt.UTC)).objects
    return tuple(cel_vap.bound(objects))


def _checked(cases: tuple[Case, ...], at: str) -> list[dict[str, Any] | None]:
    """``dra-webhook check --policy POLICY --at at -o json`` over the cases, in-process: one batch per corpus, with a
    Namespace object for each namespace (its labels: what the compiled policies' namespaceObject has)."""
    policy = load_policy(POLICY)
    now = dt.datetime.fromisoformat(at).replace(tzinfo=dt.UTC)
    sent = delivery.shipped()
    out: list[dict[str, Any] | None] = [None] * len(cases)
    by_corpus: dict[str, list[int]] = {}
    for k, c in enumerate(cases):
        by_corpus.setdefault(c.corpus, []).append(k)
    for corpus, all_ks in by_corpus.items():
        ks = list(all_ks)
        names = {cases[k].item.request.namespace: cases[k].labels for k in ks if cases[k].item.request.namespace}
        present = {cases[k].item.request.name for k in ks if cases[k].item.request.kind == "Namespace"}
        extra = [item_from(_namespace(n, labels), f"{corpus} namespace {n}", None, "CREATE")
                 for n, labels in names.items() if n not in present]
        results = check_items([*extra, *(cases[k].item for k in ks)], policy, now, sent)
        for k, r in zip(ks, results[len(extra):], strict=True):
            out[k] = r
    return out


def _mutated(obj: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """The object as the webhook's mutating answer patched it (also when the validating answer then denied it)."""
    response = (r.get("responses") or {}).get("mutate", {}).get("response") or {}
    if not response.get("patch"):
        return obj
    return jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))


def _left_to_the_webhook(obj: dict[str, Any]) -> bool:
    """``e2e._left_to_the_webhook`` for any claim shape: a claim naming a class outside the policy's scope."""
    if not str(obj.get("kind", "")).startswith("ResourceClaim"):
        return False
    spec = obj.get("spec") or {}
    spec = (spec.get("spec") or {}) if obj["kind"] == "ResourceClaimTemplate" else spec
    requests = (spec.get("devices") or {}).get("requests") or []
    slots = [s for r in requests for s in ([r.get("exactly") or r] if "firstAvailable" not in r
                                           else r["firstAvailable"])]
    return any(s.get("deviceClassName") not in e2e.SCOPE_CLASSES for s in slots)


def _not_compared(req: Any, bound: tuple[cel_vap.Bound, ...]) -> str | None:
    if req.sub_resource:
        return "subresource"
    listed = {(g, k) for b in bound for r in b.policy["spec"]["matchConstraints"]["resourceRules"]
              for g in r["apiGroups"] for k in r["resources"]}
    versions = {v for b in bound for r in b.policy["spec"]["matchConstraints"]["resourceRules"]
                if req.group in r["apiGroups"] and RESOURCES.get(req.kind) in r["resources"] for v in r["apiVersions"]}
    if (req.group, RESOURCES.get(req.kind)) in listed and req.version not in versions:
        return "converted"
    return None


@cache
def checked(corpus: str, at: str) -> tuple[dict[str, Any] | None, ...]:
    """``_checked`` of a corpus, once per date."""
    return tuple(_checked(CORPORA[corpus](), at))


def compare(corpus: str, at: str, bound: tuple[cel_vap.Bound, ...] | None = None, kinds: tuple[str, ...] = ()) -> Seen:
    """Each object of ``corpus`` (of ``kinds``, default all) through ``check`` and through the compiled policies on
    ``at`` (or ``bound``); every difference, as the e2e test's ``_compare`` words it."""
    bound = compiled(at) if bound is None else bound
    seen = Seen()
    for case, r in zip(CORPORA[corpus](), checked(corpus, at), strict=True):
        req = case.item.request
        if kinds and req.kind not in kinds:
            continue
        obj = req.object or {}
        why = _not_compared(req, bound)
        if why:
            seen.skipped[why] += 1
            continue
        where = f"{case.corpus}: {r.get('object')}"
        if not r["examined"] or r.get("sent") is False or _left_to_the_webhook(obj):
            allowed, warnings, denials = True, [], []
        else:
            allowed, warnings, denials = e2e._expected(r)
            seen.fired.update((f["rule"], f["action"]) for f in r["findings"] if f["rule"] in COMPILED)
        got = cel_vap.run(list(bound), cel_vap.Request(
            req.group, req.version, req.kind, RESOURCES.get(req.kind, req.kind.lower() + "s"), req.operation,
            req.namespace, req.name, _mutated(obj, r), req.old_object, case.labels))
        seen.compared += 1
        seen.errors += [f"{where}: {e}" for e in got.errors]
        if got.allowed != allowed:
            seen.mismatches.append(f"{where}: compiled allowed={got.allowed} {got.denials[:1]}, "
                                   f"check allowed={allowed} {denials}")
        elif sorted(got.warnings) != warnings:
            seen.mismatches.append(f"{where}: warnings\n  compiled {sorted(got.warnings)}\n  check    {warnings}")
        elif not allowed and got.denials[0] not in denials:
            seen.mismatches.append(f"{where}: denial {got.denials[0]!r} is none of {denials}")
    return seen


# ------------------------------------------------------------------------------------------------ the tests


@cache
def _seen(corpus: str, at: str) -> Seen:
    return compare(corpus, at)


RUNS = [(c, at) for c in CORPORA for at in (DATES[:1] if c == "e2e-random" else DATES)]
"""(corpus, date): every corpus on both dates, the random Pods on the first (as the e2e test: every stage already)."""


@pytest.mark.parametrize(("corpus", "at"), RUNS)
def test_compiled_validating_policies_decide_as_check(corpus: str, at: str):
    """On every object of the corpus, the compiled ValidatingAdmissionPolicies evaluated in-process allow and deny
    what ``check`` does, with the same warnings and the same denial message, and evaluate without error."""
    seen = _seen(corpus, at)
    assert not seen.mismatches, f"{len(seen.mismatches)} of {seen.compared}:\n" + "\n".join(seen.mismatches)
    assert not seen.errors, "\n".join(seen.errors[:20])
    assert seen.compared > 0
    assert set(seen.skipped) <= set(NOT_COMPARED), seen.skipped
    assert sum(seen.skipped.values()) <= seen.compared / 10, seen.skipped


VALIDATING = [r for r in COMPILED if r not in MUTATIONS]


@pytest.mark.parametrize("rule", VALIDATING)
def test_every_compiled_validating_rule_is_compared_denying_and_warning(rule: str):
    """Not vacuous: over the corpora and dates, ``check`` reports each compiled validating rule under Deny and Warn
    (training-job-extended-resource is advisory: Warn at most) on objects the comparison covered."""
    fired = {a for corpus, at in RUNS for r, a in _seen(corpus, at).fired if r == rule}
    wanted = {"Warn"} if rule == "training-job-extended-resource" else {"Deny", "Warn"}
    assert wanted <= fired, fired


def _changed(bound: tuple[cel_vap.Bound, ...], name: str, key: str, change: Any) -> tuple[cel_vap.Bound, ...]:
    """``bound`` with policy ``name``'s last validation's ``key`` replaced by ``change(text)``."""
    out = []
    for b in bound:
        if b.name == name:
            policy = json.loads(json.dumps(b.policy))
            v = policy["spec"]["validations"][-1]
            v[key] = change(v[key])
            b = cel_vap.Bound(policy, b.binding)
        out.append(b)
    return tuple(out)


def test_the_comparison_fails_on_a_changed_message_or_decision():
    """The comparison is not blind: a copy of the compiled Pod Deny policy with its last validation's message
    changed, or with that validation always passing, gives mismatches on the e2e table."""
    at = DATES[0]
    bound = compiled(at)
    name = next(b.name for b in bound if b.name.endswith("-pods-deny.dra-migration.io"))
    changed = _changed(bound, name, "messageExpression", lambda t: f"'changed: ' + ({t})")
    seen = compare("e2e-table", at, changed, ("Pod",))
    assert any("denial 'changed: " in m for m in seen.mismatches), seen.mismatches[:3]
    seen = compare("e2e-table", at, _changed(bound, name, "expression", lambda _: "true"), ("Pod",))
    assert any("compiled allowed=True" in m for m in seen.mismatches), seen.mismatches[:3]
