"""The pod-rule runner and the pod library (tests/data/pods): manifests, views, pools, tracking annotations."""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import yaml

from tests.helpers import K8S_VERSION, review
from webhook.admission.answer import admit
from webhook.admission.review import parse_request
from webhook.objects.pods import NO_NAMED_KINDS, TemplateFinder, get_path, pod_templates
from webhook.offline.views import StaticView
from webhook.policy.compiled import CompiledPolicy
from webhook.policy.loader import load
from webhook.rules.base import Context
from webhook.rules.pods import MESSAGE_MAX
from webhook.rules.view import OFFLINE, ClusterView, Lookup, OfflineView

DATA = Path(__file__).parents[1] / "data" / "pods"
POLICY: CompiledPolicy = load(DATA / "policy.yaml")
OBJECTS: dict[str, dict[str, Any]] = yaml.safe_load((DATA / "objects.yaml").read_text())
CASES: list[dict[str, Any]] = yaml.safe_load((DATA / "cases.yaml").read_text())
NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)
PREFIX = "dra-migration.io"
POOLS = {"dra": {"gpu.example.com/allocation": "dra"},
         "devicePlugin": {"gpu.example.com/allocation": "device-plugin"}}
NATIVE_KINDS = {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob",
                "ResourceClaim", "ResourceClaimTemplate"}


# ---- the runner ------------------------------------------------------------------------------------


class ClaimView(StaticView):
    """A StaticView that can also read ResourceClaimTemplates (what mixed-allocation needs)."""

    def __init__(self, device_classes: list[dict[str, Any]] | None = None,
                 claim_templates: dict[str, str] | None = None) -> None:
        super().__init__(device_classes=device_classes)
        self._templates = claim_templates or {}

    def get_resource_claim_template(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        cls = self._templates.get(name)
        if cls is None:
            return OFFLINE
        return Lookup({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                       "metadata": {"name": name, "namespace": namespace},
                       "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                           "deviceClassName": cls}}]}}}})

    def get_resource_claim(self, namespace: str, name: str) -> Lookup[dict[str, Any]]:
        return OFFLINE


def device_class(name: str, extended_resource: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": f"device.driver == '{name}'"}}]}
    if extended_resource:
        spec["extendedResourceName"] = extended_resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def build_view(spec: dict[str, Any] | None) -> ClusterView:
    if not spec:
        return OfflineView()
    classes = []
    for entry in spec.get("device_classes", []):
        if isinstance(entry, str):
            classes.append(device_class(entry))
        else:
            (name, ern), = entry.items()
            classes.append(device_class(name, ern))
    return ClaimView(classes if "device_classes" in spec else None, spec.get("claim_templates"))


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def manifest(name: str, namespace: str, merge: dict[str, Any] | None = None,
             policy: CompiledPolicy = POLICY) -> dict[str, Any]:
    """A library object placed in ``namespace`` (POLICY-IDENTITY filled in), optionally deep-merged."""
    text = json.dumps(OBJECTS[name]).replace("POLICY-IDENTITY", policy.identity)
    obj = json.loads(text)
    obj["metadata"]["namespace"] = namespace
    if merge:
        _merge(obj, merge)
    return obj


def schema_check(obj: dict[str, Any], named: Mapping[tuple[str, str], TemplateFinder] = NO_NAMED_KINDS) -> None:
    """kubernetes-validate 1.37 strict; CRD workloads (built in, or ``named`` by the policy) have their pod
    templates checked as v1 PodTemplates."""
    if obj["kind"] in NATIVE_KINDS and "." not in obj.get("apiVersion", ""):  # batch.volcano.sh Job is a CRD
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        return
    for ref in pod_templates(obj, obj["kind"], named=named):
        wrapped = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                   "template": get_path(obj, ref.path)}
        kubernetes_validate.validate(wrapped, K8S_VERSION, strict=True)


@dataclass
class Result:
    allowed: bool
    findings: dict[str, str]
    warnings: list[str]
    message: str
    patch: list[dict[str, Any]]
    patched: dict[str, Any]
    audit: dict[str, str] = field(default_factory=dict)
    stage: str = ""
    cohort: str = ""
    verdicts: list[Any] = field(default_factory=list)
    causes: list[dict[str, str]] = field(default_factory=list)


def run(obj: dict[str, Any], namespace: str, operation: str = "CREATE", old: dict[str, Any] | None = None,
        view: ClusterView | None = None, now: dt.datetime = NOW, policy: CompiledPolicy = POLICY) -> Result:
    """Mutate, apply the patch to a wire copy, schema-check, validate; then check idempotence."""
    wire = json.loads(json.dumps(obj))
    req = parse_request(review(wire, operation=operation, namespace=namespace, old=old)["request"])
    admitted = admit(req, policy, view or OfflineView(), now)
    failed = [v.rule for v in admitted.verdicts if v.failed and not v.finding.unjudged]
    assert not failed, f"rules raised: {failed}"
    patched = jsonpatch.apply_patch(json.loads(json.dumps(obj)), admitted.patch) if admitted.patch else wire
    schema_check(patched, policy.template_finders)
    if admitted.mutate.allowed:
        again = parse_request(review(patched, operation=operation, namespace=namespace, old=old)["request"])
        second = admit(again, policy, view or OfflineView(), now)
        assert second.patch == [], f"second mutating pass is not a no-op: {second.patch}"
    findings: dict[str, str] = {}
    for w in admitted.warnings:
        assert len(w) <= 256, f"warning would be truncated: {w}"
    for v in admitted.verdicts:
        assert findings.setdefault(v.rule, v.action.value) == v.action.value, f"mixed actions for {v.rule}"
        assert "\n" not in v.finding.message and len(v.finding.message) <= MESSAGE_MAX, v.finding.message
    audit = admitted.audit
    for key in ("policy", "stage"):  # what every answer with findings carries; the tests look at the rest
        audit.pop(key, None)
    return Result(
        allowed=admitted.allowed,
        findings=findings,
        warnings=admitted.warnings,
        message=admitted.message,
        patch=admitted.patch,
        patched=patched,
        audit=audit,
        stage=admitted.stage,
        cohort=admitted.cohort,
        verdicts=admitted.verdicts,
        causes=[c for a in admitted.answers for c in a.causes],
    )


def pool_of(template: dict[str, Any]) -> str | None:
    """The pool every required nodeSelectorTerm selects exactly (``key In [value]``), else None."""
    terms = get_path(template, ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                                "nodeSelectorTerms")) or []
    for name, selector in POOLS.items():
        wanted = [{"key": k, "operator": "In", "values": [v]} for k, v in selector.items()]
        if terms and all(all(e in (t.get("matchExpressions") or []) for e in wanted) for t in terms):
            return name
    return None


def annotation(holder: dict[str, Any], name: str) -> str | None:
    return ((holder.get("metadata") or {}).get("annotations") or {}).get(f"{PREFIX}/{name}")


def _training_ctx(namespace: str = "pilot-a", stage: str = "pilot") -> Context:
    return Context(policy=POLICY, kind="Pod", group="", version="v1", operation="CREATE", namespace=namespace,
                   phase="validate", now=NOW, cohort=POLICY.cohort_for(namespace, None), stage=stage,
                   view=OfflineView())
