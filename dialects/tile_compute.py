"""Tile IR compute ops, part of the `tile` dialect (`tile.py` registers them and re-exports each as `tile.X`).

Value semantics on register tiles (the numerics and the softmax conventions are in `tile.py`'s docstring):
the tensor-core multiply `tile.mma`, row and column reductions, elementwise ops the softmax needs (the general elementwise
vocabulary is `tile_elementwise`), ops that combine a tile with a row
vector (the forward's softmax pieces and the backward's `tile.sub_rows`, `tile.exp2_subtract`), conversions
and constants (`tile.cast`, `tile.reshape`, `tile.fill`), and the causal and sequence-bounds masks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import Float32Type, FloatAttr, IndexType, IntegerType, UnitAttr
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure

from tessera.dialects.tile_base import (
    TILE,
    F32_OVERFLOW,
    as_f32,
    require_register_float,
    require_row_vector,
    require_space,
    tile_type,
)
from tessera.dialects.tile_types import MemSpace, TileType, is_float, is_fp8, is_half
from tessera.ir.hex_floats import float_of_bits, parse_optional_hex_literal
from tessera.ir.diagnostics import require

# region Tensor-core matrix multiply


@irdl_op_definition
class MmaOp(IRDLOperation):
    """`%d = tile.mma %a, %b, %acc [transpose_a] [transpose_b] : a_type, b_type, acc_type`:
    d = acc + op(A) x op(B), op(X) = X^T where the flag is set.

    A is [M, K] ([K, M] with `transpose_a`: the tile holds A^T, an M-major operand), B is [K, N] ([N, K] with
    `transpose_b`), acc and d are [M, N] f32 registers. A and B are bf16 or f16 (the same type), in shared
    memory or registers; a transposed A must be in shared memory. A and B may instead both be 8-bit floats
    (f8E4M3FN or f8E5M2, PTX .e4m3/.e5m2, mixed freely as wgmma mixes them: e5m2 by e4m3 lowers to
    `wgmma ... .f32.e5m2.e4m3`). Products are exact (of 16-bit or 8-bit floats, each fits an f32); the
    sum is f32.

    Tile IR states what is multiplied, not how it is laid out: the hardware reads 8-bit shared operands
    K-major only (A [M, K], B as [N, K], i.e. `transpose_b`), which the lowering checks."""

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
        a, b, acc = tile_type(self.a), tile_type(self.b), tile_type(self.acc)
        for what, ty in (("A", a), ("B", b)):
            require_space(self, f"operand {what}", ty, MemSpace.SHARED, MemSpace.REGISTER)
            require(ty.rank == 2, self, f"operand {what} must have rank 2, got rank {ty.rank}")
            require(is_half(ty.element_type) or is_fp8(ty.element_type), self,
                    f"operand {what} must be bf16, f16, f8E4M3FN or f8E5M2, got {ty.element_type}")
        same = a.element_type == b.element_type or (is_fp8(a.element_type) and is_fp8(b.element_type))
        require(same, self, f"A ({a.element_type}) and B ({b.element_type}) must have the same element type "
                             "(or both be 8-bit floats)")
        require_space(self, "accumulator", acc, MemSpace.REGISTER)
        require(isinstance(acc.element_type, Float32Type), self, f"accumulator must be f32, got {acc.element_type}")
        require(acc.rank == 2, self, f"accumulator must have rank 2, got rank {acc.rank}")
        m, k = reversed(a.get_shape()) if self.transpose_a else a.get_shape()
        n, kb = b.get_shape() if self.transpose_b else reversed(b.get_shape())
        a_text = "[K, M]" if self.transpose_a else "[M, K]"
        b_text = "[N, K]" if self.transpose_b else "[K, N]"
        require(not (self.transpose_a and a.memory_space == MemSpace.REGISTER), self,
                "a transposed operand A must be in shared memory (registers hold A as [M, K])")
        require(k == kb, self, f"contraction sizes differ: A is {a_text} = {list(a.get_shape())}, B is {b_text} = {list(b.get_shape())}")
        require(acc.get_shape() == (m, n), self, f"accumulator must be [M, N] = {[m, n]}, got {list(acc.get_shape())}")


# endregion
# region Row reductions and softmax pieces


class _RowReductionOp(IRDLOperation):
    """Base of the reductions of each row of a 2-D register tile to a row vector: f32 (or another float, which
    the lowering refuses by name: packed halves are cast to f32 first) or i32 (an argmax's candidate column,
    a count of a row's flags)."""

    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation):
        ty = tile_type(source)
        super().__init__(operands=[source], result_types=[ty.with_(shape=ty.get_shape()[:1])])

    def verify_(self) -> None:
        src, res = tile_type(self.source), tile_type(self.result)
        if _is_i32(src.element_type):
            require_space(self, "source", src, MemSpace.REGISTER)
            require(src.rank == 2, self, f"source must have rank 2, got rank {src.rank}")
            require_space(self, "result", res, MemSpace.REGISTER)
            require(res.rank == 1 and res.get_shape()[0] == src.get_shape()[0], self,
                    f"result must be a row vector with one entry per row ({src.get_shape()[0]}), got "
                    f"{list(res.get_shape())}")
        else:
            require(not isinstance(src.element_type, IntegerType), self, "source must have a float or i32 element "
                    f"type, got {src.element_type} (select it into an i32 tile of 0 and 1 to count)")
            require_register_float(self, "source", src, rank=2)
            require_row_vector(self, "result", res, src)
        require(res.element_type == src.element_type, self, "result element type must match the source's")


