"""Claim validation rules (issue 4): device classes, counts, allocation mode, admin access, NUMA names.

Objects come from tests/data/claims (each checked against the 1.37 schemas) and are varied per case.
The scheduler's special claims and UPDATEs must pass every claim rule untouched.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.builders.claims import DATA, POLICY, load, make_policy, run
from tests.helpers import review
from webhook.admission.answer import AdmissionResponse, handle
from webhook.admission.answer import admit as admit_chain
from webhook.admission.review import parse_request
from webhook.objects.claims import iter_requests, nonstandard_numa_in_cel
from webhook.offline.views import StaticView
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.rules import claims, tolerations
from webhook.rules.base import Outcome
from webhook.rules.ruleset import standard_rules
from webhook.rules.view import ClusterView


def scoped_policy(*classes: str) -> CompiledPolicy:
    """The test policy with more DeviceClasses under migration (spec.migration.deviceClasses)."""
    doc = load("policy.yaml")
    doc["spec"]["migration"]["deviceClasses"] += list(classes)
    return compile_policy(MigrationPolicy.model_validate(doc), yaml.safe_dump(doc).encode())


def paths(out: Outcome, rule_id: str) -> list[str]:
    assert all(f.rule == rule_id for f in out.findings)
    return [p for f in out.findings for p in f.paths]


def claim(**exactly: Any) -> dict[str, Any]:
    """A valid one-request claim with the given ``exactly`` fields on top of a gpu.example.com request."""
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml-a"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", **exactly}}]}
        },
    }
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    return obj


VALIDATE_RULES = [
    claims.device_class_not_allowed,
    claims.device_count_exceeds,
    claims.allocation_mode_all,
    claims.admin_access_namespace,
    claims.nonstandard_numa_attribute,
    tolerations.toleration_too_broad,
]


# --- fixtures are real 1.37 objects -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.yaml") if p.name != "policy.yaml"))
def test_fixture_is_valid_137_object(name: str) -> None:
    assert kubernetes_validate.validate(load(name), "1.37.0", strict=True)


def test_clean_training_claim_has_no_findings() -> None:
    obj = load("claim-training.yaml")
    for fn in VALIDATE_RULES:
        assert run(fn, obj).findings == [], fn.__name__


# --- the request walker -------------------------------------------------------------------------


def test_iter_requests_yields_exactly_and_each_subrequest_with_paths() -> None:
    slots = list(iter_requests(load("claim-training.yaml"), "ResourceClaim"))
    assert [(s.path, s.name, s.subrequest) for s in slots] == [
        ("spec.devices.requests[0].exactly", "gpu", False),
        ("spec.devices.requests[1].firstAvailable[0]", "nic/fast", True),
        ("spec.devices.requests[1].firstAvailable[1]", "nic/any", True),
    ]
    tmpl = list(iter_requests(load("template-training.yaml"), "ResourceClaimTemplate"))
    assert [s.path for s in tmpl] == [
        "spec.spec.devices.requests[0].firstAvailable[0]",
        "spec.spec.devices.requests[0].firstAvailable[1]",
    ]


def test_iter_requests_reads_v1beta1_flat_requests() -> None:
    obj = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "old", "namespace": "ml-a"},
        "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "old.example.com", "count": 9}]}},
    }
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    out = run(claims.device_class_not_allowed, obj)
    assert paths(out, ids.DEVICE_CLASS_NOT_ALLOWED) == ["spec.devices.requests[0].deviceClassName"]


# --- device-class-not-allowed -------------------------------------------------------------------


def test_device_class_not_allowed_fires_on_exactly() -> None:
    out = run(claims.device_class_not_allowed, claim(deviceClassName="legacy-gpu.example.com"))
    assert paths(out, ids.DEVICE_CLASS_NOT_ALLOWED) == ["spec.devices.requests[0].exactly.deviceClassName"]
    assert "legacy-gpu.example.com" in out.findings[0].message
    assert "gpu.example.com, nic.example.com" in out.findings[0].remediation


def test_device_class_not_allowed_offline_fix_does_not_only_name_the_migration_classes() -> None:
    """Issue 45 item 6: offline a TPU/CPU driver's class looks like a typo; the fix says how to tell the webhook it is
    another driver's, not only "use gpu.example.com"."""
    out = run(claims.device_class_not_allowed, claim(deviceClassName="tpu.google.com"))
    (finding,) = out.findings
    assert finding.remediation.startswith("use one of the allowed DeviceClasses: gpu.example.com")
    assert "if 'tpu.google.com' is another DRA driver's class" in finding.remediation
    assert "--cluster-objects" in finding.remediation and "claims.allowedDeviceClasses" in finding.remediation


