"""PolicyReports from the report: both API groups, validated against the published CRD schemas; the command's
output flags, --watch and --apply's errors (the real --apply is proven in tests/e2e/test_monitor_policyreport.py)."""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.builders.gauges import NOW, scenario
from tests.fakeapi import FakeAPI, device_class, make_policy, namespace, pod, write_policy
from webhook.cli import main
from webhook.commands.report import watch
from webhook.fleet import policyreport
from webhook.fleet.report import build_report

DATA = Path(__file__).parents[1] / "data" / "policyreport"
CRDS = {
    "wgpolicyk8s.io/v1alpha2": DATA / "wgpolicyk8s.io_policyreports.yaml",
    "openreports.io/v1alpha1": DATA / "openreports.io_reports.yaml",
}
PATH = "dra-migration.io/path"
GPU = {"example.com/gpu": 1}


def crd_validator(api: str) -> jsonschema.Draft4Validator:
    """The CRD's openAPIV3Schema as a JSON Schema (the structural subset the API server checks)."""
    crd = next(d for d in yaml.safe_load_all(CRDS[api].read_text()) if d)
    group, version = api.split("/")
    assert crd["spec"]["group"] == group
    (ver,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = copy.deepcopy(ver["schema"]["openAPIV3Schema"])
    _close(schema)
    return jsonschema.Draft4Validator(schema)


def _close(schema: dict) -> None:
    """Structural schemas prune unknown fields; here an unknown field is an error, so the test catches typos."""
    if schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    for sub in (schema.get("properties") or {}).values():
        _close(sub)
    if isinstance(schema.get("items"), dict):
        _close(schema["items"])


def _reports(api: str) -> list[dict]:
    objs = scenario()
    report = build_report(make_policy(), NOW, objs.namespaces, objs.pods, objs.claims, objs.device_classes)
    return policyreport.build(report, api)


@pytest.mark.parametrize("api", sorted(CRDS))
def test_reports_match_the_published_crd_schema(api: str) -> None:
    validator = crd_validator(api)
    reports = _reports(api)
    assert [r["metadata"]["namespace"] for r in reports] == ["lab", "ml-a", "team-legacy"]
    for r in reports:
        errors = [e.message for e in validator.iter_errors(r)]
        assert not errors, errors
        assert r["apiVersion"] == api and r["metadata"]["name"] == "dra-migration-webhook"
    bad = copy.deepcopy(reports[1])
    bad["results"][0]["result"] = "broken"
    bad["summary"]["typo"] = 1
    assert len(list(validator.iter_errors(bad))) == 2  # the validator does catch what the API server would


def test_results_per_pod_and_rule() -> None:
    (ml,) = [r for r in _reports("wgpolicyk8s.io/v1alpha2") if r["metadata"]["namespace"] == "ml-a"]
    got = {(r["resources"][0]["name"], r["rule"]): r["result"] for r in ml["results"]}
    assert got == {
        ("on-dp", "path-drift"): "pass",
        ("on-ext-1", "path-drift"): "pass",
        ("on-ext-2", "path-drift"): "pass",
        ("drifted", "path-drift"): "fail",
        ("on-claim", "path-drift"): "pass",
        ("waiting", "path-drift"): "skip",
        ("nobody", "track-rollout"): "warn",
        ("on-claim-gpu-x7k2p", "inject-device-tolerations"): "pass",
    }
    assert ml["summary"] == {"pass": 5, "fail": 1, "warn": 1, "error": 0, "skip": 1}
    assert {r["source"] for r in ml["results"]} == {"dra-migration-webhook"}
    (fail,) = [r for r in ml["results"] if r["result"] == "fail"]
    assert fail["message"] == "intended path dra-extended-resource but the Pod took device-plugin"
    assert fail["properties"]["cohort"] == "pilot-teams" and fail["policy"] == "test-fleet"
    assert fail["timestamp"] == {"seconds": int(NOW.timestamp()), "nanos": 0}
    openreports = [r for r in _reports("openreports.io/v1alpha1") if r["metadata"]["namespace"] == "ml-a"][0]
    assert openreports["kind"] == "Report" and openreports["source"] == "dra-migration-webhook"


# -- the command -------------------------------------------------------------------------------------------------


@pytest.fixture()
def cluster_env(tmp_path: Path) -> Iterator[tuple[FakeAPI, str, str]]:
    with FakeAPI() as fake:
        fake.put(
            namespace("ml-a"),
            device_class("gpu.example.com", "example.com/gpu"),
            pod("ml-a", "drifted", requests=GPU, annotations={PATH: "dra-extended-resource"}),
        )
        yield fake, fake.write_kubeconfig(tmp_path), write_policy(tmp_path)


def _run(env, capsys, *args: str) -> tuple[int, str, str]:
    _, kubeconfig, policy = env
    code = main(["report", "--kubeconfig", kubeconfig, "--policy", policy, "--at", "2027-01-20", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_output_formats(cluster_env, capsys) -> None:
    code, text, _ = _run(cluster_env, capsys, "-o", "text")
    assert code == 0 and "DRIFT" in text
    assert _run(cluster_env, capsys, "-o", "table")[1] == text
    code, out, _ = _run(cluster_env, capsys, "-o", "yaml")
    as_yaml = yaml.safe_load(out)
    code_j, out_j, _ = _run(cluster_env, capsys, "-o", "json")
    as_json = json.loads(out_j)
    as_yaml.pop("generatedAt"), as_json.pop("generatedAt")
    assert code == code_j == 0 and as_yaml == as_json and as_json["drift"][0]["pod"] == "drifted"
    code, out, _ = _run(cluster_env, capsys, "-o", "policyreport", "--report-api", "openreports.io/v1alpha1")
    docs = list(yaml.safe_load_all(out))
    assert code == 0 and [(d["kind"], d["metadata"]["namespace"]) for d in docs] == [("Report", "ml-a")]
    assert not list(crd_validator("openreports.io/v1alpha1").iter_errors(docs[0]))
    assert docs[0]["summary"]["fail"] == 1


def test_apply_without_the_crd_says_what_to_install(cluster_env, capsys) -> None:
    code, _, err = _run(cluster_env, capsys, "--apply")
    assert code == 1
    assert "policyreports.wgpolicyk8s.io/v1alpha2 is not served by this cluster: install its CRD" in err
    assert "Traceback" not in err


def test_bad_interval_is_refused(cluster_env, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        _run(cluster_env, capsys, "--watch", "--interval", "0")
    assert exc.value.code == 2
    assert "must be more than 0 seconds" in capsys.readouterr().err


def test_watch_repeats_and_keeps_going_after_a_failed_read() -> None:
    codes = iter([0, 1, 0])
    sleeps: list[float] = []
    calls: list[int] = []

    def step() -> int:
        calls.append(1)
        return next(codes)

    assert watch(step, 7.5, sleep=sleeps.append, times=3) == 0
    assert len(calls) == 3 and sleeps == [7.5, 7.5]
    assert watch(lambda: 2, 1, sleep=sleeps.append) == 2  # bad input stops at once

    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    assert watch(lambda: 0, 1, sleep=interrupted) == 0


def test_watch_on_the_command_line(cluster_env, capsys, monkeypatch) -> None:
    """--watch prints a report per tick, each headed by its time; Ctrl-C ends it with exit 0."""
    ticks = []

    def fake_sleep(seconds: float) -> None:
        ticks.append(seconds)
        if len(ticks) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr("webhook.commands.report._pause", fake_sleep)
    code, out, _ = _run(cluster_env, capsys, "--watch", "--interval", "5")
    assert code == 0 and ticks == [5.0, 5.0]
    assert out.count("--- ") == 2 and out.count("DRIFT (intended path") == 2


def test_reports_never_name_more_than_the_report() -> None:
    report = build_report(make_policy(), dt.datetime(2027, 1, 20, tzinfo=dt.UTC), [namespace("ml-a")], [])
    (only,) = policyreport.build(report)
    assert only["results"] == [] and only["summary"]["pass"] == 0
