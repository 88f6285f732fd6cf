"""Quota systems beside the webhook: which DeviceClasses the cluster's Kueue counts (``spec.quota.kueue``).

Kueue (kubernetes-sigs/kueue, DRA integration beta and on by default from v0.18) charges a queued job's
ResourceClaimTemplates to its ClusterQueue through its Configuration's ``resources.deviceClassMappings``:
``pkg/dra/claims.go`` ``GetResourceRequestsForResourceClaimTemplates`` (main, read at 98e197c6) returns
``field.NotFound(... "DeviceClass %s is not mapped in DRA configuration for podset %s")`` for a class no mapping
lists, and the Workload then stays without quota (condition ``QuotaReserved=False``, reason ``Inadmissible``, as
its workload-controller tests expect), so the job stays suspended. With the integration off the claims are not
counted at all and the job escapes the queue's GPU quota. The extended-resource form (``nvidia.com/gpu: 4``) is
counted by name either way (``pkg/dra/extended_resources.go``). The webhook cannot read Kueue's Configuration:
the policy states it.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.policy.compiled import CompiledPolicy


def kueue_unmapped(policy: CompiledPolicy, classes: Iterable[str]) -> list[str]:
    """The DeviceClasses of ``classes`` the policy does not say the cluster's Kueue maps, sorted."""
    mapped = policy.source.spec.quota.kueue.mapped()
    return sorted({c for c in classes if c not in mapped})


def kueue_advice(queue: str, classes: list[str]) -> str:
    """Why claims of ``classes`` break a job Kueue queues, and what to configure first."""
    names = ", ".join(classes)
    return (f"Kueue queues it (kueue.x-k8s.io/queue-name: {queue}) and does not map DeviceClass {names} (as the "
            "policy states it): as claims Kueue keeps the job suspended (\"DeviceClass ... is not mapped in DRA "
            "configuration\"), or with its DRA integration off the claims escape the queue's quota. Map the class "
            "in Kueue's Configuration resources.deviceClassMappings (and the logical name in the ClusterQueue's "
            "coveredResources), copy that mapping into the policy's spec.quota.kueue.deviceClassMappings, then "
            "convert")
