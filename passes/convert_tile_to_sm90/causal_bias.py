"""convert-tile-to-sm90, the causal bias (`mask-causal-by-mma`): tile.causal_bias_table, written once per block,
and tile.causal_bias, four k16 wgmmas per warpgroup that add the causal mask to the score accumulator.

The table ([2 (M + N) - 8, 8] bf16, 16-byte rows, unswizzled: `tile_causal_bias.table_rows`) is the K-major B operand
of no swizzle with LBO = SBO = 128 bytes: element (c, k) of a descriptor starting at byte s lies at
s + (c / 8) 128 + (c % 8) 16 + (k / 8) 128 + (k % 8) 2 = s + 16 (c + 8 (k / 8)) + 2 (k % 8)
(`tessera.sm90.descriptor.canonical_layout_offset`), so K chunk j of column c is the 16-byte table row c + 8 j
past the start: a window of consecutive rows. Slice p of warpgroup w starts at table row
`window_row(0, 0, e, origin) = origin - 8 - e`, e = `window_offset(D, w, p, M, N)` (D = q0 + seq_k - seq_q - k0
clamped once to [-M, N - 1], then 64 w + 16 p: one descriptor a trip, the other slices 256 bytes apart); its A
(registers, `a[i]` per the PTX ISA's m64nNk16 A fragment: rows g, g + 8, k 2t, 2t + 8 of warp p's rows) holds a
one at (row 8 + i, k i) and (row i, k 8 + i): in thread (g, t) of warp p, registers a1 and a2 hold 1.0 where
g = 2t (low half) or g = 2t + 1 (high half), a0 and a3 zero; the other warps' A of slice p is zero.

    table write (entry block):  every thread stores 16-byte rows tid, tid + T, ... (x = row - origin: element i
                                -H where x > i); fence.proxy.async; bar.sync 0, T
    causal bias (masked trip):  wgmma.fence; 4 x wgmma.m64nNk16.f32.bf16.bf16 {S}, {0, a_p, a_p, 0}, desc_p;
                                commit (an accumulate branch's group: control.py)
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import IndexType, IntegerAttr, i32

from tessera.dialects import sm90, tile
from tessera.dialects import tile_causal_bias as causal_bias
from tessera.lowering.emitter import Emitter
from tessera.sm90 import facts
from tessera.passes.convert_tile_to_sm90.common import PendingMma, SharedTile, refuse

ROW_BYTES = facts.SWIZZLE_CHUNK_BYTES
"""One table row: a 16-byte core-matrix row."""

LAYOUT_STRIDE = 8 * ROW_BYTES
"""LBO = SBO: the next 8 columns and the next K chunk are both 8 rows further (the module docstring)."""

BF16_ONE = 0x3F80
"""1.0 in bf16."""

TABLE_ALIGNMENT = 128
"""The table's alignment: 16 would do (the descriptor's unit); 128 keeps its rows off a swizzled tile's lines."""


