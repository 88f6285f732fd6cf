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
from webhook.cluster import api as kube_api
from webhook.cluster import lists as kube_lists
from webhook.cluster.api import REQUIRED_RBAC, ClusterError, connect
from webhook.cluster.live_view import LiveView
from webhook.rules.view import ABSENT, Autoscaler, ClusterView, Lookup

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
        c = policy.cohort_for("team-x", view.namespace_labels("team-x").value)
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
    eventually(lambda: (view.namespace_labels("ml-a").value or {}).get("v") == "2", "the update after the re-list")
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
    assert view2.namespace_labels("ml-b").value == {"division": "research"}


def test_device_class_watch_updates_extended_resource_map(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(device_class("gpu.example.com", "example.com/gpu"))
    view = make_view()
    assert view.wait_synced(DEADLINE)
    assert view.extended_resource_classes().value == {
        "example.com/gpu": "gpu.example.com", "deviceclass.resource.kubernetes.io/gpu.example.com": "gpu.example.com"}
    assert set(view.device_classes().value or ()) == {"gpu.example.com"}
    fake.put(device_class("fpga.example.com", "example.com/fpga"))
    eventually(lambda: (view.extended_resource_classes().value or {}).get("example.com/fpga") == "fpga.example.com",
               "the new class")
    fake.delete("DeviceClass", "gpu.example.com")
    eventually(lambda: "example.com/gpu" not in (view.extended_resource_classes().value or {}), "the deleted class")
    assert set(view.device_classes().value or ()) == {"fpga.example.com"}


def test_failing_server_backs_off_then_recovers(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(device_class("gpu.example.com", "example.com/gpu"))
    fake.fail("deviceclasses")
    view = make_view()
    view.start()
    eventually(lambda: view.status()["deviceclasses"]["errors"] >= 2, "retries of the failing list")
    classes = view.device_classes()
    assert classes.value is None and "not synced" in (classes.degraded or "") and "HTTP 500" in (classes.reason or "")
    assert view.extended_resource_classes() == classes  # one snapshot, one reason
    assert any("deviceclasses: HTTP 500" in e for e in view.status()["errors"])
    fake.heal()
    eventually(lambda: view.device_classes().is_found, "the DeviceClass cache after healing")
    assert view.device_classes().reason is None
    assert (view.extended_resource_classes().value or {})["example.com/gpu"] == "gpu.example.com"


def test_lookup_budget_when_server_hangs(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    p, = fake.put(pod("ml-a", "train-0"))
    view = make_view(budget=0.1)
    assert view.wait_synced(DEADLINE)
    fake.hang("pods", "podgroups")
    start = time.monotonic()
    got_pod = view.get_pod("ml-a", "train-0", p["metadata"]["uid"])
    got_group = view.get_podgroup("ml-a", "trainers")
    assert time.monotonic() - start < 5  # a hang detector, not a latency assertion
    assert got_pod.is_unknown and got_pod.value is None and "budget" in (got_pod.degraded or "")
    assert got_group.is_unknown and "budget" in (got_group.degraded or "")
    fake.heal()
    # The abandoned GET finishes in the background and fills the cache; the next lookup succeeds.
    eventually(lambda: view.get_pod("ml-a", "train-0", p["metadata"]["uid"]).is_found, "the pod once healed")


def test_lookups_before_first_sync_return_none(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(namespace("ml-a", {"gpu-migration": "pilot"}))
    fake.hang("namespaces", "deviceclasses")
    view = make_view(budget=0.05)
    labels = view.namespace_labels("ml-a")
    assert labels.value is None and "namespaces not synced yet; " in (labels.degraded or "")
    assert view.device_classes().value is None
    assert "not synced" in (view.extended_resource_classes().degraded or "")
    st = view.status()
    assert st["namespaces"]["synced"] is False and st["deviceclasses"]["synced"] is False
    fake.heal()
    assert view.wait_synced(DEADLINE)
    assert view.namespace_labels("ml-a").value == {"gpu-migration": "pilot"}


def test_get_pod_checks_uid_and_caches(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    p, = fake.put(pod("ml-a", "train-0"))
    uid = p["metadata"]["uid"]
    view = make_view()
    got = view.get_pod("ml-a", "train-0", uid).value
    assert got is not None and got["metadata"]["uid"] == uid and got["kind"] == "Pod"
    assert view.get_pod("ml-a", "train-0", uid).is_found
    assert fake.count("pods", "get") == 1  # the second answer came from the cache
    # The Pod is replaced under the same name (a StatefulSet does this): a lookup by the new uid refetches.
    fake.delete("Pod", "train-0", "ml-a")
    new, = fake.put(pod("ml-a", "train-0"))
    assert (view.get_pod("ml-a", "train-0", new["metadata"]["uid"]).value or {})["metadata"]["uid"] == (
        new["metadata"]["uid"])
    assert view.get_pod("ml-a", "train-0", uid).is_absent  # the old owner is gone: not a degraded answer


def test_absent_objects_are_answers_not_degradation(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(podgroup("ml-a", "trainers"))
    view = make_view()
    assert view.get_pod("ml-a", "nope").is_absent
    assert (view.get_podgroup("ml-a", "trainers").value or {})["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert view.get_podgroup("ml-a", "other").is_absent


def test_claim_lookups_find_claims_and_templates(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(
        resource_claim("ml-a", "shared-gpu", requests=[exact_request("gpu", "gpu.example.com", 2)]),
        resource_claim_template("ml-a", "gpu-tmpl",
                                requests=[first_available_request("gpu", ["big.example.com", "gpu.example.com"])]),
        resource_claim_template("ml-b", "gpu-tmpl", requests=[exact_request("gpu", "other.example.com")]),
    )
    view = make_view()
    claim = view.get_resource_claim("ml-a", "shared-gpu").value
    assert claim is not None and claim["kind"] == "ResourceClaim"
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    tmpl = view.get_resource_claim_template("ml-a", "gpu-tmpl").value
    assert tmpl is not None and tmpl["kind"] == "ResourceClaimTemplate"
    subs = tmpl["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [s["deviceClassName"] for s in subs] == ["big.example.com", "gpu.example.com"]
    # Namespaced: the same name in another namespace is another object.
    other = view.get_resource_claim_template("ml-b", "gpu-tmpl").value or {}
    assert other["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "other.example.com"
    assert view.get_resource_claim_template("ml-a", "gpu-tmpl").is_found
    assert fake.count("resourceclaimtemplates", "get") == 2  # the repeat came from the cache
    assert fake.count("resourceclaims", "get") == 1


def test_absent_claims_are_answers_not_degradation(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(resource_claim_template("ml-b", "gpu-tmpl", requests=[exact_request("gpu", "gpu.example.com")]))
    view = make_view()
    assert view.get_resource_claim("ml-a", "missing").is_absent
    assert view.get_resource_claim_template("ml-a", "gpu-tmpl").is_absent  # it exists, but in ml-b
    assert fake.count("resourceclaimtemplates", "get") == 1


def test_claim_lookups_over_budget_are_degraded(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(resource_claim("ml-a", "c", requests=[exact_request("gpu", "gpu.example.com")]),
             resource_claim_template("ml-a", "t", requests=[exact_request("gpu", "gpu.example.com")]))
    view = make_view(budget=0.1)
    fake.hang("resourceclaims", "resourceclaimtemplates")
    start = time.monotonic()
    claim = view.get_resource_claim("ml-a", "c")
    tmpl = view.get_resource_claim_template("ml-a", "t")
    assert time.monotonic() - start < 5  # a hang detector, not a latency assertion
    assert claim == Lookup.unknown("resourceclaim ml-a/c lookup exceeded the 100 ms budget")
    assert tmpl == Lookup.unknown("resourceclaimtemplate ml-a/t lookup exceeded the 100 ms budget")
    fake.heal()
    eventually(lambda: view.get_resource_claim_template("ml-a", "t").is_found, "the template once healed")


def test_server_errors_on_claim_lookups_are_degraded(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.fail("resourceclaimtemplates")
    view = make_view()
    got = view.get_resource_claim_template("ml-a", "t")
    assert got.value is None and "HTTP 500" in (got.degraded or "")


def test_server_errors_on_lookups_are_degraded(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.fail("pods")
    view = make_view()
    got = view.get_pod("ml-a", "train-0")
    assert got.value is None and "HTTP 500" in (got.degraded or "")


def test_namespace_created_after_sync_is_looked_up(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    view = make_view()
    assert view.wait_synced(DEADLINE)
    fake.put(namespace("ml-new", {"gpu-migration": "pilot"}))
    labels = view.namespace_labels("ml-new")  # from the watch or, if it lags, from a GET: known either way
    assert labels.value == {"gpu-migration": "pilot"}
    assert view.namespace_labels("missing").is_absent
    assert fake.count("namespaces", "get") >= 1


def test_list_helpers_page_through_results(fake: FakeAPI, kubeconfig: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_lists, "PAGE_SIZE", 2)  # our own page size (one page loop), not the client
    fake.put(*(pod("ml-a", f"p{i}") for i in range(5)), pod("ml-b", "q"))
    api = connect(kubeconfig)
    with api:
        assert [p["metadata"]["name"] for p in kube_api.list_pods(api)] == ["p0", "p1", "p2", "p3", "p4", "q"]
        assert [p["metadata"]["name"] for p in kube_api.list_pods(api, "ml-b")] == ["q"]
        assert kube_api.get_namespace(api, "nope") is None
    assert fake.count("pods", "list") >= 4


def test_an_informer_keeps_each_page_before_listing_the_next(fake: FakeAPI, kubeconfig: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The first list (and every relist) goes through ``keep`` page by page: one page of whole objects in
    memory, never the whole list (the device process's ResourceSlices)."""
    from kubernetes import client

    from webhook.cluster.informer import Informer

    monkeypatch.setattr(kube_lists, "PAGE_SIZE", 2)
    fake.put(*(device_class(f"gpu-{i}.example.com") for i in range(5)))
    lists_before_keep: list[int] = []

    def keep(obj: dict) -> str:
        lists_before_keep.append(fake.count("deviceclasses", "list"))
        return obj["metadata"]["name"]

    with connect(kubeconfig) as api:
        informer = Informer("deviceclasses", client.ResourceV1Api(api).list_device_class, keep)
        informer.relist()
    assert lists_before_keep == [1, 1, 2, 2, 3]  # each page kept before the next one is asked for
    assert sorted(informer.store) == [f"gpu-{i}.example.com" for i in range(5)]
    assert informer.synced and informer.rv


def test_an_informer_lists_again_when_its_list_expires_half_way(fake: FakeAPI, kubeconfig: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes import client

    from webhook.cluster.informer import Informer

    monkeypatch.setattr(kube_lists, "PAGE_SIZE", 2)
    fake.put(*(device_class(f"gpu-{i}.example.com") for i in range(5)))
    fake.expire_next_continue()
    stop = threading.Event()
    with connect(kubeconfig) as api:
        informer = Informer("deviceclasses", client.ResourceV1Api(api).list_device_class, lambda o: 1)
        thread = threading.Thread(target=informer.run, args=(stop, (0.05, 0.2), 5, lambda _: None), daemon=True)
        thread.start()
        try:
            eventually(lambda: informer.synced, "the informer synced", timeout=DEADLINE)
        finally:
            stop.set()
            informer.watch.stop()
            thread.join(10)
    assert len(informer.store) == 5 and informer.expired == 1 and informer.errors == 0


def test_an_informer_stopped_during_its_list_abandons_it(fake: FakeAPI, kubeconfig: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A gauge writer that loses its Lease during a long paced list stops reading at the next page and keeps
    nothing of it (it does not finish the list, nor install a store nobody will drop)."""
    from kubernetes import client

    from webhook.cluster.informer import Informer

    monkeypatch.setattr(kube_lists, "PAGE_SIZE", 2)
    fake.put(*(device_class(f"gpu-{i}.example.com") for i in range(5)))
    stop = threading.Event()

    def keep(obj: dict) -> str:
        stop.set()  # the Lease is lost while the first page is kept
        return obj["metadata"]["name"]

    with connect(kubeconfig) as api:
        informer = Informer("deviceclasses", client.ResourceV1Api(api).list_device_class, keep)
        assert informer.relist(stop) is False
        informer.run(stop, (0.05, 0.2), 5, lambda _: None)  # returns at once: stopped before any watch
    assert fake.count("deviceclasses", "list") == 1  # pages 2 and 3 never asked for
    assert not informer.synced and informer.store == {} and informer.rv is None
    assert fake.count("deviceclasses", "watch") == 0


def test_a_silent_watch_is_opened_again_not_trusted(fake: FakeAPI, kubeconfig: str) -> None:
    """A watch with no byte (no event, no bookmark) for ``silence`` seconds is taken for a lost connection:
    opened again from its resourceVersion at once, not reported as an error, and events still arrive."""
    from kubernetes import client

    from webhook.cluster.informer import Informer

    fake.put(device_class("gpu-0.example.com"))
    stop = threading.Event()
    with connect(kubeconfig) as api:
        informer = Informer("deviceclasses", client.ResourceV1Api(api).list_device_class, lambda o: 1)
        informer.silence = 0.3  # the fake API sends no bookmarks: its watches stay silent until their timeout
        thread = threading.Thread(target=informer.run, args=(stop, (0.05, 0.2), 30, lambda _: None), daemon=True)
        thread.start()
        try:
            eventually(lambda: informer.reopened >= 2, "the silent watch opened again twice", timeout=DEADLINE)
            fake.put(device_class("gpu-1.example.com"))
            eventually(lambda: len(informer.store) == 2, "the event after a reopen", timeout=DEADLINE)
        finally:
            stop.set()
            informer.watch.stop()
            thread.join(10)
    assert informer.errors == 0 and informer.relists == 1  # watched again from its version, never re-listed
    assert fake.count("deviceclasses", "watch") >= 3


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
        assert [n["metadata"]["name"] for n in kube_api.list_namespaces(api)] == ["ml-a"]


def test_required_rbac_covers_every_request(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    """Everything the view asks for is in REQUIRED_RBAC, and REQUIRED_RBAC never grants a write."""
    fake.put(namespace("ml-a"), device_class("gpu.example.com"), pod("ml-a", "p"), podgroup("ml-a", "g"),
             resource_claim("ml-a", "c", requests=[exact_request("gpu", "gpu.example.com")]),
             resource_claim_template("ml-a", "t", requests=[exact_request("gpu", "gpu.example.com")]))
    view = make_view()
    assert view.wait_synced(DEADLINE)
    view.get_pod("ml-a", "p")
    view.get_podgroup("ml-a", "g")
    assert view.get_resource_claim("ml-a", "c").is_found
    assert view.get_resource_claim_template("ml-a", "t").is_found
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
    assert view.autoscaler("ml-a", "apps", "Deployment", "embed") == Lookup(Autoscaler("gpu-hpa", 1, 300))
    assert view.autoscaler("ml-b", "apps", "Deployment", "embed") == Lookup(Autoscaler("other", 1, 50))
    assert view.autoscaler("ml-a", "apps", "StatefulSet", "embed") is ABSENT  # absent is an answer
    assert view.autoscaler("ml-a", "apps", "Deployment", "nope") is ABSENT
    assert fake.count("horizontalpodautoscalers", "get") == 0
    fake.put(hpa("ml-a", "gpu-hpa", "embed", 400))
    eventually(lambda: (view.autoscaler("ml-a", "apps", "Deployment", "embed").value or Autoscaler("", 0, 0))
               .max_replicas == 400, "the raised maxReplicas")
    fake.put(hpa("ml-a", "gpu-hpa", "serve", 400))  # retargeted: the old target has none any more
    eventually(lambda: view.autoscaler("ml-a", "apps", "Deployment", "serve").is_found, "the new target")
    assert view.autoscaler("ml-a", "apps", "Deployment", "embed").is_absent
    fake.delete("HorizontalPodAutoscaler", "gpu-hpa", "ml-a")
    eventually(lambda: view.autoscaler("ml-a", "apps", "Deployment", "serve").is_absent, "the deleted HPA")
    assert view.status()["horizontalpodautoscalers"]["synced"] is True


def test_autoscaler_status_updates_do_not_rebuild_the_index(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    """The HPA controller writes status every sync period; only a target or bound change rebuilds the index."""
    h, = fake.put(hpa("ml-a", "gpu-hpa", "embed", 300))
    view = make_view()
    assert view.wait_synced(DEADLINE)
    assert view.autoscaler("ml-a", "apps", "Deployment", "embed").is_found
    version = view._hpas.version
    fake.put({**h, "status": {"currentReplicas": 3, "desiredReplicas": 4}})
    fake.put(hpa("ml-z", "marker", "x", 1))  # the watch delivers in order: once this is seen, so was the status
    eventually(lambda: view.autoscaler("ml-z", "apps", "Deployment", "x").is_found, "the marker HPA")
    assert view._hpas.version == version + 1  # the marker, not the status update


def test_autoscalers_before_first_sync_are_unknown(fake: FakeAPI, make_view: Callable[..., LiveView]) -> None:
    fake.put(hpa("ml-a", "gpu-hpa", "embed", 300))
    fake.hang("horizontalpodautoscalers")
    view = make_view(budget=0.05)
    got = view.autoscaler("ml-a", "apps", "Deployment", "embed")
    assert got.value is None and "HorizontalPodAutoscalers not synced yet" in (got.degraded or "")
    fake.heal()
    eventually(lambda: view.autoscaler("ml-a", "apps", "Deployment", "embed").is_found, "the HPA after healing")
