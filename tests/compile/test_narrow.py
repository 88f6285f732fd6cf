"""The compiled mode's narrowing matchCondition (webhook.compile.narrow): the workloads webhooks are sent only what
the compiled admission policies leave to them, never less than the rules still in the webhook act on.

Evaluated with ``common-expression-language`` like tests/deploy/test_match_conditions.py (cel-go's semantics for
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

from tests.builders.match_conditions import (
    CORPUS,
    NOW,
    POLICY_VARIANTS,
    TEMPLATE_AT,
    admission_request,
    container,
    request,
    wrap,
)
from webhook.admission import engine
from webhook.cli import main
from webhook.commands import load_policy
from webhook.compile import coverage, narrow
from webhook.policy import rule_ids as ids
from webhook.policy.defaults import default_policy
from webhook.rules.ruleset import RuleSet, standard_rules
from webhook.rules.view import OfflineView

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_HOOKS = {h["name"]: h for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "webhooks.yaml").read_text())
                 if d for h in d["webhooks"]}
GPU = {"limits": {"nvidia.com/gpu": "1"}}
CLAIMED = {"claims": [{"name": "gpu"}]}
CLAIM_RULES = {ids.DEVICE_COUNT_EXCEEDS, ids.ALLOCATION_MODE_ALL, ids.ADMIN_ACCESS_NAMESPACE,
               ids.TOLERATION_TOO_BROAD, ids.NONSTANDARD_NUMA_ATTRIBUTE, ids.INJECT_DEVICE_TOLERATIONS,
               ids.DEVICE_CLASS_TAKEOVER}
COVERAGES: dict[str, tuple[set[str], set[str]]] = {
    "shipped": (set(coverage.NOT_COMPILED), set(coverage.COMPILED)),
    "gates-and-claims-left": ({ids.GATED_FEATURE, *CLAIM_RULES}, set(ids.RULE_IDS) - {ids.GATED_FEATURE, *CLAIM_RULES}),
    "all-compiled": (set(), set(ids.RULE_IDS)),
    # the shipped coverage for a policy switching unsatisfiable-claim off (enforcement.rules: Off)
    "unsatisfiable-off": (set(coverage.NOT_COMPILED) - {ids.UNSATISFIABLE_CLAIM}, set(coverage.COMPILED)),
}
_PROGRAMS: dict[str, Any] = {}


def narrowed(name: str, req: dict[str, Any], obj: Any, own: frozenset[str] = frozenset()) -> bool:
    """The condition for coverage ``name`` and a policy owning ``own``, on ``obj``."""
    key = f"{name} {sorted(own)}"
    if key not in _PROGRAMS:
        _PROGRAMS[key] = cel.compile(narrow.expression(*COVERAGES[name], own=own))
    value = _PROGRAMS[key].execute({"request": req, "object": obj, "oldObject": None})
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


OWN = frozenset({"example.com/gpu", "nvidia.com/gpu"})
NARROWED_KINDS = [k for kinds in narrow.LAYOUT_KINDS.values() for k in kinds]


def test_a_template_asking_only_the_policys_own_names_stays_off_the_webhook():
    """unmapped-extended-resource (left to the webhook) acts on no name the policy owns: a template asking a served
    or a legacy name is the compiled policies' alone; without the policy's names, any extended resource is sent."""
    for asked in ({"nvidia.com/gpu": "1"}, {"example.com/gpu": "2"}, {"example.com/gpu": "1", "cpu": "2"}):
        for kind in NARROWED_KINDS:
            obj = wrap(kind, {"containers": [container(limits=asked)]})
            assert narrowed("shipped", request(kind), obj), (kind, asked)
            assert narrowed("shipped", request(kind), obj, OWN) == (kind == "Pod"), (kind, asked)


def test_a_pod_asking_an_owned_name_goes_to_the_webhook_while_unsatisfiable_claim_is_on():
    """unsatisfiable-claim (left to the webhook: it needs the ResourceSlices) judges a Pod's extended resources that a
    DeviceClass maps, the policy's own names first: a Pod asking more example.com/gpu than any node has is warned
    about, so it is sent; only a policy that switches the rule off keeps it from the webhook."""
    from tests.builders.satisfiable import EXAMPLE_DRIVER, device_class, example_slice
    from webhook.offline.views import StaticView

    policy = load_policy(default_policy())
    view = StaticView(device_classes=[device_class("gpu.example.com", f"device.driver == '{EXAMPLE_DRIVER}'",
                                                   "example.com/gpu")],
                      resource_slices=[example_slice("node-1", 2)])
    pod = wrap("Pod", {"containers": [container(limits={"example.com/gpu": "8"})]})
    d = engine.evaluate(admission_request(pod), policy, view, "validate", NOW,
                        rules=_rules(set(coverage.NOT_COMPILED)))
    assert [v.finding.rule for v in d.verdicts] == [ids.UNSATISFIABLE_CLAIM]
    assert narrowed("shipped", request("Pod"), pod, narrow.owned(policy))
    assert not narrowed("unsatisfiable-off", request("Pod"), pod, narrow.owned(policy))


def test_a_name_the_policy_does_not_own_goes_to_the_webhook():
    """A retired name outside the policy's resources, in limits or requests, of a container or an init
    container, beside owned ones: the webhook may find it unmapped."""
    other = {"limits": {"example.com/gpu": "1", "vendor.example.com/fpga": "1"}}
    init = {"initContainers": [container(requests={"amd.com/gpu": "1"})], "containers": [container(**GPU)]}
    for kind in NARROWED_KINDS:
        assert narrowed("shipped", request(kind), wrap(kind, {"containers": [container(**other)]}), OWN), kind
        assert narrowed("shipped", request(kind), wrap(kind, init), OWN), kind


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
    """The corpus of tests/builders/match_conditions.py, every policy variant, only the rules not compiled: what
    they would report or patch is sent by the condition narrowed for that policy (its owned names)."""
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
                    assert narrowed(name, req, obj, narrow.owned(policy)), \
                        f"{origin}: {name} drops a {obj['kind']} ({label}, {phase})"
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
                assert hook == narrow.narrow_hook(SHIPPED_HOOKS[hook["name"]], load_policy(default_policy()))
                assert narrow.USES_DEVICES not in names
    assert any(d["kind"] == "ValidatingAdmissionPolicy" for d in docs)


def _evaluate(hook: dict[str, Any], req: dict[str, Any], obj: Any) -> bool:
    """Every matchCondition of ``hook`` is true (as the API server: all evaluated, any false skips)."""
    return all(cel.compile(c["expression"]).execute({"request": req, "object": obj, "oldObject": None})
               for c in hook["matchConditions"])


def test_not_compiled_takes_the_place_of_uses_devices_and_keeps_it_for_other_kinds():
    """One condition walks a Pod's containers, not two; a workload CRD is still sent only when uses-devices would
    send it (a JobSet without devices is not), and narrowing again (another policy) replaces the condition, keeping
    the uses-devices it replaced."""
    policy = load_policy(default_policy())
    for name in narrow.NARROWED_HOOKS:
        shipped = SHIPPED_HOOKS[name]
        hook = narrow.narrow_hook(shipped, policy)
        names = [c["name"] for c in hook["matchConditions"]]
        assert names == [narrow.CONDITION_NAME if n == narrow.USES_DEVICES else n
                         for n in (c["name"] for c in shipped["matchConditions"])], name
        again = narrow.narrow_hook(hook, None)
        assert [c["name"] for c in again["matchConditions"]] == names
        assert narrow.narrowed_names([{"webhooks": [again]}]) == frozenset()
        for h in (hook, again):
            jobset = request("JobSet", group="jobset.x-k8s.io", version="v1alpha2")
            plain = wrap("JobSet", {"containers": [container()]})
            gpu = wrap("JobSet", {"containers": [container(**GPU)]})
            assert not _evaluate(h, jobset, plain) and _evaluate(h, jobset, gpu), name
            owned = wrap("Deployment", {"containers": [container(limits={"example.com/gpu": "1"})]})
            foreign = wrap("Deployment", {"containers": [container(limits={"amd.com/gpu": "1"})]})
            deployment = request("Deployment")
            assert _evaluate(h, deployment, foreign) and _evaluate(h, deployment, owned) == (h is again), name
            assert not _evaluate(h, deployment, wrap("Deployment", {"containers": [container()]})), name
            assert not _evaluate(h, request("Pod"), wrap("Pod", {"containers": [container()]})), name


def test_narrow_webhooks_narrows_for_the_policy_given(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text((ROOT / "policies" / "default.yaml").read_text().replace(
        "legacyNames: [vendor.example.com/gpu]", "legacyNames: [vendor.example.com/gpu, nvidia.com/gpu]"))
    assert main(["compile", "--policy", str(policy), "--webhook-config", str(ROOT / "deploy" / "base" /
                 "webhooks.yaml"), "--narrow-webhooks"]) == 0
    configs = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d and d["kind"].endswith("Configuration")]
    assert narrow.narrowed_names(configs) == {"example.com/gpu", "vendor.example.com/gpu", "nvidia.com/gpu"}


def test_the_installed_narrowing_is_read_back_and_drift_named(tmp_path):
    """The reconciler's guard: the names an installed condition keeps from the webhook; a changed policy that no
    longer owns one, or switches a rule back on, makes it stale; one that switches a rule off does not (sent more)."""
    shipped = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "webhooks.yaml").read_text()) if d]
    source = (ROOT / "policies" / "default.yaml").read_text()
    before = load_policy(ROOT / "policies" / "default.yaml")
    configs = narrow.narrow_configs(shipped, before)
    assert narrow.narrowed_names(configs) == narrow.owned(before) == {"example.com/gpu", "vendor.example.com/gpu"}
    assert narrow.drift(configs, before) == []
    assert narrow.narrowed_names(narrow.narrow_configs(shipped, None)) == frozenset()  # narrowed, owning nothing
    assert narrow.narrowed_names(shipped) is None and narrow.drift(shipped, before) == []  # not narrowed at all

    def edited(old: str, new: str) -> Any:
        path = tmp_path / "policy.yaml"
        path.write_text(source.replace(old, new))
        return load_policy(path)

    dropped = edited("legacyNames: [vendor.example.com/gpu]", "legacyNames: []")
    assert [p.split(" keeps Pods asking for ")[1].split(" from")[0] for p in narrow.drift(configs, dropped)] == \
        ["vendor.example.com/gpu"] * 2
    off = edited("unsatisfiable-claim: Warn", "unsatisfiable-claim: Off")
    assert narrow.switched_off(off) == {ids.UNSATISFIABLE_CLAIM}
    assert narrow.drift(configs, off) == []  # narrowed with the rule on: sends more than it needs
    narrowed_off = narrow.narrow_configs(shipped, off)
    assert narrow.drift(narrowed_off, off) == []
    assert [p.endswith("another version's narrowing)") for p in narrow.drift(narrowed_off, before)] == [True, True]



UNMAPPED_POLICY = """\
apiVersion: dra-migration.io/v1alpha1
kind: MigrationPolicy
metadata: {name: narrow-owned}
spec:
  kubernetesVersion: "1.37"
  resources:
  - {name: example.com/gpu, deviceClassName: gpu.example.com, legacyNames: [vendor.example.com/gpu]}
  - {name: example.com/fpga, deviceClassName: fpga.example.com}
  retiredResourceNames: ["*.com/*"]
  defaultStage: migrated
