"""The seam between rules and the cluster.

Rules ask a ``ClusterView`` for namespace labels, DeviceClasses, owner Pods and the claims a Pod names.
Offline (``check``, ``test``, ``--offline``) nothing is known and every answer is ``None``;
``webhook.cluster`` provides the live implementation backed by watches, with a strict time budget per
lookup. ``None`` always means "unknown": callers fall back to the offline behaviour and record why in
``Context.degraded``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeGuard, runtime_checkable

if TYPE_CHECKING:
    from webhook.cel_devices import DeviceAnswers, DeviceIndex

from webhook.cluster_gates import ClusterGates


class Autoscaler(NamedTuple):
    """A HorizontalPodAutoscaler scaling a workload: the most Pods it may ask for (``maxReplicas``)."""

    name: str
    min_replicas: int
    max_replicas: int


#: (namespace, target API group, target kind, target name): what an HPA's ``spec.scaleTargetRef`` names.
ScaleTarget = tuple[str, str, str, str]


@runtime_checkable
class ClusterView(Protocol):
    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """Labels of a namespace, or None when unknown (not synced, over budget, offline)."""

    def device_classes(self) -> Mapping[str, dict[str, Any]] | None:
        """DeviceClass objects by name, or None when unknown."""

    def extended_resource_classes(self) -> Mapping[str, str] | None:
        """spec.extendedResourceName -> DeviceClass name (the class the scheduler would pick), or None."""

    def device_index(self) -> DeviceAnswers | None:
        """The devices of every ResourceSlice, with selector results precomputed, or None when unknown."""

    def get_pod(self, namespace: str, name: str, uid: str | None = None) -> dict[str, Any] | None:
        """A Pod as raw JSON, checked against ``uid`` when given; None when unknown or absent."""

    def get_podgroup(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A scheduling.k8s.io PodGroup as raw JSON, or None when unknown or absent."""

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A resource.k8s.io/v1 ResourceClaim as raw JSON, or None when unknown or absent."""

    def get_resource_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A resource.k8s.io/v1 ResourceClaimTemplate as raw JSON, or None when unknown or absent."""

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Autoscaler | None:
        """The HorizontalPodAutoscaler whose scaleTargetRef names this workload (the highest maxReplicas if
        several do), or None when there is none or the view cannot tell (``degraded_reason("autoscaler")``)."""

    def feature_gates(self) -> ClusterGates | None:
        """The last background reading of the cluster's feature gates (``featureGates: auto``), or None."""

    def degraded_reason(self, kind: str) -> str | None:
        """Why this thread's last ``kind`` lookup (kind in lower case: "pod", "namespace", ...) answered None.

        A reason when it lacked data (not synced, over budget, an error); None when the view did answer
        and the object is absent; "" when this view never has data to say either (offline, static).
        """

    def status(self) -> dict[str, Any]:
        """Sync state for /readyz and logs (never fails readiness)."""


