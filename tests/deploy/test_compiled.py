"""The compiled-mode install: deploy/compiled (a kustomize component), deploy/overlays/compiled, and the chart's
``mode: compiled``; rendered by the real kustomize and helm, against the default install.

The compiled mode differs from the default in exactly two places: the reconciler (deploy/compiled/reconciler.yaml:
``dra-webhook reconcile`` in a Deployment of its own under a ServiceAccount of its own, no Service, no ingress; and
its RBAC, deploy/compiled/rbac.yaml, the only writer of the four admissionregistration policy kinds, by name), and
the ``not-compiled`` matchCondition on the two workloads webhooks (webhook/compile/narrow.py). The webhook's own
Deployment and ServiceAccount are the default's. Whether the API server accepts and runs them, and refuses the
webhook's token an admission policy: tests/e2e/test_compiled_reconcile.py.
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


RECONCILER = {("ServiceAccount", "dra-webhook-reconciler"), ("Lease", "dra-webhook-compiled"),
              ("Deployment", "dra-webhook-reconciler"), ("NetworkPolicy", "dra-webhook-reconciler"),
              ("ClusterRole", "dra-migration-webhook-reconciler"),
              ("ClusterRoleBinding", "dra-migration-webhook-reconciler"),
              ("Role", "dra-migration-webhook-reconciler-lease"),
              ("RoleBinding", "dra-migration-webhook-reconciler-lease")}
WRITES = {"create", "update", "patch", "delete", "deletecollection", "*"}


def test_the_compiled_overlay_is_the_default_plus_the_reconciler_and_the_narrowing(default, compiled):
    ours, theirs = by_key(compiled), by_key(default)
    assert set(ours) - set(theirs) == RECONCILER
    assert set(theirs) <= set(ours)
    for key, obj in theirs.items():
        mine = copy.deepcopy(ours[key])
        for ours_hook, their_hook in zip(mine.get("webhooks", []), obj.get("webhooks", []), strict=True):
            conds = ours_hook["matchConditions"]
            if ours_hook["name"] in narrow.NARROWED_HOOKS:  # uses-devices replaced by not-compiled, in place
                at = [c["name"] for c in their_hook["matchConditions"]].index(narrow.USES_DEVICES)
                # what narrow_hook makes of the source file's hook (kustomize re-folds the `>-` scalars it renders)
                expected = narrow.narrow_hook(SOURCE_HOOKS[key[0]], load_policy(SHIPPED_POLICY))
                assert conds[at] == expected["matchConditions"][at], ours_hook["name"]
                conds[at] = their_hook["matchConditions"][at]
            assert narrow.CONDITION_NAME not in [c["name"] for c in conds], ours_hook["name"]
        assert mine == obj, key  # the webhook's Deployment (no reconciler flag) and its RBAC unchanged


def _rules_of(objs: list[dict[str, Any]], account: str) -> list[dict[str, Any]]:
    """Every rule some (Cluster)RoleBinding grants the ServiceAccount ``account`` of namespace dra-webhook."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objs if o["kind"] in ("ClusterRole", "Role")}
    out = []
    for b in objs:
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding") and {"kind": "ServiceAccount", "name": account,
                                                                   "namespace": "dra-webhook"} in b["subjects"]:
            out += roles[(b["roleRef"]["kind"], b["roleRef"]["name"])]["rules"]
    return out


@pytest.mark.parametrize("install", ["default", "compiled"])
def test_the_webhooks_service_account_has_no_write_verb_on_admissionregistration(install, request):
    """Issue #47 item 4: the network-facing Pods' token can neither write an admission policy nor its own webhook
    configurations, in either mode; its one write is its own Lease (get/update by name; create has no name)."""
    rules = _rules_of(request.getfixturevalue(install), "dra-webhook")
    assert rules
    for rule in rules:
        if "admissionregistration.k8s.io" in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []):
            assert not WRITES & set(rule["verbs"]), rule
            assert not POLICY_KINDS & set(rule["resources"]), rule
    writes = [r for r in rules if WRITES & set(r["verbs"])]
    assert writes == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["dra-webhook-gauges"],
         "verbs": ["get", "update"]}]  # no create: both Leases ship with the install (deploy/base/lease.yaml)
    # it reads the reconciler's Lease (the compiled-mode gauges), never renews or takes it over
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["dra-webhook-compiled"],
            "verbs": ["get"]} in rules


