"""Thread-block clusters in the PTX executor: distributed shared memory, `mapa`, `getctarank`,
`barrier.cluster`, and the cluster hazards.

A launch with a cluster shape (`launch(..., cluster=(x, y, z))`, or the entry's `.reqnctapercluster`) runs
the CTAs of each cluster in one batch, in rank order (rank = x + y X + z X Y of the CTA's position in its
cluster), each with its own shared memory. Shared::cluster addresses are `state.CLUSTER_RANK_SHIFT`
encoded: `mapa.shared::cluster d, a, r` gives `offset(a) | (r + 1) << 24`, and any shared access (ld, st,
atom, mbarrier, cp.async.bulk destinations and barriers) reaches the named CTA's memory; an address below
2^24 is the executing CTA's own. The generic form of `mapa` adds the shared window base.

`barrier.cluster.arrive{.release,.relaxed}{.aligned}` / `barrier.cluster.wait{.acquire}{.aligned}`
[P#parallel-synchronization-and-communication-instructions-barrier-cluster]: each thread arrives, then waits
until every non-exited thread of the cluster arrived in this phase (exited threads never block it); arriving
twice without a wait, or waiting without having arrived, stops the run. A `.release` arrival (the default)
releases what its thread did before it (its accesses, the mbarrier phases it had observed), not what it does
between the arrive and its wait; a `.relaxed` one releases nothing (what precedes the thread's last release fence,
where it has one); each wait acquires what the phase's arrivals released, in every CTA of the cluster
[memory_model.CLUSTER_BARRIER_ORDERING].

Hazards (`PtxHazardError` messages starting "hazard:"), each naming the instruction, line and thread:
- a multicast mask with a bit for a rank outside the cluster; a shared::cluster address of such a rank;
- a remote operation on an mbarrier (a remote `mbarrier.arrive`, or the complete_tx of a multicast or a
  bulk copy into a peer) by a thread that has not waited on the cluster barrier that follows the
  barrier's `mbarrier.init` (the init thread's next arrival), or whose init was never released to the
  cluster: the init thread's `barrier.cluster.arrive` is `.relaxed` and no `fence.mbarrier_init` follows the
  init [memory_model.MBARRIER_INIT_FENCE] (a `.release` arrive releases it; inside one CTA the `bar.sync` after
  the inits orders them, as Triton's TMA kernels rely on);
- a remote access into a CTA that has exited, and a CTA exiting while a remote operation on one of its
  mbarriers (multicast data, a remote arrive) is *pending*: neither a successful wait of a later phase of that
  mbarrier by the CTA nor a `barrier.cluster.wait` of one of the CTA's threads for a cluster barrier phase
  that the issuing thread arrived at after it has ordered it before the exit (a phase that completes without
  the CTA waiting for it orders nothing before its exit [memory_model.CLUSTER_EXIT_WAIT]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.interpreters.ptx.decode import Operands, Step, opcode
from tessera.interpreters.ptx.state import (
    CLUSTER_RANK_SHIFT,
    CLUSTER_WAIT,
    EXITED,
    RUN,
    SHARED_WINDOW,
    WINDOW_SIZE,
    Machine,
    PtxExecutionError,
    PtxHazardError,
)
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.truth import all_set, any_set

OFFSET_MASK = (1 << CLUSTER_RANK_SHIFT) - 1


@dataclass(frozen=True)
class Pending:
    """A remote operation on the mbarrier `key` (CTA slot, offset) of another CTA, delivered in `phase` of
    that mbarrier by `lane`, which had arrived `arrivals` times at the cluster barrier then."""

    key: tuple[int, int]
    phase: int
    lane: int
    arrivals: int
    line: int
    what: str


class ClusterState:
    """The cluster barrier and hazard bookkeeping of a batch: per lane its cluster-barrier arrivals and
    completed waits, per cluster its completed phases, per mbarrier the init thread's arrivals, and the
    pending remote operations."""

    def __init__(self, m: Machine):
        self.m = m
        self.arrivals = np.zeros(m.lanes, np.int64)
        self.waited = np.zeros(m.lanes, np.int64)
        self.phase = np.zeros(max(m.ctas // m.cluster_size, 1), np.int64)
        self.init_arrivals: dict[tuple[int, int], int] = {}
        self.init_lane: dict[tuple[int, int], int] = {}
        self.init_released: dict[tuple[int, int], bool] = {}
        self.init_fence: dict[int, tuple] = {}  # lane -> what its last fence.mbarrier_init released (`release_inits`)
        self.pending: list[Pending] = []
        m.exit_hooks.append(self.on_exit)

    def reset(self) -> None:
        self.arrivals[:] = 0
        self.waited[:] = 0
        self.phase[:] = 0
        self.init_arrivals.clear()
        self.init_lane.clear()
        self.init_released.clear()
        self.init_fence.clear()
        self.pending = []

    def group(self, lanes):
        """The cluster (index within the batch) of each lane."""
        return self.m.lane_cta[lanes] // self.m.cluster_size

    def group_lanes(self, group: int) -> np.ndarray:
        per = self.m.cluster_size * self.m.threads
        return np.arange(group * per, (group + 1) * per)

    def check_complete(self, group: int) -> None:
        """Complete the cluster barrier phase of `group` if every non-exited thread arrived in it; wake the
        waiters (their completed wait, `waited`, is what orders a peer's remote operations before their CTA's
        exit: see `on_exit`)."""
        m = self.m
        lanes = self.group_lanes(group)
        live = lanes[m.status[lanes] != EXITED]
        if not len(live) or any_set(self.arrivals[live] <= self.phase[group]):
            return
        self.phase[group] += 1
        m.sync_epoch += 1
        m.tracker.hb.cluster_completed(group)  # the arrivals' releases, published to the waits
        for cta in np.unique(m.lane_cta[lanes]):  # each CTA's threads, the mbarrier phases its arrivals observed
            m.tracker.share_observed(("cluster", int(cta)), lanes[m.lane_cta[lanes] == cta])
        waiting = lanes[(m.status[lanes] == CLUSTER_WAIT) & (self.arrivals[lanes] <= self.phase[group])]
        m.status[waiting] = RUN
        m.woken += 1
        m.pc[waiting] += 1
        self.waited[waiting] = self.arrivals[waiting]
        self.acquire(waiting)

    def per_cta(self, lanes: np.ndarray):
        """(cluster, grid rank, lanes of that CTA) for each CTA of `lanes`."""
        m = self.m
        for cta in np.unique(m.lane_cta[lanes]):
            yield int(cta) // m.cluster_size, grid_rank(m, int(cta)), lanes[m.lane_cta[lanes] == cta]

    def release(self, lanes: np.ndarray, relaxed: bool) -> None:
        """`lanes` arrive: with .release, a release at this point of theirs; .relaxed, a release only at each lane's
        last release fence (fence.acq_rel, fence.sc, membar: a release fence then the arrival is a release pattern),
        nothing for a lane without one [memory_model.CLUSTER_BARRIER_ORDERING]."""
        hb = self.m.tracker.hb
        for group, rank, mine in self.per_cta(lanes):
            if not relaxed:
                hb.cluster_arrived(group, rank, hb._release(mine))
                self.m.tracker.barrier_arriving(("cluster", int(self.m.lane_cta[mine[0]])), mine)
                continue
            for lane in mine.tolist():
                for fenced in (self.m.global_order.fence_release.get(lane), self.init_fence.get(lane)):
                    if fenced is not None:
                        hb.cluster_arrived(group, rank, fenced)

    def acquire(self, lanes: np.ndarray) -> None:
        """`lanes` passed their barrier.cluster.wait (.acquire): they acquire the completed phases' releases."""
        for group, rank, mine in self.per_cta(lanes):
            self.m.tracker.hb.cluster_waited(group, rank, mine)

    def on_exit(self, ctas) -> None:
        m = self.m
        for group in np.unique(np.asarray(ctas) // m.cluster_size):
            self.check_complete(int(group))
        for cta in ctas:
            if not m.cta_exited(int(cta)):
                continue
            # a cluster barrier orders a remote operation before the exit only if the issuing thread arrived at
            # it after the operation and a thread of this CTA waited for it: its threads' completed waits, not
            # the phase's completion, which exited threads do not block [memory_model.CLUSTER_EXIT_WAIT]
            waited = int(self.waited[m.lane_cta == cta].max(initial=0))
            for p in self.pending:
                if p.key[0] == int(cta) and waited <= p.arrivals:
                    raise hazard(m, p.line, f"CTA {cta_name(m, int(cta))} exited while {p.what} on its mbarrier at "
                                            f"shared address {p.key[1]:#x} was pending (no wait of a later phase of "
                                            "that mbarrier, and no barrier.cluster.wait of this CTA for a cluster "
                                            "barrier the issuing thread arrived at after it) "
                                            "[memory_model.CLUSTER_EXIT_WAIT]", p.lane)
            self.pending = [p for p in self.pending if p.key[0] != int(cta)]

    # region hooks called by sync and tensor
    def note_init(self, lane: int, key: tuple[int, int]) -> None:
        self.init_arrivals[key] = int(self.arrivals[lane])
        self.init_lane[key] = lane
        self.init_released[key] = False

    def release_inits(self, lanes: np.ndarray, fence: bool = True) -> None:
        """`lanes` released their mbarrier inits at cluster scope: a fence.mbarrier_init (`fence`), or a
        barrier.cluster.arrive with .release semantics [memory_model.MBARRIER_INIT_FENCE]. A fence is a release
        that a later .relaxed cluster arrive carries to the waits, as CUTLASS's `fence_barrier_init();
        cluster_arrive_relaxed(); cluster_wait()` relies on inside the CTA too (no bar.sync after its inits);
        the release holds the lane's own epoch alone, not what it learnt from others, since the fence orders
        only the thread's own inits (it still orders the thread's other earlier accesses: a data race through
        that pattern alone goes unreported)."""
        if fence:
            hb = self.m.tracker.hb
            t = hb.threads
            hb.rows_changed(lanes)
            for lane in lanes.tolist():
                clock = np.zeros(t, np.int32)
                clock[lane % t] = hb.clock[lane, lane % t]
                self.init_fence[lane] = (clock, np.zeros(2 * t, np.int32), None)
            hb.clock[lanes, lanes % t] += 1  # what the lane does after the fence is not released by it
        if self.init_lane:
            mine = set(lanes.tolist())
            for key, lane in self.init_lane.items():
                if lane in mine:
                    self.init_released[key] = True

    def remote_mbarrier(self, inst, lane: int, key: tuple[int, int], phase: int) -> None:
        """`lane` operated on the mbarrier `key` of another CTA, in that mbarrier's `phase`."""
        m = self.m
        what = {"mbarrier": "a remote mbarrier.arrive"}.get(inst.opcode, "a copy into its shared memory")
        if m.cta_exited(key[0]):
            raise hazard(m, inst.line, f"{inst.name}: {what} into CTA {cta_name(m, key[0])}, which has exited", lane)
        initialised = self.init_arrivals.get(key)
        if initialised is not None and self.waited[lane] <= initialised:
            raise hazard(m, inst.line, f"{inst.name}: {what} on the mbarrier at shared address {key[1]:#x} of CTA "
                                       f"{cta_name(m, key[0])} before the cluster barrier that follows its "
                                       "mbarrier.init (fence.mbarrier_init, barrier.cluster.arrive and .wait)", lane)
        if initialised is not None and not self.init_released.get(key, True):
            init = self.init_lane[key]
            raise hazard(m, inst.line, f"{inst.name}: {what} on the mbarrier at shared address {key[1]:#x} of CTA "
                                       f"{cta_name(m, key[0])}, whose mbarrier.init by {m.describe_lane(init)} was "
                                       "never released to the cluster: its barrier.cluster.arrive is .relaxed and no "
                                       "fence.mbarrier_init.release.cluster follows the init (missing "
                                       "fence.mbarrier_init)", lane)
        self.pending.append(Pending(key, phase, lane, int(self.arrivals[lane]), inst.line, what))

    def observed(self, lane: int, key: tuple[int, int], phase: int) -> None:
        """A thread of the mbarrier's CTA waited successfully on it while it is in `phase`."""
        if self.pending:
            self.pending = [p for p in self.pending if not (p.key == key and p.phase < phase)]
    # endregion


def grid_rank(m: Machine, slot: int) -> int:
    """The linear rank in the grid of the CTA in batch slot `slot` (x + X y + X Y z), as `global_order` and
    `happens_before.remote` name CTAs."""
    x, y, z = (int(v) for v in m.ctaid[slot])
    return x + m.grid[0] * (y + m.grid[1] * z)


def cta_name(m: Machine, slot: int) -> str:
    c = m.ctaid[slot]
    return f"({c[0]}, {c[1]}, {c[2]})"


def hazard(m: Machine, line: int, message: str, lane: int | None = None) -> PtxExecutionError:
    """The error for a cluster hazard at `line`: `source:line: error: hazard: message (thread)`, a
    `PtxHazardError` like the other asynchrony hazards."""
    where = f" ({m.describe_lane(int(lane))})" if lane is not None else ""
    return PtxHazardError(f"{m.source}:{line}: error: hazard: {message}{where}")


def shared_offsets(m: Machine, inst, lanes: np.ndarray, addresses: np.ndarray) -> np.ndarray:
    """The offsets in their CTA's shared memory of shared::cluster `addresses` of `lanes`; a rank outside
    the cluster, or a CTA that has exited, stops the run."""
    addresses = np.asarray(addresses, np.int64)
    if not any_set(addresses >> CLUSTER_RANK_SHIFT):
        return addresses
    slots, offsets, field = m.shared_target(lanes, addresses)
    outside = field > m.cluster_size
    if any_set(outside):
        i = int(np.argmax(outside))
        raise hazard(m, inst.line, f"{inst.name}: shared::cluster address {int(addresses[i]):#x} names CTA rank "
                                   f"{int(field[i]) - 1}, outside the cluster of {m.cluster_size}", int(lanes[i]))
    remote = slots != m.lane_cta[lanes]
    for slot in np.unique(slots[remote]):
        if m.cta_exited(int(slot)):
            i = int(np.argmax(remote & (slots == slot)))
            raise hazard(m, inst.line, f"{inst.name}: access to the shared memory of CTA {cta_name(m, int(slot))}, "
                                       "which has exited", int(lanes[i]))
    return offsets


def multicast_slots(m: Machine, inst, lane: int, mask: int) -> list[int]:
    """The CTA slots a multicast with `mask` (bit r: cluster rank r) from `lane` lands in."""
    if mask >> m.cluster_size:
        raise hazard(m, inst.line, f"{inst.name}: multicast mask {mask:#x} has a bit for a CTA rank outside the "
                                   f"cluster of {m.cluster_size}", lane)
    base = int(m.lane_cta[lane]) - int(m.lane_cta[lane]) % m.cluster_size
    return [base + r for r in range(m.cluster_size) if mask >> r & 1]


def cluster_address(m: Machine, slot: int, offset: int) -> int:
    """The shared::cluster address of `offset` in the CTA of batch slot `slot`."""
    return (slot % m.cluster_size + 1) << CLUSTER_RANK_SHIFT | offset


# region instructions
@opcode("mapa")
def decode_mapa(ops: Operands, inst, mods):
    """`mapa{.shared::cluster}.{u32,u64} d, a, rank`: the address of a's location in the shared memory of the
    CTA of cluster rank `rank` (a generic address without the state space, a shared::cluster one with it)."""
    generic = not mods.take("shared::cluster")
    t = mods.type()
    if t.name not in ("u32", "u64") or (generic and t.name != "u64") or len(inst.operands) != 3:
        raise ops.refuse(inst, "mapa form (mapa.shared::cluster.{u32,u64} or mapa.u64)")
    m = ops.m
    read_a, read_rank = ops.read(inst, inst.operands[1], t), ops.read(inst, inst.operands[2], ptx_type("u32"))
    write = ops.write(inst, inst.operands[0], t)

    def run(sel):
        lanes = m.lane_ids[sel]
        a = np.broadcast_to(np.asarray(read_a(sel), np.int64), lanes.shape)
        rank = np.broadcast_to(np.asarray(read_rank(sel), np.int64), lanes.shape)
        if generic:
            inside = (a >= SHARED_WINDOW) & (a < SHARED_WINDOW + WINDOW_SIZE)
            if not all_set(inside):
                i = int(np.argmax(~inside))
                raise m.error(inst, f"address {int(a[i]):#x} is not a generic shared address", int(lanes[i]))
            a = a - SHARED_WINDOW
        bad = rank >= m.cluster_size
        if any_set(bad):
            i = int(np.argmax(bad))
            raise hazard(m, inst.line, f"{inst.name}: CTA rank {int(rank[i])} is outside the cluster of "
                                       f"{m.cluster_size}", int(lanes[i]))
        d = (a & OFFSET_MASK) | ((rank + 1) << CLUSTER_RANK_SHIFT)
        write(sel, (d + (SHARED_WINDOW if generic else 0)).astype(t.dtype))

    return run


@opcode("getctarank")
def decode_getctarank(ops: Operands, inst, mods):
    """`getctarank{.shared::cluster}.{u32,u64} d, a`: the cluster rank of the CTA whose shared memory holds a."""
    generic = not mods.take("shared::cluster")
    t = mods.type()
    if t.name not in ("u32", "u64") or (generic and t.name != "u64") or len(inst.operands) != 2:
        raise ops.refuse(inst, "getctarank form (getctarank.shared::cluster.{u32,u64} or getctarank.u64)")
    m = ops.m
    read_a = ops.read(inst, inst.operands[1], t)
    write = ops.write(inst, inst.operands[0], ptx_type("u32"))

    def run(sel):
        lanes = m.lane_ids[sel]
        a = np.broadcast_to(np.asarray(read_a(sel), np.int64), lanes.shape)
        if generic:
            a = a - SHARED_WINDOW
        field = a >> CLUSTER_RANK_SHIFT
        own = m.lane_cta[lanes] % m.cluster_size
        write(sel, np.where(field > 0, field - 1, own).astype(np.uint32))

    return run


def decode_barrier_cluster(ops: Operands, inst, mods):
    """`barrier.cluster.arrive{.release,.relaxed}{.aligned}` and `barrier.cluster.wait{.acquire}{.aligned}`
    (see the module docstring)."""
    mods.take("cluster")
    mods.drop("aligned")
    action = mods.take("arrive", "wait")
    relaxed = False
    if action == "arrive":
        relaxed = mods.take("release", "relaxed") == "relaxed"
    elif action == "wait":
        mods.take("acquire")
    else:
        raise ops.refuse(inst, "barrier.cluster needs .arrive or .wait")
    if inst.operands:
        raise ops.refuse(inst, "barrier.cluster takes no operands")
    m = ops.m

    def run(lanes, active):
        state = m.cluster_state
        inactive = np.setdiff1d(lanes, active, assume_unique=True) if len(active) != len(lanes) else lanes[:0]
        m.pc[inactive] += 1
        if not len(active):
            return
        if action == "arrive":
            again = state.arrivals[active] > state.waited[active]
            if any_set(again):
                raise m.error(inst, "barrier.cluster.arrive again before barrier.cluster.wait",
                              int(active[np.argmax(again)]))
            if not relaxed:
                state.release_inits(active, fence=False)
            state.release(active, relaxed)
            state.arrivals[active] += 1
            m.pc[active] += 1
            for group in np.unique(state.group(active)):
                state.check_complete(int(group))
            return
        never = state.arrivals[active] <= state.waited[active]
        if any_set(never):
            raise m.error(inst, "barrier.cluster.wait without a barrier.cluster.arrive before it",
                          int(active[np.argmax(never)]))
        done = state.phase[state.group(active)] >= state.arrivals[active]
        passed = active[done]
        state.waited[passed] = state.arrivals[passed]
        state.acquire(passed)
        m.pc[passed] += 1
        m.status[active[~done]] = CLUSTER_WAIT

    return Step(inst, run, control=True)


# endregion