def test_device_class_not_allowed_names_the_subrequest_path() -> None:
    obj = load("template-training.yaml")
    obj["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"][1]["deviceClassName"] = "other.example.com"
    out = run(claims.device_class_not_allowed, obj)
    assert paths(out, ids.DEVICE_CLASS_NOT_ALLOWED) == [
        "spec.spec.devices.requests[0].firstAvailable[1].deviceClassName"
    ]
    assert "'gpu/small'" in out.findings[0].message


def test_device_class_any_when_policy_lists_none() -> None:
    out = run(claims.device_class_not_allowed, claim(deviceClassName="x.example.com"), policy=make_policy())
    assert out.findings
    policy = make_policy(allowedDeviceClasses=None)
    assert run(claims.device_class_not_allowed, claim(deviceClassName="x.example.com"), policy=policy).findings == []


# --- device-count-exceeds -----------------------------------------------------------------------


@pytest.mark.parametrize(("count", "fires"), [(1, False), (8, False), (9, True), (64, True)])
def test_device_count_limit(count: int, fires: bool) -> None:
    out = run(claims.device_count_exceeds, claim(count=count))
    assert paths(out, ids.DEVICE_COUNT_EXCEEDS) == (["spec.devices.requests[0].exactly.count"] if fires else [])


def test_device_count_in_subrequest() -> None:
    obj = load("claim-training.yaml")
    obj["spec"]["devices"]["requests"][1]["firstAvailable"][1]["count"] = 12
    out = run(claims.device_count_exceeds, obj)
    assert paths(out, ids.DEVICE_COUNT_EXCEEDS) == ["spec.devices.requests[1].firstAvailable[1].count"]
    assert "12 devices" in out.findings[0].message


def test_device_count_ignores_allocation_mode_all_and_unset_limit() -> None:
    assert run(claims.device_count_exceeds, claim(allocationMode="All")).findings == []
    assert (
        run(claims.device_count_exceeds, claim(count=99), policy=make_policy(maxDevicesPerRequest=None)).findings == []
    )


# --- allocation-mode-all ------------------------------------------------------------------------


def test_allocation_mode_all_fires_unless_allowed() -> None:
    obj = load("claim-training.yaml")
    obj["spec"]["devices"]["requests"][1]["firstAvailable"][0]["allocationMode"] = "All"
    out = run(claims.allocation_mode_all, obj)
    assert paths(out, ids.ALLOCATION_MODE_ALL) == ["spec.devices.requests[1].firstAvailable[0].allocationMode"]
    assert run(claims.allocation_mode_all, obj, policy=make_policy(allowAllocationModeAll=True)).findings == []


def test_allocation_mode_exact_count_passes() -> None:
    assert run(claims.allocation_mode_all, claim(allocationMode="ExactCount", count=2)).findings == []


# --- admin-access-namespace ---------------------------------------------------------------------


def test_admin_access_outside_admin_namespaces() -> None:
    out = run(claims.admin_access_namespace, claim(adminAccess=True))
    assert paths(out, ids.ADMIN_ACCESS_NAMESPACE) == ["spec.devices.requests[0].exactly.adminAccess"]
    assert "'ml-a'" in out.findings[0].message and "gpu-ops" in out.findings[0].remediation


@pytest.mark.parametrize("namespace", ["gpu-ops", "ops-nightly"])
def test_admin_access_in_admin_namespace_by_name_or_glob(namespace: str) -> None:
    assert run(claims.admin_access_namespace, claim(adminAccess=True), namespace=namespace).findings == []


def test_admin_access_false_passes_and_no_namespaces_means_none_allowed() -> None:
    assert run(claims.admin_access_namespace, claim(adminAccess=False)).findings == []
    policy = make_policy(adminAccessNamespaces=[])
    assert run(claims.admin_access_namespace, claim(adminAccess=True), namespace="gpu-ops", policy=policy).findings


