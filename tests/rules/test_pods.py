"""Pod and workload rules through the real engine: the case table, the schedule, message shapes.

Each case goes the way the API server sends it: the mutating pass, its JSON patch applied with jsonpatch
to a wire copy of the object, the result schema-checked with kubernetes-validate 1.37 (strict), then the
validating pass on the patched object. A second mutating pass over the patched object must make no
patch (idempotence).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests import fakeapi
from tests.builders.pods import (
    CASES,
    DATA,
    POLICY,
    _training_ctx,
    annotation,
    build_view,
    device_class,
    manifest,
    pool_of,
    run,
)
from tests.helpers import K8S_VERSION
from webhook.objects.pods import get_path, pod_templates
from webhook.offline.views import StaticView
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.rules.pods import MESSAGE_MAX, claim_template_snippet, training_job_extended_resource


def check_tracking(holder: dict[str, Any], path: str | None, stage: str, cohort: str) -> None:
    assert annotation(holder, "path") == path
    if path is None:
        for name in ("stage", "cohort", "policy"):
            assert annotation(holder, name) is None
        return
    assert annotation(holder, "stage") == stage
    assert annotation(holder, "cohort") == cohort
    assert annotation(holder, "policy") == POLICY.identity


def check_pool(template: dict[str, Any], pool: str | None) -> None:
    assert pool_of(template) == pool
    if pool is not None:
        assert annotation(template, "node-pool") == pool
    else:
        terms = json.dumps(get_path(template, ("spec", "affinity", "nodeAffinity",
                                               "requiredDuringSchedulingIgnoredDuringExecution")))
        assert "gpu.example.com/allocation\", \"operator\": \"In\"" not in terms


# ---- the case table --------------------------------------------------------------------------------


def test_the_table_is_big_enough():
    assert len(CASES) >= 40
    assert len({c["name"] for c in CASES}) == len(CASES)
    stages = {c["namespace"].split("-")[0] for c in CASES}
    assert {"batch", "late", "pilot", "mig"} <= stages


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(case: dict[str, Any]) -> None:
    ns = case["namespace"]
    obj = manifest(case["object"], ns, case.get("merge"))
    old = manifest(case["old"], ns) if case.get("old") else None
    res = run(obj, ns, case.get("operation", "CREATE"), old, build_view(case.get("view")))
    exp = case["expect"]

    assert res.allowed is exp["allowed"], res.message or res.warnings
    if "findings" in exp:
        assert res.findings == exp["findings"]
    if "warnings" in exp:
        assert len(res.warnings) == exp["warnings"], res.warnings
    for text in exp.get("says", []):
        assert text in " | ".join([*res.warnings, res.message]), (text, res.warnings, res.message)
    if exp.get("degraded"):
        assert "cluster-view-degraded" in res.audit
    if exp.get("untouched"):
        assert res.patch == []
    if not res.allowed:
        assert res.message and all(c["reason"] in ids.RULE_IDS for c in res.causes)
        return
    cohort = res.cohort or "none"
    if "track" in exp:
        check_tracking(res.patched, exp["track"], exp.get("stage", res.stage), cohort)
    if "pool" in exp:
        check_pool(res.patched, exp["pool"])
    for ref in pod_templates(res.patched, res.patched["kind"]):
        want = exp.get("templates", {}).get(ref.name or "template")
        if want is None:
            continue
        template = get_path(res.patched, ref.path)
        check_tracking(template, want["track"], want.get("stage", res.stage), cohort)
        check_pool(template, want["pool"])


# ---- the schedule ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("when", "stage", "allowed", "action"),
    [
        (dt.datetime(2027, 1, 14, 23, 59, tzinfo=dt.UTC), "legacy", True, "Audit"),
        (dt.datetime(2027, 1, 15, 0, 0, tzinfo=dt.UTC), "pilot", True, "Warn"),
        (dt.datetime(2027, 2, 28, 23, 59, tzinfo=dt.UTC), "pilot", True, "Warn"),
        (dt.datetime(2027, 3, 1, 0, 0, tzinfo=dt.UTC), "migrated", False, "Deny"),
        # The UTC date decides, whatever the clock's zone.
        (dt.datetime(2027, 2, 28, 20, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5))), "migrated", False, "Deny"),
        (dt.datetime(2027, 3, 1, 1, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))), "pilot", True, "Warn"),
    ],
)
def test_schedule_moves_the_same_pod_through_the_stages(when, stage, allowed, action):
    pod = manifest("pod-too-many", "sched-team")
    res = run(pod, "sched-team", now=when)
    assert res.stage == stage and res.cohort == "scheduled"
    assert res.allowed is allowed
    assert res.findings == {ids.MAX_DEVICES_PER_POD: action}
    assert len(res.warnings) == (action == "Warn")
    if action == "Audit":
        assert "needs 6 example.com/gpu" in res.audit[ids.MAX_DEVICES_PER_POD]
    if allowed:
        assert annotation(res.patched, "stage") == stage
        assert pool_of(res.patched) == ("devicePlugin" if stage == "legacy" else "dra")


def test_schedule_legacy_name_passes_then_warns_then_is_denied():
    pod = manifest("pod-legacy", "sched-team")
    seen = [run(pod, "sched-team", now=dt.datetime(*d, tzinfo=dt.UTC))
            for d in ((2027, 1, 1), (2027, 2, 1), (2027, 3, 2))]
    assert [(r.stage, r.allowed, r.findings) for r in seen] == [
        ("legacy", True, {}),
        ("pilot", True, {ids.LEGACY_RESOURCE_NAME: "Warn"}),
        ("migrated", False, {ids.LEGACY_RESOURCE_NAME: "Deny"}),
    ]


# ---- messages and remediation ----------------------------------------------------------------------


def test_denial_names_rule_stage_and_fix_in_one_line():
    res = run(manifest("pod-legacy", "mig-a"), "mig-a")
    assert "\n" not in res.message
    assert res.message.startswith("legacy-resource-name (migrated: Deny): ")
    assert "fix: request example.com/gpu instead of vendor.example.com/gpu" in res.message
    cause = res.causes[0]
    assert cause["reason"] == ids.LEGACY_RESOURCE_NAME
    assert cause["field"] == "spec.containers[0].resources"
    assert "DeviceClass gpu.example.com" in cause["message"]


def test_messages_stay_one_short_line_with_long_names():
    pod = manifest("pod-training", "pilot-a", {"metadata": {"name": "x" * 63}})
    for i, c in enumerate(pod["spec"]["containers"] * 3):
        pod["spec"]["containers"][i % 2] = c
    pod["spec"]["containers"] = [
        {"name": f"{i}" + "c" * 62, "image": "registry.example.com/t:1",
         # a legacy name beside a name only DRA serves: path mixed, so the training advice applies (item 9)
         "resources": {"limits": {"vendor.example.com/gpu": 9,
                                  "deviceclass.resource.kubernetes.io/gpu.example.com": 1}}} for i in range(5)
    ]
    ctx = _training_ctx()
    from webhook.rules.pods import legacy_resource_name, max_devices_per_pod

    findings = [f for fn in (legacy_resource_name, max_devices_per_pod, training_job_extended_resource)
                for f in fn(pod, ctx).findings]
    assert [f.rule for f in findings] == [ids.LEGACY_RESOURCE_NAME, ids.MAX_DEVICES_PER_POD,
                                          ids.TRAINING_JOB_EXTENDED_RESOURCE]
    for f in findings:
        assert len(f.message) <= MESSAGE_MAX and "\n" not in f.message, f.message
    assert findings[0].message.endswith("...")  # five 63-character names do not fit: clipped, not wrapped
    assert "+2 more" in findings[0].message or findings[0].message.endswith("...")


def test_finding_paths_point_into_the_template_of_a_workload():
    res = run(manifest("cronjob-legacy", "mig-a"), "mig-a")
    (v,) = res.verdicts
    assert v.finding.paths == ("spec.jobTemplate.spec.template.spec.containers[0].resources",)


def test_training_remediation_is_a_ready_claim_template_and_pod_change():
    pod = manifest("pod-training", "pilot-a")
    pod["spec"]["initContainers"] = [{"name": "warmup", "image": "registry.example.com/w:1",
                                      "resources": {"limits": {"example.com/gpu": 1}}}]
    (finding,) = training_job_extended_resource(pod, _training_ctx()).findings
    assert finding.advisory
    first, _, snippet = finding.remediation.partition("\n")
    assert first.startswith("use a ResourceClaimTemplate with device tolerations instead")
    template, change = list(yaml.safe_load_all(snippet))
    kubernetes_validate.validate(template, K8S_VERSION, strict=True)
    assert template["metadata"] == {"name": "train-long-gpu", "namespace": "pilot-a"}
    requests = template["spec"]["spec"]["devices"]["requests"]
    assert [(r["name"], r["exactly"]["count"]) for r in requests] == [("warmup", 1), ("trainer", 2), ("logger", 1)]
    for r in requests:
        assert r["exactly"]["deviceClassName"] == "gpu.example.com"
        assert r["exactly"]["tolerations"] == [{"operator": "Exists", "key": "example.com/maintenance",
                                                "effect": "NoExecute", "tolerationSeconds": 3600}]
    # The pod change, applied to the Pod with the extended resources removed, is a valid Pod.
    spec = change["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "train-long-gpu"}]
    fixed = copy.deepcopy(pod)
    fixed["spec"]["resourceClaims"] = spec["resourceClaims"]
    for fld in ("initContainers", "containers"):
        by_name = {c["name"]: c for c in spec[fld]}
        for c in fixed["spec"][fld]:
            c["resources"] = by_name[c["name"]]["resources"]
    kubernetes_validate.validate(fixed, K8S_VERSION, strict=True)
    assert [c["resources"]["claims"][0]["request"] for c in fixed["spec"]["containers"]] == ["trainer", "logger"]


def test_training_snippet_avoids_a_taken_claim_name_and_says_when_policy_has_no_tolerations():
    from webhook.objects.pods import iter_containers

    pod = manifest("pod-gpu", "pilot-a")
    (c,) = list(iter_containers(pod["spec"]))
    text = claim_template_snippet("train-0", "pilot-a", POLICY.resources["example.com/gpu"], [(c, 2)], [], {"gpu"})
    assert text.startswith("# the policy lists no trainingJobs.deviceTolerations")
    template, change = list(yaml.safe_load_all(text))
    assert "tolerations" not in template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert change["spec"]["resourceClaims"][0]["name"] == "gpu-tolerant"


def test_rules_never_modify_the_object_they_get():
    for name in ("pod-steered-legacy", "pod-affinity-terms", "jobset", "pytorchjob", "deploy-gpu-pilot-era"):
        obj = manifest(name, "pilot-a")
        before = copy.deepcopy(obj)
        run(obj, "pilot-a", old=copy.deepcopy(obj) if obj["kind"] != "Pod" else None,
            operation="UPDATE" if obj["kind"] != "Pod" else "CREATE")
        assert obj == before


# ---- mixed-allocation over StaticView (the claim lookups every ClusterView has) ------------------------


def _template(ns: str, request: dict[str, Any], name: str = "gpu-template") -> dict[str, Any]:
    obj = fakeapi.resource_claim_template(ns, name, requests=[request])
    fakeapi.validate(obj)
    return obj


def _claim(ns: str, request: dict[str, Any], name: str = "shared-gpu") -> dict[str, Any]:
    obj = fakeapi.resource_claim(ns, name, requests=[request])
    fakeapi.validate(obj)
    return obj


@pytest.mark.parametrize(
    ("namespace", "view", "merge", "action"),
    [
        pytest.param("mig-a", lambda ns: StaticView(resource_claim_templates=[
            _template(ns, fakeapi.exact_request("gpu", "gpu.example.com"))]), None, "Deny", id="template-exactly"),
        pytest.param("mig-a", lambda ns: StaticView(resource_claim_templates=[
            _template(ns, fakeapi.first_available_request("gpu", ["nic.example.com", "gpu.example.com"]))]),
            None, "Deny", id="template-firstAvailable"),
        pytest.param("mig-a", lambda ns: StaticView(resource_claims=[
            _claim(ns, fakeapi.exact_request("gpu", "gpu.example.com", 2))]),
            {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-gpu"}]}}, "Deny",
            id="resource-claim"),
        pytest.param("pilot-a", lambda ns: StaticView(resource_claim_templates=[
            _template(ns, fakeapi.exact_request("gpu", "gpu.example.com"))]), None, "Warn", id="pilot-warns"),
        # The class the scheduler would pick for example.com/gpu (its extendedResourceName) is the same hardware.
        pytest.param("mig-a", lambda ns: StaticView(
            device_classes=[device_class("gpu-dra.example.com", "example.com/gpu")],
            resource_claim_templates=[_template(ns, fakeapi.exact_request("gpu", "gpu-dra.example.com"))]),
            None, "Deny", id="class-by-extendedResourceName"),
    ],
)
def test_mixed_allocation_fires_for_a_claim_on_the_same_hardware(namespace, view, merge, action):
    res = run(manifest("pod-mixed", namespace, merge), namespace, view=view(namespace))
    assert res.findings == {ids.MIXED_ALLOCATION: action}
    assert res.allowed is (action != "Deny")
    (v,) = res.verdicts
    assert 'requests example.com/gpu and claim "gpu" asks for DeviceClass' in v.finding.message
    assert v.finding.paths == ("spec.resourceClaims",)
    assert "cluster-view-degraded" not in res.audit
    if action == "Deny":
        assert res.message.startswith("mixed-allocation (migrated: Deny): ")


def test_mixed_allocation_counts_a_legacy_name_as_the_same_hardware():
    pod = manifest("pod-mixed", "pilot-a")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"vendor.example.com/gpu": 1}
    view = StaticView(resource_claim_templates=[_template("pilot-a", fakeapi.exact_request("gpu", "gpu.example.com"))])
    res = run(pod, "pilot-a", view=view)
    assert res.findings == {ids.MIXED_ALLOCATION: "Warn", ids.LEGACY_RESOURCE_NAME: "Warn"}


@pytest.mark.parametrize(
    "request_",
    [fakeapi.exact_request("gpu", "nic.example.com"),
     fakeapi.first_available_request("gpu", ["nic.example.com", "fpga.example.com"])],
    ids=["exactly", "firstAvailable"],
)
def test_mixed_allocation_ignores_a_claim_on_another_class(request_):
    view = StaticView(resource_claim_templates=[_template("mig-a", request_)],
                      resource_claims=[_claim("mig-a", fakeapi.exact_request("gpu", "nic.example.com"))])
    res = run(manifest("pod-mixed", "mig-a"), "mig-a", view=view)
    assert res.allowed is True and res.findings == {}
    assert "cluster-view-degraded" not in res.audit
    claim_pod = manifest("pod-mixed", "mig-a",
                         {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-gpu"}]}})
    assert run(claim_pod, "mig-a", view=view).findings == {}


def test_mixed_allocation_with_the_template_elsewhere_stays_silent_and_says_why():
    """The template lives in another namespace: not this Pod's, so its class is unknown, not guessed."""
    view = StaticView(resource_claim_templates=[_template("pilot-a", fakeapi.exact_request("gpu", "gpu.example.com"))])
    res = run(manifest("pod-mixed", "mig-a"), "mig-a", view=view)
    assert res.allowed is True and res.findings == {}
    assert "mixed-allocation: content of claim 'gpu' unknown (ResourceClaimTemplate gpu-template)" in (
        res.audit["cluster-view-degraded"])


