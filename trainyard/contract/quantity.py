"""Kubernetes resource quantities (``8Gi``, ``500M``, ``1.5``, ``100m``), exact, bounded, linear time.

Grammar of k8s.io/apimachinery/pkg/api/resource (quantity.go, v0.36.5)::

    <quantity>  ::= <signedNumber><suffix>
    <number>    ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>    ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>  ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI> ::= n | u | m | "" | k | M | G | T | P | E         (suffix.go newSuffixer)
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>   (an integer: suffix.go interpret)

"No quantity may represent a number greater than 2^63-1 in magnitude, nor may it have more than 3
decimal places" (quantity.go); values are rounded up to nano units (ParseQuantity rounds with
inf.RoundUp at scale Nano). Kubernetes parses a decimal exponent as int64 and keeps it as int32
(kubernetes/kubernetes#141203 rejects what does not fit); above 2^63-1 it does not cap decimal
forms but keeps arbitrary-size numbers, and comparing ``1e999999`` with anything does not finish.
Here a quantity whose magnitude is above 2^63-1 is refused, and so is an exponent outside int32,
both decided from the number's length and exponent before any arithmetic. The text is scanned
once, left to right, and the arithmetic runs on at most about 80 digits whatever its length.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_UP, Context, Decimal
from functools import lru_cache

MAX = 2**63 - 1  # the largest magnitude Kubernetes represents
INT32_MAX = 2**31 - 1
_NANO = Decimal("1e-9")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}  # powers of 2
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}  # powers of 10
_RUN = re.compile(r"[0-9]*")  # one class: a single pass, nothing to try again
_EXACT = Context(prec=120)  # 20 integer digits, 61 decimals and 2^60's 19 digits fit
_CACHED_MAX = 64
EXAMPLES = "examples: 8Gi, 512Mi, 1, 500m"


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity given as a string or a JSON number; raise QuantityError naming the value."""
    if isinstance(value, str):
        return _parse_text(value) if len(value) <= _CACHED_MAX else _parse(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QuantityError(f"{_show(value)} is not a quantity ({EXAMPLES})")
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError(f"{value!r} is not a quantity ({EXAMPLES})")
    if abs(value) > MAX:
        raise QuantityError(f"{_show(value)} is larger than Kubernetes allows for a quantity (2^63-1)")
    return _nano(Decimal(repr(value)) if isinstance(value, float) else Decimal(value))


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}... ({len(text)} characters)"


@lru_cache(maxsize=1024)  # pods repeat a handful of quantities ("8Gi", "1"): parse each once
def _parse_text(value: str) -> Decimal:
    return _parse(value)


def _bad(text: str) -> QuantityError:
    return QuantityError(f"{_show(text)} is not a Kubernetes quantity ({EXAMPLES})")


def _split(text: str) -> tuple[int, int, int]:
    """Where the sign ends, the whole digits end and the fraction ends (the suffix starts)."""
    i = 1 if text[:1] in ("+", "-") else 0
    int_end = _RUN.match(text, i).end()  # type: ignore[union-attr]  # [0-9]* always matches
    frac_end = int_end
    if text[int_end : int_end + 1] == ".":
        frac_end = _RUN.match(text, int_end + 1).end()  # type: ignore[union-attr]
    return i, int_end, frac_end


def _suffix(text: str, suffix: str) -> tuple[int, int]:
    """(base, power) of a quantity's suffix: binary SI, decimal SI or a decimal exponent."""
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        start = 2 if suffix[1] in "+-" else 1
        if start == len(suffix) or _RUN.match(suffix, start).end() != len(suffix):  # type: ignore[union-attr]
            raise _bad(text)
        digits = suffix[start:].lstrip("0") or "0"
        if len(digits) > 10 or int(digits) > INT32_MAX:  # 10 digits: at most a few billion, cheap
            raise QuantityError(f"{_show(text)}: the exponent is outside what Kubernetes accepts (int32)")
        return 10, (-1 if suffix[1] == "-" else 1) * int(digits)
    raise _bad(text)


