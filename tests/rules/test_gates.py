"""The feature-gate catalogue and the ``gated-feature`` rule (issue 5).

Every example object under tests/data/gates/<Gate>.yaml uses that gate's fields, validates against the
1.37 schemas (strict), is reported with exactly its paths when only that gate is off, and is left alone
when every gate is on, in both phases.
"""

from __future__ import annotations

import argparse
import copy
import functools
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.builders.gates import NOW, all_on_except, policy, run
from webhook.gates.catalogue import GATES, GATES_BY_NAME, GateStage, effective_gates, known_in
from webhook.gates.fields import KIND_PATH, is_fractional
from webhook.objects.pods import WORKLOAD_KINDS, workload_kind
from webhook.offline.views import StaticView
from webhook.policy.compiled import CompiledPolicy, CompileError, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.policy.rule_ids import GATED_FEATURE
from webhook.rules.gates import RULE_KINDS, near_miss, remediation
from webhook.rules.ruleset import standard_rules
from webhook.rules.view import OfflineView

DATA = Path(__file__).parents[1] / "data" / "gates"
PHASES = ("mutate", "validate")


def _load_cases() -> list[tuple[str, int, dict[str, Any]]]:
    cases = []
    for path in sorted(DATA.glob("*.yaml")):
        if path.name == "clean.yaml":
            continue
        doc = yaml.safe_load(path.read_text())
        assert doc["gate"] == path.stem, path
        for i, case in enumerate(doc["cases"]):
            cases.append((doc["gate"], i, case))
    return cases


CASES = _load_cases()
CASE_IDS = [f"{gate}-{i}-{case['object']['kind']}" for gate, i, case in CASES]
CLEAN = yaml.safe_load((DATA / "clean.yaml").read_text())["objects"]


# --- the table ----------------------------------------------------------------------------------


def test_every_row_with_fields_has_examples_for_each_kind() -> None:
    covered: dict[str, set[str]] = {}
    for gate, _, case in CASES:
        obj = case["object"]
        group = obj["apiVersion"].rpartition("/")[0]
        covered.setdefault(gate, set()).add(f"{group}/{obj['kind']}" if group else obj["kind"])
    for gate in GATES:
        assert set(gate.kinds) <= covered.get(gate.name, set()), gate.name
    assert len([g for g in GATES if g.checks]) >= 15


def test_issue_gates_present() -> None:
    required = {
        "DRAWorkloadResourceClaims", "GenericWorkload", "WorkloadWithJob", "CompositePodGroup",
        "DRADeviceTaints", "DRADeviceTaintRules", "DRAConsumableCapacity", "DRAFractionalCapacityRange",
        "DRAPartitionableDevices", "DRAPartitionableDevicesType", "DRADeviceCompatibilityGroups",
        "DRADeviceBindingConditions", "DRAListTypeAttributes", "DRADerivedAttributes",
        "DRANodeAllocatableResources", "DRAOptionalNodeOperations", "DRAResourcePoolStatus",
        "DRAExtendedResource", "DRAAdminAccess", "DRAPrioritizedList", "DRAResourceClaimDeviceStatus",
    }  # fmt: skip
    assert required <= set(GATES_BY_NAME)
    assert len(GATES_BY_NAME) == len(GATES), "one row per gate"


def test_registered_for_both_phases_and_all_kinds() -> None:
    (registered,) = standard_rules().named(GATED_FEATURE)
    assert registered.phases == {"mutate", "validate"}
    assert registered.operations == {"CREATE", "UPDATE"}
    assert registered.kinds == set(RULE_KINDS)
    assert set(RULE_KINDS) == {
        "Pod", "Job", "PodGroup", "Workload", "CompositePodGroup", "ResourceClaim",
        "ResourceClaimTemplate", "ResourceSlice", "DeviceClass", "DeviceTaintRule",
        "ResourcePoolStatusRequest",
    } | WORKLOAD_KINDS  # fmt: skip


