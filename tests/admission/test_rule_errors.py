"""A rule that raises gets its own status, rule-error (Kyverno's RuleStatusError), not its findings' action.

Its action comes from ``spec.enforcement.ruleErrors`` (default Warn), never stronger than the rule's own
action in the stage; exceptions switch it off like any finding of that rule; the server counts it in
``dra_webhook_rule_errors_total{rule}`` and logs the request uid.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT, gpu_pod, review
from webhook.admission.answer import AdmissionResponse, handle
from webhook.admission.review import parse_request
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.loader import load
from webhook.rules.ruleset import standard_rules
from webhook.serve import metrics
from webhook.serve.app import StaticPolicy, create_app

RULE = ids.MAX_DEVICES_PER_POD  # validating, on Pods; any rule would do
NOW = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)


def boom(obj: dict[str, Any], ctx: Any) -> Any:
    raise ValueError("secret-looking value 123")


BROKEN = standard_rules().replaced(RULE, boom)
"""The standard rules with RULE raising (as a rule bug would)."""


def _policy(tmp_path: Path, exceptions: list[dict[str, Any]] | None = None, **enforcement: Any) -> CompiledPolicy:
    doc = yaml.safe_load((ROOT / "tests" / "data" / "live-policy.yaml").read_text())
    doc["spec"].setdefault("enforcement", {}).update(enforcement)
    if exceptions:
        doc["spec"]["exceptions"] = exceptions
    f = tmp_path / "policy.yaml"
    f.write_text(yaml.safe_dump(doc))
    return load(f)


def _validate(policy: CompiledPolicy, namespace: str) -> AdmissionResponse:
    request = parse_request(review(gpu_pod(namespace=namespace), namespace=namespace)["request"])
    return handle(request, "validate", policy, None, NOW, rules=BROKEN)


def test_default_is_warn_with_its_own_status(tmp_path: Path) -> None:
    answer = _validate(_policy(tmp_path), "mig-a")  # migrated: the rule's findings would be denied
    assert answer.allowed
    [v] = [v for v in answer.verdicts if v.rule == RULE]
    assert v.failed and v.status == "rule-error" and v.action.value == "Warn"
    assert answer.warnings == [f"{RULE} (migrated: rule-error): rule {RULE} could not evaluate this object "
                               f"(ValueError); fix: report this to the platform team with the request uid "
                               f"{answer.uid}"]
    assert "secret-looking" not in str(answer.review())  # the exception text may quote request values


def test_deny_fails_closed_but_never_stronger_than_the_rule(tmp_path: Path) -> None:
    policy = _policy(tmp_path, ruleErrors="Deny")
    denied = _validate(policy, "mig-a")
    assert not denied.allowed
    assert denied.message.startswith(f"{RULE} (migrated: rule-error, Deny): rule {RULE} could not evaluate")
    warned = _validate(policy, "pilot-a")  # the rule's own findings only warn in pilot
    assert warned.allowed and [v.action.value for v in warned.verdicts if v.rule == RULE] == ["Warn"]
    audited = _validate(policy, "legacy-a")
    assert audited.allowed and f"rule-error-{RULE}" in audited.review()["response"]["auditAnnotations"]


def test_exceptions_apply_to_rule_errors(tmp_path: Path) -> None:
    excepted = [{"namespaces": ["mig-a"], "rules": [RULE], "reason": "TICKET-1"}]
    answer = _validate(_policy(tmp_path, excepted, ruleErrors="Deny"), "mig-a")  # denied before this change
    assert answer.allowed and answer.warnings == []
    [v] = [v for v in answer.verdicts if v.rule == RULE]
    assert v.failed and v.action.value == "Off" and v.excepted == "TICKET-1"
    assert "TICKET-1" in answer.review()["response"]["auditAnnotations"][f"excepted-{RULE}"]


def test_policy_rejects_off_for_rule_errors(tmp_path: Path) -> None:
    from webhook.policy.loader import PolicyError

    with pytest.raises(PolicyError, match="ruleErrors"):
        _policy(tmp_path, ruleErrors="Off")  # a failure is never silent


def test_server_counts_rule_errors_by_rule_and_logs_the_uid(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(StaticPolicy(_policy(tmp_path)), clock=lambda: NOW, rules=BROKEN)
    client = app.test_client()
    before = metrics.RULE_ERRORS.labels(RULE)._value.get()
    doc = review(gpu_pod(namespace="mig-a"), namespace="mig-a")
    with caplog.at_level(logging.ERROR, logger="webhook.engine"):
        resp = client.post("/validate", json=doc)
    assert resp.status_code == 200 and resp.get_json()["response"]["allowed"] is True
    assert metrics.RULE_ERRORS.labels(RULE)._value.get() == before + 1
    assert f"dra_webhook_rule_errors_total{{rule=\"{RULE}\"}}" in client.get("/metrics").get_data(as_text=True)
    assert [r.getMessage() for r in caplog.records if doc["request"]["uid"] in r.getMessage()] == [
        f"rule {RULE} failed on request uid={doc['request']['uid']} (Pod mig-a/train-0): ValueError"]
