"""`compute-distinct-lanes`: a lane-wise op whose vector operands are only views, broadcasts and constants
computes each distinct combination of operand registers once, and its result becomes a view of those.

Input and output: Target IR, after `convert-tile-to-sm90` and `canonicalize`, before `allocate-registers` (in
every target pipeline). A tile made from row vectors, column vectors and values the same for every element
(a splat, a gather at a program id: ALiBi's `slopes[h]`) is lowered op by op over the whole tile's registers,
each operand a view (`vector.shuffle`, a scalar's `vector.broadcast`: the allocator gives it its source's
registers) of fewer registers. Register i of such an op's result depends only on which register of each
source (and which constant) register i reads: where only D < N such combinations occur, the op is computed
on D registers and its N registers are a view of those. Examples:

- `slopes[h]`'s gather at a splat index: its bounds test, offset and load are the same on every register (one
  `ld.global` a thread, not one per row);
- `slope * f32(kv_idx - q_idx)` over a difference of indices, which `convert-tile-to-sm90` lowers as a view of
  the thread's distinct (column - row) offsets (34 at 128 keys, `IndexDiagonal`): computed on those 34
  registers, not on 64, and never a [BM, BN] tile beside the score, however ptxas schedules it (ptxas hoists
  work that does not read the score above the wait for the score's wgmma, where a whole tile of it is live
  beside the accumulator in flight); a relative-position table's gather `table[h, clip(q_idx - kv_idx + 31,
  0, 62)]` loads 34 registers, not 64.

A lane-wise op is one of the allocator's `ELEMENTWISE` ops, `sm90.cvt`, `sm90.setp` (register i of the result
reads register i of each operand) or `sm90.ld_global` (register i loads at offset i and column_bytes i, under
mask bit i: an invariant kernel input, so two registers at one address hold one value). An op with a
predicate result is compressed only to at most `PREDICATE_LANES` registers: a predicate per distinct
combination would outlive the seven a thread has (ptxas would keep them in registers); it stays a per-register
test of the views, as before. The arithmetic is the same instruction on the same values: results are bitwise
equal, with fewer instructions. Given only Tile IR, tessera-opt and tessera-run refuse the pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import (DenseArrayBase, DenseIntOrFPElementsAttr, IntegerType, ModuleOp, UnitAttr,
                                   VectorType, i32, i64)
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from tessera.ir.class_tests import subclass_test
from tessera.ir.walk import walk_ops
from tessera.dialects import sm90
from tessera.passes.convert_tile_to_sm90.common import DISTINCT_LANES_ATTR
from tessera.kernel_abi import is_target_kernel
from tessera.regalloc.groups import ELEMENTWISE

LANE_WISE = ELEMENTWISE + (sm90.CvtOp, sm90.SetpOp, sm90.LdGlobalOp)
"""Ops whose result register i reads only register i of each vector operand (`sm90.ld_global`: of its offsets
and mask, plus its column_bytes i)."""
_is_lane_wise = subclass_test(LANE_WISE)

PREDICATE_LANES = 2
"""The most registers a predicate result is compressed to (a row vector's two rows, or one)."""


def _lanes(value: SSAValue) -> int | None:
    return value.type.get_shape()[0] if isinstance(value.type, VectorType) else None


def _keys(value: SSAValue) -> list:
    """Which register each register of `value` is, through views: (source, register) of the value a chain of
    shuffles and scalar broadcasts reads, ("scalar", s) of a broadcast scalar, ("constant", repr) of a constant."""
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, DenseIntOrFPElementsAttr):
        return [("constant", repr(v)) for v in owner.value.get_values()]  # repr: -0.0 is not 0.0
    if isinstance(owner, vector.BroadcastOp) and _lanes(owner.source) is None:
        return [("scalar", owner.source)] * _lanes(value)
    if isinstance(owner, vector.ShuffleOp):
        first = _keys(owner.v1)
        both = first + (_keys(owner.v2) if owner.v2 is not owner.v1 else first)
        return [both[m] for m in owner.mask.get_values()]
    return [(value, i) for i in range(_lanes(value))]


def _seeded(value: SSAValue) -> bool:
    """Whether `value` is, through views, a value `convert-tile-to-sm90` marked (`DISTINCT_LANES_ATTR`) or one
    this pass computed on distinct registers."""
    owner = value.owner
    if isinstance(owner, Operation) and DISTINCT_LANES_ATTR in owner.attributes:
        return True
    if isinstance(owner, vector.ShuffleOp):
        return _seeded(owner.v1) or (owner.v2 is not owner.v1 and _seeded(owner.v2))
    return False


def _narrowed(value: SSAValue, lanes: list[int], before: Operation) -> SSAValue:
    """`value` at registers `lanes` only: a constant's values, else a view of its registers."""
    owner = value.owner
    ty = VectorType(value.type.element_type, [len(lanes)])
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, DenseIntOrFPElementsAttr):
        values = list(owner.value.get_values())
        op = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(ty, [values[i] for i in lanes]))
    else:
        op = vector.ShuffleOp(value, value, DenseArrayBase.from_list(i64, lanes), result_type=ty)
    before.parent_block().insert_op_before(op, before)
    return op.results[0]


