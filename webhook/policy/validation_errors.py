"""Pydantic validation errors in a person's words: ``file:line: key.path: message``.

pydantic reports a location as a tuple of Python names and a message written for programmers; a policy
(or suite) author needs the YAML key path, the line it is on and what to type instead ("did you mean",
the allowed keys, the allowed values, "quote it"). The lines come from ``yaml_lines.Document``.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
import types
import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from webhook.policy.model import MigrationPolicy
from webhook.policy.yaml_lines import Document, Loc, Problem, loc_path

if typing.TYPE_CHECKING:
    from pydantic_core import ErrorDetails  # pydantic's own dependency: its ValidationError.errors() items


def describe(value: Any) -> str:
    """A YAML value as its author wrote it: ``'x'``, ``3 (a number)``, ``a mapping``."""
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int | float):
        return f"{value} (a number)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dt.date):
        return f"{value} (a date)"
    return type(value).__name__


_EXPECTED = {
    "int": "an integer",
    "string": "a string",
    "bool": "true or false",
    "list": "a list",
    "dict": "a mapping",
    "model": "a mapping",
    "model_attributes": "a mapping",
    "float": "a number",
}


def unwrap_optional(tp: Any) -> Any:
    """``X`` for ``X | None`` (so a model's optional field leads to its model); any other type unchanged."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model that the mapping at ``loc`` is validated against (for key suggestions)."""
    tp: Any = MigrationPolicy
    for part in loc:
        tp = unwrap_optional(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = {f.alias or name: f for name, f in tp.model_fields.items()}
            if part not in fields:
                return None
            tp = fields[part].annotation
        elif typing.get_origin(tp) in (list, tuple):
            tp = typing.get_args(tp)[0]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    tp = unwrap_optional(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _allowed_keys(loc: Loc) -> list[str]:
    model = _model_at(loc)
    return [f.alias or name for name, f in model.model_fields.items()] if model else []


def _close(word: Any, choices: Iterable[str]) -> list[str]:
    return difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)


def suggest(word: Any, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or "" when none is close."""
    match = _close(word, choices)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _choices(ctx: dict[str, Any] | None) -> list[str]:
    return re.findall(r"'((?:[^'\\]|\\.)*)'", str((ctx or {}).get("expected", "")))


def _value_error(message: str) -> str:
    message = re.sub(r"^(Value|Assertion) error, ", "", message)
    unknown = re.match(r"unknown rule ('[^']*'|\"[^\"]*\"); known rules: (.*)$", message)
    if unknown:
        name = unknown.group(1)[1:-1]
        hint = suggest(name, unknown.group(2).split(", "))
        return f"unknown rule {name!r}{hint}" if hint else message
    return message


def refine_loc(loc: Loc, message: str, data: Any) -> Loc:
    """Point a validator's complaint about one entry (``'x' is ...``) at that entry's own line."""
    quoted = re.search(r"'([^']*)'", message)
    if not quoted:
        return loc
    node = data
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return loc
    token = quoted.group(1)
    if isinstance(node, dict) and token in node:
        return loc + (token,)
    if isinstance(node, list) and token in node:
        return loc + (node.index(token),)
    return loc


def _translate(err: ErrorDetails, data: Any) -> tuple[Loc, str]:
    """A pydantic error as (location in the file, message a person can act on)."""
    kind: str = err["type"]
    loc: Loc = tuple(err["loc"])
    value = err.get("input")
    if loc and loc[-1] == "[key]":
        loc = loc[:-1]
        return loc, f"key {describe(loc[-1] if loc else value)} is not valid: {err['msg']}"
    if kind in ("value_error", "assertion_error"):
        message = _value_error(err["msg"])
        return refine_loc(loc, message, data), message
    return loc, _message(kind, loc, value, err.get("ctx") or {}, err["msg"])


_BOUNDS = {"greater_than_equal": "at least", "greater_than": "more than", "less_than_equal": "at most",
           "less_than": "less than"}


def _message(kind: str, loc: Loc, value: Any, ctx: dict[str, Any], msg: str) -> str:
    """The message for a pydantic error of type ``kind`` (anything but a bad key or a validator's own words)."""
    if kind == "extra_forbidden":
        return _unknown_key(loc)
    if kind == "missing":
        return f"required key {str(loc[-1])!r} is missing"
    if kind in ("enum", "literal_error"):
        return _not_one_of(value, _choices(ctx))
    if kind.startswith("date") or kind.startswith("datetime"):
        reason = str(ctx.get("error", "")) or msg
        return f"{describe(value)} is not a date (YYYY-MM-DD): {reason}"
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()), "?")
        return f"must be {_BOUNDS[kind]} {limit}, got {describe(value)}"
    if kind == "string_too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"must be at least {ctx.get('min_length')} characters long"
    return _wrong_type(kind, value) or msg[:1].lower() + msg[1:]


def _unknown_key(loc: Loc) -> str:
    allowed = _allowed_keys(loc[:-1])
    hint = suggest(loc[-1], allowed)
    if not hint and allowed:
        hint = f" (allowed keys: {', '.join(allowed)})"
    return f"unknown key {str(loc[-1])!r}{hint}"


def _not_one_of(value: Any, choices: list[str]) -> str:
    shown = ", ".join(c if c else '""' for c in choices)
    if not isinstance(value, str) and str(value) in choices:
        return f'{describe(value)} is not one of {shown}: quote it ("{value}")'
    return f"{describe(value)} is not one of {shown}"


def _wrong_type(kind: str, value: Any) -> str | None:
    """``expected a string, got 3: quote it`` for the type errors of ``_EXPECTED``; None for other kinds."""
    for prefix, noun in _EXPECTED.items():
        if kind in (f"{prefix}_type", f"{prefix}_parsing", f"{prefix}_from_float"):
            hint = ": quote it" if noun == "a string" and isinstance(value, int | float | bool) else ""
            return f"expected {noun}, got {describe(value)}{hint}"
    return None


def validation_problems(doc: Document, exc: ValidationError) -> list[Problem]:
    """The MigrationPolicy model's complaints about ``doc``, each on its key's line, in the file's words."""
    errors = exc.errors(include_url=False)
    # A misspelt required key gives "unknown key 'nodeSelectr' (did you mean 'nodeSelector'?)" and
    # "required key 'nodeSelector' is missing"; the first says it all.
    misspelt = {
        tuple(e["loc"][:-1]) + (match[0],)
        for e in errors
        if e["type"] == "extra_forbidden"
        for match in [_close(e["loc"][-1], _allowed_keys(tuple(e["loc"][:-1])))]
        if match
    }
    problems = []
    for err in errors:
        if err["type"] == "missing" and tuple(err["loc"]) in misspelt:
            continue
        loc, message = _translate(err, doc.data)
        problems.append(Problem(doc.file, doc.line_of(loc), loc_path(loc), message))
    return problems
