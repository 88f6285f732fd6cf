"""Shared test helpers: a real TLS client, AdmissionReview builders, patch application + schema check."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate

ROOT = Path(__file__).resolve().parent.parent
K8S_VERSION = "1.37.0"

GROUPS = {
    "Pod": ("", "v1"), "Deployment": ("apps", "v1"), "StatefulSet": ("apps", "v1"), "DaemonSet": ("apps", "v1"),
    "ReplicaSet": ("apps", "v1"), "Job": ("batch", "v1"), "CronJob": ("batch", "v1"),
    "ResourceClaim": ("resource.k8s.io", "v1"), "ResourceClaimTemplate": ("resource.k8s.io", "v1"),
    "DeviceClass": ("resource.k8s.io", "v1"), "ResourceSlice": ("resource.k8s.io", "v1"),
    "PodGroup": ("scheduling.k8s.io", "v1beta1"), "Workload": ("scheduling.k8s.io", "v1beta1"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2"), "PyTorchJob": ("kubeflow.org", "v1"),
}


def review(obj: dict[str, Any] | None, *, kind: str | None = None, operation: str = "CREATE",
           namespace: str | None = None, old: dict[str, Any] | None = None, uid: str | None = None,
           dry_run: bool = False, user: str = "alice") -> dict[str, Any]:
    """A real AdmissionReview v1 request as the API server sends it."""
    kind = kind or (obj or old or {}).get("kind")
    group, version = GROUPS.get(kind, ("", "v1"))
    api_version = (obj or old or {}).get("apiVersion")
    if isinstance(api_version, str) and api_version and (obj or old or {}).get("kind") == kind:
        group, _, version = api_version.rpartition("/")  # the object's own group: Volcano's Job is no batch/v1
    meta = (obj or old or {}).get("metadata", {})
    ns = namespace if namespace is not None else meta.get("namespace", "default")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "name": meta.get("name", ""),
            "namespace": ns,
            "operation": operation,
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": dry_run,
            "options": None,
        },
    }


def gpu_pod(name: str = "train-0", namespace: str = "default", gpus: int = 1,
            resource: str = "example.com/gpu", labels: dict[str, str] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "trainer", "image": "registry.example.com/trainer:1.0",
                                 "resources": {"limits": {resource: str(gpus)}}}]},
    }
    if labels:
        pod["metadata"]["labels"] = labels
    return pod


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    resp = response["response"]
    if "patch" not in resp:
        assert "patchType" not in resp
        return []
    assert resp["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(resp["patch"], validate=True))


def apply_and_validate(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """Apply the response's patch with jsonpatch and schema-check the result against Kubernetes 1.37."""
    patched = jsonpatch.apply_patch(obj, patch_of(response))
    kubernetes_validate.validate(patched, K8S_VERSION, strict=True)
    return patched


def listening_socket() -> socket.socket:
    """A bound, listening loopback socket for a server we start: handed over as ``--bind fd://N``.

    Never "find a free port, close it, let the server bind it": another process (other tests, other
    suites on the machine) can take the port in between.
    """
    sock = socket.create_server(("127.0.0.1", 0), backlog=128)
    sock.set_inheritable(True)
    return sock


