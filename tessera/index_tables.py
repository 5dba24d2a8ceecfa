"""What a kernel's index tables must hold, as its ABI declares it, and the one place those rules are checked.

A kernel that reaches its tensors through int32 tables (the packed and paged attention kernels: sequence starts
and ends, key lengths, a page table, cache lengths) trusts their values as FlashAttention's kernels do: a start
past the tensor reads another tensor's rows, a `max_seqlen_q` below a sequence's length leaves its last rows
unwritten, a page number out of range reads TMA's zero fill. So the kernel declares what its tables must hold,
beside its arguments, with the kernel attribute

    tile.tables = [{rows = "total_q", start = 3 : i64, end = 4 : i64, longest = "max_seqlen_q", written = true},
                   {rows = "total_k", start = 5 : i64, length = 6 : i64}]

and every launch (`tessera.launch` at each level and on the GPU, the GPU runtime's `run`, `prepare_torch`,
`launch_zeroed` on a compiled kernel) checks the tables it can read before it runs (`check_tables`), refusing by
name the table, its entry, the value and the bound with a ValueError. A table the host cannot read without a
synchronisation (a PyTorch CUDA tensor) is not read, as FlashAttention reads none.

Each entry of `tile.tables` describes one range per sequence b, b running over the tables' first dimension
(`batch`). Integers are argument indices (as `sm90.source` counts them), each an int32 input:

- `start` (optional: 0 when absent), and one of `end` or `length`, [batch] tables: sequence b's range is
  [start[b], end[b]), or [start[b], start[b] + length[b]); a range may be empty;
- `rows = "N"`: the range lies in the named size N: 0 <= start[b] <= end[b] <= N;
- or `pages = P`, `page_size = "S"`, `num_pages = "M"`: the range is of token positions reached through the
  page table P, [batch, max_pages]: 0 <= start[b] <= end[b] <= max_pages x S, and each page the range reads,
  P[b, j] for start[b] // S <= j < ceil(end[b] / S), lies in [0, M). The other slots are never read, so
  padding there (-1, as vLLM writes its block tables) is accepted;
- `longest = "L"` (optional): every range is at most the size L long (a launch size: the grid gives each
  sequence ceildiv(L, BM) query blocks, and rows past them would not be computed);
- `written = true` (optional): the kernel writes these rows, so no two sequences' ranges overlap (two blocks
  writing one row race).

`tessera.attention` and `attention_with_kvcache` check their own arguments (cu_seqlens, seqused_k,
cache_seqlens, page_table) with the same functions (`check_interval`, `check_longest`, `check_pages`) under
their own names. Split-KV's part count is a compile-time option of the builders (`check_num_splits`), no table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, IntegerType, StringAttr

TABLES_ATTR = "tile.tables"

_TABLE_KEYS = ("start", "end", "length", "pages")
_SIZE_KEYS = ("rows", "page_size", "num_pages", "longest")


@dataclass(frozen=True)
class SequenceRange:
    """One entry of `tile.tables` (module docstring): argument indices of its tables, names of its sizes."""

    start: int | None = None
    end: int | None = None
    length: int | None = None
    rows: str | None = None
    pages: int | None = None
    page_size: str | None = None
    num_pages: str | None = None
    longest: str | None = None
    written: bool = False

    @property
    def tables(self) -> tuple[int, ...]:
        return tuple(i for i in (self.start, self.end, self.length, self.pages) if i is not None)

    @property
    def sizes(self) -> tuple[str, ...]:
        return tuple(s for s in (self.rows, self.page_size, self.num_pages, self.longest) if s is not None)

    def attribute(self) -> DictionaryAttr:
        entries = {k: IntegerAttr(getattr(self, k), 64) for k in _TABLE_KEYS if getattr(self, k) is not None}
        entries.update({k: StringAttr(getattr(self, k)) for k in _SIZE_KEYS if getattr(self, k) is not None})
        if self.written:
            entries["written"] = IntegerAttr(1, IntegerType(1))
        return DictionaryAttr(entries)


def tables_attribute(ranges: Sequence[SequenceRange]) -> ArrayAttr:
    """The `tile.tables` attribute declaring `ranges` (the builders call it)."""
    return ArrayAttr([r.attribute() for r in ranges])


def parse_tables(attr) -> tuple[SequenceRange, ...] | str:
    """The ranges a `tile.tables` attribute declares (() for None), or a message naming what is malformed. The
    arguments and sizes it names are checked against the kernel by `kernel_abi.signature`."""
    if attr is None:
        return ()
    form = (f"'{TABLES_ATTR}' must be an array of dictionaries such as [{{rows = \"total_q\", start = 3 : i64, "
            "end = 4 : i64}]")
    if not isinstance(attr, ArrayAttr) or not all(isinstance(e, DictionaryAttr) for e in attr.data):
        return form
    ranges = []
    for n, entry in enumerate(attr.data):
        values: dict = {}
        for key, value in entry.data.items():
            if key in _TABLE_KEYS and isinstance(value, IntegerAttr) and value.type != IntegerType(1):
                values[key] = value.value.data
            elif key in _SIZE_KEYS and isinstance(value, StringAttr):
                values[key] = value.data
            elif key == "written" and isinstance(value, IntegerAttr) and value.type == IntegerType(1):
                values[key] = bool(value.value.data)
            else:
                return (f"'{TABLES_ATTR}' entry {n}: unknown or malformed '{key}' (argument indices: "
                        f"{', '.join(_TABLE_KEYS)}; size names: {', '.join(_SIZE_KEYS)}; written = true)")
        r = SequenceRange(**values)
        if (r.end is None) == (r.length is None):
            return f"'{TABLES_ATTR}' entry {n} needs one of 'end' and 'length'"
        if (r.rows is None) == (r.pages is None):
            return f"'{TABLES_ATTR}' entry {n} needs one of 'rows' and 'pages'"
        if (r.pages is None) != (r.page_size is None) or (r.pages is None) != (r.num_pages is None):
            return f"'{TABLES_ATTR}' entry {n}: 'pages' goes with 'page_size' and 'num_pages'"
        ranges.append(r)
    return tuple(ranges)


def table_problem(ranges: Sequence[SequenceRange], args: Sequence, defined: set[str],
                  launch: Sequence[str]) -> str | None:
    """What is wrong with a kernel's declared `ranges` given its arguments (`kernel_abi.KernelArg`s: name, role,
    type, dims), the sizes its inputs define and its launch sizes, or None: each table an int32 input, the
    range tables [batch] and the page table [batch, max_pages] over one first dimension, `rows`, `page_size`
    and `num_pages` sizes an input defines, `longest` one of those or a launch size."""
    for n, r in enumerate(ranges):
        what = f"'{TABLES_ATTR}' entry {n}"
        for i in r.tables:
            if not 0 <= i < len(args):
                return f"{what} names argument {i}; the kernel has {len(args)}"
            a = args[i]
            if a.role != "in" or not (isinstance(a.type.element_type, IntegerType)
                                      and a.type.element_type.width.data == 32):
                return f"{what} names argument {i} (%{a.name}), which is not an int32 input"
            rank = 2 if i == r.pages else 1
            if a.type.rank != rank:
                return f"{what}: %{a.name} must be {rank}-D"
        firsts = {str(list(args[i].dims)[0]) for i in r.tables}
        if len(firsts) != 1:
            return f"{what}: its tables must share their first dimension (the sequences), got {sorted(firsts)}"
        for name in (r.rows, r.page_size, r.num_pages):
            if name is not None and name not in defined:
                return f"{what} names the size '{name}', which no input defines"
        if r.longest is not None and r.longest not in defined and r.longest not in launch:
            return f"{what}: longest = '{r.longest}' is neither a size an input defines nor a launch size"
    return None


# region The checks, on the host's values of the tables

Label = Callable[[int], str]
"""How a message names entry b of a table: `lambda b: f"seqend_q[{b}]"`."""


def host_values(x) -> np.ndarray | None:
    """The values of an index table the host can read (a NumPy array, a CPU tensor), else None (a CUDA tensor,
    which would cost a synchronisation)."""
    from tessera.host_arrays import is_torch_tensor

    if is_torch_tensor(x):
        return None if x.is_cuda else x.detach().numpy()
    return np.asarray(x)


def check_interval(where: str, label: Label, values, low, high, reach: str | Label,
                   shown: Callable[[int], str] | None = None) -> None:
    """ValueError naming the first entry b whose value lies outside [low[b], high[b]] (scalars or arrays):
    "`where`: label(b) = shown(b) must lie in [low, high], reach(b)" (`reach` a text or a function of b)."""
    values = np.asarray(values, np.int64)
    low, high = (np.broadcast_to(np.asarray(x, np.int64), values.shape) for x in (low, high))
    bad = (values < low) | (values > high)
    if bad.any():
        b = int(np.argmax(bad))
        value = shown(b) if shown is not None else str(int(values[b]))
        why = reach(b) if callable(reach) else reach
        raise ValueError(f"{where}: {label(b)} = {value} must lie in [{int(low[b])}, {int(high[b])}], {why}")


def check_longest(where: str, name: str, longest: int, lengths) -> None:
    """ValueError unless every sequence's length is at most the launch size `name` = `longest`."""
    lengths = np.asarray(lengths, np.int64)
    if lengths.size and int(lengths.max()) > longest:
        b = int(np.argmax(lengths))
        raise ValueError(f"{where}: {name} = {longest} is smaller than the longest sequence ({int(lengths[b])}), "
                         f"sequence {b}: its rows past the first {longest} would not be computed")


