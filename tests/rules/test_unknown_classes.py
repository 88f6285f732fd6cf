"""Issue 24 items 5 and 6: a class's implicit extended-resource name ``deviceclass.resource.kubernetes.io/<class>``.

Item 5: when the webhook does not know the cluster's DeviceClasses (offline, or a live view whose DeviceClass
watch has not synced), such a name is not denied as unmapped: the finding says the lookup was unknown and
``enforcement.ruleErrors`` decides, as for a rule that raised. Readiness never depends on the cluster view.
Item 6: ``claims.allowedDeviceClasses`` also holds for the implicit name (kube-scheduler serves it with that
class through a claim of its own, which no claim rule judges).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import fakeapi
from tests.e2e.waits import eventually
from tests.helpers import ROOT, gpu_pod, review, start_server
from webhook.admission.answer import AdmissionResponse, handle
from webhook.admission.review import parse_request
from webhook.cli import main
from webhook.offline.views import StaticView
from webhook.policy import rule_ids as ids
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.loader import load
from webhook.rules.view import ClusterView, Lookup, OfflineView
from webhook.serve.app import StaticPolicy, create_app

NOW = dt.datetime(2027, 1, 1, tzinfo=dt.UTC)
CLASS = "tpu.example.com"
NAME = f"deviceclass.resource.kubernetes.io/{CLASS}"
RULE = ids.UNMAPPED_EXTENDED_RESOURCE


class UnsyncedView(OfflineView):
    """A live view before its DeviceClass watch listed: unknown, with the reason LiveView gives."""

    def device_classes(self) -> Lookup[Mapping[str, dict[str, Any]]]:
        return Lookup.unknown("DeviceClasses not synced yet")

    def extended_resource_classes(self) -> Lookup[Mapping[str, str]]:
        return Lookup.unknown("DeviceClasses not synced yet")


def _policy(tmp_path: Path, allowed: list[str] | None = None, exceptions: list[dict[str, Any]] | None = None,
            **enforcement: Any) -> CompiledPolicy:
    """live-policy.yaml (mig-* migrated, Deny) with CLASS allowed unless ``allowed`` says otherwise."""
    doc = yaml.safe_load((ROOT / "tests" / "data" / "live-policy.yaml").read_text())
    doc["spec"]["claims"]["allowedDeviceClasses"] = ["gpu.example.com", CLASS] if allowed is None else allowed
    doc["spec"]["enforcement"].update(enforcement)
    if exceptions:
        doc["spec"]["exceptions"] = exceptions
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load(path)


def _validate(policy: CompiledPolicy, view: ClusterView, obj: dict[str, Any] | None = None,
              namespace: str = "mig-a") -> AdmissionResponse:
    obj = obj or gpu_pod(namespace=namespace, resource=NAME)
    request = parse_request(review(obj, namespace=namespace)["request"])
    return handle(request, "validate", policy, view, NOW)


def _class(name: str, driver: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


# ---- item 5 -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("view", [OfflineView(), StaticView(), UnsyncedView()], ids=["offline", "static", "unsynced"])
def test_unknown_classes_are_not_denied_as_unmapped(tmp_path: Path, view: ClusterView) -> None:
    answer = _validate(_policy(tmp_path), view)
    assert answer.allowed, answer.message  # migrated: Deny, were the class known to be absent
    [verdict] = answer.verdicts
    assert verdict.rule == RULE and verdict.failed and verdict.status == "rule-error"
    assert verdict.action.value == "Warn"  # ruleErrors' default
    [warning] = answer.warnings
    assert warning.startswith(f"{RULE} (migrated: rule-error): container \"trainer\" requests {NAME}: not judged")
    assert f"check that DeviceClass {CLASS} exists" in warning
    assert "not judged" in answer.audit["cluster-view-degraded"]


def test_an_unsynced_watch_says_so(tmp_path: Path) -> None:
    answer = _validate(_policy(tmp_path), UnsyncedView())
    assert "the DeviceClasses are unknown (DeviceClasses not synced yet)" in answer.warnings[0]
    assert "DeviceClasses unknown (DeviceClasses not synced yet)" in answer.audit["cluster-view-degraded"]


@pytest.mark.parametrize(("setting", "allowed", "where"), [
    ("Deny", False, "message"), ("Audit", True, "audit"), ("Warn", True, "warnings")])
def test_rule_errors_decides(tmp_path: Path, setting: str, allowed: bool, where: str) -> None:
    answer = _validate(_policy(tmp_path, ruleErrors=setting), UnsyncedView())
    assert answer.allowed is allowed
    if where == "message":
        assert f"{RULE} (migrated: rule-error, Deny): container" in answer.message
    elif where == "audit":
        assert answer.warnings == [] and "not judged" in answer.audit[f"rule-error-{RULE}"]
    else:
        assert len(answer.warnings) == 1


def test_never_stronger_than_the_rule_itself(tmp_path: Path) -> None:
    """ruleErrors Deny, but the rule is only audited in this policy: Audit."""
    answer = _validate(_policy(tmp_path, ruleErrors="Deny", rules={RULE: "Audit"}), UnsyncedView())
    assert answer.allowed and answer.warnings == [] and f"rule-error-{RULE}" in answer.audit


def test_an_exception_switches_it_off(tmp_path: Path) -> None:
    policy = _policy(tmp_path, ruleErrors="Deny",
                     exceptions=[{"namespaces": ["mig-a"], "rules": [RULE], "reason": "INC-7"}])
    answer = _validate(policy, UnsyncedView())
    assert answer.allowed and answer.warnings == [] and f"excepted-{RULE}" in answer.audit


def test_known_classes_decide_normally(tmp_path: Path) -> None:
    policy = _policy(tmp_path)
    absent = _validate(policy, StaticView(device_classes=[_class("gpu.example.com", "gpu.example.com")]))
    assert not absent.allowed and f"DeviceClass {CLASS} does not exist" in absent.message
    assert not any(v.failed for v in absent.verdicts) and "cluster-view-degraded" not in absent.audit
    present = _validate(policy, StaticView(device_classes=[_class(CLASS, "gpu.example.com")]))
    assert present.allowed and present.verdicts == []


def test_a_retired_name_is_still_judged_by_the_policy_alone(tmp_path: Path) -> None:
    """Item 5 is about implicit names: a name the policy itself retires is judged by the policy (unchanged)."""
    doc = yaml.safe_load((ROOT / "tests" / "data" / "live-policy.yaml").read_text())
    doc["spec"]["retiredResourceNames"] = ["example.org/*"]
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    pod = gpu_pod(namespace="mig-a", resource="example.org/tpu")
    answer = _validate(load(tmp_path / "p.yaml"), UnsyncedView(), pod)
    assert not answer.allowed and not answer.verdicts[0].failed


def test_check_offline_says_not_judged_and_with_the_classes_decides(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``check`` without DeviceClasses: allowed with the rule-error finding; with ``--cluster-objects`` holding the
    cluster's DeviceClasses (here not the one asked for): denied as unmapped."""
    _policy(tmp_path)
    app = tmp_path / "app.yaml"
    app.write_text(yaml.safe_dump(gpu_pod(namespace="mig-a", resource=NAME)))
    code = main(["check", "--policy", str(tmp_path / "policy.yaml"), str(app)])
    out = capsys.readouterr().out
    assert code == 0 and f"Warn  {RULE} (rule-error): container \"trainer\" requests {NAME}: not judged" in out
    snapshot = tmp_path / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                        "items": [_class("gpu.example.com", "gpu.example.com")]}))
    code = main(["check", "--policy", str(tmp_path / "policy.yaml"), str(app), "--cluster-objects", str(snapshot)])
    out = capsys.readouterr().out
    assert code == 1 and f"Deny  {RULE}: container \"trainer\" requests {NAME}, but DeviceClass {CLASS} does not " \
        "exist" in out


