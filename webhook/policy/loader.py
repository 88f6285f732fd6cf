"""Read MigrationPolicy files and report every mistake as ``file:line: key.path: message``.

Policy files are edited by people, so an error must point at the line to fix and say what is wrong
in the file's own words (YAML keys, not Python names). This module finds the files and the one
MigrationPolicy among their documents; ``yaml_lines`` keeps each key's line, ``validation_errors`` puts the
model's complaints in the file's words, and ``compile_policy``'s errors are mapped back to the same lines.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from webhook.gates.catalogue import effective_gates
from webhook.policy.compiled import CompiledPolicy, CompileError, compile_policy
from webhook.policy.model import MigrationPolicy
from webhook.policy.validation_errors import describe, refine_loc, suggest, unwrap_optional, validation_problems
from webhook.policy.yaml_lines import Document, Loc, Problem, loc_path, parse_documents

if TYPE_CHECKING:
    from webhook.policy.lint_checks import Since

# Names other modules (webhook/offline/suites.py, commands, tests) import from here; they live in yaml_lines and
# validation_errors since the split (issue #26 item 2).
__all__ = [
    "API_VERSION", "KIND", "SUFFIXES", "Document", "LintReport", "Loc", "PolicyError", "Problem", "lint",
    "lint_report", "load", "loc_path", "parse_documents", "policy_files", "refine_loc", "unwrap_optional",
]

API_VERSION = "dra-migration.io/v1alpha1"
KIND = "MigrationPolicy"
SUFFIXES = (".yaml", ".yml")


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


# ---------------------------------------------------------------------------------------------- load


@dataclass
class _Result:
    policy: CompiledPolicy | None
    problems: list[Problem]
    doc: Document | None
    files: tuple[str, ...]


def _not_a_policy(doc: Document) -> Problem | None:
    data = doc.data
    if not isinstance(data, dict):
        return Problem(doc.file, doc.line, "", f"a document must be a {KIND} mapping, got {describe(data)}")
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
        f"{describe(kind)} (apiVersion {data.get('apiVersion')!r}) is not a {KIND}; a policy directory "
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
            problems += validation_problems(doc, exc)

    policy = None
    if not problems:
        doc = candidates[0]
        try:
            policy = compile_policy(models[0], b"".join(raws), tuple(shown))
        except CompileError as exc:
            loc = tuple(exc.path)
            hint = ""
            if exc.message.startswith("unknown feature gate") and loc:
                hint = suggest(loc[-1], effective_gates("1.37", {}))
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
    namespaces: Iterable[tuple[str, Mapping[str, str]]] | None = None,
    since: Since | None = None,
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
            result.policy, result.doc.file, result.doc.line_of, today, device_classes, cluster_gates, namespaces, since
        ):
            warnings.append(Problem(file, line, loc_path(loc), message))
    return LintReport(result.policy, result.problems, warnings)


def lint(path: str | Path) -> list[Problem]:
    """Every error that would stop the policy at ``path`` from loading; empty = it loads."""
    return _read(path).problems
