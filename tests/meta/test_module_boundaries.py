"""The house's one import table (issue 44 item 2): which of our folders each folder of ``webhook/`` may import.

Checked on the source (AST) over every import, function-level and ``TYPE_CHECKING`` ones included, so a
new cycle or an import from a lower folder into a higher one fails here with its file and line. Each folder's
README says the same in its "May import:" line, and a test keeps the two equal. Third-party imports that
belong to one folder (``kubernetes``: ``cluster``; flask, werkzeug, gunicorn: ``serve``) are in the same
table, and a module may not borrow another module's ``_private`` names.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT

WEBHOOK = ROOT / "webhook"
SOURCES = sorted(WEBHOOK.rglob("*.py"))

#: folder -> the folders of ours it may import (lowest first). A folder always imports itself.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "objects": (),
    "gates": ("objects",),
    "devices": ("objects",),
    "policy": ("objects", "gates"),
    "rules": ("objects", "gates", "devices", "policy"),
    "admission": ("objects", "gates", "devices", "policy", "rules"),
    "compile": ("objects", "gates", "devices", "policy", "rules"),
    "offline": ("objects", "gates", "devices", "policy", "rules", "admission"),
    "convert": ("objects", "gates", "devices", "policy", "rules", "admission", "offline"),
    "cluster": ("objects", "gates", "devices", "policy", "rules"),
    "fleet": ("objects", "gates", "devices", "policy", "rules", "cluster"),
    "serve": ("objects", "gates", "devices", "policy", "rules", "admission", "compile", "cluster", "fleet"),
    "commands": ("objects", "gates", "devices", "policy", "rules", "admission", "compile", "offline", "convert",
                 "cluster", "fleet", "serve"),
}

#: The modules at the top of ``webhook/``: entry points only, and what each may import.
ENTRY_POINTS: dict[str, tuple[str, ...]] = {"webhook": (), "webhook.__main__": ("cli",), "webhook.cli": ("commands",)}

#: Third-party packages only one folder may import.
OWNED: dict[str, str] = {"kubernetes": "cluster", "flask": "serve", "werkzeug": "serve", "gunicorn": "serve"}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parent.parts)


def imports(tree: ast.AST, package: str) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for each module an ``import`` or ``from ... import`` anywhere in the tree names; a
    relative import is resolved against ``package``, and ``from a import b`` names both ``a`` and ``a.b``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _folder(module: str) -> str | None:
    """The folder of ``webhook.<folder>.…``; None for a module at the top (an entry point) or not ours."""
    parts = module.split(".")
    if parts[0] != "webhook" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in MAY_IMPORT else None


def violations(source: str, module: str, package: str) -> list[str]:
    """``line: what`` for each import ``module`` (at ``package``) may not make under the table."""
    own = _folder(module)
    if own is None and module not in ENTRY_POINTS:
        return [f"1: {module} is a module at the top of webhook/ that is no entry point; give it a folder"]
    allowed = set(MAY_IMPORT[own]) | {own} if own else set(ENTRY_POINTS[module])
    found: dict[tuple[int, str], str] = {}  # one finding per line and folder or package imported
    for line, name in imports(ast.parse(source), package):
        top = name.split(".")[0]
        if top in OWNED and OWNED[top] != own:
            found.setdefault((line, top), f"{line}: imports {name}; only webhook/{OWNED[top]}/ may")
            continue
        if top != "webhook" or name == "webhook":
            continue
        target = name.split(".")[1]
        if target in allowed:
            continue
        if target in MAY_IMPORT or f"webhook.{target}" in ENTRY_POINTS:
            found.setdefault((line, target),
                             f"{line}: imports {name}; webhook/{own or module}/ may import {sorted(allowed) or 'none'}")
    return [found[k] for k in sorted(found)]


def test_every_import_follows_the_table():
    found = [f"{p.relative_to(ROOT)}:{v}" for p in SOURCES
             for v in violations(p.read_text(encoding="utf-8"), _module(p), _package(p))]
    assert not found, "imports the table (tests/meta/test_module_boundaries.py MAY_IMPORT) does not allow:\n" + \
        "\n".join(found)


def test_the_table_has_no_cycle_and_names_every_folder():
    """The table itself is layered (so no import cycle between folders can pass it) and covers the tree."""
    order: list[str] = []
    for folder in MAY_IMPORT:  # listed lowest first: each imports only folders listed before it
        assert set(MAY_IMPORT[folder]) <= set(order), f"{folder} may import a folder listed after it"
        order.append(folder)
    folders = {p.name for p in WEBHOOK.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(MAY_IMPORT)
    top = {_module(p) for p in WEBHOOK.glob("*.py")}
    assert top == set(ENTRY_POINTS) and len(top) <= 6


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (module -> modules it imports), as the path round it; [] when there is none."""
    seen: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> list[str]:
        seen[m] = 1
        for d in sorted(graph.get(m, ())):
            if seen.get(d) == 1:  # back to a module on the path
                return [*path[path.index(d):], d]
            if d not in seen and (cycle := visit(d, [*path, d])):
                return cycle
        seen[m] = 2
        return []

    for m in sorted(graph):
        if m not in seen and (cycle := visit(m, [m])):
            return cycle
    return []


