"""Shared pieces of convert-tile-to-sm90: constants, the lowering error, and the records of lowered values
(shared tiles, rings and stages, windows, copy groups, loops)."""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IntegerAttr
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.utils.exceptions import DiagnosticException

from tessera.ir.diagnostics import located
from tessera.dialects import tile
from tessera.dialects.tile_types import TileType
from tessera.sm90 import facts


LINE = facts.SWIZZLE_LINE_BYTES                     # bytes of one 128B-swizzled row of a box
CORE_ROWS = facts.swizzle_period_bytes(128) // LINE  # rows per swizzle atom, 8 for every width (the descriptor SBO)
SWIZZLES = tuple(m for m in facts.SWIZZLE_MODES if m)  # the widths shared tiles may have: 32, 64, 128
K_STEP = 16                                         # wgmma k for 16-bit types
PRODUCER_ATTR = "sm90.producer"
"""Marks the scf.if in which thread 0 refills a ring stage: the work warp-specialize gives the producer."""
PRODUCER_WARPGROUP_ATTR = "sm90.producer_warpgroup"
"""Marks a `sm90.producer` scf.if that the first warpgroup's 128 threads run together (`tid < 128`), not
thread 0: a row gather with cp.async. warp-specialize gives it to every thread of the producer warpgroup."""

INVARIANT_ATTR = "sm90.invariant"
"""On an sm90.ld_global: it reads an input the kernel never writes (tile.load_index's table), so it reads the
same value wherever it is recomputed (warp-specialize lets the producer recompute it)."""
DISTINCT_LANES_ATTR = "sm90.distinct_lanes"
"""On the op that makes a value from which `compute-distinct-lanes` computes lane-wise ops on their distinct
registers: a `tile.splat`'s broadcast (a value the same for every element: `b`, `h`, a modifier's integer
constants) and an index diagonal's distinct values (`kv_idx - q_idx`). Only ops that read such a value
(through views), or an op that pass computed so, are computed so: other kernels keep their lowering."""
CLUSTER_SHARED_ATTR = "sm90.cluster_shared"
"""On a `sm90.tma_load` of a ring refill: the box of a `cluster_shared` copy (multicast-cluster-copies)."""


def constant_int(value: SSAValue) -> int | None:
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


class LoweringError(DiagnosticException):
    """A Tile IR construct convert-tile-to-sm90 cannot lower; the message names the op and the rule."""


class SharedMemoryError(LoweringError):
    """A kernel that needs more shared memory than a thread block may have. The default pipeline's fallback
    lowers it with the configurations without a second stage (`tessera.lowering.fallback`)."""


def refuse(op: Operation, message: str, error: type[LoweringError] = LoweringError) -> None:
    """Raise the LoweringError (or `error`) `message` about `op` (the kernel itself for what concerns it as a
    whole), located in the input (`tessera.ir.diagnostics.located`)."""
    where = f"{tile_text(op)}: " if not isinstance(op, func.FuncOp) else ""
    raise error(located(op, f"convert-tile-to-sm90: {where}{message}", name_op=False))


def tile_text(op: Operation) -> str:
    text = str(op).splitlines()[0].strip()
    return text if len(text) < 140 else text[:137] + "..."


ROW_TILE_ROWS = 1
"""A shared tile of one row ([1, N], or a ring of them) is a *row tile*: unswizzled (`assign-swizzle`), filled by
one TMA box of the whole row, read by `tile.load_broadcast` with ld.shared (the backward's LSE2 and dPsum)."""


@dataclass
class SharedTile:
    """A shared tile placed in dynamic shared memory: [rows, cols] of `elt_bytes`, stored as boxes of
    `swizzle`-byte rows (32, 64 or 128: one swizzle span per row, what one TMA box writes), each box `rows`
    rows deep. Every swizzle's pattern repeats after `CORE_ROWS` such rows (`facts.swizzle_period_bytes`)."""

    address: SSAValue
    rows: int
    cols: int
    elt_bytes: int
    stage: Stage | None = None
    swizzle: int = LINE

    @property
    def span(self) -> int:
        """The bytes of a row of one box: the swizzle span, or the whole row of an unswizzled tile (a one-row
        tile, `ROW_TILE_ROWS`: one box)."""
        return self.swizzle or self.cols * self.elt_bytes

    @property
    def box_cols(self) -> int:
        return self.span // self.elt_bytes

    @property
    def boxes(self) -> int:
        return self.cols // self.box_cols

    @property
    def box_bytes(self) -> int:
        return self.rows * self.span


