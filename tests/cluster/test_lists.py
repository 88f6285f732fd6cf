"""Bulk reads in bounded memory (issue #29 items 1, 3, 6): paged lists streamed and projected, a re-list when
a continue token expires, the report and preflight over streams, linear preflight, progress on a terminal."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders.lists import NOW, fleet
from tests.fakeapi import (
    FakeAPI,
    exact_request,
    make_policy,
    pod,
    reserved_pod,
    resource_claim,
    write_policy,
)
from webhook.cli import main
from webhook.cluster import lists as kube_lists
from webhook.cluster.api import connect
from webhook.commands.progress import Progress
from webhook.commands.report import Counted
from webhook.fleet import preflight
from webhook.fleet.preflight import DeviceSelector, Taint, claim_use, pod_use
from webhook.fleet.report import build_report

MAINT = Taint("example.com/maintenance", "firmware", "NoExecute")


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAPI]:
    monkeypatch.setattr(kube_lists, "PAGE_SIZE", 3)  # several pages out of a handful of objects
    with FakeAPI() as api:
        api.put(*fleet())
        api.kubeconfig = api.write_kubeconfig(tmp_path)  # type: ignore[attr-defined]
        yield api


def _pod_lists(fake: FakeAPI) -> list[dict[str, str]]:
    return [q for r, v, q in fake.requests if r == "pods" and v == "list"]


def test_pages_are_followed_with_continue_and_counted(fake: FakeAPI) -> None:
    pages: list[tuple[str, int, int | None]] = []
    with connect(fake.kubeconfig) as api:
        names = [p["metadata"]["name"] for p in kube_lists.stream(api, "pods", on_page=lambda *a: pages.append(a))]
    assert names == ["cpu-only", "p0", "p1", "p2", "p3", "done", "old"]
    queries = _pod_lists(fake)
    assert [q.get("continue") for q in queries] == [None, "3", "6"]
    assert {q["limit"] for q in queries} == {"3"}
    assert all("resourceVersion" not in q for q in queries)  # consistent reads (the watch cache on 1.36)
    assert pages == [("pods", 3, 4), ("pods", 6, 1), ("pods", 7, 0)]  # remainingItemCount, then none left


def test_projection_shapes_and_filters_what_is_yielded(fake: FakeAPI) -> None:
    with connect(fake.kubeconfig) as api:
        got = list(kube_lists.stream(api, "pods", "team-x", project=lambda p: (
            p["metadata"]["name"] if p.get("status", {}).get("phase") != "Succeeded" else None)))
    assert got == ["old"]
    assert [q.get("continue") for q in _pod_lists(fake)] == [None]


def test_an_expired_continue_token_is_a_clear_error(fake: FakeAPI) -> None:
    fake.expire_next_continue()
    with connect(fake.kubeconfig) as api, pytest.raises(kube_lists.ListExpired, match="after 3 objects.*410"):
        list(kube_lists.stream(api, "pods"))


def test_rerun_lists_again_from_the_start_and_counts_each_object_once(fake: FakeAPI) -> None:
    fake.expire_next_continue()
    with connect(fake.kubeconfig) as api:
        report = kube_lists.rerun(lambda: build_report(
            make_policy(), NOW, kube_lists.stream(api, "namespaces"), kube_lists.stream(api, "pods"),
            kube_lists.stream(api, "resourceclaims"), kube_lists.device_classes(api)))
    assert [q.get("continue") for q in _pod_lists(fake)] == [None, "3", None, "3", "6"]  # the 410, the re-list
    objs = fleet()
    whole = build_report(make_policy(), NOW, objs[:2], objs[3:10], objs[10:], objs[2:3])
    assert report.to_json() == whole.to_json()
    assert sum(sum(n.actual.values()) for n in report.namespaces) == 5


def test_the_gauge_writer_reads_again_when_its_list_expires_half_way(fake: FakeAPI, tmp_path: Path) -> None:
    """The writer's first list (``webhook.cluster.informer.Informer.run``): a 410 on a continue token costs a re-list,
    not the refresh, and each Pod is counted once."""
    from webhook.fleet import gauges
    from webhook.serve import gauge_writer

    opts = gauge_writer.WriterOptions(Path(write_policy(tmp_path)), fake.kubeconfig, str(tmp_path), 60, "ns")
    fake.expire_next_continue()
    with connect(fake.kubeconfig) as api:
        exporter = gauge_writer.exporter(opts, api, leading=lambda: True)
        try:
            assert exporter.refresh()
        finally:
            exporter.release()
    assert [q.get("continue") for q in _pod_lists(fake)] == [None, "3", None, "3", "6"]  # the 410, the re-list
    snap = gauges.read_snapshot(str(tmp_path))
    assert snap is not None and snap["error"] is None
    pods = sum(v for name, _, v in snap["samples"] if name == "dra_webhook_migration_pods")
    objs = fleet()
    whole = gauges.samples(make_policy(), NOW, gauges.ClusterObjects(objs[:2], objs[3:10], objs[10:], objs[2:3]))
    assert pods == sum(v for name, _, v in whole if name == "dra_webhook_migration_pods") == 5


def test_rerun_gives_up_after_its_attempts() -> None:
    calls = []

    def read() -> int:
        calls.append(1)
        raise kube_lists.ListExpired("pods expired")

    with pytest.raises(kube_lists.ListExpired):
        kube_lists.rerun(read, attempts=3)
    assert len(calls) == 3


def test_streamed_report_equals_the_report_over_whole_lists(fake: FakeAPI) -> None:
    objs = fleet()
    with connect(fake.kubeconfig) as api:
        streamed = build_report(make_policy(), NOW, kube_lists.stream(api, "namespaces"),
                                kube_lists.stream(api, "pods"), kube_lists.stream(api, "resourceclaims"),
                                kube_lists.device_classes(api))
    whole = build_report(make_policy(), NOW, objs[:2], objs[3:10], objs[10:], objs[2:3])
    assert streamed.to_json() == whole.to_json()
    assert {n.name: n.taint_unevictable for n in streamed.namespaces} == {"ml-a": 2, "team-x": 0}


# -- preflight: linear, and over projections -----------------------------------------------------------------


class Name(str):
    """A name that counts how often it is compared: the preflight's lookups, without timing anything."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        Name.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _one_namespace(n: int) -> tuple[list[dict], list[dict]]:
    pods, claims = [], []
    for i in range(n):
        p = pod("ml-a", Name(f"w-{i}"), uid=f"uid-{i}")
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"c-{i}"}]
        ref = {**reserved_pod(p), "name": Name(f"w-{i}")}
        claims.append(resource_claim("ml-a", f"c-{i}", requests=[exact_request("gpu", "gpu.example.com")],
                                     results=[{"request": "gpu", "driver": "gpu.example.com", "pool": "node-a",
                                               "device": f"gpu-{i}"}], reserved_for=[ref], owner=p))
        pods.append(p)
    return pods, claims


