"""Who may call: the client-certificate name check and the plain metrics listener (issue 47 item 5).

``serve --client-ca FILE`` makes the TLS handshake require a client certificate signed by that CA
(``webhook.serve.tls``); ``--client-cn NAME`` then also requires that the certificate names NAME, as its
subject CN or one of its DNS SANs. A verified certificate with another name gets a JSON 403 (never an admission
answer) and a WARNING at most every ``LOG_EVERY`` seconds per worker, counting what it did not repeat.

``--metrics-bind`` adds a plain-HTTP listener for the kubelet's probes and Prometheus, which carry no client
certificate: on it only ``GET /healthz``, ``/readyz`` and ``/metrics`` are answered, everything else is a JSON 404.
Which listener a request came in on is told by its socket (``environ["gunicorn.socket"]``): TLS or not.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from webhook.serve import metrics
from webhook.serve.fast_path import WSGIApp

log = logging.getLogger("webhook.callers")

#: What the plain listener serves, to GET and HEAD only.
PLAIN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: Seconds between two WARNINGs about refused callers in one worker.
LOG_EVERY = 10.0


def peer_names(cert: dict[str, Any] | None) -> tuple[str, ...]:
    """The subject CNs and DNS SANs of a verified peer certificate (``SSLSocket.getpeercert()``)."""
    if not cert:
        return ()
    cns = [value for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
    sans = [value for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"]
    return tuple(dict.fromkeys([*cns, *sans]))


class RefusalLog:
    """A WARNING per ``every`` seconds at most, with the number of refusals it stands for."""

    def __init__(self, every: float = LOG_EVERY, clock: Callable[[], float] = time.monotonic) -> None:
        self.every, self.clock = every, clock
        self._lock = threading.Lock()
        self._last = -every
        self._held = 0

    def refused(self, peer: str, names: Iterable[str], expected: str) -> bool:
        """Count one refusal; True when it was logged."""
        with self._lock:
            self._held += 1
            now = self.clock()
            if now - self._last < self.every:
                return False
            count, self._held, self._last = self._held, 0, now
        shown = ", ".join(repr(n)[:80] for n in names) or "no CN or DNS name"
        log.warning("refused %d request(s) with a client certificate not naming %r (last from %s, naming %s); "
                    "next summary in %g s at the earliest", count, expected, peer, shown, self.every)
        return True


def _answer(start_response: Callable[..., Any], status: int, message: str) -> list[bytes]:
    data = orjson.dumps({"error": message, "status": status})
    reason = {403: "FORBIDDEN", 404: "NOT FOUND"}[status]
    start_response(f"{status} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def wrap(app: WSGIApp, client_cn: str | None, refusals: RefusalLog | None = None) -> WSGIApp:
    """``app`` behind the caller checks: plain connections get the probes only; TLS ones the name check."""
    refusals = refusals or RefusalLog()

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        sock = environ.get("gunicorn.socket")
        if not isinstance(sock, ssl.SSLSocket):
            path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "")
            if path in PLAIN_PATHS and method in ("GET", "HEAD"):
                return app(environ, start_response)
            metrics.bad_requests("404").inc()
            return _answer(start_response, 404, f"{method} {path} is not served on the metrics port; it serves "
                                                "GET /healthz, /readyz and /metrics (admission is on the TLS port)")
        if client_cn is not None:
            names = peer_names(sock.getpeercert())
            if client_cn not in names:
                metrics.bad_requests("403").inc()
                refusals.refused(str(environ.get("REMOTE_ADDR", "?")), names, client_cn)
                return _answer(start_response, 403, f"the client certificate does not name {client_cn!r} "
                                                    "(its CN or a DNS SAN); this caller may not use the webhook")
        return app(environ, start_response)

    return wsgi
