"""Target IR synchronisation ops, in the `sm90` dialect (`sm90.py` registers them and re-exports each as
`sm90.X`).

The mbarrier operations and the fences that order mbarrier inits and generic-proxy writes, then warp- and
block-level synchronisation: shuffles, named barriers, elect and setmaxnreg. The cluster barrier and remote
arrivals are in `sm90_cluster.py`, the wgmma fences and groups in `sm90_wgmma.py`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import I32, I64, Float32Type, IntegerAttr, IntegerType, StringAttr, VectorType, i1, i32
from xdsl.ir import SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect
from xdsl.utils.exceptions import VerifyException

from tessera.dialects.sm90_base import I32_OR_INDEX, element_type, int_value, NoOperandSyncOp, i64_attr
from tessera.sm90 import facts
from tessera.ir.diagnostics import require

# region mbarrier [P#parallel-synchronization-and-communication-instructions-mbarrier]


@irdl_op_definition
class MBarrierInitOp(IRDLOperation):
    """`sm90.mbarrier_init %bar, 1`: initialise the 8-byte mbarrier at shared address %bar with an expected
    arrival count: phase 0, pending = count, tx-count 0. Prints as `mbarrier.init.shared::cta.b64`."""

    name = "sm90.mbarrier_init"
    mbarrier = operand_def(I32)
    count = prop_def(IntegerAttr[I64])
    assembly_format = "$mbarrier `,` $count attr-dict"
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, mbarrier, count: int):
        super().__init__(operands=[mbarrier], properties={"count": i64_attr(count)})

    def verify_(self) -> None:
        count = int_value(self.count)
        require(1 <= count <= facts.MBARRIER_MAX_COUNT, self,
                f"expected arrival count must be in [1, {facts.MBARRIER_MAX_COUNT}], got {count}")


@irdl_op_definition
class MBarrierArriveExpectTxOp(IRDLOperation):
    """`sm90.mbarrier_arrive_expect_tx %bar, 32768`: tx-count += bytes, then one arrival. Prints as
    `mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bar], bytes;`."""

    name = "sm90.mbarrier_arrive_expect_tx"
    mbarrier = operand_def(I32)
    bytes = prop_def(IntegerAttr[I64])
    assembly_format = "$mbarrier `,` $bytes attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, mbarrier, nbytes: int):
        super().__init__(operands=[mbarrier], properties={"bytes": i64_attr(nbytes)})

    def verify_(self) -> None:
        n = int_value(self.bytes)
        require(0 < n <= facts.MBARRIER_TX_LIMIT, self, f"transaction bytes must be in [1, {facts.MBARRIER_TX_LIMIT}], got {n}")


@irdl_op_definition
class MBarrierArriveOp(IRDLOperation):
    """`sm90.mbarrier_arrive %bar`: one arrival (pending -= 1). Prints as `mbarrier.arrive.shared::cta.b64 _, [%bar];`."""

    name = "sm90.mbarrier_arrive"
    mbarrier = operand_def(I32)
    assembly_format = "$mbarrier attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, mbarrier):
        super().__init__(operands=[mbarrier])


@irdl_op_definition
class MBarrierTryWaitParityOp(IRDLOperation):
    """`%done = sm90.mbarrier_try_wait_parity %bar, %parity`: true iff the phase with parity %parity (0 or
    1) has completed, i.e. %parity != (current phase & 1). Callers loop until it is true. A successful wait
    makes the shared memory written by the copies that completed the phase visible to the thread.
    Prints as `mbarrier.try_wait.parity.shared::cta.b64`."""

    name = "sm90.mbarrier_try_wait_parity"
    mbarrier = operand_def(I32)
    parity = operand_def(I32_OR_INDEX)
    result = result_def(i1)
    assembly_format = "$mbarrier `,` $parity attr-dict `:` type($parity)"
    # A write effect as well: a successful wait acquires the copies' data, so a spin loop around it must
    # never be removed as dead code.
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, mbarrier, parity):
        super().__init__(operands=[mbarrier, parity], result_types=[i1])


@irdl_op_definition
class MBarrierInvalOp(IRDLOperation):
    """`sm90.mbarrier_inval %bar`: invalidate the mbarrier before its memory is reused."""

    name = "sm90.mbarrier_inval"
    mbarrier = operand_def(I32)
    assembly_format = "$mbarrier attr-dict"
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, mbarrier):
        super().__init__(operands=[mbarrier])


@irdl_op_definition
class FenceMBarrierInitOp(NoOperandSyncOp):
    """`sm90.fence_mbarrier_init`: order this thread's mbarrier inits before later uses by other threads and
    the async proxy. Prints as `fence.mbarrier_init.release.cluster;`."""

    name = "sm90.fence_mbarrier_init"


@irdl_op_definition
class FenceProxyAsyncOp(NoOperandSyncOp):
    """`sm90.fence_proxy_async`: make this thread's generic-proxy shared-memory writes visible to the async
    proxy (wgmma operands, TMA stores). Prints as `fence.proxy.async.shared::cta;`."""

    name = "sm90.fence_proxy_async"


# endregion
# region Warp-level and block-level synchronisation [P#parallel-synchronization-and-communication-instructions-*]


@irdl_op_definition
class ShflSyncOp(IRDLOperation):
    """`%r = sm90.shfl_sync "bfly" %x, 1, 31 : vector<2xf32>`: each register of %x from another lane of the
    warp, per `facts.shfl_source_lane(mode, lane, offset, clamp)` (all 32 lanes participate). Prints as
    `shfl.sync.MODE.b32 r, x, offset, clamp, 0xffffffff;` per register."""

    name = "sm90.shfl_sync"
    MODES: ClassVar[tuple[str, ...]] = ("up", "down", "bfly", "idx")
    T: ClassVar = VarConstraint("T", base(Float32Type) | base(IntegerType) | base(VectorType))
    mode = prop_def(StringAttr)
    source = operand_def(T)
    offset = prop_def(IntegerAttr[I64])
    clamp = prop_def(IntegerAttr[I64])
    result = result_def(T)
    assembly_format = "$mode $source `,` $offset `,` $clamp attr-dict `:` type($source)"
    traits = traits_def(MemoryReadEffect())  # not Pure: it synchronises the warp

    def __init__(self, mode: str, source, offset: int, clamp: int = 0x1F):
        props = {"mode": StringAttr(mode), "offset": i64_attr(offset), "clamp": i64_attr(clamp)}
        super().__init__(operands=[source], properties=props, result_types=[SSAValue.get(source).type])

    def verify_(self) -> None:
        require(self.mode.data in self.MODES, self, f"mode must be one of {', '.join(self.MODES)}, got '{self.mode.data}'")
        require(0 <= int_value(self.offset) < facts.WARP_SIZE, self, f"lane offset must be in [0, 32), got {int_value(self.offset)}")
        require(0 <= int_value(self.clamp) < 1 << 13, self, f"clamp/segment mask must fit 13 bits, got {int_value(self.clamp)}")
        elt = element_type(self.source.type)
        require(isinstance(elt, Float32Type) or elt == i32, self, f"shuffles move 32-bit registers, got {elt}")


class _NamedBarrierOp(IRDLOperation):
    barrier = prop_def(IntegerAttr[I64])
    threads = prop_def(IntegerAttr[I64])
    assembly_format = "$barrier `,` $threads attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, barrier: int, threads: int):
        super().__init__(properties={"barrier": i64_attr(barrier), "threads": i64_attr(threads)})

    def verify_(self) -> None:
        barrier, threads = int_value(self.barrier), int_value(self.threads)
        require(0 <= barrier < facts.NAMED_BARRIERS, self, f"barrier id must be in [0, {facts.NAMED_BARRIERS}), got {barrier}")
        require(0 < threads <= facts.MAX_THREADS_PER_BLOCK and threads % facts.WARP_SIZE == 0, self,
                f"thread count must be a positive multiple of {facts.WARP_SIZE} up to a block's "
                f"{facts.MAX_THREADS_PER_BLOCK} threads, got {threads}")


@irdl_op_definition
class BarSyncOp(_NamedBarrierOp):
    """`sm90.bar_sync 0, 256`: wait at named barrier `barrier` until `threads` threads have arrived; shared
    memory written before it by the participants is visible after it. Prints as `bar.sync id, n;`."""

    name = "sm90.bar_sync"


@irdl_op_definition
class BarArriveOp(_NamedBarrierOp):
    """`sm90.bar_arrive 1, 256`: arrive at a named barrier without waiting. Prints as `bar.arrive id, n;`."""

    name = "sm90.bar_arrive"


@irdl_op_definition
class ElectSyncOp(IRDLOperation):
    """`%leader = sm90.elect_sync`: true in exactly one lane of the warp (the lowest active one).
    Prints as `elect.sync _|%p, 0xffffffff;`."""

    name = "sm90.elect_sync"
    result = result_def(i1)
    assembly_format = "attr-dict"
    traits = traits_def(MemoryReadEffect())

    def __init__(self):
        super().__init__(result_types=[i1])


@irdl_op_definition
class SetMaxNRegOp(IRDLOperation):
    """`sm90.setmaxnreg "inc" 240`: change the register budget of this warpgroup's threads (all four warps
    execute it). Prints as `setmaxnreg.inc.sync.aligned.u32 240;`."""

    name = "sm90.setmaxnreg"
    action = prop_def(StringAttr)
    count = prop_def(IntegerAttr[I64])
    assembly_format = "$action $count attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, action: str, count: int):
        super().__init__(properties={"action": StringAttr(action), "count": i64_attr(count)})

    def verify_(self) -> None:
        require(self.action.data in ("inc", "dec"), self, f"action must be inc or dec, got '{self.action.data}'")
        try:
            facts.check_setmaxnreg(self.action.data, int_value(self.count))
        except ValueError as e:
            raise VerifyException(f"'{self.name}' op {e}") from None


# endregion