# ---- issue 14 item 2: the implicit name deviceclass.resource.kubernetes.io/<class> is DRA-only ----------


def _usage(*names: str):
    from webhook.policy.placement import usage

    return usage({"containers": [{"name": "c", "resources": {"limits": {n: "1" for n in names}}}]}, POLICY)


@pytest.mark.parametrize("stage", ["legacy", "pilot", "migrated"])
def test_implicit_class_name_is_never_the_device_plugin_path(stage: str) -> None:
    """No device plugin can advertise a ``kubernetes.io`` name, so the implicit name is served by DRA only,
    in every stage: path ``dra-extended-resource`` and the ``dra`` pool, never ``devicePlugin``."""
    from webhook.policy.placement import Plan, plan

    u = _usage("deviceclass.resource.kubernetes.io/gpu.example.com")
    assert u.dra_only
    assert plan(u, stage, POLICY) == Plan("dra", "dra-extended-resource")


def test_implicit_name_beside_a_device_plugin_name() -> None:
    """A Pod with the implicit name runs only on the dra pool, whose nodes lack example.com/gpu: the scheduler
    serves both names there through DRA. A legacy name beside it can be served nowhere: the stage decides."""
    from webhook.policy.placement import Plan, plan

    u = _usage("example.com/gpu", "deviceclass.resource.kubernetes.io/fpga.example.com")
    assert plan(u, "legacy", POLICY) == Plan("dra", "dra-extended-resource")
    legacy = _usage("vendor.example.com/gpu", "deviceclass.resource.kubernetes.io/gpu.example.com")
    assert plan(legacy, "pilot", POLICY) == Plan("dra", "mixed")


