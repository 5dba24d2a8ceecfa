"""How a fused block's registers move between the machine and the block's files (`fuse`): `LaneRuns.gather` reads
the registers a block reads, for the lanes that run it, into rows of a [registers, lanes] file; `LaneRuns.scatter`
writes the rows of the registers it wrote back. A register lives in a register file [registers, lanes] (axis 0) or
in a block of wgmma registers [lanes, registers] (axis 1: its rows are transposed on the way).

Within a block, `RowGather` copies the rows of an operand that are not consecutive rows into an array of its own.

The lanes that run a block are whole warpgroups: one run of consecutive lanes, a few runs (the consumers of each
CTA of a batch) or, rarely, scattered lanes. One run is a slice; the same threads of consecutive CTAs
(`ranges.lane_block`) are one [registers, CTAs, threads] view of the machine's array, one copy; other runs are copied
a run at a time, and scattered lanes by index. Every way moves the same bits.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ranges import lane_block
from tessera.interpreters.truth import all_set, equal_arrays

STAGING_PAD_BYTES = 32
"""How far a staging row (`staging_rows`) runs past its lanes."""

TRANSPOSED_CHUNK = 64
"""Threads a transposed gather of a wgmma register block copies at a time (`LaneRuns.gather`)."""

MAX_RUNS = 16
"""Lanes in at most this many runs of consecutive lanes (the warpgroups of a few CTAs) are gathered and
scattered a run at a time (slices), others by index."""


def staging_rows(rows: np.ndarray, n: int) -> np.ndarray:
    """A view [k, n] of fresh rows for the k rows `rows` (of `n` lanes) of an output written into the columns of
    a [lanes, registers] block (a wgmma accumulator block), padded by `STAGING_PAD_BYTES`: the transposed write
    reads a column of k values, and rows 4,096 bytes apart (1,024 lanes of 32 bits) share one L1 cache set,
    which made that write some seven times slower than a copy into the padded rows and the write from there."""
    k = rows.shape[0]
    return np.empty((k, n + -(-STAGING_PAD_BYTES // rows.dtype.itemsize)), rows.dtype)[:, :n]


class LaneRuns:
    """The runs of the lanes the program's blocks last ran for (`_runs`), and `block`, their `ranges.lane_block`
    where they are more than one run, else None. The scheduler hands every block of a straight run the same lanes
    array, and never modifies one: a block run for that object again finds them set; one run for an array of the
    same lanes (a later straight run of the same warpgroups) finds them in `known`, by content."""

    KNOWN = 16
    """Lane sets whose runs are kept (`known`): a program's blocks run for a few (each CTA's consumers, a batch's)."""

    def __init__(self, threads: int):
        self.threads = threads
        self.lanes: np.ndarray | None = None
        self.runs: list[tuple[slice, slice]] | None = None
        self.block: tuple[slice, slice] | None = None
        self.known: dict[tuple[int, int, int], tuple] = {}  # (count, first, last) -> (lanes, runs, block)

    def of(self, lanes: np.ndarray) -> LaneRuns:
        """Itself, set for `lanes` (ascending, distinct)."""
        if lanes is not self.lanes:
            key = (len(lanes), int(lanes[0]), int(lanes[-1]))
            kept = self.known.get(key)
            if kept is None or not equal_arrays(kept[0], lanes):
                runs = _runs(lanes)
                block = lane_block(lanes, self.threads) if runs is not None and len(runs) > 1 else None
                if len(self.known) >= self.KNOWN:
                    self.known.clear()
                kept = self.known[key] = (lanes.copy(), runs, block)
            self.lanes, self.runs, self.block = lanes, kept[1], kept[2]
        return self

    def gather(self, into: np.ndarray, array: np.ndarray, axis: int, indices: slice | np.ndarray) -> None:
        """`into` [k, lanes] = the registers `indices` of `array` (axis 0 or 1, see the module docstring) for the
        lanes."""
        lanes, runs, block = self.lanes, self.runs, self.block
        if block is not None and axis == 1 and len(into) >= TRANSPOSED_CHUNK // 2:
            # many columns of a wgmma block (an accumulator read into rows): transposed a chunk of threads at a
            # time, whose source rows stay in cache while each destination row takes its piece (56 -> 35 us for
            # 88 registers of 1,024 lanes)
            source = _machine_block(array, axis, indices, block, self.threads)
            target = _block_view(into, block)
            for first in range(0, target.shape[2], TRANSPOSED_CHUNK):
                chunk = slice(first, first + TRANSPOSED_CHUNK)
                target[:, :, chunk] = source[:, :, chunk]
        elif block is not None:
            _block_view(into, block)[...] = _machine_block(array, axis, indices, block, self.threads)
        elif runs is None:
            into[...] = array[_outer(indices, lanes)] if axis == 0 else array[lanes][:, indices].T
        elif axis == 0:  # rows of a register file
            for machine_lanes, here in runs:
                into[:, here] = array[indices, machine_lanes]
        else:  # columns of a block of wgmma registers
            for machine_lanes, here in runs:
                into[:, here] = array[machine_lanes, indices].T

    def scatter(self, array: np.ndarray, axis: int, indices: slice | np.ndarray, values: np.ndarray) -> None:
        """The registers `indices` of `array` for the lanes = `values` [k, lanes]."""
        lanes, runs, block = self.lanes, self.runs, self.block
        if block is not None:
            _put_machine_block(array, axis, indices, block, self.threads, _block_view(values, block))
        elif runs is None:
            if axis == 0:
                array[_outer(indices, lanes)] = values
            else:
                array[_outer(lanes, indices)] = values.T
        elif axis == 0:
            for machine_lanes, here in runs:
                array[indices, machine_lanes] = values[:, here]
        else:
            for machine_lanes, here in runs:
                array[machine_lanes, indices] = values[:, here].T


