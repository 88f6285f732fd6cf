"""The compiled mode's narrowing matchCondition (webhook.compile.narrow): the workloads webhooks are sent only what
the compiled admission policies leave to them, never less than the rules still in the webhook act on.

Evaluated with ``common-expression-language`` like tests/test_match_conditions.py (cel-go's semantics for
``has()``; an evaluation error fails the test). Beside the shipped coverage, the tests use coverages other
branches may reach (everything compiled but the gate checks; everything compiled), so the narrowing is proven
for them before they land. The real API server runs it in tests/e2e/test_compiled_reconcile.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cel
import pytest
import yaml

from tests.test_match_conditions import (
    CORPUS,
    NOW,
    POLICY_VARIANTS,
    TEMPLATE_AT,
    admission_request,
    container,
    request,
    wrap,
)
from webhook import engine
from webhook.cli import main
from webhook.compile import coverage, narrow
from webhook.rules import ids
from webhook.rules.ruleset import RuleSet, standard_rules
from webhook.view import OfflineView

ROOT = Path(__file__).resolve().parent.parent
GPU = {"limits": {"nvidia.com/gpu": "1"}}
CLAIMED = {"claims": [{"name": "gpu"}]}
CLAIM_RULES = {ids.DEVICE_COUNT_EXCEEDS, ids.ALLOCATION_MODE_ALL, ids.ADMIN_ACCESS_NAMESPACE,
               ids.TOLERATION_TOO_BROAD, ids.NONSTANDARD_NUMA_ATTRIBUTE, ids.INJECT_DEVICE_TOLERATIONS,
               ids.DEVICE_CLASS_TAKEOVER}
COVERAGES: dict[str, tuple[set[str], set[str]]] = {
    "shipped": (set(coverage.NOT_COMPILED), set(coverage.COMPILED)),
    "gates-and-claims-left": ({ids.GATED_FEATURE, *CLAIM_RULES}, set(ids.RULE_IDS) - {ids.GATED_FEATURE, *CLAIM_RULES}),
    "all-compiled": (set(), set(ids.RULE_IDS)),
}
_PROGRAMS: dict[str, Any] = {}


def narrowed(name: str, req: dict[str, Any], obj: Any) -> bool:
    if name not in _PROGRAMS:
        _PROGRAMS[name] = cel.compile(narrow.expression(*COVERAGES[name]))
    value = _PROGRAMS[name].execute({"request": req, "object": obj, "oldObject": None})
    assert isinstance(value, bool)
    return value


def test_every_rule_id_has_a_predicate_and_residuals_are_rules():
    assert set(narrow.FIRES) == set(ids.RULE_IDS)
    assert set(narrow.RESIDUAL) <= set(coverage.COMPILED) | set(coverage.NOT_COMPILED)
    assert all(atoms <= set(narrow.ATOMS) for atoms in [*narrow.FIRES.values(), *narrow.RESIDUAL.values()])


@pytest.mark.parametrize("name", list(COVERAGES))
def test_kinds_only_the_webhook_decides_are_always_sent(name):
    for kind, group, version in (("JobSet", "jobset.x-k8s.io", "v1alpha2"), ("PyTorchJob", "kubeflow.org", "v1"),
                                 ("PodGroup", "scheduling.k8s.io", "v1beta1"), ("MyTrainer", "example.com", "v1")):
        assert narrowed(name, request(kind, group=group, version=version), {"kind": kind, "spec": {}})


def test_a_legacy_name_pod_goes_to_the_webhook_until_steering_is_compiled():
    pod = wrap("Pod", {"containers": [container(**GPU)]})
    assert narrowed("shipped", request("Pod"), pod)  # steer-node-pool and unmapped-extended-resource are left
    assert not narrowed("gates-and-claims-left", request("Pod"), pod)
    assert not narrowed("all-compiled", request("Pod"), pod)


@pytest.mark.parametrize("kind", list(TEMPLATE_AT))
def test_claims_stay_with_the_webhook_even_when_every_rule_is_compiled(kind):
    """track-rollout's compiled policies leave specs with claims (``RESIDUAL``); gates read them too."""
    spec = {"containers": [container(**CLAIMED)], "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]}
    for name in COVERAGES:
        assert narrowed(name, request(kind), wrap(kind, spec)), name


def test_gated_fields_stay_while_gated_feature_is_left():
    group = wrap("Deployment", {"containers": [container()], "schedulingGroup": {"podGroupName": "g"}})
    assert narrowed("gates-and-claims-left", request("Deployment"), group)
    job = wrap("Job", {"containers": [container()], "restartPolicy": "Never"})
    job["spec"]["scheduling"] = {"podGroupTemplates": []}
    assert narrowed("gates-and-claims-left", request("Job"), job)
    assert not narrowed("all-compiled", request("Job"), job)


def _rules(left: set[str]) -> RuleSet:
    return RuleSet(tuple(r for r in standard_rules().rules if r.id in left))


@pytest.mark.parametrize("name", list(COVERAGES))
def test_every_corpus_object_a_rule_left_to_the_webhook_acts_on_is_sent(name):
    """The corpus of tests/test_match_conditions.py, every policy variant, only the rules not compiled: what
    they would report or patch is sent."""
    left, _ = COVERAGES[name]
    rules = _rules(left)
    checked = 0
    for origin, obj, operation, old, kind in CORPUS:
        if obj["kind"] not in TEMPLATE_AT or (kind and kind.get("kind") != obj["kind"]):
            continue
        group, _, version = obj.get("apiVersion", "v1").rpartition("/")
        req = request(obj["kind"], operation, group=group, version=version)
        areq = admission_request(obj, operation, old, kind)
        for phase in ("mutate", "validate"):
            for label, policy in POLICY_VARIANTS:
                d = engine.evaluate(areq, policy, OfflineView(), phase, NOW, rules=rules)
                if d.verdicts or d.patch or not d.allowed:
                    assert narrowed(name, req, obj), f"{origin}: {name} drops a {obj['kind']} ({label}, {phase})"
                    checked += 1
                    break
    assert checked > 0 or not left


def test_narrow_webhooks_adds_the_condition_to_the_workloads_webhooks_only(tmp_path, capsys):
    assert main(["compile", "--webhook-config", str(ROOT / "deploy" / "base" / "webhooks.yaml"),
                 "--narrow-webhooks"]) == 0
    docs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    configs = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
    assert len(configs) == 2
    for doc in configs:
        for hook in doc["webhooks"]:
            names = [c["name"] for c in hook["matchConditions"]]
            assert (narrow.CONDITION_NAME in names) == (hook["name"] in narrow.NARROWED_HOOKS), hook["name"]
            if hook["name"] in narrow.NARROWED_HOOKS:
                assert hook["matchConditions"][-1] == narrow.condition()
    assert any(d["kind"] == "ValidatingAdmissionPolicy" for d in docs)


def test_narrow_webhooks_needs_the_configurations(capsys):
    assert main(["compile", "--narrow-webhooks"]) == 2
    assert "--narrow-webhooks needs --webhook-config" in capsys.readouterr().err


def test_a_pod_asking_an_implicit_class_name_goes_to_the_webhook_when_only_claims_are_compiled():
    """device-class-not-allowed is compiled for claims and templates only: a Pod's implicit DeviceClass name is its
    ``RESIDUAL``, sent even when every other rule were compiled; a legacy name is not."""
    asked = {"limits": {"deviceclass.resource.kubernetes.io/gpu.example.com": "1"}}
    implicit = wrap("Pod", {"containers": [container(**asked)]})
    legacy = wrap("Pod", {"containers": [container(**GPU)]})
    assert narrowed("all-compiled", request("Pod"), implicit)
    assert not narrowed("all-compiled", request("Pod"), legacy)
