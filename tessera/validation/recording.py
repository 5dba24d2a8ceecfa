"""Recording the named values one thread block computes, at the Tile and at the Target level.

A recorder is an xDSL interpreter listener. For one chosen block (Tile IR) or CTA (Target IR) it keeps, in
program order, every result that carries an SSA name hint (`%m_new`, `%alpha`, ...), together with how many
times a value of that name was computed before (its *occurrence*: the k-th `%m_new` is the running max after
K/V tile k at every level, whether the loop is pipelined, peeled or not). Values are kept in *tile
coordinates*, so that levels can be compared:

- Tile IR: the block's slice of the batched value (a tile, a row vector, an index);
- Target IR: a per-thread fragment is gathered back into the tile it holds, with the accumulator layout of
  `tessera.lowering.fragments` (itself from `tessera.sm90.facts`): a `vector<N/2 x f32>` of a whole warpgroup
  is its 64 x N slice of a tile, a `vector<2 x f32>` its 64 rows of a row vector. The warpgroups executing
  the op (all 128 threads active) hold consecutive 64-row slices in thread order, so a warp-specialized
  kernel, whose consumer warpgroups start at thread 128, gathers the same tile. Other values (scalars,
  packed 16-bit fragments, partially active warpgroups) are kept per active thread (`raw`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from xdsl.interpreter import Interpreter
from xdsl.ir import Operation

from tessera.lowering.fragments import ROWS_PER_THREAD
from tessera.sm90 import facts


@dataclass
class RecordedValue:
    """One named result: its name hint, occurrence (0-based), the op, and its value in tile coordinates
    (`tile`, or None when it has none) and per active thread (`raw`, Target IR only)."""

    name: str
    occurrence: int
    op: Operation
    tile: np.ndarray | None
    raw: np.ndarray | None = None

    @property
    def key(self) -> tuple[str, int]:
        return self.name, self.occurrence


@dataclass
class ValueTrace:
    """The named values of one block, in the order the interpreter computed them."""

    values: list[RecordedValue] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, name: str, op: Operation, tile: np.ndarray | None, raw: np.ndarray | None = None) -> None:
        self.values.append(RecordedValue(name, self._counts[name], op, tile, raw))
        self._counts[name] += 1

    def count(self, name: str) -> int:
        return self._counts.get(name, 0)

    def by_key(self) -> dict[tuple[str, int], RecordedValue]:
        return {v.key: v for v in self.values}

    def of_ops(self, predicate) -> list[RecordedValue]:
        return [v for v in self.values if predicate(v.op)]


def _snapshot(value) -> np.ndarray | None:
    """A NumPy copy of a plain value (array, int, float, bool); None for memory references and the like."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (bool, int, float, np.generic)):
        return np.asarray(value)
    return None


class TileValueRecorder(Interpreter.Listener):
    """Records the named results of one block (`block`: its program id x, y, z) of a Tile IR batch."""

    def __init__(self, batch, block: tuple[int, int, int], trace: ValueTrace):
        ids = np.stack([np.asarray(p) for p in batch.program_ids], axis=1)
        hits = np.flatnonzero((ids == np.asarray(block)).all(axis=1))
        self.batch, self.trace = batch, trace
        self.index = int(hits[0]) if hits.size else None

    def did_interpret_op(self, op: Operation, results) -> None:
        if self.index is None or not self.batch.active[self.index]:
            return
        for result, value in zip(op.results, results):
            if not result.name_hint:
                continue
            value = _snapshot(value)
            if value is None:
                continue
            if value.ndim >= 1 and value.shape[0] == self.batch.size:
                value = value[self.index]
            self.trace.add(result.name_hint, op, value)


def tile_recorders(block: tuple[int, int, int], trace: ValueTrace):
    """A `run_grid(listeners=...)` factory recording `block` into `trace`."""
    return lambda batch: (TileValueRecorder(batch, block, trace),)


