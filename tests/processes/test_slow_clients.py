"""Slow and stalled clients must not starve admission (issue 15). Loopback only, bounded in count and time.

200 hostile connections are held open against the real ``dra-webhook serve``: half send their headers and
then one body byte per second, half stop in the middle of the TLS handshake. Meanwhile a client sends real
AdmissionReviews: every one must be answered, the server must close every slow connection by itself within
its deadlines (checked with a generous upper bound, no lower bound), and it must be healthy afterwards.
Before the fix (stock gthread: handshake and reads on a blocking socket in a pool thread, no deadline) the
reviews time out: 8 such connections take every thread of a 2 x 4 server.
"""

from __future__ import annotations

import http.client
import json
import re
import selectors
import signal
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import Server, gpu_pod, review, start_server
from webhook.serve.worker import MAX_HEAD, Framing

HEADER_TIMEOUT = 10
BODY_TIMEOUT = 10
SLOW_BODIES = 100
STALLED_HANDSHAKES = 100
#: Generous bound for "closed by the server within its deadline": deadline + this (loaded 2-core CI).
SLACK = 25.0


def workers_of(server: Server) -> set[int]:
    pid = server.proc.pid
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


def partial_client_hello(server: Server) -> bytes:
    """The first half of a real ClientHello (a handshake that stops in the middle)."""
    ctx = ssl.create_default_context(cafile=str(server.ca))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    return hello[: len(hello) // 2]


@dataclass
class Slow:
    sock: socket.socket
    kind: str  # "body" | "handshake"
    opened: float
    closed: float | None = None
    answer: bytes = b""  # what the server sent before closing (nothing is expected)


class Attack:
    """Holds the slow connections open from one thread: a body byte per second, and watches for closes."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.conns: list[Slow] = []
        self.sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def open(self) -> None:
        ctx = ssl.create_default_context(cafile=str(self.server.ca))
        head = (b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100000\r\n\r\n{")
        for _ in range(SLOW_BODIES):
            raw = socket.create_connection(("127.0.0.1", self.server.port), timeout=30)
            tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            tls.sendall(head)
            self._add(Slow(tls, "body", time.monotonic()))
        hello = partial_client_hello(self.server)
        for _ in range(STALLED_HANDSHAKES):
            raw = socket.create_connection(("127.0.0.1", self.server.port), timeout=30)
            raw.sendall(hello)
            self._add(Slow(raw, "handshake", time.monotonic()))
        self._thread.start()

    def _add(self, slow: Slow) -> None:
        with self._lock:
            self.conns.append(slow)
            self.sel.register(slow.sock, selectors.EVENT_READ, slow)

    def open_count(self) -> int:
        with self._lock:
            return sum(1 for c in self.conns if c.closed is None)

    def _run(self) -> None:
        next_byte = time.monotonic() + 1
        while not self._stop.is_set() and self.open_count():
            for key, _ in self.sel.select(timeout=0.2):
                self._check_closed(key.data)
            if time.monotonic() >= next_byte:
                next_byte += 1
                for c in list(self.conns):
                    if c.kind == "body" and c.closed is None:
                        try:
                            c.sock.send(b" ")
                        except OSError:
                            self._check_closed(c)

    def _check_closed(self, c: Slow) -> None:
        try:
            c.sock.setblocking(False)
            data = c.sock.recv(4096)
        except (ssl.SSLWantReadError, BlockingIOError):
            return
        except OSError:  # reset or TLS EOF: closed by the server
            data = b""
        finally:
            if c.closed is None and c.sock.fileno() >= 0:
                c.sock.setblocking(True)
        with self._lock:
            c.answer = data
            c.closed = time.monotonic()
            self.sel.unregister(c.sock)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        for c in self.conns:
            c.sock.close()


def admission_body() -> tuple[str, bytes]:
    doc = review(gpu_pod(namespace="mig-a", resource="vendor.example.com/gpu"), namespace="mig-a")
    return doc["request"]["uid"], json.dumps(doc).encode()


@pytest.fixture()
def server(tmp_path: Path):
    s = start_server(tmp_path, None, "--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT))
    yield s
    s.stop()


def test_200_slow_connections_do_not_starve_admission(server: Server):
    pids = workers_of(server)
    attack = Attack(server)
    answered: list[tuple[float, float]] = []
    failures: list[str] = []
    try:
        attack.open()
        all_open = time.monotonic()
        assert attack.open_count() == SLOW_BODIES + STALLED_HANDSHAKES
        client = server.client()
        # Reviews while the slow connections are held (and after: until the server has closed them all).
        bound = all_open + max(HEADER_TIMEOUT, BODY_TIMEOUT) + SLACK
        while attack.open_count() and time.monotonic() < bound:
            uid, body = admission_body()
            started = time.monotonic()
            try:
                status, _, data = client.request("POST", "/validate", body, {"Content-Type": "application/json"})
                resp = json.loads(data)["response"]
                assert status == 200 and resp["uid"] == uid and resp["allowed"] is False, (status, data[:300])
                assert "legacy-resource-name (migrated: Deny)" in resp["status"]["message"]
                answered.append((started, time.monotonic()))
            except (OSError, http.client.HTTPException, AssertionError, ValueError) as exc:
                failures.append(repr(exc))
        client.close()
        still_open = attack.open_count()
    finally:
        attack.close()
    assert failures == []
    # every slow connection was closed by the server, within its deadline plus a generous slack
    assert still_open == 0, f"{still_open} slow connections still open {SLACK} s after their deadline"
    assert [c.answer for c in attack.conns if c.answer] == []
    for c in attack.conns:
        limit = (HEADER_TIMEOUT if c.kind == "handshake" else HEADER_TIMEOUT + BODY_TIMEOUT) + SLACK
        assert c.closed is not None and c.closed - c.opened <= limit, (c.kind, c.closed, c.opened)
    # reviews were answered while every slow connection was still open
    first_close = min(c.closed for c in attack.conns if c.closed is not None)
    during = [a for a in answered if a[0] >= all_open and a[1] <= first_close]
    assert len(during) >= 10, (len(during), len(answered), first_close - all_open)
    # healthy afterwards: same workers, ready, deciding, and the closes were logged
    assert workers_of(server) == pids
    client = server.client()
    assert client.get("/healthz")[0] == 200
    assert client.get("/readyz")[0] == 200
    uid, body = admission_body()
    assert client.admit("/validate", json.loads(body))["response"]["allowed"] is False
    client.close()
    output = server.output()
    assert re.search(r"closed \d+ connection\(s\) that did not complete", output), output[-3000:]
    assert "Traceback" not in output


def test_connection_cap_evicts_stalled_connections_and_health_still_answers(tmp_path: Path):
    """One worker capped at 20 connections, 60 stalled handshakes: probes and reviews still get in."""
    server = start_server(tmp_path, None, "--max-connections", "20", "--header-timeout", "60", workers=1)
    stalled: list[socket.socket] = []
    try:
        hello = partial_client_hello(server)
        for _ in range(60):
            raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            raw.sendall(hello)
            stalled.append(raw)
        client = server.client()
        assert client.get("/healthz")[0] == 200
        assert client.get("/readyz")[0] == 200
        uid, body = admission_body()
        assert client.admit("/validate", json.loads(body))["response"]["uid"] == uid
        client.close()
        deadline = time.monotonic() + 30
        while "connection limit reached" not in server.output():
            assert time.monotonic() < deadline, server.output()[-3000:]
            time.sleep(0.1)
        assert "20 open connections" in server.output()
    finally:
        for s in stalled:
            s.close()
        assert server.stop(signal.SIGTERM) == 0


# ------------------------------------------------------------ request framing read by the event loop


@pytest.mark.parametrize(("data", "complete"), [
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", False),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", True),
    (b"POST /v HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcd", False),
    (b"POST /v HTTP/1.1\r\ncontent-length: 5\r\n\r\nabcde", True),
    (b"POST /v HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", True),  # over the limit: the app refuses now
    (b"POST /v HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", True),  # the parser answers 400
    (b"POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", False),
    (b"POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n", False),
    (b"POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", True),
    (b"POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", True),
    (b"POST /v HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", True),  # malformed: the parser answers 400
    (b"POST /v HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", True),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * (MAX_HEAD + 1), True),  # head too large: the parser answers 400
])
def test_framing_knows_when_a_request_is_complete(data: bytes, complete: bool):
    framing = Framing()
    assert framing.complete(bytearray(data)) is complete
    # fed byte by byte, the incremental scan reaches the same answer
    framing, buf = Framing(), bytearray()
    for i in range(len(data)):
        buf += data[i:i + 1]
        if framing.complete(buf):
            break
    assert framing.complete(buf) is complete


def test_expect_100_continue_gets_continue_before_the_body(live_server: Server):
    uid, body = admission_body()
    ctx = ssl.create_default_context(cafile=str(live_server.ca))
    with socket.create_connection(("127.0.0.1", live_server.port), timeout=20) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert tls.recv(4096).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        tls.sendall(body)
        data = b""
        while not re.search(rb"\r\n\r\n.*\}$", data, re.S):
            chunk = tls.recv(65536)
            assert chunk, data
            data += chunk
    final = data[data.rindex(b"HTTP/1.1 "):]  # after any repeated 1xx
    head, _, payload = final.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert json.loads(payload)["response"]["uid"] == uid
