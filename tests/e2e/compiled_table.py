"""The compiled-equivalence table: the objects and namespaces both the e2e test on the real API server and the
in-process unit test judge (tests/e2e/test_compiled_policies.py, tests/compile/test_cel_in_process.py)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from webhook.commands import load_policy
from webhook.compile.coverage import COMPILED

#: Compiled rules that are MutatingAdmissionPolicies only; steer-node-pool is a mutation and validating checks.
MUTATING_ONLY = ("track-rollout", "inject-device-tolerations")
MUTATED = (*MUTATING_ONLY, "steer-node-pool")
POLICY = Path(__file__).parent / "data" / "compile-policy.yaml"
DATES = ("2030-03-01", "2030-07-01")  # teams: pilot, then migrated; the exception expires in between
ADMIN = {"resource.kubernetes.io/admin-access": "true"}  # else the API server refuses adminAccess itself (422)
NAMESPACES: dict[str, dict[str, str]] = {
    "plain-legacy": {**ADMIN},
    "team-a": {**ADMIN},
    "batch-b": {},
    "team-excepted": {**ADMIN},  # the policy's admin-access namespace
    "labelled-ns": {"gpu-migration": "migrated", **ADMIN},
    "labelled-hold": {"gpu-migration": "migrated", "hold": "yes"},
    "research-x": {"division": "ml", **ADMIN},
}
CLAIMS_IN = ("plain-legacy", "team-a", "labelled-ns", "research-x", "team-excepted")  # every stage, both dates
SCOPE_CLASSES = ("gpu.example.com", "gpu-retired.example.com")  # the policy's spec.migration.deviceClasses
IMAGE = "registry.example.com/trainer:1.0"


def _c(name: str, **resources: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": IMAGE}
    if resources:
        c["resources"] = {"limits": {k.replace("__", "/").replace("_", "."): v for k, v in resources.items()}}
    return c


def _spec(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers, "terminationGracePeriodSeconds": 0}
    if init:
        spec["initContainers"] = init
    return spec


SIDECAR = {**_c("proxy", example_com__gpu="2"), "restartPolicy": "Always"}
CONTENTS: dict[str, dict[str, Any]] = {
    "plain": _spec([_c("app", cpu="1")]),
    "legacy": _spec([_c("main", nvidia_com__gpu="1")]),
    "two-names": _spec([_c("a", vendor_example_com__gpu="1"), _c("b", vendor_example_com__gpu="1")],
                       [_c("init", nvidia_com__gpu="1")]),
    "many": _spec([_c(f"c{i}", vendor_example_com__gpu="1") for i in range(5)]),
    "sidecar-peak": _spec([_c("main", example_com__gpu="1")], [SIDECAR, _c("warmup", example_com__gpu="3")]),
    "at-limit": _spec([_c("main", example_com__gpu="2"),
                       _c("dra", **{"deviceclass.resource.kubernetes.io/gpu.example.com": "2"})]),
    "zero": _spec([_c("main", nvidia_com__gpu="0")]),
    # one container over maxPerPod (4): the check's cheap condition (``checks._over``) must let it through
    "one-over": _spec([_c("main", example_com__gpu="5")]),
    "other-scheduler": {**_spec([_c("main", example_com__gpu="2")]), "schedulerName": "kai-scheduler"},
    "implicit-and-legacy": _spec([_c("a", nvidia_com__gpu="1"),
                                  _c("b", **{"deviceclass.resource.kubernetes.io/gpu.example.com": "1"})]),
    # A claim: which claims are the migration's needs their DeviceClasses, so track-rollout stays the webhook's.
    "claim": {**_spec([_c("main", vendor_example_com__gpu="1")]),
              "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]},
}
POOL = "gpu.example.com/allocation"
MARKER = "dra-migration.io/node-pool"
GPU = _spec([_c("main", example_com__gpu="1")])
# steer-node-pool: example.com/gpu goes to the dra pool, the legacy names to the devicePlugin pool
STEERING: dict[str, dict[str, Any]] = {
    "pool-conflict": {**GPU, "nodeSelector": {POOL: "device-plugin"}},
    "affinity-conflict": {**GPU, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": POOL, "operator": "NotIn", "values": ["dra", "x"]}]}]}}}},
    "affinity-merge": {**GPU, "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}]}}},
    "bound": {**GPU, "nodeName": "gpu-node-1"},
    "bound-dp": {**_spec([_c("main", nvidia_com__gpu="1")]), "nodeName": "gpu-node-1"},
    "selected": {**_spec([_c("main", nvidia_com__gpu="1")]), "nodeSelector": {POOL: "device-plugin"}},
    # rule out the devicePlugin pool: a legacy name goes there in every stage; a scheduler that allocates no DRA
    # devices, only in the legacy stage (``placement.plan``'s fallback), though no device plugin serves the name
    "dp-conflict": {**_spec([_c("main", nvidia_com__gpu="1")]), "nodeSelector": {POOL: "dra"}},
    "dp-conflict-other-scheduler": {**GPU, "schedulerName": "kai-scheduler", "nodeSelector": {POOL: "dra"}},
}
WORKLOAD_CONTENTS = ("plain", "two-names", "sidecar-peak")
STEERED_IN = ("plain-legacy", "team-a", "labelled-ns", "research-x")
"""Where the steering and claim cases run: each stage on both dates, and fewer cases (the policies' type check and
every dry-run cost e2e time)."""
def _template(spec: dict[str, Any], restart: str = "Always") -> dict[str, Any]:
    return {"metadata": {"labels": {"app": "x"}}, "spec": {**spec, "restartPolicy": restart}}


def _workload(kind: str, name: str, ns: str, spec: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns}
    sel = {"matchLabels": {"app": "x"}}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if kind in ("Deployment", "ReplicaSet", "DaemonSet"):
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta,
                "spec": {"selector": sel, "template": _template(spec)}}
    if kind == "StatefulSet":
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta,
                "spec": {"selector": sel, "serviceName": name, "template": _template(spec)}}
    job = {"template": _template(spec, "Never")}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job}
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
            "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": job}}}


def _owned_replicaset(ns: str) -> dict[str, Any]:
    """A Deployment's ReplicaSet: judged at its Deployment, never itself (``examined_owner``)."""
    rs = _workload("ReplicaSet", "owned-legacy-replicaset", ns, CONTENTS["legacy"])
    rs["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d",
                                          "controller": True, "uid": "6b0b6ab2-0c55-4d3e-9d59-1a4c3c0c4a5e"}]
    return rs


