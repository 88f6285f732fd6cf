"""deploy/monitoring: the rules pass promtool (check + one unit test per alert), the component renders with
kustomize onto the install, and every metric a rule or a dashboard panel queries is one the live server
exports (a renamed metric would otherwise leave an alert that can never fire)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.builders.deploy import KUBECTL, KUSTOMIZE_MAJOR
from tests.builders.gauges import scenario
from tests.fakeapi import FakeAPI, write_policy
from tests.helpers import ROOT, gpu_pod, review, start_server

MONITORING = ROOT / "deploy" / "monitoring"
TESTS = Path(__file__).parents[1] / "monitoring"
PROMTOOL = shutil.which("promtool")
# CI installs promtool (.ci/run); a CI run without it must fail, not pass by skipping every alert test.
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and os.environ.get("CI") != "true",
    reason="promtool not on PATH (Debian package `prometheus`); CI installs it and fails without it",
)
needs_kustomize = pytest.mark.skipif(
    KUSTOMIZE_MAJOR is None or KUSTOMIZE_MAJOR < 5, reason="needs kubectl with kustomize v5+ on PATH"
)
ALERTS = {
    "DraWebhookUnavailable", "DraWebhookAnsweringErrors", "DraWebhookSlowAdmission",
    "DraWebhookCertificateExpiringSoon", "DraWebhookPolicyReloadFailing", "DraWebhookCompiledPoliciesStale",
    "DraWebhookNarrowingStale",
    "DraMigrationDenialsRising",
    "DraMigrationDrift", "DraMigrationStageChangeDue", "DraMigrationGaugesStale",
}
PROMETHEUS_OWN = {"up"}  # written by Prometheus for every target, not by us
# The compiled mode's (dra-webhook reconcile): the reconciler writes its last pass onto its Lease and the webhook's
# gauge writer exports it; the live server below is given such a Lease. On the real control plane:
# tests/e2e/test_compiled_reconcile.py.
RECONCILER_LEASE = {
    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
    "metadata": {"name": "dra-webhook-compiled", "namespace": "dra-webhook", "annotations": {
        "dra-migration.io/reconciled-at": "2026-12-05T10:00:00+00:00", "dra-migration.io/reconciled-objects": "12",
        "dra-migration.io/narrowing-stale": "false", "dra-migration.io/reconciled-policy": "gpu-fleet"}},
    "spec": {"holderIdentity": "dra-webhook-reconciler-0_x", "leaseDurationSeconds": 15}}


def rule_spec() -> dict:
    return yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())["spec"]


def rule_exprs() -> list[str]:
    return [r["expr"] for g in rule_spec()["groups"] for r in g["rules"]]


def panel_exprs() -> list[str]:
    dash = json.loads((MONITORING / "dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers followed by a selector, range or the end of a term,
    minus functions, aggregations, keywords and label names."""
    names = set(re.findall(r"\b(dra_webhook_[a-z0-9_]+|up)\b(?=\s*[{\[)\s]|$)", expr))
    return names