def test_mapped_name_in_legacy_stays_on_the_device_plugin_pool_that_advertises_it() -> None:
    from webhook.policy.placement import Plan, plan

    u = _usage("example.com/gpu")
    assert not u.dra_only
    assert plan(u, "legacy", POLICY) == Plan("devicePlugin", "device-plugin")


# ---- issue 13 item 5: pool and path follow the scheduler's rule (what each pool advertises) ---------------


def _advertising(devicePlugin: list[str] | None, dra: list[str] | None = None) -> CompiledPolicy:
    """The pod-rules policy with ``nodePools.<pool>.advertises`` set (None: left unset, the default)."""
    doc = yaml.safe_load((DATA / "policy.yaml").read_text())
    pools = doc["spec"]["nodePools"]
    for name, names in (("devicePlugin", devicePlugin), ("dra", dra)):
        pools[name].pop("advertises", None)
        if names is not None:
            pools[name]["advertises"] = names
    return compile_policy(MigrationPolicy.model_validate(doc), json.dumps(doc).encode())


def test_default_device_plugin_pool_advertises_the_legacy_names_and_names_without_legacy_names() -> None:
    """example.com/fpga has no legacyNames: its device plugin serves that very name (issue 24 item 1)."""
    policy = _advertising(None)
    assert policy.advertised == {"devicePlugin": frozenset({"vendor.example.com/gpu", "example.com/fpga"}),
                                 "dra": frozenset()}


