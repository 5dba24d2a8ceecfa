"""Tile IR memory ops, part of the `tile` dialect (`tile.py` registers them and re-exports each as `tile.X`).

Allocation of shared tiles and their ring stages, windows of global tensors, the asynchronous copies into
shared memory (`tile.cp_async`, the paged row gather `tile.cp_async_gather`) with their commit and wait
groups, the block barrier, the release of a ring stage, and the loads and stores between registers and
memory (`tile.load`, `tile.load_broadcast`, `tile.store_global`, `tile.store_global_rows`,
`tile.load_index`), and the per-element gather into registers (`tile.gather`). The backward's shared stores,
atomics and semaphores are in `tile_backward.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects import arith
from xdsl.dialects.builtin import I64, Float32Type, IndexType, IntegerAttr, IntegerType, UnitAttr
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import MemoryAllocEffect, MemoryReadEffect, MemoryWriteEffect, Pure

from tessera.dialects.tile_base import (TILE, RegisterStoreOp, columns_into_row, require_register_store, require_space,
                                        tile_type)
from tessera.dialects.tile_elementwise import broadcast_shape, is_i32
from tessera.dialects.tile_types import DYNAMIC, MemSpace, TileType
from tessera.ir.diagnostics import require, source_location

# region Memory: allocation, views and copies


@irdl_op_definition
class AllocSharedOp(IRDLOperation):
    """`%s = tile.alloc_shared [align N] : !tile.tile<...shared...>`: a shared-memory buffer for the whole block.

    The buffer lives for the whole kernel. With rank >= 3 the leading dimension is a stage index (a ring of
    buffers) that `tile.stage` selects. `align` is the byte alignment of its start (a power of two, at least
    16); `assign-swizzle` sets it to what the tile's swizzle needs."""

    name = "tile.alloc_shared"
    result = result_def(TILE)
    alignment = opt_prop_def(IntegerAttr[I64])
    traits = traits_def(MemoryAllocEffect())
    assembly_format = "(`align` $alignment^)? attr-dict `:` type($result)"

    def __init__(self, ty: TileType, alignment: int | None = None):
        properties = {} if alignment is None else {"alignment": IntegerAttr(alignment, 64)}
        super().__init__(result_types=[ty], properties=properties)

    def verify_(self) -> None:
        ty = tile_type(self.result)
        require_space(self, "result", ty, MemSpace.SHARED)
        if self.alignment is not None:
            align = self.alignment.value.data
            require(align >= 16 and align & (align - 1) == 0, self, f"alignment must be a power of two >= 16 bytes, got {align}")


@irdl_op_definition
class StageOp(IRDLOperation):
    """`%b = tile.stage %ring[%i] : ring_type -> buffer_type`: stage `i` of a staged shared buffer.

    The result aliases the ring's memory; `i` must be in [0, stages)."""

    name = "tile.stage"
    source = operand_def(TILE)
    index = operand_def(IndexType)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$source `[` $index `]` attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, index: SSAValue | Operation):
        ty = tile_type(source)
        super().__init__(operands=[source, index], result_types=[ty.with_(shape=ty.get_shape()[1:])])

    def verify_(self) -> None:
        src, res = tile_type(self.source), tile_type(self.result)
        require_space(self, "source", src, MemSpace.SHARED)
        require(src.rank >= 3, self, f"source must have a leading stage dimension (rank >= 3), got rank {src.rank}")
        require(
            res == src.with_(shape=src.get_shape()[1:]),
            self,
            f"result must be the source without its stage dimension, {src.with_(shape=src.get_shape()[1:])}",
        )


