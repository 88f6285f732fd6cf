"""What a maintenance taint would do: the pure half of ``dra-webhook preflight``.

Given a device selector with DeviceTaintRule semantics (docs/dra-1.37.md §2.3: driver, pool and device ANDed;
an empty selector selects every device, an omitted one none for the eviction controller, but every device for
kube-scheduler's allocation before the fix of kubernetes#141620: webhook/gates/taint_rules.py) and a taint,
find the allocated claims on those devices (``status.allocation.devices.results[]``), the Pods using them
(``status.reservedFor``, owner references, PodGroup members) and, for each Pod, whether a NoExecute taint
evicts it at once, after N seconds, or never (§3).

The decision mirrors kubernetes/kubernetes pkg/controller/devicetainteviction/device_taint_eviction.go
(read at commit ab3cec07, v1.36/1.37 line), ``(*Controller).podEvictionTime`` and
``(*Controller).claimEvictionTime``, and ``resourceclaim.ToleratesTaint``
(staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/toleration.go):

- only Pods with ``spec.nodeName``, not being deleted and reserved in the claim's ``reservedFor`` are evicted;
  a reservation is matched by UID, never by name (``resourceclaim.IsReservedForPod``,
  staging/src/k8s.io/dynamic-resource-allocation/resourceclaim/resourceclaim.go, 1.37: the Pod's UID, or the
  UID of the Pod's PodGroup only while ``DRAWorkloadResourceClaims`` is on), so a Pod re-created under the name
  of a reserved one is not the consumer; a generated claim belongs to its Pod through a controller owner
  reference with the Pod's UID (``resourceclaim.IsForPod``, ``metav1.IsControlledBy``);
- only claims named in ``pod.spec.resourceClaims`` count: a Pod on the extended-resource path (its claim is
  in ``status.extendedResourceClaimStatus``) is never evicted (upstream issue kubernetes/kubernetes#141290),
  so it keeps running on a device under maintenance and must be drained by hand; once the cluster runs a
  release with the fix (webhook/gates/eviction.py decides, from its version), the claim counts like the others;
- tolerations come only from ``status.allocation.devices.results[].tolerations`` (absent = none), and only
  those with effect ``NoExecute`` protect; one matching without ``tolerationSeconds`` = never evicted,
  otherwise evicted at taint time + min(max(tolerationSeconds, 0)).

Claims and Pods come in as projections (``claim_use``, ``pod_use``: what the decision reads), and the Pods
are indexed once by name and PodGroup, so the analysis is linear in claims and Pods; ``pod_projection``
lets a listing keep only the Pods the selected claims can name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from webhook.gates.fixes import Judgement
from webhook.gates.taint_rules import blocks_allocation, judge_omitted, what_it_does
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.yaml_lines import FAST_LOADER, first_alias

AT_ONCE, AFTER, NEVER = "at-once", "after", "never"
EFFECTS = ("NoExecute", "NoSchedule", "None")
WORKLOAD_CLAIMS_GATE = "DRAWorkloadResourceClaims"


class InputError(ValueError):
    """A selector, taint or rule file that cannot be used; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class DeviceSelector:
    """DeviceTaintRule ``spec.deviceSelector``: each field given must match (None = any)."""

    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def matches(self, result: Mapping[str, Any]) -> bool:
        return all(
            want is None or result.get(key) == want
            for key, want in (("driver", self.driver), ("pool", self.pool), ("device", self.device))
        )

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in (("driver", self.driver), ("pool", self.pool), ("device", self.device)) if v]
        return " ".join(parts) or "all devices"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoExecute"

    def describe(self) -> str:
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Eviction:
    """``at-once``, ``after`` (``seconds`` after the taint is added) or ``never``."""

    outcome: str
    seconds: int | None = None
    reason: str = ""  # why a Pod on a tainted device is not evicted, when that needs action

    @property
    def order(self) -> tuple[int, int]:
        """Sort key: the earliest eviction first."""
        return {AT_ONCE: (0, 0), AFTER: (1, self.seconds or 0), NEVER: (2, 0)}[self.outcome]

    def describe(self) -> str:
        if self.outcome == AT_ONCE:
            return "evicted at once"
        if self.outcome == AFTER:
            return f"evicted after {self.seconds}s"
        return f"not evicted ({self.reason})" if self.reason else "not evicted"


