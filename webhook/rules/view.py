"""The seam between rules and the cluster.

Rules ask a ``ClusterView`` for namespace labels, DeviceClasses, owner Pods and the claims a Pod names. Every
lookup returns a ``Lookup``: found (with the value), absent (the view knows there is none), or unknown with the
reason (not synced, over budget, an error). The answer and its reason travel together, so a rule returns its
degradation in its ``Outcome`` and nothing is kept per thread. Offline (``check``, ``test``, ``--offline``) every
answer is ``OFFLINE``: unknown, and the view never has data, so rules record no degradation for it.
``webhook.cluster.live_view`` provides the live implementation backed by watches, with a strict time budget per lookup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeGuard, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from webhook.devices.selectors import DeviceAnswers

from webhook.gates.cluster import ClusterGates

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Lookup(Generic[T]):
    """A cluster-view answer: found (``value``), absent (neither), or unknown (``reason``, never with a value).

    ``reason`` is ``""`` for a view that never has cluster data (``OFFLINE``): unknown, but nothing to report
    (controller-runtime style: the error is a value, not a side channel).
    """

    value: T | None = None
    reason: str | None = None

    @staticmethod
    def found(value: T) -> Lookup[T]:
        return Lookup(value)

    @staticmethod
    def of(value: T | None) -> Lookup[T]:
        """Found when ``value`` is not None, else ``ABSENT``: for a view that knows everything it holds."""
        return ABSENT if value is None else Lookup(value)

    @staticmethod
    def unknown(reason: str) -> Lookup[Any]:
        return Lookup(None, reason)

    @property
    def is_found(self) -> bool:
        return self.value is not None

    @property
    def is_absent(self) -> bool:
        return self.value is None and self.reason is None

    @property
    def is_unknown(self) -> bool:
        return self.reason is not None

    @property
    def degraded(self) -> str | None:
        """Why a view that could have had the data lacked it; None when found, absent, or ``OFFLINE``."""
        return self.reason or None


#: The view answered: there is no such object.
ABSENT: Lookup[Any] = Lookup()
#: Unknown, and this view never has cluster data (offline, static and suite views): nothing degraded.
OFFLINE: Lookup[Any] = Lookup(None, "")


class Autoscaler(NamedTuple):
    """A HorizontalPodAutoscaler scaling a workload: the most Pods it may ask for (``maxReplicas``)."""

    name: str
    min_replicas: int
    max_replicas: int


#: (namespace, target API group, target kind, target name): what an HPA's ``spec.scaleTargetRef`` names.
ScaleTarget = tuple[str, str, str, str]


@runtime_checkable
class ClusterView(Protocol):
    """What rules may ask of the cluster. Every answer is a ``Lookup``; none blocks past the view's budget."""

    def namespace_labels(self, name: str) -> Lookup[Mapping[str, str]]:
        """Labels of a namespace."""

    def device_classes(self) -> Lookup[Mapping[str, dict[str, Any]]]:
        """DeviceClass objects by name."""

    def extended_resource_classes(self) -> Lookup[Mapping[str, str]]:
        """spec.extendedResourceName -> DeviceClass name (the class the scheduler would pick)."""

    def device_index(self) -> Lookup[DeviceAnswers]:
        """The devices of every ResourceSlice, with selector results precomputed (here or in the device process)."""

    def get_pod(self, namespace: str, name: str, uid: str | None = None) -> Lookup[dict[str, Any]]:
        """A Pod as raw JSON; absent when its uid is not ``uid`` (given): the owner was replaced."""

    def get_podgroup(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        """A scheduling.k8s.io PodGroup as raw JSON."""

    def get_resource_claim(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        """A resource.k8s.io/v1 ResourceClaim as raw JSON."""

    def get_resource_claim_template(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        """A resource.k8s.io/v1 ResourceClaimTemplate as raw JSON."""

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Lookup[Autoscaler]:
        """The HorizontalPodAutoscaler whose scaleTargetRef names this workload (the highest maxReplicas if
        several do); absent when none does."""

    def feature_gates(self) -> Lookup[ClusterGates]:
        """The last background reading of the cluster's feature gates (``featureGates: auto``)."""

    def status(self) -> dict[str, Any]:
        """Sync state for /readyz and logs (never fails readiness)."""


class OfflineView:
    """Knows nothing about the cluster: the behaviour of ``check``, ``test`` and ``serve --offline``."""

    def namespace_labels(self, name: str) -> Lookup[Mapping[str, str]]:
        return OFFLINE

    def device_classes(self) -> Lookup[Mapping[str, dict[str, Any]]]:
        return OFFLINE

    def extended_resource_classes(self) -> Lookup[Mapping[str, str]]:
        return OFFLINE

    def device_index(self) -> Lookup[DeviceAnswers]:
        return OFFLINE

    def get_pod(self, namespace: str, name: str, uid: str | None = None) -> Lookup[dict[str, Any]]:
        return OFFLINE

    def get_podgroup(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return OFFLINE

    def get_resource_claim(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return OFFLINE

    def get_resource_claim_template(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return OFFLINE

    def autoscaler(self, namespace: str, group: str, kind: str, name: str) -> Lookup[Autoscaler]:
        return OFFLINE

    def feature_gates(self) -> Lookup[ClusterGates]:
        return OFFLINE

    def status(self) -> dict[str, Any]:
        return {"mode": "offline"}


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
