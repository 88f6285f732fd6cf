"""``device-plugin-nic-beside-dra`` and ``device-plugin-slice`` (webhook/rules/node_devices.py, issue 45 items 3 and
5) through the real engine (tests/builders/pods.py ``run``: mutate, patch, schema check, validate)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.builders.pods import DATA, annotation, pool_of, run
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy

MIG_LABEL = "gpu.example.com/mig-profile"


def _policy(**spec: Any) -> CompiledPolicy:
    """tests/data/pods/policy.yaml with ``spec`` keys replaced."""
    doc = yaml.safe_load((DATA / "policy.yaml").read_text())
    doc["spec"].update(spec)
    raw = yaml.safe_dump(doc).encode()
    return compile_policy(MigrationPolicy.model_validate(doc), raw)


SLICED = _policy(sliceNodeLabels=[{"key": MIG_LABEL, "values": ["*g.*gb"], "sharing": "MIG",
                                   "deviceClassName": "mig.example.com", "resourceNames": ["example.com/gpu"]}])


def _pod(containers: list[dict[str, str]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {**spec, "containers": [
        {"name": f"c{i}", "image": "x", "resources": {"limits": limits}} for i, limits in enumerate(containers)]}}


# ---- device-plugin-nic-beside-dra ------------------------------------------------------------------


def test_nic_beside_gpus_steered_to_dra_is_warned_in_pilot() -> None:
    r = run(_pod([{"example.com/gpu": "4", "vpc.amazonaws.com/efa": "32"}]), "pilot-a")
    assert r.findings[ids.DEVICE_PLUGIN_NIC_BESIDE_DRA] == "Warn"
    assert pool_of(r.patched) == "dra"
    text = " ".join(r.warnings)
    assert 'container "c0": example.com/gpu on DRA beside device-plugin vpc.amazonaws.com/efa' in text
    assert "fix: move the NIC to DRA with a matchAttribute resource.kubernetes.io/pcieRoot constraint" in text


def test_nic_finding_is_advisory_once_migrated() -> None:
    r = run(_pod([{"example.com/gpu": "1", "rdma/hca_shared_devices_a": "1"}]), "mig-a")
    assert r.allowed and r.stage == "migrated"
    assert r.findings[ids.DEVICE_PLUGIN_NIC_BESIDE_DRA] == "Warn"


def test_nic_in_another_container_or_gpus_on_the_device_plugin_are_fine() -> None:
    apart = run(_pod([{"example.com/gpu": "8"}, {"vpc.amazonaws.com/efa": "32"}]), "pilot-a")
    assert ids.DEVICE_PLUGIN_NIC_BESIDE_DRA not in apart.findings
    legacy = run(_pod([{"example.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}]), "team-a")  # devicePlugin serves
    assert legacy.stage == "legacy" and ids.DEVICE_PLUGIN_NIC_BESIDE_DRA not in legacy.findings


def test_nic_names_are_the_policys() -> None:
    sriov = {"example.com/gpu": "8", "openshift.io/mlxnics": "1"}
    assert ids.DEVICE_PLUGIN_NIC_BESIDE_DRA not in run(_pod([sriov]), "pilot-a").findings
    policy = _policy(topologyAlignedResources=["openshift.io/*"])
    assert run(_pod([sriov]), "pilot-a", policy=policy).findings[ids.DEVICE_PLUGIN_NIC_BESIDE_DRA] == "Warn"
    none = _policy(topologyAlignedResources=[])
    efa = {"example.com/gpu": "8", "vpc.amazonaws.com/efa": "32"}
    assert ids.DEVICE_PLUGIN_NIC_BESIDE_DRA not in run(_pod([efa]), "pilot-a", policy=none).findings


# ---- device-plugin-slice --------------------------------------------------------------------------


def test_a_pod_pinning_mig_nodes_stays_on_the_device_plugin_pool_in_pilot() -> None:
    r = run(_pod([{"example.com/gpu": "1"}], nodeSelector={MIG_LABEL: "1g.10gb"}), "pilot-a", policy=SLICED)
    assert r.findings == {ids.DEVICE_PLUGIN_SLICE: "Warn"}
    assert pool_of(r.patched) == "devicePlugin"
    assert annotation(r.patched, "path") == "device-plugin"
    text = " ".join(r.warnings)
    assert (f"Pod pins nodeSelector {MIG_LABEL}=1g.10gb, where example.com/gpu is a MIG slice: "
            "kept on the devicePlugin pool") in text
    assert "DeviceClass mig.example.com" in text


def test_without_the_pin_or_with_notin_the_pod_goes_to_dra() -> None:
    plain = run(_pod([{"example.com/gpu": "1"}]), "pilot-a", policy=SLICED)
    notin = run(_pod([{"example.com/gpu": "1"}], affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": MIG_LABEL, "operator": "NotIn", "values": ["1g.10gb"]}]}]}}}), "pilot-a", policy=SLICED)
    for r in (plain, notin):
        assert pool_of(r.patched) == "dra" and ids.DEVICE_PLUGIN_SLICE not in r.findings


def test_a_legacy_stage_pod_pinning_mig_nodes_says_nothing() -> None:
    """The device plugin serves it in the legacy stage anyway: nothing was kept from the dra pool."""
    r = run(_pod([{"example.com/gpu": "1"}], nodeSelector={MIG_LABEL: "1g.10gb"}), "team-a", policy=SLICED)
    assert pool_of(r.patched) == "devicePlugin" and ids.DEVICE_PLUGIN_SLICE not in r.findings


def test_the_nvidia_defaults_do_not_touch_other_names() -> None:
    """The default entries are about nvidia.com/gpu: an example.com/gpu Pod with a MIG product label is steered."""
    r = run(_pod([{"example.com/gpu": "1"}], nodeSelector={"nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb"}),
            "pilot-a")
    assert pool_of(r.patched) == "dra" and ids.DEVICE_PLUGIN_SLICE not in r.findings
