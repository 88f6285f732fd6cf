"""A worker's side of ``webhook.cluster.device_service``: the device index of this replica's one device process.

Nothing here holds device data: ``device_index()`` gives a ``RemoteIndex`` (the count of devices and a
``capacity`` that asks the device process), answers are cached per index generation, and every question is
bounded by the caller's deadline (socket timeout). Anything that does not answer in time is unknown (None),
so the rule fails open as it does for a selector it cannot evaluate.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import OrderedDict
from typing import Any

from webhook.devices.selectors import COMPILE_CACHE_SIZE, Capacity

STATUS_TTL = 1.0  # seconds a worker reuses the device process's generation and device count


class SharedDevices:
    """Asks the device process at ``path``; ``budget`` bounds the questions no rule deadline bounds."""

    def __init__(self, path: str, budget: float = 0.2) -> None:
        self.path = path
        self.budget = budget
        self._local = threading.local()
        self._lock = threading.Lock()
        self._status: tuple[float, dict[str, Any]] | None = None
        self._answers: OrderedDict[tuple[int, tuple[str, ...]], Capacity] = OrderedDict()

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """One round trip on this thread's connection; raises OSError/ValueError past ``timeout`` or on error."""
        conn: socket.socket | None = getattr(self._local, "conn", None)
        try:
            if conn is None:
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.settimeout(max(timeout, 0.001))
                conn.connect(self.path)
                self._local.conn, self._local.buf = conn, b""
            conn.settimeout(max(timeout, 0.001))
            conn.sendall(json.dumps(request).encode() + b"\n")
            while b"\n" not in self._local.buf:
                chunk = conn.recv(65536)
                if not chunk:
                    raise OSError("the device process closed the connection")
                self._local.buf += chunk
            line, self._local.buf = self._local.buf.split(b"\n", 1)
            reply = json.loads(line)
            if not isinstance(reply, dict):
                raise ValueError("not an object")
            return reply
        except (OSError, ValueError):
            if conn is not None:
                conn.close()
            self._local.conn = None  # a late answer must not be read as the next one's
            raise

    def close(self) -> None:
        """Close this thread's connection (the others close with their threads' sockets)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _current(self) -> dict[str, Any]:
        hit = self._status
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        status = self.ask({}, self.budget)
        self._status = (time.monotonic() + STATUS_TTL, status)
        return status

    def device_index(self) -> tuple[RemoteIndex | None, str | None]:
        """The index (or None) and why not, as ``LiveView.device_index`` gives them."""
        try:
            status = self._current()
        except (OSError, ValueError) as exc:
            return None, f"device process at {self.path} not answering ({exc or type(exc).__name__})"
        if status.get("devices") is None:
            return None, str(status.get("reason") or "ResourceSlices not indexed yet")
        return RemoteIndex(self, int(status["gen"]), int(status["devices"])), None

    def status(self) -> dict[str, Any]:
        try:
            return {**(self._current().get("status") or {}), "sharedFrom": self.path}
        except (OSError, ValueError) as exc:
            return {"sharedFrom": self.path, "lastError": str(exc) or type(exc).__name__}

    def capacity(self, gen: int, expressions: tuple[str, ...], deadline: float) -> Capacity | None:
        key = (gen, expressions)
        with self._lock:
            hit = self._answers.get(key)
        if hit is not None:
            return hit
        timeout = deadline - time.perf_counter()
        if timeout <= 0:
            return None
        try:
            reply = self.ask({"exprs": list(expressions), "timeout": timeout}, timeout)
        except (OSError, ValueError):
            return None
        cap = reply.get("capacity")
        if not isinstance(cap, list) or len(cap) != 4:
            return None
        answer = Capacity(int(cap[0]), int(cap[1]), int(cap[2]), bool(cap[3]))
        with self._lock:
            self._answers[(int(reply.get("gen", gen)), expressions)] = answer
            while len(self._answers) > COMPILE_CACHE_SIZE:
                self._answers.popitem(last=False)
        return answer


class RemoteIndex:
    """What the unsatisfiable-claim rule reads of a ``DeviceIndex``, answered by the device process."""

    def __init__(self, shared: SharedDevices, gen: int, devices: int) -> None:
        self._shared, self.gen, self.devices = shared, gen, devices

    def capacity(self, expressions: tuple[str, ...], deadline: float = float("inf")) -> Capacity | None:
        return self._shared.capacity(self.gen, expressions, min(deadline, time.perf_counter() + self._shared.budget))
