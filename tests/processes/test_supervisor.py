"""webhook.serve.supervisor: the one supervisor of the gunicorn master's children (gauge writer, device process).

Its restart policy with the fork replaced by a record, and a real fork: the child runs with the master's
listening sockets closed and ``prepare`` done, a killed child is started again, SIGTERM stops it cleanly.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path

from tests.e2e.waits import eventually
from webhook.serve.supervisor import Supervisor


class _Supervised(Supervisor):
    """The supervisor's restart policy (the gauge writer's and the device process's) with the fork replaced by
    a record of when it would fork."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__("child", lambda stop: None, clock=lambda: clock[0])
        self.spawned: list[float] = []
        self.running = False

    def alive(self) -> bool:
        return self.running

    def _spawn(self) -> None:
        self.spawned.append(self.clock())
        self.pid, self._started, self.running = len(self.spawned), self.clock(), True


def test_a_dying_writer_is_restarted_with_backoff_reset_after_a_good_run() -> None:
    t = [0.0]
    sup = _Supervised(t)
    sup.check()
    assert sup.spawned == [0.0]
    for _ in range(4):  # dies at once, every time: 1, 2, 4, 8 s between its deaths and the next starts
        sup.running = False
        sup.check()
        died = t[0]
        while len(sup.spawned) == _ + 1:
            t[0] += 0.5
            sup.check()
        assert sup.spawned[-1] - died == 2 ** _
    t[0] += 120  # then it runs fine for two minutes and dies: back to 1 s
    sup.running = False
    sup.check()
    t[0] += 1
    sup.check()
    assert sup.spawned[-1] == t[0] and len(sup.spawned) == 6


def _child_run(out: Path, listener_fd: int):  # noqa: ANN202 - returns the child's run
    def run(stop: threading.Event) -> None:
        try:
            os.fstat(listener_fd)
            closed = False
        except OSError:
            closed = True
        written = out / f"run-{os.getpid()}.tmp"  # renamed when whole: the test polls for the name
        written.write_text(f"{closed} {os.environ.get('PREPARED')}")
        written.replace(out / f"run-{os.getpid()}")
        stop.wait()
        (out / f"stopped-{os.getpid()}").write_text("")

    return run


def test_a_real_child_runs_is_restarted_after_a_kill_and_stops_on_sigterm(tmp_path: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    sup = Supervisor("test child", _child_run(tmp_path, listener.fileno()),
                     prepare=lambda: os.environ.__setitem__("PREPARED", "yes"),
                     close_fds=lambda: [listener.fileno()])
    try:
        sup.check()
        first = sup.pid
        assert first is not None
        eventually(lambda: (tmp_path / f"run-{first}").exists(), "the child ran")
        assert (tmp_path / f"run-{first}").read_text() == "True yes"  # listener closed, prepare ran first
        sup.check()
        assert sup.pid == first  # alive: not started twice
        os.kill(first, signal.SIGKILL)
        eventually(lambda: not sup.alive(), "the killed child reaped")
        sup.check()  # seen dead: another one after 1 s
        assert sup.pid is None

        def restarted() -> bool:
            sup.check()
            return sup.pid is not None

        eventually(restarted, "a second child", timeout=10)
        second = sup.pid
        assert second != first
        eventually(lambda: (tmp_path / f"run-{second}").exists(), "the second child ran")
        sup.stop(timeout=10)
        assert (tmp_path / f"stopped-{second}").exists()  # SIGTERM set stop: run returned, no SIGKILL
        assert sup.pid is None and not sup.alive()
    finally:
        sup.stop(timeout=1)
        listener.close()
