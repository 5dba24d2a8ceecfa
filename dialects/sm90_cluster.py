"""Target IR thread-block cluster ops, in the `sm90` dialect (`sm90.py` registers them and re-exports each as
`sm90.X`), facts in `tessera/sm90/cluster.py`.

Addresses in a peer CTA's shared memory (`mapa`), the multicast bulk tensor copy, remote mbarrier arrivals
and the cluster barrier. `CLUSTER_OPS` lists them, in the order the dialect registers them.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import I32, I64, IntegerAttr, i32
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, prop_def, result_def, traits_def, var_operand_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure

from tessera.dialects.sm90_base import I32_OR_INDEX, TensorMapType, int_value, NoOperandSyncOp, i64_attr
from tessera.sm90 import facts
from tessera.ir.diagnostics import require

# region Thread-block clusters [P#cluster], facts in tessera/sm90/cluster.py


@irdl_op_definition
class MapaOp(IRDLOperation):
    """`%r = sm90.mapa %addr, %rank : index`: the shared::cluster address of shared offset %addr in the CTA of
    %cluster_ctarank %rank (which may be this CTA). Prints as `mapa.shared::cluster.u32`."""

    name = "sm90.mapa"
    address = operand_def(I32)
    rank = operand_def(I32_OR_INDEX)
    result = result_def(I32)
    traits = traits_def(Pure())
    assembly_format = "$address `,` $rank attr-dict `:` type($rank)"

    def __init__(self, address, rank):
        super().__init__(operands=[address, rank], result_types=[i32])


@irdl_op_definition
class TmaLoadMulticastOp(IRDLOperation):
    """`sm90.tma_load_multicast %map[%c0, ...], %dst, %mbar mask 3 : index, ...`: one bulk tensor copy of the
    map's box delivered into every CTA r of the cluster whose bit r is set in `mask`, at shared offset %dst
    of each, completing `box bytes` of transaction on each one's mbarrier at offset %mbar. Prints as
    `cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster`
    with the mask as a 16-bit immediate.

    Invariants: as `sm90.tma_load`; the mask is non-zero and fits `facts.MULTICAST_MASK_BITS` bits; a bit past
    the cluster's size is an error the CTA simulator reports at run time."""

    name = "sm90.tma_load_multicast"
    tensor_map = operand_def(TensorMapType)
    coords = var_operand_def(I32_OR_INDEX)
    dest = operand_def(I32)
    mbarrier = operand_def(I32)
    mask = prop_def(IntegerAttr[I64])
    assembly_format = "$tensor_map `[` $coords `]` `,` $dest `,` $mbarrier `mask` $mask attr-dict `:` type($coords)"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, tensor_map, coords: Sequence, dest, mbarrier, mask: int):
        super().__init__(operands=[tensor_map, list(coords), dest, mbarrier], properties={"mask": i64_attr(mask)})

    def verify_(self) -> None:
        require(1 <= len(self.coords) <= 5, self, f"a tensor copy has 1 to 5 coordinates, got {len(self.coords)}")
        mask = int_value(self.mask)
        require(0 < mask < 1 << facts.MULTICAST_MASK_BITS, self,
                f"the CTA mask must be non-zero and fit {facts.MULTICAST_MASK_BITS} bits, got {mask:#x}")


@irdl_op_definition
class MBarrierArriveClusterOp(IRDLOperation):
    """`sm90.mbarrier_arrive_cluster %remote`: one arrival on the mbarrier at shared::cluster address %remote
    (from `sm90.mapa`; a peer's or this CTA's own), with release semantics at cluster scope: it orders the
    thread's earlier accesses (a consumer's reads of its slot) before what a waiter of the barrier's CTA does after
    its wait (a producer's refill). Prints as `mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%remote];`;
    not at the default `.cta` scope, which does not reach a peer's threads [memory_model.MBARRIER_ARRIVE_SCOPE]."""

    name = "sm90.mbarrier_arrive_cluster"
    mbarrier = operand_def(I32)
    assembly_format = "$mbarrier attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, mbarrier):
        super().__init__(operands=[mbarrier])


@irdl_op_definition
class ClusterArriveOp(NoOperandSyncOp):
    """`sm90.cluster_arrive`: this thread arrives at the cluster barrier, releasing its prior memory accesses
    at cluster scope. Prints as `barrier.cluster.arrive.release;`."""

    name = "sm90.cluster_arrive"


@irdl_op_definition
class ClusterWaitOp(NoOperandSyncOp):
    """`sm90.cluster_wait`: wait until every non-exited thread of every CTA of the cluster has arrived at the
    cluster barrier's current phase, acquiring their released accesses. Prints as
    `barrier.cluster.wait.acquire;`."""

    name = "sm90.cluster_wait"


CLUSTER_OPS = (MapaOp, TmaLoadMulticastOp, MBarrierArriveClusterOp, ClusterArriveOp, ClusterWaitOp)


# endregion
