"""The gauge writer's paced read (issue #29, admission p99 during a refresh): ``webhook.cluster.lists.Pacer`` rests
between pages in proportion to the time each page kept the read busy, stops resting in a list that has run
past its budget (continue tokens expire), and leaves what is read unchanged, 410 re-list included. Clock and
sleeper are injected: nothing here waits or measures time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders.lists import NOW, fleet
from tests.fakeapi import FakeAPI, make_policy, write_policy
from webhook.cluster import lists as kube_lists
from webhook.cluster.api import connect
from webhook.cluster.lists import Pacer


class Clock:
    """Manual time: ``now`` moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Ticking:
    """Time that advances one second per reading: every page looks one second busy, deterministically."""

    def __init__(self) -> None:
        self.now = -1.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_rests_in_proportion_to_the_busy_time_of_the_previous_page() -> None:
    clock, slept = Clock(), []
    pacer = Pacer(share=0.5, clock=clock, sleep=slept.append)
    pacer.before_page(first=True)      # nothing read yet: no rest
    clock.now = 2.0
    pacer.before_page(first=False)     # the first page kept it busy 2 s
    clock.now = 2.5
    pacer.before_page(first=False)     # then 0.5 s
    assert slept == [2.0, 0.5]
    assert pacer.paused == 2.5


def test_a_smaller_share_rests_longer() -> None:
    clock, slept = Clock(), []
    pacer = Pacer(share=0.25, clock=clock, sleep=slept.append)
    pacer.before_page(first=True)
    clock.now = 1.0
    pacer.before_page(first=False)
    assert slept == [3.0]  # busy 1 s of every 4


def test_share_one_is_unpaced_and_out_of_range_shares_are_refused() -> None:
    clock, slept = Clock(), []
    pacer = Pacer(share=1.0, clock=clock, sleep=slept.append)
    pacer.before_page(first=True)
    clock.now = 5.0
    pacer.before_page(first=False)
    assert slept == []
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match=r"\(0, 1\]"):
            Pacer(share=bad)


def test_a_list_past_its_budget_is_no_longer_paced() -> None:
    """Continue tokens expire: rests within one list stop at ``list_budget`` seconds after its first page."""
    clock, slept = Clock(), []
    pacer = Pacer(share=0.5, list_budget=10.0, clock=clock, sleep=slept.append)
    pacer.before_page(first=True)
    clock.now = 4.0
    pacer.before_page(first=False)     # rest 4 s: the list has run 4 of its 10 s
    clock.now = 8.0 + 4.0              # after the rest, a page of 4 s
    pacer.before_page(first=False)     # only 10 - 12 < 0 s of budget left: no rest
    clock.now = 13.0
    pacer.before_page(first=False)
    assert slept == [4.0]
    clock.now = 15.0
    pacer.before_page(first=True)      # a new list rests for the last page of the previous one, unclipped
    assert slept == [4.0, 2.0]


def test_a_rest_is_clipped_to_what_is_left_of_the_budget() -> None:
    clock, slept = Clock(), []
    pacer = Pacer(share=0.5, list_budget=10.0, clock=clock, sleep=slept.append)
    pacer.before_page(first=True)
    clock.now = 7.0
    pacer.before_page(first=False)
    assert slept == [3.0]


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAPI]:
    monkeypatch.setattr(kube_lists, "PAGE_SIZE", 3)  # several pages out of a handful of objects
    with FakeAPI() as api:
        api.put(*fleet())
        api.kubeconfig = api.write_kubeconfig(tmp_path)  # type: ignore[attr-defined]
        yield api


def test_a_paced_stream_rests_between_its_pages_and_reads_the_same(fake: FakeAPI) -> None:
    slept: list[float] = []
    pacer = Pacer(share=0.5, clock=Ticking(), sleep=slept.append)
    with connect(fake.kubeconfig) as api:
        unpaced = list(kube_lists.stream(api, "pods"))
        paced = list(kube_lists.stream(api, "pods", pace=pacer))
    assert paced == unpaced and len(paced) == 7
    assert slept == [1.0, 1.0]  # three pages: a rest before the second and the third, none before the first


def test_the_gauge_writer_paces_its_read_and_counts_as_a_full_list(fake: FakeAPI, tmp_path: Path) -> None:
    """The writer's first list (a 410 re-list included) rests between pages and its gauges equal the counts of whole
    lists; with ``read_share`` 1 it does not rest at all."""
    from webhook.fleet import gauges
    from webhook.serve import gauge_writer

    def pod_total(directory: Path) -> float:
        snap = gauges.read_snapshot(str(directory))
        assert snap is not None and snap["error"] is None
        return sum(v for name, _, v in snap["samples"] if name == "dra_webhook_migration_pods")

    objs = fleet()
    whole = gauges.samples(make_policy(), NOW, gauges.ClusterObjects(objs[:2], objs[3:10], objs[10:], objs[2:3]))
    expected = sum(v for name, _, v in whole if name == "dra_webhook_migration_pods")
    for share, rests in ((0.5, True), (1.0, False)):
        out = tmp_path / str(share)
        out.mkdir()
        slept: list[float] = []
        opts = gauge_writer.WriterOptions(Path(write_policy(out)), fake.kubeconfig, str(out), 60, "ns",
                                          read_share=share, sleep=slept.append)
        fake.expire_next_continue()
        with connect(fake.kubeconfig) as api:
            exporter = gauge_writer.exporter(opts, api, leading=lambda: True)
            try:
                assert exporter.refresh()
            finally:
                exporter.release()
        assert pod_total(out) == expected == 5
        assert bool(slept) is rests and all(s >= 0 for s in slept)


@pytest.mark.parametrize("value", ["0", "1.5", "half"])
def test_serve_refuses_a_read_share_outside_zero_to_one(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["serve", "--gauge-read-share", value])
    assert exc.value.code == 2
    assert "--gauge-read-share: must be" in capsys.readouterr().err
