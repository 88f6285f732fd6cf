"""Manifest files for ``dra-webhook convert``: documents whose text is kept byte for byte unless they change.

A file is split into its YAML documents at ``---`` lines. Each document is read twice over: as plain data, the
way ``check`` reads it (PyYAML, so the decision is check's), and, only when ``convert`` changes it, as a
round-trip tree (ruamel.yaml) that keeps comments, key order, quoting and the document's own indentation for
everything that is not edited. Documents that do not change are written back as the very text they were, so
an unchanged object is byte-identical whatever the YAML library would have made of it.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError as RuamelError

_SEPARATOR = re.compile(r"---(?:[ \t]+#.*)?[ \t]*\r?\n?")
_OTHER_MARKER = re.compile(r"(---|\.\.\.)(?:[ \t]|$)")
TEMPLATE_MARKERS = ("{{", "{%")
"""Text that makes a file a template (Helm, Go templates, Jinja), not a manifest: never rewritten."""
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class NotConvertible(ValueError):
    """A file or document ``convert`` leaves as it is; the message says why."""


@dataclass
class Document:
    """One document of a file: the ``---`` line that opens it (empty for the first) and its text."""

    separator: str
    text: str
    _read: tuple[Any, str | None] | None = field(default=None, repr=False, compare=False)

    def plain(self) -> Any:
        """The document as ``check`` reads it (None for an empty one); read once."""
        if self._read is None:
            self._read = _load(self.text)
        value, problem = self._read
        if problem is not None:
            raise NotConvertible(problem)
        return value


def _load(text: str) -> tuple[Any, str | None]:
    try:
        return yaml.load(text, Loader=_LOADER), None  # noqa: S506 - the C or pure-Python *safe* loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1} of the document)" if mark else ""
        return None, f"not valid YAML{where}: {getattr(exc, 'problem', exc)}"


def split(text: str) -> list[Document]:
    """The documents of a YAML stream, each with the separator line that opened it."""
    for marker in TEMPLATE_MARKERS:
        if marker in text:
            at = text.count("\n", 0, text.index(marker)) + 1
            raise NotConvertible(f"a template ({marker} ... at line {at}), not a manifest: render it first, or "
                                 "convert the values it is made from")
    docs = [Document("", "")]
    for line in text.splitlines(keepends=True):
        if _SEPARATOR.fullmatch(line):
            docs.append(Document(line, ""))
        elif _OTHER_MARKER.match(line):
            raise NotConvertible(f"document marker with content or an end marker ({line.strip()!r}): not rewritten")
        else:
            docs[-1].text += line
    return docs


def join(docs: list[Document]) -> str:
    out: list[str] = []
    for doc in docs:
        if doc.separator and out and not out[-1].endswith("\n"):
            out.append("\n")
        out.append(doc.separator + doc.text)
    return "".join(out)


class Tree:
    """A document as a round-trip tree: edit ``data`` (CommentedMap / CommentedSeq), then ``dump()``.

    The emitter takes the document's own indentation (as guessed by ruamel.yaml) and never folds long lines,
    so the lines an edit does not touch come out as they went in, quotes and comments included.
    """

    def __init__(self, text: str) -> None:
        if _ALIASES.search(text):
            raise NotConvertible("uses YAML anchors, aliases or merge keys: an edit through one would change every "
                                 "place that shares it")
        self.yaml = _emitter(*guess_indent(text))
        try:
            self.data: Any = self.yaml.load(text)
        except RuamelError as exc:  # e.g. a duplicate key, which PyYAML (and so check) lets the last one win
            raise NotConvertible(f"not read as a round-trip document: {str(exc).splitlines()[0]}") from None

    def dump(self) -> str:
        buf = io.StringIO()
        self.yaml.dump(self.data, buf)
        return buf.getvalue()

    def new(self, plain: Any) -> Any:
        """``plain`` (dicts and lists) as tree nodes, so they are emitted in block style like the document."""
        if isinstance(plain, dict):
            m = CommentedMap()
            for k, v in plain.items():
                m[k] = self.new(v)
            return m
        if isinstance(plain, list):
            return CommentedSeq(self.new(v) for v in plain)
        return plain


_ALIASES = re.compile(r"(?:^|[\s\[{,])[&*][A-Za-z0-9_][^\s,\]}]*|<<[ \t]*:", re.M)
_OPENS = re.compile(r"[^#]*:[ \t]*(#.*)?")


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def keep_untouched(before: str, after: str) -> str:
    """``after`` (the round-trip dump of an edited document) with every run of lines the edit did not need put back
    as ``before`` had it, byte for byte (issue 45 item 6).

    ruamel.yaml re-emits a whole document: a sibling block with 3-space indentation, a flow mapping, a trailing
    space or a blank line at the top can come out different although nothing in them changed. Each differing run
    of lines (difflib's opcodes) is put back to the original text if the document still reads as the same data as
    ``after`` (PyYAML, as ``check`` reads it); a run that carries the edit, or that only parses within the new
    indentation, stays as dumped. So the result always means exactly what ``after`` means.
    """
    import difflib

    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    target, problem = _load(after)
    if problem is not None:
        return after
    pieces: list[list[str]] = []
    choices: list[tuple[int, list[str]]] = []  # (index in pieces, the original lines of that run)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            choices.append((len(pieces), old[i1:i2]))
        pieces.append(new[j1:j2])
    for index, original in choices:
        dumped = pieces[index]
        pieces[index] = original
        value, problem = _load("".join(line for piece in pieces for line in piece))
        if problem is not None or value != target:
            pieces[index] = dumped
    return "".join(line for piece in pieces for line in piece)


def dump_new(data: Any) -> str:
    """A new document (the generated ResourceClaimTemplates: plain data, no comments to keep), in block style.

    PyYAML's C emitter: five times faster than the round-trip one, which only the documents that keep text need.
    """
    return str(yaml.dump(data, Dumper=_DUMPER, sort_keys=False, default_flow_style=False))


def guess_indent(text: str) -> tuple[int, int]:
    """(mapping indent, offset of a sequence's dash under its key) of the first nested block of each kind.

    Manifests come in both styles, ``containers:\n- name`` (offset 0) and ``containers:\n  - name`` (offset 2);
    ruamel.yaml's own guess reads the whole document a second time, this reads lines until it knows both.
    """
    mapping: int | None = None
    offset: int | None = None
    opener: int | None = None  # indent of the content of the last line that opened a block (``key:``)
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        if opener is not None:
            if stripped.startswith("- ") and offset is None:
                offset = indent - opener
            elif not stripped.startswith("- ") and indent > opener and mapping is None:
                mapping = indent - opener
            if mapping is not None and offset is not None:
                break
        content, base = (stripped[2:], indent + 2) if stripped.startswith("- ") else (stripped, indent)
        opener = base if _OPENS.fullmatch(content) else None
    return mapping or 2, max(offset or 0, 0)


def _emitter(mapping: int, offset: int) -> YAML:
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 1 << 16
    y.indent(mapping=mapping, sequence=offset + 2, offset=offset)
    return y
