"""Workload kinds a policy names (``spec.workloadKinds``): CRDs whose pod templates the webhook examines.

The webhook knows where the common workload CRDs keep their pod templates (``objects.KINDS``). A platform
team's own CRD (an in-house training job, a vendor's operator) is named in the policy with its group,
kind and the paths of its pod templates; from then on its objects get exactly what a built-in workload
kind gets: every Pod rule on each template, steering, tracking, and on UPDATE only the templates the
request changed (``rules.workloads.examined_templates``).

Paths are parsed, checked and compiled when the policy loads (file:line errors through the model's
validators); per request a compiled path is a walk of a few dict lookups. Syntax:

- ``spec.template``: fields separated by dots (JSON field names: letters, digits, ``_``);
- ``spec.roles[*].template``: ``[*]`` after a field is every item of that list (a template is named by
  the item's ``name``, else its index);
- ``spec.replicaSpecs.*.template``: ``*`` is every value of a map (named by its key).

A pod template is the object with ``metadata`` and ``spec`` (a ``PodTemplateSpec``), so a path never ends
at ``spec`` or ``metadata``, never goes into a pod spec (``containers``...), never starts at the object's
``metadata`` or ``status``, and never lies inside another template of the same kind.

The rules find templates through ``objects.pod_templates``, handing it the policy's finders
(``CompiledPolicy.template_finders``, made once at load by ``finders``): a value passed down, so
concurrent requests under different policies never see each other's kinds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from webhook.objects.pods import KINDS, Path, PodTemplateRef, TemplateFinder

# apiextensions-apiserver pkg/apis/apiextensions/validation/validation.go (kubernetes v1.36):
# ValidateCustomResourceDefinitionSpec (group: DNS-1123 subdomain "with at least one dot") and
# ValidateCustomResourceDefinitionNames (kind: DNS-1035 label once lower-cased; plural: DNS-1035 label).
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$")
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_STEP = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*|\*)(?P<items>(\[\*\])*)$")

EACH_ITEM = "[*]"
"""A path step: every item of a list."""
EACH_VALUE = "*"
"""A path step: every value of a map."""
_NOT_FIRST = ("metadata", "status", "apiVersion", "kind")
_POD_SPEC_FIELDS = frozenset({
    "containers", "initContainers", "ephemeralContainers", "volumes", "resources", "resourceClaims",
    "affinity", "tolerations", "nodeSelector", "schedulingGates",
})
_BUILT_IN = {(k.group, k.kind) for k in KINDS}
_OWN_RULES = frozenset({"resource.k8s.io", "scheduling.k8s.io"})
"""Groups whose kinds the webhook judges with rules of their own (claims, classes, PodGroups...)."""
MAX_PATH = 256


def parse_path(text: str) -> tuple[str, ...]:
    """``spec.roles[*].template`` -> ``('spec', 'roles', '[*]', 'template')``; ValueError saying why not."""
    if not text or len(text) > MAX_PATH:
        raise ValueError(f"{text!r} is not a pod template path: it must have 1 to {MAX_PATH} characters")
    steps: list[str] = []
    for part in text.split("."):
        m = _STEP.match(part)
        if m is None:
            raise ValueError(f"{text!r} is not a pod template path: {part!r} is neither a field name (letters, "
                             "digits, _), `*` (every map value) nor either of them followed by `[*]` (every list "
                             "item); e.g. spec.template, spec.roles[*].template, spec.replicaSpecs.*.template")
        steps.append(m["name"])
        steps.extend([EACH_ITEM] * (len(m["items"]) // 3))
    fields = [s for s in steps if s not in (EACH_ITEM, EACH_VALUE)]
    if steps[0] in _NOT_FIRST or steps[0] in (EACH_ITEM, EACH_VALUE):
        raise ValueError(f"{text!r} cannot be a pod template: it starts at {steps[0]!r}; pod templates live in "
                         "the object's spec (e.g. spec.template)")
    if steps[-1] in ("spec", "metadata"):
        raise ValueError(f"{text!r} cannot be a pod template: it ends at {steps[-1]!r}, inside a template; a pod "
                         "template is the field holding metadata and spec (drop the last step)")
    inside = next((f for f in fields if f in _POD_SPEC_FIELDS), None)
    if inside is not None:
        raise ValueError(f"{text!r} cannot be a pod template: {inside!r} is a field of a pod spec; name the "
                         "template that holds the pod spec (e.g. spec.template)")
    return tuple(steps)


def path_text(steps: tuple[str, ...]) -> str:
    """The inverse of ``parse_path``."""
    out = ""
    for step in steps:
        out += step if step == EACH_ITEM else f".{step}" if out else step
    return out


@dataclass(frozen=True, slots=True)
class TemplatePath:
    """One compiled pod template path of a named kind."""

    steps: tuple[str, ...]
    label: str = ""  # names the template in messages when the path has no wildcard and the kind has several

    def find(self, obj: Mapping[str, Any]) -> list[PodTemplateRef]:
        out: list[PodTemplateRef] = []
        self._walk(obj, 0, (), (), out)
        return out

    def _walk(self, node: Any, i: int, at: Path, names: tuple[str, ...], out: list[PodTemplateRef]) -> None:
        if i == len(self.steps):
            if isinstance(node, dict):
                out.append(PodTemplateRef(at, name="/".join(names) or self.label))
            return
        step = self.steps[i]
        if step == EACH_ITEM:
            for j, item in enumerate(node if isinstance(node, list) else []):
                name = item.get("name") if isinstance(item, dict) else None
                self._walk(item, i + 1, (*at, j), (*names, name if isinstance(name, str) and name else str(j)), out)
        elif step == EACH_VALUE:
            for key, value in (node.items() if isinstance(node, dict) else ()):
                self._walk(value, i + 1, (*at, key), (*names, str(key)), out)
        elif isinstance(node, dict) and step in node:
            self._walk(node[step], i + 1, (*at, step), names, out)


@dataclass(frozen=True, slots=True)
class CustomKind:
    """A policy-named workload kind, compiled: where its pod templates are."""

    group: str
    kind: str
    resource: str
    versions: tuple[str, ...]
    paths: tuple[TemplatePath, ...]

    @property
    def api_group_kind(self) -> str:
        return f"{self.group}/{self.kind}"

    def find(self, obj: Mapping[str, Any]) -> list[PodTemplateRef]:
        return [ref for p in self.paths for ref in p.find(obj)]


class WorkloadKindSpec(BaseModel):
    """``spec.workloadKinds[]``: a CRD whose pod templates the webhook examines like a built-in workload's."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, title="WorkloadKind")

    group: str = Field(description="API group of the CRD (its spec.group), e.g. example.com.")
    kind: str = Field(description="Kind of the CRD (its spec.names.kind), e.g. TrainingRun.")
    podTemplates: list[str] = Field(
        min_length=1,
        description="Paths of its pod templates (objects with metadata and spec): fields separated by dots, "
        "`[*]` for every item of a list, `*` for every value of a map; e.g. spec.template, "
        "spec.roles[*].template, spec.replicaSpecs.*.template.",
    )
    resource: str | None = Field(
        default=None,
        description="Plural resource name (the CRD's spec.names.plural) for the webhook configuration rule "
        "`dra-webhook lint --webhook-rules` prints; default: the kind in lower case plus s.",
    )
    versions: list[str] = Field(
        default_factory=lambda: ["*"],
        description="API versions the webhook configuration rule lists (default: every version, *).",
    )

    @field_validator("group")
    @classmethod
    def _group(cls, v: str) -> str:
        if len(v) > 253 or not _DNS_SUBDOMAIN.match(v):
            raise ValueError(f"{v!r} is not a CRD group: a DNS subdomain with at least one dot (e.g. example.com)")
        return v

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if len(v) > 63 or not _DNS_LABEL.match(v.lower()) or not v[:1].isupper():
            raise ValueError(f"{v!r} is not a kind: CamelCase letters, digits and dashes, starting with a capital")
        return v

    @field_validator("resource")
    @classmethod
    def _resource(cls, v: str | None) -> str | None:
        if v is not None and (len(v) > 63 or not _DNS_LABEL.match(v)):
            raise ValueError(f"{v!r} is not a resource name: lower case, e.g. trainingruns")
        return v

    @field_validator("versions")
    @classmethod
    def _versions(cls, v: list[str]) -> list[str]:
        for version in v:
            if version != "*" and (len(version) > 63 or not _DNS_LABEL.match(version)):
                raise ValueError(f"{version!r} is not an API version (e.g. v1, v1beta1) nor *")
        if not v:
            raise ValueError("name at least one version, or * for all")
        return v

    @field_validator("podTemplates")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        seen: dict[tuple[str, ...], str] = {}
        for text in v:
            steps = parse_path(text)
            for other, other_text in seen.items():
                if steps == other:
                    raise ValueError(f"{text!r} is listed twice")
                short, long = (other, steps) if len(other) < len(steps) else (steps, other)
                if long[: len(short)] == short:
                    raise ValueError(f"{text!r} and {other_text!r}: a pod template cannot lie inside another")
            seen[steps] = text
        return v

    @model_validator(mode="after")
    def _not_built_in(self) -> WorkloadKindSpec:
        if (self.group, self.kind) in _BUILT_IN:
            raise ValueError(f"{self.group}/{self.kind} is a built-in workload kind, examined already: remove it")
        if self.group in _OWN_RULES:
            raise ValueError(f"{self.group}/{self.kind}: the webhook has rules of its own for {self.group} kinds")
        return self

    def compile(self) -> CustomKind:
        steps = [parse_path(t) for t in self.podTemplates]
        several = len(steps) > 1
        paths = tuple(TemplatePath(s, label=path_text(s) if several else "") for s in steps)
        return CustomKind(self.group, self.kind, self.resource or self.kind.lower() + "s", tuple(self.versions),
                          paths)


