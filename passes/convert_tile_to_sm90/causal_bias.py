"""convert-tile-to-sm90, the causal bias (`mask-causal-by-mma`): tile.causal_bias_table, written once per block,
and tile.causal_bias, four k16 wgmmas per warpgroup that add the causal mask to the score accumulator.

The table ([2 (M + N) + 112, 8] bf16, 16-byte rows, unswizzled: `tile_causal_bias.table_rows`) is read as
K-major operands of no swizzle with LBO = SBO = 128 bytes: element (c, k) of a descriptor starting at byte s lies
at s + (c / 8) 128 + (c % 8) 16 + (k / 8) 128 + (k % 8) 2 = s + 16 (c + 8 (k / 8)) + 2 (k % 8)
(`tessera.sm90.descriptor.canonical_layout_offset`), so K chunk j of row or column c is the 16-byte table row
c + 8 j past the start: a window of consecutive rows. Slice p of warpgroup w reads B from table row
`window_row(0, 0, e, origin) = origin - 8 - e`, e = `window_offset(D, w, p, M, N)` (D = q0 + seq_k - seq_q - k0
clamped once to [-M, N - 1], then 64 w + 16 p: one descriptor a trip, the other slices 256 bytes apart), and A
(a permuted identity, the same in every trip) from row `a_window_row(p)` of the identity kept after the bias
rows: both operands in shared memory, no register to write, and each warp reads only its own rows of A.

    table write (entry block):  every thread stores 16-byte rows tid, tid + T, ... (`table_values`);
                                fence.proxy.async; bar.sync 0, T
    causal bias (masked trip):  wgmma.fence; 4 x wgmma.m64nNk16.f32.bf16.bf16 {S}, descA_p, descB_p;
                                commit (an accumulate branch's group: control.py)

An earlier form held A in registers (thread (g, t) of warp p: a1 and a2 one where g = 2t or 2t + 1, chosen by
a select per slice on the warp index): its selects cost the steady trip 5 SASS under ptxas 13.5 and the masked
one 18 (566/626 against 561/608).
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
"""1.0 in bf16 (A's ones)."""

TABLE_ALIGNMENT = 128
"""The table's alignment: 16 would do (the descriptor's unit); 128 keeps its rows off a swizzled tile's lines."""


class CausalBiasLowering:
    """The causal bias handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _alloc_causal_table(self, op: tile.AllocSharedOp, e: Emitter) -> None:
        rows, cols = op.result.type.get_shape()
        address = self._alloc(e, op.result.name_hint or "causal_table", rows * ROW_BYTES, TABLE_ALIGNMENT, 0)
        self.values[op.result] = SharedTile(address, rows, cols, 2, swizzle=0)

    def _lower_CausalBiasTableOp(self, op: tile.CausalBiasTableOp, e: Emitter) -> None:
        """Every thread writes whole 16-byte rows tid, tid + T, ... (`tile_causal_bias.table_values`): a bias
        window's row x = r - origin is -H in element i where x > i; A's row y = r - (bias rows + 56) is 1.0 in
        element y; then the table is published."""
        t = self._get(op.table)
        if not isinstance(t, SharedTile) or t.swizzle:
            refuse(op, "the causal bias table is an unswizzled shared tile of 16-byte rows")
        bias_rows = causal_bias.bias_rows(t.rows)
        lanes = ROW_BYTES // 4
        zero = e.splat(i32, 0, lanes)
        low_halves = [2 * w for w in range(lanes)]
        high_halves = [2 * w + 1 for w in range(lanes)]

        def words(hidden_low, hidden_high, value: int):
            """Each word's halves `value` where the predicates hold, +0 elsewhere (disjoint halves: a sum)."""
            return e.addi(e.select(hidden_low, e.splat(i32, value, lanes), zero),
                          e.select(hidden_high, e.splat(i32, value << 16, lanes), zero))

        for start in range(0, t.rows, self.threads):
            row = e.addi(self.tid, e.index(start))
            x = e.broadcast(e.op(arith.SubiOp(row, e.index(op.origin))), lanes)
            bias = words(e.setp("gt", x, e.dense(IndexType(), low_halves)),
                         e.setp("gt", x, e.dense(IndexType(), high_halves)), causal_bias.CAUSAL_BIAS_BF16)
            y = e.broadcast(e.op(arith.SubiOp(row, e.index(bias_rows + causal_bias.A_IDENTITY_ROW))), lanes)
            identity = words(e.setp("eq", y, e.dense(IndexType(), low_halves)),
                             e.setp("eq", y, e.dense(IndexType(), high_halves)), BF16_ONE)
            offset = e.op(arith.IndexCastOp(e.muli(row, e.index(ROW_BYTES)), i32))
            base = e.op(arith.AddiOp(t.address, offset))
            addresses = e.addi(e.broadcast(base, lanes), e.dense(i32, [4 * w for w in range(lanes)]))
            in_bias = e.cmpi(row, e.index(bias_rows), "slt")
            e.if_(in_bias, lambda s, a=addresses, v=bias: s.op(sm90.StSharedOp(a, v)))
            in_a = e.cmpi(row, e.index(bias_rows), "sge")
            if start + self.threads > t.rows:
                in_a = e.andi(in_a, e.cmpi(row, e.index(t.rows), "slt"))
            e.if_(in_a, lambda s, a=addresses, v=identity: s.op(sm90.StSharedOp(a, v)))
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
        a_start = e.op(arith.AddiOp(t.address, e.op(arith.ConstantOp(IntegerAttr(
            causal_bias.a_window_row(t.rows, slices - 1) * ROW_BYTES, i32)))))
        a_last = e.op(sm90.MakeDescriptorOp(a_start, LAYOUT_STRIDE, LAYOUT_STRIDE, 0))
        operands = []
        for p in range(slices):
            # slice p's e is 16 (slices - 1 - p) below the last's: its window starts that many rows further; its
            # A window starts as many rows further too (`a_window_row`)
            further = causal_bias.WARP_ROWS * ROW_BYTES * (slices - 1 - p)
            operands.append(tuple(e.op(sm90.DescriptorAdvanceOp(d, further)) if further else d
                                  for d in (a_last, last_slice)))
        e.op(sm90.WgmmaFenceOp())
        for a, b in operands:
            acc = e.op(sm90.WgmmaMmaAsyncOp(acc, a, b, keys, "bf16", 0, 0))
        e.op(sm90.WgmmaCommitGroupOp())
        self._set(op.result, acc)
        self.pending.append(PendingMma(op.result, [t]))