@irdl_op_definition
class ViewOp(IRDLOperation):
    """`%w = tile.view %t[%i0, ..., %in] : global_type -> window_type`: a window of a global tensor.

    One index per dimension of the source. The window covers the innermost `rank(window)` dimensions starting
    at the last indices; the leading indices select (batch, head, ...). The window may extend past the
    tensor's bounds: reads there give zero and writes there are dropped.

    `%w = tile.view %t[...] in_bounds : ...` is the author's promise that the whole window lies inside the
    tensor (every leading index below its dimension, every window dimension's start + extent at most its
    dimension), as MLIR's `vector.transfer_read ... in_bounds` promises: the accesses through it then need no
    bounds masks (a target may drop the per-element predicates). The Tile interpreter checks the promise at
    the view and reports a window that breaks it; a lowered kernel would read or write outside the tensor."""

    name = "tile.view"
    source = operand_def(TILE)
    indices = var_operand_def(IndexType)
    in_bounds = opt_prop_def(UnitAttr)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = (
        "$source `[` $indices `]` (`in_bounds` $in_bounds^)? attr-dict `:` type($source) `->` type($result)"
    )

    def __init__(self, source: SSAValue | Operation, indices: Sequence[SSAValue | Operation], shape: Sequence[int],
                 in_bounds: bool = False):
        ty = tile_type(source)
        super().__init__(operands=[source, list(indices)], result_types=[ty.with_(shape=tuple(shape))],
                         properties={"in_bounds": UnitAttr()} if in_bounds else {})

    def verify_(self) -> None:
        src, res = tile_type(self.source), tile_type(self.result)
        require_space(self, "source", src, MemSpace.GLOBAL)
        require_space(self, "result", res, MemSpace.GLOBAL)
        require(res.is_static, self, "the window must have a static shape")
        require(len(self.indices) == src.rank, self, f"needs {src.rank} indices (one per source dimension), got {len(self.indices)}")
        require(res.rank <= src.rank, self, f"window rank {res.rank} exceeds source rank {src.rank}")
        require(res.element_type == src.element_type, self, "window and source element types must match")
        self._verify_reaches_the_tensor(src, res)

    def _verify_reaches_the_tensor(self, src: TileType, res: TileType) -> None:
        """A window may reach past either end of its tensor, but one that a constant index puts wholly outside a
        static dimension (`%S[%m0, %c1]` of an [M, 1] tensor) reads only zeros and stores nothing whatever the
        sizes: always a mistake, refused here."""
        extents = [1] * (src.rank - res.rank) + list(res.get_shape())
        for k, (index, size, extent) in enumerate(zip(self.indices, src.get_shape(), extents)):
            owner = index.owner
            if size == DYNAMIC or not isinstance(owner, arith.ConstantOp) or not isinstance(owner.value, IntegerAttr):
                continue
            start = owner.value.value.data
            require(start < size and start + extent > 0, self,
                    f"the window [{start}, {start + extent}) of dimension {k} lies wholly outside the tensor's {size}: "
                    "it would read only zeros and store nothing")


@irdl_op_definition
class CpAsyncOp(IRDLOperation):
    """`tile.cp_async %window, %shared : window_type, shared_type`: start an asynchronous copy of a global
    window into a shared tile.

    The copy joins the current group of the issuing block; it is complete only after a `tile.cp_commit_group`
    and a `tile.cp_wait_group` that covers it, and visible to the whole block only after a following
    `tile.barrier`. Elements of the window outside the tensor land as zero.

    With `cluster_shared`, every block of the kernel's cluster (`tile.cluster`, see `tessera.cluster`) copies
    the same window at the same step: a target may read it once and deliver it to each member's shared tile.
    The kernel must declare a cluster; the Tile interpreter checks that the members' windows agree."""

    name = "tile.cp_async"
    source = operand_def(TILE)
    dest = operand_def(TILE)
    cluster_shared = opt_prop_def(UnitAttr)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = (
        "$source `,` $dest (`cluster_shared` $cluster_shared^)? attr-dict `:` type($source) `,` type($dest)"
    )

    def __init__(self, source: SSAValue | Operation, dest: SSAValue | Operation, cluster_shared: bool = False):
        super().__init__(operands=[source, dest],
                         properties={"cluster_shared": UnitAttr()} if cluster_shared else {})

    def verify_(self) -> None:
        src, dst = tile_type(self.source), tile_type(self.dest)
        require_space(self, "source", src, MemSpace.GLOBAL)
        require_space(self, "destination", dst, MemSpace.SHARED)
        require(src.get_shape() == dst.get_shape(), self, f"source shape {list(src.get_shape())} and destination shape {list(dst.get_shape())} must match")
        require(src.element_type == dst.element_type, self, "source and destination element types must match")
        if self.cluster_shared is not None:
            fn = self.parent_op()
            while fn is not None and fn.name != "func.func":
                fn = fn.parent_op()
            require(fn is None or "tile.cluster" in fn.attributes, self,
                    "is cluster_shared, but its kernel declares no 'tile.cluster' shape")