def test_legacy_stage_pod_of_a_resource_without_legacy_names_stays_on_the_device_plugin_pool() -> None:
    """Issue 24 item 1: the NVIDIA shape (resource nvidia.com/gpu, no legacyNames, no advertises) used to pin every
    legacy-stage GPU Pod to the DRA pool; the device plugin serves nvidia.com/gpu, so it stays there."""
    from webhook.policy.placement import Plan, plan, usage

    policy = _advertising(None)
    u = usage({"containers": [{"name": "c", "resources": {"limits": {"example.com/fpga": "1"}}}]}, policy)
    assert plan(u, "legacy", policy) == Plan("devicePlugin", "device-plugin")
    assert plan(u, "migrated", policy) == Plan("dra", "dra-extended-resource")


@pytest.mark.parametrize("quantity", [0, "0", "0m"])
def test_a_zero_quantity_is_not_device_use(quantity) -> None:
    """Issue 24 item 10: ``nvidia.com/gpu: 0`` (a chart's GPU count left at 0) asks for nothing; the scheduler
    skips zero requests (noderesources/fit.go fitsRequest), so no steering, path or finding comes from it."""
    from webhook.policy.placement import usage

    spec = {"containers": [{"name": "c", "resources": {"limits": {
        "vendor.example.com/gpu": quantity, "example.com/gpu": quantity}}}]}
    assert not usage(spec, POLICY).uses_devices
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "zero", "namespace": "pilot-a"}, "spec": spec}
    res = run(pod, "pilot-a")
    assert res.allowed and res.findings == {} and res.patch == []


