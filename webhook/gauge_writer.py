"""The gauge writer: one process per replica, beside the admission workers, that may read the whole cluster.

Why a process of its own: a full read of the cluster costs memory and CPU in proportion to the cluster
(issue 29). In an admission worker it would slow or, past the memory limit, kill the process that answers
the API server. Here it runs at a lower CPU priority (``nice`` 10) and volunteers to be the first process
the kernel's OOM killer picks in the container (``oom_score_adj`` 1000), so admission keeps its share and
survives. The gunicorn master forks it (``Supervisor``, from ``webhook.server``), restarts it with backoff
when it dies, and stops it on shutdown; ``PR_SET_PDEATHSIG`` ends it if the master is killed outright.

Inside, one thread keeps trying to acquire or renew the Lease (``webhook.leader``, every retry period, also
while a read is under way, so a slow read never costs the leadership) and the main thread runs
``webhook.gauges.Exporter``, which reads the cluster only while this process holds the Lease.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from webhook.policy.compiled import CompiledPolicy

log = logging.getLogger(__name__)

LEASE_NAME = "dra-webhook-gauges"
DEFAULT_NAMESPACE = "dra-webhook"  # deploy/base's namespace, where its Role grants the Lease verbs
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class WriterOptions:
    policy: Path
    kubeconfig: str | None
    directory: str
    interval: float
    lease_namespace: str
    lease_name: str = LEASE_NAME
    identity: str = ""


def lease_namespace(explicit: str | None, env: dict[str, str], sa_file: Path = _SA_NAMESPACE) -> str:
    """Where the Lease lives: ``--lease-namespace``, else ``$POD_NAMESPACE`` (the Deployment sets it from the
    downward API), else the mounted ServiceAccount's namespace, else the install's ``dra-webhook``."""
    if explicit:
        return explicit
    if env.get("POD_NAMESPACE"):
        return env["POD_NAMESPACE"]
    with contextlib.suppress(OSError):
        text = sa_file.read_text().strip()
        if text:
            return text
    return DEFAULT_NAMESPACE


def identity(env: dict[str, str]) -> str:
    """``<pod name or host name>_<uuid>``, as client-go users (kube-scheduler) name Lease candidates: unique
    even for two servers on one host. Made once per server, so a restarted writer keeps its Lease."""
    return f"{env.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


class _CheckedPolicy:
    """The policy files, re-checked (a stat) before each read: no polling thread in the writer."""

    def __init__(self, path: Path) -> None:
        from webhook.policy.reload import PolicyStore

        self._store = PolicyStore(path)

    @property
    def current(self) -> CompiledPolicy | None:
        self._store.check()
        return self._store.current


def _lower_priority() -> None:
    """Yield CPU and, under memory pressure, be killed before any admission worker (see the docstring)."""
    with contextlib.suppress(OSError):
        os.nice(10)
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as fh:
        fh.write("1000")
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def run(opts: WriterOptions, stop: threading.Event) -> None:
    """The writer's life: elect, and while leading, refresh the gauges; release the Lease when stopped."""
    from webhook import gauges, kube_lists
    from webhook import kube_api as cluster
    from webhook.leader import RETRY_PERIOD, LeaseElector

    api = cluster.connect(opts.kubeconfig)
    elector = LeaseElector(api, opts.lease_namespace, opts.lease_name, opts.identity)
    log.info("gauge writer pid %d: candidate %s for Lease %s/%s", os.getpid(), opts.identity,
             opts.lease_namespace, opts.lease_name)

    def elect() -> None:
        while not stop.is_set():
            elector.tick()
            stop.wait(RETRY_PERIOD)

    thread = threading.Thread(target=elect, name="lease", daemon=True)
    thread.start()
    exporter = gauges.Exporter(
        opts.directory, _CheckedPolicy(opts.policy),
        lambda: gauges.ClusterObjects(  # streams of paged lists: one page of objects in memory at a time
            kube_lists.stream(api, "namespaces"), kube_lists.stream(api, "pods"),
            kube_lists.stream(api, "resourceclaims"), kube_lists.device_classes(api), cluster.server_version(api)),
        interval=opts.interval, leading=lambda: elector.leading,
    )
    exporter.run(stop)
    thread.join(10)
    elector.release()


def _child_main(opts: WriterOptions, close_fds: list[int]) -> int:
    for sig in (signal.SIGHUP, signal.SIGQUIT, signal.SIGINT, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR1,
                signal.SIGUSR2, signal.SIGWINCH, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    for fd in close_fds:  # the listening sockets: a writer never accepts connections
        with contextlib.suppress(OSError):
            os.close(fd)
    _lower_priority()
    if os.getppid() == 1:  # the master died between fork and prctl
        return 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        run(opts, stop)
    except Exception:
        log.exception("gauge writer failed")
        return 1
    return 0


class Supervisor:
    """Runs in the gunicorn master: keeps one writer process alive (``check()`` every loop), stops it at exit.

    The master is single-threaded and forks from its main loop, as it forks workers. A writer that dies is
    started again after 1 s, doubling up to 60 s while it keeps dying within a minute of its start.
    """

    def __init__(self, opts: WriterOptions, close_fds: Callable[[], list[int]] = list,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = opts
        self.close_fds = close_fds
        self.clock = clock
        self.pid: int | None = None
        self._started = 0.0
        self._next = 0.0
        self._backoff = 1.0

    def alive(self) -> bool:
        if self.pid is None:
            return False
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # gunicorn's waitpid(-1) reaped it first
            return False
        return pid == 0

    def check(self) -> None:
        if self.alive():
            return
        now = self.clock()
        if self.pid is not None:
            if now - self._started > 60:  # it had been running fine: start over at 1 s
                self._backoff = 1.0
            log.warning("gauge writer pid %d exited; starting another in %g s", self.pid, self._backoff)
            self._next = now + self._backoff
            self._backoff = min(self._backoff * 2, 60.0)
            self.pid = None
        if now >= self._next:
            self._spawn()

    def _spawn(self) -> None:
        fds = self.close_fds()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child (exercised by the server tests)
            code = 1
            try:
                code = _child_main(self.opts, fds)
            finally:
                logging.shutdown()
                os._exit(code)
        self.pid, self._started = pid, self.clock()

    def terminate(self) -> None:
        """Ask the writer to stop (it releases its Lease); ``stop()`` waits for it."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL past ``timeout``."""
        if self.pid is None:
            return
        self.terminate()
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        self.pid = None
