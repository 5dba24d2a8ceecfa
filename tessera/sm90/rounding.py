"""cvt's integer rounding modifiers [P#data-movement-and-conversion-instructions-cvt]: the one table the
Tile-to-Target lowering (`tile.floor` / `ceil` / `rint` / `trunc`), the PTX printer and the simulators take
them from.

The PTX ISA's sentences (tests/test_sm90_facts.py checks the table against them):

  .rni  "round to nearest integer, choosing even integer if source is equidistant between two integers."
  .rzi  "round to nearest integer in the direction of zero"
  .rmi  "round to nearest integer in direction of negative infinity"
  .rpi  "round to nearest integer in direction of positive infinity"

"Integer rounding is required for float-to-integer conversions, and for same-size float-to-float conversions
where the value is rounded to an integer": `cvt.rmi.f32.f32 d, a` is floor(a) as an f32. Without `.ftz`
subnormal inputs are kept (floor(-2^-140) = -1); NaN stays NaN and +-0, +-inf are their own integral value.
"""

from __future__ import annotations

INTEGER_ROUNDING = {"floor": "rmi", "ceil": "rpi", "rint": "rni", "trunc": "rzi"}
"""The function a same-size float-to-float `cvt` computes, by its integer rounding modifier's name: floor
rounds toward -inf, ceil toward +inf, rint to the nearest integer with ties to even, trunc toward zero."""


def integer_rounding_mnemonic(function: str) -> str:
    """`cvt.<modifier>.f32.f32`, the instruction that rounds an f32 to an integral f32 by `function` (floor,
    ceil, rint or trunc); ValueError for another name."""
    if function not in INTEGER_ROUNDING:
        raise ValueError(f"no cvt integer rounding for {function!r} (known: {', '.join(INTEGER_ROUNDING)})")
    return f"cvt.{INTEGER_ROUNDING[function]}.f32.f32"
