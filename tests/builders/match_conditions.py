"""The shipped matchConditions (deploy/base/webhooks.yaml) as CEL programs, the requests the API server
would send them, and workload objects with and without devices."""

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

from webhook.admission.review import AdmissionRequest
from webhook.gates.catalogue import GATES
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy

ROOT = Path(__file__).resolve().parents[2]
WEBHOOKS = ROOT / "deploy" / "base" / "webhooks.yaml"
CORPORA = (ROOT / "tests" / "data", ROOT / "policies" / "tests")
POLICIES = (ROOT / "policies" / "default.yaml",)
NOW = dt.datetime(2027, 6, 1, tzinfo=dt.UTC)

# group, version of every kind the tests build requests for.
GV: dict[str, tuple[str, str]] = {
    "Pod": ("", "v1"),
    **{k: ("apps", "v1") for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")},
    "Job": ("batch", "v1"), "CronJob": ("batch", "v1"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2"), "PyTorchJob": ("kubeflow.org", "v1"),
}
# Where the pod template sits in each kind (the same walk as webhook.objects.pods.pod_templates).
TEMPLATE_AT: dict[str, tuple[str, ...]] = {
    "Pod": (),
    **{k: ("spec", "template") for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")},
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "JobSet": ("spec", "replicatedJobs", "[]", "template", "spec", "template"),
    "PyTorchJob": ("spec", "pytorchReplicaSpecs", "*", "template"),
}


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
    from webhook.gates.catalogue import GATES_BY_NAME

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


def admission_request(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
                      kind: dict[str, str] | None = None) -> AdmissionRequest:
    api = obj.get("apiVersion", "v1")
    group, _, version = api.rpartition("/")
    kind = kind or {"group": group, "version": version, "kind": obj["kind"]}
    return AdmissionRequest(uid="u", group=kind["group"], version=kind["version"], kind=kind["kind"],
                            operation=operation, namespace="team-a", name="x", object=obj, old_object=old,
                            dry_run=False, user={"username": "alice", "groups": ["system:authenticated"]})


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