@pytest.mark.parametrize("namespace", ["batch", "late-a"])
def test_legacy_pod_asking_for_a_dra_mapped_name_the_device_plugin_lacks_runs_on_the_dra_pool(namespace) -> None:
    """kube-scheduler serves example.com/gpu through DRA on nodes whose allocatable lacks it (fit.go
    shouldDelegateResourceToDRA): pinned to device-plugin nodes that lack it the Pod would stay Pending."""
    policy = _advertising(None)
    res = run(manifest("pod-gpu", namespace), namespace, policy=policy)
    assert res.allowed and res.stage == "legacy"
    assert pool_of(res.patched) == "dra"
    assert annotation(res.patched, "node-pool") == "dra"
    assert annotation(res.patched, "path") == "dra-extended-resource"


def test_legacy_workload_template_follows_the_scheduler_rule_too() -> None:
    policy = _advertising(["vendor.example.com/gpu"])
    res = run(manifest("deploy-gpu", "batch"), "batch", policy=policy)
    template = res.patched["spec"]["template"]
    assert pool_of(template) == "dra"
    assert annotation(template, "path") == annotation(res.patched, "path") == "dra-extended-resource"


def test_device_plugin_name_stays_on_the_device_plugin_pool_in_every_stage() -> None:
    policy = _advertising(None)
    for namespace in ("batch", "pilot-a"):
        res = run(manifest("pod-legacy", namespace), namespace, policy=policy)
        assert pool_of(res.patched) == "devicePlugin", namespace
        assert annotation(res.patched, "path") == "device-plugin", namespace


def test_a_name_advertised_on_the_dra_pool_is_the_device_plugin_path_there() -> None:
    """Allocatable wins over a DeviceClass: a dra-pool node advertising the name serves it by device plugin."""
    policy = _advertising(None, dra=["example.com/gpu"])
    res = run(manifest("pod-gpu", "pilot-a"), "pilot-a", policy=policy)
    assert pool_of(res.patched) == "dra"
    assert annotation(res.patched, "path") == "device-plugin"


