"""The replica's memory budget per request (issue 47 item 1): the container limit split across workers x threads.

The structural budget (``webhook.admission.budget``) bounds one review: at most 7 MiB and 600,000 JSON values, so
its parse stays under about 60 MB (``LARGE_PEAK``: what bench/memory.py measured at those limits, body copies,
parse, rules, patch and answer). What is left of the limit once the replica's own processes are
counted (``BASELINE``) is shared by every request thread, so:

- reviews over ``Plan.large_body`` bytes are answered one at a time in the replica (``OneAtATime``: a lock per
  worker and an ``flock`` across the workers, released by the kernel if a worker dies): one ``LARGE_PEAK`` at most;
- every other thread gets an equal share, and ``large_body`` is the body size whose worst case (``AMPLIFICATION``
  bytes of memory per byte of JSON: a flat list of empty objects, parsed) fits that share;
- nothing is retained after a large request: ``trim`` hands glibc's free heap back to the kernel
  (``malloc_trim``) and ``limit_arenas`` caps glibc's per-thread arenas (``M_ARENA_MAX``), which otherwise keep
  what a thread freed (301 MB stayed resident after one 7 MiB review, issue 47).
``plan`` is a pure function; the numbers are in bench/history/memory-per-request.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

MiB = 1024 * 1024
#: The shipped container limit (deploy/base/deployment.yaml, the chart's default).
SHIPPED_LIMIT = 512 * MiB
#: PSS of a replica with no request in flight: master and 2 workers (bench/memory.py, offline) plus the device
#: process and the gauge writer at the scale the deploy comment names (100,000 Pods, 20,000 devices: 369 MB).
BASELINE = 369 * 1000 * 1000
#: What large reviews add to the replica at their peak: four at once, each buffered whole and parsed one at a time,
#: at the structural limits (bench/memory.py measured 106-113 MB over the idle replica).
LARGE_PEAK = 110 * MiB
#: Bytes of memory per byte of a small review at worst (parsed, its copies on the path and the answer).
AMPLIFICATION = 40
#: Smallest ``large_body``: a Deployment with a long last-applied-configuration is about 30 KiB.
MIN_LARGE_BODY = 64 * 1024
MAX_LARGE_BODY = 1 * MiB


@dataclass(frozen=True, slots=True)
class Plan:
    limit: int
    threads: int  # request threads in the replica: workers x threads per worker
    share: int  # bytes each request thread may use below ``large_body``
    large_body: int  # reviews over this many bytes are answered one at a time
    fits: bool  # the plan holds within ``limit``; False: fewer workers or threads, or a higher limit

    def describe(self) -> str:
        return (f"memory per request: reviews over {self.large_body // 1024} KiB one at a time, "
                f"{self.threads} request threads sharing {self.share * self.threads // MiB} MiB "
                f"of a {self.limit // MiB} MiB limit")


def plan(limit: int, workers: int, threads: int, baseline: int = BASELINE, large_peak: int = LARGE_PEAK) -> Plan:
    """How a replica of ``workers`` x ``threads`` answers within ``limit`` bytes. No margin on top: ``BASELINE`` is
    already the replica's peak at the largest scale documented, and ``AMPLIFICATION`` the worst case per byte."""
    count = max(workers, 1) * max(threads, 1)
    free = limit - baseline - large_peak
    share = max(free // count, 0)
    large_body = min(max(share // AMPLIFICATION, MIN_LARGE_BODY), MAX_LARGE_BODY)
    return Plan(limit, count, share, large_body, share >= MIN_LARGE_BODY * AMPLIFICATION)


def container_limit(root: str = "/sys/fs/cgroup") -> int | None:
    """The memory limit of this container (cgroup v2, else v1), or None when there is none to read."""
    for path in (f"{root}/memory.max", f"{root}/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # v1 writes a huge number for "no limit", v2 "max"
            return int(text)
        return None
    return None


class OneAtATime:
    """One large review at a time in the replica: a thread lock within a worker, an ``flock`` of ``path`` across
    the workers (each opens its own descriptor after the fork; the kernel releases a dead worker's lock)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = 0

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._fd is None or self._pid != os.getpid():
                self._fd, self._pid = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600), os.getpid()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None  # glibc only


_LIBC = _libc()
_M_ARENA_MAX = -8  # glibc malloc.h


def trim() -> bool:
    """Give glibc's free heap back to the kernel (after a large request); False where there is no glibc."""
    return bool(_LIBC is not None and _LIBC.malloc_trim(0))


def limit_arenas(arenas: int = 2) -> bool:
    """At most ``arenas`` glibc malloc arenas in this process and its forks (as ``MALLOC_ARENA_MAX``, which only
    counts when set before the process starts); call it in the master, before the workers' threads exist."""
    return bool(_LIBC is not None and _LIBC.mallopt(_M_ARENA_MAX, arenas) == 1)
