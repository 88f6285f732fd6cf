"""deploy/: the kustomize overlays rendered by the real kustomize, checked against the 1.37 schemas and
against each other.

A wrong webhook configuration takes Pod creation down with it, so beyond schema validity these tests
pin the wiring that only breaks in a live cluster: the Certificate the CA is injected from, the
Service the API server dials, the paths the app serves, the namespaces a webhook must never gate,
and the failurePolicy chosen for each group of kinds.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from tests.builders.deploy import DEPLOY, K8S_VERSION, KUBECTL, ROOT, kustomize, needs_kustomize
from webhook.cluster.api import REQUIRED_RBAC
from webhook.gates.catalogue import GATES
from webhook.objects.pods import KINDS as OBJECT_KINDS

pytestmark = needs_kustomize

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

NAMESPACE = "dra-webhook"
SERVICE_ACCOUNT_USER = "system:serviceaccount:dra-webhook:dra-webhook"
MUST_EXCLUDE = {"kube-system", "kube-node-lease", "cert-manager", NAMESPACE}
COMMON_LABELS = {
    "app.kubernetes.io/name": "dra-migration-webhook",
    "app.kubernetes.io/instance": "dra-webhook",
    "app.kubernetes.io/part-of": "dra-migration-webhook",
    "app.kubernetes.io/managed-by": "kustomize",
    "app.kubernetes.io/version": VERSION,
}
SELECTOR = {k: COMMON_LABELS[k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}

# (group, version, resource) the engine handles: docs/design.md §3 plus the gate-check kinds.
# Every kind whose pod templates the webhook examines (webhook/objects/pods.py KINDS), plus the gate-check kinds.
WORKLOAD_KINDS = {
    *((k.group, v, k.resource) for k in OBJECT_KINDS for v in k.versions),
    # v1alpha2: the only version Kubernetes 1.36 serves (issue 13 item 8).
    *(("scheduling.k8s.io", v, r) for v in ("v1beta1", "v1alpha3", "v1alpha2") for r in ("podgroups", "workloads")),
    # CompositePodGroup (1.37, alpha): listed with the other scheduling kinds; only v1alpha3 is served.
    *(("scheduling.k8s.io", v, "compositepodgroups") for v in ("v1beta1", "v1alpha3", "v1alpha2")),
}
CLAIM_KINDS = {("resource.k8s.io", "v1", "resourceclaims"), ("resource.k8s.io", "v1", "resourceclaimtemplates")}
DEVICE_KINDS = {("resource.k8s.io", "v1", "deviceclasses"),
                *(("resource.k8s.io", v, "devicetaintrules") for v in ("v1", "v1beta2", "v1alpha3"))}
SLICE_KINDS = {("resource.k8s.io", "v1", "resourceslices"),
               # ResourcePoolStatusRequest: only gate findings apply; fails open beside the slices.
               ("resource.k8s.io", "v1alpha3", "resourcepoolstatusrequests")}
ALL_KINDS = WORKLOAD_KINDS | CLAIM_KINDS | DEVICE_KINDS | SLICE_KINDS
# Validation that fails closed: what the policy protects and what is immutable once admitted.
FAIL_CLOSED = CLAIM_KINDS | DEVICE_KINDS


# ------------------------------------------------------------------------------------------ rendering


def _copy_deploy(dest: Path) -> Path:
    """A copy of deploy/ without any certs a developer left in the working tree."""
    shutil.copytree(DEPLOY, dest / "deploy", ignore=shutil.ignore_patterns("certs"))
    return dest / "deploy"


def _run_certs_command(out: Path) -> None:
    """Exactly what the README tells developers to run: `dra-webhook certs --out DIR`."""
    from webhook.cli import main

    assert main(["certs", "--out", str(out)]) == 0


@pytest.fixture(scope="module")
def cm_objects() -> list[dict[str, Any]]:
    return kustomize(DEPLOY / "overlays" / "cert-manager")


@pytest.fixture(scope="module")
def dev_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    deploy = _copy_deploy(tmp_path_factory.mktemp("dev"))
    _run_certs_command(deploy / "overlays" / "dev" / "certs")
    return deploy


@pytest.fixture(scope="module")
def dev_objects(dev_tree: Path) -> list[dict[str, Any]]:
    return kustomize(dev_tree / "overlays" / "dev")


@pytest.fixture(params=["cert-manager", "dev"])
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    fixture = "cm_objects" if request.param == "cert-manager" else "dev_objects"
    return request.param, request.getfixturevalue(fixture)


def of_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in of_kind(objs, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def webhooks(objs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for cfg in of_kind(objs, "MutatingWebhookConfiguration") + of_kind(objs, "ValidatingWebhookConfiguration"):
        for hook in cfg["webhooks"]:
            yield cfg["kind"], hook


def rule_kinds(hook: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, v, r) for rule in hook["rules"] for g in rule["apiGroups"] for v in rule["apiVersions"]
            for r in rule["resources"]}


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objs, "Deployment", "dra-webhook")["spec"]["template"]["spec"]


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = pod_spec(objs)["containers"]
    return c


def arg(c: dict[str, Any], flag: str) -> str:
    args = c["args"]
    assert flag in args, f"{flag} missing from container args {args}"
    return args[args.index(flag) + 1]


def mount_of(objs: list[dict[str, Any]], volume: str) -> dict[str, Any]:
    (m,) = [m for m in container(objs)["volumeMounts"] if m["name"] == volume]
    return m


def volume(objs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (v,) = [v for v in pod_spec(objs)["volumes"] if v["name"] == name]
    return v


def tls_volume(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The volume mounted at --cert-dir."""
    c = container(objs)
    (m,) = [m for m in c["volumeMounts"] if m["mountPath"] == arg(c, "--cert-dir")]
    return volume(objs, m["name"])


