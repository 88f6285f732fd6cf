"""What the cluster view stores of ResourceSlices (issue 29 item 4): a projection that keeps every selector's
answer, and a ``--max-devices`` budget on what is stored, not only on what is indexed.

Selectors are the published ones of tests/builders/satisfiable.py (dra-example-driver cel-selector.yaml, NVIDIA
k8s-dra-driver-gpu mig-1g-12gb.yaml); the slices carry what the API server adds (managedFields, pool, taints,
capacity request policies), which the projection drops.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import satisfiable as ts
from webhook.devices import selectors as cd
from webhook.devices.store import OverBudget, SliceKeeper, stored_slices

EXAMPLE_DRIVER, EXAMPLE_MEMORY, EXAMPLE_MODEL = ts.EXAMPLE_DRIVER, ts.EXAMPLE_MEMORY, ts.EXAMPLE_MODEL
NVIDIA_MIG = ts.NVIDIA_MIG
example_slice, nvidia_slice = ts.example_slice, ts.nvidia_slice
SELECTORS = (EXAMPLE_MODEL, EXAMPLE_MEMORY, NVIDIA_MIG, f"device.driver == '{EXAMPLE_DRIVER}'",
             "device.driver == 'gpu.nvidia.com'", "device.allowMultipleAllocations",
             "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')",
             f"device.attributes['{EXAMPLE_DRIVER}'].driverVersion.isGreaterThan(semver('0.9.0'))")


def as_stored(obj: dict[str, Any]) -> dict[str, Any]:
    """The slice with what the API server and drivers add beyond what selectors read."""
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid="u-1", resourceVersion="7", managedFields=[{"manager": "driver", "fieldsV1": {
        "f:spec": {"f:devices": {}}}}])
    for i, dev in enumerate(obj["spec"]["devices"]):
        dev["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
        dev["allowMultipleAllocations"] = i == 0
        for cap in dev.get("capacity", {}).values():
            cap["requestPolicy"] = {"default": "1Gi", "validRange": {"min": "1Gi"}}
    return obj


SLICES = [as_stored(example_slice("node-1", 4, memory="40Gi")), as_stored(example_slice("node-2", 2)),
          as_stored(nvidia_slice("gh200-1", 2, 3)),
          as_stored({"metadata": {"name": "shared"}, "spec": {"driver": EXAMPLE_DRIVER, "allNodes": True, "devices": [
              {"name": "bad", "attributes": {"model": {"weird": 1}}}]}})]


@pytest.mark.parametrize("expression", SELECTORS)
def test_a_selector_answers_the_same_on_the_projection_as_on_the_whole_slice(expression: str) -> None:
    sel = cd.compile_selector(expression)
    for obj in SLICES:
        whole = [cd.evaluate(sel, d) for d in cd.slice_devices(obj)]
        projected = [cd.evaluate(sel, d) for d in cd.slice_devices(cd.project_slice(obj))]
        assert projected == whole, obj["metadata"]["name"]
        true, unknown = cd.slice_cache(obj).masks_for(sel)
        assert [None if unknown >> i & 1 else bool(true >> i & 1) for i in range(len(whole))] == whole


def test_the_projection_drops_what_no_selector_reads() -> None:
    projected = cd.project_slice(SLICES[0])
    assert set(projected) == {"spec"} and set(projected["spec"]) == {"driver", "nodeName", "devices"}
    dev = projected["spec"]["devices"][0]
    assert set(dev) == {"name", "attributes", "capacity", "allowMultipleAllocations"}
    assert dev["capacity"] == {"memory": {"value": "40Gi"}}


def test_the_index_is_the_same_over_projections() -> None:
    whole = cd.build_index(SLICES, [])
    exprs = (f"device.driver == '{EXAMPLE_DRIVER}'", EXAMPLE_MODEL)
    # "bad" (a device whose attribute cannot be read) is unknown, on every node (allNodes).
    assert whole.capacity(exprs) == cd.Capacity(possible=7, per_node=5, unknown=1, multiple=True)
    assert cd.build_index([cd.project_slice(s) for s in SLICES], []).capacity(exprs) == whole.capacity(exprs)


def test_the_budget_counts_stored_devices() -> None:
    keep = SliceKeeper(max_devices=10)
    first, second = keep(example_slice("node-1", 4)), keep(example_slice("node-2", 4))
    assert first.count == 4 and second.count == 4
    assert keep(example_slice("node-3", 4)) == OverBudget(4)  # 12 > 10: not stored
    assert keep(example_slice("node-1", 6)).count == 6  # a new version replaces its old one: 10 stored
    assert keep(example_slice("node-4", 1)) == OverBudget(1)
    store = {"node-1": keep(example_slice("node-1", 6)), "node-2": second, "node-3": OverBudget(4)}
    assert keep.reconcile(store) == (10, 4, False)
    del store["node-2"]  # deleted: 6 stored, the 4 left out fit now
    assert keep.reconcile(store) == (6, 4, True)
    assert keep(example_slice("node-3", 4)).count == 4
    assert [s.count for s in stored_slices(store.values())] == [6]
