"""`rematerialize-constants`: give every use of an `arith.constant` its own copy, right before the user.

Input and output: Target IR. Canonicalization hoists constants to the top of the kernel, where a splat
`vector<64xf32>` or a table of lane offsets would hold its registers across the whole K/V loop. A constant
costs one `mov` (or nothing, as an immediate operand), so re-creating it at each use is always cheaper than
keeping it live: after this pass a constant lives from the instruction before its use to that use (for a wgmma operand,
from before the wgmma_fence that opens its chain). Run it
after `canonicalize`/`cse` (which would hoist the copies back) and before `allocate-registers`.

A wgmma descriptor `offset` bytes further (`sm90.descriptor_advance`, one 32-bit add) is re-created at each
use the same way, right before its wgmma: CSE merges the loop's advances of the Q descriptor with those of a peeled trip before the
loop, and each would then hold two registers across the K/V loop (14 at head_dim 128), which the consumer
warpgroups of a warp-specialized kernel with a bias cannot spare. Only its base descriptor stays live.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from tessera.dialects import sm90


def _insertion_point(user: Operation) -> Operation:
    """Right before `user`, except for a wgmma: before the wgmma_fence that opens its chain. Registers a
    wgmma reads must be written before that fence; a `mov` between the fence and the wgmma (a zero
    accumulator) makes ptxas serialize the wgmma pipeline while other groups are in flight."""
    if not isinstance(user, sm90.WgmmaMmaAsyncOp):
        return user
    op = user.prev_op
    while op is not None and not isinstance(op, sm90.WgmmaFenceOp):
        op = op.prev_op
    return op if op is not None else user


@dataclass(frozen=True)
class RematerializeConstantsPass(ModulePass):
    """Clone each constant (and descriptor advance) next to each of its uses and erase the original."""

    name = "rematerialize-constants"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        advances = [o for o in op.walk() if isinstance(o, sm90.DescriptorAdvanceOp)]
        for cheap in advances + [o for o in op.walk() if isinstance(o, arith.ConstantOp)]:
            for use in list(cheap.result.uses):
                user = use.operation
                copy = cheap.clone()
                copy.result.name_hint = cheap.result.name_hint
                # An advance is no accumulator: it may sit between the fence and its wgmma, where only one
                # descriptor of a chain is live at a time (before the fence, all 15 of head_dim 256's would be).
                where = user if isinstance(cheap, sm90.DescriptorAdvanceOp) else _insertion_point(user)
                user.parent_block().insert_op_before(copy, where)
                user.operands[use.index] = copy.result
            cheap.detach()
            cheap.erase()
