"""Server-side apply of the compiled admission policies, and the API server's type check of them.

``compile --validate`` applies with field manager ``dra-webhook-compile`` (``policies.FIELD_MANAGER``) and waits
for the API server's ValidatingAdmissionPolicy type checker to report: kubernetes v1.36
staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/typechecking.go (``TypeChecker.Check``)
fills ``status.typeChecking.expressionWarnings`` and sets ``status.observedGeneration`` once it has run
(pkg/controller/validatingadmissionpolicystatus/controller.go, ``reconcile``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from webhook.cluster.api import ApiException, ClusterError, describe_error

PLURALS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}


def _path(obj: dict[str, Any]) -> str:
    return f"/apis/{obj['apiVersion']}/{PLURALS[obj['kind']]}/{obj['metadata']['name']}"


def _call(api: client.ApiClient, method: str, path: str, body: Any = None, query: list[tuple[str, Any]] | None = None,
          content_type: str = "application/json") -> dict[str, Any]:
    request = api.param_serialize(method, path, query_params=query or [], body=body,
                                  header_params={"Accept": "application/json", "Content-Type": content_type},
                                  auth_settings=["BearerToken"])
    resp = api.call_api(*request, _request_timeout=(5, 30))
    data = resp.read()
    if not 200 <= resp.status <= 299:
        raise ApiException(status=resp.status, reason=resp.reason, http_resp=resp)
    doc = json.loads(data or b"{}")
    return doc if isinstance(doc, dict) else {}


def apply(api: client.ApiClient, obj: dict[str, Any], manager: str) -> dict[str, Any]:
    """Server-side apply ``obj`` (forcing conflicts: these objects are ours) and return what is stored."""
    try:
        return _call(api, "PATCH", _path(obj), json.dumps(obj), [("fieldManager", manager), ("force", "true")],
                     "application/apply-patch+yaml")
    except ApiException as exc:
        raise ClusterError(f"applying {obj['kind']} {obj['metadata']['name']}: {describe_error(exc)}") from None
    except Exception as exc:  # urllib3 errors: unreachable, TLS
        raise ClusterError(f"applying {obj['kind']} {obj['metadata']['name']}: {describe_error(exc)}") from None


def get(api: client.ApiClient, path: str) -> dict[str, Any] | None:
    """The object at ``path``, or None when there is none (404)."""
    try:
        return _call(api, "GET", path)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise ClusterError(f"reading {path}: {describe_error(exc)}") from None
    except Exception as exc:  # urllib3 errors: unreachable, TLS
        raise ClusterError(f"reading {path}: {describe_error(exc)}") from None


def prune(api: client.ApiClient, keep: list[dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """Delete the objects of ``PLURALS``' kinds carrying ``labels`` that are not in ``keep`` (an action or layout a
    new compile no longer produces would otherwise go on enforcing an old stage). ``Kind name`` of each deleted."""
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    kept = {(o["kind"], o["metadata"]["name"]) for o in keep}
    deleted = []
    for kind, plural in PLURALS.items():
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}"
        try:
            items = _call(api, "GET", path, query=[("labelSelector", selector)]).get("items") or []
            for item in items:
                name = item["metadata"]["name"]
                if (kind, name) not in kept:
                    _call(api, "DELETE", f"{path}/{name}")
                    deleted.append(f"{kind} {name}")
        except ApiException as exc:
            raise ClusterError(f"pruning {plural}: {describe_error(exc)}") from None
    return deleted


def type_checking(api: client.ApiClient, stored: list[dict[str, Any]], timeout: float = 60.0,
                  sleep: Callable[[float], None] = time.sleep) -> dict[str, list[dict[str, Any]] | None]:
    """Name -> ``status.typeChecking.expressionWarnings`` of each applied policy, once the API server's status
    controller (kube-controller-manager) checked its generation; None for a policy not checked within ``timeout``
    seconds (one deadline for all)."""
    deadline = time.monotonic() + timeout
    pending = {o["metadata"]["name"]: o for o in stored}
    out: dict[str, list[dict[str, Any]] | None] = {}
    while pending:
        for name, current in list(pending.items()):
            status = current.get("status") or {}
            generation = current.get("metadata", {}).get("generation")
            if generation is not None and status.get("observedGeneration") == generation:
                out[name] = list((status.get("typeChecking") or {}).get("expressionWarnings") or [])
                del pending[name]
        if not pending or time.monotonic() > deadline:
            break
        sleep(0.5)
        for name, current in pending.items():
            try:
                pending[name] = _call(api, "GET", _path(current))
            except ApiException as exc:
                raise ClusterError(f"reading {current['kind']} {name}: {describe_error(exc)}") from None
    return {**out, **dict.fromkeys(pending)}
