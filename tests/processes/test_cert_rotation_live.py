"""Certificate rotation under admission load on the real `dra-webhook serve`, swapped as the kubelet does.

Clients keep sending AdmissionReviews over TLS (verifying the CA) on fresh and keep-alive connections
while `..data` is swapped to new certificates several times: no request may fail, and each new serial
must be presented to new connections (the reload interval is 1 s; no time is asserted).
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
from pathlib import Path

from cryptography import x509

from tests.builders.tls import KubeletVolume
from tests.e2e.waits import eventually as _eventually
from tests.helpers import gpu_pod, review, start_server
from webhook.serve import certs


def _presented_serial(ctx: ssl.SSLContext, port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def test_rotation_under_load_loses_no_request(tmp_path: Path):
    volume = KubeletVolume(tmp_path / "tls", certs.new_ca())
    server = start_server(tmp_path, None, workers=2, threads=4, cert_dir=volume.root)
    ctx = ssl.create_default_context(cafile=str(volume.root / "ca.crt"))
    body = json.dumps(review(gpu_pod(namespace="pilot-a"), namespace="pilot-a")).encode()
    failures: list[str] = []
    done = threading.Event()
    counts = [0, 0]

    def load(index: int, keep_alive: bool) -> None:
        conn = None
        try:
            while not done.is_set():
                try:
                    if conn is None or not keep_alive:
                        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
                    conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    data = resp.read()
                    if resp.status != 200 or json.loads(data)["response"]["allowed"] is not True:
                        failures.append(f"{resp.status} {data[:200]!r}")
                    counts[index % 2] += 1
                except Exception as exc:  # any failed handshake or request counts
                    failures.append(repr(exc))
                    if conn is not None:
                        conn.close()
                    conn = None
                finally:
                    if conn is not None and not keep_alive:
                        conn.close()
                        conn = None
        finally:
            if conn is not None:
                conn.close()

    def some_load_ran() -> None:
        """Both kinds of connection answered a few more requests (progress, not a time slice)."""
        start = list(counts)
        _eventually(lambda: all(c >= s + 5 for c, s in zip(counts, start, strict=True)), "requests to run")

    threads = [threading.Thread(target=load, args=(i, i % 2 == 0)) for i in range(4)]
    try:
        for t in threads:
            t.start()
        for _ in range(3):
            some_load_ran()
            new_serial = volume.publish()
            # Both workers must have switched: several new connections in a row. The reload interval is
            # 1 s; the deadline only catches a server that never switches (no timing is asserted).
            streak = [0]

            def switched(serial: int = new_serial, streak: list[int] = streak) -> bool:
                streak[0] = streak[0] + 1 if _presented_serial(ctx, server.port) == serial else 0
                return streak[0] >= 8

            _eventually(switched, "the new certificate on new connections")
        some_load_ran()
    finally:
        done.set()
        for t in threads:
            t.join(timeout=15)
        server.stop()
    assert failures == []
    assert counts[0] > 10 and counts[1] > 10  # both fresh and keep-alive connections really ran (20 per kind)