@irdl_op_definition
class CpAsyncGatherOp(IRDLOperation):
    """`tile.cp_async_gather %cache[%i2, ..., %col], %table[%t0, ...], %start, %end, %dest : cache_type,
    table_type, shared_type`: start an asynchronous copy of R rows of a paged global tensor, each row through a
    page table, into an [R, C] shared tile (a paged KV cache's key block when the page is not a multiple of it).

    `%cache` has rank >= 3: dimension 0 numbers the pages, dimension 1 the P = dim(cache, 1) rows of a page, and
    the indices select the remaining dimensions (the last one is the window's first column). `%table` is an i32
    global tensor whose last dimension holds page numbers; its indices select all but that dimension. With
    t = start + r, row r of the destination is

        dest[r, c] = cache[table[t0, ..., t // P], t mod P, i2, ..., col + c]    for t < end
        dest[r, c] = 0                                                          for t >= end (nothing is read)

    and columns past the tensor read as zero. The copy joins the current group and completes like
    `tile.cp_async` (a `tile.cp_commit_group`, a covering `tile.cp_wait_group`, then a `tile.barrier`, or
    into a ring stage published by the wait), so it is a ring refill for pipelining. A table slot t // P outside
    the table or a page number outside [0, dim(cache, 0)) for a row t < end is an error of the kernel (the
    interpreters report it), never a read elsewhere."""

    name = "tile.cp_async_gather"
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    source = operand_def(TILE)
    indices = var_operand_def(IndexType)
    table = operand_def(TILE)
    table_indices = var_operand_def(IndexType)
    start = operand_def(IndexType)
    end = operand_def(IndexType)
    dest = operand_def(TILE)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = (
        "$source `[` $indices `]` `,` $table `[` $table_indices `]` `,` $start `,` $end `,` $dest attr-dict "
        "`:` type($source) `,` type($table) `,` type($dest)"
    )

    def __init__(self, source: SSAValue | Operation, indices: Sequence[SSAValue | Operation],
                 table: SSAValue | Operation, table_indices: Sequence[SSAValue | Operation],
                 start: SSAValue | Operation, end: SSAValue | Operation, dest: SSAValue | Operation):
        super().__init__(operands=[source, list(indices), table, list(table_indices), start, end, dest])

    def verify_(self) -> None:
        src, table, dst = tile_type(self.source), tile_type(self.table), tile_type(self.dest)
        require_space(self, "source", src, MemSpace.GLOBAL)
        require_space(self, "table", table, MemSpace.GLOBAL)
        require_space(self, "destination", dst, MemSpace.SHARED)
        require(src.rank >= 3, self, f"the source must have rank >= 3 ([pages, page rows, ..., columns]), got rank {src.rank}")
        require(len(self.indices) == src.rank - 2, self,
                f"needs {src.rank - 2} source indices (one per dimension after the page and row dimensions), got {len(self.indices)}")
        require(table.element_type == IntegerType(32), self, f"the table must hold i32 page numbers, got {table.element_type}")
        require(len(self.table_indices) == table.rank - 1, self,
                f"needs {table.rank - 1} table indices (one per dimension before the page slots), got {len(self.table_indices)}")
        require(dst.rank == 2, self, f"the destination must be a [rows, columns] tile, got rank {dst.rank}")
        require(dst.element_type == src.element_type, self, "source and destination element types must match")


