"""``policy/slices.py`` and the ``sliceNodeLabels`` / ``topologyAlignedResources`` keys (issue 45 items 3 and 5)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from webhook.policy.model import PolicySpec, SliceLabel
from webhook.policy.slices import compile_slices, slice_pin

NVIDIA = compile_slices(PolicySpec().sliceNodeLabels)


@pytest.mark.rule("device-plugin-slice")
def test_the_defaults_are_nvidias_gfd_labels_and_dra_classes() -> None:
    got = [(e.key, tuple(e.values), e.greaterThan, e.sharing, e.deviceClassName, tuple(e.resourceNames))
           for e in PolicySpec().sliceNodeLabels]
    assert got == [
        ("nvidia.com/gpu.product", ("*-MIG-*",), None, "MIG", "mig.nvidia.com", ("nvidia.com/gpu",)),
        ("nvidia.com/mig.strategy", ("single",), None, "MIG", "mig.nvidia.com", ("nvidia.com/gpu",)),
        ("nvidia.com/gpu.product", ("*-SHARED",), None, "TimeSlicing", "gpu.nvidia.com", ("nvidia.com/gpu",)),
        ("nvidia.com/gpu.replicas", (), 1, "TimeSlicing", "gpu.nvidia.com", ("nvidia.com/gpu",)),
    ]
    assert PolicySpec().topologyAlignedResources == ["vpc.amazonaws.com/efa", "rdma/*", "intel.com/*"]


@pytest.mark.parametrize("fields", [{}, {"values": ["*"], "greaterThan": 1}])
def test_an_entry_takes_exactly_one_test(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="exactly one of values and greaterThan"):
        SliceLabel(key="nvidia.com/gpu.product", sharing="MIG", deviceClassName="mig.nvidia.com", **fields)


def test_a_label_key_must_be_a_label_key() -> None:
    with pytest.raises(ValidationError, match="key 'not a key' is not valid"):
        SliceLabel(key="not a key", values=["*"], sharing="MIG", deviceClassName="mig.nvidia.com")


@pytest.mark.rule("device-plugin-slice")
def test_a_mig_and_shared_product_is_the_mig_entry_first() -> None:
    """GFD writes ``A100-SXM4-40GB-MIG-1g.5gb-SHARED`` for a time-sliced MIG device (k8s-device-plugin README): the
    first entry in policy order names it."""
    pin = slice_pin({"nodeSelector": {"nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb-SHARED"}},
                    ["nvidia.com/gpu"], NVIDIA)
    assert pin is not None and pin.entry.sharing == "MIG"
    assert pin.where == "nodeSelector nvidia.com/gpu.product=A100-SXM4-40GB-MIG-1g.5gb-SHARED"


@pytest.mark.rule("device-plugin-slice")
@pytest.mark.parametrize(("spec", "pinned"), [
    ({"nodeSelector": {"nvidia.com/gpu.replicas": "4"}}, True),
    ({"nodeSelector": {"nvidia.com/gpu.replicas": "1"}}, False),
    ({"nodeSelector": {"nvidia.com/gpu.replicas": "9" * 20}}, False),  # not an integer the API server's CEL takes
    ({"nodeSelector": {"nvidia.com/gpu.product": "A100-SXM4-40GB"}}, False),
    ({"nodeSelector": {"nvidia.com/gpu.product": 7}}, False),  # malformed: no finding, no crash
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "NotIn",
                               "values": ["A100-SXM4-40GB-MIG-1g.5gb"]}]}]}}}}, False),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                               "values": ["A100-SXM4-40GB", "A100-SXM4-40GB-MIG-1g.5gb"]}]}]}}}}, True),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": "nonsense"}}}, False),
])
def test_what_pins_slice_nodes(spec: dict[str, object], pinned: bool) -> None:
    assert (slice_pin(spec, ["nvidia.com/gpu"], NVIDIA) is not None) is pinned
    assert slice_pin(spec, ["amd.com/gpu"], NVIDIA) is None  # the label says nothing about another name
