"""Thread-block clusters in the CTA simulator: the CTAs of a cluster run together, each with its own shared
memory, and reach each other's through shared::cluster addresses and TMA multicast.

A `Cluster` holds its member CTAs (`CtaState`, indexed by %cluster_ctarank) on one strand scheduler, so a
consumer of one CTA may wait for a multicast that a peer's producer has not issued yet. A shared::cluster
address (what `sm90.mapa` returns) is `offset | (rank + 1) << WINDOW_SHIFT`; a plain shared offset (no rank
bits) is the issuing CTA's own, as in PTX, where a CTA's shared::cta window lies inside its shared::cluster one.

Semantics (facts in `tessera.sm90.cluster`):
- `sm90.tma_load_multicast`: the issuer reads the box once from global memory (the traffic counter charges it
  once, to the issuer) and it lands in every member whose mask bit is set, at the same shared offset, completing
  its bytes on that member's mbarrier at the same offset; it lands when that member waits on the barrier.
- `sm90.mbarrier_arrive_cluster`: one arrival on the barrier a shared::cluster address names.
- `sm90.cluster_arrive` / `sm90.cluster_wait`: the cluster barrier; every non-exited thread of every member
  arrives, a wait blocks until the phase it arrived in completes.

Hazards, each reported with the op and the thread (and the CTAs involved):
- a multicast into a peer's bytes that a thread of the peer read and has not released since: no arrive of that
  thread on an mbarrier, after the read, whose completed phase the issuing thread observed, and no cluster
  barrier the issuer passed after the read ("multicast into a slot a peer has not released");
- a remote arrive, or a multicast completing on a peer's mbarrier, before the issuing thread passed a cluster
  barrier that completed after that mbarrier's init;
- a CTA that exits while a multicast into it is in flight or one of its barriers has a phase that peers have
  begun arriving on, and any access to a CTA that has exited;
- a mask bit outside the cluster;
- expect_tx bytes that differ from the bytes delivered (fewer: a copy lands after its phase completed,
  `TmaUnit.land_all`; more: the phase never completes, named in the deadlock message).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.interpreters.block_batch import KernelHazardError, describe_op
from tessera.interpreters.byte_box import take
from tessera.interpreters.sm90.cta import CtaState
from tessera.interpreters.sm90.global_memory import GlobalMemory
from tessera.interpreters.sm90.mbarrier import MBarrier
from tessera.interpreters.sm90.strands import Scheduler
from tessera.interpreters.sm90.tma import TensorMap, TmaCopy, shared_box
from tessera.interpreters.truth import all_set, any_set
from tessera.sm90 import facts

WINDOW_SHIFT = 24
"""Bits of a shared::cluster address below the rank: a CTA has at most 227 KiB (< 2^18) of shared memory."""


def cluster_address(offset: int | np.ndarray, rank: int | np.ndarray):
    return offset | ((rank + 1) << WINDOW_SHIFT)


@dataclass(eq=False)
class Cluster:
    """The members of one cluster, the cluster barrier, and who knows of whose releases (for the hazards)."""

    shape: tuple[int, int, int]
    scheduler: Scheduler
    threads: int
    members: list[CtaState] = field(default_factory=list)
    clock: int = 0
    exited: list[bool] = field(init=False)
    arrived: np.ndarray = field(init=False)
    """[C, T]: which threads arrived at the cluster barrier's current phase."""
    generation: int = 0
    completions: list[int] = field(default_factory=list)
    """The cluster clock when each phase of the cluster barrier completed."""
    arrival_generation: np.ndarray = field(init=False)
    passed_at: np.ndarray = field(init=False)
    """[C, T]: the completion time of the last cluster barrier phase each thread waited for (-1: none)."""
    known: np.ndarray = field(init=False)
    """[C, T, C, T]: the latest arrive of (rank, thread) on an mbarrier whose completion this thread observed."""
    arrivals: dict = field(default_factory=dict)
    """(rank, barrier index) -> [C, T] cluster time of each thread's latest arrive on that barrier."""
    released: dict = field(default_factory=dict)
    """(rank, barrier index) -> [C, T] the arrivals as they stood at the barrier's latest phase completion."""
    init_time: dict = field(default_factory=dict)
    """(rank, barrier index) -> the cluster time of the barrier's mbarrier_init."""

    def __post_init__(self) -> None:
        c, t = self.size, self.threads
        self.exited = [False] * c
        self.arrived = np.zeros((c, t), bool)
        self.arrival_generation = np.full((c, t), -1, np.int64)
        self.passed_at = np.full((c, t), -1, np.int64)
        self.known = np.full((c, t, c, t), -1, np.int64)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    # region addresses and barriers of peers
    def resolve(self, cta: CtaState, op: Operation, thread: int, address: int) -> tuple[CtaState, int]:
        """The member and shared offset a shared::cluster address names (no rank bits: `cta` itself)."""
        window = address >> WINDOW_SHIFT
        offset = address & ((1 << WINDOW_SHIFT) - 1)
        if window == 0:
            return cta, offset
        rank = window - 1
        if rank >= self.size:
            cta.fail(op, f"shared::cluster address {address:#x} names CTA rank {rank}, outside the cluster of "
                         f"{self.size}", thread)
        return self.members[rank], offset

    def peer_barrier(self, cta: CtaState, op: Operation, thread: int, peer: CtaState, offset: int,
                     what: str) -> MBarrier:
        """The live mbarrier at `offset` of `peer`, which `thread` of `cta` may use: the peer has not exited
        and, for a peer other than itself, the thread passed a cluster barrier after the barrier's init."""
        where = f"the mbarrier at shared address {offset:#x} of CTA rank {peer.rank}"
        if self.exited[peer.rank]:
            cta.fail(op, f"{what} {where}, which has exited (its shared memory is gone: a CTA must wait at a "
                         "cluster barrier before it exits while peers may still reach it)", thread)
        barrier = peer.mbarriers.live.get(offset)
        unordered = peer is not cta and (barrier is None and self.passed_at[cta.rank, thread] < 0 or barrier is not None
                                         and self.passed_at[cta.rank, thread] <= self.init_time[(peer.rank, barrier.index)])
        if barrier is None and not unordered:
            cta.fail(op, f"{what} {where}, where no mbarrier is initialised", thread)
        if unordered:
            cta.fail(op, f"{what} {where} before a cluster barrier (barrier.cluster.arrive/wait) ordered its "
                         "mbarrier_init before this thread: the init may not be visible yet", thread)
        return barrier

    def note_arrival(self, peer: CtaState, barrier: MBarrier, rank: int, thread: int, completed: bool) -> None:
        key = (peer.rank, barrier.index)
        table = self.arrivals.setdefault(key, np.full((self.size, self.threads), -1, np.int64))
        table[rank, thread] = self.tick()
        if completed:
            self.released[key] = table.copy()

    def observe(self, cta: CtaState, index: int, threads: np.ndarray) -> None:
        """`threads` of `cta` observed a phase of its barrier `index` complete: they learn the arrivals that
        completed it."""
        released = self.released.get((cta.rank, index))
        if released is not None:
            self.known[cta.rank, threads] = np.maximum(self.known[cta.rank, threads], released)

    # endregion
    # region hazards of multicast and exit
    def check_released(self, cta: CtaState, op: Operation, thread: int, peer: CtaState, addresses: np.ndarray) -> None:
        """`thread` of `cta` multicasts into `addresses` of `peer`: every peer thread that read them must have
        released them in a way the issuer observed (module docstring); a wgmma's read lasts until the
        wgmma_wait_group that completed its group (`_check_wgmma_reads`)."""
        read_at = peer.smem.read_at[addresses]
        read = read_at >= 0
        if any_set(read):
            readers = peer.smem.reader[addresses][read]
            known = self.known[cta.rank, thread, peer.rank, readers]
            unreleased = (known <= read_at[read]) & (self.passed_at[cta.rank, thread] <= read_at[read])
            if any_set(unreleased):
                i = int(np.argmax(unreleased))
                address = int(addresses[read][i])
                cta.fail(op, f"multicasts into {peer.smem.locate(address)} of CTA rank {peer.rank}, which its thread "
                             f"{int(readers[i])} read and has not released (no arrive of it on an mbarrier this "
                             "thread waited on since): the peer's slot is not free", thread)
        self._check_wgmma_reads(cta, op, thread, peer, addresses)

    def _check_wgmma_reads(self, cta: CtaState, op: Operation, thread: int, peer: CtaState,
                           addresses: np.ndarray) -> None:
        """The peer's wgmma reads of `addresses` end when a wgmma_wait_group completes their group
        (memory_model.WGMMA_WAIT, WRITE_ORDER across the cluster): the issuer must have observed an arrive of a
        thread of that warpgroup made after the completion, or passed a cluster barrier that completed after it.
        A release placed before the wait_group (the slot freed while the wgmma may still read it) is reported."""
        wgmma, size = peer.wgmma, facts.WARPGROUP_SIZE
        for w in range(wgmma.read_group.shape[0]):
            if wgmma.newest_read[w] < 0:
                continue
            groups = take(wgmma.read_group[w], addresses)
            read = groups >= 0
            if not any_set(read):
                continue
            done = wgmma.cluster_completed_at(w, groups[read])
            seen = max(int(self.known[cta.rank, thread, peer.rank, w * size:(w + 1) * size].max()),
                       int(self.passed_at[cta.rank, thread]))
            unreleased = (done < 0) | (seen <= done)
            if any_set(unreleased):
                i = int(np.argmax(unreleased))
                address, group = int(addresses[read][i]), int(groups[read][i])
                wait = wgmma.wait_ops.get((w, group))
                until = "has not completed yet" if wait is None else f"completed at `{describe_op(wait)}`"
                cta.fail(op, f"multicasts into {peer.smem.locate(address)} of CTA rank {peer.rank}, which "
                             f"`{describe_op(wgmma.group_ops[(w, group)])}` of its warpgroup {w} read in a wgmma group "
                             f"that {until}, and no arrive of that warpgroup after the completion was observed by "
                             "this thread (race: the peer's slot was released before the wgmma reading it "
                             "completed)", thread)

    def exit(self, cta: CtaState) -> None:
        """`cta`'s threads have all returned: refuse pending accesses to it, then count it as exited."""
        for copy in cta.tma.in_flight:
            if copy.issuer is not None and copy.issuer != cta.rank:
                cta.fail(copy.op, f"CTA rank {cta.rank} exits while this multicast from CTA rank {copy.issuer} into "
                                  f"its shared memory at {cta.smem.locate(int(copy.addresses[0]))} is in flight",
                         copy.thread)
        if self.size > 1:
            for barrier in cta.mbarriers.live.values():
                s = barrier.state
                if 0 < s.pending < s.expected:
                    raise KernelHazardError(
                        f"CTA rank {cta.rank} {cta.cta_id} exits while arrivals on its mbarrier at "
                        f"{cta.smem.locate(barrier.address)} are pending ({s.expected - s.pending} of {s.expected} "
                        f"arrived in phase {s.phase}): a peer may still arrive on it (a CTA must wait at a cluster "
                        "barrier before it exits)")
        self.exited[cta.rank] = True
        self.arrived[cta.rank] = True  # exited threads do not hold the cluster barrier
        self._maybe_complete()

    # endregion
    # region the cluster barrier
    def arrive(self, cta: CtaState, op: Operation) -> None:
        threads = np.nonzero(cta.active)[0]
        again = self.arrived[cta.rank, threads]
        if any_set(again):
            cta.fail(op, "arrives at the cluster barrier again before its phase completed (barrier.cluster.arrive "
                         "and wait must alternate)", int(threads[np.argmax(again)]))
        self.arrived[cta.rank, threads] = True
        self.arrival_generation[cta.rank, threads] = self.generation
        cta.hb.cluster_arrive(self.generation, threads)
        self._maybe_complete()
        cta.scheduler.hand_over()

    def _maybe_complete(self) -> None:
        if all_set(self.arrived):
            self.completions.append(self.tick())
            self.generation += 1
            self.arrived[:] = False
            for rank, gone in enumerate(self.exited):
                self.arrived[rank] = gone

    def wait(self, cta: CtaState, op: Operation) -> None:
        threads = np.nonzero(cta.active)[0]
        generation = self.arrival_generation[cta.rank, threads]
        if any_set(generation < 0):
            cta.fail(op, "waits at the cluster barrier without having arrived (barrier.cluster.arrive first)",
                     int(threads[np.argmax(generation < 0)]))
        target = int(generation.max())
        cta.scheduler.block(
            lambda: self.generation > target,
            lambda: cta.describe(op, f"waits at the cluster barrier, but only {int(self.arrived.sum())} of the "
                                     f"{self.arrived.size} threads of the cluster have arrived", threads[0]))
        self.passed_at[cta.rank, threads] = np.asarray(self.completions)[generation]
        cta.hb.cluster_wait(generation, threads)
        self.arrival_generation[cta.rank, threads] = -1

    # endregion