# ------------------------------------------------------------------------------------------ schemas


def test_builtin_objects_validate_strictly(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, objs = rendered
    kinds, errors = set(), []
    for obj in objs:
        if obj["apiVersion"].startswith("cert-manager.io/"):
            continue
        kinds.add(obj["kind"])
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {e.message} at {'.'.join(map(str, e.path))}")
    assert not errors, f"{overlay}: " + "\n".join(errors)
    expected = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                "ResourceQuota", "ConfigMap", "Lease",
                "Deployment", "Service", "NetworkPolicy", "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration"}
    expected |= {"PodDisruptionBudget"} if overlay == "cert-manager" else {"Secret"}
    assert kinds == expected


def test_namespaced_objects_live_in_the_webhook_namespace(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration",
                      "ValidatingWebhookConfiguration"}
    for obj in objs:
        ns = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert ns is None, obj["kind"]
        else:
            assert ns == NAMESPACE, f"{obj['kind']}/{obj['metadata']['name']} in {ns!r}"
    assert one(objs, "Namespace")["metadata"]["name"] == NAMESPACE


_GO_DURATION = re.compile(r"^(\d+(\.\d+)?(h|m|s|ms))+$")


def test_cert_manager_objects_have_the_required_structure(cm_objects: list[dict[str, Any]]) -> None:
    cm = [o for o in cm_objects if o["apiVersion"].startswith("cert-manager.io/")]
    assert {o["apiVersion"] for o in cm} == {"cert-manager.io/v1"}
    assert sorted(o["kind"] for o in cm) == ["Certificate", "Certificate", "Issuer", "Issuer"]
    issuers = {o["metadata"]["name"]: o for o in of_kind(cm, "Issuer")}
    certs = {o["metadata"]["name"]: o for o in of_kind(cm, "Certificate")}
    for obj in cm:
        assert obj["metadata"]["namespace"] == NAMESPACE
        assert obj["metadata"]["labels"].items() >= COMMON_LABELS.items()
    for issuer in issuers.values():
        kinds = set(issuer["spec"]) & {"selfSigned", "ca", "acme", "vault", "venafi"}
        assert len(kinds) == 1, f"an Issuer needs exactly one issuer type, got {kinds}"
    for cert in certs.values():
        spec = cert["spec"]
        assert spec["secretName"]
        assert spec["issuerRef"]["kind"] == "Issuer" and spec["issuerRef"].get("group", "cert-manager.io") == (
            "cert-manager.io")
        assert spec["issuerRef"]["name"] in issuers, "issuerRef must name an Issuer in the same namespace"
        assert spec.get("dnsNames") or spec.get("commonName"), "a Certificate needs a subject or SANs"
        for key in ("duration", "renewBefore"):
            if key in spec:
                assert _GO_DURATION.match(spec[key]), f"{key} {spec[key]!r} is not a Go duration (no 'd')"
        if "renewBefore" in spec:
            assert _hours(spec["renewBefore"]) < _hours(spec.get("duration", "2160h"))

    # selfSigned Issuer -> CA Certificate -> CA Issuer -> serving Certificate
    (ca,) = [c for c in certs.values() if c["spec"].get("isCA")]
    (serving,) = [c for c in certs.values() if not c["spec"].get("isCA")]
    assert "selfSigned" in issuers[ca["spec"]["issuerRef"]["name"]]["spec"]
    assert ca["spec"]["commonName"], "a self-signed CA needs a Subject"
    assert ca["spec"]["duration"] == "87600h"
    assert ca["spec"]["privateKey"]["rotationPolicy"] == "Never"
    ca_issuer = issuers[serving["spec"]["issuerRef"]["name"]]
    assert ca_issuer["spec"]["ca"]["secretName"] == ca["spec"]["secretName"]
    assert serving["spec"]["secretName"] != ca["spec"]["secretName"]


