"""`dra-webhook check`: the offline CI command, run as a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.helpers import ROOT, gpu_pod, review

POLICY = ROOT / "tests" / "data" / "live-policy.yaml"


def _check(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "webhook", "check", "--policy", str(POLICY), *args],
                          capture_output=True, text=True, cwd=ROOT, input=stdin, timeout=60)


def test_denied_manifest_exits_1_and_explains(tmp_path):
    f = tmp_path / "pod.yaml"
    f.write_text(yaml.safe_dump(gpu_pod(namespace="mig-a", resource="vendor.example.com/gpu")))
    result = _check(str(f))
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert "Pod mig-a/train-0" in out and "DENIED" in out and "stage migrated" in out
    assert "Deny  legacy-resource-name" in out


def test_allowed_multi_document_file_exits_0_with_patch(tmp_path):
    f = tmp_path / "pods.yaml"
    f.write_text(yaml.safe_dump_all([gpu_pod("a", "pilot-a"), gpu_pod("b", "legacy-a")]))
    result = _check(str(f), "-o", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["policy"].startswith("live-test@")
    by_name = {r["object"]: r for r in doc["results"]}
    assert set(by_name) == {"Pod pilot-a/a", "Pod legacy-a/b"}
    assert all(r["allowed"] for r in doc["results"])
    assert any(op["path"] == "/metadata/annotations" for op in by_name["Pod pilot-a/a"]["patch"])


def test_admission_review_input_and_namespace_flag(tmp_path):
    f = tmp_path / "review.json"
    f.write_text(json.dumps(review(gpu_pod(namespace="mig-a", resource="vendor.example.com/gpu"),
                                   namespace="mig-a")))
    assert _check(str(f)).returncode == 1
    pod = gpu_pod(resource="vendor.example.com/gpu")
    del pod["metadata"]["namespace"]
    g = tmp_path / "pod.json"
    g.write_text(json.dumps(pod))
    assert _check(str(g), "--namespace", "pilot-a").returncode == 0
    assert _check(str(g), "--namespace", "mig-b").returncode == 1


def test_stdin_and_input_errors_exit_2(tmp_path):
    assert _check("-", stdin=yaml.safe_dump(gpu_pod(namespace="pilot-a"))).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\n  bad: [indent\n")
    result = _check(str(bad))
    assert result.returncode == 2 and "bad.yaml:" in result.stderr and "Traceback" not in result.stderr
    missing = _check(str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr
    noapi = tmp_path / "noapi.yaml"
    noapi.write_text("metadata: {name: x}\n")
    assert _check(str(noapi)).returncode == 2


ENVSUBST_JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: registry.example.com/trainer:1.0
        resources:
          limits:
            vendor.example.com/gpu: ${GPU_PER_NODE}
---
apiVersion: v1
kind: Pod
metadata: {name: empty}
spec:
  containers:
  - name: c
    resources: {limits: {vendor.example.com/gpu: ""}}
---
apiVersion: v1
kind: Pod
metadata: {name: nothing}
spec:
  containers:
  - name: c
    resources: {limits: {vendor.example.com/gpu: null}}
"""


def test_a_quantity_that_is_none_is_an_input_error(tmp_path, capsys):
    """Issue 45 item 2: an unrendered envsubst variable or an empty string is an input error (exit 2) naming file,
    document, object, field and value, never ALLOWED with eight rule errors; ``null`` is zero (nothing asked)."""
    from webhook.cli import main

    f = tmp_path / "job.yaml"
    f.write_text(ENVSUBST_JOB)
    assert main(["check", "--policy", str(POLICY), "-n", "pilot-a", "-o", "json", str(f)]) == 2
    out = capsys.readouterr()
    assert f"input error: {f}#1: Job pilot-a/train: spec.template.spec.containers[0].resources.limits"\
        "[vendor.example.com/gpu]: '${GPU_PER_NODE}' is not a quantity" in out.err
    assert f"input error: {f}#2: Pod pilot-a/empty: spec.containers[0].resources.limits[vendor.example.com/gpu]: " \
        "'' is not a quantity" in out.err
    assert "Traceback" not in out.err
    [nothing] = json.loads(out.out)["results"]  # the others are still checked
    assert nothing["object"] == "Pod pilot-a/nothing" and nothing["allowed"] and nothing["findings"] == []


