"""Issue #28 item 2 on the real control plane: the server in compiled mode keeps the compiled admission policies.

The compiled install (deploy/overlays/dev plus the deploy/compiled component: the reconciler's RBAC and the narrowed
workloads webhooks) is applied as a platform engineer would, and ``dra-webhook serve`` runs with
``$DRA_WEBHOOK_COMPILED_POLICIES=true`` as the webhook's ServiceAccount. Shown here: the server applies the
objects itself (field manager ``dra-webhook-reconciler``); with the webhook stopped, the API server's own
ValidatingAdmissionPolicy denies a legacy-name Pod in a migrated namespace, naming the rule; a policy change is
reconciled (a Warn policy appears, the Deny one is pruned); a second candidate that does not hold the Lease
writes nothing; and the API server accepts and runs the narrowing matchCondition.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import binaries
from tests.e2e.binaries import ROOT
from tests.e2e.builders import _apiserver_counts
from tests.e2e.controlplane import ControlPlane
from tests.e2e.install import NOT_APPLIED, WEBHOOK_KINDS, Webhook, apply, kubectl, service_account_kubeconfig, to_url
from tests.e2e.kube import Denied, Kube
from tests.e2e.waits import eventually
from webhook.cluster import api as kube_api
from webhook.cluster.leader import LeaseElector
from webhook.commands import load_policy
from webhook.compile import compile_admission, narrow
from webhook.serve.reconciler import FIELD_MANAGER, LEASE_NAME, KubeWriter, Reconciler

POLICY = """\
apiVersion: dra-migration.io/v1alpha1
kind: MigrationPolicy
metadata:
  name: reconcile-e2e
spec:
  kubernetesVersion: "1.37"
  resources:
  - name: example.com/gpu
    deviceClassName: gpu.example.com
    legacyNames: [nvidia.com/gpu]
  cohorts:
  - name: moved
    namespaces: {names: ["moved-*"]}
    schedule:
    - {stage: STAGE, from: "2026-01-01"}
  defaultStage: legacy
  enforcement: {legacy: Audit, pilot: Warn, migrated: Deny}
