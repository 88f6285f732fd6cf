"""`dra-webhook check`: what the webhook would do to these manifests, offline, through the same engine.

It runs the mutating phase and then the validating phase on the patched object, as the API server does,
so a platform team's CI sees exactly the decision, warnings and patch the cluster would produce.

Cluster objects in the same input (DeviceClasses, Namespaces, ResourceClaims, ResourceClaimTemplates)
are the cluster view for the others, so ``check app.yaml deviceclasses.yaml`` answers as the cluster
would. A document that is not an object (no ``kind``, not a mapping) is an input error naming the file
and document; the other documents are still checked, and the exit code is 2.
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
from webhook.view import ClusterView, OfflineView, StaticView

NAMESPACED_DEFAULT = "default"
CLUSTER_SCOPED = frozenset({
    "DeviceClass", "ResourceSlice", "DeviceTaintRule", "Namespace", "Node", "PersistentVolume", "StorageClass",
    "PriorityClass", "RuntimeClass", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "ClusterTrainingRuntime", "ClusterQueue", "ResourceFlavor",
    "Cohort", "Queue",
})
"""Kinds without a namespace (no cohort, hence no stage); any other kind is treated as namespaced."""
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
EXIT_UNEXAMINED = 3
OTHER_GROUPS = frozenset({"resource.k8s.io", "scheduling.k8s.io"})
"""Groups of the non-workload kinds the webhook judges (claims, DeviceClasses, slices, PodGroups...)."""


class InputError(ValueError):
    """A file that is not a manifest or AdmissionReview: reported with its name, exit 2."""


@dataclass
class Item:
    source: str  # file[#document][[list index]]
    request: review.AdmissionRequest
    note: str = ""  # e.g. the manifest's own namespace won over -n


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="evaluate manifests or AdmissionReviews offline (exit 1 if anything is denied)",
        description="Evaluate Kubernetes manifests (multi-document YAML or JSON, '-' for stdin, directories "
        "of .yaml/.yml/.json) or AdmissionReview JSON files through the webhook's engine, offline: mutate, "
        "then validate the patched object. Prints per object the decision, each finding once (rule, "
        "action, message, remediation), warnings and, for allowed objects, the JSON patch. DeviceClasses, "
        "Namespaces, ResourceClaims and ResourceClaimTemplates in the input are used as the cluster. "
        "Objects of a kind the webhook has no rules for are listed as NOT EXAMINED.\n\n"
        "Exit codes: 0 all allowed; 1 something denied; 2 input or policy error (the other documents "
        "are still checked); 3 with --fail-on-unexamined, some object was not examined.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="manifest or AdmissionReview files or directories "
                   "('-' = stdin)")
    p.add_argument("-f", "--filename", action="append", default=[], metavar="FILE",
                   help="like FILE, kubectl style; repeatable")
    p.add_argument("-R", "--recursive", action="store_true", help="descend into directories given as FILE")
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
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dra-migration-webhook")
    except PackageNotFoundError:
        return "unknown (not installed)"


def run(args: argparse.Namespace) -> int:
    from webhook.engine import mutate_then_validate
    from webhook.policy.loader import PolicyError, load

    try:
        policy = load(args.policy or default_policy())
    except PolicyError as exc:
        print(f"policy error:\n{exc}", file=sys.stderr)
        return 2
    paths = [*args.files, *args.filename]
    if not paths:
        print("input error: no input: give FILE arguments or -f FILE ('-' for stdin)", file=sys.stderr)
        return 2
    try:
        now = _parse_at(args.at)
    except InputError as exc:
        print(f"input error: {exc}", file=sys.stderr)
        return 2
    items: list[Item] = []
    errors: list[str] = []
    for path in _expand_paths(paths, args.recursive, errors):
        items.extend(read_items(path, args.namespace, args.operation, errors))
    for err in errors:
        print(f"input error: {err}", file=sys.stderr)
    if not items:
        if not errors:
            print("input error: no objects found in the given files", file=sys.stderr)
        return 2
    for item in items:
        if item.note:
            print(f"note: {item.note}", file=sys.stderr)

    view = input_view([i.request for i in items])
    results = []
    for item in items:
        if item.request.group == "" and item.request.kind == "Namespace":
            results.append(_unexamined(item, "used as the cluster view (namespace labels) for the other objects"))
            continue
        if not examined(item.request.group, item.request.kind):
            results.append(_unexamined(item))
            continue
        mutate, validate = mutate_then_validate(item.request, policy, view, now)
        results.append(_result(item, mutate, validate))
    if args.output == "json":
        sys.stdout.write(orjson.dumps({"policy": policy.identity, "results": results},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(f"policy {policy.identity}")
        for r in results:
            _print_text(r)
    if errors:
        return 2
    if any(not r["allowed"] for r in results):
        return 1
    if args.fail_on_unexamined and any(not r["examined"] for r in results):
        return EXIT_UNEXAMINED
    return 0


def _parse_at(value: str | None) -> dt.datetime | None:
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--at {value!r} is not a date (YYYY-MM-DD) or ISO time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _expand_paths(paths: list[str], recursive: bool, errors: list[str]) -> list[str]:
    """Files as given; directories become their manifest files (sorted; all levels with ``-R``)."""
    out: list[str] = []
    for path in paths:
        p = Path(path)
        if path == "-" or not p.is_dir():
            out.append(path)
            continue
        found = sorted(f for f in (p.rglob("*") if recursive else p.iterdir())
                       if f.is_file() and f.suffix in MANIFEST_SUFFIXES)
        if not found:
            errors.append(f"{path}: no .yaml, .yml or .json files" + ("" if recursive else " (use -R for "
                                                                        "subdirectories)"))
        out.extend(str(f) for f in found)
    return out


def examined(group: str, kind: str) -> bool:
    """Whether the webhook has rules for (group, kind): a known workload kind or a DRA / scheduling kind."""
    from webhook.engine import handled_kinds
    from webhook.objects import POD_KINDS, workload_kind

    if kind in POD_KINDS:
        return workload_kind(group, kind) is not None
    return group in OTHER_GROUPS and kind in handled_kinds()


def input_view(requests: list[review.AdmissionRequest]) -> ClusterView:
    """The cluster as the input describes it: its DeviceClasses, Namespaces, claims and claim templates.

    Kinds the input has none of stay unknown (as offline), so a file without DeviceClasses is judged
    exactly as before.
    """
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for req in requests:
        if req.object is None or req.group not in ("", "resource.k8s.io"):
            continue
        obj = req.object
        if req.namespace:  # templates named in a Pod are looked up in the Pod's namespace
            obj = {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": req.namespace}}
        by_kind.setdefault(req.kind, []).append(obj)
    if not by_kind.keys() & {"DeviceClass", "Namespace", "ResourceClaim", "ResourceClaimTemplate"}:
        return OfflineView()
    namespaces = None
    if "Namespace" in by_kind:
        namespaces = {str(_meta(n).get("name")): dict(_meta(n).get("labels") or {}) for n in by_kind["Namespace"]}
    return StaticView(namespaces=namespaces, device_classes=by_kind.get("DeviceClass"),
                      resource_claims=by_kind.get("ResourceClaim"),
                      resource_claim_templates=by_kind.get("ResourceClaimTemplate"))


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def read_items(path: str, namespace: str | None, operation: str, errors: list[str] | None = None) -> list[Item]:
    """Objects from a file: AdmissionReviews as they are, manifests wrapped in a synthetic request.

    With ``errors`` given, a bad document is recorded there and the others are still read; without it
    the first problem raises InputError.
    """
    sink: list[str] = [] if errors is None else errors
    before = len(sink)
    items = _read(path, namespace, operation, sink)
    if errors is None and len(sink) > before:
        raise InputError(sink[before])
    return items


def _read(path: str, namespace: str | None, operation: str, errors: list[str]) -> list[Item]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(f"{path}: cannot read: {exc}")
        return []
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        errors.append(f"{path}{where}: not valid YAML or JSON: {getattr(exc, 'problem', exc)}")
        return []
    items = []
    for i, doc in enumerate(docs):
        source = path if len(docs) == 1 else f"{path}#{i + 1}"
        try:
            objs = _expand(doc, source)
            listed = len(objs) != 1 or objs[0] is not doc
            for j, obj in enumerate(objs):
                items.append(_item(obj, f"{source}[{j}]" if listed else source, namespace, operation))
        except InputError as exc:
            errors.append(str(exc))
    return items


def _expand(doc: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise InputError(f"{source}: expected a Kubernetes object (a mapping), got {type(doc).__name__}")
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise InputError(f"{source}: document has no kind (a string such as Pod or Deployment); got {kind!r}")
    if kind == "List" or (kind.endswith("List") and "items" in doc):
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise InputError(f"{source}: {kind}.items is not a list")
        return [_check_kind(o, f"{source}[{j}]") for j, o in enumerate(items)]
    return [doc]


def _check_kind(obj: Any, source: str) -> dict[str, Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str) or not obj.get("kind"):
        raise InputError(f"{source}: list item is not an object with a kind")
    return obj


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
    if not isinstance(api_version, str) or not api_version or not isinstance(kind, str) or not kind:
        raise InputError(f"{source}: object has no apiVersion/kind")
    group, _, version = api_version.rpartition("/")
    meta = _meta(doc)
    own = meta.get("namespace")
    note = ""
    if kind in CLUSTER_SCOPED:
        ns = ""
    elif isinstance(own, str) and own:
        ns = own
        if namespace and namespace != own:
            note = f"{source}: {kind} {meta.get('name', '')} is checked in its own namespace {own}, not -n {namespace}"
    else:
        ns = namespace or NAMESPACED_DEFAULT
    req = review.AdmissionRequest(
        uid=str(uuid.uuid4()), group=group, version=version, kind=kind, operation=operation,
        namespace=ns, name=str(meta.get("name", "")), object=doc,
        old_object=doc if operation == "UPDATE" else None, dry_run=True,
    )
    return Item(source, req, note)


def _unexamined(item: Item, view_use: str = "") -> dict[str, Any]:
    req = item.request
    gk = f"{req.group}/{req.kind}" if req.group else req.kind
    return {
        "source": item.source, "object": _describe(item), "allowed": True, "examined": bool(view_use),
        "stage": "", "cohort": "", "message": view_use or f"not examined: the webhook has no rules for {gk}",
        "findings": [], "warnings": [], "patch": [], "auditAnnotations": {},
    }


def _describe(item: Item) -> str:
    req = item.request
    meta = (req.object or {}).get("metadata") or {}
    name = meta.get("name") or meta.get("generateName") or "<unnamed>"
    return f"{req.kind} {req.namespace + '/' if req.namespace else ''}{name}"


def _result(item: Item, mutate: Any, validate: Any) -> dict[str, Any]:
    req = item.request
    # Rules that run in both phases (gated-feature) report the same finding twice: list it once.
    findings: dict[tuple[str, str, tuple[str, ...]], dict[str, Any]] = {}
    for phase, decision in (("mutate", mutate), ("validate", validate)):
        for v in decision.verdicts:
            f = v.finding
            findings.setdefault((f.rule, f.message, f.paths), {
                "phase": phase, "rule": f.rule, "action": v.action.value, "message": f.message,
                "remediation": f.remediation, "paths": list(f.paths),
                **({"exception": v.excepted} if v.excepted else {})})
    allowed = mutate.allowed and validate.allowed
    namespaced = bool(req.namespace)  # cluster-scoped objects belong to no cohort, so they have no stage
    return {
        "source": item.source,
        "object": _describe(item),
        "allowed": allowed,
        "examined": True,
        "stage": (mutate.stage or validate.stage) if namespaced else "",
        "cohort": (mutate.cohort or validate.cohort) if namespaced else "",
        "message": "; ".join(m for m in (mutate.message, validate.message) if m),
        "findings": list(findings.values()),
        "warnings": list(dict.fromkeys(mutate.warnings + validate.warnings)),  # all, unlike the API server
        "patch": mutate.patch if allowed else [],  # the API server applies no patch to a denied object
        "auditAnnotations": {**mutate.audit, **validate.audit},
    }


def _print_text(r: dict[str, Any]) -> None:
    verdict = "DENIED" if not r["allowed"] else "ALLOWED" if r["examined"] else "NOT EXAMINED"
    if r["examined"] and not r["stage"] and r["message"] and not r["findings"] and r["allowed"]:
        verdict = "CLUSTER VIEW"
    where = f" [stage {r['stage']}{', cohort ' + r['cohort'] if r['cohort'] else ''}]" if r["stage"] else ""
    print(f"\n{r['object']} ({r['source']}): {verdict}{where}")
    if not r["examined"]:
        print(f"  {r['message']}; its pod templates and fields are not checked")
    elif verdict == "CLUSTER VIEW":
        print(f"  {r['message']}")
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
