"""Issue 14 item 1: UPDATEs of workloads never rewrite what the API server or another controller forbids,
and never roll out what the user did not change.

The Kubernetes rules pinned here were read upstream (see ``webhook.rules.workloads.template_writes``):
batch/v1 Job templates are immutable unless the old Job is suspended and never started
(kubernetes/kubernetes ``pkg/apis/batch/validation/validation.go`` ``validatePodTemplateUpdate``,
``pkg/registry/batch/job/strategy.go`` ``validationOptionsForJob``); JobSet refuses any template change
but annotations/labels/nodeSelector/tolerations/schedulingGates while suspended
(kubernetes-sigs/jobset ``pkg/webhooks/jobset_webhook.go`` ``ValidateUpdate``). The Job case is also
proven on the real API server in tests/e2e/test_workloads_updates.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.builders.pods import manifest, pool_of, run

STAGE = "dra-migration.io/stage"


def _template(obj: dict[str, Any], i: int | None = None) -> dict[str, Any]:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][i or 0]["template"]["spec"]["template"]
    return obj["spec"]["template"]


def _admitted_in_legacy(name: str) -> dict[str, Any]:
    """The object as stored after a CREATE in a legacy-stage namespace, then moved to a pilot cohort."""
    stored = run(manifest(name, "late-a"), "late-a").patched
    stored["metadata"]["namespace"] = "pilot-a"
    return stored


def test_started_job_label_update_after_a_stage_change_leaves_the_template_alone():
    old = _admitted_in_legacy("job-training")
    old["status"] = {"startTime": "2026-12-01T10:00:00Z", "active": 1}
    assert pool_of(_template(old)) == "devicePlugin"
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "research"
    res = run(new, "pilot-a", "UPDATE", old)
    assert res.allowed
    assert _template(res.patched) == _template(old)  # the API server would refuse any template change
    assert not any(op["path"].startswith("/spec") for op in res.patch), res.patch


def test_started_job_is_never_written_even_when_the_request_changes_the_template():
    """The API server refuses that change itself; the webhook must not add its own on top."""
    old = _admitted_in_legacy("job-training")
    old["status"] = {"startTime": "2026-12-01T10:00:00Z"}
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example.com/trainer:2.0"
    res = run(new, "pilot-a", "UPDATE", old)
    assert not any(op["path"].startswith("/spec") for op in res.patch), res.patch


def test_suspended_job_that_never_started_is_resteered_when_its_template_changes():
    """Kueue-style: a suspended Job's scheduling directives may change until it starts."""
    old = _admitted_in_legacy("job-training")
    old["spec"]["suspend"] = True
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    new["spec"]["template"]["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "a"}
    res = run(new, "pilot-a", "UPDATE", old)
    assert res.allowed
    assert pool_of(_template(res.patched)) == "dra"
    assert _template(res.patched)["metadata"]["annotations"][STAGE] == "pilot"


def test_kueue_unsuspending_a_jobset_never_changes_affinity():
    """JobSet's webhook refuses affinity changes: Kueue's nodeSelector injection must pass untouched."""
    old = _admitted_in_legacy("jobset")
    old["spec"]["suspend"] = True
    assert pool_of(_template(old, 1)) == "devicePlugin"
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    new["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {
        "cloud.example.com/flavor": "a100"}
    res = run(new, "pilot-a", "UPDATE", old)
    assert res.allowed
    for i in (0, 1):
        assert _template(res.patched, i)["spec"].get("affinity") == _template(new, i)["spec"].get("affinity")


def test_running_jobset_label_update_is_an_empty_template_patch():
    old = _admitted_in_legacy("jobset")
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    res = run(new, "pilot-a", "UPDATE", old)
    assert res.allowed
    assert not any(op["path"].startswith("/spec") for op in res.patch), res.patch


def test_metadata_only_update_of_a_statefulset_is_never_denied_nor_rolled_out():
    """Argo CD relabels a StatefulSet admitted before its cohort was migrated: allowed, template untouched."""
    old = run(manifest("deploy-legacy", "late-a"), "late-a").patched
    old["metadata"]["namespace"] = "mig-a"
    new = copy.deepcopy(old)
    new["metadata"].setdefault("labels", {})["argocd.argoproj.io/instance"] = "gpu"
    res = run(new, "mig-a", "UPDATE", old)
    assert res.allowed and res.findings == {}
    assert json.dumps(_template(res.patched), sort_keys=True) == json.dumps(_template(old), sort_keys=True)


# ---- issue 24 item 14: after a stage change, annotations stay true to the template as stored ---------------


PATH = "dra-migration.io/path"


def _path(holder: dict[str, Any]) -> str | None:
    return ((holder.get("metadata") or {}).get("annotations") or {}).get(PATH)


def _pool_path(template: dict[str, Any]) -> str:
    """The path the template takes on the pool its affinity selects (the pods policy's example.com/gpu)."""
    return {"devicePlugin": "device-plugin", "dra": "dra-extended-resource"}[str(pool_of(template))]


@pytest.mark.parametrize("name", ["deploy-gpu", "job-training"])
def test_metadata_update_after_a_stage_change_keeps_the_object_true_to_its_template(name: str) -> None:
    """A legacy-era Deployment (template steered to the device-plugin pool) and a started Job get a label UPDATE
    in a pilot cohort: the template is kept as is, so the object must not claim the DRA path pilot would choose."""
    old = _admitted_in_legacy(name)
    if name == "job-training":
        old["status"] = {"startTime": "2026-12-01T10:00:00Z"}
    new = copy.deepcopy(old)
    new["metadata"].setdefault("labels", {})["team"] = "research"
    res = run(new, "pilot-a", "UPDATE", old)
    template = _template(res.patched)
    assert template == _template(old)
    assert _path(template) == _pool_path(template) == "device-plugin"
    assert _path(res.patched) == "device-plugin"  # was dra-extended-resource: a path the template does not take
    assert res.patched["metadata"]["annotations"][STAGE] == "pilot"  # the controller's own stage is current


def test_template_whose_affinity_may_not_change_is_annotated_with_the_path_of_its_pool() -> None:
    """Kueue unsuspends a legacy-era JobSet and edits one template: JobSet's webhook allows its annotations but
    no affinity change, so the kept device-plugin affinity decides the path written, on the template and above."""
    old = _admitted_in_legacy("jobset")
    old["spec"]["suspend"] = True
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    _template(new, 1)["spec"]["nodeSelector"] = {"cloud.example.com/flavor": "a100"}
    res = run(new, "pilot-a", "UPDATE", old)
    workers = _template(res.patched, 1)
    assert pool_of(workers) == "devicePlugin" and workers["metadata"]["annotations"][STAGE] == "pilot"
    assert _path(workers) == _pool_path(workers) == "device-plugin"
    assert _path(res.patched) == "device-plugin"


def test_template_change_after_a_stage_change_moves_template_and_object_together() -> None:
    old = _admitted_in_legacy("deploy-gpu")
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example.com/infer:2.0"
    res = run(new, "pilot-a", "UPDATE", old)
    template = _template(res.patched)
    assert _path(template) == _pool_path(template) == _path(res.patched) == "dra-extended-resource"


def test_replicaset_of_an_older_template_states_the_templates_path() -> None:
    """A Deployment's ReplicaSet is never rewritten (its owner was judged; issue 24 item 2): created in pilot from a
    legacy-era template, its own path is the template's, not pilot's."""
    deploy = run(manifest("deploy-gpu", "late-a"), "late-a").patched
    rs = manifest("replicaset-gpu", "pilot-a")
    rs["spec"]["template"] = copy.deepcopy(deploy["spec"]["template"])
    rs["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "infer",
                                          "uid": "6f1c2d3e-0000-4000-8000-000000000002", "controller": True}]
    res = run(rs, "pilot-a")
    assert _template(res.patched) == deploy["spec"]["template"]
    assert _path(res.patched) == "device-plugin"
