"""Read MigrationPolicy files and report every mistake as ``file:line: key.path: message``.

Policy files are edited by people, so an error must point at the line to fix and say what is wrong
in the file's own words (YAML keys, not Python names). YAML is composed into nodes first so each key
keeps its line; the data then goes through the pydantic model and ``compile_policy``, and their error
locations are mapped back to those lines.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from webhook.gate_catalogue import effective_gates
from webhook.policy.compiled import CompiledPolicy, CompileError, compile_policy
from webhook.policy.model import MigrationPolicy

if typing.TYPE_CHECKING:
    from pydantic_core import ErrorDetails  # pydantic's own dependency: its ValidationError.errors() items

API_VERSION = "dra-migration.io/v1alpha1"
KIND = "MigrationPolicy"
SUFFIXES = (".yaml", ".yml")

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """One mistake in a policy file. ``line`` 0 = not tied to a line; ``path`` "" = not tied to a key."""

    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class PolicyError(Exception):
    """A policy that cannot be loaded; ``problems`` lists every mistake found, in file order."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


# --------------------------------------------------------------------------------------------- files


def policy_files(path: Path) -> list[Path]:
    """The files a policy directory consists of: ``*.yaml``/``*.yml`` directly in it, sorted by name.

    Hidden entries are skipped, which covers the kubelet's ``..data`` and ``..<timestamp>`` entries of a
    ConfigMap mount; the visible names are symlinks through ``..data`` and are read like plain files.
    A dangling symlink (a key removed from the ConfigMap, until the kubelet cleans up) is skipped.
    """
    if not path.is_dir():
        return [path]
    return sorted(
        (p for p in path.iterdir() if not p.name.startswith(".") and p.suffix in SUFFIXES and p.is_file()),
        key=lambda p: p.name,
    )


