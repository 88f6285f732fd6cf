"""A request value never writes a line of its own into the log (issue 47 item 6: ``request.name`` was logged raw, so a
name with a newline forged log lines)."""

from __future__ import annotations

import json
import logging

import pytest

from tests.helpers import ROOT, gpu_pod, review
from webhook.admission.review import loggable
from webhook.policy.loader import load
from webhook.rules.view import OfflineView
from webhook.serve.app import StaticPolicy, create_app

FORGED = "legacy\n2026-12-08 00:00:00,000 INFO webhook.app: validate uid=0 CREATE Pod mig-a/x allowed=True"


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\u2028b", "a\x1b[31mb", "tab\there", "\x85"])
def test_loggable_is_one_printable_line(value):
    out = loggable(value)
    assert out.isprintable() and "\n" not in out and out != value


def test_printable_values_are_logged_as_they_are():
    assert loggable("train-0") == "train-0" and loggable("gpu-été") == "gpu-été" and loggable(42) == "42"


@pytest.mark.parametrize("field", ["name", "uid"])
def test_a_denied_review_with_a_newline_in_a_request_value_is_one_log_line(field, caplog):
    policy = load(ROOT / "tests" / "data" / "live-policy.yaml")
    client = create_app(StaticPolicy(policy), view=OfflineView()).test_client()
    doc = review(gpu_pod("legacy", "mig-a", resource="vendor.example.com/gpu"), namespace="mig-a")
    doc["request"][field] = FORGED
    with caplog.at_level(logging.INFO, logger="webhook.app"):
        resp = client.post("/validate", data=json.dumps(doc), headers={"Content-Type": "application/json"})
    assert resp.status_code == 200 and resp.json["response"]["allowed"] is False
    lines = [r.getMessage() for r in caplog.records if r.name == "webhook.app"]
    assert len(lines) == 1 and "\n" not in lines[0] and "\\n2026-12-08" in lines[0]
