"""`dra-webhook preflight`: what a device maintenance taint would do before anyone applies it.

Select devices like a DeviceTaintRule (``--driver/--pool/--device``, or the rule itself with ``-f``),
find the allocated claims on them and their Pods, and say per Pod whether a NoExecute taint evicts it at
once, after the toleration's ``tolerationSeconds``, or never; training jobs are marked. Exit 3 when a
training job would be evicted at once, 0 otherwise, 1 when the cluster could not be read, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.commands import EXIT_ASKED, EXIT_INPUT, EXIT_NO, EXIT_OK, Subparsers, load_policy, write_json
from webhook.commands.progress import Progress
from webhook.fleet.preflight import (
    EFFECTS,
    EXTENDED_PATH,
    ClaimUse,
    DeviceSelector,
    InputError,
    Preflight,
    Taint,
    analyse_by_namespace,
    claim_use,
    load_rule,
    pod_projection,
    reserving_groups,
    unknown_effect,
)
from webhook.policy.defaults import default_policy

if TYPE_CHECKING:
    from webhook.policy.compiled import CompiledPolicy


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "preflight",
        help="which Pods a device taint would evict (exit 3 if a training job loses its devices at once)",
        description="Find the allocated ResourceClaims on the devices a DeviceTaintRule would select, their "
        "Pods, and for each Pod whether a NoExecute taint evicts it at once, after tolerationSeconds, or never. "
        "Exit 0: no training job evicted at once; 3: at least one would be; 1: cluster unreadable; 2: bad input.",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--driver", metavar="D", help="select devices of this driver")
    what.add_argument("-f", "--filename", metavar="FILE", help="a DeviceTaintRule manifest ('-' for stdin)")
    p.add_argument("--pool", metavar="P", help="with --driver: only this pool")
    p.add_argument("--device", metavar="X", help="with --driver: only this device")
    p.add_argument("--effect", choices=EFFECTS, default=None,
                   help="taint effect to evaluate (default: NoExecute; with -f the rule's, 'None' and effects "
                   "unknown to Kubernetes 1.37, which it treats like None, read as NoExecute)")
    p.add_argument("--taint-key", metavar="K",
                   help="taint key (default: the rule's; else the policy's first NoExecute device toleration key)")
    p.add_argument("--taint-value", metavar="V", default=None, help="taint value (default: the rule's, else empty)")
    p.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format (default: table)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress line on stderr (there is none anyway unless stderr is a terminal and the "
                   "output is a table)")
    p.add_argument("--policy", metavar="PATH", default=None,
                   help="policy that says what a training job is (default: $DRA_WEBHOOK_POLICY or "
                   "policies/default.yaml)")


def _selection(args: argparse.Namespace, policy: CompiledPolicy) -> tuple[DeviceSelector | None, Taint, list[str]]:
    """Selector and taint from the flags or the rule file, plus notes on what was assumed."""
    if args.filename:
        return _rule_selection(args)
    notes: list[str] = []
    key = args.taint_key
    if not key:
        key = next((t.get("key") for t in policy.device_tolerations
                    if t.get("effect") == "NoExecute" and t.get("key")), None)
        if not key:
            raise InputError("no taint key: pass --taint-key (the policy has no NoExecute device toleration key)")
        notes.append(f"taint key {key} taken from the policy's trainingJobs.deviceTolerations")
    selector = DeviceSelector(args.driver, args.pool or None, args.device or None)
    return selector, Taint(key, args.taint_value or "", args.effect or "NoExecute"), notes


def _rule_selection(args: argparse.Namespace) -> tuple[DeviceSelector | None, Taint, list[str]]:
    """``-f``: the rule's selector and taint, the taint flags overriding the rule's key, value and effect."""
    if args.pool or args.device:
        raise InputError("--pool and --device go with --driver; with -f the rule's deviceSelector is used")
    try:
        text = sys.stdin.read() if args.filename == "-" else Path(args.filename).read_text()
    except OSError as exc:
        raise InputError(f"cannot read {args.filename}: {exc.strerror or exc}") from None
    selector, taint = load_rule(text, args.filename)
    notes: list[str] = []
    effect = args.effect or taint.effect
    if args.effect is None and taint.effect == "None":
        effect = "NoExecute"
        notes.append("the rule's effect is None (a dry run): evaluated as NoExecute")
    elif args.effect is None and unknown_effect(taint.effect):
        # "Consumers must treat unknown effects like None" (resource.k8s.io/v1 DeviceTaint.effect): read as
        # the dry run a None rule is.
        effect = "NoExecute"
        notes.append(f"the rule's effect {taint.effect} is unknown to Kubernetes 1.37, which treats it like None "
                     "(nothing is evicted): evaluated as NoExecute")
    taint = Taint(args.taint_key or taint.key, taint.value if args.taint_value is None else args.taint_value,
                  effect)
    return selector, taint, notes


def _read_and_analyse(api: Any, selector: DeviceSelector | None, taint: Taint, policy: CompiledPolicy,
                      progress: Progress) -> Preflight | int:
    """Stream the claims keeping those on the selected devices, then, one namespace at a time, the Pods of that
    namespace the claims name, judged and released before the next namespace is read (``analyse_by_namespace``;
    read again from the start if a list expires half-way); or an exit code after saying what failed."""
    from webhook.cluster import api as cluster
    from webhook.cluster import lists as kube_lists
    from webhook.gates.eviction import decide

    step = "resourceclaims"
    extended = decide(policy.source.spec.extendedResourceTaintEviction, None,
                      policy_version=policy.spec.kubernetesVersion)

    def read() -> Preflight:
        nonlocal step, extended
        step = "resourceclaims"
        claims: dict[str, list[ClaimUse]] = {}
        for use in kube_lists.stream(api, "resourceclaims", project=lambda c: claim_use(c, selector, taint),
                                     on_page=progress.page):
            claims.setdefault(use.namespace, []).append(use)
        every = [c for uses in claims.values() for c in uses]
        keep = pod_projection(every, policy)
        step = "podgroups"
        groups = cluster.podgroup_uids(api, reserving_groups(every))
        del every
        # After the first list: an unreachable cluster is one error line, not a version-read note first.
        version = cluster.server_version(api)
        extended = decide(policy.source.spec.extendedResourceTaintEviction, version,
                          policy_version=policy.spec.kubernetesVersion)
        step = "pods"
        return analyse_by_namespace(
            selector, taint, claims, lambda ns: kube_lists.stream(api, "pods", ns, project=keep, on_page=progress.page),
            policy, extended_evicted=extended.evicted, group_uids=groups, server_version=version)

    try:
        result = kube_lists.rerun(read)
    except Exception as exc:  # API errors, connection errors: one line, no traceback
        progress.done()
        print(f"error: reading {step} from the cluster: {cluster.describe_error(exc)}", file=sys.stderr)
        return EXIT_NO
    progress.done()
    if extended.evicted or any(p.eviction.reason == EXTENDED_PATH for p in result.pods):
        result.notes.append(f"extended-resource Pods {'are' if extended.evicted else 'are not'} evicted by "
                            f"device taints: {extended.why}")
    return result


def run(args: argparse.Namespace) -> int:
    from webhook.cluster import api as cluster
    from webhook.cluster import lists as kube_lists  # the kubernetes client: only for commands that talk to a cluster

    policy = load_policy(Path(args.policy) if args.policy else default_policy())
    try:
        selector, taint, notes = _selection(args, policy)
        if not getattr(args, "verbose", False):
            cluster.quiet_client_logs()
        api = cluster.connect(args.kubeconfig)
    except (InputError, cluster.ClusterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    progress = Progress.for_command(args.quiet, args.output == "json")
    with api, kube_lists.startup_heap_frozen():
        result = _read_and_analyse(api, selector, taint, policy, progress)
    if isinstance(result, int):
        return result
    result.notes[:0] = notes
    code = EXIT_ASKED if result.blocked else EXIT_OK
    if args.output == "json":
        write_json({**result.to_json(lazy=True), "exitCode": code})
    else:
        from webhook.fleet.preflight_output import text_lines

        sys.stdout.writelines(text_lines(result))
    return code
