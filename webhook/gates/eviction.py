"""Does a NoExecute device taint evict a Pod on the extended-resource path? It depends on the cluster's version.

kube-controller-manager's device-taint eviction controller (pkg/controller/devicetainteviction/
device_taint_eviction.go, ``(*Controller).podEvictionTime``, v1.36 and v1.37.0) walks only
``pod.spec.resourceClaims``; the claim kube-scheduler makes for an extended resource is named in
``pod.status.extendedResourceClaimStatus`` instead, so such a Pod is never evicted (kubernetes/kubernetes#141290,
seen on a real 1.36.2 control plane: tests/e2e/test_device_taints.py). The fix, kubernetes/kubernetes PR #142289
("DRA: include extended resource claims in pod claim iteration and taint eviction"), was still open when this was
written (last read 2026-09-23), with a cherry-pick to 1.37 asked for; no release ships it yet, so ``FIXED_IN`` is
empty. When a release ships it, add it there (the first patch of each minor that has it), or set the policy's
``spec.extendedResourceTaintEviction`` to ``evicted`` until this webhook is updated.

The answer feeds ``preflight`` (which Pods a taint evicts), the gauge
``dra_webhook_migration_taint_unevictable_pods`` and the README section "The scheduler's claims are never touched".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

ISSUE = "kubernetes/kubernetes#141290"
FIX = "kubernetes/kubernetes#142289"
MODES = ("auto", "evicted", "notEvicted")

Version = tuple[int, int, int]

#: First release of each minor that ships PR #142289. None does yet (PR open as of 2026-09-23).
FIXED_IN: tuple[Version, ...] = ()

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str | None) -> Version | None:
    """``v1.37.2``, ``v1.37.2-eks-1a2b3c``, ``1.37.0+k3s1`` -> (1, 37, 2); None when it is no version."""
    m = _VERSION.match((text or "").strip())
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def has_fix(version: Version, fixed_in: Sequence[Version]) -> bool:
    """At or after the listed release of its own minor, or on a minor newer than every listed one (branched
    from master after the fix merged)."""
    if not fixed_in:
        return False
    same_minor = [f for f in fixed_in if f[:2] == version[:2]]
    if same_minor:
        return version >= min(same_minor)
    return version[:2] > max(f[:2] for f in fixed_in)


@dataclass(frozen=True, slots=True)
class Outcome:
    """Whether the eviction controller follows the extended-resource claim, and why we think so."""

    evicted: bool
    why: str


def decide(mode: str, server_version: str | None, fixed_in: Sequence[Version] | None = None) -> Outcome:
    """The policy's ``spec.extendedResourceTaintEviction`` wins; ``auto`` reads the API server's version
    (discovery ``/version``). An unknown version keeps the behaviour every released version has: not evicted."""
    if mode == "evicted":
        return Outcome(True, "policy spec.extendedResourceTaintEviction: evicted")
    if mode == "notEvicted":
        return Outcome(False, "policy spec.extendedResourceTaintEviction: notEvicted")
    version = parse_version(server_version)
    if version is None:
        return Outcome(False, f"cluster version unknown: assumed without the fix for {ISSUE}")
    text = ".".join(map(str, version))
    if has_fix(version, FIXED_IN if fixed_in is None else fixed_in):
        return Outcome(True, f"cluster version {text} ships the fix for {ISSUE} ({FIX})")
    return Outcome(False, f"cluster version {text} predates the fix for {ISSUE} ({FIX})")
