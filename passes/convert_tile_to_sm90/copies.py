"""convert-tile-to-sm90, copies into shared memory: `tile.cp_async` as TMA boxes (thread 0, on a copy group's
mbarrier or, for a ring stage, the producer's fill on the slot's full barrier) or, for tensors whose rows need not
start on 16 bytes, by every thread (`ld.global.u16`, swizzled `st.shared.b16`); the copy groups
(`tile.cp_commit_group`, `tile.cp_wait_group`) and the parities of the phases their waits wait for."""

from __future__ import annotations

import math

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    IntegerAttr,
    UnitAttr,
    i32,
)
from xdsl.ir import Operation, SSAValue

from tessera.dialects import sm90, tile
from tessera.kernel_abi import rows_aligned
from tessera.lowering.emitter import Emitter
from tessera.sm90 import facts
from tessera.passes.convert_tile_to_sm90.common import (
    CLUSTER_SHARED_ATTR,
    PRODUCER_ATTR,
    refuse,
    SharedTile,
    Window,
    Group,
)


COPY_WHOLE_ELEMENTS = 64
"""The most elements a thread copies at once in a copy without TMA (`_copy_by_threads`): a [128, 64] tile's share
of 128 threads. A larger share (a [256, 64] tile's 128) is copied in slices of rows of `COPY_SLICE_ELEMENTS` a
thread: an element costs a register for its value, one for its global offset and one for its shared address
until its store, and 128 of each beside a [64, 256] accumulator spill (gemm(block_m=64, block_n=256,
transpose_b=True) at sizes without TMA needed 401 registers a thread, sliced 254)."""
COPY_SLICE_ELEMENTS = 32
"""A thread's share of a slice of such a larger tile: a [64, 64] tile's share of 128 threads."""


