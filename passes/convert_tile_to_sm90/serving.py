"""convert-tile-to-sm90, serving: the ops of packed (varlen) and paged attention, `tile.load_index` (one
element of an i32 table, read by every thread), `tile.store_global_rows` (a store that stops at a row) and
`tile.cp_async_gather` (a key block's rows through a page table, with `cp.async`).

The gather, as FlashAttention-3's producer does it for pages smaller than a key block: G threads (the
producer warpgroup's 128 for a ring stage, every thread of the block for a plain tile) copy an [R, C] tile
of 16-bit elements in 16-byte chunks, K = C x elt / 16 chunks per row. Thread g takes chunk g mod K of rows
g / K + i floor(G / K) (i = 0 .. ceil(R / floor(G / K)) - 1): a warp reads whole rows (coalesced), and the
thread's chunk column, its table lookups and shared addresses differ only by constants between its rows. Where
K does not divide G (rows of 12 or 24 chunks: head_dim 96 or 192 in 16 bits) the threads past the last whole
row of chunks copy nothing, and the last round skips the rows past R. For each row t = start + r it reads the
page number table[lead..., t / P] (`ld.global`, masked off past `end`) and issues

    cp.async.cg.shared.global [swizzle(dest + box x R x W + r x W + (chunk mod W / 16) x 16)],
                              [cache + 16 x ((page x P + t - slot x P, indices...) x K + chunk)],
                              16, (t < end ? 16 : 0)

with slot = t / P, W the tile's swizzle span (128 or 64 bytes: its boxes' rows) and box = chunk / (W / 16);
the chunk number is formed in 32 bits and widened once (`GATHER_CHUNK_LIMIT`).

(a row past `end` reads nothing and lands as zeros). The shared address applies the tile's swizzle with
`facts.swizzle_bits`, the same swizzle TMA and wgmma see. Completion:
- into a ring stage (pipelined): the producer threads (`tid < 128`, an scf.if marked `sm90.producer` and
  `sm90.producer_warpgroup`) wait for the slot's empty barrier, gather, and end with
  `cp.async.mbarrier.arrive.noinc` on the slot's full barrier, whose init count is then 128 (the ring is
  in `gather_rings`); consumers wait on the full barrier as for TMA, then `fence.proxy.async` (cp.async
  writes through the generic proxy, wgmma reads through the async one);
- into a plain tile: every thread gathers; the group's commit is `cp.async.commit_group`, its wait
  `cp.async.wait_group N` then `fence.proxy.async` (the `tile.barrier` that follows publishes the tile).
Refused by name: a gather that does not copy whole rows from column 0, a row of more chunks than threads, an
unswizzled tile, a source or table that is not a kernel argument."""

from __future__ import annotations

from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import IndexType, IntegerAttr, UnitAttr, i1, i32
from xdsl.ir import Block, SSAValue

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import element_type_bytes
from tessera.passes.convert_tile_to_sm90.common import (
    INVARIANT_ATTR,
    PRODUCER_ATTR,
    PRODUCER_WARPGROUP_ATTR,
    SharedTile,
    constant_int,
    refuse,
)
from tessera.sm90 import facts

CHUNK = facts.CP_ASYNC_CG_BYTES

GATHER_CHUNK_LIMIT = 2**31
"""The gather numbers the 16-byte chunks of a cache in 32-bit registers: a cache of at most 2^31 chunks (32
GiB per K or V tensor) is addressed right; `attention_with_kvcache` refuses a larger one."""


