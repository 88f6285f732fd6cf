"""LiveView against a real HTTP API server (tests/fakeapi.py): list+watch, 410 Gone, backoff, budgets.

Waiting uses polls with a generous deadline; nothing asserts how fast anything is, except an upper bound
of seconds that only catches a hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.waits import eventually
from tests.fakeapi import (
    FakeAPI,
    device_class,
    exact_request,
    first_available_request,
    hpa,
    make_policy,
    namespace,
    pod,
    podgroup,
    resource_claim,
    resource_claim_template,
)
from webhook import cluster
from webhook.cluster import REQUIRED_RBAC, ClusterError, LiveView, connect
from webhook.view import Autoscaler, ClusterView

DEADLINE = 10.0
LOOKUP_BUDGET = 5.0


@pytest.fixture()
def fake() -> Iterator[FakeAPI]:
    with FakeAPI() as api:
        yield api


@pytest.fixture()
def kubeconfig(fake: FakeAPI, tmp_path: Path) -> str:
    return fake.write_kubeconfig(tmp_path)


@pytest.fixture()
def make_view(kubeconfig: str) -> Iterator[Callable[..., LiveView]]:
    views: list[LiveView] = []

    def make(**kwargs: object) -> LiveView:
        kwargs.setdefault("backoff", (0.05, 0.2))
        # An explicit budget, never the 0.2 s production default: a lookup that must answer gets seconds
        # (a loaded machine stalls threads that long); the tests about budgets pass their own small one.
        kwargs.setdefault("budget", LOOKUP_BUDGET)
        view = LiveView.from_kubeconfig(kubeconfig, **kwargs)
        views.append(view)
        return view

    yield make
    for v in views:
        v.stop()


def test_liveview_is_a_cluster_view(make_view: Callable[..., LiveView]) -> None:
    assert isinstance(make_view(), ClusterView)


def test_nothing_connects_until_first_use(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    before = set(threading.enumerate())
    view = make_view()
    time.sleep(0.2)  # give a wrongly started thread time to show up
    assert fake.requests == []
    assert set(threading.enumerate()) == before
    assert view.status()["mode"] == "live"  # first use starts the watches
    eventually(lambda: fake.count("namespaces", "watch") >= 1, "the namespace watch")


def test_label_change_moves_namespace_between_cohorts(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    policy = make_policy()
    fake.put(namespace("team-x"), namespace("ml-a"))
    view = make_view()
    assert view.wait_synced(DEADLINE)

    def cohort() -> str | None:
        c = policy.cohort_for("team-x", view.namespace_labels("team-x"))
        return c.name if c else None

    assert cohort() is None
    fake.put(namespace("team-x", {"gpu-migration": "pilot"}))
    eventually(lambda: cohort() == "pilot-teams", "team-x to join pilot-teams")
    fake.put(namespace("team-x", {"division": "research"}))
    eventually(lambda: cohort() == "research", "team-x to move to research")
    fake.put(namespace("team-x"))
    eventually(lambda: cohort() is None, "team-x to leave every cohort")
    # All of that came through one list and the watch, not through GETs.
    assert fake.count("namespaces", "list") == 1
    assert fake.count("namespaces", "get") == 0
    assert view.status()["namespaces"]["synced"] is True


@pytest.mark.parametrize("as_http", [False, True], ids=["error-event", "http-410"])
def test_410_gone_relists_and_keeps_watching(
    fake: FakeAPI, make_view: Callable[..., LiveView], as_http: bool
) -> None:
    fake.put(namespace("ml-a", {"v": "1"}))
    view = make_view()
    assert view.wait_synced(DEADLINE)
    lists = fake.count("namespaces", "list")
    watches = fake.count("namespaces", "watch")
    fake.expire(as_http=as_http)
    eventually(lambda: fake.count("namespaces", "list") > lists, "a re-list after 410")
    if as_http:  # the client came back from its old version first, and got HTTP 410 for it
        assert fake.count("namespaces", "watch") > watches
    fake.put(namespace("ml-a", {"v": "2"}))
    eventually(lambda: (view.namespace_labels("ml-a") or {}).get("v") == "2", "the update after the re-list")
    st = view.status()["namespaces"]
    assert st["expired"] >= 1
    assert st["relists"] >= 2
    assert st["resourceVersion"] is not None


def test_missed_events_are_recovered_by_the_relist(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(namespace("ml-a"))
    view = make_view()
    assert view.wait_synced(DEADLINE)
    view.stop()
    fake.put(namespace("ml-b", {"division": "research"}))  # happens while nobody watches
    fake.expire()
    view2 = make_view()
    assert view2.wait_synced(DEADLINE)
    assert dict(view2.namespace_labels("ml-b") or {}) == {"division": "research"}


def test_device_class_watch_updates_extended_resource_map(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(device_class("gpu.example.com", "example.com/gpu"))
    view = make_view()
    assert view.wait_synced(DEADLINE)
    assert view.extended_resource_classes()["example.com/gpu"] == "gpu.example.com"
    assert set(view.device_classes()) == {"gpu.example.com"}
    fake.put(device_class("fpga.example.com", "example.com/fpga"))
    eventually(lambda: (view.extended_resource_classes() or {}).get("example.com/fpga") == "fpga.example.com",
               "the new class")
    fake.delete("DeviceClass", "gpu.example.com")
    eventually(lambda: "example.com/gpu" not in (view.extended_resource_classes() or {}), "the deleted class")
    assert "gpu.example.com" not in view.device_classes()


def test_failing_server_backs_off_then_recovers(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(device_class("gpu.example.com", "example.com/gpu"))
    fake.fail("deviceclasses")
    view = make_view()
    view.start()
    eventually(lambda: view.status()["deviceclasses"]["errors"] >= 2, "retries of the failing list")
    assert view.device_classes() is None
    reason = view.degraded_reason("deviceclass")
    assert reason is not None and "not synced" in reason and "HTTP 500" in reason
    assert any("deviceclasses: HTTP 500" in e for e in view.status()["errors"])
    fake.heal()
    eventually(lambda: view.device_classes() is not None, "the DeviceClass cache after healing")
    assert view.degraded_reason("deviceclass") is None
    assert view.extended_resource_classes()["example.com/gpu"] == "gpu.example.com"


def test_lookup_budget_when_server_hangs(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    p, = fake.put(pod("ml-a", "train-0"))
    view = make_view(budget=0.1)
    assert view.wait_synced(DEADLINE)
    fake.hang("pods", "podgroups")
    start = time.monotonic()
    assert view.get_pod("ml-a", "train-0", p["metadata"]["uid"]) is None
    assert view.get_podgroup("ml-a", "trainers") is None
    assert time.monotonic() - start < 5  # a hang detector, not a latency assertion
    assert "budget" in (view.degraded_reason("pod") or "")
    assert "budget" in (view.degraded_reason("podgroup") or "")
    fake.heal()
    # The abandoned GET finishes in the background and fills the cache; the next lookup succeeds.
    eventually(lambda: view.get_pod("ml-a", "train-0", p["metadata"]["uid"]) is not None, "the pod once healed")
    assert view.degraded_reason("pod") is None


def test_lookups_before_first_sync_return_none(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(namespace("ml-a", {"gpu-migration": "pilot"}))
    fake.hang("namespaces", "deviceclasses")
    view = make_view(budget=0.05)
    assert view.namespace_labels("ml-a") is None
    assert "not synced" in (view.degraded_reason("namespace") or "")
    assert view.device_classes() is None
    assert view.extended_resource_classes() is None
    assert "not synced" in (view.degraded_reason("deviceclass") or "")
    st = view.status()
    assert st["namespaces"]["synced"] is False and st["deviceclasses"]["synced"] is False
    fake.heal()
    assert view.wait_synced(DEADLINE)
    assert dict(view.namespace_labels("ml-a") or {}) == {"gpu-migration": "pilot"}


def test_get_pod_checks_uid_and_caches(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    p, = fake.put(pod("ml-a", "train-0"))
    uid = p["metadata"]["uid"]
    view = make_view()
    got = view.get_pod("ml-a", "train-0", uid)
    assert got is not None and got["metadata"]["uid"] == uid and got["kind"] == "Pod"
    assert view.get_pod("ml-a", "train-0", uid) is not None
    assert fake.count("pods", "get") == 1  # the second answer came from the cache
    # The Pod is replaced under the same name (a StatefulSet does this): a lookup by the new uid refetches.
    fake.delete("Pod", "train-0", "ml-a")
    new, = fake.put(pod("ml-a", "train-0"))
    assert view.get_pod("ml-a", "train-0", new["metadata"]["uid"])["metadata"]["uid"] == new["metadata"]["uid"]
    assert view.get_pod("ml-a", "train-0", uid) is None  # the old owner is gone: not a degraded answer
    assert view.degraded_reason("pod") is None


def test_absent_objects_are_answers_not_degradation(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(podgroup("ml-a", "trainers"))
    view = make_view()
    assert view.get_pod("ml-a", "nope") is None
    assert view.degraded_reason("pod") is None
    assert view.get_podgroup("ml-a", "trainers")["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert view.get_podgroup("ml-a", "other") is None
    assert view.degraded_reason("podgroup") is None


def test_claim_lookups_find_claims_and_templates(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(
        resource_claim("ml-a", "shared-gpu", requests=[exact_request("gpu", "gpu.example.com", 2)]),
        resource_claim_template("ml-a", "gpu-tmpl",
                                requests=[first_available_request("gpu", ["big.example.com", "gpu.example.com"])]),
        resource_claim_template("ml-b", "gpu-tmpl", requests=[exact_request("gpu", "other.example.com")]),
    )
    view = make_view()
    claim = view.get_resource_claim("ml-a", "shared-gpu")
    assert claim is not None and claim["kind"] == "ResourceClaim"
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    assert view.degraded_reason("resourceclaim") is None
    tmpl = view.get_resource_claim_template("ml-a", "gpu-tmpl")
    assert tmpl is not None and tmpl["kind"] == "ResourceClaimTemplate"
    subs = tmpl["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [s["deviceClassName"] for s in subs] == ["big.example.com", "gpu.example.com"]
    # Namespaced: the same name in another namespace is another object.
    other = view.get_resource_claim_template("ml-b", "gpu-tmpl")
    assert other["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "other.example.com"
    assert view.degraded_reason("resourceclaimtemplate") is None
    assert view.get_resource_claim_template("ml-a", "gpu-tmpl") is not None
    assert fake.count("resourceclaimtemplates", "get") == 2  # the repeat came from the cache
    assert fake.count("resourceclaims", "get") == 1


def test_absent_claims_are_answers_not_degradation(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(resource_claim_template("ml-b", "gpu-tmpl", requests=[exact_request("gpu", "gpu.example.com")]))
    view = make_view()
    assert view.get_resource_claim("ml-a", "missing") is None
    assert view.degraded_reason("resourceclaim") is None
    assert view.get_resource_claim_template("ml-a", "gpu-tmpl") is None  # it exists, but in ml-b
    assert view.degraded_reason("resourceclaimtemplate") is None
    assert fake.count("resourceclaimtemplates", "get") == 1


def test_claim_lookups_over_budget_are_degraded(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(resource_claim("ml-a", "c", requests=[exact_request("gpu", "gpu.example.com")]),
             resource_claim_template("ml-a", "t", requests=[exact_request("gpu", "gpu.example.com")]))
    view = make_view(budget=0.1)
    fake.hang("resourceclaims", "resourceclaimtemplates")
    start = time.monotonic()
    assert view.get_resource_claim("ml-a", "c") is None
    assert view.get_resource_claim_template("ml-a", "t") is None
    assert time.monotonic() - start < 5  # a hang detector, not a latency assertion
    assert view.degraded_reason("resourceclaim") == "resourceclaim ml-a/c lookup exceeded the 100 ms budget"
    assert view.degraded_reason("resourceclaimtemplate") == (
        "resourceclaimtemplate ml-a/t lookup exceeded the 100 ms budget")
    fake.heal()
    eventually(lambda: view.get_resource_claim_template("ml-a", "t") is not None, "the template once healed")
    assert view.degraded_reason("resourceclaimtemplate") is None


def test_server_errors_on_claim_lookups_are_degraded(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.fail("resourceclaimtemplates")
    view = make_view()
    assert view.get_resource_claim_template("ml-a", "t") is None
    assert "HTTP 500" in (view.degraded_reason("resourceclaimtemplate") or "")


def test_server_errors_on_lookups_are_degraded(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.fail("pods")
    view = make_view()
    assert view.get_pod("ml-a", "train-0") is None
    assert "HTTP 500" in (view.degraded_reason("pod") or "")


def test_namespace_created_after_sync_is_looked_up(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    view = make_view()
    assert view.wait_synced(DEADLINE)
    fake.put(namespace("ml-new", {"gpu-migration": "pilot"}))
    labels = view.namespace_labels("ml-new")  # from the watch or, if it lags, from a GET: known either way
    assert dict(labels or {}) == {"gpu-migration": "pilot"}
    assert view.namespace_labels("missing") is None
    assert view.degraded_reason("namespace") == "namespace missing not found"
    assert fake.count("namespaces", "get") >= 1


def test_list_helpers_page_through_results(fake: FakeAPI, kubeconfig: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "PAGE_SIZE", 2)  # our own page size, not the client
    fake.put(*(pod("ml-a", f"p{i}") for i in range(5)), pod("ml-b", "q"))
    api = connect(kubeconfig)
    with api:
        assert [p["metadata"]["name"] for p in cluster.list_pods(api)] == ["p0", "p1", "p2", "p3", "p4", "q"]
        assert [p["metadata"]["name"] for p in cluster.list_pods(api, "ml-b")] == ["q"]
        assert cluster.get_namespace(api, "nope") is None
    assert fake.count("pods", "list") >= 4


def test_connect_errors_are_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ClusterError, match="does not exist"):
        connect(str(tmp_path / "missing"))
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    with pytest.raises(ClusterError, match="cannot load cluster configuration"):
        connect(str(bad))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ClusterError, match="no cluster configuration"):
        connect(None)


def test_kubeconfig_from_environment(fake: FakeAPI, kubeconfig: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    fake.put(namespace("ml-a"))
    with connect(None) as api:
        assert [n["metadata"]["name"] for n in cluster.list_namespaces(api)] == ["ml-a"]


def test_required_rbac_covers_every_request(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    """Everything the view asks for is in REQUIRED_RBAC, and REQUIRED_RBAC never grants a write."""
    fake.put(namespace("ml-a"), device_class("gpu.example.com"), pod("ml-a", "p"), podgroup("ml-a", "g"),
             resource_claim("ml-a", "c", requests=[exact_request("gpu", "gpu.example.com")]),
             resource_claim_template("ml-a", "t", requests=[exact_request("gpu", "gpu.example.com")]))
    view = make_view()
    assert view.wait_synced(DEADLINE)
    view.get_pod("ml-a", "p")
    view.get_podgroup("ml-a", "g")
    assert view.get_resource_claim("ml-a", "c") is not None
    assert view.get_resource_claim_template("ml-a", "t") is not None
    view.namespace_labels("ml-other")
    view.autoscaler("ml-a", "apps", "Deployment", "d")
    granted = {(res, verb) for rule in REQUIRED_RBAC for res in rule.get("resources", []) + rule.get(
        "nonResourceURLs", []) for verb in rule["verbs"]}
    granted.add(("/apis/", "get"))  # discovery: every authenticated user may read it (system:discovery)
    used = {(res, verb) for res, verb, _ in fake.requests}
    assert used <= granted
    assert {verb for rule in REQUIRED_RBAC for verb in rule["verbs"]} <= {"get", "list", "watch"}



def test_autoscalers_are_watched_and_indexed_by_scale_target(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    """shared-claim-limit's HPA lookups come from a watch (no request per lookup), by namespace and target."""
    fake.put(hpa("ml-a", "gpu-hpa", "embed", 300), hpa("ml-b", "other", "embed", 50))
    view = make_view()
    assert view.wait_synced(DEADLINE)
    assert view.autoscaler("ml-a", "apps", "Deployment", "embed") == Autoscaler("gpu-hpa", 1, 300)
    assert view.autoscaler("ml-b", "apps", "Deployment", "embed") == Autoscaler("other", 1, 50)
    assert view.autoscaler("ml-a", "apps", "StatefulSet", "embed") is None
    assert view.autoscaler("ml-a", "apps", "Deployment", "nope") is None
    assert view.degraded_reason("autoscaler") is None  # absent is an answer
    assert fake.count("horizontalpodautoscalers", "get") == 0
    fake.put(hpa("ml-a", "gpu-hpa", "embed", 400))
    eventually(lambda: (view.autoscaler("ml-a", "apps", "Deployment", "embed") or Autoscaler("", 0, 0))
               .max_replicas == 400, "the raised maxReplicas")
    fake.put(hpa("ml-a", "gpu-hpa", "serve", 400))  # retargeted: the old target has none any more
    eventually(lambda: view.autoscaler("ml-a", "apps", "Deployment", "serve") is not None, "the new target")
    assert view.autoscaler("ml-a", "apps", "Deployment", "embed") is None
    fake.delete("HorizontalPodAutoscaler", "gpu-hpa", "ml-a")
    eventually(lambda: view.autoscaler("ml-a", "apps", "Deployment", "serve") is None, "the deleted HPA")
    assert view.status()["horizontalpodautoscalers"]["synced"] is True


