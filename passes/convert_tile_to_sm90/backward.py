"""convert-tile-to-sm90, the attention backward's ops (`tessera.dialects.tile_backward`): register tiles stored
into swizzled shared tiles, reducing stores into global memory, the base-2 exponential with a row maximum,
row subtraction, and 1-D row windows (LSE2, dPsum) loaded and stored per row.

- `tile.store_shared` (P and dS, read afterwards as transposed wgmma A operands): each thread stores its
  packed bf16/f16 pairs with `st.shared.b32` at the 128B-swizzled address of the pair (`_swizzled_pairs`), or
  (`STORE_SHARED_MODES`, the pass option `store-shared=stmatrix`) each warp one `stmatrix.x4` per 16-column
  slab (`_stmatrix_slabs`), then `fence.proxy.async` (the wgmma reads shared memory through the async proxy); the `tile.barrier` that
  the builder puts before the reading mma orders the other warps' stores before it.
- `tile.atomic_add` of an f32 row vector [BM] into a 1-D window: one `red.global.add.f32` per row of the
  thread, from the lane of each quad whose column base is 0 (the others hold the same value);
- `tile.atomic_add` of an f32 register tile into a 2-D global window, two ways (`ATOMIC_ADD_MODES`, the pass
  option `atomic-add`, whose default "auto" takes "bulk" for an add the producer can issue and "red" for the
  others: `reduction_slots.py`):
    "red"  one `red.global.add.f32` per register and row in bounds;
    "bulk" FlashAttention-3's: in a pipelined kernel, into a window of whole rows, the producer adds it
           (`reduction_slots.py`: a two-slot staging ring with full and empty mbarriers, one
           `cp.reduce.async.bulk` of the whole window per trip). Elsewhere the tile is staged in an f32 shared
           buffer (row-major, unswizzled), fenced for
           the async proxy and published with bar.sync; thread r < BM then adds row r (if it is inside the
           tensor) with one `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32` of D x 4 bytes,
           commits and waits with `.read` (only that the staging buffer has been read: the adds themselves
           land asynchronously, and no one reads the target before the kernel ends).
- `tile.exp2_subtract`: ex2(x - m), m = -inf read as 0; a `Scaled` x folds its factor into one fma.
- `tile.sub_rows`: x - m broadcast along the rows.
- `tile.load`/`tile.store_global` of a 1-D [BM] window of a [.., seq] tensor: each thread's two rows, masked
  by the length; on a store, only the lane of each quad whose column base is 0 writes.
- `tile.cast` of a 16-bit register tile to f32: `sm90.cvt_unpack` of its packed pairs.
- `tile.sem_wait`/`tile.sem_signal` (the deterministic backward, FlashAttention-3's semaphores): the wait is
  thread 0 spinning on `sm90.sem_try_wait` (ld.acquire.gpu) until the count is the expected one, then a CTA
  barrier; the signal is a CTA barrier (bulk mode: `bulk_wait_group 0` first), then thread 0's `sm90.sem_signal`
  (red.release.gpu.add 1).
Register tiles must all have the block's rows (`_block_rows`), so the main kernel needs block_m == block_n.
"""

from __future__ import annotations

from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import BFloat16Type, Float32Type, IntegerAttr, VectorType, f32, i32
from xdsl.ir import Block, SSAValue

from tessera.dialects import sm90, tile
from tessera.dialects import sm90_reductions as reductions
from tessera.dialects.tile_types import is_half
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import ROWS_PER_THREAD, AccumulatorLayout, element_type_bytes
from tessera.passes.convert_tile_to_sm90.common import (
    CORE_ROWS, LINE, RoundOnStore, Scaled, SharedTile, Window, refuse,
)
from tessera.passes.convert_tile_to_sm90.small_tiles import pack_pairs, unpack_pairs
from tessera.sm90 import facts
from tessera.sm90 import matrix as matrix_facts

ATOMIC_ADD_MODES = ("auto", "red", "bulk")
"""How `tile.atomic_add` is lowered: per-register `red.global.add.f32`, a bulk reduction from shared memory, or
"auto" (the default): the bulk reduction where the producer issues it, the shorter there (`reduction_slots.py`: an
add in a pipelined kernel without semaphores, into a window of whole rows, whose staging fits in shared memory;
the default pipeline lowers it again with `red` where the registers do not fit, `tessera.lowering.fallback`),
`red` elsewhere (bulk from the consumers, which meet at a bar.sync and wait for the read, is the slower:
bench/backward_sass.py)."""

