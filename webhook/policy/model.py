"""Pydantic model of a MigrationPolicy (design.md §2).

Strict on purpose: a misspelt key in a policy file is an error with a file and line, never a silently
ignored setting. Field names are the YAML keys (camelCase) so error paths read like the file.
"""

from __future__ import annotations

import datetime as dt
import re
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from webhook.rules.ids import RULE_IDS

_QUALIFIED = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
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

    @field_validator("nodeSelector")
    @classmethod
    def _non_empty(cls, v: dict[str, str]) -> dict[str, str]:
        if not v:
            raise ValueError("nodeSelector must name at least one label")
        for key in v:
            if not _QUALIFIED.match(key):
                raise ValueError(f"{key!r} is not a valid label key")
        return v


class NodePools(Strict):
    dra: NodePool | None = Field(default=None, description="Nodes where DRA serves the migrated resources.")
    devicePlugin: NodePool | None = Field(default=None, description="Nodes still served by device plugins.")


class LabelSelectorRequirement(Strict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(Strict):
    matchLabels: dict[str, str] = Field(default_factory=dict)
    matchExpressions: list[LabelSelectorRequirement] = Field(default_factory=list)


class NamespaceMatch(Strict):
    names: list[str] = Field(default_factory=list, description="Namespace name globs (fnmatch), e.g. ml-*.")
    selector: LabelSelector | None = Field(default=None, description="Namespace label selector.")


class ScheduleEntry(Strict):
    stage: Stage
    from_: dt.date = Field(alias="from", description="UTC date from which this stage applies.")


class Cohort(Strict):
    name: str
    namespaces: NamespaceMatch
    schedule: list[ScheduleEntry] = Field(default_factory=list)


class Claims(Strict):
    allowedDeviceClasses: list[str] | None = Field(
        default=None, description="DeviceClasses claims may request; unset allows any."
    )
    maxDevicesPerRequest: int | None = Field(default=None, ge=1)
    allowAllocationModeAll: bool = False
    adminAccessNamespaces: list[str] = Field(default_factory=list)
    maxTolerationSeconds: int | None = Field(
        default=None, ge=0, description="NoExecute tolerations must set tolerationSeconds at most this."
    )


class DeviceToleration(Strict):
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "NoExecute", "None"] = ""
    tolerationSeconds: int | None = None

    @model_validator(mode="after")
    def _shape(self) -> DeviceToleration:
        if self.key and not _QUALIFIED.match(self.key):
            raise ValueError(f"key {self.key!r} is not a label name")
        if not self.key and self.operator != "Exists":
            raise ValueError("an empty key needs operator Exists")
        if self.operator == "Exists" and self.value:
            raise ValueError("operator Exists takes no value")
        if self.tolerationSeconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds only applies to effect NoExecute")
        return self

    def to_api(self) -> dict:
        """The toleration as the API writes it (no empty fields)."""
        out: dict = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.tolerationSeconds is not None:
            out["tolerationSeconds"] = self.tolerationSeconds
        return out


class TrainingJobs(Strict):
    labels: dict[str, str] = Field(default_factory=dict, description="All of these labels mark a training job.")
    anyLabelKeys: list[str] = Field(default_factory=list, description="Any of these label keys marks one.")
    minActiveDeadlineSeconds: int | None = Field(
        default=None, ge=1, description="A Pod or Job with activeDeadlineSeconds at least this is one."
    )
    deviceTolerations: list[DeviceToleration] = Field(default_factory=list)


class Enforcement(Strict):
    legacy: Action = Action.Audit
    pilot: Action = Action.Warn
    migrated: Action = Action.Deny
    rules: dict[str, Action] = Field(default_factory=dict, description="Per-rule overrides of the stage default.")

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


class PolicySpec(Strict):
    annotationPrefix: str = "dra-migration.io"
    kubernetesVersion: Literal["1.36", "1.37"] = "1.37"
    featureGates: dict[str, bool] = Field(default_factory=dict)
    resources: list[Resource] = Field(default_factory=list)
    nodePools: NodePools = Field(default_factory=NodePools)
    cohorts: list[Cohort] = Field(default_factory=list)
    defaultStage: Stage = Stage.legacy
    claims: Claims = Field(default_factory=Claims)
    trainingJobs: TrainingJobs = Field(default_factory=TrainingJobs)
    enforcement: Enforcement = Field(default_factory=Enforcement)
    exceptions: list[PolicyException] = Field(default_factory=list)

    @field_validator("annotationPrefix")
    @classmethod
    def _prefix(cls, v: str) -> str:
        if not _DNS_SUBDOMAIN.match(v) or len(v) > 253:
            raise ValueError(f"{v!r} is not a DNS subdomain (annotation keys are <prefix>/<name>)")
        return v


class Metadata(Strict):
    name: str
    annotations: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict)


class MigrationPolicy(Strict):
    apiVersion: Literal["dra-migration.io/v1alpha1"]
    kind: Literal["MigrationPolicy"]
    metadata: Metadata
    spec: PolicySpec
