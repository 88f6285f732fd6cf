"""Live migration gauges against the real control plane: Pods on each path, one drifted, counted once; one
writer per cluster through a Lease, taken over when its holder dies.

Further `dra-webhook serve` processes (two workers, the gauges read every second) run beside the harness's
webhook with the webhook's own ServiceAccount token, so the shipped RBAC is what the gauges' cluster-wide
lists and the Lease calls get. Each test uses a Lease of its own (`--lease-name`), so the harness's webhook
(a candidate for the default Lease) never competes with them. The namespace is alone in its own cohort
(`monitor-e2e`), so other tests' Pods never count here.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import policy_variant
from tests.e2e.install import NAMESPACE
from tests.e2e.objects import claim_pod, claim_template, pod
from tests.e2e.waits import eventually
from tests.helpers import start_server

pytestmark = pytest.mark.controllers
TRAINING = {"workload.example.com/kind": "training"}
# A refused API call as webhook.cluster.api.describe_error logs it ("HTTP 403 Forbidden: ..."), not any "403": the
# log also holds random certificate serials.
FORBIDDEN = re.compile(r"\bHTTP 403\b|\bForbidden\b")
COHORT = "monitor-e2e"
MONITOR_POLICY = policy_variant({
    "  - name: pilot-teams\n":
    f"  - name: {COHORT}\n    namespaces: {{names: [\"mon-*\"]}}\n    schedule:\n"
    "    - {stage: pilot, from: \"2000-01-01\"}\n  - name: pilot-teams\n",
})


LEASES = ("e2e-gauges-follow", "e2e-gauges-takeover")


@pytest.fixture(autouse=True)
def _own_leases(kube):
    """The shipped Role lets the webhook's ServiceAccount change its own Lease only (dra-webhook-gauges, by
    resourceNames), which the install ships (deploy/base/lease.yaml): grant it this file's Leases too and create
    them empty, as `serve --lease-name` needs (deploy/base/rbac.yaml)."""
    meta = {"name": "e2e-gauge-leases", "namespace": NAMESPACE}
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}"
    if meta["name"] in {r["metadata"]["name"] for r in kube.call("GET", f"{rbac}/roles").obj["items"]}:
        return
    kube.call("POST", f"{rbac}/roles", {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                        "metadata": meta, "rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": list(LEASES),
         "verbs": ["get", "update"]}]})
    kube.call("POST", f"{rbac}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": meta["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": "dra-webhook", "namespace": NAMESPACE}]})
    for name in LEASES:
        kube.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": name, "namespace": NAMESPACE}, "spec": {}})


def _gauges(server) -> dict[str, dict[tuple, float]]:
    client = server.client()
    try:
        status, body = client.get("/metrics")
    finally:
        client.close()
    assert status == 200
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            if s.name.startswith("dra_webhook_migration_") and s.labels.get("cohort") == COHORT:
                key = tuple(s.labels.get(k) for k in ("stage", "intended", "actual") if k in s.labels)
                out.setdefault(s.name, {})[key] = s.value
    return out


def test_gauges_follow_the_cluster(cluster, kube, namespace, policy, tmp_path):
    policy(MONITOR_POLICY)
    ns = namespace("mon")
    kube.create(pod("dra", ns))                                            # steered: dra-extended-resource
    kube.create(pod("legacy", ns, resource="vendor.example.com/gpu"))      # device-plugin
    kube.create(claim_template("train", ns, claim_labels=TRAINING))
    kube.create(claim_pod("claim", ns, "train"))                           # dra-claim, injected tolerations
    # Drift: intended for DRA (the webhook annotates it so), but bound straight to the device-plugin Node.
    kube.create(pod("drifted", ns, nodeName="e2e-dp-1"))

    def settled() -> bool:
        pods = {p["metadata"]["name"]: p for p in kube.list("v1", "Pod", ns)}
        return len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods.values()) and bool(
            pods["dra"].get("status", {}).get("extendedResourceClaimStatus"))
    eventually(settled, "Pods bound", 60)
    drifted = kube.get("v1", "Pod", "drifted", ns)
    assert drifted["metadata"]["annotations"]["dra-migration.io/path"] == "dra-extended-resource"

    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(MONITOR_POLICY)
    server = start_server(tmp_path, policy_file, "--kubeconfig", str(cluster.webhook.kubeconfig),
                          "--gauge-interval", "1", "--lease-name", LEASES[0], workers=2, offline=False)
    try:
        expected_pods = {
            ("pilot", "dra-extended-resource", "dra-extended-resource"): 1,
            ("pilot", "device-plugin", "device-plugin"): 1,
            ("pilot", "dra-claim", "dra-claim"): 1,
            ("pilot", "dra-extended-resource", "device-plugin"): 1,
        }
        got = eventually(lambda: (g := _gauges(server)).get("dra_webhook_migration_pods") == expected_pods and g,
                         "the gauges to show the four Pods", 60)
        assert got["dra_webhook_migration_drifted_pods"] == {("pilot",): 1}
        assert got["dra_webhook_migration_taint_unevictable_pods"] == {(): 1}  # the extended-resource Pod
        assert got["dra_webhook_migration_claims_injected_tolerations"] == {(): 1}
        assert got["dra_webhook_migration_cohort_stage"] == {("pilot",): 1}
        for _ in range(5):  # whichever of the two workers answers, each Pod counts once
            assert _gauges(server)["dra_webhook_migration_pods"] == expected_pods
            time.sleep(0.2)
        kube.delete("v1", "Pod", "drifted", ns)
        eventually(lambda: _gauges(server).get("dra_webhook_migration_drifted_pods") == {("pilot",): 0},
                   "the drift to clear once the Pod is gone", 60)
    finally:
        server.stop()
    assert not FORBIDDEN.search(server.output()) and server.output().count("exports the migration gauges") == 1


def _writer(server) -> float | None:
    """The replica's dra_webhook_migration_gauge_writer (None before its writer decided)."""
    client = server.client()
    try:
        status, body = client.get("/metrics")
    finally:
        client.close()
    assert status == 200
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name == "dra_webhook_migration_gauge_writer":
            return fam.samples[0].value
    return None


