"""Builders of the objects the scenarios create (plain dicts, as a user's manifest would be)."""

from __future__ import annotations

from typing import Any

IMAGE = "registry.example.com/trainer:1.0"


def pod(name: str, namespace: str, *, resource: str | None = "example.com/gpu", gpus: int = 1,
        labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A Pod with one container asking for ``gpus`` of ``resource`` (none when ``resource`` is None).

    ``terminationGracePeriodSeconds: 0``: there is no kubelet, so a Pod deleted with a grace period would
    stay Terminating.
    """
    container: dict[str, Any] = {"name": "trainer", "image": IMAGE}
    if resource:
        container["resources"] = {"limits": {resource: str(gpus)}}
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [container], **spec}}


def template_of(p: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in p["metadata"].items() if k in ("labels", "annotations")}
    return {"metadata": meta, "spec": p["spec"]}


# The DRA driver of the suite, shaped like kubernetes-sigs/dra-example-driver (driver and DeviceClass
# `gpu.example.com`), published on the fake Node of the `dra` pool. The class maps the extended resource
# `example.com/gpu` (DRAExtendedResource), as the e2e policy's `resources` entry does.
GPU_DRIVER = "gpu.example.com"
GPU_CLASS = "gpu.example.com"
GPU_NODE = "e2e-dra-1"
GPU_DEVICES = 32


def device_class(name: str, driver: str, extended_resource: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def resource_slice(name: str, driver: str, node: str, pool: str, devices: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}"} for i in range(devices)]},
    }


def gpu_driver_objects() -> list[dict[str, Any]]:
    return [device_class(GPU_CLASS, GPU_DRIVER, "example.com/gpu"),
            resource_slice(f"{GPU_NODE}-gpu", GPU_DRIVER, GPU_NODE, GPU_NODE, GPU_DEVICES)]


def claim_template(name: str, namespace: str, device_class_name: str = GPU_CLASS,
                   claim_labels: dict[str, str] | None = None, **request: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": device_class_name, **request}}]}}}
    if claim_labels:
        spec["metadata"] = {"labels": claim_labels}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def claim(name: str, namespace: str, device_class_name: str = GPU_CLASS, **request: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": device_class_name, **request}}]}}}


def claim_pod(name: str, namespace: str, template: str, labels: dict[str, str] | None = None,
              **spec: Any) -> dict[str, Any]:
    """A Pod on the DRA path: one claim generated from ``template``, used by its container."""
    p = pod(name, namespace, resource=None, labels=labels, **spec)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return p


def deployment(name: str, namespace: str, template_pod: dict[str, Any], replicas: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    t = template_of(template_pod)
    t["metadata"]["labels"] = {**t["metadata"].get("labels", {}), **labels}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": t}}


def job(name: str, namespace: str, template_pod: dict[str, Any], parallelism: int = 1,
        labels: dict[str, str] | None = None) -> dict[str, Any]:
    t = template_of(template_pod)
    t["spec"] = {**t["spec"], "restartPolicy": "Never"}
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0, "template": t}}
