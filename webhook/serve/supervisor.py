"""A child process the gunicorn master keeps alive beside its workers: the gauge writer and the device process.

The master is single-threaded and forks from its main loop, as it forks workers; ``check()`` runs every loop
of it (``webhook.serve.server``). A child that dies is started again after 1 s, doubling up to 60 s while it keeps
dying within a minute of its start. In the child: the master's signal handlers are reset, the listening
sockets closed (a child never accepts admission requests), ``PR_SET_PDEATHSIG`` set (the child ends if the
master is killed outright), ``prepare`` runs (the gauge writer lowers its priority there), and ``run(stop)``
runs until SIGTERM sets ``stop``.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import threading
import time
from collections.abc import Callable

log = logging.getLogger("webhook.supervisor")

_MASTER_SIGNALS = (signal.SIGHUP, signal.SIGQUIT, signal.SIGINT, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1,
                   signal.SIGUSR2, signal.SIGWINCH, signal.SIGCHLD)
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """``PR_SET_PDEATHSIG``: SIGTERM when the master is killed outright (Linux; elsewhere nothing)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _child_main(name: str, run: Callable[[threading.Event], None], prepare: Callable[[], None] | None,
                close_fds: list[int]) -> int:
    for sig in _MASTER_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    for fd in close_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    _die_with_parent()
    if prepare is not None:
        prepare()
    if os.getppid() == 1:  # the master died between fork and prctl
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run(stop)
    except Exception:
        log.exception("%s failed", name)
        return 1
    return 0


class Supervisor:
    """Keeps one ``run`` process alive from the gunicorn master (``check()`` every loop); stops it at exit."""

    def __init__(self, name: str, run: Callable[[threading.Event], None], *,
                 prepare: Callable[[], None] | None = None, close_fds: Callable[[], list[int]] = list,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.run = run
        self.prepare = prepare
        self.close_fds = close_fds
        self.clock = clock
        self.pid: int | None = None
        self._started = 0.0
        self._next = 0.0
        self._backoff = 1.0

    def alive(self) -> bool:
        if self.pid is None:
            return False
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # gunicorn's waitpid(-1) reaped it first
            return False
        return pid == 0

    def check(self) -> None:
        if self.alive():
            return
        now = self.clock()
        if self.pid is not None:
            if now - self._started > 60:  # it had been running fine: start over at 1 s
                self._backoff = 1.0
            log.warning("%s pid %d exited; starting another in %g s", self.name, self.pid, self._backoff)
            self._next = now + self._backoff
            self._backoff = min(self._backoff * 2, 60.0)
            self.pid = None
        if now >= self._next:
            self._spawn()

    def _spawn(self) -> None:
        fds = self.close_fds()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child (exercised by the server and e2e tests)
            code = 1
            try:
                code = _child_main(self.name, self.run, self.prepare, fds)
            finally:
                logging.shutdown()
                os._exit(code)
        self.pid, self._started = pid, self.clock()

    def terminate(self) -> None:
        """Ask the child to stop (the gauge writer releases its Lease); ``stop()`` waits for it."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL past ``timeout``."""
        if self.pid is None:
            return
        self.terminate()
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        self.pid = None