def _exports_counts(server) -> bool:
    return bool(_gauges(server).get("dra_webhook_migration_cohort_stage"))


def test_one_writer_per_cluster_and_takeover(cluster, kube, tmp_path):
    """Two replicas, one Lease: exactly one exports the gauges; killed outright (no release), the other takes
    the Lease once it expires (15 s) and exports them."""
    lease = LEASES[1]
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(MONITOR_POLICY)
    servers = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(start_server(tmp_path / name, policy_file, "--kubeconfig",
                                        str(cluster.webhook.kubeconfig), "--gauge-interval", "1",
                                        "--lease-name", lease, workers=1, offline=False))
        def one_writer() -> list[float] | None:
            w = [_writer(s) for s in servers]
            return w if None not in w and sum(w) == 1 else None

        writers = eventually(one_writer, "one replica to be the writer, the other not", 60)
        leader, other = (servers[0], servers[1]) if writers[0] == 1 else (servers[1], servers[0])
        eventually(lambda: _exports_counts(leader), "the writer's gauges", 60)
        for _ in range(3):  # the other replica serves admission only: no migration counts
            assert _writer(other) == 0 and not _exports_counts(other)
            time.sleep(0.5)
        held = kube.get("coordination.k8s.io/v1", "Lease", lease, NAMESPACE)["spec"]
        # The Lease was shipped empty (as deploy/base/lease.yaml ships dra-webhook-gauges): its first holder is a
        # transition from nobody, as in client-go's tryAcquireOrRenew.
        assert held["leaseDurationSeconds"] == 15 and held["leaseTransitions"] == 1
        os.killpg(leader.proc.pid, signal.SIGKILL)  # the whole replica at once: nobody releases the Lease
        leader.proc.wait(10)
        eventually(lambda: _writer(other) == 1 and _exports_counts(other), "the other replica to take over", 60)
        taken = kube.get("coordination.k8s.io/v1", "Lease", lease, NAMESPACE)["spec"]
        assert taken["holderIdentity"] != held["holderIdentity"] and taken["leaseTransitions"] == 2
    finally:
        for s in servers:
            s.stop()
    assert not FORBIDDEN.search(servers[1].output() + servers[0].output())
    # A clean stop releases the Lease: nobody holds it now.
    assert kube.get("coordination.k8s.io/v1", "Lease", lease, NAMESPACE)["spec"].get("holderIdentity", "") == ""
