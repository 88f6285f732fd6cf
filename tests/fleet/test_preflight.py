"""`preflight`: which Pods a device taint evicts at once, after N seconds, or never; exit 3 vs 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders.preflight import (
    DRIVER,
    MAINT,
    TRAINING,
    analyse,
    extended_pod_and_claim,
    result,
    run_preflight,
    scenario,
    tol,
)
from tests.fakeapi import (
    FakeAPI,
    exact_request,
    make_policy,
    pod,
    podgroup,
    resource_claim,
    validate,
    write_policy,
)
from webhook.cli import main
from webhook.fleet import preflight
from webhook.fleet.preflight import (
    AFTER,
    AT_ONCE,
    NEVER,
    DeviceSelector,
    Eviction,
    InputError,
    Preflight,
    Taint,
    claim_use,
    eviction,
    load_rule,
    pod_use,
    tolerates,
)
from webhook.fleet.preflight_output import render_text

# -- toleration semantics (docs/dra-1.37.md §3) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "matches"),
    [
        ({"operator": "Exists"}, True),  # empty key + Exists: every taint
        ({"key": "example.com/maintenance", "operator": "Exists"}, True),
        ({"key": "example.com/maintenance", "operator": "Equal", "value": "firmware"}, True),
        ({"key": "example.com/maintenance", "value": "firmware"}, True),  # operator defaults to Equal
        ({"key": "example.com/maintenance", "operator": "Equal", "value": "other"}, False),
        ({"key": "example.com/maintenance", "operator": "Equal"}, False),  # Equal "" != "firmware"
        ({"key": "example.com/other", "operator": "Exists"}, False),
        ({"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}, False),
        ({"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}, True),
        # Upstream resourceclaim.ToleratesTaint: an empty key matches every key, Equal then compares values.
        ({"key": "", "operator": "Equal", "value": "firmware"}, True),
        ({"key": "", "operator": "Equal", "value": "other"}, False),
    ],
)
def test_tolerates(toleration: dict, matches: bool) -> None:
    assert tolerates(toleration, MAINT) is matches


def test_eviction_outcomes() -> None:
    assert eviction([], MAINT) == Eviction(AT_ONCE)
    assert eviction([tol(key="example.com/other")], MAINT) == Eviction(AT_ONCE)
    assert eviction([tol(seconds=300)], MAINT) == Eviction(AFTER, 300)
    assert eviction([tol(seconds=300), tol(key="", seconds=60)], MAINT) == Eviction(AFTER, 60)  # smallest wins
    assert eviction([tol(seconds=0)], MAINT) == Eviction(AT_ONCE)
    assert eviction([tol()], MAINT) == Eviction(NEVER)
    # One NoExecute toleration without seconds: never evicted, whatever the others say (claimEvictionTime).
    assert eviction([tol(), tol(key="", seconds=30)], MAINT) == Eviction(NEVER)
    assert eviction([tol(seconds=-5)], MAINT) == Eviction(AT_ONCE)  # negative seconds count as 0
    assert eviction([tol(seconds=-5), tol(seconds=60)], MAINT) == Eviction(AT_ONCE)


def test_only_noexecute_tolerations_protect() -> None:
    # kubernetes pkg/controller/devicetainteviction/device_taint_eviction.go (ab3cec07), claimEvictionTime:
    # a toleration with no effect (or NoSchedule) lets the allocator place the claim, then evicts at once.
    no_effect = {"key": "example.com/maintenance", "operator": "Exists"}
    assert tolerates(no_effect, MAINT)
    assert eviction([no_effect], MAINT) == Eviction(AT_ONCE)
    assert eviction([tol(effect="NoSchedule")], MAINT) == Eviction(AT_ONCE)
    assert eviction([no_effect, tol(seconds=90)], MAINT) == Eviction(AFTER, 90)
    assert eviction([], Taint("example.com/maintenance", effect="NoSchedule")) == Eviction(NEVER)
    assert eviction([], Taint("example.com/maintenance", effect="None")) == Eviction(NEVER)


def test_selector_semantics() -> None:
    r = result("gpu-0")
    assert DeviceSelector().matches(r)  # empty selector: every device
    assert DeviceSelector(DRIVER).matches(r)
    assert DeviceSelector(DRIVER, "node-a", "gpu-0").matches(r)
    assert not DeviceSelector(DRIVER, "node-b").matches(r)  # ANDed
    assert not DeviceSelector("nic.example.com", "node-a", "gpu-0").matches(r)


def test_load_rule(tmp_path: Path) -> None:
    rule = """
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {name: maintenance-node-a}
spec:
  deviceSelector: {driver: gpu.example.com, pool: node-a}
  taint: {key: example.com/maintenance, value: firmware-upgrade, effect: NoExecute}
