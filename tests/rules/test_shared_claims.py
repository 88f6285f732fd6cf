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

from tests.builders.shared_claims import DEPLOYMENT, POD_SPEC, deployment, hpa
from webhook.offline.views import StaticView
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.rules.base import Context, Finding
from webhook.rules.shared_claims import RESERVED_FOR_MAX, shared_claim_limit
from webhook.rules.view import Autoscaler, Lookup, OfflineView

NOW = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)


def policy(**gates: bool) -> CompiledPolicy:
    doc = {"apiVersion": "dra-migration.io/v1alpha1", "kind": "MigrationPolicy", "metadata": {"name": "p"},
           "spec": {"featureGates": gates}}
    return compile_policy(MigrationPolicy.model_validate(doc), repr(doc).encode())


def context(obj: dict[str, Any], pol: CompiledPolicy | None = None, view: Any = None) -> Context:
    group = obj["apiVersion"].rpartition("/")[0]
    return Context(policy=pol or policy(), kind=obj["kind"], group=group, version="v1", operation="CREATE",
                   namespace="default", phase="validate", now=NOW, cohort=None, stage="migrated",
                   view=view or OfflineView())


def run(obj: dict[str, Any], pol: CompiledPolicy | None = None, view: Any = None) -> list[Finding]:
    before = copy.deepcopy(obj)
    findings = shared_claim_limit(obj, context(obj, pol, view)).findings
    assert obj == before
    return findings


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
    assert "or a PodGroup claim (PodGroup spec.resourceClaims" in on


# --- claims shared by a PodGroup (issue 25 item 1) ---------------------------------------------------
# PodGroup shape: docs/dra-1.37.md §2.6 (scheduling.k8s.io PodGroup spec.resourceClaims, KEP-5729 example).

GROUP_ON = {"DRAWorkloadResourceClaims": True, "GenericWorkload": True}


def grouped_deployment(replicas: int, group: str = "trainers") -> dict[str, Any]:
    obj = deployment(replicas)
    obj["spec"]["template"]["spec"]["schedulingGroup"] = {"podGroupName": group}
    return obj


def podgroup(entry: dict[str, Any], name: str = "trainers") -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 300}}, "resourceClaims": [entry]}}


SAME = {"name": "resource", "resourceClaimName": "external-gpu-deployment"}


def test_pods_reserved_through_their_podgroup_are_one_consumer() -> None:
    """The layout the rule's own remediation recommends is never denied."""
    view = StaticView(podgroups=[podgroup(SAME)])
    assert run(grouped_deployment(300), policy(**GROUP_ON), view) == []
    # ... and the remediation that recommends it is what the gate makes true:
    assert "reserved once for the whole group" in run(deployment(300), policy(**GROUP_ON), view)[0].remediation


def test_a_podgroup_counts_only_with_the_gate_on_and_the_same_entry() -> None:
    view = StaticView(podgroups=[podgroup(SAME)])
    assert [f.message.split(" can use")[0] for f in run(grouped_deployment(300), view=view)] == ["up to 375 Pods"]
    other = StaticView(podgroups=[podgroup({**SAME, "name": "other"})])
    assert run(grouped_deployment(300), policy(**GROUP_ON), other)
    elsewhere = StaticView(podgroups=[podgroup(SAME, name="another-group")])
    assert run(grouped_deployment(300), policy(**GROUP_ON), elsewhere) == []  # unseen group: counted as one


def test_podgroups_and_ungrouped_pods_add_up() -> None:
    def rjob(name: str, replicas: int, parallelism: int, group: str | None) -> dict[str, Any]:
        spec = copy.deepcopy(POD_SPEC)
        if group:
            spec["schedulingGroup"] = {"podGroupName": group}
        return {"name": name, "replicas": replicas,
                "template": {"spec": {"parallelism": parallelism, "template": {"spec": spec}}}}

    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "js"},
              "spec": {"replicatedJobs": [rjob("workers", 4, 200, "trainers"), rjob("eval", 1, 256, None)]}}
    view = StaticView(podgroups=[podgroup(SAME)])
    (finding,) = run(jobset, policy(**GROUP_ON), view)
    assert finding.message.startswith("up to 257 consumers (Pods, and 1 reserved as PodGroups)"), finding.message
    jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"] = 255
    assert run(jobset, policy(**GROUP_ON), view) == []