def test_a_name_no_pool_serves_falls_back_to_the_stage() -> None:
    """A legacy name beside a name only DRA serves fits no pool; the stage decides as before."""
    from webhook.policy.placement import Plan, plan, usage

    policy = _advertising(None)
    u = usage({"containers": [{"name": "c", "resources": {"limits": {
        "vendor.example.com/gpu": "1", "example.com/gpu": "1"}}}]}, policy)
    assert plan(u, "legacy", policy) == Plan("devicePlugin", "device-plugin")
    assert plan(u, "pilot", policy) == Plan("devicePlugin", "device-plugin")


# ---- issue 24 item 2: objects a workload the webhook examines controls get no template patch ----------------


def _owned(name: str, namespace: str, api_version: str, kind: str, controller: bool = True) -> dict[str, Any]:
    return manifest(name, namespace, {"metadata": {"ownerReferences": [{
        "apiVersion": api_version, "kind": kind, "name": "owner", "uid": "0c4b0e4e-0000-4000-8000-000000000001",
        "controller": controller}]}})


@pytest.mark.parametrize(("name", "api_version", "kind"), [
    ("replicaset-gpu", "apps/v1", "Deployment"),
    ("job-training", "batch/v1", "CronJob"),
    ("job-training", "jobset.x-k8s.io/v1alpha2", "JobSet"),
])
def test_an_object_an_examined_workload_controls_gets_no_template_patch(name, api_version, kind) -> None:
    """The Deployment controller matches its ReplicaSet by template (EqualIgnoreHash): a steered ReplicaSet
    template would make it create ReplicaSet after ReplicaSet (kubernetes/kubernetes#57167). Decided at the
    owner and at the Pod; the object itself is only annotated, and judged by nothing."""
    before = _owned(name, "mig-a", api_version, kind)
    res = run(before, "mig-a")
    assert res.allowed and res.findings == {}
    assert res.patched["spec"]["template"] == before["spec"]["template"]
    assert all(not op["path"].startswith("/spec") for op in res.patch), res.patch


@pytest.mark.parametrize(("api_version", "kind", "controller"), [
    ("argoproj.io/v1alpha1", "Workflow", True),   # not a kind the webhook examines: this object is the top
    ("apps/v1", "Deployment", False),             # an owner that is not the controller
])
def test_an_object_no_examined_workload_controls_is_steered(api_version, kind, controller) -> None:
    res = run(_owned("replicaset-gpu", "mig-a", api_version, kind, controller), "mig-a")
    assert pool_of(res.patched["spec"]["template"]) == "dra"


# ---- issue 24 item 3: schedulers other than the default -------------------------------------------------


def _pod_for(scheduler: str | None, name: str = "example.com/gpu") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "registry.example.com/app:1",
                                            "resources": {"limits": {name: 1}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "mig-a"}, "spec": spec}


@pytest.mark.parametrize("scheduler", ["kai-scheduler", "volcano", "yunikorn", "hami-scheduler", "my-own"])
def test_a_pod_of_another_scheduler_is_not_steered_to_the_dra_pool_and_the_answer_says_why(scheduler) -> None:
    """Only kube-scheduler's DynamicResources plugin is known to allocate DRA claims; a KAI, Volcano, YuniKorn or
    HAMi Pod sent to the DRA pool would stay Pending (or run without its device). The device-plugin pool serves
    example.com/gpu here, so it goes there."""
    res = run(_pod_for(scheduler), "mig-a")
    assert res.allowed and pool_of(res.patched) == "devicePlugin"
    assert annotation(res.patched, "path") == "device-plugin"
    assert res.findings == {"steer-node-pool": "Warn"}
    [warning] = res.warnings
    assert f'schedulerName "{scheduler}"' in warning and "kept on the devicePlugin pool" in warning


def test_a_dra_only_name_of_another_scheduler_is_not_steered_at_all() -> None:
    res = run(_pod_for("kai-scheduler", "example.com/fpga"), "mig-a")
    assert pool_of(res.patched) is None and "not steered" in " ".join(res.warnings)


@pytest.mark.parametrize("scheduler", [None, "default-scheduler"])
def test_the_default_scheduler_is_steered_as_before_without_a_finding(scheduler) -> None:
    res = run(_pod_for(scheduler), "mig-a")
    assert pool_of(res.patched) == "dra" and res.findings == {}


