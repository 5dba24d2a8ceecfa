"""The backward's Target IR ops in the CTA simulator (`tessera.dialects.sm90_reductions`): atomic adds into
global memory, bulk reductions from shared memory with their groups, and stmatrix.

- `red_global_add`/`atom_global_add`: `GlobalMemory.reduce_add_f32` (f32 adds with .ftz, in thread order
  within the CTA; between CTAs the launch order decides, and the races that no order makes right are reported).
- `bulk_reduce_add` (`BulkUnit`): each issuing thread's reduction reads its shared source through the async
  proxy (checked like a wgmma operand: landed, fenced, ordered by a barrier), adds it into global memory, and
  stays *reading* until a `bulk_wait_group ... read` of that thread covers its group: meanwhile a write to the
  source bytes (st_shared, stmatrix, a TMA copy) is reported, and so is a CTA that ends with it still reading.
  It stays *landing* until a `bulk_wait_group` without `read` covers it: meanwhile this CTA's plain load of
  those global words is reported. Groups are per thread, as in PTX: `bulk_commit_group` closes the thread's
  open group; `bulk_wait_group N` completes all its committed groups but the N newest.
- `sem_try_wait`/`sem_signal`: the semaphore word is loaded and compared / incremented (atomically: no other
  CTA runs meanwhile); a wait whose count differs is a deadlock of the launch order, reported at once. A signal
  releases its CTA's global accesses so far and a successful wait acquires them (`global_races`).
- `stmatrix`: per warp, `tessera.sm90.matrix` says which element of which register goes to which byte of
  the rows the lanes address; the rows are written as st.shared would write them (generic proxy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.ir import Operation

from tessera.dialects import sm90_reductions as ops
from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.sm90.global_memory import pointer_sources
from tessera.interpreters.sm90.registers import row_mask, unsigned
from tessera.interpreters.truth import any_set
from tessera.sm90 import facts
from tessera.sm90 import matrix as matrix_facts

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta_view import CtaView
    from tessera.interpreters.sm90.global_memory import GlobalMemory

F32_BYTES = 4


@dataclass(eq=False)
class BulkReduction:
    """One issued `bulk_reduce_add`: the thread, its group (None while uncommitted), the shared bytes it reads and
    the global addresses (one per f32) it adds into."""

    op: Operation
    thread: int
    source: np.ndarray
    dest: np.ndarray
    group: int | None = None
    read: bool = False
    landed: bool = False


@dataclass
class BulkUnit:
    """The bulk reductions of a CTA that have not both read their source and landed."""

    cta: CtaView
    pending: list[BulkReduction] = field(default_factory=list)  # still reading their source
    landing: list[BulkReduction] = field(default_factory=list)  # source read, adds not known to have landed
    committed: dict[int, int] = field(default_factory=dict)

    def issue(self, reduction: BulkReduction) -> None:
        self.pending.append(reduction)

    def commit(self, threads: np.ndarray) -> None:
        for t in threads:
            t = int(t)
            group = self.committed.get(t, 0)
            for r in self.pending:
                if r.thread == t and r.group is None:
                    r.group = group
            self.committed[t] = group + 1

    def wait(self, threads: np.ndarray, allowed: int, read_only: bool) -> None:
        limits = {int(t): self.committed.get(int(t), 0) - allowed for t in threads}
        for r in self.pending + self.landing:
            if r.thread in limits and r.group is not None and r.group < limits[r.thread]:
                r.read = True
                r.landed = r.landed or not read_only
        self.landing = [r for r in self.landing + self.pending if r.read and not r.landed]
        self.pending = [r for r in self.pending if not r.read]

    def check_not_read_by_pending(self, op: Operation, addresses: np.ndarray, threads: np.ndarray, what: str) -> None:
        """Refuse writing shared bytes that a bulk reduction may not have read yet."""
        for r in self.pending:
            hit = np.isin(addresses, r.source)
            if any_set(hit):
                i = int(np.argmax(hit))
                self.cta.fail(op, f"{what} overwrites {self.cta.smem.locate(addresses[i])}, the source of "
                                  f"`{describe_op(r.op)}` (thread {r.thread}), before a bulk_wait_group ... read of "
                                  "that thread said the reduction has read it (cp.async.bulk.wait_group.read "
                                  "only then allows reusing the buffer)", int(threads[i]))

    def check_landed(self, op: Operation, addresses: np.ndarray, threads: np.ndarray) -> None:
        """Refuse this CTA's plain loads of global words its own bulk reductions may still be adding into."""
        for r in self.pending + self.landing:
            hit = np.isin(addresses, r.dest)
            if any_set(hit):
                i = int(np.argmax(hit))
                self.cta.fail(op, f"reads global address {int(addresses[i]):#x} before `{describe_op(r.op)}` "
                                  f"(thread {r.thread}) has landed there (bulk_wait_group without read first)",
                              int(threads[i]))

    def check_drained(self) -> None:
        """A CTA must not end while a reduction may still read its shared memory."""
        if self.pending:
            r = self.pending[0]
            self.cta.fail(r.op, "the kernel ends with this bulk reduction possibly still reading its shared "
                                "source (no bulk_commit_group and bulk_wait_group ... read cover it)", r.thread)


