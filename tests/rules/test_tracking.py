"""track-rollout: the docs/design.md §5 annotations on Pods, workloads, templates and claims."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tests.builders.pods import DATA, NOW, POLICY, annotation, manifest, run
from tests.helpers import review
from webhook.admission.engine import evaluate
from webhook.admission.review import parse_request
from webhook.policy.compiled import compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.policy.placement import plan, usage

KEY = "/metadata/annotations/dra-migration.io~1"


def claim(namespace: str, annotations: dict[str, str] | None = None, owner: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "gpu-claim", "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "train-0",
                                    "uid": "6f1c2d3e-0000-4000-8000-000000000001", "controller": True}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}


def tracked(holder: dict[str, Any]) -> dict[str, str | None]:
    return {n: annotation(holder, n) for n in ("path", "stage", "cohort", "policy")}


def test_claim_is_tracked_as_dra_claim():
    res = run(claim("pilot-a"), "pilot-a")
    assert res.allowed
    assert tracked(res.patched) == {"path": "dra-claim", "stage": "pilot", "cohort": "pilot-teams",
                                    "policy": POLICY.identity}


def test_claim_outside_every_cohort_records_cohort_none():
    res = run(claim("batch"), "batch")
    assert tracked(res.patched)["cohort"] == "none"
    assert tracked(res.patched)["stage"] == "legacy"


def test_scheduler_claim_is_never_mutated():
    special = claim("mig-a", {"resource.kubernetes.io/extended-resource-claim": "true"}, owner=True)
    special["metadata"]["generateName"] = "train-0-extended-resources-"
    del special["metadata"]["name"]
    req = parse_request(review(special, namespace="mig-a", user="system:kube-scheduler")["request"])
    assert evaluate(req, POLICY, None, "mutate", NOW).patch == []
    # The same claim created by anybody else is an ordinary claim.
    assert annotation(run(special, "mig-a").patched, "path") == "dra-claim"
    # Copying the annotation without the Pod owner does not make a user claim the scheduler's.
    forged = run(claim("mig-a", {"resource.kubernetes.io/extended-resource-claim": "true"}), "mig-a")
    assert annotation(forged.patched, "path") == "dra-claim"


def test_claim_template_is_annotated_on_itself_not_on_the_claims_it_makes():
    template = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu-template", "namespace": "mig-a"},
        "spec": {"metadata": {"labels": {"team": "ml"}},
                 "spec": {"devices": {"requests": [
                     {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}},
    }
    res = run(template, "mig-a")
    assert tracked(res.patched)["path"] == "dra-claim"
    assert res.patched["spec"] == template["spec"]
    assert all(op["path"].startswith("/metadata/") for op in res.patch)


def test_claims_are_tracked_on_create_only():
    c = claim("mig-a")
    res = run(c, "mig-a", "UPDATE", copy.deepcopy(c))
    assert res.patch == []


def test_pod_from_a_template_of_an_earlier_stage_gets_one_replace():
    pod = manifest("pod-from-pilot-template", "mig-a")
    pod["metadata"]["annotations"]["dra-migration.io/cohort"] = "migrated-teams"
    res = run(pod, "mig-a")
    assert res.patch == [{"op": "replace", "path": KEY + "stage", "value": "migrated"}]


def test_wrong_user_annotation_is_corrected():
    pod = manifest("pod-gpu", "pilot-a")
    pod["metadata"]["annotations"] = {"dra-migration.io/path": "dra-claim", "keep": "me"}
    res = run(pod, "pilot-a")
    assert annotation(res.patched, "path") == "dra-extended-resource"
    assert res.patched["metadata"]["annotations"]["keep"] == "me"


def test_pod_asking_only_for_resources_outside_the_policy_is_not_tracked():
    res = run(manifest("pod-unmapped", "pilot-a"), "pilot-a")
    assert res.patch == []


def test_jobset_mixing_claims_and_extended_resources_is_mixed_on_the_controller():
    js = manifest("jobset", "pilot-a")
    driver = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    driver["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "nic-template"}]
    res = run(js, "pilot-a")
    assert annotation(res.patched, "path") == "mixed"
    paths = [annotation(rj["template"]["spec"]["template"], "path") for rj in res.patched["spec"]["replicatedJobs"]]
    assert paths == ["dra-claim", "dra-extended-resource"]


def test_update_of_an_untracked_workload_does_not_touch_its_template():
    """Adding annotations to an unchanged template would roll out every Pod: only the controller is annotated."""
    deploy = manifest("deploy-gpu", "mig-a")
    required = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "gpu.example.com/allocation", "operator": "In", "values": ["dra"]}]}]}
    deploy["spec"]["template"]["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    res = run(deploy, "mig-a", "UPDATE", copy.deepcopy(deploy))
    assert all(not op["path"].startswith("/spec/") for op in res.patch)
    assert tracked(res.patched)["path"] == "dra-extended-resource"
    assert tracked(res.patched["spec"]["template"])["path"] is None


def test_annotation_prefix_comes_from_the_policy():
    doc = yaml.safe_load((DATA / "policy.yaml").read_text())
    doc["spec"]["annotationPrefix"] = "gpu.platform.example"
    policy = compile_policy(MigrationPolicy.model_validate(doc), b"other")
    res = run(manifest("pod-gpu", "pilot-a"), "pilot-a", policy=policy)
    ann = res.patched["metadata"]["annotations"]
    assert ann["gpu.platform.example/path"] == "dra-extended-resource"
    assert ann["gpu.platform.example/node-pool"] == "dra"
    assert ann["gpu.platform.example/policy"] == policy.identity
    assert not any(k.startswith("dra-migration.io/") for k in ann)


def test_rollout_path_rules():
    spec = manifest("pod-legacy-plus-new", "x")["spec"]
    u = usage(spec, POLICY)
    assert set(u.er) == {"example.com/gpu"} and set(u.legacy) == {"vendor.example.com/gpu"}
    assert plan(u, "pilot", POLICY).path == "device-plugin"
    er_only = usage(manifest("pod-gpu", "x")["spec"], POLICY)
    # This policy's device-plugin pool advertises example.com/gpu (nodePools.devicePlugin.advertises).
    assert [plan(er_only, s, POLICY).path for s in ("legacy", "pilot", "migrated")] == [
        "device-plugin", "dra-extended-resource", "dra-extended-resource"]
    assert plan(usage(manifest("pod-claims", "x")["spec"], POLICY), "legacy", POLICY).path == "dra-claim"
    assert plan(usage(manifest("pod-mixed", "x")["spec"], POLICY), "legacy", POLICY).path == "mixed"
    assert plan(usage(manifest("pod-cpu", "x")["spec"], POLICY), "pilot", POLICY).path is None
