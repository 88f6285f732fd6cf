"""Scope to the migration (issue #24 item 11) on the real control plane: another DRA driver's claim is admitted
untouched and is not counted by `report`, while a GPU claim of the same shape is judged and counted.

The CPU driver's objects are kubernetes-sigs/dra-driver-cpu's published DeviceClass
(manifests/base/deviceclass-dracpu.part.yaml, commit d9354e7a) and sample claim
(hack/examples/sample_cpu_resource_claims.yaml, commit 8ec98af9), Apache-2.0: tests/data/claims.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import DEFAULT_POLICY
from tests.e2e.kube import Denied
from tests.e2e.objects import claim, pod
from tests.e2e.waits import eventually

pytestmark = pytest.mark.controllers
DATA = Path(__file__).parents[1] / "data" / "claims"
TRAINING = {"workload.example.com/kind": "training"}


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / name).read_text())


def _cpu_claim(ns: str) -> dict[str, Any]:
    obj = _load("claim-dracpu.yaml")  # 12 CPUs, the training label: above the policy's 4 per request
    obj["metadata"]["namespace"] = ns
    return obj


def _claim_pod(name: str, ns: str, claim_name: str) -> dict[str, Any]:
    p = pod(name, ns, resource=None)
    p["spec"]["resourceClaims"] = [{"name": "dev", "resourceClaimName": claim_name}]
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "dev"}]}
    return p


def _admitted(kube: Any, obj: dict[str, Any]) -> bool:
    try:
        kube.create(copy.deepcopy(obj), dry_run=True)
    except Denied:
        return False
    return True


def test_cpu_driver_claim_is_left_alone_and_not_counted(cluster, kube, namespace):
    ns = namespace("mig")  # migrated stage: every finding denies
    kube.create(_load("deviceclass-dracpu.yaml"))
    try:
        cpu = _cpu_claim(ns)
        # claims.allowedDeviceClasses lists only the GPU class; it leaves dra.cpu alone once the webhook's
        # DeviceClass watch shows the class is another driver's (until then it cannot tell a typo from it).
        eventually(lambda: _admitted(kube, cpu), "the webhook's DeviceClass watch to see dra.cpu", 30)
        created = kube.create(copy.deepcopy(cpu))
        assert created.warnings == []
        stored = kube.get("resource.k8s.io/v1", "ResourceClaim", cpu["metadata"]["name"], ns)
        [request] = stored["spec"]["devices"]["requests"]
        assert "tolerations" not in request["exactly"] and request["exactly"]["count"] == 12  # nothing injected
        assert not [k for k in stored["metadata"].get("annotations") or {} if k.startswith("dra-migration.io/")]

        gpu = claim("gpu-big", ns, count=12)
        gpu["metadata"]["labels"] = TRAINING
        denied = kube.denial(gpu)
        assert "device-count-exceeds" in denied.message and "12 devices" in denied.message
        kube.create(claim("gpu", ns, count=1) | {"metadata": {"name": "gpu", "namespace": ns, "labels": TRAINING}})
        stored_gpu = kube.get("resource.k8s.io/v1", "ResourceClaim", "gpu", ns)
        assert stored_gpu["spec"]["devices"]["requests"][0]["exactly"]["tolerations"][0]["key"] == \
            "example.com/maintenance"

        kube.create(_claim_pod("cpu-pod", ns, cpu["metadata"]["name"]))
        kube.create(_claim_pod("gpu-pod", ns, "gpu"))
        paths = {name: (kube.get("v1", "Pod", name, ns)["metadata"].get("annotations") or {}).get(
            "dra-migration.io/path") for name in ("cpu-pod", "gpu-pod")}
        assert paths == {"cpu-pod": None, "gpu-pod": "dra-claim"}
        eventually(lambda: kube.get("v1", "Pod", "gpu-pod", ns)["spec"].get("nodeName"), "the GPU Pod bound", 60)
        run = subprocess.run(
            [sys.executable, "-m", "webhook", "report", "--kubeconfig", str(cluster.cp.admin_kubeconfig),
             "--policy", str(DEFAULT_POLICY), "-n", ns, "-o", "json"],
            capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        [row] = json.loads(run.stdout)["namespaces"]
        assert row["actual"] == {"dra-claim": 1}, row  # the CPU Pod's claim is not the migration's
        assert row["claimsWithInjectedTolerations"] == 1
    finally:
        kube.delete("resource.k8s.io/v1", "DeviceClass", "dra.cpu")
