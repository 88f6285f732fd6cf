"""Issue 24 item 2 on the real control plane: a ReplicaSet a Deployment controls gets no template patch, so the
Deployment controller finds its ReplicaSet by template (kubernetes v1.36 pkg/controller/deployment/util/
deployment_util.go ``FindNewReplicaSet`` / ``EqualIgnoreHash``) and never makes another (kubernetes#57167). Also
items 3 (other schedulers) and 8 (bound Pods): what the API server stores and the Warning the client gets."""

from __future__ import annotations

import pytest

from tests.e2e.objects import deployment, pod
from tests.e2e.waits import eventually, never

pytestmark = pytest.mark.controllers

HASH = "pod-template-hash"


def _without_hash(template: dict) -> dict:
    labels = {k: v for k, v in (template.get("metadata") or {}).get("labels", {}).items() if k != HASH}
    return {**template, "metadata": {**template.get("metadata", {}), "labels": labels}}


def test_a_steered_deployment_keeps_exactly_one_replicaset(kube, namespace):
    ns = namespace("pilot")  # a stage that steers: the Deployment's template gets the dra pool's affinity
    stored = kube.create(deployment("infer", ns, pod("infer", ns), replicas=1)).obj
    assert stored["spec"]["template"]["spec"].get("affinity"), "the Deployment itself is steered"

    def settled() -> list[dict] | None:
        rs = kube.list("apps/v1", "ReplicaSet", ns, "app=infer")
        d = kube.get("apps/v1", "Deployment", "infer", ns)
        status = d.get("status") or {}
        done = status.get("observedGeneration") == d["metadata"]["generation"] and status.get("replicas") == 1
        return rs if done and len(rs) == 1 else None

    [rs] = eventually(settled, "the Deployment's one ReplicaSet created and observed", 60)
    deployed = kube.get("apps/v1", "Deployment", "infer", ns)
    assert _without_hash(rs["spec"]["template"]) == _without_hash(deployed["spec"]["template"])
    # Bounded and polled: the controller-manager resyncs the Deployment on every ReplicaSet and Pod event; a
    # ReplicaSet template the webhook rewrote would show up as a second ReplicaSet or a collisionCount.
    never(lambda: len(kube.list("apps/v1", "ReplicaSet", ns, "app=infer")) != 1
          or (kube.get("apps/v1", "Deployment", "infer", ns).get("status") or {}).get("collisionCount"),
          "a second ReplicaSet (or a hash collision) for one Deployment", 60, interval=2)


def test_a_bound_pod_is_stored_without_node_affinity_and_the_client_is_told(kube, namespace):
    """Issue 24 item 8: the API server stores a Pod bound with spec.nodeName as sent (the kubelet would reject
    affinity its node does not match); the Warning header names the pool the Pod needs."""
    ns = namespace("pilot")
    res = kube.create(pod("bound", ns, nodeName="e2e-dp-1"))
    assert "affinity" not in res.obj["spec"] and res.obj["spec"]["nodeName"] == "e2e-dp-1"
    assert any('bound to node "e2e-dp-1"' in w and "dra pool" in w for w in res.warnings), res.warnings


def test_a_pod_of_another_scheduler_is_kept_off_the_dra_pool(kube, namespace):
    """Issue 24 item 3: a pilot Pod of scheduler "volcano" goes to the device-plugin pool, which advertises
    example.com/gpu; a default-scheduler Pod beside it goes to the dra pool."""
    ns = namespace("pilot")
    other = kube.create(pod("other", ns, schedulerName="volcano"), dry_run=True)
    default = kube.create(pod("default", ns), dry_run=True)
    assert other.obj["metadata"]["annotations"]["dra-migration.io/node-pool"] == "devicePlugin"
    assert default.obj["metadata"]["annotations"]["dra-migration.io/node-pool"] == "dra"
    assert any('schedulerName "volcano"' in w for w in other.warnings), other.warnings