"""
NS = "moved-a"
VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"


def _render(workdir: Path) -> tuple[list[dict[str, Any]], Path]:
    """The dev overlay with the compiled component, from a copy of deploy/ with fresh certificates."""
    deploy = workdir / "deploy"
    shutil.copytree(ROOT / "deploy", deploy, ignore=shutil.ignore_patterns("certs", "chart"))
    certs = deploy / "overlays" / "dev" / "certs"
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(certs)], check=True, capture_output=True,
                   cwd=ROOT)
    overlay = deploy / "overlays" / "compiled-dev"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: [../dev]\ncomponents: [../../compiled]\n")
    out = subprocess.run([kubectl(), "kustomize", str(overlay)], check=True, capture_output=True, text=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d], certs


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory):
    try:
        found = binaries.find()
    except binaries.NoBinaries as exc:
        pytest.skip(f"e2e suite skipped: {exc}")
    if not found.has_controllers:
        pytest.skip("needs kube-controller-manager (ServiceAccounts of new namespaces), which KUBEBUILDER_ASSETS lacks")
    work = tmp_path_factory.mktemp("reconcile")
    cp = ControlPlane(found, work / "plane")
    webhook = None
    env = pytest.MonkeyPatch()
    env.setenv("DRA_WEBHOOK_COMPILED_POLICIES", "true")  # every (re)start of the server: compiled mode
    try:
        cp.start()
        kube = Kube(cp.api())
        objects, certs = _render(work)
        apply(cp, [o for o in objects if o["kind"] not in (*WEBHOOK_KINDS, *NOT_APPLIED)], work, "install")
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        eventually(lambda: kube.get_or_none("v1", "ServiceAccount", "default", NS), f"SA default in {NS}", 60)
        sa_config = service_account_kubeconfig(cp, work)
        policy = work / "policy-src.yaml"
        policy.write_text(POLICY.replace("STAGE", "migrated"))
        webhook = Webhook(work, certs, sa_config, policy)
        webhook.start()
        configs = [to_url(o, webhook.port) for o in objects if o["kind"] in WEBHOOK_KINDS]
        apply(cp, configs, work, "webhooks")  # the API server compiles the narrowing matchCondition here
        yield cp, kube, webhook, configs, sa_config
    finally:
        if webhook is not None:
            webhook.close()
        cp.stop()
        env.undo()


def _policies(kube: Kube) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in kube.call("GET", VAP).obj["items"]}


def _gpu_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "registry.example.com/app:1.0",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def _denial(kube: Kube) -> str | None:
    try:
        kube.create(_gpu_pod("legacy"), dry_run=True)
    except Denied as exc:
        return exc.message
    return None


def test_the_server_applies_the_objects_and_the_api_server_enforces_them_without_the_webhook(plane):
    cp, kube, webhook, configs, _ = plane
    deny = "reconcile-e2e-pods-deny.dra-migration.io"
    stored = eventually(lambda: _policies(kube).get(deny), f"{deny} applied by the reconciler", 60,
                        alive=webhook.dead)
    assert FIELD_MANAGER in {m["manager"] for m in stored["metadata"]["managedFields"]}
    hooks = {h["name"]: h for c in configs for h in c["webhooks"]}
    for name in narrow.NARROWED_HOOKS:
        assert hooks[name]["matchConditions"][-1]["name"] == narrow.CONDITION_NAME
    webhook.stop()
    try:
        message = eventually(lambda: _denial(kube), "the API server's own policy denying the legacy-name Pod", 30)
        assert "legacy-resource-name" in message and deny in message, message
    finally:
        webhook.start()
    # The pass logs its line after its last apply: the first server may be stopped before that (the test waited for
    # one object only), so the line can come from the restarted server's pass, which runs once it holds the Lease,
    # after /readyz (asserting at once failed a CI run).
    eventually(lambda: "compiled policies: policy reconcile-e2e at" in webhook.output(),
               "the restarted server's reconcile pass logged", 60, alive=webhook.dead)
    # The reconciler process's metrics reach /metrics (the DraWebhookCompiledPoliciesStale alert reads them).
    values = eventually(lambda: _compiled_metrics(webhook), "the reconciler's metrics on /metrics", 30,
                        alive=webhook.dead)
    compiled = compile_admission(load_policy(webhook.policy_dir), dt.datetime.now(dt.UTC)).objects
    assert values["dra_webhook_compiled_policies_objects"] == len(compiled)
    assert values["dra_webhook_compiled_policies_reconciled_timestamp_seconds"] > 1.7e9


def _compiled_metrics(webhook: Webhook) -> dict[str, float] | None:
    req = urllib.request.Request(f"https://127.0.0.1:{webhook.port}/metrics")
    with urllib.request.urlopen(req, context=webhook._ctx, timeout=5) as resp:  # noqa: S310
        text = resp.read().decode()
    found = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
             if s.name.startswith("dra_webhook_compiled_policies_")}
    return found if len(found) == 2 and all(found.values()) else None
def _sent(kube: Kube, obj: dict[str, Any]) -> set[str]:
    """The narrowed workloads webhooks the API server called for a dry-run create of ``obj`` (its own counters)."""
    before = _apiserver_counts(kube, "apiserver_admission_webhook_request_total")
    kube.create(obj, dry_run=True)
    after = _apiserver_counts(kube, "apiserver_admission_webhook_request_total")
    return {h for h in narrow.NARROWED_HOOKS if after.get(h, 0) > before.get(h, 0)}


def test_the_narrowing_keeps_owned_names_from_the_webhook_and_the_reconciler_names_stale_ones(plane):
    """The install narrows for the shipped policy's names (deploy/compiled/narrowing-*.yaml): a Deployment whose
    template asks only example.com/gpu, a name that policy owns, is sent to neither workloads webhook; one asking a
    name it does not own (amd.com/gpu) is, and so is a Pod asking example.com/gpu (unsatisfiable-claim, on in the
    shipped policy, judges a Pod's extended resources against the ResourceSlices). The server runs another policy,
    which does not own vendor.example.com/gpu: the reconciler reads the installed condition and warns."""
    _, kube, webhook, _, _ = plane
    eventually(lambda: "keeps Pods asking for vendor.example.com/gpu from the webhook" in webhook.output(),
               "the reconciler's warning about the stale narrowing", 60, alive=webhook.dead)
    assert "which policy reconcile-e2e does not own" in webhook.output()

    def deployment(name: str, resource: str) -> dict[str, Any]:
        spec = _gpu_pod(name)["spec"]
        spec["containers"][0]["resources"]["limits"] = {resource: "1"}
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}

    assert _sent(kube, deployment("owned", "example.com/gpu")) == set()
    assert _sent(kube, deployment("foreign", "amd.com/gpu")) == set(narrow.NARROWED_HOOKS)
    pod = _gpu_pod("owned")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"example.com/gpu": "1"}
    assert _sent(kube, pod) == set(narrow.NARROWED_HOOKS)


def test_a_policy_change_is_reconciled_and_a_candidate_without_the_lease_writes_nothing(plane):
    cp, kube, webhook, _, sa_config = plane
    eventually(lambda: "reconcile-e2e-pods-deny.dra-migration.io" in _policies(kube), "the first pass", 60,
               alive=webhook.dead)
    webhook.use_policy(POLICY.replace("STAGE", "pilot"))

    def switched() -> set[str] | None:
        # Every Deny policy gone: the pass deletes them one by one, so waiting for one only races the others.
        found = set(_policies(kube))
        done = "reconcile-e2e-pods-warn.dra-migration.io" in found and \
            not [n for n in found if n.endswith("-deny.dra-migration.io")]
        return found if done else None

    eventually(switched, "the Warn policy applied and the Deny ones pruned", 60, alive=webhook.dead)

    def warnings() -> tuple[list[str], list[str]] | None:
        found = kube.create(_gpu_pod("warned"), dry_run=True).warnings
        own = [w for w in found if w.startswith("legacy-resource-name (pilot)")]
        compiled = [w for w in found if "reconcile-e2e-pods-warn.dra-migration.io" in w]
        return (own, compiled) if own and compiled else None

    # The narrowed webhooks still get this GPU Pod (nvidia.com/gpu is not a name of the policy the install narrowed
    # for): the API server evaluated the not-compiled condition to true (an error would skip the webhook under
    # Ignore, and its warning with it).
    eventually(warnings, "the webhook's and the compiled policy's warnings", 30, alive=webhook.dead)

    writes: list[str] = []

    class Counting(KubeWriter):
        def apply(self, obj: dict[str, Any]) -> None:
            writes.append(obj["metadata"]["name"])
            super().apply(obj)

    api = kube_api.connect(str(sa_config))
    with api:
        elector = LeaseElector(api, "dra-webhook", LEASE_NAME, "e2e-second-replica")
        assert not elector.tick() and elector.holder not in (None, "e2e-second-replica")
        policy = load_policy(webhook.policy_dir)
        assert not Reconciler(lambda: policy, Counting(api)).tick(lambda: elector.leading)
    assert writes == []