# --- per-row examples ---------------------------------------------------------------------------


@pytest.mark.parametrize(("gate", "index", "case"), CASES, ids=CASE_IDS)
def test_example_is_valid_kubernetes(gate: str, index: int, case: dict[str, Any]) -> None:
    if case.get("crd"):  # a custom resource: its shape follows the upstream type the case names
        known = workload_kind(case["object"]["apiVersion"].rpartition("/")[0], case["object"]["kind"])
        assert known is not None and known.source == case["crd"]
        return
    kubernetes_validate.validate(case["object"], case.get("k8s", "1.37.0"), strict=True)


@pytest.mark.parametrize(("gate", "index", "case"), CASES, ids=CASE_IDS)
def test_predicate_returns_the_paths(gate: str, index: int, case: dict[str, Any]) -> None:
    assert GATES_BY_NAME[gate].predicate(case["object"]) == case["paths"]


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize(("gate", "index", "case"), CASES, ids=CASE_IDS)
def test_reported_when_only_its_gate_is_off(gate: str, index: int, case: dict[str, Any], phase: str) -> None:
    version = case.get("version", "1.37")
    findings, _ = run(case["object"], all_on_except(gate, version=version), phase)
    stage = GATES_BY_NAME[gate].stage_in(version)
    assert stage is not None
    if stage.locked:  # a locked gate is always at its lock: its fields are never reported as dropped
        assert findings == []
        return
    if phase not in case.get("phases", PHASES):
        assert findings == []
        return
    assert len(findings) == 1, findings
    (f,) = findings
    assert f.rule == GATED_FEATURE
    assert list(f.paths) == case["paths"]
    verb = "needs" if len(case["paths"]) == 1 else "need"
    assert f"{verb} feature gate {gate} (" in f.message
    assert f.advisory is case.get("advisory", False)
    for path in case["paths"][:3]:
        assert path in f.message
    assert f"--feature-gates={gate}=true" in f.remediation
    assert f"spec.featureGates.{gate}: true" in f.remediation


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize(("gate", "index", "case"), CASES, ids=CASE_IDS)
def test_allowed_when_every_gate_is_on(gate: str, index: int, case: dict[str, Any], phase: str) -> None:
    findings, _ = run(case["object"], all_on_except(version=case.get("version", "1.37")), phase)
    assert findings == []


@pytest.mark.parametrize("entry", CLEAN, ids=[e["object"]["kind"] + "-" + e["object"]["apiVersion"] for e in CLEAN])
@pytest.mark.parametrize("phase", PHASES)
def test_objects_not_using_gated_fields_are_untouched(entry: dict[str, Any], phase: str) -> None:
    kubernetes_validate.validate(entry["object"], "1.37.0", strict=True)
    needs = set(entry.get("needs", ()))
    pol = policy(**{g.name: g.name in needs for g in GATES
                    if (st := g.stage_in("1.37")) is not None and not st.locked})
    findings, _ = run(entry["object"], pol, phase)
    assert findings == []


def test_same_kind_in_another_group_is_ignored() -> None:
    kueue = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ml"},
        "spec": {"podSets": []},
    }
    assert run(kueue, policy())[0] == []


# --- messages -----------------------------------------------------------------------------------


def _case(gate: str, kind: str) -> dict[str, Any]:
    return next(c["object"] for g, _, c in CASES if g == gate and c["object"]["kind"] == kind)


def test_message_names_field_gate_stage_and_default() -> None:
    (f,) = run(_case("GenericWorkload", "Pod"), policy())[0]
    assert f.message == ("field spec.schedulingGroup needs feature gate GenericWorkload (beta, off by default in 1.37)")
    # Cluster first, then the policy.
    flag = f.remediation.index("--feature-gates=GenericWorkload=true")
    assert f.remediation.index("--runtime-config=scheduling.k8s.io/v1beta1=true") > flag
    assert f.remediation.index("spec.featureGates.GenericWorkload: true") > flag
    assert "kube-apiserver" in f.remediation and "kube-scheduler" in f.remediation


