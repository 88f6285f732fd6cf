"""gunicorn worker that never lends a request thread to a slow client.

Stock gthread (gunicorn 27, ``workers/gthread.py``: ``ThreadWorker.handle`` / ``TConn.init``) waits up
to 5 s for the first byte in a pool thread, then does the TLS handshake and reads the request on a
*blocking* socket in that thread, with no deadline: 16 clients that send a partial ClientHello or
headers plus one byte of body take every thread of a default server (issue 15).

``AdmissionWorker`` keeps gthread's event loop, thread pool, keep-alive handling and graceful stop, and
moves everything a client controls the pace of into the event loop, non-blocking and under deadlines:

- the TLS handshake and the request head must complete within ``header_timeout`` of the connection
  (or of the first byte of a kept-alive connection's next request);
- the body must complete within ``body_timeout`` after the head;
- only a whole request (head and body in memory) is handed to a pool thread, so a thread runs
  parsing, the flask app and the response, never a wait on the network. The API server sends a
  review in one write, so the deadlines only ever bite on clients that dawdle.

Large requests held in memory are capped per worker (``MAX_LARGE``, issue 47 item 1): once a request being read
passes ``LARGE`` bytes it needs one of the worker's large slots, held until its answer is written; without one its
connection is not read further (its deadlines still run) until a slot frees, so however many 7 MiB bodies arrive at
once, at most ``MAX_LARGE`` per worker are in memory. Smaller requests never wait for a slot.

Connections are capped per worker (``max_connections``). At the cap the oldest connection that has
not delivered a complete request (or the oldest idle keep-alive one) is closed to admit the new one,
so health probes and the API server still get in while slow clients fill the table.

A request gunicorn itself refuses before the app sees it (a bad request line, a head too large, a bad chunk: its
``Worker.handle_error`` in ``workers/base.py``, which writes through ``util.write_error``) is answered in JSON like
every other answer (``json_error``), not with gunicorn's HTML page (issue 47 item 6).
"""

from __future__ import annotations

import re
import selectors
import socket
import ssl
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from gunicorn import http, sock, util
from gunicorn.http.parser import Parser
from gunicorn.workers.gthread import TConn, ThreadWorker

#: Defaults of the `serve` options (seconds / connections per worker).
HEADER_TIMEOUT = 10.0
BODY_TIMEOUT = 10.0
MAX_CONNECTIONS = 500
#: Largest request head accepted (gunicorn's own limits: 4094-byte line, 100 x 8190-byte fields).
MAX_HEAD = 64 * 1024
#: A body is buffered up to this size before the app sees it; the app refuses anything over its limit
#: (webhook.serve.app.MAX_BODY, 7 MiB) after reading at most one byte past it.
MAX_BUFFERED_BODY = 7 * 1024 * 1024 + 1
#: A request past this many bytes needs a large slot; at most MAX_LARGE per worker are held at once.
LARGE = 256 * 1024
MAX_LARGE = 2
#: Seconds between repeats of the same log line under a sustained attack.
LOG_EVERY = 10.0

_HEAD_END = b"\r\n\r\n"
_CHUNK_SIZE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[^\r\n]*)?\r\n")


def json_error(status: int, reason: str, message: str) -> bytes:
    """The whole HTTP answer for a request gunicorn refused: ``{"error": ..., "status": ...}``, connection closed
    (as gunicorn's own answer; the body is what the app's errors carry)."""
    body = orjson.dumps({"error": message or reason, "status": status})
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """``gunicorn.util.write_error`` with a JSON body (same signature: ``Worker.handle_error`` calls it)."""
    util.write_nonblock(sock, json_error(status_int, reason, mesg))


class SlowClient(Exception):
    """The connection is closed without an answer; the message says why (debug log)."""


