"""convert-tile-to-sm90, shared tiles: `tile.alloc_shared` (plain tiles, rings, one-row tiles), ring stages
(`tile.stage`, `tile.release`) and the phases of their full and empty mbarriers (counting the trips of the loops
around a ring's loop), and the block barrier `tile.barrier`. The copies that fill them are `copies.py`."""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import i32
from xdsl.ir import Operation, SSAValue

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import element_type_bytes
from tessera.sm90 import facts
from tessera.passes.convert_tile_to_sm90.common import (
    CORE_ROWS,
    ROW_TILE_ROWS,
    SWIZZLES,
    constant_int,
    refuse,
    SharedTile,
    Ring,
    Stage,
)


class SharedTileLowering:
    """The shared-tile handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _lower_AllocSharedOp(self, op: tile.AllocSharedOp, e: Emitter) -> None:
        ty = op.result.type
        elt = element_type_bytes(ty.element_type)
        if ty.rank not in (2, 3):
            refuse(op, "shared tiles must be [rows, cols] or rings [stages, rows, cols]")
        *stages, rows, cols = ty.get_shape()
        swizzle = ty.swizzle_bytes
        if any(isinstance(use.operation, tile.CausalBiasTableOp) for use in op.result.uses):
            self._alloc_causal_table(op, e)  # 16-byte unswizzled rows (causal_bias.py)
            return
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

    def _await_stages_before_branch(self, op: Operation, e: Emitter, branches: list) -> None:
        """The ring stages a branch of scf.if `op` reads first and its block releases after it: waited for before
        the branch (and not again in `branches`, the new branches' blocks), so that a path that skips the read
        (a block-sparse K step) does not release a stage whose fill may still be landing, which the producer
        would refill under it."""
        released = {r.stage for r in op.parent_block().ops if isinstance(r, tile.ReleaseOp)}
        read = [v for inner in op.walk() if inner is not op for v in inner.operands
                if v in released and isinstance(v.owner, tile.StageOp)]
        for value in dict.fromkeys(read):
            t = self._get(value)
            if t.stage is None:
                continue
            self._await_stage(value, t, e)
            family = self.riding.family(value.owner.source.owner)
            self.waited_stages.update((family, t.stage.use, block) for block in branches)

    def _gathered_ring(self, stage_value: SSAValue) -> bool:
        owner = stage_value.owner
        return isinstance(owner, tile.StageOp) and owner.source.owner in self.gather_rings

    def _lower_ReleaseOp(self, op: tile.ReleaseOp, e: Emitter) -> None:
        """Retire the stage's readers and arrive on its empty barrier. A stage that nothing reads (K's, where a
        score_mod ignores the score and the score's product is dead) is waited for first, as a read would be:
        else its TMA fill is never waited on, the slot is refilled while it may still be written, and the CTA
        can end with the copy in flight."""
        t = self._get(op.stage)
        if all(isinstance(use.operation, tile.ReleaseOp) for use in op.stage.uses):
            self._await_stage(op.stage, t, e)
        self._retire_readers(t.address, e)
        if op not in self.riding.silent:  # a later release of its family arrives for both (riding_rings.py)
            e.op(sm90.MBarrierArriveOp(t.stage.empty))

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
