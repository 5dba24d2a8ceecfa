"""The Tile IR interpreter: each `tile` op is one NumPy call over a batch of thread blocks.

Register tiles are arrays [B, *shape] in their element type's dtype (bf16 through `ml_dtypes`); f32 compute
stays f32; `tile.mma` multiplies in f32 (exact for bf16/f16 inputs) and accumulates in f32. Shared tiles and
asynchronous copies follow `tile_memory`, which reports reads of data that has not arrived and races: for
unstaged buffers, copies are published by `tile.barrier`; for ring stages, by the covering
`tile.cp_wait_group`, and handed back to the copies by `tile.release`.

The backward's ops (`dialects/tile_backward.py`): `tile.store_shared` writes a shared buffer (published by
the next barrier); `tile.atomic_add` (and `tile.scatter_add`, at per-element coordinates) adds into global memory block after
block in the batch's order (which `run_grid`'s `order` permutes), so only the sum is defined, not its rounding; `tile.sem_wait` and
`tile.sem_signal` need blocks that wait for each other, so a kernel with them runs one block per thread
(`grid_sync.GridSync`, set up by `run_grid`) and every global atomic happens under the grid's lock.
"""

from __future__ import annotations

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls

from tessera.dialects import tile
from tessera.dialects import tile_causal_bias as causal_bias
from tessera.dialects.tile_types import TileType
from tessera.interpreters import serving_checks
from tessera.interpreters.block_batch import BlockBatch
from tessera.interpreters.tile_cluster import check_shared_copy
from tessera.interpreters.tile_elementwise import ElementwiseFunctions, aligned_operand
from tessera.interpreters.grid_writes import GridWriteChecks, GridWrites
from tessera.interpreters.tile_memory import (
    AsyncCopies,
    GatheredRows,
    GlobalView,
    SharedBuffer,
    SharedRef,
    every_row_group,
    row_group_bits,
)
from tessera.interpreters.grid_sync import GridDeadlock, GridSync  # noqa: I001 - after tile_memory: merge-friendly
from tessera.numerics import F32, batched_matmul, numpy_dtype, round_to, widened_dtype

NEG_INF = np.float32(-np.inf)


def _rows(vector: np.ndarray) -> np.ndarray:
    """A [B, M] row vector broadcast against [B, M, N]."""
    return vector[..., None]


def _safe_max(vector: np.ndarray) -> np.ndarray:
    """The softmax 'safe max': -inf counts as 0, so exp(-inf - m) is 0 rather than NaN."""
    return np.where(vector == NEG_INF, np.float32(0), vector)


def _exponential(function, x: np.ndarray) -> np.ndarray:
    """`function` (np.exp, np.exp2) of x taken in float64 and rounded once to x's dtype: exp(x) as the ops define
    it, the correctly rounded value (up to float64's own last place: a double rounding needs the value within
    2^-29 ulp of an f32 midpoint), as the CTA simulator's `ex2.approx` is. NumPy's float32 exp and exp2 are
    picked per CPU at run time (SIMD) and are not correctly rounded (AVX-512: 39% of N(0, 25) inputs off):
    exp(-2.3263016) came out 0.09765625, exactly 25 / 256, for a correctly rounded 0.09765626, so 2^8 P tied to
    e4m3 24 instead of 26 and an FP8 attention output moved 23 bf16 ulps away from the lowered kernel's. One
    buffered ufunc call (the casts in chunks): about 3x float32 exp's time."""
    with np.errstate(over="ignore"):
        return function(x, dtype=np.float64, out=np.empty(np.shape(x), x.dtype), casting="same_kind")


def _window_shaped(value: np.ndarray, dest: GlobalView) -> np.ndarray:
    """A [B, *shape] value as the [B, *window shape] it writes: itself, or a column vector [B, 1, N] as the
    [B, N] of a 1-D window (`tile_base.columns_into_row`)."""
    if np.ndim(value) == 1 + len(dest.shape):
        return value
    return value.reshape((len(value), *dest.shape))


def _row_extremum(x: np.ndarray, larger: bool, axis: int = -1) -> np.ndarray:
    """Each row's maximum (`larger`) or minimum (`axis` -2: each column's, kept as a [.., 1, N] column vector),
    NaN where the row holds one, with the sign of a zero as max.NaN.f32 / min.NaN.f32 give it: +0 is the larger
    of +-0 (NumPy's reduction keeps whichever zero it met first)."""
    keep = axis != -1
    result = np.max(x, axis=axis, keepdims=keep) if larger else np.min(x, axis=axis, keepdims=keep)
    if x.dtype.kind != "f":
        return result
    zero = result == 0
    if zero.any():
        wins = ((x == 0) & (np.signbit(x) != larger)).any(axis=axis, keepdims=keep)  # a +0 for the max, a -0 for the min
        result = np.where(zero, np.where(wins != larger, -0.0, 0.0).astype(result.dtype), result)
    return result


