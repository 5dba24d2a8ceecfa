"""convert-tile-to-sm90, tile.clear_rows: zero the rows of a shared key tile past the sequence's keys.

    if k0 + R > seq_k:                                   // block-uniform: only a key block that crosses seq_k
        for each round i:                                // the block's T threads clear T / C rows a round
            if row(t, i) >= seq_k - k0:  st.shared.b32 x 4 of zeros at the thread's 16 bytes of that row
        fence.proxy.async.shared::cta                    // the zeros, written by the generic proxy, for wgmma
        bar.sync 0, T                                    // every thread's zeros before any warpgroup's P.V mma

A row of a shared tile is, in each of its boxes, one swizzle span of consecutive bytes (the swizzle permutes
16-byte chunks only within the span), so zeroing whole rows needs no swizzle arithmetic: thread t takes
chunk t mod C (C = the row's 16-byte chunks over all boxes) of rows t / C + i floor(T / C). The copy that filled
the tile has landed (its stage's full barrier is waited for first, as for any first read); wgmma groups in
flight stay so (the branch touches no register they write, and the tile is not one they read: a stage is
cleared before its own P.V mma). The fence and the barrier order the generic stores before the tensor core's
async-proxy reads, and, through the release of the stage, before the next TMA into it
(`tessera.sm90.memory_model.PROXY_FENCE`, `BARRIER_ORDERING`). Trips whose key block ends at or before seq_k pay one
compare and one uniform branch. When C does not divide T (rows of 12 or 24 chunks: head_dim 96 or 192 in 16
bits), T - (T / C) C threads store nothing.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import i32

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.sm90 import facts
from tessera.passes.convert_tile_to_sm90.common import SharedTile, refuse

CHUNK_BYTES = facts.SWIZZLE_CHUNK_BYTES
"""The bytes one thread clears per row and round: one 16-byte chunk, which no swizzle splits."""

WORD_BYTES = 4
"""st.shared.b32 writes 4 bytes."""


class ClearRowsLowering:
    """The tile.clear_rows handler of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _lower_ClearRowsOp(self, op: tile.ClearRowsOp, e: Emitter) -> None:
        t = self._get(op.tile)
        if not isinstance(t, SharedTile) or not t.swizzle:
            refuse(op, "clears the rows of a swizzled shared tile (a plain tile or a ring stage)")
        chunks = t.boxes * t.span // CHUNK_BYTES
        if chunks > self.threads:
            refuse(op, f"a row of {chunks} 16-byte chunks is more than the block's {self.threads} threads")
        self._await_stage(op.tile, t, e)
        self._retire_readers(t.address, e)
        kept = e.op(arith.SubiOp(self._get(op.seq_k), self._get(op.k_start)))  # rows below it are keys
        crosses = e.cmpi(kept, e.index(t.rows), "slt")
        e.if_(crosses, lambda c: self._clear_rows_from(t, kept, chunks, c))

    def _clear_rows_from(self, t: SharedTile, kept, chunks: int, e: Emitter) -> None:
        """Zero rows `kept` .. rows - 1 of `t` (module docstring), then fence and barrier."""
        per_round = self.threads // chunks
        chunk = e.op(arith.RemUIOp(self.tid, e.index(chunks)))
        first_row = e.op(arith.DivUIOp(self.tid, e.index(chunks)))
        per_box = t.span // CHUNK_BYTES
        offset = e.muli(first_row, e.index(t.span))
        if t.boxes == 1:
            offset = e.addi(offset, e.muli(chunk, e.index(CHUNK_BYTES)))
        else:
            box = e.op(arith.DivUIOp(chunk, e.index(per_box)))
            within = e.muli(e.op(arith.RemUIOp(chunk, e.index(per_box))), e.index(CHUNK_BYTES))
            offset = e.addi(e.addi(e.muli(box, e.index(t.box_bytes)), offset), within)
        base = e.op(arith.AddiOp(t.address, e.op(arith.IndexCastOp(offset, i32))))
        words = CHUNK_BYTES // WORD_BYTES
        zeros = e.splat(i32, 0, words)
        active = None  # when C does not divide T, the threads past the last whole row of chunks store nothing
        if self.threads % chunks:  # (head_dim 96, bf16: 12 chunks a row, threads 252 .. 255 idle)
            active = e.cmpi(self.tid, e.index(per_round * chunks), "slt")
        for i in range(-(-t.rows // per_round)):
            row = e.addi(first_row, e.index(i * per_round))
            past = e.cmpi(row, kept, "sge")
            if (i + 1) * per_round > t.rows:
                past = e.andi(past, e.cmpi(row, e.index(t.rows), "slt"))
            if active is not None:
                past = e.andi(past, active)
            start = e.op(arith.AddiOp(base, e.op(arith.ConstantOp.from_int_and_width(i * per_round * t.span, i32))))
            addresses = e.addi(e.broadcast(start, words), e.dense(i32, [w * WORD_BYTES for w in range(words)]))
            e.if_(past, lambda s, a=addresses: s.op(sm90.StSharedOp(a, zeros)))
        e.op(sm90.FenceProxyAsyncOp())
        e.op(sm90.BarSyncOp(0, self.threads))
