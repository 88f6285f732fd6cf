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
from dataclasses import dataclass
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.util import load_yaml_guess_indent

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

    def plain(self) -> Any:
        """The document as ``check`` reads it (None for an empty one)."""
        try:
            return yaml.load(self.text, Loader=_LOADER)  # noqa: S506 - the C or pure-Python *safe* loader
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1} of the document)" if mark else ""
            raise NotConvertible(f"not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None


def split(text: str) -> list[Document]:
    """The documents of a YAML stream, each with the separator line that opened it."""
    for marker in TEMPLATE_MARKERS:
        if marker in text:
            raise NotConvertible(f"a template ({marker} ... found), not a manifest: render it first, or convert the "
                                 "values it is made from")
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
        _, indent, offset = load_yaml_guess_indent(text)  # (a sequence's item indent, its dash's offset)
        self.yaml = _emitter(indent or 2, offset or 0)
        self.data: Any = self.yaml.load(text)

    def dump(self, data: Any = None) -> str:
        buf = io.StringIO()
        self.yaml.dump(self.data if data is None else data, buf)
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


def _emitter(indent: int, offset: int) -> YAML:
    """``indent`` is where a sequence item's keys start, ``offset`` where its dash is (both below the parent key):
    ``- name`` under the key (0) or indented (``  - name``, 2, the mapping indent then being ``indent - offset``)."""
    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 1 << 16
    mapping = indent - offset if 0 < offset < indent else indent
    y.indent(mapping=mapping, sequence=indent, offset=offset)
    return y
