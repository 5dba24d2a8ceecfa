"""convert-tile-to-sm90, the bulk reduction handed to the producer (`atomic-add=bulk`, FlashAttention-3's dQ
path): a `tile.atomic_add` of a register tile in a loop, into a window that is one contiguous run of its tensor,
is staged in a two-slot shared ring and added into global memory by the producer thread with one
`cp.reduce.async.bulk` per trip.

    consumers (every thread)                          producer (thread 0, or warp-specialize's producer)
    wait slot s's empty barrier (phase u / 2 - 1)     wait slot s's full barrier (phase u / 2)
    st.shared its registers into slot s               cp.reduce.async.bulk.add.f32 [window], [slot s], bytes
    fence.proxy.async (the bulk read is async)        commit; wait_group.read 0 (slot s read)
    mbarrier.arrive slot s's full barrier             mbarrier.arrive slot s's empty barrier

u is the linear trip number of the loops around the add (`_linear_trip`: their trip counts defined outside the
nest), s = u mod 2. The full barriers count the consumer threads, the empty ones one arrival (the producer's).
The consumers no longer wait for the reduction to read their stores, nor meet at a bar.sync to publish them: the
producer's wait on the full barrier orders every thread's stores (each fenced for the async proxy) before its read,
and the slot is refilled only after its empty barrier says the read is done. The producer's `scf.if` is marked
`sm90.producer`, so warp-specialize gives it to the producer warpgroup with the ring refills.

Taken in a pipelined kernel (its copies fill rings, so a producer issues refills: warp-specialize's producer
warpgroup, or thread 0 of the two-stage kernel), where the window is promised `in_bounds` and spans whole rows of
its tensor (its first column a constant 0, its width the tensor's constant row length: one run of rows x width
f32), the add sits in a loop, and the kernel orders no additions with semaphores (`tile.sem_signal` waits for
the reductions' writes, which only the issuing thread can). Elsewhere (the single-stage kernel, say)
`atomic-add=bulk` stages the tile and adds it by rows from the consumers (`_bulk_add`), and the default
`atomic-add=auto` adds it by `red.global.add` (faster there: no bar.sync, no wait for the read). Where the
producer may take it, auto is bulk, unless its staging slots (twice the window's f32 bytes:
64 KiB for the backward's dQ) leave the kernel more shared memory than a thread block has (a mask_mod's P tile
beside the dense kernel's tiles): then the kernel is lowered again with `red` (`StagingDoesNotFit`). Where its
registers do not fit, the default pipeline lowers it again with `red` (`tessera.lowering.fallback`,
`AUTO_BULK_HEADROOM`).

Bulk by the producer is the shorter wherever measured (bench/backward_sass.py, SASS per trip of the
warp-specialized loop, red -> bulk under ptxas 12.9 / 13.0 / 13.5): d128 keys-on-rows 64 x 128 (dQ^T added
transposed) 476 / 473 / 479 -> 435 / 435 / 446 (causal 527 / 524 / 530 -> 488 / 488 / 499); d128 64 x 64
545 / 545 / 545 -> 527 / 527 / 527 (causal 567 -> 547); d64 128 x 128 775 -> 770 (causal 813 -> 808) under all
three; with a score_mod at 64 x 64 under 13.0 (before the dS stores' XOR addresses), soft-cap d64 1252 -> 1248,
ALiBi d64 712 -> 708, soft-cap d128 without the head split 1319 -> 1283. (The head-split kernels' dQ windows are
half a row, which the producer does not take.) Near the consumers' register budget it is not (soft-cap d64 at
128 x 128: 2274 against 2247), which `AUTO_BULK_HEADROOM` leaves to `red`.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import UnitAttr, i32
from xdsl.ir import SSAValue

from tessera.dialects import sm90, tile
from tessera.ir.walk import walk_ops
from tessera.dialects import sm90_reductions as reductions
from tessera.lowering.emitter import Emitter
from tessera.passes.convert_tile_to_sm90.common import PRODUCER_ATTR, Window, constant_int
from tessera.sm90 import facts

REDUCTION_SLOTS = 2
"""Staging slots of a reduction handed to the producer: the consumers fill one while the producer reads the other."""

F32_BYTES = 4


@dataclass
class ReductionSlots:
    """The staging ring of one `tile.atomic_add` and its barrier arrays (`REDUCTION_SLOTS` 8-byte mbarriers each)."""

    staging: SSAValue
    slot_bytes: int
    full: SSAValue
    empty: SSAValue


class StagingDoesNotFit(Exception):
    """`atomic-add=auto` took the bulk reduction by the producer, and its staging slots leave the kernel more shared
    memory than a thread block has: the kernel is lowered again with `red` (`ConvertTileToSm90Pass`)."""


class ReductionSlotsLowering:
    """The mixin of `KernelLowering` for reductions handed to the producer (module docstring)."""

    def _plan_reduction_slots(self) -> None:
        """The `tile.atomic_add`s whose bulk reduction the producer issues (`reduction_slots`, filled in by
        `_alloc_reduction_slots`)."""
        self.reduction_slots = {}
        ops = walk_ops(self.fn)
        if (self.atomic_add_mode == "red" or not any(isinstance(op, tile.StageOp) for op in ops)
                or any(isinstance(op, tile.SemWaitOp | tile.SemSignalOp) for op in ops)):
            return
        for op in ops:
            if not isinstance(op, tile.AtomicAddOp) or self._enclosing_loop(op) is None:
                continue
            view = op.dest.owner
            if not (isinstance(view, tile.ViewOp) and view.in_bounds is not None and op.value.type.memory_space.value
                    == "register" and len(view.result.type.get_shape()) == 2 and constant_int(view.indices[-1]) == 0):
                continue
            if self._is_column(op.value.type) or self._is_column_vector(op.value.type):
                continue  # one value per row or per column: `red` from one lane of each (backward.py)
            width = list(self.sig.args[view.source.index].dims)[-1]
            if width.is_constant and width.value.data == view.result.type.get_shape()[1]:
                self.reduction_slots[op] = None

    def _alloc_reduction_slots(self, e: Emitter) -> None:
        for k, op in enumerate(self.reduction_slots):
            rows, cols = op.dest.type.get_shape()
            size = rows * cols * F32_BYTES
            staging = self._alloc(e, f"reduction{k}_staging", REDUCTION_SLOTS * size, reductions.BULK_ALIGNMENT, 0)
            full, empty = (self._alloc(e, f"reduction{k}_{kind}", REDUCTION_SLOTS * facts.MBARRIER_BYTES,
                                       facts.MBARRIER_BYTES, 0) for kind in ("full", "empty"))
            self.reduction_slots[op] = ReductionSlots(staging, size, full, empty)

    def _init_reduction_slots(self, t: Emitter) -> None:
        for slots in self.reduction_slots.values():
            for slot in range(REDUCTION_SLOTS):
                t.op(sm90.MBarrierInitOp(self._slot_barrier(t, slots.full, slot), self.threads))
                t.op(sm90.MBarrierInitOp(self._slot_barrier(t, slots.empty, slot), 1))

    def _reduce_by_producer(self, op: tile.AtomicAddOp, window: Window, e: Emitter) -> None:
        """The consumers' half and the producer's `scf.if` (module docstring)."""
        slots = self.reduction_slots[op]
        rows, cols = window.shape
        trip = self._linear_trip(op, [info.op for info in self.loops], e)
        slot = e.op(arith.RemUIOp(trip, e.index(REDUCTION_SLOTS)))
        parity = e.op(arith.AndIOp(e.op(arith.DivUIOp(trip, e.index(REDUCTION_SLOTS))), e.index(1)))
        empty_parity = e.op(arith.XOrIOp(parity, e.index(1)))
        empty, full = self._slot_barrier(e, slots.empty, slot), self._slot_barrier(e, slots.full, slot)
        e.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(empty, empty_parity)))
        base = e.op(arith.AddiOp(slots.staging, e.op(arith.IndexCastOp(e.muli(slot, e.index(slots.slot_bytes)), i32))))
        self._stage_rows(op, base, cols * F32_BYTES, e)
        e.op(sm90.FenceProxyAsyncOp())
        e.op(sm90.MBarrierArriveOp(full))
        *lead, row0, col0 = window.indices
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]

        def reduce(t: Emitter):
            t.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(full, parity)))
            dest = self._element_address(t, window.arg, window.indices, [t.to_i64(d) for d in dims], F32_BYTES)
            t.op(reductions.BulkReduceAddOp(dest, base, rows * cols * F32_BYTES))
            t.op(reductions.BulkCommitGroupOp())
            t.op(reductions.BulkWaitGroupOp(0, read=True))
            t.op(sm90.MBarrierArriveOp(self._slot_barrier(t, slots.empty, slot)))
        e.if_(self.is_thread0, reduce).attributes[PRODUCER_ATTR] = UnitAttr()