def test_message_for_gated_kind_and_policy_override() -> None:
    (f,) = run(_case("DRADeviceTaintRules", "DeviceTaintRule"), policy(DRADeviceTaintRules=False))[0]
    assert f.message == (
        "kind DeviceTaintRule needs feature gate DRADeviceTaintRules (GA, on by default in 1.37; off in this policy)"
    )
    assert f.paths == (KIND_PATH,)
    assert "DRADeviceTaintRules also needs DRADeviceTaints" in f.remediation


@pytest.mark.parametrize(("version", "gate", "kind"), [
    ("1.36", "DRAAdminAccess", "ResourceClaim"),
    ("1.37", "DRAExtendedResource", "DeviceClass"),
    ("1.37", "DynamicResourceAllocation", "Pod"),
    ("1.38", "DRADeviceTaints", "ResourceClaim"),
])
def test_locked_gate_is_never_reported_as_dropped(version: str, gate: str, kind: str) -> None:
    """gated-feature: a locked gate's fields are kept whatever a policy says (issue 46 item 1): the engine's
    gate values hold the lock, and a policy that sets it against the lock does not load."""
    from webhook.gates.catalogue import effective_gates
    from webhook.policy.compiled import CompileError

    assert effective_gates(version, {gate: False})[gate] is True
    with pytest.raises(CompileError, match=f"locked to true in Kubernetes {version}"):
        policy(version, **{gate: False})
    assert run(_case(gate, kind), policy(version, **{gate: True}))[0] == []


def test_many_paths_are_summarised() -> None:
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "n",
            "devices": [{"name": f"d{i}", "taints": [{"key": "k", "effect": "NoSchedule"}]} for i in range(5)],
        },
    }
    (f,) = run(slice_, policy(DRADeviceTaints=False))[0]
    assert len(f.paths) == 5
    assert f.message.startswith(
        "fields spec.devices[0].taints, spec.devices[1].taints, spec.devices[2].taints and 2 more"
    )


# --- versions -----------------------------------------------------------------------------------


def test_version_switch_device_taint_rules() -> None:
    rule_obj = _case("DRADeviceTaintRules", "DeviceTaintRule")
    assert effective_gates("1.36", {})["DRADeviceTaintRules"] is False
    assert effective_gates("1.37", {})["DRADeviceTaintRules"] is True
    (f,) = run(rule_obj, policy("1.36"))[0]
    assert f.message == "kind DeviceTaintRule needs feature gate DRADeviceTaintRules (beta, off by default in 1.36)"
    assert "--runtime-config=resource.k8s.io/v1beta2=true" in f.remediation
    for phase in PHASES:
        assert run(rule_obj, policy("1.37"), phase)[0] == []
    assert run(rule_obj, policy("1.36", DRADeviceTaintRules=True))[0] == []


def test_gate_missing_in_136() -> None:
    assert known_in("1.37", "DRADerivedAttributes")
    assert not known_in("1.36", "DRADerivedAttributes")
    assert known_in("1.36", "DRADeviceTaints")
    assert not known_in("1.37", "NoSuchGate")
    # Enabling it in a 1.36 policy compiles (lint reports it), and the field is then let through.
    assert effective_gates("1.36", {"DRADerivedAttributes": True})["DRADerivedAttributes"] is True
    (f,) = run(_case("DRADerivedAttributes", "ResourceClaim"), policy("1.36"))[0]
    assert f.message.endswith(" need feature gate DRADerivedAttributes (not available in 1.36)")
    assert "upgrade the cluster to 1.37" in f.remediation