def load_rule(text: str, source: str = "-") -> tuple[DeviceSelector | None, Taint]:
    """Selector and taint of the one DeviceTaintRule in a YAML document. ``None`` selector = no devices."""
    rule = _the_rule(text, source)
    if not str(rule.get("apiVersion", "")).startswith("resource.k8s.io/"):
        raise InputError(f"{source}: apiVersion {rule.get('apiVersion')!r} is not resource.k8s.io/*")
    spec = rule.get("spec")
    if not isinstance(spec, dict):
        raise InputError(f"{source}: spec is missing")
    taint = _taint(spec, source)
    return _rule_selector(spec, source), taint


def _the_rule(text: str, source: str) -> dict[str, Any]:
    """The one DeviceTaintRule among the YAML documents of ``text``."""
    alias = first_alias(text)
    if alias is not None:
        raise InputError(f"{source}:{alias.line}: {alias.message}")
    try:
        docs = [d for d in yaml.load_all(text, Loader=FAST_LOADER) if d is not None]  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise InputError(f"{source}: not valid YAML: {exc}") from None
    rules = [d for d in docs if isinstance(d, dict) and d.get("kind") == "DeviceTaintRule"]
    if len(rules) != 1:
        raise InputError(f"{source}: expected exactly one DeviceTaintRule, found {len(rules)}")
    rule: dict[str, Any] = rules[0]
    return rule


def _taint(spec: dict[str, Any], source: str) -> Taint:
    taint = spec.get("taint")
    if not isinstance(taint, dict) or not taint.get("key"):
        raise InputError(f"{source}: spec.taint.key is required")
    effect = taint.get("effect")
    if not isinstance(effect, str) or not effect:
        raise InputError(f"{source}: spec.taint.effect is required (one of {', '.join(EFFECTS)})")
    # An effect this version does not know (a later Kubernetes may add some) is kept as written: it evicts
    # nothing, as "Consumers must treat unknown effects like None" (DeviceTaint.effect,
    # staging/src/k8s.io/api/resource/v1/types.go, 1.37).
    return Taint(str(taint["key"]), str(taint.get("value") or ""), effect)


def unknown_effect(effect: str) -> bool:
    """An effect Kubernetes 1.37 does not define: to be treated like ``None``."""
    return effect not in EFFECTS


