"""`dra-webhook audit`: what the webhook would answer for the objects the cluster already has.

Every existing Pod, workload (the built-in kinds and the policy's ``workloadKinds``), ResourceClaim and
ResourceClaimTemplate, in the cluster or one namespace, judged by every rule as its next CREATE would be, on
``--at`` (default now), through the one admission path with the live cluster view (``webhook.offline.audit``:
what is judged and what is skipped). Text leads with a summary per cohort (objects refused, warned, steered to
each pool), then per namespace each object with its findings; ``-o json`` is the same data; ``-o policyreport``
one PolicyReport per namespace, named ``dra-migration-webhook-audit`` (``report``'s are ``dra-migration-webhook``).
Exit 0 when the audit ran (whatever it found), 1 when the cluster could not be read, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.commands import (
    EXIT_INPUT,
    EXIT_NO,
    EXIT_OK,
    CliError,
    Subparsers,
    at_or_now,
    load_policy,
    webhook_delivery,
    write_json,
)
from webhook.commands.progress import Progress
from webhook.fleet import policyreport
from webhook.offline import audit as judged
from webhook.policy import delivery
from webhook.policy.defaults import default_policy

if TYPE_CHECKING:
    import datetime as dt

    from webhook.policy.compiled import CompiledPolicy

REPORT_NAME = "dra-migration-webhook-audit"
SYNC_SECONDS = 60.0  # how long the live view may take to list Namespaces, DeviceClasses, slices and HPAs
LOOKUP_SECONDS = 10.0  # a claim or template GET: no request waits here, so the budget is generous


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "audit",
        help="judge the objects a cluster already has as their next CREATE would be (refused, warned, steered)",
        description="List every Pod, workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob, the "
        "training and serving CRDs the webhook knows, and the policy's spec.workloadKinds), ResourceClaim and "
        "ResourceClaimTemplate in the cluster (or -n NAMESPACE) and judge each by every rule as its next CREATE "
        "would be, through the webhook's own admission path (mutate, then validate) with the live cluster view "
        "(namespace labels, DeviceClasses, ResourceSlices, claims). --at DATE judges as on that date: a cohort's "
        "next stage. Status, server-set metadata and a Pod's spec.nodeName are dropped first (a re-created Pod "
        "is scheduled again).\n\n"
        "Not judged, only counted: objects whose controller (ownerReference) is a kind the webhook judges (a Pod "
        "of a ReplicaSet, a ReplicaSet of a Deployment, a Job of a CronJob: judged with the owner's template); "
        "terminal Pods (Succeeded, Failed); objects in namespaces the webhook configuration's namespaceSelector "
        "leaves out (as shipped: kube-system, kube-node-lease, cert-manager, dra-webhook; or --webhook-config).\n\n"
        "Output: text leads with a summary per cohort (stage on the date, objects that will be refused, warned, "
        "steered to each node pool), then per namespace each object with its findings (rule, result "
        "fail/warn/error/skip, message, fix); -o json holds the same and every pass; -o policyreport prints one "
        "PolicyReport per namespace (named dra-migration-webhook-audit) for `kubectl apply -f -`.\n\n"
        "Exit codes: 0 the audit ran (whatever it found); 1 the cluster could not be read; 2 bad input.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", metavar="NS", help="only this namespace")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="all namespaces (the default)")
    p.add_argument("--policy", metavar="PATH", default=None,
                   help="policy file or directory (default: $DRA_WEBHOOK_POLICY or policies/default.yaml)")
    p.add_argument("--at", default=None, metavar="DATE",
                   help="judge as on this UTC date or time (YYYY-MM-DD[THH:MM:SS]) instead of now: what a cohort's "
                   "next stage will refuse")
    p.add_argument("-o", "--output", choices=("text", "json", "policyreport"), default="text",
                   help="text (default), json, or policyreport (one PolicyReport per namespace, a YAML stream)")
    p.add_argument("--report-api", choices=sorted(policyreport.APIS), default=policyreport.DEFAULT_API,
                   help=f"API of the PolicyReports for -o policyreport (default {policyreport.DEFAULT_API})")
    p.add_argument("--webhook-config", type=Path, default=None, metavar="FILE",
                   help="the Mutating/ValidatingWebhookConfigurations the cluster has: their namespaceSelectors "
                   "decide which namespaces are audited (default: those deploy/base installs)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress line on stderr")


def run(args: argparse.Namespace) -> int:
    from webhook.cluster import api as cluster

    policy = load_policy(Path(args.policy) if args.policy else default_policy())
    sent = webhook_delivery(args.webhook_config)
    now = at_or_now(args.at)
    try:
        if not getattr(args, "verbose", False):
            cluster.quiet_client_logs()
        api = cluster.connect(args.kubeconfig)
    except cluster.ClusterError as exc:
        raise CliError(f"error: {exc}") from None
    progress = Progress.for_command(args.quiet, args.output != "text")
    notes: list[str] = []
    with api:
        result = read_audit(api, policy, now, sent, args.namespace, notes, progress)
    if isinstance(result, int):
        return result
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print_audit(result, args.output, args.report_api)
    return EXIT_OK


def read_audit(api: Any, policy: CompiledPolicy, now: dt.datetime, sent: delivery.Delivery,
               namespace: str | None, notes: list[str], progress: Progress) -> judged.Audit | int:
    """The audit over the live cluster (read again from the start if a list expires), or an exit code after
    saying what failed."""
    from webhook.cluster import api as cluster
    from webhook.cluster import audit_reads
    from webhook.cluster import lists as kube_lists
    from webhook.cluster.live_view import LiveView

    view = LiveView(api, budget=LOOKUP_SECONDS, lookup_timeout=LOOKUP_SECONDS)
    custom = [(k.group, k.kind, k.resource, k.versions) for k in policy.workload_kinds.values()]
    try:
        labels = audit_reads.namespace_labels(api, namespace)
        if namespace and namespace not in labels:
            print(f"error: namespace {namespace} not found", file=sys.stderr)
            return EXIT_INPUT
        view.wait_synced(SYNC_SECONDS)
        live = judged.Scope(policy, audit_reads.NamespaceClaims(view, api), now, labels, sent)
        with kube_lists.startup_heap_frozen():
            return kube_lists.rerun(lambda: judged.audit(
                audit_reads.audit_lists(api, custom, namespace, notes, progress.page), live))
    except Exception as exc:  # API errors, connection errors: one line, no traceback
        print(f"error: reading the cluster: {cluster.describe_error(exc)}", file=sys.stderr)
        return EXIT_NO
    finally:
        progress.done()
        view.stop()


# -- printing ------------------------------------------------------------------------------------------------


def print_audit(audit: judged.Audit, output: str, api: str) -> None:
    if output == "json":
        write_json(audit.to_json())
    elif output == "policyreport":
        reports = policy_reports(audit, api)
        sys.stdout.write(yaml.safe_dump_all(reports, sort_keys=False, explicit_start=True) if reports else "")
    else:
        sys.stdout.write("".join(text_lines(audit)))


def text_lines(audit: judged.Audit) -> list[str]:
    """The summary per cohort, what was skipped, then each namespace's objects with their findings."""
    out = [f"policy {audit.policy}, judged as on {audit.at.isoformat(timespec='seconds')}\n\n"]
    out.append(f"{'COHORT':<24} {'STAGE':<10} {'OBJECTS':>7} {'REFUSED':>7} {'WARNED':>7}  STEERED\n")
    for name, c in sorted(audit.cohorts.items()):
        steered = ", ".join(f"{n} to {pool}" for pool, n in sorted(c.steered.items())) or "-"
        out.append(f"{name:<24} {c.stage:<10} {c.objects:>7} {c.refused:>7} {c.warned:>7}  {steered}\n")
    if not audit.cohorts:
        out.append("(no objects judged)\n")
    for why, n in sorted(audit.skipped.items()):
        out.append(f"skipped: {n} {why}\n")
    for ns, entries in sorted(audit.namespaces.items()):
        out.extend(_namespace_lines(ns, entries))
    return out