# --- nonstandard-numa-attribute -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "found"),
    [
        ('device.attributes["gpu.example.com"].numa == 0', ["gpu.example.com/numa"]),
        ("device.attributes['gpu.example.com']['numaNode'] == 1", ["gpu.example.com/numaNode"]),
        ("has(device.attributes['nic.example.com'].numa_node)", ["nic.example.com/numa_node"]),
        ("'numaNode' in device.attributes['gpu.example.com']", ["gpu.example.com/numaNode"]),
        ("device.attributes['resource.kubernetes.io'].numa == 0", ["resource.kubernetes.io/numa"]),
        ('device.attributes["resource.kubernetes.io"].numaNode == 0', []),
        ("device.driver == 'gpu.example.com' && device.attributes['gpu.example.com'].model == 'X'", []),
    ],
)
def test_numa_detection_in_cel(expression: str, found: list[str]) -> None:
    assert nonstandard_numa_in_cel(expression) == found


def test_numa_vendor_attribute_in_subrequest_selector() -> None:
    obj = load("claim-training.yaml")
    sub = obj["spec"]["devices"]["requests"][1]["firstAvailable"][1]
    sub["selectors"] = [{"cel": {"expression": "device.attributes['nic.example.com'].numa == 0"}}]
    out = run(claims.nonstandard_numa_attribute, obj)
    assert paths(out, ids.NONSTANDARD_NUMA_ATTRIBUTE) == [
        "spec.devices.requests[1].firstAvailable[1].selectors[0].cel.expression"
    ]
    assert "resource.kubernetes.io" in out.findings[0].remediation


@pytest.mark.parametrize("field", ["matchAttribute", "distinctAttribute"])
def test_numa_vendor_attribute_in_constraint(field: str) -> None:
    obj = load("template-training.yaml")
    obj["spec"]["spec"]["devices"]["constraints"] = [{"requests": ["gpu"], field: "gpu.example.com/numa"}]
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    out = run(claims.nonstandard_numa_attribute, obj)
    assert paths(out, ids.NONSTANDARD_NUMA_ATTRIBUTE) == [f"spec.spec.devices.constraints[0].{field}"]
    assert f"{field}: resource.kubernetes.io/numaNode" in out.findings[0].remediation


def test_numa_standard_constraint_and_other_attributes_pass() -> None:
    obj = load("claim-training.yaml")
    obj["spec"]["devices"]["constraints"].append(
        {"requests": ["gpu"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
    )
    assert run(claims.nonstandard_numa_attribute, obj).findings == []


def test_numa_on_device_class_create() -> None:
    out = run(claims.nonstandard_numa_attribute, load("deviceclass-vendor-numa.yaml"), namespace="")
    assert paths(out, ids.NONSTANDARD_NUMA_ATTRIBUTE) == ["spec.selectors[1].cel.expression"]


def test_numa_on_device_class_update_reports_only_new_expressions() -> None:
    old = load("deviceclass-vendor-numa.yaml")
    edited = copy.deepcopy(old)
    edited["metadata"]["labels"] = {"team": "gpu-ops"}
    assert run(claims.nonstandard_numa_attribute, edited, operation="UPDATE", old=old, namespace="").findings == []
    edited["spec"]["selectors"].append({"cel": {"expression": 'device.attributes["gpu.example.com"].numaID < 2'}})
    out = run(claims.nonstandard_numa_attribute, edited, operation="UPDATE", old=old, namespace="")
    assert paths(out, ids.NONSTANDARD_NUMA_ATTRIBUTE) == ["spec.selectors[2].cel.expression"]


# --- scheduler claims and UPDATEs are never judged ----------------------------------------------


def test_scheduler_claim_is_never_judged_or_mutated() -> None:
    obj = load("claim-scheduler.yaml")
    # Everything a user claim would be reported for: class not allowed, count over the limit, vendor NUMA.
    obj["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": "device.attributes['gpu.example.com'].numa == 0"}}
    ]
    for fn in VALIDATE_RULES:
        assert run(fn, obj) == Outcome(), fn.__name__
    assert run(tolerations.inject_device_tolerations, obj, phase="mutate") == Outcome()


def test_copied_scheduler_annotation_without_pod_owner_is_judged() -> None:
    obj = load("claim-scheduler.yaml")
    del obj["metadata"]["ownerReferences"]
    assert run(claims.device_class_not_allowed, obj).findings
    assert run(claims.device_count_exceeds, obj, policy=scoped_policy("legacy-gpu.example.com")).findings


