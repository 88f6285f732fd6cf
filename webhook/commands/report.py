"""`dra-webhook report`: where the migration stands, read from a live cluster.

Per cohort and namespace the stage today and the next scheduled change; per namespace the Pods by the
path the webhook intended (our annotations) and the path they actually took, the drift between the two,
Pods nobody annotated, and claims that got injected tolerations. Exit 0 on success, 1 when the cluster
could not be read, 2 on bad input (policy, kubeconfig, unknown namespace).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import TYPE_CHECKING

from webhook import cluster
from webhook.defaults import default_policy
from webhook.report import build_report, render_text

if TYPE_CHECKING:
    from webhook.policy.compiled import CompiledPolicy


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="rollout state per cohort and namespace, intended vs actual allocation path, drift",
        description="Read Namespaces, Pods, ResourceClaims and DeviceClasses from the cluster and report, per "
        "cohort and namespace, the stage today and the next scheduled change, Pods by intended path "
        "(the <prefix>/path annotation) and by actual path (status.extendedResourceClaimStatus, claims, "
        "or the device plugin), the drift between the two, Pods not annotated, and claims with injected "
        "tolerations. Exit 0: report printed; 1: the cluster could not be read; 2: bad input.",
    )
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", metavar="NS", help="only this namespace")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="all namespaces (the default)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format (default: table)")
    p.add_argument("--policy", metavar="PATH", default=None,
                   help="policy file or directory (default: $DRA_WEBHOOK_POLICY or policies/default.yaml)")
    p.add_argument("--at", type=_date, default=None, metavar="DATE",
                   help="evaluate cohort schedules as of this UTC date (YYYY-MM-DD) instead of today")


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def load_policy(path: str | None) -> CompiledPolicy | None:
    """The policy at ``path`` (default: the bundled one), or None after printing why it does not load."""
    from webhook.policy.loader import PolicyError, load

    target = path or str(default_policy())
    try:
        return load(target)
    except PolicyError as exc:
        print(f"error: policy {target} does not load:\n{exc}", file=sys.stderr)
        return None


def run(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy)
    if policy is None:
        return 2
    try:
        if not getattr(args, "verbose", False):
            cluster.quiet_client_logs()
        api = cluster.connect(args.kubeconfig)
    except cluster.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    now = dt.datetime.now(dt.UTC)
    if args.at is not None:
        now = dt.datetime.combine(args.at, dt.time(12), tzinfo=dt.UTC)
    step = "namespaces"
    try:
        with api:
            if args.namespace:
                ns = cluster.get_namespace(api, args.namespace)
                if ns is None:
                    print(f"error: namespace {args.namespace} not found", file=sys.stderr)
                    return 2
                namespaces = [ns]
            else:
                namespaces = cluster.list_namespaces(api)
            step = "pods"
            pods = cluster.list_pods(api, args.namespace)
            step = "resourceclaims"
            claims = cluster.list_claims(api, args.namespace)
            step = "deviceclasses"
            try:
                classes = cluster.list_device_classes(api)
            except cluster.ApiException as exc:
                if exc.status != 404:
                    raise
                classes = None  # resource.k8s.io/v1 not served: no mapping check
    except Exception as exc:  # API errors, connection errors: one line, no traceback
        print(f"error: reading {step} from the cluster: {cluster.describe_error(exc)}", file=sys.stderr)
        return 1
    report = build_report(policy, now, namespaces, pods, claims, classes)
    if args.output == "json":
        print(json.dumps(report.to_json(), indent=2))
    else:
        sys.stdout.write(render_text(report))
    return 0
