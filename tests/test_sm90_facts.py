"""The sm_90a hardware facts against tables transcribed from NVIDIA's documentation (DESIGN.md section 6).

Every expected value here is written out from the cited section (PTX ISA 9.1, "[P#anchor]" =
https://docs.nvidia.com/cuda/parallel-thread-execution/#anchor; the CUDA driver API for tensor maps) or from a
layout CUTLASS publishes, evaluated by the small CuTe interpreter below. Nothing is computed by calling the
module under test to get an expected value.
"""

from __future__ import annotations

import numpy as np
import pytest

from tessera.sm90 import facts as F

# region CuTe layout algebra, written out independently of the module


def _size(shape) -> int:
    return shape if isinstance(shape, int) else int(np.prod([_size(s) for s in shape]))


def _cute_mode(shape, stride, index: int) -> int:
    """A CuTe (shape, stride) mode at a 1-D index: colexicographic split of the index over the shape."""
    if isinstance(shape, int):
        assert 0 <= index < shape
        return index * stride
    total = 0
    for s, d in zip(shape, stride):
        total += _cute_mode(s, d, index % _size(s))
        index //= _size(s)
    return total


def cute(layout, *coord: int) -> int:
    """Evaluate a rank-2 CuTe layout ((shape0, shape1), (stride0, stride1)) at (coord0, coord1)."""
    (shape0, shape1), (stride0, stride1) = layout
    return _cute_mode(shape0, stride0, coord[0]) + _cute_mode(shape1, stride1, coord[1])


def cute_swizzle(b: int, m: int, s: int, x: int) -> int:
    """CuTe Swizzle<B,M,S>: x ^ ((x & (((1 << B) - 1) << (M + S))) >> S)."""
    return x ^ ((x & (((1 << b) - 1) << (m + s))) >> s)


def clayout_64xn(n: int):
    """CUTLASS include/cute/atom/mma_traits_sm90_gmma.hpp: CLayout_64xN =
    ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512)), (thread, value) -> m + 64 * n."""
    return (((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512)))


ALAYOUT_64X16 = (((4, 8, 4), (2, 2, 2)), ((128, 1, 16), (64, 8, 512)))
"""Same file: ALayout_64x16, (thread, value) -> m + 64 * k for 16-bit A in registers."""

# endregion

# region wgmma accumulator D [P#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16]

# (thread, d index, row, col), read off Figure 149 "WGMMA .m64nNk16 register fragment layout for accumulator
# matrix D": rows 0-15 belong to warp 0 (16-31 warp 1, ...), four threads per row, each holding two adjacent
# columns; the first 8 columns of row 0 read T0:d0 T0:d1 T1:d0 T1:d1 T2:d0 T2:d1 T3:d0 T3:d1, row 8 holds d2/d3,
# columns 8-15 hold d4/d5 (row 0) and d6/d7 (row 8).
ACCUMULATOR_FIGURE = [
    (0, 0, 0, 0), (0, 1, 0, 1), (1, 0, 0, 2), (1, 1, 0, 3), (2, 0, 0, 4), (3, 1, 0, 7),
    (0, 2, 8, 0), (0, 3, 8, 1), (3, 3, 8, 7),
    (0, 4, 0, 8), (0, 5, 0, 9), (0, 6, 8, 8), (0, 7, 8, 9), (3, 5, 0, 15), (3, 7, 8, 15),
    (4, 0, 1, 0), (7, 1, 1, 7), (28, 0, 7, 0), (31, 1, 7, 7), (31, 3, 15, 7),
    (32, 0, 16, 0), (63, 3, 31, 7), (64, 0, 32, 0), (96, 0, 48, 0), (127, 7, 63, 15),
]


@pytest.mark.parametrize("thread, v, row, col", ACCUMULATOR_FIGURE)
def test_accumulator_matches_figure_149(thread, v, row, col):
    """[P#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16], Figure 149."""
    assert tuple(map(int, F.accumulator_coords(v, thread))) == (row, col)


@pytest.mark.parametrize("n", [8, 64, 256])
def test_accumulator_last_elements_match_the_table(n):
    """Same section, table "Accumulator D": elements d0 ... dX, dY, dZ, dW with X = N/2-4 ... W = N/2-1; the
    figure puts T0's dX, dY at row 0 and dZ, dW at row 8 of the last 8-column block."""
    x = n // 2 - 4
    got = [tuple(map(int, F.accumulator_coords(v, 0))) for v in range(x, x + 4)]
    assert got == [(0, n - 8), (0, n - 7), (8, n - 8), (8, n - 7)]


def test_accumulator_rows_0_and_8_are_threads_0_to_3():
    """Colfax Research, "Delivering 1 PFLOP/s ... FP8 FlashAttention-2" (2024), reading Figure 149: rows 0 and 8,
    columns 0-15 are divided evenly among threads 0-3, contiguous in each thread's d index."""
    t, v = np.meshgrid(np.arange(4), np.arange(8), indexing="ij")
    rows, cols = F.accumulator_coords(v, t)
    assert set(zip(rows.ravel().tolist(), cols.ravel().tolist())) == {(r, c) for r in (0, 8) for c in range(16)}


