"""convert-tile-to-sm90, row sums reduced across the quad once, after the loop (FlashAttention-3's softmax
sum): which Tile values may be held as each thread's partial sum of its row.

A row tile [BM] is held per thread as its rows' values, equal in the four threads of a quad (the threads
sharing a row of the score fragment). `tile.row_sum` folds a thread's registers of each row, then adds
across the quad with two shuffles per row. The online softmax's running sum only ever enters
l' = alpha l + rowsum(P) (`tile.fma`, alpha a row tile) and leaves the loop: a thread may instead carry its
own partial sum, since alpha l_t + s_t summed over the quad's threads t is alpha l + s. The quad is then
added once, where the sum is used otherwise (after the loop: O = acc / l, the LSE), not once per key block:
four shuffles and four adds fewer per iteration. The sum is the same up to the order of f32 additions (the
Tile interpreter's is within the kernels' tolerance); the Target IR and the PTX it prints still agree bit
for bit.

`partial_row_sums(fn)` is the largest set of Tile values that can be held so, by these rules:
- a `tile.row_sum` result, a rank-1 `tile.fma(a, b, c)` result (a not partial; b and c partial or a zero
  fill, one of them partial) and a `scf.for` iter_arg (init partial or a zero fill, yielded value partial)
  whose every use is a chain use: an operand b or c of a partial fma, the yielded value or the init of a
  partial iter_arg;
- a `scf.for` result is partial when its iter_arg is and its every use is a chain use. A result whose
  iter_arg is partial but which has another use is reduced across the quad right after the loop
  (`reduced_after_loop`);
- a `scf.if` result is partial when each branch yields a partial value or a zero fill there (one of them
  partial) and its every use is a chain use; the yield of a partial `scf.if` result is a chain use. (A
  block-sparse kernel's loop over full key blocks sits in an scf.if, and its sum enters the loop over
  partial blocks through it: both loops then add in the same order as the dense kernel's.)
"""

from __future__ import annotations

from xdsl.dialects import scf
from xdsl.ir import BlockArgument, Operation, SSAValue

from tessera.dialects import tile
from tessera.dialects.tile_types import is_float
from tessera.ir.walk import walk_ops


def _is_zero_fill(value: SSAValue) -> bool:
    owner = value.owner
    return isinstance(owner, tile.FillOp) and owner.value.value.data == 0.0


def _is_row_tile(value: SSAValue) -> bool:
    shape = getattr(value.type, "get_shape", lambda: ())()
    return len(shape) == 1


def _iter_arg(loop: scf.ForOp, index: int) -> BlockArgument:
    return loop.body.block.args[1 + index]


def partial_row_sums(fn: Operation) -> set[SSAValue]:
    """The Tile values of `fn` held as per-thread partial row sums (module docstring)."""
    candidates: set[SSAValue] = set()
    loops: list[scf.ForOp] = []
    for op in walk_ops(fn):
        # i32 sums are reduced at once, and so is an [BM, 1] column's (its sum is itself: no quad to add over)
        if isinstance(op, tile.RowSumOp) and is_float(op.result.type.element_type) and op.source.type.get_shape()[-1] != 1:
            candidates.add(op.result)
        elif isinstance(op, tile.FmaOp) and _is_row_tile(op.result):
            candidates.add(op.result)
        elif isinstance(op, scf.ForOp):
            loops.append(op)
            for i, result in enumerate(op.results):
                if _is_row_tile(result):
                    candidates.update((_iter_arg(op, i), result))
        elif isinstance(op, scf.IfOp):
            candidates.update(result for result in op.results if _is_row_tile(result))
    partial = set(candidates)

    def holds(value: SSAValue) -> bool:
        return value in partial

    def chain_use(use) -> bool:
        user, index = use.operation, use.index
        if isinstance(user, tile.FmaOp):
            return index in (1, 2) and holds(user.result)
        if isinstance(user, scf.YieldOp) and isinstance(user.parent_op(), scf.ForOp):
            return holds(_iter_arg(user.parent_op(), index))
        if isinstance(user, scf.YieldOp) and isinstance(user.parent_op(), scf.IfOp):
            return holds(user.parent_op().results[index])
        if isinstance(user, scf.ForOp):
            first = len(user.operands) - len(user.iter_args)
            return index >= first and holds(_iter_arg(user, index - first))
        return False

    def valid(value: SSAValue) -> bool:
        owner = value.owner
        if isinstance(owner, tile.FmaOp):
            ends = [owner.b, owner.c]
            if holds(owner.a) or not all(holds(v) or _is_zero_fill(v) for v in ends) or not any(map(holds, ends)):
                return False
        if isinstance(value, BlockArgument) and isinstance(value.owner.parent_op(), scf.ForOp):
            loop = value.owner.parent_op()
            i = value.index - 1
            init, yielded = loop.iter_args[i], loop.body.block.last_op.operands[i]
            if not (holds(init) or _is_zero_fill(init)) or not holds(yielded):
                return False
            return all(chain_use(u) for u in value.uses)
        if isinstance(owner, scf.ForOp):
            return holds(_iter_arg(owner, value.index)) and all(chain_use(u) for u in value.uses)
        if isinstance(owner, scf.IfOp):
            branches = [region.block.last_op.operands[value.index] for region in owner.regions if region.blocks]
            if len(branches) != 2 or not all(holds(v) or _is_zero_fill(v) for v in branches) \
                    or not any(map(holds, branches)):
                return False
        return all(chain_use(u) for u in value.uses)

    changed = True
    while changed:
        changed = False
        for value in list(partial):
            if not valid(value):
                partial.discard(value)
                changed = True
    return partial


def reduced_after_loop(loop: scf.ForOp, partial: set[SSAValue]) -> list[int]:
    """The results of `loop` whose iter_arg is partial but which are not: summed across the quad after it."""
    return [i for i, result in enumerate(loop.results)
            if _iter_arg(loop, i) in partial and result not in partial]
