"""Record the AdmissionReviews the server answers, for ``dra-webhook replay``.

A policy change is safest when it has been tried on the traffic it will judge. ``serve --record FILE``
appends every review it answers as one JSON line; ``replay`` re-evaluates those lines under the old and
the new policy and says what would change.

Design choices:
- Appends are safe across gunicorn workers and their threads: the file is opened ``O_APPEND`` and each
  line goes out in one ``write`` (the kernel places it at the end atomically), under a thread lock.
- The file is bounded: past ``max_bytes`` it is renamed to ``FILE.1`` (replacing the previous one) and a
  new ``FILE`` started, so at most about twice ``max_bytes`` is kept. The rename happens under an
  ``flock`` of the old file; a worker whose open file was renamed by another notices (inode changed)
  and reopens. A line that lands in ``FILE.1`` during a rotation is kept, not lost.
- Each line holds the request and, under ``recorded``, the time, the endpoint, the answer the server sent
  (``response``: allowed, status, warnings, auditAnnotations and the JSON patch as a list of operations) and
  the identity of the policy it was answered under (``policy``): ``replay`` compares a new policy with those
  answers (issue 49 item 4).
- Only what ``replay`` needs is kept (issue 47 item 5): container ``env[].value`` (the names stay),
  ``command`` and ``args`` (of containers, exec probes and hooks), the values of probe and hook ``httpHeaders``,
  ``data``/``stringData`` of Secret objects, values of annotations whose keys look secret-ish (and
  ``kubectl.kubernetes.io/last-applied-configuration``, which holds the whole manifest, env values included),
  the ``user:password@`` of URLs in any other annotation, and ``userInfo.extra`` are replaced by ``<redacted>``.
  What the rules look at (resources, claims, labels, tolerations, node selectors) is kept.
- Recording never fails a request: an error is logged (once per kind of error) and the line dropped.
"""

from __future__ import annotations

import copy
import datetime as dt
import fcntl
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("webhook.recording")

REDACTED = "<redacted>"
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MIN_MAX_BYTES = 1024
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# Annotation keys (the name after the last '/') that usually carry credentials.
_SECRETISH = re.compile(
    r"(?i)(secret|passw|pwd|token|credential|api[-_.]?key|access[-_.]?key|private[-_.]?key|"
    r"(^|[-_.])key$|auth|cert|cookie|session|signature|dsn|connection[-_.]?string)"
)


#: ``scheme://user:password@`` (or ``scheme://token@``) in a URL: the credentials part.
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@?#]+@")
#: Lists of strings a workload's processes get (containers, exec probes, lifecycle hooks): no rule reads them.
_ARGV_KEYS = frozenset({"command", "args"})


def secretish(key: str) -> bool:
    """Whether an annotation key looks like it holds a credential."""
    return key == LAST_APPLIED or bool(_SECRETISH.search(key.rsplit("/", 1)[-1]))


def _redact_tree(node: Any, key: str = "") -> None:
    """Redact in place: env values anywhere (containers of any pod template, CRDs included) and
    secret-ish annotations of any ``metadata`` (objects and their templates)."""
    if isinstance(node, dict):
        if key == "metadata" and isinstance(node.get("annotations"), dict):
            _redact_annotations(node["annotations"])
        for k, v in node.items():
            if k in ("env", "httpHeaders") and isinstance(v, list):
                for var in v:
                    if isinstance(var, dict) and "value" in var:
                        var["value"] = REDACTED
            elif k in _ARGV_KEYS and isinstance(v, list) and v:
                node[k] = [REDACTED]
            else:
                _redact_tree(v, k)
    elif isinstance(node, list):
        for item in node:
            _redact_tree(item, key)


def _redact_annotations(ann: dict[Any, Any]) -> None:
    for k, v in ann.items():
        if isinstance(k, str) and secretish(k):
            ann[k] = REDACTED
        elif isinstance(v, str) and "@" in v:
            ann[k] = _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", v)


def _redact_object(obj: Any) -> None:
    if not isinstance(obj, dict):
        return
    if obj.get("kind") == "Secret":
        for field in ("data", "stringData"):
            if isinstance(obj.get(field), dict):
                obj[field] = dict.fromkeys(obj[field], REDACTED)
    _redact_tree(obj)


def redact(review: dict[str, Any]) -> dict[str, Any]:
    """The review with secret values replaced (changed in place and returned)."""
    req = review.get("request")
    if not isinstance(req, dict):
        return review
    for field in ("object", "oldObject"):
        _redact_object(req.get(field))
    user = req.get("userInfo")
    if isinstance(user, dict) and isinstance(user.get("extra"), dict):
        user["extra"] = dict.fromkeys(user["extra"], [REDACTED])
    return review


