"""matchConditions of deploy/base/webhooks.yaml: only objects a rule can act on leave the API server.

The ``uses-devices`` condition on the two ``workloads.*`` webhooks skips plain Pods and workloads
whose pod templates ask for no device (issue 17). Skipping is only safe while no rule can act on a
skipped object, so these tests keep the condition and the rules in step:

- the derivation test runs every rule of the standard rule set (gate checks included) over plain objects of
  every pod-carrying kind with a tracing dict, and requires every field a rule reads to be either a
  trigger the condition looks at or listed in ``INERT`` with the reason it cannot make a rule act;
- the corpus test runs every object of the test corpora (tests/data/**, policies/tests/**) through
  the engine under every stage of every corpus policy with all feature gates off, and fails if one
  the webhook would change, warn about or deny is not sent to the webhook of that phase.

Expressions are evaluated with ``common-expression-language`` (Python bindings of the Rust CEL
interpreter). Chosen over ``cel-python`` because it follows cel-go where it matters here:
``has(object.spec.template)`` on an object without ``spec`` is an error in cel-go (and in this
library), while cel-python answers false and would hide exactly the mistake that makes the API
server skip the webhook (an evaluation error under failurePolicy Ignore means "not called":
k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions/matcher.go, ``matcher.Match``, read
at kubernetes master for v1.36). ``object`` and ``oldObject`` are untyped (``cel.DynType``:
k8s.io/apiserver/pkg/admission/plugin/cel/compile.go, ``createEnvForOpts``), so nothing is checked
against a schema at compile time and only the runtime budget applies
(``RuntimeCELCostBudgetMatchConditions`` = 2,500,000 per webhook, k8s.io/apiserver/pkg/apis/cel/config.go).
The real API server compiles and runs the same expressions in tests/e2e/test_latency_matchconditions.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.builders.match_conditions import (
    CORPUS,
    HOOKS,
    NOW,
    POLICY_VARIANTS,
    PROGRAMS,
    ROOT,
    TEMPLATE_AT,
    admission_request,
    container,
    device_specs,
    plain_spec,
    request,
    sent,
    workload_hooks,
    wrap,
)
from webhook.admission import engine
from webhook.admission.review import AdmissionRequest
from webhook.gates.catalogue import GATES
from webhook.policy.compiled import CompiledPolicy
from webhook.rules.ruleset import standard_rules
from webhook.rules.view import OfflineView

CONDITION = "uses-devices"
MAX_CONDITIONS = 64  # admissionregistration validation: at most 64 matchConditions per webhook
# Where the JobSpec that holds the template sits (its activeDeadlineSeconds counts; Job spec.scheduling).
JOB_AT: dict[str, tuple[str, ...]] = {
    "Job": ("spec",), "CronJob": ("spec", "jobTemplate", "spec"),
    "JobSet": ("spec", "replicatedJobs", "[]", "template", "spec"),
}

# ------------------------------------------------------------------------------------ configuration


def matches_rules(hook: dict[str, Any], req: dict[str, Any]) -> bool:
    res = req["resource"]
    return any(
        res["group"] in r["apiGroups"] and res["version"] in r["apiVersions"]
        and res["resource"] in r["resources"] and req["operation"] in r["operations"]
        for r in hook["rules"]
    )


def hooks_for(phase: str, req: dict[str, Any]) -> list[str]:
    return [n for n, (p, hook) in HOOKS.items() if p == phase and matches_rules(hook, req)]


# ----------------------------------------------------------------------------------- object builders


TRAINING_LABELS = {"workload.example.com/kind": "training", "jobset.sigs.k8s.io/jobset-name": "x",
                   "training.kubeflow.org/job-name": "x", "app": "train"}


def acts(req: AdmissionRequest, policy: CompiledPolicy, phase: str) -> bool:
    """Whether the webhook would do anything visible: a finding of any action, a patch, a denial."""
    d = engine.evaluate(req, policy, OfflineView(), phase, NOW)
    return bool(d.verdicts or d.patch or not d.allowed)  # warnings and rule errors are verdicts


# =========================================================================================== tests


def test_conditions_fit_the_api_server_limits_and_are_the_same_on_both_workload_webhooks() -> None:
    for name, (_, hook) in HOOKS.items():
        names = [c["name"] for c in hook.get("matchConditions", [])]
        assert len(names) <= MAX_CONDITIONS, name
        assert len(set(names)) == len(names), f"{name}: matchCondition names must be unique"
    exprs = {HOOKS[n][1]["matchConditions"][[c["name"] for c in HOOKS[n][1]["matchConditions"]].index(CONDITION)]
             ["expression"] for n in workload_hooks()}
    assert len(workload_hooks()) == 2 and len(exprs) == 1, "both workloads webhooks carry the same uses-devices"
    for name in HOOKS:
        if not name.startswith("workloads."):
            assert CONDITION not in [c for c, _ in PROGRAMS[name]], f"{name}: every DRA object must be sent"


@pytest.mark.parametrize("kind", list(TEMPLATE_AT))
def test_plain_objects_are_not_sent_and_no_rule_acts_on_them(kind: str) -> None:
    obj = wrap(kind, plain_spec(), TRAINING_LABELS)
    for name in workload_hooks():
        assert not sent(name, request(kind), obj), f"{name} is called for a plain {kind}"
        assert not sent(name, request(kind, "UPDATE"), obj, wrap(kind, {"containers": [container()]}))
    for label, policy in POLICY_VARIANTS:
        for phase in ("mutate", "validate"):
            for op in ("CREATE", "UPDATE"):
                req = admission_request(obj, op, old=obj if op == "UPDATE" else None)
                assert not acts(req, policy, phase), f"{label}: the webhook acts on a plain {kind} ({phase} {op})"


@pytest.mark.parametrize("kind", list(TEMPLATE_AT))
def test_every_device_trigger_is_sent_in_every_kind(kind: str) -> None:
    for trigger, spec in device_specs():
        obj = wrap(kind, spec)
        for name in workload_hooks():
            assert sent(name, request(kind), obj), f"{name}: {kind} with {trigger} is not sent"
            assert sent(name, request(kind, "UPDATE"), obj, wrap(kind, plain_spec())), (name, kind, trigger)


def test_job_scheduling_is_sent() -> None:
    job = wrap("Job", plain_spec())
    job["spec"]["scheduling"] = {"schedulingConstraints": {"topology": [{"key": "rack"}]}}
    for name in workload_hooks():
        assert sent(name, request("Job"), job)


@pytest.mark.parametrize(("kind", "group", "version"), [
    ("PodGroup", "scheduling.k8s.io", "v1beta1"), ("Workload", "scheduling.k8s.io", "v1alpha3"),
    ("RayJob", "ray.io", "v1"), ("Job", "example.com", "v1"), ("Pod", "example.com", "v1"),
])
def test_kinds_the_condition_does_not_know_are_sent(kind: str, group: str, version: str) -> None:
    obj = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": "x"}, "spec": {}}
    for name in workload_hooks():
        assert sent(name, request(kind, group=group, version=version), obj)


def test_delete_is_sent_when_the_object_is_null() -> None:
    """DELETE has object null: the condition cannot look, so it sends (the rules list no DELETE today)."""
    pod = wrap("Pod", plain_spec())
    for name in workload_hooks():
        assert sent(name, request("Pod", "DELETE"), None, pod)


@pytest.mark.parametrize("obj", [
    {"kind": "Pod"},
    {"kind": "Pod", "spec": {}},
    {"kind": "Pod", "spec": {"containers": []}},
    {"kind": "Pod", "spec": {"containers": [{"name": "a", "resources": {}}]}},
    {"kind": "Pod", "spec": {"containers": [{"name": "a", "resources": {"limits": {}}}], "initContainers": []}},
    {"kind": "Deployment", "spec": {}},
    {"kind": "Deployment", "spec": {"template": {}}},
    {"kind": "Deployment", "spec": {"template": {"metadata": {}}}},
    {"kind": "CronJob", "spec": {"jobTemplate": {}}},
    {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {}}}},
    {"kind": "Job", "spec": {"template": {"spec": {}}}},
    {"kind": "JobSet", "spec": {}},
    {"kind": "JobSet", "spec": {"replicatedJobs": [{"name": "a"}, {"name": "b", "template": {}},
                                                   {"name": "c", "template": {"spec": {}}}]}},
    {"kind": "PyTorchJob", "spec": {}},
    {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {}}},
    {"kind": "PyTorchJob", "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}},
], ids=lambda o: json.dumps(o, separators=(",", ":"))[:60])
def test_missing_fields_never_make_a_condition_fail(obj: dict[str, Any]) -> None:
    """Objects without the optional parts: every has() guard holds (sent() fails the test on an error)."""
    for name in workload_hooks():
        for op in ("CREATE", "UPDATE"):
            assert sent(name, request(obj["kind"], op), obj, obj if op == "UPDATE" else None) in (True, False)


# ---------------------------------------------------------------- derivation from the rule and gate tables

# Fields of a pod template (``T``) and of the object that the condition looks at: a rule or gate check
# that reads one of these (or a map/list on the way to one) is covered.
TRIGGERS: frozenset[tuple[str, ...]] = frozenset({
    ("T", "spec", "containers", "[]", "resources", "limits", "<ext>"),
    ("T", "spec", "containers", "[]", "resources", "requests", "<ext>"),
    ("T", "spec", "containers", "[]", "resources", "claims"),
    ("T", "spec", "initContainers", "[]", "resources", "limits", "<ext>"),
    ("T", "spec", "initContainers", "[]", "resources", "requests", "<ext>"),
    ("T", "spec", "initContainers", "[]", "resources", "claims"),
    ("T", "spec", "resourceClaims"),
    ("T", "spec", "schedulingGroup"),
    ("J", "scheduling"),  # Job spec.scheduling (gates on Job only)
})
# Fields rules read on a plain object that cannot, on their own, make a rule act, and why.
INERT: dict[tuple[str, ...], str] = {
    ("metadata", "namespace"): "engine: the namespace picks the cohort; the stage alone triggers nothing",
    ("T", "spec", "containers", "[]", "resources", "limits", "<native>"):
        "is_extended_resource: names without '/' (cpu, memory, hugepages-*) are never devices",
    ("T", "spec", "containers", "[]", "resources", "requests", "<native>"): "as limits",
    ("T", "spec", "initContainers", "[]", "resources", "limits", "<native>"): "as limits",
    ("T", "spec", "initContainers", "[]", "resources", "requests", "<native>"): "as limits",
    ("T", "spec", "containers", "[]", "restartPolicy"): "sidecar counting only changes device counts",
    ("T", "spec", "initContainers", "[]", "restartPolicy"): "as above",
    ("T", "spec", "containers", "[]", "name"): "only names containers in messages",
    ("T", "spec", "initContainers", "[]", "name"): "as above",
    ("T", "spec", "activeDeadlineSeconds"): "training-job check, consulted only for a template with devices",
    ("J", "activeDeadlineSeconds"): "as above (the JobSpec's)",
    ("T", "metadata", "labels", "*"): "training-job labels, consulted only for a template with devices",
    ("metadata", "labels", "*"): "as above (the controller's labels)",
    ("metadata", "name"): "names the template and the snippet",
    ("T", "spec", "schedulerName"): "placement.serves_dra, consulted only for a template with devices; it only keeps "
                                    "a Pod off the dra pool",
    ("metadata", "ownerReferences"): "workloads.examined_owner: only makes the rules skip an owned object's templates",
    ("spec", "replicatedJobs", "[]", "name"): "names the JobSet template in messages",
    ("<on the way to T>",): "maps and lists that lead to the pod template",
    ("J", "suspend"): "workloads.template_writes: only limits what may be written on an UPDATE",
    ("spec", "suspend"): "as above (JobSet)",
    ("status", "startTime"): "as above (Job)",
    ("spec", "replicas"): "shared-claim-limit: counts Pods only for a template naming a claim (a trigger)",
    ("spec", "strategy"): "as above (a Deployment's surge)",
    ("J", "parallelism"): "as above (a Job's Pods at once)",
    ("spec", "replicatedJobs", "[]", "replicas"): "as above (a JobSet's)",
    ("spec", "pytorchReplicaSpecs", "Master", "replicas"): "as above (a PyTorchJob's)",
    ("spec", "pytorchReplicaSpecs", "Worker", "replicas"): "as above (a PyTorchJob's)",
}


def _under(path: list[str], prefix: tuple[str, ...]) -> bool:
    return len(path) >= len(prefix) and all(a == b or b == "*" for a, b in zip(path, prefix, strict=False))


def _normalize(path: tuple[Any, ...], kind: str) -> tuple[str, ...]:
    """A read path with list indices as ``[]``, the pod template as ``T``, the JobSpec as ``J``, resource
    names as ``<ext>`` (with '/') or ``<native>``, and label, annotation and selector keys as ``*``."""
    out: list[str] = [str(p) if not isinstance(p, int) else "[]" for p in path]
    template, job = TEMPLATE_AT[kind], JOB_AT.get(kind)
    if not template:
        out = ["T", *out] if out[:1] == ["spec"] or out[:2] == ["metadata", "labels"] else out
    elif _under(out, template):
        out = ["T", *out[len(template):]]
    elif job is not None and _under(out, job):
        out = ["J", *out[len(job):]]
    elif all(a == b or b == "*" for a, b in zip(out, template, strict=False)):
        return ("<on the way to T>",)
    for i in range(1, len(out)):
        if out[i - 1] in ("limits", "requests") and i >= 2 and out[i - 2] == "resources":
            out[i] = "<ext>" if "/" in out[i] else "<native>"
        elif out[i - 1] in ("labels", "annotations", "nodeSelector"):
            out[i] = "*"
    return tuple(out)


class _Tracer:
    """Wraps an object so every key a rule reads (get, [], in, iteration) is recorded as a path."""

    def __init__(self) -> None:
        self.paths: set[tuple[Any, ...]] = set()

    def wrap(self, value: Any, path: tuple[Any, ...]) -> Any:
        if isinstance(value, dict):
            return _TDict(value, path, self)
        if isinstance(value, list):
            return _TList(value, path, self)
        return value


class _TDict(dict):  # type: ignore[type-arg]
    def __init__(self, data: dict[str, Any], path: tuple[Any, ...], tracer: _Tracer) -> None:
        super().__init__(data)
        self._path, self._tracer, self._children = path, tracer, {}

    def _child(self, key: Any) -> Any:
        if key not in self._children:
            self._children[key] = self._tracer.wrap(dict.__getitem__(self, key), (*self._path, key))
        return self._children[key]

    def _seen(self, key: Any) -> None:
        self._tracer.paths.add((*self._path, key))

    def __getitem__(self, key: Any) -> Any:
        self._seen(key)
        return self._child(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._seen(key)
        return self._child(key) if dict.__contains__(self, key) else default

    def __contains__(self, key: object) -> bool:
        self._seen(key)
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[Any]:
        for key in dict.__iter__(self):
            self._seen(key)
            yield key

    def keys(self) -> Any:
        return list(iter(self))

    def items(self) -> Any:
        return [(k, self._child(k)) for k in iter(self)]

    def values(self) -> Any:
        return [self._child(k) for k in iter(self)]


class _TList(list):  # type: ignore[type-arg]
    def __init__(self, data: list[Any], path: tuple[Any, ...], tracer: _Tracer) -> None:
        super().__init__(data)
        self._path, self._tracer = path, tracer

    def __getitem__(self, i: Any) -> Any:
        return self._tracer.wrap(list.__getitem__(self, i), (*self._path, i if isinstance(i, int) else "[]"))

    def __iter__(self) -> Iterator[Any]:
        for i, v in enumerate(list.__iter__(self)):
            yield self._tracer.wrap(v, (*self._path, i))


def _covered(path: tuple[str, ...]) -> bool:
    """On the way to a trigger (a prefix of one), a trigger, or inside a trigger's value."""
    return any(t[: len(path)] == path or path[: len(t)] == t for t in TRIGGERS)


