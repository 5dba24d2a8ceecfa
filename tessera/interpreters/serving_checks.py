"""Checks a serving launch asks every simulator to make: writes that leave their sequence, and reads of a paged
cache that leave their page.

A packed (varlen) output belongs row by row to the sequences of `cu_seqlens`: the blocks of sequence b
(program id z = b) may write only its rows [cu_seqlens[b], cu_seqlens[b + 1]); a write elsewhere lands in
another sequence's rows, which a later block may or may not overwrite, so comparing results does not always
see it. A paged cache is read one box per key block: a box that crosses the end of a page reads the rows of
whatever page follows in memory (or TMA's zero fill), and a page number out of range reads outside the cache;
both are silent in hardware.

`checking(*checks)` makes the checks active for the launches in its scope (a context variable, so threads
and tasks do not see each other's); each simulator calls the functions below at its global stores and
its copies into shared memory (Tile interpreter: `tile.store_global[_rows]`, `tile.cp_async`,
`tile.cp_async_gather`; CTA simulator: `sm90.st_global`, `sm90.tma_load`, `sm90.cp_async`; PTX executor:
`st.global`, `cp.async.bulk.tensor`, `cp.async`). A gather of rows reads each row through the page table, so
it can only meet a page number out of range (a row never crosses its page). They
name tensors as the Tile IR kernel does ("O", "K"), whatever the level calls the parameter standing for
it ("%O", "K_map128", "argument 7 (param_O_ptr)").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SequenceRows:
    """Output `arg` (of `shape`, elements of `itemsize` bytes, row-major) packs sequences along dimension
    `axis`: blocks with program id z may write only the rows [starts[z], ends[z]) of that dimension."""

    arg: str
    axis: int
    starts: np.ndarray
    ends: np.ndarray
    shape: tuple[int, ...]
    itemsize: int

    def bad_rows(self, rows: np.ndarray, z: np.ndarray) -> np.ndarray:
        """Mask of the writes to `rows` (indices along `axis`) by blocks `z` outside their sequence."""
        z = np.asarray(z, np.int64)
        inside = (z >= 0) & (z < len(self.starts))
        zc = np.where(inside, z, 0)
        return ~inside | (rows < self.starts[zc]) | (rows >= self.ends[zc])

    def message(self, row: int, z: int) -> str:
        if not 0 <= z < len(self.starts):
            return f"writes row {row} of %{self.arg} from block z={z}, which has no sequence"
        return (f"writes row {row} of %{self.arg}, outside its sequence {z}'s rows [{int(self.starts[z])}, "
                f"{int(self.ends[z])}) (cu_seqlens[{z}], cu_seqlens[{z + 1}])")


@dataclass(frozen=True)
class PagedCache:
    """Input `arg` is a paged cache whose dimension `page_axis` numbers the pages and `row_axis` the rows of a
    page ([num_pages, heads_k, page_size, D]: 0 and 2): every box read must lie inside the tensor."""

    arg: str
    page_axis: int = 0
    row_axis: int = 2
    pages: int | None = None
    """The cache's page count, if known: then every page number read from `table` is checked against it
    where it is read (the PTX executor, whose allocations are contiguous, reads a row of a page out of
    range from another allocation without noticing)."""
    table: str = "page_table"

    def problem(self, shape: Sequence[int], start: Sequence[int], extent: Sequence[int]) -> str | None:
        """Why the box at `start` (outermost first) of `extent` elements per dimension leaves its page, or
        None when it lies inside the cache."""
        page, pages = int(start[self.page_axis]), int(shape[self.page_axis])
        if not 0 <= page < pages or extent[self.page_axis] != 1:
            return page_out_of_range(self.arg, page, pages)
        row, rows, n = int(start[self.row_axis]), int(shape[self.row_axis]), int(extent[self.row_axis])
        if row < 0 or row + n > rows:
            return (f"a box of rows [{row}, {row + n}) of page {page} of %{self.arg} crosses a page boundary "
                    f"(page_size {rows})")
        for axis, (s, e, d) in enumerate(zip(start, extent, shape)):
            if s < 0 or s + e > d:
                return f"a box of %{self.arg} leaves the cache along dimension {axis} ([{s}, {s + e}) of {d})"
        return None


def page_out_of_range(arg: str, page: int, pages: int) -> str:
    """The report of a page number `page` read from a page table for a cache `arg` of `pages` pages."""
    return f"page-table entry {page} of %{tile_name(arg)} is out of range [0, {pages})"


def check_page_numbers(name: str, values: np.ndarray) -> str | None:
    """For 32-bit words read from tensor `name`: if it is the page table of a checked cache whose page count is
    known, the message about the first page number outside it, or None."""
    base = tile_name(name)
    for check in _ACTIVE.get():
        if isinstance(check, PagedCache) and check.table == base and check.pages is not None:
            bad = (values < 0) | (values >= check.pages)
            if bad.any():
                return page_out_of_range(check.arg, int(values[np.argmax(bad)]), check.pages)
    return None


def check_gathered_rows(name: str, byte_offsets: np.ndarray, shape: Sequence[int], itemsize: int) -> str | None:
    """For row reads of a paged cache `name` ([num_pages, ...], row-major, `shape`) at `byte_offsets` from its
    first byte (the gather's cp.async copies): the message about the first one outside the cache's pages, or
    None. A page number out of range puts the row outside the tensor, which is how the pointer's reads show it."""
    check = paged_check(name)
    if check is None or len(byte_offsets) == 0:
        return None
    page_bytes = math.prod(shape[1:]) * itemsize
    pages = np.asarray(byte_offsets, np.int64) // page_bytes
    bad = (pages < 0) | (pages >= shape[0])
    if bad.any():
        return page_out_of_range(name, int(pages[np.argmax(bad)]), int(shape[0]))
    return None


_ACTIVE: ContextVar[tuple] = ContextVar("tessera_serving_checks", default=())


@contextmanager
def checking(*checks: SequenceRows | PagedCache) -> Iterator[None]:
    """Make `checks` active for the launches inside the `with` block."""
    token = _ACTIVE.set(_ACTIVE.get() + tuple(checks))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def tile_name(name: str) -> str:
    """The Tile IR argument a simulator's name for a parameter stands for: "%O", "O_ptr", "K_map128",
    "param_K_map16", "argument 7 (param_O_ptr)" -> "O", "K"."""
    found = re.fullmatch(r"argument \d+ \((.*)\)", name)
    name = (found.group(1) if found else name).lstrip("%").removeprefix("param_")
    return re.sub(r"(_ptr|_map\d+)$", "", name)


def rows_check(name: str) -> SequenceRows | None:
    base = tile_name(name)
    return next((c for c in _ACTIVE.get() if isinstance(c, SequenceRows) and c.arg == base), None)


def paged_check(name: str) -> PagedCache | None:
    base = tile_name(name)
    return next((c for c in _ACTIVE.get() if isinstance(c, PagedCache) and c.arg == base), None)


def active() -> bool:
    return bool(_ACTIVE.get())


def active_checks() -> tuple:
    """The checks active now, to make them active again with `checking(*checks)` elsewhere (in the worker
    process that runs a group of CTAs, `tessera.interpreters.parallel`)."""
    return _ACTIVE.get()


def check_rows(name: str, rows: np.ndarray, z: np.ndarray) -> str | None:
    """For a store to `rows` (indices along the checked axis) by blocks `z`: the message about the first one
    outside its sequence, or None."""
    check = rows_check(name)
    if check is None or len(rows) == 0:
        return None
    bad = check.bad_rows(rows, z)
    if bad.any():
        i = int(np.argmax(bad))
        return check.message(int(rows[i]), int(np.broadcast_to(z, bad.shape)[i]))
    return None


def check_byte_store(name: str, byte_offsets: np.ndarray, z: np.ndarray) -> str | None:
    """For a store at `byte_offsets` from the start of tensor `name` by blocks `z`: the message about the
    first one outside its sequence, or None."""
    check = rows_check(name)
    if check is None or len(byte_offsets) == 0:
        return None
    inner = math.prod(check.shape[check.axis + 1:])
    rows = (np.asarray(byte_offsets, np.int64) // check.itemsize // inner) % check.shape[check.axis]
    bad = check.bad_rows(rows, z)
    if bad.any():
        i = int(np.argmax(bad))
        return check.message(int(rows[i]), int(np.broadcast_to(z, bad.shape)[i]))
    return None


def check_box(name: str, dims_innermost_first: Sequence[int], coords_innermost_first: Sequence[int],
              box_innermost_first: Sequence[int]) -> str | None:
    """For a TMA box read from the tensor map of `name`: the message if it leaves its page, or None."""
    check = paged_check(name)
    if check is None:
        return None
    return check.problem(tuple(reversed(dims_innermost_first)), tuple(reversed(coords_innermost_first)),
                         tuple(reversed(box_innermost_first)))
