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


def _claim(count: object, kind: str = "ResourceClaim") -> dict:
    request = {"name": "gpu", "firstAvailable": [{"name": "big", "deviceClassName": "gpu.example.com",
                                                  "count": count}]} if kind == "sub" else \
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": count}}
    spec = {"devices": {"requests": [request]}}
    if kind == "ResourceClaimTemplate":
        spec = {"spec": spec}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate" if kind == "ResourceClaimTemplate"
            else "ResourceClaim", "metadata": {"name": "c", "namespace": "ml-a"}, "spec": spec}


@pytest.mark.rule("device-count-exceeds")
@pytest.mark.parametrize("phase", ["mutate", "validate"])
@pytest.mark.parametrize(("count", "shown"), [(99.0, "99.0, not an integer"), ("99", "'99', not an integer"),
                                              (True, "true, not an integer"), (2**63, f"{2**63}, past int64")])
@pytest.mark.parametrize(("kind", "field"), [
    ("ResourceClaim", "spec.devices.requests[0].exactly.count"),
    ("ResourceClaimTemplate", "spec.spec.devices.requests[0].exactly.count"),
    ("sub", "spec.devices.requests[0].firstAvailable[0].count")])
def test_a_claim_count_that_is_no_integer_is_one_clear_denial(phase, count, shown, kind, field) -> None:
    """Issue 47 item 6: ``count: 99.0`` or ``"99"`` passed silently (``device-count-exceeds`` skips what is no int).
    The API server refuses such a claim when it decodes it (``ExactDeviceRequest.Count``/``DeviceSubRequest.Count``
    are int64, kubernetes/api resource/v1/types.go); the answer is a code-400 denial naming the field, no rule run."""
    obj = _claim(count, kind)
    request = parse_request(review(obj, namespace="ml-a")["request"])
    answer = handle(request, phase, load(default_policy()), None, NOW)
    assert not answer.allowed and answer.code == 400 and answer.verdicts == []
    assert f"{field} is {shown}" in answer.message and "a device count must be an integer" in answer.message
    assert answer.causes == [{"type": "FieldValueInvalid", "field": field, "message": f"{field} is {shown}"}]


@pytest.mark.parametrize("count", [1, 99, None])
def test_an_integer_or_absent_count_is_judged_by_the_rules(count) -> None:
    request = parse_request(review(_claim(count), namespace="ml-a")["request"])
    answer = handle(request, "validate", load(default_policy()), None, NOW)
    assert "a device count must be an integer" not in answer.message
