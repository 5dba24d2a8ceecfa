"""`slab-elementwise-chains`: compute a chain of lane-wise ops on a whole fragment a slab of registers at a
time, where computing it op by op would hold several whole fragments at once.

Input and output: Target IR, after `compute-distinct-lanes` and `cse`, before `rematerialize-constants` (the
constants it cuts are then re-created at their uses) and `allocate-registers`. In the default pipelines.

A score_mod such as NumPy's float `score // 0.1` (`tessera.variants.float_division`: an exact fmod ladder,
then npy_divmod's fix-ups) lowers to some forty lane-wise ops on the [BM, BN] score fragment, each a whole
`vector<64xf32>` at 128 x 128 in program order: the score, the remainder and a step's quotient are live at
once (with the predicates the fix-ups keep), 292 registers where the consumers have 240. Each lane of such a
chain depends only on the same lane of its operands, so the chain can be computed `SLAB` (8) lanes at a time
(`tessera.lowering.lane_slabs`, which `interleave-elementwise` uses too):
the whole chain for lanes 0-7, then 8-15, ...; only one slab's intermediates are live beside the chain's
inputs and results.

- A *chain* is a set of lane-wise ops (`lane_slabs.LANE_WISE`: one result, every vector operand
  of the result's lane count, no side effects) of one block, all of the same lane count L > `SLAB`, joined
  by reading each other's results directly (not through a view); its *leaves* are the values it reads that
  it does not make (a fragment such as the score, a constant, a view of a row vector or of a scalar), its
  *results* those of its values read outside it. Every op outside the chain that reads a result comes after
  the chain's last op (a chain is cut before the first op that does not).
- The chain is emitted slab by slab right before its last op (its ops move down past nothing they read,
  since their operands dominate them, and past nothing that reads them): each full-width leaf is cut into
  slabs first (shuffles: each register then dies at its own slab), a view's slab is a shuffle of its source,
  a constant's a constant; each slab's ops in the chain's order; each result's slabs joined by shuffles
  (registers of one thread: no instruction, no register).
- It is applied only where it saves registers (`plain_peak` > `slab_peak`): the plain emission's peak of
  whole non-predicate fragments live inside the chain is counted in program order, against the slab
  emission's, which holds at most the full-width leaves still to be read and the results. A straight chain
  (a soft-cap's multiply, tanh, multiply) or a mask's select keeps its emission: nothing changes for the
  kernels it does not help.

The same instructions on the same lanes in another order: results are bitwise equal at every level (the
CTA simulator and the PTX executor compute each instruction per register). Given only Tile IR, tessera-opt
and tessera-run refuse the pass (`input_level`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass

from tessera.ir.class_tests import subclass_test
from tessera.ir.kernel_marks import target_kernels_in
from tessera.ir.walk import blocks_in
from tessera.lowering.lane_slabs import (LANE_WISE, SLAB, emit_in_slabs, is_constant, is_lane_wise, is_predicate,
                                         is_view, lanes_of)

_of_lane_wise_kind = subclass_test(LANE_WISE)
"""`isinstance(op, LANE_WISE)`, decided once per op class (a pass over every block of every kernel)."""


@dataclass
class Chain:
    """Lane-wise ops of one block (in block order), their leaves and results (module docstring)."""

    ops: list[Operation]
    leaves: list[SSAValue]
    results: list[SSAValue]


def _users_outside(value: SSAValue, inside: set[Operation]) -> list[Operation]:
    return [use.operation for use in value.uses if use.operation not in inside]


def _ancestor_in(op: Operation, block: Block) -> Operation | None:
    """The op of `block` that is `op` or holds it; None if `op` is not under `block`."""
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()
    return op


def _components(block: Block, order: dict[Operation, int]) -> list[list[Operation]]:
    """Sets of lane-wise ops of more than `SLAB` lanes joined by reading each other directly, in block order."""
    parent: dict[Operation, Operation] = {}

    def find(op: Operation) -> Operation:
        while parent[op] is not op:
            parent[op] = parent[parent[op]]
            op = parent[op]
        return op

    for op in block.ops:
        if _of_lane_wise_kind(op) and is_lane_wise(op) and lanes_of(op.results[0]) > SLAB:
            parent[op] = op
            for operand in op.operands:
                owner = operand.owner
                if owner in parent and lanes_of(operand) == lanes_of(op.results[0]):
                    parent[find(owner)] = find(op)
    groups: dict[Operation, list[Operation]] = {}
    for op in parent:
        groups.setdefault(find(op), []).append(op)
    return sorted(groups.values(), key=lambda ops: order[ops[0]])


def _chain_of(ops: list[Operation]) -> Chain:
    inside = set(ops)
    leaves, results = [], []
    for op in ops:
        for operand in op.operands:
            if operand.owner not in inside and operand not in leaves:
                leaves.append(operand)
        if _users_outside(op.results[0], inside):
            results.append(op.results[0])
    return Chain(ops, leaves, results)


def _runs(ops: list[Operation], order: dict[Operation, int], block: Block) -> list[list[Operation]]:
    """`ops` (in block order) cut into runs whose results are read outside the run only after its last op:
    each run is cut before the first op that reads one of its results earlier (module docstring)."""
    runs = []
    while ops:
        run = ops
        while True:
            inside, last = set(run), order[run[-1]]
            readers = [order[_ancestor_in(user, block)] for op in run for user in _users_outside(op.results[0], inside)]
            early = min((at for at in readers if at < last), default=None)
            if early is None:
                break
            run = [op for op in run if order[op] < early]  # not empty: an op's readers come after it
        runs.append(run)
        ops = ops[len(run):]
    return runs


def _whole(value: SSAValue, lanes: int) -> bool:
    """Whether `value` holds a register per lane of its own (not a constant, nor a view of fewer registers)."""
    return lanes_of(value) == lanes and not is_constant(value) and not is_view(value, lanes)


def plain_peak(chain: Chain, order: dict[Operation, int]) -> int:
    """The most whole non-predicate fragments live at once after an op of the chain, emitted op by op: the
    full-width leaves until their last read in the chain, each value of the chain from its op to its last
    read in the chain (a result to the end)."""
    lanes = lanes_of(chain.ops[0].results[0])
    last_read: dict[SSAValue, int] = {}
    for op in chain.ops:
        for operand in op.operands:
            last_read[operand] = order[op]
    end = order[chain.ops[-1]]
    for value in chain.results:
        last_read[value] = end + 1
    counted = [v for v in chain.leaves if _whole(v, lanes) and not is_predicate(v)]
    peak = 0
    for op in chain.ops:
        at = order[op]
        live = sum(1 for v in counted if last_read[v] > at)
        live += sum(1 for o in chain.ops if order[o] <= at and not is_predicate(o.results[0])
                    and last_read.get(o.results[0], at) > at)
        peak = max(peak, live)
    return peak


def slab_peak(chain: Chain) -> int:
    """The whole fragments the slab emission holds at once, less a slab's temporaries: as the slabs advance,
    the full-width leaves die a slab at a time while the results grow a slab at a time, so the larger count
    of the two."""
    lanes = lanes_of(chain.ops[0].results[0])
    leaves = sum(1 for v in chain.leaves if _whole(v, lanes) and not is_predicate(v))
    return max(leaves, sum(1 for v in chain.results if not is_predicate(v)))


def chains(block: Block) -> list[Chain]:
    """The chains of `block` that the slab emission helps (module docstring)."""
    order = {op: i for i, op in enumerate(block.ops)}
    found = []
    for component in _components(block, order):
        for run in _runs(component, order, block):
            if len(run) < 2:
                continue
            chain = _chain_of(run)
            if plain_peak(chain, order) > slab_peak(chain):
                found.append(chain)
    return found


@dataclass(frozen=True)
class SlabElementwiseChainsPass(ModulePass):
    """Emit each lane-wise chain that holds several whole fragments at once a slab of lanes at a time."""

    name = "slab-elementwise-chains"
    input_level: ClassVar[str] = "target"
    """The kernels it transforms (Target IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in target_kernels_in(op):
            for block in blocks_in(fn):
                for chain in chains(block):
                    # an earlier chain's results are new values now (its slabs joined): read the leaves again
                    chain = _chain_of(chain.ops)
                    emit_in_slabs(chain.ops, chain.leaves, chain.results)
