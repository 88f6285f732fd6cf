"""A small fleet as the API server lists it (Pods and claims of each path), for the list and preflight tests."""

from __future__ import annotations

import datetime as dt

from tests.fakeapi import device_class, exact_request, namespace, pod, resource_claim

PATH = "dra-migration.io/path"
INJECTED = "dra-migration.io/tolerations-injected"
GPU = {"example.com/gpu": 1}
EXT = {"extendedResourceClaimStatus": {"resourceClaimName": "ext-claim-abcde", "requestMappings": [
    {"containerName": "main", "resourceName": "example.com/gpu", "requestName": "container-0-request-0"}]}}
NOW = dt.datetime(2027, 1, 20, 9, 30, tzinfo=dt.UTC)


def fleet() -> list[dict]:
    """Seven Pods over two namespaces (paths, drift, no annotation, no devices, finished) and two claims."""
    pods = [
        pod("ml-a", f"p{i}", requests=GPU, annotations={PATH: "dra-extended-resource"},
            status=EXT if i % 2 else None) for i in range(4)
    ] + [
        pod("ml-a", "cpu-only"),
        pod("team-x", "old", requests=GPU, annotations={PATH: "device-plugin"}),
        pod("team-x", "done", requests=GPU, status={"phase": "Succeeded"}),
    ]
    claims = [
        resource_claim("ml-a", f"c{i}", requests=[exact_request("gpu", "gpu.example.com")],
                       annotations={INJECTED: "1"} if i else None) for i in range(2)
    ]
    return [namespace("ml-a"), namespace("team-x"), device_class("gpu.example.com", "example.com/gpu"),
            *pods, *claims]
