"""Warpgroup MMA (`wgmma.mma_async`) facts of sm_90a: warpgroups, legal shapes and types, register fragments.

Sources: PTX ISA 9.1 section 9.7.15, https://docs.nvidia.com/cuda/parallel-thread-execution/#x with x =
asynchronous-warpgroup-level-matrix-instructions-warpgroup (9.7.15.1), -matrix-shape (9.7.15.2),
-matrix-data-types (9.7.15.3), -matrix-register-fragment-wgmma-64n16 (9.7.15.5.1.1.1, Figures 148/149).
CUTLASS states the same fragments as `ALayout_64x16` and `CLayout_64xN`
(include/cute/atom/mma_traits_sm90_gmma.hpp).
"""

from __future__ import annotations

import numpy as np

from tessera.sm90.warp import WARP_SIZE

# region Warpgroup [P#asynchronous-warpgroup-level-matrix-instructions-warpgroup]

WARPS_PER_WARPGROUP = 4
WARPGROUP_SIZE = WARPS_PER_WARPGROUP * WARP_SIZE


def warp_rank(tid: tuple[int, int, int], ntid: tuple[int, int, int]) -> int:
    """warp-rank = (%tid.x + %tid.y * %ntid.x + %tid.z * %ntid.x * %ntid.y) / 32."""
    return (tid[0] + tid[1] * ntid[0] + tid[2] * ntid[0] * ntid[1]) // WARP_SIZE


def warpgroup_warps(first_warp: int) -> range:
    """The warp ranks of the warpgroup starting at `first_warp`: four contiguous warps whose first warp-rank
    is a multiple of 4; any other set of warps is not a warpgroup."""
    if first_warp < 0 or first_warp % WARPS_PER_WARPGROUP:
        raise ValueError(f"a warpgroup starts at a warp rank that is a multiple of {WARPS_PER_WARPGROUP}, "
                         f"got {first_warp}")
    return range(first_warp, first_warp + WARPS_PER_WARPGROUP)


# endregion

# region Shapes and data types [P#asynchronous-warpgroup-level-matrix-shape, -matrix-data-types]

WGMMA_M = 64

WGMMA_K_BYTES = 32
"""Every dense shape's K spans 32 bytes of A/B: k16 for f16/bf16, k8 for tf32, k32 for 8-bit, k256 for b1."""

WGMMA_ELEMENT_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "u8": 8, "s8": 8, "b1": 1}

WGMMA_ACCUMULATOR_TYPES = {
    "f16": ("f16", "f32"),
    "bf16": ("f32",),
    "tf32": ("f32",),
    "e4m3": ("f16", "f32"),
    "e5m2": ("f16", "f32"),
    "u8": ("s32",),
    "s8": ("s32",),
    "b1": ("s32",),
}
"""Multiplicand type -> legal accumulator (D) types, dense wgmma (Matrix Data-types table)."""

_FLOAT_N = tuple(range(8, 257, 8))
_INTEGER_N = (8, 16, 24) + tuple(range(32, 257, 16))


def wgmma_n_values(atype: str) -> tuple[int, ...]:
    """The legal N of dense `wgmma.mma_async.m64nNkK` for multiplicand type `atype`: 8..256 step 8 for the
    floating-point types; 8, 16, 24, 32, 48, ..., 256 for u8/s8/b1."""
    _check_atype(atype)
    return _INTEGER_N if WGMMA_ACCUMULATOR_TYPES[atype] == ("s32",) else _FLOAT_N


def wgmma_shape(n: int, atype: str, dtype: str) -> tuple[int, int, int]:
    """(M, N, K) of a legal dense wgmma with multiplicand type `atype` and accumulator type `dtype`, or
    ValueError naming the broken rule (e.g. bf16 accumulates only in f32)."""
    _check_atype(atype)
    if dtype not in WGMMA_ACCUMULATOR_TYPES[atype]:
        raise ValueError(f"wgmma .{atype} multiplicands need a {'/'.join(WGMMA_ACCUMULATOR_TYPES[atype])} "
                         f"accumulator, got .{dtype}")
    if n not in wgmma_n_values(atype):
        raise ValueError(f"wgmma N must be one of {wgmma_n_values(atype)} for .{atype}, got {n}")
    return WGMMA_M, n, WGMMA_K_BYTES * 8 // WGMMA_ELEMENT_BITS[atype]


def accumulator_registers(n: int, dtype: str) -> int:
    """32-bit registers per thread holding the m64nN accumulator: N/2 for .f32/.s32, N/4 (.f16x2) for .f16."""
    if dtype not in ("f32", "s32", "f16"):
        raise ValueError(f"wgmma accumulator type must be f32, s32 or f16, got {dtype!r}")
    return n // 4 if dtype == "f16" else n // 2


