"""The gauge writer's watched copy of the cluster (webhook/fleet/gauge_watch.py, issue 29 item 2): what it keeps of each
object counts as the whole object does, it lists once and follows events, and it lets go when it must."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.builders.gauges import GPU, INJECTED, NOW, PATH, scenario
from tests.builders.lists import fleet
from tests.builders.scope import MIGRATED
from tests.builders.scope import _scenario as scoped_scenario
from tests.builders.scope import policy as scoped_policy
from tests.e2e.waits import eventually
from tests.fakeapi import (
    FakeAPI,
    device_class,
    exact_request,
    make_policy,
    namespace,
    pod,
    resource_claim,
    write_policy,
)
from webhook.cluster.api import connect
from webhook.fleet import gauges
from webhook.fleet.gauge_watch import (
    Judgements,
    KeptClaims,
    KeptPods,
    WatchedCluster,
    claim_object,
    keep_claim,
    keep_pod,
    pod_object,
)
from webhook.fleet.report import build_report
from webhook.policy.compiled import CompiledPolicy
from webhook.serve import gauge_writer

POLICY = make_policy()
PREFIX = POLICY.prefix
EXT = {"extendedResourceClaimStatus": {"resourceClaimName": "ext-claim-1", "requestMappings": [
    {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}]}}


def _kept(objs: gauges.ClusterObjects, prefix: str) -> gauges.ClusterObjects:
    """The same objects as the writer's stores hold them and a refresh hands them to the report."""
    pods = [f for f in (keep_pod(p, prefix) for p in objs.pods) if f is not None]
    return gauges.ClusterObjects(list(objs.namespaces), [pod_object(f, prefix) for f in pods],
                                 [claim_object(keep_claim(c, prefix), prefix) for c in objs.claims],
                                 objs.device_classes)


