"""`interleave-elementwise`: compute a tile that is made only of row and column vectors, slab by slab, where
it is used, instead of whole beside the tile it is combined with.

Input and output: Target IR, after `rematerialize-constants` and before `allocate-registers`. Not in the
default pipelines (`tessera-opt -p ...,rematerialize-constants,interleave-elementwise,...` asks for it): it
lowers the allocator's count, not what ptxas needs. ptxas computes a tile that does not read the score
whole between issuing the score's wgmma and waiting for it, whatever the order in the PTX: in ALiBi's
backward with document masking (head_dim 64, 128 x 128) it issues the 64 FADDs of `kv_idx - q_idx` and the
64 FMULs by the slope before `WARPGROUP.DEPBAR`, 237 registers live there from the whole-tile PTX and 242
from the interleaved one, which ptxas 12.9, 13.0 and 13.5 then spill at the consumers' 240 (needing 248)
where the count said 224. The default pipelines compute such tiles on the thread's distinct registers
instead (`compute-distinct-lanes`: ALiBi's 34 at 128 keys), which no schedule makes whole again. A score_mod
such as ALiBi's `score + slopes[h] * (kv_idx - q_idx)` otherwise lowers to `(kv - q)` over the broadcast views
of a column vector and a row vector, then `* slope`, then `+ score`: each a whole `[BM, BN]` vector op in
program order. This pass writes the chain `SLAB` lanes at a time:

- a *cheap* op is a lane-wise op (`ELEMENTWISE`, `sm90.cvt`, `sm90.setp`) whose result has one use, and
  whose vector operands are constants, views (a `vector.shuffle` or a scalar's `vector.broadcast`, which the
  allocator gives its source's registers) of a value with fewer lanes, or cheap ops themselves;
- a *root* is a lane-wise op in the same block that reads a cheap op and is not cheap itself (it reads a
  value of its own width: the score tile); a root's cheap tree is interleaved when one of its ops has a
  result that takes registers (not only predicates: a mask's setp and selp are left as they are);
- the root and its tree are emitted `SLAB` lanes at a time right before the root: each leaf cut into slabs
  (a view's slab is a shuffle of its source; a constant's, a constant; any other value's, a shuffle of it,
  all shuffled out first so that each of its registers dies at its own slab), each slab's ops, and the
  root's slabs joined by shuffles (no instruction, no register).

The arithmetic is the same instructions on the same lanes, in another order: results are bitwise equal. Ops
with side effects are never moved; the tree's ops move down to their root, past nothing they depend on (their
operands dominate them). Given only Tile IR, tessera-opt and tessera-run refuse the pass (`input_level`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import DenseArrayBase, DenseIntOrFPElementsAttr, IntegerType, ModuleOp, VectorType, i64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from tessera.dialects import sm90
from tessera.ir.kernel_marks import target_kernels_in
from tessera.regalloc.allocate import ELEMENTWISE

SLAB = 8
"""Lanes computed together: each slab's temporaries live from their op to the slab's root op."""

LANE_WISE = ELEMENTWISE + (sm90.CvtOp, sm90.SetpOp)
"""Ops whose result lane i depends only on lane i of each vector operand."""


def _lanes(value: SSAValue) -> int | None:
    return value.type.get_shape()[0] if isinstance(value.type, VectorType) else None


def _is_lane_wise(op: Operation) -> bool:
    if not isinstance(op, LANE_WISE) or len(op.results) != 1:
        return False
    lanes = _lanes(op.results[0])
    return lanes is not None and all(_lanes(v) in (None, lanes) for v in op.operands)


def _is_view(value: SSAValue, lanes: int) -> bool:
    """A shuffle or a scalar's broadcast (the source's registers) of fewer lanes than `lanes`."""
    owner = value.owner
    if isinstance(owner, vector.ShuffleOp):
        registers = _lanes(owner.v1) if owner.v1 is owner.v2 else _lanes(owner.v1) + _lanes(owner.v2)
        return registers < lanes
    return isinstance(owner, vector.BroadcastOp) and _lanes(owner.source) is None


def _is_constant(value: SSAValue) -> bool:
    return isinstance(value.owner, arith.ConstantOp) and isinstance(value.owner.value, DenseIntOrFPElementsAttr)


def _shuffle(first: SSAValue, second: SSAValue, mask: list[int]) -> Operation:
    """`vector.shuffle first, second [mask]` (registers of one thread: no instruction)."""
    return vector.ShuffleOp(first, second, DenseArrayBase.from_list(i64, mask),
                            result_type=VectorType(first.type.element_type, [len(mask)]))


def _is_predicate(value: SSAValue) -> bool:
    element = value.type.element_type
    return isinstance(element, IntegerType) and element.width.data == 1


@dataclass
class _Tree:
    """A root and the cheap ops under it (operands before users), in one block."""

    root: Operation
    ops: list[Operation]


def _cheap(op: Operation, block: Block, lanes: int, found: list[Operation]) -> bool:
    """Whether `op` is a cheap op of `lanes` lanes in `block` (module docstring); appends it and the cheap ops
    it reads to `found`, operands first."""
    if op.parent_block() is not block or not _is_lane_wise(op) or not op.results[0].has_one_use():
        return False
    if _lanes(op.results[0]) != lanes:
        return False
    kept = len(found)
    for operand in op.operands:
        if _lanes(operand) is None or _is_constant(operand) or _is_view(operand, lanes):
            continue
        owner = operand.owner
        if not isinstance(owner, Operation) or not (owner in found or _cheap(owner, block, lanes, found)):
            del found[kept:]  # the cheap ops found under it are read by an op that is not cheap: no tree
            return False
    if op not in found:
        found.append(op)
    return True


def _cheap_ops(root: Operation) -> list[Operation] | None:
    """The cheap ops `root` reads, operands first; None where it reads none, or is cheap itself (then its user
    is the root)."""
    block, lanes = root.parent_block(), _lanes(root.results[0])
    if _cheap(root, block, lanes, []):
        return None
    found: list[Operation] = []
    reads_cheap = False
    for operand in root.operands:
        owner = operand.owner
        if isinstance(owner, Operation) and _lanes(operand) == lanes and _cheap(owner, block, lanes, found):
            reads_cheap = True
    return found if reads_cheap else None


def _slab(value: SSAValue, first: int, count: int, before: Operation, cut: dict) -> SSAValue:
    """Lanes first .. first + count - 1 of a leaf `value`, made right before `before`."""
    if _lanes(value) is None:
        return value
    owner = value.owner
    if _is_constant(value):
        values = list(owner.value.get_values())[first:first + count]
        op = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(VectorType(value.type.element_type, [count]), values))
    elif isinstance(owner, vector.BroadcastOp) and _lanes(owner.source) is None:
        op = vector.BroadcastOp(owner.source, VectorType(value.type.element_type, [count]))
    elif isinstance(owner, vector.ShuffleOp) and _is_view(value, _lanes(value)):
        op = _shuffle(owner.v1, owner.v2, list(owner.mask.get_values())[first:first + count])
    else:
        return cut[value][first // SLAB]
    before.parent_block().insert_op_before(op, before)
    return op.results[0]


def _interleave(tree: _Tree) -> None:
    root = tree.root
    lanes = _lanes(root.results[0])
    block = root.parent_block()
    inside = set(tree.ops) | {root}
    leaves = []
    for op in tree.ops + [root]:
        for operand in op.operands:
            if operand.owner not in inside and operand not in leaves:
                leaves.append(operand)
    # A leaf of the root's own width (the score tile) is shuffled out slab by slab before any slab is
    # computed: each of its registers then dies at its own slab's op, where the slab's result takes it.
    cut: dict[SSAValue, list[SSAValue]] = {}
    for leaf in leaves:
        if _lanes(leaf) is not None and not _is_constant(leaf) and not _is_view(leaf, lanes):
            cut[leaf] = []
            for first in range(0, lanes, SLAB):
                count = min(SLAB, lanes - first)
                op = _shuffle(leaf, leaf, list(range(first, first + count)))
                block.insert_op_before(op, root)
                cut[leaf].append(op.results[0])
    joined = None
    for first in range(0, lanes, SLAB):
        count = min(SLAB, lanes - first)
        mapped: dict[SSAValue, SSAValue] = {}
        for op in tree.ops + [root]:
            operands = [mapped[v] if v in mapped else _slab(v, first, count, root, cut) for v in op.operands]
            result = op.results[0]
            part = type(op).create(operands=operands, result_types=[VectorType(result.type.element_type, [count])],
                                   attributes=dict(op.attributes), properties=dict(op.properties))
            block.insert_op_before(part, root)
            mapped[result] = part.results[0]
        part = mapped[root.results[0]]
        if joined is None:
            joined = part
        else:
            op = _shuffle(joined, part, list(range(_lanes(joined) + count)))
            block.insert_op_before(op, root)
            joined = op.results[0]
    if root.results[0].name_hint:
        joined.name_hint = root.results[0].name_hint
    root.results[0].replace_all_uses_with(joined)
    root.detach()
    root.erase()
    for op in reversed(tree.ops):
        op.detach()
        op.erase()


def _trees(block: Block) -> list[_Tree]:
    trees = []
    taken: set[Operation] = set()
    for op in list(block.ops):
        if op in taken or not _is_lane_wise(op) or _lanes(op.results[0]) <= SLAB:
            continue
        cheap = _cheap_ops(op)
        if not cheap or any(o in taken for o in cheap):
            continue
        if all(_is_predicate(o.results[0]) for o in cheap):
            continue  # a mask's predicates: no registers to save
        taken.update(cheap)
        taken.add(op)
        trees.append(_Tree(op, cheap))
    return trees


@dataclass(frozen=True)
class InterleaveElementwisePass(ModulePass):
    """Compute each tile made only of row and column vectors slab by slab with the op that reads it."""

    name = "interleave-elementwise"
    input_level: ClassVar[str] = "target"
    """The kernels it transforms (Target IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in target_kernels_in(op):
            blocks = [b for o in fn.walk() for r in o.regions for b in r.blocks]
            for block in blocks:
                for tree in _trees(block):
                    _interleave(tree)
