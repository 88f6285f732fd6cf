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
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cel
import pytest
import yaml

from webhook import engine
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.review import AdmissionRequest
from webhook.rules.gates import GATES
from webhook.rules.ruleset import standard_rules
from webhook.view import OfflineView

ROOT = Path(__file__).resolve().parent.parent
WEBHOOKS = ROOT / "deploy" / "base" / "webhooks.yaml"
CORPORA = (ROOT / "tests" / "data", ROOT / "policies" / "tests")
POLICIES = (ROOT / "policies" / "default.yaml",)
CONDITION = "uses-devices"
MAX_CONDITIONS = 64  # admissionregistration validation: at most 64 matchConditions per webhook
NOW = dt.datetime(2027, 6, 1, tzinfo=dt.UTC)

# group, version of every kind the tests build requests for.
GV: dict[str, tuple[str, str]] = {
    "Pod": ("", "v1"),
    **{k: ("apps", "v1") for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")},
    "Job": ("batch", "v1"), "CronJob": ("batch", "v1"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2"), "PyTorchJob": ("kubeflow.org", "v1"),
}
# Where the pod template sits in each kind (the same walk as webhook.objects.pod_templates).
TEMPLATE_AT: dict[str, tuple[str, ...]] = {
    "Pod": (),
    **{k: ("spec", "template") for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")},
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "JobSet": ("spec", "replicatedJobs", "[]", "template", "spec", "template"),
    "PyTorchJob": ("spec", "pytorchReplicaSpecs", "*", "template"),
}
# Where the JobSpec that holds the template sits (its activeDeadlineSeconds counts; Job spec.scheduling).
JOB_AT: dict[str, tuple[str, ...]] = {
    "Job": ("spec",), "CronJob": ("spec", "jobTemplate", "spec"),
    "JobSet": ("spec", "replicatedJobs", "[]", "template", "spec"),
}

# ------------------------------------------------------------------------------------ configuration


def _hooks() -> dict[str, tuple[str, dict[str, Any]]]:
    out = {}
    for doc in yaml.safe_load_all(WEBHOOKS.read_text()):
        if doc and doc.get("kind") in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in doc["webhooks"]:
                out[hook["name"]] = ("mutate" if doc["kind"].startswith("Mutating") else "validate", hook)
    return out


HOOKS = _hooks()
PROGRAMS = {
    name: [(c["name"], cel.compile(c["expression"])) for c in hook.get("matchConditions", [])]
    for name, (_, hook) in HOOKS.items()
}


def plural(kind: str) -> str:
    low = kind.lower()
    return low + "es" if low.endswith("s") else low + "s"


def request(kind: str, operation: str = "CREATE", group: str | None = None, version: str | None = None,
            user: str = "alice") -> dict[str, Any]:
    g, v = GV.get(kind, ("", "v1"))
    g, v = group if group is not None else g, version or v
    return {
        "kind": {"group": g, "version": v, "kind": kind},
        "resource": {"group": g, "version": v, "resource": plural(kind)},
        "operation": operation, "namespace": "team-a", "name": "x",
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
    }


def matches_rules(hook: dict[str, Any], req: dict[str, Any]) -> bool:
    res = req["resource"]
    return any(
        res["group"] in r["apiGroups"] and res["version"] in r["apiVersions"]
        and res["resource"] in r["resources"] and req["operation"] in r["operations"]
        for r in hook["rules"]
    )


def sent(name: str, req: dict[str, Any], obj: Any, old: Any = None) -> bool:
    """What the API server does with the webhook's matchConditions: call it only if all are true.

    Every condition is evaluated; an evaluation error fails the test (under failurePolicy Ignore the
    API server would silently skip the webhook, under Fail reject the request).
    """
    activation = {"request": req, "object": obj, "oldObject": old}
    results = []
    for cond, program in PROGRAMS[name]:
        try:
            value = program.execute(activation)
        except Exception as exc:  # the library raises where cel-go returns an error value
            pytest.fail(f"{name}: matchCondition {cond} fails on {req['kind']['kind']} {req['operation']}: "
                        f"{type(exc).__name__}: {exc}")
        assert isinstance(value, bool), f"{name}: {cond} returned {value!r}, not a bool"
        results.append(value)
    return all(results)


def workload_hooks() -> list[str]:
    return [n for n in HOOKS if n.startswith("workloads.")]


def hooks_for(phase: str, req: dict[str, Any]) -> list[str]:
    return [n for n, (p, hook) in HOOKS.items() if p == phase and matches_rules(hook, req)]


# ----------------------------------------------------------------------------------- object builders


def container(name: str = "app", **resources: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "registry.example.com/app:1.0"}
    if resources:
        c["resources"] = resources
    return c


def wrap(kind: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An object of ``kind`` whose every pod template has ``spec`` (two roles / replicated jobs where a
    kind has several, the device only in the last one)."""
    group, version = GV[kind]
    api_version = f"{group}/{version}" if group else version
    meta = {"name": "x", "namespace": "team-a", "labels": dict(labels or {})}
    template = {"metadata": {"labels": dict(labels or {})}, "spec": spec}
    plain_template = {"metadata": {}, "spec": {"containers": [container("sidecar-only")]}}
    if kind == "Pod":
        return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}
    if kind == "CronJob":
        body: dict[str, Any] = {"schedule": "@daily", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "JobSet":
        body = {"replicatedJobs": [{"name": "launcher", "template": {"spec": {"template": plain_template}}},
                                   {"name": "workers", "template": {"spec": {"template": template}}}]}
    elif kind == "PyTorchJob":
        body = {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": plain_template},
                                        "Worker": {"replicas": 2, "template": template}}}
    else:
        body = {"template": template}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": body}


def plain_spec() -> dict[str, Any]:
    """A pod spec without devices but with everything else a GPU rule might look at, set so that it would
    matter if a rule acted on it: training labels (on the object), a deadline, node constraints that rule
    out both pools, tolerations, native resources of every form, affinity, init containers and sidecars."""
    native = {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi", "hugepages-2Mi": "128Mi"}
    return {
        "activeDeadlineSeconds": 999999,
        "restartPolicy": "Never",
        "nodeSelector": {"gpu.example.com/allocation": "elsewhere", "pool": "cpu"},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpu.example.com/allocation", "operator": "NotIn", "values": ["dra"]}]}]}}},
        "tolerations": [{"operator": "Exists"}],
        "initContainers": [container("init", requests=dict(native)),
                           {**container("sidecar", limits=dict(native)), "restartPolicy": "Always"}],
        "containers": [container("main", requests=dict(native), limits=dict(native)),
                       container("no-resources"), container("empty-resources", limits={}, requests={})],
        "volumes": [{"name": "data", "emptyDir": {}}],
    }


TRAINING_LABELS = {"workload.example.com/kind": "training", "jobset.sigs.k8s.io/jobset-name": "x",
                   "training.kubeflow.org/job-name": "x", "app": "train"}
ER = "example.com/gpu"


def device_specs() -> Iterator[tuple[str, dict[str, Any]]]:
    """One pod spec per trigger the condition must catch (each alone on an otherwise plain spec)."""
    for fld in ("containers", "initContainers"):
        for form in ("limits", "requests"):
            for name in (ER, "vendor.example.com/gpu", "deviceclass.resource.kubernetes.io/gpu.example.com",
                         "unmapped.example.com/fpga"):
                spec = plain_spec()
                spec[fld][-1]["resources"] = {**spec[fld][-1].get("resources", {}), form: {name: "1"}}
                yield f"{fld}.{form}[{name}]", spec
        spec = plain_spec()
        spec[fld][0]["resources"]["claims"] = [{"name": "gpu"}]
        yield f"{fld}.resources.claims", spec
    spec = plain_spec()
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpus"}]
    yield "resourceClaims", spec
    spec = plain_spec()
    spec["schedulingGroup"] = {"podGroupName": "trainers"}
    yield "schedulingGroup", spec


# ------------------------------------------------------------------------------------- policies


def _corpus_policy_docs() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in [*POLICIES, *sorted(p for d in CORPORA for p in d.rglob("*.yaml"))]:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "MigrationPolicy":
                docs.append((str(path.relative_to(ROOT)), doc))
    return docs


def variants(doc: dict[str, Any]) -> Iterator[tuple[str, CompiledPolicy]]:
    """The policy in each stage for every namespace, every rule on, no exceptions, every gate the version
    lets a cluster switch off switched off: the most any object can get from the webhook."""
    from webhook.rules.gates import GATES_BY_NAME

    version = doc["spec"].get("kubernetesVersion", "1.37")
    gates = {}
    for g in GATES:
        stage = GATES_BY_NAME[g.name].stage_in(version)
        if stage is not None and not stage.locked:
            gates[g.name] = False
    for stage in ("legacy", "pilot", "migrated"):
        d = copy.deepcopy(doc)
        spec = d["spec"]
        spec["cohorts"] = []
        spec["defaultStage"] = stage
        spec.pop("exceptions", None)
        spec["enforcement"] = {"legacy": "Warn", "pilot": "Warn", "migrated": "Deny"}
        spec["featureGates"] = gates
        yield stage, compile_policy(MigrationPolicy.model_validate(d), repr(d).encode())


POLICY_VARIANTS = [(f"{src}:{stage}", p) for src, doc in _corpus_policy_docs() for stage, p in variants(doc)]


def acts(req: AdmissionRequest, policy: CompiledPolicy, phase: str) -> bool:
    """Whether the webhook would do anything visible: a finding of any action, a patch, a denial."""
    d = engine.evaluate(req, policy, OfflineView(), phase, NOW)
    return bool(d.verdicts or d.patch or not d.allowed)  # warnings and rule errors are verdicts


def admission_request(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
                      kind: dict[str, str] | None = None) -> AdmissionRequest:
    api = obj.get("apiVersion", "v1")
    group, _, version = api.rpartition("/")
    kind = kind or {"group": group, "version": version, "kind": obj["kind"]}
    return AdmissionRequest(uid="u", group=kind["group"], version=kind["version"], kind=kind["kind"],
                            operation=operation, namespace="team-a", name="x", object=obj, old_object=old,
                            dry_run=False, user={"username": "alice", "groups": ["system:authenticated"]})


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


def _objects(doc: Any, origin: str) -> Iterator[tuple[str, dict[str, Any], str, dict[str, Any] | None,
                                                      dict[str, str] | None]]:
    """(origin, object, operation, oldObject, request kind) for every Kubernetes object in a corpus doc."""
    if isinstance(doc, dict):
        if doc.get("kind") == "AdmissionReview" and isinstance(doc.get("request"), dict):
            req = doc["request"]
            if isinstance(req.get("object"), dict):
                yield origin, req["object"], req.get("operation", "CREATE"), req.get("oldObject"), req.get("kind")
            return
        if isinstance(doc.get("apiVersion"), str) and isinstance(doc.get("kind"), str) and "spec" in doc \
                and not doc["kind"].startswith("MigrationPolicy"):
            yield origin, doc, "CREATE", None, None
            return
        for key, value in doc.items():
            yield from _objects(value, f"{origin}/{key}")
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _objects(value, f"{origin}[{i}]")


def corpus() -> list[tuple[str, dict[str, Any], str, dict[str, Any] | None, dict[str, str] | None]]:
    out = []
    for base in CORPORA:
        for path in sorted(base.rglob("*")):
            if path.suffix in (".yaml", ".yml"):
                docs = list(yaml.safe_load_all(path.read_text()))
            elif path.suffix == ".json":
                docs = [json.loads(path.read_text())]
            else:
                continue
            for i, doc in enumerate(docs):
                out.extend(_objects(doc, f"{path.relative_to(ROOT)}#{i}"))
    return out


CORPUS = corpus()


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
    """The condition's kind list, this test's template table and webhook.objects agree: a kind added to
    ``pod_templates`` stays sent whole (the condition does not know it) until all three are updated."""
    import re

    from webhook.objects import POD_KINDS, pod_templates

    expr = next(c["expression"] for c in HOOKS[workload_hooks()[0]][1]["matchConditions"] if c["name"] == CONDITION)
    named = set(re.findall(r"'([A-Z][A-Za-z]+)'", expr))
    assert named == set(TEMPLATE_AT) <= POD_KINDS, (named, set(TEMPLATE_AT), POD_KINDS)
    for kind in TEMPLATE_AT:
        refs = pod_templates(wrap(kind, plain_spec()), kind)
        assert refs, kind
        for ref in refs:
            path = tuple("[]" if isinstance(p, int) else p for p in ref.path)
            assert _under(list(path), TEMPLATE_AT[kind]) and len(path) == len(TEMPLATE_AT[kind]), (kind, ref.path)
