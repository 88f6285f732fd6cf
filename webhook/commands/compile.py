"""`dra-webhook compile`: the policy's rules CEL can decide, as Validating/MutatingAdmissionPolicies and bindings.

The API server then enforces them itself, with no call to the webhook (issue #28). The objects hold the
stage of every cohort on one date (``--at``, default today): CEL in admission has no clock, so they must be
compiled again when a schedule date passes or an exception expires; each object's ``valid-until`` annotation
says when. Rules that need the cluster view or mutation stay with the webhook; they are listed on stderr (and
under ``notCompiled`` with ``-o json``) with why.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook.commands import EXIT_NO, EXIT_OK, CliError, Subparsers, at_or_now, load_policy
from webhook.compile import Compiled, compile_admission, narrow
from webhook.compile.claims import scope_note
from webhook.compile.coverage import COMPILED, not_compiled
from webhook.compile.shared import FIELD_MANAGER, Namespaces
from webhook.offline.inputs import InputError, read_items
from webhook.policy.defaults import default_policy
from webhook.policy.delivery import CONFIG_KINDS

VALIDATING_HOOK, MUTATING_HOOK = narrow.NARROWED_HOOKS
"""The webhooks (deploy/base/webhooks.yaml) whose namespaces the compiled policies take over."""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "compile",
        help="print the policy's rules as Validating/MutatingAdmissionPolicies (run by the API server itself)",
        description="Compile the MigrationPolicy into admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies, "
        "MutatingAdmissionPolicies and bindings that run, in the API server and with no webhook call, the rules CEL "
        "can decide from the object and its namespace: " + ", ".join(COMPILED) + ". The cohorts' stages are those "
        "of --at (default: "
        "now, UTC); compile again by each object's valid-until annotation. Rules left to the webhook are listed "
        "on stderr with why. --validate applies the objects to a cluster (server-side apply, field manager "
        f"{FIELD_MANAGER}) and reports the API server's type check of each policy (exit 1 on a warning).",
    )
    p.add_argument("--policy", type=Path, default=None, help="policy file or directory (default: bundled)")
    p.add_argument("--at", default=None, metavar="DATE",
                   help="the date whose stages to compile (YYYY-MM-DD[THH:MM:SS], UTC; default now)")
    p.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml",
                   help="yaml: a multi-document stream for kubectl apply / GitOps; json: a v1 List plus "
                   "notCompiled and validUntil")
    p.add_argument("--webhook-config", type=Path, default=None, metavar="FILE",
                   help="the Mutating/ValidatingWebhookConfigurations the cluster has (e.g. `kubectl kustomize "
                   "deploy/overlays/prod` output): the bindings take the namespaceSelector of its "
                   f"{VALIDATING_HOOK} and {MUTATING_HOOK} webhooks (default: those deploy/base installs)")
    p.add_argument("--narrow-webhooks", action="store_true",
                   help="also print the --webhook-config configurations with the matchCondition "
                   f"'{narrow.CONDITION_NAME}' in place of '{narrow.USES_DEVICES}' on "
                   f"{' and '.join(narrow.NARROWED_HOOKS)}: they are then sent only "
                   "what the compiled policies leave to the webhook, for this --policy (a Pod asking only names the "
                   "policy owns, with no claims, is not sent; README \"Narrowed webhooks\"); apply them with the "
                   "compiled objects, and again after removing a resource or a legacy name from the policy")
    p.add_argument("--validate", action="store_true",
                   help="apply the objects to the cluster (server-side apply), delete the ones an earlier compile of "
                   "this policy made that are no longer compiled, and report status.typeChecking")
    p.add_argument("--kubeconfig", metavar="FILE",
                   help="the cluster to compile for (default with --validate: $KUBECONFIG, in-cluster, "
                   "~/.kube/config): its namespaces' names are read, and a validating policy's binding leaves out "
                   "those whose name settles them in a stage where the policy does nothing (the API server then "
                   "skips it before any CEL); --validate applies there")


def run(args: argparse.Namespace) -> int:
    policy = load_policy(args.policy or default_policy())
    at = at_or_now(args.at)
    if args.narrow_webhooks and args.webhook_config is None:
        raise CliError("usage error: --narrow-webhooks needs --webhook-config FILE (the configurations to narrow)")
    namespaces = _namespaces(args.webhook_config)
    if args.validate or args.kubeconfig:
        namespaces = replace(namespaces or Namespaces(), existing=_existing(args.kubeconfig))
    compiled = compile_admission(policy, at, namespaces)
    extra = narrow.narrow_configs(_configs(args.webhook_config), policy) if args.narrow_webhooks else []
    _print(compiled, args.output, extra)
    for row in not_compiled():
        print(f"not compiled: {row['rule']}: {row['why']}", file=sys.stderr)
    print(scope_note(policy), file=sys.stderr)
    if compiled.valid_until is not None:
        print(f"valid until {compiled.valid_until.isoformat()}: compile again by then (a stage or an exception "
              "changes)", file=sys.stderr)
    return validate(compiled, args.kubeconfig) if args.validate else EXIT_OK


def _namespaces(config: Path | None) -> Namespaces | None:
    """The workloads webhooks' namespaceSelectors in ``config`` (None: the shipped ones)."""
    if config is None:
        return None
    try:
        return narrow.hook_namespaces(_configs(config))
    except ValueError as exc:
        raise CliError(f"input error: --webhook-config {config}: {exc}") from None


