"""`check` judges only what the cluster would send (issue #24 item 13): the webhook configuration's
namespaceSelector (as deploy/base ships it, or --webhook-config) and, for kinds it has no rules for, a
`workloadKinds` hint only where the kind has a pod template."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT
from webhook.cli import main
from webhook.policy import delivery

GPU_POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dcgm-test"},
           "spec": {"containers": [{"name": "c", "image": "registry.example.com/dcgm:1",
                                    "resources": {"limits": {"example.com/gpu": 1}}}]}}


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], docs: list[dict[str, Any]], *args: str
           ) -> tuple[int, list[dict[str, Any]]]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code = main(["check", "-o", "json", "--at", "2026-12-15", *args, str(path)])
    return code, json.loads(capsys.readouterr().out)["results"]


def test_the_shipped_exclusions_are_what_deploy_base_installs() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "base" / "webhooks.yaml").read_text()))
    hooks = [h for d in docs if d and d.get("kind") in delivery.CONFIG_KINDS for h in d["webhooks"]]
    assert hooks
    for hook in hooks:
        assert hook["namespaceSelector"] == {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(delivery.SHIPPED_EXCLUDED)}]}
    from_file, shipped = delivery.from_configs(docs, "base"), delivery.shipped()
    for ns in ("kube-system", "dra-webhook", "ml-a", "default"):
        assert (from_file.why_not_sent(ns, None) is None) == (shipped.why_not_sent(ns, None) is None), ns


def test_a_pod_in_kube_system_is_not_sent_and_not_judged(tmp_path, capsys) -> None:
    pod = {**GPU_POD, "metadata": {**GPU_POD["metadata"], "namespace": "kube-system"}}
    code, [result] = _check(tmp_path, capsys, [pod], "--fail-on-unexamined")
    assert code == 0 and result["sent"] is False and result["examined"] is False
    assert result["patch"] == [] and result["findings"] == []
    assert "leaves out namespace 'kube-system'" in result["message"] and "never sends" in result["message"]
    code, [judged] = _check(tmp_path, capsys, [GPU_POD], "-n", "ml-a")
    assert judged["examined"] is True and judged["patch"] and "sent" not in judged


def test_text_output_says_not_sent(tmp_path, capsys) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(GPU_POD))
    assert main(["check", "-n", "dra-webhook", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Pod dra-webhook/dcgm-test" in out and ": NOT SENT" in out


def test_webhook_config_selectors_decide_with_the_input_namespace_labels(tmp_path, capsys) -> None:
    config = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
              "metadata": {"name": "dra-migration-webhook"},
              "webhooks": [{"name": "workloads.mutate.dra-migration.io",
                            "namespaceSelector": {"matchLabels": {"gpu-migration": "enabled"}}}]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    opted_in = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-a",
                                                                    "labels": {"gpu-migration": "enabled"}}}
    in_team = {**GPU_POD, "metadata": {"name": "a", "namespace": "ml-a"}}
    other = {**GPU_POD, "metadata": {"name": "b", "namespace": "ml-b"}}
    code, results = _check(tmp_path, capsys, [opted_in, in_team, other],
                           "--webhook-config", str(tmp_path / "config.yaml"))
    by_name = {r["object"]: r for r in results}
    assert by_name["Pod ml-a/a"]["examined"] is True
    assert by_name["Pod ml-b/b"]["sent"] is False and str(tmp_path / "config.yaml") in by_name["Pod ml-b/b"]["message"]


def test_a_webhook_config_file_without_webhooks_is_an_input_error(tmp_path, capsys) -> None:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                                          "metadata": {"name": "x"}}))
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(GPU_POD))
    code = main(["check", "--webhook-config", str(tmp_path / "config.yaml"), str(tmp_path / "pod.yaml")])
    assert code == 2
    assert "--webhook-config" in capsys.readouterr().err


@pytest.mark.parametrize(("obj", "hint"), [
    # A CRD with a pod template (an in-house training job): workloadKinds can name it.
    ({"apiVersion": "train.example.com/v1", "kind": "TrainJob", "metadata": {"name": "t"},
      "spec": {"workers": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}},
     "name it in the policy's spec.workloadKinds"),
    # Argo Workflows' templates hold containers, not pod templates (the shape of argoproj/argo-workflows
    # examples/hello-world.yaml).
    ({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"generateName": "hello-world-"},
      "spec": {"entrypoint": "main", "templates": [{"name": "main", "container": {
          "image": "busybox", "command": ["echo"], "args": ["hello world"]}}]}},
     "no pod template, so spec.workloadKinds cannot name it"),
])
def test_the_not_examined_hint_names_workload_kinds_only_for_pod_templates(tmp_path, capsys, obj, hint) -> None:
    code, [result] = _check(tmp_path, capsys, [obj], "-n", "ml-a")
    assert result["examined"] is False and hint in result["message"]
