"""The chart (deploy/chart) installed, upgraded and uninstalled by the real `helm` on the real control plane.

Its own control plane (the session's already holds the kustomize install, whose cluster-scoped names the
chart shares). Helm installs everything the chart renders except what needs a kubelet: a post-renderer
(helm_postrender.py) drops the Deployment and Service and points the webhooks at ``dra-webhook serve`` on
the host, as install.py does for the kustomize path. Certificates come from ``dra-webhook certs`` through
the chart's existing-secret path (no cert-manager here). No ``--wait``: nothing would ever become ready.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests import helm_cli
from tests.e2e import binaries
from tests.e2e.conftest import DEFAULT_POLICY, policy_variant
from tests.e2e.controlplane import ControlPlane
from tests.e2e.helm_postrender import write_plugin
from tests.e2e.hook_kubelet import HookKubelet
from tests.e2e.install import NAMESPACE, Webhook, kubectl, service_account_kubeconfig
from tests.e2e.kube import Denied, Kube
from tests.e2e.objects import pod
from tests.e2e.waits import eventually

RELEASE = "dra-webhook"
PROBE = "mig-helm-probe"
# The variant the upgrade ships: the mig-* cohort's stage is enforced with Warn instead of Deny.
# The webhook's warnings name the rule and the stage: "legacy-resource-name (migrated): ...".
REVIEW_WARNING = re.compile(r"^[a-z-]+ \((legacy|pilot|migrated)\): ")
WARN_POLICY = policy_variant({"    migrated: Deny\n": "    migrated: Warn\n"})


@dataclass
class Installed:
    cp: ControlPlane
    kube: Kube
    core: client.CoreV1Api
    webhook: Webhook
    helm: Path
    home: Path
    workdir: Path
    renderer: str
    hooks: HookKubelet

    def helm_run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return helm_cli.run(self.helm, self.home, *args, kubeconfig=self.cp.admin_kubeconfig, check=check)

    def values(self, policy: str) -> str:
        ca = base64.b64encode((self.workdir / "certs" / "ca.crt").read_bytes()).decode()
        path = self.workdir / "values.yaml"
        certs = {"certManager": {"enabled": False}, "existingSecret": "dra-webhook-tls", "caBundle": ca}
        path.write_text(yaml.safe_dump({"certs": certs, "policy": {"inline": policy}}))
        return str(path)

    def deploy(self, verb: str, policy: str) -> None:
        self.helm_run(verb, RELEASE, str(helm_cli.CHART), "-n", NAMESPACE, "-f", self.values(policy),
                      "--post-renderer", self.renderer)

    def mount_policy(self, *, running: bool = True) -> str:
        """The kubelet's part: the release's policy ConfigMap, read from the API server, written where serve reads.

        (The Deployment that mounts it is post-rendered away; tests/deploy/test_chart.py checks that it names it.)
        """
        manifest = self.helm_run("get", "manifest", RELEASE, "-n", NAMESPACE).stdout
        (name,) = [o["metadata"]["name"] for o in yaml.safe_load_all(manifest) if o and o["kind"] == "ConfigMap"
                   and o["metadata"]["labels"]["app.kubernetes.io/component"] == "policy"]
        data = self.kube.get("v1", "ConfigMap", name, NAMESPACE)["data"]
        (text,) = data.values()
        return self.webhook.use_policy(text) if running else self.webhook.write_policy(text)

    def review(self) -> str:
        """One dry-run Pod the e2e policy judges in the mig-* cohort: 'denied' (Deny) or 'warned' (Warn)."""
        probe = pod("probe", PROBE, resource="vendor.example.com/gpu")
        try:
            result = self.kube.create(probe, dry_run=True)
        except Denied as exc:
            assert "dra-migration.io" in exc.message, f"denied, but not by the webhook: {exc.message}"
            return "denied"
        assert any(REVIEW_WARNING.match(w) for w in result.warnings), f"admitted without a review: {result.warnings}"
        return "warned"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    helm = helm_cli.require()
    try:
        found = binaries.find()
    except binaries.NoBinaries as exc:
        pytest.skip(f"e2e suite skipped: {exc}")
    tmp = tmp_path_factory.mktemp("helm-e2e")
    cp = ControlPlane(found, tmp / "cp")
    webhook = None
    hooks = None
    try:
        cp.start()
        workdir = tmp / "webhook"
        workdir.mkdir()
        subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(workdir / "certs")], check=True,
                       capture_output=True, cwd=helm_cli.ROOT)
        webhook = Webhook(workdir, workdir / "certs", workdir / "webhook.kubeconfig", DEFAULT_POLICY)
        home = tmp / "helm-home"
        kube = Kube(cp.api())
        renderer = write_plugin(home / "plugins", webhook.port)
        if not found.has_controllers:
            pytest.skip("e2e chart tests need kube-controller-manager: the policy-check hook is a Job")
        hooks = HookKubelet(kube, NAMESPACE).__enter__()
        inst = Installed(cp, kube, client.CoreV1Api(cp.api()), webhook, helm, home, workdir, renderer, hooks)
        # README "Install": the namespace first, with the base's Pod Security labels (Helm stores the release there).
        kube.create(yaml.safe_load((helm_cli.ROOT / "deploy" / "base" / "namespace.yaml").read_text()))
        inst.deploy("install", DEFAULT_POLICY.read_text())
        service_account_kubeconfig(cp, workdir)
        inst.mount_policy(running=False)
        webhook.start()
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROBE}})
        if found.has_controllers:
            eventually(lambda: kube.get_or_none("v1", "ServiceAccount", "default", PROBE), "default SA", 30)
        else:
            kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "default", "namespace": PROBE}})
        yield inst
    finally:
        # Only what this module started: procs.stop_all() would also stop the session's control plane,
        # which the modules after this one still use.
        if webhook is not None:
            webhook.close()
        if hooks is not None:
            hooks.__exit__()
        cp.stop()


def _stored(inst: Installed, objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the API server holds of ``objs`` (``kubectl get -f``: every kind, found by discovery)."""
    path = inst.workdir / "released.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    out = subprocess.run([kubectl(), "--kubeconfig", str(inst.cp.admin_kubeconfig), "get", "-f", str(path),
                          "--ignore-not-found", "-o", "json"], check=True, capture_output=True, text=True).stdout
    doc = json.loads(out) if out.strip() else {}
    return doc.get("items", [doc] if doc.get("kind") not in (None, "List") else [])


