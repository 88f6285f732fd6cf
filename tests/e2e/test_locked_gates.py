"""Issue 46 item 1: what the v1.36.2 components do with a feature gate set against the catalogue, the fact
``lint``'s errors rest on (``webhook.gates.catalogue.gate_setting_error``).

- A gate locked in 1.36 set to the other value: every component refuses to start ("cannot set feature gate X
  to false, feature is locked to true"), component-base ``featuregate`` ``SetFromMap``.
- Set to its lock, or a switchable gate set either way: the component starts.
- A gate 1.36 does not have: "unrecognized feature gate", logged as a warning; the component starts and the
  setting is ignored.

No control plane is needed: feature gates are parsed with the flags, so ``--version`` after them makes each
run end at once (it prints the version only when the flags were accepted). Runs the unpacked binaries of
../shared/k8s (``binaries.find``), one short process each.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e import binaries
from webhook.gates.catalogue import GATES

VERSION = "1.36"
LOCKED = sorted(g.name for g in GATES if (st := g.stage_in(VERSION)) is not None and st.locked)
ABSENT = sorted(g.name for g in GATES if g.stage_in(VERSION) is None)


@pytest.fixture(scope="module")
def components() -> dict[str, Path]:
    found = binaries.find_or_skip()
    out = {"kube-apiserver": found.apiserver}
    if found.scheduler is not None and found.controller_manager is not None:
        out |= {"kube-scheduler": found.scheduler, "kube-controller-manager": found.controller_manager}
    return out


def start(binary: Path, gates: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), f"--feature-gates={gates}", "--version"], capture_output=True, text=True,
                          timeout=60, check=False)


def test_the_catalogue_knows_locked_and_absent_gates_of_1_36() -> None:
    assert {"DynamicResourceAllocation", "DRAAdminAccess"} <= set(LOCKED)
    assert "DRADerivedAttributes" in ABSENT


@pytest.mark.parametrize("gate", LOCKED)
@pytest.mark.parametrize("component", ["kube-apiserver", "kube-scheduler", "kube-controller-manager"])
def test_a_locked_gate_set_off_stops_the_component(components: dict[str, Path], component: str, gate: str) -> None:
    if component not in components:
        pytest.skip(f"{component} not among the binaries found")
    refused = start(components[component], f"{gate}=false")
    assert refused.returncode != 0, refused.stdout
    assert f"cannot set feature gate {gate} to false, feature is locked to true" in refused.stderr
    assert "Kubernetes v1.36" not in refused.stdout
    accepted = start(components[component], f"{gate}=true")
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout.startswith("Kubernetes v1.36")


def test_a_switchable_gate_is_accepted_either_way(components: dict[str, Path]) -> None:
    for value in ("true", "false"):
        run = start(components["kube-apiserver"], f"DRAConsumableCapacity={value}")
        assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("gate", ABSENT)
def test_a_gate_1_36_lacks_is_unrecognized_and_ignored(components: dict[str, Path], gate: str) -> None:
    run = start(components["kube-apiserver"], f"{gate}=true")
    assert f"unrecognized feature gate: {gate}" in run.stderr
    assert run.returncode == 0 and run.stdout.startswith("Kubernetes v1.36"), run.stderr
