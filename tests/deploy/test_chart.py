"""deploy/chart: the Helm chart rendered by the real `helm` (v4.2.3, ../shared/helm).

One source of truth: the chart reads its objects from deploy/ (files/ links to deploy/base,
deploy/cert-manager, deploy/monitoring), and these tests prove that `helm template` with the default values
renders the same objects as `kubectl kustomize deploy/overlays/cert-manager` (the production overlay), with
monitoring on the same objects as the monitoring component, and that every values file renders objects that
pass the same strict 1.37 schema validation the overlays get (tests/deploy/test_deploy.py).
"""

from __future__ import annotations

import base64
import re
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests import helm_cli
from tests.builders.chart import NAMESPACE, RELEASE, assert_same, template, values_file, with_lint_patches
from tests.builders.deploy import DEPLOY, K8S_VERSION, ROOT, kustomize, needs_kustomize

pytestmark = needs_kustomize  # skip without kustomize v5


def test_missing_helm_skips_with_one_line_and_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRA_HELM", "/nonexistent/helm")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no helm: put the project's shared/helm folder"):
        helm_cli.require()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no helm"):
        helm_cli.require()


def test_lint_strict(helm: Path, helm_home: Path) -> None:
    proc = helm_cli.run(helm, helm_home, "lint", "--strict", str(helm_cli.CHART))
    assert "0 chart(s) failed" in proc.stdout


def test_defaults_render_the_production_overlay(helm: Path, helm_home: Path) -> None:
    """Everything but the Namespace, which Helm needs before it installs (README "Install"), with the webhook rules
    of the shipped policy's workloadKinds, which the kustomize user adds with lint's patches (issue 48 item 5)."""
    overlay = [o for o in kustomize(DEPLOY / "overlays" / "cert-manager") if o["kind"] != "Namespace"]
    assert_same(template(helm, helm_home), with_lint_patches(overlay, ROOT / "policies" / "default.yaml"))


CRD_POLICY = (ROOT / "policies" / "default.yaml").read_text().replace(
    "  workloadKinds:\n", "  workloadKinds:\n  - {group: trainer.example.com, kind: TrainJob, resource: trainjobs, "
    "versions: [v1, v1beta1], podTemplates: [spec.template]}\n", 1)


