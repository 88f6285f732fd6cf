"""Issue #28 items 1, 3, 4: the compiled ValidatingAdmissionPolicies decide as the webhook does, on the real API server.

One control plane of its own, with NO webhook installed: ``dra-webhook compile`` output is applied as is
(server-side apply), then one table of cases (every compiled rule, every stage, a Pod and each built-in workload
kind) is sent through the API server (server-side dry-run create) and through ``dra-webhook check`` (offline,
same policy, same ``--at``). Both must allow and deny the same objects, and the API server's warnings must be
the webhook's warnings of the compiled rules, word for word. Done for two dates, so a stage change and an
expired exception are covered. A seeded random table of Pods (``random_pods``) is compared the same way, on one
date. Also: ``compile --validate`` reports the API server's type check, and a broken expression is reported.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.e2e import binaries
from tests.e2e.controlplane import ControlPlane
from tests.e2e.kube import Denied, Kube
from tests.e2e.waits import eventually
from webhook.commands import load_policy
from webhook.compile import compile_admission
from webhook.compile.coverage import COMPILED
from webhook.rules.tracking import TRACK_NAMES

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
VAP_WARNING = re.compile(r"^Validation failed for ValidatingAdmissionPolicy '[^']+' with binding '[^']+': ")
VAP_DENIAL = re.compile(r"ValidatingAdmissionPolicy '[^']+' with binding '[^']+' denied request: ")
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
UPDATED_IN = ("labelled-ns", "team-a", "plain-legacy")


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
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")  # track-rollout on claims stays with the webhook


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


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory):
    """A control plane of this module's own, with no webhook. The controller-manager runs the
    ValidatingAdmissionPolicy status controller, which type-checks the policies (``compile --validate``)."""
    try:
        found = binaries.find()
    except binaries.NoBinaries as exc:
        pytest.skip(f"e2e suite skipped: {exc}")
    if not found.has_controllers:
        pytest.skip("needs kube-controller-manager (the policies' type check), which KUBEBUILDER_ASSETS lacks")
    cp = ControlPlane(found, tmp_path_factory.mktemp("compiled"))
    try:
        cp.start()
        kube = Kube(cp.api())
        for ns, labels in NAMESPACES.items():
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}})
            eventually(lambda ns=ns: kube.get_or_none("v1", "ServiceAccount", "default", ns), f"SA default in {ns}", 60)
        for ns in UPDATED_IN:  # before any compiled policy: admitted in an earlier stage, so to speak
            existing = _workload("Deployment", "existing", ns, CONTENTS["two-names"])
            # a path this stage's plan would not write: an UPDATE that leaves the template alone keeps it, and the
            # Deployment's own path follows its template's as stored (tracking._stored_path)
            existing["spec"]["template"]["metadata"]["annotations"] = {"dra-migration.io/path": "dra-extended-resource"}
            kube.create(existing)
        yield cp, kube
    finally:
        cp.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", *args], capture_output=True, text=True, timeout=300)


def _apply_compiled(cp: ControlPlane, kube: Kube, at: str) -> list[dict[str, Any]]:
    """``compile --validate`` against the plane (it prunes the previous date's objects that are no longer compiled);
    the objects applied. Objects that did not change keep their generation, so their type check is not done again:
    the tests of one date run one after the other."""
    done = _cli("compile", "--policy", str(POLICY), "--at", at, "-o", "json", "--validate",
                "--kubeconfig", str(cp.admin_kubeconfig))
    assert done.returncode == 0, done.stderr
    assert "type check passed" in done.stderr
    return json.loads(done.stdout)["items"]


def _server(kube: Kube, obj: dict[str, Any]) -> tuple[bool, list[str], str, dict[str, Any]]:
    """(allowed, the compiled policies' warnings without the API server's prefix, denial message, stored object)."""
    try:
        result = kube.create(obj, dry_run=True)
    except Denied as exc:
        return False, _ours(exc.warnings), exc.message, {}
    return True, _ours(result.warnings), "", result.obj


def _ours(warnings: list[str]) -> list[str]:
    """The compiled policies' warnings, without the API server's prefix, sorted."""
    return sorted(VAP_WARNING.sub("", w) for w in warnings if VAP_WARNING.match(w))


TEMPLATE_AT = {"Pod": (), "CronJob": ("spec", "jobTemplate", "spec", "template")}


def tracking(obj: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The track-rollout annotations on the object and on its pod template."""
    out = {}
    for where, path in (("object", ()), ("template", TEMPLATE_AT.get(obj["kind"], ("spec", "template")))):
        if where == "template" and not path:
            continue
        node: Any = obj
        for step in path:
            node = node.get(step) or {}
        ann = (node.get("metadata") or {}).get("annotations") or {}
        out[where] = {k: v for k, v in ann.items() if k.split("/")[-1] in TRACK_NAMES}
    return out


def placement(obj: dict[str, Any]) -> dict[str, Any]:
    """What steer-node-pool writes: the template's (a Pod's own) affinity and node-pool marker."""
    node: Any = obj
    for step in TEMPLATE_AT.get(obj["kind"], ("spec", "template")):
        node = node.get(step) or {}
    ann = (node.get("metadata") or {}).get("annotations") or {}
    return {"affinity": (node.get("spec") or {}).get("affinity"), "marker": ann.get(MARKER)}


def _patched(obj: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    return jsonpatch.apply_patch(obj, r["patch"]) if r["patch"] else obj


def _checked(tmp: Path, at: str, objs: list[dict[str, Any]],
             policy: Path = POLICY) -> dict[tuple[str, str], dict[str, Any]]:
    """``check -o json`` over every case (and the Namespaces, its view of namespace labels), by (kind, ns/name)."""
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": labels}}
                  for n, labels in NAMESPACES.items()]
    path = tmp / f"cases-{at}.yaml"
    path.write_text(yaml.safe_dump_all([*namespaces, *objs]))
    done = _cli("check", "--policy", str(policy), "--at", at, "-o", "json", str(path))
    assert done.returncode in (0, 1), done.stderr
    out = {}
    for r in json.loads(done.stdout)["results"]:
        kind, _, where = r["object"].partition(" ")
        out[(kind, where)] = r
    return out


def _expected(r: dict[str, Any]) -> tuple[bool, list[str], list[str]]:
    """What the compiled policies must answer, from ``check``: (allowed, warnings, denial texts) of compiled rules."""
    compiled = [f for f in r["findings"] if f["rule"] in COMPILED]
    warnings = sorted(w for w in r["warnings"] if w.split(" ", 1)[0] in COMPILED)
    denials = [f"{f['rule']} ({r['stage']}: Deny): {f['message']}; fix: {f['remediation'].splitlines()[0]}"
               for f in compiled if f["action"] == "Deny"]
    return not denials, warnings, denials


def _wait_for_date(kube: Kube, at: str) -> None:
    """Until the API server uses this date's objects (the team-a cohort is pilot, then migrated)."""
    stage = "pilot" if at == DATES[0] else "migrated"
    legacy, fine = (_workload("Pod", "probe", "team-a", CONTENTS[c]) for c in ("legacy", "at-limit"))
    eventually(lambda: _server(kube, legacy)[0] == (stage == "pilot"), f"the {at} validating policies in use", 30)
    eventually(lambda: tracking(_server(kube, fine)[3])["object"].get("dra-migration.io/stage") == stage,
               f"the {at} mutating policies in use", 30)


def _updates(old: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """UPDATEs of a stored Deployment: only its own labels, only the webhook's template annotation, its template."""
    own = json.loads(json.dumps(old))
    own["metadata"].setdefault("labels", {})["team"] = "x"
    marker = json.loads(json.dumps(old))
    marker["spec"]["template"]["metadata"]["annotations"] = {"dra-migration.io/stage": "pilot"}
    template = json.loads(json.dumps(old))
    template["spec"]["template"]["metadata"]["labels"]["rev"] = "2"
    return {"own-labels": own, "webhook-annotation": marker, "template": template}


def _review(obj: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"update-{meta['namespace']}", "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"}, "namespace": meta["namespace"],
        "name": meta["name"], "operation": "UPDATE", "userInfo": {"username": "e2e-admin"},
        "object": obj, "oldObject": old}}


