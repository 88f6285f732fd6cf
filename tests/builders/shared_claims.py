"""Shared-claim workloads after intel-resource-drivers-for-kubernetes' external-gpu-deployment, and an autoscaler."""

from __future__ import annotations

import copy
from typing import Any

POD_SPEC: dict[str, Any] = {
    "containers": [{"name": "with-resource", "image": "registry.k8s.io/e2e-test-images/busybox:1.29-2",
                    "resources": {"claims": [{"name": "resource"}]}}],
    "resourceClaims": [{"name": "resource", "resourceClaimName": "external-gpu-deployment"}],
}
DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "external-gpu-deployment", "namespace": "default"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "external-gpu-deployment"}},
        "template": {"metadata": {"labels": {"app": "external-gpu-deployment"}}, "spec": POD_SPEC},
    },
}


def deployment(replicas: int, strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(DEPLOYMENT)
    obj["spec"]["replicas"] = replicas
    if strategy is not None:
        obj["spec"]["strategy"] = strategy
    return obj


# HPA objects: the Kubernetes docs' walkthrough shape (kubernetes.io/docs/tasks/run-application/
# horizontal-pod-autoscale-walkthrough, autoscaling/v2 "php-apache": CPU utilization 50%), retargeted.
def hpa(max_replicas: int, target: str = "external-gpu-deployment", kind: str = "Deployment",
        api_version: str = "apps/v1", namespace: str = "default", name: str = "gpu-hpa",
        min_replicas: int | None = 1) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": api_version, "kind": kind, "name": target}, "maxReplicas": max_replicas,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": 50}}}]}
    if min_replicas is not None:
        spec["minReplicas"] = min_replicas
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}
