"""YAML with line numbers: every key and list item of a document keeps the line it is on.

Policy files and suite files are edited by people, so a mistake must point at the line to fix. The YAML
is composed into nodes first so each key keeps its line (``Document.line_of``); duplicate keys and
syntax errors become ``Problem``s (``file:line: key.path: message``) instead of tracebacks. What the data
means is not this module's business: ``validation_errors`` turns a model's complaints into Problems.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """One mistake in a file. ``line`` 0 = not tied to a line; ``path`` "" = not tied to a key."""

    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


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


class Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 scalars: only true/false are booleans and dates stay strings.

    YAML 1.1 reads the action ``Off`` (and yes/no/on) as a boolean and ``2026-13-01`` as a broken
    timestamp that raises outside the model; as strings they reach pydantic, which parses dates itself
    and reports bad ones with the key's line.
    """


_YAML11_ONLY = ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:timestamp")
Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML11_ONLY]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)

_MERGE = "tag:yaml.org,2002:merge"

FAST_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's C-accelerated safe loader when libyaml is built in (several times faster on large files), else
the pure-Python one: the same safe constructor, resolver, error marks and line numbers."""

_ALIAS_SUSPECT = r"(?:^|[\s\[{,:])\*[^\s\]},]"
"""A ``*`` that may start an alias (after a line start, blank or flow indicator): a cheap scan that lets almost
every file skip the exact check. It also matches a glob or cron ``*/5``; the exact check decides."""
_SUSPECT_TEXT = re.compile(_ALIAS_SUSPECT, re.M)
_SUSPECT_BYTES = re.compile(_ALIAS_SUSPECT.encode(), re.M)


@dataclass(frozen=True, slots=True)
class Alias:
    """The first YAML alias (``*name``) of a stream: where it is and in which document (1-based)."""

    line: int
    document: int
    name: str

    @property
    def message(self) -> str:
        """What is wrong, without the line (the caller puts ``file:line`` in front)."""
        return (f"document {self.document}: YAML alias *{self.name} refused: an alias repeats what its anchor "
                "holds, so a file of a few hundred bytes can expand to gigabytes; write the values out")


def first_alias(text: str | bytes) -> Alias | None:
    """The first alias in a YAML stream, or None; the one check every reader of untrusted YAML makes first.

    Exact (PyYAML's own parser events, C-accelerated when available) but run only when the cheap scan finds a
    ``*`` where an alias could start. Anchors alone are harmless and allowed. A syntax error ends the scan: the
    reader that loads the stream reports it.
    """
    suspect = _SUSPECT_BYTES.search(text) if isinstance(text, bytes) else _SUSPECT_TEXT.search(text)
    if suspect is None:
        return None
    document = 0
    try:
        for event in yaml.parse(text, Loader=FAST_LOADER):
            if isinstance(event, yaml.DocumentStartEvent):
                document += 1
            elif isinstance(event, yaml.AliasEvent):
                line = event.start_mark.line + 1 if event.start_mark is not None else 0
                return Alias(line, document, str(event.anchor))
    except yaml.YAMLError:
        return None
    return None


@dataclass
class Document:
    """One YAML document: its data, the line it starts on and the line of every key and list item."""

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


def _key_of(loader: Yaml12Loader, node: yaml.Node) -> Any:
    try:
        key = loader.construct_object(node)
        hash(key)
        return key
    except Exception:  # a mapping used as a key: the constructor reports it with its mark
        return getattr(node, "value", "?")


def _walk(
    loader: Yaml12Loader,
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
    alias = first_alias(raw)
    if alias is not None:
        return docs, [Problem(file, alias.line, "", alias.message)]
    loader = None
    try:
        loader = Yaml12Loader(raw)  # reads ahead: may already raise on bad bytes
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
