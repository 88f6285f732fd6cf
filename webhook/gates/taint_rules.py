"""What a DeviceTaintRule without ``spec.deviceSelector`` does, by the cluster's version (kubernetes#141620).

The API says "Without a selector, no devices are matched" (``DeviceTaintRuleSpec.DeviceSelector``,
staging/src/k8s.io/api/resource/v1/types.go), and the eviction controller keeps to it
(pkg/controller/devicetainteviction/device_taint_eviction.go ``ruleMatchesDevice``: false for a nil selector).
kube-scheduler does not: its ResourceSlice tracker
(staging/src/k8s.io/dynamic-resource-allocation/resourceslice/tracker/tracker.go) keys a rule by
``driverPoolDeviceIndexPatchKey``, which ``ptr.Deref``s a nil selector to the empty one (``*/*/*``, every slice),
and ``(*Tracker).applyPatches`` skips the driver, pool and device checks when the selector is nil, so the
taint lands on every device of every slice (read at 030880a5; the same code on the 1.36 and 1.37.0 line per
kubernetes/kubernetes#141648, "treated a nil selector as matching every device"). The allocator then gives
no device to a claim that does not tolerate a NoSchedule or NoExecute taint: nothing new is allocated anywhere,
while nothing is evicted. Effect ``None`` (and an effect this version does not know, treated like it) is
informational and blocks nothing. ``deviceSelector: {}`` selects every device by design (no bug).

Fixed by #141648 in 1.38.0 and its release-1.37 cherry-pick #141998, whose patch release is not known yet: the
row ``TAINT_RULE_WITHOUT_SELECTOR`` of ``webhook.gates.fixes.FIXES`` holds the versions.
"""

from __future__ import annotations

from webhook.gates.fixes import AFFECTED, FIXED, TAINT_RULE_WITHOUT_SELECTOR, Judgement, judge

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

__all__ = ["BLOCKING_EFFECTS", "TAINT_RULE_WITHOUT_SELECTOR", "blocks_allocation", "judge_omitted", "what_it_does"]


def judge_omitted(server_version: str | None, policy_version: str | None = None) -> Judgement:
    """kubernetes#141620 for the API server's version, else the policy's ``kubernetesVersion``."""
    return judge(TAINT_RULE_WITHOUT_SELECTOR, server_version, policy_version)


def blocks_allocation(judgement: Judgement, effect: str) -> bool:
    """Whether a rule without a selector may stop all new allocation: the version has (or may have) the bug
    and the effect is one the allocator honours."""
    return judgement.state != FIXED and effect in BLOCKING_EFFECTS


def what_it_does(judgement: Judgement, effect: str) -> str:
    """One sentence: what a rule without ``deviceSelector`` and with this taint effect does on this version."""
    why = judgement.describe()
    if judgement.state == FIXED:
        return f"it selects no devices ({why})"
    if effect not in BLOCKING_EFFECTS:
        return (f"kube-scheduler may mark every device with its taint, which with effect {effect} blocks nothing "
                f"({why}); with NoSchedule or NoExecute it would stop every new allocation")
    does = ("kube-scheduler applies its taint to every device in the cluster: no claim that does not tolerate it "
            "is allocated anywhere, while the eviction controller selects no device and evicts nothing")
    if judgement.state == AFFECTED:
        return f"{does} ({why}); set a deviceSelector (deviceSelector: {{}} selects every device by design)"
    return (f"where kube-scheduler lacks the fix, {does} ({why}); set a deviceSelector "
            "(deviceSelector: {} selects every device by design)")