def test_the_reconcilers_writes_carry_the_names_compile_makes(compiled):
    """Every verb of the reconciler's ServiceAccount on admission policies but list names the objects (create too:
    the API server authorizes an apply that creates as create of its name); the names are all the shipped policy's
    objects can take (webhook/compile object_names) and the ClusterRole is `reconcile --print-rbac`'s."""
    from webhook.commands.reconcile import rbac_yaml
    from webhook.compile import object_names

    rules = _rules_of(compiled, "dra-webhook-reconciler")
    names = object_names(load_policy(SHIPPED_POLICY).name)
    policy_rules = [r for r in rules if POLICY_KINDS & set(r.get("resources", []))]
    for rule in policy_rules:
        if rule["verbs"] == ["list"]:
            assert "resourceNames" not in rule and set(rule["resources"]) == POLICY_KINDS
            continue
        assert set(rule["verbs"]) == {"get", "create", "patch", "delete"}, rule
        kind = "Validating" if rule["resources"][0].startswith("validating") else "Mutating"
        assert rule["resourceNames"] == names[f"{kind}AdmissionPolicy"], rule
    assert len(policy_rules) == 3
    other = [r for r in rules if r not in policy_rules]
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["dra-webhook-compiled"],
            "verbs": ["get", "update"]} in other
    for rule in other:
        assert not WRITES & set(rule["verbs"]) or rule.get("resourceNames") == ["dra-webhook-compiled"], rule
    generated = yaml.safe_load(rbac_yaml(load_policy(SHIPPED_POLICY).name))
    role = by_key(compiled)[("ClusterRole", "dra-migration-webhook-reconciler")]
    assert role["rules"] == generated["rules"], "regenerate deploy/compiled/rbac.yaml's ClusterRole: " \
        "dra-webhook reconcile --policy deploy/base/policy/default.yaml --print-rbac"


def test_the_reconciler_serves_nothing_and_runs_as_the_webhook_does(compiled):
    objs = by_key(compiled)
    rec = objs[("Deployment", "dra-webhook-reconciler")]
    web = objs[("Deployment", "dra-webhook")]
    pod, web_pod = rec["spec"]["template"]["spec"], web["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["serviceAccountName"] == "dra-webhook-reconciler" and container["command"] == ["dra-webhook",
                                                                                             "reconcile"]
    assert "ports" not in container and not {"livenessProbe", "readinessProbe", "startupProbe"} & set(container)
    assert pod["securityContext"] == web_pod["securityContext"]
    assert container["securityContext"] == web_pod["containers"][0]["securityContext"]
    assert [v for v in pod["volumes"] if v["name"] == "policy"] == \
        [v for v in web_pod["volumes"] if v["name"] == "policy"]  # the same (hashed) policy ConfigMap
    labels = rec["spec"]["template"]["metadata"]["labels"]
    for kind in ("Service", "PodDisruptionBudget", "NetworkPolicy"):  # the webhook's never select the reconciler
        obj = objs[(kind, "dra-webhook")]
        selector = obj["spec"].get("selector") or obj["spec"]["podSelector"]
        selector = selector.get("matchLabels", selector)
        assert not selector.items() <= labels.items(), kind
    assert not [o for o in compiled if o["kind"] == "Service" and o["spec"]["selector"].items() <= labels.items()]
    policy = objs[("NetworkPolicy", "dra-webhook-reconciler")]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"] and not policy.get("ingress")


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
        tmp_path, {"mode": "compiled", "policy": {"existingConfigMap": "my-policy", "name": "gpu-fleet"}}))
    assert _narrowing(existing) == [narrow.condition(None, USES)] * 2


def test_chart_default_mode_is_webhook(helm, helm_home):
    rendered = template(helm, helm_home)
    assert not [o for o in rendered if "reconciler" in o["metadata"]["name"]]
    assert [o["metadata"]["name"] for o in rendered if o["kind"] == "Lease"] == ["dra-webhook-gauges"]


def test_chart_rejects_an_unknown_mode(helm, helm_home, tmp_path):
    from tests import helm_cli

    proc = helm_cli.run(helm, helm_home, "template", "dra-webhook", str(helm_cli.CHART), "-f",
                        values_file(tmp_path, {"mode": "both"}), check=False)
    assert proc.returncode != 0 and "mode" in proc.stderr


def test_readme_names_both_installs():
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "deploy/overlays/compiled" in text and "mode: compiled" in text


def test_chart_names_the_reconcilers_objects_by_its_policy(helm, helm_home, tmp_path):
    """The chart's reconciler ClusterRole lists the names of its inline policy's objects; with an existing ConfigMap
    it takes policy.name, and refuses to guess without it."""
    from tests import helm_cli
    from webhook.compile import object_names

    def names(rendered: list[dict[str, Any]]) -> set[str]:
        role = by_key(rendered)[("ClusterRole", "dra-migration-webhook-reconciler")]
        return {n for r in role["rules"] for n in r.get("resourceNames", []) if n.endswith(".dra-migration.io")}

    every = {n for v in object_names("chart-inline").values() for n in v}
    inline = template(helm, helm_home, "-f", values_file(tmp_path, {"mode": "compiled", "policy": {"inline": INLINE}}))
    assert names(inline) == every
    named = template(helm, helm_home, "-f", values_file(
        tmp_path, {"mode": "compiled", "policy": {"existingConfigMap": "my-policy", "name": "chart-inline"}}))
    assert names(named) == every
    proc = helm_cli.run(helm, helm_home, "template", "dra-webhook", str(helm_cli.CHART), "-f", values_file(
        tmp_path, {"mode": "compiled", "policy": {"existingConfigMap": "my-policy"}}), check=False)
    assert proc.returncode != 0 and "set policy.name" in proc.stderr