# ---------------------------------------------------------------------------------------------- YAML


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars: only true/false are booleans and dates stay strings.

    YAML 1.1 reads the action ``Off`` (and yes/no/on) as a boolean and ``2026-13-01`` as a broken
    timestamp that raises outside the model; as strings they reach pydantic, which parses dates itself
    and reports bad ones with the key's line.
    """


_YAML11_ONLY = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

_MERGE = "tag:yaml.org,2002:merge"


@dataclass
class Document:
    file: str
    line: int
    data: Any
    lines: dict[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Iterable[Any]) -> int:
        """Line of the deepest existing key on ``loc`` (a missing key reports its parent's line)."""
        loc = tuple(loc)
        for n in range(len(loc), 0, -1):
            line = self.lines.get(loc[:n])
            if line is not None:
                return line
        return self.line


def _key_of(loader: _Loader, node: yaml.Node) -> Any:
    try:
        key = loader.construct_object(node)
        hash(key)
        return key
    except Exception:  # a mapping used as a key: the constructor reports it with its mark
        return getattr(node, "value", "?")


def _walk(
    loader: _Loader,
    node: yaml.Node,
    loc: Loc,
    doc: Document,
    problems: list[Problem],
    seen: set[int],
    merged: bool = False,
) -> None:
    """Record the line of every key and list item under ``loc``; report duplicate keys.

    Each node is visited once, so aliases cannot make this blow up; keys reached only through an alias
    or a merge report the line of the nearest key above them.
    """
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[Any, int] = {}
        merges = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                merges.append(value_node)
                continue
            key = _key_of(loader, key_node)
            line = key_node.start_mark.line + 1
            if key in first:
                message = f"duplicate key {key!r} (first at line {first[key]})"
                problems.append(Problem(doc.file, line, loc_path(loc + (key,)), message))
                continue
            first[key] = line
            if merged and loc + (key,) in doc.lines:
                continue  # an explicit key wins over a merged one
            doc.lines[loc + (key,)] = line
            _walk(loader, value_node, loc + (key,), doc, problems, seen, merged)
        for value_node in merges:
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            for source in sources:
                if isinstance(source, yaml.MappingNode):
                    seen.discard(id(source))
                    _walk(loader, source, loc, doc, problems, seen, merged=True)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            doc.lines.setdefault(loc + (i,), item.start_mark.line + 1)
            _walk(loader, item, loc + (i,), doc, problems, seen, merged)


def _yaml_problem(file: str, exc: yaml.YAMLError, raw: bytes) -> Problem:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        text = exc.problem or "invalid YAML"
        if exc.context and exc.context_mark and mark and exc.context_mark.line != mark.line:
            text += f" ({exc.context} at line {exc.context_mark.line + 1})"
        elif exc.context:
            text = f"{text} ({exc.context})"
        return Problem(file, mark.line + 1 if mark else 0, "", f"YAML syntax error: {text}")
    if isinstance(exc, yaml.reader.ReaderError):
        line = raw[: exc.position].count(b"\n") + 1 if isinstance(exc.position, int) else 0
        return Problem(file, line, "", f"cannot read file: {exc.reason} (files must be UTF-8 text)")
    return Problem(file, 0, "", f"YAML error: {exc}")


def parse_documents(file: str, raw: bytes) -> tuple[list[Document], list[Problem]]:
    """All non-empty documents of one file, with their key lines."""
    docs: list[Document] = []
    problems: list[Problem] = []
    loader = None
    try:
        loader = _Loader(raw)  # reads ahead: may already raise on bad bytes
        while loader.check_node():
            node = loader.get_node()
            assert node is not None  # check_node() said a document follows
            doc = Document(file, node.start_mark.line + 1, None)
            doc.lines[()] = doc.line
            _walk(loader, node, (), doc, problems, set())
            try:
                doc.data = loader.construct_document(node)
            except yaml.YAMLError:
                raise
            except (ValueError, TypeError, OverflowError) as exc:  # an explicitly tagged bad scalar
                problems.append(Problem(file, doc.line, "", f"cannot read value: {exc}"))
                continue
            if doc.data is not None:
                docs.append(doc)
    except yaml.YAMLError as exc:
        problems.append(_yaml_problem(file, exc, raw))
    except RecursionError:
        problems.append(Problem(file, 0, "", "YAML is nested too deeply"))
    finally:
        if loader is not None:
            loader.dispose()
    return docs, problems


# ------------------------------------------------------------------------------------------- messages


def loc_path(loc: Iterable[Any]) -> str:
    """``spec.cohorts[0].schedule[1].stage``; keys that are not plain words are quoted in brackets."""
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and re.fullmatch(r"[A-Za-z0-9_-]+", part):
            out += f".{part}" if out else part
        else:
            out += f"[{str(part)!r}]" if isinstance(part, str) else f"[{part!r}]"
    return out


def _describe(value: Any) -> str:
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


def _suggest(word: Any, choices: Iterable[str]) -> str:
    match = _close(word, choices)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _choices(ctx: dict[str, Any] | None) -> list[str]:
    return re.findall(r"'((?:[^'\\]|\\.)*)'", str((ctx or {}).get("expected", "")))


def _value_error(message: str) -> str:
    message = re.sub(r"^(Value|Assertion) error, ", "", message)
    unknown = re.match(r"unknown rule ('[^']*'|\"[^\"]*\"); known rules: (.*)$", message)
    if unknown:
        name = unknown.group(1)[1:-1]
        hint = _suggest(name, unknown.group(2).split(", "))
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
        return loc, f"key {_describe(loc[-1] if loc else value)} is not valid: {err['msg']}"
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
        return f"{_describe(value)} is not a date (YYYY-MM-DD): {reason}"
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()), "?")
        return f"must be {_BOUNDS[kind]} {limit}, got {_describe(value)}"
    if kind == "string_too_short":
        if ctx.get("min_length") == 1:
            return "must not be empty"
        return f"must be at least {ctx.get('min_length')} characters long"
    return _wrong_type(kind, value) or msg[:1].lower() + msg[1:]


def _unknown_key(loc: Loc) -> str:
    allowed = _allowed_keys(loc[:-1])
    hint = _suggest(loc[-1], allowed)
    if not hint and allowed:
        hint = f" (allowed keys: {', '.join(allowed)})"
    return f"unknown key {str(loc[-1])!r}{hint}"


def _not_one_of(value: Any, choices: list[str]) -> str:
    shown = ", ".join(c if c else '""' for c in choices)
    if not isinstance(value, str) and str(value) in choices:
        return f'{_describe(value)} is not one of {shown}: quote it ("{value}")'
    return f"{_describe(value)} is not one of {shown}"


def _wrong_type(kind: str, value: Any) -> str | None:
    """``expected a string, got 3: quote it`` for the type errors of ``_EXPECTED``; None for other kinds."""
    for prefix, noun in _EXPECTED.items():
        if kind in (f"{prefix}_type", f"{prefix}_parsing", f"{prefix}_from_float"):
            hint = ": quote it" if noun == "a string" and isinstance(value, int | float | bool) else ""
            return f"expected {noun}, got {_describe(value)}{hint}"
    return None


# ---------------------------------------------------------------------------------------------- load


@dataclass
class _Result:
    policy: CompiledPolicy | None
    problems: list[Problem]
    doc: Document | None
    files: tuple[str, ...]


def _validation_problems(doc: Document, exc: ValidationError) -> list[Problem]:
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