def _inert(path: tuple[str, ...]) -> bool:
    return any(path[: len(i)] == i for i in INERT) or any(i[: len(path)] == path for i in INERT)


@pytest.mark.parametrize("kind", list(TEMPLATE_AT))
def test_every_field_a_rule_or_gate_reads_on_a_plain_object_is_a_trigger_or_inert(kind: str) -> None:
    """Derived from the tables: every rule of the standard set for the kind (the gate rule runs every GATES row
    of the kind) runs on a traced plain object, in both phases, CREATE and UPDATE, in every stage.
    A new rule or gate check that reads a field the condition does not look at fails here until the
    condition covers it or INERT says why it cannot make the rule act."""
    rules = [r for r in standard_rules().rules if kind in r.kinds]
    assert rules, f"no rule handles {kind}"
    gate_kinds = {k.rpartition("/")[2] for g in GATES for k, _ in g.checks}
    unexplained: dict[tuple[str, ...], set[str]] = {}
    for label, policy in POLICY_VARIANTS:
        for phase in ("mutate", "validate"):
            for op in ("CREATE", "UPDATE"):
                tracer = _Tracer()
                base = wrap(kind, plain_spec(), TRAINING_LABELS)
                obj = tracer.wrap(base, ())
                old = tracer.wrap(copy.deepcopy(base), ()) if op == "UPDATE" else None
                req = admission_request(obj, op, old)
                assert not acts(req, policy, phase), f"{label}: the webhook acts on a plain {kind}"
                for path in tracer.paths:
                    norm = _normalize(path, kind)
                    if norm[:1] in (("apiVersion",), ("kind",)) or norm in (("metadata",), ("T",), ("J",)):
                        continue
                    if not _covered(norm) and not _inert(norm):
                        unexplained.setdefault(norm, set()).add(f"{phase} {op}")
    assert not unexplained, (
        f"rules for {kind} (gate checks: {kind in gate_kinds}) read fields the {CONDITION} condition does not "
        f"look at: {sorted(unexplained)}; cover them in deploy/base/webhooks.yaml or explain them in INERT"
    )