def test_the_policy_can_declare_a_scheduler_that_serves_dra() -> None:
    doc = yaml.safe_load((DATA / "policy.yaml").read_text())
    doc["spec"]["draSchedulers"] = ["default-scheduler", "gpu-scheduler"]
    policy = compile_policy(MigrationPolicy.model_validate(doc), json.dumps(doc).encode())
    res = run(_pod_for("gpu-scheduler"), "mig-a", policy=policy)
    assert pool_of(res.patched) == "dra" and res.findings == {}
    assert pool_of(run(_pod_for("volcano"), "mig-a", policy=policy).patched) == "devicePlugin"


# ---- issue 24 item 8: Pods bound with spec.nodeName ---------------------------------------------------------


def test_a_bound_pod_gets_no_node_affinity_and_the_answer_names_the_pool_it_needs() -> None:
    """The kubelet rejects a bound Pod whose required node affinity its node does not match (predicate.go
    GeneralPredicates), so affinity added to a bound Pod could only hurt."""
    pod = _pod_for(None)
    pod["spec"]["nodeName"] = "gpu-node-7"
    res = run(pod, "mig-a")
    assert res.allowed and "affinity" not in res.patched["spec"]
    assert annotation(res.patched, "node-pool") is None
    [warning] = res.warnings
    assert 'bound to node "gpu-node-7"' in warning and "needs the dra pool (gpu.example.com/allocation=dra)" in warning


def test_a_template_with_node_name_is_not_steered_either() -> None:
    """Every Pod made from it is created bound to that node."""
    res = run(manifest("replicaset-gpu", "mig-a", {"spec": {"template": {"spec": {"nodeName": "n"}}}}), "mig-a")
    assert "affinity" not in res.patched["spec"]["template"]["spec"]
    assert 'bound to node "n"' in " ".join(res.warnings)


# ---- issue 24 item 9: training-job-extended-resource follows the path chosen for the Pod -----------------------


def _training_job(namespace: str, name: str = "example.com/gpu", scheduler: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "trainer", "image": "registry.example.com/trainer:1.0",
                                            "resources": {"limits": {name: 4}}}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return manifest("job-training", namespace, {"spec": {"template": {"spec": spec}}})


def test_training_job_the_device_plugin_serves_gets_no_extended_resource_advice() -> None:
    """Migrated stage, but its scheduler keeps it on the device-plugin pool: not on the DRA path, no advice."""
    res = run(_training_job("mig-a", scheduler="volcano"), "mig-a")
    assert annotation(res.patched, "path") == "device-plugin"
    assert "training-job-extended-resource" not in res.findings
    assert "training-job-extended-resource" in run(_training_job("mig-a"), "mig-a").findings


def test_legacy_stage_training_job_on_a_name_only_dra_serves_gets_the_advice() -> None:
    res = run(_training_job("batch", "example.com/fpga"), "batch")
    assert annotation(res.patched, "path") == "dra-extended-resource"
    assert "training-job-extended-resource" in res.findings


# ---- issue 24 item 4: GPU sharing names follow the advertised rule ----------------------------------------------


@pytest.mark.parametrize("shared", ["nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage",
                                    "nvidia.com/gpu.shared"])
def test_a_sharing_name_is_served_only_where_a_pool_advertises_it(shared) -> None:
    """HAMi's and time-slicing's names are served by their device plugins: a Pod asking for one beside the
    policy's resource is never sent to the dra pool, which does not advertise it."""
    from webhook.policy.placement import Plan, plan, usage

    policy = _advertising(["example.com/gpu", "vendor.example.com/gpu", shared])
    spec = {"containers": [{"name": "c", "resources": {"limits": {"example.com/gpu": 1, shared: 1}}}]}
    u = usage(spec, policy)
    assert u.shared == (shared,)
    assert plan(u, "migrated", policy) == Plan("devicePlugin", "device-plugin")
    nowhere = _advertising(["example.com/gpu", "vendor.example.com/gpu"], dra=[shared])
    assert plan(usage(spec, nowhere), "migrated", nowhere).pool == "dra"
    neither = _advertising(["vendor.example.com/gpu", shared])
    spec_fpga = {"containers": [{"name": "c", "resources": {"limits": {"example.com/fpga": 1, shared: 1}}}]}
    assert plan(usage(spec_fpga, neither), "migrated", neither).pool is None  # fpga only on dra, shared not there