def test_autoscaler_status_updates_do_not_rebuild_the_index(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    """The HPA controller writes status every sync period; only a target or bound change rebuilds the index."""
    h, = fake.put(hpa("ml-a", "gpu-hpa", "embed", 300))
    view = make_view()
    assert view.wait_synced(DEADLINE)
    assert view.autoscaler("ml-a", "apps", "Deployment", "embed") is not None
    version = view._hpas.version
    fake.put({**h, "status": {"currentReplicas": 3, "desiredReplicas": 4}})
    fake.put(hpa("ml-z", "marker", "x", 1))  # the watch delivers in order: once this is seen, so was the status
    eventually(lambda: view.autoscaler("ml-z", "apps", "Deployment", "x") is not None, "the marker HPA")
    assert view._hpas.version == version + 1  # the marker, not the status update


def test_autoscalers_before_first_sync_are_unknown(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(hpa("ml-a", "gpu-hpa", "embed", 300))
    fake.hang("horizontalpodautoscalers")
    view = make_view(budget=0.05)
    assert view.autoscaler("ml-a", "apps", "Deployment", "embed") is None
    assert "HorizontalPodAutoscalers not synced yet" in (view.degraded_reason("autoscaler") or "")
    fake.heal()
    eventually(lambda: view.autoscaler("ml-a", "apps", "Deployment", "embed") is not None, "the HPA after healing")
    assert view.degraded_reason("autoscaler") is None
