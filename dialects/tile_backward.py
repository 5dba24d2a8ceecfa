"""Tile IR ops the attention backward needs (part of the `tile` dialect; `tile.py` registers them).

- `tile.store_shared`: a register tile written into a shared tile (P and dS, so that the tensor core can read
  them transposed: `tile.mma ... transpose_a` takes its A operand from shared memory only);
- `tile.atomic_add`: a reducing store, global[window] += value in f32, atomic with respect to other thread
  blocks (the dQ partials every key block adds into dq_accum);
- `tile.scatter_add`: a reducing store at per-element coordinates, table[i(p)] += value(p) in f32, atomic (the
  gradient of a captured array a score_mod reads: each score's contribution added where the score read it);
- `tile.sem_wait`, `tile.sem_signal`: a counting semaphore in global memory that orders the reducing stores
  of different thread blocks (deterministic mode: the key blocks add into one query block in key order).

These ops sit in their own file so that the backward's additions stay apart from the forward's ops; the checks
they share with them come from `tile_base.py`. The backward's row-broadcast ops (`tile.sub_rows`,
`tile.exp2_subtract`) sit in `tile_compute.py` beside the forward's, sharing their base class.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import Float32Type, IndexType, IntegerType, UnitAttr
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, opt_prop_def, operand_def, traits_def, var_operand_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect

from tessera.dialects.tile_base import TILE, RegisterStoreOp, columns_into_row, require_space, tile_type
from tessera.dialects.tile_elementwise import broadcast_shape, is_i32
from tessera.dialects.tile_types import MemSpace, TileType
from tessera.ir.diagnostics import require


# region Stores into shared memory and reducing stores into global memory


@irdl_op_definition
class StoreSharedOp(RegisterStoreOp):
    """`tile.store_shared %value, %dest : register_type, shared_type`: write a register tile into a shared tile.

    Each thread writes the elements it holds; the whole tile is visible to every thread of the block only after
    a following `tile.barrier` (reading it before is a race, and so is storing into a shared tile that some
    thread read since the last barrier, or whose asynchronous copy is in flight). The destination is a whole
    shared buffer (not a ring stage): the backward writes P and dS here so that `tile.mma` can read them as a
    transposed A operand (P^T dO, dS^T Q), which the tensor core takes from shared memory only. Shapes and
    element types must match (round with `tile.cast` first)."""

    name = "tile.store_shared"
    DEST_SPACE: ClassVar[MemSpace] = MemSpace.SHARED
    DEST_NAME: ClassVar[str] = "destination"


def _require_f32(op: Operation, what: str, ty: TileType) -> None:
    """A reducing store's value or destination holds f32 (its additions are f32)."""
    require(isinstance(ty.element_type, Float32Type), op, f"{what} must be f32 (additions are f32), got {ty.element_type}")


@irdl_op_definition
class AtomicAddOp(IRDLOperation):
    """`tile.atomic_add %value, %window [transpose] : value_type, window_type`: window += value (with
    `transpose`, window += value^T), elementwise, in f32.

    The value is an f32 register tile, or an f32 shared tile that a `tile.barrier` has published; the window is
    an f32 global window of the same shape (a register column vector [1, N] may add into a 1-D window [N], its
    columns the window's elements: `tile_base.columns_into_row`; with `transpose`, of the transposed shape: a [D, BM] value adds into
    a [BM, D] window, the backward's dQ^T = K^T dS^T of a kernel whose register tiles have key rows, or a column
    vector [1, N] into an [N, 1] column). Each element's addition is atomic with respect to every other
    thread block (the lowering's `red.global.add.f32`, or a bulk reduction `cp.reduce.async.bulk .add.f32`
    from shared memory): the result is the sum of every contribution, in an order the hardware picks, so two
    runs may differ in the last bits (order them with `tile.sem_wait`/`tile.sem_signal` for bitwise
    reproducibility). Elements of the window outside the tensor are not written: a partial query block at the
    end of the sequence adds only its rows < seq_q (the bounds rule of `tile.view`). The op returns nothing;
    no read of the window is implied."""

    name = "tile.atomic_add"
    value = operand_def(TILE)
    dest = operand_def(TILE)
    transpose = opt_prop_def(UnitAttr)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$value `,` $dest (`transpose` $transpose^)? attr-dict `:` type($value) `,` type($dest)"

    def __init__(self, value: SSAValue | Operation, dest: SSAValue | Operation, transpose: bool = False):
        super().__init__(operands=[value, dest], properties={"transpose": UnitAttr()} if transpose else {})

    def verify_(self) -> None:
        val, dst = tile_type(self.value), tile_type(self.dest)
        require_space(self, "value", val, MemSpace.REGISTER, MemSpace.SHARED)
        require_space(self, "destination", dst, MemSpace.GLOBAL)
        if self.transpose:
            require(val.rank == 2 and dst.rank == 2 and val.get_shape() == dst.get_shape()[::-1], self,
                    f"a transposed add needs a 2-D value of the window's shape reversed: value {list(val.get_shape())}, "
                    f"window {list(dst.get_shape())}")
            require(val.memory_space == MemSpace.REGISTER, self, "a transposed add takes a register value")
        same = val.get_shape() == dst.get_shape() or (val.memory_space == MemSpace.REGISTER and columns_into_row(val, dst))
        require(self.transpose is not None or same, self,
                f"value shape {list(val.get_shape())} and window shape {list(dst.get_shape())} must match")
        for what, ty in (("value", val), ("destination", dst)):
            _require_f32(self, what, ty)