def test_a_sharing_name_no_pool_advertises_is_outside_the_decision() -> None:
    from webhook.policy.placement import usage

    assert usage({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpumem": 1}}}]},
                 POLICY).shared == ()


# ---- issue 24 item 12: DaemonSets that serve GPU nodes are not confined to one pool --------------------------


def _gpu_agent(kind: str = "DaemonSet") -> dict[str, Any]:
    """A node agent on every GPU node (the shape of a DCGM-based health check that takes one GPU per node)."""
    spec = {"nodeSelector": {"gpu.example.com/present": "true"},
            "containers": [{"name": "agent", "image": "registry.example.com/agent:1.0",
                            "resources": {"limits": {"example.com/gpu": 1}}}]}
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "gpu-health", "namespace": "mig-a"},
            "spec": {"selector": {"matchLabels": {"app": "gpu-health"}},
                     "template": {"metadata": {"labels": {"app": "gpu-health"}}, "spec": spec}}}


def _daemon_pod(controller: bool = True) -> dict[str, Any]:
    """A Pod as the DaemonSet controller creates it: pinned to its node with a metadata.name matchFields term
    (pkg/controller/daemon/util/daemonset_util.go ReplaceDaemonSetPodNodeNameNodeAffinity)."""
    pod = _pod_for(None)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gpu-health",
                                           "uid": "0c4b0e4e-0000-4000-8000-000000000002", "controller": controller}]
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}]}]}}}
    return pod


@pytest.mark.parametrize("namespace", ["mig-a", "default"])  # the dra and the devicePlugin stage
def test_a_daemonset_template_is_not_steered(namespace: str) -> None:
    obj = _gpu_agent()
    obj["metadata"]["namespace"] = namespace
    res = run(obj, namespace)
    assert res.allowed and "affinity" not in res.patched["spec"]["template"]["spec"]
    assert annotation(res.patched["spec"]["template"], "node-pool") is None
    # The same template in a Deployment is steered: only the DaemonSet is exempt.
    deployment = _gpu_agent("Deployment")
    deployment["metadata"]["namespace"] = namespace
    assert pool_of(run(deployment, namespace).patched["spec"]["template"]) is not None


def test_a_pod_the_daemonset_controller_made_keeps_only_its_node_affinity() -> None:
    pod = _daemon_pod()
    res = run(pod, "mig-a")
    assert res.allowed and res.patched["spec"]["affinity"] == pod["spec"]["affinity"]
    assert annotation(res.patched, "node-pool") is None
    assert pool_of(run(_daemon_pod(controller=False), "mig-a").patched) == "dra"  # not its controller


def test_training_fix_text_says_kueue_must_map_the_class_first():
    """Issue 45 item 1: the training-job-extended-resource fix recommends claims; for a job Kueue queues whose class
    the policy does not say Kueue maps, it says to map it first (else Kueue keeps the job suspended)."""
    pod = manifest("pod-training", "pilot-a")
    (plain,) = training_job_extended_resource(pod, _training_ctx()).findings
    assert "Kueue" not in plain.remediation
    pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "team-a"
    (queued,) = training_job_extended_resource(pod, _training_ctx()).findings
    assert "Kueue queues it (kueue.x-k8s.io/queue-name: team-a) and does not map DeviceClass gpu.example.com" \
        in queued.remediation
    assert "spec.quota.kueue.deviceClassMappings" in queued.remediation
    assert queued.remediation.split("\n")[0] == plain.remediation.split("\n")[0]


def test_steering_copies_only_what_it_changes() -> None:
    """Issue 47 item 1: the steered object shares with the one received everything the steering does not write (a
    Pod's 3 MiB of ``env`` is not copied), for a bare Pod and a Deployment's template alike."""
    from tests.builders.pods import NOW
    from tests.helpers import review
    from webhook.admission.answer import admit
    from webhook.admission.review import parse_request
    from webhook.rules.view import OfflineView

    for name in ("pod-gpu", "deploy-gpu"):
        obj = manifest(name, "pilot-a")
        req = parse_request(review(obj, namespace="pilot-a")["request"])
        admitted = admit(req, POLICY, OfflineView(), NOW)
        assert admitted.mutated is not None
        ref = next(iter(pod_templates(obj, obj["kind"])))
        template, steered = get_path(obj, ref.path), get_path(admitted.mutated, ref.path)
        assert pool_of(steered) != pool_of(template)
        assert steered["spec"] is not template["spec"]
        assert steered["spec"]["containers"] is template["spec"]["containers"]