@dataclass
class Ring:
    """A staged shared buffer [slots, rows, cols]: `slots` tiles of `slot_bytes` from `address`, and per slot
    a "full" mbarrier (one arrival with the copy's transaction bytes: the data landed) and an "empty" one
    (one arrival per thread of the block: every thread finished reading it), 8 bytes apart from `full` and
    `empty`. Fill and use number u go to slot u mod slots; each wraps the ring every `slots` uses, so
    the phase parity of both barriers flips once per trip around the ring: use u waits for full's phase
    u / slots (parity (u / slots) & 1) and fill u for empty's phase u / slots - 1 (parity flipped; for the
    first trip that is the phase "before" a fresh barrier, which counts as complete)."""

    address: SSAValue
    slots: int
    rows: int
    cols: int
    elt_bytes: int
    full: SSAValue
    empty: SSAValue
    swizzle: int = LINE

    @property
    def slot_bytes(self) -> int:
        return self.rows * self.cols * self.elt_bytes


@dataclass
class Stage:
    """One `tile.stage %ring[remui(use, slots)]`: the ring, the slot (index) and the use number (index)."""

    ring: Ring
    slot: SSAValue
    use: SSAValue
    full: SSAValue
    empty: SSAValue
    earlier: SSAValue | None = None
    """Phases both barriers completed in earlier trips of the loops around the ring's loop (None: none)."""


@dataclass
class Scaled:
    """A register tile `raw * factor` (factor > 0) not multiplied out yet: masks, row maxima and exp_subtract
    fold the factor (max(f x) = f max(x); exp(f x - m) = ex2(x (f log2 e) - m log2 e)), saving one multiply
    per element; any other use multiplies it out once per block (exp_subtract with `subtract_first` does, in
    place: f32(x f) - m before the scale)."""

    raw: SSAValue
    factor: float


@dataclass
class ColumnIota:
    """A `tile.iota cols` column vector [1, N] (`start` + column, i32; `start` the scalar): emitted where it is
    used, laid out as that use needs it: an [BM, N] operand gets an [BM, N] iota, whose registers the
    elementwise op then takes in place, not the N/4 distinct columns shuffled out beside its result
    (`kv_idx - q_idx`); anything else the distinct columns (`doc_ids[kv_idx]` gathers each column once)."""

    start: SSAValue
    columns: int
    """N."""
    name: str | None = None
    """The Tile value's name, given to each copy."""


@dataclass
class RoundOnStore:
    """A `tile.cast` of an f32 register tile to bf16/f16 whose only use is a `tile.store_shared`: the f32
    registers `source`, rounded and packed (`sm90.cvt_pack`) a few at a time where the store writes them, so
    that the packed tile (half the source's registers) is never live whole beside the source (P and dS of the
    attention backward, whose f32 tiles live on after their store)."""

    source: SSAValue
    half: str
    """"bf16" or "f16"."""


@dataclass
class PendingMma:
    """A committed wgmma group not waited for yet: its result (Tile value), the shared tiles it reads, and its A
    operand's Tile value where A is in registers (the PTX ISA leaves reading those registers while the group is
    in flight undefined, as it does the accumulator's: a later read of either waits for the group)."""

    tile_value: SSAValue
    reads: list
    register_a: SSAValue | None = None


@dataclass
class Window:
    """A `tile.view`: source argument index, its (new) index values, window shape, whether its first
    column is even for every value it takes (`is_even`): 16-bit pairs from it then start on 4 bytes wherever
    the tensor's rows do, whether the view is promised `in_bounds` (its accesses take no bounds mask), and
    whether its first row and column are >= 0 for every value they take (`is_nonnegative`): otherwise the
    window may start before its tensor, and its accesses are masked below the tensor's first row and column
    too, as the Tile interpreter reads 0 and drops stores there."""

    arg: int
    indices: list[SSAValue]
    shape: tuple[int, ...]
    even_column: bool = False
    in_bounds: bool = False
    starts_inside: bool = True
    lead_inside: bool = True
    """Whether the window's leading indices (a batch, a head: those before its own dimensions) lie inside the
    tensor for every value they take (`lead_in_range`); otherwise its accesses are masked where they do not."""


def is_even(value: SSAValue, depth: int = 8) -> bool:
    """Whether the Tile IR index `value` is even whatever the inputs: an even constant, a product with an even
    factor, or a sum or difference of even values (a block's first column, j x 64, say). False when unsure."""
    owner = value.owner
    if depth == 0:
        return False
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data % 2 == 0
    if isinstance(owner, arith.MuliOp):
        return is_even(owner.lhs, depth - 1) or is_even(owner.rhs, depth - 1)
    if isinstance(owner, arith.AddiOp | arith.SubiOp):
        return is_even(owner.lhs, depth - 1) and is_even(owner.rhs, depth - 1)
    return False


_NONNEGATIVE_OPS = (arith.AddiOp, arith.MuliOp, arith.DivUIOp, arith.CeilDivUIOp, arith.RemUIOp, arith.MaxUIOp,
                    arith.MinUIOp, arith.MinSIOp)