@pytest.mark.parametrize("n", [50, 400])
def test_preflight_lookups_grow_linearly_with_pods_and_claims(n: int) -> None:
    """One namespace, n Pods each with its own claim: the old scan compared names n*n/2 times."""
    pods, claims = _one_namespace(n)
    uses = [u for u in (claim_use(c, DeviceSelector("gpu.example.com"), MAINT) for c in claims) if u]
    projected = [pod_use(p, None) for p in pods]
    Name.compared = 0
    result = preflight.analyse(DeviceSelector("gpu.example.com"), MAINT, uses, projected)
    assert len(result.pods) == n and all(p.eviction.outcome == preflight.AT_ONCE for p in result.pods)
    assert Name.compared <= 12 * n  # a few dictionary reads per claim (8 today, with the UID checks), not a scan


def test_pod_projection_keeps_only_the_pods_the_claims_name() -> None:
    pods, claims = _one_namespace(3)
    uses = [u for u in (claim_use(c, DeviceSelector("gpu.example.com", device="gpu-1"), MAINT) for c in claims) if u]
    keep = preflight.pod_projection(uses, make_policy())
    kept = [u for u in map(keep, [*pods, pod("ml-b", "w-1")]) if u is not None]
    assert [(u.namespace, u.name, u.training) for u in kept] == [("ml-a", "w-1", False)]