@register_impls
class TileFunctions(GridWriteChecks, ElementwiseFunctions, InterpreterFunctions):
    """Implementations of the `tile` ops for one `BlockBatch` (the elementwise ones in `tile_elementwise`)."""

    def __init__(self, batch: BlockBatch, cluster: tuple[int, int, int] = (1, 1, 1), widen: bool = False):
        super().__init__()
        self.batch = batch
        self.widen = widen
        """Every float element type held in float64 and nothing rounded (casts, stores, f32 arithmetic): the
        kernel's own float64 reference (`run_grid(..., widen=True)`; `tessera.validation.rounding`)."""
        self.cluster = cluster
        """The launch's cluster shape: `cluster_shared` copies are checked against it (`tile_cluster`)."""
        self.copies = AsyncCopies()
        self.shared: list[SharedBuffer] = []
        self.arg_names: dict[int, str] = {}  # id(argument array) -> its name (set by run_grid)
        self.writes: GridWrites | None = None
        """The grid's record of which block wrote each global element (set by `run_grid` for kernels without
        semaphores, whose writes may be ordered), with `block_ids` the batch's blocks' numbers in it."""
        self.block_ids: np.ndarray | None = None

    def dtype(self, element_type) -> np.dtype:
        """The dtype that holds `element_type`: its own, or float64 for floats when widened."""
        return widened_dtype(element_type) if self.widen else numpy_dtype(element_type)

    def _constant(self, value: float, dtype: np.dtype) -> np.ndarray:
        """An f32 attribute of an op as an operand of `dtype`: rounded to f32 when widened too (a constant is
        part of the program, not a rounding of its computation)."""
        return np.asarray(np.float32(value) if self.widen else value, dtype)

    def _register_tile(self, op, value: np.ndarray) -> tuple[np.ndarray]:
        ty = op.result.type
        assert isinstance(ty, TileType)
        return (np.ascontiguousarray(value, dtype=self.dtype(ty.element_type)),)

    def _operand_tile(self, op, value, what: str, row_groups: np.ndarray | None = None) -> np.ndarray:
        """A register tile, or a shared tile checked to be readable (`row_groups`: a `tile.mma` operand's
        readers per row, `SharedRef.check_readable`)."""
        if isinstance(value, SharedRef):
            value.check_stage_range(self.batch, op)
            value.check_readable(self.batch, op, what, row_groups)
            return value.read()
        return value

    # region identity and sizes
    @impl(tile.ProgramIdOp)
    def run_program_id(self, interpreter: Interpreter, op: tile.ProgramIdOp, args: PythonValues):
        return (self.batch.program_ids[op.axis_index],)

    @impl(tile.DimOp)
    def run_dim(self, interpreter: Interpreter, op: tile.DimOp, args: PythonValues):
        (source,) = args
        return (int(source.shape[op.index.value.data]),)

    # endregion
    # region memory
    @impl(tile.AllocSharedOp)
    def run_alloc_shared(self, interpreter: Interpreter, op: tile.AllocSharedOp, args: PythonValues):
        ty = op.result.type
        data = np.zeros((self.batch.size,) + ty.get_shape(), self.dtype(ty.element_type))
        buffer = SharedBuffer(op.result.name_hint or f"#{len(self.shared)}", data, staged=ty.rank >= 3)
        self.shared.append(buffer)
        return (SharedRef(buffer),)

    @impl(tile.StageOp)
    def run_stage(self, interpreter: Interpreter, op: tile.StageOp, args: PythonValues):
        ref, index = args
        if ref.stage is not None:
            self.batch.fail(op, "selects a stage of a buffer that is already a single stage")
        staged = SharedRef(ref.buffer, self.batch.index_array(index).copy())
        staged.check_stage_range(self.batch, op)
        return (staged,)

    @impl(tile.ViewOp)
    def run_view(self, interpreter: Interpreter, op: tile.ViewOp, args: PythonValues):
        source, *indices = args
        indices = [self.batch.index_array(i) for i in indices]
        if isinstance(source, GlobalView):  # a window of a window: offsets add up, bounds stay the tensor's
            base = list(source.indices)
            lead = len(base) - len(source.shape)
            for k, offset in enumerate(indices):
                base[lead + k] = base[lead + k] + offset
            view = GlobalView(source.tensor, tuple(base), op.result.type.get_shape())
        else:
            view = GlobalView(source, tuple(indices), op.result.type.get_shape())
        if op.in_bounds is not None:
            self._check_in_bounds(op, view)
        return (view,)

    def _check_in_bounds(self, op: tile.ViewOp, view: GlobalView) -> None:
        """A view promised `in_bounds` must lie inside its tensor in every active block (its docstring)."""
        tensor_shape = view.tensor.shape
        lead = len(tensor_shape) - len(view.shape)
        extents = (1,) * lead + tuple(view.shape)
        bad = np.zeros(self.batch.size, bool)
        for start, extent, size in zip(view.indices, extents, tensor_shape):
            start = np.broadcast_to(start, (self.batch.size,))
            bad |= (start < 0) | (start + extent > size)
        bad &= self.batch.active
        if bad.any():
            k = int(np.argmax(bad))
            where = ", ".join(str(int(np.broadcast_to(i, (self.batch.size,))[k])) for i in view.indices)
            self.batch.fail(op, f"is in_bounds, but its window {list(view.shape)} at [{where}] leaves the tensor of "
                                f"shape {list(tensor_shape)}", bad)

    @impl(tile.CpAsyncOp)
    def run_cp_async(self, interpreter: Interpreter, op: tile.CpAsyncOp, args: PythonValues):
        source, dest = args
        self._check_paged_read(op, source)
        if isinstance(source, GlobalView):
            self._check_window_read(op, source)
        if op.cluster_shared is not None:
            check_shared_copy(self.batch, op, source, self.cluster)
        self.copies.issue(self.batch, op, source, dest)
        return ()

    @impl(tile.CpAsyncGatherOp)
    def run_cp_async_gather(self, interpreter: Interpreter, op: tile.CpAsyncGatherOp, args: PythonValues):
        """Read the rows through the page table now (the op's docstring), land them like a `tile.cp_async`."""
        n, m = len(op.indices), len(op.table_indices)
        source, indices, table = args[0], args[1:1 + n], args[1 + n]
        table_indices, (start, end, dest) = args[2 + n:2 + n + m], args[2 + n + m:]
        if not isinstance(source, np.ndarray) or not isinstance(table, np.ndarray):
            self.batch.fail(op, "gathers from a kernel argument through a table argument (not a tile.view)")
        size = self.batch.size

        def index(value) -> np.ndarray:
            return np.broadcast_to(self.batch.index_array(value), (size,)).astype(np.int64)

        def clip(i: np.ndarray, extent: int) -> np.ndarray:
            return np.clip(np.broadcast_to(i, reads.shape), 0, extent - 1)

        rows, cols = op.dest.type.get_shape()
        t = index(start)[:, None] + np.arange(rows)
        reads = (t < index(end)[:, None]) & self.batch.active[:, None]
        page_size = source.shape[1]
        lead = [index(i)[:, None] for i in table_indices]
        slot = t // page_size
        outside = np.zeros_like(reads)
        for i, extent in zip(lead + [slot], table.shape):
            outside |= (i < 0) | (i >= extent)
        outside &= reads
        if outside.any():
            b, r = np.unravel_index(int(np.argmax(outside)), outside.shape)
            where = ", ".join(str(int(np.broadcast_to(i, outside.shape)[b, r])) for i in lead + [slot])
            self.batch.fail(op, f"reads element [{where}] of the page table of shape {list(table.shape)}, outside "
                                f"it (key row {int(t[b, r])})", outside.any(axis=1))
        page = table[tuple(clip(i, e) for i, e in zip(lead + [slot], table.shape))].astype(np.int64)
        bad = reads & ((page < 0) | (page >= source.shape[0]))
        if bad.any():
            b, r = np.unravel_index(int(np.argmax(bad)), bad.shape)
            name = self.arg_names.get(id(source), "source")
            self.batch.fail(op, f"{serving_checks.page_out_of_range(name, int(page[b, r]), source.shape[0])} "
                                f"(key row {int(t[b, r])})", bad.any(axis=1))
        *selects, col = [index(i) for i in indices]
        columns = col[:, None] + np.arange(cols)
        inside = (columns >= 0) & (columns < source.shape[-1])
        coords = (np.clip(page, 0, source.shape[0] - 1)[:, :, None], (t % page_size)[:, :, None],
                  *(s[:, None, None] for s in selects), np.clip(columns, 0, source.shape[-1] - 1)[:, None, :])
        data = np.where(reads[:, :, None] & inside[:, None, :], source[coords], np.zeros((), source.dtype))
        nbytes = int((reads[:, :, None] & inside[:, None, :]).sum()) * source.dtype.itemsize
        self.copies.issue(self.batch, op, GatheredRows(data, nbytes), dest)
        return ()

    def _check_paged_read(self, op, source: GlobalView) -> None:
        """`serving_checks`: a window of a paged cache lies in one page."""
        name = self.arg_names.get(id(source.tensor))
        if name is None or serving_checks.paged_check(name) is None:
            return
        lead = len(source.indices) - len(source.shape)
        extent = (1,) * lead + tuple(source.shape)
        for block in np.nonzero(self.batch.active)[0]:
            start = [int(i[block]) for i in source.indices]
            problem = serving_checks.paged_check(name).problem(source.tensor.shape, start, extent)
            if problem:
                mask = np.zeros(self.batch.size, bool)
                mask[block] = True
                self.batch.fail(op, problem, mask)

    def _check_sequence_store(self, op, dest: GlobalView, written: tuple[tuple[np.ndarray, ...], np.ndarray]) -> None:
        """`serving_checks`: the rows a store wrote (`GlobalView.write`'s coordinates and mask, the writes that
        happened) belong to the writing block's sequence."""
        name = self.arg_names.get(id(dest.tensor))
        check = serving_checks.rows_check(name) if name is not None else None
        if check is None:
            return
        coords, keep = written
        z = np.broadcast_to(self.batch.index_array(self.batch.program_ids[2]).reshape((-1,) + (1,) * len(dest.shape)),
                            keep.shape)[keep]
        problem = serving_checks.check_rows(name, coords[check.axis], z)
        if problem:
            self.batch.fail(op, problem)

    @impl(tile.CpCommitGroupOp)
    def run_commit(self, interpreter: Interpreter, op: tile.CpCommitGroupOp, args: PythonValues):
        self.copies.commit(self.batch)
        return ()

    @impl(tile.CpWaitGroupOp)
    def run_wait(self, interpreter: Interpreter, op: tile.CpWaitGroupOp, args: PythonValues):
        self.copies.wait(self.batch, op.pending.value.data)
        return ()

    @impl(tile.BarrierOp)
    def run_barrier(self, interpreter: Interpreter, op: tile.BarrierOp, args: PythonValues):
        self.copies.barrier(self.batch, self.shared)
        return ()

    @impl(tile.ReleaseOp)
    def run_release(self, interpreter: Interpreter, op: tile.ReleaseOp, args: PythonValues):
        (stage,) = args
        stage.release(self.batch, op)
        return ()

    @impl(tile.LoadOp)
    def run_load(self, interpreter: Interpreter, op: tile.LoadOp, args: PythonValues):
        (source,) = args
        if isinstance(source, GlobalView):
            self._check_window_read(op, source)
            return self._register_tile(op, source.read())
        return self._register_tile(op, self._operand_tile(op, source, "the source").copy())

    @impl(tile.LoadBroadcastOp)
    def run_load_broadcast(self, interpreter: Interpreter, op: tile.LoadBroadcastOp, args: PythonValues):
        (source,) = args
        if isinstance(source, GlobalView):
            self._check_window_read(op, source)
        # [B, N]: a global window, or a one-row shared tile [B, 1, N] checked like any shared read
        row = source.read() if isinstance(source, GlobalView) else self._operand_tile(op, source, "the source")[:, 0]
        return self._register_tile(op, np.broadcast_to(row[:, None, :], (row.shape[0],) + op.result.type.get_shape()))

    @impl(tile.StoreGlobalOp)
    def run_store_global(self, interpreter: Interpreter, op: tile.StoreGlobalOp, args: PythonValues):
        value, dest = args
        written = dest.write(_window_shaped(value, dest), self.batch.active)
        self._check_sequence_store(op, dest, written)
        self._check_one_writer(op, dest, written)
        return ()

    @impl(tile.StoreGlobalRowsOp)
    def run_store_global_rows(self, interpreter: Interpreter, op: tile.StoreGlobalRowsOp, args: PythonValues):
        value, dest, rows = args
        written = dest.write(value, self.batch.active, rows=self.batch.index_array(rows))
        self._check_sequence_store(op, dest, written)
        self._check_one_writer(op, dest, written)
        return ()

    @impl(tile.LoadIndexOp)
    def run_load_index(self, interpreter: Interpreter, op: tile.LoadIndexOp, args: PythonValues):
        table, *indices = args
        indices = [np.broadcast_to(self.batch.index_array(i), (self.batch.size,)) for i in indices]
        bad = np.zeros(self.batch.size, bool)
        for i, n in zip(indices, table.shape):
            bad |= (i < 0) | (i >= n)
        bad &= self.batch.active
        if bad.any():
            k = int(np.argmax(bad))
            where = ", ".join(str(int(i[k])) for i in indices)
            self.batch.fail(op, f"reads element [{where}] of a table of shape {list(table.shape)}, outside it", bad)
        clipped = tuple(np.clip(i, 0, n - 1) for i, n in zip(indices, table.shape))
        if self._sums(table):
            active = self.batch.active.copy()
            self._check_sum_read(op, table, tuple(i[active] for i in clipped), active)
        return (table[clipped].astype(np.int64),)

    @impl(tile.GatherOp)
    def run_gather(self, interpreter: Interpreter, op: tile.GatherOp, args: PythonValues):
        """table[i0, ..., in] per element, 0 where the coordinates fall outside the table (the op's docstring)."""
        table, *indices = args
        if not isinstance(table, np.ndarray):
            self.batch.fail(op, "gathers from a kernel argument (not a tile.view)")
        shape = (self.batch.size,) + op.result.type.get_shape()
        coords = [np.broadcast_to(aligned_operand(i, v.type, op.result.type), shape).astype(np.int64)
                  for i, v in zip(indices, op.indices)]
        inside = np.ones(shape, bool)
        for i, n in zip(coords, table.shape):
            inside &= (i >= 0) & (i < n)
        clipped = tuple(np.clip(i, 0, n - 1) for i, n in zip(coords, table.shape))
        if self._sums(table):
            read = inside & self.batch.active.reshape((-1,) + (1,) * (len(shape) - 1))
            self._check_sum_read(op, table, tuple(i[read] for i in clipped), read)
        values = np.where(inside, table[clipped], 0)
        return self._register_tile(op, values)

    # endregion
    # region the backward's memory ops: shared stores, reducing stores, semaphores
    sync: GridSync | None = None
    """Set by `run_grid` for a kernel with semaphores (one block per thread): the grid's shared lock and waits."""

    @impl(tile.StoreSharedOp)
    def run_store_shared(self, interpreter: Interpreter, op: tile.StoreSharedOp, args: PythonValues):
        value, dest = args
        dest.store(self.batch, op, value)
        return ()

    @impl(tile.ClearRowsOp)
    def run_clear_rows(self, interpreter: Interpreter, op: tile.ClearRowsOp, args: PythonValues):
        """Rows r with k0 + r >= seq_k of the shared tile become 0 (`tile_memory.SharedRef.clear_rows`)."""
        dest, k0, seq_k = args
        keys = self._positions(k0, op.rows, 1, 2)
        dest.clear_rows(self.batch, op, keys >= self.batch.index_array(seq_k)[:, None])
        return ()

    @impl(tile.KeyBiasOp)
    def run_key_bias(self, interpreter: Interpreter, op: tile.KeyBiasOp, args: PythonValues):
        """Rows r of the shared tile become -inf where k0 + r >= seq_k, +0 elsewhere
        (`tile_memory.SharedRef.write_key_bias`)."""
        dest, k0, seq_k = args
        keys = self._positions(k0, op.rows, 1, 2)
        dest.write_key_bias(self.batch, op, keys >= self.batch.index_array(seq_k)[:, None])
        return ()

    @impl(tile.CausalBiasTableOp)
    def run_causal_bias_table(self, interpreter: Interpreter, op: tile.CausalBiasTableOp, args: PythonValues):
        """The table's values (`tile_causal_bias.table_values`): the bias windows' -2^100 and +0, A's identity."""
        (dest,) = args
        dest.publish_whole(self.batch, op, "the causal bias table",
                           causal_bias.table_values(op.table.type.get_shape()[0]))
        return ()

    @impl(tile.CausalBiasOp)
    def run_causal_bias(self, interpreter: Interpreter, op: tile.CausalBiasOp, args: PythonValues):
        """s + b rounded to f32, b read from the table's windows as the lowering's wgmmas read it (the op's
        docstring): row R of warpgroup w takes element i of table row `window_row(c, j, e)`."""
        s, table, q0, k0, seq_q, seq_k = args
        rows, keys = op.acc.type.get_shape()
        every = every_row_group(rows)
        table = self._operand_tile(op, table, "the causal bias table",
                                   np.full(table.buffer.mma_rows.shape[1], every))
        d = (self.batch.index_array(q0) + self.batch.index_array(seq_k) - self.batch.index_array(seq_q)
             - self.batch.index_array(k0))
        row = np.arange(rows)
        warp, chunk, element = causal_bias.slice_position(row % causal_bias.WARPGROUP_ROWS)
        e = causal_bias.window_offset(d[:, None], (row // causal_bias.WARPGROUP_ROWS)[None, :], warp[None, :], rows,
                                      keys)
        origin = causal_bias.table_origin(op.table.type.get_shape()[0])
        x = causal_bias.window_row(np.arange(keys)[None, None, :], chunk[None, :, None], e[:, :, None], origin)
        bias = table[np.arange(self.batch.size)[:, None, None], x, element[None, :, None]]
        return self._register_tile(op, np.asarray(s, F32) + bias.astype(F32))

    @impl(tile.AtomicAddOp)
    def run_atomic_add(self, interpreter: Interpreter, op: tile.AtomicAddOp, args: PythonValues):
        value, dest = args
        value = self._operand_tile(op, value, "the value")
        if op.transpose is not None:
            value = np.swapaxes(value, -1, -2)
        value = _window_shaped(value, dest)
        if self.sync is None:
            self._check_add(op, dest.tensor, *dest.add(value, self.batch.active))
            return ()
        with self.sync.lock:
            dest.add(value, self.batch.active)
        self.sync.changed()
        return ()

    @impl(tile.ScatterAddOp)
    def run_scatter_add(self, interpreter: Interpreter, op: tile.ScatterAddOp, args: PythonValues):
        """table[i(p)] += value[p] for the active blocks' elements whose coordinates fall inside the table, in
        the batch's block order (np.add.at: an entry several elements name receives each addition)."""
        value, table, *indices = args
        if not isinstance(table, np.ndarray):
            self.batch.fail(op, "scatters into a kernel argument (not a tile.view)")
        value = self._operand_tile(op, value, "the value")
        shape = value.shape
        coords = [np.broadcast_to(aligned_operand(i, v.type, op.value.type), shape).astype(np.int64)
                  for i, v in zip(indices, op.indices)]
        keep = np.broadcast_to(self.batch.active.reshape((-1,) + (1,) * (len(shape) - 1)), shape).copy()
        for i, n in zip(coords, table.shape):
            keep &= (i >= 0) & (i < n)

        def add():
            np.add.at(table, tuple(i[keep] for i in coords), value[keep].astype(table.dtype))
        if self.sync is None:
            add()
            self._check_add(op, table, tuple(i[keep] for i in coords), keep)
            return ()
        with self.sync.lock:
            add()
        self.sync.changed()
        return ()

    def _semaphore(self, op, sem) -> tuple[np.ndarray, tuple[int, ...]]:
        """The semaphore tensor and the coordinates of this (single) block's counter."""
        if self.sync is None or self.batch.size != 1:  # run_grid gives semaphore kernels a thread per block
            self.batch.fail(op, "semaphores need blocks that run on their own (run_grid(..., sync=True))")
        where = sem.element(0)
        if any(not 0 <= i < n for i, n in zip(where, sem.tensor.shape)):
            self.batch.fail(op, f"semaphore index {list(where)} is outside the tensor {list(sem.tensor.shape)}")
        return sem.tensor, where

    @impl(tile.SemWaitOp)
    def run_sem_wait(self, interpreter: Interpreter, op: tile.SemWaitOp, args: PythonValues):
        sem, expected = args
        if not self.batch.active[0]:
            return ()
        tensor, where = self._semaphore(op, sem)
        expected = int(self.batch.index_array(expected)[0])
        try:
            self.sync.wait_until(lambda: int(tensor[where]) == expected)
        except GridDeadlock as reason:
            try:
                self.batch.fail(op, f"waits for semaphore {list(where)} to reach {expected}, but it is "
                                    f"{int(tensor[where])} and {reason} (deadlock)", self.batch.active)
            except Exception as error:
                error.secondary = reason.secondary  # run_grid reports the block that failed first
                raise
        return ()

    @impl(tile.SemSignalOp)
    def run_sem_signal(self, interpreter: Interpreter, op: tile.SemSignalOp, args: PythonValues):
        (sem,) = args
        if not self.batch.active[0]:
            return ()
        tensor, where = self._semaphore(op, sem)
        with self.sync.lock:
            tensor[where] += 1
        self.sync.changed()
        return ()

    # endregion
    # region compute
    @impl(tile.MmaOp)
    def run_mma(self, interpreter: Interpreter, op: tile.MmaOp, args: PythonValues):
        """d = acc + op(A) op(B); the shared operands' reads are noted per row group (`tile_memory.ROW_GROUP`
        rows of the result each): group g reads A's rows of its slab (every row of a transposed A, whose
        columns it reads) and every row of B."""
        wide = np.float64 if self.widen else F32
        every = every_row_group(int(np.shape(args[2])[-2]) if np.ndim(args[2]) >= 3 else 1)

        def readers(operand, by_rows: bool) -> np.ndarray | None:
            if not isinstance(operand, SharedRef) or operand.buffer.staged:
                return None
            rows = operand.buffer.mma_rows.shape[1]
            return row_group_bits(rows) if by_rows else np.full(rows, every)

        a = self._operand_tile(op, args[0], "operand A", readers(args[0], op.transpose_a is None)).astype(wide)
        b = self._operand_tile(op, args[1], "operand B", readers(args[1], False)).astype(wide)
        if op.transpose_a:
            a = np.swapaxes(a, -1, -2)
        if op.transpose_b:
            b = np.swapaxes(b, -1, -2)
        return self._register_tile(op, batched_matmul(a, b) + args[2])

    @impl(tile.RowMaxOp)
    def run_row_max(self, interpreter: Interpreter, op: tile.RowMaxOp, args: PythonValues):
        return self._register_tile(op, _row_extremum(args[0], larger=True))

    @impl(tile.RowMinOp)
    def run_row_min(self, interpreter: Interpreter, op: tile.RowMinOp, args: PythonValues):
        return self._register_tile(op, _row_extremum(args[0], larger=False))

    @impl(tile.RowSumOp)
    def run_row_sum(self, interpreter: Interpreter, op: tile.RowSumOp, args: PythonValues):
        if np.issubdtype(args[0].dtype, np.integer):  # i32: wraps modulo 2^32, as add.s32 does
            return self._register_tile(op, np.sum(args[0].astype(np.int64), axis=-1).astype(np.uint32).view(np.int32))
        return self._register_tile(op, np.sum(args[0], axis=-1, dtype=np.float64 if self.widen else F32))

    @impl(tile.ColMaxOp)
    def run_col_max(self, interpreter: Interpreter, op: tile.ColMaxOp, args: PythonValues):
        return self._register_tile(op, _row_extremum(args[0], larger=True, axis=-2))

    @impl(tile.ColMinOp)
    def run_col_min(self, interpreter: Interpreter, op: tile.ColMinOp, args: PythonValues):
        return self._register_tile(op, _row_extremum(args[0], larger=False, axis=-2))

    @impl(tile.ColSumOp)
    def run_col_sum(self, interpreter: Interpreter, op: tile.ColSumOp, args: PythonValues):
        """As `run_row_sum`, over the rows: [B, M, N] -> [B, 1, N]."""
        if np.issubdtype(args[0].dtype, np.integer):
            wide = np.sum(args[0].astype(np.int64), axis=-2, keepdims=True)
            return self._register_tile(op, wide.astype(np.uint32).view(np.int32))
        return self._register_tile(op, np.sum(args[0], axis=-2, keepdims=True, dtype=np.float64 if self.widen else F32))

    @impl(tile.ExpDiffOp)
    def run_exp_diff(self, interpreter: Interpreter, op: tile.ExpDiffOp, args: PythonValues):
        a, b = args
        return self._register_tile(op, _exponential(np.exp, a - _safe_max(b)))

    @impl(tile.FmaOp)
    def run_fma(self, interpreter: Interpreter, op: tile.FmaOp, args: PythonValues):
        a, b, c = (np.asarray(x, np.float64) for x in args)
        return self._register_tile(op, a * b + c)  # exact f64 product, then rounded to f32 like a fused fma

    @impl(tile.ScaleOp)
    def run_scale(self, interpreter: Interpreter, op: tile.ScaleOp, args: PythonValues):
        factor = self._constant(op.factor.value.data, args[0].dtype)
        return self._register_tile(op, args[0] * factor)

    @impl(tile.SaturatingScaleOp)
    def run_saturating_scale(self, interpreter: Interpreter, op: tile.SaturatingScaleOp, args: PythonValues):
        (x,) = args
        bound = self._constant(op.bound.value.data, x.dtype)
        with np.errstate(over="ignore"):  # a finite x whose product overflows is clamped below
            scaled = x * self._constant(op.factor.value.data, x.dtype)
        return self._register_tile(op, np.where(np.isfinite(x), np.clip(scaled, -bound, bound), scaled))

    @impl(tile.LogOp)
    def run_log(self, interpreter: Interpreter, op: tile.LogOp, args: PythonValues):
        with np.errstate(divide="ignore", invalid="ignore"):  # ln(0) = -inf and ln(x < 0) = NaN, as the op says
            return self._register_tile(op, np.log(args[0]))

    @impl(tile.ExpSubtractOp)
    def run_exp_subtract(self, interpreter: Interpreter, op: tile.ExpSubtractOp, args: PythonValues):
        x, m = args
        return self._register_tile(op, _exponential(np.exp, x - _rows(_safe_max(m))))

    @impl(tile.SubRowsOp)
    def run_sub_rows(self, interpreter: Interpreter, op: tile.SubRowsOp, args: PythonValues):
        x, d = args
        with np.errstate(invalid="ignore"):  # inf - inf is NaN, as in f32 hardware
            return self._register_tile(op, x - _rows(d))

    @impl(tile.Exp2SubtractOp)
    def run_exp2_subtract(self, interpreter: Interpreter, op: tile.Exp2SubtractOp, args: PythonValues):
        x, m = args
        return self._register_tile(op, _exponential(np.exp2, x - _rows(_safe_max(m))))

    @impl(tile.MulRowsOp)
    def run_mul_rows(self, interpreter: Interpreter, op: tile.MulRowsOp, args: PythonValues):
        x, s = args
        return self._register_tile(op, x * _rows(s))

    @impl(tile.DivRowsOp)
    def run_div_rows(self, interpreter: Interpreter, op: tile.DivRowsOp, args: PythonValues):
        x, l = args
        l = _rows(l)
        with np.errstate(divide="ignore", invalid="ignore"):
            return self._register_tile(op, np.where(l == 0, np.zeros((), x.dtype), x / l))

    # endregion
    # region conversions and constants
    @impl(tile.CastOp)
    def run_cast(self, interpreter: Interpreter, op: tile.CastOp, args: PythonValues):
        return (round_to(args[0], self.dtype(op.result.type.element_type)),)

    @impl(tile.ReshapeOp)
    def run_reshape(self, interpreter: Interpreter, op: tile.ReshapeOp, args: PythonValues):
        return (args[0].reshape((self.batch.size,) + op.result.type.get_shape()),)

    @impl(tile.FillOp)
    def run_fill(self, interpreter: Interpreter, op: tile.FillOp, args: PythonValues):
        ty = op.result.type
        dtype = self.dtype(ty.element_type)
        value = round_to(np.asarray(op.value.value.data), numpy_dtype(ty.element_type)).astype(dtype)  # a constant
        return (np.full((self.batch.size,) + ty.get_shape(), value, dtype),)

    # endregion
    # region masks
    def _positions(self, start, length: int, axis: int, ndim: int) -> np.ndarray:
        """Absolute positions start + arange(length) along `axis` of a [B, ...] tile of rank `ndim`."""
        start = self.batch.index_array(start).reshape((-1,) + (1,) * (ndim - 1))
        shape = [1] * ndim
        shape[axis] = length
        return start + np.arange(length).reshape(shape)

    @impl(tile.MaskCausalOp)
    def run_mask_causal(self, interpreter: Interpreter, op: tile.MaskCausalOp, args: PythonValues):
        s, q0, k0, seq_q, seq_k = args
        m, n = op.source.type.get_shape()
        query = self._positions(q0, m, 1, 3)
        key = self._positions(k0, n, 2, 3)
        offset = (self.batch.index_array(seq_k) - self.batch.index_array(seq_q)).reshape(-1, 1, 1)
        return self._register_tile(op, np.where(key > query + offset, NEG_INF, s))

    @impl(tile.MaskBoundsOp)
    def run_mask_bounds(self, interpreter: Interpreter, op: tile.MaskBoundsOp, args: PythonValues):
        s, k0, seq_k = args
        n = op.source.type.get_shape()[1]
        key = self._positions(k0, n, 2, 3)
        return self._register_tile(op, np.where(key >= self.batch.index_array(seq_k).reshape(-1, 1, 1), NEG_INF, s))

    # endregion
