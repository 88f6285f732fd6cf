"""Dates and times given by people (``--at``, ``--today``, test suites' ``at``): the one parser.

A date (``YYYY-MM-DD``) is midnight UTC; an ISO time may end in ``Z``; a time without a zone is UTC,
because policies schedule stages by UTC dates (``CompiledCohort.stage_on``).
"""

from __future__ import annotations

import argparse
import datetime as dt


def parse_time(value: str) -> dt.datetime:
    """A date or ISO time as an aware datetime; ValueError naming the value otherwise."""
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        raise ValueError(f"{value!r} is not a date (YYYY-MM-DD) or ISO time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def parse_date(value: str) -> dt.date:
    """A calendar date, ``YYYY-MM-DD``; ValueError naming the value otherwise."""
    try:
        return dt.date.fromisoformat(value)
    except (ValueError, TypeError):
        raise ValueError(f"{value!r} is not a date (YYYY-MM-DD)") from None


def date_arg(value: str) -> dt.date:
    """``parse_date`` for an argparse ``type=``: its error becomes the usage message."""
    try:
        return parse_date(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
