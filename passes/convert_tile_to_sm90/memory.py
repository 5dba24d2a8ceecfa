"""convert-tile-to-sm90, memory: shared tiles and rings, copies (TMA), copy groups and their
mbarriers, block barriers, and global loads and stores of register tiles."""

from __future__ import annotations

import math

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import (
    Float32Type,
    IndexType,
    IntegerAttr,
    UnitAttr,
    VectorType,
    i32,
)
from xdsl.ir import Operation, SSAValue

from tessera.dialects import sm90, tile
from tessera.dialects.tile_types import TileType
from tessera.kernel_abi import rows_aligned
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import element_type_bytes
from tessera.sm90 import facts
from tessera.passes.convert_tile_to_sm90.common import (
    CORE_ROWS,
    CLUSTER_SHARED_ATTR,
    ROW_TILE_ROWS,
    SWIZZLES,
    PRODUCER_ATTR,
    constant_int,
    refuse,
    SharedTile,
    Ring,
    Stage,
    Window,
    Group,
    is_even,
    is_nonnegative,
    lead_in_range,
)


class MemoryLowering:
    """The Memory handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _element_address(self, e: Emitter, arg: int, indices, wide_dims, element_bytes: int) -> SSAValue:
        """The i64 byte address of element `indices` of global kernel argument `arg`: row-major over
        `wide_dims` (its dimensions as i64), `element_bytes` an element."""
        flat = e.i64(0)
        for index, dim in zip(indices, wide_dims):
            flat = e.addi(e.muli(flat, dim), e.to_i64(index))
        return e.addi(self.entry_args[self.pointer_args[arg]], e.muli(flat, e.i64(element_bytes)))

    def _lower_AllocSharedOp(self, op: tile.AllocSharedOp, e: Emitter) -> None:
        ty = op.result.type
        elt = element_type_bytes(ty.element_type)
        if ty.rank not in (2, 3):
            refuse(op, "shared tiles must be [rows, cols] or rings [stages, rows, cols]")
        *stages, rows, cols = ty.get_shape()
        swizzle = ty.swizzle_bytes
        if rows == ROW_TILE_ROWS:
            self._alloc_row_tile(op, e)
            return
        if swizzle not in SWIZZLES or (cols * elt) % swizzle:
            widths = "/".join(map(str, SWIZZLES))
            if (cols * elt) % SWIZZLES[0]:
                refuse(op, f"shared tiles need rows of a multiple of {SWIZZLES[0]} bytes (the narrowest swizzle, of "
                            f"{widths} bytes), got rows of {cols} x {elt} = {cols * elt} bytes: widen the tile")
            refuse(op, f"shared tiles need a {widths}-byte swizzle that divides their rows of {cols * elt} bytes, "
                        f"got swizzle {swizzle} (run assign-swizzle: it gives every tile the widest one)")
        if rows % CORE_ROWS:
            refuse(op, f"shared tiles must have a multiple of {CORE_ROWS} rows")
        if op in self.transposed_rings:  # V's ring: a staging ring and the V^T ring (transpose.py)
            self._alloc_transposed_ring(op, e)
            return
        size = rows * cols * elt
        slots = stages[0] if stages else 1
        address = self._alloc(e, op.result.name_hint or "smem", slots * size, facts.swizzle_period_bytes(swizzle),
                              swizzle)
        if stages:
            full, empty = self.rings[op]
            self.values[op.result] = Ring(address, slots, rows, cols, elt, full, empty, swizzle)
        else:
            self.values[op.result] = SharedTile(address, rows, cols, elt, swizzle=swizzle)

    def _alloc_row_tile(self, op: tile.AllocSharedOp, e: Emitter) -> None:
        """A one-row tile [1, N] (or a ring [S, 1, N]): unswizzled, each slot one TMA box of
        `TMA_SMEM_ALIGNMENT`-aligned bytes (N x element bytes must be a multiple of it)."""
        ty = op.result.type
        *stages, rows, cols = ty.get_shape()
        size = cols * element_type_bytes(ty.element_type)
        if ty.swizzle_bytes:
            refuse(op, f"a one-row shared tile is unswizzled (its rows are not a swizzle period), got swizzle "
                        f"{ty.swizzle_bytes} (run assign-swizzle)")
        if size % facts.TMA_SMEM_ALIGNMENT:
            refuse(op, f"a one-row shared tile holds a multiple of {facts.TMA_SMEM_ALIGNMENT} bytes (each is a TMA "
                        f"destination on that alignment), got {cols} x {element_type_bytes(ty.element_type)} = {size}")
        slots = stages[0] if stages else 1
        address = self._alloc(e, op.result.name_hint or "smem", slots * size, facts.TMA_SMEM_ALIGNMENT, 0)
        elt = element_type_bytes(ty.element_type)
        if stages:
            full, empty = self.rings[self.riding.family(op)]
            self.values[op.result] = Ring(address, slots, rows, cols, elt, full, empty, 0)
        else:
            self.values[op.result] = SharedTile(address, rows, cols, elt, swizzle=0)

    def _lower_StageOp(self, op: tile.StageOp, e: Emitter) -> None:
        ring = self._get(op.source)
        index = op.index.owner
        if not (isinstance(index, arith.RemUIOp) and constant_int(index.rhs) == ring.slots):
            refuse(op, f"a stage index must be `arith.remui %use, {ring.slots}` (the use number modulo the ring "
                        "size, as pipeline-loops writes it): the mbarrier parities come from the use number")
        slot, use = self._get(op.index), self._get(index.lhs)
        offset = e.op(arith.IndexCastOp(e.muli(slot, e.index(ring.slot_bytes)), i32))
        address = e.op(arith.AddiOp(ring.address, offset))
        stage = Stage(ring, slot, use, self._slot_barrier(e, ring.full, slot), self._slot_barrier(e, ring.empty, slot),
                      self._earlier_rounds(op, ring, slot, e))
        self.values[op.result] = SharedTile(address, ring.rows, ring.cols, ring.elt_bytes, stage, ring.swizzle)

    def _ring_loop(self, op: tile.StageOp) -> scf.ForOp | None:
        """The loop whose trips use the ring of `op`: the innermost loop around the ring's `tile.release`s
        (pipeline-loops releases every stage in the body of the loop it pipelined; its prologue's fills sit
        outside that loop)."""
        ring = op.source
        for use in ring.uses:
            stage = use.operation
            if isinstance(stage, tile.StageOp):
                for release in stage.result.uses:
                    if isinstance(release.operation, tile.ReleaseOp):
                        return self._enclosing_loop(release.operation)
        return None

    def _earlier_rounds(self, op: tile.StageOp, ring: Ring, slot: SSAValue, e: Emitter) -> SSAValue | None:
        """The phases the stage's barriers completed in earlier trips of the loops around the ring's loop, or
        None when that loop is outermost. A ring pipelined in a loop nested in others (the backward's query
        blocks inside its loop over the query heads of a GQA group) gets a prologue and uses 0 .. n-1 on every
        trip of the loops around it, so slot s completes c_s = ceil((n - s) / slots) phases per such trip, and
        G c_s before the trip with linear number G (`_linear_trip`); n must be the same on every trip."""
        ring_loop = self._ring_loop(op)
        outer = []
        loop = self._enclosing_loop(ring_loop) if ring_loop is not None else None
        while loop is not None:
            outer.insert(0, loop)
            loop = self._enclosing_loop(loop)
        if not outer:
            return None
        linear = self._linear_trip(op, outer, e)
        n = self._trip_count(op, ring_loop, outer[0], "a ring pipelined in a loop nest needs its loop's", e)
        per_trip = e.op(arith.DivUIOp(e.addi(e.op(arith.SubiOp(n, slot)), e.index(ring.slots - 1)), e.index(ring.slots)))
        return e.muli(linear, per_trip)

    def _trip_count(self, op: Operation, loop: scf.ForOp, outermost: Operation, what: str, e: Emitter) -> SSAValue:
        """ceildivsi(ub - lb, step) of `loop`, whose bounds must be defined outside `outermost` (the same on
        every trip of the nest); refused by name otherwise, the message starting with `what`."""
        for bound, value in (("lower bound", loop.lb), ("upper bound", loop.ub), ("step", loop.step)):
            owner = value.owner if isinstance(value.owner, Operation) else value.owner.parent_op()
            if outermost.is_ancestor(owner):
                refuse(op, f"{what} {bound} defined outside the nest (the barriers' phases count the trips of "
                            "every loop of it)")
        lb, ub, step = (self._get(v) for v in (loop.lb, loop.ub, loop.step))
        return e.op(arith.CeilDivSIOp(e.op(arith.SubiOp(ub, lb)), step))

    def _linear_trip(self, op: Operation, loops: list, e: Emitter) -> SSAValue:
        """The linear number ((trip_1 n_2 + trip_2) n_3 + ...) of the current trip of `loops` (outermost
        first, each enclosing the next; each n_i, the trip count of loop i, defined outside the first)."""
        infos = {info.op: info for info in self.loops}
        linear = infos[loops[0]].trip
        for loop in loops[1:]:
            count = self._trip_count(op, loop, loops[0], "a copy group waited in a loop nest needs the inner loop's", e)
            linear = e.addi(e.muli(linear, count), infos[loop].trip)
        return linear

    def _phase_parity(self, stage: Stage, e: Emitter, flip: bool) -> SSAValue:
        """(use / slots) & 1: the parity of the phase of the stage's barriers that use number `use` waits
        for (flipped for the empty barrier: a fill waits for the release of the previous trip), counting the
        phases of earlier trips of the loops around the ring's loop (`Stage.earlier`)."""
        trip = stage.use if stage.ring.slots == 1 else e.op(arith.DivUIOp(stage.use, e.index(stage.ring.slots)))
        if stage.earlier is not None:
            trip = e.addi(trip, stage.earlier)
        parity = e.op(arith.AndIOp(trip, e.index(1)))
        return e.op(arith.XOrIOp(parity, e.index(1))) if flip else parity

    def _await_stage(self, value: SSAValue, t: SharedTile, e: Emitter) -> None:
        """Every thread waits for the full barrier of a stage before its first read in this block (once for the
        stages of one use of a ring and the rings riding on it: one barrier, `riding_rings.py`)."""
        if t.stage is None:
            return
        key = (self.riding.family(value.owner.source.owner), t.stage.use, e.block)
        if key in self.waited_stages:
            return
        self.waited_stages.add(key)
        parity = self._phase_parity(t.stage, e, flip=False)
        e.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(t.stage.full, parity)))
        if self._gathered_ring(value):
            e.op(sm90.FenceProxyAsyncOp())  # the gather's cp.async wrote through the generic proxy

    def _gathered_ring(self, stage_value: SSAValue) -> bool:
        owner = stage_value.owner
        return isinstance(owner, tile.StageOp) and owner.source.owner in self.gather_rings

    def _lower_ReleaseOp(self, op: tile.ReleaseOp, e: Emitter) -> None:
        t = self._get(op.stage)
        self._retire_readers(t.address, e)
        if op not in self.riding.silent:  # a later release of its family arrives for both (riding_rings.py)
            e.op(sm90.MBarrierArriveOp(t.stage.empty))

    def _lower_ViewOp(self, op: tile.ViewOp, e: Emitter) -> None:
        source = self._get(op.source)
        if not (isinstance(source, tuple) and source[0] == "arg"):
            refuse(op, "views must be of kernel arguments")
        if op.result.type.rank not in (1, 2):
            refuse(op, "only 2-D windows (and 1-D ones for tile.load_broadcast) are supported")
        rank = op.result.type.rank
        dims = list(self.sig.args[source[1]].dims)
        lead = zip(op.indices[:-rank], dims[:-rank])
        self.values[op.result] = Window(source[1], [self._get(i) for i in op.indices], op.result.type.get_shape(),
                                        is_even(op.indices[-1]), op.in_bounds is not None,
                                        all(is_nonnegative(i) for i in op.indices[-2:]),
                                        all(lead_in_range(i, d, self.sig.grid) for i, d in lead))

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
        loads L = rows x cols / threads elements with `ld.global.u16` (zero outside the tensor) and stores them
        with `st.shared.b16` at their swizzled addresses, then `fence.proxy.async` makes them visible to wgmma
        (the `tile.barrier` that follows publishes them to the block). Thread t takes column c = t mod cols of
        rows g L .. g L + L - 1, g = t / cols: a warp reads 32 consecutive elements of a row (coalesced), and
        L is a multiple of the swizzle's 8-row period, so each register's swizzle term is a constant."""
        rows, cols, elt, threads = dest.rows, dest.cols, dest.elt_bytes, self.threads
        line = dest.swizzle  # the bytes of a row of a box
        period = facts.swizzle_period_bytes(line) // line
        if elt != 2 or threads % cols or (rows * cols) % threads or (rows * cols // threads) % period:
            refuse(op, f"a copy without TMA needs a 16-bit tile whose {cols} columns divide the block's {threads} "
                        f"threads into groups of a multiple of {period} rows each, got [{rows}, {cols}] x {elt} bytes")
        per_thread = rows * cols // threads
        *lead, row0, col0 = window.indices
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        column = e.op(arith.RemUIOp(self.tid, e.index(cols)))
        first_row = e.muli(e.op(arith.DivUIOp(self.tid, e.index(cols))), e.index(per_thread))
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
        e.op(sm90.FenceProxyAsyncOp())

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

    def _lower_BarrierOp(self, op: tile.BarrierOp, e: Emitter) -> None:
        """Reads before the barrier are done after it (another thread may write the tiles next): the tensor
        core's reads of shared operands included. With `mma-order=first-read` only those of tiles other than
        ring stages: a group reading registers and stages only stays in flight (a stage is refilled once every
        thread has released it, and `_lower_ReleaseOp` retires its readers first; `mma_order.py`)."""
        if self.mma_order == "first-read":
            plain = [p for p in self.pending if any(t.stage is None for t in p.reads)]
            if plain:
                self._retire(plain[-1].tile_value, e)
        else:
            self._retire_all(e)
        e.op(sm90.BarSyncOp(0, self.threads))

    def _window_access(self, op, window: Window, ty: TileType, e: Emitter,
                       row_end: SSAValue | None = None,
                       rows_only: bool = False,
                       per_element: bool = False) -> tuple[SSAValue, SSAValue, SSAValue, list[int]]:
        """The global address of this thread's first element, and the byte offsets from it, in-bounds mask and
        constant column bytes of each register of its share of an [BM, N] window: one per element, or per packed
        pair for 16-bit tiles. The offsets are row pitch x row only, computed once per distinct row and shuffled out;
        the columns go in the address immediates (`sm90.COLUMN_BYTES`), so that a thread's offsets take as many
        values (and registers) as it has rows. `row_end`, if
        given, is an absolute row before which the access stops even inside the tensor. `rows_only`: the
        caller knows every column is inside the tensor; offsets and mask are then computed for the thread's
        distinct rows and shuffled out to the registers (two registers live, not one per register).
        `per_element`: one register per element of a 16-bit tile too, not per packed pair. An 8-bit tile (stored
        only: `sm90.cvt_pack`'s byte pairs) is one register per pair as well. A window promised
        `in_bounds` (without `row_end`) takes an all-true mask: no compare, and unpredicated accesses."""
        half = element_type_bytes(ty.element_type) in (1, 2)  # f32 and i32 tiles hold one element per register
        if half and (ty.get_shape()[1] % 2 or self._is_column(ty)):
            refuse(op, f"{8 * element_type_bytes(ty.element_type)}-bit tiles in registers need an even number of columns")
        packed = half and not per_element
        *lead, row0, col0 = window.indices
        row_offsets, col_offsets = self._thread_offsets(op, ty, pairs=packed)
        row, col = self._origin(e, row0, col0, column=self._is_column(ty))
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        end = dims[-2] if row_end is None else e.op(arith.MinSIOp(dims[-2], row_end))
        end = self._lead_limit(e, window, dims, end)
        distinct = sorted(set(row_offsets))
        spread = [distinct.index(r) for r in row_offsets]
        if window.in_bounds and row_end is None:
            in_rows = in_cols = self._all_true(e, len(row_offsets))
        elif rows_only:
            in_rows = self._below(e, e.op(arith.SubiOp(end, row)), distinct)
            if not window.starts_inside:
                in_rows = e.andi(in_rows, self._not_before(e, row, distinct))
            in_rows = e.shuffle(in_rows, spread)
        else:
            in_rows = self._below(e, e.op(arith.SubiOp(end, row)), row_offsets)
            last = [c + 1 if packed else c for c in col_offsets]
            in_cols = self._below(e, e.op(arith.SubiOp(dims[-1], col)), last)
            if not window.starts_inside:
                in_rows = e.andi(in_rows, self._not_before(e, row, row_offsets))
                in_cols = e.andi(in_cols, self._not_before(e, col, col_offsets))
        # The thread's first element is at byte ((lead..., row) * C + col) * elt (i64, added to the pointer);
        # register i is (row_offset[i] * C + col_offset[i]) * elt bytes further (i32: within one tile).
        wide = [e.to_i64(d) for d in dims]
        elt = element_type_bytes(self._arg_tile(window.arg).element_type)
        base = self._element_address(e, window.arg, [*lead, row, col], wide, elt)
        lanes = len(row_offsets)
        pitch = e.op(arith.IndexCastOp(e.muli(dims[-1], e.index(elt)), i32))
        # One offset per distinct row, shuffled out to the registers: two registers live, not one per register
        # (a load in a loop keeps them live across it: the bias of attention).
        offsets = e.shuffle(e.muli(e.broadcast(pitch, len(distinct)), e.dense(i32, distinct)), spread)
        if rows_only or (window.in_bounds and row_end is None):
            return base, offsets, in_rows, [c * elt for c in col_offsets]
        return base, offsets, e.andi(in_rows, in_cols), [c * elt for c in col_offsets]

    def _lower_StoreGlobalOp(self, op: tile.StoreGlobalOp, e: Emitter) -> None:
        self._store_window(op, self._get(op.dest), op.value.type, self._get(op.value), e)

    def _words_aligned(self, window: Window, ty: TileType) -> bool:
        """Whether a register tile of type `ty` may move to or from `window` one 32-bit word per register:
        32-bit elements (f32, i32: one element per register), or 16-bit elements whose packed pairs start on
        their own size (an access must be aligned to its size [P#operand-addresses]): every row of the tensor
        does (its innermost size is even for every size the kernel accepts, `rows_aligned`) and so does the
        window's first column (`Window.even_column`; the fragment layouts put pairs at even columns from it)."""
        if element_type_bytes(ty.element_type) == 4:
            return True
        return window.even_column and rows_aligned(self.sig, window.arg, 2 * element_type_bytes(ty.element_type))

    def _store_window(self, op, window: Window, ty: TileType, value: SSAValue, e: Emitter,
                      row_end: SSAValue | None = None) -> None:
        """Each thread stores its registers of `value` (of type `ty`) into the window, masked by the tensor's
        bounds (and `row_end`): one `st.global.b32` per register where `_words_aligned`, otherwise (16-bit
        elements in rows that may start on any even byte) one `st.global.b16` per element, the packed pair
        (lo | hi << 16) split into its low half and hi = pair / 2^16. A column vector [1, N] writes the
        window's one row, from the threads of the tile's first row (`_column_vector_access`). An 8-bit tile
        (`sm90.cvt_pack`'s byte pairs, bits 15:0 of each register) is one `st.global.b16` per pair, in rows that
        start on even bytes only (refused by name otherwise)."""
        if element_type_bytes(ty.element_type) == 1:
            if self._is_column_vector(ty) or not self._words_aligned(window, ty):
                refuse(op, "an 8-bit register tile is stored in byte pairs at even addresses: its window must start "
                            "at an even column and the tensor's rows hold an even number of elements (a constant, "
                            "or a size promised even: tile.divisible = {N = 2})")
            base, offsets, mask, columns = self._window_access(op, window, ty, e, row_end=row_end)
            e.op(sm90.StGlobalB16Op(base, offsets, value, mask, columns))
            return
        if self._is_column_vector(ty):
            if row_end is not None:
                refuse(op, "a [1, N] register tile is stored with tile.store_global")
            base, offsets, mask, columns = self._column_vector_access(op, window, ty, e, writers=True)
            e.op(sm90.StGlobalOp(base, offsets, value, mask, columns))
            return
        if self._words_aligned(window, ty):
            base, offsets, mask, columns = self._window_access(op, window, ty, e, row_end=row_end)
            mask = self._column_writers(ty, mask, columns, e)
            e.op(sm90.StGlobalOp(base, offsets, value, mask, columns))
            return
        base, offsets, mask, columns = self._window_access(op, window, ty, e, row_end=row_end, per_element=True)
        mask = self._column_writers(ty, mask, columns, e)
        pairs = len(columns) // 2
        high = e.op(arith.DivUIOp(value, e.splat(i32, 1 << 16, pairs)))
        # element 2i is pair i's low half (st.b16 stores a register's low 16 bits), element 2i + 1 its high
        elements = e.shuffle(value, [i // 2 + (i % 2) * pairs for i in range(2 * pairs)], high)
        e.op(sm90.StGlobalB16Op(base, offsets, elements, mask, columns))

    def _column_writers(self, ty, mask, columns, e: Emitter):
        """The store mask of a tile of type `ty`: `mask` itself, or for a column tile ([BM, 1]) `mask` and
        only the lane whose column base is 0, since the lanes of a row's quad hold the same value. (A
        register-by-register compare: sm90.selp takes one condition per register, not a scalar one.)"""
        if not self._is_column(ty):
            return mask
        lanes = len(columns)
        first = e.setp("eq", e.broadcast(self.col_base, lanes), e.dense(IndexType(), [0] * lanes))
        return e.andi(mask, first)

    def _lower_LoadBroadcastOp(self, op: tile.LoadBroadcastOp, e: Emitter) -> None:
        """Each thread loads the window's elements at the distinct columns its registers lie on, once each
        (`AccumulatorLayout.distinct_columns`: n/4 registers for an [BM, n] tile, where a whole tile would
        hold n/2), masked by the tensor's bounds (out-of-bounds columns give 0, and so does every column of a
        window whose leading indices, the row of a 2-D tensor or a batch, lie outside the tensor; no mask for a
        window promised `in_bounds`); the tile is
        a shuffle of them, which costs no instruction and no register. The columns are the loads' address
        immediates."""
        window = self._get(op.source)
        ty = op.result.type
        if not (isinstance(ty.element_type, Float32Type) or ty.element_type == i32):
            refuse(op, f"only f32 and i32 rows can be broadcast, got {ty.element_type}")
        vector_type = self._vector_type(op, ty)
        if self._is_column(ty):  # [BM, 1]: one element, on both of the thread's rows
            columns, spread = [0], [0] * vector_type.get_shape()[0]
        elif self._is_column_vector(ty):  # [1, N]: held as the distinct columns themselves
            columns = self._layout(op, ty).distinct_columns[0]
            spread = list(range(len(columns)))
        elif _initializes_accumulators(op.result):
            # loaded into every register (each column twice): the tile becomes a wgmma accumulator, whose registers
            # the loaded ones then are (and, scaled first, in place), where a shuffle of n/4 registers would be
            # copied into n/2 others with both live at once (16 registers more at the backward's dP^T - dPsum)
            columns = self._layout(op, ty).col_offsets
            spread = list(range(len(columns)))
        else:
            columns, spread = self._layout(op, ty).distinct_columns
        if isinstance(window, SharedTile):
            loaded = self._broadcast_from_shared(op, window, columns, vector_type, e)
            self._set(op.result, loaded if spread == list(range(len(columns))) else e.shuffle(loaded, spread))
            return
        base, mask, column_bytes = self._one_row_access(window, ty, columns, e)
        loaded = e.op(sm90.LdGlobalOp(base, e.dense(i32, [0] * len(columns)), mask,
                                      VectorType(vector_type.element_type, [len(columns)]), column_bytes))
        self._set(op.result, loaded if spread == list(range(len(columns))) else e.shuffle(loaded, spread))

    def _one_row_access(self, window: Window, ty: TileType, columns: list[int], e: Emitter):
        """(base address, in-bounds mask, column bytes) of the thread's `columns` (offsets from its column
        base) of the one row of a window [lead..., col0] whose leading indices select the row (a 1-D window, or
        a [1, N] window of a 2-D tensor): every thread reads the same row. Out-of-bounds columns, and every
        column of a row outside the tensor, are masked (no mask for a window promised `in_bounds`). An [BM, 1]
        column takes the window's one element whatever the thread's column."""
        *lead, col0 = window.indices
        col = col0 if self._is_column(ty) else e.addi(col0, self.col_base)
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        mask = self._all_true(e, len(columns)) if window.in_bounds else self._below(e, e.op(arith.SubiOp(dims[-1], col)), columns)
        if not (window.in_bounds or window.starts_inside):
            mask = e.andi(mask, self._not_before(e, col, columns))
        flat = e.i64(0)
        for index, dim in zip(lead, dims):
            flat = e.addi(e.muli(flat, e.to_i64(dim)), e.to_i64(index))
            if not window.in_bounds:
                mask = e.andi(mask, e.broadcast(e.cmpi(index, dim, "ult"), len(columns)))
        first = e.addi(e.muli(flat, e.to_i64(dims[-1])), e.to_i64(col))
        elt = element_type_bytes(ty.element_type)
        base = e.addi(self.entry_args[self.pointer_args[window.arg]], e.muli(first, e.i64(elt)))
        return base, mask, [c * elt for c in columns]

    def _column_vector_access(self, op, window: Window, ty: TileType, e: Emitter, writers: bool = False):
        """(base, offsets, mask, column bytes) of a [1, N] register tile (a column vector: the thread's distinct
        columns, `_is_column_vector`) moved to or from a [1, N] window of a 2-D tensor: the window's one row, not
        the thread's rows. `writers`: only the threads of the tile's first row write (the lanes of one quad
        hold every column once; the other rows hold the same values again)."""
        if len(window.shape) != 2 or window.shape[0] != 1:
            refuse(op, f"a [1, N] register tile moves to or from a [1, N] window, got {list(window.shape)}")
        columns = self._layout(op, ty).distinct_columns[0]
        base, mask, column_bytes = self._one_row_access(window, ty, columns, e)
        if writers:
            first_row = e.setp("eq", self.row_base, e.index(0))
            mask = e.andi(mask, e.broadcast(first_row, len(columns)))
        return base, e.dense(i32, [0] * len(columns)), mask, column_bytes

    def _broadcast_from_shared(self, op: tile.LoadBroadcastOp, row: SharedTile, columns: list[int], vector_type,
                               e: Emitter) -> SSAValue:
        """The thread's `columns` (offsets from its column base) of a one-row shared tile (`ROW_TILE_ROWS`,
        unswizzled): one `ld.shared.b32` each at the thread's first column, the offsets immediates; a ring stage
        is waited for first (its full barrier), like every first read of a stage."""
        if row.rows != ROW_TILE_ROWS or row.swizzle:
            refuse(op, "a shared row is broadcast from an unswizzled one-row tile [1, N]")
        self._await_stage(op.source, row, e)
        first = e.op(arith.IndexCastOp(e.muli(self.col_base, e.index(row.elt_bytes)), i32))
        first = e.op(arith.AddiOp(row.address, first))
        # each slot of a one-row tile is TMA_SMEM_ALIGNMENT-aligned (_alloc_row_tile) and the thread's first column
        # a multiple of the column terms' multipliers: the printer pairs the columns into ld.shared.v2 with that
        col_step = math.gcd(*(multiplier for _, _, multiplier in facts.ACCUMULATOR_THREAD_TERMS["col"]))
        aligned = math.gcd(facts.TMA_SMEM_ALIGNMENT, col_step * row.elt_bytes)
        return e.op(sm90.LdSharedOp(first, VectorType(vector_type.element_type, [len(columns)]),
                                    [c * row.elt_bytes for c in columns], aligned=aligned))

    def _lower_LoadOp(self, op: tile.LoadOp, e: Emitter) -> None:
        """Each thread loads its registers of the window, masked by the tensor's bounds (0 outside): f32 tiles
        and 16-bit tiles whose rows start on 4 bytes (`rows_aligned`) one 32-bit word per register (a packed
        pair), other 16-bit tiles one `ld.global.u16` per element, whose pairs are then packed (lo | hi << 16)
        into the registers a word load gives: a pair at an odd element of a row is not 4-byte aligned."""
        window = self._get(op.source)
        if not isinstance(window, Window):
            refuse(op, "loads from shared memory are not supported")
        ty = op.result.type
        if self._is_column_vector(ty):  # the window's one row: load_broadcast's access
            base, offsets, mask, columns = self._column_vector_access(op, window, ty, e)
            self._set(op.result, e.op(sm90.LdGlobalOp(base, offsets, mask, self._vector_type(op, ty), columns)))
            return
        if not self._words_aligned(window, ty):
            base, offsets, mask, columns = self._window_access(op, window, ty, e, per_element=True)
            elements = e.op(sm90.LdGlobalU16Op(base, offsets, mask, len(columns), columns))
            pairs = len(columns) // 2
            low = e.shuffle(elements, range(0, 2 * pairs, 2))
            high = e.shuffle(elements, range(1, 2 * pairs, 2))
            # high << 16 as high x 2^16 (high < 2^16): a multiply takes its constant as an immediate, where a
            # vector of shift amounts would hold a register per lane
            shifted = e.muli(high, e.splat(i32, 1 << 16, pairs))
            self._set(op.result, e.op(arith.OrIOp(low, shifted)))
            return
        base, offsets, mask, columns = self._window_access(op, window, ty, e)
        value = e.op(sm90.LdGlobalOp(base, offsets, mask, self._vector_type(op, ty), columns))
        self._set(op.result, value)


def _initializes_accumulators(value: SSAValue) -> bool:
    """Whether every use of `value` is the accumulator of a `tile.mma`, directly or through a `tile.scale` whose
    every use is."""
    uses = [use.operation for use in value.uses]
    if not uses:
        return False
    for user in uses:
        if isinstance(user, tile.ScaleOp):
            if not _initializes_accumulators(user.result):
                return False
        elif not (isinstance(user, tile.MmaOp) and user.acc is value):
            return False
    return True
