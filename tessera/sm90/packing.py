"""Packing orders of `cvt` and `mov` for 16-bit pairs in 32-bit registers, on uint16/uint32 arrays.

Sources: PTX ISA 9.1, https://docs.nvidia.com/cuda/parallel-thread-execution/#x with x =
data-movement-and-conversion-instructions-cvt (9.7.9.21): "for .f16x2 and .bf16x2 ... the value converted from
input a is stored in the upper half of d and the value converted from input b is stored in the lower half";
data-movement-and-conversion-instructions-mov-2 (9.7.9.4): "pack two 16-bit elements into .b32:
d = a.x | (a.y << 16)". The .rn rounding is IEEE round-to-nearest-even.
"""

from __future__ import annotations

from typing import Literal

import ml_dtypes
import numpy as np

Half = Literal["bf16", "f16"]

_HALF_DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}

_HALF_BITS = np.uint32(16)
"""The shift that widens a bf16's bits into its f32's (a uint32 scalar: no type resolution of a Python int)."""


def _half_dtype(dtype: Half):
    if dtype not in _HALF_DTYPES:
        raise ValueError(f"16-bit float type must be one of {tuple(_HALF_DTYPES)}, got {dtype!r}")
    return _HALF_DTYPES[dtype]


def cvt_rn_bits(x, dtype: Half = "bf16"):
    """The uint16 bits of `cvt.rn.<dtype>.f32` of f32 value(s) x: round to nearest, ties to even; values beyond
    the format's range round to infinity (no .satfinite)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, dtype=np.float32).astype(_half_dtype(dtype)).view(np.uint16)


def half_bits_to_f32(bits, dtype: Half = "bf16"):
    """The f32 values of 16-bit float bit patterns (exact). A bf16 is the upper half of the f32 of its value, so
    its f32 bits are its bits shifted up by 16 (every pattern, NaNs with their payloads, as ml_dtypes widens them;
    one integer pass, half the instructions of ml_dtypes' cast loop: a wgmma operand's tile at every k-step)."""
    halves = np.asarray(bits, dtype=np.uint16)
    if dtype != "bf16":
        return halves.view(_half_dtype(dtype)).astype(np.float32)
    widened = halves.astype(np.uint32)
    np.left_shift(widened, _HALF_BITS, out=widened)
    return widened.view(np.float32)


def mov_pack_b32(lo, hi):
    """`mov.b32 d, {lo, hi}` on uint16 bit patterns: d = lo | (hi << 16); the first operand is bits 15:0."""
    return np.asarray(lo, dtype=np.uint16).astype(np.uint32) | (np.asarray(hi, dtype=np.uint16).astype(np.uint32) << 16)


def mov_unpack_b32(d):
    """`mov.b32 {lo, hi}, d`: (bits 15:0, bits 31:16) as uint16."""
    d = np.asarray(d, dtype=np.uint32)
    return (d & 0xFFFF).astype(np.uint16), (d >> 16).astype(np.uint16)


def cvt_rn_x2(a, b, dtype: Half = "bf16"):
    """`cvt.rn.<dtype>x2.f32 d, a, b` on f32 value(s): a goes to the upper half (bits 31:16), b to the lower.
    So a fragment pair (even element e0, odd element e1) is `cvt.rn.bf16x2.f32 d, e1, e0`."""
    return mov_pack_b32(cvt_rn_bits(b, dtype), cvt_rn_bits(a, dtype))


def cvt_rn_pairs(x, dtype: Half = "bf16"):
    """`cvt_rn_x2(e1, e0)` of each consecutive pair (e0, e1) along the last axis of f32 value(s) x (an even
    count), as uint32 [..., n / 2]: e0 rounds into bits 15:0 and e1 into bits 31:16, so the rounded halves in
    order are the packed registers' little-endian bytes (one conversion and a view, no gather of the halves)."""
    bits = cvt_rn_bits(np.ascontiguousarray(x, dtype=np.float32), dtype)
    return bits.astype("<u2", copy=False).view("<u4").astype(np.uint32, copy=False)


def prmt_b32(a, b, selector: int):
    """`prmt.b32 d, a, b, c` in the generic form (no mode), c = `selector` [P#data-movement-and-conversion-
    instructions-prmt]: the source bytes are {b, a} = {{b7, b6, b5, b4}, {b3, b2, b1, b0}}; byte i of d is
    source byte (c >> 4i) & 7, or, when bit 4i + 3 is set, that byte's sign replicated over 8 bits.
    Vectorised over uint32 a and b."""
    if not 0 <= selector <= 0xFFFF:
        raise ValueError(f"a prmt selector is four 4-bit fields (0 .. 0xFFFF), got {selector:#x}")
    source = (np.asarray(b, np.uint32).astype(np.uint64) << np.uint64(32)) | np.asarray(a, np.uint32).astype(np.uint64)
    d = np.zeros(np.broadcast(source).shape, np.uint32)
    for i in range(4):
        control = (selector >> (4 * i)) & 0xF
        byte = ((source >> np.uint64(8 * (control & 7))) & np.uint64(0xFF)).astype(np.uint32)
        if control & 8:
            byte = np.where(byte & 0x80, np.uint32(0xFF), np.uint32(0))
        d |= byte << np.uint32(8 * i)
    return d