class CausalBiasLowering:
    """The causal bias handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _alloc_causal_table(self, op: tile.AllocSharedOp, e: Emitter) -> None:
        rows, cols = op.result.type.get_shape()
        address = self._alloc(e, op.result.name_hint or "causal_table", rows * ROW_BYTES, TABLE_ALIGNMENT, 0)
        self.values[op.result] = SharedTile(address, rows, cols, 2, swizzle=0)

    def _lower_CausalBiasTableOp(self, op: tile.CausalBiasTableOp, e: Emitter) -> None:
        t = self._get(op.table)
        if not isinstance(t, SharedTile) or t.swizzle:
            refuse(op, "the causal bias table is an unswizzled shared tile of 16-byte rows")
        origin = op.origin
        lanes = ROW_BYTES // 4
        hidden_word, zero = e.splat(i32, causal_bias.CAUSAL_BIAS_BF16, lanes), e.splat(i32, 0, lanes)
        hidden_high = e.splat(i32, causal_bias.CAUSAL_BIAS_BF16 << 16, lanes)
        for start in range(0, t.rows, self.threads):
            row = e.addi(self.tid, e.index(start))
            x = e.broadcast(e.op(arith.SubiOp(row, e.index(origin))), lanes)
            low = e.select(e.setp("gt", x, e.dense(IndexType(), [2 * w for w in range(lanes)])), hidden_word, zero)
            high = e.select(e.setp("gt", x, e.dense(IndexType(), [2 * w + 1 for w in range(lanes)])), hidden_high, zero)
            words = e.addi(low, high)  # disjoint halves: the sum is the two bf16s packed
            offset = e.op(arith.IndexCastOp(e.muli(row, e.index(ROW_BYTES)), i32))
            base = e.op(arith.AddiOp(t.address, offset))
            addresses = e.addi(e.broadcast(base, lanes), e.dense(i32, [4 * w for w in range(lanes)]))
            store = lambda s, a=addresses, v=words: s.op(sm90.StSharedOp(a, v))
            if start + self.threads > t.rows:
                e.if_(e.cmpi(row, e.index(t.rows), "slt"), store)
            else:
                store(e)
        self._publish_table(e)

    def _publish_table(self, e: Emitter) -> None:
        """The table's stores (generic proxy) before any warpgroup's wgmma reads it (async proxy): a proxy
        fence, then a barrier of every thread (`tessera.sm90.memory_model.PROXY_FENCE`, `BARRIER_ORDERING`)."""
        e.op(sm90.FenceProxyAsyncOp())
        e.op(sm90.BarSyncOp(0, self.threads))

    def _lower_CausalBiasOp(self, op: tile.CausalBiasOp, e: Emitter) -> None:
        """One wgmma group: the four slices of this warpgroup (the module docstring), chained on the score
        accumulator in flight (an accumulate branch) or on its registers."""
        acc = self.values[op.acc] if op in self.accumulating else self._get(op.acc)
        t = self._get(op.table)
        if not isinstance(t, SharedTile):
            refuse(op, "the causal bias table must be in shared memory")
        rows, keys = op.acc.type.get_shape()
        d = e.op(arith.SubiOp(e.addi(self._get(op.q_start), self._get(op.seq_k)),
                              e.addi(self._get(op.seq_q), self._get(op.k_start))))
        d = e.op(arith.MinSIOp(e.op(arith.MaxSIOp(d, e.index(-rows))), e.index(keys - 1)))
        warpgroup = e.op(arith.IndexCastOp(self.warpgroup, IndexType()))
        slices = facts.WARPS_PER_WARPGROUP
        last = e.addi(d, e.addi(e.muli(warpgroup, e.index(causal_bias.WARPGROUP_ROWS)),
                                e.index(causal_bias.WARP_ROWS * (slices - 1))))  # e of the last slice: the lowest row
        start_row = e.op(arith.SubiOp(e.index(causal_bias.window_row(0, 0, 0, causal_bias.table_origin(t.rows))),
                                      last))
        start = e.op(arith.AddiOp(t.address, e.op(arith.IndexCastOp(e.muli(start_row, e.index(ROW_BYTES)), i32))))
        last_slice = e.op(sm90.MakeDescriptorOp(start, LAYOUT_STRIDE, LAYOUT_STRIDE, 0))
        warp = e.op(arith.RemUIOp(e.op(arith.DivUIOp(self.tid, e.index(facts.WARP_SIZE))),
                                  e.index(facts.WARPS_PER_WARPGROUP)))
        lane = e.op(arith.RemUIOp(self.tid, e.index(facts.WARP_SIZE)))
        g, pair = e.op(arith.DivUIOp(lane, e.index(4))), e.muli(e.op(arith.RemUIOp(lane, e.index(4))), e.index(2))
        i32_const = lambda v: e.op(arith.ConstantOp(IntegerAttr(v, i32)))
        zero = i32_const(0)
        ones = e.addi(e.select(e.cmpi(g, pair, "eq"), i32_const(BF16_ONE), zero),
                      e.select(e.cmpi(g, e.addi(pair, e.index(1)), "eq"), i32_const(BF16_ONE << 16), zero))
        zeros = e.splat(i32, 0, 4)
        operands = []
        for p in range(slices):
            # slice p's e is 16 (slices - 1 - p) below the last's: its window starts that many rows further
            further = causal_bias.WARP_ROWS * ROW_BYTES * (slices - 1 - p)
            descriptor = e.op(sm90.DescriptorAdvanceOp(last_slice, further)) if further else last_slice
            a = e.select(e.cmpi(warp, e.index(p), "eq"), ones, zero)
            operands.append((e.shuffle(zeros, [0, 4, 5, 3], e.broadcast(a, 2)), descriptor))
        e.op(sm90.WgmmaFenceOp())  # after the A registers are written (the PTX ISA's fence rule)
        for registers, descriptor in operands:
            acc = e.op(sm90.WgmmaMmaAsyncOp(acc, registers, descriptor, keys, "bf16", 0, 0))
        e.op(sm90.WgmmaCommitGroupOp())
        self._set(op.result, acc)
        self.pending.append(PendingMma(op.result, [t]))
