"""The AdmissionReviews the benchmark sends, as the API server sends them.

The four small reviews are checked in under ``bench/reviews/`` (regenerate with
``python bench/reviews.py``); the 1 MiB Pod is derived from the GPU Pod at run time (``large_pod``)
so a megabyte of JSON does not live in git. Objects carry what the API server has filled in by the
time mutating webhooks see them (defaulted fields, the service-account volume, the
DefaultTolerationSeconds tolerations, managedFields), because that is what the webhook parses,
copies and diffs on every call.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REVIEWS = HERE / "reviews"
ORDER = ("gpu-pod", "claim-template", "plain-pod", "deployment", "pod-1mib")
TITLES = {
    "gpu-pod": "GPU Pod",
    "claim-template": "ResourceClaimTemplate (training job)",
    "plain-pod": "plain Pod",
    "deployment": "Deployment (GPU template)",
    "pod-1mib": "1 MiB Pod",
}
LARGE_TARGET = 1 << 20

_GROUPS = {"Pod": ("", "v1", "pods"), "Deployment": ("apps", "v1", "deployments"),
           "ResourceClaimTemplate": ("resource.k8s.io", "v1", "resourceclaimtemplates")}


def _review(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    group, version, resource = _GROUPS[obj["kind"]]
    gvk = {"group": group, "version": version, "kind": obj["kind"]}
    gvr = {"group": group, "version": version, "resource": resource}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": uid,
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": obj["metadata"].get("name", ""),
            "namespace": obj["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"
                         if obj["kind"] == "Pod" else "alice@example.com",
                         "uid": "0b0e6b5c-6a3f-4f5e-9f0e-2b1e9c1d7a10",
                         "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1",
                        "fieldManager": "kubectl-client-side-apply"},
        },
    }


def _managed(manager: str, api_version: str) -> list[dict[str, Any]]:
    return [{"manager": manager, "operation": "Update", "apiVersion": api_version,
             "time": "2026-12-02T09:14:03Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                          "f:spec": {"f:containers": {'k:{"name":"trainer"}': {".": {}, "f:image": {}}}}}}]


def _container(name: str, image: str, gpus: int = 0) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "4", "memory": "32Gi"}, "limits": {"memory": "32Gi"}}
    if gpus:
        resources["limits"]["example.com/gpu"] = str(gpus)
        resources["requests"]["example.com/gpu"] = str(gpus)
    return {
        "name": name, "image": image, "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "trainer"], "args": ["--config", "/etc/trainer/config.yaml"],
        "env": [{"name": "NCCL_DEBUG", "value": "WARN"}, {"name": "OMP_NUM_THREADS", "value": "8"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
        "ports": [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
        "resources": resources,
        "volumeMounts": [{"name": "config", "mountPath": "/etc/trainer"},
                         {"name": "kube-api-access-x7k2p", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
    }


def _pod_spec(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "containers": containers,
        "volumes": [
            {"name": "config", "configMap": {"name": "trainer-config", "defaultMode": 420}},
            {"name": "kube-api-access-x7k2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                                                                                "fieldPath": "metadata.namespace"}}]}},
            ]}},
        ],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
        "schedulerName": "default-scheduler", "priority": 0, "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
    }


def gpu_pod() -> dict[str, Any]:
    """A Pod of a ReplicaSet asking for 2 GPUs by the extended-resource name, in a pilot namespace."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "generateName": "trainer-7c9f5d6b8-", "namespace": "ml-training",
            "labels": {"app": "trainer", "pod-template-hash": "7c9f5d6b8"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-7c9f5d6b8",
                                 "uid": "9d2f1b7e-3c4a-4b5d-8e6f-7a8b9c0d1e2f", "controller": True,
                                 "blockOwnerDeletion": True}],
            "managedFields": _managed("kube-controller-manager", "v1"),
        },
        "spec": _pod_spec([_container("trainer", "registry.example.com/ml/trainer:2.4.1", gpus=2)]),
    }


def plain_pod() -> dict[str, Any]:
    pod = gpu_pod()
    pod["metadata"]["generateName"] = "web-5b8d7c9f4-"
    pod["metadata"]["labels"] = {"app": "web", "pod-template-hash": "5b8d7c9f4"}
    pod["spec"]["containers"] = [_container("web", "registry.example.com/web/frontend:3.2.0")]
    return pod


def deployment() -> dict[str, Any]:
    template = gpu_pod()
    spec = template["spec"]
    del spec["serviceAccount"]
    spec["volumes"] = spec["volumes"][:1]
    for c in spec["containers"]:
        c["volumeMounts"] = c["volumeMounts"][:1]
    spec.pop("tolerations")
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": "ml-training", "labels": {"app": "trainer"},
                     "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                     "managedFields": _managed("kubectl-client-side-apply", "apps/v1")},
        "spec": {
            "replicas": 4, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
            "selector": {"matchLabels": {"app": "trainer"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "template": {"metadata": {"labels": {"app": "trainer"}}, "spec": spec},
        },
    }


def claim_template() -> dict[str, Any]:
    """The ResourceClaimTemplate of a long training job: its claims get device tolerations injected."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "llm-pretrain-gpus", "namespace": "ml-training",
                     "labels": {"app.kubernetes.io/part-of": "llm-pretrain"},
                     "managedFields": _managed("kubectl-client-side-apply", "resource.k8s.io/v1")},
        "spec": {
            "metadata": {"labels": {"workload.example.com/kind": "training",
                                    "training.kubeflow.org/job-name": "llm-pretrain"}},
            "spec": {"devices": {"requests": [{
                "name": "gpu",
                "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 8},
            }]}},
        },
    }


def large_pod(target: int = LARGE_TARGET) -> dict[str, Any]:
    """The GPU Pod grown to ``target`` bytes of review JSON with env entries (deterministic)."""
    pod = gpu_pod()
    env = pod["spec"]["containers"][0]["env"]
    base = len(json.dumps(_review(pod, "x"), separators=(",", ":")))
    entry = {"name": "FEATURE_FLAG_000000", "value": "x" * 200}
    per = len(json.dumps(entry, separators=(",", ":"))) + 1
    for i in range(max(0, (target - base) // per)):
        env.append({"name": f"FEATURE_FLAG_{i:06d}", "value": f"{i:06d}".ljust(200, "x")})
    return pod


BUILDERS = {"gpu-pod": gpu_pod, "claim-template": claim_template, "plain-pod": plain_pod,
            "deployment": deployment}


def build(name: str) -> dict[str, Any]:
    uid = f"b3c1e5a0-0000-4000-8000-{ORDER.index(name):012d}"
    obj = large_pod() if name == "pod-1mib" else BUILDERS[name]()
    return _review(copy.deepcopy(obj), uid)


def load(name: str) -> bytes:
    """The review body as sent on the wire (compact JSON)."""
    if name == "pod-1mib":
        return json.dumps(build(name), separators=(",", ":")).encode()
    return json.dumps(json.loads((REVIEWS / f"{name}.json").read_bytes()), separators=(",", ":")).encode()


def write() -> None:
    REVIEWS.mkdir(exist_ok=True)
    for name in BUILDERS:
        (REVIEWS / f"{name}.json").write_text(json.dumps(build(name), indent=2) + "\n")


if __name__ == "__main__":
    write()
    for n in ORDER:
        print(f"{n}: {len(load(n))} bytes", file=sys.stderr)
