"""The gauge writer: one process per replica, beside the admission workers, that may read the whole cluster.

Why a process of its own: a full read of the cluster costs memory and CPU in proportion to the cluster
(issue 29). In an admission worker it would slow or, past the memory limit, kill the process that answers
the API server. Here it runs at ``nice`` 10, and the threads that read and count (all but the Lease's) under
Linux's ``SCHED_IDLE`` policy: an admission worker that wakes takes the CPU from them at once, where a nice 10
thread keeps it until its time slice ends (kernel/sched/fair.c, ``check_preempt_wakeup_fair``); at 25,000 Pods
that was 1.43x the p99 of admission during a recount against 1.02x (bench/results.md, round 4). The Lease's
thread stays at nice 10, so a replica whose workers are saturated still renews its Lease on time. It also
volunteers to be the first process
the kernel's OOM killer picks in the container (``oom_score_adj`` 1000), so admission keeps its share and
survives. The gunicorn master forks it (``webhook.serve.supervisor.Supervisor``, from ``webhook.serve.server``),
restarts it with backoff when it dies, and stops it on shutdown; ``PR_SET_PDEATHSIG`` ends it if the master is killed
outright.

Inside, one thread keeps trying to acquire or renew the Lease (``webhook.cluster.leader``, every retry period, also
while the first list is under way, so a slow list never costs the leadership) and the main thread runs
``webhook.fleet.gauges.Exporter``, which reads the cluster only while this process holds the Lease: one list, then
watches (``webhook.fleet.gauge_watch``, one thread per resource) whose stores each refresh counts. Each refresh also
reads the compiled-policy reconciler's Lease (``dra-webhook reconcile``, compiled mode) for the compiled-mode gauges.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.cluster.lists import DEFAULT_SHARE, Pacer
from webhook.policy.compiled import CompiledPolicy

if TYPE_CHECKING:
    from webhook.fleet import gauges as gauges_module
    from webhook.fleet.gauges import Exporter

log = logging.getLogger("webhook.gauge_writer")

LEASE_NAME = "dra-webhook-gauges"
DEFAULT_NAMESPACE = "dra-webhook"  # deploy/base's namespace, where its Role grants the Lease verbs
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class WriterOptions:
    policy: Path
    kubeconfig: str | None
    directory: str
    interval: float
    lease_namespace: str
    lease_name: str = LEASE_NAME
    identity: str = ""
    read_share: float = DEFAULT_SHARE  # at most this share of a read's wall time busy (webhook.cluster.lists)
    sleep: Callable[[float], None] | None = None  # the pacer's rest (tests inject one); None: time.sleep


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


def lower_priority() -> None:
    """Yield CPU and, under memory pressure, be killed before any admission worker (see the docstring)."""
    with contextlib.suppress(OSError):
        os.nice(10)
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as fh:
        fh.write("1000")


def idle_thread() -> None:
    """Put the calling thread (and the threads it starts from now on) under ``SCHED_IDLE``: Linux sets the
    policy per thread. Where it is refused (not Linux, a seccomp profile), the thread keeps nice 10."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no os.SCHED_IDLE (not Linux)
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def exporter(opts: WriterOptions, api: Any, leading: Callable[[], bool],
             stop: threading.Event | None = None) -> Exporter:
    """The gauges' exporter over watches of the cluster (``webhook.fleet.gauge_watch``): the first read lists
    Namespaces, Pods and ResourceClaims once, page by page, keeping each object's projection; from then on
    watch events keep the stores current and each refresh counts from memory. Losing the Lease stops the
    watches and drops the stores.

    The first list and every re-list are paced by a fresh ``Pacer`` of ``opts.read_share``: they rest between
    pages so that they keep the API server and this process busy at most that share of their wall time."""
    from webhook.fleet import gauges
    from webhook.fleet.gauge_watch import WatchedCluster

    def pacer() -> Pacer:
        return Pacer(opts.read_share) if opts.sleep is None else Pacer(opts.read_share, sleep=opts.sleep)

    cluster = WatchedCluster(api, stop or threading.Event(), leading, pace=pacer)
    return gauges.Exporter(opts.directory, _CheckedPolicy(opts.policy), cluster.read, interval=opts.interval,
                           leading=leading, release=cluster.close, compiled=lambda: compiled_samples(api, opts))


def compiled_samples(api: Any, opts: WriterOptions) -> list[gauges_module.Sample]:
    """The compiled-mode gauges from the reconciler's Lease in the writer's namespace (none outside that mode)."""
    from webhook.serve import reconciler

    return reconciler.lease_samples(reconciler.read_lease(api, opts.lease_namespace))


def run(opts: WriterOptions, stop: threading.Event) -> None:
    """The writer's life: elect, and while leading, refresh the gauges; release the Lease when stopped."""
    from webhook.cluster import api as cluster
    from webhook.cluster.leader import LeaseElector, campaign

    api = cluster.connect(opts.kubeconfig)
    elector = LeaseElector(api, opts.lease_namespace, opts.lease_name, opts.identity)
    log.info("gauge writer pid %d: candidate %s for Lease %s/%s; reads paced to %.0f%% busy", os.getpid(),
             opts.identity, opts.lease_namespace, opts.lease_name, 100 * opts.read_share)
    thread = campaign(elector, stop)
    idle_thread()  # after the Lease's thread started: it keeps nice 10; the watch threads inherit this
    gauges = exporter(opts, api, lambda: elector.leading, stop)
    try:
        gauges.run(stop)
    finally:
        gauges.release()
    thread.join(10)
    elector.release()
