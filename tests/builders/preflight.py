"""The eviction-preflight scenario: a DeviceTaintRule's taint, claims allocated on the tainted devices, their Pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakeapi import exact_request, pod, reserved_pod, resource_claim, validate
from webhook.fleet import preflight
from webhook.fleet.preflight import DeviceSelector, Preflight, Taint, claim_use, pod_projection
from webhook.policy.compiled import CompiledPolicy

MAINT = Taint("example.com/maintenance", "firmware", "NoExecute")


def analyse(selector: DeviceSelector | None, taint: Taint, claims: list[dict], pods: list[dict],
            policy: CompiledPolicy | None = None) -> Preflight:
    """The analysis over whole objects, through the projections the command keeps of them: the claims on
    the selected devices, and only the Pods those claims name (every answer below is what it was before
    projections; nothing dropped changes it)."""
    uses = [u for u in (claim_use(c, selector, taint) for c in claims) if u is not None]
    keep = pod_projection(uses, policy)
    return preflight.analyse(selector, taint, uses, [u for u in map(keep, pods) if u is not None], policy)


TRAINING = {"workload.example.com/kind": "training"}
DRIVER = "gpu.example.com"


def result(device: str, pool: str = "node-a", tolerations: list[dict] | None = None, request: str = "gpu") -> dict:
    r: dict[str, Any] = {"request": request, "driver": DRIVER, "pool": pool, "device": device}
    if tolerations is not None:
        r["tolerations"] = tolerations
    return r


def tol(key: str = "example.com/maintenance", operator: str = "Exists", seconds: int | None = None, **kw: str) -> dict:
    t: dict[str, Any] = {"key": key, "operator": operator, "effect": kw.get("effect", "NoExecute")}
    if not key:
        del t["key"]
    if "value" in kw:
        t["value"] = kw["value"]
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


def scenario(training_at_once: bool = True) -> tuple[list[dict], list[dict]]:
    """Three Pods on node-a GPUs: evicted at once, after 300 s, never. The first is a training job if asked."""
    labels = TRAINING if training_at_once else {"app": "notebook"}
    pods = [
        pod("ml-a", "train-0", claims=[("gpu", "gpu-plain")], labels=labels, uid="uid-train-0"),
        pod("ml-a", "serve-0", claims=[("gpu", "gpu-5min")], uid="uid-serve-0"),
        pod("ml-b", "svc-0", claims=[("gpu", "gpu-forever")], uid="uid-svc-0"),
        pod("ml-b", "elsewhere", claims=[("gpu", "gpu-plain")], uid="uid-elsewhere"),
    ]
    claims = [
        resource_claim("ml-a", "train-0-gpu-a1", requests=[exact_request("gpu", "gpu.example.com")],
                       results=[result("gpu-0")], reserved_for=[reserved_pod(pods[0])], owner=pods[0],
                       annotations={"resource.kubernetes.io/pod-claim-name": "gpu"}),
        resource_claim("ml-a", "serve-0-gpu-b2",
                       requests=[exact_request("gpu", "gpu.example.com", tolerations=[tol(seconds=300)])],
                       results=[result("gpu-1", tolerations=[tol(seconds=300)])],
                       reserved_for=[reserved_pod(pods[1])]),
        # The allocation-time copy (no seconds: tolerate forever) wins over the spec.
        resource_claim("ml-b", "svc-0-gpu-c3",
                       requests=[exact_request("gpu", "gpu.example.com", tolerations=[tol(seconds=5)])],
                       results=[result("gpu-2", tolerations=[tol()])], reserved_for=[reserved_pod(pods[2])]),
        resource_claim("ml-b", "elsewhere-gpu-d4", requests=[exact_request("gpu", "gpu.example.com")],
                       results=[result("gpu-0", pool="node-b")], reserved_for=[reserved_pod(pods[3])]),
        resource_claim("ml-b", "unallocated", requests=[exact_request("gpu", "gpu.example.com")]),
    ]
    for p, c in zip(pods, [claims[0], claims[1], claims[2], claims[3]], strict=True):
        bind(p, "gpu", c["metadata"]["name"])
    for obj in pods + claims:
        validate(obj)
    return pods, claims


def bind(p: dict, ref: str, claim: str) -> dict:
    """What the resourceclaim controller records: the generated claim's name for ``spec.resourceClaims[ref]``."""
    p.setdefault("status", {}).setdefault("resourceClaimStatuses", []).append({"name": ref, "resourceClaimName": claim})
    return p


def extended_pod_and_claim(training: bool = True) -> tuple[dict, dict]:
    """A Pod on the extended-resource path: the scheduler's claim sits in status.extendedResourceClaimStatus."""
    p = pod("ml-a", "ext-0", requests={"example.com/gpu": 1}, labels=TRAINING if training else None,
            uid="uid-ext-0", status={"extendedResourceClaimStatus": {
                "resourceClaimName": "ext-0-extended-resources-x1",
                "requestMappings": [{"containerName": "main", "resourceName": "example.com/gpu",
                                     "requestName": "container-0-request-0"}]}})
    claim = resource_claim("ml-a", "ext-0-extended-resources-x1", owner=p, reserved_for=[reserved_pod(p)],
                           requests=[exact_request("container-0-request-0", "gpu.example.com")],
                           results=[result("gpu-7", request="container-0-request-0")],
                           annotations={"resource.kubernetes.io/extended-resource-claim": "true"})
    validate(p)
    validate(claim)
    return p, claim


def run_preflight(tmp_path: Path, capsys: pytest.CaptureFixture[str], objects: list[dict], args: list[str],
                  git_version: str | None = "v1.37.0", policy: str | None = None) -> tuple[int, dict[str, Any]]:
    """``dra-webhook preflight ARGS -o json`` against a fake API server holding ``objects`` whose discovery
    ``/version`` answers ``git_version`` (None: 404); the exit code and the JSON document."""
    from tests.fakeapi import FakeAPI, write_policy
    from webhook.cli import main

    with FakeAPI() as fake:
        fake.git_version = git_version
        fake.put(*objects)
        code = main(["preflight", *args, "-o", "json", "--kubeconfig", fake.write_kubeconfig(tmp_path),
                     "--policy", policy or write_policy(tmp_path)])
    return code, json.loads(capsys.readouterr().out)
