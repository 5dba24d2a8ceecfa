"""The per-byte records of global-memory accesses that `global_races.GlobalAccesses` checks and updates: who
accessed each byte of a tensor, for the CTA simulator's happens-before of global memory.

Every global access the simulator makes records, per byte of the tensor it touches, who made it: the CTA (its
linear rank in the grid), the thread, the time on that CTA's clock (the clock `happens_before` orders), the op,
and whether it was *atomic* (red/atom adds, bulk reductions, the semaphore ops). The last write of each byte is
kept, and its readers since: the latest one and the latest of another CTA than that one, which is enough to
find a reader of another CTA even when this CTA read the byte after it.

Invariants: a byte whose `cta` is `NONE` holds no access, and the other fields of that byte are never read; a
`_Side` allocates its arrays only at its first recorded access (`_Side.recorded` says whether it has). These
structures only hold records: what races, and when a record is replaced, is decided in `global_races`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tessera.interpreters.byte_box import put, take
from tessera.interpreters.ranges import marked
from tessera.interpreters.sm90.registers import WORD_BYTES
from tessera.interpreters.truth import all_set, any_set

NONE = -1


_SIDE_FIELDS = ("cta", "thread", "time", "op", "atomic", "proxy_async")


def _words(records: np.ndarray) -> np.ndarray:
    """The per-byte `records` of a tensor (1-D, contiguous, a multiple of 4 bytes long) as one item per aligned
    4-byte word: its four bytes' records (a view), so that a word store gathers and scatters a quarter of the items
    (`global_races.GlobalAccesses.store_words`)."""
    return records.view(np.dtype((np.void, WORD_BYTES * records.itemsize)))


def _per_byte(value, dtype: np.dtype, count: int) -> np.ndarray:
    """`value` (a scalar, or one per word) for each byte of `count` words, as `_words` items."""
    per_word = np.asarray(value, dtype)
    return _words(np.ascontiguousarray(np.broadcast_to(per_word[..., None], (count, WORD_BYTES))).reshape(-1))


_MARKED_SPAN = 4
"""`_distinct` tells a store's bytes distinct by a table over their span up to this many times their count (a
linear pass, a third of a sort's time at 32K bytes), by a sort beyond."""


def _distinct(offsets: np.ndarray) -> tuple[bool, tuple[int, int] | None]:
    """(whether `offsets` (not empty) are all distinct; (low, high) where they are every offset of [low, high) once,
    else None): by marking them in a table over their span, up to `_MARKED_SPAN` times their count (a tile's rows),
    else by one unstable sort."""
    low, high = int(offsets.min()), int(offsets.max())
    if high - low < _MARKED_SPAN * len(offsets):
        marks = marked(offsets, low, high + 1)
        if high - low + 1 == len(offsets):  # as many as the span holds: distinct if all are marked
            return (True, (low, high + 1)) if all_set(marks) else (False, None)
        return np.count_nonzero(marks) == len(offsets), None
    ordered = np.sort(offsets)
    return not any_set(ordered[1:] == ordered[:-1]), None


