"""The Tile IR dialect: what one thread block does with whole tiles.

Values are tiles (`!tile.tile<...>`, see `tile_types`). Compute ops have value semantics on register tiles;
memory ops move tiles between global and shared memory. Loops are `scf.for` with `iter_args`, scalar
arithmetic is `arith` on `index`. Nothing here names a GPU architecture.

Numerics shared by every compute op: register tiles of f32 compute in f32; bf16/f16 values are rounded to
their type where an op produces them (`tile.cast`, `tile.load` of a half tile); `tile.mma` multiplies
bf16/f16 inputs exactly and accumulates in f32.

Softmax conventions (FlashAttention's "safe max"): where a row vector holding a running maximum is subtracted
in `tile.exp_subtract` or `tile.exp_diff`, an entry of -inf (a row that has seen no unmasked key yet) is
treated as 0, so the result is exp(-inf) = 0 rather than NaN. `tile.div_rows` gives 0 where the divisor
row is 0 (a query row that sees no key produces zeros).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from xdsl.dialects.builtin import (
    I64,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    StringAttr,
    UnitAttr,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryAllocEffect, MemoryReadEffect, MemoryWriteEffect, Pure
from xdsl.utils.exceptions import VerifyException

from tessera.dialects.tile_types import (
    DimExprAttr,
    DimsAttr,
    MemSpace,
    MemSpaceAttr,
    TileType,
    is_float,
    is_half,
)
from tessera.hex_floats import parse_optional_hex_float

# The backward's ops (atomics, shared stores, semaphores) live in their own file; re-exported here as tile.X.
from tessera.dialects.tile_backward import (  # noqa: E402
    BACKWARD_OPS,
    AtomicAddOp,
    SemSignalOp,
    SemWaitOp,
    StoreSharedOp,
)

TILE = base(TileType)


def _tile(value: SSAValue | Operation) -> TileType:
    value = SSAValue.get(value)
    assert isinstance(value.type, TileType)
    return value.type


def _as_f32(value: float) -> float:
    """The f32 nearest to `value`, so that an f32 property prints and parses back to the same number."""
    return float(np.float32(value))


def _require(condition: bool, op: Operation, message: str) -> None:
    if not condition:
        raise VerifyException(f"'{op.name}' op {message}")


def _require_space(op: Operation, what: str, ty: TileType, *spaces: MemSpace) -> None:
    names = " or ".join(s.value for s in spaces)
    _require(ty.memory_space in spaces, op, f"{what} must be a {names} tile, got {ty.memory_space.value}")


def _require_register_float(op: Operation, what: str, ty: TileType, rank: int | None = None) -> None:
    _require_space(op, what, ty, MemSpace.REGISTER)
    _require(is_float(ty.element_type), op, f"{what} must have a float element type, got {ty.element_type}")
    if rank is not None:
        _require(ty.rank == rank, op, f"{what} must have rank {rank}, got rank {ty.rank}")


def _require_row_vector(op: Operation, what: str, rows: TileType, matrix: TileType) -> None:
    """`rows` is the f32 register row vector that matches the rows of the 2-D `matrix`."""
    _require_register_float(op, what, rows, rank=1)
    _require(
        rows.get_shape()[0] == matrix.get_shape()[0],
        op,
        f"{what} must have one entry per row ({matrix.get_shape()[0]}), got {rows.get_shape()[0]}",
    )


# region Identity and sizes


@irdl_op_definition
class ProgramIdOp(IRDLOperation):
    """`%i = tile.program_id x : index`: the index of this thread block along grid axis x, y or z.

    The grid itself is the kernel's `tile.grid` attribute."""

    name = "tile.program_id"
    AXES: ClassVar[tuple[str, ...]] = ("x", "y", "z")
    axis = prop_def(StringAttr)
    result = result_def(IndexType)
    traits = traits_def(Pure())

    def __init__(self, axis: str):
        super().__init__(properties={"axis": StringAttr(axis)}, result_types=[IndexType()])

    def verify_(self) -> None:
        _require(self.axis.data in self.AXES, self, f"axis must be x, y or z, got '{self.axis.data}'")

    @property
    def axis_index(self) -> int:
        return self.AXES.index(self.axis.data)

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.axis.data}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : index")

    @classmethod
    def parse(cls, parser: Parser) -> ProgramIdOp:
        axis = parser.parse_identifier("grid axis x, y or z")
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        parser.parse_keyword("index", " (tile.program_id returns an index)")
        op = cls(axis)
        op.attributes.update(attributes)
        return op


