"""``unsatisfiable-claim`` and its CEL runtime (issue 18 item 2).

Test inputs are published DRA selectors:
- kubernetes-sigs/dra-example-driver demo/examples/cel-selector/cel-selector.yaml (ResourceClaimTemplate
  ``single-gpu-cel``: ``model == 'LATEST-GPU-MODEL'`` and ``memory.compareTo(quantity('4Gi')) >= 0``); its
  devices are shaped as that driver publishes them (attributes index/uuid/model/driverVersion, capacity memory).
- NVIDIA/k8s-dra-driver-gpu demo/specs/extended-resources/mig-1g-12gb.yaml (DeviceClass
  ``mig-1g-12gb.gpu.nvidia.com``: ``device.driver == 'gpu.nvidia.com' && ...type == 'mig' && ...profile ==
  '1g.12gb'``, extendedResourceName ``nvidia.com/gpu``) and gpu-full.yaml (a Pod asking ``nvidia.com/gpu: 1``).
The environment's semantics (map-with-default for domains, unqualified names under the driver, version
attributes as semvers) are kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go.
"""

from __future__ import annotations

import copy
import datetime as dt
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders.satisfiable import (
    EXAMPLE_CLASS,
    EXAMPLE_DRIVER,
    EXAMPLE_MEMORY,
    EXAMPLE_MODEL,
    NVIDIA_MIG,
    device_class,
    example_slice,
    nvidia_slice,
    template,
)
from tests.e2e.waits import eventually as _wait
from tests.fakeapi import FakeAPI
from webhook.cluster.live_view import LiveView
from webhook.devices import selectors as cd
from webhook.offline.views import StaticView
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.rules.base import Context, Finding
from webhook.rules.satisfiable import unsatisfiable_claim
from webhook.rules.view import ClusterView, OfflineView

NOW = dt.datetime(2027, 2, 15, tzinfo=dt.UTC)
MIG_CLASS = device_class("mig-1g-12gb.gpu.nvidia.com", NVIDIA_MIG, "nvidia.com/gpu")


def policy() -> CompiledPolicy:
    doc = {"apiVersion": "dra-migration.io/v1alpha1", "kind": "MigrationPolicy", "metadata": {"name": "p"},
           "spec": {}}
    return compile_policy(MigrationPolicy.model_validate(doc), repr(doc).encode())


def run(obj: dict[str, Any], view: ClusterView,
        user: dict[str, Any] | None = None) -> tuple[list[Finding], tuple[str, ...]]:
    ctx = Context(policy=policy(), kind=obj["kind"], group=obj["apiVersion"].rpartition("/")[0], version="v1",
                  operation="CREATE", namespace="cel-selector", phase="validate", now=NOW, cohort=None,
                  stage="pilot", view=view, user=user or {})
    before = copy.deepcopy(obj)
    out = unsatisfiable_claim(obj, ctx)
    assert obj == before
    return out.findings, out.degraded


def example_view(*slices: dict[str, Any]) -> StaticView:
    return StaticView(device_classes=[EXAMPLE_CLASS, MIG_CLASS], resource_slices=list(slices))


# -- the CEL runtime ----------------------------------------------------------------------------------------


def _eval(expression: str, dev: dict[str, Any], driver: str = EXAMPLE_DRIVER) -> bool | None:
    sl = {"spec": {"driver": driver, "nodeName": "n", "devices": [{"name": "d", **dev}]}}
    return cd.evaluate(cd.compile_selector(expression), cd.slice_devices(sl)[0])


