"""Thread-block clusters on sm_90a: the facts the lowering, the simulators and the launcher share.

- The launch limits of a cluster (8 blocks, 16 with the opt-in; dividing the grid) are `tessera.sm90.launch`'s
  (`check_cluster`).
- `cp.async.bulk.tensor ... .multicast::cluster` takes a 16-bit ctaMask: bit r delivers the box into the
  block of %cluster_ctarank r, at the same shared::cta offset, completing its bytes on that block's mbarrier
  at the same offset [PTX ISA, cp.async.bulk.tensor]. The mask is a 16-bit register or an immediate (ptxas refuses a
  32-bit register).
- `mapa.shared::cluster.u32 d, a, r`: the shared::cluster address of offset a in the block of rank r
  [PTX ISA, mapa]. A block's own shared::cta addresses are valid shared::cluster addresses of itself.
- A remote `mbarrier.arrive.release.cluster.shared::cluster.b64 _, [addr]` needs the barrier initialised and
  that made visible to the cluster: `fence.mbarrier_init.release.cluster` by the initialising thread, then
  `barrier.cluster.arrive.release` / `barrier.cluster.wait.acquire` by every thread of every block [PTX ISA,
  mbarrier, barrier.cluster]; and a block must not exit while a peer may still access its shared memory (a
  multicast into it, an arrive on its barriers): every block waits at a last cluster barrier.
- Cluster special registers (`.u32`): %cluster_ctarank, %cluster_nctarank, %cluster_ctaid.{x,y,z},
  %cluster_nctaid.{x,y,z}, %clusterid.{x,y,z}, %nclusterid.{x,y,z} [PTX ISA, Special Registers].
"""

from __future__ import annotations

MULTICAST_MASK_BITS = 16
"""Width of cp.async.bulk.tensor's ctaMask: one bit per %cluster_ctarank."""

CLUSTER_SPECIAL_REGISTERS = (
    "cluster_ctarank", "cluster_nctarank",
    "cluster_ctaid.x", "cluster_ctaid.y", "cluster_ctaid.z",
    "cluster_nctaid.x", "cluster_nctaid.y", "cluster_nctaid.z",
    "clusterid.x", "clusterid.y", "clusterid.z",
    "nclusterid.x", "nclusterid.y", "nclusterid.z",
)
