"""`dra-webhook lint [DIR]`: check a policy directory the way the server loads it, before it ships.

Same loader as the server, so "lint passes" means "the server will load it"; problems are printed as
``file:line: key.path: message`` and warnings as ``file:line: warning: key.path: message``, one per line,
which editors and CI annotate. Warnings never fail the run: each can be intended for a while.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from webhook.commands import Subparsers
from webhook.offline.dates import date_arg as _date
from webhook.offline.dates import parse_date
from webhook.policy.lint_checks import Since, stages_today
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
  - a schedule entry that moves a cohort into a stage whose findings are denied (spec.enforcement.<stage>: Deny)
    today or within 7 days
  - with --since REF: a cohort in such a stage today that was not under the policy at git REF (the change
    starts denying when applied), or whose entry started after REF was committed
  - with --kubeconfig: a cohort that matches no namespace of the cluster, a name pattern that matches none

After "policy OK" lint prints each cohort's stage on --at (default today) and its next change, then what is
under migration (spec.migration, or the DeviceClasses resources map and,
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
        help="judge exception expiry and schedules as of this UTC date (YYYY-MM-DD; default: today)",
    )
    p.add_argument(
        "--since",
        default=None,
        metavar="REF",
        help="compare with the policy files at this git ref (`git show REF:path`, e.g. origin/main or the "
        "deployed tag): warn for cohorts this change moves into a stage whose findings are denied at once; when "
        "git or the ref is unavailable lint says so on stderr and skips the comparison",
    )
    p.add_argument(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        help="also check the policy's DeviceClasses, feature gates and cohorts against this cluster (read-only: "
        "lists DeviceClasses and Namespaces, reads the API server's /metrics)",
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


def _namespaces(kubeconfig: str) -> list[tuple[str, dict[str, str]]] | None:
    """(name, labels) of the cluster's Namespaces, page by page; None (said on stderr) when they cannot be read."""
    from webhook.cluster import lists
    from webhook.cluster.api import ClusterError, connect, describe_error

    def project(o: dict[str, Any]) -> tuple[str, dict[str, str]]:
        meta = o.get("metadata") or {}
        return str(meta.get("name")), dict(meta.get("labels") or {})

    try:
        return list(lists.stream(connect(kubeconfig), "namespaces", project=project))
    except ClusterError:
        return None  # already reported by the DeviceClass check
    except Exception as exc:
        print(f"warning: cohort checks skipped: cannot list Namespaces: {describe_error(exc)}", file=sys.stderr)
    return None


def _since(ref: str, path: Path) -> Since | None:
    """The policy at git ``ref``, or None with the reason on stderr (``_policy_at``)."""
    found = _policy_at(ref, path)
    if isinstance(found, str):
        print(f"warning: --since {ref} skipped: {found}", file=sys.stderr)
        return None
    return found


def _policy_at(ref: str, path: Path) -> Since | str:
    """The policy at git ``ref`` (its files as ``git show REF:./file`` gives them, loaded as the server would),
    or why not: git missing, not a repository, the ref or a file unknown there, a policy that does not load."""
    from webhook.policy.loader import PolicyError, load, policy_files

    git = shutil.which("git")
    if git is None:
        return "git is not installed (not on PATH)"
    try:
        files = policy_files(path)
    except OSError as exc:
        return str(exc)
    if not files:
        return f"no policy files in {path}"
    with tempfile.TemporaryDirectory(prefix="dra-webhook-since-") as tmp:
        for f in files:
            shown = subprocess.run([git, "-C", str(f.parent), "show", f"{ref}:./{f.name}"], capture_output=True,
                                   check=False)
            if shown.returncode != 0:
                return f"git cannot show {f} at {ref}: {shown.stderr.decode(errors='replace').strip()}"
            (Path(tmp) / f.name).write_bytes(shown.stdout)
        try:
            old = load(tmp)
        except PolicyError as exc:
            return f"the policy at {ref} does not load:\n{exc}"
    day = subprocess.run([git, "-C", str(files[0].parent), "show", "-s", "--format=%cs", ref], capture_output=True,
                         text=True, check=False).stdout.strip()
    return Since(old, ref, parse_date(day) if day else None)


def run(args: argparse.Namespace) -> int:
    classes = gates = namespaces = None
    kubeconfig = getattr(args, "kubeconfig", None)
    if kubeconfig:
        classes = _device_classes(kubeconfig)
        gates = _cluster_gates(kubeconfig)
        namespaces = _namespaces(kubeconfig)
    today = getattr(args, "at", None) or dt.datetime.now(dt.UTC).date()
    ref = getattr(args, "since", None)
    since = _since(ref, Path(args.dir)) if ref else None
    report = lint_report(Path(args.dir), today=today, device_classes=classes, cluster_gates=gates,
                         namespaces=namespaces, since=since)
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
    for line in stages_today(report.policy, today):
        print(f"  {line}")
    known = {str((c.get("metadata") or {}).get("name")): c for c in classes} if classes is not None else None
    for line in report.policy.scope.describe(known):
        print(f"  {line}")
    return 0