def _is_i32(element_type: Attribute) -> bool:
    return isinstance(element_type, IntegerType) and element_type.width.data == 32


@irdl_op_definition
class RowMaxOp(_RowReductionOp):
    """`%m = tile.row_max %x : [M, N] -> [M]`: m[i] = max_j x[i, j] (-inf for a row of -inf; NaN where the row
    holds a NaN); f32 or i32 (signed)."""

    name = "tile.row_max"


@irdl_op_definition
class RowMinOp(_RowReductionOp):
    """`%m = tile.row_min %x : [M, N] -> [M]`: m[i] = min_j x[i, j] (+inf for a row of +inf; NaN where the row
    holds a NaN); f32 or i32 (signed)."""

    name = "tile.row_min"


@irdl_op_definition
class RowSumOp(_RowReductionOp):
    """`%l = tile.row_sum %x : [M, N] -> [M]`: l[i] = sum_j x[i, j], summed in f32 (in an unspecified order:
    within the f32 sum's rounding of the exact sum); an i32 tile's sum wraps modulo 2^32 (exact)."""

    name = "tile.row_sum"


class _ColReductionOp(IRDLOperation):
    """Base of the reductions of each column of a 2-D register tile over its rows: `[M, N] -> [1, N]`, a column
    vector (one value per column, the elementwise ops' broadcasting convention), of the source's element type:
    f32 (or another float, which the lowering refuses by name as the row reductions' does) or i32. Triton's
    `tl.sum(x, axis=0)`: a bias gradient, LayerNorm's dgamma, a per-channel absmax.

    Invariants: the op is collective below Tile IR (the block's rows are spread over its warps, which meet at a
    barrier: every thread of the block runs it, as `tile.barrier`); rows that lie past a tensor's end are
    whatever the kernel holds there (a bounded `tile.load` gives 0, which a max must `tile.select` away)."""

    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation):
        ty = tile_type(source)
        super().__init__(operands=[source], result_types=[ty.with_(shape=(1, ty.get_shape()[-1]))])

    def verify_(self) -> None:
        src, res = tile_type(self.source), tile_type(self.result)
        if not _is_i32(src.element_type):
            require(not isinstance(src.element_type, IntegerType), self, "source must have a float or i32 element "
                    f"type, got {src.element_type}")
            require_register_float(self, "source", src)
        require_space(self, "source", src, MemSpace.REGISTER)
        require(src.rank == 2, self, f"source must be a 2-D [M, N] tile, got rank {src.rank}")
        require_space(self, "result", res, MemSpace.REGISTER)
        n = src.get_shape()[1]
        require(res.get_shape() == (1, n), self,
                f"result must be the column vector [1, {n}] (one entry per column), got {list(res.get_shape())}")
        require(res.element_type == src.element_type, self, "result element type must match the source's")


@irdl_op_definition
class ColMaxOp(_ColReductionOp):
    """`%m = tile.col_max %x : [M, N] -> [1, N]`: m[0, j] = max_i x[i, j] (-inf for a column of -inf; NaN where
    the column holds a NaN, as max.NaN.f32; +0 the larger zero); f32 or i32 (signed)."""

    name = "tile.col_max"


@irdl_op_definition
class ColMinOp(_ColReductionOp):
    """`%m = tile.col_min %x : [M, N] -> [1, N]`: m[0, j] = min_i x[i, j] (+inf for a column of +inf; NaN where
    the column holds a NaN; -0 the smaller zero); f32 or i32 (signed)."""

    name = "tile.col_min"


@irdl_op_definition
class ColSumOp(_ColReductionOp):
    """`%s = tile.col_sum %x : [M, N] -> [1, N]`: s[0, j] = sum_i x[i, j], summed in f32 in an unspecified order
    (within the f32 sum's rounding of the exact sum, M 2^-24 sum_i |x[i, j]|, as `tile.row_sum`); an i32 tile's
    sum wraps modulo 2^32 (exact)."""

    name = "tile.col_sum"