@register_impls
class ReductionFunctions(InterpreterFunctions):
    def __init__(self, cta: CtaView, memory: GlobalMemory):
        super().__init__()
        self.cta = cta
        self.memory = memory

    def _active(self) -> np.ndarray:
        return np.nonzero(self.cta.active)[0]

    def _add(self, op, args) -> np.ndarray:
        base, offsets, values, mask = args
        selected = mask & row_mask(self.cta.active, mask)
        thread, _ = np.nonzero(selected)
        columns = 0 if op.column_bytes is None else np.asarray(op.column_bytes.get_values(), np.int64)
        old = np.zeros(mask.shape, np.float32)
        addresses = (base[:, None] + offsets + columns)[selected]
        self.cta.bulk.check_landed(op, addresses, thread)
        old[selected] = self.memory.reduce_add_f32(self.cta, op, addresses, thread, values[selected])
        return old

    @impl(ops.RedGlobalAddOp)
    def run_red(self, interpreter: Interpreter, op: ops.RedGlobalAddOp, args: PythonValues):
        self._add(op, args)
        return ()

    @impl(ops.AtomGlobalAddOp)
    def run_atom(self, interpreter: Interpreter, op: ops.AtomGlobalAddOp, args: PythonValues):
        return (self._add(op, args),)

    @impl(ops.BulkReduceAddOp)
    def run_bulk_reduce(self, interpreter: Interpreter, op: ops.BulkReduceAddOp, args: PythonValues):
        dest, source = args
        cta, smem, nbytes = self.cta, self.cta.smem, op.bytes.value.data
        for t in self._active():
            t = int(t)
            start, target = int(source[t]), int(dest[t])
            if start % ops.BULK_ALIGNMENT or target % ops.BULK_ALIGNMENT:
                cta.fail(op, f"bulk reduction addresses must be {ops.BULK_ALIGNMENT}-byte aligned: source "
                             f"{smem.locate(start)}, destination {target:#x}", t)
            addresses = start + np.arange(nbytes, dtype=np.int64)
            smem.check_bounds(op, addresses[:1], np.array([t]), nbytes, "the bulk reduction reads")
            smem.check_async_read(op, addresses, np.array([t]), "the bulk reduction's source")
            values = smem.data[addresses].view("<f4").astype(np.float32)
            dest_words = target + F32_BYTES * np.arange(nbytes // F32_BYTES, dtype=np.int64)
            self.memory.reduce_add_f32(cta, op, dest_words, np.full(len(dest_words), t), values, proxy_async=True)
            cta.bulk.issue(BulkReduction(op, t, addresses, dest_words))
            cta.mbarriers.note_drain(t)
        return ()

    @impl(ops.BulkCommitGroupOp)
    def run_bulk_commit(self, interpreter: Interpreter, op: ops.BulkCommitGroupOp, args: PythonValues):
        self.cta.bulk.commit(self._active())
        return ()

    @impl(ops.BulkWaitGroupOp)
    def run_bulk_wait(self, interpreter: Interpreter, op: ops.BulkWaitGroupOp, args: PythonValues):
        self.cta.bulk.wait(self._active(), op.pending.value.data, read_only=op.read is not None)
        return ()

    @impl(ops.CvtUnpackOp)
    def run_cvt_unpack(self, interpreter: Interpreter, op: ops.CvtUnpackOp, args: PythonValues):
        (words,) = args
        lo, hi = facts.mov_unpack_b32(unsigned(words))
        half = op.half_type.data
        out = np.empty((words.shape[0], 2 * words.shape[1]), np.float32)
        out[:, 0::2], out[:, 1::2] = facts.half_bits_to_f32(lo, half), facts.half_bits_to_f32(hi, half)
        return (out,)

    @impl(ops.SemTryWaitOp)
    def run_sem_try_wait(self, interpreter: Interpreter, op: ops.SemTryWaitOp, args: PythonValues):
        """The active threads load the semaphore and compare. The CTAs run one after another, so a count that
        differs now cannot be changed by another CTA while this one spins: reported at once as a deadlock of
        this launch order (in the linear order the deterministic backward's key blocks arrive in order)."""
        sem, expected = args
        threads = self._active()
        done = np.zeros(self.cta.active.shape, bool)
        if not len(threads):
            return (done,)
        addresses = np.asarray(sem, np.int64)[threads]
        words = self.memory.load_words(self.cta, op, addresses, threads, atomic=True).view(np.int32)
        want = np.asarray(expected).astype(np.int32)[threads]
        if any_set(words != want):
            i = int(np.argmax(words != want))
            self.cta.fail(op, f"waits for the semaphore at global address {int(np.asarray(sem)[threads[i]]):#x} to "
                              f"hold {int(want[i])}, but it holds {int(words[i])} and no other CTA runs while this "
                              "one waits (the simulator runs CTAs one after another): a deadlock in this CTA order",
                          int(threads[i]))
        for address in np.unique(addresses).tolist():
            self.memory.acquire(self.cta, address, threads[addresses == address])
        done[threads] = True
        return (done,)

    @impl(ops.SemSignalOp)
    def run_sem_signal(self, interpreter: Interpreter, op: ops.SemSignalOp, args: PythonValues):
        """Each active thread adds 1 to the i32 at its address (release: what the thread knows, its own and its
        CTA's accesses ordered before it, is released on the word; the simulator applies red adds when issued)."""
        (sem,) = args
        threads = self._active()
        for t in threads:
            address = np.asarray(sem, np.int64)[[t]]
            old = self.memory.load_words(self.cta, op, address, np.array([t]), atomic=True).view(np.int32)
            self.memory.store_words(self.cta, op, address, np.array([t]), (old + 1).view(np.uint32), atomic=True)
            self.memory.release(self.cta, int(address[0]), int(t))
        return ()

    @impl(ops.StMatrixOp)
    def run_stmatrix(self, interpreter: Interpreter, op: ops.StMatrixOp, args: PythonValues):
        address, values = args
        cta = self.cta
        warps = cta.converged_units(op, facts.WARP_SIZE, "stmatrix")
        count = values.shape[1]
        trans = op.trans is not None
        lane = np.arange(facts.WARP_SIZE)
        words = unsigned(values).astype(np.uint32)
        for w in warps:
            threads = w * facts.WARP_SIZE + lane
            rows_at = address[threads].astype(np.int64)
            cta.smem.check_alignment(op, rows_at[: matrix_facts.MATRIX_ROWS * count],
                                     threads[: matrix_facts.MATRIX_ROWS * count], matrix_facts.MATRIX_ROW_BYTES,
                                     "stmatrix row")
            for half in (0, 1):
                row, col = matrix_facts.stmatrix_coords(lane, half, trans)
                for j in range(count):
                    at = rows_at[matrix_facts.stmatrix_row_lane(j, row)] + 2 * col
                    element = (words[threads, j] >> (16 * half)) & 0xFFFF
                    cta.smem.store_words(op, threads, at, element, 2)
        return ()


def reduction_targets(kernel) -> tuple[frozenset[int], frozenset[int]]:
    """(the tensors `kernel` (a `target_abi.TargetKernel`) adds into with red or bulk reductions, those and the
    tensors of atom): the `sm90.source` of each pointer argument from which the address operand of such an
    op is computed (through any chain of ops)."""
    def sources(value) -> set[int]:
        return pointer_sources(kernel, value)

    reduced, atomic = set(), set()
    for op in kernel.op.walk():
        if isinstance(op, (ops.RedGlobalAddOp, ops.BulkReduceAddOp)):
            hit = sources(op.base_ptr if isinstance(op, ops.RedGlobalAddOp) else op.dest)
            reduced |= hit
            atomic |= hit
        elif isinstance(op, ops.AtomGlobalAddOp):
            atomic |= sources(op.base_ptr)
    return frozenset(reduced), frozenset(atomic)