def _not_a_policy(doc: Document) -> Problem | None:
    data = doc.data
    if not isinstance(data, dict):
        return Problem(doc.file, doc.line, "", f"a document must be a {KIND} mapping, got {_describe(data)}")
    kind = data.get("kind")
    if kind == KIND:
        return None
    if kind is None:
        return Problem(
            doc.file, doc.line, "", f"document has no kind; expected kind: {KIND} (apiVersion: {API_VERSION})"
        )
    return Problem(
        doc.file,
        doc.line_of(("kind",)),
        "kind",
        f"{_describe(kind)} (apiVersion {data.get('apiVersion')!r}) is not a {KIND}; a policy directory "
        f"holds only {KIND} documents (apiVersion: {API_VERSION})",
    )


def _read(path: str | Path) -> _Result:
    root = Path(path)
    shown_root = str(root)
    if not root.exists():
        return _Result(None, [Problem(shown_root, 0, "", "no such file or directory")], None, ())
    try:
        files = policy_files(root)
    except OSError as exc:
        problem = Problem(shown_root, 0, "", f"cannot list directory: {exc.strerror or exc}")
        return _Result(None, [problem], None, ())

    problems: list[Problem] = []
    raws: list[bytes] = []
    shown: list[str] = []
    candidates: list[Document] = []
    for file in files:
        name = str(file)
        try:
            raw = file.read_bytes()
        except OSError as exc:
            problems.append(Problem(name, 0, "", f"cannot read file: {exc.strerror or exc}"))
            continue
        raws.append(raw)
        shown.append(name)
        docs, file_problems = parse_documents(name, raw)
        problems += file_problems
        for doc in docs:
            wrong = _not_a_policy(doc)
            if wrong:
                problems.append(wrong)
            else:
                candidates.append(doc)

    for extra in candidates[1:]:
        first = candidates[0]
        problems.append(
            Problem(
                extra.file,
                extra.line,
                "",
                f"a second {KIND} {_name(extra)}; the first is {_name(first)} at {first.file}:{first.line} "
                "(a policy directory holds exactly one)",
            )
        )
    if not candidates and not problems:
        where = f"in {', '.join(shown)}" if shown else "(no *.yaml or *.yml files)"
        problems.append(Problem(shown_root, 0, "", f"no {KIND} found {where}"))

    models = []
    for doc in candidates:
        try:
            models.append(MigrationPolicy.model_validate(doc.data))
        except ValidationError as exc:
            problems += _validation_problems(doc, exc)

    policy = None
    if not problems:
        doc = candidates[0]
        try:
            policy = compile_policy(models[0], b"".join(raws), tuple(shown))
        except CompileError as exc:
            loc = tuple(exc.path)
            hint = ""
            if exc.message.startswith("unknown feature gate") and loc:
                hint = _suggest(loc[-1], effective_gates("1.37", {}))
            problems.append(Problem(doc.file, doc.line_of(loc), loc_path(loc), exc.message + hint))
    problems.sort(key=lambda p: (p.file, p.line))
    return _Result(policy, problems, candidates[0] if candidates else None, tuple(shown))


def _name(doc: Document) -> str:
    metadata = doc.data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return repr(name) if isinstance(name, str) else "(unnamed)"


def load(path: str | Path) -> CompiledPolicy:
    """Load the one MigrationPolicy in a directory (or a single file). Raises PolicyError."""
    result = _read(path)
    if result.problems or result.policy is None:
        raise PolicyError(result.problems or [Problem(str(Path(path)), 0, "", "no policy loaded")])
    return result.policy


# ---------------------------------------------------------------------------------------------- lint


@dataclass(frozen=True)
class LintReport:
    """What ``lint`` found: errors stop a policy from loading, warnings do not."""

    policy: CompiledPolicy | None
    errors: list[Problem]
    warnings: list[Problem]


def lint_report(
    path: str | Path,
    today: dt.date | None = None,
    device_classes: Iterable[dict[str, Any]] | None = None,
    cluster_gates: Mapping[str, bool] | None = None,
) -> LintReport:
    """Errors plus warnings (``webhook.policy.lint``), judged as of ``today`` (UTC by default).

    ``device_classes`` are the cluster's DeviceClasses when one was reachable (None: skip those checks).
    """
    from webhook.policy import lint_checks as checks

    result = _read(path)
    warnings: list[Problem] = []
    if result.policy is not None and result.doc is not None:
        today = today or dt.datetime.now(dt.UTC).date()
        for file, line, loc, message in checks.warnings(
            result.policy, result.doc.file, result.doc.line_of, today, device_classes, cluster_gates
        ):
            warnings.append(Problem(file, line, loc_path(loc), message))
    return LintReport(result.policy, result.problems, warnings)


def lint(path: str | Path) -> list[Problem]:
    """Every error that would stop the policy at ``path`` from loading; empty = it loads."""
    return _read(path).problems
