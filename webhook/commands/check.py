"""`dra-webhook check`: what the webhook would do to these manifests, offline, through the same engine.

It runs the mutating phase and then the validating phase on the patched object, as the API server does,
so a platform team's CI sees exactly the decision, warnings and patch the cluster would produce.

Cluster objects in the same input (DeviceClasses, ResourceSlices, PodGroups, Namespaces, ResourceClaims,
ResourceClaimTemplates, HorizontalPodAutoscalers) are the cluster view for the others, so ``check app.yaml
deviceclasses.yaml`` answers as the cluster would. ``--cluster-objects FILE`` adds such objects from a snapshot
(``kubectl get deviceclasses,resourceslices,podgroups,hpa -A -o yaml``, a v1 List) to the view without judging
them: every cluster-aware rule (``unsatisfiable-claim`` over the slices, ``shared-claim-limit`` with the HPAs
and PodGroups) can then be tried in CI, offline. A document that is not an object (no ``kind``, not a
mapping) is an input error naming the file and document; the other documents are still checked, and the exit
code is 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from webhook.admission import review
from webhook.commands import (
    EXIT_ASKED,
    EXIT_INPUT,
    EXIT_NO,
    EXIT_OK,
    CliError,
    Subparsers,
    at_or_now,
    load_policy,
    webhook_delivery,
)
from webhook.offline.check import check_items
from webhook.offline.inputs import NAMESPACED_DEFAULT, Item, expand_paths, quantity_errors, read_items
from webhook.offline.views import CLUSTER_KINDS
from webhook.policy.defaults import default_policy

if TYPE_CHECKING:
    from webhook.policy.compiled import CompiledPolicy

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
EXIT_UNEXAMINED = EXIT_ASKED


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "check",
        help="evaluate manifests or AdmissionReviews offline (exit 1 if anything is denied)",
        description="Evaluate Kubernetes manifests (multi-document YAML or JSON, '-' for stdin, directories "
        "of .yaml/.yml/.json) or AdmissionReview JSON files through the webhook's engine, offline: mutate, "
        "then validate the patched object. Prints per object the decision, each finding once (rule, "
        "action, message, remediation), warnings and, for allowed objects, the JSON patch. DeviceClasses, "
        "ResourceSlices, PodGroups, Namespaces, ResourceClaims, ResourceClaimTemplates and HorizontalPodAutoscalers "
        "in the input are used as the cluster; --cluster-objects adds more from a snapshot without judging them. "
        "Objects of a kind the webhook has no rules for (neither built in nor named in the policy's workloadKinds) "
        "are listed as NOT EXAMINED. Objects in a namespace the webhook configuration's namespaceSelector leaves out "
        "(as shipped: kube-system, kube-node-lease, cert-manager, dra-webhook; or --webhook-config) are listed as "
        "NOT SENT: the cluster never sends them to the webhook.\n\n"
        "An object whose namespace a cohort's label selector may select (first matching cohort wins) is judged "
        "by its name alone and marked 'stage unknown' unless its Namespace is in the input or --cluster-objects. "
        "The summary counts each.\n\n"
        "Exit codes: 0 all allowed; 1 something denied; 2 input or policy error (the other documents "
        "are still checked); 3 with --fail-on-unexamined, some object was not examined; 3 with "
        "--fail-on-unknown-stage, some object's stage was unknown.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="manifest or AdmissionReview files or directories "
                   "('-' = stdin)")
    p.add_argument("-f", "--filename", action="append", default=[], metavar="FILE",
                   help="like FILE, kubectl style; repeatable")
    p.add_argument("-R", "--recursive", action="store_true", help="descend into directories given as FILE")
    p.add_argument("--cluster-objects", action="append", default=[], metavar="FILE",
                   help="a snapshot of the cluster the rules look up, not judged itself: DeviceClasses, "
                   "ResourceSlices, PodGroups, HorizontalPodAutoscalers, Namespaces, ResourceClaims, "
                   "ResourceClaimTemplates (e.g. `kubectl get deviceclasses,resourceslices,podgroups,hpa -A -o "
                   "yaml > cluster.yaml`; a v1 List or YAML documents; '-' for stdin); other kinds are ignored "
                   "with a note; repeatable. Answers 'would this claim ever be satisfied on my cluster?'")
    p.add_argument("--policy", type=Path, default=None, help="policy file or directory (default: bundled)")
    p.add_argument("--namespace", "-n", default=None,
                   help=f"namespace for manifests that name none (default: {NAMESPACED_DEFAULT}); a manifest's own "
                   "metadata.namespace wins, and check says so")
    p.add_argument("--operation", default="CREATE", choices=["CREATE", "UPDATE"],
                   help="operation to simulate for manifests (default CREATE)")
    p.add_argument("--at", default=None, metavar="DATE",
                   help="evaluate as of this UTC date or time (YYYY-MM-DD[THH:MM:SS]) to preview a schedule")
    p.add_argument("--fail-on-unexamined", action="store_true",
                   help=f"exit {EXIT_UNEXAMINED} when an object's kind is not examined by the webhook (and nothing "
                   "was denied)")
    p.add_argument("--fail-on-unknown-stage", action="store_true",
                   help=f"exit {EXIT_UNEXAMINED} when an object's stage is unknown (and nothing was denied): a "
                   "cohort selects namespaces by labels and may select the object's namespace, whose Namespace "
                   "is neither in the input nor in --cluster-objects")
    p.add_argument("--webhook-config", type=Path, default=None, metavar="FILE",
                   help="the Mutating/ValidatingWebhookConfigurations the cluster has (e.g. `kubectl kustomize "
                   "deploy/overlays/prod` output): their namespaceSelectors decide which objects are sent "
                   "(default: those deploy/base installs)")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dra-migration-webhook")
    except PackageNotFoundError:
        return "unknown (not installed)"


def run(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy or default_policy())
    paths = [*args.files, *args.filename]
    if not paths:
        raise CliError("input error: no input: give FILE arguments or -f FILE ('-' for stdin)")
    now = at_or_now(args.at)
    errors: list[str] = []
    cluster = _read_cluster_objects(args.cluster_objects, errors)
    sent = webhook_delivery(getattr(args, "webhook_config", None))
    files = expand_paths(paths, args.recursive, errors, MANIFEST_SUFFIXES)
    items = _read_inputs(files, args.namespace, args.operation, errors, policy)
    if not items:
        return EXIT_INPUT
    results = check_items(items, policy, now, sent, cluster)
    summary = _summary(results)
    if args.output == "json":
        sys.stdout.write(orjson.dumps({"policy": policy.identity, "summary": summary, "results": results},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(f"policy {policy.identity}")
        for r in results:
            _print_text(r)
        print("\nsummary: " + ", ".join(f"{n} {what}" for what, n in summary.items()))
    return _exit_code(results, errors, args.fail_on_unexamined, args.fail_on_unknown_stage)


def _summary(results: list[dict[str, Any]]) -> dict[str, int]:
    """Objects by what check could say of them; ``stage unknown`` counts judged objects whose stage depends on
    namespace labels the input did not give (they are also counted as allowed or denied)."""
    return {
        "objects": len(results),
        "allowed": sum(1 for r in results if r["allowed"] and r["examined"] and r.get("sent", True)),
        "denied": sum(1 for r in results if not r["allowed"]),
        "not examined": sum(1 for r in results if not r["examined"] and r.get("sent", True)),
        "not sent": sum(1 for r in results if r.get("sent") is False),
        "stage unknown": sum(1 for r in results if r.get("stageUnknown")),
    }


def _read_inputs(paths: list[str], namespace: str | None, operation: str, errors: list[str],
                 policy: CompiledPolicy) -> list[Item]:
    """Every object in the given files; input errors (appended to ``errors``: unreadable files and documents,
    quantities that are none) and notes go to stderr."""
    items: list[Item] = []
    for path in paths:
        items.extend(read_items(path, namespace, operation, errors))
    items = quantity_errors(items, errors, policy.template_finders)
    for err in errors:
        print(f"input error: {err}", file=sys.stderr)
    if not items and not errors:
        print("input error: no objects found in the given files", file=sys.stderr)
    for item in items:
        if item.note:
            print(f"note: {item.note}", file=sys.stderr)
    return items


def _read_cluster_objects(paths: list[str], errors: list[str]) -> list[review.AdmissionRequest]:
    """The objects of ``--cluster-objects`` files the view is made of; unreadable files are input errors
    (in ``errors``), objects of other kinds are dropped with one note per file and kind."""
    requests: list[review.AdmissionRequest] = []
    for path in paths:
        ignored: dict[str, int] = {}
        for item in read_items(path, None, "CREATE", errors):
            req = item.request
            if (req.group, req.kind) in CLUSTER_KINDS:
                requests.append(req)
            else:
                gk = f"{req.kind}.{req.group}" if req.group else req.kind
                ignored[gk] = ignored.get(gk, 0) + 1
        for gk, n in sorted(ignored.items()):
            print(f"note: --cluster-objects {path}: {n} {gk} ignored (no rule looks it up)", file=sys.stderr)
    return requests


def _exit_code(results: list[dict[str, Any]], errors: list[str], fail_on_unexamined: bool,
               fail_on_unknown_stage: bool = False) -> int:
    if errors:
        return EXIT_INPUT
    if any(not r["allowed"] for r in results):
        return EXIT_NO
    if fail_on_unexamined and any(not r["examined"] and r.get("sent", True) for r in results):
        return EXIT_UNEXAMINED
    if fail_on_unknown_stage and any(r.get("stageUnknown") for r in results):
        return EXIT_UNEXAMINED
    return EXIT_OK


def _print_text(r: dict[str, Any]) -> None:
    verdict = "DENIED" if not r["allowed"] else "ALLOWED" if r["examined"] else "NOT EXAMINED"
    if r.get("sent") is False:
        print(f"\n{r['object']} ({r['source']}): NOT SENT\n  {r['message']}")
        return
    if r["examined"] and not r["stage"] and r["message"] and not r["findings"] and r["allowed"]:
        verdict = "CLUSTER VIEW"
    where = f" [stage {r['stage']}{', cohort ' + r['cohort'] if r['cohort'] else ''}]" if r["stage"] else ""
    print(f"\n{r['object']} ({r['source']}): {verdict}{where}")
    if r.get("stageUnknown"):
        print(f"  {r['stageUnknown']}")
    if not r["examined"]:
        print(f"  {r['message']}; its pod templates and fields are not checked")
    elif verdict == "CLUSTER VIEW":
        print(f"  {r['message']}")
    for f in r["findings"]:
        _print_finding(f)
    # Every warning is a Warn finding listed above; `-o json` has them as the API server would send them.
    if r["patch"]:
        print("  patch:")
        for op in r["patch"]:
            print(f"    {orjson.dumps(op).decode()}")


def _print_finding(f: dict[str, Any]) -> None:
    status = f" ({f['status']})" if f.get("status") else ""
    print(f"  {f['action']:<5} {f['rule']}{status}: {f['message']}")
    if f.get("exception"):
        print(f"        exception: {f['exception']}")
    for line in (f["remediation"] or "").strip().splitlines():
        print(f"        {line}")
