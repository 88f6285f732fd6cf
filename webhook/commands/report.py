"""`dra-webhook report`: where the migration stands, read from a live cluster.

Per cohort and namespace the stage today and the next scheduled change; per namespace the Pods by the
path the webhook intended (our annotations) and the path they actually took, the drift between the two,
Pods nobody annotated, and claims that got injected tolerations. ``-o policyreport`` prints the same as
PolicyReport objects (``webhook.fleet.policyreport``), ``--apply`` writes them to the cluster, ``--watch`` repeats.
Exit 0 on success, 1 when the cluster could not be read or written, 2 on bad input (policy, kubeconfig,
unknown namespace).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.commands import Subparsers, load_policy, write_json
from webhook.commands.progress import Progress
from webhook.fleet import policyreport
from webhook.fleet.report import Report, build_report, render_text
from webhook.offline.dates import date_arg as _date
from webhook.policy.defaults import default_policy

if TYPE_CHECKING:
    from webhook.policy.compiled import CompiledPolicy


#: Output for programs: no progress line even on a terminal.
MACHINE_OUTPUTS = ("json", "yaml", "policyreport")


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "report",
        help="rollout state per cohort and namespace, intended vs actual allocation path, drift",
        description="Read Namespaces, Pods, ResourceClaims and DeviceClasses from the cluster and report, per "
        "cohort and namespace, the stage today and the next scheduled change, Pods by intended path "
        "(the <prefix>/path annotation) and by actual path (status.extendedResourceClaimStatus, claims, "
        "or the device plugin), the drift between the two, Pods not annotated, and claims with injected "
        "tolerations. -o policyreport prints the same as PolicyReports (one per namespace), --apply writes "
        "them to the cluster, --watch repeats. Exit 0: report printed; 1: the cluster could not be read or "
        "written; 2: bad input.",
    )
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", metavar="NS", help="only this namespace")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="all namespaces (the default)")
    p.add_argument("-o", "--output", choices=("text", "table", "json", "yaml", "policyreport"), default="text",
                   help="text (default; 'table' is the same), json, yaml (the report), or policyreport (one "
                   "PolicyReport per namespace as a YAML stream, for `kubectl apply -f -`)")
    p.add_argument("--report-api", choices=sorted(policyreport.APIS), default=policyreport.DEFAULT_API,
                   help="API of the PolicyReports for -o policyreport and --apply (default "
                   f"{policyreport.DEFAULT_API}; openreports.io/v1alpha1 for tools that read the newer group)")
    p.add_argument("--apply", action="store_true",
                   help="create or update the PolicyReports in the cluster (and delete ours for namespaces no "
                   "longer reported); needs the RBAC in deploy/policyreports/rbac.yaml")
    p.add_argument("--watch", action="store_true", help="repeat every --interval seconds until interrupted")
    p.add_argument("--interval", type=_positive, default=30.0, metavar="SECONDS",
                   help="seconds between runs with --watch (default 30)")
    p.add_argument("--policy", metavar="PATH", default=None,
                   help="policy file or directory (default: $DRA_WEBHOOK_POLICY or policies/default.yaml)")
    p.add_argument("--at", type=_date, default=None, metavar="DATE",
                   help="evaluate cohort schedules as of this UTC date (YYYY-MM-DD) instead of today")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line on stderr (there is none anyway unless stderr is a terminal and the "
                   "output is text)")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0 seconds")
    return value


def run(args: argparse.Namespace) -> int:
    from webhook.cluster import api as cluster
    from webhook.cluster import lists as kube_lists  # the kubernetes client: only for commands that talk to a cluster

    policy = load_policy(Path(args.policy) if args.policy else default_policy())
    try:
        if not getattr(args, "verbose", False):
            cluster.quiet_client_logs()
        api = cluster.connect(args.kubeconfig)
    except cluster.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with api, kube_lists.startup_heap_frozen():
        if not args.watch:
            return once(api, policy, args)
        return watch(lambda: once(api, policy, args), args.interval)


def _pause(seconds: float) -> None:
    time.sleep(seconds)


def watch(step: Callable[[], int], interval: float, sleep: Callable[[float], None] | None = None,
          times: int | None = None) -> int:
    """Run ``step`` every ``interval`` seconds until Ctrl-C (``times``: tests). A failed run is reported and
    retried at the next tick; bad input (exit 2) stops at once."""
    done = 0
    try:
        while True:
            code = step()
            if code == 2:
                return code
            sys.stdout.flush()
            done += 1
            if times is not None and done >= times:
                return code
            (sleep or _pause)(interval)
    except KeyboardInterrupt:
        return 0


def once(api: Any, policy: CompiledPolicy, args: argparse.Namespace) -> int:
    """Read, report, print (and apply). Exit code as the module docstring says."""
    from webhook.cluster import api as cluster
    now = dt.datetime.now(dt.UTC)
    if args.at is not None:
        now = dt.datetime.combine(args.at, dt.time(12), tzinfo=dt.UTC)
    progress = Progress.for_command(getattr(args, "quiet", False), args.output in MACHINE_OUTPUTS)
    report = read_report(api, policy, now, args.namespace, progress)
    if isinstance(report, int):
        return report
    target = policyreport.APIS[args.report_api]
    reports = policyreport.build(report, args.report_api) if args.output == "policyreport" or args.apply else []
    print_report(report, reports, args.output, args.watch)
    if args.apply:
        try:
            changes = cluster.apply_policy_reports(
                api, Counted(reports, lambda n: progress.wrote(target.plural, n, len(reports))),
                target.group, target.version, target.plural,
                ",".join(f"{k}={v}" for k, v in policyreport.MANAGED_BY.items()), args.namespace)
        except cluster.ClusterError as exc:
            progress.done()
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:
            progress.done()
            print(f"error: writing {target.plural}.{target.group}: {cluster.describe_error(exc)}", file=sys.stderr)
            return 1
        progress.done()
        for line in changes:
            print(line, file=sys.stderr)
    return 0


def print_report(report: Report, reports: list[dict[str, Any]], output: str, watching: bool) -> None:
    if output == "json":
        write_json(report.to_json())
    elif output == "yaml":
        sys.stdout.write(("---\n" if watching else "") + yaml.safe_dump(report.to_json(), sort_keys=False))
    elif output == "policyreport":
        sys.stdout.write(yaml.safe_dump_all(reports, sort_keys=False, explicit_start=True) if reports else "")
    else:
        if watching:
            sys.stdout.write(f"--- {report.generated.isoformat(timespec='seconds')}\n")
        sys.stdout.write(render_text(report))


class Counted(list[dict[str, Any]]):
    """The PolicyReports to write, calling ``tick(n)`` as the writer takes the n-th: write progress without
    a progress parameter on the writer (``apply_policy_reports`` iterates its list once, in order)."""

    def __init__(self, items: list[dict[str, Any]], tick: Callable[[int], None]) -> None:
        super().__init__(items)
        self.tick = tick

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for n, item in enumerate(super().__iter__(), 1):
            self.tick(n)
            yield item


class _NoNamespace(LookupError):
    pass


def read_report(api: Any, policy: CompiledPolicy, now: dt.datetime, namespace: str | None,
                progress: Progress) -> Report | int:
    """The report over paged lists streamed through ``build_report`` (one page of objects in memory at a
    time, read again from the start if a list expires half-way), or an exit code after saying what failed."""
    from webhook.cluster import api as cluster
    from webhook.cluster import lists as kube_lists

    step = "namespaces"

    def listed(resource: str) -> Iterator[dict[str, Any]]:
        nonlocal step
        step = resource
        yield from kube_lists.stream(api, resource, None if resource == "namespaces" else namespace,
                                     on_page=progress.page)

    def build() -> Report:
        nonlocal step
        step = "namespaces"
        namespaces: Iterable[dict[str, Any]] = listed("namespaces")
        if namespace:
            ns = cluster.get_namespace(api, namespace)
            if ns is None:
                raise _NoNamespace(namespace)
            namespaces = [ns]
        step = "deviceclasses"
        classes = kube_lists.device_classes(api)  # None: resource.k8s.io/v1 not served, no mapping check
        return build_report(policy, now, namespaces, listed("pods"), listed("resourceclaims"), classes)

    try:
        report = kube_lists.rerun(build)
    except _NoNamespace:
        print(f"error: namespace {namespace} not found", file=sys.stderr)
        return 2
    except Exception as exc:  # API errors, connection errors: one line, no traceback
        progress.done()
        print(f"error: reading {step} from the cluster: {cluster.describe_error(exc)}", file=sys.stderr)
        return 1
    progress.done()
    return report