class Client:
    """HTTPS client that verifies the server against the generated CA and reuses its connection."""

    def __init__(self, port: int, ca: Path, host: str = "127.0.0.1", cert: tuple[Path, Path] | None = None) -> None:
        self.port, self.host = port, host
        self.ctx = ssl.create_default_context(cafile=str(ca))
        if cert is not None:  # a client certificate (serve --client-ca)
            self.ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        self.conn: http.client.HTTPSConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=30)
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                resp = self.conn.getresponse()
                data = resp.read()
                return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
            except (ConnectionError, http.client.HTTPException, ssl.SSLError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def post_json(self, path: str, doc: Any) -> tuple[int, Any]:
        status, _, data = self.request("POST", path, json.dumps(doc).encode(), {"Content-Type": "application/json"})
        return status, json.loads(data)

    def admit(self, path: str, doc: dict[str, Any]) -> dict[str, Any]:
        status, body = self.post_json(path, doc)
        assert status == 200, body
        assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
        assert body["response"]["uid"] == doc["request"]["uid"]
        return body

    def get(self, path: str) -> tuple[int, bytes]:
        status, _, data = self.request("GET", path)
        return status, data

    def close(self) -> None:
        if self.conn:
            self.conn.close()
            self.conn = None


@dataclass
class Server:
    port: int
    ca: Path
    cert_dir: Path
    policy_dir: Path
    proc: subprocess.Popen
    log: Path
    extra: dict[str, Any] = field(default_factory=dict)
    client_cert: tuple[Path, Path] | None = None  # what client() presents (serve --client-ca)
    metrics_port: int | None = None  # the plain --metrics-bind listener, when started with metrics=True

    clients: list[Client] = field(default_factory=list)

    def client(self) -> Client:
        """A client closed by ``stop()`` at the latest (no socket left for the garbage collector)."""
        c = Client(self.port, self.ca, cert=self.client_cert)
        self.clients.append(c)
        return c

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_log(self, done: Callable[[str], bool], what: str, since: int = 0, timeout: float = 30) -> str:
        """The log from offset ``since`` once ``done(log)`` holds (poll with a deadline, never sleep-then-read).

        Before asserting that something is NOT in the log, wait for a line that is written after it would
        have been: the workers write their lines asynchronously from the answer the client already has.
        """
        deadline = time.monotonic() + timeout
        while True:
            log = self.output()[since:]
            if done(log):
                return log
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what} in the server log:\n"
                                     f"{log[-3000:]}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 40) -> int:
        for c in self.clients:
            c.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def make_certs(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(out)], check=True,
                   capture_output=True, cwd=ROOT)
    return out


def start_server(tmp: Path, policy_src: Path | None = None, *extra_args: str, workers: int = 2,
                 threads: int = 4, cert_dir: Path | None = None, wait_ready: bool = True,
                 offline: bool = True, client_cert: tuple[Path, Path] | None = None,
                 metrics: bool = False) -> Server:
    """Start the real `dra-webhook serve` over TLS on a free loopback port.

    ``client_cert``: what the readiness check (and ``Server.client()``) presents; ``metrics``: also a plain
    ``--metrics-bind`` listener (``Server.metrics_port``).
    """
    cert_dir = cert_dir or make_certs(tmp / "certs")
    policy_dir = tmp / "policy"
    policy_dir.mkdir(exist_ok=True)
    src = policy_src or ROOT / "tests" / "data" / "live-policy.yaml"
    (policy_dir / "policy.yaml").write_bytes(src.read_bytes())
    listener = listening_socket()
    port = listener.getsockname()[1]
    plain = listening_socket() if metrics else None
    plain_args = ["--metrics-bind", f"fd://{plain.fileno()}"] if plain else []
    log = tmp / "server.log"
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp / "metrics"), PYTHONUNBUFFERED="1")
    with listener, log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--policy", str(policy_dir), "--cert-dir", str(cert_dir),
             "--bind", f"fd://{listener.fileno()}", "--workers", str(workers), "--threads", str(threads),
             *(["--offline"] if offline else []), *plain_args, *extra_args],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            pass_fds=[listener.fileno(), *([plain.fileno()] if plain else [])],
        )
    metrics_port = None
    if plain is not None:
        metrics_port = plain.getsockname()[1]
        plain.close()
    server = Server(port, cert_dir / "ca.crt", cert_dir, policy_dir, proc, log, client_cert=client_cert,
                    metrics_port=metrics_port)
    deadline = time.monotonic() + 30
    client = server.client()
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.output()}")
        try:
            status, _ = client.get("/readyz" if wait_ready else "/healthz")
            if status == 200:
                break
        except (OSError, ssl.SSLError, http.client.HTTPException):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"server not ready in 30 s:\n{server.output()}")
        time.sleep(0.1)
    client.close()
    return server
