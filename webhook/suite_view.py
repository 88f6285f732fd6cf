"""A cluster described in a file (a suite's or an example's ``cluster:``), as the engine's cluster view.

Policy test suites (``webhook.suites``) and the rule examples ``explain`` runs (``webhook.rules.examples``)
describe the cluster they assume in the same shape; this is that shape and the view built from it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from webhook.view import StaticView


class Cluster(BaseModel):
    """``cluster:``: what the view knows; a key left out is unknown (as offline), not empty."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namespaces: dict[str, dict[str, str]] | None = None
    deviceClasses: list[dict[str, Any]] | None = None
    pods: list[dict[str, Any]] = Field(default_factory=list)
    podGroups: list[dict[str, Any]] = Field(default_factory=list)
    resourceClaims: list[dict[str, Any]] = Field(default_factory=list)
    resourceClaimTemplates: list[dict[str, Any]] = Field(default_factory=list)
    resourceSlices: list[dict[str, Any]] | None = None  # absent: the devices are unknown (unsatisfiable-claim)


class SuiteView(StaticView):
    """The cluster a suite describes (namespaces' labels, DeviceClasses, Pods, PodGroups, claims, templates)."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(
            namespaces=cluster.namespaces,
            device_classes=cluster.deviceClasses,
            pods=cluster.pods,
            podgroups=cluster.podGroups,
            resource_claims=cluster.resourceClaims,
            resource_claim_templates=cluster.resourceClaimTemplates,
            resource_slices=cluster.resourceSlices,
        )

    def status(self) -> dict[str, Any]:
        return {"mode": "suite"}