@irdl_op_definition
class DimOp(IRDLOperation):
    """`%n = tile.dim %t[2] : type`: the size of dimension `index` of a global tile, as an index."""

    name = "tile.dim"
    source = operand_def(TILE)
    index = prop_def(IntegerAttr[I64])
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "$source `[` $index `]` attr-dict `:` type($source)"

    def __init__(self, source: SSAValue | Operation, index: int):
        super().__init__(
            operands=[source], properties={"index": IntegerAttr(index, 64)}, result_types=[IndexType()]
        )

    def verify_(self) -> None:
        ty = _tile(self.source)
        _require_space(self, "source", ty, MemSpace.GLOBAL)
        i = self.index.value.data
        _require(0 <= i < ty.rank, self, f"dimension {i} is out of range for a rank-{ty.rank} tile")


# endregion
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
        ty = _tile(self.result)
        _require_space(self, "result", ty, MemSpace.SHARED)
        if self.alignment is not None:
            align = self.alignment.value.data
            _require(align >= 16 and align & (align - 1) == 0, self, f"alignment must be a power of two >= 16 bytes, got {align}")


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
        ty = _tile(source)
        super().__init__(operands=[source, index], result_types=[ty.with_(shape=ty.get_shape()[1:])])

    def verify_(self) -> None:
        src, res = _tile(self.source), _tile(self.result)
        _require_space(self, "source", src, MemSpace.SHARED)
        _require(src.rank >= 3, self, f"source must have a leading stage dimension (rank >= 3), got rank {src.rank}")
        _require(
            res == src.with_(shape=src.get_shape()[1:]),
            self,
            f"result must be the source without its stage dimension, {src.with_(shape=src.get_shape()[1:])}",
        )


