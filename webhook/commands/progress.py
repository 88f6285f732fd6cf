"""Progress of long reads and writes on stderr, kubectl-style: only for a person at a terminal.

``report``, ``preflight`` and PolicyReport writes take tens of seconds at fleet scale. On a terminal one
line on stderr, redrawn in place, says what is being read, how many objects so far, the rate, and what is
left when the API server says (``remainingItemCount``); it is erased when the work ends, so stdout and the
final stderr lines read as without it. Piped stderr, ``-q`` and machine-readable output (json, yaml,
policyreport) draw nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

_ERASE = "\r\x1b[K"  # carriage return, erase to the end of the line


class Progress:
    """One self-overwriting status line; every method does nothing when not ``enabled``."""

    def __init__(self, out: TextIO, enabled: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out
        self.enabled = enabled
        self.clock = clock
        self._what = ""
        self._since = self._started = clock()
        self._drawn = False

    @classmethod
    def for_command(cls, quiet: bool, machine_output: bool, out: TextIO | None = None) -> Progress:
        """Enabled when ``out`` (stderr) is a terminal, unless ``-q`` or the output is for programs."""
        stream = sys.stderr if out is None else out
        return cls(stream, not quiet and not machine_output and stream.isatty())

    def page(self, resource: str, read: int, remaining: int | None) -> None:
        """A page of ``resource`` arrived (``kube_lists.OnPage``)."""
        self._show(f"reading {resource}", read, None if remaining is None else read + remaining, "read")

    def wrote(self, what: str, done: int, total: int) -> None:
        """``done`` of ``total`` objects written."""
        self._show(f"writing {what}", done, total, "written")

    def _show(self, what: str, done: int, total: int | None, verb: str) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if what != self._what:  # a new list or write: its rate counts from the end of the previous one
            self._what, self._started = what, self._since
        self._since = now
        elapsed = now - self._started
        text = f"{what}: {done:,}" + (f"/{total:,}" if total is not None else "") + f" {verb}"
        if elapsed > 0:
            rate = done / elapsed
            text += f", {rate:,.0f}/s"
            if total is not None and total > done and rate > 0:
                text += f", about {_duration((total - done) / rate)} left"
        self.out.write(_ERASE + text)
        self.out.flush()
        self._drawn = True

    def done(self) -> None:
        """Erase the line (the work ended, or failed and is about to say why)."""
        if self._drawn:
            self.out.write(_ERASE)
            self.out.flush()
            self._drawn = False


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(round(seconds), 1)} s"
    return f"{int(seconds // 60)} min {round(seconds % 60):02d} s"
