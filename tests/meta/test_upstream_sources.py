"""docs/upstream-sources.md has one row per rule id of the standard rule set, and names only real rules."""

from __future__ import annotations

import re

from tests.helpers import ROOT
from webhook.rules.ruleset import standard_rules

DOC = ROOT / "docs" / "upstream-sources.md"


def _rows() -> list[str]:
    table = DOC.read_text().split("| rule |", 1)[1].split("\n\n", 1)[0]
    return [m.group(1) for m in re.finditer(r"^\| `([a-z0-9-]+)` \|", table, re.MULTILINE)]


def test_every_rule_has_one_row_naming_an_upstream_file() -> None:
    ids = {r.id for r in standard_rules().rules}
    rows = _rows()
    assert sorted(rows) == sorted(ids), f"missing: {ids - set(rows)}; unknown: {set(rows) - ids}"
    assert len(rows) == len(set(rows))
    for line in DOC.read_text().splitlines():
        if line.startswith("| `") and line.split("`")[1] in ids:
            assert re.search(r"`(pkg|staging|cmd)/[\w/.-]+\.go`", line), line
