"""Kubernetes resource quantities as the API accepts them ("8", "7500m", "16Gi"), and their values.

The pattern is what CRD fields of this kind accept; :func:`value` reads one exactly (a
``Fraction``, so "1.5Gi" is a whole number of bytes and "7500m" is 7.5 cores without rounding).
"""

from __future__ import annotations

import fractions
import re

#: A Kubernetes resource quantity such as "8", "500m", "64Gi" (the suffixes TokenFleet accepts).
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti)?$"

#: Each suffix's multiplier: decimal SI (k, M, G, T), binary (Ki … Ti), and milli.
_SUFFIXES = {
    "": fractions.Fraction(1),
    "m": fractions.Fraction(1, 1000),
    "k": fractions.Fraction(10**3),
    "M": fractions.Fraction(10**6),
    "G": fractions.Fraction(10**9),
    "T": fractions.Fraction(10**12),
    "Ki": fractions.Fraction(2**10),
    "Mi": fractions.Fraction(2**20),
    "Gi": fractions.Fraction(2**30),
    "Ti": fractions.Fraction(2**40),
}

GIB = 2**30
MIB = 2**20


def value(text: str) -> fractions.Fraction:
    """The quantity's exact value (bytes for memory, cores for CPU). Raises ValueError for text
    :data:`QUANTITY` does not accept."""
    found = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(m|k|Ki|M|Mi|G|Gi|T|Ti)?", text)
    if found is None:
        raise ValueError(f"not a resource quantity: {text!r}")
    number, suffix = found.groups()
    return fractions.Fraction(number) * _SUFFIXES[suffix or ""]


def whole_bytes(text: str) -> int:
    """A memory quantity in bytes, rounded down ("1.5Gi" → 1610612736)."""
    return int(value(text))


def gib(count: int) -> str:
    """Bytes for a human: "4 GiB", "4.5 GiB", "512 MiB"."""
    if count % GIB == 0 or count >= GIB:
        return f"{count / GIB:.4g} GiB"
    return f"{count / MIB:.4g} MiB"
