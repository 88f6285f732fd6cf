"""gunicorn started from Python: gthread-based workers, long keep-alive, TLS with hot-reloaded certificates.

Why these settings (docs/webhook-conventions.md §4): the API server keeps HTTP/1.1 connections alive for
90 s, so ``sync`` workers (no keep-alive) would pay a TLS handshake per call and a short keepalive invites
reuse races; gthread calls the ``ssl_context`` hook per accepted connection, which lets the cached,
pair-validated context from ``webhook.serve.tls`` follow certificate rotation with no restart. The worker is
``webhook.serve.worker.AdmissionWorker``, a gthread whose event loop does the handshake and reads whole
requests under deadlines, so slow clients never hold a request thread (issue 15, bench/results.md).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter

if TYPE_CHECKING:
    from webhook.serve.supervisor import Supervisor

log = logging.getLogger("webhook.server")


@dataclass(frozen=True)
class ServeOptions:
    policy: Path
    cert_dir: Path
    bind: str = "0.0.0.0:8443"
    workers: int = 2
    threads: int = 8
    keepalive: int = 90
    graceful_timeout: int = 20
    offline: bool = True
    kubeconfig: str | None = None
    lookup_budget: float = 0.2
    max_devices: int = 20_000
    reload_interval: float = 1.0
    record: str | None = None
    record_max_bytes: int = 64 * 1024 * 1024
    log_level: str = "info"
    max_connections: int = 500
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    gauge_interval: float = 60.0  # seconds between reads of the cluster for the live gauges; 0: off
    gauge_read_share: float = 0.5  # share of a gauge read's wall time it may be busy (webhook.cluster.lists)
    lease_namespace: str | None = None  # of the gauge writers' Lease (webhook.serve.gauge_writer.lease_namespace)
    lease_name: str = "dra-webhook-gauges"
    client_ca: Path | None = None  # require client certificates signed by this CA (webhook.serve.tls)
    client_cn: str | None = None  # ... naming this CN or DNS SAN (webhook.serve.callers)
    metrics_bind: str | None = None  # plain-HTTP listener for /healthz, /readyz, /metrics (webhook.serve.callers)


_PROCESS: dict[str, Any] = {}


def cert_reloader(cert_dir: Path, client_ca: Path | None = None) -> Any:
    """One CertReloader per process (master before fork, then each worker's own copy)."""
    from webhook.serve.tls import CertReloader

    reloader = _PROCESS.get("reloader")
    if reloader is None:
        from webhook.serve import metrics

        reloader = CertReloader(str(cert_dir), on_load=metrics.CERT_EXPIRY.set, client_ca=client_ca)
        _PROCESS["reloader"] = reloader
    return reloader


def build_app(opts: ServeOptions) -> Any:
    """The flask app of one worker: its own policy store (polling thread), cluster view and recorder."""
    from webhook.policy.reload import PolicyStore
    from webhook.serve import metrics
    from webhook.serve.app import create_app

    def on_result(result: str, error: Any) -> None:
        metrics.RELOADS.labels(result).inc()

    # A worker replaced while the files are broken starts from the master's last good policy instead of
    # failing every validation.
    seed = _PROCESS.get("policy")
    store = PolicyStore(opts.policy, on_result=on_result, last_good=seed.current if seed else None)
    store.start(interval=opts.reload_interval)
    view = None
    if not opts.offline:
        from webhook.cluster.api import connect
        from webhook.cluster.device_client import SharedDevices
        from webhook.cluster.live_view import LiveView

        socket_path = _PROCESS.get("devices_socket")  # the master's device process holds the slices
        shared = SharedDevices(socket_path, opts.lookup_budget) if socket_path else None
        view = LiveView(connect(opts.kubeconfig), budget=opts.lookup_budget, max_devices=opts.max_devices,
                        devices=shared)
        view.start()
    recorder = None
    if opts.record:
        from webhook.serve.recording import Recorder

        recorder = Recorder(opts.record, max_bytes=opts.record_max_bytes)
    app = create_app(store, view=view, cert=cert_reloader(opts.cert_dir, opts.client_ca), recorder=recorder,
                     large=large_reviews(opts))
    if opts.client_cn is not None or opts.metrics_bind is not None:
        from webhook.serve import callers

        app.wsgi_app = callers.wrap(app.wsgi_app, opts.client_cn)  # type: ignore[method-assign]
    return app


def listen_port(bind: str) -> int:
    """The TCP port a ``--bind``-style address listens on: ``HOST:PORT``, or ``fd://N`` (asked of the socket)."""
    if bind.startswith("fd://"):
        import socket

        with socket.socket(fileno=os.dup(int(bind[5:]))) as sock:
            return int(sock.getsockname()[1])
    return int(bind.rsplit(":", 1)[1])


def memory_plan(opts: ServeOptions) -> Any:
    """The replica's memory budget per request (``webhook.serve.memory.plan``) for this container's limit."""
    from webhook.serve import memory

    return memory.plan(memory.container_limit() or memory.SHIPPED_LIMIT, opts.workers, opts.threads)


def large_reviews(opts: ServeOptions) -> Any:
    """How a worker answers reviews over the plan's ``large_body``: one at a time in the replica (the master's lock
    file, shared by every worker), the heap trimmed after each."""
    from webhook.serve import memory
    from webhook.serve.app import Large

    path = _PROCESS.get("large_lock")
    if path is None:  # not forked by our master (tests): a lock file of this process's own
        path = _PROCESS["large_lock"] = _lock_file()
    return Large(memory_plan(opts).large_body, memory.OneAtATime(path))


def _lock_file() -> str:
    import tempfile

    fd, path = tempfile.mkstemp(prefix="dra-webhook-large-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    os.close(fd)
    return path


def gauge_supervisor(opts: ServeOptions) -> Supervisor | None:
    """The gauge writer's supervisor for the master (``webhook.serve.gauge_writer``), or None when the gauges are off
    (offline, ``--gauge-interval 0``, or no metrics directory to hand the snapshot over in)."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if opts.offline or not directory or opts.gauge_interval <= 0:
        return None
    from webhook.serve import gauge_writer
    from webhook.serve.supervisor import Supervisor

    env = dict(os.environ)
    writer = gauge_writer.WriterOptions(
        policy=opts.policy, kubeconfig=opts.kubeconfig, directory=directory, interval=opts.gauge_interval,
        lease_namespace=gauge_writer.lease_namespace(opts.lease_namespace, env), lease_name=opts.lease_name,
        identity=gauge_writer.identity(env), read_share=opts.gauge_read_share,
    )
    return Supervisor("gauge writer", lambda stop: gauge_writer.run(writer, stop),
                      prepare=gauge_writer.lower_priority)


def master_policy(opts: ServeOptions) -> Any:
    """The master's last good policy: loaded before the first fork and re-checked before every fork.

    No polling thread in the master (it forks); workers inherit the compiled policy and start from it
    when the files are broken at the time they boot. No metrics here: the workers count reloads.
    """
    from webhook.policy.reload import PolicyStore

    store = _PROCESS.get("policy")
    if store is None:
        store = _PROCESS["policy"] = PolicyStore(opts.policy)
    return store


def _refresh_master_policy(opts: ServeOptions) -> None:
    try:
        master_policy(opts).check()
    except Exception:  # never let this stop a worker from being forked
        log.exception("refreshing the master's policy copy failed")


def device_process(opts: ServeOptions) -> Supervisor | None:
    """The replica's one device process (``webhook.cluster.device_service``): a cluster view whose ResourceSlice watch
    and device index the workers ask over a Unix socket, instead of each keeping a copy. None offline."""
    if opts.offline:
        return None
    import tempfile

    from webhook.serve.supervisor import Supervisor

    path = _PROCESS["devices_socket"] = os.path.join(tempfile.mkdtemp(prefix="dra-webhook-"), "devices.sock")

    def run(stop: Any) -> None:
        from webhook.cluster.api import connect
        from webhook.cluster.device_service import DeviceServer
        from webhook.cluster.live_view import LiveView

        view = LiveView(connect(opts.kubeconfig), budget=opts.lookup_budget, max_devices=opts.max_devices)
        view.start()
        server = DeviceServer(view, path)
        server.start()
        log.info("device process pid %d: ResourceSlices for the workers on %s", os.getpid(), path)
        stop.wait()
        server.stop()
        view.stop()

    return Supervisor("device process", run)


class _Arbiter(Arbiter):
    """gunicorn's master, also keeping the gauge writer and the device process alive beside the workers (one
    ``webhook.serve.supervisor.Supervisor`` each). The compiled-policy reconciler is not among them: it runs as
    ``dra-webhook reconcile`` in a Deployment and under a ServiceAccount of its own (issue #47 item 4)."""

    def __init__(self, app: WebhookServer) -> None:
        super().__init__(app)
        self.gauges = gauge_supervisor(app.opts)
        self.devices = device_process(app.opts)

    def manage_workers(self) -> None:
        super().manage_workers()
        for child in (self.gauges, self.devices):
            if child is not None:
                child.close_fds = lambda: [s.fileno() for s in self.LISTENERS]
                child.check()

    def stop(self, graceful: bool = True) -> None:
        if self.gauges is not None:
            self.gauges.terminate()  # releases the Lease while the workers drain
        super().stop(graceful)
        if self.gauges is not None:
            self.gauges.stop()
        if self.devices is not None:
            self.devices.stop()


class WebhookServer(BaseApplication):
    def __init__(self, opts: ServeOptions) -> None:
        from webhook.serve import memory

        self.opts = opts
        master_policy(opts)
        memory.limit_arenas()  # before any worker or thread exists: the forks inherit it
        _PROCESS["large_lock"] = _lock_file()
        self._master_pid = os.getpid()
        plan = memory_plan(opts)
        (log.info if plan.fits else log.warning)(
            "%s%s", plan.describe(), "" if plan.fits else "; that share is too small for the worst case: "
            "fewer --workers or --threads, or a higher memory limit (README 'Memory per request')")
        if not opts.offline:
            from webhook.cluster import live_view

            live_view.preload_client()
        super().__init__()

    def load_config(self) -> None:
        from webhook.serve import metrics
        from webhook.serve.tls import gunicorn_ssl_context_hook
        from webhook.serve.worker import AdmissionWorker

        o = self.opts
        settings: dict[str, Any] = {
            "bind": [o.bind, *([o.metrics_bind] if o.metrics_bind else [])],
            "workers": o.workers,
            "threads": o.threads,
            "worker_class": AdmissionWorker.configured(
                o.header_timeout, o.body_timeout,
                plain_ports=frozenset([listen_port(o.metrics_bind)] if o.metrics_bind else [])),
            "worker_connections": o.max_connections,
            "keepalive": o.keepalive,
            "graceful_timeout": o.graceful_timeout,
            "timeout": 30,
            "certfile": str(o.cert_dir / "tls.crt"),
            "keyfile": str(o.cert_dir / "tls.key"),
            "ssl_context": gunicorn_ssl_context_hook(cert_reloader(o.cert_dir, o.client_ca)),
            "child_exit": lambda server, worker: metrics.worker_exit(worker.pid),
            "pre_fork": lambda server, worker: _refresh_master_policy(o),
            "control_socket_disable": True,
            "loglevel": o.log_level,
            "accesslog": None,
            "proc_name": "dra-webhook",
        }
        if os.path.isdir("/dev/shm"):
            settings["worker_tmp_dir"] = "/dev/shm"
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return build_app(self.opts)

    def run(self) -> None:
        """BaseApplication.run with our arbiter (the gauge writer and the device process beside the workers)."""
        try:
            _Arbiter(self).run()
        except RuntimeError as exc:  # gunicorn's configuration errors, as BaseApplication.run reports them
            raise SystemExit(f"error: {exc}") from None
        finally:
            # Only the master removes the lock file: a worker forked from this frame leaves it by SystemExit too
            # (gunicorn's spawn_worker), and must not take it from the workers still running.
            if os.getpid() == self._master_pid and _PROCESS.get("large_lock"):
                Path(_PROCESS["large_lock"]).unlink(missing_ok=True)


def serve(opts: ServeOptions) -> int:
    log.info(
        "serving on https://%s (policy %s, certificates %s, %d workers x %d threads, at most %d connections "
        "per worker, %gs handshake+head / %gs body deadlines, %s)",
        opts.bind, opts.policy, opts.cert_dir, opts.workers, opts.threads, opts.max_connections,
        opts.header_timeout, opts.body_timeout, "offline" if opts.offline else "cluster view on",
    )
    if opts.client_ca is not None:
        log.info("client certificates required (CA %s)%s", opts.client_ca,
                 f", naming {opts.client_cn!r}" if opts.client_cn else "")
    if opts.metrics_bind is not None:
        log.info("plain HTTP on %s: GET /healthz, /readyz and /metrics only", opts.metrics_bind)
    WebhookServer(opts).run()
    return 0