@dataclass
class Framing:
    """Where the request in ``buf`` ends, found incrementally without decoding the body."""

    head_end: int = -1  # index after the blank line, -1 while the head is incomplete
    length: int | None = None  # Content-Length
    chunked: bool = False
    scan: int = 0  # chunked: offset of the next chunk-size line
    decoded: int = 0  # chunked: body bytes seen so far
    expect_continue: bool = False

    def complete(self, buf: bytearray) -> bool:
        """True once ``buf`` holds the whole request, or enough for the app to refuse it."""
        if self.head_end < 0:
            end = buf.find(_HEAD_END)
            if end < 0:
                if len(buf) > MAX_HEAD:
                    return True  # gunicorn's parser answers 400 (limit) from the buffer
                return False
            self.head_end = end + len(_HEAD_END)
            if not self._read_head(bytes(buf[: self.head_end])):
                return True  # framing we do not understand: gunicorn's parser decides (400)
            self.scan = self.head_end
        if self.chunked:
            return self._chunks_done(buf)
        length = self.length or 0
        return length >= MAX_BUFFERED_BODY or len(buf) - self.head_end >= length

    def _read_head(self, head: bytes) -> bool:
        lengths, encodings = [], []
        for line in head.split(b"\r\n")[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                continue
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                lengths.append(value)
            elif name == b"transfer-encoding":
                encodings.append(value)
            elif name == b"expect" and value == b"100-continue":
                self.expect_continue = True
        if encodings:
            self.chunked = encodings == [b"chunked"] and not lengths
            return self.chunked
        if len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
            return False
        self.length = int(lengths[0]) if lengths else 0
        return True

    def _chunks_done(self, buf: bytearray) -> bool:
        while True:
            if self.decoded >= MAX_BUFFERED_BODY:
                return True
            m = _CHUNK_SIZE.match(buf, self.scan)
            if m is None:
                if buf.find(b"\r\n", self.scan) >= 0 or len(buf) - self.scan > 1024:
                    return True  # malformed chunk line: the parser answers 400
                return False
            size = int(m.group(1), 16)
            if size == 0:  # last chunk, then optional trailers and a blank line
                return buf.find(b"\r\n", m.end()) >= 0 and (
                    buf.startswith(b"\r\n", m.end()) or buf.find(_HEAD_END, m.end()) >= 0)
            end = m.end() + size + 2
            if len(buf) < end:
                return False
            self.scan, self.decoded = end, self.decoded + size


@dataclass
class Reading:
    """A connection whose handshake and/or request is being read by the event loop."""

    conn: TConn
    deadline: float
    buf: bytearray
    handshaking: bool
    framing: Framing = field(default_factory=Framing)
    sent_continue: bool = False
    started: float = field(default_factory=time.monotonic)
    large: bool = False  # holds one of the worker's large slots
    paused: bool = False  # past LARGE without a slot: not read until one frees


class DeadlineSocket:
    """What the request parser reads from once the request is in memory: recv() bounded by a deadline.

    The app reads past the buffer only when a refused body is larger than what was buffered; that read
    must not wait longer than the body deadline.
    """

    def __init__(self, sock_: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock_, deadline

    def recv(self, size: int) -> bytes:
        prior = self._sock.gettimeout()
        self._sock.settimeout(max(self._deadline - time.monotonic(), 0.001))
        try:
            return self._sock.recv(size)
        finally:
            self._sock.settimeout(prior)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class AdmissionWorker(ThreadWorker):
    """gthread whose event loop does the TLS handshake and reads whole requests (see module doc)."""

    #: Seconds for the TLS handshake plus the request head, and for the body after the head.
    header_timeout = HEADER_TIMEOUT
    body_timeout = BODY_TIMEOUT
    #: Ports of plain-HTTP listeners (``--metrics-bind``): their connections are not wrapped in TLS.
    plain_ports: frozenset[int] = frozenset()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reading: dict[int, Reading] = {}  # id(conn) -> state, oldest first
        self.large_conns: set[int] = set()  # id(conn) of requests holding a large slot, read or being answered
        self.paused: list[Reading] = []  # waiting for a large slot, oldest first
        self._cap_logged = 0.0
        self._closed_slow = 0
        self._slow_logged = 0.0
        self._refused_handshakes = 0
        self._refused_logged = -LOG_EVERY

    @classmethod
    def configured(cls, header_timeout: float, body_timeout: float,
                   plain_ports: frozenset[int] = frozenset()) -> type[AdmissionWorker]:
        """This worker class with the given deadlines and plain ports (gunicorn takes a class as ``worker_class``)."""
        return type(cls.__name__, (cls,), {"header_timeout": header_timeout, "body_timeout": body_timeout,
                                           "plain_ports": plain_ports})

    # -- entry points from gthread ------------------------------------------------------------

    def init_process(self) -> None:
        util.write_error = write_json_error  # this worker process only; gunicorn's handle_error writes through it
        super().init_process()

    def enqueue_req(self, conn: TConn) -> None:
        """New, kept-alive-and-readable, or pipelined connection: read its request in the loop first."""
        self._start_reading(conn)

    def set_accept_enabled(self, enabled: bool | None) -> None:
        """At the cap, close the oldest connection without a request in progress and keep accepting."""
        if not enabled and self.alive:
            evicted = self._evict_one()
            now = time.monotonic()
            if now - self._cap_logged >= LOG_EVERY:
                self._cap_logged = now
                self.log.warning(
                    "connection limit reached: %d open connections in worker %s (--max-connections); %s",
                    self.nr_conns + evicted, self.pid,
                    "closing the oldest connection that has no complete request to admit new ones" if evicted
                    else "every connection has a request in progress: not accepting until one closes")
            enabled = evicted
        super().set_accept_enabled(enabled)

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        for state in [s for s in self.reading.values() if s.deadline <= now]:
            what = "TLS handshake" if state.handshaking else (
                "request head" if state.framing.head_end < 0 else "request body")
            self._drop(state, f"{what} not complete within its deadline")
            self._closed_slow += 1
        if self._closed_slow and (not self.reading or now - self._slow_logged >= LOG_EVERY):
            self._slow_logged = now
            self.log.info(
                "closed %d connection(s) that did not complete the TLS handshake and request head within "
                "%g s or the body within %g s (slow or stalled clients)",
                self._closed_slow, self.header_timeout, self.body_timeout)
            self._closed_slow = 0

    def _note_refused_handshake(self, state: Reading, exc: ssl.SSLError) -> None:
        """A WARNING at most every LOG_EVERY seconds for handshakes refused over the client certificate."""
        self._refused_handshakes += 1
        now = time.monotonic()
        if now - self._refused_logged < LOG_EVERY:
            return
        self.log.warning(
            "refused %d TLS handshake(s) without a valid client certificate (--client-ca; last from %s: %s)",
            self._refused_handshakes, state.conn.client, exc.reason)
        self._refused_handshakes, self._refused_logged = 0, now

    # -- the reading state machine ------------------------------------------------------------

    def _start_reading(self, conn: TConn) -> None:
        seed = b""
        if isinstance(conn.parser, Parser):  # kept alive: bytes of the next request may already be buffered
            seed = conn.parser.unreader.take_buffered()
        handshaking = False
        if not conn.initialized:
            conn.initialized = True  # TConn.init() must not wrap or handshake in a pool thread
            if self.cfg.is_ssl and _port(conn.server) not in self.plain_ports:
                conn.sock = sock.ssl_context(self.cfg).wrap_socket(
                    conn.sock, server_side=True, do_handshake_on_connect=False,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs)
                handshaking = True
        conn.sock.setblocking(False)
        state = Reading(conn, time.monotonic() + self.header_timeout, bytearray(seed), handshaking)
        self.reading[id(conn)] = state
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_ready, state))
        self._on_ready(state, conn.sock)  # TLS may hold decrypted bytes the selector cannot see

    def _on_ready(self, state: Reading, _fileobj: Any) -> None:
        try:
            done = self._progress(state)
        except (SlowClient, OSError, ValueError) as exc:
            if state.handshaking and isinstance(exc, ssl.SSLError) and "CERTIFICATE" in str(exc.reason or ""):
                self._note_refused_handshake(state, exc)
            self._drop(state, str(exc) or type(exc).__name__)
            return
        if done:
            self._dispatch(state)

    def _progress(self, state: Reading) -> bool:
        s = state.conn.sock
        if state.handshaking:
            assert isinstance(s, ssl.SSLSocket)  # wrapped by _start_reading before handshaking is set
            try:
                s.do_handshake()
            except ssl.SSLWantReadError:
                return False
            except ssl.SSLWantWriteError:
                self.poller.modify(s, selectors.EVENT_READ | selectors.EVENT_WRITE, partial(self._on_ready, state))
                return False
            state.handshaking = False
            self.poller.modify(s, selectors.EVENT_READ, partial(self._on_ready, state))
        while True:
            try:
                data = s.recv(256 * 1024)
            except (ssl.SSLWantReadError, BlockingIOError):
                break
            except ssl.SSLWantWriteError:
                break
            if not data:
                raise SlowClient("client closed the connection")
            state.buf += data
            if len(state.buf) > MAX_HEAD + MAX_BUFFERED_BODY + (1 << 20):
                break
            if len(state.buf) > LARGE and not state.large and not self._take_large(state):
                return False  # paused: the rest is read once a large slot frees
        return self._framed(state)

    def _take_large(self, state: Reading) -> bool:
        """A large slot for ``state``, or pause it (stop reading its socket) until ``_release_large`` resumes it."""
        if len(self.large_conns) < MAX_LARGE:
            state.large = True
            self.large_conns.add(id(state.conn))
            return True
        if not state.paused:
            state.paused = True
            self.paused.append(state)
            try:
                self.poller.unregister(state.conn.sock)
            except (KeyError, ValueError, OSError):
                pass
        return False

    def _release_large(self, conn: TConn) -> None:
        """Free ``conn``'s large slot (answered or closed) and resume the oldest paused connection with it."""
        if id(conn) not in self.large_conns:
            return
        self.large_conns.discard(id(conn))
        while self.paused and len(self.large_conns) < MAX_LARGE:
            state = self.paused.pop(0)
            state.paused, state.large = False, True
            self.large_conns.add(id(state.conn))
            self.poller.register(state.conn.sock, selectors.EVENT_READ, partial(self._on_ready, state))
            self._on_ready(state, state.conn.sock)

    def finish_request(self, conn: TConn, fs: Any) -> None:
        self._release_large(conn)  # the answer is written: the request's bytes are gone
        super().finish_request(conn, fs)

    def _framed(self, state: Reading) -> bool:
        f = state.framing
        had_head = f.head_end >= 0
        if f.complete(state.buf):
            return True
        if not had_head and f.head_end >= 0:  # head just completed: the body gets its own deadline
            state.deadline = time.monotonic() + self.body_timeout
            if f.expect_continue and not state.sent_continue:
                state.sent_continue = True  # gunicorn sends its own 100 too; repeated 1xx are legal
                state.conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        return False

    def _dispatch(self, state: Reading) -> None:
        conn = state.conn
        self._forget(state)
        deadline = time.monotonic() + self.body_timeout
        conn.parser = http.get_parser(self.cfg, DeadlineSocket(conn.sock, deadline), conn.client)
        conn.parser.unreader.unread(state.buf)  # copied into the unreader's buffer: no bytes() copy (issue 47)
        state.buf = bytearray()
        conn.data_ready = True
        super().enqueue_req(conn)  # the whole request is in memory: straight to a pool thread

    def _forget(self, state: Reading) -> None:
        self.reading.pop(id(state.conn), None)
        if state.paused:
            state.paused = False
            self.paused.remove(state)
        try:
            self.poller.unregister(state.conn.sock)
        except (KeyError, ValueError, OSError):
            pass

    def _drop(self, state: Reading, why: str) -> None:
        self._forget(state)
        self.nr_conns -= 1
        self.log.debug("closing connection from %s: %s", state.conn.client, why)
        state.conn.close()
        self._release_large(state.conn)

    def _evict_one(self) -> bool:
        victim = next(iter(self.reading.values()), None)
        if victim is not None:
            self._drop(victim, "connection limit reached; oldest connection without a complete request")
            return True
        self.murder_keepalived()
        if self.keepalived_conns:
            conn = self.keepalived_conns.popleft()
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            self.nr_conns -= 1
            conn.close()
            return True
        return False


def _port(address: Any) -> int | None:
    """The port of a listener address (``(host, port, ...)``), None for a Unix socket path."""
    return address[1] if isinstance(address, tuple) and len(address) > 1 else None
