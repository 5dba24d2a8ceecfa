"""A wgmma's products scattered into its accumulator fragments in a few long NumPy passes.

A warpgroup's m64nNk16 product is a 64 x N tile; thread t's register v holds element
`facts.accumulator_coords(v, t)`. That layout is affine in mixed-radix *digits* of the thread and the register
index (for f32: the thread's warp w, lane group g and lane in group q; the register's column block j, row half h
and column parity e: row = 16w + 8h + g, col = 8j + 2q + e). Gathering each element through a flat index, or
through a strided view of the tile, moves 8 bytes per step of NumPy's inner loop, whose overhead then dominates
(the parity pair e is the only run contiguous in both).

So the product is computed in an order that matches the fragment instead (`FragmentPlan`): A's rows are
permuted so that the row digits that the fragment places among the column digits (h) come first, B's rows
(the tile's columns) so that the column digits come in the fragment's order; the product tile is then, for
each value of those first digits, the fragment's registers in order, except that the row digit sits between
column digits there. Each (column pair) of f32 registers is one complex64 and each pair of float64 products
one complex128, so that for each h, `out[..., h] = round(P_h + acc[..., h])` is one ufunc pass with a single long
inner loop. Complex addition and the complex128 -> complex64 cast are the float64 additions and the round to
nearest f32 of each part, so the bits are those of the flat gather (`wgmma`'s definition: products exact,
summed in float64, plus D, rounded once).

The digits are found from `facts.accumulator_coords` itself (`_digits`) and each plan is checked, when made,
against the flat index it replaces; a layout without such a plan falls back to the gather.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from tessera.interpreters.truth import equal_arrays
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


def _offsets(digits: list[tuple[int, int]]) -> np.ndarray:
    """The offsets sum digit_i * stride_i over every value of `digits` ((size, stride), outermost first), in
    row-major order of the digits."""
    offsets = np.zeros(1, np.int64)
    for size, stride in digits:
        offsets = (offsets[:, None] + stride * np.arange(size)).reshape(-1)
    return offsets


@dataclass(eq=False)
class FragmentPlan:
    """How the m64n`n` products reach the accumulator fragments (module docstring): compute the product from
    A's rows in `row_order` and B's rows (the tile's columns) in `col_order`; the product tile is then
    [`split`, rest of the rows, the columns] = for each of the `split` values, the fragments' complex pairs
    viewed as `pairs_shape` and transposed by `pairs_axes` (the split digits first)."""

    n: int
    row_order: np.ndarray
    col_order: np.ndarray
    split: tuple[int, ...]
    pairs_shape: tuple[int, ...]
    pairs_axes: tuple[int, ...]

    _layouts: dict = field(default_factory=dict, init=False, repr=False)
    """`_layout` per number of leading dims."""

    @cached_property
    def split_values(self) -> tuple[tuple[int, ...], ...]:
        """Every value of the split digits, in order."""
        return tuple(itertools.product(*map(range, self.split)))

    def accumulate(self, products: np.ndarray, acc: np.ndarray, out: np.ndarray, on: np.ndarray) -> None:
        """out = f32(products + acc) where `on`, f32(products) elsewhere, per group: `products` [..., 64, n] float64
        from the permuted operands (C-contiguous; overwritten), `acc` and `out` [..., 128, n / 2] f32 with the
        same leading dims (`out` written in place, through a view where its registers are contiguous), `on` a bool
        per group. Three passes, each with one long inner loop: D widened into the product's order, the float64
        sum in place, the round to f32 into the fragments (one pass that adds and narrows at once runs NumPy's
        buffered casting loop, about twice as slow). The passes are slice assignments (the casts `np.copyto`
        makes, without its Python dispatch), by the index of each split value kept per number of leading dims."""
        lead = products.shape[:-2]
        shape, axes, parts = self._layout(len(lead))
        product = products.view(np.complex128).reshape(lead + shape)
        into = _pairs(out)
        target = None if into is None else self._arranged(into, lead, axes)
        temporary = None
        if target is None:  # registers that are no view of pairs: through a temporary
            temporary = np.empty(out.shape, np.float32)
            target = self._arranged(temporary.view(np.complex64), lead, axes)
        on = np.asarray(on)  # any and all are those of its broadcast over `lead` (never empty)
        switched_on = np.count_nonzero(on)
        if switched_on:
            addend = _pairs(acc)
            addend = None if addend is None else self._arranged(addend, lead, axes)
            if addend is None:
                addend = self._arranged(np.ascontiguousarray(acc).view(np.complex64), lead, axes)
            widened = np.empty(product.shape, np.complex128)
            for part in parts:
                widened[part] = addend[part]
            if switched_on == on.size:
                np.add(product, widened, out=product)
            else:
                for g in zip(*np.nonzero(np.broadcast_to(on, lead))):
                    np.add(product[g], widened[g], out=product[g])
        for part in parts:
            target[part] = product[part]
        if temporary is not None:
            out[...] = temporary

    def _layout(self, leading: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple, ...]]:
        """For `leading` leading dims: the product's shape after them ([split digits, the other digits in product
        order]), the transpose that arranges the pairs so, and the index of each split value."""
        layout = self._layouts.get(leading)
        if layout is None:
            rest = tuple(self.pairs_shape[a] for a in self.pairs_axes[len(self.split):])
            axes = tuple(range(leading)) + tuple(leading + a for a in self.pairs_axes)
            parts = tuple((slice(None),) * leading + s for s in self.split_values)
            layout = self._layouts[leading] = (self.split + rest, axes, parts)
        return layout

    def _arranged(self, pairs: np.ndarray, lead: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray | None:
        """Complex pairs [..., 128, n / 4] as [..., split digits, the other digits in product order] (a view
        transposed by `axes`, `_layout`'s; None where the pairs cannot be split into digits without a copy)."""
        # reshape copies where no view has the shape, and a copy shares no memory with `pairs`. (Setting `.shape`,
        # which refuses instead, is deprecated from NumPy 2.5 on; `copy=False` needs NumPy 2.1, we take 1.26.)
        digits = pairs.reshape(lead + self.pairs_shape)
        if not np.may_share_memory(digits, pairs):
            return None
        return digits.transpose(axes)


def _pairs(registers: np.ndarray) -> np.ndarray | None:
    """`registers` [..., count] f32 as complex64 pairs (a view), or None if its registers are not contiguous."""
    if registers.shape[-1] % 2 or (registers.strides[-1] != registers.itemsize and registers.shape[-1] > 1):
        return None
    try:
        return registers.view(np.complex64)
    except ValueError:
        return None


@lru_cache(maxsize=None)
def accumulator_index(n: int) -> np.ndarray:
    """The flat index into the row-major 64 x n tile of each thread's f32 accumulator registers ([128, n / 2],
    `facts.accumulator_coords`)."""
    registers = facts.accumulator_registers(n, "f32")
    rows, cols = facts.accumulator_coords(np.arange(registers)[None, :], np.arange(facts.WARPGROUP_SIZE)[:, None])
    index = np.asarray(rows * n + cols, np.intp)
    index.flags.writeable = False
    return index


@lru_cache(maxsize=None)
def fragment_plan(n: int) -> FragmentPlan | None:
    """The `FragmentPlan` of the f32 accumulator of m64n`n`, checked against `facts.accumulator_coords`; None
    where the layout has none (`multiply_accumulate` then gathers)."""
    index = accumulator_index(n)
    registers = index.shape[1]
    threads, regs = _digits(index[:, 0] - index[0, 0]), _digits(index[0, :] - index[0, 0])
    if threads is None or regs is None or index[0, 0] != 0 or not regs or regs[0] != (2, 1):
        return None
    digits = threads[::-1] + regs[::-1][:-1]  # outermost first; the column pair is the complex element
    kinds = ["row" if stride % n == 0 else "col" for _, stride in digits]
    first_col = kinds.index("col") if "col" in kinds else len(kinds)
    split = [k for k in range(first_col, len(digits)) if kinds[k] == "row"]
    rest = [k for k in range(len(digits)) if k not in split]
    if [kinds[k] for k in rest] != sorted((kinds[k] for k in rest), key=lambda kind: kind != "row"):
        return None
    row_order = _offsets([(digits[k][0], digits[k][1] // n) for k in split + [k for k in rest
                                                                              if kinds[k] == "row"]])
    col_order = _offsets([digits[k] for k in rest if kinds[k] == "col"] + [(2, 1)])
    if sorted(row_order.tolist()) != list(range(64)) or sorted(col_order.tolist()) != list(range(n)):
        return None
    plan = FragmentPlan(n, row_order, col_order, tuple(digits[k][0] for k in split),
                        tuple(size for size, _ in digits), tuple(split + rest))
    # the plan on the tile of flat indices must give every register its element
    tile = np.arange(64 * n, dtype=np.float64).reshape(64, n)[row_order][:, col_order]
    out = np.empty((facts.WARPGROUP_SIZE, registers), np.float32)
    plan.accumulate(np.ascontiguousarray(tile), np.zeros_like(out), out, np.ones((), bool))
    if not equal_arrays(out, index.astype(np.float32)):
        return None
    row_order.flags.writeable = col_order.flags.writeable = False
    return plan


def operand_order(what: str, n: int) -> np.ndarray | None:
    """The order in which `multiply_accumulate(..., ordered=True)` takes the rows of operand `what` ("A": its 64
    rows, "B": its n rows, the tile's columns) of an m64n`n` product: the `FragmentPlan`'s; None where n has
    none (rows as they are). A reader that gathers a tile through its rows' addresses takes them in this order
    and so saves the permutation."""
    plan = fragment_plan(n)
    if plan is None:
        return None
    return plan.row_order if what == "A" else plan.col_order


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` without its axes of length 1."""
    return tuple(size for size in shape if size != 1)


def multiply_accumulate(a: np.ndarray, b: np.ndarray, acc: np.ndarray, out: np.ndarray, on: np.ndarray,
                        n: int, ordered: bool = False) -> None:
    """A wgmma's D for groups of warpgroups: `a` [..., 64, k] and `b` [..., n, k] f32 (bf16/f16/fp8 values, so
    products are exact), `acc` and `out` [..., 128, n / 2] f32 fragments with the same leading dims (`a`, `b`
    broadcast against them), `on` a bool per group (its scale-d): out = f32(sum_k a b in float64 + acc where
    `on`), through the `FragmentPlan` of n, else the flat gather. `ordered`: the rows of `a` and `b` are already
    in `operand_order`."""
    plan = fragment_plan(n)
    if plan is not None and not ordered:
        a, b = a[..., plan.row_order, :], b[..., plan.col_order, :]
    products = np.matmul(a.astype(np.float64), b.astype(np.float64).swapaxes(-1, -2))
    if products.shape[:-2] != out.shape[:-2] and _squeezed(products.shape[:-2]) == _squeezed(out.shape[:-2]):
        products = products.reshape(out.shape[:-2] + products.shape[-2:])  # leading 1s added or dropped: a view
    if products.shape[:-2] != out.shape[:-2]:  # its own, writable, C-contiguous
        products = np.array(np.broadcast_to(products, out.shape[:-2] + products.shape[-2:]), order="C")
    elif not products.flags.c_contiguous:  # NumPy may lay out a product of broadcast operands otherwise
        products = np.ascontiguousarray(products)
    if plan is not None:
        plan.accumulate(products, acc, out, on)
        return
    lead = products.shape[:-2]
    on = np.broadcast_to(on, lead)
    gathered = np.take(products.reshape(lead + (-1,)), accumulator_index(n).reshape(-1), axis=-1)
    gathered = gathered.reshape(out.shape)
    gathered[on] += acc[on]
    out[...] = gathered.astype(np.float32)


__all__ = ["FragmentPlan", "accumulator_index", "fragment_plan", "multiply_accumulate", "operand_order"]
