"""convert-tile-to-sm90, tile.clear_rows: zero the rows of a shared key tile past the sequence's keys; and
tile.key_bias: write +0 to the rows of keys inside the limit and -inf to those past it (`mask-by-mma`'s bias).

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

tile.key_bias writes every row, the same way (no compare on the block: a masked trip runs it), each thread's
chunk +0 or -inf by its row, after a `bar.sync` of its own: the bias tile is not a stage, so no release orders
the last trip's bias mma of another warpgroup before these stores; each warpgroup retires its own bias mma
before it reaches the barrier (`_retire_readers`), so the barrier does.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, Float16Type, i32

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.sm90 import facts
from tessera.dialects.tile_base import tile_type
from tessera.passes.convert_tile_to_sm90.common import SharedTile, refuse

CHUNK_BYTES = facts.SWIZZLE_CHUNK_BYTES
"""The bytes one thread clears per row and round: one 16-byte chunk, which no swizzle splits."""

WORD_BYTES = 4
"""st.shared.b32 writes 4 bytes."""

NEG_INF_HALF = {BFloat16Type: 0xFF80, Float16Type: 0xFC00}
"""-inf in the 16-bit float types of a bias tile (`tile.key_bias`)."""


class ClearRowsLowering:
    """The tile.clear_rows handler of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _lower_ClearRowsOp(self, op: tile.ClearRowsOp, e: Emitter) -> None:
        t, chunks = self._row_chunks(op, "clears the rows of a swizzled shared tile (a plain tile or a ring stage)")
        self._await_stage(op.tile, t, e)
        self._retire_readers(t.address, e)
        kept = e.op(arith.SubiOp(self._get(op.seq_k), self._get(op.k_start)))  # rows below it are keys
        crosses = e.cmpi(kept, e.index(t.rows), "slt")
        e.if_(crosses, lambda c: self._write_rows(t, kept, chunks, c))

    def _lower_KeyBiasOp(self, op: tile.KeyBiasOp, e: Emitter) -> None:
        t, chunks = self._row_chunks(op, "writes the bias into a swizzled shared tile")
        self._retire_readers(t.address, e)
        e.op(sm90.BarSyncOp(0, self.threads))
        kept = e.op(arith.SubiOp(self._get(op.seq_k), self._get(op.k_start)))
        bits = NEG_INF_HALF[type(tile_type(op.tile).element_type)]
        self._write_rows(t, kept, chunks, e, past_word=bits << 16 | bits, kept_word=0)

    def _row_chunks(self, op: tile.ClearRowsOp | tile.KeyBiasOp, needs: str) -> tuple[SharedTile, int]:
        """The op's shared tile and the 16-byte chunks of one of its rows (over all boxes), refusing a tile that
        is not swizzled (`needs` says what the op does) or whose row has more chunks than the block threads."""
        t = self._get(op.tile)
        if not isinstance(t, SharedTile) or not t.swizzle:
            refuse(op, needs)
        chunks = t.boxes * t.span // CHUNK_BYTES
        if chunks > self.threads:
            refuse(op, f"a row of {chunks} 16-byte chunks is more than the block's {self.threads} threads")
        return t, chunks

    def _write_rows(self, t: SharedTile, kept, chunks: int, e: Emitter, past_word: int = 0,
                    kept_word: int | None = None) -> None:
        """Write `past_word` into every 32-bit word of rows `kept` .. rows - 1 of `t` and, unless it is None,
        `kept_word` into rows 0 .. kept - 1 (module docstring), then fence and barrier."""
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
        past_words = e.splat(i32, past_word, words)
        if kept_word is not None:
            past_scalar, kept_scalar = (e.op(arith.ConstantOp.from_int_and_width(w, i32))
                                        for w in (past_word, kept_word))
        active = None  # when C does not divide T, the threads past the last whole row of chunks store nothing
        if self.threads % chunks:  # (head_dim 96, bf16: 12 chunks a row, threads 252 .. 255 idle)
            active = e.cmpi(self.tid, e.index(per_round * chunks), "slt")
        for i in range(-(-t.rows // per_round)):
            row = e.addi(first_row, e.index(i * per_round))
            past = e.cmpi(row, kept, "sge")
            # the round's rows past the tile, and the idle threads, store nothing
            bound = e.cmpi(row, e.index(t.rows), "slt") if (i + 1) * per_round > t.rows else None
            start_bytes = lambda: e.op(arith.ConstantOp.from_int_and_width(i * per_round * t.span, i32))
            if kept_word is None:  # rows past the limit only
                if bound is not None:
                    past = e.andi(past, bound)
                if active is not None:
                    past = e.andi(past, active)
                start = e.op(arith.AddiOp(base, start_bytes()))
                addresses = e.addi(e.broadcast(start, words), e.dense(i32, [w * WORD_BYTES for w in range(words)]))
                e.if_(past, lambda s, a=addresses: s.op(sm90.StSharedOp(a, past_words)))
                continue
            inside = bound if active is None else active if bound is None else e.andi(bound, active)
            start = e.op(arith.AddiOp(base, start_bytes()))
            addresses = e.addi(e.broadcast(start, words), e.dense(i32, [w * WORD_BYTES for w in range(words)]))
            store = lambda s, a=addresses, p=past: s.op(sm90.StSharedOp(a, s.broadcast(
                s.select(p, past_scalar, kept_scalar), words)))
            if inside is None:
                store(e)
            else:
                e.if_(inside, store)
        e.op(sm90.FenceProxyAsyncOp())
        e.op(sm90.BarSyncOp(0, self.threads))
