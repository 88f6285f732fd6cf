"""`dra-webhook lint [DIR]`: check a policy directory the way the server loads it, before it ships.

Same loader as the server, so "lint passes" means "the server will load it"; problems are printed as
``file:line: key.path: message`` and warnings as ``file:line: warning: key.path: message``, one per line,
which editors and CI annotate. Warnings never fail the run: each can be intended for a while.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from webhook.commands import Subparsers
from webhook.offline.dates import date_arg as _date
from webhook.policy.loader import Problem, lint_report

EPILOG = """\
warnings (exit 0; printed as file:line: warning: ...):
  - exceptions that have expired, or expire within 14 days
  - cohorts that can never match because an earlier cohort matches all their namespaces first
  - schedule entries out of date order, or two on the same date
  - a deviceClassName mapped by two resources
  - a deviceClassName of resources that spec.migration.deviceClasses leaves out (no spec.migration.drivers)
  - trainingJobs.deviceTolerations that tolerate NoExecute without a bound
  - with --kubeconfig: DeviceClasses named by the policy that do not exist in the cluster, or whose
    spec.extendedResourceName is not the resource the policy maps them to
  - with --kubeconfig: featureGates set to true/false where the cluster (its /metrics) says otherwise

After "policy OK" lint says what is under migration (spec.migration, or the DeviceClasses resources map and,
with --kubeconfig, the DRA drivers those classes select): claims of other drivers are left alone.

--webhook-rules: print (on stdout) the kustomize patches that add the webhook configuration rules for the
CRDs the policy names in spec.workloadKinds; warnings then go to stderr.

errors include a feature gate the policy's kubernetesVersion does not have (removed, or not yet added) and a
locked gate set against its lock: the Kubernetes components refuse both at start.

exit status: 0 the policy loads (warnings or not), 1 it has errors
"""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "lint",
        help="check a policy directory or file (exit 1 on any error; warnings are printed)",
        description="Load a MigrationPolicy directory (all *.yaml/*.yml directly in it) or file exactly as\n"
        "the server does and print every error as file:line: key.path: message, then every warning as\n"
        "file:line: warning: key.path: message.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dir",
        nargs="?",
        default="policies",
        metavar="DIR",
        help="policy directory or file (default: policies)",
    )
    p.add_argument(
        "--at",
        type=_date,
        default=None,
        metavar="DATE",
        help="judge exception expiry as of this UTC date (YYYY-MM-DD; default: today)",
    )
    p.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="also check the policy's DeviceClasses and feature gates against this cluster (read-only: "
        "lists DeviceClasses, reads the API server's /metrics)",
    )
    p.add_argument(
        "--webhook-rules",
        action="store_true",
        help="print the kustomize patches that send the policy's workloadKinds to the webhook (for an overlay "
        "of deploy/)",
    )


def warning_line(problem: Problem) -> str:
    """``file:line: warning: key.path: message``."""
    where = f"{problem.file}:{problem.line}" if problem.line else problem.file
    what = f"{problem.path}: {problem.message}" if problem.path else problem.message
    return f"{where}: warning: {what}"


def _device_classes(kubeconfig: str) -> list[dict[str, Any]] | None:
    from webhook.cluster.api import ClusterError, connect, describe_error, list_device_classes

    try:
        return list_device_classes(connect(kubeconfig))
    except ClusterError as exc:
        print(f"warning: cluster checks skipped: {exc}", file=sys.stderr)
    except Exception as exc:  # any API or connection failure: the file checks still stand
        print(f"warning: cluster checks skipped: cannot list DeviceClasses: {describe_error(exc)}", file=sys.stderr)
    return None


def _cluster_gates(kubeconfig: str) -> Any:
    from webhook.cluster.api import ClusterError, connect, describe_error, read_feature_gates

    try:
        return read_feature_gates(connect(kubeconfig)).enabled
    except ClusterError:
        return None  # already reported by the DeviceClass check
    except Exception as exc:
        print(f"warning: feature-gate checks skipped: cannot read /metrics: {describe_error(exc)}", file=sys.stderr)
    return None


def run(args: argparse.Namespace) -> int:
    classes = gates = None
    kubeconfig = getattr(args, "kubeconfig", None)
    if kubeconfig:
        classes = _device_classes(kubeconfig)
        gates = _cluster_gates(kubeconfig)
    report = lint_report(Path(args.dir), today=getattr(args, "at", None), device_classes=classes,
                         cluster_gates=gates)
    for problem in report.errors:
        print(problem)
    snippet = getattr(args, "webhook_rules", False)
    for problem in report.warnings:
        print(warning_line(problem), file=sys.stderr if snippet else sys.stdout)
    if report.errors or report.policy is None:
        n = len(report.errors)
        print(f"{n} error{'s' if n != 1 else ''}")
        return 1
    if snippet:
        from webhook.policy.workload_kinds import kustomize_patches

        sys.stdout.write(kustomize_patches(report.policy.workload_kinds.values(), report.policy.name))
        return 0
    n = len(report.warnings)
    note = f", {n} warning{'s' if n != 1 else ''}" if n else ""
    print(f"policy OK: {report.policy.identity} ({', '.join(report.policy.files)}){note}")
    known = {str((c.get("metadata") or {}).get("name")): c for c in classes} if classes is not None else None
    for line in report.policy.scope.describe(known):
        print(f"  {line}")
    return 0