def test_accumulator_is_the_mma_m16n8_fragment_per_warp_and_8_columns():
    """[P#warp-level-matrix-fragment-mma-16816-float] (mma.m16n8k16 accumulators, printed formulas):
    row = groupID (+8 for c2, c3), col = threadID_in_group * 2 + (i & 1); Figure 149 repeats that 16x8 tile for
    each warp (16 rows each) and each 8 columns, d[4j + i] = c_i of column block j."""
    for n in (8, 16, 256):
        for thread in range(128):
            warp, lane = divmod(thread, 32)
            group, tig = divmod(lane, 4)
            for v in range(n // 2):
                block, i = divmod(v, 4)
                expected = (16 * warp + group + (8 if i >= 2 else 0), 8 * block + tig * 2 + (i & 1))
                assert tuple(map(int, F.accumulator_coords(v, thread))) == expected


@pytest.mark.parametrize("n", [8, 16, 64, 136, 256])
def test_accumulator_matches_cutlass_clayout(n):
    """CUTLASS CLayout_64xN evaluated by hand: (thread, value) -> m + 64 n; all threads and values at once."""
    t, v = np.meshgrid(np.arange(128), np.arange(n // 2), indexing="ij")
    rows, cols = F.accumulator_coords(v, t)
    layout = clayout_64xn(n)
    expected = np.array([[cute(layout, ti, vi) for vi in range(n // 2)] for ti in range(128)])
    np.testing.assert_array_equal(rows + 64 * cols, expected)


def test_accumulator_refuses_threads_outside_the_warpgroup():
    """[P#asynchronous-warpgroup-level-matrix-instructions-warpgroup]: a warpgroup has 4 warps = 128 threads."""
    with pytest.raises(ValueError, match="thread"):
        F.accumulator_coords(0, 128)


# endregion

# region wgmma A in registers [P#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16]

# (thread, element a_j, row, k), read off Figure 148 "WGMMA .m64nNk16 register fragment layout for matrix A";
# element a_j is register j // 2, half j % 2 (elements low to high: a0, a1 in the first .f16x2 register).
A_FIGURE = [
    (0, 0, 0, 0), (0, 1, 0, 1), (0, 2, 8, 0), (0, 3, 8, 1), (0, 4, 0, 8), (0, 5, 0, 9), (0, 6, 8, 8),
    (0, 7, 8, 9), (1, 0, 0, 2), (3, 7, 8, 15), (4, 0, 1, 0), (31, 6, 15, 14), (32, 0, 16, 0), (127, 7, 63, 15),
]


@pytest.mark.parametrize("thread, j, row, k", A_FIGURE)
def test_a_fragment_matches_figure_148(thread, j, row, k):
    """[P#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16], Figure 148."""
    assert tuple(map(int, F.a_fragment_coords(j // 2, j % 2, thread))) == (row, k)


def test_a_fragment_is_the_mma_m16n8k16_a_fragment_per_warp():
    """[P#warp-level-matrix-fragment-mma-16816-float], multiplicand A .f16/.bf16, printed formulas:
    row = groupID for a_i with 0 <= i < 2 or 4 <= i < 6, else groupID + 8; col = threadID_in_group * 2 + (i & 1),
    + 8 for i >= 4; each warp of the warpgroup owns 16 rows (Figure 148)."""
    for thread in range(128):
        warp, lane = divmod(thread, 32)
        group, tig = divmod(lane, 4)
        for i in range(8):
            row = group if (i < 2 or 4 <= i < 6) else group + 8
            col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
            assert tuple(map(int, F.a_fragment_coords(i // 2, i % 2, thread))) == (16 * warp + row, col)


def test_a_fragment_matches_cutlass_alayout():
    """CUTLASS ALayout_64x16 evaluated by hand; value v = 2 * register + half."""
    t, v = np.meshgrid(np.arange(128), np.arange(8), indexing="ij")
    rows, ks = F.a_fragment_coords(v // 2, v % 2, t)
    expected = np.array([[cute(ALAYOUT_64X16, ti, vi) for vi in range(8)] for ti in range(128)])
    np.testing.assert_array_equal(rows + 64 * ks, expected)


@pytest.mark.parametrize("k_slice", [0, 1, 3, 7])
def test_accumulator_to_a_repacking_follows_the_cutlass_layouts(k_slice):
    """P.V with P in registers (FlashAttention-3): A register i of K-slice s must hold the P elements at
    (row, 16s + k) of the A element (row, k). Checked with CLayout_64xN and ALayout_64x16 evaluated by hand:
    the accumulator element (thread, value) sits where the A element (thread, 2i + half) must go."""
    sources = F.a_register_sources(k_slice)
    c_layout = clayout_64xn(16 * (k_slice + 1))
    for thread in range(128):
        for i, pair in enumerate(sources):
            for half, v in enumerate(pair):
                a_index = cute(ALAYOUT_64X16, thread, 2 * i + half)
                d_index = cute(c_layout, thread, v)
                assert (d_index % 64, d_index // 64 - 16 * k_slice) == (a_index % 64, a_index // 64)
    assert sources == tuple((8 * k_slice + 2 * i, 8 * k_slice + 2 * i + 1) for i in range(4))


# endregion

# region mma.sync [P#warp-level-matrix-fragment-mma-1688, -mma-16816-float, -mma-16832]


def isa_mma_a(k: int, i: int, lane: int) -> tuple[int, int]:
    """The ISA's printed A formulas: .tf32 (m16n8k8), .f16/.bf16 (m16n8k16), .s8/.u8 (m16n8k32)."""
    g, t = lane >> 2, lane % 4
    if k == 8:
        return (g if i in (0, 2) else g + 8), (t if i in (0, 1) else t + 4)
    if k == 16:
        return (g if (i < 2 or 4 <= i < 6) else g + 8), t * 2 + (i & 1) + (8 if i >= 4 else 0)
    return (g if (i < 4 or 8 <= i < 12) else g + 8), t * 4 + (i & 3) + (16 if i >= 8 else 0)


def isa_mma_b(k: int, i: int, lane: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    if k == 8:
        return (t if i == 0 else t + 4), g
    if k == 16:
        return t * 2 + (i & 1) + (8 if i >= 2 else 0), g
    return t * 4 + (i & 3) + (16 if i >= 4 else 0), g


@pytest.mark.parametrize("k", [8, 16, 32])
def test_mma_fragments_are_the_isa_formulas_and_cover_the_tiles(k):
    per_register = k // 8
    for lane in range(32):
        for i in range(4 * per_register):
            assert tuple(map(int, F.mma_a_fragment_coords(i, lane, k))) == isa_mma_a(k, i, lane)
        for i in range(2 * per_register):
            assert tuple(map(int, F.mma_b_fragment_coords(i, lane, k))) == isa_mma_b(k, i, lane)
    lane, i = np.meshgrid(np.arange(32), np.arange(2 * per_register), indexing="ij")
    rows, cols = F.mma_b_fragment_coords(i, lane, k)
    assert sorted(zip(rows.ravel().tolist(), cols.ravel().tolist())) == [(r, c) for r in range(k) for c in range(8)]


def test_mma_m16n8k16_a_is_warp_0_of_the_wgmma_a_fragment():
    for lane in range(32):
        for i in range(8):
            assert tuple(map(int, F.mma_a_fragment_coords(i, lane, 16))) == \
                tuple(map(int, F.a_fragment_coords(i // 2, i % 2, lane)))


# endregion

# region wgmma shapes, types, warpgroups


def test_warp_rank_and_warpgroups():
    """[P#asynchronous-warpgroup-level-matrix-instructions-warpgroup]: warp-rank =
    (%tid.x + %tid.y * %ntid.x + %tid.z * %ntid.x * %ntid.y) / 32; a warpgroup is four contiguous warps whose
    first warp-rank is a multiple of 4."""
    assert F.warp_rank((37, 1, 0), (64, 2, 1)) == (37 + 64) // 32
    assert F.warp_rank((5, 1, 1), (32, 2, 2)) == (5 + 1 * 32 + 1 * 32 * 2) // 32
    assert list(F.warpgroup_warps(4)) == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="multiple of 4"):
        F.warpgroup_warps(2)


@pytest.mark.parametrize("n, atype, dtype, shape", [
    (8, "bf16", "f32", (64, 8, 16)), (256, "f16", "f16", (64, 256, 16)), (136, "f16", "f32", (64, 136, 16)),
    (64, "tf32", "f32", (64, 64, 8)), (64, "e4m3", "f16", (64, 64, 32)), (48, "s8", "s32", (64, 48, 32)),
    (256, "b1", "s32", (64, 256, 256)),
])
def test_legal_wgmma_shapes(n, atype, dtype, shape):
    """[P#asynchronous-warpgroup-level-matrix-shape] and [-matrix-data-types]: .f16/.bf16 m64nNk16 with
    N = 8..256 step 8, .tf32 k8, .e4m3 k32, .s8 k32 (N 8, 16, 24, 32, 48, ...), .b1 k256."""
    assert F.wgmma_shape(n, atype, dtype) == shape


@pytest.mark.parametrize("n, atype, dtype, message", [
    (64, "bf16", "f16", "f32"),   # bf16 accumulates only in f32
    (64, "tf32", "f16", "f32"),
    (12, "bf16", "f32", "N must"),
    (264, "f16", "f32", "N must"),
    (40, "s8", "s32", "N must"),  # integer N list skips 40
    (64, "f64", "f64", "multiplicand"),
])
def test_illegal_wgmma_shapes(n, atype, dtype, message):
    """Same tables: the rows that are absent are illegal."""
    with pytest.raises(ValueError, match=message):
        F.wgmma_shape(n, atype, dtype)


def test_accumulator_register_counts():
    """[P#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16], table "Accumulator D": .f32 uses
    N/2 registers, .f16 N/4 .f16x2 registers."""
    assert F.accumulator_registers(64, "f32") == 32
    assert F.accumulator_registers(256, "f32") == 128
    assert F.accumulator_registers(64, "f16") == 16


# endregion

# region Matrix descriptor [P#asynchronous-warpgroup-level-matrix-shared-memory-layout-matrix-descriptor]


def test_notes_example_descriptor_decodes_by_the_bit_table():
    """Bit table: 13-0 enc(start), 29-16 enc(LBO), 45-32 enc(SBO), 51-49 base offset, 63-62 swizzle
    (1 = 128-Byte). 0x4000004000010000: bit 62 -> 128B; bits 45-32 = 0x40 -> SBO 64 * 16 = 1024;
    bits 29-16 = 1 -> LBO 16; start 0."""
    value = 0x4000004000010000
    assert (value >> 62, (value >> 32) & 0x3FFF, (value >> 16) & 0x3FFF, value & 0x3FFF) == (1, 0x40, 1, 0)
    assert F.decode_descriptor(value) == F.MatrixDescriptor(0, 16, 1024, 128, 0)
    assert F.encode_descriptor(0, 16, 1024, 128) == value
    assert F.encode_descriptor(1024, 16, 1024, 128) == 0x4000004000010040  # the notes' B operand at smem 1024


@pytest.mark.parametrize("kwargs, value", [
    (dict(start_address=16, lbo=0, sbo=0, swizzle=0), 1 << 0),
    (dict(start_address=2**18 - 16, lbo=0, sbo=0, swizzle=0), 0x3FFF),
    (dict(start_address=0, lbo=16, sbo=0, swizzle=0), 1 << 16),
    (dict(start_address=0, lbo=2**18 - 16, sbo=0, swizzle=0), 0x3FFF << 16),
    (dict(start_address=0, lbo=0, sbo=16, swizzle=0), 1 << 32),
    (dict(start_address=0, lbo=0, sbo=2**18 - 16, swizzle=0), 0x3FFF << 32),
    (dict(start_address=0, lbo=0, sbo=0, swizzle=128, base_offset=1), (1 << 49) | (1 << 62)),
    (dict(start_address=0, lbo=0, sbo=0, swizzle=128, base_offset=7), (7 << 49) | (1 << 62)),
    (dict(start_address=0, lbo=0, sbo=0, swizzle=64), 2 << 62),
    (dict(start_address=0, lbo=0, sbo=0, swizzle=32), 3 << 62),
])
def test_descriptor_fields_sit_where_the_bit_table_says(kwargs, value):
    """Bit table, one field at a time; matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4; swizzle codes
    0 none, 1 128-Byte, 2 64-Byte, 3 32-Byte."""
    assert F.encode_descriptor(**kwargs) == value
    decoded = F.decode_descriptor(value)
    assert (decoded.start_address, decoded.leading_byte_offset, decoded.stride_byte_offset, decoded.swizzle,
            decoded.base_offset) == (kwargs["start_address"], kwargs["lbo"], kwargs["sbo"], kwargs["swizzle"],
                                     kwargs.get("base_offset", 0))


@pytest.mark.parametrize("lbo, sbo, enc_lbo, enc_sbo", [
    (64 * 4, 32 * 4, 16, 8),      # K-major, no swizzle, tf32
    (128 * 2, 64 * 2, 16, 8),     # MN-major, no swizzle, bf16
    (128 * 2, 256 * 2, 16, 32),   # MN-major, 32B, bf16
    (256 * 2, 512 * 2, 32, 64),   # MN-major, 64B, bf16
])
def test_canonical_layout_examples_encode_as_listed(lbo, sbo, enc_lbo, enc_sbo):
    """[P#asynchronous-warpgroup-level-canonical-layouts], example tables: "Encoding of LBO/SBO in descriptor"."""
    value = F.encode_descriptor(0, lbo, sbo, 0)
    assert ((value >> 16) & 0x3FFF, (value >> 32) & 0x3FFF) == (enc_lbo, enc_sbo)


@pytest.mark.parametrize("kwargs, field", [
    (dict(start_address=8, lbo=16, sbo=16, swizzle=0), "start_address"),
    (dict(start_address=2**18, lbo=16, sbo=16, swizzle=0), "start_address"),
    (dict(start_address=-16, lbo=16, sbo=16, swizzle=0), "start_address"),
    (dict(start_address=0, lbo=24, sbo=16, swizzle=0), "leading_byte_offset"),
    (dict(start_address=0, lbo=16, sbo=2**18 + 16, swizzle=0), "stride_byte_offset"),
    (dict(start_address=0, lbo=16, sbo=16, swizzle=16), "swizzle"),
    (dict(start_address=0, lbo=16, sbo=16, swizzle=128, base_offset=8), "base_offset"),
    (dict(start_address=0, lbo=16, sbo=16, swizzle=0, base_offset=1), "base_offset"),
])
def test_descriptor_refuses_what_the_fields_cannot_hold(kwargs, field):
    """14-bit fields of 16-byte units from an 18-bit value; 3-bit base offset, "valid for all swizzling modes
    except the no-swizzle mode"."""
    with pytest.raises(ValueError, match=field):
        F.encode_descriptor(**kwargs)


def test_decode_refuses_bits_outside_the_fields():
    """Bit table: only the listed fields exist; e.g. bit 46 (set by Blackwell tcgen05 descriptors) is not one."""
    with pytest.raises(ValueError, match="undefined bits"):
        F.decode_descriptor(0x4000004000010000 | (1 << 46))


@pytest.mark.parametrize("start, mode, base", [
    (0, 128, 0), (1024, 128, 0), (4096, 128, 0), (128, 128, 1), (1024 + 7 * 128, 128, 7), (512, 64, 0),
    (640, 64, 5), (256, 32, 0), (128, 32, 1), (384, 0, 0),
])
def test_descriptor_base_offset(start, mode, base):
    """Descriptor section: base offset 0 when the pattern starts on a 1024/512/256-byte boundary
    (128/64/32-byte swizzle), else (pattern start addr >> 0x7) & 0x7."""
    assert F.descriptor_base_offset(start, mode) == base


def test_buffer_alignments():
    """Descriptor section (repeating pattern boundaries 1024/512/256); start address is encoded in 16-byte units."""
    assert [F.swizzled_buffer_alignment(m) for m in (128, 64, 32, 0)] == [1024, 512, 256, 16]
    assert F.TMA_SMEM_ALIGNMENT == 128


def test_swizzle_codes_differ_between_descriptor_and_tensor_map():
    """Descriptor bits 63-62: 0 none, 1 128-Byte, 2 64-Byte, 3 32-Byte; [DRV] CUtensorMapSwizzle:
    NONE = 0, 32B, 64B, 128B numbered in order."""
    assert [F.descriptor_swizzle_code(m) for m in (0, 32, 64, 128)] == [0, 3, 2, 1]
    assert [int(F.tensor_map_swizzle(m)) for m in (0, 32, 64, 128)] == [0, 1, 2, 3]


# endregion

# region Canonical layouts [P#asynchronous-warpgroup-level-canonical-layouts]


def canonical(major: str, w: int, t: int, lbo: int, sbo: int, m: int, k: int):
    """The table "Canonical Layout without swizzling" in elements (T = 128 / element bits), W = swizzle bytes."""
    x = w // 16  # 16-byte chunks per swizzle row: 1/2/4/8
    if major == "MN":
        if w == 0:
            return (((t, 1, m), (8, k)), ((1, t, sbo), (t, lbo)))
        return (((t, x, m), (8, k)), ((1, t, lbo), (x * t, sbo)))
    if w == 0:
        return (((8, m), (t, 2 * k)), ((t, sbo), (1, lbo)))
    return (((8, m), (t, 2 * k)), ((x * t, sbo), (1, t)))


# (major, swizzle bytes, element bytes, LBO bytes, SBO bytes, exact layout or None for the canonical form)
CANONICAL_CASES = [
    ("K", 0, 4, 64 * 4, 32 * 4, (((8, 2), (4, 4)), ((4, 32), (1, 64)))),            # Figure 166, tf32
    ("K", 32, 4, 16, 64 * 4, (((8, 2), (4, 4)), ((8, 64), (1, 4)))),                # Figure 167, tf32
    ("MN", 0, 2, 128 * 2, 64 * 2, (((8, 1, 2), (8, 2)), ((1, 8, 64), (8, 128)))),    # Figure 168, bf16
    ("MN", 32, 2, 128 * 2, 256 * 2, (((8, 2, 2), (8, 2)), ((1, 8, 128), (16, 256)))),  # Figure 169, bf16
    ("MN", 64, 2, 256 * 2, 512 * 2, (((8, 4, 2), (8, 2)), ((1, 8, 256), (32, 512)))),  # Figure 170, bf16
    ("K", 0, 2, 128, 256, None), ("K", 32, 2, 16, 512, None), ("K", 64, 2, 16, 1024, None),
    ("K", 128, 2, 16, 1024, None), ("K", 128, 4, 16, 1024, None), ("MN", 128, 2, 2048, 1024, None),
]


@pytest.mark.parametrize("major, w, e, lbo, sbo, exact", CANONICAL_CASES)
def test_descriptor_addresses_follow_the_canonical_layouts(major, w, e, lbo, sbo, exact):
    """[P#asynchronous-warpgroup-level-canonical-layouts]: the CuTe layout (exact layout of the examples, or the
    table's canonical form with m = 2 repeats) composed with Swizzle<log2(W/16), 4, 3> on the byte address,
    over one wgmma's K (32 bytes) and two MN repeats; the buffer starts at 2048 (on every swizzle period)."""
    t = 16 // e
    layout = exact or canonical(major, w, t, lbo // e, sbo // e, 2, 2)
    k_extent = 32 // e
    mn_extent = 16 if major == "K" else 2 * max(w, 16) // e
    start = 2048
    desc = F.encode_descriptor(start, lbo, sbo, w)
    mn, k = np.meshgrid(np.arange(mn_extent), np.arange(k_extent), indexing="ij")
    got = F.descriptor_element_address(desc, major, e, mn, k)
    bits = {0: 0, 32: 1, 64: 2, 128: 3}[w]
    expected = np.array([[cute_swizzle(bits, 4, 3, start + e * cute(layout, i, j)) for j in range(k_extent)]
                         for i in range(mn_extent)])
    np.testing.assert_array_equal(got, expected)


def test_sw128_k_major_bf16_tile_is_8_rows_of_128_bytes():
    """Notes section 3 and the swizzling table: a TMA box of 64 bf16 x rows with SWIZZLE_128B lands as 128-byte
    rows; the K-major SW128 descriptor (SBO 1024) reads row r, element k at chunk (k*2/16) ^ (r % 8)."""
    desc = F.encode_descriptor(0, 16, 1024, 128)
    for r in range(16):
        for kk in range(16):
            chunk = (kk * 2 // 16) ^ (r % 8)
            assert int(F.descriptor_element_address(desc, "K", 2, r, kk)) == r * 128 + chunk * 16 + (kk * 2) % 16


# endregion

# region Swizzle [P#tensor-swizzling-modes]

# The tables of section 5.5.7, one row per 128-byte line, entry = 16-byte chunk; "... Pattern repeats ...".
SWIZZLE_TABLES = {
    32: [[0, 1, 2, 3, 4, 5, 6, 7], [1, 0, 3, 2, 5, 4, 7, 6]],
    64: [[0, 1, 2, 3, 4, 5, 6, 7], [1, 0, 3, 2, 5, 4, 7, 6], [2, 3, 0, 1, 6, 7, 4, 5], [3, 2, 1, 0, 7, 6, 5, 4]],
    128: [[0, 1, 2, 3, 4, 5, 6, 7], [1, 0, 3, 2, 5, 4, 7, 6], [2, 3, 0, 1, 6, 7, 4, 5], [3, 2, 1, 0, 7, 6, 5, 4],
          [4, 5, 6, 7, 0, 1, 2, 3], [5, 4, 7, 6, 1, 0, 3, 2], [6, 7, 4, 5, 2, 3, 0, 1], [7, 6, 5, 4, 3, 2, 1, 0]],
    0: [[0, 1, 2, 3, 4, 5, 6, 7]],
}


@pytest.mark.parametrize("mode", [0, 32, 64, 128])
def test_swizzle_matches_the_chunk_tables(mode):
    """[P#tensor-swizzling-modes]: tables for no/32/64/128-byte swizzle (start aligned to 256/512/1024 bytes),
    16-byte chunks kept intact, pattern repeating; checked over four periods and every byte."""
    table = SWIZZLE_TABLES[mode]
    base = 3 * 1024
    for line in range(4 * len(table)):
        for chunk in range(8):
            for byte in (0, 5, 15):
                logical = base + line * 128 + chunk * 16 + byte
                physical = base + line * 128 + table[line % len(table)][chunk] * 16 + byte
                assert F.swizzle_address(logical, mode) == physical


@pytest.mark.parametrize("mode, period", [(0, 1), (32, 256), (64, 512), (128, 1024)])
def test_swizzle_is_a_self_inverse_permutation_of_each_period(mode, period):
    """Same section: the starting-address table (256/512/1024 bytes) is the period; the XOR pattern is a
    bijection on each period and its own inverse."""
    assert F.swizzle_period_bytes(mode) == period
    block = max(period, 1024)
    addresses = np.arange(5 * block, 7 * block)
    swizzled = F.swizzle_address(addresses, mode)
    assert np.array_equal(F.swizzle_address(swizzled, mode), addresses)
    for start in range(5 * block, 7 * block, max(period, 1)):
        assert sorted(swizzled[start - 5 * block:start - 5 * block + period].tolist()) == list(
            range(start, start + period))


def test_128b_swizzle_spreads_a_16_byte_column_over_all_banks():
    """Why the swizzle exists ([P#tensor-swizzling-modes]: "to avoid bank conflicts"): chunk 0 of eight 128-byte
    lines lands in eight different groups of four 4-byte banks."""
    banks = {int(F.bank_of(F.swizzle_address(r * 128, 128))) for r in range(8)}
    assert banks == {0, 4, 8, 12, 16, 20, 24, 28}


def test_swizzle_refuses_unknown_modes():
    with pytest.raises(ValueError, match="swizzle mode"):
        F.swizzle_address(0, 96)


# endregion

# region Tensor maps [DRV]


def test_tensor_map_enum_values():
    """[DRV] cuTensorMapEncodeTiled: CUtensorMapDataType UINT8 = 0, UINT16, UINT32, INT32, UINT64, INT64,
    FLOAT16, FLOAT32, FLOAT64, BFLOAT16, FLOAT32_FTZ, TFLOAT32, TFLOAT32_FTZ (implicit numbering: FLOAT16 6,
    FLOAT32 7, BFLOAT16 9); CUtensorMapInterleave NONE = 0, 16B, 32B; CUtensorMapL2promotion NONE = 0, 64B, 128B,
    256B; CUtensorMapFloatOOBfill NONE = 0, NAN_REQUEST_ZERO_FMA."""
    names = ["UINT8", "UINT16", "UINT32", "INT32", "UINT64", "INT64", "FLOAT16", "FLOAT32", "FLOAT64",
             "BFLOAT16", "FLOAT32_FTZ", "TFLOAT32", "TFLOAT32_FTZ"]
    assert [F.TensorMapDataType[n].value for n in names] == list(range(13))
    assert (F.TensorMapDataType.FLOAT16, F.TensorMapDataType.FLOAT32, F.TensorMapDataType.BFLOAT16) == (6, 7, 9)
    assert [F.TENSOR_MAP_ELEMENT_BYTES[F.TensorMapDataType[n]] for n in names] == [1, 2, 4, 4, 8, 8, 2, 4, 8, 2,
                                                                                   4, 4, 4]
    assert [int(x) for x in F.TensorMapSwizzle] == [0, 1, 2, 3]
    assert [int(x) for x in F.TensorMapInterleave] == [0, 1, 2]
    assert [int(x) for x in F.TensorMapL2Promotion] == [0, 1, 2, 3]
    assert (F.TensorMapFloatOOBFill.NONE, F.TensorMapFloatOOBFill.NAN_REQUEST_ZERO_FMA) == (0, 1)


def _spec(**changes) -> F.TensorMapSpec:
    base = dict(dtype=F.TensorMapDataType.BFLOAT16, global_dims=(128, 4096), global_strides=(256,),
                box_dims=(64, 64), swizzle=F.TensorMapSwizzle.B128, global_address=0x7F0000001000)
    base.update(changes)
    return F.TensorMapSpec(**base)


def test_flash_attention_tensor_map_is_valid():
    """Notes section 3/10: bf16, head dim 128 as two 64-element boxes of 64 rows, SWIZZLE_128B: 128-byte box
    rows (= the swizzle span), 8192 bytes per box (the sanity kernel expects 2 boxes = 16384 bytes)."""
    spec = _spec()
    spec.validate()
    assert spec.box_bytes == 8192
    _spec(global_dims=(64, 3, 5, 7, 9), global_strides=(128, 384, 1920, 13440), box_dims=(64, 1, 1, 1, 1)).validate()
    assert _spec(element_strides=(1, 2), box_dims=(64, 63)).box_bytes == 64 * 2 * 32


@pytest.mark.parametrize("changes, message", [
    (dict(global_dims=(), global_strides=(), box_dims=()), "tensorRank"),
    (dict(global_dims=(16,) * 6, global_strides=(256,) * 5, box_dims=(8,) * 6), "tensorRank"),
    (dict(interleave=F.TensorMapInterleave.B16), "tensorRank"),
    (dict(global_strides=()), "globalStrides needs"),
    (dict(global_address=0x7F0000001008), "globalAddress"),
    (dict(global_dims=(128, 0)), "globalDim"),
    (dict(global_dims=(128, 2**32 + 1)), "globalDim"),
    (dict(global_strides=(264,)), "globalStrides must"),
    (dict(global_strides=(2**40,)), "globalStrides must"),
    (dict(box_dims=(64, 257)), "boxDim must"),
    (dict(box_dims=(64, 0)), "boxDim must"),
    (dict(box_dims=(4, 64), swizzle=F.TensorMapSwizzle.NONE), "multiple of 16"),
    (dict(box_dims=(128, 64)), "<= 128"),
    (dict(box_dims=(32, 64), swizzle=F.TensorMapSwizzle.B32), "<= 32"),
    (dict(element_strides=(1, 9)), "elementStrides"),
    (dict(element_strides=(0, 1)), "elementStrides"),
    (dict(dtype=F.TensorMapDataType.UINT8, box_dims=(64, 64), oob_fill=F.TensorMapFloatOOBFill.NAN_REQUEST_ZERO_FMA),
     "NAN_REQUEST_ZERO_FMA"),
])
def test_tensor_map_rules(changes, message):
    """[DRV] cuTensorMapEncodeTiled requirements: tensorRank 1..5 (>= 3 with interleave); globalAddress 16-byte
    aligned; globalDim non-zero, <= 2^32; globalStrides multiples of 16, < 2^40; boxDim non-zero, <= 256, boxDim[0]
    * elementSize a multiple of 16 bytes; with a swizzle the inner box dimension <= the swizzle span;
    elementStrides 1..8; NAN_REQUEST_ZERO_FMA only for floating-point types."""
    with pytest.raises(ValueError, match=message):
        _spec(**changes).validate()


def test_tensor_map_interleave_32b_needs_swizzle_32b():
    """[DRV]: "When interleave is CU_TENSOR_MAP_INTERLEAVE_32B, swizzle must be CU_TENSOR_MAP_SWIZZLE_32B"."""
    spec = _spec(global_dims=(16, 8, 8), global_strides=(32, 256), box_dims=(16, 8, 8),
                 interleave=F.TensorMapInterleave.B32, swizzle=F.TensorMapSwizzle.B64)
    with pytest.raises(ValueError, match="SWIZZLE_32B"):
        spec.validate()


# endregion

# region mbarrier [P#parallel-synchronization-and-communication-instructions-mbarrier]


def test_init_and_a_phase_of_arrivals():
    """mbarrier.init: phase 0, expected = pending = count, tx-count 0. Phase completion: pending reached zero and
    tx-count zero -> next phase, pending reinitialised to the expected count. try_wait.parity P is True for the
    completed immediately preceding phase (parity != current phase's)."""
    bar = F.MBarrierState()
    bar.init(3)
    assert (bar.phase, bar.pending, bar.expected, bar.tx_count) == (0, 3, 3, 0)
    assert bar.try_wait_parity(1) and not bar.try_wait_parity(0)  # CUTLASS producer start state passes at once
    bar.arrive()
    bar.arrive(count=1)
    assert (bar.phase, bar.pending) == (0, 1) and not bar.try_wait_parity(0)
    bar.arrive()
    assert (bar.phase, bar.pending) == (1, 3)
    assert bar.try_wait_parity(0) and not bar.try_wait_parity(1)


def test_parity_loop_example():
    """test_wait/try_wait section, "Example 2, thread synchronization using phase parity": iteration i waits
    with parArg = i & 1 after the N arrivals of phase i."""
    n, bar = 4, F.MBarrierState()
    bar.init(n)
    for i in range(6):
        assert not bar.try_wait_parity(i & 1)
        for _ in range(n):
            bar.arrive()
        assert bar.try_wait_parity(i & 1)
    assert bar.phase == 6


def test_tma_transaction_bytes_complete_the_phase():
    """Tracking asynchronous operations: arrive.expect_tx performs expect-tx before the arrive-on; each copy's
    complete-tx decrements tx-count; the phase completes only when both counts are zero."""
    bar = F.MBarrierState()
    bar.init(1)
    assert bar.arrive_expect_tx(16384) == 0
    assert (bar.phase, bar.pending, bar.tx_count) == (0, 0, 16384)
    bar.complete_tx(8192)
    assert bar.phase == 0 and not bar.try_wait_parity(0)
    bar.complete_tx(8192)
    assert (bar.phase, bar.pending, bar.tx_count) == (1, 1, 0) and bar.try_wait_parity(0)


def test_copy_completing_before_its_expect_tx():
    """tx-count ranges over -(2^20-1)..2^20-1: a complete-tx before the expect-tx leaves it negative and the
    phase open until the arrive.expect_tx."""
    bar = F.MBarrierState()
    bar.init(1)
    bar.complete_tx(100)
    assert (bar.phase, bar.tx_count) == (0, -100)
    bar.arrive_expect_tx(100)
    assert (bar.phase, bar.tx_count) == (1, 0)


def test_test_wait_with_an_arrive_state():
    """test_wait/try_wait with `state`: valid for the current (False) and the immediately preceding (True) phase."""
    bar = F.MBarrierState()
    bar.init(1)
    state = bar.arrive()
    assert state == 0 and bar.test_wait(state)
    bar.arrive()
    with pytest.raises(ValueError, match="preceding"):
        bar.test_wait(state)


@pytest.mark.parametrize("action, message", [
    (lambda b: b.init(0), "init count"),
    (lambda b: b.init(2**20), "init count"),
    (lambda b: b.arrive(3), "exceeds"),
    (lambda b: b.expect_tx(2**20), r"expect_tx count"),
    (lambda b: (b.expect_tx(2**20 - 1), b.expect_tx(1)), "outside"),
    (lambda b: (b.complete_tx(2**20 - 1), b.complete_tx(1)), "outside"),
    (lambda b: b.try_wait_parity(2), "phaseParity"),
])
def test_mbarrier_limits(action, message):
    """Contents of the mbarrier object: expected count 1..2^20-1, pending 0..2^20-1, tx-count +-(2^20-1);
    phaseParity 0 or 1."""
    bar = F.MBarrierState()
    bar.init(2)
    with pytest.raises(ValueError, match=message):
        action(bar)
    F.MBarrierState().init(2**20 - 1)


def test_mbarrier_used_before_init():
    with pytest.raises(ValueError, match="before mbarrier.init"):
        F.MBarrierState().arrive()


# endregion

# region shfl.sync [P#data-movement-and-conversion-instructions-shfl-sync]

LANES = np.arange(32)


@pytest.mark.parametrize("mode, b, c, lanes, sources, valid", [
    ("bfly", 1, 0x1F, [0, 1, 6, 31], [1, 0, 7, 30], [1, 1, 1, 1]),
    ("bfly", 2, 0x1F, [5, 29], [7, 31], [1, 1]),
    ("up", 1, 0x0, [0, 5, 31], [0, 4, 30], [0, 1, 1]),
    ("down", 1, 0x1F, [30, 31], [31, 31], [1, 0]),
    ("idx", 0, 0x1F, [0, 17, 31], [0, 0, 0], [1, 1, 1]),
    ("idx", 35, 0x1F, [9], [3], [1]),                    # b out of range: bval = b[4:0] = 3, still valid
    ("down", 33, 0x1F, [3, 31], [4, 31], [1, 0]),       # bval = 33 & 31 = 1
    ("down", 1, 0x181F, [6, 7, 15, 30], [7, 7, 15, 31], [1, 0, 0, 1]),   # width 8: c = (24 << 8) | 0x1f
    ("up", 1, 0x1800, [8, 9, 16, 17], [8, 8, 16, 16], [0, 1, 0, 1]),     # width 8 up: c = 24 << 8
    ("idx", 3, 0x181F, [13, 0, 31], [11, 3, 27], [1, 1, 1]),
    # segmask 0x1c, clamp 3: lane 1 has maxLane 3 and j = 5 -> own value; lane 5 has maxLane 7 and j = 1 <= 7,
    # so it reads lane 1 (p true) although lane 1 lies in another 4-lane segment
    ("bfly", 4, 0x1C03, [1, 2, 5], [1, 2, 1], [0, 0, 1]),
])
def test_shfl_source_lane_hand_worked(mode, b, c, lanes, sources, valid):
    """Semantics pseudo-code: bval = b[4:0], cval = c[4:0], segmask = c[12:8];
    maxLane = (lane & segmask) | (cval & ~segmask); minLane = lane & segmask; up j = lane - bval, p = j >= maxLane;
    down j = lane + bval, p = j <= maxLane; bfly j = lane ^ bval, p = j <= maxLane; idx j = minLane |
    (bval & ~segmask), p = j <= maxLane; !p -> j = lane. Each row worked by hand, e.g. width-8 down at lane 7:
    maxLane = (7 & 0x18) | (0x1f & 7) = 7, j = 8 > 7 -> own value, p false."""
    got_sources, got_valid = F.shfl_source_lane(mode, np.array(lanes), b, c)
    assert got_sources.tolist() == sources
    assert got_valid.astype(int).tolist() == valid


def test_shfl_row_max_butterfly():
    """Notes section 6: a row's four lanes 4g..4g+3 reduce with bfly 1 then bfly 2 (full-warp c = 0x1f)."""
    values = np.arange(32) * 3 % 11
    m = values.copy()
    for b in (1, 2):
        other, _ = F.shfl_sync(m, "bfly", b, 0x1F)
        m = np.maximum(m, other)
    assert m.tolist() == [max(values[4 * (lane // 4):4 * (lane // 4) + 4]) for lane in range(32)]


# endregion

# region Named barriers, registers, setmaxnreg


@pytest.mark.parametrize("barrier, threads, arrive", [(0, None, False), (15, 128, True), (1, 384, False)])
def test_named_barriers_accepted(barrier, threads, arrive):
    """[P#parallel-synchronization-and-communication-instructions-bar]: barriers 0..15; thread count a multiple of
    the warp size; omitted = all threads of the CTA."""
    F.check_named_barrier(barrier, threads, 384, arrive=arrive)


@pytest.mark.parametrize("barrier, threads, arrive, message", [
    (16, 128, False, "id"), (-1, 128, False, "id"), (1, 100, False, "multiple"), (1, 0, False, "multiple"),
    (1, 416, False, "exceeds"), (2, None, True, "bar.arrive"),
])
def test_named_barriers_refused(barrier, threads, arrive, message):
    """Same section (ptxas rejects `bar.sync 1, 100` and id 16, notes section 6); "a non-zero thread count is
    required for barrier{.cta}.arrive"."""
    with pytest.raises(ValueError, match=message):
        F.check_named_barrier(barrier, threads, 384, arrive=arrive)


def test_setmaxnreg_rules():
    """[P#miscellaneous-instructions-setmaxnreg]: imm-reg-count in 24..256, a multiple of 8; .dec from a count
    >= the operand, .inc from a count <= the operand."""
    for n in (24, 240, 256):
        F.check_setmaxnreg("inc", n)
    for n in (16, 23, 100, 257, 264):
        with pytest.raises(ValueError, match="multiple of 8"):
            F.check_setmaxnreg("dec", n)
    F.check_setmaxnreg("dec", 24, current=168)
    F.check_setmaxnreg("inc", 240, current=168)
    with pytest.raises(ValueError, match=".dec"):
        F.check_setmaxnreg("dec", 240, current=168)
    with pytest.raises(ValueError, match=".inc"):
        F.check_setmaxnreg("inc", 24, current=168)


def test_register_file():
    """CUDA C++ Programming Guide, compute capability 9.0: 64K 32-bit registers per SM, at most 255 per thread."""
    assert (F.REGISTERS_PER_SM, F.MAX_REGISTERS_PER_THREAD, F.REGISTER_ALLOCATION_UNIT) == (65536, 255, 256)


@pytest.mark.parametrize("counts, threads", [
    ([24, 240, 240], 384),        # FlashAttention-3 hopper/flash_fwd_kernel_sm90.h, two MMA warpgroups, TMA K/V
    ([40, 232, 232], 384),        # the same with cp.async K/V; CUTLASS's sm90 warp-specialized GEMMs (40/232)
    ([32, 160, 160, 160], 512),   # FlashAttention-3, three MMA warpgroups
    ([56, 256], 256),             # FlashAttention-3, one MMA warpgroup
    ([144, 144, 144], 384),       # Tessera's FP8 head_dim 64: ptxas then gives 144 at entry (its largest .inc)
])
def test_register_splits_of_kernels_that_run(counts, threads):
    """[P#miscellaneous-instructions-setmaxnreg]: "A pool of available registers is maintained per-CTA" and
    `setmaxnreg.inc` "blocks the execution until enough registers are available in the CTA's register pool". The
    splits of FlashAttention-3 and CUTLASS, which run on H100s, fill the registers the CTA owns at entry exactly
    (3 x 168 at 384 threads, 4 x 128 at 512), never the SM's 65536."""
    F.check_register_budget(counts, 128, threads)


@pytest.mark.parametrize("counts, threads", [
    ([160, 176, 176], 384),  # the FP8 head_dim 128 kernel that hung on the H200: 65536 of the CTA's 64512
    ([112, 200, 200], 384),  # FP8 head_dim 256, the same way
    ([24, 248, 248], 384),
    ([256, 256, 24], 384),
    ([40, 160, 160, 160], 512),
])
def test_register_splits_that_wait_forever(counts, threads):
    with pytest.raises(ValueError, match="wait forever"):
        F.check_register_budget(counts, 128, threads)


def test_registers_at_entry_are_ptxas_counts(ptxas):
    """`registers_at_entry` against ptxas itself (no GPU needed): the "Used N registers" of a kernel with a
    setmaxnreg split at its launch bounds is what every warp owns when it starts, and so what the CTA's pool
    holds (FlashAttention-3 sizes its 24/240 split on the 168 of 384 threads)."""
    from setmaxnreg_kernels import bounds, split_kernel
    from tessera import toolchain

    for threads, ctas, inc in ((384, 1, 240), (384, 1, 176), (384, 1, 144), (384, 2, 240), (512, 1, 160),
                               (256, 1, 240), (256, 1, 256), (128, 1, 232), (640, 1, 240)):
        probe = split_kernel(24, inc, True, directives=bounds(threads, ctas))
        used = toolchain.compile_ptx(probe, ptxas=ptxas).entry().registers
        assert used == F.registers_at_entry(threads, ctas, largest_inc=inc), (threads, ctas, inc)


def test_ptxas_compiles_a_wgmma_within_the_registers_at_entry(ptxas):
    """`wgmma_instruction_registers` against ptxas: the 192 x 256 GEMM two stages without a producer (384
    threads, 168 registers at entry, its m64n256k16 needing 128 + 26) assembles; given 512 threads (128 at
    entry), ptxas stops and asks for exactly that count. With A in registers (flash attention's P.V at
    head_dim 256), 4 more (`WGMMA_PTXAS_EXTRA_REGISTERS`)."""
    import tessera
    from tessera import toolchain
    from tessera.kernels import gemm
    from tessera.passes import PIPELINED_PIPELINE

    ptx = tessera.compile(gemm(block_m=192, block_n=256), target="ptx", pipeline=PIPELINED_PIPELINE)
    assert ".reqntid 384, 1, 1" in ptx
    toolchain.compile_ptx(ptx, ptxas=ptxas)
    need = F.wgmma_instruction_registers(F.accumulator_registers(256, "f32"))
    with pytest.raises(toolchain.PtxasError, match=rf"Insufficient registers \(128\).* register target of {need} "):
        toolchain.compile_ptx(ptx.replace(".reqntid 384, 1, 1", ".reqntid 512, 1, 1"), ptxas=ptxas)


# endregion

# region cvt / mov packing [P#data-movement-and-conversion-instructions-cvt, -mov-2]


def test_cvt_bf16x2_puts_a_in_the_upper_half():
    """cvt: "the value converted from input a is stored in the upper half of d and the value converted from
    input b is stored in the lower half". bf16(1.0) = 0x3F80, bf16(2.0) = 0x4000."""
    assert int(F.cvt_rn_x2(np.float32(1.0), np.float32(2.0))) == 0x3F804000
    assert int(F.cvt_rn_x2(np.float32(1.0), np.float32(2.0), "f16")) == 0x3C004000
    assert int(F.cvt_rn_x2(np.float32(1.0), np.float32(1.0))) == 0x3F803F80  # the notes' "two bf16 1.0"


def test_mov_pack_puts_the_first_operand_in_the_low_half():
    """mov: "pack two 16-bit elements into .b32: d = a.x | (a.y << 16)"; unpack {d.x, d.y} = {a[0..15], a[16..31]}.
    Notes section 7: `cvt.rn.bf16x2.f32 pk, e1, e0` equals `mov.b32 pk2, {cvt(e0), cvt(e1)}`."""
    assert int(F.mov_pack_b32(0x4000, 0x3F80)) == 0x3F804000
    lo, hi = F.mov_unpack_b32(np.uint32(0x3F804000))
    assert (int(lo), int(hi)) == (0x4000, 0x3F80)
    # f32 bits 0.3 = 0x3E99999A, 1.7 = 0x3FD9999A, -2.5 = 0xC0200000, 1e-3 = 0x3A83126F; bf16 .rn keeps the high
    # half, rounded up when the low half is above 0x8000: 0x3E9A, 0x3FDA, 0xC020, 0x3A83. cvt puts e1 high.
    e0, e1 = np.float32([0.3, 1.7]), np.float32([-2.5, 1e-3])
    assert [int(x) for x in F.cvt_rn_x2(e1, e0)] == [0xC0203E9A, 0x3A833FDA]
    assert [int(x) for x in F.mov_pack_b32(np.uint32([0x3E9A, 0x3FDA]), np.uint32([0xC020, 0x3A83]))] == \
        [0xC0203E9A, 0x3A833FDA]


@pytest.mark.parametrize("dtype, value, bits", [
    ("bf16", 1.0 + 2.0**-8, 0x3F80),        # tie between 0x3F80 and 0x3F81 -> even
    ("bf16", 1.0 + 3 * 2.0**-8, 0x3F82),    # tie between 0x3F81 and 0x3F82 -> even
    ("bf16", 1.0 + 2.0**-8 + 2.0**-20, 0x3F81),  # above the tie
    ("bf16", -1.0, 0xBF80),
    ("bf16", 3.4e38, 0x7F80),               # above the midpoint of bf16 max 0x7F7F and 2^128 -> +inf
    ("f16", 1.0 + 2.0**-11, 0x3C00),
    ("f16", 1.0 + 3 * 2.0**-11, 0x3C02),
    ("f16", 65520.0, 0x7C00),               # tie between 65504 and 2^16 -> inf (even)
    ("f16", 2.0**-24, 0x0001),              # smallest subnormal kept (no .ftz)
])
def test_cvt_rn_is_round_to_nearest_even(dtype, value, bits):
    """cvt .rn: round to nearest, ties to even; subnormals supported by default. Bit patterns worked by hand from
    the bf16 (1/8/7) and f16 (1/5/10) formats."""
    assert int(F.cvt_rn_bits(np.float32(value), dtype)) == bits
    assert F.half_bits_to_f32(np.uint16(0x3F80), "bf16") == np.float32(1.0)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_half_bits_widen_as_the_format_does(dtype):
    """`half_bits_to_f32` (bf16: the bits shifted up 16) against the format's own widening of every one of the
    65,536 patterns, NaNs included, bit for bit; 0-d arrays stay arrays."""
    import ml_dtypes

    bits = np.arange(1 << 16).astype(np.uint16)
    expected = bits.view(ml_dtypes.bfloat16 if dtype == "bf16" else np.float16).astype(np.float32)
    got = F.half_bits_to_f32(bits, dtype)
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), expected.view(np.uint32))
    assert F.half_bits_to_f32(np.asarray(np.uint16(0x3F80)), dtype).shape == ()


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_cvt_rn_pairs_is_cvt_rn_x2_of_each_pair(dtype):
    """`cvt_rn_pairs` (a fragment's pairs packed by one conversion and a view) is `cvt.rn.x2 d, e1, e0` of each
    pair (e0, e1): e0 in the low half. Random values with ties, infinities, NaNs, signed zeros, subnormals."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((96, 88)).astype(np.float32)
    x.reshape(-1)[:16] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-40, -1e-40, 3.4e38, 65520.0, 1 + 2.0**-8,
                          1 + 3 * 2.0**-8, -(1 + 2.0**-11), 2.0**-24, np.float32(np.nan) * -1, 1.0, -1.0]
    with np.errstate(invalid="ignore"):  # the NaNs' cast
        assert np.array_equal(F.cvt_rn_pairs(x, dtype), F.cvt_rn_x2(x[:, 1::2], x[:, 0::2], dtype))
        assert np.array_equal(F.cvt_rn_pairs(x[::2, 2:12], dtype),
                              F.cvt_rn_x2(x[::2, 3:12:2], x[::2, 2:12:2], dtype))


# endregion


def test_accumulator_thread_terms_are_the_figure_149_layout_over_warpgroups():
    """The code generator's affine form (thread part + element part) reproduces Figure 149 for every thread
    of a 4-warpgroup CTA, with warpgroup w owning rows 64w .. 64w + 63: by the mma.m16n8 formulas
    ([P#warp-level-matrix-fragment-mma-16816-float], groupID = lane >> 2, threadID_in_group = lane % 4), d[0]
    of thread T is at row 64 * (T / 128) + 16 * (T % 128 / 32) + groupID, column 2 * threadID_in_group, and
    element v adds 8 * ((v >> 1) & 1) rows and 8 * (v >> 2) + (v & 1) columns."""
    threads = np.arange(512)
    lane = threads % 32
    row, col = F.accumulator_thread_base(threads)
    np.testing.assert_array_equal(row, 64 * (threads // 128) + 16 * (threads % 128 // 32) + lane // 4)
    np.testing.assert_array_equal(col, 2 * (lane % 4))
    v = np.arange(64)
    v_row, v_col = F.accumulator_coords(v, 0)
    np.testing.assert_array_equal(v_row, 8 * ((v >> 1) & 1))
    np.testing.assert_array_equal(v_col, 8 * (v >> 2) + (v & 1))


def test_descriptor_start_delta_steps_the_start_field_only():
    # PTX ISA "Matrix Descriptor Format": bits 13-0 hold matrix-descriptor-encode(start address) =
    # (address & 0x3FFFF) >> 4. Stepping by d bytes therefore adds d >> 4 to the 64-bit value: the notes'
    # 0x4000004000010000 (start 0, LBO 16, SBO 1024, 128B) at start 1024 + 32 is 0x4000004000010000 + 0x42.
    assert [F.descriptor_start_delta(d) for d in (32, 64, 96, 2048, 4096)] == [2, 4, 6, 128, 256]
    assert F.encode_descriptor(1024 + 32, 16, 1024, 128) == 0x4000004000010042
    assert F.encode_descriptor(0x8400 + 4096, 16, 1024, 128) == 0x4000004000010000 + (0x9400 >> 4)
    for bad in (8, -16, 1 << 18):
        with pytest.raises(ValueError):
            F.descriptor_start_delta(bad)


# region Every constant of tessera/sm90 against its documented value

DOCUMENTED = {
    # [SASS] ptxas compiles cp.async.bulk{.tensor} to the uniform datapath, once per distinct operand set of a
    # warp's lanes (test_bulk_copy_issues_once_per_distinct_operands_of_a_warp checks the SASS)
    "BULK_COPY_ISSUED_PER_DISTINCT_OPERANDS": True,
    # [P#data-movement-and-conversion-instructions-cp-async]: "cp-size = { 4, 8, 16 }", the .cg form's
    # size operand is 16; [P#parallel-synchronization-and-communication-instructions-cp-async-mbarrier-arrive]:
    # with .noinc the asynchronous arrive-on decrements the pending count (one arrival per thread)
    "CP_ASYNC_SIZES": (4, 8, 16),
    "CP_ASYNC_CG_BYTES": 16,
    "CP_ASYNC_NOINC_ARRIVALS": 1,
    # PTX ISA 9.1 [P#asynchronous-warpgroup-level-matrix-shared-memory-layout-matrix-descriptor]:
    # "matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4"
    "DESCRIPTOR_ADDRESS_MASK": 0x3FFFF,
    # [P#parallel-synchronization-and-communication-instructions-mbarrier-size-alignment]: "an opaque object in
    # shared memory with .b64 type ... 8-byte aligned"; [-mbarrier-contents]: expected and pending arrival counts
    # 1 .. 2^20 - 1 (pending 0 .. 2^20 - 1), tx-count -(2^20 - 1) .. 2^20 - 1
    "MBARRIER_BYTES": 8,
    "MBARRIER_MAX_COUNT": 2**20 - 1,
    "MBARRIER_TX_LIMIT": 2**20 - 1,
    # CUDA C++ Programming Guide, "Compute Capability 5.x"+ shared memory (unchanged on 9.0): 32 banks,
    # successive 32-bit words in successive banks
    "SHARED_BANKS": 32,
    "BANK_BYTES": 4,
    # [P#tensor-swizzling-modes]: 16-byte chunks within 128-byte rows; modes none, 32B, 64B, 128B
    "SWIZZLE_CHUNK_BYTES": 16,
    "SWIZZLE_LINE_BYTES": 128,
    "SWIZZLE_MODES": (0, 32, 64, 128),
    # CUDA driver API cuda.h: `typedef struct CUtensorMap_st { alignas(64) cuuint64_t opaque[16]; } CUtensorMap;`
    # (CU_TENSOR_MAP_NUM_QWORDS = 16): 128 bytes, 64-byte aligned; [P#tensor-tensormap] "128-byte opaque object"
    "TENSOR_MAP_BYTES": 16 * 8,
    "TENSOR_MAP_ALIGNMENT": 64,
    # cuTensorMapEncodeTiled (group__CUDA__TENSOR__MEMORY): "tensorRank ... must be non-zero and less than or
    # equal to the maximum supported dimensionality of 5"; "globalDim ... less than or equal to 2^32";
    # "globalStrides ... multiple of 16 and less than 2^40"; "boxDim ... less than or equal to 256";
    # "elementStrides ... less than or equal to 8"; "globalAddress ... aligned 16 byte"
    "TENSOR_MAP_MAX_RANK": 5,
    "TENSOR_MAP_MAX_DIM": 2**32,
    "TENSOR_MAP_STRIDE_LIMIT": 2**40,
    "TENSOR_MAP_MAX_BOX": 256,
    "TENSOR_MAP_MAX_ELEMENT_STRIDE": 8,
    "TENSOR_MAP_GLOBAL_ALIGNMENT": 16,
    # the same page, CUtensorMapDataType sizes (UINT8 ... TFLOAT32_FTZ, in enum order, see test_tensor_map_enum_values)
    "TENSOR_MAP_ELEMENT_BYTES": dict(zip(range(13), [1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4])),
    # CUDA C++ Programming Guide, "Tensor Memory Access": the shared-memory address of a bulk tensor copy must be
    # 128-byte aligned
    "TMA_SMEM_ALIGNMENT": 128,
    # [P#data-movement-and-conversion-instructions-tensormap-replace], the tables of new_val for .elemtype
    # (.u8 .u16 .u32 .s32 .u64 .s64 .f16 .f32 .f32.ftz .f64 .bf16 .tf32 .tf32.ftz from 0), .swizzle_mode (none,
    # 32B, 64B, 128B), .interleave_layout (none, 16B, 32B) and .fill_mode (zero, OOB-NaN), as the CUtensorMap
    # enums they name (UINT8=0 ... INT64=5, FLOAT16=6, FLOAT32=7, FLOAT64=8, BFLOAT16=9, FLOAT32_FTZ=10, TFLOAT32=11,
    # TFLOAT32_FTZ=12); Triton 3.9's TMA_ELEMENT_TYPES numbers them the ISA's way
    "TENSORMAP_REPLACE_ELEMTYPE": dict(zip(range(13), [0, 1, 2, 3, 4, 5, 6, 7, 10, 8, 9, 11, 12])),
    "TENSORMAP_REPLACE_SWIZZLE": {0: 0, 1: 1, 2: 2, 3: 3},
    "TENSORMAP_REPLACE_INTERLEAVE": {0: 0, 1: 1, 2: 2},
    "TENSORMAP_REPLACE_FILL": {0: 0, 1: 1},
    # [P#special-registers-laneid] %laneid 0..31; [P#parallel-synchronization-and-communication-instructions-bar]
    # "barriers 0..15"; [P#data-movement-and-conversion-instructions-shfl-sync] .mode = {.up, .down, .bfly, .idx}
    "WARP_SIZE": 32,
    "NAMED_BARRIERS": 16,
    "SHFL_MODES": ("up", "down", "bfly", "idx"),
    # CUDA C++ Programming Guide, "Technical Specifications per Compute Capability", 9.0: 227 KB of shared memory
    # per thread block, 64K 32-bit registers per SM, 255 registers per thread; grid x 2^31-1, y and z 65535;
    # block x and y 1024, z 64; 1024 threads per block
    "MAX_SHARED_MEMORY_PER_BLOCK": 227 * 1024,
    "REGISTERS_PER_SM": 64 * 1024,
    "MAX_REGISTERS_PER_THREAD": 255,
    # the CUDA Occupancy Calculator's compute capability 9.0 data: "register allocation unit size 256", granularity
    # "warp" (ptxas' counts at launch bounds are multiples of 8: test_registers_at_entry_are_ptxas_counts)
    "REGISTER_ALLOCATION_UNIT": 256,
    # not in NVIDIA's documentation: ptxas' sm_90a SASS names UR0-UR62 and URZ, never UR63
    # (tests/test_uniform_descriptors.py::test_uniform_register_file_against_sass)
    "UNIFORM_REGISTERS_PER_WARP": 63,
    "MAX_GRID_DIMS": (2**31 - 1, 65535, 65535),
    "MAX_BLOCK_DIMS": (1024, 1024, 64),
    "MAX_THREADS_PER_BLOCK": 1024,
    # [P#miscellaneous-instructions-setmaxnreg]: "imm-reg-count ... in the range 24 to 256 (both inclusive)" and
    # "a multiple of 8"
    "SETMAXNREG_MIN": 24,
    "SETMAXNREG_MAX": 256,
    "SETMAXNREG_STEP": 8,
    # [P#asynchronous-warpgroup-level-matrix-instructions-warpgroup]: four contiguous warps, 128 threads;
    # [-matrix-shape]: m64nNkK, K spanning 32 bytes (k16 .f16/.bf16, k8 .tf32, k32 8-bit, k256 .b1)
    "WARPS_PER_WARPGROUP": 4,
    "WARPGROUP_SIZE": 128,
    "WGMMA_M": 64,
    # [-instructions-wgmma-mma-async]: "The transpose operation is only supported for the wgmma.mma_async variants
    # with .f16/.bf16 types on matrices accessed from shared memory using matrix descriptors."
    "WGMMA_TRANSPOSE_TYPES": ("f16", "bf16"),
    # [-instructions-wgmma-mma-async], syntax: the 8-bit floating-point form takes ".atype = .btype" from
    # "{.e4m3, .e5m2}" each on its own (".f32.e5m2.e4m3" is a wgmma), the integer form "{.s8, .u8}" each on its own;
    # .f16/.bf16/.tf32/.b1 take one type for both
    "WGMMA_MIXED_TYPES": (frozenset(("e4m3", "e5m2")), frozenset(("u8", "s8"))),
    "WGMMA_K_BYTES": 32,
    "WGMMA_ELEMENT_BITS": {"f16": 16, "bf16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "u8": 8, "s8": 8, "b1": 1},
    # [-matrix-data-types], table "dense wgmma": f16 -> .f16/.f32; bf16, tf32 -> .f32; e4m3/e5m2 -> .f16/.f32;
    # u8/s8/b1 -> .s32
    "WGMMA_ACCUMULATOR_TYPES": {"f16": ("f16", "f32"), "bf16": ("f32",), "tf32": ("f32",), "e4m3": ("f16", "f32"),
                                "e5m2": ("f16", "f32"), "u8": ("s32",), "s8": ("s32",), "b1": ("s32",)},
    # [-register-fragment-wgmma-64n16], Figure 148: a0..a3, four .f16x2 registers of A per thread
    "A_FRAGMENT_REGISTERS": 4,
    # not in NVIDIA's documentation: ptxas 13.0's "register target" of its C7602 refusal of an m64nNk16 wgmma at a
    # kernel's launch bounds, N/2 + 26 (A in shared memory) and N/2 + 4 + 26 (in registers), for N = 160 to 256
    # (test_ptxas_compiles_a_wgmma_within_the_registers_at_entry)
    "WGMMA_PTXAS_EXTRA_REGISTERS": 26,
    # [-register-fragment-wgmma-64n16], Figures 148 and 149: warp 0 of the warpgroup holds rows 0-15 of A and D,
    # warp 1 rows 16-31, warp 2 rows 32-47, warp 3 rows 48-63
    "WGMMA_ROWS_PER_WARP": 16,
    # [P#warp-level-matrix-instructions-mma], its table of shapes and types: .m16n8k8 .tf32 into .f32;
    # .m16n8k16 .f16 (.dtype = .ctype = .f16 or .f32) or .bf16 (.f32 only); .m16n8k32 .s8/.u8 into .s32; all
    # "mma.sync.aligned.shape.row.col"; ptxas 13.5: ".dtype must be .f16 when .ctype is .f16 for mma with shape
    # .m16n8k16" (and .f32 with .f32). Elements: .tf32 32 bits, .f16/.bf16 16, .s8/.u8 8 [P#...-data-types]
    "MMA_SYNC_M": 16,
    "MMA_SYNC_N": 8,
    "MMA_SYNC_TYPES": {("m16n8k8", "f32", "tf32"), ("m16n8k16", "f32", "f16"), ("m16n8k16", "f16", "f16"),
                       ("m16n8k16", "f32", "bf16"), ("m16n8k32", "s32", "s8"), ("m16n8k32", "s32", "u8")},
    "MMA_SYNC_ELEMENT_BITS": {"tf32": 32, "f16": 16, "bf16": 16, "s8": 8, "u8": 8},
    "MMA_SYNC_LAYOUT": ("row", "col"),
    # Figure 149 as (divisor, modulus, multiplier) terms: row 16 * (T / 32) + (T % 32) / 4 (the warpgroup's 64 rows
    # follow from T / 32 counting its warps), column 2 * (T % 4)
    "ACCUMULATOR_THREAD_TERMS": {"row": ((32, 0, 16), (4, 8, 1)), "col": ((1, 4, 2),)},
    # CUDA C++ Programming Guide, "Thread Block Clusters": "a maximum of 8 thread blocks in a cluster is supported
    # as a portable cluster size"; H100 allows 16 with cudaFuncAttributeNonPortableClusterSizeAllowed
    "MAX_PORTABLE_CLUSTER_SIZE": 8,
    "MAX_NONPORTABLE_CLUSTER_SIZE": 16,
    # [P#data-movement-and-conversion-instructions-cp-async-bulk-tensor]: "ctaMask ... a 16-bit CTA mask"
    "MULTICAST_MASK_BITS": 16,
    # [P#special-registers]: %cluster_ctarank, %cluster_nctarank, %cluster_ctaid, %cluster_nctaid, %clusterid,
    # %nclusterid (the last four .v4.u32, read per component)
    "CLUSTER_SPECIAL_REGISTERS": ("cluster_ctarank", "cluster_nctarank", "cluster_ctaid.x", "cluster_ctaid.y",
                                  "cluster_ctaid.z", "cluster_nctaid.x", "cluster_nctaid.y", "cluster_nctaid.z",
                                  "clusterid.x", "clusterid.y", "clusterid.z", "nclusterid.x", "nclusterid.y",
                                  "nclusterid.z"),
    # cvt to .tf32 (tessera/sm90/tf32.py): the 13 f32 mantissa bits below a tf32's 10 (the ISA's "8 exponent,
    # >= 10 mantissa bits"; ptxas's SASS clears them with LOP3 0xffffe000), the largest finite tf32
    # (2 - 2^-10) * 2^127 (what .rna.satfinite's SASS makes of +inf: 0x7f800000 - 0x2000), the NaN .rn/.rz
    # write here (undocumented: any NaN), and the forms ptxas 13.0 takes for sm_90a (tests/test_tf32_cvt.py
    # assembles each, and the three it refuses).
    "TF32_LOW_BITS": 0x1FFF,
    "TF32_MAX_NORM_BITS": 0x7F7FE000,
    "TF32_NAN_BITS": 0x7FFFE000,
    "TF32_CVT_FORMS": {("rna", False, False), ("rna", True, False), ("rn", False, False), ("rz", False, False),
                       ("rn", False, True), ("rz", False, True)},
    # The canonical NaN of f32 and f16/bf16 results: tests/test_sm90_nan.py derives each from CUDA 13.5's header
    # defines (CUDART_NAN_F, CUDART_NAN_FP16, CUDART_NAN_BF16).
    "CANONICAL_NAN_BITS": {"f32": 0x7FFFFFFF, "f16": 0x7FFF, "bf16": 0x7FFF},
    # The approximate instructions' bounds: PTX_ISA_APPROX_SENTENCES below quotes the PTX ISA and
    # test_approx_bounds_are_the_ptx_isa_sentences derives each value from its sentence.
    "LG2_APPROX_ERROR": 2.0**-22,
    "LG2_APPROX_ABSOLUTE_RANGE": (0.5, 2.0),
    "TANH_APPROX_RELATIVE_ERROR": 2.0**-11,
    # [P#floating-point-instructions-sin], [P#floating-point-instructions-cos]: the table's two rows
    "SIN_COS_APPROX_ABSOLUTE_ERROR": ((2 * np.pi, 2.0**-20.5), (100 * np.pi, 2.0**-14.7)),
    # derived (tessera.sm90.approx): the largest |x| whose two-fma reduction stays in the first row's range
    "SIN_COS_REDUCED_LIMIT": 2.0**24,
    "RSQRT_APPROX_RELATIVE_ERROR": 2.0**-22.9,
    "RCP_APPROX_RELATIVE_ERROR": 2.0**-23,
    "EX2_APPROX_RELATIVE_ERROR": 2.0**-22,
    # CUDA's fast-math intrinsics as wholes: CUDA_GUIDE_INTRINSIC_SENTENCES below quotes the CUDA C++ Programming
    # Guide's table and test_intrinsic_bounds_are_the_cuda_guide_sentences derives each value from its sentence.
    # CUDA C++ Programming Guide, "Single-Precision Mathematical Standard Library Functions with Maximum ULP
    # Error" (expf 2, logf 1, log1pf 1, sinf 2, tanhf 2, erff 2, powf 4) and the double-precision table (exp 1)
    "STANDARD_FUNCTION_ULPS": {"expf": 2, "logf": 1, "log1pf": 1, "sinf": 2, "tanhf": 2, "erff": 2, "powf": 4,
                               "exp": 1},
    # Hopper's tensor-core block FMA, measured (NVIDIA documents none of it): Khattak & Mikaitis, "Accurate
    # Models of NVIDIA Tensor Cores" (2025), models/H100TC.m: fma 16 (tf32 8, fp8 32), neab 2 (fp8 -10), final
    # rounding 'rz' ('rne' for fp16 out), min_exp_limit -133 (-21 for fp16 -> fp16); tests/test_wgmma_numerics.py
    # reproduces their measured H100/H200 vectors with these values. Input exponents: IEEE/OCP least normal
    # exponents (1 - bias); c's exponent is read from its f32 encoding (expC -127 -> -126).
    "HOPPER_BLOCK_FMA": {("bf16", "f32"): (16, 2, 24, "rz", -133, -126, 127),
                         ("f16", "f32"): (16, 2, 24, "rz", -133, -126, 127),
                         ("tf32", "f32"): (8, 2, 24, "rz", -133, -126, 127),
                         ("f16", "f16"): (16, 2, 11, "rn", -21, -14, 15),
                         ("e4m3", "f32"): (32, -10, 14, "rz", -133, -126, 127),
                         ("e5m2", "f32"): (32, -10, 14, "rz", -133, -126, 127)},
    "INPUT_MIN_EXPONENT": {"bf16": -126, "tf32": -126, "f16": -14, "e4m3": -6, "e5m2": -14},
    "F32_FRACTION_BITS": 23,
    "ACCUMULATOR_MIN_EXPONENT": -126,
    "F32_ULP_RELATIVE": 2.0**-23,
    "FDIVIDEF_ULPS": 2,
    "FDIVIDEF_DIVISOR_RANGE": (2.0**-126, 2.0**126),
    "EXPF_ULPS": (2, 1.173),
    "LOGF_ABSOLUTE_ERROR": 2.0**-21.41,
    "LOGF_ABSOLUTE_RANGE": (0.5, 2.0),
    "LOGF_ULPS": 3,
    "SINF_ABSOLUTE_ERROR": 2.0**-21.41,
    "COSF_ABSOLUTE_ERROR": 2.0**-21.19,
    "SINCOS_RANGE": (-np.pi, np.pi),
    # [P#data-movement-and-conversion-instructions-cvt], the integer rounding modifiers: PTX_ISA_INTEGER_ROUNDING_
    # SENTENCES quotes them and test_integer_rounding_modifiers_are_the_ptx_isa_sentences derives each function
    "INTEGER_ROUNDING": {"floor": "rmi", "ceil": "rpi", "rint": "rni", "trunc": "rzi"},
    # [P#warp-level-matrix-instructions-stmatrix]: ".num = { .x1, .x2, .x4 }", each an m8n8 matrix of 16-bit
    # elements whose rows are given by one thread's 16-byte-aligned row address
    "STMATRIX_COUNTS": (1, 2, 4),
    "MATRIX_ROWS": 8,
    "MATRIX_ROW_BYTES": 16,
    # NVIDIA H100 Tensor Core GPU Architecture whitepaper, Table 3 (H100 SXM5): 132 SMs, 50 MB L2 cache
    # (FlashAttention-3's hopper/heuristics.h sizes its split-KV waves for the same GPU)
    "SM_COUNT": 132,
    "L2_BYTES": 50 * 2**20,
    # the same whitepaper: 989.4 dense FP16/BF16 tensor TFLOP/s (FP32 accumulate) at the 1830 MHz boost clock,
    # i.e. 4096 FLOP a clock an SM; four SM sub-partitions, one warp scheduler each. CUDA C++ Programming Guide,
    # "Arithmetic Instructions", compute capability 9.0: 16 exp2 (special function) and 128 fp32 fma results a
    # clock per SM (test_throughputs_are_the_documented_figures checks the product)
    "TENSOR_PEAK_BF16_FLOPS": 989.4e12,
    "CLOCK_HZ": 1.83e9,
    "TENSOR_BF16_FLOP_PER_CLOCK": 4096,
    "EX2_PER_CLOCK": 16,
    "FP32_FMA_PER_CLOCK": 128,
    "SCHEDULERS": 4,
    # [P#alternate-floating-point-data-formats]: ".e4m3 ... .e5m2" 8-bit floats; e4m3 (bias 7, no infinity,
    # S.1111.111 is NaN) reaches 1.75 x 2^8, e5m2 (bias 15, IEEE-like) 1.75 x 2^15
    "FP8_FORMATS": ("e4m3", "e5m2"),
    "FP8_MAX_FINITE": {"e4m3": 448.0, "e5m2": 57344.0},
    # [P#data-movement-and-conversion-instructions-cvt]: "cvt.rn.satfinite{.relu}.f8x2type.f32 d, a, b;" and
    # "cvt.rn.{.relu}.f16x2.f8x2type d, a;" with ".f8x2type = { .e4m3x2, .e5m2x2 }"
    "FP8_CVT_NARROW": {"e4m3": "cvt.rn.satfinite.e4m3x2.f32", "e5m2": "cvt.rn.satfinite.e5m2x2.f32"},
    "FP8_CVT_WIDEN": {"e4m3": "cvt.rn.f16x2.e4m3x2", "e5m2": "cvt.rn.f16x2.e5m2x2"},
    # [P#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n32]: A in registers for .e4m3/.e5m2 is
    # "four .b32 registers, with each register containing four .e4m3/.e5m2 elements"
    "FP8_A_ELEMENTS": 16,
    # tests/test_fp8.py derives this order from Figure 149 and Figure 88's formulas; written out per 16 keys:
    # k = 4c + 2p + e holds key 8p + 2c + e
    "P8_KEY_ORDER": (0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15,
                     16, 17, 24, 25, 18, 19, 26, 27, 20, 21, 28, 29, 22, 23, 30, 31),
    # from the same formula: k = 4c + 2p + e holds key 8p + 2c + e with c < 4, p < 2, e < 2, so both k and its
    # key stay below 16: the order permutes keys within groups of 16 (test_p8_key_group_follows_the_order)
    "P8_KEY_GROUP": 16,
    # the same formula at k = 4c + {0, 1, 2, 3}: keys 2c + {0, 1, 8, 9} (one 32-bit word of a V^T row)
    "P8_QUAD_KEYS": (0, 1, 8, 9),
    # [P#data-movement-and-conversion-instructions-prmt]: "{b, a} = {{b7, b6, b5, b4}, {b3, b2, b1, b0}}", byte i
    # of d takes the source byte numbered by selector nibble i: 0x5140 -> (a0, b0, a1, b1), 0x7362 -> (a2, b2,
    # a3, b3), 0x5410 -> (a0, a1, b0, b1), 0x7632 -> (a2, a3, b2, b3): a 4 x 4 byte transpose in two rounds
    # (tests/test_fp8_vtranspose.py runs it on random matrices)
    "TRANSPOSE_4X4_PRMT": ((0x5140, 0x7362), (0x5410, 0x7632)),
}


# region The approximate instructions' error bounds, from the PTX ISA's own sentences

PTX_ISA_APPROX_SENTENCES = {
    # [P#floating-point-instructions-tanh], tanh.approx.f32 (the .f16 and .bf16 forms,
    # [P#half-precision-floating-point-instructions-tanh], bound the absolute error instead: "The maximum absolute
    # error for .f16 type is 2-10.987. The maximum absolute error for .bf16 type is 2-8.")
    "tanh": "The maximum relative error over the entire floating point range is 2-11.",
    # [P#floating-point-instructions-rsqrt]
    "rsqrt": "The maximum relative error for rsqrt.f32 over the entire positive finite floating-point range is 2-22.9.",
    # [P#floating-point-instructions-rcp], rcp.approx.f32
    "rcp": "The maximum ulp error is 1 across the full range of inputs.",
    # [P#floating-point-instructions-ex2]
    "ex2": "The maximum ulp error is 2 ulp from correctly rounded result across the full range of inputs.",
    # [P#floating-point-instructions-lg2]
    "lg2": "The maximum absolute error is 2-22 when the input operand is in the range (0.5, 2). For positive finite "
           "inputs outside of this interval, maximum relative error is 2-22.",
}
"""The sentences as the PTX ISA (9.1) prints them; its superscripts flatten in the text, so 2^-11 reads "2-11"."""

F32_ULP_OF_ONE = 2.0**-23
"""An f32 has 23 fraction bits: one ulp of a value is at most 2^-23 of it."""


def _power_of_two(text: str) -> float:
    """'2-22.9' (2^-22.9 with its superscript flattened) as a number."""
    import re

    match = re.fullmatch(r"2-(\d+(?:\.\d+)?)", text)
    assert match, text
    return 2.0 ** -float(match.group(1))


def _bound_from_sentence(sentence: str) -> float:
    """The relative error bound a sentence states: 'relative error ... is 2-N' or 'ulp error is N'."""
    import re

    relative = re.search(r"relative error .* is (2-[\d.]+?)\.?$", sentence)
    if relative:
        return _power_of_two(relative.group(1))
    ulps = re.search(r"ulp error is (\d+)", sentence)
    assert ulps, sentence
    return int(ulps.group(1)) * F32_ULP_OF_ONE


@pytest.mark.parametrize("name", ["tanh", "rsqrt", "rcp", "ex2"])
def test_approx_bounds_are_the_ptx_isa_sentences(name):
    from tessera.sm90 import approx

    assert approx.approx_relative_error(name) == _bound_from_sentence(PTX_ISA_APPROX_SENTENCES[name])


def test_lg2_bound_is_the_ptx_isa_sentence():
    """Absolute inside the stated open range, relative outside it, both the stated power of two."""
    import re

    from tessera.sm90 import approx

    sentence = PTX_ISA_APPROX_SENTENCES["lg2"]
    absolute = re.search(r"absolute error is (2-[\d.]+) when the input operand is in the range \(([\d.]+), ([\d.]+)\)",
                         sentence)
    relative = re.search(r"relative error is (2-[\d.]+?)\.$", sentence)
    assert absolute and relative
    bound = _power_of_two(absolute.group(1))
    low, high = float(absolute.group(2)), float(absolute.group(3))
    assert approx.LG2_APPROX_ERROR == bound == _power_of_two(relative.group(1))
    assert approx.LG2_APPROX_ABSOLUTE_RANGE == (low, high)
    inside, outside = np.array([np.nextafter(low, 1.0), 1.0, np.nextafter(high, 1.0)]), np.array([0.25, low, high, 1024.0])
    np.testing.assert_array_equal(approx.lg2_approx_error_bound(inside), bound)
    np.testing.assert_array_equal(approx.lg2_approx_error_bound(outside), bound * np.abs(np.log2(outside)))


PTX_ISA_SIN_COS_TABLE = {
    # [P#floating-point-instructions-sin] and [P#floating-point-instructions-cos] print the same table: "The maximum
    # absolute error over input range is as follows:" | Range | Error |, then "Outside of the range [-100pi ..
    # +100pi], only best effort is provided. There are no defined error guarantees."
    "sin": (("[-2pi .. 2pi]", "2-20.5"), ("[-100pi .. +100pi]", "2-14.7")),
    "cos": (("[-2pi .. 2pi]", "2-20.5"), ("[-100pi .. +100pi]", "2-14.7")),
}


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sin_cos_bounds_are_the_ptx_isa_table(name):
    """Each row of the ISA's table is (r, bound) of `SIN_COS_APPROX_ABSOLUTE_ERROR`, in its order."""
    import re

    from tessera.sm90 import approx

    rows = []
    for interval, error in PTX_ISA_SIN_COS_TABLE[name]:
        match = re.fullmatch(r"\[-(\d*)pi \.\. \+?(\d*)pi\]", interval)
        assert match and match.group(1) == match.group(2), interval
        rows.append((int(match.group(1) or 1) * np.pi, _power_of_two(error)))
    assert approx.SIN_COS_APPROX_ABSOLUTE_ERROR == tuple(rows)


def test_sin_cos_lowering_bound():
    """The lowering's bound: the ISA's [-2 pi, 2 pi] bound plus the reduction's (two f32 roundings of a remainder
    below 8, |n| 2^-47 from 2 pi's split) up to 2^24, where the f32 quotient keeps the remainder in [-2 pi, 2 pi];
    nothing beyond. The split's constants: 2 pi to within 2^-47 (checked against 60 digits of pi)."""
    from fractions import Fraction

    from tessera.numerics import INV_TWO_PI, TWO_PI_HIGH, TWO_PI_LOW
    from tessera.sm90 import approx

    pi = Fraction("3.14159265358979323846264338327950288419716939937510582097494459")
    assert abs(2 * pi - Fraction(TWO_PI_HIGH) - Fraction(TWO_PI_LOW)) <= Fraction(2) ** -47
    assert abs(Fraction(INV_TWO_PI) * 2 * pi - 1) <= Fraction(2) ** -24
    isa = approx.SIN_COS_APPROX_ABSOLUTE_ERROR[0][1]
    assert approx.sin_cos_error_bound(0.0) == isa + 2.0**-21 + 2.0**-47
    assert approx.sin_cos_error_bound(-(2.0**24)) == isa + 2.0**-21 + (2.0**24 / (2 * np.pi) + 1) * 2.0**-47
    np.testing.assert_array_equal(approx.sin_cos_error_bound([np.nextafter(2.0**24, np.inf), 3e38, -np.inf]), 2.0)
    # the remainder stays in [-2 pi, 2 pi] up to the limit: pi + |x| 2^-23 at x = 2^24
    assert np.pi + approx.SIN_COS_REDUCED_LIMIT * 2.0**-23 < 2 * np.pi


CUDA_GUIDE_INTRINSIC_SENTENCES = {
    # CUDA C++ Programming Guide, "Single-Precision Floating-Point Intrinsic Functions (Supported by the CUDA
    # Runtime Library with Respective Error Bounds)"; superscripts flattened as in the PTX ISA's sentences
    "__fdividef": "For |y| in [2-126, 2126], the maximum ulp error is 2.",
    "__expf": "The maximum ulp error is 2 + floor(abs(1.173 * x)).",
    "__logf": "For x in [0.5, 2], the maximum absolute error is 2-21.41, otherwise, the maximum ulp error is 3.",
    "__sinf": "For x in [-π, π], the maximum absolute error is 2-21.41, and larger otherwise.",
    "__cosf": "For x in [-π, π], the maximum absolute error is 2-21.19, and larger otherwise.",
}


def test_intrinsic_bounds_are_the_cuda_guide_sentences():
    """Each constant from its sentence, and intrinsic_error_bound applying them inside and outside the ranges."""
    import re

    from tessera.sm90 import approx

    sentences = CUDA_GUIDE_INTRINSIC_SENTENCES
    assert approx.F32_ULP_RELATIVE == F32_ULP_OF_ONE
    divide = re.fullmatch(r"For \|y\| in \[2-(\d+), 2(\d+)\], the maximum ulp error is (\d+)\.", sentences["__fdividef"])
    assert approx.FDIVIDEF_DIVISOR_RANGE == (2.0 ** -int(divide[1]), 2.0 ** int(divide[2]))
    assert approx.FDIVIDEF_ULPS == int(divide[3])
    exp = re.fullmatch(r"The maximum ulp error is (\d+) \+ floor\(abs\(([\d.]+) \* x\)\)\.", sentences["__expf"])
    assert approx.EXPF_ULPS == (int(exp[1]), float(exp[2]))
    log = re.fullmatch(r"For x in \[([\d.]+), ([\d.]+)\], the maximum absolute error is (2-[\d.]+), otherwise, the "
                       r"maximum ulp error is (\d+)\.", sentences["__logf"])
    assert approx.LOGF_ABSOLUTE_RANGE == (float(log[1]), float(log[2]))
    assert approx.LOGF_ABSOLUTE_ERROR == _power_of_two(log[3]) and approx.LOGF_ULPS == int(log[4])
    for name, constant in (("__sinf", approx.SINF_ABSOLUTE_ERROR), ("__cosf", approx.COSF_ABSOLUTE_ERROR)):
        trig = re.fullmatch(r"For x in \[-π, π\], the maximum absolute error is (2-[\d.]+), and larger otherwise\.",
                            sentences[name])
        assert constant == _power_of_two(trig[1])
    assert approx.SINCOS_RANGE == (-np.pi, np.pi)
    x = np.array([-np.pi, 0.5, np.pi, 4.0])
    np.testing.assert_array_equal(approx.intrinsic_error_bound("__sinf", x, np.sin(x)),
                                  [approx.SINF_ABSOLUTE_ERROR] * 3 + [np.inf])
    np.testing.assert_array_equal(approx.intrinsic_error_bound("__logf", [1.5, 8.0], [np.log(1.5), np.log(8.0)]),
                                  [approx.LOGF_ABSOLUTE_ERROR, 3 * 2.0**-23 * np.log(8.0)])
    np.testing.assert_array_equal(approx.intrinsic_error_bound("__expf", [-2.0], [np.exp(-2.0)]),
                                  [4 * 2.0**-23 * np.exp(-2.0)])
    np.testing.assert_array_equal(approx.intrinsic_error_bound("__fdividef", [3.0, 2.0**127], [1.0, 1.0]),
                                  [2 * 2.0**-23, np.inf])
    with pytest.raises(ValueError, match="no documented error bound for __tanf"):
        approx.intrinsic_error_bound("__tanf", [1.0], [1.0])


# endregion


def _constants() -> dict[str, object]:
    import importlib
    import pkgutil

    import tessera.sm90
    from tessera.sm90.memory_model import Rule

    def is_rule(value) -> bool:  # memory-model rules: their quotes are checked by tests/test_memory_model.py
        return isinstance(value, Rule) or (isinstance(value, tuple) and value and all(isinstance(v, Rule)
                                                                                     for v in value))

    found = {}
    for info in pkgutil.iter_modules(tessera.sm90.__path__):
        module = importlib.import_module(f"tessera.sm90.{info.name}")
        for name, value in vars(module).items():
            if name.isupper() and not name.startswith("_") and not isinstance(value, type) and not is_rule(value):
                found[name] = value
    return found


def test_p8_key_group_follows_the_order():
    """P8_KEY_ORDER maps each group of P8_KEY_GROUP positions onto the same group of keys."""
    from tessera.sm90 import fp8

    order, group = fp8.P8_KEY_ORDER, fp8.P8_KEY_GROUP
    for start in range(0, len(order), group):
        assert sorted(order[start:start + group]) == list(range(start, start + group))
    assert sorted(order[:group // 2]) != list(range(group // 2))  # no smaller group would do


def test_every_constant_is_the_documented_value():
    """Each public constant of every module of tessera/sm90, and nothing else, is in DOCUMENTED with its source;
    a new constant fails here until its documented value is written down."""
    constants = _constants()
    assert set(constants) == set(DOCUMENTED)
    for name, value in constants.items():
        expected = DOCUMENTED[name]
        if isinstance(value, dict):
            value = {int(k) if isinstance(k, int) else k: v for k, v in value.items()}
        assert value == expected, name


# region cp.async [P#data-movement-and-conversion-instructions-cp-async, P#parallel-synchronization-and-
# communication-instructions-cp-async-mbarrier-arrive]

CP_ASYNC_SYNTAX = """
cp.async.ca.shared{::cta}.global{.level::cache_hint}{.level::prefetch_size} [dst], [src], cp-size{, src-size}{, cache-policy} ;
cp.async.cg.shared{::cta}.global{.level::cache_hint}{.level::prefetch_size} [dst], [src], 16{, src-size}{, cache-policy} ;
cp-size = { 4, 8, 16 }
"""
"""The syntax block of the cp.async section, as written there: .ca takes any cp-size, .cg only 16."""


def test_cp_async_sizes_match_the_syntax_block():
    sizes = CP_ASYNC_SYNTAX.split("cp-size = {")[1].split("}")[0]
    assert F.CP_ASYNC_SIZES == tuple(int(s) for s in sizes.split(","))
    cg = next(line for line in CP_ASYNC_SYNTAX.splitlines() if line.startswith("cp.async.cg"))
    assert int(cg.split("[src],")[1].split("{")[0]) == F.CP_ASYNC_CG_BYTES


@pytest.mark.parametrize("cp_size,src_size,read,zeros", [(16, 16, 16, 0), (16, 0, 0, 16), (16, 5, 5, 11), (4, 4, 4, 0)])
def test_cp_async_src_size_reads_that_many_bytes_and_fills_the_rest_with_zeros(cp_size, src_size, read, zeros):
    """"src-size represents the size of the data in bytes to be copied from src to dst and must be less than
    cp-size. In such case, remaining bytes in destination dst are filled with zeros. Specifying src-size larger
    than cp-size results in undefined behavior." (src-size = cp-size is the plain copy.)"""
    assert F.cp_async_zero_fill(cp_size, src_size) == (read, zeros)


@pytest.mark.parametrize("cp_size,src_size", [(12, 0), (16, 17), (8, -1)])
def test_cp_async_refuses_what_the_instruction_does_not_define(cp_size, src_size):
    with pytest.raises(ValueError, match="cp.async"):
        F.cp_async_zero_fill(cp_size, src_size)


def test_cp_async_noinc_arrive_counts_one_arrival_per_thread():
    """"When the .noinc qualifier is specified, the pending count of the mbarrier object is not incremented
    prior to the asynchronous mbarrier.arrive operation. This results in a net decrement of the pending count
    [...] The init count must account for it": one arrival per executing thread."""
    assert F.CP_ASYNC_NOINC_ARRIVALS == 1


def test_the_swizzle_bits_are_the_tables_xor():
    """[P#tensor-swizzling-modes]: line r's 16-byte chunk c is stored at chunk c ^ (r % n), n = 2/4/8 for
    32B/64B/128B, 128-byte lines: (mask, line shift, chunk shift) = (n - 1, log2 128, log2 16)."""
    assert [F.swizzle_bits(mode) for mode in (32, 64, 128)] == [(1, 7, 4), (3, 7, 4), (7, 7, 4)]


CP_ASYNC_PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 src) {{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    .shared .align 16 .b8 buf[64];
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd0, [src];
    mov.u32 %r0, buf;
    mov.u32 %r1, bar;
    mov.u32 %r2, 16;
    mbarrier.init.shared::cta.b64 [%r1], 1;
    {copy}
    cp.async.commit_group;
    cp.async.wait_group 0;
    cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r1];
    ret;
}}
"""


def test_ptxas_takes_the_cp_async_forms_and_refuses_a_cg_copy_of_8_bytes():
    from tessera.toolchain import PtxasError, compile_ptx

    result = compile_ptx(CP_ASYNC_PTX.format(copy="cp.async.cg.shared.global [%r0], [%rd0], 16, %r2;"))
    assert not result.warnings
    with pytest.raises(PtxasError):
        compile_ptx(CP_ASYNC_PTX.format(copy="cp.async.cg.shared.global [%r0], [%rd0], 8, %r2;"))


# endregion


# region A bulk copy executed by the lanes of a warp [SASS]

_BULK_STORES = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 tmap)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<2>;
  .shared .align 128 .b8 buf[4096];
  ld.param.u64 %rd1, [tmap];
  mov.u32 %r1, 0;
  mov.u32 %r2, %tid.x;
  mov.u32 %r3, buf;
  cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r1, %r1}], [%r3];
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group.read 0;
  cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r2, %r1}], [%r3];
  cp.async.bulk.commit_group;
  cp.async.bulk.wait_group.read 0;
  ret;
}
"""


def test_bulk_copy_issues_once_per_distinct_operands_of_a_warp(ptxas, nvdisasm):
    """`BULK_COPY_ISSUED_PER_DISTINCT_OPERANDS`, against ptxas' SASS (no GPU needed): a TMA store whose
    operands every lane shares is one UTMASTG outside any loop; one whose coordinate is the lane's %tid.x is a
    UTMASTG inside a loop that moves one lane's value to a uniform register (R2UR) and branches back while lanes
    are left (BRA.U.ANY): one copy per distinct value, never one per lane by construction."""
    from tessera import toolchain
    from tessera.sass import disassemble, parse_sass, sass_loops
    from tessera.sm90.tma import BULK_COPY_ISSUED_PER_DISTINCT_OPERANDS

    assert BULK_COPY_ISSUED_PER_DISTINCT_OPERANDS
    result = toolchain.compile_ptx(_BULK_STORES, ptxas=ptxas)
    sass = parse_sass(disassemble(result.cubin, nvdisasm=nvdisasm))
    stores = [s for s in sass if s.opcode == "UTMASTG"]
    assert len(stores) == 2, [s.mnemonic for s in sass]
    loops = sass_loops(sass)
    assert not any(stores[0] in loop.instructions for loop in loops)  # uniform operands: issued once
    looping = [loop for loop in loops if stores[1] in loop.instructions]
    assert looping, "a per-lane coordinate must give a loop over the distinct values"
    body = looping[0].instructions
    assert any(s.opcode == "R2UR" for s in body)
    assert any(s.opcode == "BRA" and "U.ANY" in s.mnemonic for s in body)

# endregion


# region cvt's integer rounding modifiers, from the PTX ISA's own sentences

PTX_ISA_INTEGER_ROUNDING_SENTENCES = {
    # [P#data-movement-and-conversion-instructions-cvt], "Integer Rounding Modifiers"
    "rni": "round to nearest integer, choosing even integer if source is equidistant between two integers.",
    "rzi": "round to nearest integer in the direction of zero",
    "rmi": "round to nearest integer in direction of negative infinity",
    "rpi": "round to nearest integer in direction of positive infinity",
}


def _rounding_from_sentence(sentence: str):
    """The NumPy function a sentence describes, read from its words alone."""
    if "equidistant" in sentence and "even" in sentence:
        return np.rint
    direction = {"zero": np.trunc, "negative infinity": np.floor, "positive infinity": np.ceil}
    return next(f for words, f in direction.items() if sentence.endswith(words))


def test_integer_rounding_modifiers_are_the_ptx_isa_sentences():
    from tessera.interpreters.ptx import numerics
    from tessera.sm90.rounding import INTEGER_ROUNDING, integer_rounding_mnemonic

    x = np.array([-2.5, -1.5, -0.5, -0.25, 0.5, 1.5, 2.5, 2.75, -2.75], np.float32)
    for function, modifier in INTEGER_ROUNDING.items():
        described = _rounding_from_sentence(PTX_ISA_INTEGER_ROUNDING_SENTENCES[modifier])
        np.testing.assert_array_equal(getattr(np, function)(x), described(x))
        np.testing.assert_array_equal(numerics.INTEGER_MODES[modifier](x), described(x))  # the PTX executor
        assert integer_rounding_mnemonic(function) == f"cvt.{modifier}.f32.f32"
    with pytest.raises(ValueError, match="round"):
        integer_rounding_mnemonic("round")

# endregion


# region Per-SM throughputs (H100 whitepaper; CUDA C++ Programming Guide, arithmetic instruction throughput)


def test_throughputs_are_the_documented_figures():
    # [WP]: 989.4 dense bf16 tensor TFLOP/s at a 1830 MHz boost clock on 132 SMs; [CPG], cc 9.0: 16 exp2 and
    # 128 fp32 fma results per clock per SM; four warp schedulers a SM.
    assert F.TENSOR_PEAK_BF16_FLOPS == 989.4e12 and F.CLOCK_HZ == 1830e6
    assert (F.EX2_PER_CLOCK, F.FP32_FMA_PER_CLOCK, F.SCHEDULERS) == (16, 128, 4)
    assert abs(F.TENSOR_BF16_FLOP_PER_CLOCK * 132 * 1830e6 / 989.4e12 - 1) < 1e-3
    # an m64n128k16 wgmma (2 x 64 x 128 x 16 FLOP) is 64 clocks of an SM's tensor cores
    assert 2 * 64 * 128 * 16 // F.TENSOR_BF16_FLOP_PER_CLOCK == 64

# endregion
