"""Stable rule ids (docs/design.md §3). Policies, metrics and annotations refer to these names."""

LEGACY_RESOURCE_NAME = "legacy-resource-name"
UNMAPPED_EXTENDED_RESOURCE = "unmapped-extended-resource"
MAX_DEVICES_PER_POD = "max-devices-per-pod"
MIXED_ALLOCATION = "mixed-allocation"
DEVICE_CLASS_NOT_ALLOWED = "device-class-not-allowed"
DEVICE_COUNT_EXCEEDS = "device-count-exceeds"
ALLOCATION_MODE_ALL = "allocation-mode-all"
ADMIN_ACCESS_NAMESPACE = "admin-access-namespace"
TOLERATION_TOO_BROAD = "toleration-too-broad"
NONSTANDARD_NUMA_ATTRIBUTE = "nonstandard-numa-attribute"
GATED_FEATURE = "gated-feature"
TRAINING_JOB_EXTENDED_RESOURCE = "training-job-extended-resource"
INJECT_DEVICE_TOLERATIONS = "inject-device-tolerations"
STEER_NODE_POOL = "steer-node-pool"
TRACK_ROLLOUT = "track-rollout"
DEVICE_CLASS_TAKEOVER = "device-class-takeover"
SHARED_CLAIM_LIMIT = "shared-claim-limit"
UNSATISFIABLE_CLAIM = "unsatisfiable-claim"
DEVICE_PLUGIN_NIC_BESIDE_DRA = "device-plugin-nic-beside-dra"
DEVICE_PLUGIN_SLICE = "device-plugin-slice"
TAINT_RULE_WITHOUT_SELECTOR = "taint-rule-without-selector"
DEVICE_CLASS_MAPPING_REMOVED = "device-class-mapping-removed"
# Not a rule: the status of a rule that raised instead of judging the object (Kyverno's RuleStatusError).
# It is reported under the failing rule's id; policy.spec.enforcement.ruleErrors picks its action.
RULE_ERROR = "rule-error"

RULE_IDS: tuple[str, ...] = (
    LEGACY_RESOURCE_NAME,
    UNMAPPED_EXTENDED_RESOURCE,
    MAX_DEVICES_PER_POD,
    MIXED_ALLOCATION,
    DEVICE_CLASS_NOT_ALLOWED,
    DEVICE_COUNT_EXCEEDS,
    ALLOCATION_MODE_ALL,
    ADMIN_ACCESS_NAMESPACE,
    TOLERATION_TOO_BROAD,
    NONSTANDARD_NUMA_ATTRIBUTE,
    GATED_FEATURE,
    TRAINING_JOB_EXTENDED_RESOURCE,
    INJECT_DEVICE_TOLERATIONS,
    STEER_NODE_POOL,
    TRACK_ROLLOUT,
    DEVICE_CLASS_TAKEOVER,
    SHARED_CLAIM_LIMIT,
    UNSATISFIABLE_CLAIM,
    DEVICE_PLUGIN_NIC_BESIDE_DRA,
    DEVICE_PLUGIN_SLICE,
    TAINT_RULE_WITHOUT_SELECTOR,
    DEVICE_CLASS_MAPPING_REMOVED,
)
