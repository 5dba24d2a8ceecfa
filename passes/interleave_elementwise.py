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
  root's slabs joined by shuffles (no instruction, no register): `tessera.lowering.lane_slabs.emit_in_slabs`,
  each slab named as the value it is a slab of.

The arithmetic is the same instructions on the same lanes, in another order: results are bitwise equal. Ops
with side effects are never moved; the tree's ops move down to their root, past nothing they depend on (their
operands dominate them). Given only Tile IR, tessera-opt and tessera-run refuse the pass (`input_level`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass

from tessera.ir.kernel_marks import target_kernels_in
from tessera.ir.walk import blocks_in
from tessera.lowering.lane_slabs import (SLAB, emit_in_slabs, is_constant, is_lane_wise, is_predicate, is_view,
                                         lanes_of)

@dataclass
class _Tree:
    """A root and the cheap ops under it (operands before users), in one block."""

    root: Operation
    ops: list[Operation]


def _cheap(op: Operation, block: Block, lanes: int, found: list[Operation]) -> bool:
    """Whether `op` is a cheap op of `lanes` lanes in `block` (module docstring); appends it and the cheap ops
    it reads to `found`, operands first."""
    if op.parent_block() is not block or not is_lane_wise(op) or not op.results[0].has_one_use():
        return False
    if lanes_of(op.results[0]) != lanes:
        return False
    kept = len(found)
    for operand in op.operands:
        if lanes_of(operand) is None or is_constant(operand) or is_view(operand, lanes):
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
    block, lanes = root.parent_block(), lanes_of(root.results[0])
    if _cheap(root, block, lanes, []):
        return None
    found: list[Operation] = []
    reads_cheap = False
    for operand in root.operands:
        owner = operand.owner
        if isinstance(owner, Operation) and lanes_of(operand) == lanes and _cheap(owner, block, lanes, found):
            reads_cheap = True
    return found if reads_cheap else None


def _interleave(tree: _Tree) -> None:
    ops = tree.ops + [tree.root]
    inside = set(ops)
    leaves = []
    for op in ops:
        for operand in op.operands:
            if operand.owner not in inside and operand not in leaves:
                leaves.append(operand)
    emit_in_slabs(ops, leaves, [tree.root.results[0]])


def _trees(block: Block) -> list[_Tree]:
    trees = []
    taken: set[Operation] = set()
    for op in list(block.ops):
        if op in taken or not is_lane_wise(op) or lanes_of(op.results[0]) <= SLAB:
            continue
        cheap = _cheap_ops(op)
        if not cheap or any(o in taken for o in cheap):
            continue
        if all(is_predicate(o.results[0]) for o in cheap):
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
            for block in blocks_in(fn):
                for tree in _trees(block):
                    _interleave(tree)
