"""`cp.async` in the CTA simulator (`tessera.dialects.sm90_cp_async`, facts in `tessera.sm90.cp_async`).

An `sm90.cp_async` reads its source when issued (src-size bytes; the rest of the 16 are zeros, and src-size 0
reads nothing) and tags its 16 destination bytes CP_ASYNC (`shared_memory`): any read of them, or write over
them, is a hazard reported with the op and the thread, until the issuing thread completes the copy:
- `sm90.cp_async_commit_group` closes the thread's open group; `sm90.cp_async_wait_group N` lands the copies of
  all but the thread's N newest committed groups, as generic-proxy stores of that thread (visible to others
  after a bar_sync, to wgmma after its fence_proxy_async and a bar_sync);
- `sm90.cp_async_mbarrier_arrive_noinc` lands all the thread's copies, tagged with the current phase of the
  mbarrier (LANDED, as a TMA copy's bytes: a reader must observe that phase complete), then arrives on it
  once (`.noinc`: the arrival counts towards the phase).
Landing at the wait or arrive is the latest moment the hardware may write them; reading earlier is the race.
A kernel that ends with copies not landed is reported (`check_drained`). The bytes read are counted in the
CTA's `traffic` under the source tensor's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.ir import Operation

from tessera.dialects import sm90_cp_async as ops
from tessera.interpreters.sm90.global_memory import TENSOR_SPACING_BITS
from tessera.interpreters.truth import any_set
from tessera.sm90 import facts

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta_view import CtaView
    from tessera.interpreters.sm90.global_memory import GlobalMemory


@dataclass(eq=False)
class PendingCopy:
    """The cp.async of one thread not landed yet: its group (None while open), shared bytes and data."""

    op: Operation
    thread: int
    addresses: np.ndarray
    data: np.ndarray
    group: int | None = None


@dataclass
class CpAsyncUnit:
    """The cp.async copies of a CTA that have not landed, and each thread's count of committed groups."""

    cta: CtaView
    pending: list[PendingCopy] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)

    def issue(self, op: Operation, threads: np.ndarray, addresses: np.ndarray, data: np.ndarray) -> None:
        self.cta.smem.begin_cp_async(op, threads, addresses)
        for t, a, d in zip(threads, addresses, data):
            self.pending.append(PendingCopy(op, int(t), a, d))

    def commit(self, threads: np.ndarray) -> None:
        """Close each thread's open group: one pass over the pending copies, not one per thread."""
        groups = {int(t): self.committed.get(int(t), 0) for t in threads}
        for copy in self.pending:
            if copy.group is None and copy.thread in groups:
                copy.group = groups[copy.thread]
        for t, group in groups.items():
            self.committed[t] = group + 1

    def wait(self, threads: np.ndarray, allowed: int) -> None:
        limits = {int(t): self.committed.get(int(t), 0) - allowed for t in threads}
        done = [c for c in self.pending if c.thread in limits and c.group is not None and c.group < limits[c.thread]]
        self._land(done, None)

    def arrive(self, threads: np.ndarray, mbarriers: np.ndarray, op: Operation) -> None:
        arriving = {int(t): [] for t in threads}
        for copy in self.pending:
            if copy.thread in arriving:
                arriving[copy.thread].append(copy)
        self.pending = [c for c in self.pending if c.thread not in arriving]
        for t, copies in arriving.items():
            self._write(copies, self.cta.mbarriers.get(op, t, int(mbarriers[t])))

    def _land(self, copies: list[PendingCopy], barrier) -> None:
        if not copies:
            return
        ids = {id(c) for c in copies}
        self.pending = [c for c in self.pending if id(c) not in ids]
        self._write(copies, barrier)

    def _write(self, copies: list[PendingCopy], barrier) -> None:
        """Land `copies` in shared memory: generic writes (barrier None) or on `barrier`'s current phase."""
        if not copies:
            return
        addresses = np.concatenate([c.addresses for c in copies])
        data = np.concatenate([c.data for c in copies])
        writers = np.concatenate([np.full(c.addresses.size, c.thread) for c in copies])
        if barrier is None:
            self.cta.smem.land_generic(addresses, data, writers)
        else:
            self.cta.smem.land(addresses, data, barrier.index, barrier.state.phase, writers)

    def check_drained(self) -> None:
        if self.pending:
            copy = self.pending[0]
            self.cta.fail(copy.op, "the kernel ends with this cp.async in flight (no cp_async_wait_group or "
                                   "cp_async_mbarrier_arrive_noinc of its thread completes it)", copy.thread)


@register_impls
class CpAsyncFunctions(InterpreterFunctions):
    def __init__(self, cta: CtaView, memory: GlobalMemory):
        super().__init__()
        self.cta = cta
        self.memory = memory

    def _threads(self) -> np.ndarray:
        return np.nonzero(self.cta.active)[0]

    @impl(ops.CpAsyncOp)
    def run_cp_async(self, interpreter: Interpreter, op: ops.CpAsyncOp, args: PythonValues):
        dest, source, src_size = args
        threads = self._threads()
        size = op.bytes.value.data
        count = np.asarray(src_size, np.int64)[threads]
        bad = (count < 0) | (count > size)
        if any_set(bad):
            self.cta.fail(op, f"src-size {int(count[np.argmax(bad)])} is outside [0, {size}] (undefined in PTX)",
                          int(threads[np.argmax(bad)]))
        data = np.zeros((len(threads), size), np.uint8)
        reading = count > 0
        if any_set(reading):
            src = np.asarray(source, np.int64)[threads][reading]
            misaligned = src % size != 0
            if any_set(misaligned):
                self.cta.fail(op, f"reads global address {int(src[np.argmax(misaligned)]):#x}, which is not "
                                  f"{size}-byte aligned", int(threads[reading][np.argmax(misaligned)]))
            got = self.memory.load_bytes(self.cta, op, src, threads[reading], size)
            data[reading] = np.where(np.arange(size) < count[reading][:, None], got, 0)
            tensors = (src >> TENSOR_SPACING_BITS) - 1
            for k in np.unique(tensors):
                name = self.memory.names[k].lstrip("%")
                self.cta.traffic[name] = self.cta.traffic.get(name, 0) + int(count[reading][tensors == k].sum())
        start = np.asarray(dest, np.int64)[threads]
        self.cta.cp_async.issue(op, threads, start[:, None] + np.arange(size), data)
        return ()

    @impl(ops.CpAsyncCommitGroupOp)
    def run_commit(self, interpreter: Interpreter, op: ops.CpAsyncCommitGroupOp, args: PythonValues):
        self.cta.cp_async.commit(self._threads())
        return ()

    @impl(ops.CpAsyncWaitGroupOp)
    def run_wait(self, interpreter: Interpreter, op: ops.CpAsyncWaitGroupOp, args: PythonValues):
        self.cta.cp_async.wait(self._threads(), op.pending.value.data)
        return ()

    @impl(ops.CpAsyncMBarrierArriveNoIncOp)
    def run_arrive_noinc(self, interpreter: Interpreter, op: ops.CpAsyncMBarrierArriveNoIncOp, args: PythonValues):
        threads = self._threads()
        self.cta.cp_async.arrive(threads, args[0], op)
        for _ in range(facts.CP_ASYNC_NOINC_ARRIVALS):
            self.cta.mbarriers.arrive(op, args[0], None)
        return ()
