"""Kubernetes resource quantities, parsed exactly as the API server parses them: the one parser here.

Upstream (kubernetes/kubernetes, read on master after v1.36; unchanged in substance for years):
``staging/src/k8s.io/apimachinery/pkg/api/resource/quantity.go`` ``ParseQuantity`` and
``parseQuantityString`` (the scanner), ``Quantity.UnmarshalJSON`` (JSON numbers allowed, surrounding
whitespace trimmed, and the JSON literal ``null`` read as the zero quantity: kubernetes/apimachinery
``pkg/api/resource/quantity.go`` ``UnmarshalJSON``, read at 357557a6, "if l == 4 && bytes.Equal(value,
[]byte("null"))" sets the zero value, as ``UnmarshalCBOR`` does for a nil string) and ``suffix.go``
``suffixHandler.interpret``. Grammar from quantity.go's doc comment::

    <quantity>        ::= <signedNumber><suffix>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>

So ``1_000`` (no underscores), ``1e3m`` (an exponent is the whole suffix), ``1K``, ``12 Gi`` and ``1e``
are refused; the scanner's leniencies are kept (``1.``, ``.5``, ``1.G``; ``+``, ``-`` and ``.`` are 0).
Values come out as exact Decimals, rounded as upstream rounds them: away from zero to a whole nano
(``0.1n`` is ``1n``), and binary-suffixed values capped at 2^63-1.
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_UP, Context, Decimal
from functools import lru_cache
from typing import Any

#: quantity.go's own description of the format, quoted in its error (ErrFormatWrong).
SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_SCAN = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)")
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)  # scaling and rounding never lose digits
_NANO = Decimal("1e-9")
MAX_ALLOWED = Decimal(2**63 - 1)  # upstream's maxAllowed, the cap of binary-suffixed values


class QuantityError(ValueError):
    """Not a quantity; the message names the value and what upstream would say about it."""


def parse_quantity(text: str) -> Decimal:
    """``ParseQuantity(text)``: the exact value; QuantityError for what the API server refuses."""
    if not isinstance(text, str) or not text:
        raise QuantityError(f"{text!r} is not a quantity: an empty or non-string value")
    if len(text) <= _CACHED_LENGTH:
        return _parse_cached(text)
    return _parse(text)


_CACHED_LENGTH = 32
"""Quantities up to this length are remembered (``_parse_cached``): a review's ``"1"``, ``"500m"``, ``"2Gi"`` repeat
across containers, rules and requests, and a Decimal is immutable; longer ones (absurd, or an attack) are not kept."""


@lru_cache(maxsize=2048)
def _parse_cached(text: str) -> Decimal:
    """``_parse`` of a short quantity, remembered per process (bounded; a refused one raises again each time)."""
    return _parse(text)


def _parse(text: str) -> Decimal:
    m = _SCAN.fullmatch(text)
    if m is None:
        raise QuantityError(f"{text!r} is not a quantity: quantities must match the regular expression "
                            f"'{SPLIT_RE}'")
    sign, whole, frac, suffix = m.groups()
    number = Decimal(f"{sign}{whole or '0'}.{frac or '0'}")
    if suffix in _BINARY_SI:
        value = _round(_EXACT.multiply(number, Decimal(2 ** _BINARY_SI[suffix])))
        return MAX_ALLOWED.copy_sign(value) if abs(value) > MAX_ALLOWED else value
    return _round(number.scaleb(_exponent(text, suffix), _EXACT))


def from_json(value: Any) -> Decimal:
    """A quantity field as ``Quantity.UnmarshalJSON`` reads it: a string (whitespace trimmed), a number, or
    ``null`` (YAML ``~`` or an empty value), which is the zero quantity."""
    if value is None:
        return Decimal(0)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(f"{value!r} is not a quantity: a {type(value).__name__}, not a string or number")
    if isinstance(value, int):
        return Decimal(value)
    return parse_quantity(str(value).strip())  # a float prints as JSON would write it ("1.5", "1e+20")


def _exponent(text: str, suffix: str) -> int:
    if suffix in _DECIMAL_SI:
        return _DECIMAL_SI[suffix]
    digits = suffix[1:]
    if suffix[:1] in ("e", "E") and re.fullmatch(r"[+-]?[0-9]+", digits) and -(2**63) <= int(digits) < 2**63:
        return (int(digits) + 2**31) % 2**32 - 2**31  # strconv.ParseInt, then int32(): Go's wrap-around
    raise QuantityError(f"{text!r} is not a quantity: unable to parse quantity's suffix {suffix!r}")


def _round(value: Decimal) -> Decimal:
    """Away from zero to a whole nano, as ParseQuantity's ``amount.Round(amount, Nano, inf.RoundUp)``."""
    exponent = value.as_tuple().exponent
    if value and isinstance(exponent, int) and exponent < -9:
        return value.quantize(_NANO, rounding=ROUND_UP, context=_EXACT)
    return value
