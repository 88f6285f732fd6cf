"""kube-scheduler's extended-resource mapping when two DeviceClasses name one ``extendedResourceName``, by the
cluster's version (kubernetes/kubernetes#141103, fixed by #141110 in 1.38.0 only).

The scheduler maps names to classes in
staging/src/k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache/extendedresourcecache.go
(read at 0e2e62fb, the code before #141110: 1.36 and 1.37.0). ``(*ExtendedResourceCache).updateResourceName2class``
keeps one class per name (the newest; ties: the first name) and, for a class that loses, returns before "Always
add the default mapping", so an older class processed after a newer one with the same name (a restart lists
both) has no ``deviceclass.resource.kubernetes.io/<class>`` either. On an update it first deletes the old
object's names by key, whichever class the entry points to; ``removeResourceName2class`` (OnDelete) does the
same. So removing ``extendedResourceName`` from either of two classes, changing it, or deleting either class
leaves the name served by no class (the other one is never re-added) until kube-scheduler restarts and lists
the classes again, or the class that keeps the name is updated (any change: its update event finds the name
free and maps it; tests/e2e/test_workloads_takeover.py relies on it). Pods asking for it stay Pending until
then. With the fix (1.38.0) the cache keeps every candidate (``explicitResourceName2classes``) and picks again.

The versions are the row ``EXTENDED_RESOURCE_MAPPING`` of ``webhook.gates.fixes.FIXES``.
"""

from __future__ import annotations

from webhook.gates.fixes import EXTENDED_RESOURCE_MAPPING, FIXED, Judgement, judge

__all__ = ["EXTENDED_RESOURCE_MAPPING", "judge_mapping", "restart_advice", "unserved_until_restart"]


def judge_mapping(server_version: str | None, policy_version: str | None = None) -> Judgement:
    """kubernetes#141103 for the API server's version, else the policy's ``kubernetesVersion``."""
    return judge(EXTENDED_RESOURCE_MAPPING, server_version, policy_version)


def unserved_until_restart(judgement: Judgement) -> bool:
    """Whether removing a shared name from one class (or deleting it) may leave the name served by no class."""
    return judgement.state != FIXED


def restart_advice(judgement: Judgement, name: str, keeper: str = "") -> str:
    """``restart kube-scheduler after the change ...`` for a version with the bug (or not known to be without it),
    "" where it is fixed. ``keeper``: the class that keeps the name, whose next update maps it again (the cache
    re-adds a class on its own update event once no other class holds the name), a restart-free way out."""
    if not unserved_until_restart(judgement):
        return ""
    touch = f" (or update DeviceClass {keeper}, a label will do: its update event maps {name} again)" if keeper else ""
    return (f"restart kube-scheduler after the change{touch}: until then it serves {name} with no class, and while "
            "two classes name it an older one can lose its deviceclass.resource.kubernetes.io/<class> name "
            f"({judgement.describe()})")
