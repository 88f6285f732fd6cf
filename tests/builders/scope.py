"""Migration-scope helpers: the claims policy with a chosen migration scope, and a scoped fleet scenario."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yaml

from webhook.fleet import gauges
from webhook.policy.compiled import CompiledPolicy, compile_policy
from webhook.policy.model import MigrationPolicy

DATA = Path(__file__).parents[1] / "data" / "claims"
MIGRATED = dt.datetime(2027, 3, 1, tzinfo=dt.UTC)  # ml-* is in stage migrated: findings deny


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((DATA / name).read_text())


def policy(**migration: Any) -> CompiledPolicy:
    """The claim tests' policy with ``spec.migration`` replaced (nothing given: the default scope)."""
    doc = load("policy.yaml")
    doc["spec"]["migration"] = migration
    doc["spec"]["claims"].pop("allowedDeviceClasses")
    return compile_policy(MigrationPolicy.model_validate(doc), yaml.safe_dump(doc).encode())


def gpu_claim(class_name: str = "gpu.example.com") -> dict[str, Any]:
    """The CPU sample's shape, for a GPU class: 12 devices, above the policy's limit of 8."""
    obj = load("claim-dracpu.yaml")
    obj["metadata"]["name"] = "gpu-request"
    obj["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = class_name
    return obj


def _claim_pod(name: str, claim: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml-a"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}],
                     "resourceClaims": [{"name": "r", "resourceClaimName": claim}]},
            "status": {"phase": "Running"}}


def _scenario() -> gauges.ClusterObjects:
    pods = [_claim_pod("cpu-pod", "cpu-request-4-cpus"), _claim_pod("gpu-pod", "gpu-request")]
    pods[0]["metadata"]["annotations"] = {"dra-migration.io/path": "dra-claim"}  # written before the scope
    return gauges.ClusterObjects(namespaces=[{"metadata": {"name": "ml-a"}}], pods=pods,
                                 claims=[load("claim-dracpu.yaml"), gpu_claim()],
                                 device_classes=[load("deviceclass-dracpu.yaml")])
