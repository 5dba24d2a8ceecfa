"""What every op of the `tile` dialect checks: the tile constraint and the verifier helpers.

The ops themselves sit in `tile.py` (identity and sizes), `tile_memory.py`, `tile_compute.py` and
`tile_backward.py`; `tile.py` registers them all as the `tile` dialect and re-exports each as `tile.X`. Every
verifier message has the form `'tile.op' op <rule>` (`require`).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from xdsl.ir import Operation, SSAValue
from xdsl.irdl import IRDLOperation, base, operand_def, traits_def
from xdsl.traits import MemoryWriteEffect

from tessera.dialects.tile_types import MemSpace, TileType, is_float, is_fp8
from tessera.ir.diagnostics import require

TILE = base(TileType)


def tile_type(value: SSAValue | Operation) -> TileType:
    """The tile type of a value (or of an op's one result) that the op's constraints already made a tile."""
    value = SSAValue.get(value)
    assert isinstance(value.type, TileType)
    return value.type


F32_OVERFLOW = 2.0**128 - 2.0**103
"""The smallest magnitude that rounds to infinity in f32 (the largest finite f32 plus half its ulp)."""


def as_f32(value: float) -> float:
    """The f32 nearest to `value`, so that an f32 property prints and parses back to the same number; a finite
    value past f32's range is a ValueError (it would silently become an infinity)."""
    if math.isfinite(value) and abs(value) >= F32_OVERFLOW:
        raise ValueError(f"{value!r} is out of range for f32 (magnitudes up to 3.4028235e+38; pass inf for an "
                         "infinity)")
    return float(np.float32(value))


def require_space(op: Operation, what: str, ty: TileType, *spaces: MemSpace) -> None:
    names = " or ".join(s.value for s in spaces)
    require(ty.memory_space in spaces, op, f"{what} must be a {names} tile, got {ty.memory_space.value}")


def columns_into_row(value: TileType, window: TileType) -> bool:
    """Whether `value` is a column vector [1, N] (one value per column) and `window` a 1-D global window [N]: a
    store or an add writes its columns as the window's N elements, the inverse of `tile.load_broadcast` of a 1-D
    window (a bias gradient dB [N] from `tile.col_sum`)."""
    return (value.rank == 2 and value.get_shape()[0] == 1 and window.rank == 1
            and window.memory_space == MemSpace.GLOBAL and window.get_shape()[0] == value.get_shape()[1])


def require_register_store(op: Operation, space: MemSpace, dest_name: str) -> None:
    """A store of the register tile `op.value` into `op.dest`, a tile of `space` (`dest_name` in messages): the
    same shape (or a column vector [1, N] into a 1-D global window [N], `columns_into_row`) and element type (a
    store does not round: `tile.cast` first)."""
    val, dst = tile_type(op.value), tile_type(op.dest)
    require_space(op, "value", val, MemSpace.REGISTER)
    require_space(op, "destination", dst, space)
    require(val.get_shape() == dst.get_shape() or columns_into_row(val, dst), op,
            f"value shape {list(val.get_shape())} and {dest_name} shape {list(dst.get_shape())} must match")
    require(val.element_type == dst.element_type, op,
            f"value element type {val.element_type} must match the {dest_name}'s {dst.element_type} (insert a tile.cast)")


class RegisterStoreOp(IRDLOperation):
    """What `tile.store_global` and `tile.store_shared` share: `%value, %dest : value_type, dest_type`, a register
    tile stored whole, and its verifier (`require_register_store`); a subclass names the op, the destination's
    memory space (`DEST_SPACE`) and what its messages call the destination (`DEST_NAME`)."""

    DEST_SPACE: ClassVar[MemSpace] = MemSpace.GLOBAL
    DEST_NAME: ClassVar[str] = ""
    value = operand_def(TILE)
    dest = operand_def(TILE)
    traits = traits_def(MemoryWriteEffect())
    assembly_format = "$value `,` $dest attr-dict `:` type($value) `,` type($dest)"

    def __init__(self, value: SSAValue | Operation, dest: SSAValue | Operation):
        super().__init__(operands=[value, dest])

    def verify_(self) -> None:
        require_register_store(self, self.DEST_SPACE, self.DEST_NAME)


def require_register_float(op: Operation, what: str, ty: TileType, rank: int | None = None) -> None:
    require_space(op, what, ty, MemSpace.REGISTER)
    fp8 = is_fp8(ty.element_type)
    why = " (an 8-bit float's only arithmetic is tile.mma; tile.cast it to f32 first)" if fp8 else ""
    require(is_float(ty.element_type), op, f"{what} must have a float element type{why}, got {ty.element_type}")
    if rank is not None:
        require(ty.rank == rank, op, f"{what} must have rank {rank}, got rank {ty.rank}")


def require_row_vector(op: Operation, what: str, rows: TileType, matrix: TileType) -> None:
    """`rows` is the f32 register row vector that matches the rows of the 2-D `matrix`."""
    require_register_float(op, what, rows, rank=1)
    require(
        rows.get_shape()[0] == matrix.get_shape()[0],
        op,
        f"{what} must have one entry per row ({matrix.get_shape()[0]}), got {rows.get_shape()[0]}",
    )
