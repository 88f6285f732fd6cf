"""unsatisfiable-claim on the real control plane (issue 18 item 2): a claim the webhook says no device could
ever serve is stored with that warning and stays unallocated, its Pod Unschedulable; a claim it accepts is
allocated by the real kube-scheduler.

The driver is shaped like kubernetes-sigs/dra-example-driver (attributes model/driverVersion/index, capacity
memory) and the selectors are that driver's demo/examples/cel-selector/cel-selector.yaml with other numbers:
``device.attributes[...].model == 'LATEST-GPU-MODEL'`` and ``device.capacity[...].memory.compareTo(quantity(..))``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import policy_variant
from tests.e2e.objects import GPU_NODE, claim, device_class, pod
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers
DRIVER = "cel.example.com"
CLASS = "e2e-cel.example.com"
SLICE = f"{GPU_NODE}-cel"
MODEL = f"device.attributes['{DRIVER}'].model == 'LATEST-GPU-MODEL'"
RULE = "unsatisfiable-claim"


def memory_at_least(q: str) -> str:
    return f"device.capacity['{DRIVER}'].memory.compareTo(quantity('{q}')) >= 0"


def cel_slice() -> dict[str, Any]:
    """Four devices on the dra Node: two with 80Gi, two with 40Gi."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": SLICE},
        "spec": {"driver": DRIVER, "nodeName": GPU_NODE, "pool": {"name": SLICE, "generation": 1,
                                                                   "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}",
                              "attributes": {"model": {"string": "LATEST-GPU-MODEL"}, "index": {"int": i},
                                             "driverVersion": {"version": "1.0.0"}},
                              "capacity": {"memory": {"value": "80Gi" if i < 2 else "40Gi"}}} for i in range(4)]},
    }


def cel_claim(name: str, ns: str, memory: str, count: int) -> dict[str, Any]:
    return claim(name, ns, CLASS, count=count,
                 selectors=[{"cel": {"expression": MODEL}}, {"cel": {"expression": memory_at_least(memory)}}])


# Issue 25 item 2: a domain no device has is absent for `in` (the scheduler's map-with-default answers lookups
# only), so this claim matches every device; before the fix the webhook called it unsatisfiable.
NOT_OTHER = "!('other.example.com' in device.attributes)"


def claim_user(name: str, ns: str, claim_name: str) -> dict[str, Any]:
    p = pod(name, ns, resource=None)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return p


def _ours(warnings: list[str]) -> list[str]:
    return [w for w in warnings if RULE in w]


# The suite's CEL driver is another driver than the policy's GPU one: put its class under migration, or claim
# rules leave its claims alone (issue #24 item 11).
SCOPED = policy_variant({"  claims:\n": f"  migration: {{deviceClasses: [gpu.example.com, {CLASS}]}}\n  claims:\n"})


def test_never_matching_claims_stay_unallocated_and_an_accepted_one_is_allocated(kube, namespace, policy):
    policy(SCOPED)
    ns = namespace("pilot")  # pilot: findings are warnings, so the claims are stored and the scheduler judges
    kube.create(device_class(CLASS, DRIVER))
    kube.create(cel_slice())
    try:
        too_big = cel_claim("too-big", ns, "96Gi", 1)  # no device has 96Gi
        too_many = cel_claim("too-many", ns, "64Gi", 3)  # two devices have >= 64Gi
        fits = cel_claim("fits", ns, "64Gi", 2)
        not_other = claim("not-other", ns, CLASS, count=1,
                          selectors=[{"cel": {"expression": MODEL}}, {"cel": {"expression": NOT_OTHER}}])
        # The webhook's view follows the new slice and class by watch: wait until it judges.
        eventually(lambda: _ours(kube.create(too_big, dry_run=True).warnings), "the webhook seeing the slice", 15)
        warned = _ours(kube.create(too_big).warnings)
        assert len(warned) == 1 and "no device in the cluster matches" in warned[0], warned
        warned = _ours(kube.create(too_many).warnings)
        assert len(warned) == 1 and "3 devices needed on one node, but at most 2" in warned[0], warned
        assert _ours(kube.create(fits).warnings) == []
        assert _ours(kube.create(not_other).warnings) == []
        for name in ("too-big", "too-many", "fits", "not-other"):
            kube.create(claim_user(f"use-{name}", ns, name))

        def allocated() -> dict | None:
            c = kube.get("resource.k8s.io/v1", "ResourceClaim", "fits", ns)
            return c if (c.get("status") or {}).get("allocation") else None
        results = eventually(allocated, "claim fits allocated by kube-scheduler", 60)["status"]["allocation"]
        assert sorted(r["device"] for r in results["devices"]["results"]) == ["gpu-0", "gpu-1"]
        eventually(lambda: kube.get("v1", "Pod", "use-fits", ns)["spec"].get("nodeName") == GPU_NODE,
                   "its Pod bound", 30)
        eventually(lambda: (kube.get("resource.k8s.io/v1", "ResourceClaim", "not-other", ns).get("status") or {})
                   .get("allocation"), "claim not-other allocated by kube-scheduler", 60)

        def unschedulable(name: str) -> bool:
            conds = kube.get("v1", "Pod", f"use-{name}", ns).get("status", {}).get("conditions") or []
            return any(c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                       for c in conds)
        for name in ("too-big", "too-many"):
            eventually(lambda n=name: unschedulable(n), f"the Pod of claim {name} Unschedulable", 60)
            assert not (kube.get("resource.k8s.io/v1", "ResourceClaim", name, ns).get("status") or {}).get(
                "allocation"), name
            assert not kube.get("v1", "Pod", f"use-{name}", ns)["spec"].get("nodeName")
    finally:
        for name in ("too-big", "too-many", "fits", "not-other"):
            kube.delete("v1", "Pod", f"use-{name}", ns)
        # No slice event while a DeviceTaintRule exists (kube-scheduler v1.36.2 panics, test_outage.py
        # KNOWN_SCHEDULER_PANIC): the slice stays in that case.
        if not kube.list("resource.k8s.io/v1beta2", "DeviceTaintRule"):
            kube.delete("resource.k8s.io/v1", "ResourceSlice", SLICE)
        kube.delete("resource.k8s.io/v1", "DeviceClass", CLASS)


# Five nested iterations over the attribute domains (at most 32 each, compile.go's declared map size): the
# worst-case estimate is far past resourceapi.CELSelectorExpressionMaxCost (1,000,000).
TOO_COSTLY = "device.attributes.all(a, " * 5 + "true" + ")" * 5


def test_a_selector_past_the_cost_limit_never_reaches_the_webhook(kube, namespace):
    """validation.go ``validateCELSelector`` rejects an estimated cost over the limit, and strategy
    validation runs before validating admission (registry ``Store.Create``: ``BeforeCreate``, then
    ``createValidation``); the estimate bounds the runtime cost, so no selector the webhook judges can
    exceed the limit when the scheduler runs it (webhook/devices/cel_library.py docstring)."""
    ns = namespace("pilot")
    with pytest.raises(Exception, match="exceeds cost limit"):
        kube.create(claim("costly", ns, CLASS, count=1, selectors=[{"cel": {"expression": TOO_COSTLY}}]),
                    dry_run=True)
