"""Tile IR elementwise math, compare/select, coordinates and splats, part of the `tile` dialect (`tile.py`
registers them and re-exports each as `tile.X`).

The vocabulary kernel authors write epilogues and score modifiers with (RMSNorm, softmax, SwiGLU, soft-capping,
ALiBi, sliding windows): value semantics on register tiles, each op the exact function rounded once to the
result type. A lowering may use an approximate instruction; its documented error bound is in
`tessera.sm90.approx` and `docs/tile-elementwise.md` lists which.

Broadcasting (the numpy rule over the register-tile conventions of `tile_compute`): an operand of an n-ary op
is either of the result's shape or
- a row vector `[M]` (one value per row, as `tile.mul_rows` takes it) or a column tile `[M, 1]`: repeated
  along each row of an `[M, N]` result;
- a column vector `[1, N]` (one value per column): repeated down each column of an `[M, N]` result.
The result shape is the broadcast of the operands'; all operands share one element type (the select's
condition is `i1`).

Element types: the transcendental functions (exp, exp2, log2, tanh, sin, cos, erf, sigmoid, silu, sqrt, rsqrt) and the rounding ops (floor, ceil, rint, trunc) take and give f32;
add/sub/mul/element_max/element_min take f32 (or any float) or i32; neg/abs take f32 or i32; floordiv/mod (Python's `//` and `%`) and the bitwise and/or/xor/shl/shrs/shru take i32 only; compares take f32 or i32 and give i1 tiles; `tile.iota` gives i32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import Float32Type, IndexType, IntegerType, StringAttr, i1, i32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import Pure

from tessera.dialects.tile_base import TILE, require_space, tile_type
from tessera.dialects.tile_types import MemSpace, TileType, is_float
from tessera.ir.diagnostics import require


def is_i32(element_type: Attribute) -> bool:
    return isinstance(element_type, IntegerType) and element_type.width.data == 32


def is_i1(element_type: Attribute) -> bool:
    return isinstance(element_type, IntegerType) and element_type.width.data == 1


def broadcast_shape(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...] | None:
    """The result shape of operands of `shapes` under the module's rule, or None where they do not broadcast.

    1-D operands are row vectors [M] (read as [M, 1]); each dimension of the operands is equal or 1."""
    if all(len(s) == 1 for s in shapes):
        return shapes[0] if len(set(shapes)) == 1 else None
    if any(len(s) not in (1, 2) for s in shapes):
        return None
    two_d = [s if len(s) == 2 else (s[0], 1) for s in shapes]  # a row vector [M] broadcasts as [M, 1]
    result = []
    for axis in range(2):
        sizes = {s[axis] for s in two_d} - {1}
        if len(sizes) > 1:
            return None
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def _operand_text(types: Sequence[Attribute]) -> list[Attribute]:
    """The operand types an op prints: one type where every operand has it, else each."""
    return [types[0]] if all(t == types[0] for t in types) else list(types)


class _BroadcastOp(IRDLOperation):
    """Base of n-ary elementwise ops with broadcasting (module docstring).

    Syntax: `%r = tile.OP [PREDICATE] %a, %b, ... : TYPE` where every operand has TYPE, else
    `: TYPE_A, TYPE_B, ...` one type per operand; the result type is inferred (broadcast shape, the operands'
    element type, or i1 for compares)."""

    result = result_def(TILE)
    traits = traits_def(Pure())
    ARITY: ClassVar[int] = 2

    @classmethod
    def result_type(cls, types: Sequence[TileType]) -> TileType:
        shape = broadcast_shape([t.get_shape() for t in types]) or types[0].get_shape()
        return types[-1].with_(shape=shape)

    def __init__(self, *operands: SSAValue | Operation, properties: dict | None = None):
        types = [SSAValue.get(o).type for o in operands]
        super().__init__(operands=list(operands), result_types=[self.result_type(types)], properties=properties or {})

    # -- syntax ------------------------------------------------------------------------------------------
    def _print_prefix(self, printer: Printer) -> None:
        pass

    def print(self, printer: Printer) -> None:
        self._print_prefix(printer)
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_list(_operand_text([o.type for o in self.operands]), printer.print_attribute)

    @classmethod
    def _parse_prefix(cls, parser: Parser) -> dict:
        """The properties written before the operands, in the order `__init__` takes them first."""
        return {}

    @classmethod
    def parse(cls, parser: Parser):
        properties = cls._parse_prefix(parser)
        start = parser.pos
        operands: list[UnresolvedOperand] = parser.parse_comma_separated_list(
            parser.Delimiter.NONE, parser.parse_unresolved_operand)
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        if len(operands) != cls.ARITY:
            parser.raise_error(f"{cls.name} takes {cls.ARITY} operands, got {len(operands)}", start, parser.pos)
        if len(types) == 1:
            types = types * len(operands)
        if len(types) != len(operands):
            parser.raise_error(f"{cls.name}: expected one type for all operands or one per operand ({len(operands)}), "
                               f"got {len(types)}", start, parser.pos)
        values = [parser.resolve_operand(o, t) for o, t in zip(operands, types)]
        op = cls(*properties.values(), *values)
        op.attributes.update(attributes)
        return op

    # -- verification ------------------------------------------------------------------------------------
    def _check_element(self, what: str, element: Attribute) -> None:
        """Refuse an element type this op does not compute with (subclasses narrow it)."""
        require(is_float(element) or is_i32(element), self, f"{what} must be a float or i32 tile, got {element}")

    def _value_operands(self) -> Sequence[SSAValue]:
        return self.operands

    def verify_(self) -> None:
        types = [tile_type(o) for o in self.operands]
        for i, ty in enumerate(types):
            require_space(self, f"operand {i}", ty, MemSpace.REGISTER)
        values = [tile_type(o) for o in self._value_operands()]
        elements = dict.fromkeys(t.element_type for t in values)  # in operand order: the message is the same every run
        require(len(elements) == 1, self, f"operands must share one element type, got {', '.join(map(str, elements))}")
        self._check_element("operand", values[0].element_type)
        shape = broadcast_shape([t.get_shape() for t in types])
        require(shape is not None, self,
                f"operand shapes {[list(t.get_shape()) for t in types]} do not broadcast: each operand must be "
                "[M, N], a row vector [M], a column [M, 1] or a column vector [1, N] of the result")
        expected = self.result_type(types)
        require(tile_type(self.result) == expected, self, f"result must be {expected}, got {self.result.type}")


# region Binary arithmetic


class _BinaryArithOp(_BroadcastOp):
    lhs = operand_def(TILE)
    rhs = operand_def(TILE)

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        super().__init__(lhs, rhs)


@irdl_op_definition
class AddOp(_BinaryArithOp):
    """`%r = tile.add %a, %b : type`: r = a + b elementwise, with broadcasting (module docstring); f32 rounds
    to nearest even, i32 wraps."""

    name = "tile.add"


@irdl_op_definition
class SubOp(_BinaryArithOp):
    """`%r = tile.sub %a, %b : type`: r = a - b elementwise, with broadcasting; f32 rounds to nearest even,
    i32 wraps."""

    name = "tile.sub"


@irdl_op_definition
class MulOp(_BinaryArithOp):
    """`%r = tile.mul %a, %b : type`: r = a * b elementwise, with broadcasting; f32 rounds to nearest even,
    i32 wraps."""

    name = "tile.mul"


@irdl_op_definition
class DivOp(_BinaryArithOp):
    """`%r = tile.div %a, %b : type`: r = a / b elementwise in f32, IEEE (correctly rounded; x/0 = +-inf,
    0/0 = NaN), with broadcasting. Unlike `tile.div_rows`, a zero divisor gets no special case."""

    name = "tile.div"

    def _check_element(self, what: str, element: Attribute) -> None:
        require(isinstance(element, Float32Type), self, f"divides f32 tiles, got {element}")


@irdl_op_definition
class ElementMaxOp(_BinaryArithOp):
    """`%r = tile.element_max %a, %b : type`: r = max(a, b) elementwise, with broadcasting; a NaN operand
    gives NaN, and -0 < +0."""

    name = "tile.element_max"


@irdl_op_definition
class ElementMinOp(_BinaryArithOp):
    """`%r = tile.element_min %a, %b : type`: r = min(a, b) elementwise, with broadcasting; a NaN operand
    gives NaN, and -0 < +0."""

    name = "tile.element_min"


@irdl_op_definition
class FloorDivOp(_BinaryArithOp):
    """`%r = tile.floordiv %a, %b : type`: r = floor(a / b) elementwise on i32 tiles, with broadcasting:
    Python's `a // b` (rounded toward -inf, also for negative operands: -7 // 2 = -4, 7 // -2 = -4).

    Invariants: i32 operands. A zero divisor gives 0 (NumPy's integer convention, so the same expression
    on NumPy grids is the reference; Python would raise); -2^31 // -1 wraps to -2^31. The lowering turns a
    constant divisor 2^k into an arithmetic right shift by k (exact for either sign of a)."""

    name = "tile.floordiv"

    def _check_element(self, what: str, element: Attribute) -> None:
        require(is_i32(element), self, f"{what} must be an i32 tile (integer floor division), got {element}")


@irdl_op_definition
class ModOp(_BinaryArithOp):
    """`%r = tile.mod %a, %b : type`: r = a - b * floor(a / b) elementwise on i32 tiles, with
    broadcasting: Python's `a % b`, whose result has the divisor's sign (-7 % 4 = 1, 7 % -4 = -1), so
    a == b * (a // b) + a % b with `tile.floordiv`.

    Invariants: i32 operands. A zero divisor gives 0 (NumPy's convention); -2^31 % -1 = 0. The lowering
    turns a constant divisor 2^k into `a & (2^k - 1)` (exact for either sign of a)."""

    name = "tile.mod"

    def _check_element(self, what: str, element: Attribute) -> None:
        require(is_i32(element), self, f"{what} must be an i32 tile (Python's %), got {element}")


class _BitwiseOp(_BinaryArithOp):
    """Base of the bitwise ops: i32 operands only (the bits of the two's-complement value)."""

    def _check_element(self, what: str, element: Attribute) -> None:
        require(is_i32(element), self, f"{what} must be an i32 tile (bitwise {self.name[5:]}), got {element}")


@irdl_op_definition
class AndOp(_BitwiseOp):
    """`%r = tile.and %a, %b : type`: r = a & b bit by bit on i32 tiles, with broadcasting (a mask: the low
    4 bits of a packed int4 code, `x & 15`)."""

    name = "tile.and"


@irdl_op_definition
class OrOp(_BitwiseOp):
    """`%r = tile.or %a, %b : type`: r = a | b bit by bit on i32 tiles, with broadcasting."""

    name = "tile.or"


@irdl_op_definition
class XorOp(_BitwiseOp):
    """`%r = tile.xor %a, %b : type`: r = a ^ b bit by bit on i32 tiles, with broadcasting (hashes: xorshift,
    Philox's key mixing)."""

    name = "tile.xor"


@irdl_op_definition
class ShlOp(_BitwiseOp):
    """`%r = tile.shl %a, %b : type`: r = a << b on i32 tiles, with broadcasting; bits shifted past bit 31 are
    lost (wraps). The amount b is read as unsigned and clamped to 32, as PTX's `shl.b32` does: an amount of 32
    or more (or a negative one) gives 0."""

    name = "tile.shl"


@irdl_op_definition
class ShrsOp(_BitwiseOp):
    """`%r = tile.shrs %a, %b : type`: r = a >> b, arithmetic (the sign bit fills from the left: -8 >> 1 = -4,
    Python's and C's `>>` on a signed int), on i32 tiles, with broadcasting. The amount b is read as unsigned and
    clamped to 32 (`shr.s32`): an amount of 32 or more (or a negative one) gives 0 or -1 by a's sign."""

    name = "tile.shrs"


@irdl_op_definition
class ShruOp(_BitwiseOp):
    """`%r = tile.shru %a, %b : type`: r = a >> b, logical (zeros fill from the left: the bits read as an
    unsigned 32-bit value, as a hash's uint32 arithmetic or an unpacking of packed codes needs), on i32 tiles,
    with broadcasting. The amount b is read as unsigned and clamped to 32 (`shr.u32`): an amount of 32 or more
    (or a negative one) gives 0."""

    name = "tile.shru"


BITWISE_OPS = (AndOp, OrOp, XorOp, ShlOp, ShrsOp, ShruOp)


# endregion
# region Compare and select


@irdl_op_definition
class CmpOp(_BroadcastOp):
    """`%p = tile.cmp lt %a, %b : type`: p = a PRED b elementwise, an i1 tile of the broadcast shape.

    PRED is lt, le, gt, ge, eq or ne; i32 compares signed; f32 compares are ordered (a NaN operand gives
    false) except `ne`, which is true for NaN (as `sm90.setp` and IEEE's !=)."""

    name = "tile.cmp"
    PREDICATES: ClassVar[tuple[str, ...]] = ("lt", "le", "gt", "ge", "eq", "ne")
    predicate = prop_def(StringAttr)
    lhs = operand_def(TILE)
    rhs = operand_def(TILE)

    def __init__(self, predicate: str, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        super().__init__(lhs, rhs, properties={"predicate": StringAttr(predicate)})

    @classmethod
    def result_type(cls, types: Sequence[TileType]) -> TileType:
        return super().result_type(types).with_(element_type=i1)

    def _check_element(self, what: str, element: Attribute) -> None:
        require(isinstance(element, Float32Type) or is_i32(element), self, f"compares f32 or i32 tiles, got {element}")

    def verify_(self) -> None:
        require(self.predicate.data in self.PREDICATES, self,
                f"predicate must be one of {', '.join(self.PREDICATES)}, got '{self.predicate.data}'")
        super().verify_()

    def _print_prefix(self, printer: Printer) -> None:
        printer.print_string(f" {self.predicate.data}")

    @classmethod
    def _parse_prefix(cls, parser: Parser) -> dict:
        return {"predicate": parser.parse_identifier(" (a predicate: lt, le, gt, ge, eq or ne)")}


@irdl_op_definition
class SelectOp(_BroadcastOp):
    """`%r = tile.select %p, %a, %b : p_type, a_type[, b_type]`: r = p ? a : b elementwise, with
    broadcasting of all three; p is an i1 tile, a and b share an element type (f32 or i32). Compose with
    `tile.cmp` and `tile.iota` for masks: `select(cmp(lt, col, row), s, -inf)`."""

    name = "tile.select"
    ARITY: ClassVar[int] = 3
    condition = operand_def(TILE)
    lhs = operand_def(TILE)
    rhs = operand_def(TILE)

    def __init__(self, condition, lhs, rhs):
        super().__init__(condition, lhs, rhs)

    def _value_operands(self) -> Sequence[SSAValue]:
        return (self.lhs, self.rhs)

    def verify_(self) -> None:
        cond = tile_type(self.condition).element_type
        require(is_i1(cond), self, f"condition must be an i1 tile, got {cond}")
        super().verify_()

    def print(self, printer: Printer) -> None:
        # The condition's type always differs from the values': print it, then the values' type(s).
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        types = [self.condition.type, *_operand_text([self.lhs.type, self.rhs.type])]
        printer.print_list(types, printer.print_attribute)

    @classmethod
    def parse(cls, parser: Parser) -> SelectOp:
        start = parser.pos
        operands = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        if len(operands) != 3:
            parser.raise_error(f"tile.select takes 3 operands (condition, true value, false value), got {len(operands)}",
                               start, parser.pos)
        if len(types) == 2:
            types = [types[0], types[1], types[1]]
        if len(types) != 3:
            parser.raise_error(f"tile.select: expected the condition's type and one or two value types, got {len(types)} types",
                               start, parser.pos)
        op = cls(*(parser.resolve_operand(o, t) for o, t in zip(operands, types)))
        op.attributes.update(attributes)
        return op


# endregion
# region Unary math


class _UnaryOp(IRDLOperation):
    """Base of `%r = tile.OP %x : type`: r = f(x) elementwise, the exact function rounded once to f32."""

    T: ClassVar = VarConstraint("T", TILE)
    source = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($result)"
    INTEGER: ClassVar[bool] = False
    """Whether i32 tiles are accepted too (neg, abs)."""

    def __init__(self, source: SSAValue | Operation):
        super().__init__(operands=[source], result_types=[SSAValue.get(source).type])

    def verify_(self) -> None:
        ty = tile_type(self.result)
        require_space(self, "operand", ty, MemSpace.REGISTER)
        allowed = isinstance(ty.element_type, Float32Type) or (self.INTEGER and is_i32(ty.element_type))
        kinds = "f32 or i32" if self.INTEGER else "f32"
        require(allowed, self, f"computes on {kinds} tiles, got {ty.element_type}")


@irdl_op_definition
class ExpOp(_UnaryOp):
    """`%r = tile.exp %x : type`: r = e^x (exp(-inf) = 0, exp(+inf) = +inf). Lowered as ex2.approx of
    x log2(e): the product's rounding adds a relative error of up to |x| 2^-24 ln 2 to ex2's."""

    name = "tile.exp"


@irdl_op_definition
class Exp2Op(_UnaryOp):
    """`%r = tile.exp2 %x : type`: r = 2^x (`ex2.approx.ftz.f32`)."""

    name = "tile.exp2"


@irdl_op_definition
class Log2Op(_UnaryOp):
    """`%r = tile.log2 %x : type`: r = log2(x); log2(0) = -inf, NaN for x < 0 (`lg2.approx.ftz.f32`). The
    natural logarithm is `tile.log`."""

    name = "tile.log2"


@irdl_op_definition
class TanhOp(_UnaryOp):
    """`%r = tile.tanh %x : type`: r = tanh(x) (`tanh.approx.f32`, the least accurate of these lowerings:
    `tessera.sm90.approx.TANH_APPROX_RELATIVE_ERROR`). Soft-capping is c * tanh(s / c)."""

    name = "tile.tanh"


@irdl_op_definition
class SinOp(_UnaryOp):
    """`%r = tile.sin %x : type`: r = sin(x), x in radians (rotary embeddings' angles computed in the kernel);
    sin(+-inf) = NaN. Lowered as `sin.approx.f32` of x reduced to about [-pi, pi] by a two-constant Cody-Waite
    step (`tessera.numerics.TWO_PI_HIGH`): within `tessera.sm90.approx.sin_cos_error_bound` of the exact value
    (2^-20 absolute for |x| <= 2^24, none beyond; a zero's sign is not kept below Tile IR)."""

    name = "tile.sin"


@irdl_op_definition
class CosOp(_UnaryOp):
    """`%r = tile.cos %x : type`: r = cos(x), x in radians; cos(+-inf) = NaN. Lowered as `cos.approx.f32` of
    x reduced as for `tile.sin`, with the same bound."""

    name = "tile.cos"


@irdl_op_definition
class ErfOp(_UnaryOp):
    """`%r = tile.erf %x : type`: r = erf(x) (the exact GELU is x (1 + erf(x / sqrt 2)) / 2); erf(+-inf) = +-1,
    erf(-0) = -0. Lowered as x times a series in x^2 for |x| < 1 and as sign(x) (1 - erfc(|x|)) from a fit of
    erfc with one rcp.approx and one ex2.approx beyond (`tessera.numerics.ERF_SERIES`, `ERFC_FIT`): within
    `tessera.sm90.approx.erf_error_bound` of the exact value (about 2e-7 absolute)."""

    name = "tile.erf"


@irdl_op_definition
class SigmoidOp(_UnaryOp):
    """`%r = tile.sigmoid %x : type`: r = 1 / (1 + e^-x); 0 for x = -inf, 1 for x = +inf. Lowered as
    rcp.approx(1 + ex2.approx(-x log2 e))."""

    name = "tile.sigmoid"


@irdl_op_definition
class SiluOp(_UnaryOp):
    """`%r = tile.silu %x : type`: r = x / (1 + e^-x) (SiLU, Swish-1; SwiGLU is silu(a) * b). Lowered as
    x * sigmoid(x)."""

    name = "tile.silu"


@irdl_op_definition
class SqrtOp(_UnaryOp):
    """`%r = tile.sqrt %x : type`: r = sqrt(x), IEEE correctly rounded (`sqrt.rn.f32`); sqrt(-0) = -0, NaN
    for x < 0."""

    name = "tile.sqrt"


@irdl_op_definition
class RsqrtOp(_UnaryOp):
    """`%r = tile.rsqrt %x : type`: r = 1 / sqrt(x); rsqrt(+0) = +inf, rsqrt(+inf) = 0, NaN for x < 0
    (`rsqrt.approx.ftz.f32`, `tessera.sm90.approx.RSQRT_APPROX_RELATIVE_ERROR`)."""

    name = "tile.rsqrt"


@irdl_op_definition
class ReciprocalOp(_UnaryOp):
    """`%r = tile.reciprocal %x : type`: r = 1 / x; 1/+-0 = +-inf (`rcp.approx.ftz.f32`,
    `tessera.sm90.approx.RCP_APPROX_RELATIVE_ERROR`; `tile.div` is the correctly rounded division)."""

    name = "tile.reciprocal"


@irdl_op_definition
class AbsOp(_UnaryOp):
    """`%r = tile.abs %x : type`: r = |x| (exact; i32's most negative value stays itself, as it wraps)."""

    name = "tile.abs"
    INTEGER: ClassVar[bool] = True


@irdl_op_definition
class NegOp(_UnaryOp):
    """`%r = tile.neg %x : type`: r = -x (exact; i32 wraps)."""

    name = "tile.neg"
    INTEGER: ClassVar[bool] = True


# endregion
# region Rounding to an integral value


class _RoundingOp(_UnaryOp):
    """Base of `%r = tile.floor|ceil|rint|trunc %x : type`: r = the integral f32 value x rounds to (exact: every
    f32 of magnitude 2^23 or more is already integral). NaN stays NaN; +-0 and +-inf are their own value; the
    sign of a zero result is x's (floor(-0.5) = -1, ceil(-0.5) = -0, trunc(-0.5) = -0, rint(-0.5) = -0).

    f32 tiles only: an i32 tile is integral already, so floor/ceil/rint/trunc of an integer is the integer
    itself (NumPy keeps it: `np.floor` of an int array is that array; `np.rint` gives floats, a `tile.cast`).
    The derivative is 0 almost everywhere (a step function), which is what a score_mod's backward uses.
    Lowered to `cvt.<FUNCTION's modifier>.f32.f32` (`tessera.sm90.rounding.INTEGER_ROUNDING`)."""

    FUNCTION: ClassVar[str] = ""

    def verify_(self) -> None:
        ty = tile_type(self.result)
        require_space(self, "operand", ty, MemSpace.REGISTER)
        if is_i32(ty.element_type):
            require(False, self, f"an i32 tile is integral already: {self.FUNCTION} of an integer is the integer "
                                  "itself (use the operand)")
        require(isinstance(ty.element_type, Float32Type), self, f"rounds f32 tiles, got {ty.element_type}")


@irdl_op_definition
class FloorOp(_RoundingOp):
    """`%r = tile.floor %x : type`: r = floor(x), the largest integral value <= x (`cvt.rmi.f32.f32`)."""

    name = "tile.floor"
    FUNCTION: ClassVar[str] = "floor"


@irdl_op_definition
class CeilOp(_RoundingOp):
    """`%r = tile.ceil %x : type`: r = ceil(x), the smallest integral value >= x (`cvt.rpi.f32.f32`)."""

    name = "tile.ceil"
    FUNCTION: ClassVar[str] = "ceil"


@irdl_op_definition
class RintOp(_RoundingOp):
    """`%r = tile.rint %x : type`: r = the integral value nearest x, ties to even (`np.rint`, `np.round`
    with no decimals, Python's `round`: rint(2.5) = 2, rint(-1.5) = -2; `cvt.rni.f32.f32`)."""

    name = "tile.rint"
    FUNCTION: ClassVar[str] = "rint"


@irdl_op_definition
class TruncOp(_RoundingOp):
    """`%r = tile.trunc %x : type`: r = x rounded toward zero to an integral value, as an f32
    (`cvt.rzi.f32.f32`; `tile.cast` to i32 truncates too, but saturates to the i32 range)."""

    name = "tile.trunc"
    FUNCTION: ClassVar[str] = "trunc"


ROUNDING_OPS = (FloorOp, CeilOp, RintOp, TruncOp)


# endregion
# region Coordinates and splats


@irdl_op_definition
class IotaOp(IRDLOperation):
    """`%i = tile.iota rows [offset %o] : type`, `tile.iota cols [offset %o] : type`: an i32 register tile
    whose element (r, c) is r + o (`rows`) or c + o (`cols`), o an index (0 without `offset`).

    With o = q0 or k0 (e.g. `program_id * BLOCK`) the tile holds absolute query or key positions, so masks
    are `tile.cmp` of coordinates (causal: `cmp gt (cols + k0), (rows + q0)`; sliding window, ALiBi's
    distances). The shape is [M, N], a column vector [1, N] (row coordinate 0) or a row vector [M] (`rows`
    only)."""

    name = "tile.iota"
    AXES: ClassVar[tuple[str, ...]] = ("rows", "cols")
    axis = prop_def(StringAttr)
    offset = opt_operand_def(IndexType)
    result = result_def(TILE)
    traits = traits_def(Pure())

    def __init__(self, axis: str, ty: TileType, offset: SSAValue | Operation | None = None):
        super().__init__(operands=[[] if offset is None else [offset]], properties={"axis": StringAttr(axis)},
                         result_types=[ty])

    @property
    def axis_index(self) -> int:
        return self.AXES.index(self.axis.data)

    def verify_(self) -> None:
        require(self.axis.data in self.AXES, self, f"axis must be rows or cols, got '{self.axis.data}'")
        ty = tile_type(self.result)
        require_space(self, "result", ty, MemSpace.REGISTER)
        require(is_i32(ty.element_type), self, f"result must be an i32 tile, got {ty.element_type}")
        require(ty.rank in (1, 2), self, f"result must have rank 1 or 2, got rank {ty.rank}")
        require(ty.rank == 2 or self.axis.data == "rows", self, "a row vector [M] has row coordinates only (use rows)")

    def print(self, printer: Printer) -> None:
        printer.print_string(f" {self.axis.data}")
        if self.offset is not None:
            printer.print_string(" offset ")
            printer.print_operand(self.offset)
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    @classmethod
    def parse(cls, parser: Parser) -> IotaOp:
        axis = parser.parse_identifier(" (rows or cols)")
        offset = None
        if parser.parse_optional_keyword("offset"):
            offset = parser.resolve_operand(parser.parse_unresolved_operand(), IndexType())
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        op = cls(axis, parser.parse_type(), offset)
        op.attributes.update(attributes)
        return op


SCALAR = base(Float32Type) | base(IntegerType) | base(IndexType)


@irdl_op_definition
class SplatOp(IRDLOperation):
    """`%t = tile.splat %s : scalar_type -> type`: a register tile with every element equal to the scalar SSA
    value s (a per-head ALiBi slope, an epsilon, a bound computed from sizes). s is f32 for an f32 tile, i32
    or index (truncated to 32 bits) for an i32 tile. `tile.fill` is the constant case."""

    name = "tile.splat"
    value = operand_def(SCALAR)
    result = result_def(TILE)
    traits = traits_def(Pure())
    assembly_format = "$value attr-dict `:` type($value) `->` type($result)"

    def __init__(self, value: SSAValue | Operation, ty: TileType):
        super().__init__(operands=[value], result_types=[ty])

    def verify_(self) -> None:
        ty = tile_type(self.result)
        require_space(self, "result", ty, MemSpace.REGISTER)
        scalar = self.value.type
        if isinstance(ty.element_type, Float32Type):
            ok = isinstance(scalar, Float32Type)
        elif is_i32(ty.element_type):
            ok = isinstance(scalar, IndexType) or scalar == i32
        else:
            ok = False
        require(ok, self, f"splats an f32 scalar into an f32 tile or an i32/index scalar into an i32 tile, got "
                           f"{scalar} into {ty.element_type}")


# endregion

ELEMENTWISE_OPS = (
    AddOp, SubOp, MulOp, DivOp, FloorDivOp, ModOp, *BITWISE_OPS, ElementMaxOp, ElementMinOp, CmpOp, SelectOp,
    ExpOp, Exp2Op, Log2Op, TanhOp, SinOp, CosOp, ErfOp, SigmoidOp, SiluOp, SqrtOp, RsqrtOp, ReciprocalOp, AbsOp, NegOp,
    *ROUNDING_OPS, IotaOp, SplatOp,
)