class _ElementwiseOp(IRDLOperation):
    """Base of elementwise ops whose operands and result are register float tiles of one type."""

    T: ClassVar = VarConstraint("T", TILE)
    result = result_def(T)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        require_register_float(self, "result", tile_type(self.result))


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
    """`%r = tile.scale %x by 0.125 : type`: r = x * factor elementwise (factor is a finite f32 constant).

    A NaN or infinite factor is refused: the custom form writes the factor as a decimal float literal, which
    has no spelling for them (the printed op would not read back), and no kernel means x * inf."""

    name = "tile.scale"
    source = operand_def(_ElementwiseOp.T)
    factor = prop_def(FloatAttr[Float32Type])
    assembly_format = "$source `by` $factor attr-dict `:` type($result)"

    def __init__(self, source: SSAValue | Operation, factor: float):
        super().__init__(
            operands=[source],
            properties={"factor": FloatAttr(as_f32(factor), Float32Type())},
            result_types=[SSAValue.get(source).type],
        )

    def verify_(self) -> None:
        super().verify_()
        value = self.factor.value.data
        require(math.isfinite(value), self, f"factor must be a finite f32, got {value}")


@irdl_op_definition
class SaturatingScaleOp(_ElementwiseOp):
    """`%r = tile.saturating_scale %x by 8.0 bound 1.70141183e+38 : type`: r = x * factor rounded to f32, then
    clamped to [-bound, bound] where x is finite; r = x * factor (+-inf) where x is +-inf, NaN where x is NaN.

    A finite x never becomes infinite, even where x * factor is beyond f32's range; an infinite x stays
    infinite. Attention's bias enters the score accumulator as Bias / scale this way (`bias_accumulator` in
    tessera/kernels/attention_steps.py): a finite mask fill (bf16's lowest, -3.39e38, with scale 1/8) stays a finite
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
            properties={"factor": FloatAttr(as_f32(factor), Float32Type()),
                        "bound": FloatAttr(as_f32(bound), Float32Type())},
            result_types=[SSAValue.get(source).type],
        )

    def verify_(self) -> None:
        super().verify_()
        ty = tile_type(self.result)
        require(isinstance(ty.element_type, Float32Type), self, f"saturates f32 values, got {ty.element_type}")
        for what in ("factor", "bound"):
            value = getattr(self, what).value.data
            require(0 < value < float("inf"), self, f"{what} must be a positive finite f32, got {value}")


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
        ty = tile_type(self.result)
        require(isinstance(ty.element_type, Float32Type), self, f"the logarithm is computed in f32, got {ty.element_type}")


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
        src = tile_type(self.source)
        require_register_float(self, "source", src, rank=2)
        require_row_vector(self, "row vector", tile_type(self.rows), src)


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
            ty = tile_type(value)
            require(isinstance(ty.element_type, Float32Type), self, f"{what} must be f32, got {ty.element_type}")
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
    rounds to nearest even, to integers it truncates toward zero (saturating, NaN to 0, as `cvt.rzi` does).

    To the 8-bit floats f8E4M3FN and f8E5M2 it rounds to nearest even and saturates, as the hardware's only
    conversion to them (`cvt.rn.satfinite`, `tessera.sm90.fp8`) does: a finite value beyond the format's
    largest (448 for e4m3, 57344 for e5m2) and an infinity become that largest value with their sign, NaN
    stays NaN. From them it is exact (every 8-bit float is an f16, bf16 and f32). An 8-bit float converts only
    to and from f32, bf16 and f16; to an integer or to the other 8-bit format it is refused (cast through f32)."""

    name = "tile.cast"
    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, element_type: Attribute):
        super().__init__(operands=[source], result_types=[tile_type(source).with_(element_type=element_type)])

    def verify_(self) -> None:
        src, res = tile_type(self.source), tile_type(self.result)
        require_space(self, "source", src, MemSpace.REGISTER)
        require_space(self, "result", res, MemSpace.REGISTER)
        require(src.get_shape() == res.get_shape(), self, f"cast keeps the shape: {list(src.get_shape())} vs {list(res.get_shape())}")
        s, r = src.element_type, res.element_type
        if (is_fp8(s) or is_fp8(r)) and s != r:
            other = r if is_fp8(s) else s
            require(is_float(other), self, f"an 8-bit float converts only to and from f32, bf16 or f16, got {s} -> {r}")


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """`%r = tile.reshape %x : from_type -> to_type`: the same elements in row-major order, a new shape."""

    name = "tile.reshape"
    source = operand_def(TILE)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue | Operation, shape: Sequence[int]):
        super().__init__(operands=[source], result_types=[tile_type(source).with_(shape=tuple(shape))])

    def verify_(self) -> None:
        src, res = tile_type(self.source), tile_type(self.result)
        require_space(self, "source", src, MemSpace.REGISTER)
        require_space(self, "result", res, MemSpace.REGISTER)
        require(src.element_type == res.element_type, self, "reshape keeps the element type")
        require(src.num_elements == res.num_elements, self, f"reshape keeps the element count: {src.num_elements} vs {res.num_elements}")