def _enforce(cp: ControlPlane, kube: Kube, at: str) -> None:
    """The compiled objects of ``at`` applied (``_apply_compiled``) and in effect, the plane's clock past ``at``."""
    applied = _apply_compiled(cp, kube, at)
    # compile --validate read the namespaces: the teams cohort's (by name) skip the Audit (legacy) policies at their
    # bindings, and must still be judged as the webhook judges them
    assert "team-a" in {v for o in applied if o["kind"] == "ValidatingAdmissionPolicyBinding"
                        for e in o["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][1:]
                        for v in e["values"]}
    probe = _workload("Pod", "probe", "labelled-ns", CONTENTS["legacy"])
    eventually(lambda: not _server(kube, probe)[0], "the API server enforcing the compiled policies", 30)
    _wait_for_date(kube, at)


@pytest.mark.parametrize("at", DATES[:1])
def test_updates_are_judged_only_when_the_template_changes(plane, tmp_path, at):
    """``examined_templates`` on UPDATE: a change of the Deployment's own labels or of the webhook's own template
    annotation is never judged, a template change is; the API server (dry-run PUT) and ``check`` (the
    AdmissionReview with its oldObject) agree on each."""
    cp, kube = plane
    _enforce(cp, kube, at)
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": labels}}
                  for n, labels in NAMESPACES.items()]
    docs, sent = [], []
    for ns in UPDATED_IN:
        old = kube.get("apps/v1", "Deployment", "existing", ns)
        for what, new in _updates(old).items():
            docs.append(_review(new, old))
            sent.append((f"{ns} {what}", new))
    path = tmp_path / "updates.yaml"
    path.write_text(yaml.safe_dump_all([*namespaces, *docs]))
    done = _cli("check", "--policy", str(POLICY), "--at", at, "-o", "json", str(path))
    results = [r for r in json.loads(done.stdout)["results"] if r["object"].startswith("Deployment ")]
    assert len(results) == len(sent), done.stderr
    outcomes = {}
    for (where, new), r in zip(sent, results, strict=True):
        allowed, warnings, _ = _expected(r)
        try:
            got = kube.call("PUT", f"/apis/apps/v1/namespaces/{new['metadata']['namespace']}/deployments/existing",
                            new, [("dryRun", "All")])
            got_allowed, got_warnings = True, sorted(VAP_WARNING.sub("", w) for w in got.warnings
                                                     if VAP_WARNING.match(w))
        except Denied:
            got_allowed, got_warnings = False, []
        assert (got_allowed, got_warnings) == (allowed, warnings), where
        if got_allowed:
            assert tracking(got.obj) == tracking(_patched(new, r)), where
            assert placement(got.obj) == placement(_patched(new, r)), where
        outcomes[where] = (allowed, bool(warnings))
    assert outcomes["labelled-ns template"] == (False, False)  # migrated: denied
    assert outcomes["team-a template"] == (True, True)  # pilot: warned
    unchanged = [outcomes[f"{ns} {w}"] for ns in UPDATED_IN for w in ("own-labels", "webhook-annotation")]
    assert unchanged == [(True, False)] * len(unchanged)


