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
import yaml

from tests.builders.chart import assert_same, template, values_file, with_lint_patches
from tests.builders.deploy import DEPLOY, K8S_VERSION, kustomize, needs_kustomize
from webhook.commands import load_policy
from webhook.compile import narrow

pytestmark = needs_kustomize  # skip without kustomize v5
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


SHIPPED_POLICY = DEPLOY / "base" / "policy" / "default.yaml"
USES = next(c["expression"] for d in yaml.safe_load_all((DEPLOY / "base" / "webhooks.yaml").read_text()) if d
            for c in d["webhooks"][0]["matchConditions"] if c["name"] == "uses-devices")
"""The workloads webhooks' uses-devices (the same on both), which not-compiled keeps for the other kinds."""
SOURCE_HOOKS = {d["kind"]: d["webhooks"][0] for d in yaml.safe_load_all((DEPLOY / "base" / "webhooks.yaml").read_text())
                if d}
"""deploy/base/webhooks.yaml's workloads webhook per configuration kind, as the file has it."""
"""The policy deploy/base installs (its configMapGenerator): deploy/compiled narrows for its names."""
INLINE = """\
apiVersion: dra-migration.io/v1alpha1
kind: MigrationPolicy
metadata: {name: chart-inline}
spec:
  kubernetesVersion: "1.37"
  resources:
  - {name: amd.com/gpu, deviceClassName: gpu.amd.com, legacyNames: [amd.com/gpu-legacy, amd.com/mi300x]}
  - {name: aws.amazon.com/neuroncore, deviceClassName: neuron.aws.com}
  defaultStage: pilot
"""


def _narrowing(objs: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The not-compiled conditions of ``objs``' webhooks."""
    return [c for o in objs for h in o.get("webhooks", []) for c in h["matchConditions"]
            if c["name"] == narrow.CONDITION_NAME]


REGENERATE = """\
import yaml
from webhook.commands import load_policy
from webhook.compile.narrow import patch_yaml
policy = load_policy("deploy/base/policy/default.yaml")
for doc in yaml.safe_load_all(open("deploy/base/webhooks.yaml")):
    kind = "mutating" if doc["kind"].startswith("Mutating") else "validating"
    open(f"deploy/compiled/narrowing-{kind}.yaml", "w").write(patch_yaml(doc, policy))
"""


def test_the_patch_files_are_what_narrow_generates():
    shipped = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "base" / "webhooks.yaml").read_text()) if d}
    for kind, name in (("MutatingWebhookConfiguration", "mutating"), ("ValidatingWebhookConfiguration", "validating")):
        assert (DEPLOY / "compiled" / f"narrowing-{name}.yaml").read_text() == \
            narrow.patch_yaml(shipped[kind], load_policy(SHIPPED_POLICY)), \
            f"regenerate: .venv/bin/python - <<'EOF'\n{REGENERATE}EOF"


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
        for ours_hook, their_hook in zip(mine.get("webhooks", []), obj.get("webhooks", []), strict=True):
            conds = ours_hook["matchConditions"]
            if ours_hook["name"] in narrow.NARROWED_HOOKS:  # uses-devices replaced by not-compiled, in place
                at = [c["name"] for c in their_hook["matchConditions"]].index(narrow.USES_DEVICES)
                # what narrow_hook makes of the source file's hook (kustomize re-folds the `>-` scalars it renders)
                expected = narrow.narrow_hook(SOURCE_HOOKS[key[0]], load_policy(SHIPPED_POLICY))
                assert conds[at] == expected["matchConditions"][at], ours_hook["name"]
                conds[at] = their_hook["matchConditions"][at]
            assert narrow.CONDITION_NAME not in [c["name"] for c in conds], ours_hook["name"]
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


def test_chart_mode_compiled_renders_the_compiled_overlay(helm, helm_home, tmp_path, compiled):
    overlay = [o for o in compiled if o["kind"] != "Namespace"]
    assert_same(template(helm, helm_home, "-f", values_file(tmp_path, {"mode": "compiled"})),
                with_lint_patches(overlay, SHIPPED_POLICY))  # the shipped policy's workloadKinds (issue 48 item 5)


def test_chart_narrows_for_its_inline_policy_and_not_for_an_existing_configmap(helm, helm_home, tmp_path):
    """The chart's own copy of ``narrow.owned`` (helper dra.ownedNames) gives what ``compile --narrow-webhooks``
    gives for the same policy; a ConfigMap the chart cannot read owns no names (every extended resource is sent)."""
    inline = template(helm, helm_home, "-f", values_file(tmp_path, {"mode": "compiled", "policy": {"inline": INLINE}}))
    policy = tmp_path / "inline.yaml"
    policy.write_text(INLINE)
    assert _narrowing(inline) == [narrow.condition(load_policy(policy), USES)] * 2
    assert "'amd.com/mi300x'" in _narrowing(inline)[0]["expression"]
    # The chart keeps the shipped policy's rule actions: it switches none off, so an inline policy is never sent less
    assert narrow.switched_off(load_policy(SHIPPED_POLICY)) == frozenset()
    existing = template(helm, helm_home, "-f", values_file(
        tmp_path, {"mode": "compiled", "policy": {"existingConfigMap": "my-policy"}}))
    assert _narrowing(existing) == [narrow.condition(None, USES)] * 2


def test_chart_default_mode_is_webhook(helm, helm_home):
    rendered = template(helm, helm_home)
    assert not [o for o in rendered if o["metadata"]["name"] == "dra-migration-webhook-compiled"]


def test_chart_rejects_an_unknown_mode(helm, helm_home, tmp_path):
    from tests import helm_cli

    proc = helm_cli.run(helm, helm_home, "template", "dra-webhook", str(helm_cli.CHART), "-f",
                        values_file(tmp_path, {"mode": "both"}), check=False)
    assert proc.returncode != 0 and "mode" in proc.stderr


def test_readme_names_both_installs():
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "deploy/overlays/compiled" in text and "mode: compiled" in text