@pytest.mark.parametrize(("expression", "expected"), [
    (EXAMPLE_MODEL, True),
    (EXAMPLE_MEMORY, True),
    ("device.capacity['gpu.dra-example-driver.sigs.k8s.io'].memory.compareTo(quantity('81Gi')) >= 0", False),
    ("device.capacity['gpu.dra-example-driver.sigs.k8s.io'].memory == quantity('81920Mi')", True),
    ("device.capacity['gpu.dra-example-driver.sigs.k8s.io'].memory.isGreaterThan(quantity('80G'))", True),
    ("device.capacity['gpu.dra-example-driver.sigs.k8s.io'].memory.isLessThan(quantity('1Ti'))", True),
    ("device.capacity['gpu.dra-example-driver.sigs.k8s.io'].memory.asInteger() == 85899345920", True),
    ("device.capacity['gpu.dra-example-driver.sigs.k8s.io'].memory.sub(quantity('80Gi')).sign() == 0", True),
    ("device.attributes['gpu.dra-example-driver.sigs.k8s.io'].driverVersion.isGreaterThan(semver('0.9.9'))", True),
    ("device.attributes['gpu.dra-example-driver.sigs.k8s.io'].driverVersion.isLessThan(semver('1.0.0-rc.1'))", False),
    ("device.attributes['gpu.dra-example-driver.sigs.k8s.io'].driverVersion == semver('v1', true)", True),
    ("device.attributes['gpu.dra-example-driver.sigs.k8s.io'].driverVersion.major() == 1", True),
    ("cel.bind(dra, device.attributes['gpu.dra-example-driver.sigs.k8s.io'], dra.index >= 2 && dra.index < 4)", False),
    ("device.attributes['gpu.dra-example-driver.sigs.k8s.io'].uuid.startsWith('gpu-')", True),
    ("device.attributes['gpu.dra-example-driver.sigs.k8s.io'].uuid.lowerAscii() == 'gpu-a'", True),
    ("device.allowMultipleAllocations == false", True),
    # A domain the device does not have is an empty map (map-with-default), so `in` and has() work...
    ("!('model' in device.attributes['gpu.nvidia.com'])", True),
    # ...while a missing attribute is an error in the scheduler too: unknown, never False.
    ("device.attributes['gpu.dra-example-driver.sigs.k8s.io'].nope == 1", None),
    ("device.attributes['gpu.nvidia.com'].productName == 'x'", None),
    # Kubernetes' IP library (issue 25 item 2): a UUID is not an IP.
    ("isIP(device.attributes['gpu.dra-example-driver.sigs.k8s.io'].uuid)", False),
    # Not supported here (transformMap of two-variable comprehensions): unknown.
    ("{'a': 1}.transformMap(k, v, v + 1) == {'a': 2}", None),
    ("quantity('not a quantity') == device.capacity['gpu.dra-example-driver.sigs.k8s.io'].memory", None),
])
def test_selector_semantics(expression: str, expected: bool | None) -> None:
    dev = example_slice("n", 1)["spec"]["devices"][0]
    dev["attributes"]["uuid"] = {"string": "GPU-A"} if "lowerAscii" in expression else dev["attributes"]["uuid"]
    assert _eval(expression, dev) is expected


def test_unqualified_names_take_the_driver_as_domain_and_bad_versions_are_unknown() -> None:
    dev = {"attributes": {"model": {"string": "m"}, "other.example.com/model": {"string": "o"}}}
    assert _eval("device.attributes['gpu.dra-example-driver.sigs.k8s.io'].model == 'm'", dev) is True
    assert _eval("device.attributes['other.example.com'].model == 'o'", dev) is True
    assert _eval("device.driver == 'x'", {"attributes": {"v": {"version": "1.0"}}}) is None


def test_quantities_and_semvers() -> None:
    assert cd.parse_quantity("1500m") == cd.parse_quantity("1.5")
    assert cd.parse_quantity("1Ki") == 1024 and cd.parse_quantity("1e3") == 1000 and cd.parse_quantity("2k") == 2000
    with pytest.raises(ValueError):
        cd.parse_quantity("12 Gi")
    assert cd.quantity_value(cd.parse_quantity("1")) == cd.quantity_value(cd.parse_quantity("1000m"))
    order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
             "1.0.0-rc.1", "1.0.0", "1.0.1", "1.10.0"]  # semver.org's precedence example, plus two
    for lo, hi in zip(order, order[1:], strict=False):
        assert cd._compare(cd.semver_value(lo), cd.semver_value(hi)) == -1, (lo, hi)
    assert cd.parse_semver("v01.2", normalize=True) == (1, 2, 0, ())
    with pytest.raises(ValueError):
        cd.parse_semver("1.2")


def test_each_expression_compiles_once() -> None:
    expr = "device.driver == 'compile-once.example.com'"
    assert cd.compile_selector(expr) is cd.compile_selector(expr)
    assert cd.compile_selector("device.driver ==").error


# -- the rule ------------------------------------------------------------------------------------------------


def test_example_driver_template_is_satisfiable_and_a_stricter_one_is_not() -> None:
    view = example_view(example_slice("node-1", 8), example_slice("node-2", 8, memory="40Gi"))
    assert run(template(EXAMPLE_MODEL, EXAMPLE_MEMORY), view) == ([], ())
    findings, _ = run(template(EXAMPLE_MODEL, EXAMPLE_MEMORY.replace("4Gi", "96Gi")), view)
    assert [f.rule for f in findings] == ["unsatisfiable-claim"]
    assert "no device in the cluster matches (0 of 16 devices)" in findings[0].message
    assert findings[0].paths == ("spec.spec.devices.requests[0].exactly",)


