"""Thread-block clusters on sm_90a: the facts the lowering, the simulators and the launcher share.

- A cluster has at most 8 thread blocks (portable), 16 with the non-portable opt-in
  (`cudaFuncAttributeNonPortableClusterSizeAllowed`) [CUDA C Programming Guide, Thread Block Clusters].
- The cluster dimensions divide the grid dimensions, axis by axis, or the launch fails
  (CUDA_ERROR_CLUSTER... / cudaErrorInvalidClusterSize) [CUDA Driver API, cuLaunchKernelEx].
- `cp.async.bulk.tensor ... .multicast::cluster` takes a 16-bit ctaMask: bit r delivers the box into the
  block of %cluster_ctarank r, at the same shared::cta offset, completing its bytes on that block's mbarrier
  at the same offset [PTX ISA 9.7.9.25.4.1]. The mask is a 16-bit register or an immediate (ptxas refuses a
  32-bit register).
- `mapa.shared::cluster.u32 d, a, r`: the shared::cluster address of offset a in the block of rank r
  [PTX ISA 9.7.9.23]. A block's own shared::cta addresses are valid shared::cluster addresses of itself.
- A remote `mbarrier.arrive.release.cluster.shared::cluster.b64 _, [addr]` needs the barrier initialised and
  that made visible to the cluster: `fence.mbarrier_init.release.cluster` by the initialising thread, then
  `barrier.cluster.arrive.release` / `barrier.cluster.wait.acquire` by every thread of every block [PTX ISA
  9.7.12.15.1, 9.7.13.4]; and a block must not exit while a peer may still access its shared memory (a
  multicast into it, an arrive on its barriers): every block waits at a last cluster barrier.
- Cluster special registers (`.u32`): %cluster_ctarank, %cluster_nctarank, %cluster_ctaid.{x,y,z},
  %cluster_nctaid.{x,y,z}, %clusterid.{x,y,z}, %nclusterid.{x,y,z} [PTX ISA 10.x].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MAX_CLUSTER_BLOCKS = 8
"""Thread blocks in a portable cluster."""

MAX_CLUSTER_BLOCKS_NON_PORTABLE = 16
"""Thread blocks in a cluster with the non-portable opt-in (H100)."""

MULTICAST_MASK_BITS = 16
"""Width of cp.async.bulk.tensor's ctaMask: one bit per %cluster_ctarank."""

SPECIAL_REGISTERS = (
    "cluster_ctarank", "cluster_nctarank",
    "cluster_ctaid.x", "cluster_ctaid.y", "cluster_ctaid.z",
    "cluster_nctaid.x", "cluster_nctaid.y", "cluster_nctaid.z",
    "clusterid.x", "clusterid.y", "clusterid.z",
    "nclusterid.x", "nclusterid.y", "nclusterid.z",
)


def check_cluster(cluster: Sequence[int], grid: Sequence[int] | None = None, non_portable: bool = False) -> None:
    """Refuse, naming the rule, a cluster shape the driver refuses: sizes >= 1, at most 8 blocks (16 with
    `non_portable`), and (given the grid) dividing the grid on every axis."""
    cluster = tuple(cluster) + (1,) * (3 - len(cluster))
    if any(c < 1 for c in cluster):
        raise ValueError(f"cluster {cluster}: sizes must be >= 1")
    limit = MAX_CLUSTER_BLOCKS_NON_PORTABLE if non_portable else MAX_CLUSTER_BLOCKS
    if math.prod(cluster) > limit:
        raise ValueError(f"cluster {cluster} has {math.prod(cluster)} blocks, more than the {limit} of a "
                         + ("cluster with the non-portable opt-in" if non_portable else
                            f"portable cluster ({MAX_CLUSTER_BLOCKS_NON_PORTABLE} with the non-portable opt-in)"))
    if grid is not None:
        grid = tuple(grid) + (1,) * (3 - len(grid))
        for axis, c, g in zip("xyz", cluster, grid):
            if g % c:
                raise ValueError(f"cluster {cluster} does not divide the grid {grid}: axis {axis} has {g} blocks, "
                                 f"not a multiple of {c}")


def cluster_rank(position: Sequence[int], cluster: Sequence[int]) -> int:
    """%cluster_ctarank of the block at `position` (its %cluster_ctaid) in a cluster of shape `cluster`:
    x fastest."""
    x, y, z = position
    cx, cy, _ = cluster
    return x + cx * (y + cy * z)
