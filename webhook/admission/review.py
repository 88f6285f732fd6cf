"""AdmissionReview v1 on the wire: parse and check a request; the API server's limits on the response.

The response itself is ``admission.AdmissionResponse.review()``.

Two kinds of bad input, answered differently (docs/webhook-conventions.md §1.3):
- a body that is not an AdmissionReview v1 at all (no uid to echo) -> ``EnvelopeError``, HTTP 400 JSON;
- a review whose request is malformed (a uid exists) -> ``RequestError``, HTTP 200 with an
  AdmissionResponse ``allowed: false``, code 400, so the API server shows the message to the user
  instead of treating it as a call failure.

Before parsing, the body's shape is checked against the structural budget (``admission.budget``): a review too
large, with too many values or nested too deep is refused with code 413 or 400, as a ``RequestError`` when its
uid can be read without parsing it, else as an ``EnvelopeError``.
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from webhook.admission import budget

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})

# Limits the API server applies to warnings (docs/webhook-conventions.md §1.2).
WARNING_MAX = 256
WARNINGS_TOTAL_MAX = 4096
_AUDIT_KEY_BAD = re.compile(r"[^A-Za-z0-9._-]")


class EnvelopeError(ValueError):
    """The body is not an AdmissionReview v1: answered with HTTP ``status`` and a JSON error.

    ``message`` goes to the caller and may quote what was sent; ``log_message`` never quotes request
    values (anything in a body may be a secret, and the logs are read by more people than the caller).
    """

    def __init__(self, message: str, status: int = 400, log_message: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.log_message = log_message or message


class RequestError(ValueError):
    """The review has a uid but its request is malformed (code 400) or over the structural budget (code 400 or
    413): answered as a denial with that code. ``message`` and ``log_message`` as for EnvelopeError.
    """

    def __init__(self, uid: str, message: str, log_message: str | None = None, code: int = 400,
                 what: str = "malformed admission request") -> None:
        super().__init__(message)
        self.uid = uid
        self.message = message
        self.log_message = log_message or message
        self.code = code
        self.what = what


@dataclass(slots=True)
class AdmissionRequest:
    uid: str
    group: str
    version: str
    kind: str
    operation: str
    namespace: str
    name: str
    object: dict[str, Any] | None
    old_object: dict[str, Any] | None
    dry_run: bool
    sub_resource: str = ""
    user: dict[str, Any] = field(default_factory=dict)


def parse(body: bytes, limits: budget.Limits = budget.LIMITS) -> AdmissionRequest:
    """Parse and check a request body. Raises EnvelopeError or RequestError with a message a human can act on."""
    return from_document(load(body, limits))


def load(body: bytes, limits: budget.Limits = budget.LIMITS) -> dict[str, Any]:
    """The review as parsed, within the structural budget and an object (``from_document`` checks the rest)."""
    if not body:
        raise EnvelopeError("empty body: expected an AdmissionReview (admission.k8s.io/v1) JSON object")
    over = budget.check(body, limits)
    if over is not None:
        uid = budget.request_uid(body)
        if uid is not None:
            raise RequestError(uid, over.message, code=over.code, what="admission request refused unparsed")
        raise EnvelopeError(f"{over.message}; refused unparsed", status=over.code)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise EnvelopeError(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise EnvelopeError(f"body is a JSON {_json_type(doc)}, expected an AdmissionReview object")
    return doc


def from_document(doc: dict[str, Any]) -> AdmissionRequest:
    """Check a parsed review (``load``): the envelope, then its request."""
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if kind != KIND:
        raise EnvelopeError(f"kind is {_show(kind)}, expected 'AdmissionReview'",
                            log_message="kind is not 'AdmissionReview'")
    if api_version != API_VERSION:
        hint = " (set admissionReviewVersions: [v1] in the webhook configuration)" if api_version else ""
        raise EnvelopeError(f"apiVersion is {_show(api_version)}, only {API_VERSION!r} is supported{hint}",
                            log_message=f"apiVersion is not {API_VERSION!r}")
    req = doc.get("request")
    if not isinstance(req, dict):
        raise EnvelopeError("request is missing or not an object" if req is None else
                            f"request is a JSON {_json_type(req)}, expected an object")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise EnvelopeError("request.uid is missing or not a non-empty string; it must be echoed back")
    return parse_request(req)


def parse_request(req: dict[str, Any]) -> AdmissionRequest:
    """Check the ``request`` part of a review (uid already known to be a string)."""
    raw_uid = req.get("uid")
    uid = raw_uid if isinstance(raw_uid, str) else ""
    group, version, kind = _gvk(req, uid)
    operation = _operation(req, uid)
    obj, old = _objects(req, uid, operation, kind)
    namespace, name = req.get("namespace") or "", req.get("name") or ""
    if not isinstance(namespace, str) or not isinstance(name, str):
        raise RequestError(uid, "request.namespace and request.name must be strings")
    dry_run = req.get("dryRun") or False
    user_info = req.get("userInfo")
    user: dict[str, Any] = user_info if isinstance(user_info, dict) else {}
    sub = req.get("subResource") or ""
    return AdmissionRequest(
        uid=uid,
        group=group,
        version=version,
        kind=kind,
        operation=operation,
        namespace=namespace,
        name=name,
        object=obj,
        old_object=old,
        dry_run=bool(dry_run),
        sub_resource=sub if isinstance(sub, str) else "",
        user=user,
    )


def _gvk(req: dict[str, Any], uid: str) -> tuple[str, str, str]:
    """(group, version, kind) of ``request.kind``."""
    gvk = req.get("kind")
    if not isinstance(gvk, dict) or not isinstance(gvk.get("kind"), str) or not gvk.get("kind"):
        raise RequestError(uid, "request.kind must be an object with group, version and kind")
    group, version = gvk.get("group", ""), gvk.get("version", "")
    if not isinstance(group, str) or not isinstance(version, str):
        raise RequestError(uid, "request.kind.group and request.kind.version must be strings")
    return group, version, gvk["kind"]


def _operation(req: dict[str, Any], uid: str) -> str:
    operation = req.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:  # a list is unhashable: TypeError
        raise RequestError(uid, f"request.operation is {_show(operation)}, "
                                "expected one of CREATE, UPDATE, DELETE, CONNECT",
                           log_message="request.operation is not one of CREATE, UPDATE, DELETE, CONNECT")
    return operation


def _objects(
    req: dict[str, Any], uid: str, operation: str, kind: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(object, oldObject): objects or null, the object present on CREATE/UPDATE and of ``request.kind``."""
    obj, old = req.get("object"), req.get("oldObject")
    for name, value in (("object", obj), ("oldObject", old)):
        if value is not None and not isinstance(value, dict):
            raise RequestError(uid, f"request.{name} is a JSON {_json_type(value)}, expected an object or null")
    if operation in ("CREATE", "UPDATE") and obj is None:
        raise RequestError(uid, f"request.object is null on {operation}; nothing to evaluate")
    if obj is not None:
        obj_kind = obj.get("kind")
        if obj_kind is not None and obj_kind != kind:
            raise RequestError(
                uid, f"request.object.kind is {_show(obj_kind)} but request.kind.kind is {_show(kind)}",
                log_message="request.object.kind differs from request.kind.kind")
        meta = obj.get("metadata", {})
        if not isinstance(meta, dict):
            raise RequestError(uid, "request.object.metadata must be an object")
    return obj, old