def test_count_must_fit_on_one_node() -> None:
    view = example_view(example_slice("node-1", 8), example_slice("node-2", 8, memory="40Gi"))
    assert run(template(EXAMPLE_MEMORY, count=8), view)[0] == []
    findings, _ = run(template(EXAMPLE_MEMORY.replace("4Gi", "64Gi"), count=9), view)
    assert "9 devices needed on one node, but at most 8" in findings[0].message
    findings, _ = run(template(count=9), view)  # 16 in the cluster, but 8 per node
    assert "at most 8 matching devices are on any node (16 in the cluster)" in findings[0].message


def test_devices_shared_by_nodes_count_for_every_node() -> None:
    network = example_slice("x", 4)
    del network["spec"]["nodeName"]
    network["spec"]["allNodes"] = True
    view = example_view(example_slice("node-1", 2), network)
    assert run(template(count=6), view)[0] == []
    assert run(template(count=7), view)[0]


def test_multiple_allocations_lift_the_count() -> None:
    sl = example_slice("node-1", 1)
    sl["spec"]["devices"][0]["allowMultipleAllocations"] = True
    assert run(template(count=4), example_view(sl))[0] == []


def test_unknown_answers_never_report() -> None:
    view = example_view(example_slice("node-1", 2))
    # A selector this runtime lacks, an attribute the devices lack (a CEL runtime error in the scheduler).
    for expr in ("{'a': device.attributes['gpu.dra-example-driver.sigs.k8s.io'].uuid}.transformMap(k, v, v) == {}",
                 "device.attributes['gpu.dra-example-driver.sigs.k8s.io'].nope == 1"):
        findings, degraded = run(template(expr), view)
        assert findings == [], expr
    unsupported = template("{'a': 1}.transformMap(k, v, v) == {}")
    assert any("selector not supported here" in d for d in run(unsupported, view)[1])
    # Offline, and slices unknown: nothing to say.
    assert run(template(EXAMPLE_MODEL.replace("LATEST", "NO")), OfflineView()) == ([], ())
    assert run(template(EXAMPLE_MODEL.replace("LATEST", "NO")), StaticView(device_classes=[EXAMPLE_CLASS]))[0] == []
    # A class the view does not know: other rules (and the API server) speak about it.
    findings, degraded = run(template(class_name="missing.example.com"), view)
    assert findings == [] and "DeviceClass missing.example.com not known" in degraded[0]


def test_first_available_reports_only_when_no_alternative_can_be_served() -> None:
    view = example_view(example_slice("node-1", 4))
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
             "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": [
                 {"name": "big", "deviceClassName": EXAMPLE_DRIVER, "count": 8},
                 {"name": "small", "deviceClassName": EXAMPLE_DRIVER, "count": 2}]}]}}}
    assert run(claim, view)[0] == []
    claim["spec"]["devices"]["requests"][0]["firstAvailable"][1]["count"] = 5
    findings, _ = run(claim, view)
    assert len(findings) == 1 and "none of its 2 firstAvailable alternatives" in findings[0].message
    assert findings[0].paths == ("spec.devices.requests[0].firstAvailable[0]",
                                 "spec.devices.requests[0].firstAvailable[1]")


