"""The Target IR dialect `sm90`: the machine operations of an sm_90a thread block.

Target IR is per thread. Ordinary computation stays in upstream dialects, as in MLIR's NVVM: `arith` and
`math` on `f32`, `i32`, `i64`, `i1` and on `vector<N x T>` values, and `vector.shuffle`/`vector.extract`/
`vector.broadcast` to move registers around. A `vector<N x T>` is N registers of one thread (a fragment, e.g.
the 64 f32 accumulators a thread holds of a m64n128 wgmma), never a SIMD value. `index` values are 32-bit
signed registers (`.s32`). `scf.for`/`scf.if`/`scf.while` are the control flow; a condition that differs
between the threads of a warp diverges. Register allocation later maps every value to PTX registers.

This dialect holds what only the machine has: special registers, shared-memory buffers at byte offsets with
their swizzle, tensor maps, bulk tensor copies (TMA) completing on mbarriers, Ampere's cp.async with its
groups (`sm90_cp_async`, the paged cache's row gather), the mbarrier operations, wgmma
with shared-memory descriptors or register A, warp shuffles, named barriers, elect, setmaxnreg and the
approximate transcendental functions. Each op says the PTX instruction it prints as, and its verifier rejects
what ptxas or the hardware would (sizes, shapes, counts, ranges), with the rule named. The numbers come
from `tessera.sm90.facts`.

The ops sit in files by concern: `sm90_memory.py` (shared buffers, TMA, global and shared loads and stores),
`sm90_sync.py` (mbarriers, fences, shuffles, named barriers, elect, setmaxnreg), `sm90_wgmma.py`,
`sm90_arithmetic.py` (approximate functions, packing, compare and select on fragments), `sm90_cluster.py`,
`sm90_reductions.py` (the backward's), `sm90_cp_async.py` (the paged gather's), with what they share in
`sm90_base.py`. This file holds the special registers, registers the dialect (`SM90`) and re-exports every
op, so that `sm90.X` names each one.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import IndexType, StringAttr
from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation, irdl_op_definition, prop_def, result_def, traits_def
from xdsl.traits import Pure

from tessera.dialects.sm90_arithmetic import (
    CvtOp,
    CvtPackFp8Op,
    CvtPackOp,
    Ex2ApproxOp,
    PrmtOp,
    Lg2ApproxOp,
    RcpApproxOp,
    RsqrtApproxOp,
    SelpOp,
    SetpOp,
    TanhApproxOp,
    SinApproxOp,
    CosApproxOp,
)
from tessera.dialects.sm90_base import F32_LIKE, I32_OR_INDEX, TensorMapType
from tessera.dialects.sm90_cluster import (
    CLUSTER_OPS,
    ClusterArriveOp,
    ClusterWaitOp,
    MapaOp,
    MBarrierArriveClusterOp,
    TmaLoadMulticastOp,
)
from tessera.dialects.sm90_cp_async import (  # the paged gather's copies
    CP_ASYNC_OPS,
    CpAsyncCommitGroupOp,
    CpAsyncMBarrierArriveNoIncOp,
    CpAsyncOp,
    CpAsyncWaitGroupOp,
)
from tessera.dialects.sm90_memory import (
    COLUMN_BYTES,
    SHARED_PAIR_BYTES,
    LdGlobalOp,
    LdGlobalU16Op,
    LdSharedOp,
    SharedBufferOp,
    StGlobalB16Op,
    StGlobalOp,
    StSharedB16Op,
    StSharedOp,
    TmaLoadOp,
)
from tessera.dialects.sm90_reductions import REDUCTION_OPS  # the backward's ops
from tessera.dialects.sm90_sync import (
    BarArriveOp,
    BarSyncOp,
    ElectSyncOp,
    FenceMBarrierInitOp,
    FenceProxyAsyncOp,
    MBarrierArriveExpectTxOp,
    MBarrierArriveOp,
    MBarrierInitOp,
    MBarrierInvalOp,
    MBarrierTryWaitParityOp,
    SetMaxNRegOp,
    ShflSyncOp,
)
from tessera.dialects.sm90_wgmma import (
    DescriptorAdvanceOp,
    DescriptorOffsetOp,
    MakeDescriptorOp,
    WgmmaCommitGroupOp,
    WgmmaFenceOp,
    WgmmaMmaAsyncOp,
    WgmmaWaitGroupOp,
)
from tessera.sm90 import facts
from tessera.ir.diagnostics import require


# region Special registers [P#special-registers]


@irdl_op_definition
class SpecialRegOp(IRDLOperation):
    """`%t = sm90.special "tid.x" : index`: read a special register (tid.x/y/z, ntid.x, ctaid.x/y/z,
    nctaid.x/y/z, laneid). Prints as `mov.u32 %r, %tid.x;`."""

    name = "sm90.special"
    REGISTERS: ClassVar[tuple[str, ...]] = (
        "tid.x", "tid.y", "tid.z", "ntid.x", "ntid.y", "ntid.z", "ctaid.x", "ctaid.y", "ctaid.z",
        "nctaid.x", "nctaid.y", "nctaid.z", "laneid",
    ) + facts.CLUSTER_SPECIAL_REGISTERS
    register = prop_def(StringAttr)
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "$register attr-dict `:` type($result)"

    def __init__(self, register: str):
        super().__init__(properties={"register": StringAttr(register)}, result_types=[IndexType()])

    def verify_(self) -> None:
        require(self.register.data in self.REGISTERS, self,
                f"unknown special register '{self.register.data}' (known: {', '.join(self.REGISTERS)})")


# endregion

SM90 = Dialect(
    "sm90",
    [
        SpecialRegOp,
        SharedBufferOp,
        TmaLoadOp,
        MBarrierInitOp,
        MBarrierArriveExpectTxOp,
        MBarrierArriveOp,
        MBarrierTryWaitParityOp,
        MBarrierInvalOp,
        FenceMBarrierInitOp,
        FenceProxyAsyncOp,
        WgmmaFenceOp,
        WgmmaCommitGroupOp,
        WgmmaWaitGroupOp,
        MakeDescriptorOp,
        DescriptorAdvanceOp,
        DescriptorOffsetOp,
        WgmmaMmaAsyncOp,
        ShflSyncOp,
        BarSyncOp,
        BarArriveOp,
        ElectSyncOp,
        SetMaxNRegOp,
        Ex2ApproxOp,
        RcpApproxOp,
        Lg2ApproxOp,
        TanhApproxOp,
        SinApproxOp,
        CosApproxOp,
        RsqrtApproxOp,
        CvtOp,
        CvtPackOp,
        CvtPackFp8Op,
        PrmtOp,
        SetpOp,
        SelpOp,
        StGlobalOp,
        StGlobalB16Op,
        LdGlobalOp,
        LdGlobalU16Op,
        StSharedOp,
        StSharedB16Op,
        LdSharedOp,
        *REDUCTION_OPS,
        *CP_ASYNC_OPS,
        *CLUSTER_OPS,
    ],
    [TensorMapType],
)
