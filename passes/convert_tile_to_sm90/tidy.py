"""The last step of the conversion: leave nothing for `canonicalize` to do.

The emitters fold scalar integer arithmetic as they build it (`tessera.lowering.emitter.fold_integer_binary`),
which can leave a constant operand unread; a lowering may also make a value that, in the configuration at
hand, nothing reads (a page-table index without a gather, a mask's bound without a mask), and puts constants
wherever it needs them, loop bodies included. `canonicalize` erases the first two and moves the constants of
a loop body out of the loop (xDSL's `RehoistConstInLoops`), then runs a second round over the whole kernel
only to find that it has nothing more to do: about half of its time (the flash d128 forward: 29 of 65 ms; the
backward: 93 ms). `tidy_kernel` does the same three things in one walk, so that canonicalize's first round
changes nothing and it stops there.

What it erases is what canonicalize erases: ops whose results nobody reads and that have no other effect
(xDSL's `is_trivially_dead`), users first, so that a chain of them goes at once. The constants of an `scf.for`
body move to just before the loop, outwards through directly nested loops. Where constants sit does not change
the kernel: `rematerialize-constants` re-creates each one right before each use (`bench/ptx_identity.py`).
"""

from __future__ import annotations

from xdsl.dialects import arith, func, scf
from xdsl.ir import Block
from xdsl.transforms.dead_code_elimination import is_trivially_dead

from tessera.ir.class_tests import subclass_test

_is_constant = subclass_test(arith.ConstantOp)
_is_for = subclass_test(scf.ForOp)


def tidy_kernel(fn: func.FuncOp) -> None:
    """Erase the unread effect-free ops of `fn` and move loop bodies' constants out of their loops (module
    docstring)."""
    _tidy_block(fn.body.block)


def _tidy_block(block: Block) -> None:
    op = block.last_op
    while op is not None:  # readers before what they read
        before = op.prev_op  # (constants moved out of a loop go in after it: not visited again)
        for region in op.regions:
            for inner in reversed(region.blocks):
                _tidy_block(inner)
        if op.results and all(result.first_use is None for result in op.results) and is_trivially_dead(op):
            block.erase_op(op)
        elif _is_for(op):
            body = op.body.block
            for constant in [inner for inner in body.ops if _is_constant(inner)]:
                constant.detach()
                block.insert_op_before(constant, op)
        op = before
