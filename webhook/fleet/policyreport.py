"""The report as PolicyReports: where platform teams already read policy results (Kyverno, Policy Reporter).

One namespaced report per namespace, named ``dra-migration-webhook``, with one result per Pod and rule and
per claim with injected tolerations. Two API groups, because current tools read both:

- ``wgpolicyk8s.io/v1alpha2`` ``PolicyReport`` (kubernetes-sigs/wg-policy-prototypes; Kyverno's CRD
  config/crds/policyreport/wgpolicyk8s.io_policyreports.yaml; Policy Reporter's
  pkg/crd/api/policyreport/v1alpha2), the default;
- ``openreports.io/v1alpha1`` ``Report`` (openreports/reports-api; Kyverno's
  config/crds/policyreport/openreports.io_reports.yaml; Policy Reporter's openreports adapter), which also
  carries ``source`` at the top level.

Pure: a ``webhook.fleet.report.Report`` in, JSON dicts out. ``webhook.cluster.api.apply_policy_reports`` writes them.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from webhook.fleet.report import NO_COHORT, PENDING, ClaimRow, NamespaceRow, PodRow, Report

SOURCE = "dra-migration-webhook"
NAME = "dra-migration-webhook"
MANAGED_BY = {"app.kubernetes.io/managed-by": SOURCE}
CATEGORY = "DRA migration"


@dataclass(frozen=True, slots=True)
class ReportAPI:
    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


APIS = {
    "wgpolicyk8s.io/v1alpha2": ReportAPI("wgpolicyk8s.io", "v1alpha2", "PolicyReport", "policyreports"),
    "openreports.io/v1alpha1": ReportAPI("openreports.io", "v1alpha1", "Report", "reports"),
}
DEFAULT_API = "wgpolicyk8s.io/v1alpha2"


def result(
    policy: str, rule: str, result: str, message: str, ref: dict[str, str], props: dict[str, str], seconds: int
) -> dict[str, Any]:
    """One PolicyReport result about ``ref`` (``result``: pass, fail, warn, error or skip)."""
    out: dict[str, Any] = {
        "source": SOURCE,
        "policy": policy,
        "rule": rule,
        "category": CATEGORY,
        "result": result,
        "scored": True,
        "message": message,
        "resources": [ref],
        "properties": props,
        "timestamp": {"seconds": seconds, "nanos": 0},
    }
    if result in ("fail", "warn"):
        out["severity"] = "medium" if result == "fail" else "low"
    return out


def _pod_ref(ns: str, name: str) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name}


def _namespace_results(
    report: Report, ns: NamespaceRow, pods: list[PodRow], claims: list[ClaimRow], seconds: int
) -> list[dict[str, Any]]:
    policy = report.policy.split("@", 1)[0]
    base = {"cohort": ns.cohort or NO_COHORT, "stage": ns.stage, "policy": report.policy}
    results = []
    for p in pods:
        props = {**base, "intended": p.intended or "none", "actual": p.actual}
        ref = _pod_ref(p.namespace, p.name)
        if p.intended is None:
            results.append(result(
                policy, "track-rollout", "warn",
                f"not annotated by the webhook (created while it was down, or excluded); actual path {p.actual}",
                ref, props, seconds))
        elif p.actual == PENDING:
            results.append(result(policy, "path-drift", "skip", "not bound yet: nothing to compare", ref, props,
                                   seconds))
        elif p.intended != p.actual:
            results.append(result(
                policy, "path-drift", "fail",
                f"intended path {p.intended} but the Pod took {p.actual}", ref, props, seconds))
        else:
            results.append(result(policy, "path-drift", "pass", f"on the intended path {p.actual}", ref, props,
                                   seconds))
    for c in claims:
        ref = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "namespace": c.namespace, "name": c.name}
        results.append(result(
            policy, "inject-device-tolerations", "pass",
            f"{c.tolerations} device toleration(s) injected" + (f" for {c.owner}" if c.owner else ""),
            ref, {**base, "tolerations": c.tolerations}, seconds))
    return results


def build(report: Report, api: str = DEFAULT_API) -> list[dict[str, Any]]:
    """One report object per namespace of the report, in the API group/version ``api``."""
    seconds = int(report.generated.astimezone(dt.UTC).timestamp())
    pods: dict[str, list[PodRow]] = defaultdict(list)
    claims: dict[str, list[ClaimRow]] = defaultdict(list)
    for p in report.pods:
        pods[p.namespace].append(p)
    for c in report.injected:
        claims[c.namespace].append(c)
    return [report_object(ns.name, _namespace_results(report, ns, pods[ns.name], claims[ns.name], seconds), api)
            for ns in report.namespaces]


def report_object(namespace: str, results: list[dict[str, Any]], api: str = DEFAULT_API,
                  name: str = NAME) -> dict[str, Any]:
    """The report object of one namespace holding ``results``, with their summary, in the API ``api``."""
    target = APIS[api]
    counts = Counter(r["result"] for r in results)
    obj: dict[str, Any] = {
        "apiVersion": target.api_version,
        "kind": target.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "scope": {"apiVersion": "v1", "kind": "Namespace", "name": namespace},
        "summary": {k: counts.get(k, 0) for k in ("pass", "fail", "warn", "error", "skip")},
        "results": results,
    }
    if target.group == "openreports.io":
        obj["source"] = SOURCE
    return obj
