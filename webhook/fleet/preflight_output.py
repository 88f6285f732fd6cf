"""``preflight``'s table written line by line as it is produced (issue 29), so no second copy of the answer
(every row as a list of strings, then the whole text) exists beside the result; the JSON document does the same
with ``Preflight.to_json(lazy=True)`` and ``webhook.commands.write_json``. The text is the same, byte for byte,
as ``render_text``'s whole string; tests/fleet/test_preflight_output.py checks both forms on a fleet."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from webhook.fleet.preflight import Preflight
from webhook.gates.fixes import AFFECTED, FIXED

_YES_NO = {True: "yes", False: "no", None: "?"}


def _table(headers: list[str], rows: Callable[[], Iterator[list[str]]]) -> Iterator[str]:
    """``webhook.fleet.report.table``'s layout, line by line: ``rows()`` is read twice (widths, then lines) rather
    than kept."""
    widths = [len(h) for h in headers]
    for row in rows():
        widths = [max(w, len(v)) for w, v in zip(widths, row, strict=True)]
    for row in _with_head(headers, rows):
        yield "   ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n"


def _with_head(headers: list[str], rows: Callable[[], Iterator[list[str]]]) -> Iterator[list[str]]:
    yield headers
    yield from rows()


def text_lines(result: Preflight) -> Iterator[str]:
    """The table output, each line with its newline."""
    sel = selection_text(result)
    yield f"Taint {result.taint.describe()} on {sel}\n"
    yield "\n"
    if result.pods:
        yield from _table(["NAMESPACE", "POD", "TRAINING", "OUTCOME", "CLAIMS", "DEVICES"], lambda: (
            [p.namespace, p.name, _YES_NO[p.training], p.eviction.describe(), ",".join(p.claims),
             ",".join(p.devices)] for p in result.pods))
    else:
        yield "No Pods use the selected devices.\n"
    if any(not c.pods for c in result.claims):
        yield "\n"
        yield "ALLOCATED CLAIMS WITHOUT A POD\n"
        yield from _table(["NAMESPACE", "CLAIM", "DEVICES"], lambda: (
            [c.namespace, c.name, ",".join(c.devices)] for c in result.claims if not c.pods))
    yield "\n"
    yield result.summary() + "\n"
    for note in result.notes:
        yield f"note: {note}\n"
    if result.blocked:
        names = ", ".join(f"{p.namespace}/{p.name}" for p in result.training_evicted_at_once)
        yield (f"BLOCKED: training job(s) {names} would be evicted at once; give their claims a NoExecute "
               f"toleration for {result.taint.key} with tolerationSeconds (policy trainingJobs.deviceTolerations), "
               "or drain them first\n")


def selection_text(result: Preflight) -> str:
    """What the rule selects, in words. No deviceSelector: no device for the eviction controller, every device
    for kube-scheduler on a version with kubernetes#141620 (the note says which)."""
    if result.selector is not None:
        return result.selector.describe()
    omitted = result.omitted
    if omitted is None or omitted.state == FIXED:
        return "no devices (no deviceSelector)"
    maybe = "" if omitted.state == AFFECTED else "possibly "
    return f"no devices to evict, but {maybe}every device for kube-scheduler's allocation (no deviceSelector)"


def render_text(result: Preflight) -> str:
    """The table output as one string (``text_lines`` writes it line by line)."""
    return "".join(text_lines(result))
