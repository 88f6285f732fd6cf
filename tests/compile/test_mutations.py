"""`steer-node-pool` and `inject-device-tolerations` compiled (issue #28 item 1): their CEL pieces mean what the
rules' Python means.

What the compiled MutatingAdmissionPolicy writes and what its checks report is compared with ``check`` on the real
API server (tests/e2e/test_compiled_policies.py); here the pool decision and the node selector requirement test are
evaluated with the ``cel`` package against ``placement.plan`` and ``node_affinity._admits``, and the objects are
compiled only where the rule steers.
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import replace

import cel
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import ROOT
from webhook.commands import load_policy
from webhook.compile import compile_admission
from webhook.compile.checks import STAGES
from webhook.compile.layouts import JOB, LAYOUTS, POD
from webhook.compile.pod_mutations import compile_pod_mutations, guards, parts
from webhook.compile.shared import SHIPPED_NAMESPACES
from webhook.compile.steering import POOL_INPUTS, _admits, _pool, device_plugin_names, steering_checks
from webhook.compile.tolerations import _same_identity, _same_normalized, compile_tolerations
from webhook.objects.claims import normalize_toleration, toleration_identity
from webhook.objects.node_affinity import _admits as admits
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.model import Action
from webhook.policy.placement import plan as plan_for
from webhook.policy.placement import pool_path, usage

POLICIES = [load_policy(ROOT / "tests" / "e2e" / "data" / "policy.yaml"),
            load_policy(ROOT / "tests" / "data" / "policies" / "steering.yaml")]
COMPILE_POLICY = ROOT / "tests" / "e2e" / "data" / "compile-policy.yaml"
NAMES = sorted({n for p in POLICIES for n in (*p.resources, *p.legacy, *p.advertised["devicePlugin"])} |
               {"deviceclass.resource.kubernetes.io/gpu.example.com", "other.example.com/nic"})


def _podspec(names: list[str], scheduler: str | None, claims: bool) -> dict:
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": dict.fromkeys(names, "1")}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
    return spec


@given(st.sampled_from(POLICIES), st.lists(st.sampled_from(NAMES), unique=True, max_size=3), st.sampled_from(STAGES),
       st.sampled_from([None, "kai-scheduler", "volcano"]), st.booleans())
def test_the_pool_expression_is_plans_pool(policy: CompiledPolicy, names: list[str], stage: str,
                                           scheduler: str | None, claims: bool):
    """``_pool`` over the ``trk*`` variables (each pool's ``pool_path``, as ``plan.plan_variables`` computes them)
    picks the pool ``placement.plan`` picks, claims (which move the stage's fallback) and schedulers included."""
    u = usage(_podspec(names, scheduler, claims), policy)
    ctx_values = {
        "trkLegacy": sorted(u.legacy), "trkEr": sorted(u.er), "trkShared": list(u.shared),
        "trkDraOnly": u.dra_only, "trkDpOk": pool_path(u, "devicePlugin", policy) is not None,
        "trkDraOk": pool_path(u, "dra", policy) is not None, "stage": stage, "stpClaims": bool(u.claims)}
    values = dict(ctx_values)
    for name, expression in POOL_INPUTS:  # declared in this order, each reading the ones before
        ctx = cel.Context()
        ctx.add_variable("variables", values)
        values[name] = cel.compile(expression).execute(ctx)
    ctx = cel.Context()
    ctx.add_variable("variables", values)
    serves = "true" if u.scheduler in policy.dra_schedulers else "false"
    assert cel.compile(_pool(serves)).execute(ctx) == (plan_for(u, stage, policy).pool or "")


@pytest.mark.parametrize("policy", [*POLICIES, load_policy(COMPILE_POLICY)])
def test_the_device_plugin_conflicts_cheap_condition_holds_wherever_plan_picks_that_pool(policy: CompiledPolicy):
    """``steering._may_go`` (the legacy stage, or a container naming one of ``device_plugin_names``) is read first in
    the devicePlugin conflict check's finding, which computes no plan where it is false: it must hold for every Pod
    ``placement.plan`` sends to the devicePlugin pool. Every combination of up to three names, so the rare ones are
    in: a legacy-stage Pod of a scheduler that allocates no DRA devices asking for a name no device plugin serves
    (compile-policy.yaml), a legacy name the pool's ``advertises`` leaves out (steering.yaml)."""
    cheap = set(device_plugin_names(policy))
    picked = 0
    for names, stage, scheduler, claims in itertools.product(
            [c for k in range(4) for c in itertools.combinations(NAMES, k)], STAGES, [None, "kai-scheduler"],
            [False, True]):
        if plan_for(usage(_podspec(list(names), scheduler, claims), policy), stage, policy).pool == "devicePlugin":
            picked += 1
            assert stage == "legacy" or cheap & set(names), (names, stage, scheduler, claims)
    assert picked


@given(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"]),
       st.lists(st.sampled_from(["dra", "3", "7", "-2", "x"]), max_size=2), st.sampled_from(["dra", "5", "-3"]))
def test_the_requirement_test_is_node_affinity_admits(operator: str, values: list[str], label: str):
    expr = {"key": "pool", "operator": operator, **({"values": values} if values else {})}
    ctx = cel.Context()
    ctx.add_variable("e", expr)
    assert cel.compile(_admits("e", label)).execute(ctx) == admits(expr, label)


def _rules(policy: CompiledPolicy, day: dt.date) -> list[str]:
    return [p.rule for p in parts(POD, policy, day)]


def test_objects_only_where_the_rule_steers(tmp_path):
    """No pool configured: no steering in the layouts' MutatingAdmissionPolicies. Under an Audit override the webhook
    reports and does not patch: the findings are compiled, the mutation is not; with track-rollout off too, no
    MutatingAdmissionPolicy for pods and templates at all."""
    day = dt.date(2030, 3, 1)
    policy = load_policy(COMPILE_POLICY)
    assert len(compile_pod_mutations(policy, day, None, SHIPPED_NAMESPACES)) == 8  # a policy and binding per layout
    assert _rules(policy, day) == [ids.STEER_NODE_POOL, ids.TRACK_ROLLOUT]  # the webhook's order
    names = [o["metadata"]["name"] for o in compile_admission(policy, dt.datetime(2030, 3, 1, tzinfo=dt.UTC)).objects]
    assert "compile-e2e-pods-mutate.dra-migration.io" in names
    assert not any(n.endswith(("-steer-node-pool.dra-migration.io", "-track-rollout.dra-migration.io")) for n in names)
    doc = yaml.safe_load(COMPILE_POLICY.read_text(encoding="utf-8"))
    del doc["spec"]["nodePools"]
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(doc))
    bare = load_policy(tmp_path / "bare.yaml")
    assert _rules(bare, day) == [ids.TRACK_ROLLOUT] and steering_checks(bare) == []
    audited = replace(policy, rule_actions={**policy.rule_actions, ids.STEER_NODE_POOL: Action.Audit})
    assert _rules(audited, day) == [ids.TRACK_ROLLOUT]
    assert {c.rule for c in steering_checks(audited)} == {ids.STEER_NODE_POOL}
    assert compile_pod_mutations(audited.without_rule(ids.TRACK_ROLLOUT), day, None, SHIPPED_NAMESPACES) == []


def _spec(objects: list[dict], layout: str) -> dict:
    [found] = [o["spec"] for o in objects if o["kind"] == "MutatingAdmissionPolicy"
               and o["metadata"]["name"].endswith(f"-{layout}-mutate.dra-migration.io")]
    return found


def test_one_policy_per_layout_keeps_each_rules_conditions(tmp_path):
    """Merged, each rule still acts only where its own policy matched: the condition both rules had stays a
    matchCondition, the others guard the rule's patches (``trkOn``, ``stpOn``); a rule alone keeps all of its own
    as matchConditions. Every layout's patches are one JSONPatch mutation (the plan is computed once per
    evaluation), plus the template annotations' ApplyConfiguration for workloads."""
    day = dt.date(2030, 3, 1)
    policy = load_policy(COMPILE_POLICY)
    both = compile_pod_mutations(policy, day, None, SHIPPED_NAMESPACES)
    for layout in LAYOUTS:
        spec = _spec(both, layout.name)
        # a Pod's policy skips the API server's second invocation of a Pod it has settled (``settled``)
        assert [c["name"] for c in spec["matchConditions"]] == \
            ["uses-devices", "unsettled"] if layout is POD else ["uses-devices"]
        assert [m["patchType"] for m in spec["mutations"]] == \
            ["JSONPatch"] if layout is POD else ["JSONPatch", "ApplyConfiguration"]
        assert spec["reinvocationPolicy"] == "IfNeeded"
        on = guards(layout, policy, day)  # as declared; inline_variables writes these cheap ones into the patches
        assert "resourceClaims" in on["trkOn"] and "resourceClaims" not in on["stpOn"]
    job = guards(JOB, policy, day)
    assert "oldObject.spec.?suspend" in job["stpOn"] and "ownerReferences" in job["stpOn"]
    assert "ownerReferences" not in guards(POD, policy, day)["stpOn"]  # a Pod is always examined
    alone = compile_pod_mutations(policy.without_rule(ids.TRACK_ROLLOUT), day, None, SHIPPED_NAMESPACES)
    assert [c["name"] for c in _spec(alone, JOB.name)["matchConditions"]] == \
        ["uses-devices", "examined", "template-writable"]
    assert [c["name"] for c in _spec(alone, POD.name)["matchConditions"]] == ["uses-devices"]  # no policy annotation
    doc = yaml.safe_load(COMPILE_POLICY.read_text(encoding="utf-8"))
    del doc["spec"]["nodePools"]
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(doc))
    tracking = compile_pod_mutations(load_policy(tmp_path / "bare.yaml"), day, None, SHIPPED_NAMESPACES)
    pods = _spec(tracking, POD.name)
    assert [c["name"] for c in pods["matchConditions"]] == ["uses-devices", "no-resource-claims", "unsettled"]
    # no steering patch; the stored path still reads the marker an earlier steering left and the plan's pool
    assert not any(v["name"].startswith(("stpConflict", "stpNew", "stpKept", "stpOurs", "stpAdded"))
                   for v in pods["variables"])
    path = next(v["expression"] for v in pods["variables"] if v["name"] == "trkPath")
    assert "dra-migration.io/node-pool" in path and "!(false)" in path  # never steered here