def is_nonnegative(value: SSAValue, depth: int = 8) -> bool:
    """Whether the Tile IR index `value` is >= 0 whatever the inputs: a constant >= 0, a program id, a size
    (`tile.dim`), a position read with `tile.load_index` (a sequence start or a page number: the entry points
    that pass such tables refuse negative entries), the induction variable of an `scf.for` whose lower bound is
    >= 0 (steps are positive), or a sum, product, unsigned quotient, remainder, maximum or minimum of such
    values (and a signed maximum with one of them). False when unsure: a difference (`t0 - k`, a window that
    may start before its tensor)."""
    if depth == 0:
        return False
    if isinstance(value, BlockArgument):
        loop = value.block.parent_op()
        return isinstance(loop, scf.ForOp) and value.index == 0 and is_nonnegative(loop.lb, depth - 1)
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data >= 0
    if isinstance(owner, tile.ProgramIdOp | tile.DimOp | tile.LoadIndexOp):
        return True
    if isinstance(owner, arith.MaxSIOp):
        return is_nonnegative(owner.lhs, depth - 1) or is_nonnegative(owner.rhs, depth - 1)
    if isinstance(owner, _NONNEGATIVE_OPS):
        return is_nonnegative(owner.lhs, depth - 1) and is_nonnegative(owner.rhs, depth - 1)
    return False


def lead_in_range(value: SSAValue, dim, grid) -> bool:
    """Whether the Tile IR index `value` lies in [0, dim) whatever the sizes, for `dim` a tensor dimension's
    expression and `grid` the kernel's `tile.grid`: a constant below a constant dimension, or the program id of
    a grid axis whose expression is the dimension's own (`tile.program_id z` over a grid of `batch` blocks in z
    indexing a tensor's `batch` dimension) or of one block, or the induction variable of an `scf.for` from a
    bound >= 0 to one that is (a constant up to a constant dimension: the parts of a split). False when unsure (a
    grid rounded up, `h // 2`)."""
    if isinstance(value, BlockArgument):
        loop = value.block.parent_op()
        if not (isinstance(loop, scf.ForOp) and value.index == 0 and is_nonnegative(loop.lb)):
            return False
        upper = loop.ub.owner
        return (isinstance(upper, arith.ConstantOp) and isinstance(upper.value, IntegerAttr) and dim.is_constant
                and upper.value.value.data <= dim.value.data)
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return dim.is_constant and 0 <= owner.value.value.data < dim.value.data
    if isinstance(owner, tile.ProgramIdOp):
        axis = "xyz".index(owner.axis.data)
        extent = list(grid)[axis] if axis < len(grid) else None
        return extent is None or extent == dim or (extent.is_constant and extent.value.data == 1)
    return False


@dataclass
class Group:
    """A `tile.cp_commit_group`: its mbarrier, the bytes its copies bring, the loop it executes in."""

    barrier: SSAValue
    loop: scf.ForOp | None
    nbytes: int = 0


@dataclass
class LoopInfo:
    op: scf.ForOp
    trip: SSAValue  # the trip index (iv - lb) / step in the new IR



def op_tile_type(op: Operation) -> TileType:
    return op.operands[0].type


def constant_f32(value: SSAValue) -> float | None:
    """The value of a `tile.fill` (every element the same f32 constant), or None."""
    owner = value.owner
    return owner.value.value.data if isinstance(owner, tile.FillOp) else None


def constant_i32(value: SSAValue) -> int | None:
    """The value of a `tile.splat` of an integer `arith.constant` (a divisor, a compared bound), as an i32."""
    owner = value.owner
    if not isinstance(owner, tile.SplatOp) or not isinstance(owner.value.owner, arith.ConstantOp):
        return None
    constant = owner.value.owner.value
    if not isinstance(constant, IntegerAttr):
        return None
    return (constant.value.data + 2**31) % 2**32 - 2**31  # an index constant is truncated to i32


def feeds_mma_a_only(value: SSAValue, seen: set | None = None) -> bool:
    """Whether every use of `value` is the A operand of a tile.mma, directly or through the iteration arguments
    and results of an scf.for (as its initial value or yielded) or the results of an scf.if: an 8-bit P in registers
    means nothing else (its keys are in P8 key order)."""
    seen = set() if seen is None else seen
    if value in seen:
        return True
    seen.add(value)
    for use in value.uses:
        user = use.operation
        if isinstance(user, tile.MmaOp) and user.a is value and user.b is not value:
            continue
        if isinstance(user, scf.ForOp) and use.index >= 3:  # an initial value of an iteration argument
            i = use.index - 3
            if not all(feeds_mma_a_only(v, seen) for v in (user.results[i], user.body.block.args[i + 1])):
                return False
            continue
        if not isinstance(user, scf.YieldOp):
            return False
        parent = user.parent_op()
        carried = [parent.results[use.index]]
        if isinstance(parent, scf.ForOp):
            carried.append(parent.body.block.args[use.index + 1])
        elif not isinstance(parent, scf.IfOp):
            return False
        if not all(feeds_mma_a_only(v, seen) for v in carried):
            return False
    return True
