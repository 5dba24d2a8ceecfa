"""Thread-block clusters in Tile IR: the cluster shape of a kernel and the copies its blocks share.

A kernel may group the blocks of its grid into clusters (portable: nothing here names a GPU):

    tile.cluster = array<i64: 2, 1, 1>        blocks (2i, y, z) and (2i + 1, y, z) form one cluster

and mark a copy as the same for every block of a cluster (`tile.cp_async %w, %s cluster_shared : ...`): the
members copy the same global window into their own shared tile at the same step of the same loop, so a target
may read it once from global memory and deliver it to every member (sm_90a: TMA multicast).

A cluster shape that does not divide a launch's grid falls back to clusters of one block (`launch_cluster`
says why): the copies stay correct, only unshared. Where a target's clusters have limits (sm_90a: at most 8
blocks, 16 with an opt-in), its lowering checks them, not Tile IR.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import DenseArrayBase, i64
from xdsl.ir import Attribute

CLUSTER_ATTR = "tile.cluster"
"""The cluster shape of a kernel: `array<i64: X, Y, Z>`, each >= 1 (absent: 1, 1, 1)."""

NO_CLUSTER = (1, 1, 1)


def cluster_attr(shape: Sequence[int]) -> DenseArrayBase:
    """The `tile.cluster` attribute of a shape (x, y, z)."""
    return DenseArrayBase.from_list(i64, list(shape))


def parse_cluster(attr: Attribute | None) -> tuple[int, int, int] | str:
    """The shape an attribute gives, or a message naming what is wrong with it."""
    if attr is None:
        return NO_CLUSTER
    if not isinstance(attr, DenseArrayBase) or attr.elt_type != i64:
        return f"'{CLUSTER_ATTR}' must be array<i64: X, Y, Z>, got {attr}"
    values = tuple(int(v) for v in attr.get_values())
    if len(values) != 3 or any(v < 1 for v in values):
        return f"'{CLUSTER_ATTR}' needs three sizes >= 1 (x, y, z), got {list(values)}"
    return values  # type: ignore[return-value]


def kernel_cluster(fn: func.FuncOp) -> tuple[int, int, int]:
    """The cluster shape a kernel declares ((1, 1, 1) when it declares none); ValueError if malformed."""
    shape = parse_cluster(fn.attributes.get(CLUSTER_ATTR))
    if isinstance(shape, str):
        raise ValueError(f"@{fn.sym_name.data}: {shape}")
    return shape


def launch_cluster(shape: Sequence[int], grid: Sequence[int]) -> tuple[tuple[int, int, int], str | None]:
    """The cluster shape a launch of `grid` uses: `shape` where it divides the grid on every axis, else
    (1, 1, 1) with the reason (e.g. an odd number of query blocks for clusters of two along x)."""
    shape = tuple(shape) + (1,) * (3 - len(shape))
    grid = tuple(grid) + (1,) * (3 - len(grid))
    for axis, (c, g) in enumerate(zip(shape, grid)):
        if g % c:
            return NO_CLUSTER, (f"cluster {list(shape)} does not divide the grid {list(grid)} (axis {'xyz'[axis]}: "
                                f"{g} blocks are not a multiple of {c}); launched with clusters of one block, "
                                "the shared copies unshared")
    return shape, None  # type: ignore[return-value]