SWAP = "zz-e2e-swap-to-legacy"
"""A MutatingAdmissionPolicy of someone else's (a sidecar injector, HAMi's scheduler switch...) that changes a Pod
after ours has tracked and steered it: here, its GPU becomes the legacy name."""


def _swap_objects() -> list[dict[str, Any]]:
    group = "admissionregistration.k8s.io/v1"
    ours = "object.metadata.?annotations[?'dra-migration.io/path'].hasValue()"
    mine = "object.metadata.?labels[?'e2e-swap'] == optional.of('legacy')"
    asks = "'example.com/gpu' in object.spec.containers[0].?resources.?limits.orValue({})"
    return [
        {"apiVersion": group, "kind": "MutatingAdmissionPolicy", "metadata": {"name": SWAP}, "spec": {
            "failurePolicy": "Fail", "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}]},
            # Matched whatever the order of the two policies, so the API server counts it as invoked and invokes
            # it again after ours; it writes only once ours has (our path annotation), so ours always runs again
            # on a Pod that carries what it wrote.
            "matchConditions": [{"name": "gpu-to-swap", "expression": f"{mine} && {asks}"}],
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                f"{ours} ? [JSONPatch{{op: 'replace', path: '/spec/containers/0/resources', "
                "value: {'limits': {'nvidia.com/gpu': '1'}}}] : []")}}]}},
        {"apiVersion": group, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": SWAP},
         "spec": {"policyName": SWAP}},
    ]