ASYNC_COPY_OPS = (CpAsyncOp, CpAsyncGatherOp)
"""The asynchronous copies into a shared tile: each joins the current copy group, and one into a ring stage is a
ring refill (`pipeline-loops`, `overlap-softmax`, `peel-masked-iterations` treat them alike)."""


@irdl_op_definition
class CpCommitGroupOp(IRDLOperation):
    """`tile.cp_commit_group`: close the current group of `tile.cp_async` copies (it may be empty)."""

    name = "tile.cp_commit_group"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class CpWaitGroupOp(IRDLOperation):
    """`tile.cp_wait_group N`: wait until at most N committed copy groups are still in flight (the N most
    recent ones); every older group has landed in shared memory."""

    name = "tile.cp_wait_group"
    pending = prop_def(IntegerAttr[I64])
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$pending attr-dict"

    def __init__(self, pending: int = 0):
        super().__init__(properties={"pending": IntegerAttr(pending, 64)})

    def verify_(self) -> None:
        require(self.pending.value.data >= 0, self, f"pending group count must be >= 0, got {self.pending.value.data}")


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """`tile.barrier`: every thread of the block reaches this point; shared-memory writes and landed copies
    before it are visible to every thread after it."""

    name = "tile.barrier"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class ReleaseOp(IRDLOperation):
    """`tile.release %stage : stage_type`: the block has finished reading one stage of a ring (a `tile.stage`
    of a staged shared buffer); a copy may refill it.

    Copies into ring stages are bulk copies: the `tile.cp_wait_group` that covers one publishes it to the
    whole block (no `tile.barrier` is needed), and every later read of that stage must come before the
    `tile.release` of the stage. Refilling a stage that was read and not released since, or reading a
    stage after its release and before its next copy landed, is a race. This is what lets a pipeline
    overlap the copy of stage i+N-1 with the compute on stage i without a block-wide barrier per step.

    The verifier refuses the race it can see in the text: a later op of the release's block (or nested in
    one) that uses the released stage value before a copy into it (`tile.cp_async`, `tile.cp_async_gather`)
    refills it. The Tile interpreter reports the others (another `tile.stage` of the same slot) when it runs."""

    name = "tile.release"
    stage = operand_def(TILE)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$stage attr-dict `:` type($stage)"

    def __init__(self, stage: SSAValue | Operation):
        super().__init__(operands=[stage])

    def verify_(self) -> None:
        require_space(self, "operand", tile_type(self.stage), MemSpace.SHARED)
        require(isinstance(self.stage.owner, StageOp), self, "operand must be a stage of a ring (the result of tile.stage)")
        if (user := _use_after_release(self)) is not None:
            at = source_location(user)
            require(False, self, f"releases the stage that {user.name}{f' at {at}' if at else ''} uses after it, before "
                                 "a copy refills it: a released stage may be refilled at any moment (use it before "
                                 "its release)")


def _use_after_release(release: ReleaseOp) -> Operation | None:
    """The first op after `release` in its block (or nested in such an op) that uses the released stage, unless
    a copy into the stage (a refill) comes first; another release of it is no use."""
    stage, op = release.stage, release.next_op
    while op is not None:
        for inner in op.walk():
            if stage not in inner.operands or isinstance(inner, ReleaseOp):
                continue
            if isinstance(inner, (CpAsyncOp, CpAsyncGatherOp)) and inner.dest == stage:
                return None
            return inner
        op = op.next_op
    return None


@irdl_op_definition
class LoadOp(IRDLOperation):
    """`%r = tile.load %window : window_type -> register_type`: read a global window (or a shared tile) into
    registers. Out-of-bounds elements of a window read as zero."""

    name = "tile.load"
    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation):
        super().__init__(operands=[source], result_types=[tile_type(source).with_(space=MemSpace.REGISTER, swizzle=0)])

    def verify_(self) -> None:
        src, res = tile_type(self.source), tile_type(self.result)
        require_space(self, "source", src, MemSpace.GLOBAL, MemSpace.SHARED)
        require_space(self, "result", res, MemSpace.REGISTER)
        broadcast = src.rank == 1 and res.rank == 2 and res.get_shape()[-1] == src.get_shape()[0]
        require(src.get_shape() == res.get_shape(), self, "source and result shapes must match" + (
            f" (tile.load_broadcast reads the 1-D window into {list(res.get_shape())})" if broadcast else ""))
        require(src.element_type == res.element_type, self, "source and result element types must match")