@irdl_op_definition
class ScatterAddOp(IRDLOperation):
    """`tile.scatter_add %value, %table[%i0, ..., %in] : value_type, table_type, index_types`: for every element
    p of the value, table[i0[p], ..., in[p]] += value[p], in f32 (`tile.gather`'s coordinates, run backwards).

    The value is an f32 register tile; the table an f32 global tensor (a kernel argument), with one i32 index
    tile per dimension, each broadcast to the value's shape as `tile.gather`'s are. Elements whose coordinates
    fall outside the table are not added (a modifier's read at a padded position, which `tile.gather` reads as
    0). Each addition is atomic with respect to every other thread and thread block, and several elements may
    add into one entry: the result is the sum of every contribution in an order the hardware picks, so two runs
    may differ in the last bits (`red.global.add.f32` per element; the Tile interpreter adds block after block
    in its batch order). The attention backward adds each score's d loss / d table entry into the gradient of a
    captured array its score_mod reads (`tessera.variants.derivative.captured_derivatives`). Returns nothing."""

    name = "tile.scatter_add"
    value = operand_def(TILE)
    table = operand_def(TILE)
    indices = var_operand_def(TILE)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = ("$value `,` $table `[` $indices `]` attr-dict `:` type($value) `,` type($table) `,` "
                       "type($indices)")

    def __init__(self, value: SSAValue | Operation, table: SSAValue | Operation,
                 indices: list[SSAValue | Operation]):
        super().__init__(operands=[value, table, list(indices)])

    def verify_(self) -> None:
        val, table = tile_type(self.value), tile_type(self.table)
        require_space(self, "value", val, MemSpace.REGISTER)
        require_space(self, "table", table, MemSpace.GLOBAL)
        for what, ty in (("value", val), ("table", table)):
            _require_f32(self, what, ty)
        require(len(self.indices) == table.rank, self,
                f"needs {table.rank} index tiles (one per dimension of the table), got {len(self.indices)}")
        shapes = []
        for k, index in enumerate(self.indices):
            ty = tile_type(index)
            require_space(self, f"index {k}", ty, MemSpace.REGISTER)
            require(is_i32(ty.element_type), self, f"index {k} must be an i32 tile, got {ty.element_type}")
            shapes.append(ty.get_shape())
        shape = broadcast_shape([*shapes, val.get_shape()])
        require(shape == val.get_shape(), self,
                f"index shapes {[list(s) for s in shapes]} must broadcast to the value's {list(val.get_shape())}")


# endregion
# region Semaphores between thread blocks


def _require_semaphore(op: Operation, ty: TileType) -> None:
    require_space(op, "semaphore", ty, MemSpace.GLOBAL)
    require(isinstance(ty.element_type, IntegerType) and ty.element_type.width.data == 32, op,
            f"semaphore must be an i32 window, got {ty.element_type}")
    require(ty.get_shape() == (1,), op, f"semaphore must be a window of one element ([1]), got {list(ty.get_shape())}")


@irdl_op_definition
class SemWaitOp(IRDLOperation):
    """`tile.sem_wait %sem, %expected : window_type`: wait until the i32 counter at `%sem` (a one-element
    global window) equals `expected`, then continue with acquire semantics: the global writes and reducing
    stores that the signalling blocks made before their `tile.sem_signal` are visible after the wait.

    Every thread of the block waits (the lowering: one thread spins on `ld.acquire.gpu`, then a block
    barrier). The counters start at zero (a scratch buffer the launcher zeroes). A wait that no block can
    satisfy any more is a deadlock, which the Tile interpreter reports. The deterministic backward waits for
    `expected = n` (its key block index) before adding into a query block's dq_accum, so the additions happen
    in key-block order whatever order the blocks run in."""

    name = "tile.sem_wait"
    sem = operand_def(TILE)
    expected = operand_def(IndexType)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$sem `,` $expected attr-dict `:` type($sem)"

    def __init__(self, sem: SSAValue | Operation, expected: SSAValue | Operation):
        super().__init__(operands=[sem, expected])

    def verify_(self) -> None:
        _require_semaphore(self, tile_type(self.sem))


@irdl_op_definition
class SemSignalOp(IRDLOperation):
    """`tile.sem_signal %sem : window_type`: add 1 to the i32 counter at `%sem` (a one-element global window)
    with release semantics: every global write and reducing store of the block before it (from every thread:
    the lowering puts a block barrier and a `fence` first, then one thread's `red.release.gpu.add`) is
    visible to a block whose `tile.sem_wait` sees the new count."""

    name = "tile.sem_signal"
    sem = operand_def(TILE)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    assembly_format = "$sem attr-dict `:` type($sem)"

    def __init__(self, sem: SSAValue | Operation):
        super().__init__(operands=[sem])

    def verify_(self) -> None:
        _require_semaphore(self, tile_type(self.sem))


# endregion

BACKWARD_OPS = (StoreSharedOp, AtomicAddOp, ScatterAddOp, SemWaitOp, SemSignalOp)
"""The ops of this file, in the order `tile.py` registers them."""
