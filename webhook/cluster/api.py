"""Kubernetes API calls (official ``kubernetes`` client): connect, errors, raw list/get, gates, reports.

Two users: the live cluster view (``webhook.cluster.live_view``, ``webhook.cluster.informer``), and the
``report``/``preflight``/``gates``/``lint`` commands, through the ``list_*`` functions. Everything comes back
as raw JSON dicts (``_preload_content=False``): lossless, and the same shape the rules see in
AdmissionReviews.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from types import MappingProxyType
from typing import Any

from kubernetes import client, config
from kubernetes.client import rest as kube_rest
from kubernetes.client.exceptions import ApiException as ApiException  # re-exported: commands catch it

from webhook.cluster import lists as kube_lists
from webhook.gates.cluster import ClusterGates, parse_metrics, served_versions

log = logging.getLogger("webhook.kube_api")

# What the webhook and the report/preflight commands read, as ClusterRole rules. The webhook itself needs
# namespaces (list/watch, get on cache misses), deviceclasses (list/watch), pods (get: owner lookups),
# podgroups (get: shared-claim lookups), resourceclaims and resourceclaimtemplates (get: the DeviceClasses a
# Pod's claims ask for, for mixed-allocation), horizontalpodautoscalers (list/watch: shared-claim-limit counts an
# autoscaler's maxReplicas); `report` and `preflight` list pods, resourceclaims, namespaces
# and deviceclasses. Nothing is ever written.
REQUIRED_RBAC: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["namespaces", "pods"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["deviceclasses", "resourceclaims"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"], "verbs": ["get"]},
    # unsatisfiable-claim: the devices of every driver (list/watch).
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list", "watch"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["podgroups"], "verbs": ["get"]},
    # shared-claim-limit: the HPAs that scale a workload naming a shared claim (list/watch).
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list", "watch"]},
    # featureGates auto: the API server's kubernetes_feature_enabled samples (discovery needs no rule).
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
)

class ClusterError(RuntimeError):
    """The cluster could not be reached or configured; the message is meant for a human."""


def connect(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from ``kubeconfig``, else ``$KUBECONFIG``, else in-cluster config, else ~/.kube/config.

    Reads configuration only: no request is made and no thread started (safe before gunicorn forks).
    """
    cfg = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    if path and not any(os.path.exists(os.path.expanduser(p)) for p in path.split(os.pathsep) if p):
        raise ClusterError(f"kubeconfig {path} does not exist")
    try:
        if path:
            config.load_kube_config(config_file=path, client_configuration=cfg, persist_config=False)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        elif os.path.exists(os.path.expanduser("~/.kube/config")):
            config.load_kube_config(
                config_file=os.path.expanduser("~/.kube/config"), client_configuration=cfg, persist_config=False
            )
        else:
            raise ClusterError(
                "no cluster configuration: pass --kubeconfig, set KUBECONFIG, or run in a Pod with a service account"
            )
    except config.ConfigException as exc:
        raise ClusterError(f"cannot load cluster configuration{f' from {path}' if path else ''}: {exc}") from None
    except OSError as exc:
        raise ClusterError(f"cannot read kubeconfig {path}: {exc.strerror or exc}") from None
    return client.ApiClient(configuration=cfg)


def describe_error(exc: BaseException) -> str:
    """One line for logs, status and audit annotations: HTTP status and the API's message, or the error."""
    if isinstance(exc, ApiException):
        message = ""
        try:
            message = (json.loads(exc.body or "") or {}).get("message", "")
        except (ValueError, AttributeError):
            pass
        text = f"HTTP {exc.status} {exc.reason or ''}".rstrip()
        return f"{text}: {message}" if message else text
    pool, reason = getattr(exc, "pool", None), getattr(exc, "reason", None)
    if type(exc).__name__ == "MaxRetryError" and pool is not None:
        # urllib3 gave up connecting: say where and why in a few words, not the retry machinery.
        why = str(reason).rsplit(": ", 1)[-1] if reason is not None else "no response"
        return f"cannot reach the API server at {pool.host}:{pool.port}: {why}"
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def quiet_client_logs() -> None:
    """For one-shot commands: urllib3's per-retry WARNING lines are noise next to our one-line error."""
    logging.getLogger("urllib3").setLevel(logging.ERROR)


# -- raw JSON calls -------------------------------------------------------------------------------------


