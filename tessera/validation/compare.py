"""Comparing two levels: their outputs element by element, and their recorded values op by op.

Two rules, chosen by the boundary (`Expectation`):
- EXACT: the same bits (NaN equal to NaN). Passes within one level change where and how often a value is
  computed, never how: Tile-to-Tile, Target-to-Target, and Target IR to its PTX (the CTA simulator and the
  PTX executor implement the same instruction semantics, ex2.approx included) are expected to be bit-exact.
- CLOSE: across Tile IR -> Target IR the arithmetic legitimately changes (exp becomes ex2.approx of a
  pre-scaled argument, row reductions become shuffles in another order, f32 sums of wgmma K-slices), so
  outputs are held to the reference tolerance and values to `VALUE_TOLERANCE`, relative to the value's
  magnitude (at least 1).

The first diverging op is the earliest named value, in the new level's program order, whose counterpart of the
same name and occurrence in the old level differs under the rule. Names whose number of occurrences differs
between the levels (a mask op only on the peeled trips) are compared only if no other name diverges; then the
first such name is reported as computed a different number of times.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from tessera.interpreters.block_batch import describe_op
from tessera.validation.recording import RecordedValue, ValueTrace

VALUE_TOLERANCE = 1e-2
"""Relative difference allowed between a Tile IR value and its Target IR counterpart (module docstring): bf16
rounding of P can flip by one ulp (2^-8) when ex2.approx differs from exp in the last bits."""


class Expectation(Enum):
    EXACT = "exact"
    CLOSE = "reference tolerance"


def as_float(value) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind in "iub":
        return array.astype(np.int64)
    return array.astype(np.float64)


def differences(new, old) -> np.ndarray:
    """|new - old| element by element: 0 where both are the same (NaN and NaN, one infinity), inf where only one
    is NaN or infinite (the shapes must agree)."""
    a, b = as_float(new), as_float(old)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(a - b))
    return np.nan_to_num(diff, nan=np.inf)


def max_difference(new, old) -> float:
    """The largest of `differences` (inf where the shapes differ)."""
    if np.shape(new) != np.shape(old):
        return float("inf")
    return float(differences(new, old).max(initial=0.0))


def differing(new, old, expectation: Expectation) -> np.ndarray:
    """The mask of elements that differ under the rule (shapes must agree)."""
    a, b = as_float(new), as_float(old)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    if expectation is Expectation.EXACT:
        return ~same
    finite = np.isfinite(b)
    scale = max(1.0, float(np.abs(b[finite]).max())) if finite.any() else 1.0
    with np.errstate(invalid="ignore"):
        close = np.abs(a - b) <= VALUE_TOLERANCE * scale
    return ~(same | close)


def first_index(mask: np.ndarray) -> tuple[int, ...] | None:
    hits = np.argwhere(mask)
    return tuple(int(i) for i in hits[0]) if len(hits) else None


def format_index(name: str, index: tuple[int, ...]) -> str:
    return f"{name}[{','.join(str(i) for i in index)}]"


def describe_elements(name: str, mask: np.ndarray) -> str:
    """Which elements of output `name` the mask holds: their count and the box they lie in, e.g.
    "2 of 2310 elements of Q, in Q[3..67, 0..32]"."""
    hits = np.argwhere(mask)
    count = f"{len(hits)} of {mask.size} elements of {name}"
    if not len(hits):
        return count
    box = ",".join(f"{lo}..{hi}" if lo != hi else str(lo) for lo, hi in zip(hits.min(0), hits.max(0)))
    return f"{count}, in {name}[{box}]"


@dataclass
class Divergence:
    """The first recorded value of the new level that disagrees with the old level."""

    new: RecordedValue
    old: RecordedValue | None
    element: tuple[int, ...] | None = None
    new_value: float | None = None
    old_value: float | None = None

    def __str__(self) -> str:
        text = describe_op(self.new.op)
        nth = f"evaluation {self.new.occurrence + 1} of %{self.new.name}"
        if self.old is None:
            return f"{text} ({nth}; computed a different number of times than before)"
        if self.element is None:
            return f"{text} ({nth}; its shape changed)"
        where = format_index(f"%{self.new.name}", self.element)
        return f"{text} ({nth}: {where} = {self.new_value:.6g}, was {self.old_value:.6g})"


def _values(record: RecordedValue, other: RecordedValue):
    """The two values to compare: tiles when both have one, else per-thread values of the same shape."""
    if record.tile is not None and other.tile is not None and record.tile.shape == other.tile.shape:
        return record.tile, other.tile
    if record.raw is not None and other.raw is not None and record.raw.shape == other.raw.shape:
        return record.raw, other.raw
    if record.raw is None and other.raw is None and record.tile is not None and other.tile is not None:
        return record.tile, other.tile
    return None


def first_divergence(new: ValueTrace, old: ValueTrace, expectation: Expectation) -> Divergence | None:
    """The first diverging value of `new` against `old` (module docstring), or None."""
    old_values = old.by_key()
    uneven = None
    for record in new.values:
        counterpart = old_values.get(record.key)
        if new.count(record.name) != old.count(record.name):
            if uneven is None and old.count(record.name):
                uneven = Divergence(record, None)
            continue
        if counterpart is None:
            continue
        pair = _values(record, counterpart)
        if pair is None:
            continue
        a, b = pair
        if a.shape != b.shape:
            continue
        mask = differing(a, b, expectation)
        if mask.any():
            index = first_index(mask)
            return Divergence(record, counterpart, index, float(as_float(a)[index]), float(as_float(b)[index]))
    return uneven