def _training(ns: str) -> list[dict[str, Any]]:
    """Long training jobs (``trainingJobs``): by the template's or the object's labels, by a Job's deadline."""
    gpu = _spec([_c("main", example_com__gpu="2")])
    labelled = _workload("Pod", "training-pod", ns, gpu)
    labelled["metadata"]["labels"] = {"workload.example.com/kind": "training"}
    keyed = _workload("Pod", "training-legacy-pod", ns, CONTENTS["legacy"])  # the device plugin serves it
    keyed["metadata"]["labels"] = {"training.kubeflow.org/job-name": "j"}
    deadline = _workload("Job", "training-job", ns, gpu)
    deadline["spec"]["activeDeadlineSeconds"] = 20000
    owner = _workload("Deployment", "training-deployment", ns, gpu)
    owner["metadata"]["labels"] = {"workload.example.com/kind": "training"}
    cron = _workload("CronJob", "training-cronjob", ns, gpu)
    cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]["training.kubeflow.org/job-name"] = "c"
    return [labelled, keyed, deadline, owner, cron]


def _exactly(name: str, cls: str = "gpu.example.com", **fields: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": cls, **fields}}


def _first(name: str, *subs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "firstAvailable": [{"name": s["name"], **s["exactly"]} for s in subs]}


FOREVER = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}
CLAIM_REQUESTS: dict[str, list[dict[str, Any]]] = {
    "mode-all": [_exactly("r", allocationMode="All"),
                 _first("q", _exactly("a", allocationMode="All"), _exactly("b", count=6))],
    "tolerations": [_exactly("r", tolerations=[
        {"operator": "Exists"}, FOREVER, {**FOREVER, "tolerationSeconds": 3600},
        {**FOREVER, "tolerationSeconds": 300},  # the policy's own deviceTolerations: not reported
        {"operator": "Exists", "effect": "None"}, {"key": "k", "operator": "Equal", "value": "v"}])],
    # adminAccess: monitoring may tolerate everything and take All, but only in an admin-access namespace.
    "admin": [_exactly("dcgm", adminAccess=True, allocationMode="All", tolerations=[{"operator": "Exists"}]),
              _exactly("plain", count=5)],
    "retired-class": [_exactly("old", "gpu-retired.example.com"),
                      _first("q", _exactly("new"), _exactly("old", "gpu-retired.example.com", count=2))],
    "fine": [_exactly("r", count=4), _first("q", _exactly("a", count=2), _exactly("b"))],
    # A class outside the scope's named classes: whether it is the migration's needs the cluster's DeviceClasses,
    # so the compiled policies leave the whole claim to the webhook (offline, check judges it).
    "other-class": [_exactly("cpu", "dra.cpu", allocationMode="All"), _exactly("gpu", count=9)],
}