def call_raw(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Call a generated API method and return its JSON body as a dict (no model round trip)."""
    resp = fn(*args, _preload_content=False, **kwargs)
    try:
        body = json.loads(resp.data)
    finally:
        resp.release_conn()
    if not isinstance(body, dict):
        raise ValueError(f"the API server answered with a JSON {type(body).__name__}, expected an object")
    return body


def list_raw(
    fn: Callable[..., Any], *args: Any, request_timeout: float | tuple[float, float] | None = None, **kwargs: Any
) -> tuple[list[dict[str, Any]], str]:
    """All items of a (paginated) list call and the list's resourceVersion: small lists only (Namespaces,
    DeviceClasses); bulk reads keep what they need page by page with ``webhook.cluster.lists``, whose page loop
    this is."""
    items: list[dict[str, Any]] = []
    rv = ""
    for page, meta in kube_lists.pages(fn, *args, timeout=request_timeout, **kwargs):
        items.extend(page)
        rv = meta.get("resourceVersion", "")
    return items, rv


def list_namespaces(api: client.ApiClient) -> list[dict[str, Any]]:
    return list_raw(client.CoreV1Api(api).list_namespace)[0]


def namespace_names(api: client.ApiClient) -> frozenset[str]:
    """The names of the cluster's Namespaces, page by page (nothing else of them is kept)."""
    return frozenset(kube_lists.stream(api, "namespaces", project=lambda o: (o.get("metadata") or {}).get("name")))


