"""Upstream bugs whose behaviour depends on the cluster's version: one table, version -> behaviour.

Each row names a Kubernetes bug, the PR that fixes it and the first release of each minor that ships the fix
(``fixed_in``), read from kubernetes/kubernetes ``CHANGELOG/CHANGELOG-<minor>.md``. A patch release that
carries a fix adds its version to the row's ``fixed_in``; no code changes. ``backport`` names a cherry-pick that
merged into the release branch of ``backport_minor`` whose patch release is not known yet: a patch release of
that minor after its .0 is then "unknown" (``judge``), never guessed; once the changelog names the release, add
it to ``fixed_in`` and clear ``backport``/``backport_minor``.

Readers: ``webhook.gates.eviction`` (kubernetes#141290), ``webhook.gates.taint_rules`` (a DeviceTaintRule without
a selector, kubernetes#141620: ``preflight`` and ``taint-rule-without-selector``) and
``webhook.gates.class_mapping`` (the extended-resource mapping, kubernetes#141103: ``device-class-takeover``,
``device-class-mapping-removed``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Version = tuple[int, int, int]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
_MINOR = re.compile(r"^v?(\d+)\.(\d+)$")

_CL_1_38 = "CHANGELOG/CHANGELOG-1.38.md v1.38.0-alpha.1 (0411cc70)"


@dataclass(frozen=True, slots=True)
class Fix:
    """One upstream bug and the releases that no longer have it."""

    issue: str
    fix: str
    fixed_in: tuple[Version, ...]  # the first release of each minor that ships ``fix``
    source: str  # where ``fixed_in`` was read
    backport: str = ""  # a cherry-pick merged into a release branch, its patch release not known yet
    backport_minor: tuple[int, int] | None = None  # that release branch's minor

    @property
    def pending(self) -> str:
        """``fixed in 1.37.x patch carrying kubernetes/kubernetes#141998, not yet known``, or ""."""
        if not self.backport or self.backport_minor is None:
            return ""
        return f"fixed in {'.'.join(map(str, self.backport_minor))}.x patch carrying {self.backport}, not yet known"


EXTENDED_EVICTION = "extended-resource-eviction"
TAINT_RULE_WITHOUT_SELECTOR = "taint-rule-without-selector"
EXTENDED_RESOURCE_MAPPING = "extended-resource-mapping"

FIXES: Mapping[str, Fix] = {
    # "Fixed a bug where NoExecute device taints (DeviceTaintRule) did not evict pods using DRA-backed extended
    # resources (pod.Status.ExtendedResourceClaimStatus)." No release-1.37 cherry-pick is in the changelogs read.
    EXTENDED_EVICTION: Fix("kubernetes/kubernetes#141290", "kubernetes/kubernetes#142289", ((1, 38, 0),), _CL_1_38),
    # "Fixed a bug where a DeviceTaintRule with no spec.deviceSelector incorrectly matched every device
    # cluster-wide and made all DRA devices unschedulable for NoSchedule or NoExecute taints. The rule now
    # correctly matches no devices as documented. Use an explicit empty selector (deviceSelector: {}) to target
    # all devices." (the scheduler's ResourceSlice tracker, staging/src/k8s.io/dynamic-resource-allocation/
    # resourceslice/tracker/tracker.go, kubernetes#141620)
    TAINT_RULE_WITHOUT_SELECTOR: Fix(
        "kubernetes/kubernetes#141620", "kubernetes/kubernetes#141648", ((1, 38, 0),), _CL_1_38,
        # The release-1.37 cherry-pick: add the 1.37.x patch that ships it to fixed_in once its changelog lists it.
        backport="kubernetes/kubernetes#141998", backport_minor=(1, 37),
    ),
    # "Fix incorrect ExtendedResourceCache mappings when multiple DeviceClasses use the same extended resource
    # name, which could cause stale or incorrect resource-to-DeviceClass mappings after DeviceClass updates or
    # deletion." No release-1.37 cherry-pick is in the changelogs read.
    EXTENDED_RESOURCE_MAPPING: Fix("kubernetes/kubernetes#141103", "kubernetes/kubernetes#141110", ((1, 38, 0),),
                                   _CL_1_38),
}