"""
    selector, taint = load_rule(rule)
    assert selector == DeviceSelector(DRIVER, "node-a")
    assert taint == Taint("example.com/maintenance", "firmware-upgrade", "NoExecute")
    omitted, _ = load_rule(rule.replace("  deviceSelector: {driver: gpu.example.com, pool: node-a}\n", ""))
    assert omitted is None  # omitted selector: no devices
    empty, _ = load_rule(rule.replace("{driver: gpu.example.com, pool: node-a}", "{}"))
    assert empty == DeviceSelector()  # empty selector: all devices
    with pytest.raises(InputError, match="deviceClassName is not supported"):
        load_rule(rule.replace("pool: node-a", "deviceClassName: gpu.example.com"))
    with pytest.raises(InputError, match="spec.taint.key is required"):
        load_rule(rule.replace("key: example.com/maintenance, ", ""))
    with pytest.raises(InputError, match="effect is required"):
        load_rule(rule.replace(", effect: NoExecute", ""))
    # "Consumers must treat unknown effects like None" (resource.k8s.io/v1 DeviceTaint.effect): kept, not refused.
    assert load_rule(rule.replace("NoExecute", "PreferNoSchedule"))[1].effect == "PreferNoSchedule"
    with pytest.raises(InputError, match="exactly one DeviceTaintRule"):
        load_rule("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")


# -- the analysis ------------------------------------------------------------------------------------------


def test_three_outcomes_and_exit_3_for_a_training_job() -> None:
    pods, claims = scenario()
    res = analyse(DeviceSelector(DRIVER, "node-a"), MAINT, claims, pods, make_policy())
    outcomes = {(p.namespace, p.name): (p.eviction.outcome, p.eviction.seconds, p.training) for p in res.pods}
    assert outcomes == {
        ("ml-a", "train-0"): (AT_ONCE, None, True),
        ("ml-a", "serve-0"): (AFTER, 300, False),
        ("ml-b", "svc-0"): (NEVER, None, False),
    }
    assert res.blocked
    assert [p.name for p in res.training_evicted_at_once] == ["train-0"]
    text = render_text(res)
    assert "BLOCKED" in text and "ml-a/train-0" in text
    assert "exitCode" not in res.to_json()  # the command adds it: exit codes are the commands'


def test_no_training_job_at_risk_exits_0() -> None:
    pods, claims = scenario(training_at_once=False)
    res = analyse(DeviceSelector(DRIVER, "node-a"), MAINT, claims, pods, make_policy())
    assert not res.blocked
    assert {p.name: p.eviction.outcome for p in res.pods}["train-0"] == AT_ONCE
    # A training job evicted only after its window does not block either.
    pods[1]["metadata"]["labels"] = dict(TRAINING)
    res = analyse(DeviceSelector(DRIVER, "node-a"), MAINT, claims, pods, make_policy())
    assert not res.blocked and {p.name: p.training for p in res.pods}["serve-0"] is True


def test_long_deadline_marks_a_training_job() -> None:
    pods, claims = scenario(training_at_once=False)
    pods[0]["spec"]["activeDeadlineSeconds"] = 86400
    assert analyse(DeviceSelector(DRIVER, "node-a"), MAINT, claims, pods, make_policy()).blocked


def test_selectors_none_and_empty() -> None:
    pods, claims = scenario()
    assert analyse(None, MAINT, claims, pods, make_policy()).pods == []
    everything = analyse(DeviceSelector(), MAINT, claims, pods, make_policy())
    assert {p.name for p in everything.pods} == {"train-0", "serve-0", "svc-0", "elsewhere"}
    one = analyse(DeviceSelector(DRIVER, "node-a", "gpu-1"), MAINT, claims, pods, make_policy())
    assert [p.name for p in one.pods] == ["serve-0"] and not one.blocked


def test_noschedule_evicts_nothing() -> None:
    pods, claims = scenario()
    res = analyse(DeviceSelector(DRIVER), Taint(MAINT.key, effect="NoSchedule"), claims, pods, make_policy())
    assert {p.eviction.outcome for p in res.pods} == {NEVER} and not res.blocked


def test_podgroup_reservation_reaches_member_pods() -> None:
    members = [pod("ml-a", f"w-{i}", pod_group="trainers", labels=TRAINING, uid=f"uid-w-{i}") for i in range(2)]
    for m in members:  # the shared claim is named in each member's spec.resourceClaims
        m["spec"]["resourceClaims"] = [{"name": "fabric", "resourceClaimName": "trainers-fabric-x"}]
    other = pod("ml-a", "loner", uid="uid-loner")
    pg_ref = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "trainers", "uid": "uid-pg"}
    claim = resource_claim("ml-a", "trainers-fabric-x", requests=[exact_request("fabric", "gpu.example.com")],
                           results=[result("gpu-3", request="fabric")], reserved_for=[pg_ref])
    validate(claim)
    res = analyse(DeviceSelector(DRIVER), MAINT, [claim], [*members, other], make_policy())
    assert [p.name for p in res.pods] == ["w-0", "w-1"] and res.blocked


def test_tolerations_only_from_the_allocation() -> None:
    # The request's own tolerations do not count: claimEvictionTime reads results[].tolerations only.
    claim = resource_claim(
        "ml-a", "fa", results=[result("gpu-0", request="gpu/big")], reserved_for=[],
        requests=[{"name": "gpu", "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu.example.com", "tolerations": [tol(seconds=120)]},
            {"name": "small", "deviceClassName": "gpu.example.com"},
        ]}],
    )
    validate(claim)
    res = analyse(DeviceSelector(DRIVER), MAINT, [claim], [], make_policy())
    assert res.claims[0].eviction == Eviction(AT_ONCE)
    assert res.pods == [] and any("no Pod" in n for n in res.notes)


def test_extended_resource_pods_are_not_evicted_and_need_a_drain() -> None:
    # Upstream podEvictionTime only follows pod.spec.resourceClaims (kubernetes/kubernetes#141290).
    p, claim = extended_pod_and_claim()
    res = analyse(DeviceSelector(DRIVER), MAINT, [claim], [p], make_policy())
    [impact] = res.pods
    assert (impact.eviction.outcome, impact.eviction.seconds) == (NEVER, None)
    assert "drain" in impact.eviction.reason and not res.blocked
    assert any("141290" in n and "drain" in n for n in res.notes)
    assert "drain it by hand" in render_text(res)
    assert res.to_json()["pods"][0]["reason"] == impact.eviction.reason


def test_only_bound_live_reserved_pods_are_evicted() -> None:
    pods, claims = scenario()
    del pods[0]["spec"]["nodeName"]
    pods[1]["metadata"]["deletionTimestamp"] = "2026-12-03T11:00:00Z"
    claims[2]["status"]["reservedFor"] = []  # svc-0: still owner-referenced, no longer reserved
    claims[2]["status"]["allocation"]["devices"]["results"][0]["tolerations"] = []
    res = analyse(DeviceSelector(DRIVER, "node-a"), MAINT, claims, pods, make_policy())
    reasons = {p.name: (p.eviction.outcome, p.eviction.reason) for p in res.pods}
    assert reasons["train-0"] == (NEVER, "not bound to a node")
    assert reasons["serve-0"] == (NEVER, "already being deleted")
    assert "svc-0" not in reasons  # not a consumer any more (no reservation, no owner reference)
    assert not res.blocked


def test_owner_without_reservation_is_not_evicted() -> None:
    pods, claims = scenario()
    claims[0]["status"]["reservedFor"] = []
    res = analyse(DeviceSelector(DRIVER, "node-a"), MAINT, claims, pods, make_policy())
    assert {p.name: p.eviction.reason for p in res.pods}["train-0"] == "not in the claim's reservedFor"
    assert not res.blocked


# -- the command, against the fake API server ----------------------------------------------------------------


@pytest.fixture()
def cluster_env(tmp_path: Path) -> Iterator[tuple[FakeAPI, list[str]]]:
    pods, claims = scenario()
    with FakeAPI() as fake:
        fake.put(*pods, *claims, podgroup("ml-a", "unrelated"))
        yield fake, ["--kubeconfig", fake.write_kubeconfig(tmp_path), "--policy", write_policy(tmp_path)]


def test_preflight_command_exit_3(cluster_env: tuple[FakeAPI, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    fake, common = cluster_env
    code = main(["preflight", "--driver", DRIVER, "--pool", "node-a", "-o", "json", *common])
    out = json.loads(capsys.readouterr().out)
    assert code == 3
    assert {p["pod"]: (p["outcome"], p["seconds"], p["trainingJob"]) for p in out["pods"]} == {
        "train-0": (AT_ONCE, None, True),
        "serve-0": (AFTER, 300, False),
        "svc-0": (NEVER, None, False),
    }
    assert out["taint"]["key"] == "example.com/maintenance"  # from the policy's deviceTolerations
    assert fake.count("pods", "list") == 2  # ml-a and ml-b, where the selected claims live; no -A list


def test_preflight_command_rule_file_exit_0(
    cluster_env: tuple[FakeAPI, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, common = cluster_env
    rule = tmp_path / "rule.yaml"
    rule.write_text(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata: {name: m}\n"
        "spec:\n  deviceSelector: {driver: gpu.example.com, pool: node-a, device: gpu-1}\n"
        "  taint: {key: example.com/maintenance, effect: None}\n"
    )
    code = main(["preflight", "-f", str(rule), *common])
    out = capsys.readouterr().out
    assert code == 0
    assert "serve-0" in out and "evicted after 300s" in out and "train-0" not in out
    assert "evaluated as NoExecute" in out


def test_preflight_command_input_errors(
    cluster_env: tuple[FakeAPI, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, common = cluster_env
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: DeviceTaintRule\napiVersion: resource.k8s.io/v1\nspec: {taint: {effect: NoExecute}}\n")
    assert main(["preflight", "-f", str(bad), *common]) == 2
    assert "spec.taint.key is required" in capsys.readouterr().err
    assert main(["preflight", "-f", str(tmp_path / "missing.yaml"), *common]) == 2
    assert main(["preflight", "-f", str(bad), "--pool", "node-a", *common]) == 2
    with pytest.raises(SystemExit) as exc:  # argparse: --driver or -f is required
        main(["preflight", *common])
    assert exc.value.code == 2


# -- issue 25 item 6: UIDs, DRAWorkloadResourceClaims off, unknown effects ---------------------------------------


def test_unknown_effect_evicts_nothing_like_none() -> None:
    pods, claims = scenario()
    res = analyse(DeviceSelector(DRIVER), Taint(MAINT.key, effect="EvictSlowly"), claims, pods, make_policy())
    assert {p.eviction.outcome for p in res.pods} == {NEVER} and not res.blocked
    assert any("treated like None" in n for n in res.notes)


def test_reservation_is_matched_by_uid_not_name() -> None:
    """A Pod re-created under the name of the reserved one is not the consumer (IsReservedForPod compares
    UIDs), so the taint does not evict it; the same holds for the owner reference of a generated claim."""
    pods, claims = scenario()
    pods[0]["metadata"]["uid"] = "uid-train-0-recreated"
    res = analyse(DeviceSelector(DRIVER, "node-a"), MAINT, claims, pods, make_policy())
    names = {p.name: p.eviction for p in res.pods}
    assert "train-0" not in names  # neither reserved (other UID) nor owner (other UID)
    assert not res.blocked
    assert names["serve-0"].outcome == AFTER


def _group_claim_and_members(policy_gates: dict[str, bool] | None) -> Preflight:
    members = [pod("ml-a", f"w-{i}", pod_group="trainers", labels=TRAINING, uid=f"uid-w-{i}") for i in range(2)]
    for m in members:
        m["spec"]["resourceClaims"] = [{"name": "fabric", "resourceClaimName": "trainers-fabric-x"}]
    pg_ref = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "trainers", "uid": "uid-pg"}
    claim = resource_claim("ml-a", "trainers-fabric-x", requests=[exact_request("fabric", "gpu.example.com")],
                           results=[result("gpu-3", request="fabric")], reserved_for=[pg_ref])
    policy = make_policy()
    if policy_gates is not None:
        from dataclasses import replace

        sources = replace(policy.gate_sources, explicit={**policy.gate_sources.explicit, **policy_gates})
        policy = replace(policy, gate_sources=sources)
    return analyse(DeviceSelector(DRIVER), MAINT, [claim], members, policy)


def test_podgroup_reservation_is_not_followed_with_workload_claims_off() -> None:
    on = _group_claim_and_members(None)
    assert {p.eviction.outcome for p in on.pods} == {AT_ONCE} and on.blocked
    off = _group_claim_and_members({"DRAWorkloadResourceClaims": False})
    assert [p.name for p in off.pods] == ["w-0", "w-1"]
    assert {p.eviction.outcome for p in off.pods} == {NEVER} and not off.blocked
    assert all("DRAWorkloadResourceClaims" in p.eviction.reason for p in off.pods)


def _trainers(pg_uid: str) -> tuple[list[dict], dict]:
    members = [pod("ml-a", f"w-{i}", pod_group="trainers", labels=TRAINING, uid=f"uid-w-{i}") for i in range(2)]
    for m in members:
        m["spec"]["resourceClaims"] = [{"name": "fabric", "resourceClaimName": "trainers-fabric-x"}]
        m["spec"]["nodeName"] = "node-a"
    pg_ref = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "trainers", "uid": pg_uid}
    claim = resource_claim("ml-a", "trainers-fabric-x", requests=[exact_request("fabric", "gpu.example.com")],
                           results=[result("gpu-3", request="fabric")], reserved_for=[pg_ref])
    return members, claim


def test_a_recreated_podgroup_is_not_the_reserved_one() -> None:
    """IsReservedForPod compares the PodGroup's UID: a group re-created under the same name is another group."""
    members, claim = _trainers("uid-pg-old")
    uses = [u for u in [claim_use(claim, DeviceSelector(DRIVER), MAINT)] if u]
    pods = [pod_use(m, make_policy()) for m in members]
    same = preflight.analyse(DeviceSelector(DRIVER), MAINT, uses, pods, make_policy(),
                             group_uids={("ml-a", "trainers"): "uid-pg-old"})
    assert {p.eviction.outcome for p in same.pods} == {AT_ONCE}
    other = preflight.analyse(DeviceSelector(DRIVER), MAINT, uses, pods, make_policy(),
                              group_uids={("ml-a", "trainers"): "uid-pg-new"})
    assert {p.eviction.reason for p in other.pods} == {"not in the claim's reservedFor"} and not other.blocked


