"""The real server (gunicorn over TLS) under hostile input (issue 47 items 1 and 6): a worst-case review gets a clear
answer and the server stays up; gunicorn's own refusals are JSON; a request value never forges a log line."""

from __future__ import annotations

import json
import re
import socket
import ssl

import pytest

from tests.helpers import Server, gpu_pod, review
from webhook.admission import budget


def _raw(server: Server, data: bytes) -> tuple[bytes, bytes]:
    """Send ``data`` on a fresh TLS connection; the answer's head and body (the server closes after an error)."""
    ctx = ssl.create_default_context(cafile=str(server.ca))
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(data)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, body


def _with_field(name: str, value: bytes) -> tuple[str, bytes]:
    doc = review(gpu_pod(name, "pilot-a"), namespace="pilot-a")
    doc["request"]["object"]["spec"]["containers"][0]["extra"] = "FIELD"
    return doc["request"]["uid"], json.dumps(doc).encode().replace(b'"FIELD"', value)


def _next_review_is_answered(server: Server) -> None:
    client = server.client()
    answer = client.admit("/mutate", review(gpu_pod("next", "pilot-a"), namespace="pilot-a"))
    assert answer["response"]["allowed"] is True and answer["response"]["patch"]


@pytest.mark.parametrize(("case", "code", "says"), [
    ("flat", 413, "JSON values, more than the webhook's limit"),
    ("deep", 400, "levels deep, more than the webhook's limit of 250"),
])
def test_a_worst_case_review_is_answered_clearly_and_the_server_stays_up(live_server: Server, case, code, says):
    if case == "flat":  # the 7 MiB review: a flat list of empty objects (547 MB peak for one, before)
        uid, body = _with_field("flat", b"[]")
        n = (budget.MAX_BODY - len(body)) // 3
        uid, body = _with_field("flat", b"[" + b",".join([b"{}"] * n) + b"]")
        assert len(body) <= budget.MAX_BODY
    else:  # 330-1,024 levels skipped the mutation with a traceback, before
        uid, body = _with_field("deep", b'{"x":' * 999 + b"{}" + b"}" * 999)
    since = len(live_server.output())
    status, _, data = live_server.client().request("POST", "/mutate", body, {"Content-Type": "application/json"})
    assert status == 200
    answer = json.loads(data)["response"]
    assert answer["uid"] == uid and answer["allowed"] is False
    assert answer["status"]["code"] == code and says in answer["status"]["message"]
    _next_review_is_answered(live_server)
    log = live_server.wait_for_log(lambda text: uid in text, "the refusal's log line", since)
    assert "Traceback" not in log and "RecursionError" not in log


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GARBAGE\r\n\r\n", 400),  # not a request line
    (b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),  # request line over gunicorn's 4094
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),  # a field over 8190
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad[Name]: 1\r\n\r\n", 400),  # not a header name
    (b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 400),  # no such HTTP version
])
def test_what_gunicorn_refuses_before_the_app_is_answered_in_json(live_server: Server, request_bytes, status):
    head, body = _raw(live_server, request_bytes)
    assert head.startswith(b"HTTP/1.1 %d " % status), head
    assert re.search(rb"(?im)^content-type: application/json\r?$", head), head
    doc = json.loads(body)
    assert doc["status"] == status and doc["error"]
    _next_review_is_answered(live_server)


def test_a_request_name_with_a_newline_is_one_log_line(live_server: Server):
    forged = "legacy\n2026-12-08 00:00:00,000 INFO webhook.app: validate uid=forged CREATE Pod mig-a/x allowed=True"
    doc = review(gpu_pod("legacy", "mig-a", resource="vendor.example.com/gpu"), namespace="mig-a")
    doc["request"]["name"] = forged
    uid = doc["request"]["uid"]
    since = len(live_server.output())
    answer = live_server.client().admit("/validate", doc)
    assert answer["response"]["allowed"] is False
    log = live_server.wait_for_log(lambda text: uid in text, "the denial's log line", since)
    assert "uid=forged" in log  # the forged text is there, escaped, on the denial's own line
    assert not re.search(r"(?m)^2026-12-08 00:00:00,000 INFO", log)
    (line,) = [ln for ln in log.splitlines() if uid in ln]
    assert "mig-a/legacy\\n2026-12-08" in line
