"""Pydantic model of a MigrationPolicy (docs/design.md §2).

Strict on purpose: a misspelt key in a policy file is an error with a file and line, never a silently
ignored setting. Field names are the YAML keys (camelCase) so error paths read like the file.
"""

from __future__ import annotations

import datetime as dt
import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from webhook.objects import names as k8s_names
from webhook.objects.claims import describe_toleration
from webhook.policy.rule_ids import RULE_IDS
from webhook.policy.workload_kinds import WorkloadKindSpec

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_EXTENDED_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Stage(StrEnum):
    """Where a cohort is in the migration."""

    legacy = "legacy"
    pilot = "pilot"
    migrated = "migrated"


class Action(StrEnum):
    """What a finding does to the request; the policy decides, never the rule."""

    Deny = "Deny"
    Warn = "Warn"
    Audit = "Audit"
    Off = "Off"


class Resource(Strict):
    name: str = Field(description="Extended resource name Pods request, e.g. example.com/gpu.")
    deviceClassName: str = Field(
        description="DeviceClass whose spec.extendedResourceName is `name` (serves it through DRA)."
    )
    legacyNames: list[str] = Field(
        default_factory=list, description="Device-plugin resource names that mean the same hardware."
    )
    maxPerPod: int | None = Field(default=None, ge=1, description="Most devices of this resource one Pod may use.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _EXTENDED_RESOURCE.match(v) or v.startswith("kubernetes.io/"):
            raise ValueError(f"{v!r} is not an extended resource name (domain/name, e.g. example.com/gpu)")
        return v

    @field_validator("legacyNames")
    @classmethod
    def _legacy(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _EXTENDED_RESOURCE.match(name):
                raise ValueError(f"{name!r} is not an extended resource name (domain/name)")
        return v

    @field_validator("deviceClassName")
    @classmethod
    def _class(cls, v: str) -> str:
        if not _DNS_SUBDOMAIN.match(v) or len(v) > 253:
            raise ValueError(f"{v!r} is not a valid DeviceClass name (DNS subdomain)")
        return v


class NodePool(Strict):
    nodeSelector: dict[str, str] = Field(description="Node labels that select the pool.")
    advertises: list[str] | None = Field(
        default=None,
        description="Extended resource names the pool's nodes advertise in status.allocatable (their device "
        "plugins). The scheduler serves such a name there through the device plugin, and a DeviceClass-mapped "
        "name they lack through DRA. Unset: devicePlugin advertises every legacy name of `resources` and the "
        "name of each resource without legacyNames (`lint` warns), dra none.",
    )

    @field_validator("advertises")
    @classmethod
    def _advertised(cls, v: list[str] | None) -> list[str] | None:
        for name in v or ():
            if not _EXTENDED_RESOURCE.match(name):
                raise ValueError(f"{name!r} is not an extended resource name (domain/name)")
        return v

    @field_validator("nodeSelector")
    @classmethod
    def _non_empty(cls, v: dict[str, str]) -> dict[str, str]:
        """Written into node affinity (``key In [value]``): a label name and a label value, as the API wants."""
        if not v:
            raise ValueError("nodeSelector must name at least one label")
        for key, value in v.items():
            if errors := k8s_names.qualified_name(key):
                raise ValueError(f"{key!r} is not a valid label key: {'; '.join(errors)}")
            if errors := k8s_names.label_value(value):
                raise ValueError(f"{key!r}: value {value!r} is not a valid label value: {'; '.join(errors)}")
        return v


class NodePools(Strict):
    dra: NodePool | None = Field(default=None, description="Nodes where DRA serves the migrated resources.")
    devicePlugin: NodePool | None = Field(default=None, description="Nodes still served by device plugins.")


class LabelSelectorRequirement(Strict):
    key: str = Field(description="Namespace label key the requirement tests.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In/NotIn compare the label's value with `values`; Exists/DoesNotExist test the key only."
    )
    values: list[str] = Field(
        default_factory=list, description="Label values for In/NotIn; must be empty for Exists/DoesNotExist."
    )

    @model_validator(mode="after")
    def _values(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(Strict):
    matchLabels: dict[str, str] = Field(
        default_factory=dict, description="Labels a namespace must all have with exactly these values."
    )
    matchExpressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, description="Requirements a namespace's labels must all meet (ANDed with matchLabels)."
    )


class NamespaceMatch(Strict):
    names: list[str] = Field(default_factory=list, description="Namespace name globs (fnmatch), e.g. ml-*.")
    selector: LabelSelector | None = Field(default=None, description="Namespace label selector.")


class ScheduleEntry(Strict):
    stage: Stage = Field(description="Stage the cohort is in from this date: legacy, pilot or migrated.")
    from_: dt.date = Field(alias="from", description="UTC date from which this stage applies.")


class Cohort(Strict):
    name: str = Field(
        min_length=1, max_length=253, description="Cohort name, unique; written to the <prefix>/cohort annotation."
    )
    namespaces: NamespaceMatch = Field(
        description="Which namespaces belong to the cohort: name globs OR a label selector."
    )
    schedule: list[ScheduleEntry] = Field(
        default_factory=list,
        description="Stages by date: the entry with the latest `from` not in the future applies "
        "(none yet: spec.defaultStage).",
    )


class Claims(Strict):
    allowedDeviceClasses: list[str] | None = Field(
        default=None, description="DeviceClasses claims may request; unset allows any."
    )
    maxDevicesPerRequest: int | None = Field(
        default=None, ge=1, description="Most devices one ExactCount request may ask for; unset: no limit."
    )
    allowAllocationModeAll: bool = Field(
        default=False, description="Whether requests may use allocationMode All (every matching device on a node)."
    )
    allocationModeAllClasses: list[str] = Field(
        default_factory=list,
        description="DeviceClasses whose requests may use allocationMode All even when allowAllocationModeAll is "
        "false (e.g. a class for whole-node benchmarks).",
    )
    adminAccessNamespaces: list[str] = Field(
        default_factory=list, description="Namespace name globs where requests may set adminAccess: true."
    )
    maxTolerationSeconds: int | None = Field(
        default=None, ge=0, description="NoExecute tolerations must set tolerationSeconds at most this."
    )


class DeviceToleration(Strict):
    key: str = Field(default="", description="Device taint key to tolerate; empty (with Exists) means every key.")
    operator: Literal["Exists", "Equal"] = Field(
        default="Equal", description="Equal matches `value`; Exists matches any value of the key."
    )
    value: str = Field(default="", description="Taint value to match with operator Equal.")
    effect: Literal["", "NoSchedule", "NoExecute", "None"] = Field(
        default="", description="Taint effect to tolerate; empty means every effect."
    )
    tolerationSeconds: int | None = Field(
        default=None,
        ge=0,
        description="For NoExecute: how long a Pod may stay after the taint appears (a checkpoint window).",
    )

    # Written into claims as is: the API server's validateDeviceToleration (kubernetes/kubernetes
    # pkg/apis/resource/validation/validation.go, master for 1.37) wants a label-name key, a label value
    # for Equal, an empty value for Exists, operator Equal/Exists and effect NoSchedule/NoExecute/None.
    # It does not check tolerationSeconds (1.36.2 stores -5: tests/e2e/test_api_facts_136.py); the eviction
    # controller reads a negative value as 0 ("evict at once"), which no policy means, so it is refused here.
    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        return k8s_names.require("key", v, k8s_names.qualified_name(v)) if v else v

    @field_validator("value")
    @classmethod
    def _value(cls, v: str) -> str:
        return k8s_names.require("value", v, k8s_names.label_value(v))

    @model_validator(mode="after")
    def _shape(self) -> DeviceToleration:
        problem = None
        if not self.key and self.operator != "Exists":
            problem = "an empty key needs operator Exists"
        elif self.operator == "Exists" and self.value:
            problem = "'value' must be empty for operator Exists (it matches any value)"
        elif self.tolerationSeconds is not None and self.effect != "NoExecute":
            problem = "tolerationSeconds only applies to effect NoExecute"
        if problem is not None:  # the toleration in full, as every toleration message (issue 24 item 7)
            raise ValueError(f"{problem}: toleration ({describe_toleration(self.model_dump())})")
        return self

    def to_api(self) -> dict[str, Any]:
        """The toleration as the API writes it (no empty fields)."""
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.tolerationSeconds is not None:
            out["tolerationSeconds"] = self.tolerationSeconds
        return out


class SliceLabel(Strict):
    """A node label whose value says that a device plugin's name there is a slice of a device, not a whole one."""

    key: str = Field(description="Node label key, e.g. nvidia.com/gpu.product (NVIDIA GPU feature discovery).")
    values: list[str] = Field(
        default_factory=list,
        description="Globs of label values that mean a slice (e.g. *-MIG-*); a Pod pins such nodes with a nodeSelector "
        "or a required node affinity `In` with a matching value.",
    )
    greaterThan: int | None = Field(
        default=None, ge=0, description="Or: an integer value above this means a slice (nvidia.com/gpu.replicas > 1)."
    )
    sharing: Literal["MIG", "TimeSlicing"] = Field(description="What the slice is: a MIG device or a time-shared GPU.")
    deviceClassName: str = Field(description="The DeviceClass that serves such a slice through DRA (mig.nvidia.com).")
    resourceNames: list[str] = Field(
        default_factory=lambda: ["nvidia.com/gpu"],
        description="Requested names that mean the slice on such nodes (default nvidia.com/gpu).",
    )

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        return k8s_names.require("key", v, k8s_names.qualified_name(v))

    @model_validator(mode="after")
    def _one_test(self) -> SliceLabel:
        if bool(self.values) == (self.greaterThan is not None):
            raise ValueError("set exactly one of values and greaterThan")
        return self


def _nvidia_slice_labels() -> list[SliceLabel]:
    """What NVIDIA GPU feature discovery writes on a node where ``nvidia.com/gpu`` is not a whole GPU.

    NVIDIA/k8s-device-plugin (which holds GFD), internal/lm/resource.go ``productLabel`` (model, then ``MIG`` and the
    MIG profile: ``A100-SXM4-40GB-MIG-1g.5gb``; ``-SHARED`` appended when a resource is time-sliced and not renamed)
    and ``replicasLabel`` (``nvidia.com/gpu.replicas``, above 1 when shared), read at 02f65cca; internal/lm/
    mig-strategy.go ``newMigStrategySingleLabeler`` (resource name ``nvidia.com/gpu`` for the MIG devices) and the
    ``nvidia.com/mig.strategy`` label, read at 062f0903; README (1b826acc) "renameByDefault=false". The DRA classes:
    NVIDIA/k8s-dra-driver-gpu deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-mig.yaml (``mig.nvidia.com``,
    ``type == 'mig'``) and deviceclass-gpu.yaml (``gpu.nvidia.com``, ``type == 'gpu'``), 22407113.
    """
    return [
        SliceLabel(key="nvidia.com/gpu.product", values=["*-MIG-*"], sharing="MIG", deviceClassName="mig.nvidia.com"),
        SliceLabel(key="nvidia.com/mig.strategy", values=["single"], sharing="MIG", deviceClassName="mig.nvidia.com"),
        SliceLabel(key="nvidia.com/gpu.product", values=["*-SHARED"], sharing="TimeSlicing",
                   deviceClassName="gpu.nvidia.com"),
        SliceLabel(key="nvidia.com/gpu.replicas", greaterThan=1, sharing="TimeSlicing",
                   deviceClassName="gpu.nvidia.com"),
    ]


TOPOLOGY_ALIGNED_DEFAULT = ("vpc.amazonaws.com/efa", "rdma/*", "intel.com/*")
"""Device-plugin NIC and RDMA names whose devices the kubelet's Topology Manager aligns with the GPUs: the AWS EFA
device plugin's ``vpc.amazonaws.com/efa`` (aws-samples/awsome-distributed-training
micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml, 0162aacd), the RDMA shared device plugin's ``rdma/...``
(NVIDIA/cloud-native-docs gpu-operator/manifests/input/gpu-direct-rdma-demo-pod-1.yaml, 52dcb7b8) and the SR-IOV
network device plugin's default prefix ``intel.com`` (k8snetworkplumbingwg/sriov-network-device-plugin
cmd/sriovdp/main.go ``flagInit``: ``--resource-prefix`` default ``intel.com``)."""


class TrainingJobs(Strict):
    labels: dict[str, str] = Field(default_factory=dict, description="All of these labels mark a training job.")
    anyLabelKeys: list[str] = Field(default_factory=list, description="Any of these label keys marks one.")
    minActiveDeadlineSeconds: int | None = Field(
        default=None, ge=1, description="A Pod or Job with activeDeadlineSeconds at least this is one."
    )
    deviceTolerations: list[DeviceToleration] = Field(
        default_factory=list,
        description="Tolerations added to every request of a training job's claims (inject-device-tolerations).",
    )


class Enforcement(Strict):
    legacy: Action = Field(default=Action.Audit, description="Action for findings in the legacy stage.")
    pilot: Action = Field(default=Action.Warn, description="Action for findings in the pilot stage.")
    migrated: Action = Field(default=Action.Deny, description="Action for findings in the migrated stage.")
    rules: dict[str, Action] = Field(
        default_factory=dict, description="Per-rule overrides of the stage default (rule id: action), in every stage."
    )
    ruleErrors: Literal[Action.Deny, Action.Warn, Action.Audit] = Field(
        default=Action.Warn,
        description="Action when a rule fails to evaluate an object (status rule-error), never stronger than the "
        "rule's own action in the stage; exceptions apply. Warn (default): the object is admitted and the user "
        "sees the failure; Deny fails closed.",
    )

    @field_validator("rules")
    @classmethod
    def _known_rules(cls, v: dict[str, Action]) -> dict[str, Action]:
        for rule in v:
            if rule not in RULE_IDS:
                raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(RULE_IDS)}")
        return v


class PolicyException(Strict):
    namespaces: list[str] = Field(description="Namespace name globs the exception covers.")
    rules: list[str] = Field(description="Rule ids the exception switches off.")
    reason: str = Field(min_length=1, description="Why (ticket id); shown in audit annotations.")
    expires: dt.date | None = Field(default=None, description="Last day (UTC) the exception applies.")

    @field_validator("rules")
    @classmethod
    def _known_rules(cls, v: list[str]) -> list[str]:
        for rule in v:
            if rule not in RULE_IDS:
                raise ValueError(f"unknown rule {rule!r}; known rules: {', '.join(RULE_IDS)}")
        return v


class Migration(Strict):
    deviceClasses: list[str] | None = Field(
        default=None,
        description="DeviceClasses under migration: claim rules, toleration injection, the gauges and `report` "
        "look only at requests for these. Unset: the deviceClassName of every entry of `resources`.",
    )
    drivers: list[str] | None = Field(
        default=None,
        description="DRA drivers under migration: a request is also in scope when the cluster's DeviceClass "
        "selects one of them (device.driver == ...). Unset: the drivers the in-scope DeviceClasses select, "
        "when the DeviceClass objects are known. Claims of other drivers (CPU, NIC, Neuron) are left alone.",
    )

    @field_validator("deviceClasses", "drivers")
    @classmethod
    def _names(cls, v: list[str] | None) -> list[str] | None:
        for name in v or ():
            if not _DNS_SUBDOMAIN.match(name) or len(name) > 253:
                raise ValueError(f"{name!r} is not a valid DeviceClass or driver name (DNS subdomain)")
        return v


class KueueDeviceClassMapping(Strict):
    name: str = Field(min_length=1, description="The logical resource name Kueue charges the devices to (its "
                      "ClusterQueues' coveredResources).")
    deviceClassNames: list[str] = Field(min_length=1, description="DeviceClasses Kueue counts under that name.")


class Kueue(Strict):
    deviceClassMappings: list[KueueDeviceClassMapping] = Field(
        default_factory=list,
        description="The cluster's Kueue Configuration `resources.deviceClassMappings`, copied as it is. `convert` "
        "writes explicit claims for a job Kueue queues (label kueue.x-k8s.io/queue-name) only when its DeviceClass "
        "is listed here: Kueue keeps a job whose claim's class it does not map suspended (\"DeviceClass ... is not "
        "mapped in DRA configuration\"), or, with its DRA integration off, does not charge the claim to the quota.",
    )

    def mapped(self) -> frozenset[str]:
        return frozenset(c for m in self.deviceClassMappings for c in m.deviceClassNames)


class Quota(Strict):
    kueue: Kueue = Field(default_factory=Kueue, description="What the cluster's Kueue counts (quota beside DRA).")


class PolicySpec(Strict):
    annotationPrefix: str = Field(
        default="dra-migration.io", description="DNS subdomain; annotation keys written are <prefix>/<name>."
    )
    kubernetesVersion: Literal["1.36", "1.37", "1.38"] = Field(
        default="1.37", description='Picks the feature-gate defaults; quote it ("1.37"). 1.38 is provisional '
        "(read from its alpha releases; `dra-webhook gates --version 1.38` marks the rows).",
    )
    featureGates: Literal["auto"] | dict[str, bool | Literal["auto"]] = Field(
        default_factory=dict,
        description="Gates the cluster has on or off (gate name: true/false); unset gates take the version's "
        "default. `auto` (for all gates, or per gate; key `*` for every gate not listed) reads the API "
        "server's own gate states from its /metrics; explicit true/false still win.",
    )
    resources: list[Resource] = Field(default_factory=list, description="Extended resources under migration.")
    retiredResourceNames: list[str] = Field(
        default_factory=list,
        description="Extended-resource names (globs, e.g. nvidia.com/*) migrated cohorts must not request any "
        "more unless a DeviceClass maps them (rule unmapped-extended-resource). Other names outside "
        "`resources` (amd.com/gpu, google.com/tpu...) are outside the migration and never judged.",
    )
    nodePools: NodePools = Field(
        default_factory=NodePools, description="Node pools GPU Pods are steered to (steer-node-pool)."
    )
    schedulerUsernames: list[str] = Field(
        default_factory=lambda: ["system:kube-scheduler"], min_length=1,
        description="request.userInfo.username of every scheduler that creates extended-resource claims (a second "
        "scheduler runs under its ServiceAccount, system:serviceaccount:NS:NAME). Their claims are never judged "
        "nor changed; keep deploy/'s matchCondition exclude-scheduler-extended-resource-claims in step.",
    )
    draSchedulers: list[str] = Field(
        default_factory=lambda: ["default-scheduler"],
        description="spec.schedulerName values whose scheduler allocates DRA claims (kube-scheduler's profiles; a "
        "second kube-scheduler). Pods of any other scheduler (KAI, Volcano, YuniKorn, HAMi, unknown) are never "
        "steered to the dra pool (steer-node-pool says why).",
    )
    cohorts: list[Cohort] = Field(
        default_factory=list, description="Groups of namespaces with a stage schedule; the first matching cohort wins."
    )
    defaultStage: Stage = Field(default=Stage.legacy, description="Stage of namespaces no cohort matches.")
    migration: Migration = Field(
        default_factory=Migration,
        description="Which DeviceClasses and DRA drivers the migration is about; other claims are left alone.",
    )
    claims: Claims = Field(
        default_factory=Claims, description="Limits for ResourceClaims and ResourceClaimTemplates."
    )
    trainingJobs: TrainingJobs = Field(
        default_factory=TrainingJobs, description="What makes a Pod or claim a long training job, and its tolerations."
    )
    enforcement: Enforcement = Field(
        default_factory=Enforcement, description="Action per stage, then per-rule overrides."
    )
    exceptions: list[PolicyException] = Field(
        default_factory=list, description="Rules switched off for some namespaces, until an optional date."
    )
    extendedResourceTaintEviction: Literal["auto", "evicted", "notEvicted"] = Field(
        default="auto",
        description="Whether a NoExecute device taint evicts Pods on the extended-resource path "
        "(kubernetes/kubernetes#141290, fixed by PR #142289 in 1.38.0). `auto` reads the API server's version, "
        "else kubernetesVersion; `evicted` / `notEvicted` state it, e.g. for a patch release that ships the fix "
        "before this webhook knows it. Used by `preflight`, the taint_unevictable gauge and "
        "training-job-extended-resource.",
    )
    quota: Quota = Field(
        default_factory=Quota, description="Quota systems beside the webhook: what they count in DRA form (Kueue)."
    )
    sliceNodeLabels: list[SliceLabel] = Field(
        default_factory=_nvidia_slice_labels,
        description="Node labels that say a device plugin's name is a slice there (MIG single strategy, time-slicing "
        "without renaming). A Pod that pins such nodes stays on the devicePlugin pool (device-plugin-slice says which "
        "DeviceClass serves the slice through DRA). Default: the NVIDIA GPU feature discovery labels.",
    )
    topologyAlignedResources: list[str] = Field(
        default_factory=lambda: list(TOPOLOGY_ALIGNED_DEFAULT),
        description="Globs of device-plugin NIC/RDMA names the kubelet's Topology Manager aligns with the GPUs "
        "(device-plugin-nic-beside-dra warns when a container's GPUs move to DRA beside one). Default: "
        "vpc.amazonaws.com/efa, rdma/*, intel.com/*; add your SR-IOV operator's prefix (e.g. openshift.io/*).",
    )
    workloadKinds: list[WorkloadKindSpec] = Field(
        default_factory=list,
        description="CRDs whose pod templates the webhook examines and mutates like a built-in workload kind's "
        "(group, kind, paths of the pod templates). Their webhook configuration rule must be added too: "
        "`dra-webhook lint --webhook-rules` prints it.",
    )

    @field_validator("draSchedulers")
    @classmethod
    def _schedulers(cls, v: list[str]) -> list[str]:
        for name in v:
            if errors := k8s_names.dns1123_subdomain(name):
                raise ValueError(f"{name!r} is not a scheduler name (DNS subdomain): {'; '.join(errors)}")
        return v

    @field_validator("schedulerUsernames")
    @classmethod
    def _usernames(cls, v: list[str]) -> list[str]:
        for name in v:
            if not name or name != name.strip() or "'" in name or "\\" in name:
                raise ValueError(f"{name!r} is not a username (non-empty, no spaces around, no quote or backslash)")
        return v

    @field_validator("annotationPrefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not _DNS_SUBDOMAIN.match(v) or len(v) > 253:
            raise ValueError(f"{v!r} is not a DNS subdomain (annotation keys are <prefix>/<name>)")
        return v


class Metadata(Strict):
    name: str = Field(
        min_length=1,
        max_length=253,
        description="Policy name; with the file hash it forms the <prefix>/policy annotation.",
    )
    annotations: dict[str, str] = Field(default_factory=dict, description="Free-form notes (owner, links).")
    labels: dict[str, str] = Field(default_factory=dict, description="Free-form labels.")


class MigrationPolicy(Strict):
    apiVersion: Literal["dra-migration.io/v1alpha1"] = Field(description="Always dra-migration.io/v1alpha1.")
    kind: Literal["MigrationPolicy"] = Field(description="Always MigrationPolicy.")
    metadata: Metadata = Field(description="Name and free-form labels and annotations.")
    spec: PolicySpec = Field(description="The migration policy itself.")
