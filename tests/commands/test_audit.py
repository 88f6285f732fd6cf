"""`dra-webhook audit` against the fake API server: existing objects judged as their next CREATE, on fixed dates."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakeapi import FakeAPI, device_class, namespace, pod, write_policy
from webhook.cli import main

GPU = {"example.com/gpu": 1}
LEGACY = {"vendor.example.com/gpu": 1}


def deployment(ns: str, name: str, requests: dict[str, int]) -> dict[str, Any]:
    body = pod(ns, name, requests=requests, node=None)
    template = {"metadata": {"labels": {"app": name}}, "spec": body["spec"]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": template}}


def owned(obj: dict[str, Any], api_version: str, kind: str, name: str) -> dict[str, Any]:
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name,
                                           "uid": "6f1c2a4e-0000-4000-8000-000000000001", "controller": True}]
    return obj


@pytest.fixture()
def cluster_env(tmp_path: Path) -> Iterator[tuple[FakeAPI, str, str]]:
    with FakeAPI() as fake:
        fake.put(
            namespace("ml-a"),
            namespace("team-x", {"gpu-migration": "pilot"}),
            namespace("plain"),
            namespace("kube-system"),
            device_class("gpu.example.com", "example.com/gpu"),
            pod("ml-a", "legacy-pod", requests=LEGACY),
            pod("ml-a", "gpu-pod", requests=GPU),
            pod("ml-a", "done", requests=LEGACY, status={"phase": "Succeeded"}),
            owned(pod("ml-a", "web-abc-1", requests=LEGACY), "apps/v1", "ReplicaSet", "web-abc"),
            deployment("ml-a", "web", LEGACY),
            pod("team-x", "trainer", requests=LEGACY),
            pod("plain", "legacy-pod", requests=LEGACY),
            pod("kube-system", "legacy-pod", requests=LEGACY),
        )
        yield fake, fake.write_kubeconfig(tmp_path), write_policy(tmp_path)


def _audit(env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    _, kubeconfig, policy = env
    code = main(["audit", "--kubeconfig", kubeconfig, "--policy", policy, "-q", *args])
    return code, capsys.readouterr().out


def _json(env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out = _audit(env, capsys, "-o", "json", *args)
    assert code == 0
    doc: dict[str, Any] = json.loads(out)
    return doc


def _objects(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{o['namespace']}/{o['kind']}/{o['name']}": o for o in doc["objects"]}


def test_text_leads_with_the_summary_per_cohort_after_the_move(
    cluster_env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _audit(cluster_env, capsys, "--at", "2027-03-01")
    assert code == 0
    lines = out.splitlines()
    assert lines[2].split() == ["COHORT", "STAGE", "OBJECTS", "REFUSED", "WARNED", "STEERED"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:5]}
    # ml-a (by name) and team-x (by label): the bare Pods and the Deployment, not the owned Pod nor the done one.
    assert rows["pilot-teams"] == ["migrated", "4", "4", "0", "-"]
    assert "skipped: 1 Pod owned by a ReplicaSet (judged with it)" in out
    assert "skipped: 1 terminal Pod" in out
    assert "skipped: 1 namespace kube-system not sent to the webhook" in out
    legacy = out.index("  Pod legacy-pod: REFUSED")
    assert out[legacy:].splitlines()[1].split()[:2] == ["fail", "legacy-resource-name:"]
    assert "fix: request example.com/gpu instead of vendor.example.com/gpu" in out[legacy:]
    assert "Deployment web: REFUSED" in out
    assert "web-abc-1" not in out and "done" not in out.split("skipped")[-1]


def test_before_the_cohort_moves_nothing_is_refused(
    cluster_env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _json(cluster_env, capsys, "--at", "2026-11-01")
    summary = {c["cohort"]: c for c in doc["summary"]}
    assert summary["pilot-teams"]["stage"] == "legacy"
    assert summary["pilot-teams"]["refused"] == 0
    assert not any(o["refused"] for o in _objects(doc).values())


def test_json_has_every_rule_result_and_what_was_skipped(
    cluster_env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _json(cluster_env, capsys, "--at", "2027-03-01")
    assert doc["at"] == "2027-03-01T00:00:00+00:00"
    assert doc["skipped"] == {"Pod owned by a ReplicaSet (judged with it)": 1, "terminal Pod": 1,
                              "namespace kube-system not sent to the webhook": 1}
    objects = _objects(doc)
    assert set(objects) == {"ml-a/Pod/legacy-pod", "ml-a/Pod/gpu-pod", "ml-a/Deployment/web", "team-x/Pod/trainer",
                            "plain/Pod/legacy-pod"}
    trainer = objects["team-x/Pod/trainer"]
    assert (trainer["cohort"], trainer["stage"], trainer["refused"]) == ("pilot-teams", "migrated", True)
    by_rule = {r["rule"]: r for r in trainer["results"]}
    assert by_rule["legacy-resource-name"]["result"] == "fail"
    assert by_rule["legacy-resource-name"]["fix"].startswith("request example.com/gpu")
    assert by_rule["max-devices-per-pod"]["result"] == "pass"  # every rule that ran has a result
    plain = objects["plain/Pod/legacy-pod"]
    assert (plain["cohort"], plain["stage"], plain["refused"]) == ("", "legacy", False)


def test_one_namespace_and_an_unknown_one(
    cluster_env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake = cluster_env[0]
    doc = _json(cluster_env, capsys, "--at", "2027-03-01", "-n", "team-x")
    assert set(_objects(doc)) == {"team-x/Pod/trainer"}
    assert all(q.get("limit") for r, v, q in fake.requests if r == "pods" and v == "list")
    _, kubeconfig, policy = cluster_env
    code = main(["audit", "--kubeconfig", kubeconfig, "--policy", policy, "-q", "-n", "nowhere"])
    assert code == 2
    assert "namespace nowhere not found" in capsys.readouterr().err


def test_policyreport_per_namespace(cluster_env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _audit(cluster_env, capsys, "--at", "2027-03-01", "-o", "policyreport")
    assert code == 0
    reports = {r["metadata"]["namespace"]: r for r in yaml.safe_load_all(out)}
    assert set(reports) == {"ml-a", "team-x", "plain"}
    team = reports["team-x"]
    assert team["apiVersion"] == "wgpolicyk8s.io/v1alpha2" and team["kind"] == "PolicyReport"
    assert team["metadata"]["name"] == "dra-migration-webhook-audit"
    assert team["summary"]["fail"] == 1 and team["summary"]["pass"] > 0
    failed = [r for r in team["results"] if r["result"] == "fail"]
    assert [(r["rule"], r["resources"]) for r in failed] == [
        ("legacy-resource-name", [{"apiVersion": "v1", "kind": "Pod", "namespace": "team-x", "name": "trainer"}])]
    assert failed[0]["properties"]["stage"] == "migrated" and "fix: request" in failed[0]["message"]


def test_pages_are_streamed(
    cluster_env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhook.cluster import lists

    monkeypatch.setattr(lists, "PAGE_SIZE", 2)
    fake = cluster_env[0]
    doc = _json(cluster_env, capsys, "--at", "2027-03-01")
    assert len(_objects(doc)) == 5
    pod_lists = [q for r, v, q in fake.requests if r == "pods" and v == "list"]
    assert len(pod_lists) == 4 and all(q["limit"] == "2" for q in pod_lists)  # 7 Pods, 2 a page


def test_steered_pool_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fakeapi import POLICY_DOC

    doc = json.loads(json.dumps(POLICY_DOC))
    doc["spec"]["nodePools"] = {"dra": {"nodeSelector": {"pool": "dra"}},
                                "devicePlugin": {"nodeSelector": {"pool": "legacy"}}}
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(doc))
    with FakeAPI() as fake:
        fake.put(namespace("ml-a"), namespace("plain"), device_class("gpu.example.com", "example.com/gpu"),
                 pod("ml-a", "gpu-pod", requests=GPU), deployment("plain", "web", LEGACY))
        code = main(["audit", "--kubeconfig", fake.write_kubeconfig(tmp_path), "--policy", str(policy), "-q",
                     "--at", "2027-01-20"])
    out = capsys.readouterr().out
    assert code == 0
    rows = out.splitlines()[3:5]
    assert rows[0].startswith("(no cohort)") and rows[0].endswith("  1 to devicePlugin")
    assert rows[1].startswith("pilot-teams") and rows[1].endswith("  1 to dra")
    assert "Pod gpu-pod: WARNED, steered to dra" in out  # unsatisfiable-claim: no slices


def test_claims_are_looked_up_from_one_list_per_namespace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fakeapi import exact_request, resource_claim

    claimed = [pod("ml-a", f"c{i}") for i in range(3)]
    for i, p in enumerate(claimed):
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"claim-{i}"}]
    with FakeAPI() as fake:
        claims = [resource_claim("ml-a", f"claim-{i}", requests=[exact_request("gpu", "gpu.example.com")])
                  for i in range(3)]
        fake.put(namespace("ml-a"), device_class("gpu.example.com", "example.com/gpu"), *claimed, *claims)
        code = main(["audit", "--kubeconfig", fake.write_kubeconfig(tmp_path), "--policy", write_policy(tmp_path),
                     "-q", "-o", "json", "--at", "2027-01-20"])
        gets, lists = fake.count("resourceclaims", "get"), fake.count("resourceclaims", "list")
    assert code == 0
    assert len(_objects(json.loads(capsys.readouterr().out))) == 6  # the Pods and their claims
    assert gets == 0 and lists == 2  # the audit's own list of claims, and ml-a's for the Pods' lookups


def test_a_policy_named_kind_the_cluster_does_not_serve_is_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.fakeapi import POLICY_DOC

    doc = json.loads(json.dumps(POLICY_DOC))
    doc["spec"]["workloadKinds"] = [{"group": "example.com", "kind": "TrainingRun", "podTemplates": ["spec.template"]}]
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(doc))
    with FakeAPI() as fake:
        fake.put(namespace("ml-a"), pod("ml-a", "p", requests=LEGACY))
        code = main(["audit", "--kubeconfig", fake.write_kubeconfig(tmp_path), "--policy", str(policy), "-q",
                     "--at", "2027-03-01"])
    captured = capsys.readouterr()
    assert code == 0 and "Pod p: REFUSED" in captured.out
    note = "note: TrainingRun.example.com: not served by the API server (no such API group); not audited"
    assert note in captured.err
    assert "jobsets" not in captured.err  # a known CRD that is not installed is passed over without a note


def test_help_says_what_is_judged_and_what_is_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["audit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "as its next CREATE would be" in text and "--at DATE" in text
    assert "terminal Pods" in text and "a Pod of a ReplicaSet" in text and "kube-system" in text
