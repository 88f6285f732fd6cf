"""The repository explains itself: every document the code, tests, benchmarks and README cite is in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

#: Where citations live: the package, its tests and test data (not the upstream objects, which name paths
#: in their own repositories), benchmarks, the README, the CI script.
CITING = [*sorted((ROOT / "webhook").rglob("*.py")), *sorted((ROOT / "tests").rglob("*.py")),
          *sorted(p for p in (ROOT / "tests" / "data").rglob("*.yaml") if "upstream" not in p.parts),
          *sorted((ROOT / "bench").rglob("*.py")),
          *sorted((ROOT / "bench").glob("*.md")), ROOT / "README.md", *sorted((ROOT / ".ci").glob("*"))]
#: The documents the project started from; once outside the repository (a shared folder), now in docs/.
DOCUMENTS = ("design.md", "dra-1.37.md", "webhook-conventions.md")
_DOCS_PATH = re.compile(r"(?<![\w./-])docs/[\w./-]*[\w/]")
_BARE = re.compile(r"(?<![\w./-])(?:\.\./shared/|shared/)?(" + "|".join(map(re.escape, DOCUMENTS)) + r")")


def _texts() -> list[tuple[Path, str]]:
    return [(p, p.read_text(errors="replace")) for p in CITING if p.is_file() and p != Path(__file__)]


def _cited() -> list[tuple[str, str]]:
    return [(f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}", m.group(0))
            for p, text in _texts() for m in _DOCS_PATH.finditer(text)]


@pytest.mark.parametrize("doc", DOCUMENTS)
def test_the_founding_documents_are_in_docs(doc: str) -> None:
    text = (ROOT / "docs" / doc).read_text()
    assert text.startswith("# ") and "**Status of this copy.**" in text.split("\n## ")[0], (
        f"docs/{doc} must open with its title and the header that says which parts later issues superseded")


def test_every_cited_docs_path_exists() -> None:
    cited = _cited()
    assert len({path for _, path in cited}) >= len(DOCUMENTS), cited  # the scan finds the citations at all
    missing = [f"{where}: {path}" for where, path in cited if not (ROOT / path).exists()]
    assert missing == [], "cited but not in the repository:\n" + "\n".join(missing)


def test_documents_are_cited_by_their_path_in_the_repository() -> None:
    """``design.md §5`` alone sends a reader looking; ``docs/design.md §5`` does not."""
    bare = [f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for p, text in _texts() for m in _BARE.finditer(text)]
    assert bare == [], "cite these as docs/<file>:\n" + "\n".join(bare)


#: Where the code's own files are named for people: the README, docs, deploy/ comments, the benchmarks' notes.
NAMING = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md")),
          *sorted((ROOT / "webhook").rglob("README.md")), *sorted((ROOT / "tests").rglob("README.md")),
          *sorted(p for p in (ROOT / "deploy").rglob("*") if p.suffix in (".yaml", ".md", ".txt", ".tpl")),
          *sorted((ROOT / "webhook").rglob("*.py")),
          *sorted(p for p in (ROOT / "tests").rglob("*.py") if "meta" not in p.parts)]  # meta: made-up names
_CODE_PATH = re.compile(r"(?<![\w./-])(?:webhook|tests)/[\w/]*\w\.py\b")


def test_every_named_source_file_exists() -> None:
    """After files move (issue 44), no page or comment sends a reader to a module that is not there."""
    named = [(f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}", m.group(0))
             for p in NAMING if p.is_file() for text in [p.read_text(errors="replace")]
             for m in _CODE_PATH.finditer(text)]
    assert len(named) > 100  # the scan finds the names at all
    missing = [f"{where}: {path}" for where, path in named if not (ROOT / path).exists()]
    assert missing == [], "named but not in the repository:\n" + "\n".join(missing)