class ServingLowering:
    """The serving handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _lower_LoadIndexOp(self, op: tile.LoadIndexOp, e: Emitter) -> None:
        """Every thread loads the same 4 bytes (a broadcast the L1 cache serves once per warp) with
        `ld.global.b32`: address = table + 4 x (row-major flat index), then converts it to an index."""
        if not isinstance(op.source.owner, Block):
            refuse(op, "tile.load_index must read a kernel argument")
        arg = op.source.index
        indices = [self._get(i) for i in op.indices]
        dims = [self._dim_value(arg, d, e) for d in range(len(indices))]
        flat = e.i64(0)
        for index, dim in zip(indices, dims):
            flat = e.addi(e.muli(flat, e.to_i64(dim)), e.to_i64(index))
        base = e.addi(self.entry_args[self.pointer_args[arg]], e.muli(flat, e.i64(4)))
        word = e.op(sm90.LdGlobalOp(base, e.dense(i32, [0]), e.dense(i1, [1]), vector.VectorType(i32, [1])))
        word.owner.attributes[INVARIANT_ATTR] = UnitAttr()  # an input: the producer warpgroup may read it too
        scalar = e.op(vector.ExtractOp(word, [0], i32))
        self._set(op.result, e.op(arith.IndexCastOp(scalar, IndexType())))

    def _lower_StoreGlobalRowsOp(self, op: tile.StoreGlobalRowsOp, e: Emitter) -> None:
        """`tile.store_global`'s predicated `st.global`s (a column tile's, e.g. the LSE, by one lane of each
        quad), with the row bound min(tensor rows, row0 + rows)."""
        window = self._get(op.dest)
        if len(window.shape) == 1:  # a row vector into a 1-D window: the rows from its first
            row_end = e.addi(window.indices[-1], self._get(op.rows))
            self._store_row_vector(op, window, op.value.type, self._get(op.value), e, row_end=row_end)
            return
        row_end = e.addi(window.indices[-2], self._get(op.rows))
        self._store_window(op, window, op.value.type, self._get(op.value), e, row_end=row_end)

    # region the row gather (module docstring)
    def _lower_CpAsyncGatherOp(self, op: tile.CpAsyncGatherOp, e: Emitter) -> None:
        """A plain tile: every thread gathers (its group's commit and wait complete it). A ring stage: the
        first warpgroup waits for the slot's release, gathers, and arrives (noinc) on its full barrier."""
        dest = self._get(op.dest)
        self._retire_readers(dest.address, e)
        if dest.stage is None:
            self._gather_rows(op, dest, e, self.threads, self.tid)
            return
        stage = dest.stage

        def produce(t: Emitter):
            parity = self._phase_parity(stage, t, flip=True)
            t.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(stage.empty, parity)))
            lane = t.op(arith.RemUIOp(self.tid, t.index(facts.WARPGROUP_SIZE)))
            self._gather_rows(op, dest, t, facts.WARPGROUP_SIZE, lane)
            t.op(sm90.CpAsyncMBarrierArriveNoIncOp(stage.full))
        producers = e.cmpi(self.tid, e.index(facts.WARPGROUP_SIZE), "ult")
        guard = e.if_(producers, produce)
        guard.attributes[PRODUCER_ATTR] = UnitAttr()
        guard.attributes[PRODUCER_WARPGROUP_ATTR] = UnitAttr()

    def _gather_rows(self, op: tile.CpAsyncGatherOp, dest: SharedTile, e: Emitter, threads: int,
                     lane: SSAValue) -> None:
        """The cp.asyncs of `threads` threads (this one is `lane`) copying the rows of `op` into `dest`."""
        if not all(isinstance(v.owner, Block) for v in (op.source, op.table)):
            refuse(op, "a gather reads a kernel argument through a table argument")
        if not dest.swizzle:
            refuse(op, "a gather fills swizzled shared tiles only (boxes of 32-, 64- or 128-byte rows)")
        source, table = op.source.index, op.table.index
        shape = self._arg_tile(source).get_shape()
        elt = element_type_bytes(self._arg_tile(source).element_type)
        if constant_int(op.indices[-1]) != 0 or dest.cols != shape[-1]:
            refuse(op, f"a gather copies whole rows: the window must start at column 0 and take all "
                        f"{shape[-1]} columns of the source, got {dest.cols}")
        per_row = dest.cols * elt // CHUNK
        if (dest.cols * elt) % CHUNK or per_row > threads:
            refuse(op, f"a gather of [{dest.rows}, {dest.cols}] x {elt} bytes in {CHUNK}-byte chunks needs rows of "
                        f"whole chunks, at most {threads} of them")
        stride = threads // per_row
        # When K does not divide G, the threads past the last whole row of chunks copy nothing; when the rows
        # a round covers do not divide R, the last round's rows past R are skipped (head_dim 96: K = 12).
        active = e.cmpi(lane, e.index(stride * per_row), "ult") if threads % per_row else None
        dims = [self._dim_value(source, d, e) for d in range(len(shape))]
        table_dims = [self._dim_value(table, d, e) for d in range(len(op.table_indices) + 1)]
        page_size = dims[1]
        # This thread's constant parts: its chunk column and first row, its block's first table element and
        # its first shared address; each row's source and table element follow from them.
        chunk = e.op(arith.RemUIOp(lane, e.index(per_row)))
        row0 = e.op(arith.DivUIOp(lane, e.index(per_row)))
        table_row = e.index(0)
        for index, dim in zip(op.table_indices, table_dims):
            table_row = e.addi(e.muli(table_row, dim), self._get(index))
        table_row = e.muli(table_row, table_dims[-1])
        cache, table_ptr = (self.entry_args[self.pointer_args[a]] for a in (source, table))
        span = dest.span  # the bytes of a row of one box
        chunks_per_line = span // CHUNK
        box = e.op(arith.DivUIOp(chunk, e.index(chunks_per_line)))
        in_line = e.op(arith.RemUIOp(chunk, e.index(chunks_per_line)))
        first = e.addi(e.addi(e.muli(box, e.index(dest.box_bytes)), e.muli(row0, e.index(span))),
                       e.muli(in_line, e.index(CHUNK)))
        first = e.op(arith.AddiOp(dest.address, e.op(arith.IndexCastOp(first, i32))))
        # Rows i stride apart are i stride span bytes apart; the swizzle sees the offset modulo its period only
        # (the tile starts on a period), so each residue is swizzled once.
        period = facts.swizzle_period_bytes(dest.swizzle)
        swizzled: dict[int, SSAValue] = {}
        start, end = self._get(op.start), self._get(op.end)
        row_base = e.addi(start, row0)
        for i in range(-(-dest.rows // stride)):
            offset = i * stride * span
            residue = offset % period
            if residue not in swizzled:
                at = e.op(arith.AddiOp(first, e.op(arith.ConstantOp(IntegerAttr(residue, i32)))))
                swizzled[residue] = self._swizzle(e, at, dest.swizzle)
            address = swizzled[residue]
            if offset - residue:
                address = e.op(arith.AddiOp(address, e.op(arith.ConstantOp(IntegerAttr(offset - residue, i32)))))
            t = e.addi(row_base, e.index(i * stride)) if i else row_base
            inside = e.cmpi(t, end, "slt")
            slot = e.op(arith.DivUIOp(t, page_size))
            in_page = e.op(arith.SubiOp(t, e.muli(slot, page_size)))
            entry = e.op(arith.IndexCastOp(e.muli(e.addi(table_row, slot), e.index(4)), i32))
            word = e.op(sm90.LdGlobalOp(table_ptr, e.broadcast(entry, 1), e.broadcast(inside, 1),
                                        vector.VectorType(i32, [1])))
            word.owner.attributes[INVARIANT_ATTR] = UnitAttr()
            page = e.op(arith.IndexCastOp(e.op(vector.ExtractOp(word, [0], i32)), IndexType()))
            row = e.addi(e.muli(page, page_size), in_page)
            for index, dim in zip(op.indices[:-1], dims[2:-1]):
                row = e.addi(e.muli(row, dim), self._get(index))
            chunk_number = e.addi(e.muli(row, e.index(per_row)), chunk)
            src = e.addi(cache, e.muli(e.to_i64(chunk_number), e.i64(CHUNK)))
            size = e.op(sm90.SelpOp(inside, e.op(arith.ConstantOp(IntegerAttr(CHUNK, i32))),
                                    e.op(arith.ConstantOp(IntegerAttr(0, i32)))))
            copies = active
            if (i + 1) * stride > dest.rows:
                below = e.cmpi(row0, e.index(dest.rows - i * stride), "ult")
                copies = below if copies is None else e.andi(copies, below)
            if copies is None:
                e.op(sm90.CpAsyncOp(address, src, size))
            else:
                e.if_(copies, lambda g, a=address, f=src, n=size: g.op(sm90.CpAsyncOp(a, f, n)))

    @staticmethod
    def _swizzle(e: Emitter, address: SSAValue, mode: int) -> SSAValue:
        """The `mode`-byte-swizzled shared address (`facts.swizzle_bits`) of a 32-bit address, at run time."""
        mask, line_shift, chunk_shift = facts.swizzle_bits(mode)

        def c(value: int) -> SSAValue:
            return e.op(arith.ConstantOp(IntegerAttr(value, i32)))
        # Shifts by constants as unsigned division and multiplication: PTX takes their immediates.
        line = e.op(arith.DivUIOp(address, c(1 << line_shift)))
        bits = e.op(arith.MuliOp(e.op(arith.AndIOp(line, c(mask))), c(1 << chunk_shift)))
        return e.op(arith.XOrIOp(address, bits))

    # endregion
