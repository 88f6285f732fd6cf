"""Issue 47 item 5 in-process: the client CA in the reloaded TLS context, the name check, the plain port's paths.

The same over a real gunicorn and real handshakes: tests/processes/test_client_auth.py.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from tests.e2e.pki import PKI
from webhook.serve import callers
from webhook.serve.certs import generate
from webhook.serve.tls import CertReloader, ClientCAError, load_client_ca


def test_the_client_ca_makes_the_context_require_a_certificate_and_is_reloaded(tmp_path: Path):
    certs = generate(tmp_path / "certs")
    first, second = PKI(tmp_path / "a"), PKI(tmp_path / "b")
    bundle = tmp_path / "client-ca" / "ca.crt"
    bundle.parent.mkdir()
    bundle.write_bytes(first.ca.read_bytes())
    reloader = CertReloader(certs.tls_crt.parent, client_ca=bundle, check_interval=0)
    ctx = reloader.context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    # OpenSSL pads the hex serial to whole bytes (a leading 0 half the time): compare numbers
    assert [int(c["serialNumber"], 16) for c in ctx.get_ca_certs()] == [first.ca_cert.serial_number]
    tmp = bundle.with_suffix(".tmp")
    tmp.write_bytes(second.ca.read_bytes())
    os.replace(tmp, bundle)  # a new inode, as a kubelet swap gives
    assert reloader.reload() is True
    assert [int(c["serialNumber"], 16) for c in reloader.context().get_ca_certs()] == [second.ca_cert.serial_number]
    bundle.write_bytes(b"garbage")  # a broken CA bundle keeps the last good context
    assert reloader.reload() is False and reloader.context().get_ca_certs()
    assert reloader.error and "no PEM certificate" in reloader.error


def test_without_a_client_ca_no_certificate_is_asked_for(tmp_path: Path):
    certs = generate(tmp_path / "certs")
    assert CertReloader(certs.tls_crt.parent).context().verify_mode == ssl.CERT_NONE


def test_a_leaf_is_not_accepted_as_the_client_ca(tmp_path: Path):
    pki = PKI(tmp_path / "pki")
    leaf, _ = pki.issue("client", "kube-apiserver")
    with pytest.raises(ClientCAError, match="is not a CA certificate"):
        load_client_ca(leaf)
    assert len(load_client_ca(pki.ca)) == 1


def test_peer_names_are_the_cns_and_dns_sans():
    cert = {"subject": ((("organizationName", "o"),), (("commonName", "kube-apiserver"),)),
            "subjectAltName": (("DNS", "apiserver.example"), ("IP Address", "10.0.0.1"), ("DNS", "kube-apiserver"))}
    assert callers.peer_names(cert) == ("kube-apiserver", "apiserver.example")
    assert callers.peer_names(None) == () and callers.peer_names({}) == ()


def test_refusals_are_logged_once_per_interval_with_their_count(caplog: pytest.LogCaptureFixture):
    now = [100.0]
    refusals = callers.RefusalLog(every=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "webhook.callers"):
        assert refusals.refused("10.0.0.9", ["some-pod"], "kube-apiserver") is True
        now[0] += 5
        assert refusals.refused("10.0.0.9", ["some-pod"], "kube-apiserver") is False
        assert refusals.refused("10.0.0.8", ["x\nforged line"], "kube-apiserver") is False
        now[0] += 5
        assert refusals.refused("10.0.0.7", ["x\nforged line"], "kube-apiserver") is True
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and lines[0].startswith("refused 1 request(s)") and lines[1].startswith("refused 3 ")
    assert "\n" not in lines[1] and "'x\\nforged line'" in lines[1]


def _call(app: Any, *, tls: bool, path: str = "/validate", method: str = "POST",
          cert: dict[str, Any] | None = None) -> tuple[str, dict[str, Any] | bytes]:
    sock = mock.Mock(spec=ssl.SSLSocket) if tls else mock.Mock()
    if tls:
        sock.getpeercert.return_value = cert
    environ = {"gunicorn.socket": sock, "PATH_INFO": path, "REQUEST_METHOD": method, "REMOTE_ADDR": "10.0.0.9"}
    seen: list[str] = []
    body = b"".join(app(environ, lambda status, headers: seen.append(status)))
    return seen[0], (json.loads(body) if body.startswith(b"{") else body)


def _inner(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [])
    return [b"inner"]


def test_the_name_check_refuses_other_names_with_json_and_lets_the_right_one_through():
    app = callers.wrap(_inner, "kube-apiserver", callers.RefusalLog(every=3600))
    right = {"subject": ((("commonName", "kube-apiserver"),),)}
    by_san = {"subject": ((("commonName", "other"),),), "subjectAltName": (("DNS", "kube-apiserver"),)}
    wrong = {"subject": ((("commonName", "some-pod"),),)}
    assert _call(app, tls=True, cert=right) == ("200 OK", b"inner")
    assert _call(app, tls=True, cert=by_san) == ("200 OK", b"inner")
    for path in ("/validate", "/metrics", "/healthz"):
        status, body = _call(app, tls=True, cert=wrong, path=path, method="GET")
        assert status == "403 FORBIDDEN" and isinstance(body, dict) and body["status"] == 403


def test_the_plain_port_serves_probes_and_metrics_only():
    app = callers.wrap(_inner, None)
    for path in sorted(callers.PLAIN_PATHS):
        assert _call(app, tls=False, path=path, method="GET") == ("200 OK", b"inner")
    for method, path in (("POST", "/validate"), ("POST", "/mutate"), ("GET", "/"), ("POST", "/metrics")):
        status, body = _call(app, tls=False, path=path, method=method)
        assert status == "404 NOT FOUND" and isinstance(body, dict) and "metrics port" in body["error"]
    # Without --client-cn a TLS caller (already verified by the handshake, if --client-ca) is let through.
    assert _call(app, tls=True, cert=None) == ("200 OK", b"inner")
