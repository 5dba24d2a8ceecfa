"""The f32 accumulators of a wgmma chain kept in product order until a wgmma.wait_group (`Deferred`, `accumulate`,
`write_back`).

A wgmma.mma_async's accumulators are asynchronous until a wgmma.wait_group covers its group: any other access to
them before that is a hazard the asynchrony checks report (`wgmma_tracking.WgmmaTracking.check_registers`), so no
instruction can observe where their values are kept in between. A chain's accumulators (the wgmmas of one
register block issued by the same warpgroups, a main loop's K steps) are therefore kept in the order the product
is taken in (D', `wgmma.thread_rows`), contiguous, and each wgmma rounds f32(D + A x B) there, in float64 rounded
once per instruction, bit for bit what the registers would get; they are written into the registers, in fragment
order, once, at the next wgmma.wait_group of any thread (or before any other wgmma on the block), instead of two
passes over the strided fragments per instruction. A chain that starts with scale-d = 0 reads no register.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tessera.interpreters.truth import equal_arrays
from tessera.sm90 import facts


class Deferred(NamedTuple):
    """A chain's accumulators not yet in their registers: `values` [warpgroups, 64, N] f32 in product order (D'),
    the accumulators of `lanes` (whole warpgroups; the step's lanes object, never modified, as
    `wgmma._warpgroups_kept` has it: the wgmmas of a straight run pass the same one) whose registers are `rows`
    (`state.lane_rows` of `block`)."""

    block: np.ndarray
    lanes: np.ndarray
    rows: np.ndarray
    values: np.ndarray


def _fragment_pairs(rows: np.ndarray, n: int) -> np.ndarray:
    """The f32 registers `rows` [runs, lanes of a run, N/2] as element pairs [runs, (w, g), q, h, m] (8-byte
    items, a view): thread 32w + 4g + q's pair 2h + m (`wgmma.thread_rows`)."""
    runs, lanes, _ = rows.shape
    return rows.view(np.uint64).reshape(runs, lanes // 4, 4, n // 8, 2)


def _product_pairs(values: np.ndarray, runs: int) -> np.ndarray:
    """D' f32 [warpgroups, 64, N] as element pairs [runs, (w, g), q, h, m] (8-byte items, a view: axes (m, h, q)
    of D' turned round, `wgmma.thread_rows`), matching `_fragment_pairs`."""
    n = values.shape[2]
    pairs = values.view(np.uint64).reshape(runs, -1, 2, n // 8, 4)  # [runs, (w, g), m, h, q]
    return pairs.transpose(0, 1, 4, 3, 2)


def _copy_pairs(target: np.ndarray, source: np.ndarray) -> None:
    """`target[...] = source` for pair views [runs, (w, g), q, h, m] (`_fragment_pairs`, `_product_pairs`), one
    copy per index of the target's contiguous axis (m in the fragments, q in D'): a single copy would run NumPy's
    inner loop along that axis, two or four items at a time; each of these runs it along h."""
    axis = int(np.argmin(target.strides))
    for i in range(target.shape[axis]):
        at = (slice(None),) * axis + (i,)
        target[at] = source[at]


def product_order(values: np.ndarray, n: int) -> np.ndarray:
    """[warpgroups, 64, N] in product order (D', `wgmma.thread_rows`) from accumulator values of any type in
    fragment order [warpgroups x 128 threads, N/2]: the inverse of `wgmma.fragment_order` (`_product_pairs` is
    its f32 form as a view)."""
    groups = values.shape[0] // facts.WARPGROUP_SIZE
    pairs = values.reshape(groups * 32, 4, n // 8, 2, 2)  # [(w, g), q, h, m, l]
    return pairs.transpose(0, 3, 2, 1, 4).reshape(groups, facts.WGMMA_M, n)


def accumulate(m, block: np.ndarray, lanes: np.ndarray, rows: np.ndarray, d: np.ndarray, add: bool) -> None:
    """The wgmma of `lanes` (whole warpgroups) whose accumulators are `rows` of `block` takes D = f32(D + d) (`add`)
    or f32(d), d [warpgroups, 64, N] float64 in product order (overwritten): kept in `m.deferred` until
    `write_back`. A chain of other lanes on the block is written back first."""
    entry = m.deferred.get(id(block))
    if entry is not None and entry.lanes is not lanes and \
            (len(entry.lanes) != len(lanes) or not equal_arrays(entry.lanes, lanes)):
        write_back(m)
        entry = None
    if entry is None:
        values = np.empty(d.shape, np.float32)
        if add:  # the registers as they are, in product order
            _copy_pairs(_product_pairs(values, rows.shape[0]), _fragment_pairs(rows, d.shape[2]))
        entry = m.deferred[id(block)] = Deferred(block, lanes, rows, values)
    if add:
        np.add(d, entry.values, out=d)  # float64 sums, rounded once below
    entry.values[...] = d


def write_back(m) -> None:
    """Every chain's accumulators into their registers (fragment order), and none kept: a wgmma.wait_group, or a
    wgmma on the block that does not keep them."""
    for entry in m.deferred.values():
        runs, n = entry.rows.shape[0], entry.values.shape[2]
        _copy_pairs(_fragment_pairs(entry.rows, n), _product_pairs(entry.values, runs))
    m.deferred.clear()
