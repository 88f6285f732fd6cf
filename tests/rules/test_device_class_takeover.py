"""Issue 14 item 5: a DeviceClass that takes over a policy resource's extended-resource name is reported.

Kubernetes serves one extended resource through one class only (the newest; ties: first name):
``staging/src/k8s.io/api/resource/v1/types.go`` ``DeviceClassSpec.ExtendedResourceName`` and the
scheduler's ``deviceclass/extendedresourcecache/extendedresourcecache.go`` ``updateResourceName2class``. The real
control plane shows it in tests/e2e/test_workloads_takeover.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from tests.builders.claims import run
from webhook.policy import rule_ids as ids
from webhook.policy.model import Action
from webhook.rules import claims
from webhook.rules.view import extended_resource_map


def device_class(name: str, ern: str | None, created: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": 'device.driver == "gpu.example.com"'}}]}
    if ern:
        spec["extendedResourceName"] = ern
    meta: dict[str, Any] = {"name": name}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta, "spec": spec}


def test_a_second_class_for_the_policy_resource_is_reported():
    out = run(claims.device_class_takeover, device_class("mig.gpu.example.com", "example.com/gpu"))
    (f,) = out.findings
    assert f.rule == ids.DEVICE_CLASS_TAKEOVER and f.paths == ("spec.extendedResourceName",)
    assert "takes over example.com/gpu from DeviceClass gpu.example.com" in f.message and len(f.message) < 190


def test_a_class_for_a_legacy_name_is_reported_too():
    (f,) = run(claims.device_class_takeover, device_class("dp.gpu.example.com", "vendor.example.com/gpu")).findings
    assert "the device-plugin name of example.com/gpu" in f.message


def test_the_policy_class_itself_other_names_and_unchanged_updates_are_fine():
    assert run(claims.device_class_takeover, device_class("gpu.example.com", "example.com/gpu")).findings == []
    assert run(claims.device_class_takeover, device_class("tpu.example.org", "example.org/tpu")).findings == []
    assert run(claims.device_class_takeover, device_class("plain.example.com", None)).findings == []
    taker = device_class("mig.gpu.example.com", "example.com/gpu")
    assert run(claims.device_class_takeover, taker, operation="UPDATE", old=taker).findings == []
    before = device_class("mig.gpu.example.com", None)
    assert run(claims.device_class_takeover, taker, operation="UPDATE", old=before).findings


def test_the_newest_class_wins_the_name_and_ties_go_to_the_first_name():
    old = device_class("gpu.example.com", "example.com/gpu", "2026-01-01T00:00:00Z")
    new = device_class("mig.gpu.example.com", "example.com/gpu", "2026-06-01T00:00:00Z")
    assert extended_resource_map([old, new])["example.com/gpu"] == "mig.gpu.example.com"
    tie = device_class("a-mig.gpu.example.com", "example.com/gpu", "2026-01-01T00:00:00Z")
    assert extended_resource_map([old, tie])["example.com/gpu"] == "a-mig.gpu.example.com"


def test_cluster_scoped_objects_carry_no_stage():
    """Issue 14 item 8: a DeviceClass belongs to no cohort; its findings are not labelled with a stage."""
    from tests.builders.claims import POLICY
    from tests.helpers import review
    from webhook.admission.answer import handle
    from webhook.admission.review import parse_request

    policy = dataclasses.replace(POLICY, rule_actions={ids.DEVICE_CLASS_TAKEOVER: Action.Warn})
    req = parse_request(review(device_class("mig.gpu.example.com", "example.com/gpu"), namespace="")["request"])
    decision = handle(req, "validate", policy, None, dt.datetime.now(dt.UTC))
    assert decision.stage == "" and decision.cohort == ""
    (warning,) = decision.warnings
    assert warning.startswith("device-class-takeover (cluster-scoped): DeviceClass mig.gpu.example.com takes over")


def test_report_says_which_class_took_the_resource_over():
    """In the cluster, `dra-webhook report` checks the live DeviceClasses the same way."""
    from tests.builders.claims import POLICY
    from webhook.fleet.report import check_resources

    own = device_class("gpu.example.com", "example.com/gpu", "2026-01-01T00:00:00Z")
    taker = device_class("mig.gpu.example.com", "example.com/gpu", "2026-06-01T00:00:00Z")
    (ok,) = check_resources(POLICY, [own])
    assert ok.ok
    (taken,) = check_resources(POLICY, [own, taker])
    assert not taken.ok and "served by DeviceClass mig.gpu.example.com (created later)" in taken.message


# --- issue 46 item 5: kubernetes#141103 (1.36, 1.37.0; fixed by #141110 in 1.38.0) ------------------------


def _policy_on(version: str):  # noqa: ANN202
    import yaml

    from tests.builders.claims import load
    from webhook.policy.compiled import compile_policy
    from webhook.policy.model import MigrationPolicy

    doc = load("policy.yaml")
    doc["spec"]["kubernetesVersion"] = version
    return compile_policy(MigrationPolicy.model_validate(doc), yaml.safe_dump(doc).encode())


def test_takeover_remediation_says_restart_kube_scheduler_where_the_mapping_bug_is() -> None:
    """Removing the name from a class that has it leaves it served by no class on 1.37.0 until kube-scheduler
    restarts: the advice says so there, and not on 1.38 (#141110)."""
    taker = device_class("mig.gpu.example.com", "example.com/gpu")
    (f,) = run(claims.device_class_takeover, taker, policy=_policy_on("1.37")).findings
    assert f.remediation.startswith("remove spec.extendedResourceName from mig.gpu.example.com")
    assert ("; if mig.gpu.example.com already has it in the cluster, then restart kube-scheduler after the change "
            "(or update DeviceClass gpu.example.com, a label will do: its update event maps example.com/gpu again): "
            "until then"
            " it serves example.com/gpu with no class") in f.remediation
    assert "policy kubernetesVersion 1.37.0 predates the fix for kubernetes/kubernetes#141103" in f.remediation
    (fixed,) = run(claims.device_class_takeover, taker, policy=_policy_on("1.38")).findings
    assert "restart" not in fixed.remediation


def _demote(view_classes: list[dict[str, Any]] | None, version: str = "1.37", new_ern: str | None = None):  # noqa: ANN202
    from webhook.offline.views import StaticView

    old = device_class("mig.gpu.example.com", "example.com/gpu")
    new = device_class("mig.gpu.example.com", new_ern)
    view = StaticView(device_classes=view_classes) if view_classes is not None else None
    return run(claims.device_class_mapping_removed, new, operation="UPDATE", old=old, policy=_policy_on(version),
               view=view)


SHARED = [device_class("gpu.example.com", "example.com/gpu", "2026-01-01T00:00:00Z"),
          device_class("mig.gpu.example.com", "example.com/gpu", "2026-06-01T00:00:00Z")]


def test_demoting_a_class_that_shares_its_name_is_reported_on_1_37() -> None:
    (f,) = _demote(SHARED).findings
    assert f.rule == ids.DEVICE_CLASS_MAPPING_REMOVED and f.paths == ("spec.extendedResourceName",)
    assert f.message == ("DeviceClass mig.gpu.example.com drops extendedResourceName example.com/gpu: DeviceClass "
                         "gpu.example.com also names it, kube-scheduler then serves example.com/gpu with no class "
                         "until it restarts, and Pods asking for it stay Pending")
    assert f.remediation.startswith("restart kube-scheduler after the change (or update DeviceClass gpu.example.com")
    assert _demote(SHARED, new_ern="example.com/mig-1g").findings  # a changed name drops the old one too


def test_demoting_is_fine_on_1_38_alone_or_unchanged() -> None:
    assert _demote(SHARED, "1.38").findings == []
    assert _demote([device_class("mig.gpu.example.com", "example.com/gpu")]).findings == []  # alone: as asked
    same = device_class("mig.gpu.example.com", "example.com/gpu")
    assert run(claims.device_class_mapping_removed, same, operation="UPDATE", old=same,
               policy=_policy_on("1.37")).findings == []


def test_without_the_cluster_view_the_finding_is_conditional() -> None:
    (f,) = _demote(None).findings
    assert "drops extendedResourceName example.com/gpu: if another DeviceClass also names it" in f.message
