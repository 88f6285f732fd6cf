"""The WSGI fast path for ``POST /mutate`` and ``/validate`` answers exactly what the flask view answers.

It exists for speed (issue 17: flask's request context, routing and response objects were a large share
of a request); everything it does not take (other methods and paths, bodies without a length or over
the limit) goes through flask with its error handlers. Each case is sent both ways: with a
Content-Length (fast path) and chunked (no length: the flask view).
"""

from __future__ import annotations

import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import pytest

from webhook.admission import answer as admission
from webhook.admission import review
from webhook.policy.loader import load
from webhook.rules.view import OfflineView
from webhook.serve.app import MAX_BODY, StaticPolicy, create_app

ROOT = Path(__file__).resolve().parents[2]
REVIEWS = sorted((ROOT / "bench" / "reviews").glob("*.json"))
NOW = dt.datetime(2026, 12, 15, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def policy() -> Any:
    return load(ROOT / "policies" / "default.yaml")


@pytest.fixture(scope="module")
def client(policy: Any) -> Any:
    return create_app(StaticPolicy(policy), view=OfflineView(), clock=lambda: NOW).test_client()


def post(client: Any, path: str, body: bytes, *, chunked: bool = False, content_type: str = "application/json"
         ) -> Any:
    if chunked:  # no Content-Length, as a chunked request reaches the app from gunicorn
        return client.post(path, input_stream=io.BytesIO(body), headers={"Content-Type": content_type},
                           environ_overrides={"wsgi.input_terminated": True, "CONTENT_LENGTH": ""})
    return client.post(path, data=body, headers={"Content-Type": content_type})


@pytest.mark.parametrize("path", REVIEWS, ids=lambda p: p.stem)
@pytest.mark.parametrize("phase", ["mutate", "validate"])
def test_fast_path_answers_byte_for_byte_what_handle_and_the_flask_view_answer(client: Any, policy: Any,
                                                                             path: Path, phase: str) -> None:
    body = path.read_bytes()
    fast = post(client, f"/{phase}", body)
    slow = post(client, f"/{phase}", body, chunked=True)
    expected = admission.handle(review.parse(body), phase, policy, OfflineView(), NOW).body()
    assert fast.status_code == slow.status_code == 200
    assert fast.data == slow.data == expected
    assert fast.headers["Content-Type"] == "application/json"
    assert int(fast.headers["Content-Length"]) == len(expected)


@pytest.mark.parametrize(("body", "content_type", "status"), [
    (b'{"kind": "AdmissionReview"}', "text/plain", 415),
    (b"", "application/json", 400),
    (b"not json", "application/json", 400),
    (b"[]", "application/json; charset=utf-8", 400),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                 "request": {"uid": "u1", "kind": {"kind": "Pod"}, "operation": "NOPE"}}).encode(),
     "application/json", 200),  # a malformed request inside a review: a 400 AdmissionReview answer
])
def test_errors_are_the_same_on_both_paths(client: Any, body: bytes, content_type: str, status: int) -> None:
    fast = post(client, "/validate", body, content_type=content_type)
    slow = post(client, "/validate", body, content_type=content_type, chunked=True)
    assert fast.status_code == slow.status_code == status
    assert fast.status == slow.status  # the same reason phrase: werkzeug's table on both paths
    assert fast.data == slow.data
    assert fast.headers["Content-Type"] == "application/json"


def test_what_the_fast_path_does_not_take_gets_flasks_answers(client: Any) -> None:
    assert client.get("/mutate").status_code == 405
    assert client.get("/mutate").json["status"] == 405
    too_big = client.post("/validate", input_stream=io.BytesIO(b"x"), headers={"Content-Type": "application/json"},
                          environ_overrides={"CONTENT_LENGTH": str(MAX_BODY + 1)})
    assert too_big.status_code == 413 and too_big.json["status"] == 413


def test_an_unexpected_error_is_a_json_500_on_the_fast_path(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")
    monkeypatch.setattr(admission, "handle", broken)
    resp = post(client, "/validate", REVIEWS[0].read_bytes())
    assert resp.status_code == 500
    assert resp.json == {"error": "internal error; see the webhook's logs", "status": 500}


def test_posts_with_a_length_skip_flask_and_posts_without_one_do_not(policy: Any) -> None:
    app = create_app(StaticPolicy(policy), view=OfflineView(), clock=lambda: NOW)
    calls: list[str] = []
    view = app.view_functions["validate"]

    def counted() -> Any:
        calls.append("flask")
        return view()
    app.view_functions["validate"] = counted
    client = app.test_client()
    body = REVIEWS[0].read_bytes()
    assert post(client, "/validate", body).status_code == 200
    assert calls == []
    assert post(client, "/validate", body, chunked=True).status_code == 200
    assert calls == ["flask"]