# -- progress ----------------------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_says_read_rate_and_what_is_left() -> None:
    out, clock = Terminal(), iter([0.0, 2.0, 4.0])
    progress = Progress(out, True, clock=lambda: next(clock))
    progress.page("pods", 500, 1500)
    progress.page("pods", 1000, 1000)
    progress.done()
    assert out.getvalue() == (
        "\r\x1b[Kreading pods: 500/2,000 read, 250/s, about 6 s left"
        "\r\x1b[Kreading pods: 1,000/2,000 read, 250/s, about 4 s left"
        "\r\x1b[K"
    )


def test_progress_is_silent_when_piped_quiet_or_for_programs() -> None:
    assert Progress.for_command(False, False, Terminal()).enabled
    assert not Progress.for_command(False, False, io.StringIO()).enabled  # piped
    assert not Progress.for_command(True, False, Terminal()).enabled  # -q
    assert not Progress.for_command(False, True, Terminal()).enabled  # -o json/yaml/policyreport
    quiet = io.StringIO()
    Progress(quiet, False).page("pods", 1, None)
    assert quiet.getvalue() == ""


def test_writes_tick_as_the_writer_takes_each_report() -> None:
    ticks: list[int] = []
    reports = Counted([{"a": 1}, {"b": 2}], ticks.append)
    assert [list(r) for r in reports] == [["a"], ["b"]] and ticks == [1, 2]


@pytest.mark.parametrize(("args", "drawn"), [((), True), (("-q",), False), (("-o", "json"), False)])
def test_report_command_draws_progress_only_for_a_person(
    fake: FakeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...], drawn: bool,
) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code = main(["report", "--kubeconfig", fake.kubeconfig, "--policy", write_policy(tmp_path), "--at",
                 "2027-01-20", *args])
    assert code == 0
    text = terminal.getvalue()
    assert ("reading pods: 3/7 read" in text) is drawn and ("reading resourceclaims: 2/2 read" in text) is drawn
    assert text.endswith("\r\x1b[K") is drawn  # erased at the end: the report itself is all that stays
    assert "drift" in capsys.readouterr().out.lower()


def test_preflight_command_reads_again_after_an_expired_list(
    fake: FakeAPI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods, claims = _one_namespace(4)
    fake.put(*pods, *claims)
    fake.expire_next_continue()
    code = main(["preflight", "--driver", "gpu.example.com", "--taint-key", MAINT.key, "-o", "json", "--kubeconfig",
                 fake.kubeconfig, "--policy", write_policy(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    claim_lists = [q.get("continue") for r, v, q in fake.requests if r == "resourceclaims" and v == "list"]
    assert claim_lists == [None, "3", None, "3"]  # 410 on the second page, then the whole list again
    assert sorted(p["pod"] for p in json.loads(out)["pods"]) == ["w-0", "w-1", "w-2", "w-3"]


def test_json_output_is_written_entry_by_entry_in_json_dumps_layout(fake: FakeAPI) -> None:
    """``-o json`` never holds the whole document as text: each entry of a top-level list is its own piece,
    and the pieces are exactly ``json.dumps(indent=2)``'s layout."""
    from webhook.commands import json_chunks

    with connect(fake.kubeconfig) as api:
        report = build_report(make_policy(), NOW, kube_lists.stream(api, "namespaces"),
                              kube_lists.stream(api, "pods"), kube_lists.stream(api, "resourceclaims"),
                              kube_lists.device_classes(api))
    entries = [{"entry": f"p{i}", "claims": [], "é": {"nested": [i, None]}} for i in range(50)]
    doc = {**report.to_json(), "pods": entries}
    chunks = list(json_chunks(doc))
    assert "".join(chunks) == json.dumps(doc, indent=2, ensure_ascii=False)
    assert sum(c.count('"entry": ') for c in chunks) == 50 and all(c.count('"entry": ') <= 1 for c in chunks)
