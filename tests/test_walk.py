"""`tessera.ir.walk.walk_ops` lists exactly the ops xDSL's `walk()` yields, in the same order, for an op and for a
region, on a kernel with nested loops and branches (the Target IR of a small flash forward); `blocks_in` lists the blocks
of those ops in that order."""

from __future__ import annotations

from xdsl.dialects import func

import tessera
from tessera.ir.walk import blocks_in, walk_ops
from tessera.passes import PIPELINED_PIPELINE, apply_pipeline


def test_walk_ops_is_walk_in_order():
    module = tessera.kernels.flash_attention(head_dim=64)
    tile_ops = list(module.walk())
    assert walk_ops(module) == tile_ops
    apply_pipeline(module, PIPELINED_PIPELINE)
    ops = list(module.walk())
    assert walk_ops(module) == ops
    kernel = next(op for op in ops if isinstance(op, func.FuncOp))
    assert walk_ops(kernel.body) == list(kernel.body.walk())
    assert walk_ops(kernel)[0] is kernel and walk_ops(kernel)[1:] == list(kernel.body.walk())
    assert any(op.regions for op in ops[2:])  # the kernel nests loops and branches: the order is tested at depth
    assert blocks_in(kernel) == [b for o in kernel.walk() for r in o.regions for b in r.blocks]
    assert len(blocks_in(kernel)) > 1
