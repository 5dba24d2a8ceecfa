"""8-bit floating point (FP8) on sm_90a: the two formats, the `cvt` conversions to and from them, and the
register fragment of an FP8 wgmma A operand with the accumulator-to-A repacking that P.V needs.

Sources: PTX ISA 9.1, https://docs.nvidia.com/cuda/parallel-thread-execution/#x with x =
- alternate-floating-point-data-formats (5.2.3): .e4m3 has 1 sign, 4 exponent and 3 mantissa bits (bias 7), no
  infinity, NaN = S.1111.111, largest finite 448; .e5m2 has 1/5/2 bits (bias 15), infinities, largest finite
  57344 (the OCP FP8 formats: ml_dtypes' float8_e4m3fn and float8_e5m2);
- data-movement-and-conversion-instructions-cvt (9.7.9.21): `cvt.rn.satfinite{.relu}.f8x2type.f32 d, a, b`
  puts "the value converted from input a ... in the upper 8 bits of d and the value converted from input b
  ... in the lower 8 bits"; `cvt.rn{.relu}.f16x2.f8x2type d, a` widens the upper byte to the upper half;
  ".satfinite: ... if the input value is NaN, then the result is NaN in the specified destination format. If
  the absolute value of input (ignoring sign) is greater than MAX_NORM of the specified destination format,
  then the result is sign-preserved MAX_NORM of the destination format." Conversions to the f8 types need
  .satfinite and .rn (no other rounding is offered); bf16x2 sources are sm_100f+ only, so sm_90a narrows bf16
  through f32 (exact) and widens f8 through f16 (exact: every f8 value is an f16).
- warp-level-matrix-fragment-mma-16832 (Figure 88, the mma.m16n8k32 A fragment for .e4m3/.e5m2) and
  asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n32 (Figure 152, the same per warp of a
  warpgroup): A element a_i (i = 0..15, four per .b32 register, low byte first) of lane l sits at
  row = l/4 (+8 for 4 <= i < 8 and i >= 12), column 4 (l % 4) + (i & 3) (+16 for i >= 8).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tessera.sm90.wgmma import thread_parts

FP8_FORMATS = ("e4m3", "e5m2")
"""The PTX names of the 8-bit float types sm_90a's cvt and wgmma take."""

FP8_MAX_FINITE = {"e4m3": 448.0, "e5m2": 57344.0}
"""MAX_NORM of each format: e4m3 1.75 x 2^8 (exponent 1111 is finite but for the NaN mantissa 111), e5m2
1.75 x 2^15 (exponent 11111 holds infinities and NaNs)."""

FP8_CVT_NARROW = {"e4m3": "cvt.rn.satfinite.e4m3x2.f32", "e5m2": "cvt.rn.satfinite.e5m2x2.f32"}
"""The instruction that rounds two f32 values to one format (a to bits 15:8, b to bits 7:0)."""

FP8_CVT_WIDEN = {"e4m3": "cvt.rn.f16x2.e4m3x2", "e5m2": "cvt.rn.f16x2.e5m2x2"}
"""The instruction that widens two 8-bit values to f16x2 (exact); `cvt.f32.f16` then gives f32 exactly."""

_DTYPES = {"e4m3": np.dtype(ml_dtypes.float8_e4m3fn), "e5m2": np.dtype(ml_dtypes.float8_e5m2)}


def fp8_dtype(fmt: str) -> np.dtype:
    """The NumPy (ml_dtypes) dtype that holds format `fmt`'s bit patterns."""
    if fmt not in _DTYPES:
        raise ValueError(f"8-bit float format must be one of {FP8_FORMATS}, got {fmt!r}")
    return _DTYPES[fmt]


def satfinite_f32(x, fmt: str) -> np.ndarray:
    """`cvt.rn.satfinite.<fmt>x2.f32` of f32 value(s) x as values of the format's dtype: round to nearest even,
    finite magnitudes beyond MAX_NORM and infinities become sign-preserved MAX_NORM, NaN stays NaN.

    Clamping before rounding is the same as rounding then saturating: MAX_NORM is representable, so any x
    beyond it rounds to MAX_NORM or overflows, and .satfinite turns the overflow into MAX_NORM."""
    dtype = fp8_dtype(fmt)
    big = np.float32(FP8_MAX_FINITE[fmt])
    x = np.asarray(x, dtype=np.float32)
    return np.clip(x, -big, big).astype(dtype)  # np.clip keeps NaN


def cvt_rn_satfinite_x2(a, b, fmt: str = "e4m3"):
    """The 16-bit result of `cvt.rn.satfinite.<fmt>x2.f32 d, a, b` on f32 value(s): d[15:8] = convert(a),
    d[7:0] = convert(b)."""
    hi = satfinite_f32(a, fmt).view(np.uint8).astype(np.uint16)
    lo = satfinite_f32(b, fmt).view(np.uint8).astype(np.uint16)
    return (hi << np.uint16(8)) | lo


def fp8_bits_to_f32(bits, fmt: str = "e4m3") -> np.ndarray:
    """The f32 value(s) of 8-bit pattern(s) of `fmt` (exact: `cvt.rn.f16x2.<fmt>x2` then `cvt.f32.f16`)."""
    return np.asarray(bits, dtype=np.uint8).view(fp8_dtype(fmt)).astype(np.float32)


# region The FP8 A operand in registers, and P from the accumulator [P#...-wgmma-64n32, Figure 152]

FP8_A_ELEMENTS = 16
"""m64nNk32 e4m3/e5m2 A in registers: four .b32 registers of four bytes each per thread, a0..a15 (low byte
first)."""


