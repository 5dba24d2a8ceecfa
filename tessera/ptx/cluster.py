"""PTX of the `sm90` cluster ops (`tessera.dialects.sm90_cluster`; the facts are those of `tessera.sm90.cluster`).
The cluster special registers print through `sm90.special` like the others (`mov.u32 %r, %cluster_ctarank`);
a kernel with a `tile.cluster` shape gets `.explicitcluster` (`kernel`): it must be launched with explicit
cluster dimensions, and reads the shape it got from %cluster_nctarank."""

from __future__ import annotations

from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.ptx.kernel import KernelPrinter, handles


@handles(sm90.MapaOp)
def print_mapa(p: KernelPrinter, op: sm90.MapaOp) -> None:
    address, rank = p.reg(op.address), p.reg(op.rank)
    (d,) = p.define(op.result)
    p.emit(f"mapa.shared::cluster.u32 {d}, {address}, {rank}")


@handles(sm90.TmaLoadMulticastOp)
def print_tma_load_multicast(p: KernelPrinter, op: sm90.TmaLoadMulticastOp) -> None:
    coords = ", ".join(p.reg(c) for c in op.coords)
    p.emit(f"cp.async.bulk.tensor.{len(op.coords)}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
           f".multicast::cluster [{p.reg(op.dest)}], [{p.reg(op.tensor_map)}, {{{coords}}}], "
           f"[{p.reg(op.mbarrier)}], {op.mask.value.data}")


@handles(sm90.MBarrierArriveClusterOp)
def print_arrive_cluster(p: KernelPrinter, op: sm90.MBarrierArriveClusterOp) -> None:
    """`.release.cluster`, which ptxas makes MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR: `.cta` (CUTLASS's) does not
    synchronize with a peer's waiter, and the cheaper fenced `.relaxed` form needs PTX ISA 8.6
    (`memory_model.MBARRIER_ARRIVE_SCOPE`, `MBARRIER_RELEASE_FENCE`; `bench/remote_arrive.py` counts both)."""
    p.emit(f"mbarrier.arrive.release.cluster.shared::cluster.b64 _, [{p.reg(op.mbarrier)}]")


_FIXED = {
    sm90.ClusterArriveOp: "barrier.cluster.arrive.release",
    sm90.ClusterWaitOp: "barrier.cluster.wait.acquire",
}


@handles(*_FIXED)
def print_cluster_barrier(p: KernelPrinter, op: Operation) -> None:
    p.emit(_FIXED[type(op)])