def test_a_jobs_own_scheduling_claim_is_one_consumer_per_job() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"parallelism": 400, "scheduling": {"resourceClaims": [SAME]}, "template": {"spec": POD_SPEC}}}
    assert run(job, policy(**GROUP_ON, WorkloadWithJob=True)) == []
    assert run(job, policy(**GROUP_ON))  # the Job controller builds no PodGroup without WorkloadWithJob


def cronjob(parallelism: int, concurrency: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedule": "*/5 * * * *",
                            "jobTemplate": {"spec": {"parallelism": parallelism, "template": {"spec": POD_SPEC}}}}
    if concurrency:
        spec["concurrencyPolicy"] = concurrency
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}, "spec": spec}


@pytest.mark.parametrize("concurrency", [None, "Allow"])
def test_a_cronjob_that_allows_overlap_counts_two_jobs(concurrency: str | None) -> None:
    (finding,) = run(cronjob(200, concurrency))
    assert finding.message.startswith("up to 400 Pods (concurrencyPolicy Allow: two or more Jobs at once)")
    assert run(cronjob(128, concurrency)) == []


@pytest.mark.parametrize("concurrency", ["Forbid", "Replace"])
def test_a_cronjob_running_one_job_counts_one(concurrency: str) -> None:
    assert run(cronjob(256, concurrency)) == []
    assert run(cronjob(257, concurrency))


def test_the_message_says_what_kube_scheduler_does_at_entry_257() -> None:
    (finding,) = run(deployment(300))
    assert "PreBind update of status.reservedFor fails validation" in finding.message
    assert "retried until a reservation frees" in finding.message
    assert "maximum number of consumers" not in finding.message  # not kube-scheduler's words


# --- an autoscaler's maximum ------------------------------------------------------------------------
# HPA objects: the Kubernetes docs' walkthrough shape (kubernetes.io/docs/tasks/run-application/
# horizontal-pod-autoscale-walkthrough, autoscaling/v2 "php-apache": CPU utilization 50%), retargeted.


def with_hpas(obj: dict[str, Any], *hpas: dict[str, Any]) -> list[Finding]:
    return run(obj, view=StaticView(autoscalers=list(hpas)))


def test_an_autoscalers_maximum_counts_whatever_replicas_says() -> None:
    assert with_hpas(deployment(2)) == []
    findings = with_hpas(deployment(2), hpa(400))
    assert [f.message.split(" can use")[0] for f in findings] == [
        "up to 500 Pods (HorizontalPodAutoscaler gpu-hpa maxReplicas 400 + maxSurge)"]
    assert findings[0].paths == ("spec.template.spec.resourceClaims[0]",)
    recreate = with_hpas(deployment(2, {"type": "Recreate"}), hpa(257))
    assert [f.message.split(" can use")[0] for f in recreate] == [
        "up to 257 Pods (HorizontalPodAutoscaler gpu-hpa maxReplicas 257)"]
    assert with_hpas(deployment(2), hpa(204)) == []  # 204 + 51 = 255
    assert with_hpas(deployment(2, {"type": "Recreate"}), hpa(256)) == []


def test_replicas_above_the_maximum_count_and_name_no_autoscaler() -> None:
    findings = with_hpas(deployment(300), hpa(10))
    assert [f.message.split(" can use")[0] for f in findings] == ["up to 375 Pods"]


