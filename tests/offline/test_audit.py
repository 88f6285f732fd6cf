"""``webhook.offline.audit``: the pure judgement over iterables of objects, with a static view and fixed dates."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from tests.fakeapi import POLICY_DOC, pod
from webhook.offline.audit import Scope, as_created, audit, judged_owner
from webhook.offline.views import StaticView
from webhook.policy import delivery
from webhook.policy.compiled import compile_policy
from webhook.policy.model import MigrationPolicy

LEGACY = {"vendor.example.com/gpu": 1}
MOVED = dt.datetime(2027, 3, 1, tzinfo=dt.UTC)  # pilot-teams is migrated
BEFORE = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)  # pilot-teams is legacy


def _policy(**spec: Any) -> Any:
    doc = json.loads(json.dumps(POLICY_DOC))
    doc["spec"].update(spec)
    return compile_policy(MigrationPolicy.model_validate(doc), b"audit-test")


def _scope(now: dt.datetime, policy: Any = None) -> Scope:
    labels = {"ml-a": {}, "kube-system": {}}
    return Scope(policy or _policy(), StaticView(namespaces=labels), now, labels, delivery.shipped())


def _owner(api_version: str, kind: str) -> list[dict[str, Any]]:
    return [{"apiVersion": api_version, "kind": kind, "name": "o", "uid": "u", "controller": True}]


def test_the_object_is_judged_as_its_next_create() -> None:
    live = pod("ml-a", "p", requests=LEGACY, uid="u-1", status={"phase": "Running"})
    live["metadata"].update(resourceVersion="7", managedFields=[{"manager": "kubectl"}], labels={"a": "b"})
    created = as_created(live, "Pod")
    assert "status" not in created and "nodeName" not in created["spec"]
    assert created["metadata"] == {"name": "p", "namespace": "ml-a", "labels": {"a": "b"}}
    assert live["spec"]["nodeName"] == "node-a" and live["status"]  # the listed object is not changed


def test_controller_owned_objects_are_judged_with_their_owner_only_when_the_owner_is_judged() -> None:
    policy = _policy(workloadKinds=[{"group": "example.com", "kind": "TrainingRun", "podTemplates": ["spec.template"]}])
    assert judged_owner({"ownerReferences": _owner("apps/v1", "ReplicaSet")}, policy) == "ReplicaSet"
    assert judged_owner({"ownerReferences": _owner("batch/v1", "CronJob")}, policy) == "CronJob"
    assert judged_owner({"ownerReferences": _owner("example.com/v1", "TrainingRun")}, policy) == "TrainingRun"
    assert judged_owner({"ownerReferences": _owner("v1", "Node")}, policy) == ""  # a static Pod's mirror
    assert judged_owner({"ownerReferences": _owner("example.org/v1", "Notebook")}, policy) == ""
    not_controller = [{**_owner("apps/v1", "ReplicaSet")[0], "controller": False}]
    assert judged_owner({"ownerReferences": not_controller}, policy) == ""


def test_audit_over_iterables_counts_what_it_skips() -> None:
    owned = pod("ml-a", "rs-pod", requests=LEGACY)
    owned["metadata"]["ownerReferences"] = _owner("apps/v1", "ReplicaSet")
    pods = [pod("ml-a", "bare", requests=LEGACY), owned, pod("ml-a", "done", status={"phase": "Failed"}),
            pod("kube-system", "sys", requests=LEGACY)]
    result = audit([("", "v1", "Pod", iter(pods))], _scope(MOVED))
    assert [e.name for e in result.namespaces["ml-a"]] == ["bare"]
    assert dict(result.skipped) == {"Pod owned by a ReplicaSet (judged with it)": 1, "terminal Pod": 1,
                                    "namespace kube-system not sent to the webhook": 1}
    entry = result.namespaces["ml-a"][0]
    assert not entry.allowed
    assert [(r.rule, r.result) for r in entry.results if r.result != "pass"] == [("legacy-resource-name", "fail")]
    assert result.cohorts["pilot-teams"].to_json() == {"cohort": "pilot-teams", "stage": "migrated", "objects": 1,
                                                       "refused": 1, "warned": 0, "steered": {}}


def test_an_exception_is_a_skip_result_and_the_object_is_allowed() -> None:
    policy = _policy(exceptions=[{"rules": ["legacy-resource-name"], "namespaces": ["ml-a"], "reason": "ticket 7",
                                  "expires": "2028-01-01"}])
    result = audit([("", "v1", "Pod", [pod("ml-a", "bare", requests=LEGACY)])], _scope(MOVED, policy))
    entry = result.namespaces["ml-a"][0]
    assert entry.allowed
    skipped = [r for r in entry.results if r.rule == "legacy-resource-name"]
    assert [(r.result, r.exception) for r in skipped] == [("skip", "ticket 7")]


def test_a_rule_off_is_a_skip_and_a_rule_without_finding_a_pass() -> None:
    policy = _policy(enforcement={"rules": {"max-devices-per-pod": "Off"}})
    result = audit([("", "v1", "Pod", [pod("ml-a", "bare", requests=LEGACY)])], _scope(BEFORE, policy))
    entry = result.namespaces["ml-a"][0]
    assert entry.allowed and entry.stage == "legacy"
    by_rule = {r.rule: r for r in entry.results}
    assert (by_rule["max-devices-per-pod"].result, by_rule["max-devices-per-pod"].message) == (
        "skip", "Off in stage legacy")
    assert by_rule["mixed-allocation"].result == "pass"
