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

The ops sit in files by concern: `tile_memory.py` (allocation, views, copies, barriers, loads and stores),
`tile_compute.py` (mma, row reductions, softmax pieces, row broadcasts, conversions, masks),
`tile_elementwise.py` (elementwise math with broadcasting, compare/select, iota, splat), `tile_backward.py`
(the backward's shared stores, atomics and semaphores), `tile_clear_rows.py` (zeroing a key tile's rows past
the sequence, and the bias tile of `mask-by-mma`), `tile_causal_bias.py` (the causal diagonal's bias table and
its mma, `mask-causal-by-mma`), with the verifier helpers they share in
`tile_base.py`. This file holds the identity and size ops, registers the dialect (`Tile`) and re-exports
every op, so that `tile.X` names each one.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import I64, IndexType, IntegerAttr, StringAttr
from xdsl.dialects.builtin import UnitAttr  # noqa: F401 - re-exported: tile.UnitAttr, as before the split
from xdsl.ir import Dialect, Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, prop_def, result_def, traits_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure

# The ops live in files by concern (see above); each is re-exported here as tile.X.
from tessera.dialects.tile_backward import (
    BACKWARD_OPS,
    AtomicAddOp,
    ScatterAddOp,
    SemSignalOp,
    SemWaitOp,
    StoreSharedOp,
)
from tessera.dialects.tile_base import TILE, require_space, tile_type
from tessera.dialects.tile_causal_bias import CausalBiasOp, CausalBiasTableOp
from tessera.dialects.tile_clear_rows import ClearRowsOp, KeyBiasOp
from tessera.dialects.tile_compute import (
    CastOp,
    DivRowsOp,
    Exp2SubtractOp,
    ExpDiffOp,
    ExpSubtractOp,
    FillOp,
    FmaOp,
    LogOp,
    MaskBoundsOp,
    MaskCausalOp,
    MmaOp,
    MulRowsOp,
    ReshapeOp,
    RowMaxOp,
    RowMinOp,
    RowSumOp,
    ColMaxOp,
    ColMinOp,
    ColSumOp,
    SaturatingScaleOp,
    ScaleOp,
    SubRowsOp,
)
from tessera.dialects.tile_elementwise import (
    BITWISE_OPS,
    ELEMENTWISE_OPS,
    AbsOp,
    AddOp,
    AndOp,
    CmpOp,
    CosOp,
    DivOp,
    ElementMaxOp,
    CeilOp,
    ElementMinOp,
    ErfOp,
    Exp2Op,
    ExpOp,
    FloorDivOp,
    FloorOp,
    IotaOp,
    Log2Op,
    ModOp,
    MulOp,
    NegOp,
    OrOp,
    ReciprocalOp,
    RintOp,
    RsqrtOp,
    SelectOp,
    ShlOp,
    ShrsOp,
    ShruOp,
    SigmoidOp,
    SiluOp,
    SinOp,
    SplatOp,
    SqrtOp,
    SubOp,
    TanhOp,
    TruncOp,
    XorOp,
)
from tessera.dialects.tile_memory import (
    ASYNC_COPY_OPS,
    AllocSharedOp,
    BarrierOp,
    CpAsyncGatherOp,
    CpAsyncOp,
    CpCommitGroupOp,
    CpWaitGroupOp,
    LoadBroadcastOp,
    GatherOp,
    LoadIndexOp,
    LoadOp,
    ReleaseOp,
    StageOp,
    StoreGlobalOp,
    StoreGlobalRowsOp,
    ViewOp,
)
from tessera.dialects.tile_types import DimExprAttr, DimsAttr, MemSpace, MemSpaceAttr, TileType
from tessera.ir.diagnostics import require

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
        require(self.axis.data in self.AXES, self, f"axis must be x, y or z, got '{self.axis.data}'")

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
        ty = tile_type(self.source)
        require_space(self, "source", ty, MemSpace.GLOBAL)
        i = self.index.value.data
        require(0 <= i < ty.rank, self, f"dimension {i} is out of range for a rank-{ty.rank} tile")


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
        ClearRowsOp,
        KeyBiasOp,
        CausalBiasTableOp,
        CausalBiasOp,
        LoadOp,
        LoadBroadcastOp,
        StoreGlobalOp,
        StoreGlobalRowsOp,
        LoadIndexOp,
        GatherOp,
        MmaOp,
        RowMaxOp,
        RowMinOp,
        RowSumOp,
        ColMaxOp,
        ColMinOp,
        ColSumOp,
        ExpDiffOp,
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
        *ELEMENTWISE_OPS,
    ],
    [TileType, MemSpaceAttr, DimExprAttr, DimsAttr],
)
