"""The shared memory of a simulated CTA: `smem_bytes` bytes at absolute byte addresses, with a tag per byte
that says who wrote it and whether a reader may see it yet.

    NEVER       nothing has written the byte
    GENERIC     st_shared by thread `writer` at time `written_at` (op `write_op`, an index of the CTA's
                happens-before unit)
    IN_FLIGHT   a TMA copy completing on mbarrier instance `barrier` will write it
    LANDED      the TMA copy (or the cp.async copies of a cp_async_mbarrier_arrive_noinc) has written it; it
                counts towards phase `phase` of mbarrier instance `barrier`
    CP_ASYNC    a cp.async of thread `writer` will write it (until that thread's cp_async_wait_group covering
                it, which makes it GENERIC, or its cp_async_mbarrier_arrive_noinc, which makes it LANDED)

Accesses are checked against the tags (the checked asynchrony of DESIGN.md section 5):
- reads, generic (`ld_shared`) and through the async proxy (a wgmma operand, a bulk copy's source), by
  `shared_reads` (`SharedReadChecks`, a base of `SharedMemory`): a LANDED byte needs its phase observed, a
  GENERIC byte a happens-before path from its store (and, for the async proxy, a proxy fence on it), and
  nobody reads NEVER, IN_FLIGHT or CP_ASYNC bytes;
- every write (st_shared, a TMA copy, a cp.async) must happen after the earlier generic reads and writes of
  other threads and after the wait_group that completed a wgmma's read of its bytes (`happens_before`);
- nothing is written over a live mbarrier, over bytes a TMA copy is still writing, or over bytes a pending
  wgmma still reads.

Change epochs: every write of tags counts one change (`changes`) and stamps the EPOCH_BYTES-byte lines it
touches (`changed`). A reader that found lines readable through the async proxy
(`SharedReadChecks.readable_lines`) by some threads may take them as still readable while no line changed since:
the tags of a LANDED byte change only by a write, and a thread's observed phases only grow (wgmma operands:
`wgmma.WgmmaUnit`). A TMA copy landing a contiguous range tags the whole lines inside it with its (barrier,
phase) key (`line_keys`), and every write of tags clears its lines' keys: lines that all hold one key are LANDED
by that one copy, byte for byte, and `readable_lines` reads the key there instead of every byte's tags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.byte_box import byte_box, look, put
from tessera.interpreters.sm90.proxy_fences import ProxyFenceChecks
from tessera.interpreters.sm90.record_pool import records, unset_records
from tessera.interpreters.sm90.registers import WORD_BYTES
from tessera.interpreters.sm90.shared_reads import SharedReadChecks
from tessera.interpreters.sm90.shared_tags import CP_ASYNC, EPOCH_BYTES, GENERIC, IN_FLIGHT, LANDED, Buffer
from tessera.interpreters.truth import any_set, equal_arrays
from tessera.sm90 import facts

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta_view import CtaView


def _box_span(box: tuple) -> tuple[int, int]:
    """The lowest and highest offset of a `ByteBox`'s (start, shape, strides)."""
    start, shape, strides = box
    reach = [(extent - 1) * stride for extent, stride in zip(shape, strides)]
    return start + sum(min(r, 0) for r in reach), start + sum(max(r, 0) for r in reach)


def _span_of(addresses: np.ndarray) -> tuple[int, int]:
    """The lowest and highest of `addresses` (nonempty): a `ByteBox`'s from its box, without a pass."""
    box = getattr(addresses, "box", None)
    return _box_span(box) if box is not None else (int(addresses.min()), int(addresses.max()))


def _store_bytes(addresses: np.ndarray, nbytes: int) -> np.ndarray:
    """The bytes a store of `nbytes` at each of `addresses` (aligned, 1-D) writes, in order: a `ByteBox` of their
    range where the stores are consecutive and ascending (a table stored by whole warpgroups), so that their
    records are read and written as slices (`byte_box.take`, `put`, `look`), else an index array."""
    first = int(addresses[0])
    if len(addresses) > 1 and equal_arrays(addresses, first + nbytes * np.arange(len(addresses))):
        return byte_box(first, (nbytes * len(addresses),), (1,))
    return (addresses[:, None] + np.arange(nbytes)).reshape(-1)


