"""`dra-webhook check`: what the webhook would do to these manifests, offline, through the same engine.

It runs the mutating phase and then the validating phase on the patched object, as the API server does,
so a platform team's CI sees exactly the decision, warnings and patch the cluster would produce.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook import review
from webhook.defaults import default_policy

NAMESPACED_DEFAULT = "default"
CLUSTER_SCOPED = frozenset({"DeviceClass", "ResourceSlice", "DeviceTaintRule", "Namespace", "Node"})


class InputError(ValueError):
    """A file that is not a manifest or AdmissionReview: reported with its name, exit 2."""


@dataclass
class Item:
    source: str  # file[:document]
    request: review.AdmissionRequest


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
        now = _parse_at(args.at)
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


def _parse_at(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--at {value!r} is not a date (YYYY-MM-DD) or ISO time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def read_items(path: str, namespace: str | None, operation: str) -> list[Item]:
    """Objects from a file: AdmissionReviews as they are, manifests wrapped in a synthetic request."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise InputError(f"{path}{where}: not valid YAML or JSON: {getattr(exc, 'problem', exc)}") from None
    items = []
    for i, doc in enumerate(docs):
        source = path if len(docs) == 1 else f"{path}#{i + 1}"
        for j, obj in enumerate(_expand(doc, source)):
            items.append(_item(obj, f"{source}[{j}]" if doc.get("kind", "").endswith("List") else source,
                               namespace, operation))
    return items


def _expand(doc: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise InputError(f"{source}: expected a Kubernetes object (a mapping), got {type(doc).__name__}")
    if doc.get("kind") == "List" or (str(doc.get("kind", "")).endswith("List") and "items" in doc):
        return [o for o in doc.get("items") or [] if isinstance(o, dict)]
    return [doc]


def _item(doc: dict[str, Any], source: str, namespace: str | None, operation: str) -> Item:
    if doc.get("kind") == "AdmissionReview":
        try:
            req = review.parse(orjson.dumps(doc))
        except review.EnvelopeError as exc:
            raise InputError(f"{source}: {exc.message}") from None
        except review.RequestError as exc:
            raise InputError(f"{source}: {exc.message}") from None
        return Item(source, req)
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str) or not kind:
        raise InputError(f"{source}: object has no apiVersion/kind")
    group, _, version = api_version.rpartition("/")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    ns = "" if kind in CLUSTER_SCOPED else (meta.get("namespace") or namespace or NAMESPACED_DEFAULT)
    req = review.AdmissionRequest(
        uid=str(uuid.uuid4()), group=group, version=version, kind=kind, operation=operation,
        namespace=ns, name=meta.get("name", ""), object=doc,
        old_object=doc if operation == "UPDATE" else None, dry_run=True,
    )
    return Item(source, req)


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
