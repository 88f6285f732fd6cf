"""No function in webhook/ is a knot (issue #16 item 5, DEVELOPERS.md: Style).

Cyclomatic complexity as ``radon cc`` counts it (one per function, plus one per branch, loop, boolean
operator, comprehension condition and ``except``), for every function, method and closure. Above 20 a
function has too many paths to test or read; split it into named steps instead of raising the limit.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from radon.complexity import add_inner_blocks, cc_visit
from radon.visitors import Function

from tests.helpers import ROOT

LIMIT = 20
SOURCES = sorted((ROOT / "webhook").rglob("*.py"))


def _functions(path: Path) -> list[Function]:
    blocks = add_inner_blocks(cc_visit(path.read_text(encoding="utf-8")))
    return [b for b in blocks if isinstance(b, Function)]


def knots(paths: list[Path], limit: int = LIMIT) -> list[str]:
    """``file:line name (complexity)`` for each function above ``limit``."""
    out = []
    for path in paths:
        for fn in _functions(path):
            if fn.complexity > limit:
                out.append(f"{path.relative_to(ROOT)}:{fn.lineno} {fn.fullname} ({fn.complexity})")
    return sorted(out)


def test_sources_found():
    assert len(SOURCES) > 40, SOURCES


def test_no_function_above_the_limit():
    found = knots(SOURCES)
    assert not found, f"cyclomatic complexity above {LIMIT} (split into named steps):\n" + "\n".join(found)


KNOT = "def knot(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n" for i in range(LIMIT)) + "    return -1\n"


@pytest.mark.parametrize(("source", "expected"), [
    (KNOT, LIMIT + 1),
    ("class C:\n    def m(self, x):\n" + "".join(f"        if x > {i} and x < {i + 9}:\n            x += 1\n"
                                           for i in range(10)) + "        return x\n", 21),
    ("def outer(x):\n    def inner(y):\n" + "".join(f"        y = y if y != {i} else 0\n" for i in range(21))
     + "        return y\n    return inner(x)\n", 22),
])
def test_the_count_catches_functions_methods_and_closures(tmp_path, source, expected):
    """The check itself must fail on a knot wherever it hides (a method, a closure)."""
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    found = [f for f in _functions(probe) if f.complexity > LIMIT]
    assert [f.complexity for f in found] == [expected], [(f.fullname, f.complexity) for f in found]
