"""Issue 14 item 6: every workload kind is examined (dispatched on API group AND kind) or said to be
unexamined, and the webhook configurations list exactly what is examined."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders.pods import run
from webhook.objects.pods import KINDS, WORKLOAD_KINDS, group_of, pod_labels, pod_templates, workload_kind

ROOT = Path(__file__).resolve().parents[2]
T = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i",
                                                                     "resources": {"limits": {"example.com/gpu": 1}}}]}}

# (apiVersion, kind, object spec, expected (path, name) of each template)
LAYOUTS: list[tuple[str, str, dict[str, Any], list[tuple[tuple[Any, ...], str]]]] = [
    ("kubeflow.org/v1", "TFJob", {"tfReplicaSpecs": {"PS": {"template": T}, "Worker": {"template": T}}},
     [(("spec", "tfReplicaSpecs", "PS", "template"), "PS"),
      (("spec", "tfReplicaSpecs", "Worker", "template"), "Worker")]),
    ("kubeflow.org/v2beta1", "MPIJob", {"mpiReplicaSpecs": {"Launcher": {"template": T}, "Worker": {"template": T}}},
     [(("spec", "mpiReplicaSpecs", "Launcher", "template"), "Launcher"),
      (("spec", "mpiReplicaSpecs", "Worker", "template"), "Worker")]),
    ("kubeflow.org/v1", "PaddleJob", {"paddleReplicaSpecs": {"Worker": {"template": T}}},
     [(("spec", "paddleReplicaSpecs", "Worker", "template"), "Worker")]),
    ("kubeflow.org/v1", "XGBoostJob", {"xgbReplicaSpecs": {"Master": {"template": T}}},
     [(("spec", "xgbReplicaSpecs", "Master", "template"), "Master")]),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet",
     {"leaderWorkerTemplate": {"leaderTemplate": T, "workerTemplate": T, "size": 2}},
     [(("spec", "leaderWorkerTemplate", "leaderTemplate"), "leader"),
      (("spec", "leaderWorkerTemplate", "workerTemplate"), "worker")]),
    ("ray.io/v1", "RayCluster", {"headGroupSpec": {"template": T},
                                 "workerGroupSpecs": [{"groupName": "gpu", "template": T}]},
     [(("spec", "headGroupSpec", "template"), "head"), (("spec", "workerGroupSpecs", 0, "template"), "gpu")]),
    ("ray.io/v1", "RayJob", {"rayClusterSpec": {"headGroupSpec": {"template": T},
                                                "workerGroupSpecs": [{"groupName": "w", "template": T}]}},
     [(("spec", "rayClusterSpec", "headGroupSpec", "template"), "head"),
      (("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template"), "w")]),
    ("batch.volcano.sh/v1alpha1", "Job", {"tasks": [{"name": "ps", "template": T}, {"name": "worker", "template": T}]},
     [(("spec", "tasks", 0, "template"), "ps"), (("spec", "tasks", 1, "template"), "worker")]),
]


@pytest.mark.parametrize("api_version,kind,spec,want", LAYOUTS, ids=[f"{a}/{k}" for a, k, _, _ in LAYOUTS])
def test_pod_templates_of_the_common_crds(api_version: str, kind: str, spec: dict[str, Any], want: Any) -> None:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "n"}, "spec": spec}
    refs = pod_templates(obj, kind)
    assert [(r.path, r.name) for r in refs] == want
    assert all(r.spec(obj) is T["spec"] for r in refs)


def test_dispatch_is_on_group_and_kind_never_kind_alone():
    volcano = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
               "spec": {"tasks": [{"name": "w", "template": T}], "template": T}}
    assert [r.path for r in pod_templates(volcano, "Job")] == [("spec", "tasks", 0, "template")]
    assert [r.path for r in pod_templates(volcano, "Job", "batch")] == [("spec", "template")]
    assert pod_templates(volcano, "Job", "example.com") == []
    assert group_of({"kind": "Job"}, "Job") == "batch"  # no apiVersion: the built-in kind
    assert workload_kind("kueue.x-k8s.io", "Workload") is None


def test_controller_labels_follow_the_group_too():
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "vllm"},
           "spec": {"leaderWorkerTemplate": {"leaderTemplate": T, "workerTemplate": T}}}
    (leader, _) = pod_templates(lws, "LeaderWorkerSet")
    assert pod_labels(lws, "LeaderWorkerSet", leader)["leaderworkerset.sigs.k8s.io/name"] == "vllm"
    vj = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "mpi"},
          "spec": {"tasks": [{"name": "w", "template": T}]}}
    (ref,) = pod_templates(vj, "Job")
    assert pod_labels(vj, "Job", ref)["volcano.sh/job-name"] == "mpi"


def test_volcano_task_pods_run_under_the_jobs_scheduler():
    """createJobPod copies the Job's schedulerName into a task Pod without one; Volcano's admission defaults it
    to "volcano". A task template's own schedulerName wins, and spec() stays the stored template."""
    own = {"spec": {**T["spec"], "schedulerName": "default-scheduler"}}
    vj = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "mpi"},
          "spec": {"schedulerName": "kube-batch",
                   "tasks": [{"name": "a", "template": T}, {"name": "b", "template": own}]}}
    a, b = pod_templates(vj, "Job")
    assert a.spec_as_run(vj)["schedulerName"] == "kube-batch" and "schedulerName" not in a.spec(vj)
    assert b.spec_as_run(vj)["schedulerName"] == "default-scheduler"
    del vj["spec"]["schedulerName"]
    assert a.spec_as_run(vj)["schedulerName"] == "volcano"
    batch = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": T}}
    (ref,) = pod_templates(batch, "Job")
    assert ref.spec_as_run(batch) is T["spec"]  # other kinds: the template as it is


def test_a_volcano_job_is_judged_through_the_engine():
    obj = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "mpi"},
           "spec": {"minAvailable": 1, "schedulerName": "volcano", "tasks": [{"name": "worker", "replicas": 2,
                    "template": {"spec": {"restartPolicy": "OnFailure", "containers": [
                        {"name": "w", "image": "i", "resources": {"limits": {"vendor.example.com/gpu": 1}}}]}}}]}}
    res = run(obj, "mig-a")
    assert not res.allowed and "legacy-resource-name" in res.findings
    assert "[worker]" in res.message


def _rules(doc: dict[str, Any], name: str) -> set[tuple[str, str, str]]:
    (hook,) = [h for h in doc["webhooks"] if h["name"] == name]
    return {(g, v, r) for rule in hook["rules"] for g in rule["apiGroups"] for v in rule["apiVersions"]
            for r in rule["resources"]}


def test_webhook_configurations_list_every_examined_workload_kind():
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "webhooks.yaml").read_text()))
    want = {(k.group, v, k.resource) for k in KINDS for v in k.versions}
    for doc, name in ((docs[0], "workloads.mutate.dra-migration.io"), (docs[1], "workloads.validate.dra-migration.io")):
        listed = {t for t in _rules(doc, name) if t[0] != "scheduling.k8s.io"}
        assert listed == want, name


def test_rule_registration_covers_every_kind_name():
    assert {k.kind for k in KINDS} - {"Pod"} == WORKLOAD_KINDS
    assert len({(k.group, k.kind) for k in KINDS}) == len(KINDS)