def _claims(ns: str) -> list[dict[str, Any]]:
    """A ResourceClaim per CLAIM_REQUESTS entry, and two as ResourceClaimTemplates."""
    out = []
    for name, requests in CLAIM_REQUESTS.items():
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": name, "namespace": ns}, "spec": {"devices": {"requests": requests}}})
    for name in ("mode-all", "tolerations"):
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                    "metadata": {"name": f"{name}-template", "namespace": ns},
                    "spec": {"spec": {"devices": {"requests": CLAIM_REQUESTS[name]}}}})
    return out


def _left_to_the_webhook(obj: dict[str, Any]) -> bool:
    """A claim naming a class outside SCOPE_CLASSES (matchCondition scope-decidable)."""
    if not obj["kind"].startswith("ResourceClaim"):
        return False
    spec = obj["spec"]["spec"] if obj["kind"] == "ResourceClaimTemplate" else obj["spec"]
    requests = spec["devices"]["requests"]
    slots = [s for r in requests for s in ([r["exactly"]] if "exactly" in r else r["firstAvailable"])]
    return any(s["deviceClassName"] not in SCOPE_CLASSES for s in slots)


def _steered_before(ns: str) -> list[dict[str, Any]]:
    """Objects the webhook steered to the devicePlugin pool in an earlier stage (the marker names it): its own
    requirement is replaced, a term it alone made goes, and a DaemonSet's Pod is never steered."""
    earlier = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL, "operator": "In", "values": ["device-plugin"]}]}]}}}
    pod = _workload("Pod", "resteer-pod", ns, {**GPU, "affinity": earlier})
    pod["metadata"]["annotations"] = {MARKER: "devicePlugin", "team": "a"}
    dropped = _workload("Pod", "resteer-selected-pod", ns, {**GPU, "affinity": earlier, "nodeSelector": {POOL: "dra"}})
    dropped["metadata"]["annotations"] = {MARKER: "devicePlugin"}
    deployment = _workload("Deployment", "resteer-deployment", ns, {**GPU, "affinity": earlier})
    deployment["spec"]["template"]["metadata"]["annotations"] = {MARKER: "devicePlugin"}
    cron = _workload("CronJob", "unmarked-cronjob", ns, {**GPU, "affinity": earlier})  # the user's own: a conflict
    # and the other way: a Pod for the devicePlugin pool (a legacy name) with the dra pool's term, the steering's own
    # (marker dra: replaced, no conflict; the policies' ``may-find`` matchCondition must not read it as a finding)
    # or the user's (no marker: a conflict, which ``may-find`` must let through)
    dra = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL, "operator": "In", "values": ["dra"]}]}]}}}
    back = _workload("Pod", "resteer-back-pod", ns, {**CONTENTS["legacy"], "affinity": dra})
    back["metadata"]["annotations"] = {MARKER: "dra"}
    unmarked = _workload("Pod", "unmarked-dra-legacy-pod", ns, {**CONTENTS["legacy"], "affinity": dra})
    daemon = _workload("Pod", "daemon-pod", ns, CONTENTS["legacy"])
    daemon["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                                              "controller": True, "uid": "0b4e7c2e-5d1a-4c53-9d3e-2f6f0e3c1a77"}]
    # where a steering conflict denies (migrated), the webhook's validating call never runs: no training warning
    training = _workload("Pod", "training-conflict-pod", ns, STEERING["pool-conflict"])
    training["metadata"]["labels"] = {"workload.example.com/kind": "training"}
    # not steered now (another scheduler's, bound), steered to dra before: tracked on the pool its marker names
    kept = _workload("Pod", "kept-on-dra-pod", ns, {**GPU, "schedulerName": "kai-scheduler", "nodeName": "n1"})
    kept["metadata"]["annotations"] = {MARKER: "dra"}
    return [pod, dropped, deployment, cron, daemon, back, unmarked, training, kept]


def _carried_over(ns: str) -> list[dict[str, Any]]:
    """Pods that arrive with our annotations already (made from a template the webhook annotated, or copied from
    another namespace): the Pod policy's ``unsettled`` matchCondition must not skip what still has to be written,
    stale annotation values, a missing affinity, our own term with a marker naming the other pool."""
    ours = load_policy(POLICY).identity
    dra = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": POOL, "operator": "In", "values": ["dra"]}]}]}}}
    stale = {f"dra-migration.io/{k}": v for k, v in
             (("path", "device-plugin"), ("stage", "legacy"), ("cohort", "nobody"), ("policy", ours))}
    out = []
    for name, spec, carried in (
            ("carried-stale-pod", GPU, stale),
            ("carried-unsteered-pod", GPU, {"dra-migration.io/policy": ours}),
            ("carried-steered-pod", {**GPU, "affinity": dra}, {**stale, MARKER: "dra"}),
            ("carried-other-marker-pod", {**GPU, "affinity": dra}, {"dra-migration.io/policy": ours,
                                                                  MARKER: "devicePlugin"})):
        pod = _workload("Pod", name, ns, spec)
        pod["metadata"]["annotations"] = dict(carried)
        out.append(pod)
    return out


INJECTED = "dra-migration.io/tolerations-injected"
def _claim(kind: str, name: str, ns: str, requests: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, Any]:
    spec = {"devices": {"requests": requests}}
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": kind, "metadata": {"name": name, "namespace": ns}}
    if kind == "ResourceClaim":
        return {**obj, "metadata": {**obj["metadata"], "labels": labels}, "spec": spec}
    return {**obj, "spec": {"metadata": {"labels": labels}, "spec": spec}}


def _training_claims(ns: str) -> list[dict[str, Any]]:
    """inject-device-tolerations: claims and templates a training job's by their labels, requests and subrequests,
    one toleration of the policy's key present already (kept: the user's choice wins), not a training job's, and
    another driver's class (out of scope); a claim mixing both classes is left to the webhook."""
    training = {"workload.example.com/kind": "training"}
    gpu, cpu = {"deviceClassName": "gpu.example.com"}, {"deviceClassName": "dra.cpu"}
    own = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
    first = [{"name": "big", **gpu, "tolerations": [own]}, {"name": "small", **gpu}]
    return [
        _claim("ResourceClaimTemplate", "training-template", ns, [{"name": "gpu", "exactly": gpu}], training),
        _claim("ResourceClaim", "training-claim", ns, [{"name": "a", "firstAvailable": first},
                                                       {"name": "b", "exactly": gpu}],
               {"training.kubeflow.org/job-name": "j"}),
        _claim("ResourceClaim", "plain-claim", ns, [{"name": "gpu", "exactly": gpu}], {}),
        _claim("ResourceClaimTemplate", "cpu-template", ns, [{"name": "cpu", "exactly": cpu}], training),
        _claim("ResourceClaim", "mixed-claim", ns, [{"name": "gpu", "exactly": gpu},
                                                    {"name": "cpu", "exactly": cpu}], training),
    ]


def tolerated(obj: dict[str, Any]) -> dict[str, Any]:
    """What inject-device-tolerations writes: each request's and subrequest's tolerations, the count annotations."""
    spec = obj.get("spec") or {}
    meta = [obj.get("metadata") or {}]
    if obj["kind"] == "ResourceClaimTemplate":
        meta.append(spec.get("metadata") or {})
        spec = spec.get("spec") or {}
    tolerations = []
    for req in (spec.get("devices") or {}).get("requests") or []:
        for body in [req.get("exactly") or {}, *(req.get("firstAvailable") or [])]:
            tolerations.append(body.get("tolerations"))
    return {"tolerations": tolerations, "count": [(m.get("annotations") or {}).get(INJECTED) for m in meta]}


def cases() -> list[dict[str, Any]]:
    out = []
    for ns in CLAIMS_IN:
        out += _claims(ns)
    for ns in NAMESPACES:
        out += _training(ns)
        if ns in STEERED_IN:
            out += _steered_before(ns) + _training_claims(ns) + _carried_over(ns)
            out += [_workload("Pod", f"{content}-pod", ns, spec) for content, spec in STEERING.items()]
            out += [_workload(kind, f"affinity-merge-{kind.lower()}", ns, STEERING["affinity-merge"])
                    for kind in ("Deployment", "DaemonSet", "CronJob")]
        out += [_workload("Pod", f"{content}-pod", ns, spec) for content, spec in CONTENTS.items()]
        for kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob"):
            out += [_workload(kind, f"{content}-{kind.lower()}", ns, CONTENTS[content])
                    for content in WORKLOAD_CONTENTS]
        out.append(_owned_replicaset(ns))
    return out


def _expected(r: dict[str, Any]) -> tuple[bool, list[str], list[str]]:
    """What the compiled policies must answer, from ``check``: (allowed, warnings, denial texts) of compiled rules."""
    compiled = [f for f in r["findings"] if f["rule"] in COMPILED]
    warnings = sorted(w for w in r["warnings"] if w.split(" ", 1)[0] in COMPILED)
    denials = [f"{f['rule']} ({r['stage']}: Deny): {f['message']}; fix: {f['remediation'].splitlines()[0]}"
               for f in compiled if f["action"] == "Deny"]
    return not denials, warnings, denials


RANDOM_SEED = int(os.environ.get("DRA_E2E_RANDOM_SEED", "2"))
RANDOM_PODS = 160
RANDOM_IN = ("plain-legacy", "team-a", "labelled-ns")
"""Every random Pod goes to a namespace of each stage on DATES[0] (legacy, pilot, migrated) and to one more of the
others (their cohorts, the exception, a held namespace), chosen with the Pod."""
DEVICE_NAMES = ("example.com/gpu", "vendor.example.com/gpu", "nvidia.com/gpu",
                "deviceclass.resource.kubernetes.io/gpu.example.com")  # the served name, its legacy, its class's
TERMS: dict[str, dict[str, Any]] = {
    "dra": {"matchExpressions": [{"key": POOL, "operator": "In", "values": ["dra"]}]},
    "devicePlugin": {"matchExpressions": [{"key": POOL, "operator": "In", "values": ["device-plugin"]}]},
    "user": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
    "not-dra": {"matchExpressions": [{"key": POOL, "operator": "NotIn", "values": ["dra"]}]},
    "not-dp": {"matchExpressions": [{"key": POOL, "operator": "NotIn", "values": ["device-plugin"]}]},
    "not-other": {"matchExpressions": [{"key": POOL, "operator": "NotIn", "values": ["other"]}]},
    "dra-and-user": {"matchExpressions": [{"key": POOL, "operator": "In", "values": ["dra"]},
                                          {"key": "zone", "operator": "In", "values": ["a"]}]},
}
REQUIRED_TERMS = (["dra"], ["devicePlugin"], ["user"], ["not-dra"], ["not-dp"], ["not-other"], ["dra-and-user"],
                  ["dra", "user"], ["devicePlugin", "user"], ["dra", "devicePlugin"])


def _random_container(rng: Any, name: str) -> dict[str, Any]:
    """A container asking for nothing, CPU only, or one or two of the policy's device names with a small count."""
    c: dict[str, Any] = {"name": name, "image": IMAGE}
    roll = rng.random()
    if roll < 0.08:
        return c
    limits = {"cpu": "500m"} if roll < 0.2 else {rng.choice(DEVICE_NAMES): rng.choice(("0", "1", "1", "2", "4", "5"))}
    if roll >= 0.2 and rng.random() < 0.2:
        limits[rng.choice(DEVICE_NAMES)] = rng.choice(("1", "2", "4"))
    if roll >= 0.2 and rng.random() < 0.15:
        limits["cpu"] = "1"
    c["resources"] = {"limits": limits}
    if rng.random() < 0.15:
        c["resources"]["requests"] = dict(limits)  # an extended resource's request, when set, equals its limit
    return c


def _random_spec(rng: Any) -> dict[str, Any]:
    """A pod spec: its containers, scheduler, node, nodeSelector and required node affinity drawn together."""
    spec = _spec([_random_container(rng, f"c{i}") for i in range(rng.choice((1, 1, 1, 2)))])
    init = []
    if rng.random() < 0.2:
        init.append(_random_container(rng, "init"))
    if rng.random() < 0.15:
        init.append({**_random_container(rng, "sidecar"), "restartPolicy": "Always"})
    if init:
        spec["initContainers"] = rng.sample(init, len(init))
    spec.update(rng.choice(({}, {}, {}, {"schedulerName": "default-scheduler"}, {"schedulerName": "kai-scheduler"})))
    if rng.random() < 0.12:
        spec["nodeName"] = "gpu-node-1"
    if rng.random() < 0.35:
        spec["nodeSelector"] = rng.choice(({POOL: "dra"}, {POOL: "device-plugin"}, {POOL: "other"}, {"zone": "a"},
                                           {POOL: "dra", "zone": "a"}))
    roll = rng.random()
    if roll < 0.45:
        terms = [TERMS[t] for t in rng.choice(REQUIRED_TERMS)]
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": json.loads(json.dumps(terms))}}}
    elif roll < 0.5:  # only a preference: constrains nothing
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": TERMS[rng.choice(("devicePlugin", "not-dra"))]}]}}
    if rng.random() < 0.1:
        spec["activeDeadlineSeconds"] = 20000
    return spec


def random_pods(seed: int = RANDOM_SEED, n: int = RANDOM_PODS) -> list[dict[str, Any]]:
    """``n`` Pods drawn with ``random.Random(seed)``, each in every RANDOM_IN namespace and one other."""
    rng = random.Random(seed)
    others = [ns for ns in NAMESPACES if ns not in RANDOM_IN]
    out = []
    for i in range(n):
        spec = _random_spec(rng)
        meta: dict[str, Any] = {}
        marker = rng.choice((None, None, None, "dra", "devicePlugin"))
        if marker:
            meta["annotations"] = {MARKER: marker}
        roll = rng.random()
        if roll < 0.15:
            meta["labels"] = {"workload.example.com/kind": "training"}
        elif roll < 0.2:
            meta["labels"] = {"workload.example.com/kind": "serving"}
        for ns in (*RANDOM_IN, rng.choice(others)):
            pod = _workload("Pod", f"random-{i:03d}", ns, json.loads(json.dumps(spec)))
            pod["metadata"].update(json.loads(json.dumps(meta)))
            out.append(pod)
    return out
