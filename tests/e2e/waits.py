"""Waiting with a deadline: poll a condition until it holds, never sleep-then-assert."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimedOut(AssertionError):
    """The condition did not hold before the deadline; the message says what was awaited and the last state."""


def eventually(probe: Callable[[], T], what: str, timeout: float = 30.0, interval: float = 0.1,
               alive: Callable[[], str | None] | None = None) -> T:
    """Call ``probe`` until it returns a truthy value (returned) or the deadline passes (TimedOut).

    Exceptions from ``probe`` count as "not yet" and the last one is reported. ``alive`` may return a
    reason to give up at once (a process that exited), so a dead server fails fast with its own story.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if alive is not None:
            reason = alive()
            if reason:
                raise TimedOut(f"gave up waiting for {what}: {reason}")
        try:
            value = probe()
            if value:
                return value
            last = value
        except Exception as exc:  # noqa: BLE001 - "not yet", reported if it never clears
            last = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise TimedOut(f"{what}: not within {timeout:g} s (last: {str(last)[:1500]})")
        time.sleep(interval)


def never(probe: Callable[[], object], what: str, during: float, interval: float = 0.2) -> None:
    """Assert ``probe`` stays falsy for ``during`` seconds (for "the controller does NOT do X")."""
    deadline = time.monotonic() + during
    while time.monotonic() < deadline:
        value = probe()
        assert not value, f"{what}: happened ({str(value)[:1500]})"
        time.sleep(interval)
