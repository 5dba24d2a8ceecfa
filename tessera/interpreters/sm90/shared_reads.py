"""The visibility checks of reads of a simulated CTA's shared memory against its byte tags (`shared_memory`: NEVER,
GENERIC, IN_FLIGHT, LANDED, CP_ASYNC), as the mixin `SharedReadChecks` of `shared_memory.SharedMemory`:
- a generic read (`ld_shared`) by thread r of a LANDED byte needs r to have observed phase `phase` of the
  barrier complete (a successful try_wait, or a bar_sync with a thread that did); of a GENERIC byte another
  thread wrote, the store must happen before the read (`happens_before`: a bar_sync, or an mbarrier release
  the reader acquired, on a path from the writer);
- an async-proxy read (a wgmma operand, a bulk copy's source) needs every thread of the issuing warpgroup to
  have observed the TMA's phase; a GENERIC byte must be covered by a fence_proxy_async on a happens-before
  path from the store into the issuing thread (for a warpgroup's wgmma: the writer itself, if it reads, and
  every reader outside the writer's warp; `proxy_fences`); a LANDED byte of a cp.async needs the fence too
  only under `CtaState.strict_proxy` (memory_model.CP_ASYNC_PROXY);
- nobody reads NEVER, IN_FLIGHT or CP_ASYNC bytes (the message names the reader's last completed wait).

`readable_lines` answers for whole lines: those whose every byte LANDED in phases the readers observed, found
once per change of any tag (`shared_memory`'s change epochs) and, where one TMA copy landed every line whole, from
its key (`line_keys`) without reading the bytes' tags.

Invariants: the checks read the tags and records `SharedMemory` keeps and write none of them (only the cache of
`readable_lines`, `_landed`, valid while `changes` is unchanged, and the cluster's read records, `note_read`); a
read that fails is reported through `cta.fail`, naming the reader.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.sm90.shared_tags import CP_ASYNC, EPOCH_BYTES, GENERIC, IN_FLIGHT, LANDED, NEVER
from tessera.interpreters.truth import all_set, any_set


def _phase_keys(barriers: np.ndarray, phases: np.ndarray):
    """The distinct (barrier, phase) tags of landed bytes, each as barrier << 32 | phase, ascending."""
    if barriers.min() == barriers.max() and phases.min() == phases.max():  # one copy's bytes, the usual
        return [int(barriers[0]) << 32 | int(phases[0])]
    return np.unique(barriers.astype(np.int64) << 32 | phases)


class SharedReadChecks:
    """The read checks of `shared_memory.SharedMemory` (module docstring), a mixin: it reads the host's `cta`,
    `size`, tags and records (`state`, `barrier`, `phase`, `writer`, `written_at`, `write_op`, `line_keys`,
    `changes`, `generic_span`), and calls its `locate` and `note_read` and the fence checks of its other base
    `proxy_fences.ProxyFenceChecks` (`_check_proxy_fenced`, `_buffer_fenced`)."""

    # region generic reads: ld_shared
    def check_generic_read(self, op: Operation, addresses: np.ndarray, readers: np.ndarray) -> None:
        state = self.state[addresses]
        self._refuse_unready(op, addresses, state, readers)
        landed = state == LANDED
        if any_set(landed):
            barrier, phase, reader = self.barrier[addresses][landed], self.phase[addresses][landed], readers[landed]
            unseen = self.cta.mbarriers.observed[barrier, reader] <= phase
            unseen &= ~self._copied_before(addresses[landed], reader)
            if any_set(unseen):
                i = np.argmax(unseen)
                self._unsignalled(op, addresses[landed][i], int(barrier[i]), int(phase[i]), int(reader[i]))
        stored = (state == GENERIC) & (self.writer[addresses] != readers)
        if any_set(stored):
            writer, reader = self.writer[addresses][stored], readers[stored]
            unordered = self.cta.hb.ordered[writer, reader] <= self.written_at[addresses][stored]
            if any_set(unordered):
                i = np.argmax(unordered)
                address = int(addresses[stored][i])
                store = int(self.write_op[address])  # the other side by its op, as `happens_before` names a write's
                other = f"`{describe_op(self.cta.hb.ops[store])}`" if store >= 0 else "a store"
                self.cta.fail(op, f"reads {self.locate(address)}, which {other} "
                                  f"({self.cta.thread_name(int(writer[i]))}) wrote, and no synchronisation orders "
                                  "the two (race: a bar_sync or an mbarrier release/wait between the write and this "
                                  "read is missing)", int(reader[i]))

    # endregion
    # region async-proxy reads: wgmma operands, bulk copies' sources
    def check_async_read(self, op: Operation, addresses: np.ndarray, readers: np.ndarray, what: str) -> None:
        """A warpgroup (`readers`, its 128 thread ids) reads `addresses` through the async proxy."""
        self.note_read(addresses, readers[0])
        state = self.state[addresses]
        landed = state == LANDED
        every = all_set(landed)  # the common case (a TMA-filled tile): nothing unready, nothing stored
        if not every:
            self._refuse_unready(op, addresses, state, np.full(addresses.shape, readers[0]), what)
        if every or any_set(landed):
            barriers, phases = self.barrier[addresses], self.phase[addresses]
            if not every:
                barriers, phases = barriers[landed], phases[landed]
            unseen = self._first_unseen(barriers, phases, readers)
            if unseen is not None and self.writer[addresses[landed]].max() >= 0:  # cp.async bytes among them
                late = landed.copy()
                late[landed] = ~self._copied_before(addresses[landed], readers)
                unseen = self._first_unseen(self.barrier[addresses][late], self.phase[addresses][late],
                                            readers) if any_set(late) else None
            if unseen is not None:
                barrier, phase, reader = unseen
                hit = landed & (self.barrier[addresses] == barrier) & (self.phase[addresses] == phase)
                self._unsignalled(op, addresses[np.argmax(hit)], barrier, phase, reader, what)
            copied = landed & (self.writer[addresses] >= 0)
            if any_set(copied) and self.cta.strict_proxy:  # by the ISA's letter cp.async bytes are generic-proxy
                # writes, which need a proxy fence on the path; NVIDIA's kernels take the mbarrier completion the
                # readers observed (checked above) as enough [memory_model.CP_ASYNC_PROXY]
                self._check_proxy_fenced(op, addresses[copied], readers, what)
        if every:
            return
        stored = state == GENERIC
        if any_set(stored) and not self._buffer_fenced(addresses, readers):
            self._check_proxy_fenced(op, addresses[stored], readers, what)

    def _copied_before(self, addresses: np.ndarray, readers: np.ndarray) -> np.ndarray:
        """Which LANDED `addresses` a cp.async of another thread wrote at a point that happens before every one of
        `readers` (one per address, or the threads of one wgmma): the copies of a thread complete before the
        arrive-on of each later cp.async.mbarrier.arrive of that thread, whose release (with every later one of
        its releases) carries them, whichever barrier the reader observed [memory_model.CP_ASYNC_MBARRIER]."""
        writers = self.writer[addresses]
        copied = writers >= 0
        if not any_set(copied):
            return copied
        order = self.cta.hb.ordered
        if readers.shape == addresses.shape:
            seen = order[np.maximum(writers, 0), readers]
        else:
            seen = order[np.maximum(writers, 0)][:, readers].min(axis=1)
        return copied & (seen > self.written_at[addresses])

    def _first_unseen(self, barriers: np.ndarray, phases: np.ndarray, readers: np.ndarray) -> tuple | None:
        """(barrier, phase, reader) of the first phase of `barriers` (with `phases`, landed bytes' tags) that one
        of `readers` has not observed complete; None if they observed all."""
        return self._first_unseen_of(_phase_keys(barriers, phases), readers)

    def _first_unseen_of(self, keys, readers: np.ndarray) -> tuple | None:
        """`_first_unseen` of the (barrier, phase) keys `_phase_keys` gives."""
        for key in keys:
            barrier, phase = int(key >> 32), int(key & 0xFFFFFFFF)
            unseen = self.cta.mbarriers.observed[barrier, readers] <= phase
            if np.count_nonzero(unseen):
                return barrier, phase, int(readers[np.argmax(unseen)])
        return None

    def readable_lines(self, lines: slice, readers: np.ndarray) -> slice | None:
        """The lines, `lines` among them, whose every byte has LANDED in a phase every one of `readers` has observed
        complete (an async-proxy read of any of their bytes by `readers` passes `check_async_read`), or None where
        some byte of `lines` is not so. Where one copy landed every line of `lines` whole (`line_keys`), those are
        the whole run of lines around them that hold its key (the copy's box, and a box landed with it on the
        same barrier and phase): a tile's later k-steps, which read other lines of it, find them readable
        already (`wgmma.WgmmaUnit._check_read`)."""
        key = (lines.start, lines.stop, self.changes)
        if self._landed[0] != key:
            keys = self.line_keys[lines]
            one = int(keys[0])
            if one >= 0 and lines.stop * EPOCH_BYTES <= self.size and not np.count_nonzero(keys != one):
                self._landed = (key, [one], self._key_run(lines, one))  # one copy landed every line whole
        if self._landed[0] != key:  # the lines' tags, found once per change of any tag (both consumer warpgroups
            # of a wgmma read the same lines of B; only what each observed differs)
            span = slice(lines.start * EPOCH_BYTES, min(lines.stop * EPOCH_BYTES, self.size))
            low, high = self.generic_span
            landed = all_set(self.state[span] == LANDED) and not (
                span.start < high and span.stop > low and any_set(self.writer[span] >= 0))
            # (a cp.async's bytes: the fence check)
            self._landed = (key, _phase_keys(self.barrier[span], self.phase[span]) if landed else None, lines)
        _, keys, run = self._landed
        return run if keys is not None and self._first_unseen_of(keys, readers) is None else None

    def _key_run(self, lines: slice, key: int) -> slice:
        """The longest run of lines around `lines` (whose `line_keys` are all `key`) that hold `key`."""
        other = np.flatnonzero(self.line_keys != key)
        at = int(np.searchsorted(other, lines.start))
        return slice(int(other[at - 1]) + 1 if at else 0, int(other[at]) if at < len(other) else len(self.line_keys))

    # endregion
    # region reads of bytes not ready
    def _last_wait(self, thread: int) -> str:
        """The other side of a read of a byte nothing has written: the mbarrier phase the reading thread last
        completed a wait on (a phase completed before the copy that fills the byte, or the wait for the right
        phase missing), or that it completed none."""
        mbarriers = self.cta.mbarriers
        index = int(mbarriers.last_waited[thread])
        if index < 0:
            return " (the thread has completed no mbarrier wait yet)"
        barrier = mbarriers.instances[index]
        return (f" (the thread's last completed wait was on the mbarrier at {self.locate(barrier.address)}, after "
                f"{int(mbarriers.observed[index, thread])} completed phase(s), none of them a copy's into this byte)")

    def _refuse_unready(self, op: Operation, addresses: np.ndarray, state: np.ndarray, readers: np.ndarray,
                        what: str = "") -> None:
        what = f" {what}" if what else ""
        never = state == NEVER
        if any_set(never):
            i = np.argmax(never)
            self.cta.fail(op, f"reads{what} at {self.locate(addresses[i])}, which nothing has written"
                              f"{self._last_wait(int(readers[i]))}", int(readers[i]))
        copying = state == CP_ASYNC
        if any_set(copying):
            i = np.argmax(copying)
            self.cta.fail(op, f"reads{what} at {self.locate(addresses[i])} before its cp.async completed: thread "
                              f"{int(self.writer[addresses[i]])}'s copy into it is still in flight (no "
                              "cp_async_wait_group of that thread, or observed phase of the mbarrier its "
                              "cp_async_mbarrier_arrive_noinc arrives on, covers it)", int(readers[i]))
        flying = state == IN_FLIGHT
        if any_set(flying):
            i = np.argmax(flying)
            mbarrier = self.cta.mbarriers.instances[int(self.barrier[addresses[i]])]
            self.cta.fail(op, f"reads{what} at {self.locate(addresses[i])} before the TMA signalled: the copy into it "
                              f"has not completed on the mbarrier at {self.locate(mbarrier.address)} (no successful "
                              "mbarrier_try_wait_parity for its phase)", int(readers[i]))

    def _unsignalled(self, op: Operation, address: int, barrier: int, phase: int, reader: int, what: str = "") -> None:
        what = f" {what}" if what else ""
        mbarrier = self.cta.mbarriers.instances[barrier]
        copy = "TMA" if self.writer[address] < 0 else f"cp.async of thread {int(self.writer[address])}"
        self.cta.fail(op, f"reads{what} at {self.locate(address)} before the {copy} signalled: this thread has not "
                          f"observed phase {phase} (parity {phase & 1}) of the mbarrier at "
                          f"{self.locate(mbarrier.address)} complete (missing or failed mbarrier_try_wait_parity)",
                      reader)

    # endregion


__all__ = ["SharedReadChecks"]
