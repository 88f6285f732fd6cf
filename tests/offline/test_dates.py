"""webhook.offline.dates: the one parser for dates and times people type (--at, --today, suites' at)."""

from __future__ import annotations

import argparse
import datetime as dt

import pytest

from webhook.commands import lint, report
from webhook.offline import dates, inputs, suites

UTC = dt.UTC


@pytest.mark.parametrize(("text", "want"), [
    ("2027-02-01", dt.datetime(2027, 2, 1, tzinfo=UTC)),
    ("2027-02-01T10:30:00Z", dt.datetime(2027, 2, 1, 10, 30, tzinfo=UTC)),
    ("2027-02-01T10:30:00", dt.datetime(2027, 2, 1, 10, 30, tzinfo=UTC)),  # naive is UTC
    ("2027-02-01T12:30:00+02:00", dt.datetime(2027, 2, 1, 10, 30, tzinfo=UTC)),
])
def test_parse_time(text: str, want: dt.datetime) -> None:
    assert dates.parse_time(text) == want
    assert suites.parse_time(text) == want and inputs.parse_at(text) == want  # the callers agree


@pytest.mark.parametrize("text", ["", "tomorrow", "2027-13-01", "2027-02-30", "01.02.2027"])
def test_bad_times_name_the_value(text: str) -> None:
    with pytest.raises(ValueError, match=f"{text!r} is not a date"):
        dates.parse_time(text)


def test_dates_for_the_command_line() -> None:
    assert dates.parse_date("2027-02-01") == dt.date(2027, 2, 1)
    for arg in (dates.date_arg, lint._date, report._date):
        assert arg("2027-02-01") == dt.date(2027, 2, 1)
        with pytest.raises(argparse.ArgumentTypeError, match="'2027-02-30' is not a date"):
            arg("2027-02-30")
