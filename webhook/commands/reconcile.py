"""`dra-webhook reconcile`: the compiled mode's reconciler, alone (issue #47 item 4).

It keeps the policy's compiled Validating/MutatingAdmissionPolicies and bindings applied
(``webhook.serve.reconciler``): its replicas elect one writer with the Lease ``dra-webhook-compiled``, which writes
the last pass onto that Lease for the serving replicas' gauges. It serves nothing: no webhook, no port. It runs under
a ServiceAccount of its own (deploy/compiled/reconciler.yaml), so the webhook Pods, which parse what any caller
sends them, hold no write right on admission policies.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from typing import Any

import yaml

from webhook.commands import CliError, Subparsers, load_policy
from webhook.policy.defaults import default_policy

ROLE = "dra-migration-webhook-reconciler"
"""The ClusterRole ``--print-rbac`` writes (deploy/compiled/rbac.yaml's)."""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "reconcile",
        help="keep the policy's compiled admission policies applied (compiled mode; no server)",
        description="Compiled mode (README \"Compiled admission policies\"): server-side-apply the policy's compiled "
        "Validating/MutatingAdmissionPolicies and bindings (field manager dra-webhook-reconciler), delete the stale "
        "ones, and do it again when the policy files change, just after midnight UTC of the day a stage or "
        "exception changes, and every --period seconds. Replicas elect one writer with a Lease; the writer puts "
        "the last pass on that Lease (annotations dra-migration.io/reconciled-*), which the webhook's gauge writer "
        "exports on /metrics. Listens on no port.",
    )
    p.add_argument("--policy", type=Path, default=None,
                   help="policy file or directory (default: $DRA_WEBHOOK_POLICY or the bundled policies/default.yaml)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig (default: in-cluster or $KUBECONFIG)")
    p.add_argument("--lease-namespace", default=None, metavar="NAMESPACE",
                   help="namespace of the Lease (default: $POD_NAMESPACE, else the mounted ServiceAccount's "
                   "namespace, else dra-webhook); the webhook's gauge writer reads it in its own namespace")
    p.add_argument("--lease-name", default="dra-webhook-compiled", metavar="NAME",
                   help="name of the Lease (default dra-webhook-compiled)")
    p.add_argument("--period", type=_positive, default=300.0, metavar="SECONDS",
                   help="seconds between two passes that repair drift (default 300)")
    p.add_argument("--print-rbac", action="store_true",
                   help="print the ClusterRole this policy's reconciler needs (every name compile can give its "
                   "objects as resourceNames) and exit; deploy/compiled/rbac.yaml is this for the shipped policy")


def run(args: argparse.Namespace) -> int:
    policy_path: Path = args.policy or default_policy()
    if not policy_path.exists():
        raise CliError(f"error: policy {policy_path} does not exist")
    if args.print_rbac:
        print(rbac_yaml(load_policy(policy_path).name), end="")
        return 0
    if not (os.environ.get("KUBERNETES_SERVICE_HOST") or args.kubeconfig or os.environ.get("KUBECONFIG")):
        raise CliError("error: reconcile needs the cluster (--kubeconfig, $KUBECONFIG or in-cluster)")
    load_policy(policy_path)  # a policy that does not load at start is an input error, not a silent idle process
    from webhook.serve import gauge_writer, reconciler

    env = dict(os.environ)
    opts = reconciler.ReconcilerOptions(
        policy=policy_path, kubeconfig=args.kubeconfig, identity=gauge_writer.identity(env),
        lease_namespace=gauge_writer.lease_namespace(args.lease_namespace, env), lease_name=args.lease_name,
        period=args.period)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    reconciler.run(opts, stop)
    return 0


def rbac_yaml(policy_name: str) -> str:
    """The reconciler's ClusterRole for ``policy_name`` (``compile.reconciler_rules`` plus what every pass reads)."""
    from webhook.compile import reconciler_rules

    rules: list[dict[str, Any]] = [
        *reconciler_rules(policy_name),
        # The bindings copy the workloads webhooks' namespaceSelector (KubeWriter.namespaces): read, by name.
        {"apiGroups": ["admissionregistration.k8s.io"],
         "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
         "resourceNames": ["dra-migration-webhook"], "verbs": ["get"]},
        # A binding leaves out the namespaces its policy does nothing in (shared.skip_settled).
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]},
    ]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": ROLE, "labels": {"app.kubernetes.io/component": "reconciler"}}, "rules": rules}
    return f"# Generated by `dra-webhook reconcile --print-rbac` for policy {policy_name}.\n" + \
        yaml.safe_dump(role, sort_keys=False, width=120)


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value
