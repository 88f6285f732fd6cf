"""Processes the harness starts, stopped by pid (whole process group) however the session ends.

Every child runs in its own session (process group), so stopping it also stops what it forked (gunicorn's
workers). Three nets make sure nothing outlives the test run: the session fixture's finalizer, an ``atexit``
hook (interrupts, errors during set-up), and ``PR_SET_PDEATHSIG`` so the kernel kills a child whose parent
died without running either (``kill -9`` of pytest).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

_LIVE: dict[int, Proc] = {}
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the finalizer and atexit still stop it
        pass


class Proc:
    """One started command with its log file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, *, env: dict[str, str] | None = None,
                 pass_fds: Sequence[int] = (), cwd: Path | None = None) -> None:
        self.name, self.log = name, log
        self.argv = list(argv)
        with log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                start_new_session=True, pass_fds=tuple(pass_fds), preexec_fn=_die_with_parent,
            )
        self.pid = self.popen.pid
        _LIVE[self.pid] = self

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self, tail: int | None = None) -> str:
        text = self.log.read_text(errors="replace")
        return text if tail is None else text[-tail:]

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM the process group, SIGKILL it after ``timeout``; returns the exit code."""
        try:
            if self.alive():
                _signal_group(self.pid, signal.SIGTERM)
                try:
                    self.popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    _signal_group(self.pid, signal.SIGKILL)
                    self.popen.wait(10)
            # Leftovers of the group (a worker that outlived its master) go too.
            _signal_group(self.pid, signal.SIGKILL)
        finally:
            _LIVE.pop(self.pid, None)
        return self.popen.returncode


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all() -> None:
    """Stop every process still registered, newest first (controllers before the API server before etcd)."""
    for proc in reversed(list(_LIVE.values())):
        proc.stop(timeout=10)


def live() -> list[Proc]:
    return list(_LIVE.values())


atexit.register(stop_all)
