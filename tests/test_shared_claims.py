"""``shared-claim-limit`` (issue 18 item 3): a named ResourceClaim shared by more Pods than reservedFor holds.

The Deployment is shaped after intel/intel-resource-drivers-for-kubernetes
deployments/gpu/examples (external-gpu-deployment: a Deployment whose Pods all name one external
ResourceClaim), updated to resource.k8s.io/v1 Pod fields; only ``replicas`` and the strategy vary.
The limit is upstream's ResourceClaimReservedForMaxSize = 256 (see webhook/rules/shared_claims.py).
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.rules.base import Context, Finding
from webhook.rules.shared_claims import RESERVED_FOR_MAX, shared_claim_limit
from webhook.view import OfflineView

NOW = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
POD_SPEC: dict[str, Any] = {
    "containers": [{"name": "with-resource", "image": "registry.k8s.io/e2e-test-images/busybox:1.29-2",
                    "resources": {"claims": [{"name": "resource"}]}}],
    "resourceClaims": [{"name": "resource", "resourceClaimName": "external-gpu-deployment"}],
}
DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "external-gpu-deployment", "namespace": "default"},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "external-gpu-deployment"}},
        "template": {"metadata": {"labels": {"app": "external-gpu-deployment"}}, "spec": POD_SPEC},
    },
}


def policy(**gates: bool) -> CompiledPolicy:
    doc = {"apiVersion": "dra-migration.io/v1alpha1", "kind": "MigrationPolicy", "metadata": {"name": "p"},
           "spec": {"featureGates": gates}}
    return compile_policy(MigrationPolicy.model_validate(doc), repr(doc).encode())


def run(obj: dict[str, Any], pol: CompiledPolicy | None = None) -> list[Finding]:
    group = obj["apiVersion"].rpartition("/")[0]
    ctx = Context(policy=pol or policy(), kind=obj["kind"], group=group, version="v1", operation="CREATE",
                  namespace="default", phase="validate", now=NOW, cohort=None, stage="migrated", view=OfflineView())
    before = copy.deepcopy(obj)
    findings = shared_claim_limit(obj, ctx).findings
    assert obj == before
    return findings


def deployment(replicas: int, strategy: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = copy.deepcopy(DEPLOYMENT)
    obj["spec"]["replicas"] = replicas
    if strategy is not None:
        obj["spec"]["strategy"] = strategy
    return obj


def test_the_published_shape_is_fine() -> None:
    assert RESERVED_FOR_MAX == 256
    assert run(DEPLOYMENT) == []


@pytest.mark.parametrize(("replicas", "strategy", "pods"), [
    (300, None, 375),  # default maxSurge 25%, rounded up
    (205, None, 257),  # 205 + ceil(51.25): one over during a rollout
    (257, {"type": "Recreate"}, 257),
    (250, {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 7}}, 257),
])
def test_deployment_over_the_limit_counting_surge(replicas: int, strategy: dict[str, Any] | None, pods: int) -> None:
    findings = run(deployment(replicas, strategy))
    assert len(findings) == 1
    f = findings[0]
    assert f.message.startswith(f"up to {pods} Pods can use ResourceClaim external-gpu-deployment at once")
    assert f.paths == ("spec.template.spec.resourceClaims[0]",)
    assert "resourceClaimTemplateName" in f.remediation


@pytest.mark.parametrize(("replicas", "strategy"), [
    (204, None),  # 204 + 51 = 255
    (256, {"type": "Recreate"}),
    (256, {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0}}),
])
def test_deployment_within_the_limit(replicas: int, strategy: dict[str, Any] | None) -> None:
    assert run(deployment(replicas, strategy)) == []


def test_statefulset_counts_replicas_and_template_claims_are_not_shared() -> None:
    sts = {**copy.deepcopy(DEPLOYMENT), "kind": "StatefulSet"}
    sts["spec"]["replicas"] = 257
    assert len(run(sts)) == 1
    sts["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "resource", "resourceClaimTemplateName": "t"}]
    assert run(sts) == []


def test_job_counts_parallelism_not_completions() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"completions": 10000, "parallelism": 256, "template": {"spec": POD_SPEC}}}
    assert run(job) == []
    job["spec"]["parallelism"] = 257
    assert [f.paths for f in run(job)] == [("spec.template.spec.resourceClaims[0]",)]


def test_jobset_sums_replicated_jobs_that_name_the_same_claim() -> None:
    def rjob(name: str, replicas: int, parallelism: int) -> dict[str, Any]:
        return {"name": name, "replicas": replicas,
                "template": {"spec": {"parallelism": parallelism, "template": {"spec": POD_SPEC}}}}

    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
              "spec": {"replicatedJobs": [rjob("leader", 1, 1), rjob("workers", 4, 64)]}}
    findings = run(jobset)
    assert len(findings) == 1 and "up to 257 Pods" in findings[0].message
    assert findings[0].paths == (
        "spec.replicatedJobs[0].template.spec.template.spec.resourceClaims[0]",
        "spec.replicatedJobs[1].template.spec.template.spec.resourceClaims[0]",
    )


def test_podgroup_claim_suggested_only_where_the_gate_is_on() -> None:
    off = run(deployment(300))[0].remediation
    assert "once DRAWorkloadResourceClaims is on" in off
    on = run(deployment(300), policy(DRAWorkloadResourceClaims=True, GenericWorkload=True))[0].remediation
    assert "or a PodGroup claim (PodGroup spec.resourceClaims)" in on
