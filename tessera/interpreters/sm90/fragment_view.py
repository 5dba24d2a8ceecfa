"""A wgmma's products scattered into its accumulator fragments as one strided NumPy pass.

A warpgroup's m64nNk16 products are a row-major 64 x N tile; thread t's register v holds element
`facts.accumulator_coords(v, t)`. Gathering them with the flat index of each (thread, register) is a gather of
8-byte elements through an index array; but the layout is affine in mixed-radix digits of the thread and the
register index (the thread's warp, lane group and lane in group; the register's column block, row half and
column parity), so the same elements are a strided view of the tile, and the accumulation (products + D in
float64, rounded once to f32, as `wgmma` defines it) is one ufunc call over views, without the gather, the
float64 copy and the separate rounding pass (a third of the time at F = 3 followers).

The digits are found from `facts.accumulator_coords` itself (`_digits`) and the view is checked against the
flat index it replaces (`fragment_view`); a layout that is no such view falls back to the gather.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from tessera.sm90 import facts


def _digits(steps: np.ndarray) -> list[tuple[int, int]] | None:
    """Mixed-radix digits of an axis of `steps` (the flat index at k minus at 0, k < len(steps)), innermost
    first, as (size, stride) such that steps[k] = sum digit_i(k) * stride_i; None if the greedy split fails."""
    size, digits, span = len(steps), [], 1
    while span < size:
        stride = int(steps[span])
        run = 1
        while span * (run + 1) <= size and steps[span * run] == run * stride:
            run += 1
        while run > 1 and size % (span * run):
            run -= 1
        if run == 1:
            return None
        digits.append((run, stride))
        span *= run
    return digits


@lru_cache(maxsize=None)
def fragment_view(n: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(shape, element strides into the row-major 64 x n tile) of the accumulator fragment of m64n`n`: the view of
    a tile with them, reshaped to [128 threads, registers], holds at [t, v] the element
    `facts.accumulator_coords(v, t)`. None if the layout is no such view (the gather is used instead)."""
    registers = facts.accumulator_registers(n, "f32")
    rows, cols = facts.accumulator_coords(np.arange(registers)[None, :], np.arange(facts.WARPGROUP_SIZE)[:, None])
    index = rows * n + cols
    threads, regs = _digits(index[:, 0] - index[0, 0]), _digits(index[0, :] - index[0, 0])
    if threads is None or regs is None or index[0, 0] != 0:
        return None
    digits = threads[::-1] + regs[::-1]  # outermost first: the fragment's row-major order
    shape, strides = tuple(s for s, _ in digits), tuple(st for _, st in digits)
    tile = np.arange(64 * n, dtype=np.int64)
    view = np.lib.stride_tricks.as_strided(tile, shape, tuple(tile.itemsize * s for s in strides))
    if not np.array_equal(view.reshape(index.shape), index):
        return None
    return shape, strides


def _split(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """`array` reshaped to `shape` as a view, or None where that needs a copy."""
    view = array.view()
    try:
        view.shape = shape
    except AttributeError:
        return None
    return view


def accumulate(products: np.ndarray, acc: np.ndarray, out: np.ndarray, on: np.ndarray, n: int) -> None:
    """out = f32(fragments of products + acc) where `on`, f32(fragments of products) elsewhere, per group:
    `products` [..., 64, n] float64 (C-contiguous), `acc` and `out` [..., 128, n / 2] f32 with the same leading
    group dims (`out` may be a view, written in place), `on` a bool per group."""
    layout = fragment_view(n)
    lead = products.shape[:-2]
    on = np.broadcast_to(on, lead)
    if layout is None:
        from tessera.interpreters.sm90.wgmma import _accumulator_index  # noqa: PLC0415 - the gather fallback

        flat = products.reshape(lead + (-1,))
        gathered = np.take(flat, _accumulator_index(n).reshape(-1), axis=-1).reshape(out.shape)
        gathered[on] += acc[on]
        out[...] = gathered.astype(np.float32)
        return
    shape, strides = layout
    item = products.itemsize
    view = np.lib.stride_tricks.as_strided(products, lead + shape,
                                           products.strides[:-2] + tuple(item * s for s in strides))
    into = _split(out, lead + shape)
    target = np.empty(lead + shape, np.float32) if into is None else into
    if on.all():
        np.add(view, acc.reshape(lead + shape), out=target, dtype=np.float64, casting="unsafe")
    else:
        addend = acc.reshape(lead + shape)
        for g in np.ndindex(*lead):
            if on[g]:
                np.add(view[g], addend[g], out=target[g], dtype=np.float64, casting="unsafe")
            else:
                np.copyto(target[g], view[g], casting="unsafe")
    if into is None:
        out[...] = target.reshape(out.shape)


__all__ = ["accumulate", "fragment_view"]