@irdl_op_definition
class ViewOp(IRDLOperation):
    """`%w = tile.view %t[%i0, ..., %in] : global_type -> window_type`: a window of a global tensor.

    One index per dimension of the source. The window covers the innermost `rank(window)` dimensions starting
    at the last indices; the leading indices select (batch, head, ...). The window may extend past the
    tensor's bounds: reads there give zero and writes there are dropped."""

    name = "tile.view"
    source = operand_def(TILE)
    indices = var_operand_def(IndexType)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$source `[` $indices `]` attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, indices: Sequence[SSAValue | Operation], shape: Sequence[int]):
        ty = _tile(source)
        super().__init__(operands=[source, list(indices)], result_types=[ty.with_(shape=tuple(shape))])

    def verify_(self) -> None:
        src, res = _tile(self.source), _tile(self.result)
        _require_space(self, "source", src, MemSpace.GLOBAL)
        _require_space(self, "result", res, MemSpace.GLOBAL)
        _require(res.is_static, self, "the window must have a static shape")
        _require(len(self.indices) == src.rank, self, f"needs {src.rank} indices (one per source dimension), got {len(self.indices)}")
        _require(res.rank <= src.rank, self, f"window rank {res.rank} exceeds source rank {src.rank}")
        _require(res.element_type == src.element_type, self, "window and source element types must match")


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
        src, dst = _tile(self.source), _tile(self.dest)
        _require_space(self, "source", src, MemSpace.GLOBAL)
        _require_space(self, "destination", dst, MemSpace.SHARED)
        _require(src.get_shape() == dst.get_shape(), self, f"source shape {list(src.get_shape())} and destination shape {list(dst.get_shape())} must match")
        _require(src.element_type == dst.element_type, self, "source and destination element types must match")
        if self.cluster_shared is not None:
            fn = self.parent_op()
            while fn is not None and fn.name != "func.func":
                fn = fn.parent_op()
            _require(fn is None or "tile.cluster" in fn.attributes, self,
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
        src, table, dst = _tile(self.source), _tile(self.table), _tile(self.dest)
        _require_space(self, "source", src, MemSpace.GLOBAL)
        _require_space(self, "table", table, MemSpace.GLOBAL)
        _require_space(self, "destination", dst, MemSpace.SHARED)
        _require(src.rank >= 3, self, f"the source must have rank >= 3 ([pages, page rows, ..., columns]), got rank {src.rank}")
        _require(len(self.indices) == src.rank - 2, self,
                 f"needs {src.rank - 2} source indices (one per dimension after the page and row dimensions), got {len(self.indices)}")
        _require(table.element_type == IntegerType(32), self, f"the table must hold i32 page numbers, got {table.element_type}")
        _require(len(self.table_indices) == table.rank - 1, self,
                 f"needs {table.rank - 1} table indices (one per dimension before the page slots), got {len(self.table_indices)}")
        _require(dst.rank == 2, self, f"the destination must be a [rows, columns] tile, got rank {dst.rank}")
        _require(dst.element_type == src.element_type, self, "source and destination element types must match")


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
        _require(self.pending.value.data >= 0, self, f"pending group count must be >= 0, got {self.pending.value.data}")


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
    overlap the copy of stage i+N-1 with the compute on stage i without a block-wide barrier per step."""

    name = "tile.release"
    stage = operand_def(TILE)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$stage attr-dict `:` type($stage)"

    def __init__(self, stage: SSAValue | Operation):
        super().__init__(operands=[stage])

    def verify_(self) -> None:
        _require_space(self, "operand", _tile(self.stage), MemSpace.SHARED)
        _require(isinstance(self.stage.owner, StageOp), self, "operand must be a stage of a ring (the result of tile.stage)")


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
        super().__init__(operands=[source], result_types=[_tile(source).with_(space=MemSpace.REGISTER, swizzle=0)])

    def verify_(self) -> None:
        src, res = _tile(self.source), _tile(self.result)
        _require_space(self, "source", src, MemSpace.GLOBAL, MemSpace.SHARED)
        _require_space(self, "result", res, MemSpace.REGISTER)
        _require(src.get_shape() == res.get_shape(), self, "source and result shapes must match")
        _require(src.element_type == res.element_type, self, "source and result element types must match")


@irdl_op_definition
class LoadBroadcastOp(IRDLOperation):
    """`%r = tile.load_broadcast %window : row_window_type -> register_type`: read a 1-D global window [N] once
    and repeat it on every row of an [M, N] register tile (a bias added to every row of a GEMM's output).
    Out-of-bounds elements read as zero."""

    name = "tile.load_broadcast"
    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(MemoryReadEffect())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, rows: int):
        ty = _tile(source)
        super().__init__(operands=[source], result_types=[ty.with_(shape=(rows,) + ty.get_shape(), space=MemSpace.REGISTER, swizzle=0)])

    def verify_(self) -> None:
        src, res = _tile(self.source), _tile(self.result)
        _require_space(self, "source", src, MemSpace.GLOBAL)
        _require_space(self, "result", res, MemSpace.REGISTER)
        _require(src.rank == 1 and src.is_static, self, f"the source must be a static 1-D window, got rank {src.rank}")
        _require(res.rank == 2 and res.get_shape()[1:] == src.get_shape(), self,
                 f"the result must be [M, {src.get_shape()[0] if src.rank else '?'}] (the window on every row), got {list(res.get_shape())}")
        _require(src.element_type == res.element_type, self, "source and result element types must match")


@irdl_op_definition
class StoreGlobalOp(IRDLOperation):
    """`tile.store_global %value, %window : value_type, window_type`: write a register tile to a global
    window. Elements that fall outside the tensor are not written."""

    name = "tile.store_global"
    value = operand_def(TILE)
    dest = operand_def(TILE)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$value `,` $dest attr-dict `:` type($value) `,` type($dest)"

    def __init__(self, value: SSAValue | Operation, dest: SSAValue | Operation):
        super().__init__(operands=[value, dest])

    def verify_(self) -> None:
        val, dst = _tile(self.value), _tile(self.dest)
        _require_space(self, "value", val, MemSpace.REGISTER)
        _require_space(self, "destination", dst, MemSpace.GLOBAL)
        _require(val.get_shape() == dst.get_shape(), self, f"value shape {list(val.get_shape())} and window shape {list(dst.get_shape())} must match")
        _require(val.element_type == dst.element_type, self, f"value element type {val.element_type} must match the window's {dst.element_type} (insert a tile.cast)")


@irdl_op_definition
class StoreGlobalRowsOp(IRDLOperation):
    """`tile.store_global_rows %value, %window, %rows : value_type, window_type`: `tile.store_global` of only
    the window's first `rows` rows (none when rows <= 0); elements outside the tensor are not written either.

    For tensors that pack several sequences along their rows (varlen attention): a block's window may reach
    past the end of its sequence into the next one, and those rows must not be written."""

    name = "tile.store_global_rows"
    value = operand_def(TILE)
    dest = operand_def(TILE)
    rows = operand_def(IndexType)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$value `,` $dest `,` $rows attr-dict `:` type($value) `,` type($dest)"

    def __init__(self, value: SSAValue | Operation, dest: SSAValue | Operation, rows: SSAValue | Operation):
        super().__init__(operands=[value, dest, rows])

    def verify_(self) -> None:
        val, dst = _tile(self.value), _tile(self.dest)  # the rules of tile.store_global
        _require_space(self, "value", val, MemSpace.REGISTER)
        _require_space(self, "destination", dst, MemSpace.GLOBAL)
        _require(val.get_shape() == dst.get_shape(), self, f"value shape {list(val.get_shape())} and window shape {list(dst.get_shape())} must match")
        _require(val.element_type == dst.element_type, self, f"value element type {val.element_type} must match the window's {dst.element_type} (insert a tile.cast)")


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
        ty = _tile(self.source)
        _require_space(self, "source", ty, MemSpace.GLOBAL)
        _require(ty.element_type == IntegerType(32), self, f"the table must hold i32 elements, got {ty.element_type}")
        _require(len(self.indices) == ty.rank, self, f"needs {ty.rank} indices (one per dimension), got {len(self.indices)}")


# endregion
# region Tensor-core matrix multiply


@irdl_op_definition
class MmaOp(IRDLOperation):
    """`%d = tile.mma %a, %b, %acc [transpose_a] [transpose_b] : a_type, b_type, acc_type`:
    d = acc + op(A) x op(B), op(X) = X^T where the flag is set.

    A is [M, K] ([K, M] with `transpose_a`: the tile holds A^T, an M-major operand), B is [K, N] ([N, K] with
    `transpose_b`), acc and d are [M, N] f32 registers. A and B are bf16 or f16 (the same type), in shared
    memory or registers; a transposed A must be in shared memory. Products are exact; the sum is f32."""

    name = "tile.mma"
    T: ClassVar = VarConstraint("T", TILE)
    a = operand_def(TILE)
    b = operand_def(TILE)
    acc = operand_def(T)
    result = result_def(T)
    transpose_a = opt_prop_def(UnitAttr)
    transpose_b = opt_prop_def(UnitAttr)
    traits = traits_def(Pure())
    assembly_format = (
        "$a `,` $b `,` $acc (`transpose_a` $transpose_a^)? (`transpose_b` $transpose_b^)? attr-dict "
        "`:` type($a) `,` type($b) `,` type($acc)"
    )

    def __init__(self, a, b, acc, transpose_b: bool = False, transpose_a: bool = False):
        flags = {name: UnitAttr() for name, on in (("transpose_a", transpose_a), ("transpose_b", transpose_b)) if on}
        super().__init__(operands=[a, b, acc], result_types=[SSAValue.get(acc).type], properties=flags)

    def verify_(self) -> None:
        a, b, acc = _tile(self.a), _tile(self.b), _tile(self.acc)
        for what, ty in (("A", a), ("B", b)):
            _require_space(self, f"operand {what}", ty, MemSpace.SHARED, MemSpace.REGISTER)
            _require(ty.rank == 2, self, f"operand {what} must have rank 2, got rank {ty.rank}")
            _require(is_half(ty.element_type), self, f"operand {what} must be bf16 or f16, got {ty.element_type}")
        _require(a.element_type == b.element_type, self, f"A ({a.element_type}) and B ({b.element_type}) must have the same element type")
        _require_space(self, "accumulator", acc, MemSpace.REGISTER)
        _require(isinstance(acc.element_type, Float32Type), self, f"accumulator must be f32, got {acc.element_type}")
        _require(acc.rank == 2, self, f"accumulator must have rank 2, got rank {acc.rank}")
        m, k = reversed(a.get_shape()) if self.transpose_a else a.get_shape()
        n, kb = b.get_shape() if self.transpose_b else reversed(b.get_shape())
        a_text = "[K, M]" if self.transpose_a else "[M, K]"
        b_text = "[N, K]" if self.transpose_b else "[K, N]"
        _require(not (self.transpose_a and a.memory_space == MemSpace.REGISTER), self,
                 "a transposed operand A must be in shared memory (registers hold A as [M, K])")
        _require(k == kb, self, f"contraction sizes differ: A is {a_text} = {list(a.get_shape())}, B is {b_text} = {list(b.get_shape())}")
        _require(acc.get_shape() == (m, n), self, f"accumulator must be [M, N] = {[m, n]}, got {list(acc.get_shape())}")


# endregion
# region Row reductions and softmax pieces


class _RowReductionOp(IRDLOperation):
    """Base of the reductions of each row of a 2-D f32 register tile to a row vector."""

    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation):
        ty = _tile(source)
        super().__init__(operands=[source], result_types=[ty.with_(shape=ty.get_shape()[:1])])

    def verify_(self) -> None:
        src, res = _tile(self.source), _tile(self.result)
        _require_register_float(self, "source", src, rank=2)
        _require_row_vector(self, "result", res, src)
        _require(res.element_type == src.element_type, self, "result element type must match the source's")


@irdl_op_definition
class RowMaxOp(_RowReductionOp):
    """`%m = tile.row_max %x : [M, N] -> [M]`: m[i] = max_j x[i, j] (-inf for a row of -inf)."""

    name = "tile.row_max"


@irdl_op_definition
class RowSumOp(_RowReductionOp):
    """`%l = tile.row_sum %x : [M, N] -> [M]`: l[i] = sum_j x[i, j], summed in f32."""

    name = "tile.row_sum"


class _ElementwiseOp(IRDLOperation):
    """Base of elementwise ops whose operands and result are register float tiles of one type."""

    T: ClassVar = VarConstraint("T", TILE)
    result = result_def(T)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        _require_register_float(self, "result", _tile(self.result))


class _BinaryOp(_ElementwiseOp):
    lhs = operand_def(_ElementwiseOp.T)
    rhs = operand_def(_ElementwiseOp.T)
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($result)"

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        super().__init__(operands=[lhs, rhs], result_types=[SSAValue.get(lhs).type])


@irdl_op_definition
class ExpDiffOp(_BinaryOp):
    """`%r = tile.exp_diff %a, %b [subtract_first] : type`: r = exp(a - b), where b = -inf counts as 0 (safe
    max).

    Used for the rescale factor exp(m_old - m_new) of the online softmax. `subtract_first`: as for
    `tile.exp_subtract`, a lowering must form a - b before it scales it (ex2((a - b) log2 e)); the online
    softmax sets it on both ops or neither, so that the rescale factor matches the exponentials it rescales."""

    name = "tile.exp_diff"
    subtract_first = opt_prop_def(UnitAttr)
    assembly_format = "$lhs `,` $rhs (`subtract_first` $subtract_first^)? attr-dict `:` type($result)"

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation, subtract_first: bool = False):
        super().__init__(lhs, rhs)
        if subtract_first:
            self.subtract_first = UnitAttr()


@irdl_op_definition
class ElementMaxOp(_BinaryOp):
    """`%r = tile.element_max %a, %b : type`: r = max(a, b) elementwise."""

    name = "tile.element_max"


@irdl_op_definition
class AddOp(_BinaryOp):
    """`%r = tile.add %a, %b : type`: r = a + b elementwise."""

    name = "tile.add"


@irdl_op_definition
class MulOp(_BinaryOp):
    """`%r = tile.mul %a, %b : type`: r = a * b elementwise."""

    name = "tile.mul"


@irdl_op_definition
class FmaOp(_ElementwiseOp):
    """`%r = tile.fma %a, %b, %c : type`: r = a * b + c elementwise, with one f32 rounding."""

    name = "tile.fma"
    a = operand_def(_ElementwiseOp.T)
    b = operand_def(_ElementwiseOp.T)
    c = operand_def(_ElementwiseOp.T)
    assembly_format = "$a `,` $b `,` $c attr-dict `:` type($result)"

    def __init__(self, a, b, c):
        super().__init__(operands=[a, b, c], result_types=[SSAValue.get(a).type])


@irdl_op_definition
class ScaleOp(_ElementwiseOp):
    """`%r = tile.scale %x by 0.125 : type`: r = x * factor elementwise (factor is an f32 constant)."""

    name = "tile.scale"
    source = operand_def(_ElementwiseOp.T)
    factor = prop_def(FloatAttr[Float32Type])
    assembly_format = "$source `by` $factor attr-dict `:` type($result)"

    def __init__(self, source: SSAValue | Operation, factor: float):
        super().__init__(
            operands=[source],
            properties={"factor": FloatAttr(_as_f32(factor), Float32Type())},
            result_types=[SSAValue.get(source).type],
        )


@irdl_op_definition
class SaturatingScaleOp(_ElementwiseOp):
    """`%r = tile.saturating_scale %x by 8.0 bound 1.70141183e+38 : type`: r = x * factor rounded to f32, then
    clamped to [-bound, bound] where x is finite; r = x * factor (+-inf) where x is +-inf, NaN where x is NaN.

    A finite x never becomes infinite, even where x * factor is beyond f32's range; an infinite x stays
    infinite. Attention's bias enters the score accumulator as Bias / scale this way (`bias_accumulator` in
    tessera/kernels/attention.py): a finite mask fill (bf16's lowest, -3.39e38, with scale 1/8) stays a finite
    score and a -inf one still hides its key. factor and bound are positive finite f32 constants; the
    operand is an f32 register tile (refused otherwise). Lowered in place per register: mul, max, min, and
    +-inf selected back where x was +-inf (predicates taken before x dies, so no register beside x's)."""

    name = "tile.saturating_scale"
    source = operand_def(_ElementwiseOp.T)
    factor = prop_def(FloatAttr[Float32Type])
    bound = prop_def(FloatAttr[Float32Type])
    assembly_format = "$source `by` $factor `bound` $bound attr-dict `:` type($result)"

    def __init__(self, source: SSAValue | Operation, factor: float, bound: float):
        super().__init__(
            operands=[source],
            properties={"factor": FloatAttr(_as_f32(factor), Float32Type()),
                        "bound": FloatAttr(_as_f32(bound), Float32Type())},
            result_types=[SSAValue.get(source).type],
        )

    def verify_(self) -> None:
        super().verify_()
        ty = _tile(self.result)
        _require(isinstance(ty.element_type, Float32Type), self, f"saturates f32 values, got {ty.element_type}")
        for what in ("factor", "bound"):
            value = getattr(self, what).value.data
            _require(0 < value < float("inf"), self, f"{what} must be a positive finite f32, got {value}")


@irdl_op_definition
class LogOp(_ElementwiseOp):
    """`%r = tile.log %x : type`: r = ln(x) elementwise, the natural logarithm in f32: ln(0) = -inf,
    ln(+inf) = +inf, and NaN for x < 0 or NaN.

    Attention's log-sum-exp (`m + ln(l)` of the online softmax) is its use; the lowering computes it as
    ln(2) * log2(x) with `lg2.approx`, whose documented error the tests' tolerance allows for."""

    name = "tile.log"
    source = operand_def(_ElementwiseOp.T)
    assembly_format = "$source attr-dict `:` type($result)"

    def __init__(self, source: SSAValue | Operation):
        super().__init__(operands=[source], result_types=[SSAValue.get(source).type])

    def verify_(self) -> None:
        super().verify_()
        ty = _tile(self.result)
        _require(isinstance(ty.element_type, Float32Type), self, f"the logarithm is computed in f32, got {ty.element_type}")


class _RowBroadcastOp(IRDLOperation):
    """Base of ops combining a 2-D register tile [M, N] with an f32 row vector [M]."""

    T: ClassVar = VarConstraint("T", TILE)
    source = operand_def(T)
    rows = operand_def(TILE)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$source `,` $rows attr-dict `:` type($source) `,` type($rows)"

    def __init__(self, source: SSAValue | Operation, rows: SSAValue | Operation):
        super().__init__(operands=[source, rows], result_types=[SSAValue.get(source).type])

    def verify_(self) -> None:
        src = _tile(self.source)
        _require_register_float(self, "source", src, rank=2)
        _require_row_vector(self, "row vector", _tile(self.rows), src)


@irdl_op_definition
class ExpSubtractOp(_RowBroadcastOp):
    """`%p = tile.exp_subtract %x, %m [subtract_first] : [M, N], [M]`: p[i, j] = exp(x[i, j] - m[i]), where
    m[i] = -inf counts as 0 (a fully masked row gives zeros, not NaN).

    `subtract_first` (a unit property) says the operands may be huge (an attention bias used as a mask fill,
    e.g. -1e20), so a lowering must form the difference in f32 before it scales it: exp(x - m) as
    ex2((x - m) log2 e), where x - m is exact when x and m are close (Sterbenz), not as the one fma
    ex2(x log2 e - m log2 e), in which m log2 e is rounded and x log2 e is not: a residual of up to
    ulp(m log2 e) / 2 (2^42 for -1e20) that the largest x then gets instead of exp(0) = 1. The residual is
    common to a row, and `tile.exp_diff`'s rounded form carries the matching factor, so it cancels in the
    softmax until ex2 of it overflows or underflows (|m log2 e| past ~2^31). The value is the exact
    exp(x - m) with or without the property (the Tile interpreter ignores it); it only rules out a lowering's
    cheaper rounded form. Set on both ops by `flash_attention(bias=True)`; unbiased scores stay far below that
    range and keep the one fma."""

    name = "tile.exp_subtract"
    subtract_first = opt_prop_def(UnitAttr)
    assembly_format = "$source `,` $rows (`subtract_first` $subtract_first^)? attr-dict `:` type($source) `,` type($rows)"

    def __init__(self, source: SSAValue | Operation, rows: SSAValue | Operation, subtract_first: bool = False):
        super().__init__(source, rows)
        if subtract_first:
            self.subtract_first = UnitAttr()


@irdl_op_definition
class MulRowsOp(_RowBroadcastOp):
    """`%r = tile.mul_rows %x, %s : [M, N], [M]`: r[i, j] = x[i, j] * s[i] (rescale the accumulator)."""

    name = "tile.mul_rows"


@irdl_op_definition
class DivRowsOp(_RowBroadcastOp):
    """`%r = tile.div_rows %x, %l : [M, N], [M]`: r[i, j] = x[i, j] / l[i], and 0 where l[i] = 0."""

    name = "tile.div_rows"


class _F32RowBroadcastOp(_RowBroadcastOp):
    """A row-broadcast op of the attention backward, computed in f32: source and row vector must be f32."""

    def verify_(self) -> None:
        for what, value in (("source", self.source), ("row vector", self.rows)):
            ty = _tile(value)
            _require(isinstance(ty.element_type, Float32Type), self, f"{what} must be f32, got {ty.element_type}")
        super().verify_()


@irdl_op_definition
class SubRowsOp(_F32RowBroadcastOp):
    """`%r = tile.sub_rows %x, %d : [M, N], [M]`: r[i, j] = x[i, j] - d[i] in f32 (dP - dPsum of the backward;
    no special case for infinities)."""

    name = "tile.sub_rows"


@irdl_op_definition
class Exp2SubtractOp(_F32RowBroadcastOp):
    """`%p = tile.exp2_subtract %x, %m : [M, N], [M]`: p[i, j] = 2^(x[i, j] - m[i]), where m[i] = -inf counts as
    0 (the safe-max rule of `tile.exp_subtract`, in base 2).

    The backward recomputes P = exp2(S * scale * log2 e - LSE * log2 e) with this op: a row that sees no key
    has LSE = -inf and every score -inf, so P is 0 there, never NaN. Computed in f32 (the lowering's
    `ex2.approx.ftz.f32`, whose error the tolerance covers)."""

    name = "tile.exp2_subtract"


# endregion
# region Conversions and constants


@irdl_op_definition
class CastOp(IRDLOperation):
    """`%r = tile.cast %x : from_type -> to_type`: convert each element of a register tile; to bf16/f16 it
    rounds to nearest even, to integers it truncates toward zero."""

    name = "tile.cast"
    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, element_type: Attribute):
        super().__init__(operands=[source], result_types=[_tile(source).with_(element_type=element_type)])

    def verify_(self) -> None:
        src, res = _tile(self.source), _tile(self.result)
        _require_space(self, "source", src, MemSpace.REGISTER)
        _require_space(self, "result", res, MemSpace.REGISTER)
        _require(src.get_shape() == res.get_shape(), self, f"cast keeps the shape: {list(src.get_shape())} vs {list(res.get_shape())}")


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """`%r = tile.reshape %x : from_type -> to_type`: the same elements in row-major order, a new shape."""

    name = "tile.reshape"
    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, shape: Sequence[int]):
        super().__init__(operands=[source], result_types=[_tile(source).with_(shape=tuple(shape))])

    def verify_(self) -> None:
        src, res = _tile(self.source), _tile(self.result)
        _require_space(self, "source", src, MemSpace.REGISTER)
        _require_space(self, "result", res, MemSpace.REGISTER)
        _require(src.element_type == res.element_type, self, "reshape keeps the element type")
        _require(src.num_elements == res.num_elements, self, f"reshape keeps the element count: {src.num_elements} vs {res.num_elements}")


@irdl_op_definition
class FillOp(IRDLOperation):
    """`%r = tile.fill -inf : type`: a register tile with every element equal to `value` (written as a number,
    `inf`/`-inf`, or, as in MLIR float attributes, a hex literal that is the f32 bit pattern: `0xff800000`)."""

    name = "tile.fill"
    value = prop_def(FloatAttr[Float32Type])
    result = result_def(TILE)
    traits = traits_def(Pure())

    def __init__(self, value: float, ty: TileType):
        super().__init__(properties={"value": FloatAttr(_as_f32(value), Float32Type())}, result_types=[ty])

    def verify_(self) -> None:
        _require_space(self, "result", _tile(self.result), MemSpace.REGISTER)
        _require(self.value.value.data == self.value.value.data, self, "fill value must not be NaN")

    def print(self, printer: Printer) -> None:
        value = self.value.value.data
        text = {float("inf"): "inf", float("-inf"): "-inf"}.get(value, repr(value))
        printer.print_string(f" {text}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> FillOp:
        start = parser.pos
        negative = parser.parse_optional_punctuation("-") is not None
        if parser.parse_optional_keyword("inf"):
            value = float("inf")
        elif (bits := parse_optional_hex_float(parser, Float32Type())) is not None:  # f32 bits, as in MLIR
            if negative:
                parser.raise_error("hexadecimal float literal should not have a leading minus", start, parser.pos)
            value = bits
        else:
            value = float(parser.parse_number(context_msg=" (the fill value, or inf)"))
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ty = parser.parse_type()
        op = cls(-value if negative else value, ty)
        op.attributes.update(attributes)
        return op


# endregion
# region Masks


@irdl_op_definition
class MaskCausalOp(IRDLOperation):
    """`%r = tile.mask_causal %s, %q0, %k0, %seq_q, %seq_k : type`: causal mask, aligned bottom-right.

    Element (i, j) of the score tile is query q0 + i and key k0 + j. It becomes -inf where
    k0 + j > q0 + i + seq_k - seq_q (FlashAttention >= 2.1: the last query sees every key, so a single
    decoding query sees the whole cache; a query row that sees no key ends up as zeros)."""

    name = "tile.mask_causal"
    T: ClassVar = VarConstraint("T", TILE)
    source = operand_def(T)
    q_start = operand_def(IndexType)
    k_start = operand_def(IndexType)
    seq_q = operand_def(IndexType)
    seq_k = operand_def(IndexType)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$source `,` $q_start `,` $k_start `,` $seq_q `,` $seq_k attr-dict `:` type($source)"

    def __init__(self, source, q_start, k_start, seq_q, seq_k):
        super().__init__(operands=[source, q_start, k_start, seq_q, seq_k], result_types=[SSAValue.get(source).type])

    def verify_(self) -> None:
        _require_register_float(self, "source", _tile(self.source), rank=2)


@irdl_op_definition
class MaskBoundsOp(IRDLOperation):
    """`%r = tile.mask_bounds %s, %k0, %seq_k : type`: sequence-bounds mask.

    Column j of the score tile is key k0 + j; it becomes -inf where k0 + j >= seq_k (keys past the true
    sequence length, which a bounded copy filled with zeros)."""

    name = "tile.mask_bounds"
    T: ClassVar = VarConstraint("T", TILE)
    source = operand_def(T)
    k_start = operand_def(IndexType)
    seq_k = operand_def(IndexType)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$source `,` $k_start `,` $seq_k attr-dict `:` type($source)"

    def __init__(self, source, k_start, seq_k):
        super().__init__(operands=[source, k_start, seq_k], result_types=[SSAValue.get(source).type])

    def verify_(self) -> None:
        _require_register_float(self, "source", _tile(self.source), rank=2)


# endregion

Tile = Dialect(
    "tile",
    [
        ProgramIdOp,
        DimOp,
        AllocSharedOp,
        StageOp,
        ViewOp,
        CpAsyncOp,
        CpAsyncGatherOp,
        CpCommitGroupOp,
        CpWaitGroupOp,
        BarrierOp,
        ReleaseOp,
        LoadOp,
        LoadBroadcastOp,
        StoreGlobalOp,
        StoreGlobalRowsOp,
        LoadIndexOp,
        MmaOp,
        RowMaxOp,
        RowSumOp,
        ExpDiffOp,
        ElementMaxOp,
        AddOp,
        MulOp,
        FmaOp,
        ScaleOp,
        SaturatingScaleOp,
        LogOp,
        ExpSubtractOp,
        MulRowsOp,
        DivRowsOp,
        SubRowsOp,
        Exp2SubtractOp,
        CastOp,
        ReshapeOp,
        FillOp,
        MaskCausalOp,
        MaskBoundsOp,
        *BACKWARD_OPS,
    ],
    [TileType, MemSpaceAttr, DimExprAttr, DimsAttr],
)
