"""Which rules ``compile`` turns into admission policies, and why the others stay with the webhook.

Every rule id of ``ids.RULE_IDS`` is in exactly one of ``COMPILED`` and ``NOT_COMPILED`` (checked by
tests/compile/test_compile.py), so a new rule cannot be left out of the list silently.
"""

from __future__ import annotations

from webhook.policy import rule_ids as ids

CLUSTER_VIEW = "needs the cluster view"
NOT_YET = "reads only the object, not compiled yet"
SCOPE = ("Pods (CREATE) and the pod templates of Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs and "
         "CronJobs (CREATE, UPDATE of the template); the workload CRDs the webhook knows (JobSet, Kubeflow, KubeRay, "
         "LeaderWorkerSet, Volcano) and the policy's workloadKinds stay with the webhook")
CLAIMS = ("ResourceClaims and ResourceClaimTemplates (CREATE) whose every request names a DeviceClass of the "
          "migration scope's classes (spec.migration.deviceClasses, else the classes resources map); a claim naming "
          "another class stays with the webhook (whether it is the migration's needs the cluster's DeviceClasses); "
          "up to 4 warnings per claim word for word, past that the 4th says how many more")
COMPILED: dict[str, str] = {
    ids.LEGACY_RESOURCE_NAME: SCOPE,
    ids.MAX_DEVICES_PER_POD: SCOPE,
    ids.DEVICE_CLASS_NOT_ALLOWED: f"{CLAIMS}; a Pod's implicit class names stay with the webhook",
    ids.DEVICE_COUNT_EXCEEDS: CLAIMS,
    ids.ALLOCATION_MODE_ALL: CLAIMS,
    ids.ADMIN_ACCESS_NAMESPACE: CLAIMS,
    ids.TOLERATION_TOO_BROAD: CLAIMS,
    ids.TRAINING_JOB_EXTENDED_RESOURCE: f"{SCOPE} (the same plan as track-rollout; advisory: Warn at most)",
    ids.TRACK_ROLLOUT: "MutatingAdmissionPolicies for the same kinds (one per layout, shared with steer-node-pool), "
                       "on Pods and templates that name no "
                       "ResourceClaim (which claims are the migration's needs their DeviceClasses: the cluster view); "
                       "ResourceClaims, ResourceClaimTemplates and Pods with claims stay with the webhook",
    ids.INJECT_DEVICE_TOLERATIONS: "MutatingAdmissionPolicies (JSONPatch: requests and tolerations are atomic lists) "
                                   "on ResourceClaims and ResourceClaimTemplates whose own labels make them a "
                                   "training job's and whose every request names a DeviceClass of the policy's "
                                   "scope; the webhook keeps claims whose owner Pod decides "
                                   f"({CLUSTER_VIEW}), requests for other classes (a class may be in scope by its "
                                   f"driver: {CLUSTER_VIEW}) and requests that would pass 16 tolerations (its "
                                   "advisory finding is not compiled yet)",
    ids.STEER_NODE_POOL: "MutatingAdmissionPolicies (JSONPatch: nodeSelectorTerms is an atomic list; one per layout, "
                         "shared with track-rollout) for the same "
                         "kinds, Pods with claims included (the pool needs no DeviceClass); its findings (a "
                         "constraint ruling the pool out, spec.nodeName, another scheduler) in the "
                         "ValidatingAdmissionPolicies; DaemonSets and their Pods are never steered, as in the webhook",
}
"""Rule id -> what the compiled ValidatingAdmissionPolicies cover of it."""

NOT_COMPILED: dict[str, str] = {
    ids.UNMAPPED_EXTENDED_RESOURCE: f"{CLUSTER_VIEW}: which DeviceClasses exist and map a retired name "
                                    "(extendedResourceName)",
    ids.MIXED_ALLOCATION: f"{CLUSTER_VIEW}: the DeviceClasses of the ResourceClaims and templates a Pod names",
    ids.NONSTANDARD_NUMA_ATTRIBUTE: "reads CEL selectors inside claims and DeviceClasses (needs a CEL parser); "
                                    "not compiled yet",
    ids.GATED_FEATURE: "the API server drops a field whose gate is off between mutating and validating admission "
                       "(the strategy's PrepareForCreate), so a ValidatingAdmissionPolicy never sees it, and a "
                       "MutatingAdmissionPolicy, which does, cannot warn or deny (shown on v1.36.2 by "
                       "tests/e2e/test_compiled_policies.py); featureGates: auto also "
                       f"{CLUSTER_VIEW} (the API server's gates)",
    ids.DEVICE_CLASS_TAKEOVER: f"{CLUSTER_VIEW}: the other DeviceClasses and their extendedResourceName",
    ids.SHARED_CLAIM_LIMIT: f"{CLUSTER_VIEW}: HorizontalPodAutoscalers, PodGroups and the claims' other users",
    ids.UNSATISFIABLE_CLAIM: f"{CLUSTER_VIEW}: the ResourceSlices a claim's CEL selectors must match",
    ids.DEVICE_PLUGIN_NIC_BESIDE_DRA: "reads only the object, not compiled yet (per container: the names DRA serves "
                                      "on the planned pool beside spec.topologyAlignedResources globs); advisory",
    ids.DEVICE_CLASS_MAPPING_REMOVED: f"{CLUSTER_VIEW}: the other DeviceClasses naming the same extendedResourceName; "
                                      "and the Kubernetes version (webhook/gates/fixes.py, kubernetes#141103)",
    ids.TAINT_RULE_WITHOUT_SELECTOR: "depends on the Kubernetes version (webhook/gates/fixes.py, kubernetes#141620), "
                                     "which a compiled policy does not know; not compiled yet",
    ids.DEVICE_PLUGIN_SLICE: "reads only the object, not compiled yet (advisory); its effect on placement is "
                             "compiled: the plan of steer-node-pool, track-rollout and training-job-extended-resource "
                             "keeps a Pod pinning slice nodes off the dra pool (trkSlice)",
}
"""Rule id -> why ``compile`` leaves it to the webhook."""


def not_compiled() -> list[dict[str, str]]:
    """``[{rule, why}]`` in rule order: what ``compile`` prints on stderr and in ``-o json``."""
    return [{"rule": r, "why": NOT_COMPILED[r]} for r in ids.RULE_IDS if r in NOT_COMPILED]


def markdown() -> str:
    """The README's table of rules, compiled or not, with what is covered or why not (tests/compile/test_compile.py)."""
    rows = ["| rule | compiled | what the compiled policies cover, or why the webhook keeps it |", "|---|---|---|"]
    for rule in ids.RULE_IDS:
        done = rule in COMPILED
        rows.append(f"| `{rule}` | {'yes' if done else 'no'} | {COMPILED[rule] if done else NOT_COMPILED[rule]} |")
    return "\n".join(rows)