class OfflineView:
    """Knows nothing about the cluster: the behaviour of ``check``, ``test`` and ``serve --offline``."""

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return None

    def device_classes(self) -> Mapping[str, dict[str, Any]] | None:
        return None

    def extended_resource_classes(self) -> Mapping[str, str] | None:
        return None

    def device_index(self) -> DeviceIndex | None:
        return None

    def get_pod(self, namespace: str, name: str, uid: str | None = None) -> dict[str, Any] | None:
        return None

    def get_podgroup(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def get_resource_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Autoscaler | None:
        return None

    def feature_gates(self) -> ClusterGates | None:
        return None

    def degraded_reason(self, kind: str) -> str | None:
        return ""

    def status(self) -> dict[str, Any]:
        return {"mode": "offline"}


class StaticView:
    """A view over fixed objects: for tests and for ``check --cluster-objects`` style offline runs."""

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

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        if self._namespaces is None:
            return None
        return self._namespaces.get(name)

    def device_classes(self) -> Mapping[str, dict[str, Any]] | None:
        return self._classes

    def extended_resource_classes(self) -> Mapping[str, str] | None:
        if self._classes is None:
            return None
        return extended_resource_map(self._classes.values())

    def device_index(self) -> DeviceIndex | None:
        """Built on first use from ``resource_slices`` (None when none were given: unknown)."""
        if self._slices is None:
            return None
        if self._index is None:
            from webhook.cel_devices import build_index

            self._index = build_index(self._slices, (self._classes or {}).values())
        return self._index

    def get_pod(self, namespace: str, name: str, uid: str | None = None) -> dict[str, Any] | None:
        pod = self._pods.get((namespace, name))
        if pod is None or (uid and pod["metadata"].get("uid") != uid):
            return None
        return pod

    def get_podgroup(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._podgroups.get((namespace, name))

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._claims.get((namespace, name))

    def get_resource_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._claim_templates.get((namespace, name))

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Autoscaler | None:
        return self._autoscalers.get((namespace, group, kind, name))

    def feature_gates(self) -> ClusterGates | None:
        return None

    def degraded_reason(self, kind: str) -> str | None:
        return ""

    def status(self) -> dict[str, Any]:
        return {"mode": "static"}


def _by_key(objs: list[dict[str, Any]] | None) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objs or []}


def extended_resource_map(classes: Any) -> dict[str, str]:
    """extendedResourceName -> class, picking as the API does: the newest class wins, then the first name.

    Every class is also reachable through its implicit name ``deviceclass.resource.kubernetes.io/<name>``.
    """
    out: dict[str, str] = {}
    chosen: dict[str, tuple[str, str]] = {}
    for cls in classes:
        meta = cls.get("metadata", {})
        name = meta.get("name", "")
        out[f"deviceclass.resource.kubernetes.io/{name}"] = name
        ern = (cls.get("spec") or {}).get("extendedResourceName")
        if not ern:
            continue
        created = meta.get("creationTimestamp", "") or ""
        best = chosen.get(ern)
        # Later creation wins; on a tie the lexicographically first name wins.
        if best is None or created > best[0] or (created == best[0] and name < best[1]):
            chosen[ern] = (created, name)
    for ern, (_, name) in chosen.items():
        out[ern] = name
    return out


def autoscaler_target(hpa: Mapping[str, Any]) -> tuple[ScaleTarget, Autoscaler] | None:
    """What an autoscaling/v2 HorizontalPodAutoscaler scales, and its bounds; None for a malformed one.

    The HPA controller resolves ``scaleTargetRef`` by API group and kind only, the version is not used
    (kubernetes/kubernetes pkg/controller/podautoscaler/horizontal.go ``reconcileAutoscaler``:
    ``schema.GroupKind{Group: targetGV.Group, Kind: ...}`` then ``RESTMappings``; read at commit 00067268), and
    ``minReplicas`` defaults to 1 there.
    """
    meta, spec = hpa.get("metadata"), hpa.get("spec")
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return None
    ref = spec.get("scaleTargetRef")
    top, low = spec.get("maxReplicas"), spec.get("minReplicas")
    low = 1 if low is None else low
    if not isinstance(ref, Mapping) or not _count(top) or not _count(low):
        return None
    api_version, kind, target = ref.get("apiVersion", ""), ref.get("kind"), ref.get("name")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not isinstance(target, str):
        return None
    key = (str(meta.get("namespace") or ""), api_version.rpartition("/")[0], kind, target)
    return key, Autoscaler(str(meta.get("name") or ""), low, top)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def autoscaler_index(targets: Iterable[Mapping[str, Any] | tuple[ScaleTarget, Autoscaler] | None],
                     ) -> dict[ScaleTarget, Autoscaler]:
    """Scale target -> its autoscaler (HPA objects or ``autoscaler_target`` answers); the highest
    maxReplicas wins when several HPAs name one workload (the most Pods it can get)."""
    out: dict[ScaleTarget, Autoscaler] = {}
    for item in targets:
        found = autoscaler_target(item) if isinstance(item, Mapping) else item
        if found is None:
            continue
        key, hpa = found
        best = out.get(key)
        if best is None or (hpa.max_replicas, best.name) > (best.max_replicas, hpa.name):
            out[key] = hpa
    return out
