"""The Tile interpreter's check of `cluster_shared` copies (see `tessera.cluster`).

The interpreter does not share anything: each block copies its own window, as with clusters of one block. It
checks the promise the mark makes: in every cluster of the launch, the members that execute the copy are all
the members in the batch (no member skips it), and they copy the same window. Batches hold whole clusters
(`cluster_order` orders the grid's blocks cluster by cluster).
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.block_batch import BlockBatch
from tessera.interpreters.tile_memory import GlobalView


def cluster_order(grid: tuple[int, int, int], cluster: tuple[int, int, int]) -> np.ndarray:
    """The grid's linear block ids (x fastest), reordered so that each cluster's blocks are consecutive."""
    gx, gy, gz = grid
    ids = np.arange(gx * gy * gz, dtype=np.int64)
    if cluster == (1, 1, 1):
        return ids
    x, y, z = ids % gx, (ids // gx) % gy, ids // (gx * gy)
    cx, cy, cz = cluster
    cluster_id = (x // cx) + (gx // cx) * ((y // cy) + (gy // cy) * (z // cz))
    rank = (x % cx) + cx * ((y % cy) + cy * (z % cz))
    return ids[np.lexsort((rank, cluster_id))]


def check_shared_copy(batch: BlockBatch, op: Operation, source: GlobalView, cluster: tuple[int, int, int]) -> None:
    """Fail (naming the block) unless the batch's members of each cluster all copy, and copy the same window."""
    if cluster == (1, 1, 1):
        return
    keys = np.stack([p // c for p, c in zip(batch.program_ids, cluster)])
    _, cluster_id = np.unique(keys, axis=1, return_inverse=True)
    cluster_id = cluster_id.reshape(-1)
    active = batch.active
    count = np.bincount(cluster_id)
    running = np.bincount(cluster_id, weights=active)
    partial = (running[cluster_id] > 0) & (running[cluster_id] < count[cluster_id]) & ~active
    if partial.any():
        batch.fail(op, "is cluster_shared, but this member of a cluster does not execute it while another does "
                       "(the members must copy in step)", partial)
    for start in source.indices:
        start = np.broadcast_to(np.asarray(start, np.int64), active.shape)
        first = np.full(len(count), np.iinfo(np.int64).max)
        np.minimum.at(first, cluster_id[active], start[active])
        differs = active & (start != first[cluster_id])
        if differs.any():
            batch.fail(op, "is cluster_shared, but the members of a cluster copy different windows (this block's "
                           "window starts elsewhere than its cluster's first block's)", differs)
