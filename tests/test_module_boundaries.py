"""Module boundaries of webhook/ (issue #16 item 5): a leaf gate catalogue, no borrowed private functions.

The feature-gate catalogue is data the policy package needs (gate defaults per Kubernetes version) and the
``gated-feature`` rule uses; it imports nothing from webhook, so neither side reaches into the other. A
module that needs another module's ``_private`` helper shows the helper belongs in a shared module.
Checked on the source (AST), so an import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers import ROOT

WEBHOOK = ROOT / "webhook"
SOURCES = sorted(WEBHOOK.rglob("*.py"))


def _package(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parent.parts)


def _imported_modules(tree: ast.AST, package: str) -> set[str]:
    """Every module an ``import`` or ``from ... import`` anywhere in the tree names (relative ones resolved)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from webhook.rules import gates`
    return out


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


def _webhook_imports(name: str) -> set[str]:
    path = WEBHOOK / f"{name}.py"
    imported = _imported_modules(ast.parse(path.read_text(encoding="utf-8")), "webhook")
    return {m for m in imported if m == "webhook" or m.startswith("webhook.")}


_LEAVES = ("webhook.jsonish", "webhook.objects", "webhook.gate_deps", "webhook.gate_fields", "webhook.quantity")


def test_gate_catalogue_is_a_leaf():
    """The catalogue may use the raw-JSON helpers and the pod-template finders (whose only import of ours is
    jsonish and quantity) and nothing else of ours: the policy package and every rule can import it."""
    assert not _webhook_imports("jsonish")
    assert not _webhook_imports("gate_deps")
    assert not _webhook_imports("quantity")
    assert all(m.startswith(("webhook.jsonish", "webhook.quantity")) for m in _webhook_imports("objects"))
    assert all(m.startswith(("webhook.jsonish", "webhook.objects", "webhook.quantity"))
               for m in _webhook_imports("gate_fields"))
    assert not {m for m in _webhook_imports("gate_catalogue") if not m.startswith(_LEAVES)}


@pytest.mark.parametrize("path", sorted((WEBHOOK / "policy").glob("*.py")), ids=lambda p: p.name)
def test_policy_package_does_not_reach_into_the_rules(path):
    """The policy package resolves gates through the catalogue, never through the gated-feature rule."""
    imported = _imported_modules(ast.parse(path.read_text(encoding="utf-8")), _package(path))
    assert "webhook.rules.gates" not in imported


def test_no_module_uses_another_modules_private_names():
    found = [f"{p.relative_to(ROOT)}:{use}" for p in SOURCES for use in private_uses(p.read_text(encoding="utf-8"))]
    assert not found, "private names used across modules (move them to a shared module):\n" + "\n".join(found)


@pytest.mark.parametrize(("source", "expected"), [
    ("from webhook.commands.check import _read\n", ["1: webhook.commands.check._read"]),
    ("def f():\n    from webhook.inputs import item_from, _read as read\n", ["2: webhook.inputs._read"]),
    ("from webhook.commands import check\ncheck._describe(1)\n", ["2: check._describe"]),
    ("import webhook.inputs as inputs\ninputs._read(1)\n", ["2: inputs._read"]),
    ("from webhook.jsonish import as_dict as _d\nimport argparse\nx: argparse._SubParsersAction\n", []),
])
def test_the_private_check_catches_each_form(source, expected):
    assert private_uses(source) == expected


def test_the_import_check_sees_lazy_and_relative_imports():
    tree = ast.parse("def f():\n    from webhook.rules.gates import known_in\nfrom .. import rules\n")
    imported = _imported_modules(tree, "webhook.policy")
    assert "webhook.rules.gates" in imported
    assert "webhook.rules" in imported



#: The modules that may import the ``kubernetes`` client: the API calls, the watch loop and the live view.
KUBERNETES_MODULES = frozenset({"webhook.kube_api", "webhook.informer", "webhook.live_view", "webhook.kube_lists",
                                "webhook.leader", "webhook.kube_apply"})


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_kubernetes(source: str, package: str) -> bool:
    """Whether the source imports ``kubernetes`` or one of its submodules, anywhere (lazy imports count)."""
    return any(m == "kubernetes" or m.startswith("kubernetes.") for m in _imported_modules(ast.parse(source), package))


def test_only_the_cluster_access_modules_import_kubernetes():
    """Rules, the engine and the commands reach the cluster through a ClusterView or ``webhook.kube_api``."""
    found = [_module(p) for p in SOURCES
             if imports_kubernetes(p.read_text(encoding="utf-8"), _package(p)) and _module(p) not in KUBERNETES_MODULES]
    allowed = ", ".join(sorted(KUBERNETES_MODULES))
    assert not found, (f"{', '.join(found)} import(s) the kubernetes client; only {allowed} may: "
                       "call webhook.kube_api, or read the cluster through a ClusterView")
    assert {_module(p) for p in SOURCES} >= KUBERNETES_MODULES  # the allow-list names modules that exist


@pytest.mark.parametrize(("source", "expected"), [
    ("def f():\n    from kubernetes.client import CoreV1Api\n", True),
    ("from kubernetes import watch\n", True),
    ("import kubernetes.client as k\n", True),
    ("import kubernetes_validate\nfrom webhook.kube_api import connect\n", False),
])
def test_the_kubernetes_check_sees_each_import_form(source, expected):
    assert imports_kubernetes(source, "webhook.rules") is expected
