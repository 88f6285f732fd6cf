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
    _add_caller_options(p)
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
                   help="append every AdmissionReview answered, with the answer sent and the policy identity, to this "
                   "JSON-lines file (redacted; for `replay`, whose baseline those answers are)")
    p.add_argument("--record-max-bytes", type=int, default=64 * 1024 * 1024,
                   help="rotate the record file past this size (default 64 MiB)")


def _add_caller_options(p: argparse.ArgumentParser) -> None:
    """Who may call (issue 47 item 5): client certificates and the plain probe/metrics port."""
    p.add_argument("--client-ca", type=Path, default=None, metavar="FILE",
                   help="require a client certificate signed by a CA in this PEM file: a caller without one fails "
                   "the TLS handshake (the API server presents one when its admission configuration's "
                   "kubeConfigFile says so; README, Security). The file is watched and reloaded with the serving "
                   "certificate")
    p.add_argument("--client-cn", default=None, metavar="NAME",
                   help="with --client-ca: the client certificate must also name NAME (subject CN or a DNS SAN); "
                   "another one gets a JSON 403 and a WARNING at most every 10 s")
    p.add_argument("--metrics-bind", default=None, metavar="HOST:PORT",
                   help="also listen on HOST:PORT (or fd://N) in plain HTTP for GET /healthz, /readyz and /metrics "
                   "only, so the kubelet's probes and Prometheus need no client certificate")


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
    problem = _check_callers(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
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
        client_ca=args.client_ca, client_cn=args.client_cn, metrics_bind=args.metrics_bind,
        max_connections=args.max_connections, header_timeout=args.header_timeout, body_timeout=args.body_timeout,
        log_level="debug" if args.verbose else "info",
    ))


def _check_callers(args: argparse.Namespace) -> str | None:
    """What is wrong with --client-ca / --client-cn / --metrics-bind, or None."""
    from webhook.serve.tls import ClientCAError, load_client_ca

    if args.client_cn is not None and args.client_ca is None:
        return "--client-cn needs --client-ca (the name is read from a verified client certificate)"
    if args.client_cn is not None and not args.client_cn.strip():
        return "--client-cn is empty"
    if args.client_ca is not None:
        try:
            load_client_ca(args.client_ca)
        except ClientCAError as exc:
            return f"--client-ca: {exc}"
    if args.metrics_bind is not None:
        return _check_metrics_bind(args.metrics_bind, args.bind)
    if args.client_ca is not None:
        log.warning("--client-ca without --metrics-bind: the kubelet's probes and Prometheus need a client "
                    "certificate too; give them --metrics-bind")
    return None


def _check_metrics_bind(metrics_bind: str, bind: str) -> str | None:
    if metrics_bind.startswith("fd://"):
        return None if metrics_bind[5:].isdigit() else f"--metrics-bind {metrics_bind!r}: fd://N takes a number"
    host, sep, port = metrics_bind.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"--metrics-bind {metrics_bind!r} is not HOST:PORT with a port from 1 to 65535"
    if not bind.startswith("fd://") and bind.rpartition(":")[2] == port:
        return f"--metrics-bind {metrics_bind!r} uses the port of --bind {bind!r}; give it a port of its own"
    return None


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
