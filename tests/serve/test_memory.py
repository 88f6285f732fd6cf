"""webhook.serve.memory: the replica's limit split across its request threads; large reviews one at a time."""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, gpu_pod, review
from webhook.policy.loader import load
from webhook.rules.view import OfflineView
from webhook.serve import memory, recording
from webhook.serve.app import Large, StaticPolicy, create_app

MiB = memory.MiB


def test_the_shipped_replica_fits_its_limit():
    plan = memory.plan(memory.SHIPPED_LIMIT, workers=2, threads=8)
    assert plan.fits and plan.threads == 16
    # the baseline at the largest scale documented, the large reviews' peak and every thread's share: within it
    assert memory.BASELINE + memory.LARGE_PEAK + plan.share * plan.threads <= memory.SHIPPED_LIMIT
    assert plan.large_body * memory.AMPLIFICATION <= plan.share
    assert memory.MIN_LARGE_BODY <= plan.large_body <= memory.MAX_LARGE_BODY


def test_more_threads_mean_smaller_shares_until_it_does_not_fit():
    shares = [memory.plan(memory.SHIPPED_LIMIT, 2, t).share for t in (4, 8, 16)]
    assert shares == sorted(shares, reverse=True)
    assert not memory.plan(memory.SHIPPED_LIMIT, 4, 32).fits
    assert memory.plan(2048 * MiB, 4, 32).fits


def test_container_limit_reads_cgroup_v2_then_v1(tmp_path: Path):
    assert memory.container_limit(str(tmp_path)) is None
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1: no limit
    assert memory.container_limit(str(tmp_path)) is None
    (tmp_path / "memory.max").write_text(f"{512 * MiB}\n")
    assert memory.container_limit(str(tmp_path)) == 512 * MiB
    (tmp_path / "memory.max").write_text("max\n")
    assert memory.container_limit(str(tmp_path)) is None


def test_one_at_a_time_across_threads_and_processes(tmp_path: Path):
    gate = memory.OneAtATime(str(tmp_path / "lock"))
    inside = threading.Event()
    release = threading.Event()

    def hold():
        with gate():
            inside.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    assert inside.wait(30)
    pid = os.fork()  # another worker: its own descriptor, the same lock file
    if pid == 0:
        import fcntl
        other = memory.OneAtATime(str(tmp_path / "lock"))
        fd = os.open(other.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os._exit(1)  # got it while the parent holds it
        except BlockingIOError:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    release.set()
    t.join(30)
    with gate():  # released
        pass


def test_a_large_review_is_answered_inside_the_gate_and_a_small_one_is_not():
    entered: list[int] = []

    @contextmanager
    def gate():
        entered.append(1)
        yield

    policy = load(ROOT / "tests" / "data" / "live-policy.yaml")
    app = create_app(StaticPolicy(policy), view=OfflineView(), large=Large(4096, gate)).test_client()
    small = json.dumps(review(gpu_pod("small", "pilot-a"), namespace="pilot-a")).encode()
    big_pod = gpu_pod("big", "pilot-a")
    big_pod["metadata"]["annotations"] = {"note": "x" * 8192}
    big = json.dumps(review(big_pod, namespace="pilot-a")).encode()
    answers = [app.post("/mutate", data=b, headers={"Content-Type": "application/json"}) for b in (small, big)]
    assert [a.status_code for a in answers] == [200, 200] and all(a.json["response"]["patch"] for a in answers)
    assert entered == [1]


def test_trim_and_arena_limit_never_raise():
    assert memory.trim() in (True, False)
    assert memory.limit_arenas() in (True, False)


def test_the_recorder_gets_the_parsed_review_once_answered(monkeypatch: pytest.MonkeyPatch):
    """Issue 47 item 1: the recorder parsed every body a second time; it now redacts the review the server parsed."""
    import types

    import orjson

    got: list[Any] = []

    def counting_loads(data: Any) -> Any:
        got.append("parsed again")
        return orjson.loads(data)

    monkeypatch.setattr(recording, "orjson", types.SimpleNamespace(
        loads=counting_loads, dumps=orjson.dumps, JSONDecodeError=orjson.JSONDecodeError))
    lines: list[bytes | None] = []
    policy = load(ROOT / "tests" / "data" / "live-policy.yaml")
    app = create_app(StaticPolicy(policy), view=OfflineView(), clock=lambda: dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                     recorder=lambda doc, endpoint, response, policy: lines.append(
                         recording.record_line(doc, endpoint, response=response, policy=policy))).test_client()
    pod = gpu_pod("rec", "pilot-a")
    pod["spec"]["containers"][0]["env"] = [{"name": "TOKEN", "value": "s3cret"}]
    resp = app.post("/mutate", data=json.dumps(review(pod, namespace="pilot-a")),
                    headers={"Content-Type": "application/json"})
    assert resp.status_code == 200 and resp.json["response"]["patch"]
    assert got == [] and len(lines) == 1 and lines[0] is not None
    line = json.loads(lines[0])
    assert line["request"]["object"]["spec"]["containers"][0]["env"][0]["value"] == recording.REDACTED
    assert line["recorded"]["endpoint"] == "/mutate"