def test_unknown_gate_raises_key_error() -> None:
    with pytest.raises(KeyError) as exc:
        effective_gates("1.37", {"DRAFancyThing": True})
    assert exc.value.args[0] == "DRAFancyThing"
    doc = {
        "apiVersion": "dra-migration.io/v1alpha1",
        "kind": "MigrationPolicy",
        "metadata": {"name": "p"},
        "spec": {"featureGates": {"DRAFancyThing": True}},
    }
    with pytest.raises(CompileError) as cexc:
        compile_policy(MigrationPolicy.model_validate(doc), b"x")
    assert cexc.value.path == ("spec", "featureGates", "DRAFancyThing")


def test_policy_defaults_follow_version() -> None:
    assert policy().gates["DRAExtendedResource"] is True
    assert policy().gates["DRAWorkloadResourceClaims"] is False
    assert policy("1.36").gates["DRAOptionalNodeOperations"] is False
    with pytest.raises(ValueError):
        effective_gates("1.35", {})


# --- UPDATE -------------------------------------------------------------------------------------


def test_update_reports_only_a_first_use() -> None:
    pol = policy(DRADeviceTaints=False)
    tainted = _case("DRADeviceTaints", "ResourceSlice")
    untainted = copy.deepcopy(tainted)
    del untainted["spec"]["devices"][1]["taints"]
    # Old object already uses taints: the API server keeps them, nothing new to report.
    more = copy.deepcopy(tainted)
    more["spec"]["devices"][0]["taints"] = [{"key": "x", "effect": "NoSchedule"}]
    for phase in PHASES:
        assert run(more, pol, phase, "UPDATE", old=tainted)[0] == []
        (f,) = run(tainted, pol, phase, "UPDATE", old=untainted)[0]
        assert f.paths == ("spec.devices[1].taints",)


# --- Pods joining a PodGroup --------------------------------------------------------------------

PODGROUP = {
    "apiVersion": "scheduling.k8s.io/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "trainers", "namespace": "ml"},
    "spec": {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "resourceClaims": [
            {"name": "shared-fabric", "resourceClaimTemplateName": "fabric-template"},
            {"name": "scratch", "resourceClaimName": "scratch-claim"},
        ],
    },
}


def _pod(*claims: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": "ml"},
        "spec": {
            "schedulingGroup": {"podGroupName": "trainers"},
            "resourceClaims": list(claims),
            "containers": [{"name": "t", "image": "registry.example.com/t:1"}],
        },
    }


EXACT = {"name": "shared-fabric", "resourceClaimTemplateName": "fabric-template"}
NEAR = {"name": "shared-fabric", "resourceClaimTemplateName": "other-template"}
NEAR_REF = {"name": "scratch", "resourceClaimTemplateName": "scratch-template"}
OWN = {"name": "gpu", "resourceClaimTemplateName": "gpu-template"}


def test_near_miss_helper() -> None:
    kubernetes_validate.validate(PODGROUP, "1.37.0", strict=True)
    kubernetes_validate.validate(_pod(EXACT, NEAR_REF, OWN), "1.37.0", strict=True)
    assert near_miss(_pod(EXACT, OWN), PODGROUP) == []
    assert near_miss(_pod(OWN, NEAR), PODGROUP) == ["spec.resourceClaims[1]"]
    # resourceClaimTemplateName where the PodGroup has resourceClaimName: not equal either.
    assert near_miss(_pod(EXACT, NEAR_REF), PODGROUP) == ["spec.resourceClaims[1]"]
    assert near_miss(_pod(NEAR), {"spec": {}}) == []


def test_near_miss_warning_with_podgroup_in_view() -> None:
    view = StaticView(podgroups=[PODGROUP])
    pod = _pod(NEAR, OWN)
    on = policy(GenericWorkload=True, DRAWorkloadResourceClaims=True)
    (f,) = run(pod, on, "validate", view=view)[0]
    assert f.advisory and f.rule == GATED_FEATURE
    assert f.paths == ("spec.resourceClaims[0]",)
    assert "resourceClaimTemplateName other-template" in f.message
    assert "resourceClaimTemplateName fabric-template" in f.message
    assert "per-Pod claim" in f.message
    # Once: not in the mutating phase, not on UPDATE.
    assert run(pod, on, "mutate", view=view)[0] == []
    assert run(pod, on, "validate", "UPDATE", old=pod, view=view)[0] == []
    # An exact entry is shared: nothing to say.
    assert run(_pod(EXACT, OWN), on, "validate", view=view)[0] == []