class _Side:
    """One recorded access per byte of a tensor: CTA rank, thread, time on that CTA's clock, op index, atomic,
    and whether it was made through the async proxy (a TMA copy's read, a bulk reduction's write).

    The arrays (22 bytes per byte of the tensor) are allocated when an access is first recorded (`set`,
    `copy_from`): until then every byte holds none (`recorded` is False) and a check against the side has
    nothing to find. A launch's inputs read only by TMA, and the read sides of a tensor only written (a
    kernel's output), never allocate them (allocating them at every launch cost about 17 ms at 512 tokens)."""

    __slots__ = ("size", "pool", *_SIDE_FIELDS)

    def __init__(self, size: int, pool=None):
        self.size = size
        self.pool = pool  # the launch's `record_pool.RecordPool` the arrays are lent from (None: allocated)

    @classmethod
    def empty(cls, size: int, pool=None) -> _Side:
        return cls(size, pool)

    @property
    def recorded(self) -> bool:
        """Some access is recorded (else every byte holds none and the arrays are not allocated). Asks the slot
        itself: `hasattr` would reach `__getattr__`, which allocates them."""
        try:
            object.__getattribute__(self, "cta")
        except AttributeError:
            return False
        return True

    def __getattr__(self, name: str):  # an array not yet allocated: the side's first use of its records
        if name not in _SIDE_FIELDS:
            raise AttributeError(name)
        self._allocate()
        return object.__getattribute__(self, name)

    def _allocate(self) -> None:
        size, pool = self.size, self.pool

        def full(value, dtype, unset: bool = False) -> np.ndarray:
            if pool is None:
                return np.full(size, value, dtype)
            return pool.unset(size, dtype, launch=True) if unset else pool.full(size, value, dtype, launch=True)

        # the fields but `cta` are read only where `cta` holds an access, which `set` or `copy_from` wrote with
        # them: from a pool they are lent unset (no refill: 2.3 MB a launch at 512 tokens)
        self.cta, self.thread = full(NONE, np.int32), full(NONE, np.int32, unset=True)
        self.time, self.op = full(NONE, np.int64, unset=True), full(NONE, np.int32, unset=True)
        self.atomic, self.proxy_async = full(False, bool, unset=True), full(False, bool, unset=True)

    def set(self, where, cta: int, threads, time: int, op: int, atomic: bool, proxy_async: bool = False,
            span: tuple[int, int] | None = None) -> None:
        """Record an access of the bytes `where` (`threads` one per byte or one for all); `span` (low, high): `where`
        holds every byte of [low, high) once, in any order, so that the fields with one value for every byte are
        written as that slice instead of by index."""
        for records, value in ((self.cta, cta), (self.thread, threads), (self.time, time), (self.op, op),
                               (self.atomic, atomic), (self.proxy_async, proxy_async)):
            if span is not None and np.ndim(value) == 0:
                records[span[0]:span[1]] = value
            else:
                put(records, where, value)

    def copy_from(self, other: _Side, where) -> None:
        if not other.recorded:  # none recorded there: so none here either
            if self.recorded:
                put(self.cta, where, NONE)
            return
        for name in _SIDE_FIELDS:
            put(getattr(self, name), where, take(getattr(other, name), where))


@dataclass
class _Until:
    """Per byte, the latest TMA copy that reads it: its CTA rank (NONE: none since the last write), issuing thread,
    op index, and the mbarrier instance and phase it completes on (its read of global memory ends there)."""

    cta: np.ndarray
    thread: np.ndarray
    op: np.ndarray
    barrier: np.ndarray
    phase: np.ndarray

    @classmethod
    def empty(cls, size: int) -> _Until:
        return cls(*(np.full(size, NONE, np.int64) for _ in range(5)))


@dataclass(eq=False)
class _AsyncRead:
    """A TMA copy's read of a tensor, recorded later (`global_races.GlobalAccesses.async_read`): its order among the
    tensor's reads (`seq`), its bytes, CTA rank, issuing thread, time, op index, and (mbarrier instance, phase) or
    None."""

    seq: int
    offsets: np.ndarray
    rank: int
    thread: int
    time: int
    op: int
    until: tuple[int, int] | None


@dataclass
class _TensorRecord:
    write: _Side
    read: _Side
    other_read: _Side
    """The latest reader of another CTA than `read`'s (so a write checks both)."""
    until: _Until | None = None
    """The TMA copies reading the tensor until their mbarrier phase completes (allocated at the first)."""
    written: bool = False
    """Some write of the tensor is recorded (else `write` holds none, and a read has nothing to race with)."""
    deferred: dict = field(default_factory=dict)
    """TMA reads not yet recorded per byte (`global_races.GlobalAccesses.async_read`), per byte set: [the latest, the
    latest of another CTA than the latest's, the latest with an `until`] (`_AsyncRead`s or None)."""
    reads: int = 0
    """TMA reads deferred so far (their `seq`)."""
    adders: dict = field(default_factory=dict)
    """Per CTA rank that added into the tensor (red/atom, `access` with `atomic`): the time of each of its
    threads' latest add ([T], NONE where none), which a plain read of an added word must follow (`unordered_add`)."""
    bulk_added: bool = False
    """A bulk reduction added into the tensor: its adds are in flight past their issue, so no time orders them."""