@register_impls
class ClusterFunctions(InterpreterFunctions):
    """The cluster ops of `tessera.dialects.sm90` for one member CTA (see the module docstring)."""

    def __init__(self, cta: CtaState, memory: GlobalMemory | None = None):
        super().__init__()
        self.cta = cta
        self.memory = memory
        """The launch's global memory: a multicast's global reads are recorded there (`note_async_read`)."""

    @property
    def cluster(self) -> Cluster:
        return self.cta.cluster

    def _threads(self) -> np.ndarray:
        return np.nonzero(self.cta.active)[0]

    @impl(sm90.MapaOp)
    def run_mapa(self, interpreter: Interpreter, op: sm90.MapaOp, args: PythonValues):
        address, rank = args
        cta, size = self.cta, self.cluster.size
        threads = self._threads()
        bad = (rank[threads] < 0) | (rank[threads] >= size)
        if any_set(bad):
            cta.fail(op, f"mapa to CTA rank {int(rank[threads][np.argmax(bad)])}, outside the cluster of {size}",
                     int(threads[np.argmax(bad)]))
        offset = address.astype(np.int64) & ((1 << WINDOW_SHIFT) - 1)
        return (cluster_address(offset, rank.astype(np.int64)).astype(np.int32),)

    @impl(sm90.MBarrierArriveClusterOp)
    def run_arrive_cluster(self, interpreter: Interpreter, op: sm90.MBarrierArriveClusterOp, args: PythonValues):
        (addresses,) = args
        cta, cluster = self.cta, self.cluster
        completed = False
        local: dict[int, list[int]] = {}  # this CTA's arrivals on its own barriers: releases (happens_before)
        by_warp: dict[tuple, int] = {}  # (CTA rank, barrier, warp) -> the phase the warp's arrivals completed
        for thread in self._threads():
            peer, offset = cluster.resolve(cta, op, int(thread), int(addresses[thread]))
            barrier = cluster.peer_barrier(cta, op, int(thread), peer, offset, "arrives on")
            if peer is cta:
                cta.mbarriers.get(op, int(thread), offset)  # the CTA-local init rules
                local.setdefault(barrier.index, []).append(int(thread))
            warp = (peer.rank, barrier.index, int(thread) // facts.WARP_SIZE)
            if warp in by_warp:  # as `MBarriers.arrive` refuses it in the CTA
                cta.fail(op, f"arrives on the mbarrier at {peer.smem.locate(offset)} of CTA rank {peer.rank} after "
                             f"the earlier arrivals of its warp in this op completed its phase {by_warp[warp]}: more "
                             f"threads arrive than the {barrier.state.expected} the barrier expects", thread)
            phase = barrier.state.phase
            try:
                barrier.state.arrive()
            except ValueError as error:
                cta.fail(op, f"{error} (mbarrier at {peer.smem.locate(offset)} of CTA rank {peer.rank}, phase {phase})",
                         thread)
            done = barrier.state.phase != phase
            cluster.note_arrival(peer, barrier, cta.rank, int(thread), done)
            if done:
                by_warp[warp] = phase
                if peer is cta and barrier.index in local:
                    cta.hb.arrive(barrier.index, np.asarray(local.pop(barrier.index)))
                peer.hb.phase_completed(barrier.index)
            completed |= done
        for index, threads in local.items():
            cta.hb.arrive(index, np.asarray(threads))
        if completed:
            cta.scheduler.hand_over()
        return ()

    @impl(sm90.TmaLoadMulticastOp)
    def run_tma_load_multicast(self, interpreter: Interpreter, op: sm90.TmaLoadMulticastOp, args: PythonValues):
        tensor_map, *coords, dest, mbarrier = args
        cta, cluster = self.cta, self.cluster
        mask = op.mask.value.data
        assert isinstance(tensor_map, TensorMap)
        spec = tensor_map.spec
        for thread in self._threads():
            thread = int(thread)
            if mask >> cluster.size:
                cta.fail(op, f"the CTA mask {mask:#x} sets bit {mask.bit_length() - 1}, outside the cluster of "
                             f"{cluster.size} CTAs", thread)
            if len(coords) != spec.rank:
                cta.fail(op, f"a rank-{spec.rank} tensor map needs {spec.rank} coordinates, got {len(coords)}", thread)
            start, bar = int(dest[thread]), int(mbarrier[thread])
            if start % facts.TMA_SMEM_ALIGNMENT:
                cta.fail(op, f"TMA destination {cta.smem.locate(start)} is not {facts.TMA_SMEM_ALIGNMENT}-byte aligned",
                         thread)
            data = tensor_map.read_box([int(c[thread]) for c in coords])
            if self.memory is not None:
                own = cta.mbarriers.live.get(bar) if mask >> cta.rank & 1 else None  # where the issuer sees it end
                self.memory.note_async_read(cta, op, tensor_map, [int(c[thread]) for c in coords], thread,
                                            None if own is None else (own.index, own.state.phase))
            cta.traffic[tensor_map.name] = cta.traffic.get(tensor_map.name, 0) + spec.box_bytes
            addresses, data = shared_box(start, data, tensor_map.swizzle)
            for rank in range(cluster.size):
                if not mask >> rank & 1:
                    continue
                peer = cluster.members[rank]
                barrier = cluster.peer_barrier(cta, op, thread, peer, bar, "multicast completes on")
                if peer is not cta:
                    cluster.check_released(cta, op, thread, peer, addresses)
                peer.smem.check_bounds(op, np.array([start]), np.array([thread]), data.size, "the multicast writes")
                buffer = peer.smem.buffer_at(start)
                if buffer is not None and buffer.swizzle != tensor_map.swizzle:
                    cta.fail(op, f"tensor map {tensor_map.name} swizzles {tensor_map.swizzle}B but its destination, "
                                 f"buffer '{buffer.name}', is declared with swizzle {buffer.swizzle}", thread)
                peer.smem.begin_async_write(op, thread, addresses, barrier.index, local=peer is cta)
                peer.tma.in_flight.append(TmaCopy(op, thread, barrier, addresses, data, spec.box_bytes,
                                                  barrier.state.phase, cta.rank))
        return ()

    @impl(sm90.ClusterArriveOp)
    def run_cluster_arrive(self, interpreter: Interpreter, op: sm90.ClusterArriveOp, args: PythonValues):
        self.cluster.arrive(self.cta, op)
        return ()

    @impl(sm90.ClusterWaitOp)
    def run_cluster_wait(self, interpreter: Interpreter, op: sm90.ClusterWaitOp, args: PythonValues):
        self.cluster.wait(self.cta, op)
        return ()
