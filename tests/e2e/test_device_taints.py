"""Device maintenance: `dra-webhook preflight` against the real device-taint eviction controller.

Before a `NoExecute` DeviceTaintRule (resource.k8s.io/v1beta2 in 1.36) exists, preflight predicts per Pod:
evicted at once, after N s, or never. The test then creates the rule and watches what kube-controller-manager
does. Upstream read: kubernetes/kubernetes pkg/controller/devicetainteviction/device_taint_eviction.go
(commit ab3cec07), ``(*Controller).podEvictionTime``: only claims named in ``pod.spec.resourceClaims`` are
considered, and the eviction time is the taint's ``timeAdded`` plus the toleration's ``tolerationSeconds``.
So a Pod on the extended-resource path, whose claim sits in ``status.extendedResourceClaimStatus``, is never
evicted (upstream issue 141290, open in 1.37.0).

The scenario runs once per module on its own driver, DeviceClass and pool (nothing else is allocated there),
with the policy's training toleration shortened to 8 s.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time

import pytest
import yaml

from tests.e2e.conftest import DEFAULT_POLICY, policy_variant
from tests.e2e.objects import GPU_NODE, claim_pod, claim_template, device_class, pod, resource_slice
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers

DRIVER = CLASS = "maint.example.com"
EXTENDED = "example.com/maint-gpu"
TOLERATION_SECONDS = 8
TAINT_KEY = "example.com/maintenance"
TRAINING = {"workload.example.com/kind": "training"}
RULE = {
    "apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule", "metadata": {"name": "e2e-maintenance"},
    "spec": {"deviceSelector": {"driver": DRIVER, "pool": "e2e-maint"},
             "taint": {"key": TAINT_KEY, "value": "planned", "effect": "NoExecute"}},
}
# Pod name -> what the real controller does (and so what preflight must predict).
EXPECTED = {
    "plain": ("at-once", None),                    # claim without a toleration
    "training": ("after", TOLERATION_SECONDS),     # training job: the policy's injected toleration
    "tolerant": ("never", None),                   # the user tolerates the taint without a time limit
}
EXTENDED_POD = "extended"                          # extended-resource path: not evicted (issue 141290)


def _parse(ts: str) -> float:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@pytest.fixture(scope="module")
def maintenance(cluster):
    """Create the Pods, run preflight, create the rule, record when each Pod disappeared; clean up after."""
    kube = cluster.kube
    variant = policy_variant({
        "    allowedDeviceClasses: [gpu.example.com]": f"    allowedDeviceClasses: [gpu.example.com, {CLASS}]",
        # Its driver is another than the policy's GPU one: under migration too (issue #24 item 11).
        "  claims:\n": f"  migration: {{deviceClasses: [gpu.example.com, {CLASS}]}}\n  claims:\n",
        "effect: NoExecute, tolerationSeconds: 3600}": f"effect: NoExecute, tolerationSeconds: {TOLERATION_SECONDS}}}",
    })
    cluster.webhook.use_policy(variant)
    policy_file = cluster.workdir / "maintenance-policy.yaml"
    policy_file.write_text(variant)
    cluster_objects = [device_class(CLASS, DRIVER, EXTENDED),
                       resource_slice("e2e-maint", DRIVER, GPU_NODE, "e2e-maint", 4)]
    ns = "team-device-maintenance"
    try:
        for obj in cluster_objects:
            kube.create(obj)
        cluster.create_namespace(ns)
        kube.create(claim_template("plain", ns, CLASS))
        kube.create(claim_template("tolerant", ns, CLASS, tolerations=[
            {"key": TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}]))
        kube.create(claim_pod("plain", ns, "plain"))
        kube.create(claim_pod("training", ns, "plain", labels=TRAINING, activeDeadlineSeconds=20000))
        kube.create(claim_pod("tolerant", ns, "tolerant"))
        kube.create(pod(EXTENDED_POD, ns, resource=EXTENDED))
        names = [*EXPECTED, EXTENDED_POD]

        def all_allocated() -> bool:
            claims = kube.list("resource.k8s.io/v1", "ResourceClaim", ns)
            pods = kube.list("v1", "Pod", ns)
            return (len(claims) == len(names) and all(c.get("status", {}).get("allocation") for c in claims)
                    and len(pods) == len(names) and all(p["spec"].get("nodeName") for p in pods))
        eventually(all_allocated, "every maintenance Pod bound with its claim allocated", 60)

        rule_file = cluster.workdir / "maintenance-rule.yaml"
        rule_file.write_text(yaml.safe_dump(RULE))
        run = subprocess.run(
            [sys.executable, "-m", "webhook", "preflight", "-f", str(rule_file), "--policy", str(policy_file),
             "--kubeconfig", str(cluster.cp.admin_kubeconfig), "-o", "json"],
            capture_output=True, text=True, timeout=60)
        assert run.returncode in (0, 3), run.stderr
        report = json.loads(run.stdout)
        predicted = {p["pod"]: (p["outcome"], p["seconds"]) for p in report["pods"] if p["namespace"] == ns}

        kube.create(RULE)
        stored = kube.get("resource.k8s.io/v1beta2", "DeviceTaintRule", RULE["metadata"]["name"])
        added = _parse(stored["spec"]["taint"].get("timeAdded") or stored["metadata"]["creationTimestamp"])
        gone: dict[str, float] = {}

        def training_gone() -> bool:
            present = {p["metadata"]["name"] for p in kube.list("v1", "Pod", ns)}
            for name in names:
                if name not in present and name not in gone:
                    gone[name] = time.time()
            return "training" in gone
        eventually(training_gone, "the training Pod evicted after its toleration", TOLERATION_SECONDS + 30,
                   interval=0.2)
        left = {p["metadata"]["name"]: p for p in kube.list("v1", "Pod", ns)}
        yield {"predicted": predicted, "gone": gone, "added": added, "left": left, "report": report}
    finally:
        kube.delete("resource.k8s.io/v1beta2", "DeviceTaintRule", RULE["metadata"]["name"])
        kube.delete("v1", "Namespace", ns, grace=None)
        # The class and the slice of this module's own driver stay: deleting the slice right after the rule
        # can reach kube-scheduler v1.36.2 before the rule's deletion does, and it panics on a ResourceSlice
        # event while a DeviceTaintRule exists (see test_outage.KNOWN_SCHEDULER_PANIC).
        cluster.webhook.use_policy(DEFAULT_POLICY.read_text())


@pytest.mark.parametrize("name", list(EXPECTED))
def test_preflight_predicts_what_the_controller_does(kube, maintenance, name):
    outcome, seconds = EXPECTED[name]
    assert maintenance["predicted"].get(name) == (outcome, seconds), maintenance["report"]
    gone, left = maintenance["gone"], maintenance["left"]
    if outcome == "at-once":
        assert name in gone, f"{name} was not evicted"
    elif outcome == "after":
        assert name in gone, f"{name} was not evicted"
        # A lower bound only (never a speed assertion): the controller must not evict before the
        # toleration ran out. One second of slack for timeAdded's whole-second precision.
        assert gone[name] >= maintenance["added"] + seconds - 1, (gone[name] - maintenance["added"])
    else:
        # Still there after the 8 s toleration of the training Pod ran out, and not marked for eviction.
        assert name in left and name not in gone
        conditions = left[name].get("status", {}).get("conditions") or []
        assert not [c for c in conditions if c["type"] == "DisruptionTarget"], conditions


def test_controller_does_not_evict_extended_resource_pods(kube, maintenance):
    # Upstream issue 141290: the real controller only looks at spec.resourceClaims.
    assert EXTENDED_POD in maintenance["left"] and EXTENDED_POD not in maintenance["gone"]
    claim = maintenance["left"][EXTENDED_POD]["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    results = kube.get("resource.k8s.io/v1", "ResourceClaim", claim, "team-device-maintenance")[
        "status"]["allocation"]["devices"]["results"]
    assert results[0]["pool"] == "e2e-maint"  # it does sit on a tainted device


def test_preflight_predicts_no_eviction_for_extended_resource_pods(maintenance):
    # webhook.fleet.preflight mirrors podEvictionTime: the extended-resource claim never evicts; it says to drain.
    assert maintenance["predicted"].get(EXTENDED_POD) == ("never", None), maintenance["report"]
    [entry] = [p for p in maintenance["report"]["pods"] if p["pod"] == EXTENDED_POD]
    assert "drain" in entry["reason"], entry
    assert any("141290" in n for n in maintenance["report"]["notes"]), maintenance["report"]["notes"]
    # The outcome follows the version read from the real API server's discovery /version
    # (webhook/gates/eviction.py): this one, v1.36.2, predates the fix (kubernetes/kubernetes PR #142289).
    assert any("cluster version 1.36.2 predates the fix" in n for n in maintenance["report"]["notes"]), \
        maintenance["report"]["notes"]