def _released(inst: Installed) -> list[dict[str, Any]]:
    manifest = inst.helm_run("get", "manifest", RELEASE, "-n", NAMESPACE).stdout
    return [o for o in yaml.safe_load_all(manifest) if o]


def test_install_registers_the_webhooks_the_chart_renders(installed: Installed) -> None:
    objs = _released(installed)
    kinds = {o["kind"] for o in objs}
    assert {"ServiceAccount", "ClusterRole", "ConfigMap", "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration", "PodDisruptionBudget"} <= kinds
    assert not kinds & {"Namespace", "Deployment", "Service", "Certificate", "Issuer"}
    stored = _stored(installed, objs)
    assert len(stored) == len(objs)
    assert {o["metadata"]["labels"]["app.kubernetes.io/managed-by"] for o in stored} == {"Helm"}
    assert eventually(installed.review, "the API server calling the Helm-installed webhook", 30) == "denied"


def test_upgrade_with_a_changed_policy_is_served_without_a_failed_review(installed: Installed) -> None:
    outcomes: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            try:
                outcomes.append(installed.review())
            except BaseException as exc:  # noqa: BLE001  (reported below)
                errors.append(exc)
                return
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    try:
        installed.deploy("upgrade", WARN_POLICY)
        installed.mount_policy()
        eventually(lambda: outcomes and outcomes[-1] == "warned", "a review under the upgraded policy", 30,
                   alive=lambda: f"the probe failed: {errors[0]}" if errors else None)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, f"a review failed during the upgrade: {errors[0]}"
    assert outcomes[0] == "denied" and outcomes[-1] == "warned"
    # Once switched, it stays switched: no review fell back to the old policy or went unreviewed.
    assert "denied" not in outcomes[outcomes.index("warned"):]
    configmaps = [o for o in _released(installed) if o["kind"] == "ConfigMap"]
    assert len(configmaps) == 1 and configmaps[0]["data"]["default.yaml"] == WARN_POLICY
    assert len(installed.kube.list("v1", "ConfigMap", NAMESPACE, "app.kubernetes.io/component=policy")) == 1


def test_install_and_upgrade_ran_the_policy_check_hook(installed: Installed) -> None:
    """Issue 48 item 5: the pre-install and pre-upgrade hook ran `dra-webhook lint` on the release's policy."""
    assert not installed.hooks.errors, installed.hooks.errors
    assert [r.exit_code for r in installed.hooks.ran] == [0, 0], installed.hooks.ran  # install, upgrade
    assert all("policy OK" in r.output for r in installed.hooks.ran)
    # hook-succeeded: neither the Job nor its ConfigMap stays
    assert installed.kube.list("batch/v1", "Job", NAMESPACE, "app.kubernetes.io/component=policy-check") == []