def _edge_cases() -> gauges.ClusterObjects:
    """Pods and claims where each kept field decides something: init containers, implicit class names, limits
    only, mixed paths, template claims named in status, firstAvailable requests, a claim with no class."""
    init = pod("ml-a", "init-gpu", annotations={PATH: "device-plugin"})
    init["spec"]["initContainers"] = [{"name": "warm", "image": "x", "resources": {"limits": GPU}}]
    templated = pod("ml-a", "templated", claims=[("gpu", "gpu-template")], annotations={PATH: "dra-claim"},
                    status={"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "templated-gpu-abc"}]})
    foreign = pod("ml-a", "nic-only", claims=[("nic", "nic-template")],
                  status={"resourceClaimStatuses": [{"name": "nic", "resourceClaimName": "nic-only-nic-x"}]})
    first = resource_claim("ml-a", "templated-gpu-abc", requests=[exact_request("gpu", "gpu.example.com")])
    first["spec"]["devices"]["requests"] = [{"name": "any", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu.example.com"}, {"name": "nic", "deviceClassName": "nic.example.com"}]}]
    nic = resource_claim("ml-a", "nic-only-nic-x", requests=[exact_request("nic", "nic.example.com")],
                         annotations={INJECTED: "2", "other.example.com/tolerations-injected": "9"})
    classless = resource_claim("team-x", "odd", requests=[exact_request("gpu", "gpu.example.com")])
    classless["spec"]["devices"]["requests"][0]["exactly"].pop("deviceClassName")
    pods = [
        init, templated, foreign,
        pod("ml-a", "implicit", requests={"deviceclass.resource.kubernetes.io/gpu.example.com": 1}),
        pod("ml-a", "mixed", requests=GPU, claims=[("gpu", "gpu-template")], status=EXT),
        pod("ml-a", "ext", requests=GPU, status=EXT, annotations={PATH: "dra-extended-resource"}),
        pod("ml-a", "annotated-no-devices", annotations={PATH: "dra-claim"}),
        pod("team-x", "pending", requests=GPU, node=None, annotations={PATH: "device-plugin"}),
        pod("team-x", "other-ext", requests={"example.com/fpga": 2}),
        pod("team-x", "cpu", requests={"cpu": 1}),
        pod("team-x", "failed", requests=GPU, status={"phase": "Failed"}),
    ]
    return gauges.ClusterObjects(
        [namespace("ml-a"), namespace("team-x"), namespace("lab", {"division": "research"})], pods,
        [first, nic, classless], [device_class("gpu.example.com", "example.com/gpu"),
                                  device_class("fpga.example.com", "example.com/fpga")])


def _fleet() -> gauges.ClusterObjects:
    objs = fleet()
    kinds: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        kinds.setdefault(o["kind"], []).append(o)
    return gauges.ClusterObjects(kinds["Namespace"], kinds["Pod"], kinds["ResourceClaim"], kinds["DeviceClass"])


CASES = {
    "gauges-scenario": (make_policy, NOW, scenario),
    "streamed-fleet": (make_policy, NOW, _fleet),
    "edge-cases": (make_policy, NOW, _edge_cases),
    "migration-scope": (scoped_policy, MIGRATED, scoped_scenario),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_what_the_writer_keeps_counts_as_the_whole_objects(case: str) -> None:
    make, now, objects = CASES[case]
    policy: CompiledPolicy = make()
    whole, kept = objects(), _kept(objects(), policy.prefix)
    assert build_report(policy, now, whole.namespaces, whole.pods, whole.claims, whole.device_classes) == \
        build_report(policy, now, kept.namespaces, kept.pods, kept.claims, kept.device_classes)
    assert gauges.samples(policy, now, objects()) == gauges.samples(policy, now, _kept(objects(), policy.prefix))


def _store(pods: Any) -> list[Any]:
    assert isinstance(pods, KeptPods)
    return list(pods.store.values())


class _Stores:
    """The writer's stores over whole objects, changed one object at a time as watch events change them (an
    unchanged object keeps its facts object), judged through one pair of ``Judgements`` refresh after refresh."""

    def __init__(self, objs: gauges.ClusterObjects, prefix: str) -> None:
        self.prefix, self.classes = prefix, list(objs.device_classes or [])
        self.namespaces = list(objs.namespaces)
        self.whole_pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in objs.pods}
        self.whole_claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in objs.claims}
        self.pods = {k: f for k, f in ((k, keep_pod(p, prefix)) for k, p in self.whole_pods.items()) if f}
        self.claims = {k: keep_claim(c, prefix) for k, c in self.whole_claims.items()}
        self.pod_memo: Judgements[Any, Any] = Judgements()
        self.claim_memo: Judgements[Any, Any] = Judgements()

    def put(self, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if obj.get("kind") == "ResourceClaim":
            self.whole_claims[key], self.claims[key] = obj, keep_claim(obj, self.prefix)
            return
        self.whole_pods[key] = obj
        facts = keep_pod(obj, self.prefix)
        if facts is None:
            self.pods.pop(key, None)
        else:
            self.pods[key] = facts

    def delete_pod(self, key: tuple[str, str]) -> None:
        del self.whole_pods[key]
        self.pods.pop(key, None)

    def reports(self, policy: CompiledPolicy, now: dt.datetime) -> tuple[Any, Any]:
        """(the report over the kept stores, judged through the memos; the report over the whole objects)."""
        kept = build_report(policy, now, self.namespaces, KeptPods(dict(self.pods), self.prefix, self.pod_memo),
                            KeptClaims(dict(self.claims), self.prefix, self.claim_memo), self.classes)
        whole = build_report(policy, now, self.namespaces, list(self.whole_pods.values()),
                             list(self.whole_claims.values()), self.classes)
        return kept, whole


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refresh_of_unchanged_stores_judges_nothing_again(case: str) -> None:
    make, now, objects = CASES[case]
    policy: CompiledPolicy = make()
    stores = _Stores(objects(), policy.prefix)
    first, whole = stores.reports(policy, now)
    assert first == whole and stores.pod_memo.judged == len(stores.pods)
    assert stores.claim_memo.judged == len(stores.claims)
    again, _ = stores.reports(policy, now)
    assert again == whole
    assert (stores.pod_memo.judged, stores.claim_memo.judged) == (len(stores.pods), len(stores.claims))


def test_what_changed_is_judged_again_and_counts_as_fresh() -> None:
    """Each change a watch or a refresh brings: a changed Pod, a deleted one, a claim that becomes another
    driver's (its Pod's facts are the same, its judgement is not), other DeviceClasses (what a policy change
    does too: other device names, another scope)."""
    policy = make_policy()
    stores = _Stores(_edge_cases(), policy.prefix)
    stores.reports(policy, NOW)

    def step() -> int:
        before = stores.pod_memo.judged + stores.claim_memo.judged
        kept, whole = stores.reports(policy, NOW)
        assert kept == whole
        return stores.pod_memo.judged + stores.claim_memo.judged - before

    stores.put(pod("ml-a", "implicit", requests={"deviceclass.resource.kubernetes.io/gpu.example.com": 1},
                   annotations={PATH: "dra-extended-resource"}))
    assert step() == 1
    stores.delete_pod(("ml-a", "mixed"))
    assert step() == 0 and len(stores.pod_memo._kept) == len(stores.pods)
    # The templated Pod's claim now asks for a NIC only: the claim and the Pod it belongs to are judged again.
    nic = resource_claim("ml-a", "templated-gpu-abc", requests=[exact_request("nic", "nic.example.com")])
    stores.put(nic)
    kept, _ = stores.reports(policy, NOW)
    assert not any(p.name == "templated" for p in kept.pods)
    assert step() == 0  # and the next refresh reuses those judgements
    stores.classes = stores.classes[:1]  # the fpga DeviceClass went away: every object is judged again
    assert step() == len(stores.pods) + len(stores.claims)


def test_pods_the_report_never_counts_are_not_kept() -> None:
    objs = {p["metadata"]["name"]: p for p in _edge_cases().pods}
    assert keep_pod(objs["cpu"], PREFIX) is None  # no devices, no annotation
    assert keep_pod(objs["failed"], PREFIX) is None  # finished
    assert keep_pod(objs["annotated-no-devices"], PREFIX) is not None  # the report counts its intended path
    assert keep_pod(objs["other-ext"], PREFIX) is not None  # a DeviceClass may serve example.com/fpga later
    facts = keep_pod(objs["init-gpu"], PREFIX)
    assert facts is not None and facts.resources == ("example.com/gpu",) and facts.intended == "device-plugin"
    # Another tool's path annotation (Prometheus' scrape path is on most Pods) does not make a Pod kept.
    scraped = pod("ml-a", "web", annotations={"prometheus.io/path": "/metrics"})
    assert keep_pod(scraped, PREFIX) is None
    # Only the policy's own annotations are kept of a claim.
    nic = keep_claim(next(c for c in _edge_cases().claims if c["metadata"]["name"] == "nic-only-nic-x"), PREFIX)
    assert nic.injected == "2"


@pytest.fixture()
def fake(tmp_path: Path) -> Iterator[FakeAPI]:
    with FakeAPI() as api:
        objs = scenario()
        api.put(*objs.namespaces, *objs.device_classes or (), *objs.pods, *objs.claims)
        api.kubeconfig = api.write_kubeconfig(tmp_path)  # type: ignore[attr-defined]
        yield api


def _pods_total(directory: Path) -> float:
    snap = gauges.read_snapshot(str(directory))
    assert snap is not None and snap["error"] is None, snap
    return sum(v for name, _, v in snap["samples"] if name == "dra_webhook_migration_pods")


def test_the_writer_lists_once_then_follows_the_watches(fake: FakeAPI, tmp_path: Path) -> None:
    opts = gauge_writer.WriterOptions(Path(write_policy(tmp_path)), fake.kubeconfig, str(tmp_path), 60, "ns")
    stop = threading.Event()
    with connect(fake.kubeconfig) as api:
        exporter = gauge_writer.exporter(opts, api, leading=lambda: True, stop=stop)
        try:
            assert exporter.refresh() and _pods_total(tmp_path) == 8
            fake.put(pod("ml-a", "new", requests=GPU, annotations={PATH: "device-plugin"}))
            fake.delete("Pod", "drifted", "ml-a")
            fake.put(pod("ml-a", "nobody", requests=GPU, status={"phase": "Succeeded"}))  # finished: leaves
            fake.put(pod("ml-a", "web", requests={"cpu": 1}))  # uses no devices: not counted, not kept

            def drifted_and_total() -> tuple[float, float] | None:
                exporter.refresh()
                snap = gauges.read_snapshot(str(tmp_path)) or {}
                drift = sum(v for n, _, v in snap.get("samples", []) if n == "dra_webhook_migration_drifted_pods")
                total = _pods_total(tmp_path)
                return (drift, total) if total == 7 else None

            assert eventually(drifted_and_total, "the watch events in the gauges") == (0, 7)
        finally:
            exporter.release()
            stop.set()
    # One list of each resource, ever: the later refreshes counted what the watches delivered.
    assert fake.count("pods", "list") == 1 and fake.count("resourceclaims", "list") == 1
    assert fake.count("pods", "watch") >= 1


def test_losing_the_lease_stops_the_watches_and_drops_the_stores(fake: FakeAPI) -> None:
    leading = [True]
    with connect(fake.kubeconfig) as api:
        cluster = WatchedCluster(api, threading.Event(), lambda: leading[0])
        objs = cluster.read(POLICY)
        assert len(_store(objs.pods)) == 8 and cluster.status()["pods"]["objects"] == 8
        threads = [t for t in threading.enumerate() if t.name.startswith("gauge-watch-")]
        assert len(threads) == 3
        cluster.close()
        assert cluster.status() == {}
        assert not any(t.is_alive() for t in threads)


def test_a_failing_list_is_reported_not_waited_on(fake: FakeAPI) -> None:
    from webhook.fleet.gauge_watch import NotSynced

    fake.fail("resourceclaims")
    with connect(fake.kubeconfig) as api:
        cluster = WatchedCluster(api, threading.Event(), lambda: True, backoff=(0.05, 0.1))
        try:
            with pytest.raises(NotSynced, match="listing resourceclaims failed: .*500"):
                cluster.read(POLICY)
            fake.heal()
            assert eventually(lambda: len(_store(cluster.read(POLICY).pods)), "a read once the server heals") == 8
        finally:
            cluster.close()


def test_a_stopped_writer_does_not_wait_for_the_first_lists(fake: FakeAPI) -> None:
    from webhook.fleet.gauge_watch import NotSynced

    fake.hang("pods")
    with connect(fake.kubeconfig) as api:
        cluster = WatchedCluster(api, threading.Event(), lambda: False)  # the Lease is gone
        try:
            with pytest.raises(NotSynced, match="no longer the gauge writer"):
                cluster.read(POLICY)
        finally:
            fake.heal()
            cluster.close()


def test_samples_time_is_the_refresh_not_the_list(fake: FakeAPI, tmp_path: Path) -> None:
    """Counts from the stores are as of the refresh: successAt moves at every refresh without a new list."""
    opts = gauge_writer.WriterOptions(Path(write_policy(tmp_path)), fake.kubeconfig, str(tmp_path), 60, "ns")
    clock = [NOW]
    with connect(fake.kubeconfig) as api:
        exporter = gauge_writer.exporter(opts, api, leading=lambda: True)
        exporter.clock = lambda: clock[0]
        try:
            assert exporter.refresh()
            clock[0] = NOW + dt.timedelta(minutes=5)
            assert exporter.refresh()
        finally:
            exporter.release()
    snap = gauges.read_snapshot(str(tmp_path))
    assert snap is not None and snap["successAt"] == clock[0].timestamp()
    assert fake.count("pods", "list") == 1


def test_a_new_annotation_prefix_lists_again_under_it(fake: FakeAPI) -> None:
    """What is kept depends on the policy's prefix: a policy that changes it is followed by a new list."""
    with connect(fake.kubeconfig) as api:
        cluster = WatchedCluster(api, threading.Event(), lambda: True)
        try:
            before = [f.intended for f in _store(cluster.read(POLICY).pods)]
            assert sum(1 for a in before if a) == 7  # every annotated Pod of the scenario, under the policy's key
            other = SimpleNamespace(prefix="other.example.com")  # a reloaded policy's prefix is all read() uses
            after = [f.intended for f in _store(cluster.read(other).pods)]  # type: ignore[arg-type]
            assert not any(after) and len(after) == 8  # every Pod kept still: each uses devices
        finally:
            cluster.close()
    assert fake.count("pods", "list") == 2
