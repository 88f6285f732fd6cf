"""Issue 47 item 5 on the real server (gunicorn over TLS, loopback): only callers with the right client certificate.

``serve --client-ca FILE --client-cn NAME --metrics-bind fd://N``: a caller without a client certificate, or with
one from another CA, fails the TLS handshake and gets no HTTP answer at all; a certificate of the right CA naming
someone else gets a JSON 403 (and a WARNING); the right certificate gets its AdmissionReview; the plain metrics
port serves the probes and /metrics to anyone and nothing else. The e2e suite shows it with the real API
server presenting the certificate (tests/e2e/test_client_auth.py).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.pki import PKI
from tests.e2e.waits import eventually
from tests.helpers import ROOT, Client, Server, gpu_pod, review, start_server

NAME = "kube-apiserver"


@pytest.fixture(scope="module")
def callers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Client certificates: the right one, one of the right CA naming someone else, one of another CA."""
    trusted = PKI(tmp_path_factory.mktemp("client-ca"))
    other = PKI(tmp_path_factory.mktemp("other-ca"))
    return {
        "ca": (trusted.ca, trusted.ca),
        "right": trusted.issue("apiserver", NAME),
        "wrong-name": trusted.issue("intruder", "some-pod"),
        "other-ca": other.issue("apiserver", NAME),
    }


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, callers: dict[str, tuple[Path, Path]]):
    server = start_server(tmp_path_factory.mktemp("client-auth"), None, "--client-ca", str(callers["ca"][0]),
                          "--client-cn", NAME, workers=1, client_cert=callers["right"], metrics=True)
    yield server
    server.stop()


def _body() -> bytes:
    return json.dumps(review(gpu_pod(namespace="pilot-a"), namespace="pilot-a")).encode()


def _raw_exchange(server: Server, cert: tuple[Path, Path] | None) -> bytes:
    """POST /validate over a fresh TLS connection; what came back (the error raised if the server refused)."""
    ctx = ssl.create_default_context(cafile=str(server.ca))
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    body = _body()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        received = b""
        while chunk := tls.recv(65536):
            received += chunk
            if b"\r\n\r\n" in received:
                break
        return received


@pytest.mark.parametrize("who", ["no certificate", "other-ca"])
def test_a_caller_without_a_certificate_of_the_ca_fails_the_handshake(guarded: Server, callers, who: str):
    cert = None if who == "no certificate" else callers[who]
    # TLS 1.3: the client's side of the handshake ends before the server checks its (missing) certificate, so
    # the refusal arrives on the first read (an alert, or the connection closed under it); no HTTP byte comes back.
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        _raw_exchange(guarded, cert)
    # One WARNING per 10 s per worker (the first of the two cases writes it; the other may be held back).
    log = guarded.wait_for_log(lambda log: "without a valid client certificate" in log, "the refused-handshake WARNING")
    assert "WARNING" in log and ("PEER_DID_NOT_RETURN_A_CERTIFICATE" in log or "CERTIFICATE_VERIFY_FAILED" in log)


def test_a_certificate_naming_someone_else_gets_a_json_403(guarded: Server, callers):
    c = Client(guarded.port, guarded.ca, cert=callers["wrong-name"])
    try:
        status, headers, data = c.request("POST", "/validate", _body(), {"Content-Type": "application/json"})
        status_metrics, _, metrics_data = c.request("GET", "/metrics")
    finally:
        c.close()
    assert status == 403 and headers["content-type"] == "application/json", (status, headers, data)
    answer = json.loads(data)
    assert answer["status"] == 403 and NAME in answer["error"] and "response" not in answer, answer
    assert status_metrics == 403 and b"dra_webhook" not in metrics_data  # /metrics on TLS: the same check
    log = guarded.wait_for_log(lambda log: "with a client certificate not naming" in log, "the refusal WARNING")
    assert "WARNING" in log and "'some-pod'" in log, log


def test_the_right_certificate_gets_the_admission_answer(guarded: Server):
    client = guarded.client()
    body = client.admit("/validate", json.loads(_body()))
    assert body["response"]["allowed"] in (True, False) and body["response"]["uid"]
    assert client.get("/metrics")[0] == 200


def _plain(port: int, method: str, path: str) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=_body() if method == "POST" else None,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


def test_the_metrics_port_is_plain_and_serves_only_probes_and_metrics(guarded: Server):
    assert guarded.metrics_port is not None
    assert _plain(guarded.metrics_port, "GET", "/healthz")[0] == 200
    status, _, data = _plain(guarded.metrics_port, "GET", "/readyz")
    assert status == 200 and json.loads(data)["ready"] is True
    status, ctype, data = _plain(guarded.metrics_port, "GET", "/metrics")
    assert status == 200 and ctype.startswith("text/plain") and b"# TYPE dra_webhook_" in data
    for method, path in (("POST", "/validate"), ("POST", "/mutate"), ("GET", "/debug")):
        status, ctype, data = _plain(guarded.metrics_port, method, path)
        assert status == 404 and ctype == "application/json" and "metrics port" in json.loads(data)["error"]


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", "serve", "--offline", "--dev-certs", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)


@pytest.mark.parametrize(("content", "needle"), [
    (None, "cannot read the client CA file"),
    (b"not a certificate\n", "holds no PEM certificate"),
    ("serving", "is not a CA certificate"),
])
def test_an_unusable_client_ca_file_is_exit_2(tmp_path: Path, callers, content, needle: str):
    ca = tmp_path / "client-ca.crt"
    if content == "serving":
        ca.write_bytes(callers["right"][0].read_bytes())  # a leaf, not the CA
    elif content is not None:
        ca.write_bytes(content)
    done = _serve("--cert-dir", str(tmp_path / "certs"), "--client-ca", str(ca))
    assert done.returncode == 2, done
    assert needle in done.stderr and str(ca) in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize(("args", "needle"), [
    (["--client-cn", NAME], "--client-cn needs --client-ca"),
    (["--metrics-bind", "0.0.0.0:8443"], "uses the port of --bind"),
    (["--metrics-bind", "9090"], "is not HOST:PORT"),
])
def test_inconsistent_caller_flags_are_exit_2(tmp_path: Path, args: list[str], needle: str):
    done = _serve("--cert-dir", str(tmp_path / "certs"), *args)
    assert done.returncode == 2 and needle in done.stderr, done


def test_a_rotated_client_ca_is_followed_without_a_restart(tmp_path: Path, callers) -> None:
    """The CA file swapped as the kubelet swaps a Secret volume: new connections are judged by the new CA."""
    ca_dir = tmp_path / "client-ca"
    ca_dir.mkdir()
    bundle = ca_dir / "ca.crt"
    bundle.write_bytes(callers["ca"][0].read_bytes())
    server = start_server(tmp_path, None, "--client-ca", str(bundle), workers=1, client_cert=callers["right"])
    try:
        assert server.client().get("/healthz")[0] == 200
        other_ca = callers["other-ca"][0].parent / "ca.crt"
        tmp = ca_dir / ".ca.crt.tmp"
        tmp.write_bytes(other_ca.read_bytes())
        os.replace(tmp, bundle)

        def new_ca_accepted() -> bool:  # the files are looked at on a connection, at most every 0.5 s
            c = Client(server.port, server.ca, cert=callers["other-ca"])
            try:
                return c.get("/healthz")[0] == 200
            finally:
                c.close()
        eventually(new_ca_accepted, "a certificate of the new client CA accepted", 30)
        assert server.output().count("client certificates required: signed by the CA") >= 2
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            _raw_exchange(server, callers["right"])  # and the old CA's is refused
    finally:
        server.stop()