@pytest.mark.parametrize("at", DATES[:1])
def test_a_later_mutation_is_tracked_and_steered_again(plane, tmp_path, at):
    """The API server invokes our Pod policy again when another mutation changes the Pod after it (kubernetes v1.36
    plugin/policy/mutating/dispatcher.go, ``reinvocationPolicy: IfNeeded``). Its ``unsettled`` matchCondition skips
    only a Pod that already carries what the policy writes, so a GPU that became the legacy name after the first
    pass is tracked and steered as ``check`` does the final Pod: path, devicePlugin pool, marker."""
    cp, kube = plane
    _apply_compiled(cp, kube, at)
    _wait_for_date(kube, at)
    swap = _swap_objects()
    for obj in swap:
        kube.create(obj)
    try:
        pod = _workload("Pod", "swapped-pod", "team-a", GPU)
        pod["metadata"]["labels"] = {"e2e-swap": "legacy"}
        final = _workload("Pod", "swapped-pod", "team-a", CONTENTS["legacy"])
        final["metadata"]["labels"] = {"e2e-swap": "legacy"}
        r = _checked(tmp_path, at, [final])[("Pod", "team-a/swapped-pod")]
        first = _checked(tmp_path, at, [pod])[("Pod", "team-a/swapped-pod")]
        assert placement(_patched(final, r)) != placement(_patched(pod, first))  # the change moves the pool

        def swapped() -> dict[str, Any]:
            allowed, _, message, got = _server(kube, pod)
            assert allowed, message
            limits = got["spec"]["containers"][0].get("resources", {}).get("limits", {})
            assert "nvidia.com/gpu" in limits, f"limits {limits}, annotations {got['metadata'].get('annotations')}"
            return got
        got = eventually(swapped, "the other mutation in use", 30)
        assert tracking(got) == tracking(_patched(final, r))
        assert placement(got) == placement(_patched(final, r))
    finally:
        for obj in reversed(swap):
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


@dataclass
class Compared:
    """What ``_compare`` saw: every difference between the API server and ``check``, and counts of what happened."""

    mismatches: list[str] = field(default_factory=list)
    fired: set[tuple[str, str]] = field(default_factory=set)  # (compiled rule, action) check reported
    tracked: int = 0  # objects the API server annotated (track-rollout)
    steered: int = 0  # objects whose placement the API server changed (steer-node-pool)
    injected: int = 0  # objects whose tolerations the API server changed (inject-device-tolerations)
    found: int = 0  # objects the API server denied or warned about (a compiled policy's warning)
    findings: set[str] = field(default_factory=set)  # each compiled finding check reported, as "rule: message"


def _compare(kube: Kube, objs: list[dict[str, Any]], checked: dict[tuple[str, str], dict[str, Any]]) -> Compared:
    """Sends each object through the API server (dry-run create) and compares with ``check``'s result: allowed or
    denied, the compiled rules' warnings word for word, the denial's text, and what the mutations wrote."""
    seen = Compared()
    for obj in objs:
        meta = obj["metadata"]
        r = checked[(obj["kind"], f"{meta['namespace']}/{meta['name']}")]
        where = f"{obj['kind']} {meta['namespace']}/{meta['name']}"
        allowed, warnings, denials = _expected(r) if not _left_to_the_webhook(obj) else (True, [], [])
        if not _left_to_the_webhook(obj):
            compiled = [f for f in r["findings"] if f["rule"] in COMPILED]
            seen.fired.update((f["rule"], f["action"]) for f in compiled)
            seen.findings.update(f"{f['rule']}: {f['message']}" for f in compiled)
        elif meta["namespace"] in CLAIMS_IN and meta["name"] in CLAIM_REQUESTS:
            assert r["findings"], where  # check judges it (offline, every named class is the migration's)
        got_allowed, got_warnings, message, stored = _server(kube, obj)
        if obj["kind"].startswith("ResourceClaim"):
            pass  # track-rollout on claims stays with the webhook
        elif got_allowed and "resourceClaims" in json.dumps(obj):
            assert tracking(stored)["object"] == {}, where  # left to the webhook (matchCondition no-resource-claims)
        elif got_allowed and tracking(stored) != tracking(_patched(obj, r)):
            seen.mismatches.append(f"{where}: annotations\n  API server {tracking(stored)}\n  check      "
                                   f"{tracking(_patched(obj, r))}")
        if got_allowed and placement(stored) != placement(_patched(obj, r)):
            seen.mismatches.append(f"{where}: placement\n  API server {placement(stored)}\n  check      "
                                   f"{placement(_patched(obj, r))}")
        seen.steered += bool(stored and placement(stored) != placement(obj))
        if got_allowed and _left_to_the_webhook(obj):  # a class only the cluster view can place
            assert tolerated(stored) == tolerated(obj), where
        elif got_allowed and tolerated(stored) != tolerated(_patched(obj, r)):
            seen.mismatches.append(f"{where}: tolerations\n  API server {tolerated(stored)}\n  check      "
                                   f"{tolerated(_patched(obj, r))}")
        seen.injected += bool(stored and tolerated(stored) != tolerated(obj))
        seen.tracked += bool(stored and tracking(stored)["object"])
        if got_allowed != allowed:
            seen.mismatches.append(f"{where}: API server allowed={got_allowed} ({message}), "
                                   f"check allowed={allowed} {denials}")
        elif got_warnings != warnings:
            seen.mismatches.append(f"{where}: warnings\n  API server {got_warnings}\n  check      {warnings}")
        elif not allowed and not any(VAP_DENIAL.search(message) and message.endswith(d) for d in denials):
            seen.mismatches.append(f"{where}: denial {message!r} is none of {denials}")
        seen.found += not got_allowed or bool(got_warnings)
    return seen


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


