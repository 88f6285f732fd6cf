"""Issue 13 item 7: feature-gate dependencies (kubernetes/kubernetes pkg/features/kube_features.go
``defaultKubernetesFeatureGateDependencies``; webhook/gates/catalogue.py says which copy and what was added for 1.37).

The remediation of ``gated-feature`` names every gate needed, transitively; ``lint`` warns, with file:line, about a
policy whose ``featureGates`` switch a gate on while a gate it needs is off.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from webhook.gates.catalogue import DEPENDENCIES, GATES, GATES_BY_NAME, VERSIONS, needs
from webhook.policy.loader import lint_report
from webhook.rules.gates import remediation

POLICY = """\
apiVersion: dra-migration.io/v1alpha1
kind: MigrationPolicy
metadata: {name: deps}
spec:
  kubernetesVersion: "1.37"
  featureGates:
"""


def _warnings(tmp_path: Path, gates: str, version: str = "1.37") -> tuple[str, list[str]]:
    text = POLICY.replace('"1.37"', f'"{version}"') + gates
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    report = lint_report(path, today=dt.date(2027, 1, 1))
    assert report.errors == [], report.errors
    return text, [str(w) for w in report.warnings]


def _line(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("gate", "dep"),
    [
        ("CompositePodGroup", "TopologyAwareWorkloadScheduling"),
        ("DRAPartitionableDevicesType", "DRAResourcePoolStatus"),
        ("DRAOptionalNodeOperations", "NodeDeclaredFeatures"),
        ("DRAResourceClaimGranularStatusAuthorization", "DRAResourceClaimDeviceStatus"),
        ("DRADeviceBindingConditions", "DRAResourceClaimDeviceStatus"),
        ("DRADeviceTaintRules", "DRADeviceTaints"),
        ("WorkloadWithJob", "GenericWorkload"),
    ],
)
def test_issue_dependencies_are_in_the_table(gate: str, dep: str) -> None:
    assert dep in needs(gate)


def test_needs_is_transitive_and_ordered() -> None:
    assert needs("CompositePodGroup") == ("GenericWorkload", "TopologyAwareWorkloadScheduling")
    assert needs("DRADeviceTaintRules") == ("DynamicResourceAllocation", "DRADeviceTaints")
    assert needs("GenericWorkload") == ()


def test_every_gate_named_is_in_the_catalogue_and_rows_agree() -> None:
    for gate, deps in DEPENDENCIES.items():
        assert gate in GATES_BY_NAME, gate
        for dep in deps:
            assert dep in GATES_BY_NAME, (gate, dep)
    for row in GATES:
        assert set(row.requires) <= set(needs(row.name)), row.name


def test_remediation_names_every_gate_needed() -> None:
    text = remediation(GATES_BY_NAME["CompositePodGroup"], "1.37")
    assert ("--feature-gates=CompositePodGroup=true,GenericWorkload=true,TopologyAwareWorkloadScheduling=true on "
            "kube-apiserver, kube-scheduler, kube-controller-manager") in text
    assert "--runtime-config=scheduling.k8s.io/v1alpha3=true,scheduling.k8s.io/v1beta1=true" in text
    assert "CompositePodGroup also needs GenericWorkload, TopologyAwareWorkloadScheduling" in text
    assert "spec.featureGates.CompositePodGroup: true, GenericWorkload: true, TopologyAwareWorkloadScheduling: true" \
        in text

    text = remediation(GATES_BY_NAME["DRAPartitionableDevicesType"], "1.37")
    assert "--feature-gates=DRAPartitionableDevicesType=true,DRAResourcePoolStatus=true " in text
    assert "--runtime-config=resource.k8s.io/v1alpha3=true" in text
    assert "keep DRAPartitionableDevices on" in text  # beta, on by default

    # Locked gates are always on: never asked for.
    assert "NodeDeclaredFeatures" not in remediation(GATES_BY_NAME["DRAOptionalNodeOperations"], "1.37")
    assert "DynamicResourceAllocation" not in remediation(GATES_BY_NAME["DRADeviceTaintRules"], "1.37")
    # On by default but switchable: named, to be kept on.
    text = remediation(GATES_BY_NAME["DRAResourceClaimGranularStatusAuthorization"], "1.36")
    assert "also needs DRAResourceClaimDeviceStatus; keep DRAResourceClaimDeviceStatus on" in text


@pytest.mark.parametrize("version", VERSIONS)
def test_every_remediation_lists_its_off_by_default_dependencies(version: str) -> None:
    for row in GATES:
        stage = row.stage_in(version)
        if stage is None or stage.locked:
            continue
        text = remediation(row, version)
        flags = text.split("--feature-gates=", 1)[1].split(" ", 1)[0]
        for dep in needs(row.name):
            dep_stage = GATES_BY_NAME[dep].stage_in(version)
            if dep_stage is not None and not dep_stage.default:
                assert f"{dep}=true" in flags, (row.name, dep, text)


def test_lint_flags_a_gate_on_with_its_dependency_off_by_default(tmp_path: Path) -> None:
    text, warnings = _warnings(tmp_path, "    CompositePodGroup: true\n    GenericWorkload: true\n")
    assert len(warnings) == 1, warnings
    assert f":{_line(text, 'CompositePodGroup')}: spec.featureGates.CompositePodGroup: feature gate " \
           "CompositePodGroup is on but needs TopologyAwareWorkloadScheduling, which is off by default in 1.37" \
           in warnings[0]
    assert "set TopologyAwareWorkloadScheduling: true or CompositePodGroup: false" in warnings[0]


def test_lint_flags_a_dependency_switched_off(tmp_path: Path) -> None:
    # DRADeviceTaintRules is on by default in 1.37 and needs DRADeviceTaints.
    text, warnings = _warnings(tmp_path, "    DRADeviceTaints: false\n")
    assert len(warnings) == 1 and f":{_line(text, 'DRADeviceTaints')}: spec.featureGates.DRADeviceTaints: " \
        "feature gate DRADeviceTaints is off but DRADeviceTaintRules (on by default in 1.37) needs it" in warnings[0]


def test_lint_both_explicit_and_auto(tmp_path: Path) -> None:
    text, warnings = _warnings(tmp_path, "    DRAPartitionableDevicesType: true\n    DRAResourcePoolStatus: false\n")
    assert len(warnings) == 1
    assert "DRAPartitionableDevicesType is on but needs DRAResourcePoolStatus, which is off in this policy" \
        in warnings[0]
    # Left to the cluster: not the policy's claim to judge.
    _, warnings = _warnings(tmp_path, "    DRAPartitionableDevicesType: true\n    DRAResourcePoolStatus: auto\n")
    assert warnings == []
    # Consistent: nothing.
    _, warnings = _warnings(tmp_path, "    CompositePodGroup: true\n    GenericWorkload: true\n"
                                      "    TopologyAwareWorkloadScheduling: true\n")
    assert warnings == []