@pytest.mark.parametrize("other", [
    hpa(400, target="another-deployment"),
    hpa(400, namespace="other-team"),
    hpa(400, kind="StatefulSet"),
    hpa(400, api_version="example.com/v1"),  # same kind name, another API group
])
def test_an_autoscaler_of_another_workload_does_not_count(other: dict[str, Any]) -> None:
    assert with_hpas(deployment(2), other) == []


def test_the_api_version_of_the_target_reference_does_not_matter() -> None:
    """The HPA controller maps scaleTargetRef by group and kind (reconcileAutoscaler: schema.GroupKind)."""
    assert len(with_hpas(deployment(2), hpa(400, api_version="apps/v1beta2"))) == 1


def test_the_highest_of_several_autoscalers_counts() -> None:
    findings = with_hpas(deployment(2, {"type": "Recreate"}), hpa(300, name="b"), hpa(900, name="a"), hpa(5))
    assert "up to 900 Pods (HorizontalPodAutoscaler a maxReplicas 900)" in findings[0].message


def test_statefulset_and_replicaset_are_scaled_jobs_are_not() -> None:
    for kind in ("StatefulSet", "ReplicaSet"):
        obj = {**copy.deepcopy(DEPLOYMENT), "kind": kind}
        findings = with_hpas(obj, hpa(300, kind=kind))
        assert [f.message.split(" can use")[0] for f in findings] == [
            "up to 300 Pods (HorizontalPodAutoscaler gpu-hpa maxReplicas 300)"], kind
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "default"},
           "spec": {"parallelism": 2, "template": {"spec": POD_SPEC}}}
    assert with_hpas(job, hpa(300, target="j", kind="Job", api_version="batch/v1")) == []


def test_zero_replicas_disable_the_autoscaler_unless_its_minimum_is_zero() -> None:
    """reconcileAutoscaler: replicas 0 and minReplicas != 0 (default 1) -> "scaling is disabled"."""
    assert with_hpas(deployment(0), hpa(400)) == []
    assert with_hpas(deployment(0), hpa(400, min_replicas=None)) == []
    assert len(with_hpas(deployment(0), hpa(400, min_replicas=0))) == 1


def test_generate_name_has_no_autoscaler() -> None:
    obj = deployment(2)
    del obj["metadata"]["name"]
    obj["metadata"]["generateName"] = "external-gpu-deployment"
    assert with_hpas(obj, hpa(400, target="external-gpu-deployment")) == []


class _Unsynced(OfflineView):
    """A live view whose HPA watch has not listed yet."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str, str]] = []

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Lookup[Autoscaler]:
        self.asked.append((namespace, group, kind, name))
        return Lookup.unknown("HorizontalPodAutoscalers not synced yet")


def test_unknown_autoscalers_keep_the_count_and_say_so_in_the_audit_only() -> None:
    view = _Unsynced()
    obj = deployment(2)
    out = shared_claim_limit(obj, context(obj, view=view))
    assert out.findings == []
    assert view.asked == [("default", "apps", "Deployment", "external-gpu-deployment")]
    assert out.degraded == ("shared-claim-limit: HorizontalPodAutoscalers unknown (HorizontalPodAutoscalers not "
                            "synced yet), counted spec.replicas",)
    offline = shared_claim_limit(obj, context(obj))
    assert offline.findings == [] and offline.degraded == ()


def test_no_autoscaler_lookup_without_a_named_claim() -> None:
    view = _Unsynced()
    obj = deployment(2)
    obj["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "resource", "resourceClaimTemplateName": "t"}]
    out = shared_claim_limit(obj, context(obj, view=view))
    assert out.findings == [] and view.asked == [] and out.degraded == ()


def test_malformed_autoscalers_are_ignored() -> None:
    bad = [hpa(400), hpa(400), hpa(400), {"kind": "HorizontalPodAutoscaler"}]
    del bad[0]["spec"]["maxReplicas"]
    bad[1]["spec"]["scaleTargetRef"] = "external-gpu-deployment"
    bad[2]["spec"]["minReplicas"] = -1
    assert with_hpas(deployment(2), *bad) == []