BROKEN_POLICY = policy_variant({"  nodePools:\n": "  nodePoolz:\n"})


def test_upgrade_with_a_policy_lint_refuses_fails_and_the_old_policy_keeps_serving(installed: Installed) -> None:
    """Issue 48 item 5: `helm upgrade --set-file policy.inline=broken.yaml` printed "Happy Helming!". Now the
    pre-upgrade hook fails with lint's file:line message before anything is applied; the old release serves on."""
    assert "nodePoolz" in BROKEN_POLICY
    proc = installed.helm_run("upgrade", RELEASE, str(helm_cli.CHART), "-n", NAMESPACE, "-f",
                              installed.values(BROKEN_POLICY), "--post-renderer", installed.renderer, check=False)
    assert proc.returncode != 0 and "pre-upgrade" in proc.stderr, proc.stderr
    failed = installed.hooks.ran[-1]
    assert failed.exit_code == 1
    line = BROKEN_POLICY.splitlines().index("  nodePoolz:") + 1
    assert f"/etc/dra-webhook/policy/default.yaml:{line}: " in failed.output and "nodePoolz" in failed.output
    job = installed.kube.list("batch/v1", "Job", NAMESPACE, "app.kubernetes.io/component=policy-check")
    assert [c["reason"] for c in job[0]["status"]["conditions"] if c["type"] == "Failed"] == ["BackoffLimitExceeded"]
    history = json.loads(installed.helm_run("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert [h["status"] for h in history[-2:]] == ["deployed", "failed"]  # the deployed revision is the old one
    configmaps = installed.kube.list("v1", "ConfigMap", NAMESPACE, "app.kubernetes.io/component=policy")
    assert [c["data"]["default.yaml"] for c in configmaps] == [WARN_POLICY]
    assert installed.review() == "warned"  # served under the old policy
    # Helm asked for the hook's log to print it (a real kubelet serves it; this control plane has none).
    assert "error outputting logs for hook failure" in proc.stderr or "nodePoolz" in proc.stderr
    # Fixed, the next upgrade goes through (and is what uninstall then removes: Helm uninstalls the latest revision,
    # which a failed upgrade would otherwise be; docs/emergency.md).
    installed.deploy("upgrade", WARN_POLICY)
    assert installed.hooks.ran[-1].exit_code == 0


def test_install_without_cert_manager_says_how_to_go_on(installed: Installed) -> None:
    """Issue 48 item 5: with cert-manager absent `helm install` failed with Helm's raw "no matches for kind
    Certificate"; with a cluster to ask (lookup) the chart says what to do before anything is sent."""
    proc = installed.helm_run("install", "other", str(helm_cli.CHART), "-n", NAMESPACE, "--dry-run=server",
                              check=False)
    assert proc.returncode != 0
    assert "cert-manager is not installed in this cluster" in proc.stderr, proc.stderr
    assert "certs.certManager.enabled=false" in proc.stderr


def test_uninstall_leaves_nothing_behind(installed: Installed) -> None:
    assert installed.kube.get_or_none("coordination.k8s.io/v1", "Lease", "dra-webhook-gauges", NAMESPACE)
    objs = _released(installed)
    installed.helm_run("uninstall", RELEASE, "-n", NAMESPACE)
    assert _stored(installed, objs) == []
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        assert installed.kube.list("admissionregistration.k8s.io/v1", kind) == []
    # Without the webhook the probe is admitted unreviewed: no configuration points at a deleted Service.
    result = installed.kube.create(pod("probe", PROBE, resource="vendor.example.com/gpu"), dry_run=True)
    assert not [w for w in result.warnings if REVIEW_WARNING.match(w)]
    # Only what the user created before installing stays: the namespace (and nothing Helm made in it).
    assert installed.kube.list("v1", "ConfigMap", NAMESPACE, "app.kubernetes.io/part-of=dra-migration-webhook") == []
    assert not installed.core.list_namespaced_secret(NAMESPACE, label_selector="owner=helm").items  # release records
    assert installed.helm_run("status", RELEASE, "-n", NAMESPACE, check=False).returncode != 0
    # The gauge writers' Lease is the release's (deploy/base/lease.yaml), held by the running webhook until now.
    assert installed.kube.get_or_none("coordination.k8s.io/v1", "Lease", "dra-webhook-gauges", NAMESPACE) is None
