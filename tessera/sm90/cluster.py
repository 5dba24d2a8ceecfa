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
- A consumer releasing a multicast-filled slot to a peer's producer arrives with `.release` at `.cluster` scope:
  the default `.cta` scope (CUTLASS's `mbarrier.arrive.shared::cluster.b64`) does not hold the peer's thread, so by
  the PTX memory model it synchronizes with nothing there; the cheaper documented form (a
  `fence.release.sync_restrict::shared::cta.cluster` before a `.relaxed.cluster` arrive) needs PTX ISA 8.6. The
  argument, cited and tested against the ISA text, is `memory_model.MBARRIER_ARRIVE_SCOPE`, `MBARRIER_WAIT_SCOPE`
  and `MBARRIER_RELEASE_FENCE`.
- Multicast by slices (`multicast_slice_problem`): a cluster of C blocks shares a TMA box by each block issuing
  rows / C of it to every member, at the slice's offset in the destination; a slice lands where the whole box
  would put those rows only if it starts on a whole swizzle period (8 rows of the swizzle's width: 1024 bytes for
  128B) and on TMA's 128-byte shared-memory alignment [PTX ISA, Tensor copy: swizzle modes; CUDA Programming
  Guide, TMA swizzle alignment]. So C divides the box's rows into slices of whole periods.
- Cluster special registers (`.u32`): %cluster_ctarank, %cluster_nctarank, %cluster_ctaid.{x,y,z},
  %cluster_nctaid.{x,y,z}, %clusterid.{x,y,z}, %nclusterid.{x,y,z} [PTX ISA, Special Registers].
"""

from __future__ import annotations

from tessera.sm90.launch import MAX_PORTABLE_CLUSTER_SIZE
from tessera.sm90.swizzle import swizzle_period_bytes
from tessera.sm90.tma import TMA_SMEM_ALIGNMENT

MULTICAST_MASK_BITS = 16
"""Width of cp.async.bulk.tensor's ctaMask: one bit per %cluster_ctarank."""

CLUSTER_SPECIAL_REGISTERS = (
    "cluster_ctarank", "cluster_nctarank",
    "cluster_ctaid.x", "cluster_ctaid.y", "cluster_ctaid.z",
    "cluster_nctaid.x", "cluster_nctaid.y", "cluster_nctaid.z",
    "clusterid.x", "clusterid.y", "clusterid.z",
    "nclusterid.x", "nclusterid.y", "nclusterid.z",
)


def multicast_slice_problem(box_rows: int, row_bytes: int, swizzle: int, size: int) -> str | None:
    """Why a cluster of `size` blocks cannot share a TMA box of `box_rows` rows of `row_bytes` bytes, swizzled
    `swizzle` bytes (0: not), by slices of rows / size (module docstring); None where it can."""
    if box_rows % size:
        return f"its {box_rows} rows do not split among the cluster's {size} blocks"
    rows = box_rows // size
    period = max(swizzle_period_bytes(swizzle), TMA_SMEM_ALIGNMENT)
    if rows * row_bytes % period:
        return (f"a slice of {rows} rows ({rows * row_bytes} bytes) is not a whole number of {period}-byte swizzle "
                "periods, so the slices would not land where the whole box does")
    return None


def multicast_sizes(boxes: list[tuple[int, int, int]]) -> list[int]:
    """The cluster sizes, up to MAX_PORTABLE_CLUSTER_SIZE, that can share every box of `boxes` ((rows, row bytes,
    swizzle) each) by slices."""
    return [size for size in range(1, MAX_PORTABLE_CLUSTER_SIZE + 1)
            if all(multicast_slice_problem(*box, size) is None for box in boxes)]
