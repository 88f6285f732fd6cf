"""The device index in one place per replica: workers ask it over a Unix socket instead of each keeping a copy.

Why a socket, not a snapshot the workers load: a request brings selectors nobody evaluated yet, and only the
process holding the devices can evaluate them; the answers it sends are four numbers. The process that holds
a ``LiveView`` (its ResourceSlice watch and index) runs ``DeviceServer``; each worker's view asks through
``webhook.cluster.device_client.SharedDevices``, under the rule's time budget, with answers cached per index
generation, so a known selector list costs no round trip. One JSON object per line each way:

- ``{"exprs": [...], "timeout": s}`` -> ``{"gen", "devices", "reason", "capacity": [possible, per_node,
  unknown, multiple] or null}`` (null: past the timeout, or no index: ``reason`` says why);
- ``{}`` -> the same without ``capacity``, plus ``status`` (the ``resourceslices`` part of ``/readyz``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import threading
import time
from typing import Any, Protocol

from webhook.devices.selectors import DeviceAnswers
from webhook.rules.view import Lookup

log = logging.getLogger("webhook.device_service")

MAX_REQUEST = 1 << 20  # bytes of one request line (selector texts)


class DeviceHolder(Protocol):
    def device_index(self) -> Lookup[DeviceAnswers]: ...

    def status(self) -> dict[str, Any]: ...


class DeviceServer:
    """Answers capacity questions from ``holder``'s device index on the Unix socket ``path``."""

    def __init__(self, holder: DeviceHolder, path: str) -> None:
        self.holder = holder
        self.path = path
        self._lock = threading.Lock()
        self._last: DeviceAnswers | None = None
        self._gen = 0
        self._server: socketserver.ThreadingUnixStreamServer | None = None
        self._conns: set[Any] = set()

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        found = self.holder.device_index()
        index, reason = found.value, found.reason
        with self._lock:
            if index is not self._last:
                self._last, self._gen = index, self._gen + 1
            gen = self._gen
        out: dict[str, Any] = {"gen": gen, "devices": None if index is None else index.devices, "reason": reason}
        exprs = request.get("exprs")
        if isinstance(exprs, list) and all(isinstance(e, str) for e in exprs):
            timeout = request.get("timeout")
            deadline = time.perf_counter() + (timeout if isinstance(timeout, int | float) else 0.05)
            cap = None if index is None else index.capacity(tuple(exprs), deadline)
            out["capacity"] = None if cap is None else [cap.possible, cap.per_node, cap.unknown, cap.multiple]
        else:
            out["status"] = self.holder.status().get("resourceslices")
        return out

    def start(self) -> None:
        if os.path.exists(self.path):
            os.unlink(self.path)  # a stale socket of an earlier run
        server = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                server._conns.add(self.connection)
                for line in iter(lambda: self.rfile.readline(MAX_REQUEST), b""):
                    try:
                        request = json.loads(line)
                        reply = server.answer(request if isinstance(request, dict) else {})
                    except ValueError:
                        reply = {"error": "bad request"}
                    self.wfile.write(json.dumps(reply).encode() + b"\n")
                    self.wfile.flush()

        self._server = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="device-server", daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for conn in list(self._conns):  # as a process that ends: every worker's connection closes
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._conns.clear()
        if os.path.exists(self.path):
            os.unlink(self.path)
