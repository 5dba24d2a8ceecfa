"""Lane-wise Target IR computed a slab of registers at a time: what `interleave-elementwise` and
`slab-elementwise-chains` share.

A lane-wise op (`LANE_WISE`: register i of its result depends only on register i of each vector operand) can
be computed on any subset of its lanes. `emit_in_slabs` computes a set of such ops (in block order, all of one
lane count) `SLAB` lanes at a time right before the last of them: the whole set for lanes 0-7, then 8-15, ...
Each leaf (a value the set reads and does not make) is sliced: a value with a register per lane is cut into
slabs first (shuffles: each of its registers then dies at its own slab), a view (a shuffle of fewer registers,
a scalar's broadcast) is re-made on the slab's lanes from its source, a constant is a constant of the slab's
lanes. The values read after the set are the slabs joined by shuffles (registers of one thread: no
instruction, no register). A slab keeps the name and source location of the value it is a slab of. The same
instructions on the same lanes in another order: bitwise the same results.
"""

from __future__ import annotations

from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import DenseArrayBase, DenseIntOrFPElementsAttr, IntegerType, VectorType, i64
from xdsl.ir import Operation, SSAValue

from tessera.dialects import sm90
from tessera.regalloc.groups import ELEMENTWISE

SLAB = 8
"""Lanes computed together: each slab's temporaries live from their op to the last op of the set."""

LANE_WISE = ELEMENTWISE + (sm90.CvtOp, sm90.SetpOp)
"""Ops whose result lane i depends only on lane i of each vector operand."""


def lanes_of(value: SSAValue) -> int | None:
    return value.type.get_shape()[0] if isinstance(value.type, VectorType) else None


def is_lane_wise(op: Operation) -> bool:
    if not isinstance(op, LANE_WISE) or len(op.results) != 1:
        return False
    lanes = lanes_of(op.results[0])
    return lanes is not None and all(lanes_of(v) in (None, lanes) for v in op.operands)


def is_view(value: SSAValue, lanes: int) -> bool:
    """A shuffle or a scalar's broadcast (the source's registers) of fewer lanes than `lanes`."""
    owner = value.owner
    if isinstance(owner, vector.ShuffleOp):
        registers = lanes_of(owner.v1) if owner.v1 is owner.v2 else lanes_of(owner.v1) + lanes_of(owner.v2)
        return registers < lanes
    return isinstance(owner, vector.BroadcastOp) and lanes_of(owner.source) is None


def is_constant(value: SSAValue) -> bool:
    return isinstance(value.owner, arith.ConstantOp) and isinstance(value.owner.value, DenseIntOrFPElementsAttr)


def shuffle_of(first: SSAValue, second: SSAValue, mask: list[int]) -> Operation:
    """`vector.shuffle first, second [mask]` (registers of one thread: no instruction)."""
    return vector.ShuffleOp(first, second, DenseArrayBase.from_list(i64, mask),
                            result_type=VectorType(first.type.element_type, [len(mask)]))


def is_predicate(value: SSAValue) -> bool:
    element = value.type.element_type
    return isinstance(element, IntegerType) and element.width.data == 1


def slab_of(value: SSAValue, first: int, count: int, before: Operation, cut: dict) -> SSAValue:
    """Lanes first .. first + count - 1 of a leaf `value`, made right before `before` (`cut`: the slabs of each
    leaf with a register per lane, made first)."""
    if lanes_of(value) is None:
        return value
    owner = value.owner
    if is_constant(value):
        values = list(owner.value.get_values())[first:first + count]
        op = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(VectorType(value.type.element_type, [count]), values))
    elif isinstance(owner, vector.BroadcastOp) and lanes_of(owner.source) is None:
        op = vector.BroadcastOp(owner.source, VectorType(value.type.element_type, [count]))
    elif isinstance(owner, vector.ShuffleOp) and is_view(value, lanes_of(value)):
        op = shuffle_of(owner.v1, owner.v2, list(owner.mask.get_values())[first:first + count])
    else:
        return cut[value][first // SLAB]
    before.parent_block().insert_op_before(op, before)
    return op.results[0]


def _named_like(op: Operation, value: SSAValue) -> None:
    """A slab of `value` keeps its name and source location: the allocator's report of what is live at a peak
    names the slabs as it named the whole value (`8 x %gb (64 registers, arith.addf at file:line:col)`)."""
    op.results[0].name_hint = value.name_hint
    if isinstance(value.owner, Operation):
        op.location = value.owner.location


def emit_in_slabs(ops: list[Operation], leaves: list[SSAValue], results: list[SSAValue]) -> None:
    """Compute `ops` (lane-wise, in block order, one lane count) `SLAB` lanes at a time right before the last
    of them, reading `leaves` and replacing `results` (the values of `ops` read elsewhere) by their joined
    slabs; the original ops are erased (module docstring)."""
    last = ops[-1]
    block = last.parent_block()
    lanes = lanes_of(last.results[0])
    cut: dict[SSAValue, list[SSAValue]] = {}
    for leaf in leaves:
        if lanes_of(leaf) is not None and not is_constant(leaf) and not is_view(leaf, lanes):
            cut[leaf] = []
            for first in range(0, lanes, SLAB):
                op = shuffle_of(leaf, leaf, list(range(first, min(first + SLAB, lanes))))
                _named_like(op, leaf)
                block.insert_op_before(op, last)
                cut[leaf].append(op.results[0])
    joined: dict[SSAValue, SSAValue] = {}
    for first in range(0, lanes, SLAB):
        count = min(SLAB, lanes - first)
        mapped: dict[SSAValue, SSAValue] = {}
        for op in ops:
            operands = [mapped[v] if v in mapped else slab_of(v, first, count, last, cut) for v in op.operands]
            result = op.results[0]
            part = type(op).create(operands=operands, result_types=[VectorType(result.type.element_type, [count])],
                                   attributes=dict(op.attributes), properties=dict(op.properties))
            _named_like(part, result)
            block.insert_op_before(part, last)
            mapped[result] = part.results[0]
        for value in results:
            part = mapped[value]
            if value in joined:
                op = shuffle_of(joined[value], part, list(range(lanes_of(joined[value]) + count)))
                block.insert_op_before(op, last)
                part = op.results[0]
            joined[value] = part
    for value in results:
        if value.name_hint:
            joined[value].name_hint = value.name_hint
        value.replace_all_uses_with(joined[value])
    for op in reversed(ops):
        op.detach()
        op.erase()


