"""The elementwise fast paths of the PTX executor give the bits of the general paths they stand in for: each test
compares the two on the values where they could differ (ties, carries into the exponent, overflow, subnormals,
zeros of both signs, NaN)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
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


INTO_OPS = ["add.rn.f32 %f4, %f1, %f2;", "add.f32 %f1, %f1, %f2; mov.f32 %f4, %f1;", "mul.rn.f32 %f4, %f1, %f2;",
            "mul.f32 %f2, %f1, %f2; mov.f32 %f4, %f2;", "fma.rn.f32 %f4, %f1, %f2, %f3;",
            "fma.rn.f32 %f3, %f1, %f2, %f3; mov.f32 %f4, %f3;", "mad.f32 %f4, %f1, %f2, %f3;",
            "mul.rn.f32 %f4, %f1, 0f3E000000;", "ex2.approx.ftz.f32 %f4, %f1;",
            "ex2.approx.f32 %f1, %f1; mov.f32 %f4, %f1;", "rcp.approx.ftz.f32 %f4, %f2;", "lg2.approx.f32 %f4, %f1;",
            "max.NaN.f32 %f4, %f1, %f2;", "max.f32 %f1, %f1, %f2; mov.f32 %f4, %f1;",
            "min.f32 %f2, %f1, %f2; mov.f32 %f4, %f2;", "min.NaN.f32 %f4, %f2, %f3;", "max.f32 %f4, %f3, 0f00000000;",
            "cvt.rn.bf16x2.f32 %r4, %f1, %f2; mov.b32 %f4, %r4;", "cvt.rn.bf16x2.f32 %r1, %f1, %f3; mov.b32 %f4, %r1;",
            "add.s32 %r4, %r1, %r2; mov.b32 %f4, %r4;", "sub.u32 %r1, %r1, %r2; mov.b32 %f4, %r1;",
            "add.u32 %r4, %r3, 7; mov.b32 %f4, %r4;",
            "add.rz.f32 %f4, %f1, %f2;", "add.ftz.f32 %f4, %f1, %f2;", "mul.sat.f32 %f4, %f1, %f2;"]
COPIED_OPS = INTO_OPS[-3:]
"""A directed rounding, .ftz or .sat: the result of an array of its own, copied in."""


def into_operands() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """1,024 lanes of f32 specials and random values, with products that overflow, underflow to subnormals and
    cancel against the addend (fma's round-to-odd paths), in three operand arrays."""
    rng = np.random.default_rng(5)
    edges = edge_f32()
    x = np.concatenate([edges[rng.integers(0, len(edges), 512)], rng.standard_normal(512).astype(np.float32)])
    y = np.roll(x, 11) * np.float32(0.75)
    with np.errstate(over="ignore"):
        z = -(x.astype(np.float64) * y.astype(np.float64)).astype(np.float32)  # cancels the product
    z[::3] = np.roll(x, 5)[::3]
    x[:8] = np.float32([2**-70, -2**-70, 1 + 2**-12, 3.0, np.nan, -np.inf, 0.0, -0.0])
    y[:8] = np.float32([2**-70, 2**-75, 1 + 2**-12, 2**-149, 1.0, 0.0, -0.0, 1e-40])
    z[:8] = np.float32([0.0, 2**-140, -1.0, 0.0, 2.0, np.nan, -0.0, 0.0])
    return x, y, z


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("op", INTO_OPS)
def test_results_computed_into_the_destination_are_the_bits_stored_from_a_copy(op, fused, monkeypatch):
    """add/mul (.rn f32), fma, min/max (f32), the approximate functions, cvt.rn.bf16x2.f32 and integer add/sub compute
    into their
    destination (`Operands.write`'s target) where every lane of the batch runs them (a fused group's rows, or a plain
    step of every lane), with the bits of the result written from an array of its own: canonical NaN, +-0 ordered,
    .ftz, wrapping, an operand that is the destination."""
    from tessera.interpreters.ptx import decode, fuse

    monkeypatch.setattr(fuse, "HOT", 0 if fused else 10**9)  # the op in a block from its first run, or never
    targets = []
    write = decode.Operands.write

    def counted(self, inst, operand, t):
        closure = write(self, inst, operand, t)
        target = getattr(closure, "target", None)
        if target is not None:
            name = ".".join([inst.opcode, *inst.modifiers])
            closure.target = lambda sel: targets.append(name) or target(sel)
        return closure

    x, y, z = into_operands()
    if "cvt" in op:  # (a NaN source takes the cast, written as a copy)
        x, y, z = (np.where(np.isnan(v), np.float32(1.5), v) for v in (x, y, z))
    with np.errstate(all="ignore"):
        monkeypatch.setattr(decode.Operands, "write", counted)
        into = elementwise(op, x, y, z, result="%f4")
        monkeypatch.setattr(decode.Operands, "write", lambda self, *a: (lambda w: lambda sel, v: w(sel, v))(
            write(self, *a)))  # (no target: every result copied in)
        copied = elementwise(op, x, y, z, result="%f4")
    assert into.tobytes() == copied.tobytes()
    assert (op.split()[0] in targets) == (op not in COPIED_OPS)
