"""Does a NoExecute device taint evict a Pod on the extended-resource path? It depends on the cluster's version.

kube-controller-manager's device-taint eviction controller (pkg/controller/devicetainteviction/
device_taint_eviction.go, ``(*Controller).podEvictionTime``, v1.36 and v1.37.0) walks only
``pod.spec.resourceClaims``; the claim kube-scheduler makes for an extended resource is named in
``pod.status.extendedResourceClaimStatus`` instead, so such a Pod is never evicted (kubernetes/kubernetes#141290,
seen on a real 1.36.2 control plane: tests/e2e/test_device_taints.py). The fix, kubernetes/kubernetes PR #142289
("DRA: include extended resource claims in pod claim iteration and taint eviction"), is in v1.38.0-alpha.1
(CHANGELOG/CHANGELOG-1.38.md): 1.38.0 evicts such Pods. No 1.37 patch release is known to carry it. The versions
are a row of the one version table, ``webhook.gates.fixes.FIXES``; add a patch release there when its changelog
lists the fix, or set the policy's ``spec.extendedResourceTaintEviction`` until this webhook is updated.

The answer feeds ``preflight`` (which Pods a taint evicts), the gauge
``dra_webhook_migration_taint_unevictable_pods``, ``training-job-extended-resource`` (from the policy's
``kubernetesVersion``) and the README section "The scheduler's claims are never touched".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from webhook.gates.fixes import EXTENDED_EVICTION, FIXES, Version, has_fix, parse_version

__all__ = ["FIX", "FIXED_IN", "ISSUE", "MODES", "Outcome", "decide", "has_fix", "parse_version"]

ISSUE = FIXES[EXTENDED_EVICTION].issue
FIX = FIXES[EXTENDED_EVICTION].fix
MODES = ("auto", "evicted", "notEvicted")

#: First release of each minor that ships PR #142289 (the row of webhook.gates.fixes.FIXES).
FIXED_IN: tuple[Version, ...] = FIXES[EXTENDED_EVICTION].fixed_in


@dataclass(frozen=True, slots=True)
class Outcome:
    """Whether the eviction controller follows the extended-resource claim, and why we think so."""

    evicted: bool
    why: str


def decide(mode: str, server_version: str | None, fixed_in: Sequence[Version] | None = None,
           policy_version: str | None = None) -> Outcome:
    """The policy's ``spec.extendedResourceTaintEviction`` wins; ``auto`` reads the API server's version
    (discovery ``/version``), else the policy's ``kubernetesVersion`` (its .0 release). With neither known it
    keeps the behaviour of 1.36 and 1.37.0: not evicted."""
    if mode == "evicted":
        return Outcome(True, "policy spec.extendedResourceTaintEviction: evicted")
    if mode == "notEvicted":
        return Outcome(False, "policy spec.extendedResourceTaintEviction: notEvicted")
    version = parse_version(server_version)
    where = "cluster version"
    if version is None and policy_version is not None:
        version, where = parse_version(policy_version), "policy kubernetesVersion"
    if version is None:
        return Outcome(False, f"cluster version unknown: assumed without the fix for {ISSUE}")
    text = ".".join(map(str, version))
    if has_fix(version, FIXED_IN if fixed_in is None else fixed_in):
        return Outcome(True, f"{where} {text} ships the fix for {ISSUE} ({FIX})")
    return Outcome(False, f"{where} {text} predates the fix for {ISSUE} ({FIX})")