def test_pod_claims_with_workload_claims_gate_off() -> None:
    off = policy(GenericWorkload=True)
    view = StaticView(podgroups=[PODGROUP])
    # With the PodGroup known, only the entry that really matches a PodGroup claim is reported.
    (f,) = run(_pod(OWN, EXACT), off, "validate", view=view)[0]
    assert f.advisory
    assert f.paths == ("spec.resourceClaims[1]",)
    assert f.message == (
        "field spec.resourceClaims[1] needs feature gate DRAWorkloadResourceClaims (beta, off by default in "
        "1.37) to use the shared claim of PodGroup trainers; without it each Pod gets its own claim"
    )
    # Per-Pod claims only: nothing.
    assert run(_pod(OWN), off, "validate", view=view)[0] == []
    # Unknown PodGroup (offline): every entry may be shared; the fallback is recorded.
    findings, degraded = run(_pod(OWN, EXACT), off, "validate")
    assert [x.paths for x in findings] == [("spec.resourceClaims[0]", "spec.resourceClaims[1]")]
    assert degraded == ("podgroup ml/trainers unknown: all Pod claims assumed shared",)


def test_podgroup_unknown_to_the_view() -> None:
    # get_podgroup is part of ClusterView; an offline view answers OFFLINE: no near-miss check, fallback noted.
    findings, degraded = run(_pod(NEAR), policy(GenericWorkload=True), "validate", view=OfflineView())
    assert [f.paths for f in findings] == [("spec.resourceClaims[0]",)]
    assert len(degraded) == 1 and "assumed shared" in degraded[0]


# --- quantities ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quantity", "fractional"),
    [
        ("500m", True), ("0.5", True), ("1e-3", True), ("100u", True), (0.25, True),
        ("1000m", False), ("1.5Gi", False), ("2", False), ("1E3", False), ("3E", False),
        (".5Ki", False), (4, False), ("not-a-quantity", False),
    ],
)  # fmt: skip
def test_is_fractional(quantity: Any, fractional: bool) -> None:
    assert is_fractional(quantity) is fractional


# --- CLI ----------------------------------------------------------------------------------------


