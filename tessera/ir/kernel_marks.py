"""The attributes that make a `func.func` a kernel, and the tests for them.

They live below `tessera.kernel_abi` (which describes and verifies a kernel's arguments) so that the IR's
diagnostics and dominance check can say "kernel @name" without depending on the ABI: data flows one way,
from the ABI down to the diagnostics.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.ir import Attribute

from tessera.ir.class_tests import subclass_test

KERNEL_ATTR = "tile.kernel"
"""Marks a Tile IR kernel: a `func.func` launched over a grid."""
TARGET_KERNEL_ATTR = "sm90.kernel"
"""Marks a kernel already lowered to Target IR (see passes/convert_tile_to_sm90.py); it keeps `tile.kernel`."""
_is_func = subclass_test(func.FuncOp)
"""(Asked of every op of a module walk: most are not functions.)"""


def is_kernel(op: Attribute | func.FuncOp) -> bool:
    """A Tile IR kernel (not yet lowered)."""
    return _is_func(op) and KERNEL_ATTR in op.attributes and TARGET_KERNEL_ATTR not in op.attributes


def is_target_kernel(op: Attribute | func.FuncOp) -> bool:
    """A kernel lowered to Target IR."""
    return _is_func(op) and TARGET_KERNEL_ATTR in op.attributes


def target_kernels_in(op) -> list[func.FuncOp]:
    """The Target IR kernels of `op` and the ops nested in it, in walk order: `[o for o in op.walk() if
    is_target_kernel(o)]` without walking the kernels' own bodies (a kernel holds no kernel), which are most of
    a module's ops; each pass that looks for its kernels asks this."""
    found = []
    pending = [op]
    while pending:
        current = pending.pop()
        if is_target_kernel(current):
            found.append(current)
            continue
        for region in reversed(current.regions):
            for block in reversed(region.blocks):
                pending.extend(reversed(block.ops))
    return found
