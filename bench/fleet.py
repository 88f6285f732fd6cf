"""The objects of the fleet-scale benchmark (bench/scale.py): pure functions of an index, no I/O.

A production-like GPU cluster, deterministic so that a filled cluster can be reused and extended:

- **Pods** shaped like the NVIDIA Triton Inference Server chart's Deployment
  (triton-inference-server/server, ``deploy/k8s-onprem/templates/deployment.yaml``: ports 8000/8001/8002,
  liveness/readiness/startup probes on ``/v2/health/*``, a model-repository volume, ``envFrom``,
  ``runAsUser``/``fsGroup`` 1000) with what a real fleet adds: env (downward API, secrets, telemetry),
  config and scratch volumes, ``app.kubernetes.io`` labels, a ReplicaSet owner reference, tolerations, node affinity,
  and (on the webhook's Pods) its annotations. The API server adds ``managedFields``, the
  ServiceAccount token volume and defaults; stored, with the status written like a kubelet's, a Pod is
  about 9 KB (``bench/scale.py`` prints the measured mean).
- **Mix** (by index modulo 8): 2 of 8 Pods use a ResourceClaim allocated on their node (``status.allocation``
  and ``reservedFor`` written through the status subresource, as the scheduler does); 1 requests the
  migrated extended resource ``example.com/gpu`` and carries ``status.extendedResourceClaimStatus`` (the
  scheduler's DRA extended-resource path); 1 requests the device plugin's ``vendor.example.com/gpu``;
  4 use no devices. Pods that went through the webhook carry its annotations (``dra-migration.io/*``).
- **Nodes**: one DRA node per 8 claimed Pods, each with a ResourceSlice of 8 GPUs shaped like
  kubernetes-sigs/dra-example-driver (``cmd/dra-example-kubeletplugin/discovery.go``,
  ``enumerateAllPossibleDevices``: 8 devices, attributes ``index``, ``uuid``, ``model``, ``driverVersion``,
  capacity ``memory: 80Gi``; driver ``gpu.example.com``), and one device-plugin node per 32 other Pods.
- **Namespaces**: one per ``per_namespace`` Pods, in turn ``ml-*`` (cohort pilot-teams of
  policies/default.yaml), ``research-*`` (labels of cohort research) and ``team-*`` (no cohort).
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

DRIVER = "gpu.example.com"
DEVICE_CLASS = "gpu.example.com"
EXTENDED = "example.com/gpu"
LEGACY = "vendor.example.com/gpu"
GPUS_PER_NODE = 8
PODS_PER_PLUGIN_NODE = 32
PREFIX = "dra-migration.io"
CLAIMED, EXTENDED_KIND, PLUGIN, PLAIN = "claim", "extended", "device-plugin", "plain"
LABEL = "bench.dra-migration.io/fleet"  # on every object the bench creates


def kind(i: int) -> str:
    """What Pod ``i`` uses: a quarter claims, an eighth each extended resource / device plugin, half none."""
    r = i % 8
    return CLAIMED if r < 2 else EXTENDED_KIND if r == 2 else PLUGIN if r == 3 else PLAIN


def claimed_before(i: int) -> int:
    """How many Pods with a lower index use a claim (claims fill the DRA nodes' devices in order)."""
    return 2 * (i // 8) + min(i % 8, 2)


def dra_nodes(pods: int) -> int:
    return -(-claimed_before(pods) // GPUS_PER_NODE)


def plugin_nodes(pods: int) -> int:
    return max(1, -(-(pods - claimed_before(pods)) // PODS_PER_PLUGIN_NODE))


def namespaces(pods: int, per_namespace: int) -> list[str]:
    return [namespace_name(n) for n in range(-(-pods // per_namespace))]


def namespace_name(n: int) -> str:
    return f"{('ml', 'research', 'team')[n % 3]}-fleet-{n:04d}"


def uid(*parts: object) -> str:
    """A stable UUID for an object the bench refers to but never creates (owner ReplicaSets)."""
    return str(uuid.UUID(hashlib.md5("/".join(map(str, parts)).encode()).hexdigest()))  # noqa: S324 - not security


# ------------------------------------------------------------------------------------------- cluster objects


def namespace(name: str) -> dict[str, Any]:
    labels = {LABEL: "true", "team": name.rsplit("-", 1)[-1]}
    if name.startswith("research-"):
        labels |= {"division": "research", "cost-center": "cc-" + name[-4:]}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def service_account() -> dict[str, Any]:
    """``default``: the ServiceAccount admission plugin refuses Pods until it exists (no controller-manager)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}


def node(name: str, dra: bool) -> dict[str, Any]:
    capacity = {"cpu": "96", "memory": "1Ti", "pods": "110", "ephemeral-storage": "2Ti"}
    if not dra:
        capacity[LEGACY] = str(GPUS_PER_NODE)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", LABEL: "true",
            "gpu.example.com/allocation": "dra" if dra else "device-plugin"}},
        "spec": {},
        "status": {"capacity": capacity, "allocatable": capacity,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "message": "fake node (bench/scale.py)"}]},
    }


def dra_node_name(n: int) -> str:
    return f"gpu-dra-{n:05d}"


def plugin_node_name(n: int) -> str:
    return f"gpu-dp-{n:05d}"


def resource_slice(node_name: str) -> dict[str, Any]:
    """8 GPUs as dra-example-driver publishes them (see the module docstring)."""
    devices = [{
        "name": f"gpu-{i}",
        "attributes": {"index": {"int": i}, "uuid": {"string": "gpu-" + uid(node_name, i)},
                       "model": {"string": "LATEST-GPU-MODEL"}, "driverVersion": {"version": "1.0.0"}},
        "capacity": {"memory": {"value": "80Gi"}},
    } for i in range(GPUS_PER_NODE)]
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}", "labels": {LABEL: "true"}},
        "spec": {"driver": DRIVER, "nodeName": node_name, "pool": {"name": node_name, "generation": 1,
                                                                  "resourceSliceCount": 1},
                 "devices": devices},
    }


def device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}],
                     "extendedResourceName": EXTENDED}}


# ------------------------------------------------------------------------------------------- Pods and claims


def pod_name(i: int) -> str:
    return f"triton-{i % 97:02d}-{i:07d}"


def claim_name(i: int) -> str:
    return f"{pod_name(i)}-gpu"


def placement(i: int, per_namespace: int) -> tuple[str, str, int | None]:
    """Namespace, node and (for a claimed Pod) the device index of Pod ``i``."""
    ns = namespace_name(i // per_namespace)
    if kind(i) == CLAIMED:
        n = claimed_before(i)
        return ns, dra_node_name(n // GPUS_PER_NODE), n % GPUS_PER_NODE
    return ns, plugin_node_name((i - claimed_before(i)) // PODS_PER_PLUGIN_NODE), None


def _env(i: int) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}},
        {"name": "MODEL_REPOSITORY", "value": "s3://models-prod/triton/repository"},
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability.svc:4317"},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": f"service.name=triton,service.instance.id={i}"},
        {"name": "AWS_REGION", "value": "eu-west-1"},
        {"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {"name": "model-store", "key": "access-key"}}},
        {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "model-store",
                                                                          "key": "secret-key"}}},
        {"name": "LOG_VERBOSE", "value": "0"},
    ]
    return env


def _probe(path: str, delay: int, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http", "scheme": "HTTP"}, "initialDelaySeconds": delay,
            "periodSeconds": period, "failureThreshold": failures, "timeoutSeconds": 1, "successThreshold": 1}


def _resources(k: str) -> dict[str, Any]:
    limits = {"cpu": "8", "memory": "32Gi"}
    res: dict[str, Any] = {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": limits}
    if k == EXTENDED_KIND:
        limits[EXTENDED] = "1"
    elif k == PLUGIN:
        limits[LEGACY] = "1"
    elif k == CLAIMED:
        res["claims"] = [{"name": "gpu"}]
    return res


def _containers(i: int, k: str) -> list[dict[str, Any]]:
    triton = {
        "name": "triton", "image": "nvcr.io/nvidia/tritonserver:24.08-py3", "imagePullPolicy": "IfNotPresent",
        "args": ["tritonserver", "--model-repository=/models", "--model-control-mode=poll",
                 "--repository-poll-secs=30", "--log-verbose=0", "--strict-readiness=true"],
        "ports": [{"containerPort": 8000, "name": "http", "protocol": "TCP"},
                  {"containerPort": 8001, "name": "grpc", "protocol": "TCP"},
                  {"containerPort": 8002, "name": "metrics", "protocol": "TCP"}],
        "env": _env(i),
        "envFrom": [{"configMapRef": {"name": "triton-config"}}],
        "resources": _resources(k),
        "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True},
                         {"name": "config", "mountPath": "/etc/triton"},
                         {"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "cache", "mountPath": "/cache"}],
        "livenessProbe": _probe("/v2/health/live", 15, 10, 3),
        "readinessProbe": _probe("/v2/health/ready", 5, 5, 3),
        "startupProbe": _probe("/v2/health/ready", 0, 10, 30),
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
    }
    return [triton]


def _annotations(i: int, k: str, ns: str) -> dict[str, str]:
    ann = {"prometheus.io/scrape": "true", "prometheus.io/port": "8002", "prometheus.io/path": "/metrics",
           "kubectl.kubernetes.io/restartedAt": "2026-11-20T09:14:03Z",
           "checksum/config": hashlib.sha256(f"cfg-{i % 13}".encode()).hexdigest()}
    if k != PLAIN and ns.startswith("ml-"):  # went through the webhook in the pilot cohort
        path = {CLAIMED: "dra-claim", EXTENDED_KIND: "dra-extended-resource", PLUGIN: "dra-extended-resource"}[k]
        ann |= {f"{PREFIX}/path": path, f"{PREFIX}/stage": "pilot", f"{PREFIX}/cohort": "pilot-teams",
                f"{PREFIX}/policy": "gpu-fleet"}
    return ann


def pod(i: int, per_namespace: int) -> dict[str, Any]:
    """Pod ``i`` as its ReplicaSet stamps it, bound to its node (there is no scheduler)."""
    k = kind(i)
    ns, node_name, _ = placement(i, per_namespace)
    rs = f"triton-{i % 97:02d}-7d9f8c6b5"
    spec: dict[str, Any] = {
        "nodeName": node_name, "serviceAccountName": "default", "terminationGracePeriodSeconds": 0,
        "containers": _containers(i, k),
        "volumes": [
            {"name": "models", "persistentVolumeClaim": {"claimName": "model-repository", "readOnly": True}},
            {"name": "config", "configMap": {"name": "triton-config", "defaultMode": 420}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
            {"name": "cache", "emptyDir": {}},
        ],
        "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gpu.example.com/allocation", "operator": "In",
                                   "values": ["dra" if k == CLAIMED else "device-plugin"]}]}]}}},
        "dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
    }
    if k == CLAIMED:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name(i)}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": pod_name(i), "namespace": ns,
            "labels": {"app": "triton-inference-server", "release": f"triton-{i % 97:02d}",
                       "app.kubernetes.io/name": "triton-inference-server",
                       "app.kubernetes.io/instance": f"triton-{i % 97:02d}", "app.kubernetes.io/version": "24.08",
                       "app.kubernetes.io/component": "inference", "pod-template-hash": "7d9f8c6b5", LABEL: "true"},
            "annotations": _annotations(i, k, ns),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs, "uid": uid(ns, rs),
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": spec,
    }


def pod_status(i: int, started: str) -> dict[str, Any]:
    """The status a kubelet (and, on the extended-resource path, the scheduler) would have written."""
    k = kind(i)
    ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
    conditions = [{"type": t, "status": "True", "lastTransitionTime": started}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
    statuses = [{
        "name": name, "image": image, "imageID": f"{image.split(':')[0]}@sha256:" + "ab" * 32,
        "containerID": "containerd://" + hashlib.sha256(f"{i}/{name}".encode()).hexdigest(),
        "ready": True, "started": True, "restartCount": 0, "state": {"running": {"startedAt": started}},
    } for name, image in (("triton", "nvcr.io/nvidia/tritonserver:24.08-py3"),)]
    status: dict[str, Any] = {
        "phase": "Running", "conditions": conditions, "hostIP": "192.168.0.1", "hostIPs": [{"ip": "192.168.0.1"}],
        "podIP": ip, "podIPs": [{"ip": ip}], "startTime": started, "qosClass": "Burstable",
        "containerStatuses": statuses,
    }
    if k == EXTENDED_KIND:
        status["extendedResourceClaimStatus"] = {
            "resourceClaimName": f"{pod_name(i)}-extended-resources-abcde",
            "requestMappings": [{"containerName": "triton", "resourceName": EXTENDED,
                                 "requestName": "container-0-request-0"}],
        }
    return {"status": status}


def claim(i: int, per_namespace: int) -> dict[str, Any]:
    """The ResourceClaim of claimed Pod ``i``; even ones carry the tolerations the webhook injects."""
    ns, _, _ = placement(i, per_namespace)
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1}
    meta: dict[str, Any] = {"name": claim_name(i), "namespace": ns, "labels": {LABEL: "true"}}
    if i % 16 == 0:
        exactly["tolerations"] = [_TOLERATION]
        meta["annotations"] = {f"{PREFIX}/tolerations-injected": "1"}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}


_TOLERATION = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600}


def claim_status(i: int, per_namespace: int, pod_uid: str) -> dict[str, Any]:
    """Allocated on the Pod's node's device and reserved for the Pod (what the scheduler writes)."""
    _, node_name, device = placement(i, per_namespace)
    result: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": node_name, "device": f"gpu-{device}"}
    if i % 16 == 0:
        result["tolerations"] = [_TOLERATION]
    return {"status": {
        "allocation": {"devices": {"results": [result]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}},
        "reservedFor": [{"resource": "pods", "name": pod_name(i), "uid": pod_uid}],
    }}
