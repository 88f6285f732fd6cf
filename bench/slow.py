"""The slow-client attack of issue 15 as a load: 200 connections held open against a server.

Half send their request headers and then one body byte per second; half stop in the middle of the TLS
handshake. When the server closes one, another is opened in its place, as an attacker would, so the
server faces ``count`` hostile connections for the whole measurement. One thread does it all.
"""

from __future__ import annotations

import selectors
import socket
import ssl
import threading
import time
from pathlib import Path

HEAD = (b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n{")


def partial_client_hello(ca: Path) -> bytes:
    ctx = ssl.create_default_context(cafile=str(ca))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    return hello[: len(hello) // 2]


class Attacker:
    def __init__(self, port: int, ca: Path, count: int = 200) -> None:
        self.port, self.count = port, count
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.hello = partial_client_hello(ca)
        self.sel = selectors.DefaultSelector()
        self.body: list[socket.socket] = []
        self.handshake: list[socket.socket] = []
        self.opened = self.closed_by_server = self.open_failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Attacker:
        self._thread.start()
        deadline = time.monotonic() + 60
        while self.open_now() < self.count and time.monotonic() < deadline:
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        for s in self.body + self.handshake:
            s.close()

    def open_now(self) -> int:
        return len(self.body) + len(self.handshake)

    def _open(self, kind: str) -> None:
        try:
            raw = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            if kind == "body":
                s: socket.socket = self.ctx.wrap_socket(raw, server_hostname="127.0.0.1")
                s.sendall(HEAD)
                self.body.append(s)
            else:
                raw.sendall(self.hello)
                s = raw
                self.handshake.append(s)
        except OSError:
            self.open_failures += 1
            return
        self.opened += 1
        s.setblocking(False)
        self.sel.register(s, selectors.EVENT_READ, kind)

    def _closed(self, s: socket.socket, kind: str) -> None:
        try:
            if s.recv(4096):
                return
        except (ssl.SSLWantReadError, BlockingIOError):
            return
        except OSError:
            pass
        self.sel.unregister(s)
        (self.body if kind == "body" else self.handshake).remove(s)
        s.close()
        self.closed_by_server += 1

    def _run(self) -> None:
        half = self.count // 2
        next_byte = time.monotonic() + 1
        while not self._stop.is_set():
            while len(self.body) < half and not self._stop.is_set():
                self._open("body")
            while len(self.handshake) < self.count - half and not self._stop.is_set():
                self._open("handshake")
            for key, _ in self.sel.select(timeout=0.2):
                self._closed(key.fileobj, key.data)  # type: ignore[arg-type]
            if time.monotonic() >= next_byte:
                next_byte = time.monotonic() + 1
                for s in list(self.body):
                    try:
                        s.send(b" ")
                    except (ssl.SSLWantWriteError, BlockingIOError):
                        pass
                    except OSError:
                        self._closed(s, "body")
