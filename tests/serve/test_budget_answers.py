"""The structural budget as the app answers it (issue 47 item 1): HTTP 413 for a body over the size limit; a review
with too many values or nested too deep is a denial with code 413 or 400 that echoes its uid; without a readable
uid, the HTTP status with a JSON error. The same on the fast path (Content-Length) and through flask (chunked)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from tests.helpers import gpu_pod, review
from webhook.admission import budget
from webhook.rules.view import OfflineView
from webhook.serve.app import StaticPolicy, create_app


@pytest.fixture(scope="module")
def client() -> Any:
    from tests.helpers import ROOT
    from webhook.policy.loader import load

    policy = load(ROOT / "tests" / "data" / "live-policy.yaml")
    return create_app(StaticPolicy(policy), view=OfflineView()).test_client()


def _post(client: Any, body: bytes, chunked: bool) -> Any:
    if chunked:
        return client.post("/mutate", input_stream=io.BytesIO(body), headers={"Content-Type": "application/json"},
                           environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": ""})
    return client.post("/mutate", data=body, headers={"Content-Type": "application/json"})


def _with_field(value: bytes) -> tuple[str, bytes]:
    doc = review(gpu_pod("big", "pilot-a"), namespace="pilot-a")
    doc["request"]["object"]["spec"]["containers"][0]["extra"] = "FIELD"
    return doc["request"]["uid"], json.dumps(doc).encode().replace(b'"FIELD"', value)


MANY = b"[" + b",".join([b"{}"] * budget.MAX_VALUES) + b"]"
DEEP = b"[" * 300 + b"]" * 300


@pytest.mark.parametrize("chunked", [False, True], ids=["fast-path", "flask"])
@pytest.mark.parametrize(("value", "code", "says"), [
    (MANY, 413, f"more than the webhook's limit of {budget.MAX_VALUES:,} per request"),
    (DEEP, 400, "levels deep, more than the webhook's limit of 250"),
], ids=["too-many-values", "too-deep"])
def test_a_review_over_the_budget_is_denied_with_its_uid(client, value, code, says, chunked):
    uid, body = _with_field(value)
    resp = _post(client, body, chunked)
    assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/json"
    answer = resp.json["response"]
    assert answer["uid"] == uid and answer["allowed"] is False
    assert answer["status"]["code"] == code and says in answer["status"]["message"]
    assert "patch" not in answer


@pytest.mark.parametrize("chunked", [False, True], ids=["fast-path", "flask"])
def test_without_a_readable_uid_the_answer_is_the_http_status(client, chunked):
    resp = _post(client, b'{"kind": "AdmissionReview", "request": ' + MANY + b"}", chunked)
    assert resp.status_code == 413 and resp.json["status"] == 413
    assert "refused unparsed" in resp.json["error"]
    resp = _post(client, DEEP, chunked)
    assert resp.status_code == 400 and "nests 300 levels deep" in resp.json["error"]


def test_a_body_over_the_size_limit_is_413_json(client):
    """(Chunked, the real server's answer: tests/processes/test_security.py.)"""
    resp = _post(client, b" " * (budget.MAX_BODY + 1), False)
    assert resp.status_code == 413 and resp.json["status"] == 413
    assert "larger than 7 MiB" in resp.json["error"]


def test_the_next_normal_review_is_answered(client):
    _post(client, _with_field(MANY)[1], False)
    doc = review(gpu_pod("next", "pilot-a"), namespace="pilot-a")
    resp = _post(client, json.dumps(doc).encode(), False)
    assert resp.status_code == 200 and resp.json["response"]["allowed"] is True and resp.json["response"]["patch"]
