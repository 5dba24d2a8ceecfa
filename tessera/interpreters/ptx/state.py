"""The state of a batch of CTAs running one PTX entry: lanes, registers and the memories.

A *lane* is one thread of one CTA of the batch: lane = cta * T + tid, T threads per CTA (the block, x fastest).
All per-thread state is a NumPy array over lanes: registers (bit patterns, see `types`), `carry` (the condition
code's carry flag CC.CF, written by `.cc` arithmetic and read by addc/subc/madc), the program counter `pc` (an
index into the entry's instruction list) and `status` (RUN, EXITED, or blocked: BAR at a named barrier, PARK on
an mbarrier wait, COLL at a warp/warpgroup-collective instruction waiting for the rest of its warp or
warpgroup).

Address spaces and generic addressing. Each space has its own addresses; a generic address is the space
address plus the space's window base, so `cvta` adds or subtracts the base and a generic access is routed by
window:

    global   [GLOBAL_BASE, SHARED_WINDOW)   arrays and module .global/.const data, each 256-byte aligned
    shared   SHARED_WINDOW + [0, S)         per CTA: static .shared variables (aligned, in order), then the
                                            dynamic `.extern .shared` array at its alignment; S <= 227 KiB
    local    LOCAL_WINDOW + [0, L)          per thread: .local variables, then the .param variables of
                                            functions and call sites (read by ld.param, written by st.param)
    param    PARAM_WINDOW + [0, P)          the kernel parameters, laid out at their alignment

Global memory is one byte buffer with the arrays at their addresses; an access that is not entirely inside
one array (or module variable) is an error, as is a misaligned access (address not a multiple of its size).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tessera.interpreters.ptx.syntax import Entry, Instruction
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.truth import all_set, equal_arrays
from tessera.sm90 import facts

GLOBAL_BASE = 1 << 40
SHARED_WINDOW = 1 << 48
LOCAL_WINDOW = 2 << 48
PARAM_WINDOW = 3 << 48
WINDOW_SIZE = 1 << 48
GLOBAL_ALIGNMENT = 256
CLUSTER_RANK_SHIFT = 24
"""The executor's shared::cluster addresses: `offset | (rank + 1) << CLUSTER_RANK_SHIFT` is byte `offset` of
the shared memory of the CTA of cluster rank `rank`; an address below 2^24 is the executing CTA's own (the
shared::cta window lies inside the shared::cluster window). `mapa` makes them (see `cluster`)."""


def unique_rows(rows: np.ndarray, return_index: bool = False, return_inverse: bool = False,
                return_counts: bool = False):
    """`np.unique(rows, axis=0, ...)` of an integer array [n, k], in the same order with the same extras: the
    rows are packed into one int64 each (column by column, offset by the column's least value) and deduplicated
    as a 1-D array, many times faster than NumPy's row-wise unique; rows too wide to pack take NumPy's way."""
    rows = np.asarray(rows)
    if rows.ndim != 2 or not len(rows) or rows.dtype.kind not in "iu":
        return np.unique(rows, axis=0, return_index=return_index, return_inverse=return_inverse,
                         return_counts=return_counts)
    low, high = [int(x) for x in rows.min(axis=0)], [int(x) for x in rows.max(axis=0)]
    spans = [h - l + 1 for l, h in zip(low, high)]
    if max(high) >= 1 << 63 or np.prod(np.array(spans, dtype=object)) >= 1 << 62:
        return np.unique(rows, axis=0, return_index=return_index, return_inverse=return_inverse,
                         return_counts=return_counts)
    key = np.zeros(len(rows), np.int64)
    for j, span in enumerate(spans):
        key = key * span + (rows[:, j].astype(np.int64) - np.int64(low[j]))
    _, first, *extras = np.unique(key, return_index=True, return_inverse=return_inverse,
                                  return_counts=return_counts)
    result = [rows[first]]
    if return_index:
        result.append(first)
    result.extend(extras)
    return result[0] if len(result) == 1 else tuple(result)


def lane_rows(array: np.ndarray, lanes: np.ndarray) -> np.ndarray | None:
    """The rows `lanes` (ascending, each once) of `array` [lanes, ...] as a writable view [runs, run, ...] when
    they are runs of equal length at equal strides (the consumer warpgroups of every CTA of a batch), else None:
    an operation on the rows of a few CTAs then reads and writes them in place, without a gather and a scatter."""
    n = len(lanes)
    if not n:
        return None
    first = int(lanes[0])
    breaks = np.flatnonzero(np.diff(lanes) != 1) + 1
    run = int(breaks[0]) if len(breaks) else n
    if n % run:
        return None
    runs = n // run
    stride = int(lanes[run]) - first if runs > 1 else run
    if not equal_arrays(breaks, run * np.arange(1, runs)) or \
            not equal_arrays(lanes[::run], first + stride * np.arange(runs)):
        return None  # consecutive lanes between the breaks, each run starting `stride` after the one before
    if first + runs * stride <= len(array):  # a reshape of a slice, cheaper than as_strided
        return array[first:first + runs * stride].reshape(runs, stride, *array.shape[1:])[:, :run]
    low = first + run - stride  # the runs end their strides (the last run ends the array)
    if low >= 0:
        return array[low:low + runs * stride].reshape(runs, stride, *array.shape[1:])[:, stride - run:]
    return np.lib.stride_tricks.as_strided(array[first:], (runs, run, *array.shape[1:]),
                                           (stride * array.strides[0], *array.strides))


RUN, EXITED, BAR, PARK, COLL, CLUSTER_WAIT, REGS = 0, 1, 2, 3, 4, 5, 6
STATUS_NAMES = {RUN: "running", EXITED: "exited", BAR: "at a barrier", PARK: "waiting on an mbarrier",
                COLL: "waiting for its warp/warpgroup", CLUSTER_WAIT: "waiting at barrier.cluster.wait",
                REGS: "waiting for registers in setmaxnreg.inc"}


class PtxExecutionError(RuntimeError):
    """The executor stopped: `source:line: error: <instruction>: <what>` (and the thread, when one is to
    blame). Raised for unsupported instructions (at decode time), memory faults, deadlocks and launches
    that do not match the entry."""


class PtxHazardError(PtxExecutionError):
    """An asynchrony bug the hardware does not define (a read before the copy or wgmma that writes it
    completed, a write over bytes an asynchronous operation still reads, a missing proxy fence, an mbarrier
    transaction count that disagrees with the copies, a race): `source:line: error: <instruction>: <what>
    (thread)`. Raised by `asynchrony`, `happens_before`, `sync`, `cluster` and `reductions`."""


class PtxDeadlockError(PtxHazardError):
    """No thread can make progress: the report names each group of blocked threads, what they wait for, and
    for an mbarrier its phase, pending arrivals, tx-count and the copies in flight on it."""


def fail(source: str, inst: Instruction | None, message: str) -> PtxExecutionError:
    """The error for `inst` (None: the entry as a whole)."""
    if inst is None:
        return PtxExecutionError(f"{source}: error: {message}")
    return PtxExecutionError(f"{source}:{inst.line}: error: {inst.name}: {message}")


@dataclass
class Segment:
    name: str
    start: int
    size: int


@dataclass
class GlobalMemory:
    """Global memory: one byte buffer; `segments` name the allocations (sorted by address)."""

    segments: list[Segment] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    buffer: np.ndarray | None = None
    log: object | None = None
    """The `parallel.AccessLog` of a group of CTAs run in a worker (`memory.note_global`), else None."""

    def allocate(self, name: str, data: bytes, align: int = GLOBAL_ALIGNMENT) -> int:
        """Place `data` at the next address aligned to max(256, align); returns its address."""
        end = self.segments[-1].start + self.segments[-1].size if self.segments else GLOBAL_BASE
        align = max(GLOBAL_ALIGNMENT, align)
        start = -(-end // align) * align
        self.segments.append(Segment(name, start, len(data)))
        self.chunks.append(bytes(data))
        return start

    def finish(self) -> None:
        end = self.segments[-1].start + self.segments[-1].size if self.segments else GLOBAL_BASE
        self.buffer = np.zeros(end - GLOBAL_BASE, np.uint8)
        for segment, data in zip(self.segments, self.chunks):
            self.buffer[segment.start - GLOBAL_BASE:segment.start - GLOBAL_BASE + segment.size] = \
                np.frombuffer(data, np.uint8)
        self.chunks = []
        self._starts = np.array([s.start for s in self.segments], np.int64)
        self._ends = np.array([s.start + s.size for s in self.segments], np.int64)

    def holds(self, addresses: np.ndarray, nbytes: int) -> bool:
        """Whether the accesses of `nbytes` at `addresses` (not empty) all lie in one segment: the lowest and the
        highest decide (a batch's lanes storing into one array), so that `outside` need not place each one."""
        low, high = int(addresses.min()), int(addresses.max())
        k = int(np.searchsorted(self._starts, low, side="right")) - 1
        return k >= 0 and high + nbytes <= int(self._ends[k])

    def outside(self, addresses: np.ndarray, nbytes: int) -> np.ndarray:
        """Mask of the accesses of `nbytes` at `addresses` not inside one segment."""
        if not self.segments:
            return np.ones(addresses.shape, bool)
        index = np.searchsorted(self._starts, addresses, side="right") - 1
        inside = (index >= 0) & (addresses + nbytes <= self._ends[np.maximum(index, 0)])
        return ~inside

    def view(self, segment: int) -> np.ndarray:
        s = self.segments[segment]
        return self.buffer[s.start - GLOBAL_BASE:s.start - GLOBAL_BASE + s.size]


@dataclass(frozen=True)
class SharedLayout:
    """Where each `.shared` variable lives in a CTA's shared memory, and the total bytes."""

    offsets: dict[str, int]
    static_bytes: int
    total_bytes: int


def layout_shared(variables, dynamic_bytes: int) -> SharedLayout:
    """Static variables in declaration order at their alignment from address 0, then the dynamic
    (`.extern`) arrays, all at one address after them aligned to the largest extern alignment."""
    offsets, end = {}, 0
    externs = [v for v in variables if v.extern]
    for v in variables:
        if v.extern:
            continue
        align = max(v.align, v.element_bytes)
        end = -(-end // align) * align
        offsets[v.name] = end
        end += v.element_bytes * (v.count or 0)
    static = end
    if externs:
        align = max(max(v.align, v.element_bytes) for v in externs)
        end = -(-end // align) * align
        for v in externs:
            offsets[v.name] = end
        end += dynamic_bytes
    else:
        end += dynamic_bytes
    return SharedLayout(offsets, static, end)


class Machine:
    """A batch of `ctas` CTAs of `threads` threads each (at most `ctas`; `load_batch` sets the CTA ids).

    Registers are created from `entry.registers` (zero-initialised; PTX leaves them undefined). `shared` is
    [ctas * S] bytes, lane l's CTA memory at (l // T) * S; `local` is [lanes, L] bytes."""

    def __init__(self, entry: Entry, source: str, block: tuple[int, int, int], ctas: int,
                 shared: SharedLayout, local_offsets: dict[str, int], local_bytes: int,
                 memory: GlobalMemory, params: np.ndarray, param_offsets: dict[str, int],
                 global_symbols: dict[str, int], grid: tuple[int, int, int]):
        self.entry, self.source = entry, source
        self.block, self.grid = block, grid
        self.threads = block[0] * block[1] * block[2]
        self.ctas = ctas
        self.cluster = (1, 1, 1)  # CTAs per cluster (x, y, z); a batch holds whole clusters, rank order
        self.cluster_size = 1
        self.lanes = ctas * self.threads
        lane = np.arange(self.lanes, dtype=np.int64)
        self.lane_ids = lane
        self.lane_cta = lane // self.threads
        self.tid = lane % self.threads
        self.laneid = self.tid % facts.WARP_SIZE
        warps_per_cta = -(-self.threads // facts.WARP_SIZE)
        groups_per_cta = -(-self.threads // facts.WARPGROUP_SIZE)
        self.unit_of = {facts.WARP_SIZE: self.lane_cta * warps_per_cta + self.tid // facts.WARP_SIZE,
                        facts.WARPGROUP_SIZE: self.lane_cta * groups_per_cta + self.tid // facts.WARPGROUP_SIZE}
        self.ctaid = np.zeros((ctas, 3), np.int64)
        self.cta_valid = np.zeros(ctas, bool)
        self.pc = np.zeros(self.lanes, np.int64)
        self.status = np.full(self.lanes, EXITED, np.int8)
        self.registers: dict[str, np.ndarray] = {}
        self.register_types = {}
        for name, type_name in entry.registers.items():
            t = ptx_type(type_name)
            if t is None:
                raise fail(source, None, f"register {name} has type .{type_name}, which the executor does not know")
            self.register_types[name] = t
        # the registers of one storage type are the rows of one [registers, lanes] array, so that a fused block
        # (fuse) gathers and scatters all it reads and writes of them in one operation
        self.register_home: dict[str, tuple[np.ndarray, int, int]] = {}  # name -> (array, row or column, axis)
        by_storage: dict[np.dtype, list[str]] = {}
        for name, t in self.register_types.items():
            by_storage.setdefault(t.storage, []).append(name)
        for storage, names in by_storage.items():
            rows = np.zeros((len(names), self.lanes), storage)
            for row, name in enumerate(names):
                self.registers[name] = rows[row]
                self.register_home[name] = (rows, row, 0)
        self.registers = {name: self.registers[name] for name in self.register_types}
        self.register_blocks = self._block_vectors(entry)
        # the arrays every register lives in, each once: a new batch zeroes them whole (one memset each, not one
        # strided write per register)
        self.register_arrays = list({id(a): a for a, _, _ in self.register_home.values()}.values())
        self.carry = np.zeros(self.lanes, bool)  # CC.CF: PTX's one condition-code bit, per thread
        self.shared_layout = shared
        self.shared_bytes = shared.total_bytes
        self.shared = np.zeros(ctas * max(self.shared_bytes, 1), np.uint8)
        self.local_offsets, self.local_bytes = local_offsets, local_bytes
        self.local = np.zeros((self.lanes, max(local_bytes, 1)), np.uint8)
        self.memory = memory
        self.params, self.param_offsets = params, param_offsets
        self.global_symbols = global_symbols
        self.tensor_maps: dict[int, object] = {}
        # synchronisation state (see sync.py)
        self.mbarriers: dict[tuple[int, int], facts.MBarrierState] = {}
        self.park_address = np.full(self.lanes, -1, np.int64)
        self.park_test = np.zeros(self.lanes, bool)
        # spin_pc/spin_epoch: the strong load a lane ran last and `sync_epoch` then (`memory.decode_ld`'s spin waits)
        self.spin_pc = np.full(self.lanes, -1, np.int64)
        self.spin_epoch = np.zeros(self.lanes, np.int64)
        # cas_parked: the lane's last park was a failed atom.cas (`memory._park_failed_cas`), not yet retried
        self.cas_parked = np.zeros(self.lanes, bool)
        self.exit_hooks: list = []
        self.bar_arrived = np.zeros((facts.NAMED_BARRIERS, self.lanes), bool)
        self.bar_expected = np.zeros((facts.NAMED_BARRIERS, ctas), np.int64)
        self.bar_count = np.zeros((facts.NAMED_BARRIERS, ctas), np.int64)  # threads counted, a warp at a time
        self.bar_uncounted = np.zeros((facts.NAMED_BARRIERS, self.lanes), bool)  # arrived, warp not yet counted
        # [barrier, warp]: the line of the bar instruction the warp's uncounted threads arrived at (negative: one
        # without .aligned; 0: none), so that an aligned one reached by a divergent warp is found (`sync`)
        self.bar_warp_line = np.zeros((facts.NAMED_BARRIERS, ctas * warps_per_cta), np.int64)
        self.bar_waiting = np.full(self.lanes, -1, np.int64)
        self.sync_epoch = 0
        self.woken = 0  # wakes so far: lanes another thread's step made runnable (the scheduler's straight runs)
        self.maxnreg: dict[tuple[int, int], int] = {}
        self.register_pool = np.zeros(ctas, np.int64)  # per CTA slot: registers setmaxnreg.dec gave back (register_pool)
        self.async_copies: list = []  # cp.async (Ampere) copies not yet waited for, see memory.py
        self.cp_groups = np.zeros(self.lanes, np.int64)  # committed cp.async groups per lane
        # function calls (see control_flow.py): per lane, the pcs of the active calls, innermost last
        self.call_stack = np.zeros((self.lanes, max(entry.call_depth, 1)), np.int64)
        self.call_depth = np.zeros(self.lanes, np.int64)
        self.local_params = {v.name for v in entry.variables if v.space == "param"}
        self.return_copies: dict[int, object] = {}  # call pc -> copy of the callee's return values
        self.recycle = None  # (program, launch key, decoded state): handed back after the launch (launcher)
        self.global_order = None  # happens-before of global memory (global_order.GlobalOrder), set by the launcher
        self.tracker = None  # the asynchrony checks (asynchrony.AsyncTracker), attached by `async_checks.install`
        self.preferred: np.ndarray | None = None  # lanes a release woke: they run first (see schedule)
        self.deferred: dict[int, object] = {}  # id of a register block -> its wgmma chain (wgmma_accumulators)
        self.wgmma_lanes: tuple | None = None  # the last lanes a wgmma.mma_async ran, their warpgroups (wgmma)

    def _block_vectors(self, entry: Entry) -> dict[tuple[str, ...], np.ndarray]:
        """Register vectors of wgmma.mma_async (accumulators, A fragments) stored as the columns of one
        [lanes, registers] array, so that a wgmma gathers and scatters all of a vector's registers of its lanes
        in one operation (whole rows): `registers[name]` is a column (a strided view) of its vector's block. A vector qualifies when its
        registers are distinct, of one storage type, and every other such vector naming one of them is the same
        vector (the chain of wgmmas of one accumulator); others keep their own arrays."""
        vectors: dict[tuple[str, ...], None] = {}
        for inst in entry.instructions:
            if inst.opcode != "wgmma" or "mma_async" not in inst.modifiers:
                continue
            for operand in inst.operands[:2]:
                names = tuple(getattr(e, "name", None) for e in getattr(operand, "elements", ()))
                if names and None not in names and len(set(names)) == len(names) \
                        and all(n in self.registers for n in names):
                    vectors[names] = None
        owners: dict[str, list[tuple[str, ...]]] = {}
        for names in vectors:
            for name in names:
                owners.setdefault(name, []).append(names)
        blocks = {}
        for names in vectors:
            dtypes = {self.registers[n].dtype for n in names}
            if len(dtypes) == 1 and all(len(owners[n]) == 1 for n in names):
                block = np.zeros((self.lanes, len(names)), dtypes.pop())
                for column, name in enumerate(names):
                    self.registers[name] = block[:, column]
                    self.register_home[name] = (block, column, 1)
                blocks[names] = block
        return blocks

    # region batches and lanes
    def load_batch(self, cta_ids: list[tuple[int, int, int]]) -> None:
        """Reset the state for running `cta_ids` (at most `ctas`); unused CTA slots start exited."""
        self.ctaid[:] = 0
        self.cta_valid[:] = False
        for i, cid in enumerate(cta_ids):
            self.ctaid[i] = cid
            self.cta_valid[i] = True
        for home in self.register_arrays:
            home[...] = 0
        self.carry[:] = False
        self.pc[:] = 0
        self.status[:] = np.where(self.cta_valid[self.lane_cta], RUN, EXITED)
        self.shared[:] = 0
        self.local[:] = 0
        self.deferred.clear()
        self.wgmma_lanes = None
        self.mbarriers.clear()
        self.park_address[:] = -1
        self.park_test[:] = False
        self.cas_parked[:] = False
        self.spin_pc[:] = -1
        self.bar_arrived[:] = False
        self.bar_count[:] = 0
        self.bar_uncounted[:] = False
        self.bar_warp_line[:] = 0
        self.bar_waiting[:] = -1
        self.maxnreg.clear()
        self.register_pool[:] = 0
        self.async_copies = []
        self.cp_groups[:] = 0
        self.call_depth[:] = 0
        self.preferred = None
        if self.tracker is not None:
            self.tracker.reset()
        if self.global_order is not None:
            self.global_order.reset_batch()

    def on_exit(self, ctas: np.ndarray) -> None:
        """Lanes of these CTA slots exited: barriers waiting for them may now complete."""
        for hook in self.exit_hooks:
            hook(ctas)

    def describe_lane(self, lane: int) -> str:
        t = int(self.tid[lane])
        bx, by, _ = self.block
        c = self.ctaid[self.lane_cta[lane]]
        return f"thread ({t % bx}, {t // bx % by}, {t // (bx * by)}) of CTA ({c[0]}, {c[1]}, {c[2]})"

    def error(self, inst: Instruction, message: str, lane: int | None = None) -> PtxExecutionError:
        where = f" ({self.describe_lane(int(lane))})" if lane is not None else ""
        return fail(self.source, inst, message + where)

    def shared_target(self, lanes, addresses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(CTA slots, offsets, rank fields) of the shared::cluster addresses of `lanes` (CLUSTER_RANK_SHIFT):
        rank field 0 is the lane's own CTA, r > 0 the CTA of cluster rank r - 1 (the caller checks that
        r <= cluster_size)."""
        addresses = np.asarray(addresses, np.int64)
        field = addresses >> CLUSTER_RANK_SHIFT
        offsets = addresses & ((1 << CLUSTER_RANK_SHIFT) - 1)
        own = self.lane_cta[lanes]
        slots = np.where(field > 0, own - own % self.cluster_size + field - 1, own)
        return slots, np.where(addresses < 0, addresses, offsets), field

    def shared_target_one(self, lane: int, address: int) -> tuple[int, int]:
        """(CTA slot, offset) of one lane's shared::cluster `address`: `shared_target` in plain integers (an
        mbarrier operation of one thread; CUTLASS's consumers arrive one by one through cluster addresses)."""
        field = address >> CLUSTER_RANK_SHIFT
        own = int(self.lane_cta[lane])
        slot = own - own % self.cluster_size + field - 1 if field > 0 else own
        return slot, address if address < 0 else address & ((1 << CLUSTER_RANK_SHIFT) - 1)

    def shared_flat(self, lanes, addresses: np.ndarray) -> np.ndarray:
        """Index into `shared` of the shared::cluster addresses of `lanes` (own CTA below 2^24)."""
        slots, offsets, _ = self.shared_target(lanes, addresses)
        return slots * self.shared_bytes + offsets

    def cta_exited(self, slot: int) -> bool:
        """Whether every thread of CTA slot `slot` has exited."""
        return all_set(self.status[slot * self.threads:(slot + 1) * self.threads] == EXITED)
    # endregion
