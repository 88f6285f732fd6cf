"""The fleet layout of bench/scale.py (pure): the mix the issue describes, and claims that fit their nodes."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "bench_fleet", Path(__file__).resolve().parents[2] / "bench" / "fleet.py")
fleet = importlib.util.module_from_spec(_spec)
sys.modules["bench_fleet"] = fleet
_spec.loader.exec_module(fleet)


def test_a_quarter_of_the_pods_use_claims():
    kinds = Counter(fleet.kind(i) for i in range(8000))
    assert kinds == {fleet.CLAIMED: 2000, fleet.EXTENDED_KIND: 1000, fleet.PLUGIN: 1000, fleet.PLAIN: 4000}


def test_each_claim_gets_its_own_device_on_a_dra_node_that_exists():
    pods = 5003  # not a multiple of 8: the last node is partly used
    used = Counter()
    for i in range(pods):
        _, node, device = fleet.placement(i, 1000)
        if fleet.kind(i) == fleet.CLAIMED:
            used[(node, device)] += 1
            assert node in {fleet.dra_node_name(n) for n in range(fleet.dra_nodes(pods))}
            assert 0 <= device < fleet.GPUS_PER_NODE
            assert fleet.claim_status(i, 1000, "uid")["status"]["allocation"]["devices"]["results"][0][
                "device"] == f"gpu-{device}"
        else:
            assert device is None
            assert node in {fleet.plugin_node_name(n) for n in range(fleet.plugin_nodes(pods))}
    assert max(used.values()) == 1
    assert len(used) == sum(1 for i in range(pods) if fleet.kind(i) == fleet.CLAIMED)


def test_namespaces_cover_every_pod_and_fall_into_the_policy_cohorts():
    names = fleet.namespaces(2500, 1000)
    assert names == ["ml-fleet-0000", "research-fleet-0001", "team-fleet-0002"]
    assert {fleet.placement(i, 1000)[0] for i in range(2500)} == set(names)
    assert fleet.namespace("research-fleet-0001")["metadata"]["labels"]["division"] == "research"
