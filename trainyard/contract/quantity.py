"""Kubernetes resource quantities (``8Gi``, ``500M``, ``1.5``, ``100m``), exact, with Decimal.

Follows the grammar of k8s.io/apimachinery/pkg/api/resource: a signed decimal number, then an
optional binary suffix (Ki Mi Gi Ti Pi Ei), decimal suffix (n u m k M G T P E) or decimal
exponent (e3, E-2).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity given as a string or a number; raise QuantityError naming the value."""
    if isinstance(value, str):
        return _parse_text(value)
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    raise QuantityError(f"{value!r} is not a quantity")


@lru_cache(maxsize=1024)  # pods repeat a handful of quantities ("8Gi", "1"): parse each once
def _parse_text(value: str) -> Decimal:
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity (examples: 8Gi, 512Mi, 1, 500m)")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"{value!r} is not a quantity") from exc
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    try:
        return number.scaleb(int(suffix[1:]))
    except (InvalidOperation, ValueError):  # an exponent beyond what Decimal (or any node) holds
        raise QuantityError(f"{value[:40]!r} is not a quantity Kubernetes can hold (exponent out of range)") from None


def format_bytes(n: int) -> str:
    """The shortest exact binary-suffixed form of a byte count: 8589934592 -> '8Gi'."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)