TOLERATION = st.fixed_dictionaries({}, optional={
    "key": st.sampled_from(["", "example.com/maintenance", "other"]), "operator": st.sampled_from(["Exists", "Equal"]),
    "value": st.sampled_from(["", "v"]), "effect": st.sampled_from(["", "NoExecute", "NoSchedule"]),
    "tolerationSeconds": st.sampled_from([0, 60, 3600])})


@given(TOLERATION, TOLERATION)
def test_the_toleration_tests_are_identity_and_normalize(t: dict, wanted: dict):
    """``inject-device-tolerations`` compiled: a request lacks a policy toleration when none has its key and effect
    (``toleration_identity``), and carries it when one equals it with the API defaults filled in
    (``normalize_toleration``)."""
    ctx = cel.Context()
    ctx.add_variable("t", t)
    same = cel.compile(_same_identity("t", wanted)).execute(ctx)
    assert same == (toleration_identity(t) == toleration_identity(wanted))
    assert cel.compile(_same_normalized("t", wanted)).execute(ctx) == (
        normalize_toleration(t) == normalize_toleration(wanted))


def test_tolerations_only_where_the_rule_injects(tmp_path):
    """Two MutatingAdmissionPolicies (claims, templates) with bindings; none without policy tolerations, with
    ``DRADeviceTaints`` off (the API server would drop the field) or under an Audit override."""
    day = dt.date(2030, 3, 1)
    policy = load_policy(COMPILE_POLICY)
    assert len(compile_tolerations(policy, day, None, SHIPPED_NAMESPACES)) == 4
    for change in ({"trainingJobs": {"labels": {"a": "b"}}}, {"featureGates": {"DRADeviceTaints": False}}):
        doc = yaml.safe_load(COMPILE_POLICY.read_text(encoding="utf-8"))
        doc["spec"].update(change)
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
        assert compile_tolerations(load_policy(tmp_path / "p.yaml"), day, None, SHIPPED_NAMESPACES) == [], change
    audited = replace(policy, rule_actions={**policy.rule_actions, ids.INJECT_DEVICE_TOLERATIONS: Action.Audit})
    assert compile_tolerations(audited, day, None, SHIPPED_NAMESPACES) == []
