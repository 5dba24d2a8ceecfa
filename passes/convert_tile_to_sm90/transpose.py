"""convert-tile-to-sm90, the in-kernel V transpose of FP8 attention (FlashAttention-3's producer transpose).

The 8-bit P.V wgmma takes both operands K-major, so a ring of V tiles [BN keys, d] (row-major, as V is in
global memory) that is the B operand of an 8-bit `tile.mma` with P in registers and without `transpose_b` is
lowered to two shared buffers of `slots` tiles each:

    staging   [BN, d] bytes, the Tile ring's swizzle S: what TMA writes (zero fill past the tensor's end)
    V^T       [d, BN] bytes, swizzle S' (the widest dividing BN bytes): what the wgmma reads, its keys in
              P8 key order by groups of 16 (`facts.P8_KEY_ORDER`), so that P's registers packed by
              `sm90.cvt_pack_fp8` need no permutation

and each refill of a slot is a producer-warpgroup refill (an scf.if on `tid < 128` marked `sm90.producer` and
`sm90.producer_warpgroup`: warp-specialize gives it to the 128 producer threads; without warp-specialize the
first consumer warpgroup runs it in place). With full[s]/empty[s] the ring's own barriers (of V^T) and
staging_full[s]/staging_empty[s] the staging slot's:

    lane 0:  wait staging_empty[s] (the previous transpose of s read it); arm staging_full[s] with BN d bytes;
             TMA V's [BN, d] box(es) into staging[s]
    all:     wait empty[s] (every consumer released V^T[s]); wait staging_full[s]
             ld.shared 4 words per 4 x 4 byte block; arrive staging_empty[s] after the last load (the staging
             slot goes back to TMA only after the transpose read it)
             8 prmt per block (`facts.TRANSPOSE_4X4_PRMT`); st.shared 4 words into V^T[s]
             fence.proxy.async (the generic-proxy stores become visible to wgmma's async proxy)
             arrive full[s]                          (its init count is the warpgroup's 128 arrivals)

A thread transposes `CHUNK_BLOCKS` blocks at a time (load, permute, store), so few registers stay live.

Block (g, c, nq) (a group of 16 keys, c in 0..3, four head_dim columns 4nq..4nq+3) reads V rows 16g + 2c +
`facts.P8_QUAD_KEYS` at columns 4nq.. and writes V^T rows 4nq + j at k-positions 16g + 4c..: thread `lane` of the
warpgroup takes c = lane % 4, q = (lane / 4) % 4, g = (lane / 16) % G (G = BN / 16) and nq = 4 nh + q with nh =
(lane / 16) / G + (8 / G) i for its blocks i = 0 .. BN d / 2048 - 1, so a warp's loads and stores each touch
at most two words per bank. Consumers wait on vtrans_full as on a TMA-filled slot. Refused by name: such a B
that is not a ring stage (a single-stage kernel: no producer to transpose), a ring refilled other than by TMA,
and shapes the thread mapping does not cover (BN in 32, 64, 128; BN d a multiple of 2048).
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import UnitAttr, VectorType, i32
from xdsl.ir import SSAValue

from tessera.dialects import sm90, tile
from tessera.ir.remarks import unpipelined_remark
from tessera.ir.walk import walk_ops
from tessera.dialects.tile_types import MemSpace, is_fp8
from tessera.lowering.emitter import Emitter
from tessera.passes.convert_tile_to_sm90.common import (
    PRODUCER_ATTR,
    PRODUCER_WARPGROUP_ATTR,
    SWIZZLES,
    Ring,
    SharedTile,
    Stage,
    Window,
    refuse,
)
from tessera.sm90 import facts

TRANSPOSE_KEYS = (32, 64, 128)
"""Key-block sizes the transpose's thread mapping covers (groups of 16 keys dividing a warp's 8 row groups, and
whole k32 slices of the P.V product)."""

BLOCK_BYTES = 16
"""One 4 x 4 byte block: four 32-bit words read, four written."""

CHUNK_BLOCKS = 2
"""Blocks a thread transposes at a time (eight words loaded, then written): the producer's registers stay few,
leaving the consumer warpgroups theirs (warp-specialize sizes both from the allocator's pressure)."""


def _transposed_swizzle(keys: int) -> int:
    """The widest swizzle whose rows divide a V^T row of `keys` bytes."""
    return max(s for s in SWIZZLES if keys % s == 0)


def _reads_v_rows(op) -> bool:
    """Whether `op` is an 8-bit `tile.mma` with A in registers (P) and B given row by row (V, no transpose_b)."""
    return (isinstance(op, tile.MmaOp) and is_fp8(op.a.type.element_type) and not op.transpose_b
            and not op.transpose_a and op.a.type.memory_space == MemSpace.REGISTER)


class TransposeLowering:
    """The V-transpose handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _plan_transposes(self) -> None:
        """Find the rings of V tiles the producer transposes (module docstring) and check their shapes."""
        for op in walk_ops(self.fn):
            if not _reads_v_rows(op):
                continue
            stage = op.b.owner
            if not isinstance(stage, tile.StageOp):
                refuse(op, "an 8-bit B given as V [keys, head_dim] (not V^T) is transposed in shared memory by the "
                            "producer of a pipelined ring: run pipeline-loops (the default pipeline does), or give V^T "
                            "in P8 key order (flash_attention(dtype='e4m3', v_transposed='p8'))"
                            + unpipelined_remark(op))
            ring = stage.source.owner
            if ring in self.transposed_rings:
                continue
            _, keys, cols = ring.result.type.get_shape()
            if keys not in TRANSPOSE_KEYS or (keys * cols) % (facts.WARPGROUP_SIZE * BLOCK_BYTES) or cols % 16:
                refuse(op, f"the in-kernel V transpose takes key blocks of {'/'.join(map(str, TRANSPOSE_KEYS))} keys "
                            f"of a multiple of 16 columns, [keys x columns] a multiple of 2048 bytes; got [{keys}, {cols}]")
            for use in ring.result.uses:
                if not isinstance(use.operation, tile.StageOp):
                    continue
                for user in use.operation.result.uses:
                    other = user.operation
                    if isinstance(other, tile.CpAsyncGatherOp):
                        refuse(other, "a ring the producer transposes is refilled by TMA only")
                    if isinstance(other, tile.MmaOp) and not (_reads_v_rows(other) and user.index == 1):
                        refuse(other, "a ring the producer transposes is read as the B operand of an 8-bit P.V "
                                       "product (P in registers, no transpose_b) only")
            self.transposed_rings[ring] = None

    def _alloc_transposed_ring(self, op: tile.AllocSharedOp, e: Emitter) -> None:
        """The staging ring (TMA's, [BN, d], the tile's swizzle) and the V^T ring ([d, BN]) the stages read."""
        slots, keys, cols = op.result.type.get_shape()
        swizzle = op.result.type.swizzle_bytes
        name = op.result.name_hint or "v_ring"
        staging = self._alloc(e, f"{name}_staging", slots * keys * cols, facts.swizzle_period_bytes(swizzle), swizzle)
        s_full, s_empty = self.staging_barriers[op]
        self.transposed_rings[op] = Ring(staging, slots, keys, cols, 1, s_full, s_empty, swizzle)
        vt_swizzle = _transposed_swizzle(keys)
        vt = self._alloc(e, f"{name}_vtrans", slots * keys * cols, facts.swizzle_period_bytes(vt_swizzle), vt_swizzle)
        full, empty = self.rings[op]
        self.values[op.result] = Ring(vt, slots, cols, keys, 1, full, empty, vt_swizzle)

    def _is_transposed_stage(self, value: SSAValue) -> bool:
        owner = value.owner
        return isinstance(owner, tile.StageOp) and owner.source.owner in self.transposed_rings

    def _fill_transposed_stage(self, op: tile.CpAsyncOp, window: Window, dest: SharedTile, e: Emitter) -> None:
        """The producer warpgroup's refill of a V^T slot through its staging slot (module docstring)."""
        ring_op = op.dest.owner.source.owner
        staging: Ring = self.transposed_rings[ring_op]
        stage = dest.stage
        tmap = self.entry_args[self.map_args[(window.arg, window.shape[0], staging.swizzle)]]

        def produce(t: Emitter):
            lane = t.op(arith.RemUIOp(self.tid, t.index(facts.WARPGROUP_SIZE)))
            s_stage = Stage(staging, stage.slot, stage.use, self._slot_barrier(t, staging.full, stage.slot),
                            self._slot_barrier(t, staging.empty, stage.slot), stage.earlier)
            offset = t.op(arith.IndexCastOp(t.muli(stage.slot, t.index(staging.slot_bytes)), i32))
            source = SharedTile(t.op(arith.AddiOp(staging.address, offset)), staging.rows, staging.cols, 1, s_stage,
                                staging.swizzle)

            def issue(u: Emitter):
                parity = self._phase_parity(s_stage, u, flip=True)
                u.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(s_stage.empty, parity)))
                u.op(sm90.MBarrierArriveExpectTxOp(s_stage.full, staging.slot_bytes))
                self._tma_boxes(u, window, source, tmap, s_stage.full)
            t.if_(t.cmpi(lane, t.index(0), "eq"), issue)
            released = self._phase_parity(stage, t, flip=True)
            t.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(stage.empty, released)))
            landed = self._phase_parity(s_stage, t, flip=False)
            t.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(s_stage.full, landed)))
            self._transpose_tile(t, lane, source, dest, s_stage.empty)
            t.op(sm90.FenceProxyAsyncOp())
            t.op(sm90.MBarrierArriveOp(stage.full))
        producers = e.cmpi(self.tid, e.index(facts.WARPGROUP_SIZE), "ult")
        guard = e.if_(producers, produce)
        guard.attributes[PRODUCER_ATTR] = UnitAttr()
        guard.attributes[PRODUCER_WARPGROUP_ATTR] = UnitAttr()

    def _transpose_tile(self, e: Emitter, lane: SSAValue, source: SharedTile, dest: SharedTile,
                        released: SSAValue) -> None:
        """This thread's blocks: V [BN, d] in `source` to V^T [d, BN] in `dest` in P8 key order; arrives on
        `released` once its loads are done."""
        keys, cols = source.rows, source.cols
        groups = keys // 16
        per_trip = 8 // groups                     # values of nh one i covers
        blocks = keys * cols // (facts.WARPGROUP_SIZE * BLOCK_BYTES)
        c = e.op(arith.RemUIOp(lane, e.index(4)))
        q = e.op(arith.RemUIOp(e.op(arith.DivUIOp(lane, e.index(4))), e.index(4)))
        rest = e.op(arith.DivUIOp(lane, e.index(16)))
        g = e.op(arith.RemUIOp(rest, e.index(groups)))
        nh = e.op(arith.DivUIOp(rest, e.index(groups)))
        key0 = e.addi(e.muli(g, e.index(16)), e.muli(c, e.index(2)))
        column0 = e.addi(e.muli(nh, e.index(16)), e.muli(q, e.index(4)))   # the first of 4 bytes of block 0
        step = 16 * per_trip                                               # its column bytes per block i
        s, sd = source.swizzle, dest.swizzle
        # The swizzles XOR a row's chunk bits with its row bits only (both tiles start on their swizzle period,
        # their boxes are whole periods): load (k, i) is at rowbase_k + (inner_i ^ xor_k) + box_i box bytes,
        # with rowbase_k and xor_k of this thread's four rows; store (j, i) at base_j + step i S', since V^T row
        # column0 + step i + j has the swizzle phase of row column0 + j (step is a multiple of 16 rows).
        rows = e.addi(e.broadcast(self._to_i32(e, e.muli(key0, e.index(s))), 4),
                      e.dense(i32, [k * s for k in facts.P8_QUAD_KEYS]))
        row_xor = self._swizzle_terms(e, rows, s, 4)
        row_base = e.addi(e.broadcast(source.address, 4), rows)
        position = e.addi(e.muli(g, e.index(16)), e.muli(c, e.index(4)))
        box = e.muli(e.op(arith.DivUIOp(position, e.index(sd))), e.index(dest.box_bytes))
        start = e.addi(e.addi(box, e.op(arith.RemUIOp(position, e.index(sd)))), e.muli(column0, e.index(sd)))
        start = e.op(arith.AddiOp(dest.address, self._to_i32(e, start)))
        store_base = self._swizzled(e, e.addi(e.broadcast(start, 4), e.dense(i32, [j * sd for j in range(4)])), sd, 4)
        column0 = self._to_i32(e, column0)
        (lo, hi), (even, odd) = facts.TRANSPOSE_4X4_PRMT
        for first in range(0, blocks, CHUNK_BLOCKS):  # a few blocks at a time: few registers live
            chunk = range(first, min(blocks, first + CHUNK_BLOCKS))
            n, lanes = len(chunk), 4 * len(chunk)
            # Loads: lane (k, i) reads row key0 + P8_QUAD_KEYS[k], column bytes column0 + step i (boxes of S bytes).
            columns = e.addi(e.broadcast(column0, n), e.dense(i32, [step * i for i in chunk]))
            per_lane = [i for _ in range(4) for i in range(n)]
            inner = e.shuffle(e.op(arith.RemUIOp(columns, e.splat(i32, s, n))), per_lane)
            loads = e.addi(e.shuffle(row_base, [k for k in range(4) for _ in range(n)]),
                           e.op(arith.XOrIOp(inner, e.shuffle(row_xor, [k for k in range(4) for _ in range(n)]))))
            if cols > s:  # V rows of several boxes
                boxes = e.op(arith.DivUIOp(columns, e.splat(i32, s, n)))
                loads = e.addi(loads, e.shuffle(e.muli(boxes, e.splat(i32, source.box_bytes, n)), per_lane))
            words = e.op(sm90.LdSharedOp(loads, VectorType(i32, [lanes])))
            if chunk[-1] == blocks - 1:
                e.op(sm90.MBarrierArriveOp(released))  # every read of the staging slot is done
            w = [e.shuffle(words, range(k * n, (k + 1) * n)) for k in range(4)]
            t = [e.op(sm90.PrmtOp(a, b, sel)) for a, b in ((w[0], w[1]), (w[2], w[3])) for sel in (lo, hi)]
            y = [e.op(sm90.PrmtOp(a, b, sel)) for a, b in ((t[0], t[2]), (t[1], t[3])) for sel in (even, odd)]
            values = e.shuffle(e.shuffle(y[0], range(2 * n), y[1]), range(lanes), e.shuffle(y[2], range(2 * n), y[3]))
            # Stores: lane (j, i) writes V^T row column0 + step i + j at k-positions 16g + 4c .. (boxes of S' bytes).
            stores = e.addi(e.shuffle(store_base, [j for j in range(4) for _ in chunk]),
                            e.dense(i32, [step * i * sd for _ in range(4) for i in chunk]))
            e.op(sm90.StSharedOp(stores, values))

    @staticmethod
    def _to_i32(e: Emitter, value: SSAValue) -> SSAValue:
        return e.op(arith.IndexCastOp(value, i32))

    @staticmethod
    def _swizzle_terms(e: Emitter, addresses: SSAValue, swizzle: int, lanes: int) -> SSAValue:
        """((A >> line shift) & mask) << chunk shift of i32 `addresses` A (`facts.swizzle_bits`): what the
        `swizzle`-byte swizzle XORs into A, register by register."""
        mask, line_shift, chunk_shift = facts.swizzle_bits(swizzle)
        line = e.op(arith.DivUIOp(addresses, e.splat(i32, 1 << line_shift, lanes)))
        return e.muli(e.andi(line, e.splat(i32, mask, lanes)), e.splat(i32, 1 << chunk_shift, lanes))

    @classmethod
    def _swizzled(cls, e: Emitter, addresses: SSAValue, swizzle: int, lanes: int) -> SSAValue:
        """The `swizzle`-byte swizzled shared addresses of i32 `addresses` (in a buffer starting on the
        swizzle's period), register by register."""
        return e.op(arith.XOrIOp(addresses, cls._swizzle_terms(e, addresses, swizzle, lanes)))