class DuplicateKind(ValueError):
    """Two entries name the same (group, kind); ``index`` is the second."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def compile_kinds(specs: list[WorkloadKindSpec]) -> dict[tuple[str, str], CustomKind]:
    """(group, kind) -> compiled kind. Raises DuplicateKind."""
    out: dict[tuple[str, str], CustomKind] = {}
    for i, spec in enumerate(specs):
        key = (spec.group, spec.kind)
        if key in out:
            raise DuplicateKind(i, f"{spec.group}/{spec.kind} is listed twice")
        out[key] = spec.compile()
    return out


def finders(kinds: Mapping[tuple[str, str], CustomKind]) -> dict[tuple[str, str], TemplateFinder]:
    """(group, kind) -> the kind's template finder, what ``objects.pod_templates`` takes (made once, at load)."""
    return {key: kind.find for key, kind in kinds.items()}


# ---- the webhook configuration rule a named kind needs -------------------------------------------------

WEBHOOKS = (("MutatingWebhookConfiguration", "workloads.mutate.dra-migration.io"),
            ("ValidatingWebhookConfiguration", "workloads.validate.dra-migration.io"))
"""The webhooks (first in their configuration, deploy/base/webhooks.yaml) that take the workload kinds."""
CONFIGURATION_NAME = "dra-migration-webhook"