WGMMA_TRANSPOSE_TYPES = ("f16", "bf16")
"""The multiplicand types whose shared operands may be transposed [P#asynchronous-warpgroup-level-matrix-
instructions-wgmma-mma-async]: "Matrices A and B are stored in row-major and column-major format respectively.
For certain floating point variants, the input matrices A and B can be transposed by specifying the value 1 for
the immediate integer arguments imm-trans-a and imm-trans-b respectively. [...] The transpose operation is only
supported for the wgmma.mma_async variants with .f16/.bf16 types on matrices accessed from shared memory using
matrix descriptors." A, [M, K], is "row-major" when K-major; B, [K, N], is "column-major" when K-major: so
imm-trans 0 reads an operand K-major and 1 reads it MN-major (M- or N-contiguous)."""


WGMMA_MIXED_TYPES = (frozenset(("e4m3", "e5m2")), frozenset(("u8", "s8")))
"""The multiplicand types .atype and .btype may differ within (Matrix Data-types table: `.e4m3`/`.e5m2` and
`.u8`/`.s8` mix freely, every other type only with itself)."""


def wgmma_multiplicand_types(atype: str, btype: str) -> None:
    """Check that one wgmma may take A of `atype` and B of `btype`: equal types, or two of one family in
    `WGMMA_MIXED_TYPES` (`.f32.e5m2.e4m3` is a wgmma, `.f32.bf16.f16` is not); ValueError naming the rule
    otherwise."""
    _check_atype(atype)
    _check_atype(btype)
    if atype != btype and not any({atype, btype} <= family for family in WGMMA_MIXED_TYPES):
        raise ValueError(f"A is .{atype} and B is .{btype}: wgmma mixes only .e4m3 with .e5m2 and .u8 with .s8, "
                         "other multiplicand types must be equal")


def wgmma_transpose_immediate(major: str, atype: str, operand: str = "A") -> int:
    """imm-trans-a/imm-trans-b for a shared operand stored `major` ("K" or "MN") of type `atype`: 0 for K-major,
    1 for MN-major, which only .f16/.bf16 allow (ValueError naming the rule otherwise)."""
    _check_atype(atype)
    if major == "K":
        return 0
    if major != "MN":
        raise ValueError(f"major must be 'K' or 'MN', got {major!r}")
    if atype not in WGMMA_TRANSPOSE_TYPES:
        raise ValueError(f"an MN-major {operand} (imm-trans-{operand.lower()} = 1) needs .f16 or .bf16 "
                         f"multiplicands, got .{atype}: other types are read K-major only")
    return 1


def _check_atype(atype: str) -> None:
    if atype not in WGMMA_ACCUMULATOR_TYPES:
        raise ValueError(f"wgmma multiplicand type must be one of {tuple(WGMMA_ACCUMULATOR_TYPES)}, got {atype!r}")


# endregion

# region Register fragments [P#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16]


def thread_parts(thread):
    """(warp, group, lane in group) of each warpgroup thread index: the warp of four, the 4-lane group of eight
    in its warp, the lane of four in its group (a ValueError for an index outside [0, 128))."""
    thread = np.asarray(thread, dtype=np.int64)
    if np.any((thread < 0) | (thread >= WARPGROUP_SIZE)):
        raise ValueError(f"thread must be in [0, {WARPGROUP_SIZE}) (the index inside the warpgroup)")
    lane = thread % WARP_SIZE
    return thread // WARP_SIZE, lane // 4, lane % 4


def accumulator_coords(v, thread):
    """(row, col) in the 64xN accumulator D of element d[v] held by `thread` (0..127 inside the warpgroup),
    for m64nNk16 (Figure 149), vectorised over v and thread: with w = thread / 32, g = (thread % 32) / 4,
    c = thread % 4, row = 16w + g + 8 * ((v >> 1) & 1), col = 8 * (v >> 2) + 2c + (v & 1), v < N/2.

    v counts elements: for .f32 it is the register index; a .f16 accumulator packs d[2r] (low half) and
    d[2r+1] (high half) into register r."""
    v = np.asarray(v, dtype=np.int64)
    if np.any(v < 0):
        raise ValueError("accumulator element index must be >= 0")
    w, g, c = thread_parts(thread)
    return 16 * w + g + 8 * ((v >> 1) & 1), 8 * (v >> 2) + 2 * c + (v & 1)


