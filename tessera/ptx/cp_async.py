"""PTX of the `cp.async` Target IR ops (`tessera.dialects.sm90_cp_async`, facts in `tessera.sm90.cp_async`): the
row gather of a paged KV cache. Each op's docstring names the instruction; ptxas accepts every form
(tests/test_paged_gather.py assembles the gather kernels)."""

from __future__ import annotations

from tessera.dialects import sm90_cp_async as ops
from tessera.ptx.kernel import KernelPrinter, handles


@handles(ops.CpAsyncOp)
def print_cp_async(p: KernelPrinter, op: ops.CpAsyncOp) -> None:
    p.emit(f"cp.async.cg.shared.global [{p.reg(op.dest)}], [{p.reg(op.source)}], {op.bytes.value.data}, "
           f"{p.reg(op.src_size)}")


@handles(ops.CpAsyncCommitGroupOp)
def print_cp_async_commit_group(p: KernelPrinter, op: ops.CpAsyncCommitGroupOp) -> None:
    p.emit("cp.async.commit_group")


@handles(ops.CpAsyncWaitGroupOp)
def print_cp_async_wait_group(p: KernelPrinter, op: ops.CpAsyncWaitGroupOp) -> None:
    p.emit(f"cp.async.wait_group {op.pending.value.data}")


@handles(ops.CpAsyncMBarrierArriveNoIncOp)
def print_cp_async_mbarrier_arrive_noinc(p: KernelPrinter, op: ops.CpAsyncMBarrierArriveNoIncOp) -> None:
    p.emit(f"cp.async.mbarrier.arrive.noinc.shared::cta.b64 [{p.reg(op.mbarrier)}]")
