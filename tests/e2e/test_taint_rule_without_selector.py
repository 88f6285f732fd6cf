"""Issue 46 item 3 on the real control plane (v1.36.2): a DeviceTaintRule without ``spec.deviceSelector``.

The API says such a rule matches no device, and the eviction controller keeps to it
(pkg/controller/devicetainteviction/device_taint_eviction.go ``ruleMatchesDevice``), but kube-scheduler's
ResourceSlice tracker applies it to every device (kubernetes/kubernetes#141620:
staging/src/k8s.io/dynamic-resource-allocation/resourceslice/tracker/tracker.go ``driverPoolDeviceIndexPatchKey``,
``(*Tracker).applyPatches``; fixed by #141648 in 1.38.0). Here: ``preflight`` says so beforehand, from the real
API server's ``/version``; the webhook warns when the rule is created (``taint-rule-without-selector``, through
the shipped webhook configuration for ``resource.k8s.io/v1beta2``); and the eviction controller evicts nothing.

What this control plane cannot show is the scheduler side: its kube-scheduler v1.36.2 applies no
``resource.k8s.io/v1beta2`` DeviceTaintRule to allocation at all, with or without a selector (a NoSchedule rule
selecting ``driver: gpu.example.com`` did not stop a claim on that driver either, tried while writing this test);
its tracker is typed for v1alpha3 rules (test_outage.py KNOWN_SCHEDULER_PANIC). The allocation side rests on the
upstream source and the fix's description (docs/upstream-sources.md). So the Pod created under the rule is
scheduled here, and that is not asserted as a Kubernetes fact.

No ResourceSlice is created, changed or deleted while the rule exists (KNOWN_SCHEDULER_PANIC).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.e2e.conftest import DEFAULT_POLICY, policy_variant
from tests.e2e.objects import GPU_NODE, claim_pod, claim_template
from tests.e2e.waits import eventually

pytestmark = [pytest.mark.controllers, pytest.mark.rule("taint-rule-without-selector")]

NS = "team-taint-no-selector"
RULE = {
    "apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule", "metadata": {"name": "e2e-no-selector"},
    "spec": {"taint": {"key": "example.com/no-selector", "value": "omitted", "effect": "NoExecute"}},
}
RULES = "rules: {gated-feature: Deny, unsatisfiable-claim: Warn}"


def _pod(kube, name: str) -> dict:  # noqa: ANN001
    return kube.get("v1", "Pod", name, NS)


def _preflight(cluster, tmp_path) -> dict:  # noqa: ANN001
    rule_file = tmp_path / "rule.yaml"
    rule_file.write_text(yaml.safe_dump(RULE))
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(DEFAULT_POLICY.read_text())
    run = subprocess.run(
        [sys.executable, "-m", "webhook", "preflight", "-f", str(rule_file), "--policy", str(policy_file),
         "--kubeconfig", str(cluster.cp.admin_kubeconfig), "-o", "json"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    out: dict = json.loads(run.stdout)
    return out


def test_a_rule_without_selector_is_said_warned_and_evicts_nothing(cluster, tmp_path) -> None:  # noqa: ANN001
    kube = cluster.kube
    report = _preflight(cluster, tmp_path)
    assert report["selectorOmitted"] == {"bug": "affected", "version": "1.36.2", "blocksAllocation": True}
    assert any("cluster version 1.36.2 predates the fix for kubernetes/kubernetes#141620" in n
               for n in report["notes"]), report["notes"]
    cluster.webhook.use_policy(policy_variant({RULES: RULES.replace("}", ", taint-rule-without-selector: Warn}")}))
    try:
        cluster.create_namespace(NS)
        kube.create(claim_template("gpu", NS))
        kube.create(claim_pod("before", NS, "gpu"))
        eventually(lambda: _pod(kube, "before")["spec"].get("nodeName") == GPU_NODE, "the first Pod bound", 60)
        created = kube.create(RULE)
        assert [w for w in created.warnings if w.startswith("taint-rule-without-selector")
                and "kube-scheduler taints every device with it" in w], created.warnings
        # A Pod created under the rule is scheduled by this kube-scheduler (see the module docstring): by then the
        # eviction controller has seen the rule, and it selects no device for it, so the first Pod is left alone.
        kube.create(claim_pod("after", NS, "gpu"))
        eventually(lambda: _pod(kube, "after")["spec"].get("nodeName"), "the Pod created under the rule judged", 60)
        before = _pod(kube, "before")
        assert not before["metadata"].get("deletionTimestamp")
        assert not [c for c in before.get("status", {}).get("conditions") or [] if c["type"] == "DisruptionTarget"]
    finally:
        kube.delete("resource.k8s.io/v1beta2", "DeviceTaintRule", RULE["metadata"]["name"])
        cluster.webhook.use_policy(DEFAULT_POLICY.read_text())
        kube.delete("v1", "Namespace", NS, grace=None)
