"""The fleet of bench/scale.py is what the API server accepts: Pods, claims and the status writes, as stored.

The benchmark fills 100,000 Pods through the same calls; a field the API server refused would stop it after
minutes of filling, and one it silently dropped would make the fleet less realistic than it claims.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from tests.e2e.binaries import ROOT
from tests.e2e.kube import path_of


def _fleet():
    spec = importlib.util.spec_from_file_location("bench_fleet", ROOT / "bench" / "fleet.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_fleet"] = module
    spec.loader.exec_module(module)
    return module


fleet = _fleet()


def _in(ns: str, obj: dict) -> dict:
    obj["metadata"]["namespace"] = ns
    return obj


def _status(kube, obj: dict, patch: dict) -> dict:
    meta = obj["metadata"]
    path = path_of(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) + "/status"
    return kube.call("PATCH", path, patch, content_type="application/merge-patch+json").obj


@pytest.fixture()
def fleet_nodes(kube):
    """The fleet's first Nodes: the controller-manager's pod GC deletes Pods bound to a Node that is missing."""
    nodes = [fleet.node(fleet.dra_node_name(0), dra=True), fleet.node(fleet.plugin_node_name(0), dra=False)]
    for node in nodes:
        kube.create(node)
    yield
    for node in nodes:
        kube.delete("v1", "Node", node["metadata"]["name"])


def test_every_kind_of_fleet_pod_is_stored_as_generated(kube, namespace, fleet_nodes):
    ns = namespace("bench")  # no cohort of the suite's policy: Audit, the webhook never denies
    sizes = []
    for i in range(8):  # one of each position of the mix
        kind = fleet.kind(i)
        if kind == fleet.CLAIMED:
            claim = kube.create(_in(ns, fleet.claim(i, 1000))).obj
        generated = _in(ns, fleet.pod(i, 1000))
        # Its ReplicaSet does not exist: the controller-manager's garbage collector would delete the Pod at
        # once (the benchmark runs none). The owner reference is checked here, then dropped.
        assert generated["metadata"].pop("ownerReferences")[0]["kind"] == "ReplicaSet"
        pod = kube.create(generated).obj
        _, node, device = fleet.placement(i, 1000)
        assert pod["spec"]["nodeName"] == node
        if kind == fleet.EXTENDED_KIND:
            pod = _status(kube, pod, fleet.pod_status(i, "2026-12-01T00:00:00Z"))
            assert pod["status"]["extendedResourceClaimStatus"]["requestMappings"][0]["resourceName"] == fleet.EXTENDED
            assert pod["status"]["phase"] == "Running"
        if kind == fleet.CLAIMED:
            claim = _status(kube, claim, fleet.claim_status(i, 1000, pod["metadata"]["uid"]))
            result = claim["status"]["allocation"]["devices"]["results"][0]
            assert (result["pool"], result["device"]) == (node, f"gpu-{device}")
            assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": pod["metadata"]["name"],
                                                       "uid": pod["metadata"]["uid"]}]
            assert pod["spec"]["resourceClaims"][0]["resourceClaimName"] == claim["metadata"]["name"]
        sizes.append(len(json.dumps(kube.get("v1", "Pod", pod["metadata"]["name"], ns), separators=(",", ":"))))
    # "About 9 KB" as stored (managedFields, defaults and the token volume included), the figure.
    assert 7000 < sum(sizes) / len(sizes) < 11000, sizes


def test_slices_and_nodes_of_the_fleet_are_valid(kube):
    node = fleet.dra_node_name(99_999)
    kube.create(fleet.node(node, dra=True), dry_run=True)
    stored = kube.create(fleet.resource_slice(node), dry_run=True).obj
    assert [d["name"] for d in stored["spec"]["devices"]] == [f"gpu-{k}" for k in range(fleet.GPUS_PER_NODE)]
    assert stored["spec"]["devices"][0]["capacity"]["memory"]["value"] == "80Gi"