"""


def test_owned_names_are_exactly_those_unmapped_extended_resource_never_acts_on(tmp_path):
    """``narrow.owned`` against the rule itself (no cluster data: only the policy counts): in a migrated cohort
    what the rule flags is sent (a retired name, a legacy one of no resource, an implicit class name), and a name
    the policy owns is neither flagged nor sent (unsatisfiable-claim switched off)."""
    path = tmp_path / "policy.yaml"
    path.write_text(UNMAPPED_POLICY)
    policy = load_policy(path)
    own = narrow.owned(policy)
    assert own == {"example.com/gpu", "vendor.example.com/gpu", "example.com/fpga"}
    foreign = {"nvidia.com/gpu", "amd.com/gpu", "example.com/gpu-shared",
               "deviceclass.resource.kubernetes.io/other.example.com"}
    rules = _rules({ids.UNMAPPED_EXTENDED_RESOURCE})
    for name in sorted(own | foreign | {"deviceclass.resource.kubernetes.io/gpu.example.com"}):
        pod = wrap("Pod", {"containers": [container(limits={name: "1"})]})
        d = engine.evaluate(admission_request(pod), policy, OfflineView(), "validate", NOW, rules=rules)
        sent = narrowed("unsatisfiable-off", request("Pod"), pod, own)
        assert bool(d.verdicts) == (name in foreign), name
        assert sent == (name not in own), name  # the own class's implicit name: device-class-not-allowed's residual


def test_drift_accepts_a_condition_that_switches_fewer_rules_off(tmp_path):
    """A narrowing for a policy with fewer rules off sends more than needed: no drift; one for a policy with more
    rules off than the current one sends less: drift. A list naming an implicit class name (d02d716 listed them) is
    no drift: the implicit atom sends such names whatever the list says."""
    shipped = [d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "webhooks.yaml").read_text()) if d]
    source = (ROOT / "policies" / "default.yaml").read_text()

    def off(*rules: str) -> Any:
        path = tmp_path / "policy.yaml"
        lines = "".join(f"      {r}: Off\n" for r in rules)
        path.write_text(source.replace("      unsatisfiable-claim: Warn\n", lines))
        return load_policy(path)

    one = off(ids.UNSATISFIABLE_CLAIM)
    two = off(ids.UNSATISFIABLE_CLAIM, ids.UNMAPPED_EXTENDED_RESOURCE)
    assert narrow.switched_off(two) == {ids.UNSATISFIABLE_CLAIM, ids.UNMAPPED_EXTENDED_RESOURCE}
    assert narrow.drift(narrow.narrow_configs(shipped, one), two) == []
    assert len(narrow.drift(narrow.narrow_configs(shipped, two), one)) == 2
    implicit = narrow.narrow_configs(shipped, one)
    for doc in implicit:
        for cond in (c for h in doc["webhooks"] for c in h.get("matchConditions", []) if c["name"] == "not-compiled"):
            cond["expression"] = cond["expression"].replace(
                "['example.com/gpu',", "['deviceclass.resource.kubernetes.io/gpu.example.com', 'example.com/gpu',")
    assert narrow.drift(implicit, one) == []  # the implicit atom sends those names whatever the list says