class SharedMemory(ProxyFenceChecks, SharedReadChecks):
    """One CTA's shared memory: its bytes, their tags and the records the checks above read (module docstring);
    the async proxy's fence rule for generic stores is `ProxyFenceChecks`'."""

    def __init__(self, cta: CtaView, size: int):
        self.cta = cta
        self.size = size
        # the bytes, read only where `state` says something wrote them (every read refuses NEVER bytes, and the
        # lines a wgmma takes as readable are LANDED or GENERIC throughout): unspecified elsewhere, unfilled
        self.data = unset_records(cta, size, np.uint8)
        self.state = records(cta, size, 0, np.int8)
        # a copy's mbarrier instance and phase per byte, as int32 (a CTA's phase counts and clock stay far below 2^31,
        # as the happens-before clocks): read only at bytes whose `state` is IN_FLIGHT or LANDED, which the copy
        # that set it wrote (`begin_async_write`, `land`), so their values elsewhere are unspecified and no CTA
        # fills them (`unset_records`: 1.8 MB a CTA of 214 KB)
        self.barrier = unset_records(cta, size, np.int32)
        self.phase = unset_records(cta, size, np.int32)
        self.generic_span = (size, 0)
        """The hull [low, high) of the bytes that ever had a thread as their `writer` (st_shared, cp.async; empty
        until one does): outside it every `writer` is -1, `written_at` 0 and `write_op` -1 (only generic writes set
        them), so a write there has no generic write to be ordered after (`HappensBefore.check_write`), a TMA copy
        landing there leaves `writer` as it is, and the next CTA's records are refilled inside it only (a causal
        kernel's bias table, 11 KB of 220, is all that a flash attention CTA stores)."""
        self.writer = records(cta, size, -1, np.int32, self._generic_records_changed)
        self.written_at = records(cta, size, 0, np.int32, self._generic_records_changed)
        self.write_op = records(cta, size, -1, np.int32, self._generic_records_changed)
        self.is_mbarrier = records(cta, size, False, bool, self._mbarrier_records_changed)
        self.changes = 0
        self.changed = np.zeros(-(-size // EPOCH_BYTES), np.int64)  # the change that last wrote each line's tags
        self.line_keys = np.full(len(self.changed), -1, np.int64)
        """Each line's (barrier, phase) key (`shared_reads._phase_keys`) where a TMA copy landed the whole line and
        no tag of it changed since (every byte LANDED, `writer` -1, that barrier and phase), else -1 (the bytes
        tell)."""
        self._latest_writes_of: dict[tuple[int, int, int], tuple] = {}
        """`_latest_writes`' results by (lowest byte, highest byte, count): (the lines' latest change, the bytes,
        writers, their latest write times)."""
        self._buffer_writes: dict[tuple[int, int], tuple] = {}
        """`_buffer_fenced`'s `_latest_writes` of a buffer's stores by (offset, size): (its lines' latest change,
        that result), so that a buffer read again while unchanged is not searched for its stores again."""
        self._landed: tuple = (None, None, None)
        """((first line, end line, `changes`), the (barrier, phase) keys of those lines' bytes if every byte has
        landed by TMA, else None, and the lines found with them): what `readable_lines` found last, valid while no
        tag has changed since."""
        self.buffers: dict[tuple[str, int], Buffer] = {}
        # In a cluster: the cluster time of each byte's latest read and its reader, for peers' multicasts (a lone
        # CTA has no peer to read them: None, and no per-byte records to fill for every CTA)
        in_cluster = cta.cluster is not None
        self.read_at = records(cta, size, -1, np.int64) if in_cluster else None
        self.reader = records(cta, size, -1, np.int32) if in_cluster else None

    @property
    def generic_writes(self) -> bool:
        """Whether any byte has had a thread as its `writer` (`generic_span`)."""
        return self.generic_span[0] < self.generic_span[1]

    def may_hold_generic(self, addresses: np.ndarray) -> bool:
        """Whether a byte of `addresses` (a `ByteBox` or an index array) may have had a thread as its `writer`:
        False where they miss `generic_span` (their `writer`, `written_at` and `write_op` are all initial)."""
        low, high = self.generic_span
        if low >= high or not len(addresses):
            return False
        first, last = _span_of(addresses)
        return first < high and last >= low

    def _note_generic(self, addresses: np.ndarray) -> None:
        """Bytes `addresses` take a thread as their `writer`: `generic_span` grows to hold them."""
        if not len(addresses):
            return
        first, last = _span_of(addresses)
        low, high = self.generic_span
        self.generic_span = (min(low, first), max(high, last + 1))

    def _generic_records_changed(self):
        """What of `writer`, `written_at` and `write_op` may differ from their initial values (`records`): the
        bytes of `generic_span`."""
        low, high = self.generic_span
        return slice(low, high) if low < high else None

    def _mbarrier_records_changed(self):
        """What of `is_mbarrier` may differ from False (`records`): the bytes of the mbarriers ever initialised
        (`MBarriers.instances`; only their init and inval set it), a few words of a CTA's shared memory."""
        addresses = [barrier.address for barrier in self.cta.mbarriers.instances]
        return slice(min(addresses), max(addresses) + facts.MBARRIER_BYTES) if addresses else None

    def note_read(self, addresses: np.ndarray, readers: np.ndarray) -> None:
        """Record a read in a cluster (see `tessera.interpreters.sm90.cluster`; no-op for a lone CTA)."""
        if self.cta.cluster is not None:
            self.read_at[addresses] = self.cta.cluster.tick()
            self.reader[addresses] = readers

    def _stamp(self, addresses: np.ndarray) -> None:
        """A write of the tags of `addresses` (a `ByteBox` or an index array): a new change for their lines."""
        self.changes += 1
        box = getattr(addresses, "box", None)
        if box is not None:
            low, high = _box_span(box)
        elif len(addresses):
            low, high = int(addresses.min()), int(addresses.max())
        else:
            return
        lines = slice(max(low, 0) // EPOCH_BYTES, min(high, self.size - 1) // EPOCH_BYTES + 1)
        self.changed[lines] = self.changes
        self.line_keys[lines] = -1

    # region buffers and addresses
    def add_buffer(self, op: Operation, buffer: Buffer) -> None:
        if buffer.offset + buffer.size > self.size:
            self.cta.fail(op, f"shared buffer '{buffer.name}' [{buffer.offset}, {buffer.offset + buffer.size}) does "
                              f"not fit the kernel's {self.size} bytes of shared memory (sm90.kernel smem_bytes)")
        self.buffers[(buffer.name, buffer.offset)] = buffer

    def buffer_at(self, address: int) -> Buffer | None:
        for buffer in self.buffers.values():
            if buffer.offset <= address < buffer.offset + buffer.size:
                return buffer
        return None

    def locate(self, address: int) -> str:
        address = int(address)
        buffer = self.buffer_at(address)
        inside = f" (buffer '{buffer.name}' + {address - buffer.offset})" if buffer else ""
        return f"shared address {address:#x}{inside}"

    def check_bounds(self, op: Operation, addresses: np.ndarray, threads: np.ndarray, width: int, what: str) -> None:
        """Refuse accesses of `width` bytes at `addresses` (by `threads`, same shape) outside [0, smem_bytes)."""
        bad = (addresses < 0) | (addresses + width > self.size)
        if any_set(bad):
            i = np.argmax(bad.reshape(-1))
            self.cta.fail(op, f"{what} {width} bytes at shared address {int(addresses.reshape(-1)[i]):#x}, outside "
                              f"the CTA's {self.size} bytes of shared memory", int(threads.reshape(-1)[i]))

    def check_alignment(self, op: Operation, addresses: np.ndarray, threads: np.ndarray, align: int, what: str) -> None:
        bad = addresses % align != 0
        if any_set(bad):
            i = np.argmax(bad.reshape(-1))
            self.cta.fail(op, f"{what} at {self.locate(addresses.reshape(-1)[i])}, which is not {align}-byte aligned",
                          int(threads.reshape(-1)[i]))

    def check_writable(self, op: Operation, addresses: np.ndarray, threads: np.ndarray, what: str) -> None:
        """Bytes at `addresses` (flat) may be overwritten by `threads` (flat): no live mbarrier, no TMA copy
        still writing them, no pending wgmma reading them."""
        over = look(self.is_mbarrier, addresses)  # read only (a TMA copy's box: no copy)
        if np.count_nonzero(over):
            i = np.argmax(over)
            self.cta.fail(op, f"{what} overwrites the live mbarrier at {self.locate(addresses[i] & ~7)}",
                          int(threads[i]))
        state = look(self.state, addresses)
        flying = state == IN_FLIGHT
        if np.count_nonzero(flying):
            i = np.argmax(flying)
            address = int(addresses[i])
            other = next((c for c in self.cta.tma.in_flight if any_set(c.addresses == address)), None)
            which = "a TMA copy" if other is None else (
                f"`{describe_op(other.op)}` of thread {other.thread}"
                + ("" if other.issuer is None else f" of CTA rank {other.issuer}"))
            self.cta.fail(op, f"{what} writes {self.locate(address)} while {which} into it is still in flight "
                              "(write-after-write race with the async proxy: the slot's empty barrier wait or its "
                              "release comes too early)", int(threads[i]))
        copying = state == CP_ASYNC
        if np.count_nonzero(copying):
            i = np.argmax(copying)
            self.cta.fail(op, f"{what} writes {self.locate(addresses[i])} while thread "
                              f"{int(self.writer[addresses[i]])}'s cp.async into it is still in flight", int(threads[i]))
        self.cta.wgmma.check_not_read_by_pending(op, addresses, threads, what)
        self.cta.bulk.check_not_read_by_pending(op, addresses, threads, what)

    # endregion
    # region generic proxy: st_shared, ld_shared, fence_proxy_async
    def store_words(self, op: Operation, threads: np.ndarray, addresses: np.ndarray, words: np.ndarray,
                    nbytes: int = WORD_BYTES) -> None:
        """st.shared.b32 of `words` (uint32) at `addresses` by `threads` (all 1-D, same length); with
        `nbytes` 2, st.shared.b16 of their low halves."""
        self.check_bounds(op, addresses, threads, nbytes, "stores")
        self.check_alignment(op, addresses, threads, nbytes, f"stores {8 * nbytes} bits")
        byte_addresses = _store_bytes(addresses, nbytes)
        byte_threads = np.repeat(threads, nbytes)
        self.check_writable(op, byte_addresses, byte_threads, "st_shared")
        self._check_landed_write(op, byte_addresses, byte_threads)
        self.cta.hb.check_write(op, byte_addresses, byte_threads, "st_shared")
        put(self.data, byte_addresses,
            words.astype("<u4").view(np.uint8).reshape(-1, WORD_BYTES)[:, :nbytes].reshape(-1))
        self._stamp(byte_addresses)
        put(self.state, byte_addresses, GENERIC)
        self._note_generic(byte_addresses)
        put(self.writer, byte_addresses, byte_threads)
        put(self.written_at, byte_addresses, self.cta.tick())
        put(self.write_op, byte_addresses, self.cta.hb.op_index(op))
        put(self.barrier, byte_addresses, -1)

    def _check_landed_write(self, op: Operation, addresses: np.ndarray, writers: np.ndarray) -> None:
        """A generic store over bytes an asynchronous copy wrote (LANDED) needs the writer to have observed the
        phase the copy completed in, as a read does: the copy's write ends at its complete-tx, and a thread
        ordered only after its issue (or after a thread that did not wait) may store while the copy still writes
        [memory_model.TMA_READ_UNTIL_COMPLETE]. The simulator landed it because another thread waited."""
        if not self.cta.races:
            return
        landed = look(self.state, addresses) == LANDED
        if not any_set(landed):
            return
        barrier, phase, writer = self.barrier[addresses][landed], self.phase[addresses][landed], writers[landed]
        unseen = self.cta.mbarriers.observed[barrier, writer] <= phase
        if any_set(unseen):
            i = int(np.argmax(unseen))
            address = int(addresses[landed][i])
            mbarrier = self.cta.mbarriers.instances[int(barrier[i])]
            copy = "TMA copy" if self.writer[address] < 0 else f"cp.async of thread {int(self.writer[address])}"
            self.cta.fail(op, f"writes {self.locate(address)}, which the {copy} completing phase {int(phase[i])} of "
                              f"the mbarrier at {self.locate(mbarrier.address)} writes, and this thread has not "
                              "observed that phase (write-after-write race with the async proxy: a successful "
                              "mbarrier_try_wait_parity for it, or a bar_sync after one, is missing)", int(writer[i]))

    def load_words(self, op: Operation, threads: np.ndarray, addresses: np.ndarray) -> np.ndarray:
        """ld.shared.b32 at `addresses` by `threads`: the uint32 words, after the visibility checks."""
        self.check_bounds(op, addresses, threads, WORD_BYTES, "loads")
        self.check_alignment(op, addresses, threads, WORD_BYTES, "loads 32 bits")
        byte_addresses = (addresses[:, None] + np.arange(WORD_BYTES)).reshape(-1)
        readers = np.repeat(threads, WORD_BYTES)
        self.check_generic_read(op, byte_addresses, readers)
        self.note_read(byte_addresses, readers)
        self.cta.hb.note_read(op, byte_addresses, readers)
        return self.data[byte_addresses].view("<u4").astype(np.uint32)

    def fence_proxy_async(self, threads: np.ndarray) -> None:
        """fence.proxy.async by the threads of the [T] mask: the stores that happen before it become visible to
        the async proxy on every happens-before path through it (`happens_before.fence_proxy_async`)."""
        self.cta.hb.fence_proxy_async(threads)

    # endregion
    # region asynchronous copies: TMA, cp.async
    def begin_async_write(self, op: Operation, thread: int, addresses: np.ndarray, barrier: int,
                          local: bool = True) -> None:
        """A TMA copy by `thread` will write `addresses` and complete on mbarrier instance `barrier`; `local`
        False: `thread` is of a peer CTA (a multicast), whose order the cluster checks (`check_released`)."""
        # one thread's copy: its thread for every byte, a read-only stride-0 view (as np.broadcast_to's, without
        # its Python-level dispatch)
        issuer = np.ndarray(addresses.shape, np.int64, np.array([thread], np.int64), 0, (0,) * addresses.ndim)
        issuer.flags.writeable = False
        box = getattr(addresses, "box", None)
        span = None if box is None else _box_span(box)
        if span is None or not (0 <= span[0] and span[1] < self.size):
            self.check_bounds(op, addresses, issuer, 1, "writes")
        self.check_writable(op, addresses, issuer, "the TMA copy")
        if local:
            self.cta.hb.check_write(op, addresses, issuer, "the TMA copy")
        self._stamp(addresses)
        put(self.state, addresses, IN_FLIGHT)
        put(self.barrier, addresses, barrier)

    def begin_cp_async(self, op: Operation, threads: np.ndarray, addresses: np.ndarray) -> None:
        """cp.asyncs by `threads` [n] will write the bytes `addresses` [n, size] (each thread its row)."""
        size = addresses.shape[1]
        self.check_bounds(op, addresses[:, 0], threads, size, "the cp.async writes")
        self.check_alignment(op, addresses[:, 0], threads, size, f"the {size}-byte cp.async writes")
        flat, owners = addresses.reshape(-1), np.repeat(threads, size)
        self.check_writable(op, flat, owners, "the cp.async")
        self.cta.hb.check_write(op, flat, owners, "the cp.async")
        self._stamp(flat)
        self.state[flat] = CP_ASYNC
        self._note_generic(flat)
        self.writer[flat] = owners
        self.barrier[flat] = -1

    def land_generic(self, addresses: np.ndarray, data: np.ndarray, writers: np.ndarray) -> None:
        """cp.async bytes waited for by their writers: written now, as st_shared would (generic proxy)."""
        self._stamp(addresses)
        self.data[addresses] = data
        self.state[addresses] = GENERIC
        self._note_generic(addresses)
        self.writer[addresses] = writers
        self.written_at[addresses] = self.cta.tick()
        self.write_op[addresses] = -1
        self.barrier[addresses] = -1

    def land(self, addresses: np.ndarray, data: np.ndarray, barrier: int, phase: int,
             writers: np.ndarray | int = -1) -> None:
        """Bytes of a copy that completed on mbarrier instance `barrier` in phase `phase`: a TMA's (`writers`
        -1) or the cp.async of the threads `writers` that arrived on it."""
        self._stamp(addresses)
        put(self.data, addresses, data)
        put(self.state, addresses, LANDED)
        if not isinstance(writers, int) or writers >= 0:  # cp.async bytes (`barrier` -1 since their issue); a TMA
            # copy's carry its barrier since its issue (`begin_async_write`), as nothing writes IN_FLIGHT bytes
            put(self.barrier, addresses, barrier)
        put(self.phase, addresses, phase)
        if not isinstance(writers, int) or writers >= 0:
            self._note_generic(addresses)
        if self.may_hold_generic(addresses):  # else every `writer` there is -1 already, a TMA's included
            put(self.writer, addresses, writers)
        if not isinstance(writers, int):  # cp.async: its thread's write now, released by the arrive that follows
            put(self.written_at, addresses, self.cta.tick())
        elif writers < 0:
            self._key_lines(addresses, barrier, phase)

    def _key_lines(self, addresses: np.ndarray, barrier: int, phase: int) -> None:
        """A TMA copy's `addresses` landed on (`barrier`, `phase`): the whole lines inside them, when they are a
        contiguous range (a `ByteBox` of one run), take its key (`line_keys`; `_stamp` cleared them first)."""
        box = getattr(addresses, "box", None)
        if box is None or len(box[1]) != 1 or box[2][0] != 1:
            return
        start, (length,), _ = box
        first, end = -(-start // EPOCH_BYTES), (start + length) // EPOCH_BYTES
        if first < end:
            self.line_keys[first:end] = barrier << 32 | phase

    # endregion