def test_no_import_cycle_between_modules():
    """Within a folder too: module A importing B that imports A (at any depth) is a cycle."""
    graph = {_module(p): {m for _, m in imports(ast.parse(p.read_text(encoding="utf-8")), _package(p))}
             for p in SOURCES}
    # Importing a.b.c runs the packages a and a.b first: that is no edge of a cycle.
    graph = {m: {d for d in deps if d in graph and d != m and not m.startswith(f"{d}.")} for m, deps in graph.items()}
    cycle = find_cycle(graph)
    assert not cycle, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"x": {"y"}, "y": {"z"}, "z": {"y"}}, ["y", "z", "y"]),
])
def test_the_cycle_check_finds_a_cycle_at_any_depth(graph, expected):
    assert find_cycle(graph) == expected


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_each_folder_readme_says_what_it_may_import(folder):
    """The README's "May import:" line names exactly the table's folders (3-6 lines besides it)."""
    text = (WEBHOOK / folder / "README.md").read_text(encoding="utf-8")
    line = re.search(r"^May import: (.*)\.$", text, re.MULTILINE)
    assert line, f"webhook/{folder}/README.md has no 'May import: ...' line"
    named = tuple(re.findall(r"`(\w+)`", line.group(1)))
    assert named == MAY_IMPORT[folder], f"webhook/{folder}/README.md says {named}, the table {MAY_IMPORT[folder]}"


@pytest.mark.parametrize(("module", "source", "expected"), [
    ("webhook.objects.pods", "from webhook.policy.model import Action\n", ["1: imports webhook.policy.model"]),
    ("webhook.policy.model", "def f():\n    from webhook.rules import ids\n", ["2: imports webhook.rules"]),
    ("webhook.policy.model", "if TYPE_CHECKING:\n    from ..rules.base import Rule\n", ["2: imports webhook.rules"]),
    ("webhook.rules.pods", "import kubernetes.client as k\n", ["1: imports kubernetes.client; only"]),
    ("webhook.fleet.report", "from flask import Flask\n", ["1: imports flask; only webhook/serve/"]),
    ("webhook.cluster.api", "from kubernetes import client\nfrom webhook.rules.view import Lookup\n", []),
    ("webhook.commands.check", "from webhook.serve import certs\nfrom webhook.cli import main\n",
     ["2: imports webhook.cli"]),
    ("webhook.helpers", "import json\n", ["1: webhook.helpers is a module at the top"]),
    ("webhook.cli", "from webhook.commands import check\n", []),
])
def test_the_check_catches_each_form(module, source, expected):
    found = violations(source, module, module.rpartition(".")[0])
    assert len(found) == len(expected) and all(f.startswith(e) for f, e in zip(found, expected, strict=True)), found


# -- no borrowed private names ------------------------------------------------------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(source: str) -> list[str]:
    """``line: name`` for each private name taken from a webhook module: imported, or read off an imported module."""
    tree = ast.parse(source)
    found: list[str] = []
    modules: set[str] = set()  # local names bound to webhook modules
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("webhook"):
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: {node.module}.{alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("webhook."):
                    if any(_private(part) for part in alias.name.split(".")):
                        found.append(f"{node.lineno}: {alias.name}")
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                and node.value.id in modules):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    found = [f"{p.relative_to(ROOT)}:{use}" for p in SOURCES for use in private_uses(p.read_text(encoding="utf-8"))]
    assert not found, "private names used across modules (move them to a shared module):\n" + "\n".join(found)


@pytest.mark.parametrize(("source", "expected"), [
    ("from webhook.commands.check import _read\n", ["1: webhook.commands.check._read"]),
    ("def f():\n    from webhook.offline.inputs import item_from, _read as read\n",
     ["2: webhook.offline.inputs._read"]),
    ("from webhook.commands import check\ncheck._describe(1)\n", ["2: check._describe"]),
    ("import webhook.offline.inputs as inputs\ninputs._read(1)\n", ["2: inputs._read"]),
    ("from webhook.objects.jsonish import as_dict as _d\nimport argparse\nx: argparse._SubParsersAction\n", []),
])
def test_the_private_check_catches_each_form(source, expected):
    assert private_uses(source) == expected