RANDOM_FINDINGS = (
    "legacy-resource-name: ", "max-devices-per-pod: ", "training-job-extended-resource: ",
    "steer-node-pool: Pod selects .* rules out the dra node pool",
    "steer-node-pool: Pod selects .* rules out the devicePlugin node pool",
    "steer-node-pool: Pod is bound .* needs the dra pool",
    "steer-node-pool: Pod is bound .* needs the devicePlugin pool",
    "steer-node-pool: schedulerName .* not steered",
    "steer-node-pool: schedulerName .* kept on the devicePlugin pool",
)
"""What ``check`` must find somewhere in the random table (``rule: message`` patterns): every compiled check's
finding, a conflict and a bound Pod for each pool."""


@pytest.mark.parametrize("at", DATES[:1])  # every stage already (RANDOM_IN); the date the tests above left applied
def test_random_pods_are_decided_as_the_webhook_does(plane, tmp_path, at):
    """A seeded random table of Pods (``random_pods``) through the API server and ``check``, compared as the fixed
    table below is (``_compare``). It probes the validating policies' ``may-find`` matchCondition (each check's
    cheap necessary condition, ``Check.could``: one that is not necessary makes the API server miss a finding) and
    the steering's and tracking's conditions on combinations the fixed table does not list.
    ``DRA_E2E_RANDOM_SEED=<n>`` draws another table."""
    cp, kube = plane
    _enforce(cp, kube, at)
    objs = random_pods()
    seen = _compare(kube, objs, _checked(tmp_path, at, objs))
    assert not seen.mismatches, f"seed {RANDOM_SEED}:\n" + "\n".join(seen.mismatches)
    # not vacuous: many objects with a compiled finding, many steered, and a finding of every compiled check
    assert seen.found > len(objs) / 4, seen.found
    assert seen.steered > len(objs) / 6, seen.steered
    missed = [p for p in RANDOM_FINDINGS if not any(re.match(p, f) for f in seen.findings)]
    assert not missed, missed


@pytest.mark.parametrize("at", DATES)
def test_compiled_policies_decide_as_the_webhook(plane, tmp_path, at):
    cp, kube = plane
    _enforce(cp, kube, at)
    objs = cases()
    seen = _compare(kube, objs, _checked(tmp_path, at, objs))
    assert not seen.mismatches, "\n".join(seen.mismatches)
    pods_and_templates = len([o for o in objs if not o["kind"].startswith("ResourceClaim")])
    assert seen.tracked > pods_and_templates / 3, seen.tracked
    assert seen.steered > pods_and_templates / 3, seen.steered
    assert seen.injected == 2 * len(STEERED_IN), seen.injected  # the training template and claim, in every ns
    # The table exercises every compiled rule in every action this date gives it.
    validating = [rule for rule in COMPILED if rule not in ("track-rollout", "inject-device-tolerations")]  # mutations
    assert {(rule, a) for rule in validating for a in ("Deny", "Warn", "Audit")} <= seen.fired | {
        ("legacy-resource-name", "Audit"), ("training-job-extended-resource", "Deny")}, seen.fired


