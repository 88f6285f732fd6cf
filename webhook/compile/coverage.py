"""Which rules ``compile`` turns into admission policies, and why the others stay with the webhook.

Every rule id of ``ids.RULE_IDS`` is in exactly one of ``COMPILED`` and ``NOT_COMPILED`` (checked by
tests/test_compile.py), so a new rule cannot be left out of the list silently.
"""

from __future__ import annotations

from webhook.rules import ids

CLUSTER_VIEW = "needs the cluster view"
NOT_YET = "reads only the object, not compiled yet"
CLAIM_SCOPE = ("claims, not compiled yet: the webhook gives one finding per request and subrequest, a validation one "
               "message (needs a validation per request index, up to 32 x 8); which requests are the migration's "
               f"needs the DeviceClasses when spec.migration names drivers ({CLUSTER_VIEW})")

SCOPE = ("Pods (CREATE) and the pod templates of Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs and "
         "CronJobs (CREATE, UPDATE of the template); the workload CRDs the webhook knows (JobSet, Kubeflow, KubeRay, "
         "LeaderWorkerSet, Volcano) and the policy's workloadKinds stay with the webhook")
COMPILED: dict[str, str] = {
    ids.LEGACY_RESOURCE_NAME: SCOPE,
    ids.MAX_DEVICES_PER_POD: SCOPE,
    ids.TRAINING_JOB_EXTENDED_RESOURCE: f"{SCOPE} (the same plan as track-rollout; advisory: Warn at most)",
    ids.TRACK_ROLLOUT: "MutatingAdmissionPolicies for the same kinds, on Pods and templates that name no "
                       "ResourceClaim (which claims are the migration's needs their DeviceClasses: the cluster view); "
                       "ResourceClaims, ResourceClaimTemplates and Pods with claims stay with the webhook",
    ids.INJECT_DEVICE_TOLERATIONS: "MutatingAdmissionPolicies (JSONPatch: requests and tolerations are atomic lists) "
                                   "on ResourceClaims and ResourceClaimTemplates whose own labels make them a "
                                   "training job's and whose every request names a DeviceClass of the policy's "
                                   "scope; the webhook keeps claims whose owner Pod decides "
                                   f"({CLUSTER_VIEW}), requests for other classes (a class may be in scope by its "
                                   f"driver: {CLUSTER_VIEW}) and requests that would pass 16 tolerations (its "
                                   "advisory finding is not compiled yet)",
    ids.STEER_NODE_POOL: "MutatingAdmissionPolicies (JSONPatch: nodeSelectorTerms is an atomic list) for the same "
                         "kinds, Pods with claims included (the pool needs no DeviceClass); its findings (a "
                         "constraint ruling the pool out, spec.nodeName, another scheduler) in the "
                         "ValidatingAdmissionPolicies; DaemonSets and their Pods are never steered, as in the webhook",
}
"""Rule id -> what the compiled ValidatingAdmissionPolicies cover of it."""

NOT_COMPILED: dict[str, str] = {
    ids.UNMAPPED_EXTENDED_RESOURCE: f"{CLUSTER_VIEW}: which DeviceClasses exist and map a retired name "
                                    "(extendedResourceName)",
    ids.MIXED_ALLOCATION: f"{CLUSTER_VIEW}: the DeviceClasses of the ResourceClaims and templates a Pod names",
    ids.DEVICE_CLASS_NOT_ALLOWED: f"{CLAIM_SCOPE}; a class the cluster shows is another driver's is exempt",
    ids.DEVICE_COUNT_EXCEEDS: CLAIM_SCOPE,
    ids.ALLOCATION_MODE_ALL: CLAIM_SCOPE,
    ids.ADMIN_ACCESS_NAMESPACE: CLAIM_SCOPE,
    ids.TOLERATION_TOO_BROAD: CLAIM_SCOPE,
    ids.NONSTANDARD_NUMA_ATTRIBUTE: "reads CEL selectors inside claims and DeviceClasses (needs a CEL parser); "
                                    "not compiled yet",
    ids.GATED_FEATURE: "the catalogue's field checks are Python predicates, not compiled to CEL yet; "
                       f"featureGates: auto {CLUSTER_VIEW} (the API server's gates)",
    ids.DEVICE_CLASS_TAKEOVER: f"{CLUSTER_VIEW}: the other DeviceClasses and their extendedResourceName",
    ids.SHARED_CLAIM_LIMIT: f"{CLUSTER_VIEW}: HorizontalPodAutoscalers, PodGroups and the claims' other users",
    ids.UNSATISFIABLE_CLAIM: f"{CLUSTER_VIEW}: the ResourceSlices a claim's CEL selectors must match",
}
"""Rule id -> why ``compile`` leaves it to the webhook."""


def not_compiled() -> list[dict[str, str]]:
    """``[{rule, why}]`` in rule order: what ``compile`` prints on stderr and in ``-o json``."""
    return [{"rule": r, "why": NOT_COMPILED[r]} for r in ids.RULE_IDS if r in NOT_COMPILED]


def markdown() -> str:
    """The README's table of rules, compiled or not, with what is covered or why not (tests/test_compile.py)."""
    rows = ["| rule | compiled | what the compiled policies cover, or why the webhook keeps it |", "|---|---|---|"]
    for rule in ids.RULE_IDS:
        done = rule in COMPILED
        rows.append(f"| `{rule}` | {'yes' if done else 'no'} | {COMPILED[rule] if done else NOT_COMPILED[rule]} |")
    return "\n".join(rows)