def test_generated_and_scheduler_claims_are_left_alone() -> None:
    view = example_view(example_slice("node-1", 1))
    bad = template(count=4)["spec"]
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "spec": bad["spec"], "metadata": {
        "name": "pod-gpu-x", "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True}]}}
    assert run(claim, view)[0] == []
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert run(claim, view, user={"username": "system:kube-scheduler"})[0] == []
    del claim["metadata"]["ownerReferences"], claim["metadata"]["annotations"]
    assert run(claim, view)[0]  # the same spec, written by a user


def nvidia_pod(gpus: int) -> dict[str, Any]:
    """NVIDIA gpu-full.yaml's Pod (nvidia.com/gpu in the limits, no resourceClaims)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gpu-full-pod"}, "spec": {
        "restartPolicy": "Never", "containers": [{
            "name": "cuda-container", "image": "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0",
            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def test_extended_resource_pod_through_nvidia_mig_class() -> None:
    no_mig = StaticView(device_classes=[MIG_CLASS], resource_slices=[nvidia_slice("gh200-1", 2, 0)])
    findings, _ = run(nvidia_pod(1), no_mig)
    assert len(findings) == 1 and "nvidia.com/gpu: 1 devices of DeviceClass mig-1g-12gb.gpu.nvidia.com" in (
        findings[0].message)
    with_mig = StaticView(device_classes=[MIG_CLASS], resource_slices=[nvidia_slice("gh200-1", 2, 7)])
    assert run(nvidia_pod(7), with_mig)[0] == []
    assert "7 matching devices" in run(nvidia_pod(8), with_mig)[0][0].message
    # A name no DeviceClass maps is not on this path: nothing to say here.
    assert run(nvidia_pod(1), StaticView(device_classes=[], resource_slices=[]))[0] == []


# -- precomputation and the time budget ---------------------------------------------------------------------


def test_class_selectors_are_precomputed_and_request_selectors_carried_over() -> None:
    index = cd.build_index([example_slice("node-1", 4)], [EXAMPLE_CLASS])
    assert f"device.driver == '{EXAMPLE_DRIVER}'" in index.expressions()
    assert index.capacity((EXAMPLE_MODEL,)) is not None
    again = cd.build_index([example_slice("node-1", 4)], [EXAMPLE_CLASS], carry=index.expressions())
    assert EXAMPLE_MODEL in again.expressions()


def test_a_spent_budget_is_unknown() -> None:
    index = cd.build_index([example_slice(f"n{i}", 8) for i in range(4)], [])
    assert index.capacity(("device.driver == 'budget.example.com'",), deadline=time.perf_counter() - 1) is None
    assert index.capacity(("device.driver == 'budget.example.com'",)) == cd.Capacity(0, 0, 0, False)


# -- the live view watches every driver's slices -------------------------------------------------------------


@pytest.fixture()
def live(tmp_path: Path) -> Iterator[Callable[..., tuple[FakeAPI, LiveView]]]:
    started: list[tuple[FakeAPI, LiveView]] = []

    def make(**kwargs: Any) -> tuple[FakeAPI, LiveView]:
        api = FakeAPI().start()
        view = LiveView.from_kubeconfig(api.write_kubeconfig(tmp_path), backoff=(0.05, 0.2), budget=5.0, **kwargs)
        started.append((api, view))
        return api, view

    yield make
    for api, view in started:
        view.stop()
        api.stop()


def test_live_view_follows_slices_of_every_driver(live: Callable[..., tuple[FakeAPI, LiveView]]) -> None:
    api, view = live()
    api.put(EXAMPLE_CLASS, example_slice("node-1", 2), nvidia_slice("gh200-1", 1, 3))
    assert view.wait_synced(10.0)
    _wait(lambda: (ix := view.device_index().value) is not None and ix.devices == 6, "6 devices indexed")
    index = view.device_index().value
    assert index is not None and f"device.driver == '{EXAMPLE_DRIVER}'" in index.expressions()  # precomputed
    assert run(template(count=3), view)[0]
    api.put(example_slice("node-1", 4))
    _wait(lambda: (ix := view.device_index().value) is not None and ix.devices == 8, "the grown slice")
    assert run(template(count=3), view)[0] == []
    assert view.status()["resourceslices"]["devices"] == 8


def test_live_view_over_its_device_budget_answers_unknown(live: Callable[..., tuple[FakeAPI, LiveView]]) -> None:
    api, view = live(max_devices=3)
    api.put(EXAMPLE_CLASS, example_slice("node-1", 4))
    assert view.wait_synced(10.0)
    _wait(lambda: "budget" in (view.device_index().degraded or ""), "the budget reason")
    findings, degraded = run(template(count=9), view)
    assert findings == [] and "4 devices in ResourceSlices exceed the cluster view's budget of 3" in degraded[0]


def test_live_view_stores_no_device_data_past_its_budget_and_refills_after_a_deletion(
        live: Callable[..., tuple[FakeAPI, LiveView]]) -> None:
    from webhook.devices.store import OverBudget

    api, view = live(max_devices=6)
    api.put(EXAMPLE_CLASS, example_slice("node-1", 4), example_slice("node-2", 4))
    assert view.wait_synced(10.0)
    _wait(lambda: "over --max-devices" in (view.device_index().degraded or "")
          or view.device_index().value is not None, "the budget reason")
    assert view.device_index().value is None
    kept = list(view._slices.store.values())  # the informer's store: one slice of 4 stored, one marker
    assert sorted(type(v).__name__ for v in kept) == ["OverBudget", "_SliceCache"]
    assert [v for v in kept if isinstance(v, OverBudget)] == [OverBudget(4)]
    api.delete("ResourceSlice", "node-1-example")  # the other slice fits now: listed again and stored
    _wait(lambda: (ix := view.device_index().value) is not None and ix.devices == 4, "the left-out slice stored")
    assert not [v for v in view._slices.store.values() if isinstance(v, OverBudget)]
