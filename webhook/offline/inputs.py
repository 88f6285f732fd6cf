"""Objects given on the command line or in a suite: manifests and AdmissionReviews, as admission requests.

Shared by ``check``, ``replay``, ``explain`` and the policy test suites, so every offline command reads
input the same way and reports a bad file with its name (``InputError``, exit 2).
"""

from __future__ import annotations

import datetime as dt
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook.admission import review
from webhook.objects.jsonish import as_dict
from webhook.objects.pods import NO_NAMED_KINDS, TemplateFinder, bad_quantities
from webhook.offline.dates import parse_time as parse_time  # the one date parser, re-exported
from webhook.policy.yaml_lines import FAST_LOADER, first_alias

NAMESPACED_DEFAULT = "default"
CLUSTER_SCOPED = frozenset({
    "DeviceClass", "ResourceSlice", "DeviceTaintRule", "Namespace", "Node", "PersistentVolume", "StorageClass",
    "PriorityClass", "RuntimeClass", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding", "ClusterTrainingRuntime", "ClusterQueue", "ResourceFlavor",
    "Cohort", "Queue",
})
"""Kinds without a namespace (no cohort, hence no stage); any other kind is treated as namespaced."""


class InputError(ValueError):
    """A file that is not a manifest or AdmissionReview: reported with its name, exit 2."""


@dataclass
class Item:
    source: str  # file[#document][[list index]]
    request: review.AdmissionRequest
    note: str = ""  # e.g. the manifest's own namespace won over -n


def parse_at(value: str | None) -> dt.datetime | None:
    """``--at`` (``parse_time``); None when not given."""
    if not value:
        return None
    try:
        return parse_time(value)
    except ValueError as exc:
        raise InputError(f"--at {exc}") from None


def expand_paths(paths: list[str], recursive: bool, errors: list[str], suffixes: tuple[str, ...]) -> list[str]:
    """Files as given; directories become their files ending in ``suffixes`` (sorted; all levels with ``-R``).
    A directory with none is an input error (in ``errors``)."""
    out: list[str] = []
    for path in paths:
        p = Path(path)
        if path == "-" or not p.is_dir():
            out.append(path)
            continue
        found = sorted(f for f in (p.rglob("*") if recursive else p.iterdir()) if f.is_file() and f.suffix in suffixes)
        if not found:
            names = f"{', '.join(suffixes[:-1])} or {suffixes[-1]}" if len(suffixes) > 1 else suffixes[0]
            errors.append(f"{path}: no {names} files" + ("" if recursive else " (use -R for subdirectories)"))
        out.extend(str(f) for f in found)
    return out


def write_target(path: str, roots: list[str], written: dict[Path, str]) -> tuple[Path | None, str]:
    """Where writing ``path`` in place lands, or None and why not. The file is resolved through every symbolic link;
    it is written only when that lands inside one of ``roots`` (the paths the user gave, resolved the same way: a
    link named on the command line is followed, a link met inside a directory only to a file of that directory)
    and not already written in this run through another name (``written``: resolved target -> name)."""
    target = Path(path).resolve()
    if not any(target.is_relative_to(Path(r).resolve()) for r in roots):
        return None, (f"a symbolic link to {quoted(str(target))}, outside the paths given "
                      f"({', '.join(quoted(r) for r in roots)}); name that file to convert it")
    if target in written:
        return None, f"the same file as {quoted(written[target])}, already written"
    return target, ""


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def quoted(name: str) -> str:
    """A file name as git shows one: as it is when printable, else in double quotes with C escapes, so a name with
    a newline cannot start a forged line in a diff header or a message."""
    if name.isprintable() and '"' not in name and "\\" not in name:
        return name
    return '"' + "".join(_ESCAPES.get(c) or (c if c.isprintable() else f"\\u{ord(c):04x}") for c in name) + '"'


def subject_of(req: review.AdmissionRequest) -> str:
    """``Pod ml-a/train-0``: the object a request is about, for reports."""
    meta = (req.object or req.old_object or {}).get("metadata") or {}
    name = meta.get("name") or req.name or meta.get("generateName") or "<unnamed>"
    return f"{req.kind} {req.namespace + '/' if req.namespace else ''}{name}"


def meta_of(obj: dict[str, Any]) -> dict[str, Any]:
    return as_dict(obj.get("metadata"))


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
    alias = first_alias(text)  # before anything is built: a few hundred bytes of aliases can expand to gigabytes
    if alias is not None:
        errors.append(f"{path}:{alias.line}: {alias.message}")
        return []
    try:
        docs = [d for d in yaml.load_all(text, Loader=FAST_LOADER) if d is not None]  # noqa: S506 - a safe loader
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
                items.append(item_from(obj, f"{source}[{j}]" if listed else source, namespace, operation))
        except InputError as exc:
            errors.append(str(exc))
    return items


def quantity_errors(items: list[Item], errors: list[str],
                    named: Mapping[tuple[str, str], TemplateFinder] = NO_NAMED_KINDS) -> list[Item]:
    """``items`` without the objects whose resource quantities are none (an unrendered ``$GPU_PER_NODE``, an empty
    string): each such field is an input error in ``errors`` with the file, document, object, field and value,
    since the API server refuses the object when it decodes it (``objects.pods.bad_quantities``)."""
    kept = []
    for item in items:
        req = item.request
        bad = bad_quantities(req.object or {}, req.kind, req.group, named)
        errors.extend(f"{item.source}: {subject_of(req)}: {b}" for b in bad)
        if not bad:
            kept.append(item)
    return kept


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


def item_from(doc: dict[str, Any], source: str, namespace: str | None, operation: str) -> Item:
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
    meta = meta_of(doc)
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