def webhook_rule(kind: CustomKind) -> dict[str, Any]:
    """The ``rules`` entry that sends a named kind's CREATEs and UPDATEs to the workload webhooks."""
    return {"apiGroups": [kind.group], "apiVersions": list(kind.versions), "resources": [kind.resource],
            "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"}


def json_patch(kinds: Iterable[CustomKind], webhook: str) -> list[dict[str, Any]]:
    """RFC 6902 operations adding the kinds' rules to the first webhook of a configuration, after a ``test``
    that it is ``webhook`` (so a reordered configuration makes the patch fail instead of patching another)."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/webhooks/0/name", "value": webhook}]
    ops += [{"op": "add", "path": "/webhooks/0/rules/-", "value": webhook_rule(k)} for k in kinds]
    return ops


def kustomize_patches(kinds: Iterable[CustomKind], policy_name: str) -> str:
    """The ``patches:`` of a kustomize overlay of deploy/ that routes the named kinds to the webhook (YAML)."""
    kinds = list(kinds)
    lines = [f"# spec.workloadKinds of policy {policy_name}: "
             f"{', '.join(k.api_group_kind for k in kinds) or 'none'}.",
             "# Add to the kustomization.yaml of your overlay of deploy/ (e.g. deploy/overlays/dev). The",
             "# matchConditions stay as shipped: uses-devices sends every request of a kind it does not list,",
             "# and the validating webhook's spec-changed skips metadata-only UPDATEs.",
             "patches:"]
    for config, webhook in WEBHOOKS:
        lines += [f"- target: {{group: admissionregistration.k8s.io, version: v1, kind: {config}, "
                  f"name: {CONFIGURATION_NAME}}}",
                  "  patch: |-"]
        lines += [f"    - {json.dumps(op)}" for op in json_patch(kinds, webhook)]
    return "\n".join(lines) + "\n"