def _hours(duration: str) -> float:
    units = {"h": 1.0, "m": 1 / 60, "s": 1 / 3600, "ms": 1 / 3_600_000}
    return sum(float(n) * units[u] for n, _, u in re.findall(r"(\d+(\.\d+)?)(h|ms|m|s)", duration))


# ------------------------------------------------------------------------------------------ cross-checks


def _serving_certificate(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (cert,) = [c for c in of_kind(objs, "Certificate") if not c["spec"].get("isCA")]
    return cert


def test_inject_ca_from_names_the_mounted_serving_certificate(cm_objects: list[dict[str, Any]]) -> None:
    serving = _serving_certificate(cm_objects)
    ref = f"{serving['metadata']['namespace']}/{serving['metadata']['name']}"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        annotations = one(cm_objects, kind)["metadata"].get("annotations", {})
        assert annotations.get("cert-manager.io/inject-ca-from") == ref, kind
    # ... and that Certificate's Secret is the one the server reads.
    assert tls_volume(cm_objects)["secret"]["secretName"] == serving["spec"]["secretName"]


def test_serving_dns_names_match_the_service(cm_objects: list[dict[str, Any]]) -> None:
    svc = one(cm_objects, "Service")["metadata"]
    name, ns = svc["name"], svc["namespace"]
    assert _serving_certificate(cm_objects)["spec"]["dnsNames"] == [f"{name}.{ns}.svc",
                                                                    f"{name}.{ns}.svc.cluster.local"]


def test_ca_bundle_is_left_to_the_injector_or_the_dev_secret(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, objs = rendered
    for _, hook in webhooks(objs):
        assert ("caBundle" in hook["clientConfig"]) == (overlay == "dev"), f"{overlay}: {hook['name']}"
    if overlay == "dev":
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            assert "cert-manager.io/inject-ca-from" not in one(objs, kind)["metadata"].get("annotations", {})


def _app_routes() -> dict[str, set[str]]:
    from webhook.serve.app import StaticPolicy, create_app

    app = create_app(StaticPolicy(None))
    return {rule.rule: set(rule.methods or ()) for rule in app.url_map.iter_rules()}


def test_every_webhook_calls_a_route_the_app_serves_through_the_service(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    _, objs = rendered
    routes = _app_routes()
    svc = one(objs, "Service")
    c = container(objs)
    container_ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    for kind, hook in webhooks(objs):
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"]) == (svc["metadata"]["name"], svc["metadata"]["namespace"])
        path = ref["path"]
        assert path == ("/mutate" if kind == "MutatingWebhookConfiguration" else "/validate"), hook["name"]
        assert "POST" in routes.get(path, set()), f"the app serves no POST {path}"
        port = ref.get("port", 443)
        assert port == 443
        (svc_port,) = [p for p in svc["spec"]["ports"] if p["port"] == port]
        target = svc_port["targetPort"]
        assert container_ports.get(target, target) == 8443
    # The server listens where the Service sends traffic.
    assert arg(c, "--bind") == "0.0.0.0:8443"
    assert svc["spec"]["selector"] == SELECTOR


def test_webhooks_never_gate_their_own_or_system_namespaces(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    own_ns = one(objs, "Deployment")["metadata"]["namespace"]
    for _, hook in webhooks(objs):
        sel = hook["namespaceSelector"]
        assert not sel.get("matchLabels"), "matchLabels would make the webhook opt-in"
        excluded: set[str] = set()
        for expr in sel["matchExpressions"]:
            assert expr["key"] == "kubernetes.io/metadata.name" and expr["operator"] == "NotIn", expr
            excluded |= set(expr["values"])
        assert excluded >= MUST_EXCLUDE | {own_ns}, f"{hook['name']} does not exclude {MUST_EXCLUDE - excluded}"


def test_match_conditions_skip_our_service_account_and_nodes(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    dep = one(objs, "Deployment")
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    sa_user = f"system:serviceaccount:{dep['metadata']['namespace']}:{sa}"
    assert sa_user == SERVICE_ACCOUNT_USER
    for _, hook in webhooks(objs):
        conditions = {c["name"]: c["expression"] for c in hook["matchConditions"]}
        assert len(conditions) == len(hook["matchConditions"]), "matchCondition names must be unique"
        exprs = list(conditions.values())
        assert f"request.userInfo.username != '{sa_user}'" in exprs, hook["name"]
        assert any("!('system:nodes' in request.userInfo.groups)" in e for e in exprs), hook["name"]


def test_webhook_names_and_fixed_fields(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    subdomain = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    for cfg in of_kind(objs, "MutatingWebhookConfiguration") + of_kind(objs, "ValidatingWebhookConfiguration"):
        names = [h["name"] for h in cfg["webhooks"]]
        assert len(names) == len(set(names)), f"duplicate webhook names in {cfg['kind']}"
    for kind, hook in webhooks(objs):
        name = hook["name"]
        assert subdomain.match(name) and len(name.split(".")) >= 3, f"{name}: needs >= 3 dot segments"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["matchPolicy"] == "Equivalent"
        assert 1 <= hook["timeoutSeconds"] <= 3, name
        if kind == "MutatingWebhookConfiguration":
            assert hook["reinvocationPolicy"] == "IfNeeded", name
        for rule in hook["rules"]:
            assert sorted(rule["operations"]) == ["CREATE", "UPDATE"], name
            for resource in rule["resources"]:
                assert "/" not in resource and "*" not in resource, f"{name}: {resource} (no subresources)"
            assert "*" not in rule["apiGroups"] and "*" not in rule["apiVersions"], name


def test_rules_cover_exactly_the_kinds_the_engine_handles(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        covered: list[tuple[str, str, str]] = []
        for hook in one(objs, kind)["webhooks"]:
            covered += sorted(rule_kinds(hook))
        assert len(covered) == len(set(covered)), f"{kind}: a kind is matched by two webhooks (called twice)"
        extra, missing = set(covered) - ALL_KINDS, ALL_KINDS - set(covered)
        assert not extra and not missing, f"{kind}: extra {extra}, missing {missing}"
    for _, hook in webhooks(objs):
        for rule in hook["rules"]:
            cluster = {r for r in rule["resources"] for v in rule["apiVersions"]
                       if ("resource.k8s.io", v, r) in DEVICE_KINDS | SLICE_KINDS}
            assert rule["scope"] == ("Cluster" if cluster else "Namespaced"), rule


def _plural(kind: str) -> str:
    return kind.lower() + ("es" if kind.endswith("s") else "s")


def test_every_gated_kind_is_routed_to_both_phases(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    """Issue 25 item 5: a kind the gate catalogue checks is sent by a mutating and a validating webhook."""
    _, objs = rendered
    gated = {kind for gate in GATES for kind, _ in gate.checks}
    wanted = {(k.rpartition("/")[0], _plural(k.rpartition("/")[2])) for k in gated}
    for config in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        routed = {(g, r) for hook in one(objs, config)["webhooks"] for g, _, r in rule_kinds(hook)}
        assert not wanted - routed, f"{config}: gated kinds no webhook sends: {sorted(wanted - routed)}"


def test_failure_policy_per_group_of_kinds(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    for kind, hook in webhooks(objs):
        kinds = rule_kinds(hook)
        policy = hook["failurePolicy"]  # always explicit: the API default is Fail
        if kind == "MutatingWebhookConfiguration":
            assert policy == "Ignore", f"{hook['name']}: mutation must fail open"
        elif kinds & FAIL_CLOSED:
            assert kinds <= FAIL_CLOSED, f"{hook['name']}: mixes fail-closed kinds with {kinds - FAIL_CLOSED}"
            assert policy == "Fail", hook["name"]
        else:
            assert policy == "Ignore", f"{hook['name']}: Pods/workloads/slices must fail open"
    validating = one(objs, "ValidatingWebhookConfiguration")["webhooks"]
    assert set().union(*(rule_kinds(h) for h in validating if h["failurePolicy"] == "Fail")) == FAIL_CLOSED


def test_every_failure_policy_carries_a_comment() -> None:
    lines = (DEPLOY / "base" / "webhooks.yaml").read_text().splitlines()
    hits = [i for i, line in enumerate(lines) if line.strip().startswith("failurePolicy:")]
    assert len(hits) == 5
    for i in hits:
        assert lines[i - 1].strip().startswith("#"), f"webhooks.yaml:{i + 1}: explain the failurePolicy choice"


# ------------------------------------------------------------------------------------------ policy


def test_policy_copy_matches_policies_default() -> None:
    source = ROOT / "policies" / "default.yaml"
    copy = DEPLOY / "base" / "policy" / "default.yaml"
    assert copy.read_bytes() == source.read_bytes(), (
        "deploy/base/policy/default.yaml differs from policies/default.yaml; "
        "run: cp policies/default.yaml deploy/base/policy/default.yaml"
    )


def test_policy_configmap_is_mounted_and_loads_like_the_server_reads_it(
    rendered: tuple[str, list[dict[str, Any]]], tmp_path: Path,
) -> None:
    from webhook.cli import main
    from webhook.policy.loader import load

    _, objs = rendered
    c = container(objs)
    policy_dir = arg(c, "--policy")
    (m,) = [m for m in c["volumeMounts"] if m["mountPath"] == policy_dir]
    assert "subPath" not in m
    cm = one(objs, "ConfigMap", volume(objs, m["name"])["configMap"]["name"])
    assert cm["metadata"]["name"].startswith("dra-webhook-policy-"), "hash suffix: a policy change rolls the pods"
    assert cm["data"]["default.yaml"].encode() == (ROOT / "policies" / "default.yaml").read_bytes()

    # The kubelet's layout of a ConfigMap volume: visible names are symlinks through ..data.
    stamp = tmp_path / "..2026_12_01_00_00_00.000000001"
    stamp.mkdir()
    for key, value in cm["data"].items():
        (stamp / key).write_text(value)
        (tmp_path / key).symlink_to(Path("..data") / key)
    (tmp_path / "..data").symlink_to(stamp.name)
    policy = load(tmp_path)
    assert policy.identity.startswith(yaml.safe_load(cm["data"]["default.yaml"])["metadata"]["name"] + "@")
    assert main(["lint", str(tmp_path)]) == 0


# ------------------------------------------------------------------------------------------ Deployment


def test_deployment_is_hardened_and_drains_gracefully(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    overlay, objs = rendered
    dep = one(objs, "Deployment")
    assert dep["spec"]["replicas"] == (3 if overlay == "cert-manager" else 1)
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    spec = pod_spec(objs)
    c = container(objs)

    # Pod Security "restricted", with a numeric uid that runAsNonRoot can verify.
    psc, csc = spec["securityContext"], c["securityContext"]
    assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert psc["runAsUser"] == 65532 and csc["runAsUser"] == 65532
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["capabilities"]["drop"] == ["ALL"] and not csc["capabilities"].get("add")
    assert not spec.get("hostNetwork") and not csc.get("privileged")

    # Writable scratch space on a read-only root: /tmp and the prometheus multiprocess directory.
    env = {e["name"]: e.get("value") for e in c["env"]}
    for path in ("/tmp", env["PROMETHEUS_MULTIPROC_DIR"]):
        (m,) = [m for m in c["volumeMounts"] if m["mountPath"] == path]
        assert "emptyDir" in volume(objs, m["name"]) and not m.get("readOnly"), path

    # The certificate directory: a Secret mounted whole (subPath mounts never see the ..data swap).
    tls = tls_volume(objs)
    (m,) = [m for m in c["volumeMounts"] if m["name"] == tls["name"]]
    assert "subPath" not in m and m["readOnly"] is True
    assert tls["secret"]["secretName"].startswith("dra-webhook-tls")

    # Probes in plain HTTP on the metrics port (--metrics-bind: no client certificate needed, issue 47 item 5).
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    metrics_port = int(arg(c, "--metrics-bind").rsplit(":", 1)[1])
    assert metrics_port != 8443
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
        get = c[probe]["httpGet"]
        assert (get["path"], get["scheme"], ports.get(get["port"], get["port"])) == (path, "HTTP", metrics_port), probe

    # preStop sleep lets endpoint removal propagate; the grace period covers it plus gunicorn's drain.
    sleep = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert sleep == 5
    assert spec["terminationGracePeriodSeconds"] > sleep + int(arg(c, "--graceful-timeout"))

    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind]), kind
    assert arg(c, "--workers") and arg(c, "--threads")

    spreads = {t["topologyKey"]: t for t in spec["topologySpreadConstraints"]}
    assert set(spreads) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    for t in spreads.values():
        assert t["labelSelector"] == {"matchLabels": SELECTOR}
    # Nodes without a zone label must not make the pods unschedulable.
    assert spreads["topology.kubernetes.io/zone"]["whenUnsatisfiable"] == "ScheduleAnyway"


def test_critical_priority_is_granted_by_a_scoped_quota(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    dep = one(objs, "Deployment")
    priority = pod_spec(objs)["priorityClassName"]
    assert priority == "system-cluster-critical"
    quota = one(objs, "ResourceQuota")
    assert quota["metadata"]["namespace"] == dep["metadata"]["namespace"]
    (expr,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert (expr["scopeName"], expr["operator"], expr["values"]) == ("PriorityClass", "In", [priority])
    assert int(quota["spec"]["hard"]["pods"]) > dep["spec"]["replicas"] + 1  # room for the rollout surge


def test_labels_everywhere_and_selectors_only_name_and_instance(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    overlay, objs = rendered
    for obj in objs:
        labels = obj["metadata"].get("labels", {})
        assert labels.items() >= COMMON_LABELS.items(), f"{obj['kind']}/{obj['metadata']['name']}"
        assert labels.get("app.kubernetes.io/component"), f"{obj['kind']}/{obj['metadata']['name']}"
    dep = one(objs, "Deployment")
    assert dep["spec"]["selector"] == {"matchLabels": SELECTOR}
    assert dep["spec"]["template"]["metadata"]["labels"].items() >= COMMON_LABELS.items()
    assert one(objs, "Service")["spec"]["selector"] == SELECTOR
    assert one(objs, "NetworkPolicy")["spec"]["podSelector"] == {"matchLabels": SELECTOR}
    if overlay == "cert-manager":
        pdb = one(objs, "PodDisruptionBudget")
        assert pdb["spec"]["selector"] == {"matchLabels": SELECTOR} and pdb["spec"]["minAvailable"] == 1
    else:
        assert not of_kind(objs, "PodDisruptionBudget"), "one replica + minAvailable 1 would block node drains"


def test_network_policy_admits_the_serving_port(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    """8443 from any source (the API server's address is not known here: README, Security), the metrics port
    from the monitoring namespace only (issue 47 item 5)."""
    _, objs = rendered
    np = one(objs, "NetworkPolicy")["spec"]
    assert np["policyTypes"] == ["Ingress"]
    ports = [(p["protocol"], p["port"]) for rule in np["ingress"] for p in rule["ports"]]
    metrics_port = int(arg(container(objs), "--metrics-bind").rsplit(":", 1)[1])
    assert ports == [("TCP", 8443), ("TCP", metrics_port)]
    assert "from" not in np["ingress"][0]
    assert np["ingress"][1]["from"] == [{"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring"]}]}}]


def test_rbac_is_read_only_and_limited_to_the_cluster_view(rendered: tuple[str, list[dict[str, Any]]]) -> None:
    _, objs = rendered
    role = one(objs, "ClusterRole")
    grants = {(g, r, v) for rule in role["rules"] for g in rule.get("apiGroups", [])
              for r in rule.get("resources", []) for v in rule["verbs"]}
    expected = {(g, r, v) for g, r in (("", "namespaces"), ("", "pods"), ("resource.k8s.io", "deviceclasses"),
                                       ("resource.k8s.io", "resourceclaims")) for v in ("get", "list", "watch")}
    expected.add(("resource.k8s.io", "resourceclaimtemplates", "get"))
    expected.add(("scheduling.k8s.io", "podgroups", "get"))
    expected |= {("resource.k8s.io", "resourceslices", v) for v in ("list", "watch")}  # unsatisfiable-claim
    expected |= {("autoscaling", "horizontalpodautoscalers", v) for v in ("list", "watch")}  # shared-claim-limit
    assert grants == expected
    assert grants == {(g, r, v) for rule in REQUIRED_RBAC for g in rule.get("apiGroups", [])
                      for r in rule.get("resources", []) for v in rule["verbs"]}
    # featureGates auto reads the API server's /metrics, and nothing else outside the API.
    urls = [(rule["nonResourceURLs"], rule["verbs"]) for rule in role["rules"] if "nonResourceURLs" in rule]
    assert urls == [(["/metrics"], ["get"])]
    assert urls == [(r["nonResourceURLs"], r["verbs"]) for r in REQUIRED_RBAC if "nonResourceURLs" in r]
    binding = one(objs, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}
    sa = one(objs, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]
    assert pod_spec(objs)["serviceAccountName"] == sa["name"]


def test_the_only_write_is_the_gauge_writers_lease_in_the_webhook_namespace(
    rendered: tuple[str, list[dict[str, Any]]],
) -> None:
    """webhook.cluster.leader GETs and updates one Lease; the Role grants that, in its own namespace only, get and
    update by name (its own Lease; it may read the compiled-policy reconciler's, never renew or take it over: issue
    #47). No create, which cannot be limited by name (a POST has none when it is authorized): the Lease ships with
    the install (deploy/base/lease.yaml), so the token cannot create the reconciler's Lease either."""
    _, objs = rendered
    role, binding = one(objs, "Role"), one(objs, "RoleBinding")
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
    leases = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}
    assert role["rules"] == [{**leases, "resourceNames": ["dra-webhook-gauges"], "verbs": ["get", "update"]},
                             {**leases, "resourceNames": ["dra-webhook-compiled"], "verbs": ["get"]}]
    (lease,) = [o for o in objs if o["kind"] == "Lease"]
    assert (lease["metadata"]["name"], lease["metadata"]["namespace"]) == ("dra-webhook-gauges", NAMESPACE)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    sa = one(objs, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]
    # The Lease's namespace and the candidate's name come from the downward API.
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in pod_spec(objs)["containers"][0]["env"]}
    assert env["POD_NAMESPACE"] == "metadata.namespace" and env["POD_NAME"] == "metadata.name"


# ------------------------------------------------------------------------------------------ dev overlay


def test_dev_ca_bundle_verifies_the_mounted_serving_certificate(
    dev_tree: Path, dev_objects: list[dict[str, Any]],
) -> None:
    certs = dev_tree / "overlays" / "dev" / "certs"
    secret = one(dev_objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}, "ca.key must never reach the cluster"
    assert tls_volume(dev_objects)["secret"]["secretName"] == secret["metadata"]["name"]

    def b64(value: str) -> bytes:  # kustomize wraps long base64; the API server's decoder skips newlines
        return base64.b64decode("".join(value.split()), validate=True)

    assert b64(secret["data"]["tls.crt"]) == (certs / "tls.crt").read_bytes()
    ca_pem = (certs / "ca.crt").read_bytes()
    for _, hook in webhooks(dev_objects):
        assert b64(hook["clientConfig"]["caBundle"]) == ca_pem, hook["name"]

    ca = x509.load_pem_x509_certificate(ca_pem)
    leaf = x509.load_pem_x509_certificate(b64(secret["data"]["tls.crt"]))
    leaf.verify_directly_issued_by(ca)
    svc = one(dev_objects, "Service")["metadata"]
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{svc['name']}.{svc['namespace']}.svc" in sans.get_values_for_type(x509.DNSName)


def test_dev_overlay_without_certs_names_the_missing_files(tmp_path: Path) -> None:
    deploy = _copy_deploy(tmp_path)
    proc = subprocess.run([KUBECTL, "kustomize", str(deploy / "overlays" / "dev")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "certs/tls.crt" in proc.stderr


def test_dev_certs_are_git_ignored() -> None:
    assert "certs/" in (DEPLOY / "overlays" / "dev" / ".gitignore").read_text().split()


# ------------------------------------------------------------------------------------------ image


def _final_stage(dockerfile: str) -> list[str]:
    lines = [line.strip() for line in dockerfile.splitlines() if line.strip() and not line.strip().startswith("#")]
    starts = [i for i, line in enumerate(lines) if line.upper().startswith("FROM ")]
    assert len(starts) >= 2, "multi-stage build expected"
    return lines[starts[-1]:]


def test_dockerfile_runs_non_root_with_the_deployment_paths(cm_objects: list[dict[str, Any]]) -> None:
    text = (ROOT / "Dockerfile").read_text()
    # Debian bookworm's python3 (3.11), as deploy/image/build.py (tests/deploy/test_image.py compares the rest).
    assert re.search(r"^ARG DEBIAN_IMAGE=debian:bookworm-slim$", text, re.M)
    final = _final_stage(text)
    assert final[0] == "FROM base"
    assert any(line.startswith("COPY --from=builder /opt/venv") for line in final)
    users = [line for line in final if line.startswith("USER ")]
    assert users == ["USER 65532:65532"], "numeric non-root uid, matching runAsUser"
    joined = "\n".join(final)
    assert not re.search(r"\b(gcc|g\+\+|build-essential|apt-get install)\b", joined), "no compilers in the final image"
    entrypoint = json.loads(next(line for line in final if line.startswith("ENTRYPOINT "))[len("ENTRYPOINT "):])
    cmd = json.loads(next(line for line in final if line.startswith("CMD "))[len("CMD "):])
    assert entrypoint == ["dra-webhook", "serve"]
    c = container(cm_objects)
    assert "command" not in c, "the Deployment relies on the image ENTRYPOINT"
    defaults = dict(zip(cmd[::2], cmd[1::2], strict=True))
    for flag in ("--policy", "--cert-dir", "--bind"):
        assert defaults[flag] == arg(c, flag), flag
    assert "dra-webhook = \"webhook.cli:main\"" in (ROOT / "pyproject.toml").read_text()


def _docker_ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    ignored = False
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw[1:] if negate else raw
        regex = re.compile(
            "^" + re.escape(pattern.rstrip("/")).replace(r"\*\*/", "(.*/)?").replace(r"\*", "[^/]*") + "$"
        )
        if any(regex.match("/".join(parts[:i])) for i in range(1, len(parts) + 1)):
            ignored = not negate
    return ignored


def test_dockerignore_sends_only_what_the_image_needs() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for needed in ("pyproject.toml", "README.md", "webhook/cli.py", "webhook/policy/loader.py",
                   "policies/default.yaml"):
        assert not _docker_ignored(needed, patterns), needed
    for secret in ("certs/tls.key", "deploy/overlays/dev/certs/tls.key", ".venv/bin/python", ".git/config",
                   "webhook/__pycache__/cli.cpython-311.pyc", "tests/deploy/test_deploy.py", "bench/out/x.json"):
        assert _docker_ignored(secret, patterns), secret
    # Every COPY source in the Dockerfile is inside the context.
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY ") and "--from=" not in line:
            for src in line.split()[1:-1]:
                assert not _docker_ignored(src.rstrip("/") + ("/x" if src.endswith("/") else ""), patterns), src


# ------------------------------------------------------------------ scheduler identities (issue 13 item 11)

SCHEDULER_CONDITION = "exclude-scheduler-extended-resource-claims"
_USERNAMES = re.compile(r"request\.userInfo\.username in \[([^\]]*)\]")


def _scheduler_lists(objs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Webhook name -> the usernames its scheduler-claim matchCondition excludes."""
    out = {}
    for _, hook in webhooks(objs):
        for cond in hook.get("matchConditions") or []:
            if cond["name"] == SCHEDULER_CONDITION:
                match = _USERNAMES.search(cond["expression"])
                assert match, cond["expression"]
                out[hook["name"]] = re.findall(r"'([^']*)'", match.group(1))
    return out


def test_scheduler_claim_condition_lists_the_policys_scheduler_usernames(cm_objects: list[dict[str, Any]]) -> None:
    """deploy/ and the shipped policy name the same claim-creating schedulers (the webhook's own judgement)."""
    from webhook.policy.loader import load

    usernames = sorted(load(DEPLOY / "base" / "policy" / "default.yaml").scheduler_usernames)
    assert _scheduler_lists(cm_objects) == {"resources.mutate.dra-migration.io": usernames,
                                            "resources.validate.dra-migration.io": usernames}


def test_readme_second_scheduler_patch_renders(tmp_path: Path) -> None:
    """The README's overlay patch, applied by the real kustomize, adds the second scheduler to both webhooks
    and leaves the rest of the expression as deploy/ has it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("#### A second scheduler"):]
    snippet = section[section.index("```yaml\n") + len("```yaml\n"):section.index("```\n", section.index("```yaml"))]
    deploy = _copy_deploy(tmp_path)
    overlay = deploy / "overlays" / "second-scheduler"
    overlay.mkdir()
    doc = yaml.safe_load(snippet)
    doc.update({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["../cert-manager"]})
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(doc))
    objs = kustomize(overlay)
    both = ["system:kube-scheduler", "system:serviceaccount:kube-system:gpu-scheduler"]
    assert _scheduler_lists(objs) == {"resources.mutate.dra-migration.io": both,
                                      "resources.validate.dra-migration.io": both}
    base = {h["name"]: h for _, h in webhooks(kustomize(DEPLOY / "overlays" / "cert-manager"))}
    for _, hook in webhooks(objs):  # everything else exactly as deploy/ renders it
        listed = "['system:kube-scheduler', 'system:serviceaccount:kube-system:gpu-scheduler']"
        expected = json.loads(json.dumps(base[hook["name"]]).replace("['system:kube-scheduler']", listed))
        assert hook == expected, hook["name"]
