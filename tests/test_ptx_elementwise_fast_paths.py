"""The elementwise fast paths of the PTX executor give the bits of the general paths they stand in for: each test
compares the two on the values where they could differ (ties, carries into the exponent, overflow, subnormals,
zeros of both signs, NaN)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from test_ptx_exec import elementwise

from tessera.interpreters.ptx import numerics
from tessera.sm90 import facts

BF16 = np.dtype(ml_dtypes.bfloat16)

FRACTIONS = np.array([0, 1, 2, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000, 0x17FFF, 0x18000, 0x18001, 0x3FFFFF,
                      0x400000, 0x7F7FFF, 0x7F8000, 0x7F8001, 0x7FFFFE, 0x7FFFFF], np.uint32)


def edge_f32() -> np.ndarray:
    """Every exponent (infinity, no NaN) with the fractions where rounding to 16 bits ties, carries or stays, both
    signs, and random values."""
    exponents = np.arange(256, dtype=np.uint32) << np.uint32(23)
    bits = (exponents[:, None] | FRACTIONS[None, :]).ravel()
    bits = np.concatenate([bits, bits | np.uint32(0x80000000),
                           np.random.default_rng(3).integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)])
    x = bits.view(np.float32)
    return x[~np.isnan(x)]


def test_bf16_words_round_as_the_cast():
    x = edge_f32()
    assert not numerics.has_nan_f32(x)
    words = numerics.bf16_rn_words(x)
    np.testing.assert_array_equal((words >> np.uint32(16)).astype(np.uint16), x.astype(BF16).view(np.uint16))


def test_has_nan_f32():
    x = edge_f32()
    assert not numerics.has_nan_f32(x) and not numerics.has_nan_f32(x[:0])
    for nan_bits in (0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF):
        y = x.copy()
        y[len(y) // 2] = np.uint32(nan_bits).view(np.float32)
        assert numerics.has_nan_f32(y)


def test_cvt_rn_bf16x2_packs_the_bits_of_the_cast_with_and_without_nan(monkeypatch):
    """`cvt.rn.bf16x2.f32` takes the integer rounding where neither source holds a NaN and the cast otherwise: the
    same words either way."""
    rounded = []
    words = numerics.bf16_rn_words
    monkeypatch.setattr(numerics, "bf16_rn_words", lambda x: rounded.append(len(x)) or words(x))
    edges = edge_f32()
    for x in (edges[:1024], edges[1024:2048], edges[-1024:]):  # (a CTA's 1,024 threads a launch)
        y = np.roll(x, 7)
        packed = elementwise("cvt.rn.bf16x2.f32 %r4, %f1, %f2;", x, y)
        np.testing.assert_array_equal(packed, facts.cvt_rn_x2(x, y, "bf16"))
        with_nan = y.copy()
        with_nan[::97] = np.float32(np.nan)
        with_nan[5] = np.uint32(0xFF800001).view(np.float32)
        packed = elementwise("cvt.rn.bf16x2.f32 %r4, %f1, %f2;", x, with_nan)
        with np.errstate(invalid="ignore"):
            expected = facts.cvt_rn_x2(x, with_nan, "bf16")
        np.testing.assert_array_equal(packed, expected)
    assert rounded == [1024, 1024] * 3  # the words for the sources without NaN, the cast for those with one