def get_namespace(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    """A Namespace, or None when it does not exist."""
    try:
        return call_raw(client.CoreV1Api(api).read_namespace, name)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def list_pods(api: client.ApiClient, namespace: str | None = None) -> list[dict[str, Any]]:
    core = client.CoreV1Api(api)
    if namespace:
        return list_raw(core.list_namespaced_pod, namespace)[0]
    return list_raw(core.list_pod_for_all_namespaces)[0]


def list_claims(api: client.ApiClient, namespace: str | None = None) -> list[dict[str, Any]]:
    """resource.k8s.io/v1 ResourceClaims."""
    res = client.ResourceV1Api(api)
    if namespace:
        return list_raw(res.list_namespaced_resource_claim, namespace)[0]
    return list_raw(res.list_resource_claim_for_all_namespaces)[0]


def server_version(api: client.ApiClient, timeout: float | tuple[float, float] = (5.0, 10.0)) -> str | None:
    """The API server's ``gitVersion`` from discovery ``/version`` (e.g. ``v1.37.0``); None, logged, when it
    cannot be read (webhook/gates/eviction.py then assumes the behaviour of every released version)."""
    try:
        doc = call_raw(client.VersionApi(api).get_code, _request_timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - any failure means "unknown", said in the log
        log.info("reading the API server version failed: %s", describe_error(exc))
        return None
    version = doc.get("gitVersion")
    return version if isinstance(version, str) else None


#: PodGroup versions, newest first: 1.37 serves scheduling.k8s.io/v1beta1 (staging/src/k8s.io/api/scheduling/v1beta1/
#: types.go, ``prerelease-lifecycle-gen:introduced=1.37``, 01d0b727) and v1alpha3 (v1alpha3/register.go
#: ``addKnownTypes``: Workload, PodGroup, 4e67a753), and no longer v1alpha2 (PR #138572 "drops v1alpha2 entirely");
#: 1.36 serves v1alpha2 (webhook/gates/catalogue.py, docs/dra-1.37.md).
PODGROUP_VERSIONS = ("v1beta1", "v1alpha3", "v1alpha2")


def podgroup_uids(api: client.ApiClient, keys: Iterable[tuple[str, str]],
                  timeout: float | tuple[float, float] = (5.0, 10.0)) -> dict[tuple[str, str], str]:
    """The UID of each named PodGroup, from the first served version that has it; groups that cannot be read
    (absent, unserved, forbidden) are left out, so the caller falls back to their names."""
    custom = client.CustomObjectsApi(api)
    found: dict[tuple[str, str], str] = {}
    for namespace, name in sorted(set(keys)):
        for version in PODGROUP_VERSIONS:
            try:
                obj = call_raw(custom.get_namespaced_custom_object, "scheduling.k8s.io", version, namespace,
                               "podgroups", name, _request_timeout=timeout)
            except Exception as exc:  # noqa: BLE001 - 404 on an unserved version, RBAC, outage: try on, then name
                log.debug("PodGroup %s/%s at %s: %s", namespace, name, version, describe_error(exc))
                continue
            uid = (obj.get("metadata") or {}).get("uid")
            if isinstance(uid, str) and uid:
                found[(namespace, name)] = uid
            break
    return found


def list_device_classes(api: client.ApiClient) -> list[dict[str, Any]]:
    return list_raw(client.ResourceV1Api(api).list_device_class)[0]


def _get_text_lines(api: client.ApiClient, path: str, timeout: float | tuple[float, float]) -> Iterator[str]:
    """GET a non-resource text path (``/metrics``) with the client's credentials, line by line."""
    params = api.param_serialize(
        "GET", path, header_params={"Accept": "text/plain", "Accept-Encoding": "gzip"}, auth_settings=["BearerToken"]
    )
    resp = api.call_api(*params, _request_timeout=timeout).response  # the urllib3 response, not read yet
    if resp.status >= 300:
        resp.read()
        raise ApiException(http_resp=kube_rest.RESTResponse(resp))
    try:
        rest = b""
        for chunk in resp.stream(1 << 16, decode_content=True):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if line.startswith(b"kubernetes_feature_enabled"):
                    yield line.decode("utf-8", "replace")
        if rest.startswith(b"kubernetes_feature_enabled"):
            yield rest.decode("utf-8", "replace")
    finally:
        resp.release_conn()


def read_feature_gates(api: client.ApiClient, timeout: float | tuple[float, float] = (5.0, 30.0)) -> ClusterGates:
    """The API server's gate states (``/metrics``) and served group/versions (``/apis`` discovery).

    Raises ApiException (e.g. 403 without the nonResourceURL rule) or ValueError (no gate samples).
    """
    enabled, stages = parse_metrics(_get_text_lines(api, "/metrics", timeout))
    try:
        served = served_versions(call_raw(client.ApisApi(api).get_api_versions, _request_timeout=timeout))
    except Exception as exc:  # discovery is informational: the gates stand without it
        log.info("API discovery failed, served versions unknown: %s", describe_error(exc))
        served = frozenset()
    return ClusterGates(MappingProxyType(enabled), MappingProxyType(stages), served)


def list_migration_objects(
    api: client.ApiClient,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Namespaces, Pods, ResourceClaims and DeviceClasses of the whole cluster (the live gauges' read).

    DeviceClasses are None when resource.k8s.io/v1 is not served (404): no mapping check then.
    """
    namespaces, pods, claims = list_namespaces(api), list_pods(api), list_claims(api)
    try:
        classes: list[dict[str, Any]] | None = list_device_classes(api)
    except ApiException as exc:
        if exc.status != 404:
            raise
        classes = None
    return namespaces, pods, claims, classes


def apply_policy_reports(
    api: client.ApiClient,
    reports: list[dict[str, Any]],
    group: str,
    version: str,
    plural: str,
    selector: str,
    namespace: str | None = None,
) -> list[str]:
    """Create or replace ``reports``, and delete our earlier reports (``selector``) for namespaces no longer
    reported, in ``namespace`` or everywhere. Returns one line per change. RBAC: get, list, create, update,
    delete on ``plural`` in ``group`` (deploy/policyreports/rbac.yaml).
    """
    custom = client.CustomObjectsApi(api)
    try:
        if namespace:
            existing = call_raw(custom.list_namespaced_custom_object, group, version, namespace, plural,
                                 label_selector=selector)
        else:
            existing = call_raw(custom.list_cluster_custom_object, group, version, plural, label_selector=selector)
    except ApiException as exc:
        if exc.status == 404:
            raise ClusterError(
                f"{plural}.{group}/{version} is not served by this cluster: install its CRD first "
                "(Kyverno or Policy Reporter install it)") from None
        raise
    current = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in existing.get("items") or []}
    done: list[str] = []
    for obj in reports:
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        old = current.pop(key, None)
        if old is None:
            call_raw(custom.create_namespaced_custom_object, group, version, key[0], plural, obj)
            done.append(f"created {plural}.{group} {key[0]}/{key[1]}")
        else:
            body = {**obj, "metadata": {**meta, "resourceVersion": old["metadata"]["resourceVersion"]}}
            call_raw(custom.replace_namespaced_custom_object, group, version, key[0], plural, key[1], body)
            done.append(f"updated {plural}.{group} {key[0]}/{key[1]}")
    for ns, name in sorted(current):
        try:
            call_raw(custom.delete_namespaced_custom_object, group, version, ns, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        done.append(f"deleted {plural}.{group} {ns}/{name} (namespace no longer in the report)")
    return done