def _namespace_lines(ns: str, entries: list[judged.Entry]) -> list[str]:
    noted = [e for e in entries if not e.allowed or e.warned or e.pools]
    if not noted:
        return []
    first = entries[0]
    out = [f"\nnamespace {ns} (cohort {first.cohort or judged.NO_COHORT}, stage {first.stage})\n"]
    for e in noted:
        verdict = "REFUSED" if not e.allowed else "WARNED" if e.warned else "ALLOWED"
        pools = f", steered to {', '.join(e.pools)}" if e.pools else ""
        out.append(f"  {e.kind} {e.name}: {verdict}{pools}\n")
        for r in e.results:
            if r.result == "pass" or (r.result == "skip" and not r.exception):
                continue
            excepted = f" [exception: {r.exception}]" if r.exception else ""
            out.append(f"    {r.result:<5} {r.rule}: {r.message}{excepted}\n")
            if r.fix and r.result != "skip":
                out.append(f"          fix: {r.fix.strip().splitlines()[0]}\n")
    return out


def policy_reports(audit: judged.Audit, api: str) -> list[dict[str, Any]]:
    """One PolicyReport per namespace: a result per object and rule (``webhook.fleet.policyreport``'s shape)."""
    seconds = int(audit.at.timestamp())
    policy = audit.policy.split("@", 1)[0]
    out = []
    for ns, entries in sorted(audit.namespaces.items()):
        results = []
        for e in entries:
            ref = {"apiVersion": e.api_version, "kind": e.kind, "namespace": ns, "name": e.name}
            props = {"cohort": e.cohort or judged.NO_COHORT, "stage": e.stage, "policy": audit.policy,
                     "at": audit.at.date().isoformat(), **({"steeredTo": ",".join(e.pools)} if e.pools else {})}
            for r in e.results:
                message = f"{r.message}; fix: {r.fix.strip().splitlines()[0]}" if r.fix.strip() else r.message
                message += f" [exception: {r.exception}]" if r.exception else ""
                results.append(policyreport.result(policy, r.rule, r.result, message, ref,
                                                   {**props, "phase": r.phase, "action": r.action}, seconds))
        out.append(policyreport.report_object(ns, results, api, REPORT_NAME))
    return out