def _cli(argv: list[str]) -> argparse.Namespace:
    from webhook.commands import gates as cmd

    parser = argparse.ArgumentParser(prog="dra-webhook")
    cmd.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_cli_table(capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.commands import gates as cmd

    assert cmd.run(_cli(["gates"])) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["GATE", "STAGE", "1.37", "DEFAULT", "GUARDS"]
    lines = {line.split()[0]: line for line in out[1:]}
    assert set(lines) == set(GATES_BY_NAME)
    assert lines["DRAWorkloadResourceClaims"].split()[1:3] == ["beta", "off"]
    assert lines["DRAExtendedResource"].split()[1:4] == ["GA", "on", "(locked)"]
    assert "PodGroup spec.resourceClaims" in lines["DRAWorkloadResourceClaims"]

    assert cmd.run(_cli(["gates", "--version", "1.36"])) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert lines["DRADeviceTaintRules"].split()[1:3] == ["beta", "off"]
    assert lines["DRADerivedAttributes"].split()[1:3] == ["-", "n/a"]
    assert lines["WorkloadAwarePreemption"].split()[1:3] == ["alpha", "off"]
    assert "PodGroup disruptionMode" in lines["WorkloadAwarePreemption"]
    assert lines["GangScheduling"].split()[1:3] == ["alpha", "off"]


def test_cli_1_36_only_gates_are_na_in_1_37(capsys: pytest.CaptureFixture[str]) -> None:
    from webhook.commands import gates as cmd

    assert cmd.run(_cli(["gates", "--version", "1.37"])) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert lines["WorkloadAwarePreemption"].split()[1:3] == ["-", "n/a"]
    assert lines["GangScheduling"].split()[1:3] == ["-", "n/a"]


def test_cli_1_38_marks_its_provisional_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 46 item 4: 1.38 is a choice; the rows its pre-release changelog changes are marked and cited."""
    from webhook.commands import gates as cmd

    assert cmd.run(_cli(["gates", "--version", "1.38"])) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["GATE", "STAGE", "1.38", "DEFAULT"]
    lines = {line.split()[0]: line for line in out[1:] if line.strip() and not line.startswith("*")}
    assert lines["DynamicResourceAllocation"].split()[1:4] == ["*", "-", "removed"]
    assert "kubernetes/kubernetes#141946" in lines["DynamicResourceAllocation"]
    assert lines["DRADeviceTaints"].split()[1:5] == ["*", "GA", "on", "(locked)"]
    assert "kubernetes/kubernetes#140256" in lines["DRADeviceTaintRules"]
    assert lines["DRAConsumableCapacity"].split()[1:3] == ["beta", "on"]  # unchanged: 1.37's row
    assert out[-1].startswith("* provisional: Kubernetes 1.38 is not released")
    assert effective_gates("1.38", {})["DynamicResourceAllocation"] is True  # removed because it graduated


# --- 1.36-only gates (issue 13 item 8) ------------------------------------------------------------

V1ALPHA2_PODGROUP = {
    "apiVersion": "scheduling.k8s.io/v1alpha2",
    "kind": "PodGroup",
    "metadata": {"name": "trainers", "namespace": "ml"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": "PodGroup"},
}


def test_workload_aware_preemption_off_in_a_1_36_policy_reports_the_field() -> None:
    findings, _ = run(V1ALPHA2_PODGROUP, policy("1.36", GenericWorkload=True))
    (f,) = findings
    assert f.paths == ("spec.disruptionMode",)
    assert f.message == ("field spec.disruptionMode needs feature gate WorkloadAwarePreemption "
                         "(alpha, off by default in 1.36)")
    assert "--feature-gates=WorkloadAwarePreemption=true,GangScheduling=true,GenericWorkload=true on " \
           "kube-apiserver" in f.remediation
    assert "spec.featureGates.WorkloadAwarePreemption: true, GangScheduling: true" in f.remediation
    assert "drops the field without a warning" in f.remediation
    on = policy("1.36", GenericWorkload=True, GangScheduling=True, WorkloadAwarePreemption=True)
    assert run(V1ALPHA2_PODGROUP, on)[0] == []


def test_1_36_only_gates_are_gone_in_1_37() -> None:
    for name in ("WorkloadAwarePreemption", "GangScheduling"):
        gate = GATES_BY_NAME[name]
        assert gate.stage_in("1.36") == GateStage("alpha", False)
        assert gate.stage_in("1.37") is None
        assert known_in("1.36", name) and not known_in("1.37", name)
    assert effective_gates("1.37", {})["WorkloadAwarePreemption"] is False
    assert "merged it into GenericWorkload" in remediation(GATES_BY_NAME["WorkloadAwarePreemption"], "1.37")
    # In 1.37 GenericWorkload guards these fields: no second finding naming a gate 1.37 lacks.
    obj = {**V1ALPHA2_PODGROUP, "apiVersion": "scheduling.k8s.io/v1beta1"}
    assert run(obj, policy("1.37", GenericWorkload=True))[0] == []


def test_cli_policy_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("webhook.policy.loader")
    from webhook.commands import gates as cmd

    path = tmp_path / "policy.yaml"
    path.write_text(
        "apiVersion: dra-migration.io/v1alpha1\nkind: MigrationPolicy\nmetadata: {name: p}\n"
        "spec:\n  featureGates: {GenericWorkload: true, DRADeviceTaints: false}\n"
    )
    assert cmd.run(_cli(["gates", "--policy", str(path)])) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["GATE", "STAGE", "1.37", "DEFAULT", "POLICY"]
    lines = {line.split()[0]: line.split() for line in out[1:]}
    assert lines["GenericWorkload"][1:5] == ["beta", "off", "on", "(set)"]
    assert lines["DRADeviceTaints"][1:5] == ["GA", "on", "off", "(set)"]
    assert lines["DRAWorkloadResourceClaims"][1:4] == ["beta", "off", "off"]


def test_cli_bad_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("webhook.policy.loader")
    from webhook.cli import main as cli_main
    from webhook.commands import CliError
    from webhook.commands import gates as cmd

    path = tmp_path / "policy.yaml"
    path.write_text(
        "apiVersion: dra-migration.io/v1alpha1\nkind: MigrationPolicy\nmetadata: {name: p}\n"
        "spec:\n  featureGates: {NoSuchGate: true}\n"
    )
    with pytest.raises(CliError) as raised:  # cli.main prints it and exits with its code
        cmd.run(_cli(["gates", "--policy", str(path)]))
    assert raised.value.code == 2 and "NoSuchGate" in raised.value.message
    assert cli_main(["gates", "--policy", str(path)]) == 2
    assert "NoSuchGate" in capsys.readouterr().err


# --- through the engine: refused with the gate off, allowed with it on ------------------------------


@functools.cache
def _deny_policy(off: str | None, version: str = "1.37") -> CompiledPolicy:
    doc = {
        "apiVersion": "dra-migration.io/v1alpha1",
        "kind": "MigrationPolicy",
        "metadata": {"name": "gates-deny"},
        "spec": {
            "kubernetesVersion": version,
            "featureGates": {g.name: g.name != off for g in GATES
                             if (st := g.stage_in(version)) is not None and not st.locked},
            "enforcement": {"rules": {GATED_FEATURE: "Deny"}},
        },
    }
    return compile_policy(MigrationPolicy.model_validate(doc), repr(doc).encode())


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize(("gate", "index", "case"), CASES, ids=CASE_IDS)
def test_engine_refuses_with_gate_off(gate: str, index: int, case: dict[str, Any], phase: str) -> None:
    from webhook.admission.answer import handle
    from webhook.admission.review import parse_request

    obj = case["object"]
    group, _, version = obj["apiVersion"].rpartition("/")
    request = {
        "uid": "0b6a1e2c-0000-4000-8000-000000000005",
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "operation": "CREATE",
        "namespace": obj["metadata"].get("namespace", ""),
        "name": obj["metadata"]["name"],
        "object": obj,
    }
    version = case.get("version", "1.37")
    off = handle(parse_request(request), phase, _deny_policy(gate, version), OfflineView(), NOW)
    on = handle(parse_request(request), phase, _deny_policy(None, version), OfflineView(), NOW)
    assert on.allowed and GATED_FEATURE not in [v.rule for v in on.verdicts]
    stage = GATES_BY_NAME[gate].stage_in(version)
    if (stage is not None and stage.locked) or phase not in case.get("phases", PHASES):
        # a locked gate cannot be off (issue 46 item 1): nothing dropped, nothing denied
        assert off.allowed and GATED_FEATURE not in [v.rule for v in off.verdicts]
    elif case.get("advisory") or obj["kind"] == "ResourceSlice":  # slices are never denied (issue 13 item 4)
        assert off.allowed
        assert [v.action.value for v in off.verdicts if v.rule == GATED_FEATURE] == ["Warn"]
        assert any(gate in w for w in off.warnings)
    else:
        assert not off.allowed
        assert off.denied_rules == [GATED_FEATURE]
        assert gate in off.message