@irdl_op_definition
class FillOp(IRDLOperation):
    """`%r = tile.fill -inf : type`: a register tile with every element equal to `value` (written as a number,
    `inf`/`-inf`, or a hex literal read as MLIR reads one: of a float tile the f32 bit pattern, `0xff800000`; of
    an integer tile its value, `0x10` is 16).
    A float tile takes `value` rounded to its type; an integer tile (`tile.fill 3.0 : ...xi32`) takes a whole
    number its type holds (i1: 0 or 1), never a truncated or wrapped one. The value is held as an f32, so an
    integer fill takes only a number an f32 holds exactly (every one up to 2^24): another (73856093, a hash's
    multiplier) is refused, not rounded (to 73856096); `tile.splat` of an `arith.constant` gives any integer."""

    name = "tile.fill"
    value = prop_def(FloatAttr[Float32Type])
    result = result_def(TILE)
    traits = traits_def(Pure())

    def __init__(self, value: float, ty: TileType):
        if (message := _inexact_integer_fill(value, ty)) is not None:
            raise ValueError(message)
        super().__init__(properties={"value": FloatAttr(as_f32(value), Float32Type())}, result_types=[ty])

    def verify_(self) -> None:
        require_space(self, "result", tile_type(self.result), MemSpace.REGISTER)
        value = self.value.value.data
        require(value == value, self, "fill value must not be NaN")
        element = tile_type(self.result).element_type
        if isinstance(element, IntegerType | IndexType):
            width = element.width.data if isinstance(element, IntegerType) else 64
            low, high = (0, 1) if width == 1 else (-(2 ** (width - 1)), 2 ** (width - 1) - 1)
            require(math.isfinite(value) and value == int(value) and low <= value <= high, self,
                    f"a fill of {element} takes a whole number from {low} to {high}, got {value!r}")

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
        hex_literal = None
        if parser.parse_optional_keyword("inf"):
            value = float("inf")
        elif (hex_literal := parse_optional_hex_literal(parser)) is not None:
            value = float(hex_literal[0])  # read once the type is known, below
        else:
            value = float(parser.parse_number(context_msg=" (the fill value, or inf)"))
            if math.isfinite(value) and abs(value) >= F32_OVERFLOW:
                parser.raise_error("fill value out of range for f32 (magnitudes up to 3.4028235e+38; write inf for "
                                   "an infinity)", start, parser.pos)
        end = parser.pos
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        ty = parser.parse_type()
        element = ty.element_type if isinstance(ty, TileType) else None
        if hex_literal is not None and not isinstance(element, IntegerType | IndexType):
            # as in MLIR: a hex literal of a float is its bit pattern (f32's: the value is held as an f32), of an
            # integer its value
            if negative:
                parser.raise_error("hexadecimal float literal should not have a leading minus", start, end)
            value = float_of_bits(parser, hex_literal[0], hex_literal[1], Float32Type())
        if (message := _inexact_integer_fill(-value if negative else value, ty)) is not None:
            parser.raise_error(message, start, end)
        op = cls(-value if negative else value, ty)
        op.attributes.update(attributes)
        return op


def _inexact_integer_fill(value: float, ty: Attribute) -> str | None:
    """Why `tile.fill value` of an integer tile `ty` is refused (a whole number an f32 does not hold exactly, which
    the f32 property would round), or None."""
    element = ty.element_type if isinstance(ty, TileType) else None
    if not isinstance(element, IntegerType | IndexType) or not math.isfinite(value) or value != int(value):
        return None
    if abs(value) >= F32_OVERFLOW or float(np.float32(value)) == value:
        return None  # past f32's range: as_f32 refuses it; exact: taken
    return (f"a fill of {element} holds its value as an f32, which would round {int(value)} to "
            f"{int(np.float32(value))}: splat an arith.constant of it instead (tile.splat)")


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
        require_register_float(self, "source", tile_type(self.source), rank=2)


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
        require_register_float(self, "source", tile_type(self.source), rank=2)


# endregion