def _is_predicate(value: SSAValue) -> bool:
    element = value.type.element_type
    return isinstance(element, IntegerType) and element.width.data == 1


def _is_view_like(value: SSAValue) -> bool:
    """Whether every register of `value` is a constant, a scalar or a register of a value with fewer registers."""
    lanes = _lanes(value)
    return all(key[0] in ("constant", "scalar") or _lanes(key[0]) < lanes for key in _keys(value))


def _narrowable(value: SSAValue, depth: int = 8) -> bool:
    """Whether `value` is view-like, or will be once this pass has computed the lane-wise ops it is made of on
    their distinct registers (a bounded look back: ops of view-like operands one of which is seeded, as
    `_compress` asks; a load of a tile, whose offsets are views of nothing seeded, stays whole)."""
    return _is_view_like(value) or _narrowed_op(value, depth)


def _narrowed_op(value: SSAValue, depth: int) -> bool:
    """Whether `value` is a lane-wise op this pass will compute on distinct registers (`_narrowable`)."""
    owner = value.owner
    if depth <= 0 or not isinstance(owner, LANE_WISE) or len(owner.results) != 1:
        return False
    vectors = [v for v in owner.operands if _lanes(v) is not None]
    return all(_narrowable(v, depth - 1) for v in vectors) and any(
        _seeded(v) or _narrowed_op(v, depth - 1) for v in vectors)


def _feeds_narrow(predicate: SSAValue) -> bool:
    """Whether every user of `predicate` is a lane-wise op that will be computed on the same distinct registers
    (its other vector operands view-like), a predicate result's users in turn: the narrow predicates then die
    at their narrow users (a gather's bounds test at its loads), never shuffled out beside a whole tile."""
    for use in predicate.uses:
        user = use.operation
        if not isinstance(user, LANE_WISE) or len(user.results) != 1:
            return False
        others = [v for v in user.operands if v is not predicate and _lanes(v) is not None]
        if not all(_narrowable(v) for v in others):
            return False
        if _is_predicate(user.results[0]) and not _feeds_narrow(user.results[0]):
            return False
    return True


def _compress(op: Operation) -> bool:
    """Compute `op` on its distinct operand combinations, where there are fewer than its registers."""
    result = op.results[0]
    lanes = _lanes(result)
    vectors = [v for v in op.operands if _lanes(v) is not None]
    if not vectors or any(_lanes(v) != lanes for v in vectors):
        return False
    keys = [_keys(v) for v in vectors]
    if not any(_seeded(v) for v in vectors):
        return False
    column_bytes = list(op.column_bytes.get_values()) if isinstance(op, sm90.LdGlobalOp) and op.column_bytes else None
    combos = [tuple(k[i] for k in keys) + ((column_bytes[i],) if column_bytes else ()) for i in range(lanes)]
    distinct: dict[tuple, int] = {}
    representatives: list[int] = []
    for i, combo in enumerate(combos):
        if combo not in distinct:
            distinct[combo] = len(representatives)
            representatives.append(i)
    count = len(representatives)
    if count == lanes or (_is_predicate(result) and count > PREDICATE_LANES and not _feeds_narrow(result)):
        return False
    narrowed: dict[SSAValue, SSAValue] = {}
    for v in vectors:
        if v not in narrowed:
            narrowed[v] = _narrowed(v, representatives, op)
    operands = [narrowed.get(v, v) for v in op.operands]
    properties = dict(op.properties)
    if column_bytes:
        properties["column_bytes"] = DenseArrayBase.from_list(i32, [column_bytes[i] for i in representatives])
    small = type(op).create(operands=operands, result_types=[VectorType(result.type.element_type, [count])],
                            attributes=dict(op.attributes), properties=properties)
    block = op.parent_block()
    block.insert_op_before(small, op)
    view = vector.ShuffleOp(small.results[0], small.results[0],
                            DenseArrayBase.from_list(i64, [distinct[c] for c in combos]), result_type=result.type)
    block.insert_op_before(view, op)
    small.attributes[DISTINCT_LANES_ATTR] = UnitAttr()
    if result.name_hint:
        small.results[0].name_hint = result.name_hint
    result.replace_all_uses_with(view.results[0])
    op.detach()
    op.erase()
    return True


def _compress_block(block: Block) -> None:
    for op in list(block.ops):  # operands before users: a compressed op's view feeds its users' test
        for region in op.regions:
            for inner in region.blocks:
                _compress_block(inner)
        if _is_lane_wise(op) and len(op.results) == 1 and (_lanes(op.results[0]) or 0) > 1:
            _compress(op)


@dataclass(frozen=True)
class ComputeDistinctLanesPass(ModulePass):
    """Compute each lane-wise op whose operands are views, broadcasts and constants on its distinct registers."""

    name = "compute-distinct-lanes"
    input_level: ClassVar[str] = "target"
    """The kernels it transforms (Target IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [o for o in walk_ops(op) if is_target_kernel(o)]:
            for region in fn.regions:
                for block in region.blocks:
                    _compress_block(block)
