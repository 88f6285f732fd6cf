"""webhook.objects.quantity against upstream's own cases (apimachinery pkg/api/resource/quantity_test.go:
TestQuantityParse, TestParseQuantityString, TestJSONWhitespace), plus the inputs the three former parsers
disagreed on."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from webhook.devices import selectors as cel_devices
from webhook.gates.fields import is_fractional
from webhook.objects import pods as objects
from webhook.objects.quantity import MAX_ALLOWED, QuantityError, from_json, parse_quantity

D = Decimal
# (input, exact value after upstream's rounding and capping); TestQuantityParse's table.
ACCEPTED = [
    ("0", D(0)), ("0n", D(0)), ("0Ki", D(0)), ("0T", D(0)), ("1", D(1)),
    ("1Ki", D(1024)), ("7Mi", D(7 * 2**20)), ("5Ti", D(5 * 2**40)), ("3Ei", D(3 * 2**60)),
    ("5n", D("5e-9")), ("4u", D("4e-6")), ("3m", D("0.003")), ("8k", D(8000)), ("50k", D(50000)),
    ("7M", D("7e6")), ("6G", D("6e9")), ("40T", D("4e13")), ("2P", D("2e15")), ("1E", D("1e18")),
    ("1E-3", D("0.001")), ("1e3", D(1000)), ("1E18", D("1e18")), ("1e14", D("1e14")),
    ("100.035k", D(100035)), ("0.0005k", D("0.5")), ("0.5e-2", D("0.005")), ("10.035M", D(10035000)),
    ("1.3E+6", D(1300000)), ("1.7E18", D("1.7e18")), ("8.1k", D(8100)), ("1.01E", D("1.01e18")),
    # rounding: away from zero to a whole nano
    ("3.001n", D("4e-9")), ("1.1E-9", D("2e-9")), ("0.0000000001", D("1e-9")), ("0.9n", D("1e-9")),
    ("0.00000012345", D("1.24e-7")),
    # binary values are capped at 2^63-1, decimal ones are not
    ("9Ei", MAX_ALLOWED), ("9223372036854775807Ki", MAX_ALLOWED), ("12E", D("1.2e19")),
    ("100.035Ki", D("102435.84")), ("0.5Mi", D(2**19)), ("0.025Ti", D("27487790694.4")),
    # "things written by trolls"
    ("0.000000000001Ki", D("2e-9")), (".001", D("0.001")), (".0001k", D("0.1")), ("1.", D(1)), ("1.G", D("1e9")),
    # the scanner's leniencies (TestParseQuantityString accepts "." and "-.")
    (".", D(0)), ("-.", D(0)), ("+", D(0)), ("-1.025Ti", D("-1.025") * 2**40), ("+1Ki", D(1024)),
]
# TestQuantityParse's invalid list, then what the former parsers let through or disagreed on.
REJECTED = [
    "", "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", " 1", "1 ",
    "1_000", "1e3m", "1e", "1K", "1k3", "12 Gi", "1KiB", "nan", "inf", "Infinity", "0x10", "1,5", "٣",
]


@pytest.mark.parametrize(("text", "want"), ACCEPTED, ids=[t for t, _ in ACCEPTED])
def test_upstream_accepted(text: str, want: Decimal) -> None:
    assert parse_quantity(text) == want
    if want and not text.startswith("-"):
        assert parse_quantity("-" + text.lstrip("+")) == -want


@pytest.mark.parametrize("text", REJECTED)
def test_upstream_rejected(text: str) -> None:
    with pytest.raises(QuantityError, match="is not a quantity"):
        parse_quantity(text)


def test_errors_say_what_upstream_says() -> None:
    with pytest.raises(QuantityError, match=r"must match the regular expression"):
        parse_quantity("1_000")
    with pytest.raises(QuantityError, match=r"unable to parse quantity's suffix 'K'"):
        parse_quantity("1K")


@pytest.mark.parametrize(("value", "want"), [
    (" 1", D(1)), ("1 ", D(1)), (1, D(1)), (10, D(10)), (-1, D(-1)), (1.5, D("1.5")), (1e20, D("1e20")),
])  # TestJSONWhitespace: the JSON decoder trims and takes numbers
def test_json_values(value: Any, want: Decimal) -> None:
    assert from_json(value) == want


def test_json_null_is_the_zero_quantity() -> None:
    """Issue 45 item 2: apimachinery ``Quantity.UnmarshalJSON`` reads the literal ``null`` as zero (a YAML ``~`` or an
    empty value), so a Pod with ``nvidia.com/gpu: null`` asks for nothing, as the API server stores it."""
    assert from_json(None) == 0
    assert objects.container_extended({"resources": {"limits": {"nvidia.com/gpu": None}}}) == {"nvidia.com/gpu": 0}


@pytest.mark.parametrize("value", [True, [], {}, float("nan"), float("inf"), "1_000", "", "$GPU_PER_NODE"])
def test_json_rejects(value: Any) -> None:
    with pytest.raises(QuantityError):
        from_json(value)


@pytest.mark.parametrize("text", ["1_000", "1e3m", " 2", "1e3", "1.5Gi", "500m"])
def test_every_caller_agrees(text: str) -> None:
    """The three places that once had a parser each now give one answer."""
    try:
        want: Decimal | None = from_json(text)
    except QuantityError:
        want = None
    for parse in (objects.parse_quantity, lambda t: cel_devices.parse_quantity(t.strip())):
        if want is None:
            with pytest.raises(ValueError):
                parse(text)
        else:
            assert parse(text) == want
    assert is_fractional(text) is (want is not None and want != want.to_integral_value())


def test_device_count_of_an_absurd_quantity_is_cheap() -> None:
    assert objects.device_count("1e999999999") == int(MAX_ALLOWED)


def test_remembered_quantities_answer_as_parsed_and_refusals_stay_refusals() -> None:
    """Short quantities are remembered per process (the handler's one parse per value): asking again gives the same
    value, a refused one is refused every time, and a long one (not remembered) parses as a short one would."""
    assert parse_quantity("2Gi") == parse_quantity("2Gi") == Decimal(2 * 2**30)
    for _ in range(2):
        with pytest.raises(QuantityError, match="must match"):
            parse_quantity("$GPUS")
    assert parse_quantity("0" * 40 + "1500m") == parse_quantity("1500m") == Decimal("1.5")
