"""PolicyReports on the real control plane: the published CRDs installed, `report --apply` (run with exactly the
RBAC of deploy/policyreports/rbac.yaml) creates, updates and cleans up reports, and the API server stores them
as written (nothing pruned by the CRD's structural schema)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.e2e.conftest import DEFAULT_POLICY
from tests.e2e.kube import Denied
from tests.e2e.objects import pod
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers
ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "tests" / "data" / "policyreport"
RBAC = ROOT / "deploy" / "policyreports" / "rbac.yaml"
APIS = {
    "wgpolicyk8s.io/v1alpha2": ("wgpolicyk8s.io_policyreports.yaml", "policyreports"),
    "openreports.io/v1alpha1": ("openreports.io_reports.yaml", "reports"),
}


@pytest.fixture()
def crds(kube):
    """Both published CRDs, established; deleted after the test (cluster-scoped objects are ours to delete)."""
    names = []
    for file, _ in APIS.values():
        crd = next(d for d in yaml.safe_load_all((CRDS / file).read_text()) if d)
        kube.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        names.append(crd["metadata"]["name"])

    def established() -> bool:
        for name in names:
            got = kube.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").obj
            if not any(c["type"] == "Established" and c["status"] == "True"
                       for c in got.get("status", {}).get("conditions", [])):
                return False
        return True
    eventually(established, "the PolicyReport CRDs to be established", 60)
    yield
    for name in names:
        kube.call("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    # A CRD's deletion finishes only after the apiextensions finalizer has removed every object of it; until
    # then a POST of the same CRD answers 409 "object is being deleted" (the next parameter's setup hit that
    # in CI). Wait until both are really gone.
    eventually(lambda: all(_gone(kube, name) for name in names), "the PolicyReport CRDs to be deleted", 60)


def _gone(kube, name: str) -> bool:
    try:
        kube.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    except Denied as exc:
        if exc.status == 404:
            return True
        raise
    return False


@pytest.fixture()
def reporter_kubeconfig(cluster, kube, namespace, tmp_path):
    """A ServiceAccount bound to the documented ClusterRole, and a kubeconfig with its token."""
    ns = namespace("reporter")
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reporter", "namespace": ns}})
    role = yaml.safe_load(RBAC.read_text())
    role["metadata"]["name"] = f"dra-migration-report-{ns}"
    kube.call("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": role["metadata"]["name"]},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": role["metadata"]["name"]},
               "subjects": [{"kind": "ServiceAccount", "name": "reporter", "namespace": ns}]}
    kube.call("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    token = client.CoreV1Api(cluster.api).create_namespaced_service_account_token(
        "reporter", ns, {"spec": {"expirationSeconds": 3600}}).status.token
    yield cluster.cp.pki.kubeconfig(tmp_path / "reporter.kubeconfig", cluster.cp.server,
                                    f"system:serviceaccount:{ns}:reporter", token=token)
    kube.call("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role['metadata']['name']}")
    kube.call("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role['metadata']['name']}")


def _report(kubeconfig: Path, ns: str, api: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "report", "--kubeconfig", str(kubeconfig), "--policy", str(DEFAULT_POLICY),
         "-n", ns, "--report-api", api, *extra], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("api", sorted(APIS))
def test_apply_creates_updates_and_reads_back(cluster, kube, namespace, crds, reporter_kubeconfig, api):
    ns = namespace("pilot")
    kube.create(pod("dra", ns))
    kube.create(pod("drifted", ns, nodeName="e2e-dp-1"))  # intended DRA, bound to the device-plugin Node
    eventually(lambda: all(p["spec"].get("nodeName") for p in kube.list("v1", "Pod", ns))
               and len(kube.list("v1", "Pod", ns)) == 2, "Pods bound", 60)
    eventually(lambda: kube.get("v1", "Pod", "dra", ns).get("status", {}).get("extendedResourceClaimStatus"),
               "the DRA Pod's extended-resource claim", 60)
    _, plural = APIS[api]
    path = f"/apis/{api}/namespaces/{ns}/{plural}/dra-migration-webhook"

    run = _report(reporter_kubeconfig, ns, api, "--apply", "-o", "policyreport")
    assert run.returncode == 0, run.stderr
    assert f"created {plural}." in run.stderr
    (written,) = list(yaml.safe_load_all(run.stdout))
    stored = kube.call("GET", path).obj
    # Stored as written: the structural schema pruned nothing, so every field we write is one it knows.
    assert stored["results"] == written["results"] and stored["summary"] == written["summary"]
    assert stored["summary"]["fail"] == 1 and stored["summary"]["pass"] == 1
    (fail,) = [r for r in stored["results"] if r["result"] == "fail"]
    assert fail["resources"][0]["name"] == "drifted" and fail["source"] == "dra-migration-webhook"

    kube.delete("v1", "Pod", "drifted", ns)
    eventually(lambda: len(kube.list("v1", "Pod", ns)) == 1, "the drifted Pod gone", 60)
    run = _report(reporter_kubeconfig, ns, api, "--apply", "-o", "json")
    assert run.returncode == 0, run.stderr
    assert f"updated {plural}." in run.stderr
    stored = kube.call("GET", path).obj
    assert stored["summary"]["fail"] == 0 and stored["summary"]["pass"] == 1
