"""The webhook installed the way a platform engineer installs it, served from this machine.

``deploy/overlays/dev`` is rendered with ``kubectl kustomize`` from a copy of ``deploy/`` whose ``certs/``
holds what ``dra-webhook certs`` wrote (the overlay's own instructions); everything rendered is applied as
is except the Deployment (there is no kubelet; the real ``dra-webhook serve`` runs on the host instead) and
the Service: each ``clientConfig.service`` is rewritten to ``url: https://127.0.0.1:PORT/<path>``, keeping
the caBundle the overlay generated (see README.md for why a URL and not an ExternalName Service).
The server authenticates to the API server as the ``dra-webhook`` ServiceAccount (a TokenRequest token), so
the shipped RBAC is what its cluster view exercises.
"""

from __future__ import annotations

import copy
import json
import os
import selectors
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from tests import image_rootfs
from tests.e2e import procs
from tests.e2e.binaries import ROOT
from tests.e2e.controlplane import ControlPlane
from tests.e2e.waits import eventually
from webhook import policy as policy_mod

NAMESPACE = "dra-webhook"
SERVICE_ACCOUNT = "dra-webhook"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
NOT_APPLIED = ("Deployment", "Service")


def kubectl() -> str:
    path = shutil.which("kubectl")
    if not path:
        raise RuntimeError("kubectl (with kustomize v5) is needed to render deploy/; .ci/run installs it")
    return path


def render(workdir: Path) -> tuple[list[dict[str, Any]], Path]:
    """Render the dev overlay from a copy of deploy/ with fresh certificates; returns objects and cert dir."""
    deploy = workdir / "deploy"
    shutil.copytree(ROOT / "deploy", deploy, ignore=shutil.ignore_patterns("certs"))
    certs = deploy / "overlays" / "dev" / "certs"
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(certs)], check=True,
                   capture_output=True, cwd=ROOT)
    out = subprocess.run([kubectl(), "kustomize", str(deploy / "overlays" / "dev")], check=True,
                         capture_output=True, text=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d], certs


def to_url(config: dict[str, Any], port: int) -> dict[str, Any]:
    """The webhook configuration with every ``clientConfig.service`` turned into the loopback URL."""
    config = copy.deepcopy(config)
    for hook in config["webhooks"]:
        cc = hook["clientConfig"]
        svc = cc.pop("service")
        assert svc["name"] == "dra-webhook" and svc["namespace"] == NAMESPACE, svc
        cc["url"] = f"https://127.0.0.1:{port}{svc.get('path', '/')}"
    return config


def apply(cp: ControlPlane, objects: list[dict[str, Any]], workdir: Path, name: str) -> None:
    """``kubectl apply --server-side`` as the cluster admin (the API server validates strictly)."""
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    subprocess.run([kubectl(), "--kubeconfig", str(cp.admin_kubeconfig), "apply", "--server-side",
                    "--field-manager", "e2e-install", "-f", str(path)], check=True, capture_output=True, text=True)


def service_account_kubeconfig(cp: ControlPlane, workdir: Path, account: str = SERVICE_ACCOUNT) -> Path:
    """A kubeconfig with a TokenRequest token of a ServiceAccount of the install (default the webhook's): what its
    Pod would mount."""
    core = client.CoreV1Api(cp.api())
    token = core.create_namespaced_service_account_token(
        account, NAMESPACE, {"spec": {"expirationSeconds": 24 * 3600}}).status.token
    name = "webhook" if account == SERVICE_ACCOUNT else account
    return cp.pki.kubeconfig(workdir / f"{name}.kubeconfig", cp.server, account, token=token)


