"""The wgmma transpose facts GEMM's layouts rest on (tessera.sm90.wgmma), against the PTX ISA's own words:
which types may be read MN-major, the imm-trans values, and where an MN-major operand's elements sit."""

from __future__ import annotations

import pytest

from tessera.sm90 import facts as F


# [P#asynchronous-warpgroup-level-matrix-instructions-wgmma-mma-async]: "Matrices A and B are stored in row-major
# and column-major format respectively. For certain floating point variants, the input matrices A and B can be
# transposed by specifying the value 1 for the immediate integer arguments imm-trans-a and imm-trans-b
# respectively. A value of 0 can be used to avoid the transpose operation. [...] The transpose operation is only
# supported for the wgmma.mma_async variants with .f16/.bf16 types on matrices accessed from shared memory using
# matrix descriptors." Row-major A [M, K] and column-major B [K, N] are K-major: imm-trans 0 reads K-major.
ISA_TRANSPOSABLE_TYPES = {"f16", "bf16"}
ISA_OTHER_TYPES = {"tf32", "e4m3", "e5m2", "u8", "s8", "b1"}


def test_wgmma_transpose_immediates_follow_the_isa():
    assert set(F.WGMMA_TRANSPOSE_TYPES) == ISA_TRANSPOSABLE_TYPES
    for atype in ISA_TRANSPOSABLE_TYPES | ISA_OTHER_TYPES:
        assert F.wgmma_transpose_immediate("K", atype) == 0
    for atype in ISA_TRANSPOSABLE_TYPES:
        assert F.wgmma_transpose_immediate("MN", atype, "A") == 1
        assert F.wgmma_transpose_immediate("MN", atype, "B") == 1
    for atype in ISA_OTHER_TYPES:
        with pytest.raises(ValueError, match=rf"MN-major B \(imm-trans-b = 1\) needs .f16 or .bf16 multiplicands, got .{atype}"):
            F.wgmma_transpose_immediate("MN", atype, "B")
    with pytest.raises(ValueError, match="major must be 'K' or 'MN'"):
        F.wgmma_transpose_immediate("M", "bf16")


def test_an_mn_major_operand_reads_its_tile_transposed():
    """The element (mn, k) of an MN-major 128B-swizzled operand whose rows are K (a B [K, N] tile, or A^T
    [K, M]) sits at row k, column mn of the tile: byte k * 128 + mn * 2 before the swizzle (one 64-element
    span of 16-bit values; the PTX ISA's MN-major canonical layout ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)))."""
    desc = F.encode_descriptor(0, 8192, 1024, 128)
    for mn in range(0, 64, 9):
        for k in range(16):
            assert int(F.descriptor_element_address(desc, "MN", 2, mn, k)) == F.swizzle_address(k * 128 + mn * 2, 128)


# [P#asynchronous-warpgroup-level-matrix-instructions-wgmma-mma-async], Syntax: the floating-point forms are
# `.dtype.f16.f16`, `.dtype.bf16.bf16`, `.dtype.tf32.tf32` (one type named twice), and
# `.dtype.atype.btype` with `.atype = { .e4m3, .e5m2 }` and `.btype = { .e4m3, .e5m2 }`; the integer form takes
# `.atype = { .s8, .u8 }`, `.btype = { .s8, .u8 }`; `.b1` only with itself. ptxas 12.9/13.x assemble
# `.f32.e5m2.e4m3` and `.f32.e4m3.e5m2` (tests/test_unseen_kernels6.py).
ISA_MIXABLE = ({"e4m3", "e5m2"}, {"s8", "u8"})


def test_wgmma_multiplicand_types_mix_as_the_isa_says():
    types = ISA_TRANSPOSABLE_TYPES | ISA_OTHER_TYPES
    for atype in types:
        for btype in types:
            mixes = atype == btype or any({atype, btype} <= family for family in ISA_MIXABLE)
            if mixes:
                F.wgmma_multiplicand_types(atype, btype)
            else:
                with pytest.raises(ValueError, match=rf"A is .{atype} and B is .{btype}: wgmma mixes only"):
                    F.wgmma_multiplicand_types(atype, btype)
    with pytest.raises(ValueError, match="multiplicand type must be one of"):
        F.wgmma_multiplicand_types("e4m3", "f8")
