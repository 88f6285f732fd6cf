"""webhook.objects.pods: pod templates inside workloads, scheduler-style device counting, quantities, paths."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from webhook.objects.pods import (
    POD_KINDS,
    active_deadlines,
    container_extended,
    device_count,
    extended_requests,
    field_path,
    get_path,
    is_extended_resource,
    object_name,
    parse_quantity,
    pod_labels,
    pod_templates,
    requested_names,
    set_path,
)

GPU = "example.com/gpu"


def c(name: str, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
      sidecar: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "i", "resources": {}}
    if limits is not None:
        out["resources"]["limits"] = limits
    if requests is not None:
        out["resources"]["requests"] = requests
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def spec(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"containers": containers}
    if init:
        out["initContainers"] = init
    return out


POD_SPEC = spec([c("main", {GPU: 1})])


def test_pod_templates_for_every_kind():
    tmpl = {"metadata": {"labels": {"a": "b"}}, "spec": POD_SPEC}
    objs = {
        "Pod": ({"metadata": {"name": "p"}, "spec": POD_SPEC}, [((), "", None)]),
        "Deployment": ({"spec": {"template": tmpl}}, [(("spec", "template"), "", None)]),
        "StatefulSet": ({"spec": {"template": tmpl}}, [(("spec", "template"), "", None)]),
        "DaemonSet": ({"spec": {"template": tmpl}}, [(("spec", "template"), "", None)]),
        "ReplicaSet": ({"spec": {"template": tmpl}}, [(("spec", "template"), "", None)]),
        "Job": ({"spec": {"template": tmpl}}, [(("spec", "template"), "", ("spec",))]),
        "CronJob": (
            {"spec": {"jobTemplate": {"spec": {"template": tmpl}}}},
            [(("spec", "jobTemplate", "spec", "template"), "", ("spec", "jobTemplate", "spec"))],
        ),
        "JobSet": (
            {"spec": {"replicatedJobs": [{"name": "a", "template": {"spec": {"template": tmpl}}},
                                         {"name": "b", "template": {"spec": {"template": tmpl}}}]}},
            [(("spec", "replicatedJobs", 0, "template", "spec", "template"), "a",
              ("spec", "replicatedJobs", 0, "template", "spec")),
             (("spec", "replicatedJobs", 1, "template", "spec", "template"), "b",
              ("spec", "replicatedJobs", 1, "template", "spec"))],
        ),
        "PyTorchJob": (
            {"spec": {"pytorchReplicaSpecs": {"Master": {"template": tmpl}, "Worker": {"template": tmpl}}}},
            [(("spec", "pytorchReplicaSpecs", "Master", "template"), "Master", None),
             (("spec", "pytorchReplicaSpecs", "Worker", "template"), "Worker", None)],
        ),
    }
    assert set(objs) <= POD_KINDS
    for kind, (obj, want) in objs.items():
        refs = pod_templates(obj, kind)
        assert [(r.path, r.name, r.job_path) for r in refs] == want, kind
        for r in refs:
            assert r.spec(obj) is POD_SPEC
            assert get_path(obj, r.at("spec", "containers", 0, "name")) == "main"


def test_pod_templates_skip_what_is_missing_or_malformed():
    assert pod_templates({"spec": {}}, "Deployment") == []
    assert pod_templates({"spec": {"template": {"spec": "x"}}}, "Deployment") == []
    assert pod_templates({"spec": {"replicatedJobs": "x"}}, "JobSet") == []
    assert pod_templates({"spec": {"pytorchReplicaSpecs": {"W": {}}}}, "PyTorchJob") == []
    assert pod_templates({"metadata": {}}, "Pod") == []
    assert pod_templates({"spec": {"template": {"spec": {}}}}, "Service") == []


def test_pod_labels_predict_the_controllers_labels():
    obj = {"metadata": {"name": "llm", "labels": {"team": "ml", "x": "object"}},
           "spec": {"replicatedJobs": [{"name": "w", "template": {"spec": {"template": {
               "metadata": {"labels": {"x": "template"}}, "spec": POD_SPEC}}}}]}}
    (ref,) = pod_templates(obj, "JobSet")
    assert pod_labels(obj, "JobSet", ref) == {"team": "ml", "x": "template", "jobset.sigs.k8s.io/jobset-name": "llm"}
    pod = {"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": POD_SPEC}
    assert pod_labels(pod, "Pod", pod_templates(pod, "Pod")[0]) == {"a": "1"}


def test_active_deadlines_of_pod_and_job():
    job = {"spec": {"activeDeadlineSeconds": 100, "template": {"spec": {**POD_SPEC, "activeDeadlineSeconds": 50}}}}
    assert active_deadlines(job, pod_templates(job, "Job")[0]) == [50, 100]
    deploy = {"spec": {"template": {"spec": POD_SPEC}}}
    assert active_deadlines(deploy, pod_templates(deploy, "Deployment")[0]) == []
    bogus = {"spec": {"activeDeadlineSeconds": True, "template": {"spec": POD_SPEC}}}
    assert active_deadlines(bogus, pod_templates(bogus, "Job")[0]) == []


@pytest.mark.parametrize(
    ("value", "want"),
    [(2, Decimal(2)), ("2", Decimal(2)), ("1k", Decimal(1000)), ("1Ki", Decimal(1024)), ("500m", Decimal("0.5")),
     ("1e3", Decimal(1000)), ("1E", Decimal(10) ** 18), (" 3 ", Decimal(3)), (1.5, Decimal("1.5"))],
)
def test_parse_quantity(value, want):
    assert parse_quantity(value) == want


@pytest.mark.parametrize("value", ["", "two", "1Q", True, [], "nan", "inf"])  # None: zero (test_quantity)
def test_parse_quantity_rejects(value):
    with pytest.raises(ValueError, match="is not a quantity"):
        parse_quantity(value)


def test_device_count_rounds_up():
    assert device_count("500m") == 1
    assert device_count("2") == 2


@pytest.mark.parametrize(
    ("name", "extended"),
    [(GPU, True), ("vendor.example.com/gpu", True), ("deviceclass.resource.kubernetes.io/gpu.example.com", True),
     ("cpu", False), ("memory", False), ("hugepages-2Mi", False), ("ephemeral-storage", False),
     ("kubernetes.io/batch", False), ("example.kubernetes.io/thing", False), ("requests.example.com/gpu", False),
     ("deviceclass.resource.kubernetes.io/", False)],
)
def test_is_extended_resource(name, extended):
    assert is_extended_resource(name) is extended


def test_limits_imply_requests_and_requests_win():
    assert container_extended(c("a", limits={GPU: 2})) == {GPU: 2}
    assert container_extended(c("a", limits={GPU: 2}, requests={GPU: "2"})) == {GPU: 2}
    assert container_extended(c("a", requests={GPU: 1, "cpu": "1"}, limits={"memory": "1Gi"})) == {GPU: 1}
    assert container_extended({"name": "a"}) == {}
    assert container_extended({"name": "a", "resources": "x"}) == {}


@pytest.mark.parametrize(
    ("pod_spec", "want"),
    [
        (spec([c("a", {GPU: 1}), c("b", {GPU: 2})]), 3),
        (spec([c("a", {GPU: 1}), c("b", {GPU: 2})], [c("i", {GPU: 5})]), 5),  # init runs alone
        (spec([c("a", {GPU: 2})], [c("s", {GPU: 1}, sidecar=True)]), 3),  # sidecar runs next to the app
        # sidecar started before a regular init container runs next to it: 1 + 4
        (spec([c("a", {GPU: 1})], [c("s", {GPU: 1}, sidecar=True), c("i", {GPU: 4})]), 5),
        # sidecar started after it does not: max(3 + 1, 4)
        (spec([c("a", {GPU: 3})], [c("i", {GPU: 4}), c("s", {GPU: 1}, sidecar=True)]), 4),
        # sidecars accumulate: 2 + 3 + 1 while the last init container runs
        (spec([c("a")], [c("s1", {GPU: 2}, sidecar=True), c("s2", {GPU: 3}, sidecar=True), c("i", {GPU: 1})]), 6),
        (spec([c("a", requests={GPU: "2"}, limits={GPU: "2"})]), 2),
        (spec([c("a", {"cpu": "2"})]), 0),
    ],
)
def test_extended_requests_like_the_scheduler(pod_spec, want):
    assert extended_requests(pod_spec).get(GPU, 0) == want


def test_extended_requests_groups_names_of_the_same_hardware():
    legacy = "vendor.example.com/gpu"
    pod_spec = spec([c("a", {GPU: 1, legacy: 2}), c("b", {"example.com/fpga": 1})], [c("i", {legacy: 4})])
    assert extended_requests(pod_spec) == {"example.com/fpga": 1, GPU: 1, legacy: 4}
    group = {GPU: GPU, legacy: GPU}.get
    assert extended_requests(pod_spec, group) == {GPU: 4}
    assert extended_requests(spec([c("a", {GPU: 3, legacy: 2})]), group) == {GPU: 5}


def test_requested_names_lists_containers_per_name():
    pod_spec = spec([c("a", {GPU: 1}), c("b", {GPU: 1, "cpu": "1"})], [c("i", {"vendor.example.com/gpu": 1})])
    names = requested_names(pod_spec)
    assert {k: [r.name for r in v] for k, v in names.items()} == {"vendor.example.com/gpu": ["i"], GPU: ["a", "b"]}
    assert [r.field for r in names[GPU]] == ["containers", "containers"]


def test_get_and_set_path():
    obj: dict[str, Any] = {"spec": {"containers": [{"name": "a"}]}}
    assert get_path(obj, ("spec", "containers", 0, "name")) == "a"
    assert get_path(obj, ("spec", "containers", 1, "name")) is None
    assert get_path(obj, ("spec", "missing", 0)) is None
    assert get_path(obj, ("spec", "containers", "x")) is None
    assert get_path(obj, ()) is obj
    set_path(obj, ("metadata", "annotations", "a/b"), "v")
    assert obj["metadata"] == {"annotations": {"a/b": "v"}}
    set_path(obj, ("spec", "containers", 0, "image"), "img")
    assert obj["spec"]["containers"][0] == {"name": "a", "image": "img"}
    with pytest.raises(ValueError):
        set_path(obj, (), 1)


def test_field_path_is_kubectl_style():
    assert field_path(("spec", "template", "spec", "containers", 0, "resources")) == \
        "spec.template.spec.containers[0].resources"
    assert field_path(("spec", "pytorchReplicaSpecs", "Worker", "template")) == \
        "spec.pytorchReplicaSpecs.Worker.template"
    assert field_path(("metadata", "annotations", "dra-migration.io/path")) == \
        "metadata.annotations[dra-migration.io/path]"


def test_object_name():
    assert object_name({"metadata": {"name": "a"}}) == "a"
    assert object_name({"metadata": {"generateName": "big-"}}) == "big"
    assert object_name({}) == ""


@pytest.mark.parametrize(("value", "bad"), [("$GPU_PER_NODE", True), ("${GPUS}", True), ("", True), (None, False),
                                            ("2", False), (2, False), (True, True)])
def test_bad_quantities_name_the_field_and_value(value: Any, bad: bool) -> None:
    """Issue 45 item 2: what the API server would not decode (an unrendered envsubst variable, an empty string) is
    named with its field; ``null`` is the zero quantity and no error."""
    from webhook.objects.pods import bad_quantities

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "overhead": {"cpu": "250m"}, "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": value},
                                                                                  "requests": {"cpu": "1"}}}]}}}}
    found = bad_quantities(job, "Job")
    if not bad:
        assert found == []
        return
    [b] = found
    assert b.field == "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]" and b.value == value
    assert repr(value) in b.message
    assert ("template variable nobody rendered" in b.message) is ("$" in str(value))
