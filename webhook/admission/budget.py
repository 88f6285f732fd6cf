"""The structural budget of one AdmissionReview, read from the raw bytes before they are parsed (issue 47 item 1).

Parsed JSON costs far more than its bytes: a flat list of empty objects costs about 24 bytes of Python objects per
byte of JSON, so one 7 MiB review took a replica past its 512Mi limit. Before ``orjson`` builds anything, ``scan``
reads the body's shape at C speed (``bytes.replace``, ``bytes.translate``, one regular expression, ``bytes.count``):
its size, the number of JSON values in it (the memory parsing it costs is about proportional) and how deep it
nests. ``refusal`` says, past the limits, what the webhook answers instead of parsing:

- a body over ``max_body`` bytes: HTTP 413 (``webhook.serve.app`` refuses it before reading it whole);
- more JSON values than ``max_values``: code 413, a denial naming the limit;
- nested deeper than ``max_depth``: code 400. Kubernetes objects nest a few dozen levels (a Pod's deepest field,
  a node affinity match expression's value, is 11 levels below the review); the rules and the patch diff recurse
  in Python, and 330 levels took them past the interpreter's recursion limit.

When the body is refused, ``request_uid`` reads ``request.uid`` with a bounded scan of the first tokens (the API
server writes it first), so the answer is an AdmissionResponse the API server shows the user (code 400/413), not
an HTTP error ``failurePolicy: Ignore`` would wave through. No uid found: the answer is the HTTP status itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate

import orjson

#: Two 3 MiB objects (the API server's request limit) plus the envelope (docs/webhook-conventions.md §1.1).
MAX_BODY = 7 * 1024 * 1024
#: JSON values per review. A Pod with 3 MiB of ``env`` entries holds about 350,000; one value costs at most about
#: 100 bytes parsed (a one-key object), so the parse of a review within it stays under about 60 MB.
MAX_VALUES = 600_000
#: Nesting levels per review (the review itself is level 1, its request 2, the object 3).
MAX_DEPTH = 250

_STRUCTURE = b'{}[],"'
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in _STRUCTURE)
_STRING = re.compile(rb'"[^"]*"')  # on the structure alone, where a string holds only brackets and commas
_BRACKETS = bytes.maketrans(b"{[}]", b"(())")
_STEP = tuple(1 if b == ord("(") else -1 if b == ord(")") else 0 for b in range(256))
_PEELS = 16


@dataclass(frozen=True, slots=True)
class Limits:
    max_body: int = MAX_BODY
    max_values: int = MAX_VALUES
    max_depth: int = MAX_DEPTH


LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Shape:
    """What a body holds, outside its strings: ``values`` counts every value (objects, arrays and scalars; keys
    are not values), ``containers`` the objects and arrays, ``depth`` the deepest nesting (exact when it matters:
    when ``containers`` exceeds the depth limit asked for, else ``containers`` bounds it)."""

    size: int
    values: int
    containers: int
    depth: int


@dataclass(frozen=True, slots=True)
class Refusal:
    code: int  # 413: too large or too many values; 400: too deep
    message: str


def structure(body: bytes) -> bytes:
    """The body's brackets and commas outside strings, in order (escapes first, so ``"\\""`` ends nowhere)."""
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Most strings hold no bracket or comma: they are '""' once translated. Dropping two adjacent quotes leaves
    # what is outside the strings as it was (an empty string goes, or two strings become one), at C speed.
    return _STRING.sub(b"", unescaped.translate(None, _NOT_STRUCTURE).replace(b'""', b""))


def scan(body: bytes, max_depth: int = MAX_DEPTH, max_values: int = MAX_VALUES) -> Shape:
    """The shape of ``body``, read without parsing it. The depth is only computed for a body within
    ``max_values`` (a body over it is refused anyway) and deeper than ``max_depth`` could be."""
    s = structure(body)
    containers = s.count(b"{") + s.count(b"[")
    values = containers + s.count(b",") + (1 if body.strip() else 0)
    depth = containers
    if max_depth < containers and values <= max_values:
        depth = nesting(s)
    return Shape(len(body), values, containers, depth)


def nesting(s: bytes) -> int:
    """The deepest nesting of a structure (``structure``'s output).

    Each pass that drops the innermost ``()`` pairs takes one level off every path, so a shallow structure (every
    Kubernetes object) is measured in a few ``bytes.replace``; what is left after ``_PEELS`` passes is measured by a
    running sum, also in C (``accumulate`` over ``map``).
    """
    s = s.translate(_BRACKETS, b",")
    for peeled in range(_PEELS):
        if not s:
            return peeled
        s = s.replace(b"()", b"")
    return _PEELS + max(accumulate(map(_STEP.__getitem__, s)), default=0)


def refusal(shape: Shape, limits: Limits = LIMITS) -> Refusal | None:
    """What to answer instead of parsing a body of this shape, or None when it is within the limits."""
    if shape.size > limits.max_body:
        return Refusal(413, f"request body is {shape.size:,} bytes, larger than the webhook's limit of "
                            f"{limits.max_body:,} bytes ({limits.max_body // (1024 * 1024)} MiB)")
    if shape.values > limits.max_values:
        return Refusal(413, f"the review holds about {shape.values:,} JSON values, more than the webhook's "
                            f"limit of {limits.max_values:,} per request (its memory budget: README "
                            "'Memory per request')")
    if shape.depth > limits.max_depth:
        return Refusal(400, f"the review nests {shape.depth:,} levels deep, more than the webhook's limit of "
                            f"{limits.max_depth} (Kubernetes objects nest a few dozen levels)")
    return None


def check(body: bytes, limits: Limits = LIMITS) -> Refusal | None:
    """``refusal(scan(body))``, without scanning a body already over the size limit."""
    if len(body) > limits.max_body:
        return refusal(Shape(len(body), 0, 0, 0), limits)
    return refusal(scan(body, limits.max_depth, limits.max_values), limits)


_TOKEN = re.compile(rb'\s*(?:"((?:[^"\\]|\\.)*)"|([{}\[\],:])|([^\s{}\[\],:"]+))', re.DOTALL)
UID_TOKENS = 10_000  # tokens read looking for request.uid; the API server writes it within the first ten


def request_uid(body: bytes, max_tokens: int = UID_TOKENS) -> str | None:
    """``request.uid`` of a review, read from its first ``max_tokens`` JSON tokens without parsing the rest;
    None when it is not there, not a non-empty string, or the body is not JSON as far as it was read."""
    stack: list[tuple[bytes, str | None]] = []  # (bracket, the key of the member it is the value of)
    key: str | None = None
    pos = 0
    for _ in range(max_tokens):
        m = _TOKEN.match(body, pos)
        if m is None:
            return None
        pos = m.end()
        text, punct, _scalar = m.groups()
        if punct in (b"{", b"["):
            stack.append((punct, key))
            key = None
        elif punct in (b"}", b"]"):
            if not stack:
                return None
            stack.pop()
            key = None
        elif text is not None:
            value = _string(text)
            if value is None:
                return None
            if body[pos:pos + 64].lstrip()[:1] == b":":
                key = value
                continue
            if key == "uid" and [b for b, _k in stack] == [b"{", b"{"] and stack[1][1] == "request":
                return value or None
        elif punct == b",":
            key = None
    return None


def _string(text: bytes) -> str | None:
    try:
        value = orjson.loads(b'"' + text + b'"')
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None
