"""Issues #28 item 2 and #47 item 4 on the real control plane: the compiled mode's reconciler, under its own identity,
keeps the compiled admission policies; the webhook's token cannot write one.

The compiled install (deploy/overlays/dev plus the deploy/compiled component: the reconciler's ServiceAccount, Lease
and RBAC, its ClusterRole printed for this test's policy by ``dra-webhook reconcile --print-rbac`` as the README
says to for your own policy, and the narrowed workloads webhooks) is applied as a platform engineer would.
``dra-webhook serve`` runs with a token of the webhook's ServiceAccount, ``dra-webhook reconcile`` with one of the
reconciler's. Shown here: the reconciler applies the objects (field manager ``dra-webhook-reconciler``; its create
right is limited by name, which the API server honours for an apply that creates); with the webhook stopped, the API
server's own ValidatingAdmissionPolicy denies a legacy-name Pod in a migrated namespace, naming the rule; the last
pass reaches the webhook's /metrics through the reconciler's Lease; a policy change is reconciled (a Warn policy
appears, the Deny one is pruned); a second candidate that does not hold the Lease writes nothing; the API server
accepts and runs the narrowing matchCondition; and the API server's access reviews (what ``kubectl auth can-i``
asks) and real requests show the webhook's token cannot create, change or delete any admission policy, nor take
the reconciler's Lease, while the reconciler's can write its own names only.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e import binaries, procs
from tests.e2e.binaries import ROOT
from tests.e2e.builders import _apiserver_counts
from tests.e2e.controlplane import ControlPlane
from tests.e2e.install import (
    NAMESPACE,
    NOT_APPLIED,
    WEBHOOK_KINDS,
    Webhook,
    apply,
    kubectl,
    service_account_kubeconfig,
    to_url,
)
from tests.e2e.kube import Denied, Kube
from tests.e2e.waits import eventually
from webhook.cluster import api as kube_api
from webhook.cluster.leader import LeaseElector
from webhook.commands import load_policy
from webhook.compile import PLURALS, compile_admission, narrow, object_names
from webhook.serve.reconciler import FIELD_MANAGER, LEASE_NAME, RECONCILED_OBJECTS, KubeWriter, Reconciler

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
RECONCILER = "dra-webhook-reconciler"
ROLE = ("ClusterRole", "dra-migration-webhook-reconciler")


class ReconcileProcess:
    """``dra-webhook reconcile`` with a kubeconfig of the reconciler's ServiceAccount, on the webhook's policy files."""

    def __init__(self, workdir: Path, kubeconfig: Path, policy_dir: Path) -> None:
        self.kubeconfig, self.policy_dir, self.log = kubeconfig, policy_dir, workdir / "reconcile.log"
        self.proc: procs.Proc | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        argv = [sys.executable, "-m", "webhook", "reconcile", "--policy", str(self.policy_dir), "--kubeconfig",
                str(self.kubeconfig), "--lease-namespace", NAMESPACE, "--period", "30"]
        self.proc = procs.Proc("dra-webhook reconcile", argv, self.log, env={**env, "PYTHONUNBUFFERED": "1"},
                               cwd=ROOT)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def dead(self) -> str | None:
        if self.proc is not None and not self.proc.alive():
            return f"dra-webhook reconcile exited with {self.proc.popen.returncode}:\n{self.output()[-3000:]}"
        return None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _printed_role(policy: Path) -> dict[str, Any]:
    """``dra-webhook reconcile --policy P --print-rbac``: the ClusterRole for this test's policy's names."""
    out = subprocess.run([sys.executable, "-m", "webhook", "reconcile", "--policy", str(policy), "--print-rbac"],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    role: dict[str, Any] = yaml.safe_load(out.stdout)
    return role


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
    found = binaries.find_or_skip()
    if not found.has_controllers:
        pytest.skip("needs kube-controller-manager (ServiceAccounts of new namespaces), which KUBEBUILDER_ASSETS lacks")
    work = tmp_path_factory.mktemp("reconcile")
    cp = ControlPlane(found, work / "plane")
    webhook = reconciler = None
    try:
        cp.start()
        kube = Kube(cp.api())
        objects, certs = _render(work)
        policy = work / "policy-src.yaml"
        policy.write_text(POLICY.replace("STAGE", "migrated"))
        role = next(o for o in objects if (o["kind"], o["metadata"]["name"]) == ROLE)
        role["rules"] = _printed_role(policy)["rules"]  # the shipped one names the shipped policy's objects
        apply(cp, [o for o in objects if o["kind"] not in (*WEBHOOK_KINDS, *NOT_APPLIED)], work, "install")
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        eventually(lambda: kube.get_or_none("v1", "ServiceAccount", "default", NS), f"SA default in {NS}", 60)
        sa_config = service_account_kubeconfig(cp, work)
        webhook = Webhook(work, certs, sa_config, policy)
        webhook.extra_args = ["--gauge-interval", "1"]  # the compiled gauges follow the Lease within a second
        webhook.start()
        reconciler = ReconcileProcess(work, service_account_kubeconfig(cp, work, RECONCILER), webhook.policy_dir)
        reconciler.start()
        configs = [to_url(o, webhook.port) for o in objects if o["kind"] in WEBHOOK_KINDS]
        apply(cp, configs, work, "webhooks")  # the API server compiles the narrowing matchCondition here
        yield cp, kube, webhook, configs, reconciler
    finally:
        if reconciler is not None:
            reconciler.stop()
        if webhook is not None:
            webhook.close()
        cp.stop()


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


def test_the_reconciler_applies_the_objects_and_the_api_server_enforces_them_without_the_webhook(plane):
    cp, kube, webhook, configs, reconciler = plane
    deny = "reconcile-e2e-pods-deny.dra-migration.io"
    stored = eventually(lambda: _policies(kube).get(deny), f"{deny} applied by the reconciler", 60,
                        alive=reconciler.dead)
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
    eventually(lambda: "compiled policies: policy reconcile-e2e at" in reconciler.output(),
               "the reconcile pass logged", 60, alive=reconciler.dead)
    # The pass reaches the webhook's /metrics through the reconciler's Lease (the DraWebhookCompiledPoliciesStale
    # alert reads it): the reconciler has no port, the webhook no write right.
    compiled = compile_admission(load_policy(webhook.policy_dir), dt.datetime.now(dt.UTC)).objects
    lease = eventually(lambda: (got := kube.get("coordination.k8s.io/v1", "Lease", LEASE_NAME, NAMESPACE))
                       ["metadata"].get("annotations", {}).get(RECONCILED_OBJECTS) and got,
                       "the pass on the reconciler's Lease", 30, alive=reconciler.dead)
    assert lease["metadata"]["annotations"][RECONCILED_OBJECTS] == str(len(compiled))
    assert lease["spec"]["holderIdentity"]
    values = eventually(lambda: _compiled_metrics(webhook), "the reconciler's pass on the webhook's /metrics", 30,
                        alive=webhook.dead)
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
    _, kube, _, _, reconciler = plane
    eventually(lambda: "keeps Pods asking for vendor.example.com/gpu from the webhook" in reconciler.output(),
               "the reconciler's warning about the stale narrowing", 60, alive=reconciler.dead)
    assert "which policy reconcile-e2e does not own" in reconciler.output()

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
    cp, kube, webhook, _, reconciler = plane
    eventually(lambda: "reconcile-e2e-pods-deny.dra-migration.io" in _policies(kube), "the first pass", 60,
               alive=reconciler.dead)
    webhook.use_policy(POLICY.replace("STAGE", "pilot"))

    def switched() -> set[str] | None:
        # Every Deny policy gone: the pass deletes them one by one, so waiting for one only races the others.
        found = set(_policies(kube))
        done = "reconcile-e2e-pods-warn.dra-migration.io" in found and \
            not [n for n in found if n.endswith("-deny.dra-migration.io")]
        return found if done else None

    eventually(switched, "the Warn policy applied and the Deny ones pruned", 60, alive=reconciler.dead)

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

    api = kube_api.connect(str(reconciler.kubeconfig))  # a second reconciler replica: same identity, no Lease
    with api:
        elector = LeaseElector(api, NAMESPACE, LEASE_NAME, "e2e-second-replica")
        assert not elector.tick() and elector.holder not in (None, "e2e-second-replica")
        policy = load_policy(webhook.policy_dir)
        assert not Reconciler(lambda: policy, Counting(api)).tick(lambda: elector.leading)
    assert writes == []


def _can(config: Path, verb: str, resource: str, name: str = "", group: str = "admissionregistration.k8s.io",
         namespace: str = "") -> bool:
    """What ``kubectl auth can-i VERB RESOURCE/NAME`` answers for the identity of ``config``: the API server's
    SelfSubjectAccessReview, asked with that identity's own token."""
    api = kube_api.connect(str(config))
    with api:
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {
            "resourceAttributes": {"group": group, "resource": resource, "verb": verb, "name": name,
                                   "namespace": namespace}}}
        status = Kube(api).call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review).obj
    return bool(status["status"].get("allowed"))


