"""Issue 47 item 5 on the real API server: the webhook requires a client certificate, and the API server presents one.

A control plane of its own (etcd and kube-apiserver v1.36.2), started with ``--admission-control-config-file``: an
AdmissionConfiguration (apiserver.config.k8s.io/v1) whose ValidatingAdmissionWebhook and MutatingAdmissionWebhook
plugins name a kubeconfig (WebhookAdmissionConfiguration ``kubeConfigFile``) with one user entry, named after the
host:port the webhook's URL calls (``127.0.0.1:PORT``; in a cluster, ``dra-webhook.dra-webhook.svc:443``), carrying
the client certificate and key. How the API server picks that entry: ``defaultAuthenticationInfoResolver.clientConfig``
in staging/src/k8s.io/apiserver/pkg/util/webhook/authentication.go (exact ``host:port``, then ``*.``-prefixed
names, then without ``:443``, then ``*``, then the kubeconfig's current context, else anonymous), with the
``host:port`` from ``ClientManager.HookClient`` in pkg/util/webhook/client.go (a URL's host, ``:443`` added when it
has no port; a Service's ``<name>.<namespace>.svc:<port>``); ``kubeConfigFile`` must be absolute (``LoadConfig`` in
staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/config/kubeconfig.go).

``dra-webhook serve --client-ca CA --client-cn NAME`` (offline: cohorts by namespace name) then shows: a Pod the
policy denies is denied with the webhook's own message through the API server (the handshake with the API server's
certificate went through, and failurePolicy Fail would have said otherwise), a plain Pod is stored; the same webhook
called as ``localhost:PORT``, a name the kubeconfig has no user for, gets no certificate from the API server and is
refused at the handshake (the API server reports the failed call); a client without a certificate is refused too.
"""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import binaries
from tests.e2e.binaries import ROOT
from tests.e2e.controlplane import ControlPlane
from tests.e2e.install import Webhook
from tests.e2e.kube import Kube
from tests.e2e.objects import pod
from tests.e2e.pki import PKI
from tests.e2e.waits import eventually

POLICY = Path(__file__).parent / "data" / "policy.yaml"
CLIENT_CN = "kube-apiserver-webhook-client"
CHECKED = "mig-client-auth"  # mig-*: Deny for legacy names (data/policy.yaml); the webhook is called as 127.0.0.1
UNNAMED = "mig-client-auth-localhost"  # the webhook called as localhost: no kubeconfig user for that name


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def admission_files(work: Path, host_port: str, cert: tuple[Path, Path]) -> Path:
    """The AdmissionConfiguration and the kubeconfig it names, as README (Security) documents them."""
    kubeconfig = work / "webhook-clients.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "users": [{"name": host_port, "user": {"client-certificate-data": _b64(cert[0]),
                                               "client-key-data": _b64(cert[1])}}],
    }))
    config = work / "admission-config.yaml"
    plugin = {"apiVersion": "apiserver.config.k8s.io/v1", "kind": "WebhookAdmissionConfiguration",
              "kubeConfigFile": str(kubeconfig.resolve())}
    config.write_text(yaml.safe_dump({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [{"name": name, "configuration": plugin}
                    for name in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")],
    }))
    return config


def webhook_config(port: int, ca_bundle: str) -> dict[str, Any]:
    """Two webhooks on the same server: one called as 127.0.0.1 (named in the kubeconfig), one as localhost."""
    def hook(name: str, host: str, namespace: str) -> dict[str, Any]:
        return {
            "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "timeoutSeconds": 10, "clientConfig": {"url": f"https://{host}:{port}/validate", "caBundle": ca_bundle},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        }
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "client-auth.e2e.dra-migration.io"},
            "webhooks": [hook("named.client-auth.e2e.dra-migration.io", "127.0.0.1", CHECKED),
                         hook("unnamed.client-auth.e2e.dra-migration.io", "localhost", UNNAMED)]}


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory):
    found = binaries.find_or_skip()
    work = tmp_path_factory.mktemp("client-auth")
    callers = PKI(work / "callers")  # the CA the webhook trusts for its callers
    apiserver_cert = callers.issue("apiserver-webhook-client", CLIENT_CN)
    certs = work / "serving"
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(certs)], check=True, capture_output=True,
                   cwd=ROOT)
    webhook = Webhook(work, certs, None, POLICY, client_cert=apiserver_cert,
                      extra_args=("--client-ca", str(callers.ca), "--client-cn", CLIENT_CN))
    cp = ControlPlane(found, work / "plane", controllers=False,
                      admission_config=admission_files(work, f"127.0.0.1:{webhook.port}", apiserver_cert))
    try:
        cp.start()
        kube = Kube(cp.api())
        for ns in (CHECKED, UNNAMED):  # no controller-manager here: the harness makes the ServiceAccount
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": "default", "namespace": ns}})
        webhook.start(synced=())
        kube.create(webhook_config(webhook.port, _b64(certs / "ca.crt")))
        yield kube, webhook, certs
    finally:
        webhook.close()
        cp.stop()


def test_the_api_server_presents_its_certificate_and_the_webhook_answers(plane) -> None:
    kube, webhook, _ = plane
    denied = kube.denial(pod("legacy", CHECKED, resource="vendor.example.com/gpu"), dry_run=True)
    assert "dra-migration.io" in denied.message and "failed calling webhook" not in denied.message, denied.message
    stored = kube.create(pod("plain", CHECKED, resource=None), dry_run=True).obj
    assert stored["metadata"]["namespace"] == CHECKED
    assert "without a valid client certificate" not in webhook.output()
    assert "not naming" not in webhook.output()


def test_a_call_with_no_certificate_is_refused_at_the_handshake(plane) -> None:
    """``localhost:PORT`` has no user in the kubeconfig (and it has no current context): the API server calls
    anonymously, the webhook refuses the handshake, and failurePolicy Fail refuses the Pod."""
    kube, webhook, _ = plane
    denied = kube.denial(pod("plain", UNNAMED, resource=None), dry_run=True)
    assert "failed calling webhook" in denied.message and "unnamed.client-auth" in denied.message, denied.message
    # v1.36.2 says: failed to call webhook: Post "https://localhost:PORT/validate?timeout=10s": remote error: tls:
    # certificate required (the TLS 1.3 alert the webhook sent).
    # With TLS 1.3 the server's refusal comes after the client's Finished, so what Go reports depends on timing:
    # the alert ("tls: certificate required"), a reset, or "use of closed network connection". Each is the call
    # failing at the transport, never an answer: the webhook's own log line below says it was the refused handshake.
    assert "failed to call webhook" in denied.message and "status code" not in denied.message, denied.message
    # The worker logs the refusal after the handshake failed: the API server may answer before that line is written.
    eventually(lambda: "PEER_DID_NOT_RETURN_A_CERTIFICATE" in webhook.output(), "the refused handshake logged", 15)


def test_a_client_without_a_certificate_gets_no_http_answer(plane) -> None:
    _, webhook, certs = plane
    ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)), \
            socket.create_connection(("127.0.0.1", webhook.port), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert not tls.recv(1024)  # an orderly close without an answer counts as refused too
        raise ConnectionResetError("closed without an answer")
    assert webhook.readyz()["ready"] is True  # with the certificate it answers
