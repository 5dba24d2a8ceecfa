"""The ops nested in an op, as a list: xDSL's `Operation.walk()` order without its generators.

`op.walk()` yields through one generator per nesting level (op, region, block, op, ...), so every op of a kernel
nested six deep passes through a dozen frames: a walk of the flash d128 forward's Target IR kernel (about 1,000
ops) costs 1.7 ms, and a compile walks its kernels some 50 times (each pass, the allocator, the printer).
`walk_ops` visits the same ops in the same order (the op itself, then its regions, blocks and ops in order,
depth first) with one call per op that holds regions, and follows the blocks' and ops' links itself
(`_first_block`, `_next_block`, `_first_op`, `_next_op`, the fields xDSL's own iterators read): a `for op in
block.ops` loop costs two Python calls an op (the iterator's `__next__` and the `next_op` property), which were
three quarters of a walk. 1.7 ms with `walk()`, 0.30 ms iterating `block.ops`, 0.06 ms following the links
(the d128 kernel's 727 ops).

It returns a snapshot: ops inserted or erased while the caller loops over it are not seen (xDSL's walk follows
the links as it goes, so an op erased under it ends the walk of its block). Use it where the loop only reads the
IR, or collects the ops it then changes, as a list comprehension over `walk()` does.
"""

from __future__ import annotations

from xdsl.ir import Block, Operation, Region


def walk_ops(root: Operation | Region) -> list[Operation]:
    """Every op nested in `root` (an op, which comes first, or a region), in `root.walk()`'s order."""
    found: list[Operation] = []
    append = found.append

    def visit(regions) -> None:
        for region in regions:
            block = region._first_block  # noqa: SLF001 (module docstring)
            while block is not None:
                op = block._first_op  # noqa: SLF001
                while op is not None:
                    append(op)
                    if op.regions:
                        visit(op.regions)
                    op = op._next_op  # noqa: SLF001
                block = block._next_block  # noqa: SLF001

    if isinstance(root, Region):
        visit((root,))
    else:
        append(root)
        visit(root.regions)
    return found


def blocks_in(root: Operation) -> list[Block]:
    """Every block nested in `root` (its own regions' first), in `root.walk()`'s order of the ops that hold them:
    a snapshot a pass takes before it rewrites the blocks one by one."""
    return [block for op in walk_ops(root) for region in op.regions for block in region.blocks]