def _vap(name: str) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                             "operations": ["CREATE"], "resources": ["pods"]}]},
                     "validations": [{"expression": "true"}]}}


def _refused(config: Path, method: str, obj: dict[str, Any]) -> int:
    """The HTTP status of a dry-run POST or server-side apply of ``obj`` with the token of ``config``."""
    api = kube_api.connect(str(config))
    path = f"/apis/admissionregistration.k8s.io/v1/{PLURALS[obj['kind']]}"
    query: list[tuple[str, Any]] = [("dryRun", "All")]
    with api:
        try:
            if method == "POST":
                Kube(api).call("POST", path, obj, query)
            else:
                Kube(api).call("PATCH", f"{path}/{obj['metadata']['name']}", obj,
                               [*query, ("fieldManager", "e2e"), ("force", "true")], "application/apply-patch+yaml")
        except Denied as exc:
            return exc.status
    return 200


def test_the_webhooks_token_cannot_write_an_admission_policy_and_the_reconcilers_only_its_names(plane):
    """Issue #47 item 4: the network-facing Pods' token may create, change or delete no admission policy of any name
    nor take the reconciler's Lease; the reconciler's may apply, change and delete exactly the names compile gives
    its policy's objects (create included: the API server authorizes an apply that creates as create of that name,
    staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go), and can POST none (a POST has no name when it is
    authorized, and every create rule names its objects)."""
    cp, _, webhook, _, reconciler = plane
    serving, writer = webhook.kubeconfig, reconciler.kubeconfig
    ours = object_names("reconcile-e2e")
    for kind, plural in PLURALS.items():
        name = ours[kind][0]
        for verb in ("create", "update", "patch", "delete", "deletecollection"):
            assert not _can(serving, verb, plural) and not _can(serving, verb, plural, name), (verb, plural)
        assert _can(writer, "create", plural, name) and _can(writer, "patch", plural, name)
        assert _can(writer, "delete", plural, name) and _can(writer, "list", plural)
        assert not _can(writer, "create", plural), plural  # a POST: no name to match
        for verb in ("create", "patch", "delete", "update"):
            assert not _can(writer, verb, plural, "intruder.dra-migration.io"), (verb, plural)
            assert not _can(writer, verb, plural, "gpu-fleet-pods-deny.dra-migration.io"), (verb, plural)
    for hook in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        assert not _can(serving, "patch", hook, "dra-migration-webhook")
        assert not _can(writer, "patch", hook, "dra-migration-webhook")
    # Real requests, not only reviews (dry run: nothing is stored even where one were allowed).
    intruder = _vap("intruder.dra-migration.io")
    assert _refused(writer, "POST", intruder) == 403 and _refused(writer, "APPLY", intruder) == 403
    assert _refused(serving, "APPLY", _vap(ours["ValidatingAdmissionPolicy"][0])) == 403
    assert _refused(serving, "POST", intruder) == 403
    assert _refused(writer, "APPLY", _vap(ours["ValidatingAdmissionPolicy"][0])) == 200
    # The Leases: each identity renews its own only; the webhook reads the reconciler's (its gauges)
    lease = {"group": "coordination.k8s.io", "namespace": NAMESPACE}
    assert _can(serving, "get", "leases", LEASE_NAME, **lease) and not _can(serving, "update", "leases", LEASE_NAME,
                                                                              **lease)
    assert _can(serving, "update", "leases", "dra-webhook-gauges", **lease)
    assert _can(writer, "update", "leases", LEASE_NAME, **lease)
    assert not _can(writer, "update", "leases", "dra-webhook-gauges", **lease)
    assert not _can(writer, "create", "leases", **lease)
