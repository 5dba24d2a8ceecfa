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
