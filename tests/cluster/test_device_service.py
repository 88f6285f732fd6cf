"""Device data once per replica (issue 29 item 4): workers ask one device process over a Unix socket.

The holder here is a StaticView with dra-example-driver's slices; two ``SharedDevices`` clients stand for two
gunicorn workers of one replica. Neither keeps device data: they get the index's answers, the same numbers
the holder's own index gives.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.builders import satisfiable as ts
from webhook.cluster.device_client import SharedDevices
from webhook.cluster.device_service import DeviceServer
from webhook.offline.views import StaticView

EXPRS = (f"device.driver == '{ts.EXAMPLE_DRIVER}'", ts.EXAMPLE_MODEL, ts.EXAMPLE_MEMORY)


def _far() -> float:
    return time.perf_counter() + 5.0


def test_two_workers_get_the_holders_answers(tmp_path: Path) -> None:
    holder = StaticView(device_classes=[ts.EXAMPLE_CLASS], resource_slices=[
        ts.example_slice("node-1", 4), ts.example_slice("node-2", 2, memory="2Gi")])
    server = DeviceServer(holder, str(tmp_path / "devices.sock"))
    server.start()
    try:
        workers = [SharedDevices(server.path, budget=5.0) for _ in range(2)]
        local = holder.device_index().value
        assert local is not None
        for worker in workers:
            index, reason = worker.device_index()
            assert index is not None and reason is None and index.devices == 6
            assert index.capacity(EXPRS, _far()) == local.capacity(EXPRS) and local.capacity(EXPRS).possible == 4
            assert index.capacity((ts.EXAMPLE_MODEL, "device.driver == 'none.example.com'"), _far()).possible == 0
        assert workers[0].status()["sharedFrom"] == server.path
    finally:
        server.stop()
    # Known answers are cached per index generation: no round trip, even with the device process gone.
    assert index.capacity(EXPRS, _far()) == local.capacity(EXPRS)
    # A new question to a process that is gone is unknown, never "no device".
    assert index.capacity(("device.driver == 'other'",), _far()) is None
    for worker in workers:
        worker.close()


def test_no_index_or_no_process_is_unknown_with_its_reason(tmp_path: Path) -> None:
    server = DeviceServer(StaticView(), str(tmp_path / "devices.sock"))  # no slices known: no index
    server.start()
    try:
        worker = SharedDevices(server.path)
        index, reason = worker.device_index()
        worker.close()
        assert index is None and reason == "ResourceSlices not indexed yet"
    finally:
        server.stop()
    index, reason = SharedDevices(str(tmp_path / "missing.sock")).device_index()
    assert index is None and "not answering" in (reason or "")


def test_a_spent_deadline_asks_nothing(tmp_path: Path) -> None:
    holder = StaticView(device_classes=[ts.EXAMPLE_CLASS], resource_slices=[ts.example_slice("node-1", 4)])
    server = DeviceServer(holder, str(tmp_path / "devices.sock"))
    server.start()
    try:
        worker = SharedDevices(server.path)
        index, _ = worker.device_index()
        worker.close()
        assert index is not None and index.capacity(EXPRS, time.perf_counter() - 1) is None
    finally:
        server.stop()