class RowGather:
    """Rows `rows` of a block's version file [versions, lanes] copied into `out` [k, lanes] before a group runs (an
    operand whose versions are not consecutive rows, `fuse.Block._operand_array`), with the bits of
    `file.take(rows, axis=0, out=out)`, which moves a row at a time (some five times slower for 88 rows). The rows
    repeat with a period p, the smallest that divides k: a value every member reads (p = 1: a scale, a row's
    maximum), a pair of values read alternately two by two (p = 4: the two rows of a thread's accumulator
    fragment). The p rows are read once, as a strided view where they step evenly and forward (the even or odd
    partial sums of a reduction, p = k), else taken into the first p rows of `out` (in "clip" mode, which the rows,
    all in the file, never reach: the default "raise" copies `out` and writes it back on every call), and copied into
    each of the k / p blocks of `out` by one broadcasting assignment."""

    def __init__(self, file: np.ndarray, rows: np.ndarray, out: np.ndarray):
        k, n = out.shape
        p = next(p for p in range(1, k + 1) if k % p == 0 and all_set(rows.reshape(-1, p) == rows[:p]))
        head = rows[:p]
        step = int(head[1] - head[0]) if p > 1 else 1
        self.blocks = out.reshape(k // p, p, n)
        if step > 0 and all_set(np.diff(head) == step):
            self.file, self.head, self.source = None, None, file[int(head[0]):int(head[-1]) + 1:step]
        else:
            self.file, self.head, self.source = file, head, out[:p]

    def run(self) -> None:
        """`out` = the rows."""
        if self.file is None:
            self.blocks[...] = self.source
            return
        self.file.take(self.head, axis=0, out=self.source, mode="clip")
        if len(self.blocks) > 1:
            self.blocks[1:] = self.source


def _runs(lanes: np.ndarray) -> list[tuple[slice, slice]] | None:
    """(lanes of the machine, positions in `lanes`) of each run of consecutive lanes, or None for more than
    MAX_RUNS runs."""
    breaks = np.flatnonzero(np.diff(lanes) != 1) + 1
    if len(breaks) >= MAX_RUNS:
        return None
    runs, start = [], 0
    for stop in [*breaks.tolist(), len(lanes)]:
        first = int(lanes[start])
        runs.append((slice(first, first + stop - start), slice(start, stop)))
        start = stop
    return runs


def _outer(rows: slice | np.ndarray, columns: slice | np.ndarray) -> tuple:
    """The index of the block [rows x columns] of a 2-D array (each a slice or an int64 array): an array of rows
    as a column where the columns are an array too."""
    return (rows[:, None], columns) if type(rows) is not slice and type(columns) is not slice else (rows, columns)


def _block_view(values: np.ndarray, block: tuple[slice, slice]) -> np.ndarray:
    """[k, n] values of the lanes of a `lane_block` as a view [k, CTAs, threads of each]."""
    ctas, within = block
    return values.reshape(len(values), ctas.stop - ctas.start, within.stop - within.start)


def _machine_block(array: np.ndarray, axis: int, indices: slice | np.ndarray, block: tuple[slice, slice],
                   threads: int) -> np.ndarray:
    """The registers `indices` of the lanes of a `lane_block` in `array` (a contiguous register file [registers,
    lanes], axis 0, or wgmma block [lanes, registers], axis 1) as [k, CTAs, threads of each] (a view, or a gather
    where `indices` is an array: read only)."""
    ctas, within = block
    if axis == 0:
        return array.reshape(len(array), -1, threads)[indices, ctas, within]
    return array.reshape(-1, threads, array.shape[1])[ctas, within, indices].transpose(2, 0, 1)


def _put_machine_block(array: np.ndarray, axis: int, indices: slice | np.ndarray, block: tuple[slice, slice],
                       threads: int, values: np.ndarray) -> None:
    """Write `values` [k, CTAs, threads of each] into what `_machine_block` reads."""
    ctas, within = block
    if axis == 0:
        array.reshape(len(array), -1, threads)[indices, ctas, within] = values
    else:
        array.reshape(-1, threads, array.shape[1])[ctas, within, indices] = values.transpose(1, 2, 0)
