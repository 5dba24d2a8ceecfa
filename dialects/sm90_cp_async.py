"""Target IR ops of the non-bulk asynchronous copy `cp.async`, in the `sm90` dialect (registered with
`tessera.dialects.sm90.SM90`), facts in `tessera.sm90.cp_async`.

FlashAttention-3 gathers the rows of a paged KV cache whose pages are smaller than a key block with these:
each producer thread copies 16-byte chunks of rows it finds through the page table, and the completion of its
copies arrives on the ring slot's full mbarrier (`.noinc`, so that the barrier's init count is the producer's
thread count) [P#data-movement-and-conversion-instructions-cp-async, -cp-async-commit-group,
-cp-async-wait-group; P#parallel-synchronization-and-communication-instructions-cp-async-mbarrier-arrive].

- `sm90.cp_async %dst, %src, %src_size`: `cp.async.cg.shared.global [dst], [src], 16, src_size;`
- `sm90.cp_async_commit_group`: `cp.async.commit_group;`
- `sm90.cp_async_wait_group N`: `cp.async.wait_group N;`
- `sm90.cp_async_mbarrier_arrive_noinc %bar`: `cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar];`

Completion is per thread: the bytes of a thread's copies are in flight until its covering wait_group (then
visible to it, as generic-proxy writes: other threads see them after a bar_sync, wgmma after a
fence_proxy_async) or until the arrive-on of its mbarrier arrive (then visible to the threads that observe the
phase complete). The simulators report a read of bytes still in flight, and a kernel that ends with copies
in flight.
"""

from __future__ import annotations

from xdsl.dialects.builtin import I32, I64, IntegerAttr
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, prop_def, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect

from tessera.dialects.sm90_base import i64_attr
from tessera.sm90 import facts
from tessera.ir.diagnostics import require


@irdl_op_definition
class CpAsyncOp(IRDLOperation):
    """`sm90.cp_async %dst, %src, %src_size, 16`: start an asynchronous copy of 16 bytes from global address
    %src (i64) to shared address %dst (i32) in the executing thread's current cp.async group; the first
    %src_size bytes (0 to 16, a register) are read, the rest of the 16 land as zero, and with %src_size 0
    nothing is read (the row past a sequence's end). Prints as `cp.async.cg.shared.global [%dst], [%src], 16,
    %src_size;`. Invariants: %dst and %src are 16-byte aligned at run time; the copy size is `cp.async.cg`'s
    only one, `facts.CP_ASYNC_CG_BYTES`."""

    name = "sm90.cp_async"
    dest = operand_def(I32)
    source = operand_def(I64)
    src_size = operand_def(I32)
    bytes = prop_def(IntegerAttr[I64])
    assembly_format = "$dest `,` $source `,` $src_size `,` $bytes attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, dest, source, src_size):
        super().__init__(operands=[dest, source, src_size],
                         properties={"bytes": i64_attr(facts.CP_ASYNC_CG_BYTES)})

    def verify_(self) -> None:
        n = self.bytes.value.data
        require(n == facts.CP_ASYNC_CG_BYTES, self,
                f"cp.async.cg copies {facts.CP_ASYNC_CG_BYTES} bytes, got {n}")


@irdl_op_definition
class CpAsyncCommitGroupOp(IRDLOperation):
    """`sm90.cp_async_commit_group`: close the executing thread's current group of `sm90.cp_async` (possibly
    empty). Prints as `cp.async.commit_group;`."""

    name = "sm90.cp_async_commit_group"
    assembly_format = "attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self):
        super().__init__()


@irdl_op_definition
class CpAsyncWaitGroupOp(IRDLOperation):
    """`sm90.cp_async_wait_group 0`: wait until at most `pending` of the executing thread's most recent
    committed cp.async groups are in flight; the copies of every older group have written shared memory and
    are visible to this thread. Prints as `cp.async.wait_group N;`."""

    name = "sm90.cp_async_wait_group"
    pending = prop_def(IntegerAttr[I64])
    assembly_format = "$pending attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, pending: int):
        super().__init__(properties={"pending": i64_attr(pending)})

    def verify_(self) -> None:
        n = self.pending.value.data
        require(n >= 0, self, f"the number of groups left pending must be >= 0, got {n}")


@irdl_op_definition
class CpAsyncMBarrierArriveNoIncOp(IRDLOperation):
    """`sm90.cp_async_mbarrier_arrive_noinc %bar`: once every cp.async the executing thread issued before it
    has completed, one arrive-on of the mbarrier at shared address %bar, which counts towards the arrivals
    its phase expects (`.noinc`: the init count includes one per arriving thread,
    `facts.CP_ASYNC_NOINC_ARRIVALS`). A thread that then observes the phase complete sees the copies' bytes.
    Prints as `cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%bar];`."""

    name = "sm90.cp_async_mbarrier_arrive_noinc"
    mbarrier = operand_def(I32)
    assembly_format = "$mbarrier attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, mbarrier):
        super().__init__(operands=[mbarrier])


CP_ASYNC_OPS = (CpAsyncOp, CpAsyncCommitGroupOp, CpAsyncWaitGroupOp, CpAsyncMBarrierArriveNoIncOp)
