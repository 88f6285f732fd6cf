"""Builders of the objects the scenarios create (plain dicts, as a user's manifest would be)."""

from __future__ import annotations

from typing import Any

IMAGE = "registry.example.com/trainer:1.0"


def pod(name: str, namespace: str, *, resource: str | None = "example.com/gpu", gpus: int = 1,
        labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A Pod with one container asking for ``gpus`` of ``resource`` (none when ``resource`` is None).

    ``terminationGracePeriodSeconds: 0``: there is no kubelet, so a Pod deleted with a grace period would
    stay Terminating.
    """
    container: dict[str, Any] = {"name": "trainer", "image": IMAGE}
    if resource:
        container["resources"] = {"limits": {resource: str(gpus)}}
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"terminationGracePeriodSeconds": 0, "containers": [container], **spec}}


def template_of(p: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in p["metadata"].items() if k in ("labels", "annotations")}
    return {"metadata": meta, "spec": p["spec"]}