def test_preflight_command_reads_the_reserving_podgroups_uid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    members, claim = _trainers("uid-pg-old")
    group = podgroup("ml-a", "trainers")
    group["metadata"]["uid"] = "uid-pg-new"  # re-created since the reservation
    with FakeAPI() as fake:
        fake.put(*members, claim, group)
        common = ["--kubeconfig", fake.write_kubeconfig(tmp_path), "--policy", write_policy(tmp_path)]
        assert main(["preflight", "--driver", DRIVER, "--taint-key", MAINT.key, "-o", "json", *common]) == 0
        assert {p["outcome"] for p in json.loads(capsys.readouterr().out)["pods"]} == {"never"}
        group["metadata"]["uid"] = "uid-pg-old"
        fake.put(group)
        assert main(["preflight", "--driver", DRIVER, "--taint-key", MAINT.key, "-o", "json", *common]) == 3


def test_preflight_reads_a_podgroup_served_only_at_v1alpha3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46 item 6: 1.37 serves PodGroups at scheduling.k8s.io/v1beta1 and v1alpha3 (v1alpha2 is gone), and
    v1beta1 needs its API enabled; a cluster serving only v1alpha3 still has its PodGroup's UID read, so a
    re-created group is not taken for the reserved one (by name the members would be evicted at once)."""
    from tests import fakeapi
    from webhook.cluster.api import PODGROUP_VERSIONS

    assert PODGROUP_VERSIONS[:2] == ("v1beta1", "v1alpha3")
    alpha = fakeapi.Kind("podgroups", "scheduling.k8s.io/v1alpha3", "PodGroup", True)
    monkeypatch.setitem(fakeapi.KINDS, "podgroups", alpha)
    monkeypatch.setitem(fakeapi.BY_KIND, "PodGroup", alpha)
    members, claim = _trainers("uid-pg-old")
    group = podgroup("ml-a", "trainers")
    group["apiVersion"] = "scheduling.k8s.io/v1alpha3"
    group["metadata"]["uid"] = "uid-pg-new"  # re-created since the reservation
    code, out = run_preflight(tmp_path, capsys, [*members, claim, group],
                              ["--driver", DRIVER, "--taint-key", MAINT.key])
    assert code == 0 and {p["outcome"] for p in out["pods"]} == {"never"}