class Webhook:
    """``dra-webhook serve`` on a pre-bound loopback socket; stop/start keep the port (and the configuration).

    While stopped, the socket stays bound and every connection is reset at once, as the API server sees a
    webhook whose Service has no ready endpoint: calls fail fast and the failure policies decide.
    """

    def __init__(self, workdir: Path, cert_dir: Path, kubeconfig: Path | None, policy_src: Path,
                 extra_args: tuple[str, ...] = (), client_cert: tuple[Path, Path] | None = None) -> None:
        """``kubeconfig`` None: ``--offline``. ``extra_args`` go to every start; ``client_cert`` is what the
        harness's own /readyz calls present (``serve --client-ca``)."""
        self.workdir, self.cert_dir, self.kubeconfig = workdir, cert_dir, kubeconfig
        self.extra_args: list[str] = list(extra_args)  # more `serve` flags for every (re)start
        self.policy_dir = workdir / "policy"
        self.policy_dir.mkdir(exist_ok=True)
        self.log = workdir / "webhook.log"
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.listener.set_inheritable(True)
        self.port = self.listener.getsockname()[1]
        self.proc: procs.Proc | None = None
        self._refuser: tuple[threading.Thread, threading.Event] | None = None
        self._ctx = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
        if client_cert is not None:
            self._ctx.load_cert_chain(str(client_cert[0]), str(client_cert[1]))
        self.write_policy(policy_src.read_text())

    # -- process ------------------------------------------------------------------------------------------

    def start(self, synced: tuple[str, ...] = ("namespaces", "deviceclasses")) -> None:
        """Serve again; wait until /readyz is ready and the caches ``synced`` names have listed."""
        self._stop_refusing()
        env = dict(os.environ, PYTHONUNBUFFERED="1", PROMETHEUS_MULTIPROC_DIR=str(self.workdir / "metrics"))
        env.pop("KUBECONFIG", None)
        # One worker: /readyz then speaks for every request (policy identity, cluster view), which keeps
        # the policy switch deterministic. Threads serve the API server's concurrent calls.
        argv = [sys.executable, "-m", "webhook", "serve", "--policy", str(self.policy_dir),
                "--cert-dir", str(self.cert_dir), "--bind", f"fd://{self.listener.fileno()}",
                "--workers", "1", "--threads", "8", "--graceful-timeout", "2",
                # Owner-Pod lookups (training-job claims) must not fall back to "unknown" because a loaded
                # 2-core CI machine answered a GET in 250 ms: the budget's own behaviour is unit-tested.
                "--lookup-budget", "1.5",
                *(["--kubeconfig", str(self.kubeconfig)] if self.kubeconfig else ["--offline"]), *self.extra_args]
        self.proc = procs.Proc("dra-webhook", argv, self.log, env=env, pass_fds=[self.listener.fileno()], cwd=ROOT)
        eventually(lambda: self._synced(synced),
                   f"dra-webhook serve ready with {', '.join(synced) or 'nothing'} synced", 60, alive=self.dead)

    def start_from_image(self, rootfs: Path, config: dict[str, Any],
                         synced: tuple[str, ...] = ("namespaces", "deviceclasses")) -> None:
        """Serve from the unpacked container image instead (tests/image_rootfs.py: chroot as the image's user,
        read-only root, the Deployment's volumes); same socket, policy directory and ServiceAccount."""
        self._stop_refusing()
        cmd = config["config"]["Cmd"]
        defaults = dict(zip(cmd[::2], cmd[1::2], strict=True))
        policy_path, tls_path = defaults["--policy"], defaults["--cert-dir"]
        gid = int(config["config"]["User"].split(":")[1])
        # The Secret volume's view of the certificates (0440, group fsGroup); the kubeconfig rides along, as
        # the image has no other read-only mount point for it (in a Pod: the ServiceAccount token volume).
        tls = self.workdir / "image-tls"
        shutil.rmtree(tls, ignore_errors=True)
        image_rootfs.readable_certs(self.cert_dir, tls, gid)
        shutil.copyfile(self.kubeconfig, tls / "kubeconfig")
        os.chown(tls / "kubeconfig", 0, gid)
        os.chmod(tls / "kubeconfig", 0o440)
        argv = [*config["config"]["Entrypoint"], "--policy", policy_path, "--cert-dir", tls_path,
                "--bind", f"fd://{self.listener.fileno()}", "--workers", "1", "--threads", "8",
                "--graceful-timeout", "2", "--lookup-budget", "1.5", "--kubeconfig", f"{tls_path}/kubeconfig"]
        env = image_rootfs.image_env(config, HOME="/tmp", TMPDIR="/tmp")
        metrics = env["PROMETHEUS_MULTIPROC_DIR"]
        launcher = image_rootfs.run_argv(rootfs, argv, user=config["config"]["User"],
                                         read_only={tls_path: tls, policy_path: self.policy_dir},
                                         empty_dirs=("/tmp", metrics))
        self.proc = procs.Proc("dra-webhook-image", launcher, self.log, env=env, pass_fds=[self.listener.fileno()])
        eventually(lambda: self._synced(synced),
                   f"dra-webhook serve (from the image) ready with {', '.join(synced) or 'nothing'} synced", 90,
                   alive=self.dead)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None
        self._start_refusing()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None
        self._stop_refusing()
        self.listener.close()

    def dead(self) -> str | None:
        if self.proc is not None and not self.proc.alive():
            return f"dra-webhook serve exited with {self.proc.popen.returncode}:\n{self.output()[-3000:]}"
        return None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    # -- state --------------------------------------------------------------------------------------------

    def readyz(self) -> dict[str, Any]:
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}/readyz")
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=5) as resp:  # noqa: S310
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return json.loads(exc.read())

    def _synced(self, caches: tuple[str, ...] = ("namespaces", "deviceclasses")) -> dict[str, Any] | None:
        body = self.readyz()
        cluster = body.get("cluster") or {}
        ok = body.get("ready") and all((cluster.get(k) or {}).get("synced") for k in caches)
        return body if ok else None

    def write_policy(self, text: str) -> str:
        """Replace the served policy file atomically; returns the identity the webhook will report."""
        tmp = self.policy_dir / ".policy.yaml.tmp"
        tmp.write_text(text)
        identity = policy_mod.load(tmp).identity
        os.replace(tmp, self.policy_dir / "policy.yaml")
        return identity

    def use_policy(self, text: str, timeout: float = 30) -> str:
        """Serve ``text`` as the policy and wait until /readyz reports its identity."""
        identity = self.write_policy(text)
        eventually(lambda: self.readyz().get("policy") == identity,
                   f"the webhook serving policy {identity}", timeout, alive=self.dead)
        return identity

    # -- refusing connections while stopped ---------------------------------------------------------------

    def _start_refusing(self) -> None:
        if self._refuser is not None:
            return
        stop = threading.Event()
        thread = threading.Thread(target=self._refuse, args=(stop,), name="e2e-webhook-down", daemon=True)
        self._refuser = (thread, stop)
        thread.start()

    def _stop_refusing(self) -> None:
        if self._refuser is not None:
            thread, stop = self._refuser
            stop.set()
            thread.join(5)
            self._refuser = None

    def _refuse(self, stop: threading.Event) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ)
        try:
            while not stop.is_set():
                if not sel.select(0.05):
                    continue
                try:
                    conn, _ = self.listener.accept()
                except (BlockingIOError, InterruptedError):
                    continue
                # RST instead of FIN: the caller fails at once ("connection reset by peer").
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                conn.close()
        finally:
            sel.unregister(self.listener)


def install(cp: ControlPlane, workdir: Path, policy_src: Path) -> tuple[Webhook, list[dict[str, Any]]]:
    """Apply the rendered install, start the webhook, then register its webhook configurations.

    Returns the webhook and the configurations as applied (tests restore or break them from these).
    """
    objects, certs = render(workdir)
    base = [o for o in objects if o["kind"] not in (*WEBHOOK_KINDS, *NOT_APPLIED)]
    apply(cp, base, workdir, "install")
    webhook = Webhook(workdir, certs, service_account_kubeconfig(cp, workdir), policy_src)
    webhook.start()
    configs = [to_url(o, webhook.port) for o in objects if o["kind"] in WEBHOOK_KINDS]
    apply(cp, configs, workdir, "webhooks")
    return webhook, configs