# ---- item 6 -----------------------------------------------------------------------------------------------


def test_allowlist_covers_the_implicit_name_of_a_pod_and_a_template(tmp_path: Path) -> None:
    policy = _policy(tmp_path, allowed=["gpu.example.com"])
    view = StaticView(device_classes=[_class(CLASS, "gpu.example.com"), _class("gpu.example.com", "gpu.example.com")])
    pod = _validate(policy, view)
    assert not pod.allowed
    assert (f'{ids.DEVICE_CLASS_NOT_ALLOWED} (migrated: Deny): container "trainer" requests {NAME}: DeviceClass not '
            "allowed by the policy; fix: allowed DeviceClasses: gpu.example.com") in pod.message
    assert {"reason": ids.DEVICE_CLASS_NOT_ALLOWED, "message": "allowed DeviceClasses: gpu.example.com",
            "field": "spec.containers[0].resources"} in pod.causes
    pod_spec = gpu_pod(resource=NAME)["spec"]
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "pilot-a"},
              "spec": {"selector": {"matchLabels": {"a": "b"}},
                       "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod_spec}}}
    answer = _validate(policy, view, deploy, "pilot-a")
    assert answer.allowed and [v.rule for v in answer.verdicts] == [ids.DEVICE_CLASS_NOT_ALLOWED]
    assert answer.warnings[0].startswith(f"{ids.DEVICE_CLASS_NOT_ALLOWED} (pilot): container \"trainer\" requests")


def test_allowed_class_and_another_drivers_class_pass(tmp_path: Path) -> None:
    allowed = _validate(_policy(tmp_path), StaticView(device_classes=[_class(CLASS, "gpu.example.com")]))
    assert allowed.allowed and allowed.verdicts == []
    policy = _policy(tmp_path, allowed=["gpu.example.com"])
    cpu = "dra.cpu"  # dra-driver-cpu's class: outside the migration, left alone as its claims are
    view = StaticView(device_classes=[_class(cpu, "dra.cpu"), _class("gpu.example.com", "gpu.example.com")])
    answer = _validate(policy, view, gpu_pod(namespace="pilot-a", resource=f"deviceclass.resource.kubernetes.io/{cpu}"),
                       "pilot-a")
    assert answer.allowed and answer.verdicts == []


# ---- readiness: never the cluster view ------------------------------------------------------------------


class BrokenStatusView(UnsyncedView):
    """A view that cannot even say how it is doing."""

    def status(self) -> dict[str, Any]:
        raise RuntimeError("informer state unreadable")


def test_readiness_never_depends_on_the_view(tmp_path: Path) -> None:
    app = create_app(StaticPolicy(_policy(tmp_path)), BrokenStatusView(), clock=lambda: NOW)
    client = app.test_client()
    resp = client.get("/readyz")
    assert resp.status_code == 200
    body = resp.get_json()
    assert body["ready"] is True and "RuntimeError" in body["cluster"]["error"]
    answer = client.post("/validate", json=review(gpu_pod(namespace="mig-a", resource=NAME), namespace="mig-a"))
    response = answer.get_json()["response"]
    assert response["allowed"] is True and "DeviceClasses not synced yet" in response["warnings"][0]


def test_ready_while_the_device_class_watch_fails_and_answers_as_unknown(tmp_path: Path) -> None:
    policy_file = tmp_path / "src.yaml"
    doc = yaml.safe_load((ROOT / "tests" / "data" / "live-policy.yaml").read_text())
    doc["spec"]["claims"]["allowedDeviceClasses"] = ["gpu.example.com", CLASS]
    policy_file.write_text(yaml.safe_dump(doc))
    with fakeapi.FakeAPI() as api:
        api.put(fakeapi.namespace("mig-a"), fakeapi.device_class("gpu.example.com", "example.com/gpu"))
        api.fail("deviceclasses")
        server = start_server(tmp_path, policy_file, "--kubeconfig", api.write_kubeconfig(tmp_path),
                              "--lookup-budget", "5", workers=1, offline=False)
        try:
            client = server.client()
            status, body = client.get("/readyz")
            ready = json.loads(body)
            assert status == 200 and ready["ready"] is True
            assert ready["cluster"]["deviceclasses"]["synced"] is False
            pod = gpu_pod(namespace="mig-a", resource=NAME)
            resp = client.admit("/validate", review(pod, namespace="mig-a"))["response"]
            assert resp["allowed"] is True
            assert any("rule-error" in w and "DeviceClasses not synced yet" in w for w in resp["warnings"])
            api.heal()
            eventually(lambda: json.loads(client.get("/readyz")[1])["cluster"]["deviceclasses"]["synced"],
                       "the DeviceClass watch synced", 60)
            resp = client.admit("/validate", review(pod, namespace="mig-a"))["response"]
            assert resp["allowed"] is False and f"DeviceClass {CLASS} does not exist" in resp["status"]["message"]
        finally:
            server.stop()
