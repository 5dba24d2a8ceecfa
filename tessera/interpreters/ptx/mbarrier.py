"""The mbarrier instructions: mbarrier.init/arrive (with count)/arrive.expect_tx/expect_tx/complete_tx/
arrive_drop/inval/try_wait(.parity)/test_wait(.parity), and cp.async.mbarrier.arrive.

mbarrier [P#...-mbarrier]: the `facts.MBarrierState` machine per (CTA, shared address); init/arrive (with
count)/arrive.expect_tx/expect_tx/complete_tx/arrive_drop/inval, try_wait(.parity) (blocks the thread until
the phase completes, see `schedule`) and test_wait(.parity) (returns at once). An arrive's 64-bit state is
the phase number it arrived in. An mbarrier's address, its state and what a change of it wakes are
`mbarrier_state`'s. Arrivals from many threads
of one instruction are applied in lane order; more of one warp's than the phase has pending (the rest would
complete a later phase in the same warp instruction) are refused at the arrive, as the CTA simulator refuses them.
`asynchrony` lands TMA copies when a wait finds every arrival of the phase in, records what each thread observed,
and reports transaction counts that disagree with the copies.
An arrive is a release and a successful wait an acquire at any .scope, a peer CTA's arrive included (as CUTLASS's
cluster pipelines rely on; by the letter a .cta scope does not reach a peer: memory_model.MBARRIER_ARRIVE_SCOPE);
a .relaxed arrive or wait, which orders nothing, is refused by name.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.cluster import grid_rank
from tessera.interpreters.ptx.decode import Operands, Step, elements, opcode, per_lane
from tessera.interpreters.ptx.cp_async import land_copies
from tessera.interpreters.ptx.mbarrier_state import (_bounds, _uniform, apply, barrier_changed, barrier_state,
                                                      mbarrier_key, parked_lanes, shared_addresses)
from tessera.interpreters.ptx.memory import lanes_of, take_space
from tessera.interpreters.ptx.state import CLUSTER_RANK_SHIFT, PARK, Machine, unique_rows
from tessera.interpreters.ptx.sync import PRED, U32
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.truth import all_set, any_set
from tessera.sm90 import facts


def _own_barriers(m: Machine, lanes: np.ndarray, addresses: np.ndarray, tokens: np.ndarray | None = None
                  ) -> list[tuple[tuple[int, int], object]] | None:
    """[((CTA slot, address), the positions in `lanes` arriving on it: a slice or a mask)] for arrivals of `lanes`
    (ascending) on their own CTA's mbarriers, in (CTA, address) order: one address in every CTA (the common case)
    is a run of lanes per CTA, found without a sort. With `tokens` (a wait's, per lane): only the runs, and only
    where each CTA's lanes hold one token (else None)."""
    if len(lanes) and _uniform(addresses):  # each CTA's lanes (lane // threads) are one run
        t, a = m.threads, int(addresses[0])
        first, last = int(lanes[0]) // t, int(lanes[-1]) // t
        bounds = [0, *lanes.searchsorted(range((first + 1) * t, (last + 1) * t, t)).tolist(), len(lanes)]
        runs = [((cta, a), slice(i, j)) for cta, i, j in zip(range(first, last + 1), bounds, bounds[1:]) if j > i]
        if tokens is not None and not _uniform(tokens) and \
                any(tokens[at].min() != tokens[at].max() for _, at in runs):
            return None
        return runs
    if tokens is not None:
        return None
    ctas = m.lane_cta[lanes]
    unique, which = unique_rows(np.stack([ctas, addresses], axis=1), return_inverse=True)
    which = which.reshape(-1)
    return [((cta, a), which == j) for j, (cta, a) in enumerate(unique.tolist())]


def _runs_block(m: Machine, lanes: np.ndarray, runs: list) -> tuple[slice, slice] | None:
    """`ranges.lane_block(lanes, m.threads)` told from `runs` (`_own_barriers`' slices of `lanes`, one a CTA, in CTA
    order): (CTA slots, threads within each) where the runs are of consecutive CTAs, each as long, and each the
    threads from one offset on (its lanes ascend, distinct: its first and last lane decide), else None. Two lanes
    read a run, not passes over every lane."""
    t, (first, _), n = m.threads, runs[0][0], runs[0][1].stop - runs[0][1].start
    offset = int(lanes[runs[0][1].start]) - first * t
    for k, ((cta, _), at) in enumerate(runs):
        start = (first + k) * t + offset
        if cta != first + k or at.stop - at.start != n or int(lanes[at.start]) != start or \
                int(lanes[at.stop - 1]) != start + n - 1:
            return None
    return slice(first, first + len(runs)), slice(offset, offset + n)


def _local(addresses: np.ndarray) -> bool:
    """Whether every one of the mbarrier `addresses` is in its lane's own CTA (no cluster rank field)."""
    if not len(addresses):
        return True
    low, high = _bounds(addresses)
    return 0 <= low and high < 1 << CLUSTER_RANK_SHIFT


def _released(m: Machine, inst, lanes: np.ndarray, addresses: np.ndarray, runs: list | None = None) -> None:
    """`lanes` arrive on the mbarriers at `addresses`: a release into each barrier's pending phase, recorded
    before the arrivals apply, so that the arrive completing a phase is part of it (`happens_before`). `runs`:
    `_own_barriers(m, lanes, addresses)` where the caller has it (then every address is local)."""
    if runs is not None or _local(addresses):  # each lane's own CTA: (CTA, address)
        runs = _own_barriers(m, lanes, addresses) if runs is None else runs
        block = _runs_block(m, lanes, runs) if len(runs) > 1 and isinstance(runs[0][1], slice) else None
        keys = [key for key, _ in runs]
        if block is not None and m.tracker.hb.arrive_ctas(inst, keys, lanes, block):  # the CTAs' arrivals at once
            m.tracker.arriving_ctas(keys, block)
            return
        for key, at in runs:
            m.tracker.hb.arrive(inst, key, lanes[at])
            m.tracker.arriving(key, lanes[at])
        return
    keys = [mbarrier_key(m, int(lane), int(a)) for lane, a in zip(lanes, addresses)]
    for key in dict.fromkeys(keys):
        arriving = lanes[[k == key for k in keys]]
        m.tracker.arriving(key, arriving)
        home = m.lane_cta[arriving] == key[0]
        if all_set(home):
            m.tracker.hb.arrive(inst, key, arriving)
            continue
        if any_set(home):
            m.tracker.hb.arrive(inst, key, arriving[home])
        for slot in np.unique(m.lane_cta[arriving[~home]]).tolist():  # a peer CTA's release (clusters)
            m.tracker.hb.arrive_from_peer(key, arriving[m.lane_cta[arriving] == slot], grid_rank(m, slot),
                                          grid_rank(m, key[0]))


def _arrived(m: Machine, inst, lanes: np.ndarray, addresses: np.ndarray, runs: list | None) -> None:
    """`lanes` arrived on the mbarriers at `addresses` (`AsyncTracker.arrived`, for the messages), per barrier in
    (address, CTA) order: one address in every CTA is a run of lanes per CTA (`runs`, `_own_barriers`'s slices,
    where the caller has them), found without a sort."""
    if runs is not None and isinstance(runs[0][1], slice):  # one address: (CTA, address) order is (address, CTA)
        for key, at in runs:
            m.tracker.arrived(inst, key, lanes[at])
        return
    for a in np.unique(addresses):
        here = lanes[addresses == a]
        for cta in np.unique(m.lane_cta[here]):
            m.tracker.arrived(inst, (int(cta), int(a)), here[m.lane_cta[here] == cta])


def _arrive_each(m: Machine, inst, lanes, addresses, values, phases, action, expect: bool) -> None:
    """Apply the arrivals of `lanes` one by one, in lane order (a phase may complete with the last of them). A lane
    arriving on a barrier whose phase an earlier lane of its warp completed in this instruction is refused, as the
    CTA simulator refuses it (`sm90.mbarrier`): each arrive-on decrements the pending count and the phase completes
    when it reaches zero [P#...-mbarrier-arrive-on, -phase-completion], so the warp's extra arrivals count towards
    the next phase, which the same warp instruction completes too or not, and whether a waiter of the first phase
    sees it complete before its parity is reused depends on when it polls: on no schedule is that what the kernel
    means. Per warp (its lanes arrive together), not per batch of lanes: which warps the executor runs in one step
    is the schedule's choice, and two warps' instructions are no more simultaneous than any two others."""
    completed: dict[tuple, int] = {}  # (barrier, CTA, warp) -> the phase an arrival of the warp completed
    for i, (lane, a) in enumerate(zip(lanes.tolist(), addresses.tolist())):
        key = mbarrier_key(m, lane, a)
        warp = (key, lane // m.threads, lane % m.threads // facts.WARP_SIZE)
        if warp in completed:
            raise m.tracker.hazard(inst, f"arrives on the mbarrier at shared address {a:#x} after the earlier "
                                         f"arrivals of its warp in this instruction completed its phase "
                                         f"{completed[warp]}: more threads arrive than the "
                                         f"{m.mbarriers[key].expected} the barrier expects", lane)
        count = 1 if expect or values is None else int(values[i])
        tx = int(values[i]) if expect else 0
        phases[i] = apply(m, inst, lane, a, action(count, tx))
        if m.mbarriers[key].phase != int(phases[i]):
            completed[warp] = int(phases[i])


def _arrive_together(m: Machine, inst, lanes, phases, groups: list | None) -> bool:
    """The single arrivals of `lanes` applied as one arrival of their count per mbarrier (`groups`:
    `_own_barriers`'s, None where a lane names another CTA's barrier), when each barrier has that many pending (the
    phase can only complete with the last of them, as one by one); False (nothing applied) when some barrier has
    fewer pending or a lane names another CTA's barrier."""
    if groups is None:
        return False
    counts = [len(lanes[at]) for _, at in groups]
    if any(m.mbarriers.get(key) is None or m.mbarriers[key].pending < n for (key, _), n in zip(groups, counts)):
        return False
    parked = parked_lanes(m)  # (an arrival parks no lane)
    for (key, at), n in zip(groups, counts):
        phases[at] = apply(m, inst, int(lanes[at][0]), key[1], lambda s, n=n: s.arrive(n), parked)
    return True


def mbarrier_arrive_lanes(m: Machine, inst, space: str, lanes: np.ndarray, addresses, count: int) -> np.ndarray:
    """One arrive (with `count`) per lane, in lane order (`_arrive_each`); returns each lane's state (phase)."""
    addresses = shared_addresses(m, inst, space, lanes, addresses)
    _released(m, inst, lanes, addresses)
    phases = np.empty(len(lanes), np.uint64)
    _arrive_each(m, inst, lanes, addresses, None, phases, lambda _, __: lambda s: s.arrive(count), False)
    return phases


def decode_cp_async_mbarrier_arrive(ops: Operands, inst, mods):
    """`cp.async.mbarrier.arrive[.noinc]` (the decoder of `cp` sends it here): the lane's pending cp.async copies
    land; with .noinc the mbarrier gets one arrive (without it the pending count it adds and the arrive cancel)."""
    m = ops.m
    mods.take("mbarrier")
    mods.take("arrive")
    noinc = bool(mods.take("noinc"))
    space = take_space(mods, "generic")
    mods.drop("b64")
    address = ops.address(inst, inst.operands[0])

    def run_arrive(sel):
        lanes = lanes_of(m, sel)
        land_copies(m, lanes, None, through_mbarrier=True)
        if noinc:
            mbarrier_arrive_lanes(m, inst, space, lanes, address(sel), 1)
    return run_arrive


@opcode("mbarrier")
def decode_mbarrier(ops: Operands, inst, mods):
    m = ops.m
    action = mods.take("init", "arrive", "arrive_drop", "expect_tx", "complete_tx", "try_wait", "test_wait", "inval")
    if action is None:
        raise ops.refuse(inst, "mbarrier operation")
    expect = bool(mods.take("expect_tx")) if action in ("arrive", "arrive_drop") else False
    parity = bool(mods.take("parity"))
    if mods.take("noComplete"):
        raise ops.refuse(inst, "mbarrier .noComplete")
    space = take_space(mods, "generic")
    if action not in ("init", "expect_tx", "complete_tx", "inval") and mods.take("relaxed"):
        raise ops.refuse(inst, f"mbarrier.{action}.relaxed: it orders nothing [memory_model.MBARRIER_ARRIVE_SCOPE], "
                               "and the release or acquire fence that would pair with it is not modelled")
    mods.drop("release", "acquire", "relaxed", "cta", "cluster", "b64")
    operands = list(inst.operands)
    if action in ("init", "expect_tx", "complete_tx", "inval"):
        address = ops.address(inst, operands[0])
        amount = ops.read(inst, operands[1], U32) if len(operands) > 1 else None

        def run(sel):
            lanes = lanes_of(m, sel)
            addresses = shared_addresses(m, inst, space, lanes, address(sel))
            values = per_lane(amount(sel), lanes.shape) if amount is not None else None
            for i, (lane, a) in enumerate(zip(lanes, addresses)):
                key = mbarrier_key(m, int(lane), int(a))
                if action == "init":
                    state = facts.MBarrierState()
                    try:
                        state.init(int(values[i]))
                    except ValueError as error:
                        raise m.error(inst, str(error), int(lane)) from None
                    m.mbarriers[key] = state
                    m.tracker.hb.init(inst, key, int(lane))
                    m.tracker.barrier_initialised(inst, key, int(lane))
                    m.cluster_state.note_init(int(lane), key)
                    barrier_changed(m, key, -1, state)
                elif action == "inval":
                    m.mbarriers.pop(key, None)
                    m.tracker.barrier_invalidated(key)
                elif action == "expect_tx":
                    apply(m, inst, int(lane), int(a), lambda s, v=int(values[i]): s.expect_tx(v))
                else:
                    apply(m, inst, int(lane), int(a), lambda s, v=int(values[i]): s.complete_tx(v))
        return run
    if action in ("arrive", "arrive_drop"):
        state_out = ops.write(inst, operands[0], ptx_type("b64"))
        address = ops.address(inst, operands[1])
        extra = ops.read(inst, operands[2], U32) if len(operands) > 2 else None

        def arrive(s: facts.MBarrierState, count: int, tx: int):
            if action == "arrive_drop":
                s.expected -= count
            if expect:
                s.expect_tx(tx)
            return s.arrive(count)

        def run_arrive(sel):
            lanes = lanes_of(m, sel)
            addresses = shared_addresses(m, inst, space, lanes, address(sel))
            values = per_lane(extra(sel), lanes.shape) if extra is not None else None
            phases = np.empty(len(lanes), np.uint64)
            runs = _own_barriers(m, lanes, addresses) if len(lanes) and _local(addresses) else None
            _released(m, inst, lanes, addresses, runs)
            together = not expect and values is None and action != "arrive_drop" and len(lanes) > 1
            if not (together and _arrive_together(m, inst, lanes, phases, runs)):
                _arrive_each(m, inst, lanes, addresses, values, phases, lambda count, tx: lambda s: arrive(s, count, tx),
                             expect)
            _arrived(m, inst, lanes, addresses, runs)
            state_out(sel, phases)
        return run_arrive
    # try_wait / test_wait
    dests = elements(operands[0])
    write = ops.write(inst, dests[0], PRED)
    address = ops.address(inst, operands[1])
    token = ops.read(inst, operands[2], U32 if parity else ptx_type("b64"))
    blocking = action == "try_wait"

    def run_wait(lanes, active):
        if len(active) != len(lanes):
            m.pc[np.setdiff1d(lanes, active, assume_unique=True)] += 1
        if not len(active):
            return
        addresses = shared_addresses(m, inst, space, active, address(active))
        tokens = per_lane(token(active), active.shape)
        done = np.empty(len(active), bool)
        # lanes of one CTA waiting on one barrier with one token see the same state: test once per such group
        local = _local(addresses)
        bits = tokens.astype(np.int64) & (1 if parity else -1)
        runs = _own_barriers(m, active, addresses, bits) if local and len(active) > 1 else None
        if runs is not None and _wait_by_barrier(m, inst, active, addresses, tokens, parity, runs):
            write(active, np.ones(len(active), bool))  # each CTA's lanes on its barrier with one token: all passed
            m.pc[active] += 1
            return
        tested = None if runs is None else _wait_landing_together(m, inst, active, tokens, parity, runs)
        if tested is not None:  # each CTA's lanes on its barrier with one token, their copies landed at once
            for (key, at), (ok, lane, state) in zip(runs, tested):
                done[at] = ok
                if ok:
                    m.cluster_state.observed(lane, mbarrier_key(m, lane, key[1]), state.phase)
        else:
            _wait_one_by_one(m, inst, active, addresses, tokens, parity, local, done)
        if tested is not None and all_set(done) and _observe_together(m, inst, active, runs):
            write(active, np.ones(len(active), bool))
            m.pc[active] += 1
            return
        passed = active[done]
        for key in set(zip(m.lane_cta[passed].tolist(), addresses[done].tolist())):
            here = passed[(m.lane_cta[passed] == key[0]) & (addresses[done] == key[1])]
            m.tracker.observe(key, here, m.mbarriers[key].phase)
            m.tracker.hb.waited(inst, (int(key[0]), int(key[1])), here)
        write(passed, np.ones(len(passed), bool))
        m.pc[passed] += 1
        failed = active[~done]
        if not len(failed):
            return
        m.status[failed] = PARK
        m.park_address[failed] = addresses[~done] & ((1 << CLUSTER_RANK_SHIFT) - 1)
        if not blocking:  # test_wait returns false now and the thread goes on when woken
            write(failed, np.zeros(len(failed), bool))
            m.pc[failed] += 1
            m.park_test[failed] = True

    return Step(inst, run_wait, control=True)


def _wait_one_by_one(m: Machine, inst, active: np.ndarray, addresses: np.ndarray, tokens: np.ndarray, parity: bool,
                     local: bool, done: np.ndarray) -> None:
    """`run_wait`'s test of `active` (into `done`) once per group of lanes of one CTA on one barrier with one
    token, each group's copies landed (`AsyncTracker.land_for_wait`) before it is tested again."""
    if local and len(active) > 1:
        groups = np.stack([m.lane_cta[active], addresses, tokens.astype(np.int64) & (1 if parity else -1)], axis=1)
        _, first, which = unique_rows(groups, return_index=True, return_inverse=True)
        which = which.reshape(-1)
    else:
        first, which = np.arange(len(active)), np.arange(len(active))
    for g, i in enumerate(first.tolist()):
        lane, a = int(active[i]), int(addresses[i])
        state = barrier_state(m, inst, lane, a)
        try:
            ok = state.try_wait_parity(int(tokens[i]) & 1) if parity else state.test_wait(int(tokens[i]))
            if not ok and m.tracker.land_for_wait(inst, (int(m.lane_cta[lane]), a), lane):
                ok = state.try_wait_parity(int(tokens[i]) & 1) if parity else state.test_wait(int(tokens[i]))
        except ValueError as error:
            raise m.error(inst, str(error), lane) from None
        done[which == g] = ok
        if ok:
            m.cluster_state.observed(lane, mbarrier_key(m, lane, a), state.phase)


def _wait_landing_together(m: Machine, inst, active: np.ndarray, tokens: np.ndarray, parity: bool, groups: list
                           ) -> list[tuple[bool, int, facts.MBarrierState]] | None:
    """`run_wait`'s test of each group of `active` (a run, `_own_barriers`'s slice: their own CTA's barrier, one
    token each, in CTA order), the copies in flight on every barrier that fails with all its arrivals in landed
    together (`AsyncCopies.land_keys`: the CTAs of a batch waiting on their K or V tile at one step) before each
    is tested again, as the groups one by one land theirs: (passed, first lane, barrier state) per group. None
    (nothing done) where a barrier is not initialised or a test would raise: the caller then tests the groups
    one by one, which reports as it always has."""
    states, failed = [], []
    for key, at in groups:
        state = m.mbarriers.get(key)
        if state is None:
            return None
        token = int(tokens[at.start])
        try:
            ok = state.try_wait_parity(token & 1) if parity else state.test_wait(token)
        except ValueError:
            return None
        states.append((ok, int(active[at.start]), state, token))
        if not ok and key in m.tracker.in_flight and state.pending == 0:
            failed.append(key)
    if not failed:
        return [(ok, lane, state) for ok, lane, state, _ in states]
    m.tracker.land_keys(inst, failed)
    return [(ok or (state.try_wait_parity(token & 1) if parity else state.test_wait(token)), lane, state)
            for ok, lane, state, token in states]


def _wait_by_barrier(m: Machine, inst, active: np.ndarray, addresses: np.ndarray, tokens: np.ndarray, parity: bool,
                     groups: list) -> bool:
    """`run_wait`'s test when every group of `active` (a run, `_own_barriers`'s slice: their own CTA's barrier, one
    token each) passes: each group's barrier tested once, the lanes then see its phase complete; False (nothing
    done) where one would fail, for the general path to park them."""
    passes = []
    for key, at in groups:
        lane, token = int(active[at.start]), int(tokens[at.start])
        state = barrier_state(m, inst, lane, key[1])
        try:
            ok = state.try_wait_parity(token & 1) if parity else state.test_wait(token)
        except ValueError as error:
            raise m.error(inst, str(error), lane) from None
        if not ok:
            return False
        passes.append((key, at, lane, state))
    for key, _, lane, state in passes:
        m.cluster_state.observed(lane, mbarrier_key(m, lane, key[1]), state.phase)
    if _observe_together(m, inst, active, groups):
        return True
    for key, at, lane, state in passes:
        m.tracker.observe(key, active[at], state.phase)
        m.tracker.hb.waited(inst, key, active[at])
    return True


def _observe_together(m: Machine, inst, active: np.ndarray, groups: list) -> bool:
    """The successful waits of each CTA's run of `active` on its own barrier (`groups`, in CTA order) observed and
    acquired for every CTA at once (`AsyncTracker.observe_ctas`, `HappensBefore.waited_ctas`), where the runs are
    the same lanes of consecutive CTAs and every barrier has its instance; False (nothing done) where not, or
    where the acquires must be made one by one (`waited_ctas`): the caller then goes barrier by barrier."""
    block = _runs_block(m, active, groups) if len(groups) > 1 and isinstance(groups[0][1], slice) else None
    keys = [key for key, _ in groups]
    if block is None or any(key not in m.tracker.barriers for key in keys) or \
            not m.tracker.hb.waited_ctas(inst, keys, block):
        return False
    m.tracker.observe_ctas(keys, block, [m.mbarriers[key].phase for key in keys])
    return True
