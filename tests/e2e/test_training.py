"""Training jobs: the claims the resourceclaim controller generates for a Job's Pods carry the policy's
device tolerations (trainingJobs.deviceTolerations), decided from the template's labels or, for an
unlabelled template, from the owner Pod's labels (a cluster-view lookup under the shipped RBAC).
"""

from __future__ import annotations

import pytest

from tests.e2e.objects import claim_pod, claim_template, job
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers
TRAINING = {"workload.example.com/kind": "training"}
POLICY_TOLERATION = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute",
                     "tolerationSeconds": 3600}


def _generated_claim(kube, ns: str, job_name: str) -> dict:
    def found() -> dict | None:
        pods = kube.list("v1", "Pod", ns, f"batch.kubernetes.io/job-name={job_name}")
        names = [s.get("resourceClaimName") for p in pods
                 for s in p.get("status", {}).get("resourceClaimStatuses", [])]
        if len(names) != 1 or not names[0]:
            return None
        return kube.get_or_none("resource.k8s.io/v1", "ResourceClaim", names[0], ns)
    return eventually(found, f"the claim generated for Job {job_name}'s Pod", 30)


@pytest.mark.parametrize("labelled", ["template", "pod"])
def test_generated_claim_carries_the_policy_tolerations(kube, namespace, labelled):
    ns = namespace("pilot")
    kube.create(claim_template("gpu", ns, claim_labels=TRAINING if labelled == "template" else None))
    template = claim_pod("trainer", ns, "gpu", labels=TRAINING if labelled == "pod" else None)
    kube.create(job("train", ns, template))
    generated = _generated_claim(kube, ns, "train")
    assert generated["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert generated["metadata"]["ownerReferences"][0]["kind"] == "Pod"
    assert generated["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] == [POLICY_TOLERATION]
    assert generated["metadata"]["annotations"]["dra-migration.io/tolerations-injected"] == "1"
    # Allocated with the toleration: the scheduler copies it into the allocation result.
    results = eventually(
        lambda: (kube.get("resource.k8s.io/v1", "ResourceClaim", generated["metadata"]["name"], ns)
                 .get("status", {}).get("allocation", {}).get("devices", {}).get("results")),
        "the generated claim allocated", 30)
    assert results[0]["tolerations"] == [POLICY_TOLERATION]


def test_claim_of_a_non_training_job_gets_no_tolerations(kube, namespace):
    ns = namespace("pilot")
    kube.create(claim_template("gpu", ns))
    kube.create(job("batch", ns, claim_pod("worker", ns, "gpu")))
    generated = _generated_claim(kube, ns, "batch")
    assert "tolerations" not in generated["spec"]["devices"]["requests"][0]["exactly"]
    assert "dra-migration.io/tolerations-injected" not in generated["metadata"]["annotations"]
