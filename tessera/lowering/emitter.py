"""A small IR emitter for lowerings: one method per instruction pattern, inserting at the end of a block.

Lowerings that translate op by op (rather than rewrite in place) use it to keep each case a few lines long.
Scalar integer arithmetic is emitted folded (`fold_integer_binary`: `x + 0`, `0 * 176`, `ceildivsi(x, 1)`, a
constant on the left of a commutative op), as `canonicalize` would leave it, so that canonicalize's first round
after a lowering has nothing to do and no second round runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from xdsl.builder import Builder
from xdsl.dialects import arith, math, scf, vector
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float32Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    VectorType,
    f32,
    i1,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint
from xdsl.traits import Commutative

from tessera.dialects import sm90
from tessera.ir.class_tests import subclass_test

_is_integer_binary = subclass_test(arith.SignlessIntegerBinaryOperation)
_is_constant = subclass_test(arith.ConstantOp)
_is_integer_attr = subclass_test(IntegerAttr)


def _integer_constant(value: SSAValue) -> IntegerAttr | None:
    """The attribute of a scalar integer `arith.constant` (None for any other value)."""
    owner = value.owner
    if _is_constant(owner) and _is_integer_attr(owner.value):
        return owner.value
    return None


def fold_integer_binary(op: arith.SignlessIntegerBinaryOperation) -> SSAValue | Operation:
    """What `canonicalize` makes of a detached scalar integer `op` (xDSL's folder and arith patterns, to their
    fixed point, with the op's own `py_operation`, `is_right_unit` and `is_right_zero`): an existing value
    (`x + 0` is x, `x * 0` the zero), a new `arith.constant` (both operands constant), a new op with a
    constant moved to the right of a commutative op (`1 + x` is `x + 1`), or `op` itself."""
    lhs, rhs = op.lhs, op.rhs
    left, right = _integer_constant(lhs), _integer_constant(rhs)
    if left is not None and right is not None:
        result = op.py_operation(left.value.data, right.value.data)
        if result is not None:
            return arith.ConstantOp(IntegerAttr(result, left.type, truncate_bits=True))
    if right is not None:
        if op.is_right_unit(right):
            return lhs
        if op.is_right_zero(right):
            return rhs
    if left is not None and op.has_trait(Commutative):
        if op.is_right_unit(left):
            return rhs
        if right is None:
            return lhs if op.is_right_zero(left) else type(op)(rhs, lhs)
    return op


@functools.lru_cache(maxsize=1024)
def _shuffle_mask(indices: tuple[int, ...]) -> DenseArrayBase:
    """The mask attribute of a shuffle (attributes are immutable: one per distinct mask, built and verified
    once; a lowering makes the same few masks hundreds of times)."""
    return DenseArrayBase.from_list(i64, list(indices))


@functools.lru_cache(maxsize=1024)
def _vector_type(element: Attribute, lanes: int) -> VectorType:
    """`vector<lanes x element>`, built and verified once per distinct type (a lowering asks for the same few
    fragment types hundreds of times: every shuffle of a tile makes one)."""
    return VectorType(element, [lanes])


@functools.lru_cache(maxsize=1024)
def _index_attr(value: int) -> IntegerAttr:
    """The index constant `value`'s attribute, one per value (as `_vector_type`)."""
    return IntegerAttr(value, IndexType())


class Emitter:
    """Appends ops to `block` and returns their result(s)."""

    def __init__(self, block: Block):
        self.block = block
        self.builder = Builder(InsertPoint.at_end(block))

    def op(self, op: Operation) -> SSAValue | Operation:
        """Insert `op` (a scalar integer op folded first: `fold_integer_binary`) and return its result (or the
        op, where it has none or several)."""
        if _is_integer_binary(op):
            folded = fold_integer_binary(op)
            if folded is not op:
                op.erase()
                if isinstance(folded, SSAValue):
                    return folded
                op = folded
        self.builder.insert(op)
        return op.results[0] if len(op.results) == 1 else op

    # -- constants --------------------------------------------------------------------------------------------
    # The constants and shuffles (about 270 ops of a flash d128 lowering, the most it builds) are made with
    # xDSL's generic `create`, as clone and the parser make ops: the same op as the classes' __init__ makes (a
    # wrapper that passes these operands, result types and properties on), without IRDL's argument processing,
    # which costs two to three times the op itself.
    def _constant(self, value: Attribute, ty: Attribute) -> SSAValue:
        return self.op(arith.ConstantOp.create(result_types=(ty,), properties={"value": value}))

    def index(self, value: int) -> SSAValue:
        attr = _index_attr(value)
        return self._constant(attr, attr.type)

    def i64(self, value: int) -> SSAValue:
        return self._constant(IntegerAttr(value, i64), i64)

    def f32(self, value: float) -> SSAValue:
        return self._constant(FloatAttr(value, f32), f32)

    def dense(self, element_type: Attribute, values: Sequence) -> SSAValue:
        ty = _vector_type(element_type, len(values))
        return self._constant(DenseIntOrFPElementsAttr.from_list(ty, list(values)), ty)

    def splat(self, element_type: Attribute, value, lanes: int) -> SSAValue:
        return self.dense(element_type, [value] * lanes)

    # -- vectors ---------------------------------------------------------------------------------------------
    def broadcast(self, scalar: SSAValue, lanes: int) -> SSAValue:
        return self.op(vector.BroadcastOp(scalar, _vector_type(scalar.type, lanes)))

    def shuffle(self, source: SSAValue, indices: Sequence[int], second: SSAValue | None = None) -> SSAValue:
        """result[i] = source[indices[i]] (registers of one thread); with `second`, indices from
        len(source) on select second's registers (source and second concatenated)."""
        element = source.type.element_type
        return self.op(vector.ShuffleOp.create(  # (`create`: see the constants above)
            operands=(source, second or source), result_types=(_vector_type(element, len(indices)),),
            properties={"mask": _shuffle_mask(tuple(indices))}))

    # -- arithmetic (scalars or vectors) ----------------------------------------------------------------------
    def addf(self, a, b):
        return self.op(arith.AddfOp(a, b))

    def subf(self, a, b):
        return self.op(arith.SubfOp(a, b))

    def mulf(self, a, b):
        return self.op(arith.MulfOp(a, b))

    def maxf(self, a, b):
        return self.op(arith.MaximumfOp(a, b))

    def fma(self, a, b, c):
        return self.op(math.FmaOp(a, b, c))

    def addi(self, a, b):
        return self.op(arith.AddiOp(a, b))

    def muli(self, a, b):
        return self.op(arith.MuliOp(a, b))

    def cmpi(self, a, b, predicate: str):
        """Scalar integer compare (arith.cmpi; predicates eq, ne, slt, ...)."""
        return self.op(arith.CmpiOp(a, b, predicate))

    def setp(self, predicate: str, a, b):
        """Compare scalars or fragments register by register (sm90.setp; eq, ne, lt, le, gt, ge)."""
        return self.op(sm90.SetpOp(predicate, a, b))

    def select(self, cond, a, b):
        """cond ? a : b, register by register (sm90.selp)."""
        return self.op(sm90.SelpOp(cond, a, b))

    def andi(self, a, b):
        return self.op(arith.AndIOp(a, b))

    def to_i64(self, value: SSAValue) -> SSAValue:
        if value.type == i64:
            return value
        return self.op(arith.IndexCastOp(value, i64))

    # -- structured control flow ------------------------------------------------------------------------------
    def if_(self, cond: SSAValue, body: Callable[[Emitter], None]) -> scf.IfOp:
        """scf.if without results: `body` fills the then-block. Returns the op."""
        block = Block()
        body(Emitter(block))
        Emitter(block).op(scf.YieldOp())
        return self.op(scf.IfOp(cond, [], Region(block)))

    def spin_until(self, condition: Callable[[Emitter], SSAValue]) -> None:
        """scf.while that re-evaluates `condition` (e.g. an mbarrier try_wait) until it is true."""
        before = Block()
        e = Emitter(before)
        done = condition(e)
        true = e.op(arith.ConstantOp(IntegerAttr(1, i1)))
        again = e.op(arith.XOrIOp(done, true))
        e.op(scf.ConditionOp(again))
        after = Block()
        Emitter(after).op(scf.YieldOp())
        self.op(scf.WhileOp([], [], Region(before), Region(after)))

    # -- machine ops ------------------------------------------------------------------------------------------
    def ex2(self, x):
        return self.op(sm90.Ex2ApproxOp(x))

    def rcp(self, x):
        return self.op(sm90.RcpApproxOp(x))


def is_f32_like(ty: Attribute) -> bool:
    return isinstance(ty, Float32Type) or (isinstance(ty, VectorType) and isinstance(ty.element_type, Float32Type))
