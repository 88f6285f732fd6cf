"""The real server with its cluster view on, against the local fake API server (real JSON over HTTP).

Proves the wiring end to end: `serve --kubeconfig` watches namespaces (a label change moves a namespace
between cohorts without a restart) and looks up owner Pods for template-generated claims.
"""

from __future__ import annotations

import json

import pytest

from tests import fakeapi
from tests.e2e.waits import eventually as _eventually
from tests.helpers import ROOT, apply_and_validate, gpu_pod, review, start_server

LOOKUP_BUDGET = 5.0  # seconds; explicit so the tests never depend on the production default under load


@pytest.fixture()
def cluster_server(tmp_path):
    policy = tmp_path / "cluster-policy.yaml"
    text = (ROOT / "tests/data/live-policy.yaml").read_text()
    selector_cohort = """  - name: labelled-migrated
    namespaces: {selector: {matchLabels: {gpu-migration: migrated}}}
    schedule:
    - {stage: migrated, from: "2000-01-01"}
"""
    policy.write_text(text.replace("  cohorts:\n", "  cohorts:\n" + selector_cohort, 1))
    with fakeapi.FakeAPI() as api:
        api.put(fakeapi.namespace("team-x"))
        kubeconfig = api.write_kubeconfig(tmp_path)
        # An explicit, generous lookup budget: the 0.2 s default is for production, and a loaded CI
        # machine must not turn a lookup that answers into a degraded one.
        server = start_server(tmp_path, policy, "--kubeconfig", kubeconfig, "--lookup-budget", str(LOOKUP_BUDGET),
                              workers=1, offline=False)
        try:
            yield server, api
        finally:
            server.stop()


def test_namespace_label_change_moves_cohort_through_live_watch(cluster_server):
    server, api = cluster_server
    client = server.client()
    legacy_pod = gpu_pod(namespace="team-x", resource="vendor.example.com/gpu")

    def allowed() -> bool:
        return client.admit("/validate", review(legacy_pod, namespace="team-x"))["response"]["allowed"]

    assert allowed() is True  # no cohort: legacy stage, Audit
    api.put(fakeapi.namespace("team-x", {"gpu-migration": "migrated"}))
    _eventually(lambda: allowed() is False, "team-x to become migrated")
    resp = client.admit("/validate", review(legacy_pod, namespace="team-x"))["response"]
    assert "legacy-resource-name (migrated: Deny)" in resp["status"]["message"]
    status = json.loads(client.get("/readyz")[1])
    assert status["cluster"]["mode"] == "live" and status["cluster"]["namespaces"]["synced"] is True


def test_claim_of_training_pod_gets_tolerations_via_owner_lookup(cluster_server):
    server, api = cluster_server
    client = server.client()
    (owner,) = api.put(fakeapi.pod("pilot-a", "trainer-0", claims=[("gpu", "gpu-tmpl")],
                                   labels={"workload.example.com/kind": "training"}))
    claim = fakeapi.resource_claim("pilot-a", "trainer-0-gpu-abcde",
                                   requests=[fakeapi.exact_request("gpu", "gpu.example.com", 2)],
                                   owner=owner, annotations={"resource.kubernetes.io/pod-claim-name": "gpu"})
    body = client.admit("/mutate", review(claim, namespace="pilot-a"))
    patched = apply_and_validate(claim, body)
    tolerations = patched["spec"]["devices"]["requests"][0]["exactly"]["tolerations"]
    assert {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 3600} in tolerations
    assert patched["metadata"]["annotations"]["dra-migration.io/tolerations-injected"] == "1"


def test_unknown_owner_falls_back_and_says_so(cluster_server):
    server, api = cluster_server
    client = server.client()
    ghost = {"metadata": {"name": "ghost", "uid": "00000000-0000-4000-8000-000000000000"}}
    claim = fakeapi.resource_claim("pilot-a", "ghost-gpu-abcde",
                                   requests=[fakeapi.exact_request("gpu", "gpu.example.com", 1)],
                                   owner=ghost, annotations={"resource.kubernetes.io/pod-claim-name": "gpu"})
    resp = client.admit("/mutate", review(claim, namespace="pilot-a"))["response"]
    assert resp["allowed"] is True
    patched = apply_and_validate(claim, {"response": resp})
    assert "tolerations" not in patched["spec"]["devices"]["requests"][0]["exactly"]


def test_pod_mixing_extended_resource_and_claim_template_is_denied_via_live_lookup(cluster_server):
    server, api = cluster_server
    client = server.client()
    api.put(fakeapi.namespace("mig-a"),
            fakeapi.resource_claim_template("mig-a", "gpu-tmpl",
                                            requests=[fakeapi.exact_request("gpu", "gpu.example.com")]))
    pod = fakeapi.pod("mig-a", "mixed-0", requests={"example.com/gpu": 1}, claims=[("gpu", "gpu-tmpl")], node=None)
    fakeapi.validate(pod)

    def validate(obj):
        return client.admit("/validate", review(obj, namespace="mig-a"))["response"]

    # Should the first lookup still miss the budget, its GET fills the cache for the next.
    _eventually(lambda: validate(pod)["allowed"] is False, "the template lookup to deny the Pod")
    resp = validate(pod)
    assert resp["status"]["message"].startswith("mixed-allocation (migrated: Deny): ")
    assert 'claim "gpu" asks for DeviceClass gpu.example.com' in resp["status"]["message"]
    assert [c["reason"] for c in resp["status"]["details"]["causes"]] == ["mixed-allocation"]
    assert api.count("resourceclaimtemplates", "get") >= 1

    # A template on another class is not the same hardware: allowed, and nothing was degraded.
    api.put(fakeapi.resource_claim_template("mig-a", "nic-tmpl",
                                            requests=[fakeapi.exact_request("nic", "nic.example.com")]))
    nic_pod = fakeapi.pod("mig-a", "mixed-1", requests={"example.com/gpu": 1}, claims=[("nic", "nic-tmpl")],
                          node=None)
    _eventually(lambda: "cluster-view-degraded" not in validate(nic_pod).get("auditAnnotations", {}),
                "the nic template lookup")
    assert validate(nic_pod)["allowed"] is True

    # A template that does not exist (yet) decides nothing: allowed, and the audit says why.
    ghost_pod = fakeapi.pod("mig-a", "mixed-2", requests={"example.com/gpu": 1}, claims=[("gpu", "no-such-tmpl")],
                            node=None)
    _eventually(lambda: "not found" in validate(ghost_pod).get("auditAnnotations", {}).get(
        "cluster-view-degraded", ""), "the absent template to be reported")
    assert validate(ghost_pod)["allowed"] is True
    assert ("mixed-allocation: content of claim 'gpu' unknown (ResourceClaimTemplate no-such-tmpl: not found)"
            in validate(ghost_pod)["auditAnnotations"]["cluster-view-degraded"])
