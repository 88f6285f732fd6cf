"""Objects given on the command line or in a suite: manifests and AdmissionReviews, as admission requests.

Shared by ``check``, ``replay``, ``explain`` and the policy test suites, so every offline command reads
input the same way and reports a bad file with its name (``InputError``, exit 2).
"""

from __future__ import annotations

import datetime as dt
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook import review

NAMESPACED_DEFAULT = "default"
CLUSTER_SCOPED = frozenset({"DeviceClass", "ResourceSlice", "DeviceTaintRule", "Namespace", "Node"})


class InputError(ValueError):
    """A file that is not a manifest or AdmissionReview: reported with its name, exit 2."""


@dataclass
class Item:
    source: str  # file[:document]
    request: review.AdmissionRequest


def parse_at(value: str | None) -> dt.datetime | None:
    """``--at``: a UTC date (midnight) or ISO time; naive times are UTC; None when not given."""
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
            items.append(item_from(obj, f"{source}[{j}]" if doc.get("kind", "").endswith("List") else source,
                               namespace, operation))
    return items


def _expand(doc: Any, source: str) -> list[dict[str, Any]]:
    if not isinstance(doc, dict):
        raise InputError(f"{source}: expected a Kubernetes object (a mapping), got {type(doc).__name__}")
    if doc.get("kind") == "List" or (str(doc.get("kind", "")).endswith("List") and "items" in doc):
        return [o for o in doc.get("items") or [] if isinstance(o, dict)]
    return [doc]


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