@irdl_op_definition
class LoadBroadcastOp(IRDLOperation):
    """`%r = tile.load_broadcast %row : row_type -> register_type`: read a row of N elements once and repeat it
    on every row of an [M, N] register tile (a bias added to every row of a GEMM's output; the backward's LSE2
    and dPsum down the key rows).

    The row is a static 1-D global window [N] (out-of-bounds elements read as zero), or a one-row shared tile
    [1, N] (a `tile.alloc_shared` or a ring stage that a `tile.cp_async` of a [1, N] window filled: the row then
    comes through shared memory with the block's other copies, and reading it follows the rules of every shared
    read: after the copy's wait and barrier, before the tile is refilled)."""

    name = "tile.load_broadcast"
    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, rows: int):
        ty = tile_type(source)
        row = ty.get_shape()[-1:]
        super().__init__(operands=[source], result_types=[ty.with_(shape=(rows,) + row, space=MemSpace.REGISTER, swizzle=0)])

    def verify_(self) -> None:
        src, res = tile_type(self.source), tile_type(self.result)
        require_space(self, "source", src, MemSpace.GLOBAL, MemSpace.SHARED)
        require_space(self, "result", res, MemSpace.REGISTER)
        if src.memory_space == MemSpace.SHARED:
            require(src.rank == 2 and src.get_shape()[0] == 1, self,
                    f"a shared source must be a one-row tile [1, N], got {list(src.get_shape())}")
        else:
            require(src.rank == 1 and src.is_static, self, f"the source must be a static 1-D window, got rank {src.rank}")
        row = src.get_shape()[-1:]
        require(res.rank == 2 and res.get_shape()[1:] == row, self,
                f"the result must be [M, {row[0] if row else '?'}] (the window on every row), got {list(res.get_shape())}")
        require(src.element_type == res.element_type, self, "source and result element types must match")


@irdl_op_definition
class StoreGlobalOp(RegisterStoreOp):
    """`tile.store_global %value, %window : value_type, window_type`: write a register tile to a global
    window of its shape, or a column vector [1, N] to a 1-D window [N] (its columns: `tile_base.columns_into_row`).
    Elements that fall outside the tensor are not written."""

    name = "tile.store_global"
    DEST_SPACE: ClassVar[MemSpace] = MemSpace.GLOBAL
    DEST_NAME: ClassVar[str] = "window"


@irdl_op_definition
class StoreGlobalRowsOp(IRDLOperation):
    """`tile.store_global_rows %value, %window, %rows : value_type, window_type`: `tile.store_global` of only
    the window's first `rows` rows (none when rows <= 0); elements outside the tensor are not written either.

    For tensors that pack several sequences along their rows (varlen attention): a block's window may reach
    past the end of its sequence into the next one, and those rows must not be written. A column vector [1, N]
    into a 1-D window has no rows to count (its columns are the window's elements): it is refused, as
    `tile.store_global` stores it."""

    name = "tile.store_global_rows"
    value = operand_def(TILE)
    dest = operand_def(TILE)
    rows = operand_def(IndexType)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$value `,` $dest `,` $rows attr-dict `:` type($value) `,` type($dest)"

    def __init__(self, value: SSAValue | Operation, dest: SSAValue | Operation, rows: SSAValue | Operation):
        super().__init__(operands=[value, dest, rows])

    def verify_(self) -> None:
        require_register_store(self, MemSpace.GLOBAL, "window")  # the rules of tile.store_global
        require(not columns_into_row(tile_type(self.value), tile_type(self.dest)), self,
                "a column vector [1, N] goes into a 1-D window [N] by its columns, not its rows: store it with "
                "tile.store_global")