def test_claim_rules_do_not_register_for_update() -> None:
    claim_rules = [r for r in standard_rules().rules if r.kinds & {"ResourceClaim", "ResourceClaimTemplate"}]
    assert {r.id for r in claim_rules} >= {
        ids.DEVICE_CLASS_NOT_ALLOWED,
        ids.DEVICE_COUNT_EXCEEDS,
        ids.ALLOCATION_MODE_ALL,
        ids.ADMIN_ACCESS_NAMESPACE,
        ids.TOLERATION_TOO_BROAD,
        ids.NONSTANDARD_NUMA_ATTRIBUTE,
        ids.INJECT_DEVICE_TOLERATIONS,
    }
    ours = [r for r in claim_rules if r.fn.__module__ in (claims.__name__, tolerations.__name__)]
    assert len(ours) == 7
    for r in ours:
        for kind in ("ResourceClaim", "ResourceClaimTemplate"):
            assert not r.applies(kind, "validate", "UPDATE"), r.id
            assert not r.applies(kind, "mutate", "UPDATE"), r.id
    numa = standard_rules().named(ids.NONSTANDARD_NUMA_ATTRIBUTE)
    assert any(r.applies("DeviceClass", "validate", "UPDATE") for r in numa)


def test_claim_update_passes_every_rule_even_when_called() -> None:
    obj = load("claim-training.yaml")
    obj["spec"]["devices"]["requests"][0]["exactly"].update(deviceClassName="bad.example.com", count=50)
    obj["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
    assert run(claims.device_class_not_allowed, obj).findings  # judged on CREATE
    for fn in VALIDATE_RULES:
        assert run(fn, obj, operation="UPDATE", old=obj) == Outcome(), fn.__name__
    assert run(tolerations.inject_device_tolerations, obj, operation="UPDATE", phase="mutate") == Outcome()


# --- through the engine (the request path minus HTTP) -------------------------------------------

MIGRATED = dt.datetime(2027, 3, 1, tzinfo=dt.UTC)  # ml-* is in stage migrated: findings deny


def admit(
    obj: dict[str, Any],
    phase: str,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    view: ClusterView | None = None,
    now: dt.datetime = MIGRATED,
    user: str = "alice",
) -> AdmissionResponse:
    request = parse_request(review(obj, operation=operation, old=old, user=user)["request"])
    return handle(request, phase, POLICY, view, now)


def test_engine_mutates_training_claim_once_and_validation_passes() -> None:
    obj = load("claim-training.yaml")
    mutate = admit(obj, "mutate")
    assert mutate.allowed and mutate.verdicts == []
    result = jsonpatch.apply_patch(obj, mutate.patch)
    kubernetes_validate.validate(result, "1.37.0", strict=True)
    ann = result["metadata"]["annotations"]
    assert ann["dra-migration.io/tolerations-injected"] == "6"
    assert ann["dra-migration.io/path"] == "dra-claim"
    assert all(len(s.body["tolerations"]) == 2 for s in iter_requests(result, "ResourceClaim"))
    validate = admit(result, "validate")
    assert validate.allowed and validate.verdicts == []  # the policy's own tolerations are not too broad
    assert admit(result, "mutate").patch == []


def test_engine_denies_bad_claim_in_migrated_stage_with_field_paths() -> None:
    obj = load("template-training.yaml")
    sub = obj["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"][0]
    sub.update(deviceClassName="vendor-gpu.example.com", allocationMode="All")
    del sub["count"]
    sub["tolerations"] = [{"operator": "Exists"}]
    policy = scoped_policy("vendor-gpu.example.com")
    admitted = admit_chain(parse_request(review(obj)["request"]), policy, None, MIGRATED)
    mutate, validate = admitted.mutate, admitted.validate
    assert mutate.allowed and validate is not None
    assert not validate.allowed
    assert sorted(validate.denied_rules) == [
        ids.ALLOCATION_MODE_ALL,
        ids.DEVICE_CLASS_NOT_ALLOWED,
        ids.TOLERATION_TOO_BROAD,
    ]
    prefix = "spec.spec.devices.requests[0].firstAvailable[0]"
    assert {c["field"] for c in validate.causes} == {
        f"{prefix}.deviceClassName",
        f"{prefix}.allocationMode",
        f"{prefix}.tolerations[0]",
    }


def test_engine_leaves_scheduler_claim_spec_alone_and_allows_it() -> None:
    obj = load("claim-scheduler.yaml")
    mutate = admit(obj, "mutate", user="system:kube-scheduler")
    assert mutate.allowed and mutate.verdicts == [] and mutate.patch == []
    validate = admit(obj, "validate", user="system:kube-scheduler")
    assert validate.allowed and validate.verdicts == []


def test_scheduler_claim_annotation_from_another_user_is_judged() -> None:
    """Copying the scheduler's annotation and owner does not exempt a user's claim from the policy."""
    obj = load("claim-scheduler.yaml")
    assert admit(obj, "mutate", user="system:kube-scheduler").patch == []
    assert admit(obj, "mutate", user="alice").patch != []


def test_a_second_scheduler_listed_in_the_policy_makes_scheduler_claims_too() -> None:
    """spec.schedulerUsernames (issue 13 item 11): a second scheduler's ServiceAccount is trusted like
    kube-scheduler once listed, and only then; kube-scheduler is no longer trusted when the list drops it."""
    second = "system:serviceaccount:kube-system:gpu-scheduler"
    doc = load("policy.yaml")
    doc["spec"]["schedulerUsernames"] = [second]
    policy = compile_policy(MigrationPolicy.model_validate(doc), b"second-scheduler")
    obj = load("claim-scheduler.yaml")

    def answer(phase: str, user: str, pol: CompiledPolicy) -> AdmissionResponse:
        return handle(parse_request(review(obj, user=user)["request"]), phase, pol, None, MIGRATED)

    for phase in ("mutate", "validate"):
        trusted = answer(phase, second, policy)
        assert trusted.allowed and trusted.verdicts == [] and trusted.patch == [], phase
    assert answer("mutate", second, POLICY).patch != []  # the default policy lists kube-scheduler only
    assert answer("mutate", "system:kube-scheduler", policy).patch != []
    assert POLICY.scheduler_usernames == {"system:kube-scheduler"}


@pytest.mark.parametrize("bad", [[], [""], [" system:kube-scheduler"], ["o'brien"]])
def test_scheduler_usernames_must_be_usernames(bad: list[str]) -> None:
    doc = load("policy.yaml")
    doc["spec"]["schedulerUsernames"] = bad
    with pytest.raises(ValueError, match="schedulerUsernames"):
        MigrationPolicy.model_validate(doc)


def test_engine_claim_update_has_no_findings_and_no_patch() -> None:
    old = load("claim-training.yaml")
    old["spec"]["devices"]["requests"][0]["exactly"].update(deviceClassName="bad.example.com", count=50)
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    for phase in ("mutate", "validate"):
        decision = admit(new, phase, operation="UPDATE", old=old)
        assert decision.allowed and decision.verdicts == [] and decision.patch == [], phase
    assert not admit(old, "validate").allowed  # the same spec on CREATE is denied


def test_engine_generated_claim_of_training_pod_gets_tolerations() -> None:
    pod = load("pod-training.yaml")
    obj = load("claim-generated.yaml")
    decision = admit(obj, "mutate", view=StaticView(pods=[pod]))
    result = jsonpatch.apply_patch(obj, decision.patch)
    kubernetes_validate.validate(result, "1.37.0", strict=True)
    assert [t["key"] for t in result["spec"]["devices"]["requests"][0]["exactly"]["tolerations"]] == [
        "example.com/maintenance",
        "example.com/degraded",
    ]
    offline = admit(obj, "mutate")
    assert "cluster-view-degraded" in offline.audit
    assert all("tolerations" not in op["path"] for op in offline.patch)


def test_engine_toleration_limit_is_a_warning_even_in_migrated_stage() -> None:
    obj = load("claim-training.yaml")
    obj["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": f"example.com/t{i}", "operator": "Exists", "effect": "NoSchedule"} for i in range(16)
    ]
    decision = admit(obj, "mutate")
    assert decision.allowed
    assert [v.rule for v in decision.verdicts] == [ids.INJECT_DEVICE_TOLERATIONS]
    assert len(decision.warnings) == 1 and "documented maximum of 16" in decision.warnings[0]


def test_allocation_mode_all_with_admin_access_takes_nothing_and_is_not_refused() -> None:
    """Issue 14 item 4: monitoring claims (adminAccess + All) ignore ordinary allocations (resource/v1
    ``ExactDeviceRequest.AdminAccess``); admin-access-namespace still judges where they may live."""
    obj = claim(allocationMode="All", adminAccess=True)
    assert run(claims.allocation_mode_all, obj).findings == []
    assert run(claims.admin_access_namespace, obj).findings  # ml-a is no admin-access namespace
    assert run(claims.admin_access_namespace, obj, namespace="gpu-ops").findings == []
    plain = claim(allocationMode="All", adminAccess=False)
    assert paths(run(claims.allocation_mode_all, plain), ids.ALLOCATION_MODE_ALL) == [
        "spec.devices.requests[0].exactly.allocationMode"]