@lru_cache(maxsize=None)
def _accumulator_positions(lanes: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of element v of warpgroup thread t ([128, lanes]) in the accumulator layout."""
    v = np.arange(lanes)[None, :]
    t = np.arange(facts.WARPGROUP_SIZE)[:, None]
    return facts.accumulator_coords(v, t)


@lru_cache(maxsize=None)
def _row_vector_positions() -> np.ndarray:
    """The rows ([128, 2]) a warpgroup thread holds in a row vector: those of its accumulator elements."""
    rows, _ = _accumulator_positions(2 * ROWS_PER_THREAD)
    out = np.zeros((facts.WARPGROUP_SIZE, ROWS_PER_THREAD), np.int64)
    for t in range(facts.WARPGROUP_SIZE):
        out[t] = sorted(set(int(r) for r in rows[t]))[:ROWS_PER_THREAD]
    return out


def gather_fragment(value: np.ndarray, active: np.ndarray, quad_sum: bool = False) -> np.ndarray | None:
    """The tile held by the fully active warpgroups of a per-thread f32 fragment (`value` [T, lanes]): a row
    vector [64 W] for 2 lanes, a tile [64 W, 2 lanes] otherwise; None when it is no such fragment. `quad_sum`:
    a row vector held as each thread's partial sum of its rows (convert-tile-to-sm90's `row_sums`), whose row
    is the sum over the threads holding it."""
    if value.ndim != 2 or value.dtype != np.float32 or value.shape[1] % 2:
        return None
    threads, lanes = value.shape
    groups = threads // facts.WARPGROUP_SIZE
    full = [w for w in range(groups) if active[w * facts.WARPGROUP_SIZE:(w + 1) * facts.WARPGROUP_SIZE].all()]
    if not full:
        return None
    m = facts.WGMMA_M
    if lanes == ROWS_PER_THREAD:
        out = np.zeros(m * len(full), np.float32)
        rows = _row_vector_positions()
        for i, w in enumerate(full):
            threads_of_w = value[w * facts.WARPGROUP_SIZE:(w + 1) * facts.WARPGROUP_SIZE]
            if quad_sum:
                np.add.at(out, i * m + rows, threads_of_w)
            else:
                out[i * m + rows] = threads_of_w
        return out
    out = np.zeros((m * len(full), 2 * lanes), np.float32)
    rows, cols = _accumulator_positions(lanes)
    for i, w in enumerate(full):
        out[i * m + rows, cols] = value[w * facts.WARPGROUP_SIZE:(w + 1) * facts.WARPGROUP_SIZE]
    return out


class TargetValueRecorder(Interpreter.Listener):
    """Records the named results of one CTA of the CTA simulator (module docstring)."""

    def __init__(self, cta, trace: ValueTrace, quad_sums: frozenset[str] = frozenset()):
        self.cta, self.trace, self.quad_sums = cta, trace, quad_sums

    def did_interpret_op(self, op: Operation, results) -> None:
        active = None
        for result, value in zip(op.results, results):
            if not result.name_hint or not isinstance(value, np.ndarray) or value.ndim == 0:
                continue
            if value.shape[0] != self.cta.threads:
                continue
            if active is None:
                active = self.cta.active.copy()
            tile = gather_fragment(value, active, quad_sum=result.name_hint in self.quad_sums)
            self.trace.add(result.name_hint, op, tile, value[active].copy())


def target_recorders(cta_id: tuple[int, int, int], trace: ValueTrace, quad_sums=frozenset()):
    """A `run_target_kernel(listeners=...)` factory recording CTA `cta_id` into `trace`; the row vectors named
    in `quad_sums` are per-thread partial sums, gathered as the sum over the threads holding each row."""
    quad_sums = frozenset(quad_sums)
    return lambda cta: ((TargetValueRecorder(cta, trace, quad_sums),) if tuple(cta.cta_id) == tuple(cta_id)
                        else ())
