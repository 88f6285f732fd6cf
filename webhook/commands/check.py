"""`dra-webhook check`: what the webhook would do to these manifests, offline, through the same engine.

It runs the mutating phase and then the validating phase on the patched object, as the API server does,
so a platform team's CI sees exactly the decision, warnings and patch the cluster would produce.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any

import orjson

from webhook.defaults import default_policy
from webhook.inputs import NAMESPACED_DEFAULT, InputError, Item, parse_at, read_items


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="evaluate manifests or AdmissionReviews offline (exit 1 if anything is denied)",
        description="Evaluate Kubernetes manifests (multi-document YAML or JSON, '-' for stdin) or "
        "AdmissionReview JSON files through the webhook's engine, offline: mutate, then validate the "
        "patched object. Prints per object the decision, each finding (rule, action, message, "
        "remediation), warnings and the JSON patch. Exit 0: all allowed; 1: something denied; "
        "2: input or policy error.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="manifest or AdmissionReview files ('-' = stdin)")
    p.add_argument("--policy", type=Path, default=None, help="policy file or directory (default: bundled)")
    p.add_argument("--namespace", "-n", default=None,
                   help=f"namespace for manifests that name none (default: {NAMESPACED_DEFAULT})")
    p.add_argument("--operation", default="CREATE", choices=["CREATE", "UPDATE"],
                   help="operation to simulate for manifests (default CREATE)")
    p.add_argument("--at", default=None, metavar="DATE",
                   help="evaluate as of this UTC date or time (YYYY-MM-DD[THH:MM:SS]) to preview a schedule")
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    from webhook.admission import admit
    from webhook.policy.loader import PolicyError, load

    try:
        policy = load(args.policy or default_policy())
    except PolicyError as exc:
        print(f"policy error:\n{exc}", file=sys.stderr)
        return 2
    try:
        now = parse_at(args.at)
        items = [item for f in args.files for item in read_items(f, args.namespace, args.operation)]
    except InputError as exc:
        print(f"input error: {exc}", file=sys.stderr)
        return 2
    if not items:
        print("input error: no objects found in the given files", file=sys.stderr)
        return 2

    results = []
    for item in items:
        mutate, validate = admit(item.request, policy, None, now or dt.datetime.now(dt.UTC))
        results.append(_result(item, mutate, validate))
    if args.output == "json":
        sys.stdout.write(orjson.dumps({"policy": policy.identity, "results": results},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(f"policy {policy.identity}")
        for r in results:
            _print_text(r)
    return 1 if any(not r["allowed"] for r in results) else 0


def _result(item: Item, mutate: Any, validate: Any) -> dict[str, Any]:
    """``mutate`` and ``validate`` are the webhook's answers (``validate`` None: the mutation was denied)."""
    req = item.request
    meta = (req.object or {}).get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    answers = [("mutate", mutate), *([("validate", validate)] if validate is not None else [])]
    findings = []
    for phase, answer in answers:
        for v in answer.verdicts:
            f = v.finding
            findings.append({"phase": phase, "rule": f.rule, "action": v.action.value, "message": f.message,
                             "remediation": f.remediation, "paths": list(f.paths),
                             **({"exception": v.excepted} if v.excepted else {}),
                             **({"status": "rule-error"} if v.failed else {})})
    return {
        "source": item.source,
        "object": f"{req.kind} {req.namespace + '/' if req.namespace else ''}{name}",
        "allowed": all(a.allowed for _, a in answers),
        "stage": next((a.stage for _, a in answers if a.stage), ""),
        "cohort": next((a.cohort for _, a in answers if a.cohort), ""),
        "message": "; ".join(a.message for _, a in answers if a.message),
        "findings": findings,
        "warnings": [w for _, a in answers for w in a.warnings],  # all of them, unlike the API server
        "patch": mutate.patch,
        "auditAnnotations": {k: v for _, a in answers for k, v in a.audit.items()},
        # The AdmissionReview responses the webhook sends, byte for byte what `serve` answers.
        "responses": {phase: a.review() for phase, a in answers},
    }


def _print_text(r: dict[str, Any]) -> None:
    verdict = "ALLOWED" if r["allowed"] else "DENIED"
    where = f" [stage {r['stage']}{', cohort ' + r['cohort'] if r['cohort'] else ''}]" if r["stage"] else ""
    print(f"\n{r['object']} ({r['source']}): {verdict}{where}")
    for f in r["findings"]:
        print(f"  {f['action']:<5} {f['rule']}: {f['message']}")
        if f.get("exception"):
            print(f"        exception: {f['exception']}")
        for line in (f["remediation"] or "").strip().splitlines():
            print(f"        {line}")
    # Every warning is a Warn finding listed above; `-o json` has them as the API server would send them.
    if r["patch"]:
        print("  patch:")
        for op in r["patch"]:
            print(f"    {orjson.dumps(op).decode()}")
