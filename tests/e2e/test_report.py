"""`dra-webhook report` against the cluster: the numbers match the objects that are there."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.e2e.conftest import DEFAULT_POLICY
from tests.e2e.objects import claim_pod, claim_template, pod
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers
TRAINING = {"workload.example.com/kind": "training"}


def test_report_matches_the_cluster(cluster, kube, namespace):
    ns = namespace("pilot")
    kube.create(pod("dra", ns))                                           # intended dra-extended-resource
    kube.create(pod("legacy", ns, resource="vendor.example.com/gpu"))     # intended device-plugin
    kube.create(claim_template("train", ns, claim_labels=TRAINING))
    kube.create(claim_pod("claim", ns, "train"))                          # dra-claim, injected tolerations

    def settled() -> bool:
        pods = kube.list("v1", "Pod", ns)
        claims = kube.list("resource.k8s.io/v1", "ResourceClaim", ns)
        return len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) and len(claims) == 2 and all(
            p.get("status", {}).get("extendedResourceClaimStatus") for p in pods if p["metadata"]["name"] == "dra")
    eventually(settled, "Pods bound and claims made", 60)

    run = subprocess.run(
        [sys.executable, "-m", "webhook", "report", "--kubeconfig", str(cluster.cp.admin_kubeconfig),
         "--policy", str(DEFAULT_POLICY), "-n", ns, "-o", "json"],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["policy"] == cluster.webhook.readyz()["policy"]
    [row] = report["namespaces"]
    assert (row["name"], row["cohort"], row["stage"]) == (ns, "pilot-teams", "pilot")
    paths = {"device-plugin": 1, "dra-claim": 1, "dra-extended-resource": 1}
    assert row["intended"] == paths and row["actual"] == paths
    assert (row["drift"], row["unannotated"], row["claimsWithInjectedTolerations"]) == (0, 0, 1)
    claim_name = kube.get("v1", "Pod", "claim", ns)["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    assert report["injectedTolerations"] == [
        {"namespace": ns, "claim": claim_name, "tolerations": "1", "owner": "Pod/claim"}]
    assert [r for r in report["resources"] if r["resource"] == "example.com/gpu"][0]["ok"] is True