def _workload_rules(objs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return {o["kind"]: o["webhooks"][0]["rules"] for o in objs if o["kind"].endswith("WebhookConfiguration")}


def test_inline_policy_workload_kinds_get_rules_in_both_webhooks(helm: Path, helm_home: Path, tmp_path: Path) -> None:
    """Issue 48 item 5: your CRD in workloadKinds is sent to the webhook without a kubectl patch (which the next
    helm upgrade then conflicted with); the rules are exactly lint's."""
    assert "TrainJob" in CRD_POLICY
    objs = template(helm, helm_home, "-f", values_file(tmp_path, {"policy": {"inline": CRD_POLICY}}))
    want = {"apiGroups": ["trainer.example.com"], "apiVersions": ["v1", "v1beta1"], "resources": ["trainjobs"],
            "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}
    rules = _workload_rules(objs)
    assert set(rules) == {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    for kind_rules in rules.values():
        assert kind_rules.count(want) == 1
    (tmp_path / "p.yaml").write_text(CRD_POLICY)
    base = [o for o in kustomize(DEPLOY / "overlays" / "cert-manager") if o["kind"] != "Namespace"]
    assert _workload_rules(objs) == _workload_rules(with_lint_patches(base, tmp_path / "p.yaml"))


def test_existing_configmap_takes_extra_rules_only(helm: Path, helm_home: Path, tmp_path: Path) -> None:
    extra = {"apiGroups": ["trainer.example.com"], "apiVersions": ["v1"], "resources": ["trainjobs"],
             "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}
    values = {"policy": {"existingConfigMap": "my-policy"}, "webhooks": {"extraRules": [extra]}}
    rules = _workload_rules(template(helm, helm_home, "-f", values_file(tmp_path, values)))
    for kind_rules in rules.values():
        assert kind_rules[-1] == extra
        assert not [r for r in kind_rules if "sparkoperator.k8s.io" in r["apiGroups"]]  # the ConfigMap is unread


@pytest.mark.parametrize(("policy", "message"), [
    ("spec: [unclosed", "policy.inline is not YAML: "),
    ("apiVersion: v1\nkind: ConfigMap\nspec: {}\n",
     'policy.inline: apiVersion is "v1", expected dra-migration.io/v1alpha1'),
    ("apiVersion: dra-migration.io/v1alpha1\nkind: Policy\nspec: {}\n",
     'policy.inline: kind is "Policy", expected MigrationPolicy'),
    ("apiVersion: dra-migration.io/v1alpha1\nkind: MigrationPolicy\nspec: {}\nspecs: {}\n",
     'policy.inline: unknown top-level key "specs"'),
    ("apiVersion: dra-migration.io/v1alpha1\nkind: MigrationPolicy\nmetadata: {name: x}\nspec: [a]\n",
     "policy.inline: spec must be a mapping"),
    ("apiVersion: dra-migration.io/v1alpha1\nkind: MigrationPolicy\nspec: {}\n",
     'policy.inline: required key "metadata" is missing'),
])
def test_a_broken_inline_policy_fails_at_template_time(helm: Path, helm_home: Path, tmp_path: Path, policy: str,
                                                       message: str) -> None:
    """Issue 48 item 5: `--set-file policy.inline=broken.yaml` printed "Happy Helming!"."""
    proc = helm_cli.run(helm, helm_home, "template", RELEASE, str(helm_cli.CHART), "-n", NAMESPACE, "-f",
                        values_file(tmp_path, {"policy": {"inline": policy}}), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_packaged_chart_carries_the_linked_files(helm: Path, helm_home: Path, tmp_path: Path) -> None:
    """files/ links into deploy/: `helm package` must resolve the links, so the .tgz renders the same objects."""
    helm_cli.run(helm, helm_home, "package", str(helm_cli.CHART), "-d", str(tmp_path))
    (tgz,) = tmp_path.glob("dra-migration-webhook-*.tgz")
    from_dir = template(helm, helm_home)
    assert template(helm, helm_home, chart=tgz) == from_dir
    assert template(helm, helm_home, chart=tgz, hooks=True) == template(helm, helm_home, hooks=True)
    assert len(from_dir) > 10


def test_monitoring_on_renders_the_monitoring_component(helm: Path, helm_home: Path, tmp_path: Path) -> None:
    overlay = tmp_path / "deploy" / "overlays" / "monitoring"
    shutil.copytree(DEPLOY, tmp_path / "deploy", ignore=shutil.ignore_patterns("certs", "chart"))
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources: [../../base]\ncomponents: [../../cert-manager, ../../monitoring]\n")
    on = {"monitoring": {k: {"enabled": True} for k in ("serviceMonitor", "prometheusRule", "dashboard")}}
    chart = template(helm, helm_home, "-f", values_file(tmp_path, on))
    theirs = {(o["kind"], o["metadata"]["name"]): o for o in kustomize(overlay)}
    monitoring = [o for o in chart if o["kind"] in ("ServiceMonitor", "PrometheusRule")
                  or o["metadata"]["name"] == "dra-webhook-dashboard"]
    assert len(monitoring) == 3
    for obj in monitoring:
        want = theirs[(obj["kind"], obj["metadata"]["name"])]
        # The component labels only name and component; the chart adds the release's common labels.
        assert want["metadata"]["labels"].items() <= obj["metadata"]["labels"].items()
        assert {**obj, "metadata": None} == {**want, "metadata": None}
        assert obj["metadata"]["namespace"] == want["metadata"]["namespace"]


def validate(objs: list[dict[str, Any]]) -> None:
    errors = []
    for obj in objs:
        if obj["apiVersion"].startswith(("cert-manager.io/", "monitoring.coreos.com/")):
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {e.message} at {'.'.join(map(str, e.path))}")
    assert not errors, "\n".join(errors)


CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()
VALUES = {
    "defaults": {},
    "existing-secret": {"certs": {"certManager": {"enabled": False}, "existingSecret": "my-tls", "caBundle": CA}},
    "monitoring": {"monitoring": {k: {"enabled": True} for k in ("serviceMonitor", "prometheusRule", "dashboard")}},
    "inline-policy": {"policy": {"inline": "apiVersion: dra-migration.io/v1alpha1\nkind: MigrationPolicy\n"
                                           "metadata: {name: tiny}\nspec: {}\n"}},
    "existing-configmap": {"policy": {"existingConfigMap": "platform-gpu-policy"}},
    "tuned": {"image": {"repository": "registry.example/dra", "tag": "1.2.3"},
              "deployment": {"replicas": 5, "priorityClassName": "", "resources": {"limits": {"memory": "2Gi"}},
                             "nodeSelector": {"pool": "system"}},
              "podDisruptionBudget": {"minAvailable": 2},
              "webhooks": {"failurePolicy": {"workloads.validate.dra-migration.io": "Fail"}}},
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_values_files_render_valid_objects(helm: Path, helm_home: Path, tmp_path: Path, name: str) -> None:
    objs = template(helm, helm_home, "-f", values_file(tmp_path, VALUES[name]), namespace="gpu-admission")
    validate(objs)
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    pod = by_kind[("Deployment", "dra-webhook")]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    if name == "existing-secret":
        assert volumes["tls"]["secret"]["secretName"] == "my-tls"
        assert not any(o["apiVersion"].startswith("cert-manager.io/") for o in objs)
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            hooks = by_kind[(kind, "dra-migration-webhook")]
            assert "annotations" not in hooks["metadata"]
            assert {h["clientConfig"]["caBundle"] for h in hooks["webhooks"]} == {CA}
    if name == "existing-configmap":
        assert volumes["policy"]["configMap"]["name"] == "platform-gpu-policy"
        assert not [o for o in objs if o["kind"] == "ConfigMap"]
    if name == "inline-policy":
        (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
        assert cm["data"] == {"default.yaml": VALUES[name]["policy"]["inline"]}
        assert volumes["policy"]["configMap"]["name"] == cm["metadata"]["name"]
    if name == "tuned":
        assert by_kind[("Deployment", "dra-webhook")]["spec"]["replicas"] == 5
        assert "priorityClassName" not in pod and ("ResourceQuota", "dra-webhook-critical-pods") not in by_kind
        assert pod["containers"][0]["image"] == "registry.example/dra:1.2.3"
        assert pod["containers"][0]["resources"] == {"limits": {"memory": "2Gi"}}
        assert by_kind[("PodDisruptionBudget", "dra-webhook")]["spec"]["minAvailable"] == 2
        hooks = by_kind[("ValidatingWebhookConfiguration", "dra-migration-webhook")]["webhooks"]
        assert {h["name"]: h["failurePolicy"] for h in hooks}["workloads.validate.dra-migration.io"] == "Fail"


def test_release_namespace_reaches_every_reference(helm: Path, helm_home: Path) -> None:
    """Installed elsewhere than dra-webhook, nothing may still point at dra-webhook: the webhooks would call a
    Service that does not exist, gate the webhook's own namespace, or not skip its own ServiceAccount."""
    text = yaml.safe_dump_all(template(helm, helm_home, namespace="gpu-admission"))
    assert "system:serviceaccount:gpu-admission:dra-webhook" in text
    assert "dra-webhook.gpu-admission.svc" in text and "gpu-admission/dra-webhook-serving" in text
    for line in text.splitlines():
        assert not re.search(r"(namespace: dra-webhook$|- dra-webhook$|serviceaccount:dra-webhook:|"
                             r"dra-webhook\.svc| dra-webhook/)", line), line


@pytest.mark.parametrize(("values", "message"), [
    ({"deployment": {"replicas": 0}}, "at '/deployment/replicas': minimum: got 0, want 1"),
    ({"webhooks": {"failurePolicy": {"workloads.validate.dra-migration.io": "Maybe"}}},
     "value must be one of 'Ignore', 'Fail'"),
    ({"certs": {"certManager": {"enabled": False}}}, "at '/certs/existingSecret': minLength: got 0, want 1"),
    ({"policy": {"inline": "x: 1", "existingConfigMap": "p"}},
     "policy.inline and policy.existingConfigMap are both set: the Deployment mounts one policy; set only one"),
    ({"deployment": {"resources": {"limits": {"memory": "lots"}}}}, "at '/deployment/resources/limits/memory'"),
    ({"replicas": 3}, "additional properties 'replicas' not allowed"),
])
def test_schema_rejects_bad_values_with_the_path(
        helm: Path, helm_home: Path, tmp_path: Path, values: dict[str, Any], message: str) -> None:
    proc = helm_cli.run(helm, helm_home, "template", RELEASE, str(helm_cli.CHART), "-f",
                        values_file(tmp_path, values), check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_chart_readme_is_generated_from_values_and_schema() -> None:
    """Issue 48 item 5: deploy/chart/README.md is what ``python -m tests.builders.chart_readme`` writes."""
    from tests.builders import chart_readme

    text = chart_readme.render()
    for key in ("policy.inline", "webhooks.extraRules", "certs.certManager.enabled", "monitoring.dashboard.enabled"):
        assert f"| `{key}` |" in text
    assert (helm_cli.CHART / "README.md").read_text() == text, "regenerate: python -m tests.builders.chart_readme"


def test_notes_say_what_was_installed(helm: Path, helm_home: Path, tmp_path: Path) -> None:
    values = values_file(tmp_path, {"policy": {"inline": CRD_POLICY}})
    proc = helm_cli.run(helm, helm_home, "install", RELEASE, str(helm_cli.CHART), "-n", NAMESPACE, "--dry-run=client",
                        "-f", values)
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert f"helm test {RELEASE} -n {NAMESPACE} --logs" in notes
    assert "from the policy's workloadKinds: sparkapplications.sparkoperator.k8s.io trainjobs.trainer.example.com" \
        in notes or "workloadKinds: trainjobs.trainer.example.com sparkapplications.sparkoperator.k8s.io" in notes
    assert "kubectl delete mutatingwebhookconfiguration,validatingwebhookconfiguration dra-migration-webhook" in notes