def check_disjoint(where: str, starts, ends, label: Label) -> None:
    """ValueError naming two sequences whose (non-empty) ranges [starts[b], ends[b]) share a row (`label(b)`
    names the table entry that starts sequence b). Sorted by start, an overlap shows between neighbours."""
    starts, ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    used = np.flatnonzero(ends > starts)
    order = used[np.argsort(starts[used], kind="stable")]
    clash = np.flatnonzero(ends[order[:-1]] > starts[order[1:]])
    if clash.size:
        a, b = int(order[clash[0]]), int(order[clash[0] + 1])
        raise ValueError(f"{where}: sequences {a} and {b} both cover row {int(starts[b])}: their rows are "
                         f"[{int(starts[a])}, {int(ends[a])}) and [{int(starts[b])}, {int(ends[b])}) ({label(a)}, "
                         f"{label(b)}); the kernel writes each sequence's rows, so two sequences' rows must not "
                         "overlap")


def check_pages(where: str, table: np.ndarray, ends, page_size: int, num_pages: int, table_name: str,
                cache_name: str, starts=None) -> None:
    """ValueError naming the first entry of `table` [batch, max_pages] outside [0, num_pages) among the pages
    sequence b reads, columns starts[b] // page_size to ceil(ends[b] / page_size) (every column where `ends` is
    None: not readable on the host). The other slots are never read: padding there (-1) is accepted."""
    table = np.asarray(table, np.int64)
    reached = np.ones(table.shape, bool)
    if ends is not None:
        column = np.arange(table.shape[1])[None, :]
        first = 0 if starts is None else np.asarray(starts, np.int64)[:, None] // page_size
        reached = (column >= first) & (column < -(-np.asarray(ends, np.int64)[:, None] // page_size))
    bad = reached & ((table < 0) | (table >= num_pages))
    if bad.any():
        b, j = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"{where}: {table_name} holds page {int(table[b, j])}, outside the {num_pages} pages of "
                         f"{cache_name}, at [{b}, {j}], which sequence {b} reads")


def check_tables(where: str, ranges: Sequence[SequenceRange], tables: Mapping[int, object],
                 names: Callable[[int], str], sizes: Mapping[str, int]) -> None:
    """Check the tables of a launch against the kernel's declared `ranges` (module docstring): `tables` maps an
    argument index to the array given (NumPy or PyTorch; a CUDA tensor is not read, and a range with one is not
    checked; nor one with a table of other than integers, which the launch refuses by its type), `names(i)`
    names argument i in messages, `sizes` are the launch's bound sizes. ValueError naming
    the table, its entry, the value and the bound."""
    for r in ranges:
        values = {i: host_values(tables[i]) for i in r.tables}
        if any(v is None or v.dtype.kind not in "iu" for v in values.values()):
            continue  # not readable here (a CUDA tensor), or not integers (refused by the launch's type check)
        label = {i: (lambda b, n=names(i): f"{n}[{b}]") for i in r.tables}
        if r.rows is not None:
            limit, reach = sizes[r.rows], f"within the {sizes[r.rows]} rows of {r.rows}"
        else:
            max_pages = values[r.pages].shape[1]
            limit = max_pages * sizes[r.page_size]
            reach = (f"within the {limit} rows {names(r.pages)} reaches ({max_pages} pages of "
                     f"{r.page_size} = {sizes[r.page_size]})")
        starts = np.zeros(len(values[r.end if r.end is not None else r.length]), np.int64)
        if r.start is not None:
            starts = values[r.start].astype(np.int64)
            check_interval(where, label[r.start], starts, 0, limit, f"the sequence's first row, {reach}")
        start_of = (lambda b: f"its start {label[r.start](b)}") if r.start is not None else (lambda b: "0")
        if r.end is not None:
            ends = values[r.end].astype(np.int64)
            check_interval(where, label[r.end], ends, starts, limit,
                           lambda b: f"the sequence's end: from {start_of(b)} on, {reach}")
        else:
            lengths = values[r.length].astype(np.int64)
            check_interval(where, label[r.length], lengths, 0, limit - starts,
                           lambda b: f"the sequence's length: its rows from {start_of(b)} on lie {reach}")
            ends = starts + lengths
        if r.longest is not None:
            check_longest(where, r.longest, sizes[r.longest], ends - starts)
        if r.written:
            check_disjoint(where, starts, ends, label[r.start if r.start is not None else r.end])
        if r.pages is not None:
            check_pages(where, values[r.pages], ends, sizes[r.page_size], sizes[r.num_pages], names(r.pages),
                        f"the cache ({r.num_pages})", starts)


# endregion