@irdl_op_definition
class LoadIndexOp(IRDLOperation):
    """`%n = tile.load_index %table[%i0, ..., %in] : table_type`: one element of an i32 global tensor (one
    index per dimension), read as an index, e.g. a sequence start from `cu_seqlens` or a page number from a
    page table. Every block reads the same element; an index outside the tensor is an error of the kernel
    (the interpreters report it), not a zero."""

    name = "tile.load_index"
    source = operand_def(TILE)
    indices = var_operand_def(IndexType)
    result = result_def(IndexType)
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$source `[` $indices `]` attr-dict `:` type($source)"

    def __init__(self, source: SSAValue | Operation, indices: Sequence[SSAValue | Operation]):
        super().__init__(operands=[source, list(indices)], result_types=[IndexType()])

    def verify_(self) -> None:
        ty = tile_type(self.source)
        require_space(self, "source", ty, MemSpace.GLOBAL)
        require(ty.element_type == IntegerType(32), self, f"the table must hold i32 elements, got {ty.element_type}")
        require(len(self.indices) == ty.rank, self, f"needs {ty.rank} indices (one per dimension), got {len(self.indices)}")


# endregion


# region Gathers


@irdl_op_definition
class GatherOp(IRDLOperation):
    """`%r = tile.gather %table[%i0, ..., %in] : table_type, index_types -> result_type`: a register tile of
    elements of a global tensor at per-element coordinates, r[p] = table[i0[p], ..., in[p]] (one i32 index
    tile per dimension of the table, broadcast to the result's shape as `tile_elementwise`'s operands are:
    [M, N], a row vector [M], a column [M, 1] or a column vector [1, N], or [1, 1] for one value).

    It reads what a score or mask modifier indexes (`slopes[h]`, `doc_ids[kv_idx]`, a relative-position
    table). Each read is bounds-checked: an element whose coordinates fall outside the table reads 0 (a
    predicated load), because a modifier is evaluated over whole tiles, including positions past seq_q or
    seq_k that the kernel masks afterwards; the host proves the positions that count inside the table before a
    launch (`tessera.variants.index_ranges`), and the reference checks them (`tessera.variants.bounds_checks.
    bounds_checked`). The table holds f32 or i32; the result has its element type."""

    name = "tile.gather"
    source = operand_def(TILE)
    indices = var_operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$source `[` $indices `]` attr-dict `:` type($source) `,` type($indices) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, indices: Sequence[SSAValue | Operation]):
        table = tile_type(source)
        shapes = [tile_type(i).get_shape() for i in indices]
        shape = broadcast_shape(shapes) or shapes[0]
        ty = TileType(list(shape), table.element_type, MemSpace.REGISTER)
        super().__init__(operands=[source, list(indices)], result_types=[ty])

    def verify_(self) -> None:
        table = tile_type(self.source)
        require_space(self, "source", table, MemSpace.GLOBAL)
        require(table.element_type == IntegerType(32) or table.element_type == Float32Type(), self,
                f"the table must hold f32 or i32 elements, got {table.element_type}")
        require(len(self.indices) == table.rank, self,
                f"needs {table.rank} index tiles (one per dimension of the table), got {len(self.indices)}")
        for k, index in enumerate(self.indices):
            ty = tile_type(index)
            require_space(self, f"index {k}", ty, MemSpace.REGISTER)
            require(is_i32(ty.element_type), self, f"index {k} must be an i32 tile, got {ty.element_type}")
        shape = broadcast_shape([tile_type(i).get_shape() for i in self.indices])
        require(shape is not None, self, f"index shapes {[list(tile_type(i).get_shape()) for i in self.indices]} do "
                                          "not broadcast")
        result = tile_type(self.result)
        require_space(self, "result", result, MemSpace.REGISTER)
        require(result.get_shape() == shape and result.element_type == table.element_type, self,
                f"result must be a register tile {list(shape)} of {table.element_type}, got {result}")


# endregion
