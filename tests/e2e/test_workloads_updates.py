"""Issue 14 item 1 on the real control plane: an UPDATE of a started Job after its cohort's stage moved
is not broken by the webhook.

The API server's own rule (kubernetes/kubernetes ``pkg/apis/batch/validation/validation.go``
``ValidateJobSpecUpdate`` -> ``validatePodTemplateUpdate``; ``pkg/registry/batch/job/strategy.go``
``validationOptionsForJob``: the template may change only while the old Job is suspended and has never
started) is shown here first: a template change of the started Job is refused. Then a label change of
the same Job, after the namespace joined the migrated cohort, goes through and leaves the template as
it was (before issue 14 the webhook re-steered the template, and the API server refused the update), and the
Job's own ``path`` annotation stays the template's (issue 24 item 14).
"""

from __future__ import annotations

import pytest

# The harness lives on branch `e2e` (tests/e2e/conftest.py); until it is merged this module is skipped.
_kube = pytest.importorskip("tests.e2e.kube", reason="the e2e harness (tests/e2e/conftest.py) is not here yet")
_objects = pytest.importorskip("tests.e2e.objects")
_waits = pytest.importorskip("tests.e2e.waits")
Denied, pod, template_of, eventually = _kube.Denied, _objects.pod, _objects.template_of, _waits.eventually

pytestmark = pytest.mark.controllers
STAGE = "dra-migration.io/stage"
POOL = "dra-migration.io/node-pool"
PATH = "dra-migration.io/path"


def _job(name: str, ns: str) -> dict:
    template = template_of(pod("trainer", ns))
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"backoffLimit": 0, "template": template}}


def test_label_update_of_a_started_job_after_the_stage_moved(kube, namespace):
    ns = namespace("late")  # legacy stage: the template is steered to the device-plugin pool
    created = kube.create(_job("train", ns)).obj
    assert created["spec"]["template"]["metadata"]["annotations"][POOL] == "devicePlugin"
    started = eventually(lambda: (j := kube.get("batch/v1", "Job", "train", ns))["status"].get("startTime") and j,
                         "the Job controller starts the Job (status.startTime)", 60)
    template = started["spec"]["template"]

    # Kubernetes itself: the template of a started Job is immutable.
    refused = None
    try:
        kube.patch("batch/v1", "Job", "train",
                   {"spec": {"template": {"metadata": {"annotations": {"team": "x"}}}}}, ns)
    except Denied as exc:
        refused = exc
    assert refused is not None and refused.status == 422 and "field is immutable" in refused.message

    # The cohort moves to migrated; wait until the webhook's cluster view sees the label.
    kube.patch("v1", "Namespace", ns, {"metadata": {"labels": {"gpu-migration": "migrated"}}})
    eventually(lambda: kube.create(pod("probe", ns), dry_run=True).obj["metadata"]["annotations"][STAGE]
               == "migrated", "the webhook judges the namespace as migrated", 30)

    # An unrelated label change (Argo CD, Kueue) must go through and not touch the immutable template.
    updated = kube.patch("batch/v1", "Job", "train", {"metadata": {"labels": {"team": "research"}}}, ns).obj
    assert updated["metadata"]["labels"]["team"] == "research"
    assert updated["spec"]["template"] == template
    assert updated["metadata"]["annotations"][STAGE] == "migrated"  # the Job's own stage is current
    # ... but its path is the kept template's (issue 24 item 14), not the DRA path the migrated stage would choose.
    assert updated["metadata"]["annotations"][PATH] == template["metadata"]["annotations"][PATH] == "device-plugin"