def loggable(value: object) -> str:
    """A request value as it may go into a log line: one line whatever was sent (issue 47: a ``request.name`` with a
    newline wrote a forged line into the log). Printable text as it is; anything else escaped (``\\n``, ``\\u2028``)."""
    text = value if isinstance(value, str) else str(value)
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def limit_warnings(warnings: list[str]) -> list[str]:
    """Each warning at most 256 chars, all together at most 4096, as the API server keeps them.

    When they do not all fit, the last one kept says how many were left out (the API server would drop
    them silently).
    """
    out: list[str] = []
    total = 0
    for i, w in enumerate(warnings):
        w = " ".join(w.split())  # one line, no control characters
        if len(w) > WARNING_MAX:
            w = w[: WARNING_MAX - 1] + "…"
        if total + len(w) > WARNINGS_TOTAL_MAX:
            omitted = len(warnings) - i
            while True:
                note = f"{omitted} more warning(s) omitted; `dra-webhook check` lists them all"
                if total + len(note) <= WARNINGS_TOTAL_MAX or not out:
                    break
                total -= len(out.pop())
                omitted += 1
            out.append(note)
            break
        out.append(w)
        total += len(w)
    return out


def audit_key(key: str) -> str:
    """An auditAnnotations key the API server accepts: no '/', [A-Za-z0-9._-], <= 63, alnum at both ends."""
    key = _AUDIT_KEY_BAD.sub("-", key)[:63].strip("-._")
    return key or "note"


def clean_audit(audit: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in audit.items():
        key = audit_key(k)
        out[key] = f"{out[key]}; {v}" if key in out else str(v)
    return out


_SHOW = reprlib.Repr()
_SHOW.maxstring, _SHOW.maxother, _SHOW.maxlevel, _SHOW.maxlist, _SHOW.maxdict = 80, 80, 2, 4, 4


def _show(value: Any) -> str:
    """A request value quoted in an error message: short and flat whatever was sent (a 1 MiB string or
    JSON nested 1,000 deep must not become a 1 MiB message in the logs, nor a RecursionError)."""
    return _SHOW.repr(value)


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    return "object"