def _probe(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """A copy of a compiled ValidatingAdmissionPolicy's matchConditions with one validation that always fails (Warn,
    failurePolicy Fail: an evaluation error of the conditions denies the request): it warns exactly when the
    conditions let an object through to the policy's validations."""
    name = "probe-" + policy["metadata"]["name"]
    fails = {"expression": "false", "message": f"let through to {policy['metadata']['name']}"}
    return [{"apiVersion": policy["apiVersion"], "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
             "spec": {"failurePolicy": "Fail", "matchConstraints": policy["spec"]["matchConstraints"],
                      "matchConditions": policy["spec"]["matchConditions"], "validations": [fails]}},
            {"apiVersion": policy["apiVersion"], "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
             "spec": {"policyName": name, "validationActions": ["Warn"]}}]


def test_may_find_skips_a_gpu_pod_no_check_can_fail(plane):
    """The validating Pod policies' ``may-find`` matchCondition (``validating._may_find``) on the real API server:
    the usual GPU Pod (one container, one device, steered to the dra pool by the compiled MutatingAdmissionPolicy,
    no training job) never reaches the policy's validations; a Pod that some check could fail on does, for each
    check's cheap condition. The equivalence table above runs with the condition in place (what it lets through is
    judged as the webhook judges it); this shows it skips, and evaluates without error."""
    cp, kube = plane
    at = DATES[0]
    applied = _apply_compiled(cp, kube, at)
    warn = next(o for o in applied if o["kind"] == "ValidatingAdmissionPolicy"
                and o["metadata"]["name"].endswith("-pods-warn.dra-migration.io"))
    assert [c["name"] for c in warn["spec"]["matchConditions"]] == ["may-find"]
    probe = _probe(warn)
    for obj in probe:
        kube.create(obj)
    try:
        gpu = _workload("Pod", "usual", "team-a", GPU)  # pilot on DATES[0]: steered to the dra pool
        through = f"let through to {warn['metadata']['name']}"
        eventually(lambda: through in " ".join(_server(kube, _workload("Pod", "x", "team-a", CONTENTS["legacy"]))[1]),
                   "the probe policy in effect", 30)
        allowed, warnings, _, stored = _server(kube, gpu)
        assert allowed and placement(stored) != placement(gpu), "the compiled policy steers it"
        assert not [w for w in warnings if through in w], warnings
        training = _workload("Pod", "training", "team-a", GPU)
        training["metadata"]["labels"] = {"workload.example.com/kind": "training"}
        could = {
            "legacy name": _workload("Pod", "legacy", "team-a", CONTENTS["legacy"]),
            "count over a literal": _workload("Pod", "one-over", "team-a", CONTENTS["one-over"]),
            "two containers": _workload("Pod", "two", "team-a", CONTENTS["at-limit"]),
            "bound": _workload("Pod", "bound", "team-a", STEERING["bound"]),
            "constraint": _workload("Pod", "conflict", "team-a", STEERING["pool-conflict"]),
            "scheduler": _workload("Pod", "kai", "team-a", CONTENTS["other-scheduler"]),
            "training job": training,
        }
        for what, obj in could.items():
            assert through in " ".join(_server(kube, obj)[1]), what
    finally:
        for obj in reversed(probe):
            kube.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


def test_validate_reports_a_type_error_of_a_policy(plane, capsys):
    """``compile --validate``: a policy whose CEL does not type-check against the matched kinds is applied (the
    API server accepts it: ``object`` is dynamic when it compiles) and reported from ``status.typeChecking``, exit 1."""
    from webhook.commands import EXIT_NO
    from webhook.commands.compile import validate
    from webhook.compile import Compiled

    cp, _ = plane
    compiled = compile_admission(load_policy(POLICY), dt.datetime(2030, 3, 1, tzinfo=dt.UTC))
    first = next(i for i, o in enumerate(compiled.objects) if o["kind"] == "ValidatingAdmissionPolicy")
    broken = json.loads(json.dumps(compiled.objects[first]))
    broken["metadata"]["name"] = "broken.dra-migration.io"
    broken["spec"]["validations"].append({"expression": "object.spec.noSuchField == 'x'", "message": "broken"})
    binding = json.loads(json.dumps(compiled.objects[first + 1]))
    binding["metadata"]["name"] = binding["spec"]["policyName"] = "broken.dra-migration.io"
    try:
        assert validate(Compiled([broken, binding], None), str(cp.admin_kubeconfig)) == EXIT_NO
        err = capsys.readouterr().err
        assert re.search(r"broken\.dra-migration\.io: type check: spec\.validations\[\d+\]\.expression: .*noSuchField",
                         err), err
    finally:
        kube = Kube(cp.api())
        for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            kube.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/broken.dra-migration.io")


def test_validate_deletes_what_is_no_longer_compiled(plane):
    """Before every schedule date all namespaces are legacy: no Deny or Warn policy is compiled, and ``--validate``
    deletes the ones an earlier date's compile applied (else they would go on enforcing the old stage)."""
    cp, kube = plane
    _apply_compiled(cp, kube, DATES[1])
    done = _cli("compile", "--policy", str(POLICY), "--at", "2029-06-01", "-o", "json", "--validate",
                "--kubeconfig", str(cp.admin_kubeconfig))
    assert done.returncode == 0, done.stderr
    stored = {o["metadata"]["name"] for o in kube.call(
        "GET", "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies").obj["items"]}
    compiled = {o["metadata"]["name"] for o in json.loads(done.stdout)["items"]
                if o["kind"] == "ValidatingAdmissionPolicy"}
    assert stored == compiled and all(n.endswith("-audit.dra-migration.io") for n in compiled), stored
    gone = "deleted ValidatingAdmissionPolicy compile-e2e-pods-deny.dra-migration.io (no longer compiled)"
    assert gone in done.stderr


def test_validating_policies_see_the_object_after_the_fields_the_strategy_drops(plane):
    """Why ``gated-feature`` is not compiled (webhook/compile/coverage.py). The registry strategy's PrepareForCreate
    drops what a ResourceClaim may not carry on create, its status and every field whose feature gate is off, in one
    step (kubernetes v1.36 ``pkg/registry/resource/resourceclaim/strategy.go`` ``PrepareForCreate``: ``claim.Status =
    ...; dropDisabledSpecFields``), and it runs between mutating and validating admission. So a
    ValidatingAdmissionPolicy never sees such a field; a MutatingAdmissionPolicy does, but cannot warn or deny.
    Shown with the status (every gate is on here): the mutating policy records it saw it, the validating one did not.
    """
    _, kube = plane
    base = "/apis/admissionregistration.k8s.io/v1"
    rules = {"resourceRules": [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                                "resources": ["resourceclaims"]}]}
    seen = "has(object.status) && has(object.status.allocation)"
    objs = [
        ("validatingadmissionpolicies", {"metadata": {"name": "drop-probe"}, "spec": {
            "failurePolicy": "Fail", "matchConstraints": rules,
            "validations": [{"expression": f"!({seen})", "message": "validating policy: status seen"},
                            {"expression": "false", "message": "validating policy: ran"}]}}),
        ("validatingadmissionpolicybindings", {"metadata": {"name": "drop-probe"}, "spec": {
            "policyName": "drop-probe", "validationActions": ["Warn"]}}),
        ("mutatingadmissionpolicies", {"metadata": {"name": "drop-probe"}, "spec": {
            "failurePolicy": "Fail", "reinvocationPolicy": "Never", "matchConstraints": rules,
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {'status-seen': string(" + seen
                + ")}}]")}}]}}),
        ("mutatingadmissionpolicybindings", {"metadata": {"name": "drop-probe"}, "spec": {"policyName": "drop-probe"}}),
    ]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "drop-probe", "namespace": "team-a"},
             "spec": {"devices": {"requests": [_exactly("r")]}},
             "status": {"allocation": {"devices": {"results": []}}}}
    kinds = {"validatingadmissionpolicies": "ValidatingAdmissionPolicy",
             "validatingadmissionpolicybindings": "ValidatingAdmissionPolicyBinding",
             "mutatingadmissionpolicies": "MutatingAdmissionPolicy",
             "mutatingadmissionpolicybindings": "MutatingAdmissionPolicyBinding"}
    try:
        for plural, obj in objs:
            kube.call("POST", f"{base}/{plural}",
                      {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kinds[plural], **obj})

        def both_ran() -> Any:
            got = kube.create(claim, dry_run=True)
            ran = any(w.endswith("validating policy: ran") for w in got.warnings)
            return got if ran and "status-seen" in (got.obj["metadata"].get("annotations") or {}) else None

        got = eventually(both_ran, "both probe policies in use", 30)
        assert got.obj["metadata"]["annotations"]["status-seen"] == "true"  # the mutating policy saw it
        assert not any(w.endswith("validating policy: status seen") for w in got.warnings), got.warnings
        assert "allocation" not in (got.obj.get("status") or {})
    finally:
        for plural, obj in objs:
            kube.call("DELETE", f"{base}/{plural}/{obj['metadata']['name']}")