def _rule_selector(spec: dict[str, Any], source: str) -> DeviceSelector | None:
    """The rule's ``deviceSelector``: only driver, pool and device exist in resource.k8s.io/v1."""
    sel = spec.get("deviceSelector")
    if sel is None:
        return None
    if not isinstance(sel, dict):
        raise InputError(f"{source}: spec.deviceSelector must be a mapping")
    unknown = set(sel) - {"driver", "pool", "device"}
    if unknown:
        raise InputError(
            f"{source}: spec.deviceSelector.{sorted(unknown)[0]} is not supported in resource.k8s.io/v1 "
            "(only driver, pool and device; deviceClassName and CEL selectors were removed in 1.35)"
        )
    return DeviceSelector(sel.get("driver") or None, sel.get("pool") or None, sel.get("device") or None)


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    """``resourceclaim.ToleratesTaint`` (upstream): an empty effect matches every effect, an empty key every
    key; ``Exists`` matches any value, ``Equal`` (or no operator) needs the same value, even with an empty key."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == taint.value


def eviction(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> Eviction:
    """What a taint does to a device user with these tolerations, as upstream ``claimEvictionTime`` decides:
    only tolerations with effect ``NoExecute`` protect (one with no effect still lets the allocator place the
    claim, but the Pod is then evicted at once); one matching without ``tolerationSeconds`` tolerates forever;
    otherwise the smallest ``max(tolerationSeconds, 0)`` wins."""
    if taint.effect != "NoExecute":
        return Eviction(NEVER)
    matching = [t for t in tolerations if t.get("effect") == "NoExecute" and tolerates(t, taint)]
    if not matching:
        return Eviction(AT_ONCE)
    seconds = [t.get("tolerationSeconds") for t in matching]
    if any(not isinstance(s, int) for s in seconds):
        return Eviction(NEVER)
    least = max(min(s for s in seconds if isinstance(s, int)), 0)
    return Eviction(AT_ONCE) if least == 0 else Eviction(AFTER, least)


# -- the analysis ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class ClaimHit:
    namespace: str
    name: str
    devices: list[str]
    eviction: Eviction
    pods: list[str] = field(default_factory=list)  # pod names in the claim's namespace


@dataclass(slots=True)
class PodImpact:
    namespace: str
    name: str
    eviction: Eviction
    training: bool | None  # None: Pod not found, or no policy to tell
    claims: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Preflight:
    selector: DeviceSelector | None
    taint: Taint
    claims: list[ClaimHit]
    pods: list[PodImpact]
    notes: list[str] = field(default_factory=list)
    omitted: Judgement | None = None  # no deviceSelector: kubernetes#141620 on this cluster's version

    @property
    def training_evicted_at_once(self) -> list[PodImpact]:
        return [p for p in self.pods if p.training and p.eviction.outcome == AT_ONCE]

    @property
    def blocked(self) -> bool:
        """Whether a training job would lose its devices with no window (``preflight`` then exits 3)."""
        return bool(self.training_evicted_at_once)

    def summary(self) -> str:
        n = len(self.pods)
        counts = {o: sum(1 for p in self.pods if p.eviction.outcome == o) for o in (AT_ONCE, AFTER, NEVER)}
        training = len(self.training_evicted_at_once)
        text = (
            f"{n} Pod{'s' if n != 1 else ''} on {len({d for c in self.claims for d in c.devices})} selected "
            f"device(s) in {len(self.claims)} claim(s): {counts[AT_ONCE]} evicted at once"
        )
        if training:
            text += f" ({training} training job{'s' if training != 1 else ''})"
        return text + f", {counts[AFTER]} after a delay, {counts[NEVER]} not evicted"

    def to_json(self, lazy: bool = False) -> dict[str, Any]:
        """The JSON document; ``lazy``: ``claims`` and ``pods`` as generators of their entries, which
        ``webhook.commands.write_json`` writes one by one (no dict of every Pod and claim in memory)."""
        def ev(e: Eviction) -> dict[str, Any]:
            return {"outcome": e.outcome, "seconds": e.seconds, **({"reason": e.reason} if e.reason else {})}

        sel = self.selector
        claims = ({"namespace": c.namespace, "claim": c.name, "devices": c.devices, "pods": c.pods, **ev(c.eviction)}
                  for c in self.claims)
        pods = ({"namespace": p.namespace, "pod": p.name, "trainingJob": p.training, "claims": p.claims,
                 "devices": p.devices, **ev(p.eviction)} for p in self.pods)
        return {
            "selector": None
            if sel is None
            else {k: v for k, v in (("driver", sel.driver), ("pool", sel.pool), ("device", sel.device)) if v},
            "taint": {"key": self.taint.key, "value": self.taint.value, "effect": self.taint.effect},
            **({} if self.omitted is None else {"selectorOmitted": {
                "bug": self.omitted.state, "version": self.omitted.version_text or None,
                "blocksAllocation": blocks_allocation(self.omitted, self.taint.effect)}}),
            "claims": claims if lazy else list(claims),
            "pods": pods if lazy else list(pods),
            "summary": self.summary(),
            "notes": self.notes,
        }


# -- projections: what preflight keeps of each claim and Pod ---------------------------------------------


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """An allocated claim with devices the selector picks: all preflight keeps of it (``claim_use``)."""

    namespace: str
    name: str
    devices: tuple[str, ...]  # driver/pool/device of the selected results
    eviction: Eviction  # the worst over the selected results
    reserved: tuple[tuple[str, str, str, str], ...]  # status.reservedFor: (apiGroup, resource, name, uid)
    owner_pod: str  # the controlling Pod (ownerReferences), or ""
    owner_uid: str = ""  # its UID: the owner is the Pod with this UID, not any Pod of that name


@dataclass(frozen=True, slots=True)
class PodUse:
    """What upstream ``podEvictionTime`` reads of a Pod, and whether it is a training job (``pod_use``)."""

    namespace: str
    name: str
    bound: bool
    deleting: bool
    claims: frozenset[str]  # claim names behind pod.spec.resourceClaims
    extended_claim: str  # status.extendedResourceClaimStatus.resourceClaimName, or ""
    pod_group: str  # spec.schedulingGroup.podGroupName, or ""
    training: bool | None  # None: no policy to tell
    uid: str = ""  # metadata.uid: what reservedFor entries and owner references name


def claim_use(claim: Mapping[str, Any], selector: DeviceSelector | None, taint: Taint) -> ClaimUse | None:
    """The claim reduced to its selected devices and consumers; None when none of its devices is selected."""
    status = claim.get("status") or {}
    results = (((status.get("allocation") or {}).get("devices") or {}).get("results")) or []
    selected = [r for r in results if selector is not None and selector.matches(r)]
    if not selected:
        return None
    # Only the allocation's copies count (claimEvictionTime); absent means no toleration.
    worst = min((eviction(r.get("tolerations") or [], taint) for r in selected), key=lambda e: e.order)
    meta = claim.get("metadata") or {}
    return ClaimUse(
        meta.get("namespace", ""), meta.get("name", ""),
        tuple(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}" for r in selected), worst,
        tuple((ref.get("apiGroup") or "", ref.get("resource") or "", ref.get("name") or "", ref.get("uid") or "")
              for ref in status.get("reservedFor") or []),
        *_owner_pod(meta))


def _owner_pod(meta: Mapping[str, Any]) -> tuple[str, str]:
    """Name and UID of the Pod controlling the claim (a claim made from a Pod's template), or ("", "")."""
    return next(((ref.get("name", ""), ref.get("uid") or "") for ref in meta.get("ownerReferences") or []
                 if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" and ref.get("controller")), ("", ""))


def pod_use(pod: Mapping[str, Any], policy: CompiledPolicy | None) -> PodUse:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    training = None if policy is None else policy.is_training_job(
        meta.get("labels") or {}, spec.get("activeDeadlineSeconds"))
    return PodUse(
        meta.get("namespace", ""), meta.get("name", ""), bool(spec.get("nodeName")),
        bool(meta.get("deletionTimestamp")), frozenset(_spec_claim_names(pod)),
        (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName") or "",
        (spec.get("schedulingGroup") or {}).get("podGroupName") or "", training, meta.get("uid") or "")


def reserving_groups(claims: Iterable[ClaimUse]) -> set[tuple[str, str]]:
    """(namespace, name) of every PodGroup a claim is reserved for: the ones whose UID is worth reading."""
    return {(c.namespace, r[2]) for c in claims for r in c.reserved if r[:2] == PODGROUP_REF}


def pod_projection(
    claims: Iterable[ClaimUse], policy: CompiledPolicy | None
) -> Callable[[Mapping[str, Any]], PodUse | None]:
    """``pod_use`` for the Pods these claims can name (by name, or as a member of a reserving PodGroup) and
    None for every other Pod, so a listing keeps only the Pods the answer is about."""
    names: set[tuple[str, str]] = set()
    groups: set[tuple[str, str]] = set()
    for c in claims:
        names.update((c.namespace, n) for n in (c.owner_pod, *(r[2] for r in c.reserved if r[:2] == POD_REF)))
        groups.update((c.namespace, r[2]) for r in c.reserved if r[:2] == PODGROUP_REF)

    def project(pod: Mapping[str, Any]) -> PodUse | None:
        meta = pod.get("metadata") or {}
        ns = meta.get("namespace", "")
        group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
        if (ns, meta.get("name", "")) in names or (group and (ns, group) in groups):
            return pod_use(pod, policy)
        return None

    return project


POD_REF = ("", "pods")
PODGROUP_REF = ("scheduling.k8s.io", "podgroups")


class _PodIndex:
    """The Pods by namespace and name, and PodGroup members by namespace and group: built once, so each
    claim's lookups are dictionary reads (linear in Pods and claims, not Pods x claims)."""

    def __init__(self, pods: Iterable[PodUse], follow_groups: bool = True,
                 group_uids: Mapping[tuple[str, str], str] | None = None) -> None:
        self.by_name: dict[tuple[str, str], PodUse] = {}
        self.members: dict[tuple[str, str], list[str]] = {}
        self.follow_groups = follow_groups
        self.group_uids = group_uids or {}  # (namespace, PodGroup) -> its UID, where it was read
        for p in pods:
            self.by_name[(p.namespace, p.name)] = p
            if p.pod_group:
                self.members.setdefault((p.namespace, p.pod_group), []).append(p.name)

    def _same(self, namespace: str, name: str, uid: str) -> bool:
        """The Pod of that name is the one meant: same UID (an entry or reference without one, which the API
        server never writes, falls back to the name)."""
        pod = self.by_name.get((namespace, name))
        return not uid or pod is None or not pod.uid or pod.uid == uid

    def reserved(self, claim: ClaimUse) -> list[str]:
        """Pod names the claim's ``reservedFor`` stands for, matched by UID: the Pods themselves, or members of a
        reserving PodGroup (only while DRAWorkloadResourceClaims is on)."""
        names: list[str] = []
        for group, resource, name, uid in claim.reserved:
            if (group, resource) == POD_REF and self._same(claim.namespace, name, uid):
                names.append(name)
            elif (group, resource) == PODGROUP_REF and self.follow_groups and self._same_group(
                    claim.namespace, name, uid):
                names += self.members.get((claim.namespace, name), [])
        return names

    def _same_group(self, namespace: str, name: str, uid: str) -> bool:
        """The PodGroup of that name is the one reserved (same UID); one not read falls back to the name."""
        current = self.group_uids.get((namespace, name))
        return not uid or not current or current == uid

    def group_reserved(self, claim: ClaimUse) -> list[str]:
        """Members of a reserving PodGroup, whether or not the gate lets the controller follow it."""
        return [n for g, r, name, _ in claim.reserved if (g, r) == PODGROUP_REF
                for n in self.members.get((claim.namespace, name), [])]

    def consumers(self, claim: ClaimUse) -> list[str]:
        """Names of the Pods using a claim: reservedFor Pods, PodGroup members, the owner Pod (by UID)."""
        owner = claim.owner_pod if self._same(claim.namespace, claim.owner_pod, claim.owner_uid) else ""
        return list(dict.fromkeys(n for n in (*self.reserved(claim), *self.group_reserved(claim), owner) if n))


# -- the analysis ----------------------------------------------------------------------------------------


def analyse(
    selector: DeviceSelector | None,
    taint: Taint,
    claims: Iterable[ClaimUse],
    pods: Iterable[PodUse],
    policy: CompiledPolicy | None = None,
    extended_evicted: bool = False,
    group_uids: Mapping[tuple[str, str], str] | None = None,
    server_version: str | None = None,
) -> Preflight:
    """Claims on the selected devices, the Pods using them, and what the taint does to each Pod.
    ``extended_evicted``: the cluster's eviction controller follows the extended-resource claim (fix of #141290);
    ``group_uids``: the current UID of reserving PodGroups, where read (a re-created group is another group);
    ``server_version``: the API server's ``gitVersion``, which says what a rule without a selector does."""
    index = _PodIndex(pods, follow_groups=_follows_pod_groups(policy), group_uids=group_uids)
    hits: list[ClaimHit] = []
    impacts: dict[tuple[str, str], PodImpact] = {}
    _judge(claims if selector is not None else (), index, hits, impacts, extended_evicted)  # no selector: none
    return _result(selector, taint, policy, hits, impacts, server_version)


def analyse_by_namespace(
    selector: DeviceSelector | None,
    taint: Taint,
    claims: dict[str, list[ClaimUse]],
    pods_in: Callable[[str], Iterable[PodUse]],
    policy: CompiledPolicy | None = None,
    extended_evicted: bool = False,
    group_uids: Mapping[tuple[str, str], str] | None = None,
    server_version: str | None = None,
) -> Preflight:
    """``analyse`` one namespace at a time, holding one namespace's Pods (``pods_in(namespace)``, called once
    per namespace with claims) instead of every claimed Pod of the cluster: a claim only reaches Pods and
    PodGroups of its own namespace. ``claims`` (by namespace, in listing order) is consumed, so the claims of
    a namespace are released once judged. Same result as ``analyse`` over all claims and Pods."""
    follow = _follows_pod_groups(policy)
    hits: list[ClaimHit] = []
    impacts: dict[tuple[str, str], PodImpact] = {}
    for ns in sorted(claims) if selector is not None else ():
        index = _PodIndex(pods_in(ns), follow_groups=follow, group_uids=group_uids)
        _judge(claims.pop(ns), index, hits, impacts, extended_evicted)
    return _result(selector, taint, policy, hits, impacts, server_version)


def _judge(claims: Iterable[ClaimUse], index: _PodIndex, hits: list[ClaimHit],
           impacts: dict[tuple[str, str], PodImpact], extended_evicted: bool) -> None:
    for claim in claims:
        hit = ClaimHit(claim.namespace, claim.name, list(claim.devices), claim.eviction, index.consumers(claim))
        hits.append(hit)
        gate_off = set() if index.follow_groups else set(index.group_reserved(claim))  # reached only with the gate
        _add_impacts(impacts, hit, set(index.reserved(claim)), index, gate_off, extended_evicted)


def _result(selector: DeviceSelector | None, taint: Taint, policy: CompiledPolicy | None, hits: list[ClaimHit],
            impacts: dict[tuple[str, str], PodImpact], server_version: str | None = None) -> Preflight:
    omitted = None if selector is not None else judge_omitted(
        server_version, None if policy is None else policy.spec.kubernetesVersion)
    notes = _input_notes(omitted, taint, policy) + _outcome_notes(hits, impacts)
    hits.sort(key=lambda h: (h.namespace, h.name))
    pods = sorted(impacts.values(), key=lambda p: (p.eviction.order, p.namespace, p.name))
    impacts.clear()
    return Preflight(selector, taint, hits, pods, notes, omitted)


def _follows_pod_groups(policy: CompiledPolicy | None) -> bool:
    """Whether a PodGroup's reservation reaches its members. Upstream passes the PodGroup to
    ``IsReservedForPod`` only with DRAWorkloadResourceClaims on; a claim reserved for a PodGroup exists only
    where it was on, so only a policy that sets the gate off explicitly (``spec.featureGates``) stops it."""
    if policy is None:
        return True
    return policy.gate_sources.explicit.get(WORKLOAD_CLAIMS_GATE, True)


def _input_notes(omitted: Judgement | None, taint: Taint, policy: CompiledPolicy | None) -> list[str]:
    """What the rule or the missing policy already tells before any claim is looked at; ``omitted``: the rule
    has no deviceSelector, and what that does on the cluster's version (webhook/gates/taint_rules.py)."""
    notes: list[str] = []
    if omitted is not None:
        notes.append(f"the rule has no deviceSelector: {what_it_does(omitted, taint.effect)}")
    if unknown_effect(taint.effect):
        notes.append(f"effect {taint.effect} is not one Kubernetes 1.37 knows: treated like None, it evicts nothing")
    elif taint.effect != "NoExecute":
        notes.append(f"effect {taint.effect} evicts nothing (only NoExecute does)")
    if policy is None:
        notes.append("no policy: training jobs are not recognised")
    return notes


def _add_impacts(
    impacts: dict[tuple[str, str], PodImpact], hit: ClaimHit, reserved: set[str], index: _PodIndex,
    group_reserved: set[str], extended_evicted: bool = False,
) -> None:
    """Record what the claim's eviction does to each of its Pods (a Pod keeps its earliest eviction)."""
    ns = hit.namespace
    for pod_name in hit.pods:
        pod = index.by_name.get((ns, pod_name))
        effect = _pod_eviction(pod, hit.name, pod_name in reserved, hit.eviction, pod_name in group_reserved,
                               extended_evicted)
        impact = impacts.get((ns, pod_name))
        if impact is None:
            training = None if pod is None else pod.training
            impact = impacts[(ns, pod_name)] = PodImpact(ns, pod_name, effect, training)
        elif effect.order < impact.eviction.order:
            impact.eviction = effect
        impact.claims.append(hit.name)
        impact.devices += [d for d in hit.devices if d not in impact.devices]


def _outcome_notes(hits: list[ClaimHit], impacts: Mapping[tuple[str, str], PodImpact]) -> list[str]:
    notes: list[str] = []
    if any(p.eviction.reason == EXTENDED_PATH for p in impacts.values()):
        notes.append(
            "Pods on the extended-resource path are not evicted by device taints (kube-controller-manager only "
            "follows pod.spec.resourceClaims, kubernetes/kubernetes#141290): they keep running on the tainted "
            "devices; drain them by hand, or move them to a claim template with tolerations"
        )
    unused = [h for h in hits if not h.pods]
    if unused:
        notes.append(f"{len(unused)} allocated claim(s) on the selected devices have no Pod using them")
    return notes


EXTENDED_PATH = "extended-resource path: drain it by hand"
NOT_RESERVED = "not in the claim's reservedFor"
GROUP_OFF = f"reserved through its PodGroup, which {WORKLOAD_CLAIMS_GATE} (off) does not follow"


def _pod_eviction(pod: PodUse | None, claim_name: str, reserved: bool, claim: Eviction,
                  group_reserved: bool = False, extended_evicted: bool = False) -> Eviction:
    """Upstream ``(*Controller).podEvictionTime``: an unbound Pod, one being deleted, or one the claim is not
    reserved for is left alone; only claims in ``pod.spec.resourceClaims`` count, so the claim of the
    extended-resource path (``status.extendedResourceClaimStatus``) never evicts (kubernetes#141290)."""
    if pod is None:
        return claim
    if not pod.bound:
        return Eviction(NEVER, reason="not bound to a node")
    if pod.deleting:
        return Eviction(NEVER, reason="already being deleted")
    if not reserved:
        return Eviction(NEVER, reason=NOT_RESERVED if pod.pod_group == "" or not group_reserved else GROUP_OFF)
    if claim_name in pod.claims:
        return claim
    if pod.extended_claim == claim_name:
        return claim if extended_evicted else Eviction(NEVER, reason=EXTENDED_PATH)
    return Eviction(NEVER, reason="claim not in pod.spec.resourceClaims")


def _spec_claim_names(pod: Mapping[str, Any]) -> set[str]:
    """Claim names behind ``pod.spec.resourceClaims``: direct names, and generated ones from
    ``status.resourceClaimStatuses`` (upstream ``resourceclaim.Name``)."""
    generated = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names: set[str] = set()
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        templated = generated.get(ref.get("name")) if ref.get("resourceClaimTemplateName") else None
        name = ref.get("resourceClaimName") or templated
        if name:
            names.add(name)
    return names
