"""Device tolerations on claims (issue 4): ``toleration-too-broad`` and ``inject-device-tolerations``.

Every mutated claim is turned into a JSON patch with jsonpatch, applied to the original, and the
result is checked against the Kubernetes 1.37 schemas (kubernetes-validate, strict).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders.claims import load
from tests.builders.claims import make_ctx as claim_ctx
from webhook.objects.claims import iter_requests
from webhook.offline.views import StaticView
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.rules.base import Context, Outcome, RuleFn
from webhook.rules.tolerations import inject_device_tolerations, toleration_too_broad
from webhook.rules.view import OfflineView

KEY = "dra-migration.io/tolerations-injected"
MAINT = {
    "key": "example.com/maintenance",
    "operator": "Exists",
    "effect": "NoExecute",
    "tolerationSeconds": 3600,
}
DEGRADED = {"key": "example.com/degraded", "operator": "Exists", "effect": "NoSchedule"}


def make_policy(**spec_overrides: Any) -> CompiledPolicy:
    doc = load("policy.yaml")
    doc["spec"].update(spec_overrides)
    return compile_policy(MigrationPolicy.model_validate(doc), yaml.safe_dump(doc).encode())


POLICY = make_policy()
TRAINING_POD = load("pod-training.yaml")


def make_ctx(kind: str, *, policy: CompiledPolicy = POLICY, phase: str = "mutate", **kwargs: Any) -> Context:
    return claim_ctx(kind, policy=policy, phase=phase, **kwargs)


def run(fn: RuleFn, obj: dict[str, Any], ctx: Context | None = None, **ctx_args: Any) -> Outcome:
    before = copy.deepcopy(obj)
    out = fn(obj, ctx or make_ctx(obj["kind"], **ctx_args))
    assert obj == before, "a rule modified the request object"
    return out


def patched(obj: dict[str, Any], out: Outcome) -> dict[str, Any]:
    """Apply the diff as the API server would, and check the result is a valid 1.37 object."""
    assert out.mutated is not None
    patch = jsonpatch.make_patch(obj, out.mutated)
    result = patch.apply(copy.deepcopy(obj))
    assert result == out.mutated
    kubernetes_validate.validate(result, "1.37.0", strict=True)
    for slot in iter_requests(result, result["kind"]):
        assert len(slot.body.get("tolerations") or []) <= 16, slot.path
    return result


def tolerations_by_path(obj: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {s.path: s.body.get("tolerations", []) for s in iter_requests(obj, obj["kind"])}


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations", {})


def with_tolerations(obj: dict[str, Any], path_index: int, tols: list[dict[str, Any]]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    slot = list(iter_requests(obj, obj["kind"]))[path_index]
    slot.body["tolerations"] = tols
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    return obj


# --- toleration-too-broad -----------------------------------------------------------------------


def broad(obj: dict[str, Any], **ctx_args: Any) -> list[str]:
    out = run(toleration_too_broad, obj, phase="validate", **ctx_args)
    assert all(f.rule == ids.TOLERATION_TOO_BROAD for f in out.findings)
    return [p for f in out.findings for p in f.paths]


@pytest.mark.parametrize(
    ("toleration", "reason"),
    [
        ({"operator": "Exists"}, "empty key"),
        ({"operator": "Exists", "effect": "NoSchedule"}, "empty key"),
        ({"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}, "forever"),
        (
            {"key": "example.com/maintenance", "operator": "Exists"},
            "evicted at once",
        ),  # no effect: the allocator places the claim, eviction is not delayed (claimEvictionTime, ab3cec07)
        (
            {
                "key": "example.com/x",
                "operator": "Equal",
                "value": "y",
                "effect": "NoExecute",
                "tolerationSeconds": 90000,
            },
            "above the limit of 86400",
        ),
    ],
)
def test_toleration_too_broad_fires(toleration: dict[str, Any], reason: str) -> None:
    obj = with_tolerations(load("claim-training.yaml"), 0, [DEGRADED, toleration])
    out = run(toleration_too_broad, obj, phase="validate")
    assert [p for f in out.findings for p in f.paths] == ["spec.devices.requests[0].exactly.tolerations[1]"]
    assert reason in out.findings[0].message
    assert "tolerationSeconds" in out.findings[0].remediation


@pytest.mark.parametrize(
    "toleration",
    [
        {
            "key": "example.com/maintenance",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 86400,
        },
        {"key": "example.com/maintenance", "operator": "Exists", "tolerationSeconds": 600},
        {"key": "example.com/flaky", "operator": "Equal", "value": "yes", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "None"},  # tolerating informational taints changes nothing
        MAINT,
    ],
)
def test_toleration_bounded_or_specific_passes(toleration: dict[str, Any]) -> None:
    assert broad(with_tolerations(load("claim-training.yaml"), 1, [toleration])) == []


def test_toleration_unbounded_without_max_still_fires_but_large_bound_passes() -> None:
    policy = make_policy(claims={"maxTolerationSeconds": None})
    big = {"key": "example.com/m", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10**7}
    forever = {"key": "example.com/m", "operator": "Exists", "effect": "NoExecute"}
    assert broad(with_tolerations(load("claim-training.yaml"), 0, [big]), policy=policy) == []
    assert broad(with_tolerations(load("claim-training.yaml"), 0, [forever]), policy=policy)


def test_policy_toleration_is_not_too_broad_even_when_unbounded() -> None:
    unbounded = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}
    training = load("policy.yaml")["spec"]["trainingJobs"] | {"deviceTolerations": [unbounded]}
    policy = make_policy(trainingJobs=training)
    obj = with_tolerations(load("claim-training.yaml"), 0, [unbounded])
    assert broad(obj, policy=policy) == []
    assert broad(obj) == ["spec.devices.requests[0].exactly.tolerations[0]"]


def test_toleration_too_broad_in_template_subrequest() -> None:
    obj = with_tolerations(load("template-training.yaml"), 1, [{"operator": "Exists"}])
    assert broad(obj) == ["spec.spec.devices.requests[0].firstAvailable[1].tolerations[0]"]


def test_every_toleration_message_names_the_toleration_in_full() -> None:
    """Issue 24 item 7: key, operator, value, effect and tolerationSeconds, defaults filled in."""
    cases = [
        ({"operator": "Exists"},
         "key=(any) operator=Exists value=(none) effect=(all) tolerationSeconds=(unset: forever)"),
        ({"effect": "NoExecute"},  # the shape of intel-monitor-admin-access.yaml's tolerations
         "key=(any) operator=Equal value=(none) effect=NoExecute tolerationSeconds=(unset: forever)"),
        ({"key": "example.com/x", "operator": "Equal", "value": "y", "effect": "NoExecute", "tolerationSeconds": 90000},
         "key=example.com/x operator=Equal value=y effect=NoExecute tolerationSeconds=90000"),
        ({"operator": "Exists", "effect": "NoSchedule"},
         "key=(any) operator=Exists value=(none) effect=NoSchedule tolerationSeconds=(unset)"),
    ]
    for tol, described in cases:
        [finding] = run(toleration_too_broad, _with_only(load("claim-training.yaml"), tol), phase="validate").findings
        assert f"toleration ({described}) is too broad" in finding.message, finding.message


def test_a_policy_toleration_error_names_the_toleration_in_full() -> None:
    doc = load("policy.yaml")
    doc["spec"]["trainingJobs"]["deviceTolerations"] = [{"key": "example.com/m", "effect": "NoSchedule",
                                                         "tolerationSeconds": 60}]
    with pytest.raises(ValueError, match=re.escape(
            "tolerationSeconds only applies to effect NoExecute: toleration (key=example.com/m operator=Equal "
            "value=(none) effect=NoSchedule tolerationSeconds=60)")):
        MigrationPolicy.model_validate(doc)


def _with_only(obj: dict[str, Any], tol: dict[str, Any]) -> dict[str, Any]:
    """The first request with this one toleration (not schema-checked: only the message is looked at here)."""
    obj = copy.deepcopy(obj)
    next(iter_requests(obj, obj["kind"])).body["tolerations"] = [tol]
    return obj


def _monitoring_claim(namespace: str, subrequest: bool = False) -> dict[str, Any]:
    """A DCGM-exporter-shaped claim: adminAccess, allocationMode All, tolerating every NoExecute taint forever."""
    tolerations = [{"operator": "Exists", "effect": "NoExecute"}, {"operator": "Exists", "effect": "NoSchedule"}]
    body: dict[str, Any] = {"deviceClassName": "gpu.example.com", "allocationMode": "All", "tolerations": tolerations}
    request: dict[str, Any] = {"name": "gpu", "exactly": {**body, "adminAccess": True}}
    if subrequest:
        request = {"name": "gpu", "firstAvailable": [{"name": "any", **body}]}
    obj = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
           "metadata": {"name": "dcgm-exporter", "namespace": namespace},
           "spec": {"devices": {"requests": [request]}}}
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    return obj


def test_monitoring_claim_in_an_admin_namespace_is_not_refused() -> None:
    policy = make_policy(claims={**load("policy.yaml")["spec"]["claims"], "adminAccessNamespaces": ["gpu-*"]})
    assert broad(_monitoring_claim("gpu-ops"), policy=policy, namespace="gpu-ops") == []
    # Elsewhere the same claim is judged (admin-access-namespace refuses its adminAccess too) ...
    assert broad(_monitoring_claim("ml-a"), policy=policy, namespace="ml-a") == [
        "spec.devices.requests[0].exactly.tolerations[0]", "spec.devices.requests[0].exactly.tolerations[1]"]
    # ... and so is a request without adminAccess in the admin namespace.
    assert broad(_monitoring_claim("gpu-ops", subrequest=True), policy=policy, namespace="gpu-ops") == [
        "spec.devices.requests[0].firstAvailable[0].tolerations[0]",
        "spec.devices.requests[0].firstAvailable[0].tolerations[1]"]


def test_monitoring_claim_is_judged_when_the_policy_allows_no_admin_namespace() -> None:
    policy = make_policy(claims={**load("policy.yaml")["spec"]["claims"], "adminAccessNamespaces": []})
    assert len(broad(_monitoring_claim("gpu-ops"), policy=policy, namespace="gpu-ops")) == 2


# --- inject-device-tolerations ------------------------------------------------------------------


def test_inject_into_exactly_and_every_subrequest() -> None:
    obj = load("claim-training.yaml")
    out = run(inject_device_tolerations, obj)
    assert out.findings == []
    result = patched(obj, out)
    assert tolerations_by_path(result) == {
        "spec.devices.requests[0].exactly": [MAINT, DEGRADED],
        "spec.devices.requests[1].firstAvailable[0]": [MAINT, DEGRADED],
        "spec.devices.requests[1].firstAvailable[1]": [MAINT, DEGRADED],
    }
    assert annotations(result) == {KEY: "6"}
    assert out.notes == {"tolerations-injected": "6"}


def test_inject_second_pass_is_no_change() -> None:
    obj = load("claim-training.yaml")
    first = run(inject_device_tolerations, obj).mutated
    assert first is not None
    assert run(inject_device_tolerations, first) == Outcome()


def test_not_a_training_job_is_left_alone() -> None:
    obj = load("claim-training.yaml")
    obj["metadata"]["labels"] = {"workload.example.com/kind": "inference"}
    assert run(inject_device_tolerations, obj) == Outcome()


def test_user_toleration_with_same_key_and_effect_is_kept() -> None:
    mine = {
        "key": "example.com/maintenance",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 7200,
    }
    other = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    obj = with_tolerations(load("claim-training.yaml"), 0, [mine, other])
    result = patched(obj, run(inject_device_tolerations, obj))
    # The user's 7200 s stays (same key and effect as the policy's); the NoSchedule one on the same key
    # is a different pair and does not stand in for the policy's degraded toleration, which is added.
    assert tolerations_by_path(result)["spec.devices.requests[0].exactly"] == [mine, other, DEGRADED]
    assert tolerations_by_path(result)["spec.devices.requests[1].firstAvailable[0]"] == [MAINT, DEGRADED]
    assert annotations(result)[KEY] == "5"  # the user's own maintenance toleration is not counted


def test_sixteen_toleration_limit_adds_nothing_and_warns() -> None:
    fifteen = [{"key": f"example.com/t{i}", "operator": "Exists", "effect": "NoSchedule"} for i in range(15)]
    obj = with_tolerations(load("claim-training.yaml"), 1, fifteen)
    out = run(inject_device_tolerations, obj)
    result = patched(obj, out)
    # 15 + 2 > 16: that subrequest gets neither toleration, the others get both.
    assert tolerations_by_path(result)["spec.devices.requests[1].firstAvailable[0]"] == fifteen
    assert tolerations_by_path(result)["spec.devices.requests[0].exactly"] == [MAINT, DEGRADED]
    assert [(f.rule, f.advisory, f.paths) for f in out.findings] == [
        (ids.INJECT_DEVICE_TOLERATIONS, True, ("spec.devices.requests[1].firstAvailable[0].tolerations",))
    ]
    assert "documented maximum of 16" in out.findings[0].message
    assert ("adding the policy's 2 (key=example.com/maintenance operator=Exists value=(none) effect=NoExecute "
            "tolerationSeconds=3600; key=example.com/degraded operator=Exists value=(none) effect=NoSchedule "
            "tolerationSeconds=(unset))") in out.findings[0].message
    assert annotations(result)[KEY] == "4"
    # Second pass: still a warning, still no change.
    again = run(inject_device_tolerations, result)
    assert again.mutated is None and len(again.findings) == 1


def test_sixteen_toleration_limit_exactly_reached_is_fine() -> None:
    fourteen = [{"key": f"example.com/t{i}", "operator": "Exists", "effect": "NoSchedule"} for i in range(14)]
    obj = with_tolerations(load("claim-training.yaml"), 0, fourteen)
    out = run(inject_device_tolerations, obj)
    assert out.findings == []
    assert len(tolerations_by_path(patched(obj, out))["spec.devices.requests[0].exactly"]) == 16


def test_template_by_spec_metadata_labels_annotates_template_and_generated_claims() -> None:
    obj = load("template-training.yaml")
    result = patched(obj, run(inject_device_tolerations, obj, ctx=make_ctx("ResourceClaimTemplate")))
    assert tolerations_by_path(result) == {
        "spec.spec.devices.requests[0].firstAvailable[0]": [MAINT, DEGRADED],
        "spec.spec.devices.requests[0].firstAvailable[1]": [MAINT, DEGRADED],
    }
    assert annotations(result) == {KEY: "4"}
    assert result["spec"]["metadata"]["annotations"] == {
        "example.com/migrated-from": "device-plugin",
        KEY: "4",
    }


def test_template_without_training_labels_is_left_alone() -> None:
    obj = load("template-training.yaml")
    obj["spec"]["metadata"]["labels"] = {"team": "ml"}
    assert run(inject_device_tolerations, obj) == Outcome()


def generated_from(template: dict[str, Any]) -> dict[str, Any]:
    """The claim the resourceclaim controller would create from ``template`` for Pod train-0."""
    claim = load("claim-generated.yaml")
    meta = template["spec"].get("metadata", {})
    claim["metadata"]["labels"] = dict(meta.get("labels", {}))
    claim["metadata"]["annotations"] = {**meta.get("annotations", {}), **claim["metadata"]["annotations"]}
    claim["spec"] = copy.deepcopy(template["spec"]["spec"])
    kubernetes_validate.validate(claim, "1.37.0", strict=True)
    return claim


def test_claim_generated_from_an_injected_template_needs_no_change() -> None:
    tmpl = load("template-training.yaml")
    injected = run(inject_device_tolerations, tmpl).mutated
    assert injected is not None
    claim = generated_from(injected)
    assert run(inject_device_tolerations, claim) == Outcome()


def test_generated_claim_of_training_pod_is_injected() -> None:
    obj = load("claim-generated.yaml")
    out = run(inject_device_tolerations, obj, view=StaticView(pods=[TRAINING_POD]))
    result = patched(obj, out)
    assert tolerations_by_path(result) == {"spec.devices.requests[0].exactly": [MAINT, DEGRADED]}
    assert annotations(result)[KEY] == "2"
    assert annotations(result)["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert out.degraded == ()


def test_generated_claim_of_pod_with_long_deadline_is_injected() -> None:
    pod = copy.deepcopy(TRAINING_POD)
    pod["metadata"]["labels"] = {"app": "sweep"}
    pod["spec"]["activeDeadlineSeconds"] = 86400
    kubernetes_validate.validate(pod, "1.37.0", strict=True)
    obj = load("claim-generated.yaml")
    out = run(inject_device_tolerations, obj, view=StaticView(pods=[pod]))
    assert tolerations_by_path(patched(obj, out)) == {"spec.devices.requests[0].exactly": [MAINT, DEGRADED]}
    pod["spec"]["activeDeadlineSeconds"] = 600
    assert run(inject_device_tolerations, obj, view=StaticView(pods=[pod])) == Outcome()


@pytest.mark.parametrize("case", ["offline", "other-uid"])
def test_generated_claim_with_unknown_owner_is_not_injected_and_degraded(case: str) -> None:
    pod = copy.deepcopy(TRAINING_POD)
    pod["metadata"]["uid"] = "6f1c2d3e-0000-4000-8000-0000000000ff"  # a new Pod with the same name
    view = OfflineView() if case == "offline" else StaticView(pods=[pod])
    assert run(inject_device_tolerations, load("claim-generated.yaml"), view=view) == Outcome(degraded=(
        "inject-device-tolerations: owner Pod ml-a/train-0 unknown, claim not treated as a training job",))


def test_claim_with_pod_owner_but_no_pod_claim_name_is_not_looked_up() -> None:
    obj = load("claim-generated.yaml")
    del obj["metadata"]["annotations"]
    assert run(inject_device_tolerations, obj, view=StaticView(pods=[TRAINING_POD])) == Outcome()


def test_no_injection_when_device_taints_gate_is_off_or_no_tolerations() -> None:
    obj = load("claim-training.yaml")
    assert (
        run(inject_device_tolerations, obj, policy=make_policy(featureGates={"DRADeviceTaints": False}))
        == Outcome()
    )
    training = load("policy.yaml")["spec"]["trainingJobs"] | {"deviceTolerations": []}
    assert run(inject_device_tolerations, obj, policy=make_policy(trainingJobs=training)) == Outcome()


def test_stale_count_is_corrected() -> None:
    obj = load("claim-training.yaml")
    obj["metadata"]["annotations"] = {KEY: "99"}
    result = patched(obj, run(inject_device_tolerations, obj))
    assert annotations(result)[KEY] == "6"


# --- idempotence and validity, for any claim shape ----------------------------------------------

_KEYS = ["example.com/maintenance", "example.com/degraded", "example.com/other"]
_toleration = st.one_of(
    st.builds(
        lambda k, e, s: {
            "key": k,
            "operator": "Exists",
            "effect": e,
            **({"tolerationSeconds": s} if s else {}),
        },
        st.sampled_from(_KEYS),
        st.just("NoExecute"),
        st.sampled_from([None, 60, 3600]),
    ),
    st.builds(
        lambda k, v, e: {"key": k, "operator": "Equal", "value": v, **({"effect": e} if e else {})},
        st.sampled_from(_KEYS),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["", "NoSchedule", "None"]),
    ),
    st.just({"operator": "Exists", "effect": "None"}),
)
_body = st.fixed_dictionaries(
    {"deviceClassName": st.sampled_from(["gpu.example.com", "nic.example.com"])},
    optional={"count": st.integers(1, 4), "tolerations": st.lists(_toleration, max_size=16)},
)


@st.composite
def _claims(draw: st.DrawFn) -> dict[str, Any]:
    requests = []
    for i in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            requests.append({"name": f"r{i}", "exactly": draw(_body)})
        else:
            subs = draw(st.lists(_body, min_size=1, max_size=3))
            requests.append(
                {"name": f"r{i}", "firstAvailable": [{"name": f"s{j}", **b} for j, b in enumerate(subs)]}
            )
    devices = {"requests": requests}
    labels = draw(
        st.sampled_from(
            [{}, {"workload.example.com/kind": "training"}, {"jobset.sigs.k8s.io/jobset-name": "j"}]
        )
    )
    ann = draw(st.sampled_from([{}, {KEY: "3"}]))
    meta: dict[str, Any] = {"name": "c", "namespace": "ml-a", **({"labels": labels} if labels else {})}
    if ann:
        meta["annotations"] = ann
    if draw(st.booleans()):
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": meta,
            "spec": {"devices": devices},
        }
    inner = {"labels": labels} if labels else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "ml-a"},
        "spec": {"metadata": inner, "spec": {"devices": devices}},
    }


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_claims())
def test_injection_is_idempotent_valid_and_keeps_user_tolerations(obj: dict[str, Any]) -> None:
    kubernetes_validate.validate(obj, "1.37.0", strict=True)
    first = run(inject_device_tolerations, obj)
    current = patched(obj, first) if first.mutated is not None else obj
    # Nothing a user wrote is removed or reordered: it stays the prefix of each list.
    before = tolerations_by_path(obj)
    for path, tols in tolerations_by_path(current).items():
        assert tols[: len(before[path])] == before[path]
    # A training job's every request either carries a toleration for each policy key+effect, or was
    # reported as over the limit.
    if first.mutated is not None:
        warned = {p.removesuffix(".tolerations") for f in first.findings for p in f.paths}
        for path, tols in tolerations_by_path(current).items():
            have = {(t.get("key", ""), t.get("effect", "")) for t in tols}
            assert (
                path in warned
                or {("example.com/maintenance", "NoExecute"), ("example.com/degraded", "NoSchedule")} <= have
            )
    second = run(inject_device_tolerations, current)
    assert second.mutated is None
    assert [f.paths for f in second.findings] == [f.paths for f in first.findings]


# --- taint-rule-without-selector (issue 46 item 3) -------------------------------------------------------


def _taint_rule(selector: dict[str, Any] | None = None, effect: str = "NoExecute", omit: bool = True) -> dict:
    spec: dict[str, Any] = {"taint": {"key": "example.com/maintenance", "value": "firmware", "effect": effect}}
    if not omit:
        spec["deviceSelector"] = selector
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "node-a-firmware"},
            "spec": spec}


def _on(version: str) -> CompiledPolicy:
    from tests.builders.claims import load

    doc = load("policy.yaml")
    doc["spec"]["kubernetesVersion"] = version
    return compile_policy(MigrationPolicy.model_validate(doc), yaml.safe_dump(doc).encode())


def test_taint_rule_without_selector_on_1_37_0_taints_every_device() -> None:
    """kubernetes#141620: on 1.37.0 (and 1.36) kube-scheduler applies a rule without deviceSelector to every
    device, so nothing new is allocated anywhere and nothing is evicted."""
    from tests.builders.claims import run
    from webhook.rules.tolerations import taint_rule_without_selector

    for version in ("1.36", "1.37"):
        (f,) = run(taint_rule_without_selector, _taint_rule(), policy=_on(version), namespace="").findings
        assert f.rule == ids.TAINT_RULE_WITHOUT_SELECTOR and f.paths == ("spec.deviceSelector",)
        assert f.message == (
            "DeviceTaintRule node-a-firmware has no deviceSelector: kube-scheduler taints every device with it, so no "
            "new claim that does not tolerate example.com/maintenance is allocated anywhere, and nothing is evicted")
        assert f"kubernetesVersion {version}.0 predates the fix for kubernetes/kubernetes#141620" in f.remediation
        assert "fixed in 1.37.x patch carrying kubernetes/kubernetes#141998, not yet known" in f.remediation
    (f,) = run(taint_rule_without_selector, _taint_rule(effect="NoSchedule"), policy=_on("1.37")).findings
    assert "deviceSelector: {} selects every device on purpose" in f.remediation


def test_taint_rule_without_selector_is_fine_where_it_is_fixed_or_blocks_nothing() -> None:
    from tests.builders.claims import run
    from webhook.rules.tolerations import taint_rule_without_selector

    on_1_37 = _on("1.37")
    assert run(taint_rule_without_selector, _taint_rule(), policy=_on("1.38")).findings == []  # #141648 in 1.38.0
    assert run(taint_rule_without_selector, _taint_rule(selector={}, omit=False), policy=on_1_37).findings == []
    assert run(taint_rule_without_selector, _taint_rule(selector={"driver": "gpu.example.com"}, omit=False),
               policy=on_1_37).findings == []
    assert run(taint_rule_without_selector, _taint_rule(effect="None"), policy=on_1_37).findings == []
    assert run(taint_rule_without_selector, _taint_rule(effect="EvictSlowly"), policy=on_1_37).findings == []
    # deviceSelector: null is no selector (the API server drops it): judged as omitted.
    assert run(taint_rule_without_selector, _taint_rule(selector=None, omit=False), policy=on_1_37).findings
    # Malformed input is let through without a finding or an error.
    assert run(taint_rule_without_selector, {"kind": "DeviceTaintRule", "spec": []}, policy=on_1_37).findings == []


def test_check_of_a_taint_rule_manifest_denies_it_on_1_37(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`check` of a DeviceTaintRule manifest: the bundled policy (1.37) denies it; the action is the policy's."""
    from tests.helpers import ROOT
    from webhook.cli import main

    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump(_taint_rule()))
    code = main(["check", str(path), "--policy", str(ROOT / "policies" / "default.yaml")])
    out = capsys.readouterr().out
    assert code != 0 and "taint-rule-without-selector" in out and "kube-scheduler taints every device" in out
