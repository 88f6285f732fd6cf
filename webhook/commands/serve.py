"""`dra-webhook serve`: the admission server."""

from __future__ import annotations

import argparse
import glob
import logging
import os
import sys
import tempfile
from pathlib import Path

from webhook.commands import Subparsers
from webhook.policy.defaults import default_policy

log = logging.getLogger(__name__)


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "serve",
        help="run the admission webhook (gunicorn, TLS)",
        description="Serve POST /mutate and /validate (AdmissionReview v1), GET /healthz, /readyz and "
        "/metrics over TLS. The policy and the certificate files are watched and reloaded "
        "without a restart; a broken policy never replaces the last good one.",
    )
    p.add_argument("--policy", type=Path, default=None,
                   help="policy file or directory "
                   "(default: $DRA_WEBHOOK_POLICY or the bundled policies/default.yaml)")
    p.add_argument("--cert-dir", type=Path, default=Path("certs"),
                   help="directory with tls.crt and tls.key (a mounted Secret works; default: certs)")
    p.add_argument("--dev-certs", action="store_true",
                   help="generate a dev CA and serving certificate into --cert-dir first if tls.crt is missing")
    p.add_argument("--bind", default="0.0.0.0:8443",
                   help="HOST:PORT to listen on (default 0.0.0.0:8443), or fd://N to serve on an inherited "
                   "listening socket (socket hand-over, as the tests do)")
    p.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (default 2)")
    p.add_argument("--threads", type=int, default=8, help="threads per worker (default 8)")
    p.add_argument("--keepalive", type=int, default=90,
                   help="seconds an idle keep-alive connection stays open (default 90; the API server keeps 90)")
    p.add_argument("--graceful-timeout", type=int, default=20,
                   help="seconds in-flight requests get after SIGTERM (default 20)")
    p.add_argument("--max-connections", type=_positive_int, default=500, metavar="N",
                   help="open connections per worker (default 500). At the limit the oldest connection that "
                   "has not sent a complete request is closed to admit a new one, and a WARNING is logged; "
                   "keep workers x this below the pod's open-files limit")
    p.add_argument("--header-timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                   help="seconds a connection gets for the TLS handshake and the request line and headers "
                   "(default 10; also for the next request on a kept-alive connection, from its first byte). "
                   "The API server sends a review in one write; only slow or stalled clients hit this")
    p.add_argument("--body-timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                   help="seconds the request body may take after the headers (default 10). Requests are read "
                   "whole before a thread runs them, so slow clients never hold a thread")
    p.add_argument("--offline", action="store_true",
                   help="do not talk to the API server: cohorts by namespace name only, no owner-Pod lookups "
                   "(the default outside a cluster when neither --kubeconfig nor $KUBECONFIG is set)")
    p.add_argument("--kubeconfig", default=None,
                   help="kubeconfig for the cluster view (default: in-cluster or $KUBECONFIG)")
    p.add_argument("--lookup-budget", type=float, default=0.2,
                   help="seconds a cluster lookup may take on the request path before falling back (default 0.2)")
    p.add_argument("--max-devices", type=int, default=20_000, metavar="N",
                   help="devices of ResourceSlices the replica's device process stores for unsatisfiable-claim "
                   "(default 20000, about 13 MB; slices past it are not stored and that rule does not judge)")
    p.add_argument("--gauge-interval", type=float, default=60.0, metavar="SECONDS",
                   help="seconds between two recounts of the live migration gauges on /metrics (default 60; 0 "
                   "turns them off; needs the cluster view). One process per replica (not a worker) competes for "
                   "a Lease; only its holder lists Namespaces, Pods and ResourceClaims once and then follows "
                   "watches of them, recounting from memory")
    p.add_argument("--gauge-read-share", type=_share, default=0.5, metavar="FRACTION",
                   help="pace the gauge writer's list (when it takes the Lease, or a watch fell behind): it rests "
                   "between pages so that the list (the API server serving a page, the writer decoding and "
                   "keeping it) is busy at most this share of the time, leaving the CPU to admission (default "
                   "0.5: a list takes about twice as long; 1: unpaced). A list still running after 150 s is no "
                   "longer paced (continue tokens expire)")
    p.add_argument("--lease-namespace", default=None, metavar="NAMESPACE",
                   help="namespace of the gauge writers' Lease (default: $POD_NAMESPACE, else the mounted "
                   "ServiceAccount's namespace, else dra-webhook)")
    p.add_argument("--lease-name", default="dra-webhook-gauges", metavar="NAME",
                   help="name of the gauge writers' Lease (default dra-webhook-gauges); replicas with the "
                   "same Lease elect one writer")
    p.add_argument("--record", default=None,
                   help="append every AdmissionReview answered to this JSON-lines file (redacted; for `replay`)")
    p.add_argument("--record-max-bytes", type=int, default=64 * 1024 * 1024,
                   help="rotate the record file past this size (default 64 MiB)")


def run(args: argparse.Namespace) -> int:
    policy = args.policy or default_policy()
    if not policy.exists():
        print(f"error: policy {policy} does not exist", file=sys.stderr)
        return 2
    cert_dir: Path = args.cert_dir
    if not (cert_dir / "tls.crt").exists() or not (cert_dir / "tls.key").exists():
        if not args.dev_certs:
            print(f"error: {cert_dir}/tls.crt or tls.key is missing; run `dra-webhook certs --out {cert_dir}` "
                  "or pass --dev-certs", file=sys.stderr)
            return 2
        from webhook.serve.certs import generate

        generate(cert_dir)
        log.info("generated dev certificates in %s (CA: %s/ca.crt)", cert_dir, cert_dir)
    offline = args.offline or not (
        os.environ.get("KUBERNETES_SERVICE_HOST") or args.kubeconfig or os.environ.get("KUBECONFIG")
    )
    if offline and not args.offline:
        log.info("no in-cluster config, --kubeconfig or $KUBECONFIG: running offline (no cluster view)")
    _metrics_dir()
    from webhook.serve.server import ServeOptions, serve

    return serve(ServeOptions(
        policy=policy, cert_dir=cert_dir, bind=args.bind, workers=args.workers, threads=args.threads,
        keepalive=args.keepalive, graceful_timeout=args.graceful_timeout,
        offline=offline, kubeconfig=args.kubeconfig, lookup_budget=args.lookup_budget, max_devices=args.max_devices,
        record=args.record, record_max_bytes=args.record_max_bytes, gauge_interval=args.gauge_interval,
        gauge_read_share=args.gauge_read_share,
        lease_namespace=args.lease_namespace, lease_name=args.lease_name,
        max_connections=args.max_connections, header_timeout=args.header_timeout, body_timeout=args.body_timeout,
        log_level="debug" if args.verbose else "info",
    ))


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1] (1: unpaced), got {text}")
    return value


def _metrics_dir() -> None:
    """prometheus-client multiprocess mode needs a wiped directory, set before the metrics are created."""
    path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not path:
        path = tempfile.mkdtemp(prefix="dra-webhook-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    os.makedirs(path, exist_ok=True)
    for stale in [*glob.glob(os.path.join(path, "*.db")), os.path.join(path, "migration.json")]:
        if os.path.exists(stale):
            os.unlink(stale)