def test_every_gate_check_on_a_workload_kind_fires_only_on_triggers() -> None:
    """Each GATES row for a kind the workloads webhooks carry, fed its own corpus case, is sent."""
    checked = 0
    for path in sorted((ROOT / "tests" / "data" / "gates").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for case in data.get("cases", []):
            obj = case.get("object") or {}
            kind = obj.get("kind")
            if kind not in TEMPLATE_AT or not case.get("paths"):
                continue
            api = obj.get("apiVersion", "v1")
            group, _, version = api.rpartition("/")
            for name in workload_hooks():
                assert sent(name, request(kind, group=group, version=version), obj), \
                    f"{path.name}: {kind} using {case['paths']} is not sent by {name}"
            checked += 1
    assert checked >= 4, f"only {checked} gate cases on pod-carrying kinds found"


# ------------------------------------------------------------------------------------------ corpora


def test_the_corpus_is_found() -> None:
    kinds = {o["kind"] for _, o, *_ in CORPUS}
    assert len(CORPUS) >= 60 and {"Pod", "Deployment", "Job", "CronJob", "JobSet", "PyTorchJob",
                                  "ResourceClaim", "ResourceClaimTemplate", "DeviceClass"} <= kinds, kinds


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: f"{c[0]}:{c[1]['kind']}")
def test_every_corpus_object_the_webhook_acts_on_is_sent(case: tuple[Any, ...]) -> None:
    origin, obj, operation, old, kind = case
    api = obj.get("apiVersion", "v1")
    group, _, version = api.rpartition("/")
    kind = kind or {"group": group, "version": version, "kind": obj["kind"]}
    req = request(kind["kind"], operation, group=kind["group"], version=kind["version"])
    areq = admission_request(obj, operation, old, kind)
    for phase in ("mutate", "validate"):
        hooks = hooks_for(phase, req)
        if not hooks:
            continue  # no webhook lists this kind and version: which kinds are listed is not this test's concern
        acting = [label for label, policy in POLICY_VARIANTS if acts(areq, policy, phase)]
        if acting:
            for name in hooks:
                assert sent(name, req, obj, old), (
                    f"{origin}: the webhook would act on this {obj['kind']} in {phase} ({acting[0]}, "
                    f"{len(acting)} policy variants) but {name} is not called")
        else:
            for name in hooks:
                sent(name, req, obj, old)  # still evaluated: must not fail


def test_the_kinds_the_condition_filters_are_the_pod_kinds_and_their_templates_are_where_the_code_looks() -> None:
    """The condition's kind list, this test's template table and webhook.objects.pods agree: a kind added to
    ``pod_templates`` stays sent whole (the condition does not know it) until all three are updated."""
    import re

    from webhook.objects.pods import POD_KINDS, pod_templates

    expr = next(c["expression"] for c in HOOKS[workload_hooks()[0]][1]["matchConditions"] if c["name"] == CONDITION)
    named = set(re.findall(r"'([A-Z][A-Za-z]+)'", expr))
    assert named == set(TEMPLATE_AT) <= POD_KINDS, (named, set(TEMPLATE_AT), POD_KINDS)
    for kind in TEMPLATE_AT:
        refs = pod_templates(wrap(kind, plain_spec()), kind)
        assert refs, kind
        for ref in refs:
            path = tuple("[]" if isinstance(p, int) else p for p in ref.path)
            assert _under(list(path), TEMPLATE_AT[kind]) and len(path) == len(TEMPLATE_AT[kind]), (kind, ref.path)