ACCUMULATOR_THREAD_TERMS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "row": ((WARP_SIZE, 0, 16), (4, 8, 1)),
    "col": ((1, 4, 2),),
}
"""The thread-dependent part of `accumulator_coords`, as data a code generator can emit: for thread T of the
CTA, sum over terms (divisor, modulus, multiplier) of ((T // divisor) % modulus) * multiplier (modulus 0 =
none) gives the row (in a tile of 64 rows per warpgroup: 16 * (T / 32) + (T % 32) / 4) and the column
(2 * (T % 4)) of d[0]. Element v adds `accumulator_coords(v, 0)`: the layout is affine in (v, thread)."""


def accumulator_thread_base(thread) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of d[0] for CTA thread `thread` (any thread index; warpgroup w owns rows 64w..64w+63),
    evaluated from ACCUMULATOR_THREAD_TERMS."""
    thread = np.asarray(thread, dtype=np.int64)

    def evaluate(terms):
        total = np.zeros_like(thread)
        for divisor, modulus, multiplier in terms:
            part = thread // divisor
            total = total + (part % modulus if modulus else part) * multiplier
        return total

    return evaluate(ACCUMULATOR_THREAD_TERMS["row"]), evaluate(ACCUMULATOR_THREAD_TERMS["col"])


WGMMA_ROWS_PER_WARP = WGMMA_M // WARPS_PER_WARPGROUP
"""Warp w of the warpgroup holds rows 16w..16w+15 of the A fragment (Figure 148) and of D (Figure 149): its part
of the product, D[16w:16w+16, :] = A[16w:16w+16, :] B, needs those rows of A and the whole of B."""


A_FRAGMENT_REGISTERS = 4
"""m64nNk16 f16/bf16 A in registers: four .f16x2/.b32 registers a0..a3 per thread, eight 16-bit elements."""


WGMMA_PTXAS_EXTRA_REGISTERS = 26
"""Registers ptxas needs for one `wgmma.mma_async` beyond its accumulator's (N/2 f32 per thread) and, with A in
registers, A's (`A_FRAGMENT_REGISTERS`). ptxas compiles the instruction only within the registers each thread
has at the kernel's entry (`warp.registers_at_entry` of its `.reqntid`: 128 at 512 threads, 96 at 640), whatever
a later `setmaxnreg.inc` gives, and otherwise stops (fatal C7602, "Insufficient registers (128) to compile
instruction ... Try to compile with register target of 154 or higher"): an m64n256k16 from shared memory needs
128 + 26 = 154, from registers 128 + 4 + 26 = 158 (ptxas 13.0: gemm(block_m=192 or 256, block_n=160..256) at 512
and 640 threads, and flash_attention(head_dim=256)'s P.V with its `.reqntid` raised to 512, every N/2 + 26 and
N/2 + 30 exactly; tests/test_sm90_facts.py asks ptxas for the count)."""


def wgmma_instruction_registers(accumulator_registers: int, a_registers: int = 0) -> int:
    """The registers per thread ptxas needs at the kernel's entry to compile a wgmma whose accumulator takes
    `accumulator_registers` and whose A takes `a_registers` (0 from shared memory): see
    `WGMMA_PTXAS_EXTRA_REGISTERS`."""
    return accumulator_registers + a_registers + WGMMA_PTXAS_EXTRA_REGISTERS


def a_fragment_coords(i, half, thread):
    """(row, k) in the 64x16 A tile of the 16-bit element in register a[i] (i < 4), `half` 0 = bits 15:0
    (element a_{2i}), 1 = bits 31:16 (a_{2i+1}), of `thread` (Figure 148), vectorised:
    row = 16w + g + 8 * (i & 1), k = 2c + 8 * (i >> 1) + half."""
    i = np.asarray(i, dtype=np.int64)
    half = np.asarray(half, dtype=np.int64)
    if np.any((i < 0) | (i >= A_FRAGMENT_REGISTERS)) or np.any((half < 0) | (half > 1)):
        raise ValueError(f"A register must be in [0, {A_FRAGMENT_REGISTERS}) and half 0 or 1")
    w, g, c = thread_parts(thread)
    return 16 * w + g + 8 * (i & 1), 2 * c + 8 * (i >> 1) + half


def a_register_sources(k_slice: int) -> tuple[tuple[int, int], ...]:
    """For P.V with P in registers: the f32 accumulator elements (low, high) that A register i (0..3) of
    K-slice `k_slice` (P columns 16s..16s+15) packs, for the same thread: (d[8s+2i], d[8s+2i+1]).

    The two fragments put these elements at the same (row, column - 16s), so no shuffle is needed. Emit
    `cvt.rn.bf16x2.f32 a_i, d[8s+2i+1], d[8s+2i]`: cvt puts its first source in the high half."""
    if k_slice < 0:
        raise ValueError(f"K-slice must be >= 0, got {k_slice}")
    base = 8 * k_slice
    return tuple((base + 2 * i, base + 2 * i + 1) for i in range(A_FRAGMENT_REGISTERS))


# endregion