def parse_version(text: str | None) -> Version | None:
    """``v1.37.2``, ``v1.37.2-eks-1a2b3c``, ``1.37.0+k3s1`` -> (1, 37, 2); a bare minor (a policy's
    ``kubernetesVersion: "1.37"``) reads as its .0 release; None when it is no version."""
    text = (text or "").strip()
    m = _VERSION.match(text)
    if m:
        return int(m[1]), int(m[2]), int(m[3])
    m = _MINOR.match(text)
    return (int(m[1]), int(m[2]), 0) if m else None


def has_fix(version: Version, fixed_in: Sequence[Version]) -> bool:
    """At or after the listed release of its own minor, or on a minor newer than every listed one (branched
    from master after the fix merged)."""
    if not fixed_in:
        return False
    same_minor = [f for f in fixed_in if f[:2] == version[:2]]
    if same_minor:
        return version >= min(same_minor)
    return version[:2] > max(f[:2] for f in fixed_in)


def fixed(name: str, version: str | None) -> bool | None:
    """Whether ``version`` (a server's gitVersion, or a policy's minor, read as its .0) ships the fix of row
    ``name``; None when ``version`` is no version."""
    parsed = parse_version(version)
    return None if parsed is None else has_fix(parsed, FIXES[name].fixed_in)


FIXED, AFFECTED, UNKNOWN = "fixed", "affected", "unknown"


@dataclass(frozen=True, slots=True)
class Judgement:
    """Whether one cluster has one bug: ``fixed``, ``affected`` or ``unknown`` (no version to read, or a patch
    release of a minor whose backport's release is not known), and the version it was read from."""

    name: str  # the row of FIXES
    state: str
    version: Version | None
    where: str  # "cluster version", "policy kubernetesVersion", or "" (no version)

    @property
    def version_text(self) -> str:
        return "" if self.version is None else ".".join(map(str, self.version))

    def describe(self) -> str:
        """``cluster version 1.37.0 predates the fix for kubernetes/kubernetes#141620 (fixed by ... in 1.38.0;
        fixed in 1.37.x patch carrying kubernetes/kubernetes#141998, not yet known)``."""
        row = FIXES[self.name]
        if self.version is None:
            return f"cluster version unknown: {row.issue} is in every release before its fix " \
                f"({fixed_in_text(self.name)})"
        said = f"{self.where} {self.version_text}"
        if self.state == FIXED:
            return f"{said} ships the fix for {row.issue} ({row.fix})"
        if self.state == UNKNOWN:
            return f"{said}: not known whether it ships the fix for {row.issue} ({fixed_in_text(self.name)})"
        return f"{said} predates the fix for {row.issue} ({fixed_in_text(self.name)})"


def state_of(name: str, version: Version) -> str:
    """``fixed``, ``affected``, or ``unknown`` for a patch release after .0 of the row's ``backport_minor``."""
    row = FIXES[name]
    if has_fix(version, row.fixed_in):
        return FIXED
    if row.backport and row.backport_minor == version[:2] and version[2] > 0:
        return UNKNOWN
    return AFFECTED


def judge(name: str, server_version: str | None, policy_version: str | None = None) -> Judgement:
    """Row ``name`` for the API server's version (discovery ``/version``), else the policy's
    ``kubernetesVersion`` (its .0 release); ``unknown`` with neither."""
    version, where = parse_version(server_version), "cluster version"
    if version is None and policy_version is not None:
        version, where = parse_version(policy_version), "policy kubernetesVersion"
    if version is None:
        return Judgement(name, UNKNOWN, None, "")
    return Judgement(name, state_of(name, version), version, where)


def fixed_in_text(name: str) -> str:
    """``fixed by kubernetes/kubernetes#141648 in 1.38.0`` (+ the pending backport)."""
    row = FIXES[name]
    releases = ", ".join(".".join(map(str, v)) for v in row.fixed_in) or "no release yet"
    pending = f"; {row.pending}" if row.pending else ""
    return f"fixed by {row.fix} in {releases}{pending}"
