"""Workload controllers with the webhook installed: the Pods the ReplicaSet and Job controllers create are
treated like direct Pods (same annotations and node affinity as a Pod a user creates in that namespace),
and nothing blocks the controllers (every Pod is created and bound).
"""

from __future__ import annotations

import pytest

from tests.e2e.objects import GPU_NODE, deployment, job, pod
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers

DECISION = ("dra-migration.io/cohort", "dra-migration.io/stage", "dra-migration.io/path",
            "dra-migration.io/node-pool", "dra-migration.io/policy")


def _decision(p: dict) -> tuple:
    annotations = p["metadata"].get("annotations") or {}
    return tuple(annotations.get(k) for k in DECISION), p["spec"].get("affinity")


def _bound_pods(kube, ns: str, selector: str, count: int) -> list[dict]:
    def ready() -> list[dict] | None:
        pods = kube.list("v1", "Pod", ns, selector)
        return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None
    return eventually(ready, f"{count} Pods ({selector}) created and bound in {ns}", 60)


@pytest.mark.parametrize("prefix,stage", [("pilot", "pilot"), ("mig", "migrated")])
def test_deployment_pods_are_treated_like_direct_pods(kube, namespace, prefix, stage):
    ns = namespace(prefix)
    template = pod("trainer", ns)
    direct = kube.create(pod("direct", ns), dry_run=True).obj
    assert direct["metadata"]["annotations"]["dra-migration.io/stage"] == stage
    kube.create(deployment("trainer", ns, template, replicas=2))
    pods = _bound_pods(kube, ns, "app=trainer", 2)
    for p in pods:
        assert p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert _decision(p) == _decision(direct)
        assert p["spec"]["nodeName"] == GPU_NODE
    rs = kube.list("apps/v1", "ReplicaSet", ns, "app=trainer")
    assert len(rs) == 1
    assert not [c for c in rs[0].get("status", {}).get("conditions", []) if c["type"] == "ReplicaFailure"]


@pytest.mark.parametrize("prefix,stage", [("pilot", "pilot"), ("mig", "migrated")])
def test_job_pods_are_treated_like_direct_pods(kube, namespace, prefix, stage):
    ns = namespace(prefix)
    template = pod("trainer", ns, activeDeadlineSeconds=20000)
    direct = kube.create(pod("direct", ns, activeDeadlineSeconds=20000), dry_run=True).obj
    assert direct["metadata"]["annotations"]["dra-migration.io/stage"] == stage
    kube.create(job("train", ns, template, parallelism=2))
    pods = _bound_pods(kube, ns, "batch.kubernetes.io/job-name=train", 2)
    for p in pods:
        assert p["metadata"]["ownerReferences"][0]["kind"] == "Job"
        assert _decision(p) == _decision(direct)
    stored = kube.get("batch/v1", "Job", "train", ns)
    assert stored.get("status", {}).get("active") == 2, stored.get("status")


def test_legacy_deployment_in_a_migrated_namespace_is_denied_before_any_pod_exists(kube, namespace):
    ns = namespace("mig")
    denied = kube.denial(deployment("legacy", ns, pod("legacy", ns, resource="vendor.example.com/gpu")))
    assert 'admission webhook "workloads.validate.dra-migration.io" denied the request' in denied.message
    assert "vendor.example.com/gpu" in denied.message
    assert kube.list("v1", "Pod", ns) == []
