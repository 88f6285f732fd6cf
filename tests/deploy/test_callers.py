"""Issue 47 item 5 in deploy/: the opt-in client CA (deploy/client-ca, chart `clientAuth`) and the narrowed
NetworkPolicy (chart `networkPolicy.apiServerCIDRs`, `metricsNamespaces`).

What the flags do is proven on the real server (tests/processes/test_client_auth.py) and with the real API server
(tests/e2e/test_client_auth.py); here: the rendered objects pass those flags, mount what they name, and validate.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.builders.chart import template, values_file
from tests.builders.deploy import DEPLOY, kustomize, needs_kustomize
from tests.deploy.test_chart import validate

pytestmark = needs_kustomize


def _webhook(objs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _assert_client_ca(objs: list[dict[str, Any]], secret: str, key: str) -> None:
    """--client-ca names a file in a read-only mount of the Secret holding the CA under that key."""
    pod, c = _webhook(objs)
    path = _flag(c["args"], "--client-ca")
    assert path is not None and path.endswith("/" + key), c["args"]
    (mount,) = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")
                and m["mountPath"] != "/"]
    assert mount["readOnly"] is True and "subPath" not in mount  # the kubelet's ..data swap reaches a whole mount
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == secret
    assert path[len(mount["mountPath"].rstrip("/")) + 1:] == key


def test_the_client_ca_component_requires_the_ca_in_its_secret(tmp_path: Path) -> None:
    tree = tmp_path / "deploy"
    shutil.copytree(DEPLOY, tree, ignore=shutil.ignore_patterns("chart"))
    overlay = tree / "overlays" / "with-client-ca"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources:\n- ../cert-manager\ncomponents:\n- ../../client-ca\n")
    objs = kustomize(overlay)
    _assert_client_ca(objs, "dra-webhook-client-ca", "ca.crt")
    _, c = _webhook(objs)
    assert _flag(c["args"], "--metrics-bind") and c["readinessProbe"]["httpGet"]["port"] == "metrics"
    validate(objs)
    # Opt-in: the production overlay asks for no client certificate.
    assert "--client-ca" not in _webhook(kustomize(DEPLOY / "overlays" / "cert-manager"))[1]["args"]


def test_chart_client_auth_renders_the_flags_and_the_mount(helm: Path, helm_home: Path, tmp_path: Path) -> None:
    values = {"clientAuth": {"enabled": True, "secretName": "apiserver-client-ca", "key": "bundle.pem",
                             "commonName": "kube-apiserver"}}
    objs = template(helm, helm_home, "-f", values_file(tmp_path, values), namespace="gpu-admission")
    validate(objs)
    _assert_client_ca(objs, "apiserver-client-ca", "bundle.pem")
    assert _flag(_webhook(objs)[1]["args"], "--client-cn") == "kube-apiserver"
    off = template(helm, helm_home)
    assert not {"--client-ca", "--client-cn"} & set(_webhook(off)[1]["args"])
    no_name = {"clientAuth": {"enabled": True}}
    args = _webhook(template(helm, helm_home, "-f", values_file(tmp_path, no_name)))[1]["args"]
    assert _flag(args, "--client-ca") == "/etc/dra-webhook/client-ca/ca.crt" and "--client-cn" not in args


def test_chart_network_policy_narrows_both_ports(helm: Path, helm_home: Path, tmp_path: Path) -> None:
    values = {"networkPolicy": {"apiServerCIDRs": ["10.0.0.10/32", "fd00::1/128"],
                                "metricsNamespaces": ["observability", "prometheus"]}}
    objs = template(helm, helm_home, "-f", values_file(tmp_path, values))
    validate(objs)
    (np,) = [o for o in objs if o["kind"] == "NetworkPolicy"]
    tls, metrics = np["spec"]["ingress"]
    assert tls["ports"] == [{"protocol": "TCP", "port": 8443}]
    assert tls["from"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}, {"ipBlock": {"cidr": "fd00::1/128"}}]
    assert metrics["from"] == [{"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["observability", "prometheus"]}]}}]
    metrics_port = metrics["ports"][0]["port"]
    assert {p["containerPort"] for p in _webhook(objs)[1]["ports"]} == {8443, metrics_port}


@pytest.mark.parametrize(("values", "message"), [
    ({"networkPolicy": {"apiServerCIDRs": ["10.0.0.10"]}}, "/networkPolicy/apiServerCIDRs/0"),
    ({"clientAuth": {"enabled": True, "secretName": ""}}, "/clientAuth/secretName"),
    ({"clientAuth": {"enable": True}}, "additional properties 'enable' not allowed"),
    ({"networkPolicy": {"metricsNamespaces": []}}, "/networkPolicy/metricsNamespaces"),
])
def test_chart_schema_refuses_bad_caller_values(helm: Path, helm_home: Path, tmp_path: Path,
                                                values: dict[str, Any], message: str) -> None:
    from tests import helm_cli
    from tests.builders.chart import RELEASE

    proc = helm_cli.run(helm, helm_home, "template", RELEASE, str(helm_cli.CHART), "-f",
                        values_file(tmp_path, values), check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
