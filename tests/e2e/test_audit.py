"""`dra-webhook audit` against the cluster: objects the webhook never judged under today's stage are reported
with the rules it would deny them by, and `--at` a date past a cohort's move lists what that move will refuse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DEFAULT_POLICY, policy_variant
from tests.e2e.objects import deployment, pod
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers
LEGACY = "vendor.example.com/gpu"


def _audit(cluster: Any, ns: str, *args: str, policy: Path = DEFAULT_POLICY) -> dict[str, Any]:
    run = subprocess.run(
        [sys.executable, "-m", "webhook", "audit", "--kubeconfig", str(cluster.cp.admin_kubeconfig),
         "--policy", str(policy), "-n", ns, "-o", "json", *args],
        capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    doc: dict[str, Any] = json.loads(run.stdout)
    return doc


def _objects(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['name']}": o for o in doc["objects"]}


def _failed(obj: dict[str, Any]) -> set[str]:
    return {r["rule"] for r in obj["results"] if r["result"] == "fail"}


def test_objects_made_before_the_cohort_moved_are_reported_with_the_rules_that_deny_them(cluster, kube, namespace):
    ns = namespace("audit")  # no cohort yet: legacy, Audit only, so the webhook lets everything in
    kube.create(pod("old", ns, resource=LEGACY))
    kube.create(deployment("web", ns, pod("t", ns, resource=LEGACY), replicas=1))
    eventually(lambda: len(kube.list("v1", "Pod", ns)) == 2, "the Deployment's Pod", 60)
    # Labelled into the cohort that is migrated (Deny): what exists now would be refused on its next CREATE.
    kube.patch("v1", "Namespace", ns, {"metadata": {"labels": {"gpu-migration": "migrated"}}})

    def denied() -> str:
        message = kube.denial(pod("probe", ns, resource=LEGACY), dry_run=True).message
        assert "legacy-resource-name" in message, message
        return message
    eventually(denied, "the webhook seeing the namespace's new label", 30)

    doc = _audit(cluster, ns)
    objects = _objects(doc)
    assert set(objects) == {"Pod/old", "Deployment/web"}  # the ReplicaSet and its Pod are judged via the Deployment
    assert doc["skipped"] == {"Pod owned by a ReplicaSet (judged with it)": 1,
                              "ReplicaSet owned by a Deployment (judged with it)": 1}
    for obj in objects.values():
        assert (obj["cohort"], obj["stage"], obj["refused"]) == ("labelled-migrated", "migrated", True)
        assert _failed(obj) == {"legacy-resource-name"}
    [summary] = doc["summary"]
    assert (summary["cohort"], summary["objects"], summary["refused"]) == ("labelled-migrated", 2, 2)


def test_audit_at_a_date_past_the_move_lists_what_the_move_will_refuse(cluster, kube, namespace, tmp_path):
    ns = namespace("pilot")  # pilot-teams: pilot (Warn) today
    created = kube.create(pod("trainer", ns, resource=LEGACY))
    assert any("legacy-resource-name" in w for w in created.warnings)
    moving = tmp_path / "policy.yaml"
    pilot = 'namespaces: {names: ["pilot-*"]}\n    schedule:\n    - {stage: pilot, from: "2000-01-01"}'
    moving.write_text(policy_variant({pilot: pilot + '\n    - {stage: migrated, from: "2030-01-01"}'}))

    before = _objects(_audit(cluster, ns, "--at", "2029-12-31", policy=moving))["Pod/trainer"]
    assert (before["stage"], before["refused"], before["warned"]) == ("pilot", False, True)
    assert {r["rule"] for r in before["results"] if r["result"] == "warn"} >= {"legacy-resource-name"}

    after = _audit(cluster, ns, "--at", "2030-01-01", policy=moving)
    trainer = _objects(after)["Pod/trainer"]
    assert (trainer["stage"], trainer["refused"]) == ("migrated", True)
    assert "legacy-resource-name" in _failed(trainer)
    assert after["summary"][0]["refused"] == 1