STORE_SHARED_MODES = ("stmatrix", "st_shared")
"""How `tile.store_shared` is lowered: `stmatrix.x4` per 16-column slab, or one `st.shared.b32` per pair."""

STMATRIX_COLUMNS = 16
"""Columns of one stmatrix.x4 slab of an accumulator-layout tile: two 8x8 matrices across, two down."""


F32_BYTES = 4
SEMAPHORE_BYTES = 4
"""A semaphore is one i32 word."""


class BackwardLowering:
    """The backward's handlers of `KernelLowering` (a mixin listed before the others: it takes over the 1-D
    windows of `tile.load`/`tile.store_global`, 16-bit to f32 casts, and the trailing wait of a backward
    kernel, and hands everything else to them)."""

    atomic_add_mode: str = "auto"
    store_shared_mode: str = "st_shared"

    # -- shared stores ----------------------------------------------------------------------------------------
    def _swizzled_pairs(self, op, t: SharedTile, ty, e: Emitter) -> list[tuple[SSAValue, int]]:
        """(base, constant bytes) of the shared address of each packed pair of this thread's share of an [BM, N] 16-bit tile stored in
        `t` (boxes of 128-byte rows, 128B swizzle on absolute addresses: the 16-byte chunk c of row r is
        stored at chunk c ^ (r mod 8)). Row r of a pair is row_base + row_offset, and row_base mod 8 is the
        same for all of a thread's rows (its offsets are multiples of 8), so the swizzled chunk takes one XOR
        per distinct chunk (at most 8 per thread); each pair's address is then one add of a constant
        (scalars, so that no vector of addresses stays live). Where the thread's address of chunk 0 has its
        chunk bits (4-6) from the swizzle alone (the tile aligned to its swizzle period, the thread's column
        bytes under one chunk), chunk c's is that address XOR 16 c: one instruction each, from a value the loop
        holds anyway (ptxas 13.5 otherwise rematerializes each swizzled chunk in the loop, with the constant 7 of
        its mask: 17 SASS instructions of the d128 keys-on-rows trip)."""
        rows, cols = self._thread_offsets(op, ty, pairs=True)
        if any(r % CORE_ROWS for r in rows):
            refuse(op, "the rows of a thread's registers must be a multiple of the swizzle atom apart")
        chunk_bytes = facts.SWIZZLE_CHUNK_BYTES
        placed = []
        for r, c in zip(rows, cols):
            byte = (c % t.box_cols) * t.elt_bytes
            if byte % chunk_bytes:
                refuse(op, "packed pairs must start 16-byte chunks apart")
            placed.append((byte // chunk_bytes, (c // t.box_cols) * t.box_bytes + r * LINE))
        row_in_atom = e.op(arith.IndexCastOp(e.op(arith.RemUIOp(self.row_base, e.index(CORE_ROWS))), i32))
        row_bytes = e.op(arith.MuliOp(e.op(arith.IndexCastOp(self.row_base, i32)), self._i32(e, LINE)))
        col_bytes = e.op(arith.MuliOp(e.op(arith.IndexCastOp(self.col_base, i32)), self._i32(e, t.elt_bytes)))
        thread = e.op(arith.AddiOp(e.op(arith.AddiOp(t.address, row_bytes)), col_bytes))
        bases = {}
        if self._chunk_bits_free(t):
            first = e.op(arith.AddiOp(thread, e.op(arith.MuliOp(row_in_atom, self._i32(e, chunk_bytes)))))
            for chunk in sorted({k for k, _ in placed}):
                bases[chunk] = e.op(arith.XOrIOp(first, self._i32(e, chunk * chunk_bytes))) if chunk else first
            return [(bases[k], constant) for k, constant in placed]
        for chunk in sorted({k for k, _ in placed}):
            swizzled = e.op(arith.XOrIOp(row_in_atom, self._i32(e, chunk)))
            bases[chunk] = e.op(arith.AddiOp(thread, e.op(arith.MuliOp(swizzled, self._i32(e, chunk_bytes)))))
        return [(bases[k], constant) for k, constant in placed]

    @staticmethod
    def _chunk_bits_free(t: SharedTile) -> bool:
        """Whether a thread's address in `t` before its swizzled chunk is added (tile address + row_base rows +
        col_base columns) has zero chunk bits: `t` (a whole tile) is allocated on its swizzle period, a row spans
        whole sets of the 8 chunks, and the largest first column of a thread
        (`facts.ACCUMULATOR_THREAD_TERMS`) stays inside one chunk."""
        last_col = sum((modulus - 1) * multiplier for _, modulus, multiplier in facts.ACCUMULATOR_THREAD_TERMS["col"]
                       if modulus)
        owner = t.address.owner
        return (t.stage is None and isinstance(owner, sm90.SharedBufferOp)
                and owner.alignment.value.data % facts.swizzle_period_bytes(t.swizzle) == 0
                and LINE % (facts.SWIZZLE_CHUNK_BYTES * CORE_ROWS) == 0
                and (last_col + 1) * t.elt_bytes <= facts.SWIZZLE_CHUNK_BYTES)

    @staticmethod
    def _i32(e: Emitter, value: int) -> SSAValue:
        return e.op(arith.ConstantOp(IntegerAttr(value, i32)))

    @staticmethod
    def _packed(e: Emitter, values, first: int, count: int) -> SSAValue:
        """Packed registers first .. first + count - 1 of a 16-bit register tile (`values`, or a `RoundOnStore`
        f32 tile, whose pairs are rounded and packed here: register i packs f32 registers 2i and 2i + 1)."""
        if isinstance(values, RoundOnStore):
            pairs = e.shuffle(values.source, list(range(2 * first, 2 * (first + count))))
            return e.op(sm90.CvtPackOp(pairs, values.half))
        return e.shuffle(values, list(range(first, first + count)))

    def _store_words(self, e: Emitter, addresses: list[tuple[SSAValue, int]], values) -> None:
        """st.shared.b32 of register i of `values` (a vector, or a `RoundOnStore` tile packed a register at a
        time) at addresses[i] = (base, constant bytes): one scalar add and store each, so that each address
        lives for one store."""
        for i, (base, constant) in enumerate(addresses):
            address = e.op(arith.AddiOp(base, self._i32(e, constant))) if constant else base
            word = self._packed(e, values, i, 1) if isinstance(values, RoundOnStore) else values
            e.op(sm90.StSharedOp(address, e.op(vector.ExtractOp(word, [0 if word is not values else i],
                                                                word.type.element_type))))

    def _lower_StoreSharedOp(self, op: tile.StoreSharedOp, e: Emitter) -> None:
        t = self._get(op.dest)
        ty = op.value.type
        if not isinstance(t, SharedTile) or t.stage is not None:
            refuse(op, "the destination must be a whole shared tile (not a ring stage)")
        if t.swizzle != LINE:
            refuse(op, f"register tiles are stored into 128B-swizzled shared tiles only (rows of a multiple of "
                        f"{LINE} bytes), got a {t.swizzle}B swizzle")
        if isinstance(ty.element_type, Float32Type):
            refuse(op, "only 16-bit register tiles are stored to shared memory (round with tile.cast first)")
        self._retire_readers(t.address, e)  # a wgmma of the previous trip may still read the tile
        if self.store_shared_mode == "stmatrix" and ty.get_shape()[1] % STMATRIX_COLUMNS == 0:
            self._stmatrix_slabs(op, t, e)
        else:
            self._store_words(e, self._swizzled_pairs(op, t, ty, e), self._get(op.value))
        e.op(sm90.FenceProxyAsyncOp())

    def _stmatrix_slabs(self, op: tile.StoreSharedOp, t: SharedTile, e: Emitter) -> None:
        """One `stmatrix.x4` per 16-column slab s of the warp's 16 rows: packed registers 4s .. 4s+3 are its
        matrices j = 0..3 (`tessera.sm90.matrix.accumulator_stmatrix_block`: rows 8 (j mod 2), columns 16 s +
        8 (j / 2)). Lane l addresses row l mod 8 of matrix l / 8. A matrix row is one 16-byte chunk of a
        128-byte line: chunk c of row r is stored at c ^ (r mod 8). The chunk of slab s and matrix j is
        c_s + j / 2 with c_s even, so its swizzled chunk is c_s ^ x with x = (j / 2) ^ r for the lane: one XOR
        per distinct c_s (at most 4), then one add per slab."""
        values = self._get(op.value)
        matrices = matrix_facts.STMATRIX_COUNTS[-1]
        words = values.source.type.get_shape()[0] // 2 if isinstance(values, RoundOnStore) else values.type.get_shape()[0]
        slabs = words // matrices
        lane = e.op(arith.RemUIOp(self.tid, e.index(facts.WARP_SIZE)))
        matrix = e.op(arith.DivUIOp(lane, e.index(matrix_facts.MATRIX_ROWS)))
        row_in_matrix = e.op(arith.RemUIOp(lane, e.index(matrix_facts.MATRIX_ROWS)))
        warp_row = e.op(arith.SubiOp(self.row_base, e.op(arith.RemUIOp(self.row_base, e.index(CORE_ROWS)))))
        first_rows = [matrix_facts.accumulator_stmatrix_block(j, 0)[0] for j in range(matrices)]
        half_chunks = [matrix_facts.accumulator_stmatrix_block(j, 0)[1] * t.elt_bytes // facts.SWIZZLE_CHUNK_BYTES
                       for j in range(matrices)]
        if first_rows != [matrix_facts.MATRIX_ROWS * (j % 2) for j in range(matrices)] or half_chunks != [0, 0, 1, 1]:
            refuse(op, "stmatrix slabs need the accumulator's 8-row, 8-column matrices (16-bit elements)")
        row = e.addi(e.addi(warp_row, e.muli(e.op(arith.RemUIOp(matrix, e.index(2))), e.index(matrix_facts.MATRIX_ROWS))),
                     row_in_matrix)
        x = e.op(arith.IndexCastOp(e.op(arith.XOrIOp(e.op(arith.DivUIOp(matrix, e.index(2))), row_in_matrix)), i32))
        start = e.op(arith.AddiOp(t.address, e.op(arith.IndexCastOp(e.muli(row, e.index(LINE)), i32))))
        swizzled = {}
        for s in range(slabs):
            column = matrix_facts.accumulator_stmatrix_block(0, s)[1]
            chunk = (column % t.box_cols) * t.elt_bytes // facts.SWIZZLE_CHUNK_BYTES
            if chunk not in swizzled:
                xor = e.op(arith.XOrIOp(x, self._i32(e, chunk)))
                swizzled[chunk] = e.op(arith.AddiOp(start, e.op(arith.MuliOp(xor, self._i32(e, facts.SWIZZLE_CHUNK_BYTES)))))
            box = (column // t.box_cols) * t.box_bytes
            address = e.op(arith.AddiOp(swizzled[chunk], self._i32(e, box))) if box else swizzled[chunk]
            e.op(reductions.StMatrixOp(address, self._packed(e, values, matrices * s, matrices)))

    # -- reducing stores --------------------------------------------------------------------------------------
    def _lower_ScatterAddOp(self, op: tile.ScatterAddOp, e: Emitter) -> None:
        """One predicated `red.global.add.f32` per register of the value, at the table element its coordinates
        name (`_table_access`, as `tile.gather` reads one), none where they fall outside the table. Only a full
        2-D tile, whose every element one thread holds: a row vector, an [BM, 1] column or a [1, N] column vector
        is held by several threads, which would each add it."""
        ty = op.value.type
        if not isinstance(op.table.owner, Block):
            refuse(op, "tile.scatter_add must add into a kernel argument")
        if ty.rank != 2 or self._is_column(ty) or self._is_column_vector(ty):
            refuse(op, f"tile.scatter_add adds a full 2-D register tile (each element held by one thread), got "
                       f"{list(ty.get_shape())}")
        base, offsets, inside = self._table_access(op, op.table.index, op.indices, ty, e)
        e.op(reductions.RedGlobalAddOp(base, offsets, self._get(op.value), inside))

    def _lower_AtomicAddOp(self, op: tile.AtomicAddOp, e: Emitter) -> None:
        window = self._get(op.dest)
        ty = op.value.type
        register = ty.memory_space.value == "register"
        if isinstance(window, Window) and register and self._is_column_vector(ty) and op.transpose is None:
            # the window's one row (a [1, N] window, or a 1-D one): each column once, from the tile's first row
            base, offsets, mask, columns = self._column_vector_access(op, window, ty, e, writers=True)
            e.op(reductions.RedGlobalAddOp(base, offsets, self._get(op.value), mask, columns))
            return
        if isinstance(window, Window) and len(window.shape) == 1 and register:
            # a row vector [BM] into a 1-D window: each row once, from the lane of its quad whose column base
            # is 0 (the four lanes of a quad hold the same value, as for tile.store_global of a row vector)
            base, offsets, mask = self._row_window_access(op, window, e)
            first = e.setp("eq", self.col_base, e.index(0))
            mask = e.andi(mask, e.broadcast(first, ROWS_PER_THREAD))
            e.op(reductions.RedGlobalAddOp(base, offsets, self._get(op.value), mask))
            return
        if not isinstance(window, Window) or len(window.shape) != 2 or not register:
            refuse(op, "only f32 register tiles are added into a global window (a row vector or a [1, N] column "
                       "vector into a 1-D one)")
        if (self.atomic_add_mode == "bulk" and not self._is_column(ty)) or op in self.reduction_slots:
            self._bulk_add(op, window, e)
            return
        if op.transpose is not None:
            base, offsets, mask, columns = self._transposed_access(op, window, ty, e)
        else:
            base, offsets, mask, columns = self._row_access(op, window, ty, e)
            mask = self._column_writers(ty, mask, columns, e)  # an [BM, 1] column: each row once
        e.op(reductions.RedGlobalAddOp(base, offsets, self._get(op.value), mask, columns))

    def _transposed_access(self, op, window: Window, ty, e: Emitter):
        """(base, offsets, mask, column bytes) of a transposed add: register i of the thread's share of the
        [C, R] value (value row r_i, column c_i) lands on window element (c_i, r_i), byte (c_i W + r_i) 4 from the
        window's corner, W the window tensor's row length. The window's first column must be a constant 0 and
        W a constant at least the value's rows (dq_accum's head_dim): every value row then lies inside the
        tensor, the whole offset is an address immediate, and the mask is the window row (value column) against
        the tensor's rows, computed once per distinct column and shuffled out.

        A value held by several threads adds from one of them: an [BM, 1] column (each row on the four lanes of
        a quad) from the lane whose column base is 0, its rows landing on the window's one row at columns
        row_base + {0, 8}; a [1, N] column vector (each column on every row's threads) from the threads of the
        tile's first row, its distinct columns landing on the window's rows col_base + c at column 0."""
        *lead, row0, col0 = window.indices
        width = list(self.sig.args[window.arg].dims)[-1]
        value_rows = ty.get_shape()[0]
        if not (self._constant_index(col0) == 0 and width.is_constant and width.value.data >= value_rows):
            refuse(op, "a transposed add needs a window from column 0 of a tensor whose constant row length is at "
                        f"least the value's {value_rows} rows")
        w = width.value.data
        # the thread's first element: value row first_row (window column), value column first_col (window row)
        if self._is_column_vector(ty):
            col_offsets = self._layout(op, ty).distinct_columns[0]
            row_offsets = [0] * len(col_offsets)
            first_row, first_col = e.index(0), self.col_base
            writer = e.setp("eq", self.row_base, e.index(0))
        else:
            row_offsets, col_offsets = self._thread_offsets(op, ty)
            first_row, first_col = self.row_base, (e.index(0) if self._is_column(ty) else self.col_base)
            writer = e.setp("eq", self.col_base, e.index(0)) if self._is_column(ty) else None
        window_row = e.addi(row0, first_col)
        window_col = first_row
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        distinct = sorted(set(col_offsets))
        if window.in_bounds:
            mask = self._all_true(e, len(col_offsets))
        else:
            inside = self._below(e, self._lead_limit(e, window, dims, e.op(arith.SubiOp(dims[-2], window_row))),
                                 distinct)
            if not window.starts_inside:
                inside = e.andi(inside, self._not_before(e, window_row, distinct))
            mask = e.shuffle(inside, [distinct.index(c) for c in col_offsets])
        if writer is not None:
            mask = e.andi(mask, e.broadcast(writer, len(col_offsets)))
        base = self._element_address(e, window.arg, [*lead, window_row, window_col], [e.to_i64(d) for d in dims],
                                     F32_BYTES)
        offsets = e.dense(i32, [0] * len(row_offsets))
        return base, offsets, mask, [(c * w + r) * F32_BYTES for r, c in zip(row_offsets, col_offsets)]

    def _row_access(self, op, window: Window, ty, e: Emitter):
        """`_window_access` for an f32 window whose columns all lie inside the tensor (the first column a
        constant 0 and the width a constant at least the tile's): the offsets and the mask then depend on the
        row only, so they are the thread's two rows shuffled out to the registers (no instruction, two
        registers live instead of one per register: the backward's dQ add of 64 registers at head_dim 128
        runs next to the dK and dV accumulators)."""
        *_, col0 = window.indices
        width = list(self.sig.args[window.arg].dims)[-1]
        if not (self._constant_index(col0) == 0 and width.is_constant and width.value.data >= window.shape[1]):
            return self._window_access(op, window, ty, e)
        base, offsets, mask, columns = self._window_access(op, window, ty, e, rows_only=True)
        return base, offsets, mask, columns

    @staticmethod
    def _constant_index(value: SSAValue) -> int | None:
        owner = value.owner
        if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
            return owner.value.value.data
        return None

    def _bulk_add(self, op: tile.AtomicAddOp, window: Window, e: Emitter) -> None:
        rows, cols = window.shape
        row_bytes = cols * F32_BYTES
        if row_bytes % reductions.BULK_ALIGNMENT:
            refuse(op, f"a bulk reduction adds rows of a multiple of {reductions.BULK_ALIGNMENT} bytes, got {row_bytes}")
        if rows > self.threads:
            refuse(op, f"one thread per row issues the bulk reductions: {rows} rows need more than {self.threads} threads")
        if op in self.reduction_slots:  # the producer reduces it (reduction_slots.py)
            self._reduce_by_producer(op, window, e)
            return
        staging = self._alloc(e, "atomic_add_staging", rows * row_bytes, reductions.BULK_ALIGNMENT, 0)
        self._stage_rows(op, staging, row_bytes, e)
        e.op(sm90.FenceProxyAsyncOp())
        e.op(sm90.BarSyncOp(0, self.threads))
        # thread r adds row r when the row is inside the tensor
        *lead, row0, col0 = window.indices
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        mine = e.addi(row0, self.tid)
        inside = e.cmpi(self.tid, e.index(rows), "ult")
        if not window.in_bounds:
            inside = e.andi(inside, e.cmpi(mine, self._lead_limit(e, window, dims, dims[-2]), "ult"))
        dest = self._element_address(e, window.arg, [*lead, mine, col0], [e.to_i64(d) for d in dims], F32_BYTES)
        source = e.op(arith.AddiOp(staging, e.op(arith.IndexCastOp(e.muli(self.tid, e.index(row_bytes)), i32))))

        def issue(t: Emitter):
            t.op(reductions.BulkReduceAddOp(dest, source, row_bytes))
            t.op(reductions.BulkCommitGroupOp())
            t.op(reductions.BulkWaitGroupOp(0, read=True))
        e.if_(inside, issue)

    def _stage_rows(self, op: tile.AtomicAddOp, staging: SSAValue, row_bytes: int, e: Emitter) -> None:
        """Every thread stores its registers at row * row_bytes + col * 4 of the staging buffer at `staging`
        (row-major, unswizzled; transposed: a value register at (r, c) is the window's (c, r))."""
        row_offsets, col_offsets = self._thread_offsets(op, op.value.type)
        row, col = self._origin(e, e.index(0), e.index(0))
        if op.transpose is not None:
            row_offsets, col_offsets, row, col = col_offsets, row_offsets, col, row
        first = e.op(arith.IndexCastOp(e.addi(e.muli(row, e.index(row_bytes)), e.muli(col, e.index(F32_BYTES))), i32))
        first = e.op(arith.AddiOp(staging, first))
        constant = [r * row_bytes + c * F32_BYTES for r, c in zip(row_offsets, col_offsets)]
        self._store_words(e, [(first, k) for k in constant], self._get(op.value))

    # -- row-broadcast arithmetic ----------------------------------------------------------------------------
    def _lower_Exp2SubtractOp(self, op: tile.Exp2SubtractOp, e: Emitter) -> None:
        x = self._peek(op.source)
        raw, factor = (x.raw, x.factor) if isinstance(x, Scaled) else (x, 1.0)
        lanes = raw.type.get_shape()[0]
        m = self._safe_max(self._get(op.rows), e)
        neg_m = self._broadcast_rows(op, e.op(arith.NegfOp(m)), e)
        if factor == 1.0:
            self._set(op.result, e.ex2(e.addf(raw, neg_m)))
        else:
            self._set(op.result, e.ex2(e.fma(raw, e.splat(f32, factor, lanes), neg_m)))

    def _lower_SubRowsOp(self, op: tile.SubRowsOp, e: Emitter) -> None:
        self._set(op.result, e.subf(self._get(op.source), self._broadcast_rows(op, self._get(op.rows), e)))

    # -- 1-D row windows, 16-bit to f32 casts ----------------------------------------------------------------
    def _row_window_access(self, op, window: Window, e: Emitter, row_end: SSAValue | None = None):
        """(base address, byte offsets, in-bounds mask) of this thread's two rows of a 1-D [BM] window
        [lead..., row0] of an f32, i32, bf16 or f16 tensor; `row_end`, if given, an absolute row before which the
        access stops even inside the tensor (`tile.store_global_rows`)."""
        *lead, row0 = window.indices
        rows = sorted(set(AccumulatorLayout(facts.WGMMA_K_BYTES // 4).row_offsets))  # the thread's two rows
        row = e.addi(row0, self.row_base)
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        end = dims[-1] if row_end is None else e.op(arith.MinSIOp(dims[-1], row_end))
        mask = self._all_true(e, len(rows)) if window.in_bounds and row_end is None else \
            self._below(e, self._lead_limit(e, window, dims, e.op(arith.SubiOp(end, row))), rows)
        if not (window.in_bounds or window.starts_inside):
            mask = e.andi(mask, self._not_before(e, row, rows))
        elt = element_type_bytes(self._arg_tile(window.arg).element_type)
        base = self._element_address(e, window.arg, [*lead, row], [e.to_i64(d) for d in dims], elt)
        return base, e.dense(i32, [r * elt for r in rows]), mask

    def _lower_LoadOp(self, op: tile.LoadOp, e: Emitter) -> None:
        window = self._get(op.source)
        if not (isinstance(window, Window) and op.result.type.rank == 1):
            super()._lower_LoadOp(op, e)
            return
        element = op.result.type.element_type
        if not (isinstance(element, Float32Type) or element == i32 or is_half(element)):
            refuse(op, f"1-D windows load into f32, i32, bf16 or f16 row vectors, got {element}")
        base, offsets, mask = self._row_window_access(op, window, e)
        if is_half(element):  # the two rows, an element each, packed (small_tiles.py)
            rows = e.op(sm90.LdGlobalU16Op(base, offsets, mask, ROWS_PER_THREAD))
            self._set(op.result, pack_pairs(e, e.shuffle(rows, [0]), e.shuffle(rows, [1])))
            return
        self._set(op.result, e.op(sm90.LdGlobalOp(base, offsets, mask, VectorType(element, [ROWS_PER_THREAD]))))

    def _lower_StoreGlobalOp(self, op: tile.StoreGlobalOp, e: Emitter) -> None:
        window = self._get(op.dest)
        if not (isinstance(window, Window) and op.value.type.rank == 1):
            super()._lower_StoreGlobalOp(op, e)
            return
        self._store_row_vector(op, window, op.value.type, self._get(op.value), e)

    def _store_row_vector(self, op, window: Window, ty, value: SSAValue, e: Emitter,
                          row_end: SSAValue | None = None) -> None:
        """A row vector [BM] into a 1-D window: each of the thread's two rows (`_row_window_access`, `row_end` as
        there), by the lane of its quad whose column base is 0 (the four lanes of a row's quad hold the same value);
        32-bit elements with `st.global.b32`, 16-bit ones unpacked (small_tiles.py) with `st.global.b16`."""
        element = ty.element_type
        if not (isinstance(element, Float32Type) or element == i32 or is_half(element)):
            refuse(op, f"1-D windows store f32, i32, bf16 or f16 row vectors, got {element}")
        base, offsets, mask = self._row_window_access(op, window, e, row_end)
        first = e.setp("eq", self.col_base, e.index(0))
        mask = e.andi(mask, e.broadcast(first, ROWS_PER_THREAD))
        if is_half(element):
            e.op(sm90.StGlobalB16Op(base, offsets, unpack_pairs(e, value), mask))
            return
        e.op(sm90.StGlobalOp(base, offsets, value, mask))

    def _lower_CastOp(self, op: tile.CastOp, e: Emitter) -> None:
        src, dst = op.source.type, op.result.type
        if not (isinstance(dst.element_type, Float32Type) and is_half(src.element_type)):
            super()._lower_CastOp(op, e)
            return
        half = "bf16" if isinstance(src.element_type, BFloat16Type) else "f16"
        self._set(op.result, e.op(reductions.CvtUnpackOp(self._get(op.source), half)))

    # -- semaphores, trailing waits ----------------------------------------------------------------------------
    def _semaphore_address(self, op, e: Emitter) -> SSAValue:
        """The global address of the i32 word of a one-element semaphore window [lead..., i]."""
        window = self._get(op.sem)
        if not (isinstance(window, Window) and window.shape == (1,)):
            refuse(op, "the semaphore must be a one-element view of a global i32 tensor")
        dims = [e.to_i64(self._dim_value(window.arg, d, e)) for d in range(len(window.indices))]
        return self._element_address(e, window.arg, window.indices, dims, SEMAPHORE_BYTES)

    def _lower_SemWaitOp(self, op: tile.SemWaitOp, e: Emitter) -> None:
        """Thread 0 spins on `sm90.sem_try_wait` (ld.acquire.gpu) until the count equals `expected`, then a CTA
        barrier lets every thread go on (FlashAttention-3's semaphore wait)."""
        sem = self._semaphore_address(op, e)
        expected = e.op(arith.IndexCastOp(self._get(op.expected), i32))
        e.if_(e.cmpi(self.tid, e.index(0), "eq"),
              lambda t: t.spin_until(lambda w: w.op(reductions.SemTryWaitOp(sem, expected))))
        e.op(sm90.BarSyncOp(0, self.threads))

    def _lower_SemSignalOp(self, op: tile.SemSignalOp, e: Emitter) -> None:
        """A CTA barrier (every thread's dQ adds issued; in the bulk mode each thread first waits with
        `bulk_wait_group 0`, without `read`, until its bulk reductions have written global memory), then thread 0
        adds 1 with `sm90.sem_signal` (red.release.gpu: the barrier makes the other threads' adds part of
        what it releases)."""
        sem = self._semaphore_address(op, e)
        if self.atomic_add_mode == "bulk":
            e.op(reductions.BulkWaitGroupOp(0, read=False))
        e.op(sm90.BarSyncOp(0, self.threads))
        e.if_(e.cmpi(self.tid, e.index(0), "eq"), lambda t: t.op(reductions.SemSignalOp(sem)))

    def _lower_CpWaitGroupOp(self, op: tile.CpWaitGroupOp, e: Emitter) -> None:
        """A backward kernel's wait after its loops, with nothing outstanding in program order, still waits for
        the groups committed before the loops: when no loop trip ran, nobody has waited for them (waiting
        again on a completed phase returns at once)."""
        if (not self.outstanding and not self.loops and op.pending.value.data == 0
                and self.fn.attributes["tile.kernel"].data["kind"].data == "attention_backward"):
            for commit, group in self.groups.items():
                if group.loop is None and commit not in self.ring_commits:
                    e.spin_until(lambda t, g=group: t.op(sm90.MBarrierTryWaitParityOp(g.barrier, e.index(0))))
            return
        super()._lower_CpWaitGroupOp(op, e)

    def _parity(self, wait, commit, group, e: Emitter) -> SSAValue:
        """The parity of the group barrier's phase that this execution of `commit` completes. In a loop nest
        (the backward's query blocks inside its loop over the heads of a GQA group) the barrier completes one
        phase per execution of the innermost trip, so the parity is that of the linear trip number
        ((trip_1 n_2 + trip_2) n_3 + ...), n_i the trip count of loop i; each n_i must be defined outside
        the whole nest (the same for every trip of the loops around it); where they are not, the loops carry
        the count (`control.py`'s phase counters)."""
        if commit in self.commit_phase and commit in self.committed_this_trip:
            return e.op(arith.AndIOp(self.commit_phase[commit], e.index(1)))
        depth = next((i for i, l in enumerate(self.loops) if l.op is group.loop), None)
        if depth is None or depth == 0 or commit not in self.committed_this_trip:
            return super()._parity(wait, commit, group, e)
        linear = self._linear_trip(wait, [info.op for info in self.loops[:depth + 1]], e)
        return e.op(arith.AndIOp(linear, e.index(1)))
