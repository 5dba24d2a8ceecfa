"""The order of the blocks of a grid, as the Tile IR interpreter checks what depends on it.

Blocks run in no order, so a result must not depend on which runs first: an element of a global tensor that two
blocks store holds whichever wrote last, and a tensor some block adds into (`tile.atomic_add`,
`tile.scatter_add`) read or stored by another block sees, or keeps, some additions and not others. Each is a race
on a GPU (the CTA simulator and the PTX executor report them between CTAs, naming both). `GridWrites` keeps, per
element, the block that stored it and, for the tensors the kernel adds into, the blocks that added into and read
it; `GridWriteChecks` is the part of `TileFunctions` that consults it. A kernel with semaphores, which may order
its blocks, is not checked (`run_grid` gives it no `GridWrites`).
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import BlockArgument

from tessera.dialects import tile
from tessera.interpreters.tile_memory import GlobalView
from tessera.kernel_abi import KernelSignature

SEVERAL_BLOCKS = -2
"""A mark of `GridWrites.sums`: more than one block added into (or read) the element."""


def summed_arguments(sig: KernelSignature) -> set[int]:
    """The indices of the kernel arguments that a `tile.atomic_add` or `tile.scatter_add` adds into (through any
    chain of `tile.view`s)."""
    found = set()
    for op in sig.op.walk():
        if isinstance(op, tile.AtomicAddOp | tile.ScatterAddOp):
            value = op.dest if isinstance(op, tile.AtomicAddOp) else op.table
            while isinstance(value.owner, tile.ViewOp):
                value = value.owner.source
            if isinstance(value, BlockArgument) and value.owner is sig.op.body.blocks.first:
                found.add(value.index)
    return found


class GridWrites:
    """Which block of the grid wrote each element of each global tensor, across the batches of one `run_grid`:
    blocks run in no order, so an element two blocks write holds whichever wrote last, a race on a GPU (the
    CTA simulator reports it between CTAs). Blocks are numbered x fastest, then y, then z.

    The tensors a kernel adds into (`summed`: `tile.atomic_add`, `tile.scatter_add`) keep besides which block
    added into each element and which read it (`sums`): a read of an element another block adds into, or an add
    into one another block read or stored, depends on the order the blocks run in too (the CTA simulator and the
    PTX executor report it: a sum is read in a later kernel, or after semaphores order the blocks)."""

    def __init__(self, grid: tuple[int, int, int]):
        self.grid = grid
        self.writers: dict[int, np.ndarray] = {}  # id(tensor) -> the block id that wrote each element, -1 none
        self.summed: frozenset[int] = frozenset()  # ids of the tensors the kernel adds into (set by `run_grid`)
        self.sums: dict[tuple[str, int], np.ndarray] = {}  # ("added" | "read", id(tensor)) -> block marks

    def block_name(self, block: int) -> str:
        if block == SEVERAL_BLOCKS:
            return "several other blocks"
        gx, gy, _ = self.grid
        return f"block ({block % gx}, {block // gx % gy}, {block // (gx * gy)})"

    def _marks(self, kind: str, tensor: np.ndarray) -> np.ndarray:
        marks = self.sums.get((kind, id(tensor)))
        if marks is None:
            marks = self.sums[(kind, id(tensor))] = np.full(tensor.shape, -1, np.int64)
        return marks

    def _other(self, marks: np.ndarray | None, coords: tuple[np.ndarray, ...], blocks: np.ndarray):
        """(mask, block) of the elements at `coords` that `marks` give to a block other than each of `blocks`."""
        if marks is None:
            return np.zeros(len(blocks), bool), blocks
        other = marks[coords]
        return (other != -1) & (other != blocks), other

    def _mark(self, kind: str, tensor: np.ndarray, coords: tuple[np.ndarray, ...], blocks: np.ndarray) -> None:
        """Mark the elements at `coords` as `kind` by `blocks` (one per element; several blocks of a batch may
        name one element in one op): the block, or SEVERAL_BLOCKS once two have."""
        if not len(blocks):
            return
        flat = np.ravel_multi_index(coords, tensor.shape)
        order = np.argsort(flat, kind="stable")
        unique, start = np.unique(flat[order], return_index=True)
        low, high = np.minimum.reduceat(blocks[order], start), np.maximum.reduceat(blocks[order], start)
        mine = np.where(low == high, low, SEVERAL_BLOCKS)
        marks = self._marks(kind, tensor).reshape(-1)
        before = marks[unique]
        marks[unique] = np.where((before == -1) | (before == mine), mine, SEVERAL_BLOCKS)

    def record_sum_read(self, tensor: np.ndarray, coords: tuple[np.ndarray, ...], blocks: np.ndarray):
        """`blocks` (one per element) read `tensor` (one the kernel adds into, `summed`) at `coords`: (mask, block)
        of the elements another block added into."""
        clash = self.added_by_others(tensor, coords, blocks)
        self._mark("read", tensor, coords, blocks)
        return clash

    def record_add(self, tensor: np.ndarray, coords: tuple[np.ndarray, ...], blocks: np.ndarray):
        """`blocks` added into `tensor` at `coords`: (mask, block, what it did) of the elements another block
        read or stored."""
        for kind, table in (("read", self.sums.get(("read", id(tensor)))), ("stores", self.writers.get(id(tensor)))):
            clash, other = self._other(table, coords, blocks)
            if clash.any():
                return clash, other, kind
        self._mark("added", tensor, coords, blocks)
        return np.zeros(len(blocks), bool), blocks, ""

    def record(self, tensor: np.ndarray, coords: tuple[np.ndarray, ...], blocks: np.ndarray) -> np.ndarray:
        """Record that `blocks` (one id per element) wrote `tensor` at `coords` (`GlobalView.write`'s); the mask
        of those writes whose element another block wrote before, or writes in the same store, and the ids of
        those other blocks."""
        writer = self.writers.get(id(tensor))
        if writer is None:
            ids = np.int32 if math.prod(self.grid) < 2**31 else np.int64  # 4 bytes an element where they suffice
            writer = self.writers[id(tensor)] = np.full(tensor.shape, -1, ids)
        before = writer[coords]
        writer[coords] = blocks
        after = writer[coords]  # of two writes of one element in this store, the last one's block
        other = np.where((before >= 0) & (before != blocks), before, after)
        return other != blocks, other

    def added_by_others(self, tensor: np.ndarray, coords: tuple[np.ndarray, ...], blocks: np.ndarray):
        """(mask, block) of the elements at `coords` that a block other than each of `blocks` added into."""
        return self._other(self.sums.get(("added", id(tensor))), coords, blocks)


class GridWriteChecks:
    """The checks of `GridWrites` on the ops of `TileFunctions` (which sets `writes`, `block_ids`, `batch` and
    `arg_names`): each reports the first element whose result depends on the order of the blocks."""

    def _blocks(self, keep: np.ndarray) -> np.ndarray:
        """The grid's number of the block of each element `keep` ([B, ...]) selects."""
        return np.broadcast_to(self.block_ids.reshape((-1,) + (1,) * (keep.ndim - 1)), keep.shape)[keep]

    def _who(self, block, singular: str, plural: str) -> str:
        """"block (x, y, z) <singular>", or "several other blocks <plural>" (`GridWrites.block_name`)."""
        return f"{self.writes.block_name(int(block))} {plural if block == SEVERAL_BLOCKS else singular}"

    def _element(self, tensor: np.ndarray, coords: tuple[np.ndarray, ...], k: int) -> str:
        """"name[i, j]": the `k`th element of `coords` in `tensor`, named by its argument."""
        return f"{self.arg_names.get(id(tensor), 'a tensor')}[{', '.join(str(int(c[k])) for c in coords)}]"

    def _fail_at(self, op, keep: np.ndarray, k: int, message: str):
        where = np.zeros(self.batch.size, bool)
        where[np.nonzero(keep)[0][k]] = True
        self.batch.fail(op, message, where)

    def _sums(self, tensor: np.ndarray) -> bool:
        """Whether reads of `tensor` are checked against additions: the kernel adds into it, and its blocks are
        not ordered by semaphores (`GridWrites.summed`)."""
        return self.writes is not None and id(tensor) in self.writes.summed

    def _check_window_read(self, op, view: GlobalView) -> None:
        if self._sums(view.tensor):
            self._check_sum_read(op, view.tensor, *view.elements(self.batch.active))

    def _check_sum_read(self, op, tensor: np.ndarray, coords: tuple[np.ndarray, ...], keep: np.ndarray) -> None:
        """A read of elements of a tensor the kernel adds into (`GridWrites.summed`) that another block adds into:
        blocks run in no order, so the read may come before some of the additions."""
        clash, other = self.writes.record_sum_read(tensor, coords, self._blocks(keep))
        if clash.any():
            k = int(np.argmax(clash))
            self._fail_at(op, keep, k, f"reads {self._element(tensor, coords, k)}, which {self._who(other[k], 'adds', 'add')} into: "
                                       "blocks run in no order, so the read may come before some of the "
                                       "additions (a race on a GPU: read the sum in a later kernel, or order the "
                                       "blocks with tile.sem_signal and tile.sem_wait)")

    def _check_add(self, op, tensor: np.ndarray, coords: tuple[np.ndarray, ...], keep: np.ndarray) -> None:
        """An addition into elements another block read or stored: which it saw, or kept, depends on the order
        the blocks run in."""
        if self.writes is None:
            return
        clash, other, what = self.writes.record_add(tensor, coords, self._blocks(keep))
        if clash.any():
            k = int(np.argmax(clash))
            did = ("reads", "read") if what == "read" else ("stores", "store")
            self._fail_at(op, keep, k, f"adds into {self._element(tensor, coords, k)}, which {self._who(other[k], *did)} too: "
                                       f"blocks run in no order, so the {did[1]} and the addition are unordered "
                                       "(a race on a GPU: read the sum in a later kernel, or order the blocks with "
                                       "tile.sem_signal and tile.sem_wait)")

    def _check_one_writer(self, op, dest: GlobalView, written: tuple[tuple[np.ndarray, ...], np.ndarray]) -> None:
        """No element of a global tensor is written by two blocks (`GridWrites`): which value it keeps would
        depend on the order the blocks run in; nor stored by one and added into by another."""
        if self.writes is None:
            return
        coords, keep = written
        blocks = self._blocks(keep)
        added, adder = self.writes.added_by_others(dest.tensor, coords, blocks)
        if added.any():
            k = int(np.argmax(added))
            self._fail_at(op, keep, k, f"writes {self._element(dest.tensor, coords, k)}, which "
                                       f"{self._who(adder[k], 'adds', 'add')} "
                                       "into: blocks run in no order, so the store and the addition are "
                                       "unordered (a race on a GPU: add into the element from every block)")
        clash, other = self.writes.record(dest.tensor, coords, blocks)
        if clash.any():
            k = int(np.argmax(clash))
            self._fail_at(op, keep, k, f"writes {self._element(dest.tensor, coords, k)}, which "
                                       f"{self.writes.block_name(int(other[k]))} "
                                       "writes too: blocks run in no order, so the element would hold whichever wrote "
                                       "last (a race on a GPU: write each element from one block, or add into it "
                                       "with tile.atomic_add)")