def _delete_compiled(kube: Kube) -> None:
    """Every object ``compile --validate`` applied (its managed-by label), whatever the policy."""
    for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies",
                   "mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
        kube.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}",
                  query=[("labelSelector", "app.kubernetes.io/managed-by=dra-webhook-compile")])


def test_the_bundled_policy_compiles_to_objects_the_api_server_accepts(plane):
    """policies/default.yaml, on a date when every stage is in use: applied as is and type-checked clean (the CEL
    cost limits and the compile step are the API server's), then removed."""
    cp, kube = plane
    try:
        done = _cli("compile", "--at", "2027-02-15", "-o", "json", "--validate", "--kubeconfig",
                    str(cp.admin_kubeconfig))
        assert done.returncode == 0, done.stderr
        names = [o["metadata"]["name"] for o in json.loads(done.stdout)["items"] if o["kind"].endswith("Policy")]
        assert len(names) == len(set(names)) >= 4
        checked = [n for n in names if n.endswith(("-deny.dra-migration.io", "-warn.dra-migration.io",
                                                    "-audit.dra-migration.io"))]
        assert done.stderr.count("type check passed") == len(checked) >= 3
    finally:
        _delete_compiled(kube)


def test_a_marker_naming_a_pool_no_longer_configured_keeps_its_path(plane, tmp_path):
    """The policy with its devicePlugin pool removed (the end of a migration) and a resource only that pool served:
    a Pod carrying the old marker (devicePlugin) and a constraint for the dra pool is steered with nothing added, so
    the steering leaves the marker (``node_affinity._mark``: it drops only the configured other pool's), and
    track-rollout writes the path of the pool the marker names (``tracking._path``), as ``check`` does
    (``steering.marker_written``)."""
    cp, kube = plane
    at = DATES[0]
    doc = yaml.safe_load(POLICY.read_text(encoding="utf-8"))
    del doc["spec"]["nodePools"]["devicePlugin"]
    doc["spec"]["resources"].append({"name": "example.com/fpga", "deviceClassName": "fpga.example.com"})
    one = tmp_path / "one-pool.yaml"
    one.write_text(yaml.safe_dump(doc))
    identity = load_policy(one).identity
    fpga = _spec([_c("main", example_com__fpga="1")])
    objs = []
    for name, spec, marker in (("stale-marker-pod", {**fpga, "nodeSelector": {POOL: "dra"}}, "devicePlugin"),
                               ("dra-marker-pod", {**fpga, "nodeSelector": {POOL: "dra"}}, "dra"),
                               ("unmarked-pod", {**fpga, "nodeSelector": {POOL: "dra"}}, None),
                               ("stale-marker-gpu-pod", GPU, "devicePlugin")):
        pod = _workload("Pod", name, "team-a", spec)
        if marker:
            pod["metadata"]["annotations"] = {MARKER: marker}
        objs.append(pod)
    try:
        done = _cli("compile", "--policy", str(one), "--at", at, "-o", "json", "--validate",
                    "--kubeconfig", str(cp.admin_kubeconfig))
        assert done.returncode == 0, done.stderr
        eventually(lambda: _server(kube, _workload("Pod", "probe", "team-a", GPU))[3]["metadata"]
                   .get("annotations", {}).get("dra-migration.io/policy") == identity, "the one-pool policy in use", 30)
        checked = _checked(tmp_path, at, objs, one)
        seen = _compare(kube, objs, checked)
        assert not seen.mismatches, "\n".join(seen.mismatches)
        stale = checked[("Pod", "team-a/stale-marker-pod")]
        assert tracking(_patched(objs[0], stale))["object"]["dra-migration.io/path"] == "device-plugin"  # the case
    finally:
        _delete_compiled(kube)
