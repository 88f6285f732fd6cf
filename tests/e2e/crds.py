"""Custom resource definitions the e2e modules install: a minimal schema that keeps every field
(``x-kubernetes-preserve-unknown-fields``), as training operators' CRDs installed with minimal schemas do."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.e2e.waits import eventually

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def preserving_crd(group: str, version: str, kind: str, plural: str) -> dict[str, Any]:
    """A namespaced CRD whose ``spec`` keeps whatever it is given (explicit nulls included)."""
    spec = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    schema = {"type": "object", "properties": {"spec": spec}}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": schema}}]}}


@contextmanager
def installed(kube: Any, crd: dict[str, Any]) -> Iterator[None]:
    """``crd`` created, established and served for the duration; deleted afterwards."""
    name = crd["metadata"]["name"]
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    api = f"{group}/{crd['spec']['versions'][0]['name']}"
    kube.call("POST", CRDS, crd)
    try:
        eventually(lambda: any(c["type"] == "Established" and c["status"] == "True"
                               for c in kube.call("GET", f"{CRDS}/{name}").obj.get("status", {}).get("conditions", [])),
                   f"CRD {name} established", 60)
        eventually(lambda: kube.call("GET", f"/apis/{api}/namespaces/default/{plural}"), f"{api} served", 30)
        yield
    finally:
        kube.call("DELETE", f"{CRDS}/{name}")
