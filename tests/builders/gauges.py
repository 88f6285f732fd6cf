"""The fleet-gauge scenario: Pods and claims of each path, as the gauges collector gets them."""

from __future__ import annotations

import datetime as dt

from tests.fakeapi import device_class, exact_request, namespace, pod, resource_claim, validate
from webhook.fleet import gauges

PATH = "dra-migration.io/path"
INJECTED = "dra-migration.io/tolerations-injected"
NOW = dt.datetime(2027, 1, 20, 9, 30, tzinfo=dt.UTC)  # pilot-teams: pilot until 2027-02-01
GPU = {"example.com/gpu": 1}
EXT = {"extendedResourceClaimStatus": {"resourceClaimName": "ext-claim-abcde", "requestMappings": [
    {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}]}}


def _pod(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    obj = pod(*args, **kwargs)
    obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
    validate(obj)
    return obj


def scenario(_policy: object = None) -> gauges.ClusterObjects:
    """Pods on each path in a cohort, one drifted, one unannotated, one in no cohort, one finished."""
    pods = [
        _pod("ml-a", "on-dp", requests=GPU, annotations={PATH: "device-plugin"}),
        _pod("ml-a", "on-ext-1", requests=GPU, annotations={PATH: "dra-extended-resource"}, status=EXT),
        _pod("ml-a", "on-ext-2", requests=GPU, annotations={PATH: "dra-extended-resource"}, status=EXT),
        _pod("ml-a", "drifted", requests=GPU, annotations={PATH: "dra-extended-resource"}),
        _pod("ml-a", "on-claim", claims=[("gpu", "gpu-template")], annotations={PATH: "dra-claim"}),
        _pod("ml-a", "waiting", requests=GPU, annotations={PATH: "dra-extended-resource"}, node=None),
        _pod("ml-a", "nobody", requests=GPU),
        _pod("team-legacy", "old", requests=GPU, annotations={PATH: "device-plugin"}),
        _pod("ml-a", "done", requests=GPU, annotations={PATH: "dra-extended-resource"},
             status={**EXT, "phase": "Succeeded"}),
    ]
    claim = resource_claim("ml-a", "on-claim-gpu-x7k2p", requests=[exact_request("gpu", "gpu.example.com")],
                           owner=pods[4], annotations={INJECTED: "1"})
    return gauges.ClusterObjects(
        [namespace("ml-a"), namespace("team-legacy"), namespace("lab", {"division": "research"})],
        pods, [claim], [device_class("gpu.example.com", "example.com/gpu")],
    )
