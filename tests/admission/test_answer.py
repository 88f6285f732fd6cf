"""webhook.admission.answer: what the webhook answers for an object no rule can judge."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.helpers import gpu_pod, review
from webhook.admission.answer import handle
from webhook.admission.review import parse_request
from webhook.policy.defaults import default_policy
from webhook.policy.loader import load

NOW = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)


@pytest.mark.rule("max-devices-per-pod")
@pytest.mark.parametrize("phase", ["mutate", "validate"])
def test_a_quantity_that_is_none_is_one_clear_denial_not_rule_errors(phase: str) -> None:
    """Issue 45 item 2: ``nvidia.com/gpu: $GPU_PER_NODE`` made every GPU rule fail (eight "report this to the
    platform team" rule errors). The API server never sends such a Pod (``Quantity.UnmarshalJSON`` refuses it);
    the answer is a code-400 denial naming the field and value, and no rule runs."""
    pod = gpu_pod(namespace="ml-a", resource="vendor.example.com/gpu")
    pod["spec"]["containers"][0]["resources"]["limits"]["vendor.example.com/gpu"] = "$GPU_PER_NODE"
    request = parse_request(review(pod, namespace="ml-a")["request"])
    answer = handle(request, phase, load(default_policy()), None, NOW)
    assert not answer.allowed and answer.code == 400 and answer.verdicts == []
    assert "spec.containers[0].resources.limits[vendor.example.com/gpu]: '$GPU_PER_NODE' is not a quantity" \
        in answer.message
    assert answer.review()["response"]["status"]["details"]["causes"] == [{
        "type": "FieldValueInvalid", "field": "spec.containers[0].resources.limits[vendor.example.com/gpu]",
        "message": answer.causes[0]["message"]}]
    assert "report this" not in str(answer.review())
