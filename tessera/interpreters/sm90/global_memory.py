"""Global memory as the CTA simulator sees it: the kernel's tensors (NumPy arrays, row-major contiguous where a
pointer reaches them) at made-up 64-bit addresses.

Tensor k of the Tile-level argument list starts at `(k + 1) << 40`, so a pointer plus a byte offset maps back to
one tensor and one byte in it. `ld_global`/`st_global` move 32-bit words (`ld_global_u16`/`st_global_b16` 16-bit ones); an access outside every
tensor, or not aligned to its size, is an error naming the op and the thread.

Reductions between CTAs (`reduce_add_f32`: red/atom.global.add.f32 and cp.reduce.async.bulk): the CTAs of a
launch run one after another, in any order the launcher chooses, so an atomic add is a read-modify-write of
the f32. What no order makes right is reported, per 32-bit word, naming both CTAs: a plain store to a word
another CTA adds into (a race: the store and the add are unordered), and a plain load of a word of a
*reduction target* (a tensor the kernel adds into with red or a bulk reduction, `reduction_targets`) that
another CTA adds into: its value depends on which contributions have landed, unless happens-before orders
every add of the other CTAs before the read (a semaphore signalled after the adds and acquired before the read).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import BlockArgument, Operation

from tessera.interpreters import serving_checks
from tessera.interpreters.ptx.numerics import flush_f32
from tessera.interpreters.sm90.global_races import GlobalAccesses, grid_rank
from tessera.interpreters.sm90.registers import WORD_BYTES
from tessera.interpreters.truth import all_set, any_set

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta_view import CtaView

TENSOR_SPACING_BITS = 40
"""Each tensor gets a 1 TiB window of the address space."""

NO_CTA, MANY_CTAS = -1, -2
"""Marks of a word in the reduction checks: no CTA, more than one CTA."""


def _by_tensor(tensor: np.ndarray):
    """(tensor index, selection of its accesses) for each tensor among `tensor` (per access), in order; the
    selection is every access (a slice: no copies) where they all address one tensor, the usual."""
    if len(tensor) and tensor.min() == tensor.max():
        return [(tensor[0], slice(None))]
    return [(k, tensor == k) for k in np.unique(tensor)]


class GlobalMemory:
    def __init__(self, arrays: list[np.ndarray], names: list[str], reduction_targets=(), atomic_targets=(),
                 grid: tuple[int, int, int] = (1, 1, 1)):
        """`arrays` in argument order. A strided view (read through a tensor map only) has no pointer window:
        `address` refuses it. `reduction_targets`: the indices of the tensors the kernel adds into with red
        or bulk reductions, whose plain loads are checked against other CTAs' adds; `atomic_targets` those
        and the tensors of atom (plain stores to them are checked; a tensor an add reaches joins them)."""
        self.arrays = arrays
        self.names = names
        self.grid = grid
        self.reduction_targets = frozenset(reduction_targets)
        self.atomic_targets = set(atomic_targets) | self.reduction_targets
        # per tensor, per 32-bit word: the CTA (its linear rank) that stored / added / read it; -1 none,
        # MANY_CTAS several. Allocated when a tensor is first touched that way.
        self._stored: dict[int, np.ndarray] = {}
        self._added: dict[int, np.ndarray] = {}
        self._read: dict[int, np.ndarray] = {}
        self._bytes = [array.reshape(-1).view(np.uint8) if array.flags.c_contiguous else np.zeros(0, np.uint8)
                       for array in arrays]
        self.accesses = GlobalAccesses(list(names), grid)
        """Who accessed each byte, for the happens-before checks (`global_races`)."""

    def _access(self, cta: CtaView, op: Operation, tensor: int, offsets: np.ndarray, threads: np.ndarray,
                nbytes: int, write: bool, atomic: bool = False, proxy_async: bool = False) -> None:
        """Check and record (`global_races`) the accesses of `nbytes` at `offsets` of `tensor` by `threads`."""
        self.accesses.access(cta, op, tensor, self._bytes[tensor].size,
                             (offsets[:, None] + np.arange(nbytes)).reshape(-1), np.repeat(threads, nbytes), write,
                             atomic, proxy_async)

    def note_async_read(self, cta: CtaView, op: Operation, tensor_map, coords: list[int], thread: int,
                        until: tuple[int, int] | None = None) -> None:
        """A TMA copy issued by `thread` reads the box at `coords` of `tensor_map` through the async proxy: checked
        and recorded like a load (`global_races`: a plain write of another thread or CTA that nothing orders
        before it is a race; one that is ordered still needs a proxy fence for global memory,
        `memory_model.PROXY_FENCE_STATE_SPACE`), and read until it completes `until` (mbarrier instance, phase):
        the CTA's later writes of those bytes must follow that completion. A tensor that is not row-major (a
        strided view no pointer reaches) is not recorded: no generic access can touch it."""
        index = self._tensor_of(tensor_map.array)
        if index is None or not self._bytes[index].size:
            return
        self.accesses.async_read(cta, op, index, self._bytes[index].size, tensor_map.box_offsets(coords), thread, until)

    def _tensor_of(self, array: np.ndarray) -> int | None:
        """The index of the argument `array` is (by identity), or None."""
        return next((k for k, a in enumerate(self.arrays) if a is array), None)

    def pointer(self, index: int) -> int:
        """The address of tensor `index` for a pointer argument; ValueError for a strided view."""
        if not self.arrays[index].flags.c_contiguous:
            raise ValueError(f"tensor {self.names[index]} is passed by pointer, so it must be row-major contiguous "
                             f"(byte strides {self.arrays[index].strides}); only tensor maps take strided views")
        return self.address(index)

    @staticmethod
    def address(index: int) -> int:
        """The address of the first byte of tensor `index`."""
        return (index + 1) << TENSOR_SPACING_BITS

    def _resolve(self, cta: CtaView, op: Operation, addresses: np.ndarray, threads: np.ndarray, what: str,
                 nbytes: int = WORD_BYTES):
        tensor = (addresses >> TENSOR_SPACING_BITS) - 1
        offset = addresses & ((1 << TENSOR_SPACING_BITS) - 1)
        sizes = np.array([b.size for b in self._bytes] + [0], np.int64)
        known = (tensor >= 0) & (tensor < len(self._bytes))
        inside = known & (offset + nbytes <= sizes[np.where(known, tensor, len(self._bytes))])
        if not all_set(inside):
            i = int(np.argmax(~inside))
            where = (f"outside tensor {self.names[tensor[i]]} ({sizes[tensor[i]]} bytes) at byte offset {offset[i]}"
                     if known[i] else "outside every tensor of the kernel")
            cta.fail(op, f"{what} {nbytes} bytes at global address {int(addresses[i]):#x}, {where}",
                     int(threads[i]))
        misaligned = offset % nbytes != 0
        if any_set(misaligned):
            i = int(np.argmax(misaligned))
            cta.fail(op, f"{what} {nbytes} bytes at global address {int(addresses[i]):#x}, which is not "
                         f"{nbytes}-byte aligned",
                     int(threads[i]))
        return tensor, offset

    def load_words(self, cta: CtaView, op: Operation, addresses: np.ndarray, threads: np.ndarray,
                   nbytes: int = WORD_BYTES, atomic: bool = False) -> np.ndarray:
        """The little-endian words of `nbytes` (4, or 2: zero-extended) at `addresses`, as uint32; `atomic`: the
        load of an atomic (a semaphore's), which races with no other atomic."""
        tensor, offset = self._resolve(cta, op, addresses, threads, "loads", nbytes)
        words = np.zeros(len(addresses), np.uint32)
        for k, sel in _by_tensor(tensor):
            start = offset[sel][:, None] + np.arange(nbytes)
            words[sel] = self._bytes[k][start].view("<u4" if nbytes == 4 else "<u2").reshape(-1)
            if int(k) in self.reduction_targets:
                cta.bulk.check_landed(op, addresses[sel], threads[sel])
                self._check_read(cta, op, int(k), offset[sel] // WORD_BYTES, threads[sel])
            self._access(cta, op, int(k), offset[sel], threads[sel], nbytes, False, atomic)
        return words

    def load_bytes(self, cta: CtaView, op: Operation, addresses: np.ndarray, threads: np.ndarray,
                   nbytes: int) -> np.ndarray:
        """[n, nbytes] bytes at `addresses` (a cp.async's source), after the bounds and `serving_checks`
        checks (a row of a paged cache read through a page number out of range is reported as such)."""
        tensor = (addresses >> TENSOR_SPACING_BITS) - 1
        offset = addresses & ((1 << TENSOR_SPACING_BITS) - 1)
        if serving_checks.active():
            for k in np.unique(tensor):
                if 0 <= k < len(self.arrays):
                    sel = tensor == k
                    problem = serving_checks.check_gathered_rows(self.names[k], offset[sel], self.arrays[k].shape,
                                                                 self.arrays[k].dtype.itemsize)
                    if problem:
                        cta.fail(op, problem, int(threads[np.argmax(sel)]))
        tensor, offset = self._resolve(cta, op, addresses, threads, "reads", nbytes)
        data = np.zeros((len(addresses), nbytes), np.uint8)
        for k, sel in _by_tensor(tensor):
            data[sel] = self._bytes[k][offset[sel][:, None] + np.arange(nbytes)]
            self._access(cta, op, int(k), offset[sel], threads[sel], nbytes, False)
        return data

    def store_words(self, cta: CtaView, op: Operation, addresses: np.ndarray, threads: np.ndarray,
                    words: np.ndarray, nbytes: int = WORD_BYTES, atomic: bool = False) -> None:
        """Store the low `nbytes` (4, or 2) of each of `words` (uint32) at `addresses`, little-endian; `atomic`:
        the store of an atomic (a semaphore's)."""
        tensor, offset = self._resolve(cta, op, addresses, threads, "stores", nbytes)
        if serving_checks.active():
            for k in np.unique(tensor):
                problem = serving_checks.check_byte_store(self.names[k], offset[tensor == k], cta.cta_id[2])
                if problem:
                    cta.fail(op, problem, int(threads[np.argmax(tensor == k)]))
        words = words.astype("<u4")
        data = words.view(np.uint8).reshape(-1, WORD_BYTES)[:, :nbytes]
        for k, sel in _by_tensor(tensor):
            if int(k) in self.atomic_targets and not atomic:
                self._check_store(cta, op, int(k), offset[sel] // WORD_BYTES, threads[sel])
            target = self._bytes[k]
            whole = nbytes == WORD_BYTES and target.size % WORD_BYTES == 0  # aligned words (`_resolve`)
            if not (whole and not atomic and self.accesses.store_words(cta, op, int(k), target.size,
                                                                       offset[sel] // WORD_BYTES, threads[sel])):
                self._access(cta, op, int(k), offset[sel], threads[sel], nbytes, True, atomic)
            if whole:  # one item each
                target.view("<u4")[offset[sel] // WORD_BYTES] = words[sel]
            else:
                target[offset[sel][:, None] + np.arange(nbytes)] = data[sel]

    # region semaphores: release and acquire between CTAs (`global_races`)
    def _word(self, address: int) -> tuple[int, int]:
        return (address >> TENSOR_SPACING_BITS) - 1, address & ((1 << TENSOR_SPACING_BITS) - 1)

    def release(self, cta: CtaView, address: int, thread: int) -> None:
        """A `sem_signal` by `thread` of the word at `address` (already stored): what it knows is released."""
        self.accesses.release(cta, *self._word(address), thread)

    def acquire(self, cta: CtaView, address: int, threads: np.ndarray) -> None:
        """A successful `sem_try_wait` by `threads` on the word at `address`: they acquire what its signals
        released."""
        self.accesses.acquire(cta, *self._word(address), threads)

    # endregion
    # region reductions between CTAs
    def reduce_add_f32(self, cta: CtaView, op: Operation, addresses: np.ndarray, threads: np.ndarray,
                       values: np.ndarray, proxy_async: bool = False) -> np.ndarray:
        """Atomically add the f32 `values` at `addresses` (by `threads`), flushing subnormal inputs and results
        to zero (global f32 atomics are .ftz); several adds to one address apply in order. Returns the value
        each add saw before it (what atom.global.add.f32 returns). `proxy_async`: a bulk reduction's adds
        (the async proxy writes)."""
        tensor, offset = self._resolve(cta, op, addresses, threads, "adds to")
        old = np.zeros(len(addresses), np.float32)
        values = flush_f32(np.asarray(values, np.float32))
        for k in np.unique(tensor):
            sel = np.flatnonzero(tensor == k)
            words = offset[sel] // WORD_BYTES
            self.atomic_targets.add(int(k))
            self._check_add(cta, op, int(k), words, threads[sel])
            self._access(cta, op, int(k), offset[sel], threads[sel], WORD_BYTES, True, True, proxy_async)
            memory = self._bytes[int(k)].view("<f4")
            # one round per repeated address: the adds of a round hit distinct words
            order = np.argsort(words, kind="stable")
            rank = np.zeros(len(sel), np.int64)
            sorted_words = words[order]
            starts = np.r_[True, sorted_words[1:] != sorted_words[:-1]]
            run_start = np.maximum.accumulate(np.where(starts, np.arange(len(sel)), 0))
            rank[order] = np.arange(len(sel)) - run_start
            for r in range(int(rank.max(initial=-1)) + 1):
                pick = rank == r
                current = memory[words[pick]]
                old[sel[pick]] = current
                memory[words[pick]] = flush_f32(current + values[sel[pick]])
        return old

    def _marks(self, table: dict[int, np.ndarray], tensor: int) -> np.ndarray:
        if tensor not in table:
            table[tensor] = np.full(self._bytes[tensor].size // WORD_BYTES, NO_CTA, np.int32)
        return table[tensor]

    @staticmethod
    def _mark(marks: np.ndarray, words: np.ndarray, rank: int) -> None:
        before = marks[words]
        marks[words] = np.where((before == NO_CTA) | (before == rank), rank, MANY_CTAS)

    def _other(self, table: dict[int, np.ndarray], tensor: int, words: np.ndarray, rank: int):
        """The first of `words` that a CTA other than `rank` marked in `table`, and that CTA's description."""
        if tensor not in table:
            return None
        marks = table[tensor][words]
        other = (marks != NO_CTA) & (marks != rank)
        if not any_set(other):
            return None
        i = int(np.argmax(other))
        who = "several other CTAs" if marks[i] == MANY_CTAS else f"CTA {self._cta_name(int(marks[i]))}"
        return i, who

    def _where(self, tensor: int, word: int) -> str:
        return f"tensor {self.names[tensor]} at byte offset {word * WORD_BYTES}"

    def _check_store(self, cta: CtaView, op: Operation, tensor: int, words: np.ndarray, threads: np.ndarray) -> None:
        rank = grid_rank(cta)
        hit = self._other(self._added, tensor, words, rank)
        if hit is not None:
            i, who = hit
            cta.fail(op, f"stores plainly to {self._where(tensor, int(words[i]))}, which {who} adds into atomically "
                         "(a race between CTAs: the store and the atomic add are unordered)", int(threads[i]))
        self._mark(self._marks(self._stored, tensor), words, rank)

    def _check_read(self, cta: CtaView, op: Operation, tensor: int, words: np.ndarray, threads: np.ndarray) -> None:
        """A plain load of words of a reduction target that other CTAs add into is reported unless happens-before
        orders every such add before it (with `cta.races`: a semaphore the adders signalled after adding and the
        readers acquired, `GlobalAccesses.unordered_add`)."""
        rank = grid_rank(cta)
        hit = self._other(self._added, tensor, words, rank)
        if hit is not None:
            i, who = hit
            mark = int(self._added[tensor][words[i]])
            ranks = None if mark == MANY_CTAS else {mark}
            if not cta.races or self.accesses.unordered_add(cta, tensor, threads, ranks) is not None:
                cta.fail(op, f"reads the reduction target {self._where(tensor, int(words[i]))}, which {who} adds "
                             "into in this launch: it reads before every contribution landed (read it after the "
                             "kernel, e.g. in the next one, or after a sem_wait that every adding CTA signalled "
                             "after its adds)", int(threads[i]))
        self._mark(self._marks(self._read, tensor), words, rank)

    def _check_add(self, cta: CtaView, op: Operation, tensor: int, words: np.ndarray, threads: np.ndarray) -> None:
        rank = grid_rank(cta)
        for table, what in ((self._stored, "stored plainly to"), (self._read, "read")):
            hit = self._other(table, tensor, words, rank)
            if hit is not None:
                i, who = hit
                problem = ("a race between CTAs: the store and the atomic add are unordered" if table is self._stored
                           else "it read the reduction target before every contribution landed")
                cta.fail(op, f"adds into {self._where(tensor, int(words[i]))}, which {who} {what} earlier in this "
                             f"launch ({problem})", int(threads[i]))
        self._mark(self._marks(self._added, tensor), words, rank)

    def _cta_name(self, rank: int) -> str:
        gx, gy, _ = self.grid
        return str((rank % gx, rank // gx % gy, rank // (gx * gy)))

    # endregion


def pointer_sources(kernel, value, stop=()) -> set[int]:
    """The `sm90.source` of each pointer argument of `kernel` (a `target_abi.TargetKernel`) that `value` is computed
    from, through any chain of ops except the results of ops of the classes `stop` (a loaded value is data, not
    its tensor's address, where the caller says so)."""
    entry = kernel.op.body.blocks.first
    pointers = {i: arg.source for i, arg in enumerate(kernel.args) if arg.kind == "pointer"}
    found, stack, seen = set(), [value], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, BlockArgument):
            if v.owner is entry and v.index in pointers:
                found.add(pointers[v.index])
            continue
        if not isinstance(v.owner, stop):
            stack.extend(v.owner.operands)
    return found
