"""A real control plane on loopback: etcd, kube-apiserver, kube-scheduler, kube-controller-manager.

A Python re-implementation of ``shared/k8s/reference-start.sh`` (the verified flags) for one test session,
in a temporary directory, with fresh certificates, on free loopback ports. Third-party binaries cannot take
a pre-bound socket, so a component whose port was taken between the probe and its start (it exits saying
"address already in use") is started again on other ports.
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
import ssl
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.e2e import procs
from tests.e2e.binaries import Binaries
from tests.e2e.pki import PKI
from tests.e2e.waits import eventually

log = logging.getLogger("e2e")

FEATURE_GATES = "AllAlpha=true,AllBeta=true"
WEBHOOK_USER = "system:serviceaccount:dra-webhook:dra-webhook"

#: Fake Nodes (there is no kubelet): one per node pool of the test policies plus a plain one.
#: The device-plugin Node advertises the legacy extended resources the way a device plugin would.
NODES: dict[str, dict[str, Any]] = {
    "e2e-dra-1": {"labels": {"gpu.example.com/allocation": "dra"}, "extended": {}},
    "e2e-dp-1": {"labels": {"gpu.example.com/allocation": "device-plugin"},
                 "extended": {"example.com/gpu": "8", "vendor.example.com/gpu": "8"}},
    "e2e-plain-1": {"labels": {}, "extended": {}},
}

# Audit only what the webhook's own identity does: the suite fails on any 403 it got (shipped RBAC too small).
AUDIT_POLICY = f"""apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["{WEBHOOK_USER}"]
- level: None
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _https_ok(url: str, ca: ssl.SSLContext) -> bool:
    with urllib.request.urlopen(url, context=ca, timeout=2) as resp:  # noqa: S310 - loopback only
        return resp.status == 200