def test_broken_policy_exits_2(tmp_path):
    pol = tmp_path / "p.yaml"
    pol.write_text(POLICY.read_text().replace("defaultStage: legacy", "defaultStage: legasy"))
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(gpu_pod(namespace="pilot-a")))
    result = subprocess.run([sys.executable, "-m", "webhook", "check", "--policy", str(pol), str(pod)],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 2
    assert "p.yaml:" in result.stderr and "defaultStage" in result.stderr


def test_at_previews_a_schedule(tmp_path):
    pol = tmp_path / "p.yaml"
    pol.write_text(POLICY.read_text().replace('{stage: migrated, from: "2000-02-01"}',
                                              '{stage: migrated, from: "2999-02-01"}'))
    pod = tmp_path / "pod.yaml"
    pod.write_text(yaml.safe_dump(gpu_pod(namespace="mig-a", resource="vendor.example.com/gpu")))
    base = [sys.executable, "-m", "webhook", "check", "--policy", str(pol), str(pod)]
    assert subprocess.run(base, capture_output=True, cwd=ROOT).returncode == 0
    assert subprocess.run([*base, "--at", "2999-03-01"], capture_output=True, cwd=ROOT).returncode == 1


# The Kubernetes docs' HPA walkthrough object (kubernetes.io/docs/tasks/run-application/
# horizontal-pod-autoscale-walkthrough, "php-apache", autoscaling/v2), retargeted and with maxReplicas 400.
HPA = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
       "metadata": {"name": "gpu-hpa", "namespace": "mig-a"},
       "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "embed"},
                "minReplicas": 1, "maxReplicas": 400,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {
                    "type": "Utilization", "averageUtilization": 50}}}]}}


def _shared_claim_deployment() -> dict:
    """Two Pods naming one ResourceClaim (intel-resource-drivers-for-kubernetes external-gpu-deployment shape)."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "embed", "namespace": "mig-a"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "embed"}},
                     "template": {"metadata": {"labels": {"app": "embed"}}, "spec": {
                         "containers": [{"name": "c", "image": "registry.k8s.io/e2e-test-images/busybox:1.29-2",
                                         "resources": {"claims": [{"name": "gpu"}]}}],
                         "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared-gpus"}]}}}}


def test_an_hpa_in_the_input_is_the_cluster_view_for_its_target(tmp_path):
    alone = tmp_path / "deployment.yaml"
    alone.write_text(yaml.safe_dump(_shared_claim_deployment()))
    assert _check(str(alone)).returncode == 0
    f = tmp_path / "app.yaml"
    f.write_text(yaml.safe_dump_all([HPA, _shared_claim_deployment()]))
    result = _check(str(f))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "HorizontalPodAutoscaler mig-a/gpu-hpa" in result.stdout and "CLUSTER VIEW" in result.stdout
    assert ("up to 500 Pods (HorizontalPodAutoscaler gpu-hpa maxReplicas 400 + maxSurge) can use ResourceClaim "
            "shared-gpus") in result.stdout
    doc = json.loads(_check(str(f), "-o", "json").stdout)
    by_name = {r["object"]: r for r in doc["results"]}
    assert by_name["HorizontalPodAutoscaler mig-a/gpu-hpa"]["examined"] is True
    assert by_name["HorizontalPodAutoscaler mig-a/gpu-hpa"]["findings"] == []
    assert [f["rule"] for f in by_name["Deployment mig-a/embed"]["findings"]] == ["shared-claim-limit"]
    other = {**HPA, "spec": {**HPA["spec"], "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                               "name": "other"}}}
    f.write_text(yaml.safe_dump_all([other, _shared_claim_deployment()]))
    assert _check(str(f)).returncode == 0
