"""``compile/plan.py``: the slice pin in CEL (``slice_pin``, issue 45 item 5) means ``policy.slices.slice_pin``.

A Pod that pins MIG or time-sliced nodes stays off the dra pool in the compiled steering and tracking as in the
webhook (rule device-plugin-slice); evaluated in-process with the API server's CEL (tests/compile/cel_vap.py).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.compile import cel_vap
from tests.helpers import ROOT
from webhook.commands import load_policy
from webhook.compile.plan import slice_pin
from webhook.policy.slices import slice_pin as python_pin

POLICY = load_policy(ROOT / "tests" / "data" / "upstream" / "policy.yaml")  # the NVIDIA defaults
LABELS = [
    ("nvidia.com/gpu.product", "A100-SXM4-40GB-MIG-1g.5gb"),
    ("nvidia.com/gpu.product", "A100-SXM4-40GB"),
    ("nvidia.com/gpu.product", "Tesla-T4-SHARED"),
    ("nvidia.com/gpu.replicas", "4"),
    ("nvidia.com/gpu.replicas", "1"),
    ("nvidia.com/gpu.replicas", "99999999999999"),
    ("nvidia.com/mig.strategy", "single"),
    ("nvidia.com/mig.strategy", "mixed"),
    ("kubernetes.io/hostname", "gpu-0"),
]


def _spec(how: str, key: str, value: str) -> dict[str, Any]:
    if how == "nodeSelector":
        return {"nodeSelector": {key: value}}
    if how == "none":
        return {}
    operator = "In" if how == "affinity-in" else "NotIn"
    term = {"matchExpressions": [{"key": key, "operator": operator, "values": ["other", value]}]}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": []}, term]}}}}


@pytest.mark.rule("device-plugin-slice")
@pytest.mark.parametrize(("label", "how", "names"), list(itertools.product(
    LABELS, ["nodeSelector", "affinity-in", "affinity-notin", "none"], [["nvidia.com/gpu"], ["amd.com/gpu"]])))
def test_the_cel_slice_pin_is_the_python_one(label: tuple[str, str], how: str, names: list[str]) -> None:
    spec = _spec(how, *label)
    want = python_pin(spec, names, POLICY.slices) is not None
    data = {"variables": {"spec": spec, "trkLegacy": [], "trkEr": names}}
    assert cel_vap.evaluate(slice_pin(POLICY), data) is want


def test_the_nvidia_defaults_pin_mig_and_shared_nodes_only() -> None:
    """GFD's labels (NVIDIA/k8s-device-plugin internal/lm/resource.go): -MIG- and -SHARED products, replicas > 1."""
    pinned = {(k, v) for k, v in LABELS
              if python_pin({"nodeSelector": {k: v}}, ["nvidia.com/gpu"], POLICY.slices) is not None}
    assert pinned == {("nvidia.com/gpu.product", "A100-SXM4-40GB-MIG-1g.5gb"),
                      ("nvidia.com/gpu.product", "Tesla-T4-SHARED"), ("nvidia.com/gpu.replicas", "4"),
                      ("nvidia.com/mig.strategy", "single")}