def a8_fragment_coords(i, thread):
    """(row, k) in the 64x32 A tile of 8-bit element a_i (i < 16; register i / 4, byte i % 4) of `thread`
    (0..127 in the warpgroup), vectorised: row = 16w + g + 8 ((i >> 2) & 1), k = 4c + (i & 3) + 16 (i >> 3)."""
    i = np.asarray(i, dtype=np.int64)
    if np.any((i < 0) | (i >= FP8_A_ELEMENTS)):
        raise ValueError(f"8-bit A element must be in [0, {FP8_A_ELEMENTS})")
    w, g, c = thread_parts(thread)
    return 16 * w + g + 8 * ((i >> 2) & 1), 4 * c + (i & 3) + 16 * (i >> 3)


def p8_register_sources(k_slice: int) -> tuple[tuple[int, int, int, int], ...]:
    """For P.V with an 8-bit P in registers: the f32 accumulator elements of the same thread that A register
    j (0..3) of K-slice `k_slice` (P columns 32s .. 32s + 31) packs, low byte first.

    Register j = 2h + r (h: which 16 keys, r: row g or g + 8) takes d[16s + 8h + 2r + {0, 1, 4, 5}]: the
    elements of its own row, so no value crosses threads; but these are keys 16h + 2c + {0, 1, 8, 9} of the
    slice, while the A layout reads them as k = 16h + 4c + {0, 1, 2, 3}. The B operand (V^T) must therefore
    hold its keys in the order `P8_KEY_ORDER` (the producer's transpose writes them so). Emit, for
    (e0, e1, e2, e3) = these elements, `cvt.rn.satfinite.e4m3x2.f32 lo, e1, e0`,
    `cvt.rn.satfinite.e4m3x2.f32 hi, e3, e2` and `mov.b32 a_j, {lo, hi}`."""
    if k_slice < 0:
        raise ValueError(f"K-slice must be >= 0, got {k_slice}")
    base = 16 * k_slice
    return tuple(tuple(base + 8 * (j >> 1) + 2 * (j & 1) + o for o in (0, 1, 4, 5)) for j in range(4))


P8_KEY_ORDER = tuple(16 * (k >> 4) + 8 * ((k >> 1) & 1) + 2 * ((k >> 2) & 3) + (k & 1) for k in range(32))
"""The key (P column within a 32-key slice) that k-position k of the FP8 P.V product holds when P is packed by
`p8_register_sources`: within each 16 keys, k = 4c + 2p + e holds key 8p + 2c + e (bits (p, c1, c0, e) of the
key become bits (c1, c0, p, e) of k). V^T's row k in shared memory must be V's row P8_KEY_ORDER[k]."""

P8_KEY_GROUP = 16
"""P8_KEY_ORDER permutes keys within each group of 16 (bit 4 of the key stays): keys ordered so by groups of 16
from any multiple of 16 are in the product's order for every 32-key slice that starts on a multiple of 32."""


def p8_key_positions(n: int) -> np.ndarray:
    """The key each of positions 0 .. n-1 holds in P8 key order (n a multiple of P8_KEY_GROUP): an array x
    in its keys' own order along an axis is x[..., p8_key_positions(n)] in P8 order (`tile.key_order = "p8"`),
    and np.argsort of it gives the way back."""
    if n < 0 or n % P8_KEY_GROUP:
        raise ValueError(f"P8 key order permutes groups of {P8_KEY_GROUP} keys; got {n} keys")
    group = np.array(P8_KEY_ORDER[:P8_KEY_GROUP])
    return (P8_KEY_GROUP * np.arange(n // P8_KEY_GROUP)[:, None] + group[None, :]).reshape(-1)

# endregion
# region The producer's V transpose into P8 key order [P#...-prmt]

P8_QUAD_KEYS = tuple(P8_KEY_ORDER[i] for i in range(4))
"""(0, 1, 8, 9): k-positions 4c .. 4c + 3 of a group of 16 (one 32-bit word of a V^T row) hold keys 2c + these
(`P8_KEY_ORDER` read four positions at a time): the in-kernel transpose reads V's rows 2c + P8_QUAD_KEYS of the
group, four bytes (four head_dim columns) from each, and writes four V^T words."""

TRANSPOSE_4X4_PRMT = ((0x5140, 0x7362), (0x5410, 0x7632))
"""The selectors of the 4 x 4 byte transpose in 8 `prmt.b32` (generic form): from words w0..w3 (byte j of w_i is
element [i, j]), t0 = prmt(w0, w1, 0x5140) and t1 = prmt(w0, w1, 0x7362) interleave the low and high byte pairs
of w0 and w1 (t2, t3 likewise of w2, w3), then y0 = prmt(t0, t2, 0x5410), y1 = prmt(t0, t2, 0x7632), y2 =
prmt(t1, t3, 0x5410), y3 = prmt(t1, t3, 0x7632) join their half-words: byte i of y_j is element [i, j]
(`transpose_4x4_words`)."""


def transpose_4x4_words(w0, w1, w2, w3) -> tuple:
    """(y0, y1, y2, y3): the 4 x 4 byte matrix of words w0..w3 (uint32, vectorised) transposed by the eight prmt
    of `TRANSPOSE_4X4_PRMT`, evaluated with `packing.prmt_b32` (the ISA's prmt)."""
    from tessera.sm90.packing import prmt_b32

    (lo, hi), (even, odd) = TRANSPOSE_4X4_PRMT
    t0, t1, t2, t3 = prmt_b32(w0, w1, lo), prmt_b32(w0, w1, hi), prmt_b32(w2, w3, lo), prmt_b32(w2, w3, hi)
    return prmt_b32(t0, t2, even), prmt_b32(t0, t2, odd), prmt_b32(t1, t3, even), prmt_b32(t1, t3, odd)

# endregion