def _parse(text: str) -> Decimal:
    i, int_end, frac_end = _split(text)
    if int_end == i and frac_end <= int_end + 1:  # no digits at all ("", "+", ".", "-.")
        raise _bad(text)
    base, power = _suffix(text, text[frac_end:])
    whole = text[i:int_end].lstrip("0")
    fraction = text[int_end + 1 : frac_end]
    significant = fraction.lstrip("0")
    if not whole and not significant:
        return Decimal(0)
    # the order of magnitude from the lengths alone: 10**order <= |number| < 10**(order + 1)
    order = len(whole) - 1 if whole else len(significant) - len(fraction) - 1
    order += power if base == 10 else math.floor(power * math.log10(2))
    if order > 18:  # 2^63-1 is about 9.2e18
        raise QuantityError(f"{_show(text)} is larger than Kubernetes allows for a quantity (2^63-1)")
    sign = "-" if text[:1] == "-" else ""
    if order < -10:  # a tiny quantity: Kubernetes rounds it up to one nano unit
        return Decimal(f"{sign}1e-9")
    # Digits past the 60th decimal place can only round the result up; keep one if any is not 0.
    kept = fraction[:60] + ("1" if fraction[60:].strip("0") else "")
    number = Decimal(f"{sign}{whole or '0'}.{kept or '0'}")
    scaled = number.scaleb(power, _EXACT) if base == 10 else _EXACT.multiply(number, Decimal(2**power))
    if abs(scaled) > MAX:
        raise QuantityError(f"{_show(text)} is larger than Kubernetes allows for a quantity (2^63-1)")
    return _nano(scaled)


def _nano(value: Decimal) -> Decimal:
    """Rounded up (away from zero) to nano units, as ParseQuantity does."""
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int) or exponent >= -9:
        return value
    return value.quantize(_NANO, rounding=ROUND_UP, context=Context(prec=40))  # |value| <= 2^63-1: 28 digits


def format_bytes(n: int) -> str:
    """The shortest exact binary-suffixed form of a byte count: 8589934592 -> '8Gi'."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = 2 ** _BINARY[suffix]
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


_SI = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIX = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_INT64_MAX = 2**63 - 1


def round_trip(value: object) -> str:
    """The text a Go client writes back for a quantity it read as ``value`` (a string, or a JSON
    number), from k8s.io/apimachinery@v0.36.5 pkg/api/resource/quantity.go: ``UnmarshalJSON``
    parses the trimmed text with ``ParseQuantity``, which keeps the text itself when its fast path
    finds it "in canonical form" (binary: a whole multiple of its suffix whose number is not a
    multiple of 8; decimal: an exponent that is a multiple of 3, digits not starting with 0 nor
    ending with 000; so ``+1``, ``08`` and ``1.`` come back as written); ``MarshalJSON`` writes that
    text, else its canonical text (:func:`_canonical`). ``1000m`` comes back as ``1``, ``8192Mi`` as ``8Gi``."""
    number = parse_quantity(value)  # refuses what Kubernetes refuses
    text = (value if isinstance(value, str) else repr(value)).strip()
    if text == "0":
        return text
    i, int_end, frac_end = _split(text)
    num = text[i:int_end].lstrip("0") or "0"  # parseQuantityString: leading zeros stripped
    denom = text[int_end + 1 : frac_end]
    suffix = text[frac_end:]
    base, exponent = _suffix(text, suffix)
    binary = base == 2
    if binary:
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1 if not denom else -1
    else:
        precision = 18 - (len(num) + len(denom))
    scale = (0 if binary else exponent) - len(denom)
    if precision >= 0 and scale >= -9:
        shifted = num + denom
        n = int(shifted)
        if n * (2**exponent if binary else 1) <= _INT64_MAX:
            if binary:
                kept = exponent % 10 == 0 and n & 7 != 0
            else:
                kept = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
            if kept:
                return text
    return _canonical(number, binary=binary, exponent_form=suffix not in _DECIMAL and not binary)


def _canonical(number: Decimal, *, binary: bool = False, exponent_form: bool = False) -> str:
    """Quantity.CanonicalizeBytes of ``number`` in the format its suffix gave it: a binary value
    under 1024 in magnitude or not whole is shown decimal; the number is whole, its exponent a
    multiple of 3 (of 1024 for binary) as large as keeps it whole."""
    if number == 0:
        return "0"
    if binary and abs(number) >= 1024 and number == number.to_integral_value():
        n, power = int(number), 0
        while n % 1024 == 0 and power < len(_BINARY_SUFFIX) - 1:
            n, power = n // 1024, power + 1
        return f"{n}{_BINARY_SUFFIX[power]}"
    sign, digits, exp = number.normalize().as_tuple()
    assert isinstance(exp, int)
    mantissa = int("".join(map(str, digits)))
    while exp % 3:
        mantissa, exp = mantissa * 10, exp - 1
    head = f"{'-' if sign else ''}{mantissa}"
    if exponent_form:
        return head + (f"e{exp}" if exp else "")
    return head + _SI.get(exp, f"e{exp}")
