"""Issue 24 item 2 on the real control plane: a ReplicaSet a Deployment controls gets no template patch, so the
Deployment controller finds its ReplicaSet by template (kubernetes v1.36 pkg/controller/deployment/util/
deployment_util.go ``FindNewReplicaSet`` / ``EqualIgnoreHash``) and never makes another (kubernetes#57167)."""

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
