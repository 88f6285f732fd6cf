"""A MigrationPolicy compiled for the request path.

Everything that can be worked out once is worked out here at load time: glob patterns, label
selectors, sorted schedules, lookup tables by resource name, the effective feature gates and the
policy's identity. Request-time methods are then dictionary lookups and a few comparisons.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from webhook.gates.catalogue import effective_gates, fixed_value, gate_setting_error
from webhook.gates.cluster import GateSources
from webhook.objects.pods import TemplateFinder
from webhook.policy import workload_kinds as custom_kinds
from webhook.policy.model import (
    Action,
    Cohort,
    LabelSelector,
    MigrationPolicy,
    PolicyException,
    PolicySpec,
    Resource,
    ScheduleEntry,
)
from webhook.policy.scope import MigrationScope, scope_of
from webhook.policy.slices import CompiledSlice, compile_slices


class CompileError(ValueError):
    """A semantic error found after the schema check, with the key path it concerns."""

    def __init__(self, path: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server gives every Namespace, its own name (``NamespaceDefaultLabelName``, GA in 1.22)."""


def _glob(patterns: list[str]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns))


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A compiled Kubernetes label selector (matchLabels AND matchExpressions)."""

    match_labels: tuple[tuple[str, str], ...]
    expressions: tuple[tuple[str, str, frozenset[str]], ...]

    @classmethod
    def of(cls, sel: LabelSelector) -> CompiledSelector:
        return cls(
            tuple(sel.matchLabels.items()),
            tuple((e.key, e.operator, frozenset(e.values)) for e in sel.matchExpressions),
        )

    def matches(self, labels: Mapping[str, str]) -> bool:
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, op, values in self.expressions:
            present = key in labels
            if op == "In" and (not present or labels[key] not in values):
                return False
            if op == "NotIn" and present and labels[key] in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
        return True

    def may_match(self, namespace: str) -> bool:
        """Whether the selector can select a namespace named ``namespace`` whose labels are unknown: only
        ``kubernetes.io/metadata.name`` is known (the API server sets it to the name on every Namespace), so a
        requirement on it that fails rules the namespace out; any other requirement might hold."""
        known = {NAME_LABEL: namespace}
        on_name = CompiledSelector(tuple(kv for kv in self.match_labels if kv[0] == NAME_LABEL),
                                   tuple(e for e in self.expressions if e[0] == NAME_LABEL))
        return on_name.matches(known)


@dataclass(frozen=True, slots=True)
class CompiledCohort:
    name: str
    index: int
    names: re.Pattern[str] | None
    selector: CompiledSelector | None
    schedule: tuple[ScheduleEntry, ...]  # sorted by date

    def matches(self, namespace: str, labels: Mapping[str, str] | None) -> bool:
        """Name globs OR label selector. Labels None = unknown (offline): only globs can match."""
        if self.names is not None and self.names.fullmatch(namespace):
            return True
        if self.selector is not None and labels is not None:
            return self.selector.matches(labels)
        return False

    def stage_on(self, day: dt.date, default: str) -> str:
        stage = default
        for entry in self.schedule:
            if entry.from_ <= day:
                stage = entry.stage.value
            else:
                break
        return stage

    def next_change(self, day: dt.date) -> ScheduleEntry | None:
        for entry in self.schedule:
            if entry.from_ > day:
                return entry
        return None


@dataclass(frozen=True, slots=True)
class CompiledException:
    namespaces: re.Pattern[str]
    rules: frozenset[str]
    reason: str
    expires: dt.date | None

    def covers(self, rule: str, namespace: str, day: dt.date) -> bool:
        if rule not in self.rules or not self.namespaces.fullmatch(namespace):
            return False
        return self.expires is None or day <= self.expires


@dataclass(frozen=True)
class CompiledPolicy:
    source: MigrationPolicy
    sha256: str
    files: tuple[str, ...] = ()
    name: str = ""
    prefix: str = ""
    gates: Mapping[str, bool] = field(default_factory=dict)  # with no cluster data (see gate_sources)
    gate_sources: GateSources = field(default_factory=lambda: GateSources({}, {}, frozenset()))
    resources: Mapping[str, Resource] = field(default_factory=dict)  # by requested name
    legacy: Mapping[str, Resource] = field(default_factory=dict)  # legacy name -> resource
    by_class: Mapping[str, Resource] = field(default_factory=dict)  # deviceClassName -> resource
    cohorts: tuple[CompiledCohort, ...] = ()
    exceptions: tuple[CompiledException, ...] = ()
    stage_actions: Mapping[str, Action] = field(default_factory=dict)
    rule_actions: Mapping[str, Action] = field(default_factory=dict)
    rule_error_action: Action = Action.Warn  # spec.enforcement.ruleErrors
    allowed_classes: frozenset[str] | None = None
    scope: MigrationScope = field(default_factory=lambda: scope_of((), None, None))  # spec.migration
    admin_namespaces: re.Pattern[str] | None = None
    retired: re.Pattern[str] | None = None  # spec.retiredResourceNames, compiled
    training_labels: tuple[tuple[str, str], ...] = ()
    training_keys: tuple[str, ...] = ()
    device_tolerations: tuple[dict[str, Any], ...] = ()
    workload_kinds: Mapping[tuple[str, str], custom_kinds.CustomKind] = field(default_factory=dict)  # by (group, kind)
    template_finders: Mapping[tuple[str, str], TemplateFinder] = field(default_factory=dict)  # pod_templates(named=)

    @property
    def spec(self) -> PolicySpec:
        """The pydantic spec, for rules that need raw settings."""
        return self.source.spec

    @cached_property
    def uses_namespace_labels(self) -> bool:
        """Whether any cohort selects namespaces by label (else no label lookup is needed)."""
        return any(c.selector is not None for c in self.cohorts)

    @cached_property
    def identity(self) -> str:
        """``<name>@<first 12 hex of sha256>``: what the `policy` annotation records."""
        return f"{self.name}@{self.sha256[:12]}"

    @cached_property
    def plugin_names(self) -> frozenset[str]:
        """What device-plugin nodes are taken to advertise when the policy does not say: every legacy name, and the
        own name of every resource without ``legacyNames`` (then the device plugin serves that very name, as
        NVIDIA's does ``nvidia.com/gpu``). Without the second part a fleet's legacy-stage Pods would all be
        steered to the DRA pool (issue 24 item 1); ``lint`` asks for ``advertises`` to be stated."""
        return frozenset(self.legacy) | {r.name for r in self.spec.resources if not r.legacyNames}

    @cached_property
    def advertised(self) -> Mapping[str, frozenset[str]]:
        """Pool (``dra``, ``devicePlugin``) -> extended resource names its nodes advertise in status.allocatable.

        ``nodePools.<pool>.advertises``; unset, the device-plugin pool advertises ``plugin_names`` and the DRA
        pool none.
        """
        pools = self.spec.nodePools
        defaults = {"dra": frozenset[str](), "devicePlugin": self.plugin_names}
        out: dict[str, frozenset[str]] = {}
        for name, default in defaults.items():
            pool = getattr(pools, name)
            stated = pool.advertises if pool is not None else None
            out[name] = default if stated is None else frozenset(stated)
        return out

    @cached_property
    def slices(self) -> tuple[CompiledSlice, ...]:
        """``spec.sliceNodeLabels`` compiled (``slices.slice_pin``)."""
        return compile_slices(self.spec.sliceNodeLabels)

    @cached_property
    def topology_aligned(self) -> re.Pattern[str] | None:
        """``spec.topologyAlignedResources`` compiled: device-plugin NIC/RDMA names the Topology Manager aligns."""
        return _glob(self.spec.topologyAlignedResources)

    @cached_property
    def dra_schedulers(self) -> frozenset[str]:
        """``spec.draSchedulers``: the ``schedulerName`` values whose scheduler allocates DRA claims."""
        return frozenset(self.spec.draSchedulers)

    @cached_property
    def scheduler_usernames(self) -> frozenset[str]:
        """``spec.schedulerUsernames``: who may create the scheduler's extended-resource claims."""
        return frozenset(self.spec.schedulerUsernames)

    def retires(self, name: str) -> str | None:
        """The ``retiredResourceNames`` glob that matches ``name``, or None (the name is outside the migration)."""
        if self.retired is None or not self.retired.fullmatch(name):
            return None
        return next(p for p in self.spec.retiredResourceNames if fnmatch.fnmatchcase(name, p))

    def key(self, name: str) -> str:
        """Annotation key under the policy's prefix."""
        return f"{self.prefix}/{name}"

    def cohort_for(self, namespace: str, labels: Mapping[str, str] | None) -> CompiledCohort | None:
        for cohort in self.cohorts:
            if cohort.matches(namespace, labels):
                return cohort
        return None

    def stage_candidates(self, namespace: str, day: dt.date) -> list[tuple[CompiledCohort | None, str]]:
        """The (cohort, stage on ``day``) a namespace whose labels are unknown may have, in policy order.

        The first matching cohort wins (``cohort_for``), so: every cohort with a label selector that may select
        it (``CompiledSelector.may_match``) before the first cohort its name matches, then that cohort (or,
        when its name matches none, ``None`` and the default stage). The last entry is what ``cohort_for`` answers
        without labels; the stage is known only when every entry has the same stage.
        """
        default = self.spec.defaultStage.value
        out: list[tuple[CompiledCohort | None, str]] = []
        for cohort in self.cohorts:
            if cohort.names is not None and cohort.names.fullmatch(namespace):
                out.append((cohort, cohort.stage_on(day, default)))
                return out
            if cohort.selector is not None and cohort.selector.may_match(namespace):
                out.append((cohort, cohort.stage_on(day, default)))
        out.append((None, default))
        return out

    def stage_for(self, cohort: CompiledCohort | None, now: dt.datetime) -> str:
        default = self.source.spec.defaultStage.value
        if cohort is None:
            return default
        return cohort.stage_on(now.astimezone(dt.UTC).date(), default)

    def action_for(self, rule: str, stage: str) -> Action:
        """The enforcement action before exceptions: rule override, else the stage default."""
        return self.rule_actions.get(rule) or self.stage_actions[stage]

    def without_rule(self, rule: str) -> CompiledPolicy:
        """The same policy (same identity) with ``rule`` switched Off: for "what did this rule do"."""
        return replace(self, rule_actions={**self.rule_actions, rule: Action.Off})

    def exception_for(self, rule: str, namespace: str, now: dt.datetime) -> CompiledException | None:
        day = now.astimezone(dt.UTC).date()
        for exc in self.exceptions:
            if exc.covers(rule, namespace, day):
                return exc
        return None

    def gate_enabled(self, gate: str) -> bool:
        return self.gates.get(gate, False)

    def is_training_job(self, labels: Mapping[str, str] | None, active_deadline: int | None = None) -> bool:
        """A long training job: all `trainingJobs.labels`, any of `anyLabelKeys`, or a long deadline."""
        labels = labels or {}
        if self.training_labels and all(labels.get(k) == v for k, v in self.training_labels):
            return True
        if any(k in labels for k in self.training_keys):
            return True
        min_deadline = self.source.spec.trainingJobs.minActiveDeadlineSeconds
        return bool(min_deadline and active_deadline and active_deadline >= min_deadline)


def _split_gates(spec_gates: str | Mapping[str, bool | str]) -> tuple[dict[str, bool], frozenset[str] | None]:
    """(explicit values, gates left to the cluster); None for the latter means every unset gate."""
    if isinstance(spec_gates, str):  # featureGates: auto
        return {}, None
    explicit = {k: v for k, v in spec_gates.items() if isinstance(v, bool) and k != "*"}
    if spec_gates.get("*") == "auto":
        return explicit, None
    return explicit, frozenset(k for k, v in spec_gates.items() if v == "auto" and k != "*")


def compile_policy(policy: MigrationPolicy, raw: bytes, files: tuple[str, ...] = ()) -> CompiledPolicy:
    """Compile a validated policy. Raises CompileError for cross-field mistakes."""
    spec = policy.spec
    resources, legacy, by_class = _compile_resources(spec.resources)
    cohorts = _compile_cohorts(spec.cohorts)
    gates, explicit, auto = _compile_gates(spec.kubernetesVersion, spec.featureGates)
    try:
        workload_kinds = custom_kinds.compile_kinds(spec.workloadKinds)
    except custom_kinds.DuplicateKind as exc:
        raise CompileError(("spec", "workloadKinds", exc.index, "kind"), str(exc)) from None

    return CompiledPolicy(
        source=policy,
        sha256=hashlib.sha256(raw).hexdigest(),
        files=files,
        name=policy.metadata.name,
        prefix=spec.annotationPrefix,
        gates=gates,
        gate_sources=GateSources(gates, explicit, auto),
        resources=resources,
        legacy=legacy,
        by_class=by_class,
        cohorts=tuple(cohorts),
        exceptions=tuple(_compile_exception(e) for e in spec.exceptions),
        stage_actions={
            "legacy": spec.enforcement.legacy,
            "pilot": spec.enforcement.pilot,
            "migrated": spec.enforcement.migrated,
        },
        rule_actions=dict(spec.enforcement.rules),
        rule_error_action=spec.enforcement.ruleErrors,
        allowed_classes=(
            frozenset(spec.claims.allowedDeviceClasses) if spec.claims.allowedDeviceClasses is not None else None
        ),
        scope=scope_of((r.deviceClassName for r in spec.resources), spec.migration.deviceClasses,
                       spec.migration.drivers),
        admin_namespaces=_glob(spec.claims.adminAccessNamespaces),
        retired=_glob(spec.retiredResourceNames),
        training_labels=tuple(spec.trainingJobs.labels.items()),
        training_keys=tuple(spec.trainingJobs.anyLabelKeys),
        device_tolerations=tuple(t.to_api() for t in spec.trainingJobs.deviceTolerations),
        workload_kinds=workload_kinds,
        template_finders=custom_kinds.finders(workload_kinds),
    )


def _compile_resources(
    listed: Sequence[Resource],
) -> tuple[dict[str, Resource], dict[str, Resource], dict[str, Resource]]:
    """(by name, by legacy name, by device class); each name, legacy or not, mapped once."""
    resources: dict[str, Resource] = {}
    legacy: dict[str, Resource] = {}
    by_class: dict[str, Resource] = {}
    for i, res in enumerate(listed):
        if res.name in resources or res.name in legacy:
            raise CompileError(("spec", "resources", i, "name"), f"resource {res.name!r} is listed twice")
        resources[res.name] = res
        for j, name in enumerate(res.legacyNames):
            if name in resources or name in legacy or name == res.name:
                raise CompileError(
                    ("spec", "resources", i, "legacyNames", j), f"resource name {name!r} is mapped twice"
                )
            legacy[name] = res
        by_class.setdefault(res.deviceClassName, res)
    for i, res in enumerate(listed):
        for j, name in enumerate(res.legacyNames):
            if name in resources:
                raise CompileError(
                    ("spec", "resources", i, "legacyNames", j),
                    f"{name!r} is both a legacy name and a migrated resource",
                )
    return resources, legacy, by_class


def _compile_cohorts(listed: Sequence[Cohort]) -> list[CompiledCohort]:
    """Cohorts in policy order; names unique, each with namespace names or a selector."""
    names_seen: set[str] = set()
    cohorts = []
    for i, c in enumerate(listed):
        if c.name in names_seen:
            raise CompileError(("spec", "cohorts", i, "name"), f"cohort {c.name!r} is defined twice")
        names_seen.add(c.name)
        if not c.namespaces.names and c.namespaces.selector is None:
            raise CompileError(
                ("spec", "cohorts", i, "namespaces"), "a cohort needs namespace names or a selector"
            )
        cohorts.append(_compile_cohort(i, c))
    return cohorts


def _compile_gates(
    version: str, spec_gates: str | Mapping[str, bool | str]
) -> tuple[dict[str, bool], dict[str, bool], frozenset[str]]:
    """(gates in force by default, the policy's explicit values, the gates left to the cluster)."""
    if isinstance(spec_gates, dict) and spec_gates.get("*", "auto") != "auto":
        raise CompileError(("spec", "featureGates", "*"), "'*' only takes auto (every gate not listed)")
    explicit, auto = _split_gates(spec_gates)
    try:
        gates = effective_gates(version, explicit)
    except KeyError as exc:
        gate = exc.args[0]
        raise CompileError(("spec", "featureGates", gate), f"unknown feature gate {gate!r}") from None
    for gate, value in explicit.items():  # a locked gate against its lock, a gate the version lacks
        if (why := gate_setting_error(version, gate, value)) is not None:
            raise CompileError(("spec", "featureGates", gate), why)
    if auto is None:  # "auto" for every gate the policy does not set
        auto = frozenset(gates) - frozenset(explicit)
    for gate in auto - frozenset(gates):
        raise CompileError(("spec", "featureGates", gate), f"unknown feature gate {gate!r}")
    # A gate locked (or removed as graduated) in the version has one value whatever the cluster reports.
    return gates, explicit, frozenset(g for g in auto if fixed_value(version, g) is None)


def _compile_cohort(index: int, c: Cohort) -> CompiledCohort:
    return CompiledCohort(
        name=c.name,
        index=index,
        names=_glob(c.namespaces.names),
        selector=CompiledSelector.of(c.namespaces.selector) if c.namespaces.selector else None,
        schedule=tuple(sorted(c.schedule, key=lambda e: e.from_)),
    )


def _compile_exception(e: PolicyException) -> CompiledException:
    pattern = _glob(e.namespaces) or re.compile(r"(?!)")
    return CompiledException(pattern, frozenset(e.rules), e.reason, e.expires)