def _existing(kubeconfig: str | None) -> frozenset[str]:
    """The cluster's namespace names (``shared.skip_settled``)."""
    from webhook.cluster import api as kube_api  # the kubernetes client: only when asked to talk to a cluster

    try:
        kube_api.quiet_client_logs()
        api = kube_api.connect(kubeconfig)
        with api:
            names = kube_api.namespace_names(api)
    except kube_api.ClusterError as exc:
        raise CliError(f"error: {exc}", EXIT_NO) from None
    except Exception as exc:  # only a saving, as in the reconciler: stage-in-use still skips those namespaces
        print(f"warning: cannot list the cluster's namespaces ({kube_api.describe_error(exc)}): no binding leaves "
              "out a settled namespace", file=sys.stderr)
        return frozenset()
    print(f"read {len(names)} namespace names from the cluster: the validating policies' bindings leave out those "
          "whose name settles them in a stage where the policy does nothing", file=sys.stderr)
    return names


def _configs(config: Path) -> list[dict[str, Any]]:
    """The Mutating/ValidatingWebhookConfigurations in ``config``."""
    try:
        docs = [i.request.object or {} for i in read_items(str(config), None, "CREATE")]
    except (OSError, ValueError, InputError) as exc:
        raise CliError(f"input error: --webhook-config {config}: {exc}") from None
    return [d for d in docs if d.get("kind") in CONFIG_KINDS]


def _print(compiled: Compiled, output: str, extra: list[dict[str, Any]]) -> None:
    objects = [*compiled.objects, *extra]
    if output == "json":
        doc = {"apiVersion": "v1", "kind": "List", "items": objects, "notCompiled": not_compiled(),
               "validUntil": compiled.valid_until.isoformat() if compiled.valid_until else None}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, width=120))


def validate(compiled: Compiled, kubeconfig: str | None) -> int:
    """Apply every object; print each policy's type-check result. Exit 1 when any expression has a warning."""
    from webhook.cluster import api as kube_api  # the kubernetes client: only when asked to talk to a cluster
    from webhook.cluster import apply as kube_apply

    try:
        kube_api.quiet_client_logs()
        api = kube_api.connect(kubeconfig)
        with api:
            policies = []
            for obj in compiled.objects:
                stored = kube_apply.apply(api, obj, FIELD_MANAGER)
                note = " (expressions compiled by the API server; this kind has no type-check status)" \
                    if obj["kind"] == "MutatingAdmissionPolicy" else ""
                print(f"applied {obj['kind']} {obj['metadata']['name']}{note}", file=sys.stderr)
                if obj["kind"] == "ValidatingAdmissionPolicy":
                    policies.append(stored)
            for gone in kube_apply.prune(api, compiled.objects, compiled.labels):
                print(f"deleted {gone} (no longer compiled)", file=sys.stderr)
            checked = kube_apply.type_checking(api, policies)
    except kube_api.ClusterError as exc:
        raise CliError(f"error: {exc}", EXIT_NO) from None
    warned = [_report(name, warnings) for name, warnings in checked.items()]
    return EXIT_NO if any(warned) else EXIT_OK


def _report(name: str, warnings: list[dict[str, Any]] | None) -> bool:
    if warnings is None:
        print(f"ValidatingAdmissionPolicy {name}: not type-checked yet (the status controller of "
              "kube-controller-manager reports it)", file=sys.stderr)
        return True
    if not warnings:
        print(f"ValidatingAdmissionPolicy {name}: type check passed", file=sys.stderr)
        return False
    for w in warnings:
        print(f"ValidatingAdmissionPolicy {name}: type check: {w.get('fieldRef')}: {w.get('warning')}",
              file=sys.stderr)
    return True
