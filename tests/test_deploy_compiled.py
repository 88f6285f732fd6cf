"""The compiled-mode install: deploy/compiled (a kustomize component), deploy/overlays/compiled, and the chart's
``mode: compiled``; rendered by the real kustomize and helm, against the default install.

The compiled mode differs from the default in exactly three places: the server's ``--compiled-policies``, a
ClusterRole writing the four admissionregistration policy kinds, and the ``not-compiled`` matchCondition on the
two workloads webhooks (webhook/compile/narrow.py). Whether the API server accepts and runs them:
tests/e2e/test_compiled_reconcile.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.test_chart import assert_same, helm, helm_home, template, values_file  # noqa: F401  (fixtures)
from tests.test_deploy import DEPLOY, K8S_VERSION, kustomize, pytestmark  # noqa: F401  (skip without kustomize v5)
from webhook.compile import narrow

POLICY_KINDS = {"validatingadmissionpolicies", "validatingadmissionpolicybindings", "mutatingadmissionpolicies",
                "mutatingadmissionpolicybindings"}


@pytest.fixture(scope="module")
def default() -> list[dict[str, Any]]:
    return kustomize(DEPLOY / "overlays" / "cert-manager")


@pytest.fixture(scope="module")
def compiled() -> list[dict[str, Any]]:
    return kustomize(DEPLOY / "overlays" / "compiled")


def by_key(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def test_the_patch_file_is_what_narrow_generates():
    assert (DEPLOY / "compiled" / "narrowing.yaml").read_text() == narrow.patch_yaml(), (
        "regenerate: .venv/bin/python -c \"from webhook.compile.narrow import patch_yaml; "
        "print(patch_yaml(), end='')\" > deploy/compiled/narrowing.yaml")


def test_compiled_objects_validate_strictly(compiled):
    for obj in compiled:
        if not obj["apiVersion"].startswith("cert-manager.io/"):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_compiled_overlay_is_the_default_plus_three_changes(default, compiled):
    ours, theirs = by_key(compiled), by_key(default)
    role = ("ClusterRole", "dra-migration-webhook-compiled")
    assert set(ours) - set(theirs) == {role, ("ClusterRoleBinding", "dra-migration-webhook-compiled")}
    assert set(theirs) <= set(ours)
    for key, obj in theirs.items():
        mine = copy.deepcopy(ours[key])
        if key[0] == "Deployment":
            args = mine["spec"]["template"]["spec"]["containers"][0]["args"]
            assert args[-1] == "--compiled-policies" and "--compiled-policies" not in \
                obj["spec"]["template"]["spec"]["containers"][0]["args"]
            args.pop()
        for hook in mine.get("webhooks", []):
            conds = hook["matchConditions"]
            if hook["name"] in narrow.NARROWED_HOOKS:
                assert conds[-1] == narrow.condition(), hook["name"]
                conds.pop()
            assert narrow.CONDITION_NAME not in [c["name"] for c in conds], hook["name"]
        assert mine == obj, key
    rules = ours[role]["rules"]
    assert len(rules) == 2 and set(rules[0]["resources"]) == POLICY_KINDS
    assert rules[0]["apiGroups"] == rules[1]["apiGroups"] == ["admissionregistration.k8s.io"]
    assert set(rules[0]["verbs"]) == {"get", "list", "create", "patch", "delete"}
    # the webhook configurations: read, by name, never written (the webhook may not change its own)
    assert rules[1] == {"apiGroups": ["admissionregistration.k8s.io"], "verbs": ["get"],
                        "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
                        "resourceNames": ["dra-migration-webhook"]}
    binding = ours[("ClusterRoleBinding", "dra-migration-webhook-compiled")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "dra-webhook", "namespace": "dra-webhook"}]


def test_the_default_install_cannot_write_admission_policies(default):
    for obj in default:
        for rule in obj.get("rules", []) if obj["kind"] in ("ClusterRole", "Role") else []:
            assert not (POLICY_KINDS & set(rule.get("resources", []))), obj["metadata"]["name"]


def test_chart_mode_compiled_renders_the_compiled_overlay(helm, helm_home, tmp_path, compiled):  # noqa: F811
    overlay = [o for o in compiled if o["kind"] != "Namespace"]
    assert_same(template(helm, helm_home, "-f", values_file(tmp_path, {"mode": "compiled"})), overlay)


def test_chart_default_mode_is_webhook(helm, helm_home):  # noqa: F811
    rendered = template(helm, helm_home)
    assert not [o for o in rendered if o["metadata"]["name"] == "dra-migration-webhook-compiled"]


def test_chart_rejects_an_unknown_mode(helm, helm_home, tmp_path):  # noqa: F811
    from tests import helm_cli

    proc = helm_cli.run(helm, helm_home, "template", "dra-webhook", str(helm_cli.CHART), "-f",
                        values_file(tmp_path, {"mode": "both"}), check=False)
    assert proc.returncode != 0 and "mode" in proc.stderr


def test_readme_names_both_installs():
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "deploy/overlays/compiled" in text and "mode: compiled" in text