@dataclass
class ControlPlane:
    bins: Binaries
    workdir: Path
    pki: PKI = field(init=False)
    server: str = ""
    admin_kubeconfig: Path = field(init=False)
    audit_log: Path = field(init=False)
    processes: dict[str, procs.Proc] = field(default_factory=dict)
    profiling: bool = False  # kube-apiserver's /debug/pprof (bench/policy_cost.py --profile)
    #: kube-apiserver --admission-control-config-file (e.g. the webhooks' client certificates, test_client_auth.py)
    admission_config: Path | None = None
    controllers: bool = True  # False: etcd and the API server only, even when the binaries have the others

    def __post_init__(self) -> None:
        self.pki = PKI(self.workdir / "pki")
        self.logs = self.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.audit_log = self.logs / "audit.log"

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self._retry_on_port_clash("etcd", self._start_etcd)
        self._retry_on_port_clash("kube-apiserver", self._start_apiserver)
        if self.bins.has_controllers and self.controllers:
            self._retry_on_port_clash("kube-scheduler", lambda: self._start_component("kube-scheduler"))
            self._retry_on_port_clash("kube-controller-manager",
                                      lambda: self._start_component("kube-controller-manager"))
        self.create_nodes()
        if self.bins.has_controllers and self.controllers:
            core = client.CoreV1Api(self.api())
            # The controller-manager's token controller is up once `default` has its ServiceAccount.
            eventually(lambda: core.read_namespaced_service_account("default", "default"),
                       "the controller-manager creating the default ServiceAccount", 60,
                       alive=self.dead_component)

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes[name].stop()

    def dead_component(self) -> str | None:
        """A line naming a component that exited (tests give up at once instead of timing out)."""
        for name, proc in self.processes.items():
            if not proc.alive():
                return f"{name} exited with {proc.popen.returncode} (log {proc.log})"
        return None

    def _retry_on_port_clash(self, name: str, start: Any) -> None:
        for attempt in range(3):
            try:
                start()
                return
            except RuntimeError as exc:
                proc = self.processes.get(name)
                if attempt == 2 or proc is None or "address already in use" not in proc.output(20000):
                    raise
                log.warning("%s lost its port to another process, starting it again: %s", name, exc)

    def _launch(self, name: str, argv: list[str]) -> procs.Proc:
        old = self.processes.pop(name, None)
        if old is not None:
            old.stop()
        log_path = self.logs / f"{name}.log"
        proc = procs.Proc(name, argv, log_path, cwd=self.workdir)
        self.processes[name] = proc
        return proc

    def _wait(self, proc: procs.Proc, probe: Any, what: str, timeout: float) -> None:
        def dead() -> str | None:
            if proc.alive():
                return None
            return f"{what} exited with {proc.popen.returncode}; last log lines:\n{proc.output()[-3000:]}"
        try:
            eventually(probe, f"{what} ready", timeout, alive=dead)
        except AssertionError as exc:
            raise RuntimeError(str(exc)) from None

    # -- components ---------------------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        client_port, peer_port = _free_port(), _free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        proc = self._launch("etcd", [
            str(self.bins.etcd), "--name", "e2e", "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", f"e2e={peer}",
            # A throw-away store: no fsync (much faster on a shared disk).
            "--unsafe-no-fsync", "--quota-backend-bytes", str(2 << 30), "--log-level", "warn",
        ])
        self._wait(proc, lambda: urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2).status == 200,
                   "etcd", 30)

    def _start_apiserver(self) -> None:
        port = _free_port()
        self.server = f"https://127.0.0.1:{port}"
        crt, key = self.pki.issue("apiserver", "kube-apiserver", server=True)
        audit_policy = self.workdir / "audit-policy.yaml"
        audit_policy.write_text(AUDIT_POLICY)
        p = self.pki
        proc = self._launch("kube-apiserver", [
            str(self.bins.apiserver),
            "--etcd-servers", self.etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(port),
            "--tls-cert-file", str(crt), "--tls-private-key-file", str(key), "--client-ca-file", str(p.ca),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(p.sa_pub), "--service-account-signing-key-file", str(p.sa_key),
            "--service-cluster-ip-range", "10.0.0.0/24",
            "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
            "ValidatingAdmissionPolicy,MutatingAdmissionPolicy",
            "--feature-gates", FEATURE_GATES, "--runtime-config", "api/all=true",
            "--allow-privileged=true",
            # Loopback: no Endpoints for `kubernetes` (the reconciler refuses 127.0.0.1).
            "--endpoint-reconciler-type=none",
            "--cert-dir", str(self.workdir / "apiserver-certs"),
            "--audit-policy-file", str(audit_policy), "--audit-log-path", str(self.audit_log),
            "--audit-log-format", "json", "--audit-log-mode", "blocking",
            f"--profiling={str(self.profiling).lower()}", "--v=1",
            *(["--admission-control-config-file", str(self.admission_config)] if self.admission_config else []),
        ])
        admin = p.issue("admin", "e2e-admin", org="system:masters")
        self.admin_kubeconfig = p.kubeconfig(self.workdir / "admin.kubeconfig", self.server, "admin", cert=admin)
        ctx = ssl.create_default_context(cafile=str(p.ca))
        ctx.load_cert_chain(*admin)
        self._wait(proc, lambda: _https_ok(f"{self.server}/readyz", ctx), "kube-apiserver", 120)

    def _start_component(self, name: str) -> None:
        user = "system:kube-scheduler" if name == "kube-scheduler" else "system:kube-controller-manager"
        kubeconfig = self.pki.kubeconfig(self.workdir / f"{name}.kubeconfig", self.server, name,
                                         cert=self.pki.issue(name, user))
        port = _free_port()
        argv = [
            str(self.bins.scheduler if name == "kube-scheduler" else self.bins.controller_manager),
            "--kubeconfig", str(kubeconfig), "--authentication-kubeconfig", str(kubeconfig),
            "--authorization-kubeconfig", str(kubeconfig),
            "--bind-address", "127.0.0.1", "--secure-port", str(port), "--leader-elect=false",
            "--feature-gates", FEATURE_GATES, "--v=1",
        ]
        if name == "kube-controller-manager":
            p = self.pki
            argv += [
                "--controllers", "*", "--use-service-account-credentials=true",
                "--service-account-private-key-file", str(p.sa_key), "--root-ca-file", str(p.ca),
                "--cluster-signing-cert-file", str(p.ca), "--cluster-signing-key-file", str(self.pki.dir / "ca.key"),
                "--service-cluster-ip-range", "10.0.0.0/24",
                # No kubelet renews the fake Nodes' heartbeats: never mark them NotReady.
                "--node-monitor-grace-period", "87600h",
            ]
        proc = self._launch(name, argv)
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # self-signed serving cert of the component's /healthz
        self._wait(proc, lambda: _https_ok(f"https://127.0.0.1:{port}/healthz", insecure), name, 60)

    # -- clients and objects ------------------------------------------------------------------------------

    def api(self, kubeconfig: Path | None = None) -> client.ApiClient:
        """An ApiClient (admin unless ``kubeconfig`` is given)."""
        cfg = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig or self.admin_kubeconfig), client_configuration=cfg,
                                persist_config=False)
        return client.ApiClient(configuration=cfg)

    def create_nodes(self) -> None:
        core = client.CoreV1Api(self.api())
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [("Ready", "True", "KubeletReady"), ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                      ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                      ("PIDPressure", "False", "KubeletHasSufficientPID")]
        for name, spec in NODES.items():
            capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi",
                        **spec["extended"]}
            # The registry keeps status on create, so a fake Node is Ready from the start.
            core.create_node({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {
                    "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                    "e2e.dra-migration.io/fake": "true", **spec["labels"]}},
                "spec": {},
                "status": {
                    "capacity": capacity, "allocatable": capacity,
                    "conditions": [{"type": t, "status": s, "reason": r, "message": "fake node (e2e)",
                                    "lastHeartbeatTime": now, "lastTransitionTime": now} for t, s, r in conditions],
                    "addresses": [{"type": "Hostname", "address": name}],
                    "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.36.2",
                                 "containerRuntimeVersion": "fake://0", "kernelVersion": "", "osImage": "fake",
                                 "kubeProxyVersion": "", "bootID": "", "machineID": "", "systemUUID": ""},
                },
            })

    def forbidden_for_webhook(self) -> list[str]:
        """Requests the webhook's ServiceAccount made that the API server refused with 403 (audit log)."""
        import json

        found = []
        if not self.audit_log.exists():
            return found
        for line in self.audit_log.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if (event.get("user") or {}).get("username") == WEBHOOK_USER and \
                    (event.get("responseStatus") or {}).get("code") == 403:
                found.append(f"{event.get('verb')} {event.get('requestURI')}")
        return found
