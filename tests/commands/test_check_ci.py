"""Issue 14 items 6-8: a `check` that CI can trust (in-process through the CLI entry point)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT
from webhook.cli import main

POLICY = ROOT / "tests" / "data" / "pods" / "policy.yaml"  # mig-* migrated, retires example.org/*


def pod(name: str, limits: dict[str, Any], namespace: str | None = "mig-a", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {**spec, "containers": [{"name": "c", "image": "registry.example.com/x:1",
                                             "resources": {"limits": limits}}]}}


def device_class(name: str, ern: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": "true"}}]}
    if ern:
        spec["extendedResourceName"] = ern
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def write(path: Path, *docs: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["check", "--policy", str(POLICY), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def results(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, Any]]]:
    code, out, err = check(capsys, "-o", "json", *args)
    return code, json.loads(out)["results"]


def test_device_classes_in_the_same_input_are_the_cluster(tmp_path, capsys):
    alone = write(tmp_path / "pod.yaml", pod("tpu-0", {"example.org/tpu": 1}))
    code, res = results(capsys, alone)
    assert code == 1 and res[0]["findings"][0]["rule"] == "unmapped-extended-resource"
    both = write(tmp_path / "both.yaml", pod("tpu-0", {"example.org/tpu": 1}), device_class("tpu.example.org",
                                                                                              "example.org/tpu"))
    code, res = results(capsys, both)
    assert code == 0, res
    assert [r["allowed"] for r in res] == [True, True]


def test_a_document_without_a_string_kind_is_an_input_error_and_the_others_are_still_checked(tmp_path, capsys):
    f = write(tmp_path / "mixed.yaml", pod("gpu-0", {"example.com/gpu": 1}, namespace="pilot-a"),
              {"apiVersion": "v1", "metadata": {"name": "x"}}, {"apiVersion": "v1", "kind": 7}, ["not", "a", "map"])
    code, out, err = check(capsys, f)
    assert code == 2
    assert f"{f}#2: document has no kind" in err and f"{f}#3: document has no kind" in err
    assert f"{f}#4: expected a Kubernetes object" in err and "Traceback" not in err
    assert "Pod pilot-a/gpu-0" in out and "ALLOWED" in out


def test_files_directories_recursion_and_stdin(tmp_path, capsys, monkeypatch):
    write(tmp_path / "app" / "a.yaml", pod("a", {"example.com/gpu": 1}, namespace="pilot-a"))
    write(tmp_path / "app" / "nested" / "b.yml", pod("b", {"example.com/gpu": 1}, namespace="pilot-a"))
    (tmp_path / "app" / "README.md").write_text("not a manifest")
    code, res = results(capsys, "-f", str(tmp_path / "app"))
    assert code == 0 and [r["object"] for r in res] == ["Pod pilot-a/a"]
    code, res = results(capsys, "-R", "-f", str(tmp_path / "app"))
    assert code == 0 and [r["object"] for r in res] == ["Pod pilot-a/a", "Pod pilot-a/b"]
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(yaml.safe_dump(pod("c", {}, namespace="pilot-a"))))
    code, res = results(capsys, "-f", "-")
    assert code == 0 and res[0]["object"] == "Pod pilot-a/c"
    code, _, err = check(capsys)
    assert code == 2 and "no input" in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["check", "--version"])
    assert exc.value.code == 0
    assert re.search(r"check \d+\.\d+", capsys.readouterr().out)


def test_namespace_flag_says_when_the_manifests_own_namespace_wins(tmp_path, capsys):
    own = write(tmp_path / "own.yaml", pod("own", {"vendor.example.com/gpu": 1}, namespace="mig-a"))
    code, out, err = check(capsys, "-n", "pilot-a", own)
    assert code == 1  # judged in mig-a (migrated), not pilot-a
    assert "checked in its own namespace mig-a, not -n pilot-a" in err
    none = write(tmp_path / "none.yaml", pod("none", {"vendor.example.com/gpu": 1}, namespace=None))
    code, out, err = check(capsys, "-n", "pilot-a", none)
    assert code == 0 and "own namespace" not in err and "Pod pilot-a/none" in out


def test_no_patch_is_printed_for_a_denied_object(tmp_path, capsys):
    f = write(tmp_path / "deny.yaml", pod("legacy", {"vendor.example.com/gpu": 1}))
    code, out, _ = check(capsys, f)
    assert code == 1 and "DENIED" in out and "patch:" not in out
    code, res = results(capsys, f)
    assert res[0]["patch"] == []


def test_each_finding_is_printed_once(tmp_path, capsys):
    gated = pod("g", {}, schedulingGroup={"podGroupName": "trainers"})  # gated-feature runs in both phases
    code, res = results(capsys, write(tmp_path / "g.yaml", gated))
    keys = [(f["rule"], f["message"]) for f in res[0]["findings"]]
    assert keys and len(keys) == len(set(keys))
    assert len(res[0]["warnings"]) == len(set(res[0]["warnings"]))


def test_unknown_kinds_are_not_examined_and_can_fail_the_run(tmp_path, capsys):
    meta = {"namespace": "mig-a"}
    kueue = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "metadata": {"name": "w", **meta},
             "spec": {"podSets": []}}
    volcano = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "v", **meta},
               "spec": {"tasks": [{"name": "t", "template": {"spec": {"containers": [
                   {"name": "c", "image": "i", "resources": {"limits": {"example.com/gpu": 1}}}]}}}]}}
    f = write(tmp_path / "kinds.yaml", kueue, volcano)
    code, out, _ = check(capsys, f)
    assert code == 0
    assert "Workload mig-a/w" in out and "NOT EXAMINED" in out and "kueue.x-k8s.io/Workload" in out
    code, res = results(capsys, f)
    assert [r["examined"] for r in res] == [False, True]
    assert check(capsys, "--fail-on-unexamined", f)[0] == 3


def test_cluster_scoped_objects_carry_no_stage_and_a_takeover_class_is_reported(tmp_path, capsys):
    f = write(tmp_path / "classes.yaml", device_class("gpu.example.com", "example.com/gpu"),
              device_class("mig.gpu.example.com", "example.com/gpu"))
    code, res = results(capsys, "-n", "mig-a", f)
    assert [r["stage"] for r in res] == ["", ""] and [r["cohort"] for r in res] == ["", ""]
    assert [f["rule"] for f in res[1]["findings"]] == ["device-class-takeover"]
    assert res[0]["findings"] == []
    code, out, _ = check(capsys, f)
    assert "[stage" not in out.split("DeviceClass gpu.example.com")[1]