class CopyLowering:
    """The copy handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _lower_CpAsyncOp(self, op: tile.CpAsyncOp, e: Emitter) -> None:
        window, dest = self._get(op.source), self._get(op.dest)
        if not self._tma_allowed(window.arg):
            if dest.stage is not None:
                refuse(op, f"ring stages are filled by TMA, but the rows of %{self.sig.args[window.arg].name} need not "
                            "start on 16 bytes (its innermost size is not promised a multiple of 16 bytes by "
                            "tile.divisible): lower the kernel without pipeline-loops, or promise the sizes")
            self._retire_readers(dest.address, e)
            self._copy_by_threads(op, window, dest, e)
            return
        rows = window.shape[0]
        self._retire_readers(dest.address, e)
        if self._is_transposed_stage(op.dest):
            self._fill_transposed_stage(op, window, dest, e)
            return
        tmap = self.entry_args[self.map_args[(window.arg, rows, dest.swizzle)]]
        if dest.stage is not None:
            self._fill_stage(op, window, dest, tmap, e, shared=op.cluster_shared is not None)
            return
        group = self.groups[self.copy_group[op]]
        group.nbytes += dest.rows * dest.cols * dest.elt_bytes

        e.if_(self.is_thread0, lambda t: self._tma_boxes(t, window, dest, tmap, group.barrier))

    def _tma_allowed(self, arg: int) -> bool:
        """Whether TMA can read argument `arg`: each of its rows starts on a multiple of
        `facts.TENSOR_MAP_GLOBAL_ALIGNMENT` bytes whatever the sizes (`kernel_abi.rows_aligned`)."""
        return rows_aligned(self.sig, arg, facts.TENSOR_MAP_GLOBAL_ALIGNMENT)

    def _copy_by_threads(self, op, window: Window, dest: SharedTile, e: Emitter) -> None:
        """The copy without TMA, for 16-bit tensors whose rows may start anywhere: every thread of the block
        loads its elements with `ld.global.u16` (zero outside the tensor) and stores them with `st.shared.b16` at
        their swizzled addresses, then `fence.proxy.async` makes them visible to wgmma (the `tile.barrier` that
        follows publishes them to the block). The tile is copied in slices of W columns and R rows: all its
        columns where they divide the threads, else W = min(gcd(cols, threads), 32) (a tile wider than the block
        has threads, [64, 256] by 128); all its rows where that leaves a thread at most `COPY_WHOLE_ELEMENTS`,
        else as many as leave it `COPY_SLICE_ELEMENTS` ([256, 64] by 128 threads: 64 rows at a time). In each
        slice, thread t takes column c = t mod W of rows g L .. g L + L - 1, g = t / W, L = R W / threads. A warp
        reads consecutive elements of a row (coalesced), and L is a multiple of the swizzle's 8-row period, so
        each register's swizzle term is a constant. A tile too short for that (an [8, 64] B^T tile of a wgmma with
        N = 8: 4 rows a thread) is copied with L the period, in slices of threads / W periods of rows, the last
        slice by only the threads its rows need (the others skip it). An unswizzled tile (a one-row tile [1, N]) is
        refused by name: a row that TMA cannot read is broadcast from its global window instead."""
        rows, cols, elt, threads = dest.rows, dest.cols, dest.elt_bytes, self.threads
        line = dest.swizzle  # the bytes of a row of a box
        if not line:
            refuse(op, f"a one-row shared tile is filled by TMA, but the rows of %{self.sig.args[window.arg].name} "
                        "need not start on 16 bytes (its innermost size is not promised a multiple of 16 bytes by "
                        "tile.divisible): promise the size, or tile.load_broadcast the row from its global window")
        period = facts.swizzle_period_bytes(line) // line
        width = cols if threads % cols == 0 else min(math.gcd(cols, threads), facts.WARP_SIZE)
        if elt != 2 or rows % period:
            refuse(op, f"a copy without TMA needs a 16-bit tile of a multiple of {period} rows (the swizzle's "
                        f"period), got [{rows}, {cols}] x {elt} bytes")
        share = rows * width / threads  # rows of a column a thread copies when all of them copy the whole tile
        if share == int(share) and share % period == 0:
            slice_rows = rows
            if share > COPY_WHOLE_ELEMENTS and rows % (COPY_SLICE_ELEMENTS * threads // width) == 0:
                slice_rows = COPY_SLICE_ELEMENTS * threads // width
            slices = [(first_row, slice_rows, threads) for first_row in range(0, rows, slice_rows)]
        else:  # too few rows: a period of rows a thread, the last slice by the threads its rows need
            step = threads // width * period
            slices = [(first_row, min(step, rows - first_row), min(step, rows - first_row) // period * width)
                      for first_row in range(0, rows, step)]
        for first_row, slice_rows, active in slices:
            for first_column in range(0, cols, width):
                def copy(t: Emitter, first_row=first_row, slice_rows=slice_rows, active=active,
                         first_column=first_column):
                    self._copy_slice_by_threads(window, dest, first_row, slice_rows, first_column, width, active, t)
                if active == threads:
                    copy(e)
                else:
                    e.if_(e.cmpi(self.tid, e.index(active), "ult"), copy)
        e.op(sm90.FenceProxyAsyncOp())

    def _copy_slice_by_threads(self, window: Window, dest: SharedTile, slice_row: int, slice_rows: int,
                               first_column: int, width: int, threads: int, e: Emitter) -> None:
        """One slice of `_copy_by_threads`: rows slice_row .. slice_row + slice_rows - 1 of the tile, columns
        first_column .. first_column + width - 1, by the block's first `threads` threads."""
        elt = dest.elt_bytes
        line = dest.swizzle
        per_thread = slice_rows * width // threads
        *lead, row0, col0 = window.indices
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        column = e.op(arith.RemUIOp(self.tid, e.index(width)))
        if first_column:
            column = e.addi(column, e.index(first_column))
        first_row = e.muli(e.op(arith.DivUIOp(self.tid, e.index(width))), e.index(per_thread))
        if slice_row:
            first_row = e.addi(first_row, e.index(slice_row))
        row, col = e.addi(row0, first_row), e.addi(col0, column)
        # In bounds: register i where row + i < rows of the tensor, and only if the thread's column is inside.
        # (unsigned, a column before the tensor, col < 0, is past it)
        rows_left = e.op(arith.SubiOp(dims[-2], row))
        inside = e.cmpi(col, dims[-1], "slt" if window.starts_inside else "ult")
        rows_left = e.op(arith.SelectOp(inside, rows_left, e.index(0)))
        rows_left = self._lead_limit(e, window, dims, rows_left)
        mask = self._below(e, rows_left, list(range(per_thread)))
        if not window.starts_inside:
            mask = e.andi(mask, self._not_before(e, row, list(range(per_thread))))
        wide = [e.to_i64(d) for d in dims]
        base = self._element_address(e, window.arg, [*lead, row, col], wide, elt)
        pitch = e.op(arith.IndexCastOp(e.muli(dims[-1], e.index(elt)), i32))
        offsets = e.muli(e.broadcast(pitch, per_thread), e.dense(i32, list(range(per_thread))))
        values = e.op(sm90.LdGlobalU16Op(base, offsets, mask, per_thread))
        # Shared: box column // box_cols, byte (column mod box_cols) x elt of row first_row + i, whose swizzle
        # XORs the byte's 16-byte chunk with a pattern of the row's place in the 8-row period (the tile's base
        # and first_row x line are multiples of the period; the byte stays inside its swizzle span).
        box = e.op(arith.DivUIOp(column, e.index(dest.box_cols)))
        byte = e.muli(e.op(arith.RemUIOp(column, e.index(dest.box_cols))), e.index(elt))
        start = e.addi(e.muli(box, e.index(dest.box_bytes)), e.muli(first_row, e.index(line)))
        start = e.op(arith.AddiOp(dest.address, e.op(arith.IndexCastOp(start, i32))))
        pattern = [int(facts.swizzle_address(i * line, line)) - i * line for i in range(per_thread)]
        swizzled = e.op(arith.XOrIOp(e.broadcast(e.op(arith.IndexCastOp(byte, i32)), per_thread), e.dense(i32, pattern)))
        addresses = e.addi(e.addi(e.broadcast(start, per_thread), e.dense(i32, [i * line for i in range(per_thread)])), swizzled)
        e.op(sm90.StSharedB16Op(addresses, values))

    def _tma_boxes(self, t: Emitter, window: Window, dest: SharedTile, tmap: SSAValue, barrier: SSAValue,
                   shared: bool = False) -> None:
        coords = list(reversed(window.indices))
        for b in range(dest.boxes):
            inner = t.addi(coords[0], t.index(b * dest.box_cols)) if b else coords[0]
            box_addr = t.op(arith.AddiOp(dest.address, t.op(arith.ConstantOp(IntegerAttr(b * dest.box_bytes, i32)))))
            load = t.op(sm90.TmaLoadOp(tmap, [inner] + coords[1:], box_addr, barrier))
            if shared:
                load.attributes[CLUSTER_SHARED_ATTR] = UnitAttr()

    def _fill_stage(self, op: tile.CpAsyncOp, window: Window, dest: SharedTile, tmap: SSAValue, e: Emitter,
                    shared: bool = False) -> None:
        """Thread 0, the producer: wait until every thread released the slot's previous contents (the empty
        barrier's phase of the previous trip around the ring), expect the copy's bytes on the full barrier,
        issue the boxes on it. The scf.if is marked `sm90.producer` for warp-specialize. The boxes of a
        `cluster_shared` copy are marked `sm90.cluster_shared` for multicast-cluster-copies. A ring that rides on
        the previous copy's ring (`riding_rings.py`) only issues its box: that copy waited and expected its
        bytes too."""
        stage = dest.stage
        ring = op.dest.owner.source.owner
        riding = ring in self.riding.leader
        nbytes = self.riding.expect_bytes.get(ring, dest.rows * dest.cols * dest.elt_bytes)

        def produce(t: Emitter):
            if not riding:
                parity = self._phase_parity(stage, t, flip=True)
                t.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(stage.empty, parity)))
                t.op(sm90.MBarrierArriveExpectTxOp(stage.full, nbytes))
            self._tma_boxes(t, window, dest, tmap, stage.full, shared)
        e.if_(self.is_thread0, produce).attributes[PRODUCER_ATTR] = UnitAttr()

    def _lower_CpCommitGroupOp(self, op: tile.CpCommitGroupOp, e: Emitter) -> None:
        self.outstanding.append(op)
        if op in self.ring_commits:
            return  # ring stages signal their own full barriers
        if op in self.phase_counters:  # a counted phase (control.py): this execution's count, then one more
            self.commit_phase[op] = self.phase_counters[op]
            self.phase_counters[op] = e.addi(self.phase_counters[op], e.index(1))
        if op in self.gather_commits:
            e.op(sm90.CpAsyncCommitGroupOp())  # every thread closes its own group
            return
        group = self.groups[op]

        def arrive(t: Emitter):
            if group.nbytes:
                t.op(sm90.MBarrierArriveExpectTxOp(group.barrier, group.nbytes))
            else:
                t.op(sm90.MBarrierArriveOp(group.barrier))
        e.if_(self.is_thread0, arrive)

    def _lower_CpWaitGroupOp(self, op: tile.CpWaitGroupOp, e: Emitter) -> None:
        pending = op.pending.value.data
        waited = self.outstanding[: len(self.outstanding) - pending] if pending else list(self.outstanding)
        self._wait_for(op, waited, e)
        self.outstanding = [c for c in self.outstanding if c not in waited]

    def _wait_for(self, op: Operation, commits: list, e: Emitter) -> None:
        """Every thread spins on the mbarrier of each group until the phase its copies complete is done."""
        gathers = [c for c in self.outstanding if c in self.gather_commits]
        if any(c in self.gather_commits for c in commits):
            # cp.async groups are per thread and complete in order: leave pending those committed after the
            # last one waited for; then make the copies visible to wgmma (the generic proxy wrote them).
            last = max(gathers.index(c) for c in commits if c in self.gather_commits)
            e.op(sm90.CpAsyncWaitGroupOp(len(gathers) - 1 - last))
            e.op(sm90.FenceProxyAsyncOp())
        for commit in commits:
            if commit in self.ring_commits or commit in self.gather_commits:
                continue  # waited for at the stage's first read, on its full barrier, or just above
            group = self.groups[commit]
            parity = self._parity(op, commit, group, e)
            e.spin_until(lambda t: t.op(sm90.MBarrierTryWaitParityOp(group.barrier, parity)))

    def _parity(self, wait: Operation, commit: Operation, group: Group, e: Emitter) -> SSAValue:
        """The parity of the barrier phase that the execution of `commit` being waited for completes."""
        if group.loop is None:
            return e.index(0)
        info = next((l for l in self.loops if l.op is group.loop), None)
        if info is None:
            refuse(wait, "waiting after a loop for copies committed inside it is not supported")
        if commit not in self.committed_this_trip:
            refuse(wait, "waits for copies committed in an earlier loop trip need pipeline-loops (not supported yet)")
        return e.op(arith.AndIOp(info.trip, e.index(1)))
