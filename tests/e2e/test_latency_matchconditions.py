"""The shipped matchConditions on the real API server: plain Pods never reach the webhook, GPU Pods still do.

Counted on both sides: the webhook's own request counter (``dra_webhook_admission_requests_total`` on its
``/metrics``) and the API server's ``apiserver_admission_match_condition_exclusions_total`` /
``apiserver_admission_webhook_request_total`` per webhook. The API server compiled the conditions when the
harness applied deploy/ (a CEL compile error there fails the install); here it also runs them, with
cel-go's semantics and cost budget, which tests/deploy/test_match_conditions.py can only model.
"""

from __future__ import annotations

import http.client
import ssl
from typing import Any

from tests.e2e.builders import _apiserver_counts
from tests.e2e.objects import pod

WORKLOAD_HOOKS = ("workloads.mutate.dra-migration.io", "workloads.validate.dra-migration.io")


def _webhook_creates(cluster: Any, kind: str = "Pod") -> float:
    """CREATEs of ``kind`` the webhook answered (both endpoints), from its own /metrics."""
    ctx = ssl.create_default_context(cafile=str(cluster.webhook.cert_dir / "ca.crt"))
    conn = http.client.HTTPSConnection("127.0.0.1", cluster.webhook.port, context=ctx, timeout=10)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        assert resp.status == 200, resp.status
        text = resp.read().decode()
    finally:
        conn.close()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("dra_webhook_admission_requests_total{") and f'kind="{kind}"' in line \
                and 'operation="CREATE"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_plain_pods_are_not_sent_and_gpu_pods_still_are(cluster, kube, namespace):
    ns = namespace("pilot")
    excluded_before = _apiserver_counts(kube, "apiserver_admission_match_condition_exclusions_total")
    calls_before = _webhook_creates(cluster)
    for i in range(100):
        kube.create(pod(f"plain-{i}", ns, resource=None))
    assert _webhook_creates(cluster) == calls_before, "the webhook was called for plain Pods"
    excluded = _apiserver_counts(kube, "apiserver_admission_match_condition_exclusions_total")
    for hook in WORKLOAD_HOOKS:
        assert excluded.get(hook, 0) - excluded_before.get(hook, 0) >= 100, (hook, excluded)

    sent_before = _apiserver_counts(kube, "apiserver_admission_webhook_request_total")
    created = kube.create(pod("gpu", ns)).obj
    assert created["metadata"]["annotations"]["dra-migration.io/path"] == "dra-extended-resource"
    terms = created["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert {"key": "gpu.example.com/allocation", "operator": "In", "values": ["dra"]} in \
        terms["nodeSelectorTerms"][0]["matchExpressions"]
    assert _webhook_creates(cluster) >= calls_before + 2  # /mutate and /validate
    sent = _apiserver_counts(kube, "apiserver_admission_webhook_request_total")
    for hook in WORKLOAD_HOOKS:
        assert sent.get(hook, 0) > sent_before.get(hook, 0), (hook, sent)


def test_a_device_in_an_init_container_of_a_large_pod_is_still_judged(kube, namespace):
    """200 containers with native resources only, then one init container with a legacy GPU name: the
    condition walks them all within the API server's cost budget (an exceeded budget is an evaluation
    error, which under failurePolicy Ignore would skip the webhook and let the legacy name through)."""
    ns = namespace("mig")
    containers = [{"name": f"c{i}", "image": "registry.example.com/app:1.0",
                   "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}}}
                  for i in range(200)]
    plain = pod("big", ns, resource=None)
    plain["spec"]["containers"] = containers
    assert kube.create(plain, dry_run=True).obj["metadata"].get("annotations") is None
    legacy = pod("big", ns, resource=None)
    legacy["spec"]["containers"] = containers
    legacy["spec"]["initContainers"] = [{"name": "init", "image": "registry.example.com/app:1.0",
                                         "resources": {"limits": {"vendor.example.com/gpu": "1"}}}]
    denied = kube.denial(legacy, dry_run=True)
    assert 'admission webhook "workloads.validate.dra-migration.io" denied the request' in denied.message


def test_deployment_with_a_plain_template_is_not_sent_but_a_gpu_template_is(cluster, kube, namespace):
    ns = namespace("pilot")

    def deployment(name: str, resource: str | None) -> dict[str, Any]:
        template = pod(name, ns, resource=resource, labels={"app": name})
        return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]}}}

    before = _webhook_creates(cluster, "Deployment")
    kube.create(deployment("web", None))
    assert _webhook_creates(cluster, "Deployment") == before, "the webhook was called for a plain Deployment"
    gpu = kube.create(deployment("train", "example.com/gpu")).obj
    assert gpu["spec"]["template"]["metadata"]["annotations"]["dra-migration.io/path"] == "dra-extended-resource"
    assert _webhook_creates(cluster, "Deployment") >= before + 2
