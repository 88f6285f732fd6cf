"""ResourceSlices are never denied (issue 13 item 4): a denial is honoured whatever the failure policy, so
``gated-feature: Deny`` on a slice would stop a DRA driver publishing its devices. The engine caps every
finding on a ResourceSlice at Warn; the same finding on a DeviceClass is still denied."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from tests.helpers import review
from webhook.admission.engine import evaluate
from webhook.admission.review import parse_request
from webhook.policy.compiled import compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.policy.rule_ids import GATED_FEATURE

DATA = Path(__file__).parents[1] / "data" / "gates"
DOC = {
    "apiVersion": "dra-migration.io/v1alpha1",
    "kind": "MigrationPolicy",
    "metadata": {"name": "slices"},
    "spec": {"kubernetesVersion": "1.37", "featureGates": {"DRADeviceTaints": False},
             "enforcement": {"legacy": "Deny", "pilot": "Deny", "migrated": "Deny", "rules": {GATED_FEATURE: "Deny"}}},
}
POLICY = compile_policy(MigrationPolicy.model_validate(DOC), b"slices")


def _tainted_slice() -> dict:
    cases = yaml.safe_load((DATA / "DRADeviceTaints.yaml").read_text())["cases"]
    return copy.deepcopy(next(c["object"] for c in cases if c["object"]["kind"] == "ResourceSlice"))


def test_gated_field_on_a_slice_is_a_warning_not_a_denial() -> None:
    for phase in ("mutate", "validate"):
        decision = evaluate(parse_request(review(_tainted_slice(), namespace="")["request"]), POLICY, phase=phase)
        assert decision.allowed, decision.verdicts
        assert [(v.finding.rule, v.action.value) for v in decision.verdicts] == [(GATED_FEATURE, "Warn")]


def test_the_same_rule_still_denies_other_kinds() -> None:
    cases = yaml.safe_load((DATA / "DRADeviceTaints.yaml").read_text())["cases"]
    others = [c["object"] for c in cases if c["object"]["kind"] != "ResourceSlice"]
    assert others, "the DRADeviceTaints examples cover more kinds than slices"
    decision = evaluate(parse_request(review(copy.deepcopy(others[0]))["request"]), POLICY)
    assert not decision.allowed
    assert [v.finding.rule for v in decision.verdicts if v.action.value == "Deny"] == [GATED_FEATURE]