def _promtool(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None, "promtool is missing: install the Debian package `prometheus` (.ci/run does)"
    return subprocess.run([PROMTOOL, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.fixture()
def rules_dir(tmp_path: Path) -> Path:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_spec(), sort_keys=False))
    shutil.copy(TESTS / "alerts.test.yaml", tmp_path / "alerts.test.yaml")
    return tmp_path


@needs_promtool
def test_rules_pass_promtool_check(rules_dir: Path) -> None:
    proc = _promtool(rules_dir, "check", "rules", "rules.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in proc.stdout


@needs_promtool
def test_rule_unit_tests_pass(rules_dir: Path) -> None:
    proc = _promtool(rules_dir, "test", "rules", "alerts.test.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_unit_tests_catch_a_broken_rule(rules_dir: Path) -> None:
    """The unit tests are not vacuous: a threshold changed in the rule makes them fail."""
    spec = rule_spec()
    for group in spec["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == "DraMigrationDrift":
                rule["expr"] = rule["expr"].replace("> 0", "> 1")
    (rules_dir / "rules.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = _promtool(rules_dir, "test", "rules", "alerts.test.yaml")
    assert proc.returncode != 0 and "DraMigrationDrift" in proc.stdout + proc.stderr


def test_every_alert_has_a_firing_unit_test() -> None:
    assert {r["alert"] for g in rule_spec()["groups"] for r in g["rules"]} == ALERTS
    tests = yaml.safe_load((TESTS / "alerts.test.yaml").read_text())["tests"]
    firing = {t["alertname"] for case in tests for t in case["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for case in tests for t in case["alert_rule_test"] if not t["exp_alerts"]}
    assert firing == ALERTS
    assert ALERTS - quiet <= {"DraWebhookSlowAdmission"}  # every other alert is also shown not to fire


def test_migration_queries_never_sum_across_replicas() -> None:
    """Every replica exports the same cluster-wide gauges: summing over instances would multiply them."""
    for expr in rule_exprs() + panel_exprs():
        for name in re.findall(r"dra_webhook_migration_[a-z_]+", expr):
            assert re.search(rf"(max|min)(?: by \([^)]*\))? ?\({name}", expr), expr


@needs_kustomize
def test_component_renders_onto_the_install(tmp_path: Path) -> None:
    tree = tmp_path / "deploy"
    shutil.copytree(ROOT / "deploy", tree)
    overlay = tree / "overlays" / "with-monitoring"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        "resources:\n- ../cert-manager\ncomponents:\n- ../../monitoring\n")
    proc = subprocess.run([KUBECTL, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    objs = [o for o in yaml.safe_load_all(proc.stdout) if o]
    by_kind = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    monitor = by_kind[("ServiceMonitor", "dra-webhook")]
    service = by_kind[("Service", "dra-webhook")]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"] == "dra-webhook"
    # The plain metrics port (--metrics-bind): no client certificate, so it works with deploy/client-ca too.
    endpoint = monitor["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "http" and "tlsConfig" not in endpoint
    (svc_port,) = [p for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
    webhook = by_kind[("Deployment", "dra-webhook")]["spec"]["template"]["spec"]["containers"][0]
    container_ports = {p["name"]: p["containerPort"] for p in webhook["ports"]}
    bind = webhook["args"][webhook["args"].index("--metrics-bind") + 1]
    assert container_ports[svc_port["targetPort"]] == int(bind.rsplit(":", 1)[1])
    rule = by_kind[("PrometheusRule", "dra-webhook")]
    assert rule["spec"] == rule_spec()
    dashboard = by_kind[("ConfigMap", "dra-webhook-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["dra-migration-webhook.json"])["uid"] == "dra-migration-webhook"
    # Opt-in: the plain install has none of it.
    plain = subprocess.run([KUBECTL, "kustomize", str(tree / "overlays" / "cert-manager")], capture_output=True,
                           text=True, timeout=120)
    assert "ServiceMonitor" not in plain.stdout and "PrometheusRule" not in plain.stdout


def test_every_queried_metric_is_exported_by_the_live_server(tmp_path: Path) -> None:
    queried = set().union(*(metric_names(e) for e in rule_exprs() + panel_exprs()))
    assert {"dra_webhook_migration_pods", "dra_webhook_admission_duration_seconds_bucket"} <= queried
    objs = scenario()
    with FakeAPI() as api:
        api.put(*objs.namespaces, *objs.device_classes, *objs.pods, *objs.claims, RECONCILER_LEASE)
        kubeconfig = api.write_kubeconfig(tmp_path)
        policy = Path(write_policy(tmp_path))
        server = start_server(tmp_path, policy, "--kubeconfig", kubeconfig, "--gauge-interval", "0.5",
                              workers=2, offline=False)
        client = server.client()
        try:
            pod = gpu_pod(namespace="ml-a", resource="vendor.example.com/gpu")  # legacy name: a finding
            for path in ("/mutate", "/validate"):
                client.admit(path, review(pod, namespace="ml-a"))
            assert client.request("POST", "/validate", b"x", {"Content-Type": "text/plain"})[0] == 415
            exported: set[str] = set()
            deadline = time.monotonic() + 30  # the gauges appear after the exporter's first read
            while time.monotonic() < deadline:
                status, body = client.get("/metrics")
                assert status == 200
                exported = {s.name for f in text_string_to_metric_families(body.decode()) for s in f.samples}
                if queried - PROMETHEUS_OWN <= exported:
                    break
                time.sleep(0.1)
            missing = queried - PROMETHEUS_OWN - exported
            assert not missing, sorted(missing)
        finally:
            client.close()
            server.stop()
