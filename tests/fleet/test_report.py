"""`report`: intended vs actual allocation path, drift, cohorts' schedules; pure and against the fake API."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakeapi import (
    FakeAPI,
    device_class,
    exact_request,
    make_policy,
    namespace,
    pod,
    resource_claim,
    validate,
    write_policy,
)
from webhook.cli import main
from webhook.fleet.report import actual_path, build_report, device_resource_names, render_text

PATH = "dra-migration.io/path"
INJECTED = "dra-migration.io/tolerations-injected"
NOW = dt.datetime(2027, 1, 20, 9, 30, tzinfo=dt.UTC)  # pilot-teams: pilot until 2027-02-01
GPU = {"example.com/gpu": 1}
EXT_STATUS = {
    "extendedResourceClaimStatus": {
        "resourceClaimName": "x-extended-resources-abcde",
        "requestMappings": [
            {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}
        ],
    }
}


def _pod(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - fixture Pods are schema-checked like the fake API's
    obj = pod(*args, **kwargs)
    obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
    validate(obj)
    return obj


NAMES = device_resource_names(make_policy())


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (_pod("ml-a", "dp", requests=GPU), "device-plugin"),
        (_pod("ml-a", "legacy", requests={"vendor.example.com/gpu": 2}), "device-plugin"),
        (_pod("ml-a", "pending", requests=GPU, node=None), "pending"),
        (_pod("ml-a", "ext", requests=GPU, status=EXT_STATUS), "dra-extended-resource"),
        (_pod("ml-a", "claim", claims=[("gpu", "gpu-template")]), "dra-claim"),
        (_pod("ml-a", "both", requests=GPU, claims=[("gpu", "gpu-template")], status=EXT_STATUS), "mixed"),
        (_pod("ml-a", "dp-and-claim", requests=GPU, claims=[("nic", "nic-template")]), "mixed"),
        (_pod("ml-a", "cpu", requests={"example.com/other": 1}), None),
        (_pod("ml-a", "implicit", requests={"deviceclass.resource.kubernetes.io/gpu.example.com": 1}), "device-plugin"),
    ],
    ids=lambda v: v["metadata"]["name"] if isinstance(v, dict) else str(v),
)
def test_actual_path(obj: dict, expected: str | None) -> None:
    assert actual_path(obj, NAMES) == expected


def test_device_class_names_count_as_devices() -> None:
    names = device_resource_names(make_policy(), [device_class("fpga.example.com", "example.com/fpga")])
    assert actual_path(_pod("ml-a", "f", requests={"example.com/fpga": 1}), names) == "device-plugin"


def test_drift_unannotated_and_injected() -> None:
    policy = make_policy()
    pods = [
        # Intended for DRA, but the device plugin served it (e.g. it landed on a device-plugin node).
        _pod("ml-a", "drifted", requests=GPU, annotations={PATH: "dra-extended-resource"}),
        _pod("ml-a", "good", requests=GPU, annotations={PATH: "dra-extended-resource"}, status=EXT_STATUS),
        _pod("ml-a", "waiting", requests=GPU, annotations={PATH: "dra-extended-resource"}, node=None),
        _pod("ml-a", "nobody", requests=GPU),
        _pod("team-legacy", "old", requests=GPU, annotations={PATH: "device-plugin"}),
        _pod("ml-a", "done", requests=GPU, annotations={PATH: "dra-extended-resource"},
             status={"phase": "Succeeded"}),
        _pod("ml-a", "web", requests={"cpu": 1}),
    ]
    owner = pods[1]
    claim = resource_claim(
        "ml-a", "train-gpu-x7k2p", requests=[exact_request("gpu", "gpu.example.com")], owner=owner,
        annotations={INJECTED: "1", "resource.kubernetes.io/pod-claim-name": "gpu"},
    )
    report = build_report(
        policy, NOW, [namespace("ml-a"), namespace("team-legacy"), namespace("kube-system")], pods, [claim]
    )
    assert [(p.namespace, p.name, p.intended, p.actual) for p in report.drift] == [
        ("ml-a", "drifted", "dra-extended-resource", "device-plugin")
    ]
    assert [(p.name, p.actual) for p in report.unannotated] == [("nobody", "device-plugin")]
    assert [(c.name, c.tolerations, c.owner) for c in report.injected] == [("train-gpu-x7k2p", "1", "Pod/good")]
    by_ns = {n.name: n for n in report.namespaces}
    assert set(by_ns) == {"ml-a", "team-legacy"}  # kube-system: no cohort, no device Pods
    ml = by_ns["ml-a"]
    assert (ml.cohort, ml.stage, ml.drift, ml.unannotated, ml.injected_claims) == ("pilot-teams", "pilot", 1, 1, 1)
    assert dict(ml.intended) == {"dra-extended-resource": 3}
    assert dict(ml.actual) == {"device-plugin": 2, "dra-extended-resource": 1, "pending": 1}
    legacy = by_ns["team-legacy"]
    assert (legacy.cohort, legacy.stage, legacy.drift) == (None, "legacy", 0)


def test_cohort_schedule_summary() -> None:
    report = build_report(make_policy(), NOW, [namespace("ml-a"), namespace("lab", {"division": "research"})], [])
    rows = {c.name: c for c in report.cohorts}
    assert rows["pilot-teams"].summary == "pilot-teams: pilot, migrated in 12 days (2027-02-01)"
    assert rows["pilot-teams"].namespaces == ["ml-a"]
    assert rows["research"].summary == "research: pilot, no change scheduled"
    assert rows["research"].namespaces == ["lab"]
    early = build_report(make_policy(), dt.datetime(2026, 11, 30, tzinfo=dt.UTC), [], [])
    assert {c.name: c.summary for c in early.cohorts}["pilot-teams"] == (
        "pilot-teams: legacy, pilot in 1 day (2026-12-01)"
    )


def test_resource_mapping_check() -> None:
    policy = make_policy()
    ok = build_report(policy, NOW, [], [], [], [device_class("gpu.example.com", "example.com/gpu")])
    assert [(r.ok, r.message) for r in ok.resources] == [
        (True, "example.com/gpu is served by DeviceClass gpu.example.com")
    ]
    missing = build_report(policy, NOW, [], [], [], [])
    assert not missing.resources[0].ok and "does not exist" in missing.resources[0].message
    wrong = build_report(policy, NOW, [], [], [], [device_class("gpu.example.com")])
    assert "extendedResourceName (unset)" in wrong.resources[0].message


def test_text_rendering_names_the_drift() -> None:
    pods = [_pod("ml-a", "drifted", requests=GPU, annotations={PATH: "dra-extended-resource"})]
    text = render_text(build_report(make_policy(), NOW, [namespace("ml-a")], pods))
    assert "pilot-teams: pilot, migrated in 12 days" in text
    assert "DRIFT" in text and "drifted" in text
    assert "No rule judged" not in text


def test_text_says_an_unannotated_pod_was_never_judged() -> None:
    """Issue 47 item 6: a Pod admitted while the webhook was down was listed as unannotated only; the report now says
    no rule judged it and gives the command that does (namespace labels included, so the stage is the live one)."""
    text = render_text(build_report(make_policy(), NOW, [namespace("ml-a")], [_pod("ml-a", "outage", requests=GPU)]))
    assert "outage" in text.split("NOT ANNOTATED")[1]
    assert "No rule judged these Pods when they were created: one may break a Deny rule of its stage." in text
    command = ("(kubectl get ns NAMESPACE -o yaml; echo ---; kubectl get pod -n NAMESPACE POD -o yaml)"
               " | dra-webhook check -")
    assert command in text


# -- the command, against the fake API server ----------------------------------------------------------------


@pytest.fixture()
def cluster_env(tmp_path: Path) -> Iterator[tuple[FakeAPI, str, str]]:
    with FakeAPI() as fake:
        fake.put(
            namespace("ml-a"),
            namespace("team-x", {"gpu-migration": "pilot"}),
            namespace("kube-system"),
            device_class("gpu.example.com", "example.com/gpu"),
            pod("ml-a", "drifted", requests=GPU, annotations={PATH: "dra-extended-resource"}),
            pod("ml-a", "good", requests=GPU, annotations={PATH: "dra-extended-resource"}, status=EXT_STATUS),
            pod("team-x", "unmarked", claims=[("gpu", "gpu-template")]),
        )
        yield fake, fake.write_kubeconfig(tmp_path), write_policy(tmp_path)


def test_report_command_json(cluster_env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    _, kubeconfig, policy = cluster_env
    code = main(["report", "--kubeconfig", kubeconfig, "--policy", policy, "-A", "-o", "json", "--at", "2027-01-20"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["drift"] == [
        {"namespace": "ml-a", "pod": "drifted", "intended": "dra-extended-resource", "actual": "device-plugin"}
    ]
    assert out["unannotated"] == [{"namespace": "team-x", "pod": "unmarked", "intended": None, "actual": "dra-claim"}]
    cohorts = {c["name"]: c for c in out["cohorts"]}
    assert cohorts["pilot-teams"]["next"] == {"stage": "migrated", "from": "2027-02-01", "inDays": 12}
    assert cohorts["pilot-teams"]["namespaces"] == ["ml-a", "team-x"]  # team-x by its label
    assert out["resources"][0]["ok"] is True
    assert out["policy"].startswith("test-fleet@")


def test_report_command_one_namespace(
    cluster_env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig, policy = cluster_env
    code = main(["report", "--kubeconfig", kubeconfig, "--policy", policy, "-n", "team-x", "--at", "2027-01-20"])
    out = capsys.readouterr().out
    assert code == 0
    assert "team-x" in out and "drifted" not in out
    assert fake.count("pods", "list") == 1 and all(
        q.get("watch") is None for r, v, q in fake.requests if r == "pods"
    )


def test_report_command_errors(cluster_env: tuple[FakeAPI, str, str], capsys: pytest.CaptureFixture[str]) -> None:
    fake, kubeconfig, policy = cluster_env
    assert main(["report", "--kubeconfig", kubeconfig, "--policy", policy, "-n", "nope"]) == 2
    assert "namespace nope not found" in capsys.readouterr().err
    fake.fail("pods")
    assert main(["report", "--kubeconfig", kubeconfig, "--policy", policy]) == 1
    err = capsys.readouterr().err
    assert "reading pods" in err and "HTTP 500" in err and "Traceback" not in err
    assert main(["report", "--kubeconfig", kubeconfig + ".missing", "--policy", policy]) == 2
