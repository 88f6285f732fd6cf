"""The cluster as files describe it, as the engine's cluster view: offline, nothing is asked of a cluster.

Two sources: a suite's or an example's ``cluster:`` (``Cluster``, ``SuiteView``; policy test suites,
``webhook.offline.suites``, and the rule examples ``explain`` runs, ``webhook.rules.examples``, describe the
cluster they assume in the same shape), and the cluster objects among the inputs themselves (``input_view``:
``check``, ``convert``).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from webhook.admission import review
from webhook.gates.cluster import ClusterGates
from webhook.offline.inputs import meta_of
from webhook.rules.view import (
    OFFLINE,
    Autoscaler,
    ClusterView,
    Lookup,
    OfflineView,
    autoscaler_index,
    extended_resource_map,
)

if TYPE_CHECKING:
    from webhook.devices.selectors import DeviceAnswers, DeviceIndex

T = TypeVar("T")


class StaticView:
    """A view over fixed objects: what ``check`` (its input and ``--cluster-objects``), suites and tests describe."""

    def __init__(
        self,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        device_classes: list[dict[str, Any]] | None = None,
        pods: list[dict[str, Any]] | None = None,
        podgroups: list[dict[str, Any]] | None = None,
        resource_claims: list[dict[str, Any]] | None = None,
        resource_claim_templates: list[dict[str, Any]] | None = None,
        resource_slices: list[dict[str, Any]] | None = None,
        autoscalers: list[dict[str, Any]] | None = None,
    ) -> None:
        self._namespaces = dict(namespaces) if namespaces is not None else None
        self._classes = (
            {c["metadata"]["name"]: c for c in device_classes} if device_classes is not None else None
        )
        self._pods = {(p["metadata"].get("namespace", ""), p["metadata"]["name"]): p for p in pods or []}
        self._podgroups = {
            (p["metadata"].get("namespace", ""), p["metadata"]["name"]): p for p in podgroups or []
        }
        self._claims = _by_key(resource_claims)
        self._claim_templates = _by_key(resource_claim_templates)
        self._slices = resource_slices
        self._index: DeviceIndex | None = None
        self._autoscalers = autoscaler_index(autoscalers or ())

    # What the view was not given is OFFLINE, and so is an object it does not hold: a static view describes
    # part of a cluster, so "not here" is unknown, not absent (and, like offline, not worth a note).

    def namespace_labels(self, name: str) -> Lookup[Mapping[str, str]]:
        return _held(None if self._namespaces is None else self._namespaces.get(name))

    def device_classes(self) -> Lookup[Mapping[str, dict[str, Any]]]:
        return _held(self._classes)

    def extended_resource_classes(self) -> Lookup[Mapping[str, str]]:
        return OFFLINE if self._classes is None else Lookup(extended_resource_map(self._classes.values()))

    def device_index(self) -> Lookup[DeviceAnswers]:
        """Built on first use from ``resource_slices`` (OFFLINE when none were given)."""
        if self._slices is None:
            return OFFLINE
        if self._index is None:
            from webhook.devices.selectors import build_index

            self._index = build_index(self._slices, (self._classes or {}).values())
        return Lookup(self._index)

    def get_pod(self, namespace: str, name: str, uid: str | None = None) -> Lookup[dict[str, Any]]:
        pod = self._pods.get((namespace, name))
        if pod is None or (uid and pod["metadata"].get("uid") != uid):
            return OFFLINE
        return Lookup(pod)

    def get_podgroup(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return _held(self._podgroups.get((namespace, name)))

    def get_resource_claim(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return _held(self._claims.get((namespace, name)))

    def get_resource_claim_template(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return _held(self._claim_templates.get((namespace, name)))

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Lookup[Autoscaler]:
        return _held(self._autoscalers.get((namespace, group, kind, name)))

    def feature_gates(self) -> Lookup[ClusterGates]:
        return OFFLINE

    def status(self) -> dict[str, Any]:
        return {"mode": "static"}


def _held(value: T | None) -> Lookup[T]:
    return OFFLINE if value is None else Lookup(value)


def _by_key(objs: list[dict[str, Any]] | None) -> dict[tuple[str, str], dict[str, Any]]:
    """By (namespace, name); an object with no name yet (only ``generateName``) cannot be looked up by name."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for o in objs or []:
        meta = o.get("metadata") if isinstance(o, dict) else None
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            out[(str(meta.get("namespace") or ""), meta["name"])] = o
    return out


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


CLUSTER_KINDS = {
    ("", "Namespace"), ("resource.k8s.io", "DeviceClass"), ("resource.k8s.io", "ResourceSlice"),
    ("resource.k8s.io", "ResourceClaim"), ("resource.k8s.io", "ResourceClaimTemplate"),
    ("scheduling.k8s.io", "PodGroup"), ("autoscaling", "HorizontalPodAutoscaler"),
}
"""Kinds the rules look up in the cluster: what the view is made of (StaticView above)."""
OTHER_GROUPS = frozenset({"resource.k8s.io", "scheduling.k8s.io"})
"""Groups of the non-workload kinds the webhook judges (claims, DeviceClasses, slices, PodGroups...)."""


def examined(group: str, kind: str, named: Container[tuple[str, str]] = ()) -> bool:
    """Whether the webhook has rules for (group, kind): a known workload kind, one the policy names
    (``named``: its ``workloadKinds``) or a DRA / scheduling kind."""
    from webhook.admission.engine import handled_kinds
    from webhook.objects.pods import POD_KINDS, workload_kind

    if (group, kind) in named:
        return True
    if kind in POD_KINDS:
        return workload_kind(group, kind) is not None
    return group in OTHER_GROUPS and kind in handled_kinds()


def input_view(requests: list[review.AdmissionRequest]) -> ClusterView:
    """The cluster as the input describes it: its DeviceClasses, ResourceSlices, PodGroups, Namespaces, claims,
    claim templates and HPAs.

    Kinds the input has none of stay unknown (as offline), so a file without DeviceClasses is judged
    exactly as before.
    """
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for req in requests:
        if req.object is None or (req.group, req.kind) not in CLUSTER_KINDS:
            continue
        obj = req.object
        if req.namespace:  # templates named in a Pod are looked up in the Pod's namespace
            obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": req.namespace}}
        by_kind.setdefault(req.kind, []).append(obj)
    if not by_kind:
        return OfflineView()
    namespaces = None
    if "Namespace" in by_kind:
        namespaces = {str(meta_of(n).get("name")): dict(meta_of(n).get("labels") or {}) for n in by_kind["Namespace"]}
    return StaticView(namespaces=namespaces, device_classes=by_kind.get("DeviceClass"),
                      resource_slices=by_kind.get("ResourceSlice"), podgroups=by_kind.get("PodGroup"),
                      resource_claims=by_kind.get("ResourceClaim"),
                      resource_claim_templates=by_kind.get("ResourceClaimTemplate"),
                      autoscalers=by_kind.get("HorizontalPodAutoscaler"))
