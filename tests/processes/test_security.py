"""Security properties of the running server: TLS floor, no plain HTTP, no request data in logs,
safe YAML, and bounded request bodies (chunked included). Loopback only, against the real server."""

from __future__ import annotations

import base64
import json
import re
import socket
import ssl
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.helpers import ROOT, Client, Server, gpu_pod, review
from webhook.policy.loader import PolicyError, load

SECRET = "s3cr3t-token-value"
LIMIT = 7 * 1024 * 1024


def _tls_client(server: Server, maximum: ssl.TLSVersion) -> ssl.SSLContext:
    """A client able to speak old protocols (SECLEVEL 0), so a refusal comes from the server."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(server.ca))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSv1/TLSv1_1 are deprecated: that is the point
        ctx.minimum_version = ssl.TLSVersion.TLSv1
        ctx.maximum_version = maximum
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    return ctx


def _handshake(server: Server, ctx: ssl.SSLContext) -> str:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        return tls.version() or ""


@pytest.mark.parametrize("maximum", [ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1], ids=["TLSv1.0", "TLSv1.1"])
def test_tls_below_1_2_is_refused_by_the_server(live_server: Server, maximum: ssl.TLSVersion):
    with pytest.raises(ssl.SSLError) as err:
        _handshake(live_server, _tls_client(live_server, maximum))
    # the server's protocol_version alert, not a client that could not even offer the version
    assert "ALERT_PROTOCOL_VERSION" in str(err.value) or "alert protocol version" in str(err.value), err.value


def test_same_client_gets_tls_1_2_and_1_3(live_server: Server):
    assert _handshake(live_server, _tls_client(live_server, ssl.TLSVersion.TLSv1_2)) == "TLSv1.2"
    assert _handshake(live_server, _tls_client(live_server, ssl.TLSVersion.TLSv1_3)) == "TLSv1.3"


def _plain(server: Server, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(data)
        received = b""
        try:
            while chunk := raw.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
        return received


@pytest.mark.parametrize("endpoint", ["/validate", "/mutate"])
def test_plain_http_gets_no_admission(live_server: Server, client: Client, endpoint: str):
    body = json.dumps(review(gpu_pod(namespace="pilot-a"), namespace="pilot-a")).encode()
    answer = _plain(live_server, b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (endpoint.encode(), len(body), body))
    assert b"AdmissionReview" not in answer and not answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert client.get("/healthz")[0] == 200  # and the server is fine


def _secret_pod(namespace: str) -> dict:
    pod = gpu_pod(namespace=namespace, resource="vendor.example.com/gpu")
    pod["spec"]["containers"][0]["env"] = [{"name": "API_TOKEN", "value": SECRET}]
    pod["metadata"]["annotations"] = {"note": f"token={SECRET}"}
    return pod


def _secret_object() -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "mig-a"},
            "type": "Opaque", "stringData": {"token": SECRET},
            "data": {"token": base64.b64encode(SECRET.encode()).decode()}}


def test_request_bodies_and_secret_values_are_not_logged(live_server: Server, client: Client):
    """Every kind of answer (deny, warn, patch, allow, malformed, not JSON, error) with a secret inside."""
    before = len(live_server.output())
    sent = []
    for ns in ("mig-a", "pilot-a", "legacy-a"):  # Deny, Warn and Audit stages, with patches on /mutate
        for endpoint in ("/validate", "/mutate"):
            sent.append(client.admit(endpoint, review(_secret_pod(ns), namespace=ns)))
    secret = _secret_object()
    for endpoint in ("/validate", "/mutate"):
        sent.append(client.admit(endpoint, review(secret, namespace="mig-a")))
        sent.append(client.admit(endpoint, review(secret, namespace="mig-a", operation="DELETE", old=secret)))
    # malformed reviews that carry the secret: wrong object kind, bad operation, secret-valued fields
    pod = _secret_pod("mig-a")
    malformed: list[str] = []
    for doc in (review(secret, kind="Pod", namespace="mig-a"),
                dict(review(pod, namespace="mig-a"), request=dict(review(pod)["request"], operation=SECRET)),
                dict(review(pod, namespace="mig-a"), request=dict(review(pod)["request"], kind={"kind": SECRET}))):
        status, _ = client.post_json("/validate", doc)
        assert status == 200
        malformed.append(doc["request"]["uid"])
    for body in (b'{"apiVersion": "admission.k8s.io/v1", "token": "' + SECRET.encode() + b'"',  # not JSON
                 json.dumps({"apiVersion": SECRET, "kind": "AdmissionReview"}).encode(),
                 json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": SECRET}).encode(),
                 json.dumps([SECRET]).encode()):
        status, _, _ = client.request("POST", "/validate", body, {"Content-Type": "application/json"})
        assert status == 400
    assert len(sent) == 10
    # Denials, warnings, malformed requests and rejected bodies are all logged at INFO or above: wait
    # for every one of those lines, so the absence checked below is not just a line still on its way.
    loud = [r["response"]["uid"] for r in sent if not r["response"]["allowed"] or r["response"].get("warnings")]
    assert loud, "some decisions are logged (else this test proves nothing)"
    log = live_server.wait_for_log(
        lambda text: all(f"uid={u}" in text for u in [*loud, *malformed]) and text.count("rejected body") >= 4,
        "the line of every logged request", since=before)
    encoded = base64.b64encode(SECRET.encode()).decode()
    leaks = [line for line in log.splitlines() if SECRET in line or encoded in line]
    assert leaks == []


def test_yaml_policy_tags_are_not_executed(tmp_path: Path):
    marker = tmp_path / "executed"
    policy = tmp_path / "policy"
    policy.mkdir()
    good = (ROOT / "tests" / "data" / "live-policy.yaml").read_text()
    evil = good.replace("metadata:\n  name: live-test",
                        f"metadata:\n  name: !!python/object/apply:os.system ['touch {marker}']")
    assert evil != good
    (policy / "policy.yaml").write_text(evil)
    with pytest.raises(PolicyError) as err:
        load(policy)
    assert "python/object/apply:os.system" in str(err.value)
    assert "policy.yaml:" in str(err.value)
    # and through the CLI platform teams run
    lint = subprocess.run([sys.executable, "-m", "webhook", "lint", str(policy)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert lint.returncode == 1, lint.stdout + lint.stderr
    assert "python/object/apply" in lint.stdout + lint.stderr
    assert not marker.exists()


def _chunked_headers(endpoint: str = "/validate") -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % endpoint.encode())


def _response(tls: ssl.SSLSocket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = tls.recv(65536)
        assert chunk, f"closed without a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
    while len(body) < length:
        chunk = tls.recv(65536)
        assert chunk, "closed mid-body"
        body += chunk
    return head, body


def test_chunked_body_over_the_limit_is_refused_before_it_ends(live_server: Server, client: Client):
    """No Content-Length: 7 MiB + 1 MiB sent in chunks and the body never finished; 413 comes back anyway."""
    raw = socket.create_connection(("127.0.0.1", live_server.port), timeout=20)
    with client.ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(_chunked_headers())
        chunk = b"x" * 65536
        sent = 0
        try:
            while sent < LIMIT + (1 << 20):
                tls.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the server may stop reading once it has refused
        # the terminating 0-chunk is never sent: a server waiting for the whole body would time out here
        head, body = _response(tls)
    assert head.startswith(b"HTTP/1.1 413"), head
    assert "larger than 7 MiB" in json.loads(body)["error"]
    assert client.get("/healthz")[0] == 200


def test_chunked_body_under_the_limit_is_admitted(live_server: Server, client: Client):
    doc = review(gpu_pod(namespace="mig-a", resource="vendor.example.com/gpu"), namespace="mig-a")
    body = json.dumps(doc).encode()
    raw = socket.create_connection(("127.0.0.1", live_server.port), timeout=20)
    with client.ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(_chunked_headers())
        for i in range(0, len(body), 100):
            part = body[i:i + 100]
            tls.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        tls.sendall(b"0\r\n\r\n")
        head, data = _response(tls)
    assert head.startswith(b"HTTP/1.1 200"), head
    resp = json.loads(data)["response"]
    assert resp["uid"] == doc["request"]["uid"] and resp["allowed"] is False


def test_a_value_that_is_no_quantity_is_denied_and_never_logged(live_server: Server, client: Client):
    # Issue 45 item 2: a quantity that is none is answered before any rule runs (code 400 naming the field), so it
    # no longer provokes rule failures; the value reaches the requester in the answer, never the server log.
    before = len(live_server.output())
    pod = gpu_pod(namespace="mig-a")
    pod["spec"]["containers"][0]["resources"]["limits"]["example.com/gpu"] = SECRET  # not a quantity
    doc = review(pod, namespace="mig-a")
    response = client.admit("/validate", doc)["response"]
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "example.com/gpu" in response["status"]["message"]
    client.admit("/validate", review(gpu_pod(namespace="mig-a"), namespace="mig-a"))  # a later request, logged after
    assert SECRET not in live_server.output()[before:]


def _tls12_suites_accepted(server: Server) -> list[str]:
    """Every TLS 1.2 suite this Python's OpenSSL knows, offered one at a time: the ones the server takes."""
    every = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    every.set_ciphers("ALL:@SECLEVEL=0")
    accepted = []
    for suite in sorted({c["name"] for c in every.get_ciphers() if c["protocol"] == "TLSv1.2"}):
        ctx = _tls_client(server, ssl.TLSVersion.TLSv1_2)
        ctx.set_ciphers(f"{suite}:@SECLEVEL=0")
        try:
            _handshake(server, ctx)
        except ssl.SSLError:
            continue
        accepted.append(suite)
    return accepted


def test_tls_1_2_takes_only_forward_secret_aead_suites(live_server: Server):
    """Issue 47 item 6: TLS 1.2 took ECDHE-ECDSA-AES128-SHA256 and ECDHE-ECDSA-AES256-SHA384 (CBC)."""
    accepted = _tls12_suites_accepted(live_server)
    assert accepted, "no TLS 1.2 suite accepted at all"
    assert [s for s in accepted if not (s.startswith(("ECDHE-", "DHE-")) and ("GCM" in s or "CHACHA20" in s))] == []
