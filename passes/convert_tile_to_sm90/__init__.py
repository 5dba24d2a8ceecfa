"""`convert-tile-to-sm90`: translate Tile IR kernels into Target IR for one sm_90a thread block.

Input: verified Tile IR kernels whose shared tiles have a 32-, 64- or 128-byte swizzle that divides their rows
(run `assign-swizzle` first: it gives each tile the widest).
Output: each kernel `func.func` replaced by a Target IR kernel (`sm90.kernel = {threads, smem_bytes}`, the
`tile.kernel`/`tile.grid` attributes kept) whose arguments are tensor maps, global pointers and named sizes
(each with `sm90.source`, `sm90.box`, `sm90.swizzle` or `sm90.size`; see `tessera.interpreters.sm90`).

How each piece maps:
- Warpgroups: every register tile is [BM, N] with BM = 64 x W; W warpgroups (128 threads each) split the
  rows, 64 each, in the wgmma accumulator layout (`tessera.lowering.fragments`).
- Shared tiles are buffers of `sm90.shared_buffer`, stored as boxes of W-byte rows, W the tile's swizzle: an
  [R, C] tile is C x elt / W boxes of R rows (head_dim 128 in bf16 is two 64-column boxes of 128 bytes; a GEMM
  K block of 32 bf16 one box of 64-byte rows). Each box is one TMA box of a tensor map of that swizzle
  (CU_TENSOR_MAP_SWIZZLE_32B/64B/128B), and the wgmma descriptors take its layout type and SBO = 8 W.
- `tile.cp_async` becomes one TMA load per box, issued by thread 0, on the mbarrier of the
  `tile.cp_commit_group` that closes its group; the commit is thread 0's `arrive.expect_tx` of the group's
  bytes. TMA needs rows that start on 16 bytes: a copy of a tensor whose innermost size is not a constant or
  a size the kernel promises a multiple of (`tile.divisible`) to make it so is done by every thread instead,
  `ld.global.u16` (zero outside the tensor) then `st.shared.b16` at the swizzled address and
  `fence.proxy.async` (the tensor's argument is then a pointer marked `sm90.copy = "ld.global"`).
- `tile.cp_async_gather` (a paged cache's rows through its page table) becomes 16-byte `cp.async`s of the
  producer warpgroup completing on the ring slot's full mbarrier (`.noinc` arrivals: its init count is 128),
  or of every thread with cp.async commit/wait groups into a plain tile (`serving`; the cache's argument is
  a pointer marked `sm90.copy = "cp.async"`). `tile.cp_wait_group` waits (try_wait.parity loops, every thread) on the barriers of the groups it
  covers, with the parity of the execution it waits for (the loop trip, mod 2). `tile.barrier` is bar.sync 0.
- `tile.mma` is a wgmma chain over K in steps of 16 (shared A and B through descriptors: K-major for A and
  for B^T, MN-major, imm-trans 1, for B and for A^T with `transpose_a`, each warpgroup its own 64-column box;
  bf16/f16 A from registers, packed, for P x V), then commit; the group is waited for where its result is first
  read (`wait_group N`), in the issue order of `mma_order` (the option `mma-order`).
- Row reductions reduce a thread's registers of each row, then across the 4 lanes of the row with
  shfl.sync.bfly; a row sum that only feeds the online softmax's running sum (l' = alpha l + rowsum P,
  carried by the loop) stays each thread's partial sum and is added across the lanes once, after the loop
  (`row_sums.py`); column reductions (`tile.col_sum/col_max/col_min`) fold each thread's two rows, shuffle over
  the warp's rows, then meet the other warps in a scratch shared buffer at a bar.sync (`col_reductions.py`);
  `tile.exp_subtract` is ex2.approx of one fma per register, a `tile.scale` factor times
  log2(e) folded into it (`numerics.exp2_factor`); `tile.exp_diff` (row vectors) is ex2.approx of a mul and
  an add, exactly 1 for equal operands at any magnitude; with `subtract_first` (huge operands: a biased
  kernel) both subtract before they scale, ex2((f32(x factor) - m) log2(e)) (fma(x, factor, -m) for a factor
  2^k) and ex2((a - b) log2(e)), each op `.rn` so that ptxas cannot contract the mul and sub into an fma;
  `tile.saturating_scale` is mul, max, min and two selects on predicates of +-inf, in place; `tile.log` is lg2.approx times ln 2; division is rcp.approx with
  rows of sum 0 giving 0; masks compare per-register row/column coordinates.
- The elementwise vocabulary (`elementwise`: math, broadcasting, cmp/select, iota, splat) is one instruction
  or a short chain per register (docs/tile-elementwise.md); a column vector [1, N] is held as the thread's
  N/4 distinct columns, shuffled onto an [BM, N] operand's registers (no instruction), a `tile.iota cols` laid
  out where it is used (an [BM, N] operand gets an [BM, N] iota, which the op takes in place).
- `tile.store_global` (and `tile.store_global_rows`) / `tile.load` of a global window store / load each
  thread's registers with a bounds mask (out-of-bounds loads give 0): f32 one word per register; bf16/f16 one
  packed pair per register where the tensor's rows start on 4 bytes (an even innermost size, constant or
  promised by `tile.divisible`), otherwise one element per register (`st.global.b16`, `ld.global.u16`), since
  a pair at an odd element straddles a 4-byte boundary. `tile.load_broadcast` loads each register's column of
  a 1-D window (a bias, or a row of a matrix: the leading indices select it, zero outside the tensor).
- A bf16/f16 row vector, column or column vector packs its f32 counterpart's registers in pairs, and a [1, 1]
  tile (one value for the block) is held by every thread as a column is (`small_tiles`).
Refused by name: ring stages of a tensor TMA cannot read, shared tiles without a 32/64/128-byte swizzle that
divides their rows (stores of register tiles into shared tiles and gathers need 128B), register tiles
that are not [64 W, N] with a legal wgmma N, reshapes other than [BM] <-> [BM, 1], waits whose groups come from a
previous loop trip (pipelining is `pipeline-loops`' job), and any op not listed here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tessera.kernel_abi import kernels
from tessera.passes.convert_tile_to_sm90.common import INVARIANT_ATTR, PRODUCER_ATTR, LoweringError
from tessera.passes.convert_tile_to_sm90.kernel import KernelLowering
from tessera.passes.convert_tile_to_sm90.reduction_slots import StagingDoesNotFit

__all__ = ["INVARIANT_ATTR", "PRODUCER_ATTR", "ConvertTileToSm90Pass", "KernelLowering", "LoweringError"]


@dataclass(frozen=True)
class ConvertTileToSm90Pass(ModulePass):
    """Replace every Tile IR kernel of the module by its sm_90a Target IR kernel (module docstring)."""

    name = "convert-tile-to-sm90"
    input_level: ClassVar[str] = "tile"
    """The kernels it transforms (Tile IR); tools refuse a module with only the other kind."""

    atomic_add: str = "auto"
    """How `tile.atomic_add` is lowered: "red" (red.global.add.f32 per register), "bulk" (a shared staging
    buffer and cp.reduce.async.bulk: in a pipelined kernel one per window from the producer, `reduction_slots`;
    else one per row) or "auto", the default: "bulk" where the producer issues it (the shorter there, and its
    staging fits; `reduction_slots`), else "red"; `convert-tile-to-sm90{atomic-add=bulk}`. See `backward`."""

    store_shared: str = "st_shared"
    """How `tile.store_shared` is lowered: "st_shared" (one st.shared.b32 per packed pair, the default: the
    backward's main loop is as short and takes fewer registers, bench/backward_sass.py) or "stmatrix" (one
    stmatrix.x4 per 16-column slab); `convert-tile-to-sm90{store-shared=stmatrix}`."""

    mma_order: str = "first-read"
    """The issue order of each block's `tile.mma` groups (`mma_order.MMA_ORDERS`): "first-read" (the default),
    in the order their results are first read, each before the first wait for an earlier group it may precede,
    with barriers waiting only for groups that read tiles other than ring stages (the backward's S and dP
    together, dV across the barrier, dQ before dK: FlashAttention-3's placement), or "program", the builder's
    order with every group retired at a barrier (the placement before it, for comparison);
    `convert-tile-to-sm90{mma-order=program}`. See `mma_order`."""

    def __post_init__(self) -> None:
        """Reject an option value the lowering does not have (a pipeline error, before any input is read, as
        every pass's options are: `tessera.passes`)."""
        from tessera.passes.convert_tile_to_sm90.backward import ATOMIC_ADD_MODES, STORE_SHARED_MODES
        from tessera.passes.convert_tile_to_sm90.mma_order import MMA_ORDERS

        for option, value, modes in (("atomic-add", self.atomic_add, ATOMIC_ADD_MODES),
                                     ("store-shared", self.store_shared, STORE_SHARED_MODES),
                                     ("mma-order", self.mma_order, MMA_ORDERS)):
            if value not in modes:
                raise ValueError(f"convert-tile-to-sm90: {option} must be one of {', '.join(modes)}, got '{value}'")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from tessera.passes.convert_tile_to_sm90.mma_order import order_mmas

        for kernel in kernels(op):
            if self.mma_order == "first-read":
                order_mmas(kernel)
            try:
                lowered = KernelLowering(kernel, self.atomic_add, self.store_shared, self.mma_order).run()
            except StagingDoesNotFit:  # auto's bulk staging does not fit: red, which stages nothing
                lowered = KernelLowering(kernel, "red", self.store_shared, self.mma_order).run()
            kernel.parent_block().insert_op_before(lowered, kernel)
            kernel.detach()
            kernel.erase()