def _redact_response(response: dict[str, Any]) -> dict[str, Any]:
    """The answer as recorded: its JSON patch as a list of operations (the server hands them over decoded), with
    the values ``redact`` strips stripped from them too (a patch that adds a container would carry its env)."""
    patch = response.get("patch")
    if not isinstance(patch, list):
        return response
    ops = copy.deepcopy(patch)  # the answer's own operations stay as they were sent
    _redact_tree(ops)
    return {**response, "patch": ops}


def record_line(body: bytes | dict[str, Any], endpoint: str | None = None, now: dt.datetime | None = None,
                response: dict[str, Any] | None = None, policy: str = "") -> bytes | None:
    """One JSON line for a review body, redacted; None when the body is not a JSON object.

    The server hands over the review it parsed, once answered (redacted in place, never parsed twice: issue 47),
    with its answer (``response``, the AdmissionReview's ``response`` with ``patch`` as the list of operations
    rather than base64) and the identity of the policy it was
    answered under: ``recorded.response`` and ``recorded.policy``, the baseline ``replay`` compares with.
    """
    try:
        review = orjson.loads(body) if isinstance(body, bytes) else body
    except orjson.JSONDecodeError:
        return None
    if not isinstance(review, dict):
        return None
    redact(review)
    when = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    meta: dict[str, Any] = {"time": when}
    if endpoint:
        meta["endpoint"] = endpoint
    if policy:
        meta["policy"] = policy
    if response is not None:
        meta["response"] = _redact_response(response)
    review["recorded"] = meta
    return orjson.dumps(review) + b"\n"


class Recorder:
    """Append-only, size-bounded JSON-lines file of answered reviews; call it with the raw request body."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < MIN_MAX_BYTES:  # a worker must not die over a flag: use the smallest sensible bound
            log.warning("record file limit %d bytes is too small; using %d", max_bytes, MIN_MAX_BYTES)
            max_bytes = MIN_MAX_BYTES
        self.path = Path(path)
        self.backup = self.path.with_name(self.path.name + ".1")
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._pid = 0
        self._errors: set[str] = set()
        self.dropped = 0

    def __call__(self, body: bytes | dict[str, Any], endpoint: str | None = None,
                 response: dict[str, Any] | None = None, policy: str = "") -> None:
        """Record one review (its body, or as parsed: then changed in place) and the answer sent (``response``,
        under ``policy``). Never raises: the request must be answered whatever happens here."""
        try:
            line = record_line(body, endpoint, response=response, policy=policy)
            if line is None:
                return
            if len(line) > self.max_bytes:
                self._note("a review larger than --record-max-bytes was not recorded")
                self.dropped += 1
                return
            with self._lock:
                self._write(line)
        except Exception as exc:  # disk full, permissions, ...: log once per kind, keep serving
            self.dropped += 1
            self._note(f"cannot record to {self.path}: {exc}")

    def _note(self, message: str) -> None:
        if message not in self._errors:
            self._errors.add(message)
            log.warning("%s", message)

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def _fd_for_path(self) -> int:
        """Our descriptor, reopened after a fork or after another process rotated the file."""
        if self._fd is not None and self._pid == os.getpid():
            try:
                same = os.stat(self.path).st_ino == os.fstat(self._fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return self._fd
            os.close(self._fd)
        elif self._fd is not None:
            os.close(self._fd)  # inherited across a fork: the child's copy only; the parent keeps its own
        self._fd, self._pid = self._open(), os.getpid()
        return self._fd

    def _write(self, line: bytes) -> None:
        fd = self._fd_for_path()
        if os.fstat(fd).st_size + len(line) > self.max_bytes:
            fd = self._rotate(fd, len(line))
        view = memoryview(line)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def _rotate(self, fd: int, incoming: int) -> int:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                st = None
            # Another process may have rotated while we waited for the lock: then only reopen.
            if st is not None and st.st_ino == os.fstat(fd).st_ino and st.st_size + incoming > self.max_bytes:
                os.replace(self.path, self.backup)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        self._fd, self._pid = self._open(), os.getpid()
        return self._fd

    def close(self) -> None:
        with self._lock:
            if self._fd is not None and self._pid == os.getpid():
                os.close(self._fd)
            self._fd = None


def read_records(path: str | os.PathLike[str]) -> list[tuple[int, dict[str, Any] | None, str]]:
    """``(line number, record or None, error)`` for each non-empty line of a recording."""
    out: list[tuple[int, dict[str, Any] | None, str]] = []
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                doc = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                out.append((n, None, f"not JSON ({exc})"))
                continue
            if not isinstance(doc, dict) or not isinstance(doc.get("request"), dict):
                out.append((n, None, "not an AdmissionReview request"))
                continue
            out.append((n, doc, ""))
    return out
