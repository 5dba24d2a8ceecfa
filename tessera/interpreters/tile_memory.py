"""Global windows, shared buffers and asynchronous copies, as the Tile IR interpreter models them.

Global memory: a kernel argument is a NumPy array; `GlobalView` is a window of it at per-block offsets.
Reads outside the tensor give zero, writes outside it are dropped (the bounds rule of `tile.view`).

Shared memory: a `SharedBuffer` holds one array per block ([B, *shape]) and, per stage and block, the state
of its contents, so that the interpreter reports what the hardware would leave undefined. An unstaged buffer
is filled by copies that each thread waits for, and published by a barrier:

    EMPTY  --cp_async-->  IN_FLIGHT  --cp_wait_group-->  LANDED  --barrier-->  READY

A stage of a ring (a buffer of rank >= 3, whose stages `tile.stage` selects) is filled by bulk copies that
the covering wait publishes to the whole block, and handed back to the copies by `tile.release`:

    EMPTY/RELEASED  --cp_async-->  IN_FLIGHT  --cp_wait_group-->  READY  --tile.release-->  RELEASED

A `tile.store_shared` writes an unstaged buffer from registers; like a landed copy, the stored contents
reach the other threads only through a barrier:

    any state but IN_FLIGHT  --store_shared-->  WRITTEN  --barrier-->  READY

Only READY contents may be read (by `tile.mma` or `tile.load`). A `tile.cp_async` into a tile whose copy is
still in flight is a race, and so is one into a tile that was read since the point from which a copy may
overwrite it: the last `tile.barrier` for an unstaged buffer (other threads may still be reading it), the
last `tile.release` of the stage for a ring (a barrier does not hand a stage back). Releasing a stage whose
copy is still in flight is an error too. A copy's data is taken from global memory when it is issued and
written to shared memory when a `tile.cp_wait_group` covers its group.

A `tile.mma` is computed by row groups of `ROW_GROUP` rows of its result (one warpgroup each once lowered):
group g reads rows [64 g, 64 g + 64) of a shared A (the columns of A^T, so every row of a transposed A) and
every row of B, and its reads are complete when its part of the mma returns, for the threads of that group
(`memory_model.WGMMA_GROUP_PER_WARPGROUP`: one wgmma-group per warpgroup, completed by any of its threads'
waits). So a write of an unstaged buffer after a tile.mma and before a barrier races the mma only where a row
another group read is written: `tile.store_shared` writes row r of its tile from group r // 64 (register tiles
are split by rows), a copy is issued by the block's first thread (group 0). A one-group block (64 rows) may
refill its own operands right after its mma; with two groups, B (read by both) needs the barrier.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.block_batch import BlockBatch
from tessera.sm90 import facts

EMPTY, IN_FLIGHT, LANDED, READY, RELEASED, WRITTEN = range(6)
ROW_GROUP = facts.WGMMA_M
"""Rows of a `tile.mma` result that one group of threads (a warpgroup) computes, reading its operands itself."""
ROW_GROUP_BITS = 63
"""Row groups the race checks tell apart: one bit each of an int64 mask (the sign bit unused). Rows past the
63rd group count as the last group: a block has at most 1024 threads, 8 warpgroups, so only a `tile.mma` no
lowering takes has more groups (flash attention built with block_m = 4096), and the mask would overflow."""


def row_group_bits(rows: int) -> np.ndarray:
    """[rows] int64: the bit of the row group of each row of a `tile.mma` result (`ROW_GROUP_BITS`)."""
    return np.int64(1) << np.minimum(np.arange(rows) // ROW_GROUP, ROW_GROUP_BITS - 1)


def every_row_group(rows: int) -> np.int64:
    """The mask of every row group of a `tile.mma` result of `rows` rows."""
    return np.int64((1 << min(-(-rows // ROW_GROUP), ROW_GROUP_BITS)) - 1)
_STATE_TEXT = {EMPTY: "never written", IN_FLIGHT: "still in flight (no cp_wait_group covers its copy)",
               LANDED: "landed but not yet published to the block (missing tile.barrier after cp_wait_group)",
               RELEASED: "released by tile.release and not refilled since (read after release)",
               WRITTEN: "stored by tile.store_shared but not yet published to the block (missing tile.barrier after the store)"}



@dataclass
class GlobalView:
    """A window of `shape` into `tensor`: `indices` holds one [B] index array per tensor dimension; the last
    len(shape) of them are the window's start, the others select the leading dimensions."""

    tensor: np.ndarray
    indices: tuple[np.ndarray, ...]
    shape: tuple[int, ...]

    def _coordinates(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        rank, window_rank = self.tensor.ndim, len(self.shape)
        batch = len(self.indices[0])
        out_ndim = 1 + window_rank
        coords, valid = [], np.ones((batch,) + self.shape, bool)
        for dim, start in enumerate(self.indices):
            c = start.reshape((batch,) + (1,) * window_rank)
            window_axis = dim - (rank - window_rank)
            if window_axis >= 0:
                offsets = np.arange(self.shape[window_axis]).reshape(
                    (1,) * (1 + window_axis) + (-1,) + (1,) * (out_ndim - 2 - window_axis)
                )
                c = c + offsets
            valid &= (c >= 0) & (c < self.tensor.shape[dim])
            coords.append(np.clip(c, 0, self.tensor.shape[dim] - 1))
        return tuple(coords), valid

    def read(self) -> np.ndarray:
        """The window's elements, [B, *shape]; zero outside the tensor."""
        coords, valid = self._coordinates()
        values = self.tensor[coords]
        return np.where(valid, values, np.zeros((), self.tensor.dtype))

    def write(self, values: np.ndarray, active: np.ndarray, rows: np.ndarray | None = None
              ) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """Write [B, *shape] values for the active blocks, dropping elements outside the tensor (and, with
        `rows` ([B]), the window's rows from rows[b] on). Returns what was written: the tensor coordinates of
        each written element (one flat array per dimension) and the [B, *shape] mask of the window's elements
        written, so that checks judge the writes that happened, not a bound of their own."""
        coords, valid = self._coordinates()
        keep = valid & active.reshape((-1,) + (1,) * len(self.shape))
        if rows is not None:
            row = np.arange(self.shape[0]).reshape((1, -1) + (1,) * (len(self.shape) - 1))
            keep &= row < np.asarray(rows).reshape((-1,) + (1,) * len(self.shape))
        target = tuple(np.broadcast_to(c, keep.shape)[keep] for c in coords)
        self.tensor[target] = values.astype(self.tensor.dtype)[keep]
        return target, keep

    def add(self, values: np.ndarray, active: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """`tile.atomic_add`: add [B, *shape] values into the window for the active blocks, dropping elements
        outside the tensor. Blocks that add into the same element do so one after the other in batch order
        (the order `run_grid` gives them), each addition rounded to the tensor's dtype (f32). Returns what was
        added to, as `write` does."""
        target, keep = self.elements(active)
        np.add.at(self.tensor, target, values.astype(self.tensor.dtype)[keep])
        return target, keep

    def elements(self, active: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """The tensor coordinates of the window's elements inside the tensor for the active blocks (one flat array
        per dimension), and their [B, *shape] mask."""
        coords, valid = self._coordinates()
        keep = valid & active.reshape((-1,) + (1,) * len(self.shape))
        return tuple(np.broadcast_to(c, keep.shape)[keep] for c in coords), keep

    def element(self, block: int) -> tuple[int, ...]:
        """The tensor coordinates of the window's first element for block `block` (a semaphore)."""
        return tuple(int(i[block]) for i in self.indices)


@dataclass
class GatheredRows:
    """The rows a `tile.cp_async_gather` read at issue, [B, rows, columns] (a source for `AsyncCopies.issue`),
    and the bytes it read from global memory (rows past the end read nothing)."""

    data: np.ndarray
    nbytes: int = 0

    def read(self) -> np.ndarray:
        return self.data


@dataclass
class SharedBuffer:
    """One `tile.alloc_shared`: data [B, *shape] and per-(stage, block) state (stages = shape[0] when the
    buffer has a stage dimension, else 1).

    `read_unfreed` marks the stages read since the point from which a copy may overwrite them: the last
    `tile.barrier` (unstaged buffer) or the stage's last `tile.release` (ring). `mma_rows` [B, rows] (unstaged
    buffers) holds, per row, the bit mask of the `tile.mma` row groups that read the row since the last
    barrier: a write of the row by another group races (module docstring)."""

    name: str
    data: np.ndarray
    staged: bool
    state: np.ndarray = field(init=False)
    read_unfreed: np.ndarray = field(init=False)
    mma_rows: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        stages = self.data.shape[1] if self.staged else 1
        self.state = np.full((stages, self.data.shape[0]), EMPTY, np.int8)
        self.read_unfreed = np.zeros((stages, self.data.shape[0]), bool)
        rows = 0 if self.staged or self.data.ndim < 2 else self.data.shape[1]
        self.mma_rows = np.zeros((self.data.shape[0], rows), np.int64)

    @property
    def kind(self) -> str:
        return "ring" if self.staged else "shared buffer"


@dataclass
class SharedRef:
    """A shared tile: a whole buffer (`stage` None) or one stage of it (`stage` a [B] index array)."""

    buffer: SharedBuffer
    stage: np.ndarray | None = None

    def _stage_rows(self) -> np.ndarray:
        """[stages covered, B] indices into the buffer's state arrays."""
        batch = self.buffer.data.shape[0]
        if self.stage is None:
            return np.broadcast_to(np.arange(self.buffer.state.shape[0])[:, None], (self.buffer.state.shape[0], batch))
        return self.stage[None, :]

    def _get(self, table: np.ndarray) -> np.ndarray:
        rows = self._stage_rows()
        return table[rows, np.arange(rows.shape[1])[None, :]]

    def _set(self, table: np.ndarray, value, mask: np.ndarray) -> None:
        rows = self._stage_rows()
        cols = np.broadcast_to(np.arange(rows.shape[1])[None, :], rows.shape)
        m = np.broadcast_to(mask[None, :], rows.shape)
        table[rows[m], cols[m]] = value

    def read(self) -> np.ndarray:
        return self.view(self.buffer.data)

    def view(self, data: np.ndarray) -> np.ndarray:
        """What `read` returns, taken from `data` (an array shaped like the buffer's, [B, *shape]) instead of the
        buffer's contents: a listener's per-element record of the buffer read as the op reads it."""
        if self.stage is None:
            return data
        return data[np.arange(len(self.stage)), self.stage]

    def write(self, values: np.ndarray, mask: np.ndarray) -> None:
        if self.stage is None:
            self.buffer.data[mask] = values[mask]
        else:
            blocks = np.nonzero(mask)[0]
            self.buffer.data[blocks, self.stage[blocks]] = values[blocks]

    def store(self, batch: BlockBatch, op: Operation, values: np.ndarray) -> None:
        """`tile.store_shared`: the active blocks write `values` into this (unstaged) buffer; WRITTEN until a
        barrier. Storing while a copy into it is in flight, or after some thread read it since the last
        barrier, is a race."""
        active = self._check_whole_write(batch, op, f"stores into ring {self.buffer.name}; tile.store_shared writes "
                                                    "whole unstaged buffers", "stores into")
        racing = active & self._get(self.buffer.read_unfreed).any(axis=0)
        if racing.any():
            batch.fail(op, f"overwrites shared buffer {self.buffer.name}, read since the last tile.barrier "
                           "(write-after-read race)", racing)
        rows = self.buffer.mma_rows.shape[1]
        self.check_mma_readers(batch, op, row_group_bits(rows), "its row group")
        self.write(values, active)
        self._set(self.buffer.state, WRITTEN, active)

    def _check_whole_write(self, batch: BlockBatch, op: Operation, staged: str, verb: str) -> np.ndarray:
        """The active blocks, after refusing a write of the whole buffer into a ring (`staged`, the message) or
        while a copy into it is in flight (`verb`: what the op does to the buffer)."""
        active = batch.active
        if self.stage is not None or self.buffer.staged:
            batch.fail(op, staged, active)
        in_flight = active & (self._get(self.buffer.state) == IN_FLIGHT).any(axis=0)
        if in_flight.any():
            batch.fail(op, f"{verb} shared buffer {self.buffer.name} while a copy into it is in flight", in_flight)
        return active

    def clear_rows(self, batch: BlockBatch, op: Operation, past: np.ndarray) -> None:
        """`tile.clear_rows`: the rows `past` [B, rows] of the active blocks' tile become 0. The tile's contents
        must be published (READY) and no other row group's `tile.mma` may have read it since the last barrier;
        they stay READY: the op publishes its zeros itself."""
        self.check_stage_range(batch, op)
        self.check_readable(batch, op, "the tile whose rows it clears")
        self.check_mma_readers(batch, op, np.zeros(self.buffer.mma_rows.shape[1], np.int64), "every thread")
        cleared = self.read().copy()
        cleared[past & batch.active[:, None]] = 0
        self.write(cleared, batch.active)

    def write_key_bias(self, batch: BlockBatch, op: Operation, past: np.ndarray) -> None:
        """`tile.key_bias`: the active blocks' (unstaged) tile becomes +0 in its rows where `past` [B, rows] is
        false and -inf where it is true, published (READY). The op begins with a barrier of its own (its
        lowering's), so earlier reads of the tile are ordered before it; a copy in flight into it is a race."""
        shape = self.buffer.data.shape
        bias = np.where(past.reshape(past.shape + (1,) * (len(shape) - 2)), -np.inf, 0.0)
        self.publish_whole(batch, op, "the key bias", bias)

    def publish_whole(self, batch: BlockBatch, op: Operation, what: str, values: np.ndarray) -> None:
        """`values` (broadcast to the tile) written over the active blocks' whole (unstaged) tile and published
        (READY) by the op itself (`tile.key_bias`, `tile.causal_bias_table`: `what` it writes); the op begins
        with a barrier of its own (its lowering's), so earlier reads of the tile are ordered before it; a copy in
        flight into it is a race."""
        active = self._check_whole_write(batch, op, f"writes {what} into ring {self.buffer.name}; its tile is a "
                                                    "plain shared tile", "writes")
        shape = self.buffer.data.shape
        self.write(np.broadcast_to(values, shape).astype(self.buffer.data.dtype), active)
        self._set(self.buffer.state, READY, active)
        self.buffer.read_unfreed[:, active] = False
        self.buffer.mma_rows[active] = 0

    def check_stage_range(self, batch: BlockBatch, op: Operation) -> None:
        if self.stage is not None:
            stages = self.buffer.state.shape[0]
            bad = batch.active & ((self.stage < 0) | (self.stage >= stages))
            if bad.any():
                batch.fail(op, f"stage index out of range [0, {stages}) for shared buffer {self.buffer.name}", bad)

    def check_readable(self, batch: BlockBatch, op: Operation, what: str, row_groups: np.ndarray | None = None
                       ) -> None:
        """Refuse reading contents that are not READY, and note the read: `row_groups` [rows] (a `tile.mma`
        operand of an unstaged buffer) the bit mask of the row groups reading each row, None a read by any
        thread of the block."""
        states = self._get(self.buffer.state)
        for state, text in _STATE_TEXT.items():
            bad = batch.active & (states == state).any(axis=0)
            if bad.any():
                batch.fail(op, f"reads {what} ({self.buffer.kind} {self.buffer.name}) whose contents are {text}", bad)
        if row_groups is not None and self.stage is None and self.buffer.mma_rows.shape[1] == len(row_groups):
            self.buffer.mma_rows[batch.active] |= row_groups
            return
        self._set(self.buffer.read_unfreed, True, batch.active)

    def check_mma_readers(self, batch: BlockBatch, op: Operation, writers: np.ndarray, who: str) -> None:
        """A write of this unstaged buffer whose row r comes from row group bit `writers[r]` (`who` names
        them) must not overwrite a row another group's `tile.mma` read since the last barrier."""
        readers = self.buffer.mma_rows
        if self.stage is not None or not readers.any():
            return
        other = batch.active[:, None] & (readers & ~writers[None, :] != 0)
        if other.any():
            b, r = np.unravel_index(int(np.argmax(other)), other.shape)
            groups = [g for g in range(ROW_GROUP_BITS) if int(readers[b, r]) >> g & 1 and not int(writers[r]) >> g & 1]
            batch.fail(op, f"overwrites row {r} of shared buffer {self.buffer.name}, which the tile.mma of row group "
                           f"{groups[0]} (rows {ROW_GROUP * groups[0]}..{ROW_GROUP * groups[0] + ROW_GROUP - 1} of "
                           f"its result) read since the last tile.barrier, from {who} (write-after-read race: "
                           "memory_model.WGMMA_GROUP_PER_WARPGROUP, only the reading group's own threads are "
                           "ordered after its reads)", other.any(axis=1))

    def release(self, batch: BlockBatch, op: Operation) -> None:
        """`tile.release` of this ring stage: READY contents become RELEASED and the stage may be refilled.

        A stage whose copy is still in flight cannot be released (the copy would land in a stage the block
        has handed back); releasing a stage that holds nothing (EMPTY, or already RELEASED) changes nothing."""
        self.check_stage_range(batch, op)
        active = batch.active
        in_flight = active & (self._get(self.buffer.state) == IN_FLIGHT).any(axis=0)
        if in_flight.any():
            batch.fail(op, f"releases a stage of ring {self.buffer.name} whose copy is still in flight", in_flight)
        ready = active & (self._get(self.buffer.state) == READY).any(axis=0)
        self._set(self.buffer.state, RELEASED, ready)
        self._set(self.buffer.read_unfreed, False, active)

    def select(self, mask: np.ndarray, other: SharedRef) -> SharedRef:
        if self.buffer is not other.buffer or (self.stage is None) != (other.stage is None):
            raise ValueError("blocks that took different paths hold different shared buffers")
        if self.stage is None:
            return self
        return SharedRef(self.buffer, np.where(mask, self.stage, other.stage))


@dataclass
class _Copy:
    dest: SharedRef
    data: np.ndarray


@dataclass
class _Group:
    copies: list[tuple[_Copy, np.ndarray]]  # each copy with the [B] mask of blocks that issued it
    blocks: np.ndarray  # [B] mask of blocks whose copies in this group are still in flight


@dataclass
class AsyncCopies:
    """The copy groups of a batch of blocks: copies issued since the last commit, then committed groups,
    oldest first."""

    open: list[tuple[_Copy, np.ndarray]] = field(default_factory=list)
    groups: list[_Group] = field(default_factory=list)

    def issue(self, batch: BlockBatch, op: Operation, source: GlobalView, dest: SharedRef) -> None:
        dest.check_stage_range(batch, op)
        active = batch.active
        in_flight = active & (dest._get(dest.buffer.state) == IN_FLIGHT).any(axis=0)
        if in_flight.any():
            batch.fail(op, f"copies into {dest.buffer.kind} {dest.buffer.name} while an earlier copy into it is in flight", in_flight)
        racing = active & dest._get(dest.buffer.read_unfreed).any(axis=0)
        if racing.any():
            since = "its last tile.release" if dest.buffer.staged else "the last tile.barrier"
            batch.fail(
                op,
                f"overwrites {dest.buffer.kind} {dest.buffer.name}, read since {since} (write-after-read race)",
                racing,
            )
        rows = dest.buffer.mma_rows.shape[1]
        dest.check_mma_readers(batch, op, np.ones(rows, np.int64), "the block's first thread (row group 0), "
                                                                 "which issues the copy")
        dest._set(dest.buffer.state, IN_FLIGHT, active)
        self.open.append((_Copy(dest, source.read()), active.copy()))

    def commit(self, batch: BlockBatch) -> None:
        active = batch.active
        copies = [(c, m & active) for c, m in self.open if (m & active).any()]
        self.open = [(c, m & ~active) for c, m in self.open if (m & ~active).any()]
        self.groups.append(_Group(copies, active.copy()))

    def wait(self, batch: BlockBatch, pending: int) -> None:
        """Complete, for each active block, every committed group but its `pending` newest ones. Copies into
        a ring are bulk copies: the wait publishes them (READY); others have only LANDED until a barrier."""
        active = batch.active
        newer = np.zeros(len(active), np.int64)
        for group in reversed(self.groups):
            finish = group.blocks & active & (newer >= pending)
            newer += group.blocks & active
            if finish.any():
                for copy, issued in group.copies:
                    copy.dest.write(copy.data, finish & issued)
                    landed = READY if copy.dest.buffer.staged else LANDED
                    copy.dest._set(copy.dest.buffer.state, landed, finish & issued)
                group.blocks = group.blocks & ~finish
        self.groups = [g for g in self.groups if g.blocks.any()]

    @staticmethod
    def barrier(batch: BlockBatch, buffers: list[SharedBuffer]) -> None:
        """Publish the landed copies of unstaged buffers and free them for overwriting; rings are published
        by their waits and freed stage by stage by `tile.release`, so a barrier leaves them as they are."""
        active = batch.active
        for buffer in buffers:
            if buffer.staged:
                continue
            landed = ((buffer.state == LANDED) | (buffer.state == WRITTEN)) & active[None, :]
            buffer.state[landed] = READY
            buffer.read_unfreed[:, active] = False
            buffer.mma_rows[active] = 0
