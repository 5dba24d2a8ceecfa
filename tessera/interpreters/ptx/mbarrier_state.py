"""An mbarrier as an object of shared memory in the PTX executor: its address, its state, and what a change of its
state does (used by the mbarrier instructions, `mbarrier`, and by the asynchronous copies that complete on one,
`async_copies`).

An mbarrier operand is a shared::cluster address: a generic one must fall in the shared window; each must be
8-byte aligned and inside the shared memory of a CTA of the cluster (`shared_addresses`). An mbarrier is keyed
by (CTA slot, offset) (`mbarrier_key`) and holds a `facts.MBarrierState` in `Machine.mbarriers` from its
`mbarrier.init` on (a use before it is refused: `barrier_state`). Every change of a state goes through
`barrier_changed` (`apply` runs an action and calls it): it counts a synchronisation step (`sync_epoch`), and a
completed phase is published to the tracker and wakes the lanes parked on that barrier, which run first where
the change is a release (`Machine.preferred`). Parked lanes are found among the parked ones (`parked_lanes`,
`parked_on`), not by comparisons over every lane.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.cluster import shared_offsets
from tessera.interpreters.ptx.decode import per_lane
from tessera.interpreters.ptx.memory import SHARED_WINDOW, WINDOW_SIZE
from tessera.interpreters.ptx.state import CLUSTER_RANK_SHIFT, PARK, RUN, Machine
from tessera.interpreters.truth import all_set, any_set
from tessera.sm90 import facts


def shared_addresses(m: Machine, inst, space: str, lanes: np.ndarray, addresses) -> np.ndarray:
    """Shared::cluster addresses of an mbarrier operand (generic ones must be in the shared window), checked
    to be 8-byte aligned and inside the shared memory of a CTA of the cluster (`cluster.shared_offsets`)."""
    addresses = per_lane(addresses, lanes.shape, np.int64)
    if space == "generic":
        inside = (addresses >= SHARED_WINDOW) & (addresses < SHARED_WINDOW + WINDOW_SIZE)
        if not all_set(inside):
            i = int(np.argmax(~inside))
            raise m.error(inst, f"mbarrier address {int(addresses[i]):#x} is not a shared address", int(lanes[i]))
        addresses = addresses - SHARED_WINDOW
    elif space != "shared":
        raise m.error(inst, f"an mbarrier lives in shared memory, not .{space}")
    low, high = _bounds(addresses) if len(addresses) else (-1, -1)
    if 0 <= low and high < 1 << CLUSTER_RANK_SHIFT and high + facts.MBARRIER_BYTES <= m.shared_bytes and \
            not (high & (facts.MBARRIER_BYTES - 1) if low == high else any_set(addresses & (facts.MBARRIER_BYTES - 1))):
        return addresses  # (each in its lane's own CTA, inside its shared memory, aligned: every check passes; one
        # address for every lane, the common case, checked as an int)
    offsets = shared_offsets(m, inst, lanes, addresses)
    bad = (offsets < 0) | (offsets + facts.MBARRIER_BYTES > m.shared_bytes) | (addresses % facts.MBARRIER_BYTES != 0)
    if any_set(bad):
        i = int(np.argmax(bad))
        raise m.error(inst, f"mbarrier address {int(addresses[i]):#x} is misaligned or outside shared memory "
                            f"({m.shared_bytes} bytes)", int(lanes[i]))
    return addresses


def _uniform(values: np.ndarray) -> bool:
    """Whether every element of `values` (not empty) is the first: one comparison, where min() == max() takes two
    reductions (each some ten times its cost in NumPy's machinery)."""
    return not np.count_nonzero(values != values[0])


def _bounds(values: np.ndarray) -> tuple[int, int]:
    """(least, greatest) of `values` (not empty): the first twice where every lane holds it (an mbarrier operand at
    one offset in every CTA: the common case, `_uniform`), else two reductions."""
    return (int(values[0]),) * 2 if _uniform(values) else (int(values.min()), int(values.max()))


def mbarrier_key(m: Machine, lane: int, address: int) -> tuple[int, int]:
    """(CTA slot, offset) of the mbarrier at shared::cluster `address` for `lane`."""
    if 0 <= address < 1 << CLUSTER_RANK_SHIFT:  # the lane's own CTA
        return int(m.lane_cta[lane]), int(address)
    return m.shared_target_one(int(lane), int(address))


def barrier_state(m: Machine, inst, lane: int, address: int) -> facts.MBarrierState:
    key = mbarrier_key(m, lane, address)
    state = m.mbarriers.get(key)
    if state is None:
        raise m.error(inst, f"the mbarrier at shared address {address:#x} is used before mbarrier.init", lane)
    return state


def parked_lanes(m: Machine) -> np.ndarray:
    """The parked lanes (on an mbarrier or not), ascending: found once where several barriers may wake theirs."""
    return np.flatnonzero(m.status == PARK)


def parked_on(m, key: tuple[int, int], parked: np.ndarray | None = None) -> np.ndarray:
    """The lanes parked on the mbarrier at `key` = (CTA slot, address), ascending: found among the parked lanes
    (a few: `parked`, `parked_lanes(m)` where the caller has it from before waking other barriers' lanes, whose
    addresses a wake resets, or those of them at `key`'s address), not by comparisons over every lane."""
    if parked is None:
        parked = parked_lanes(m)
    if len(parked):
        parked = parked[m.park_address[parked] == key[1]]
    if len(parked):  # (lanes of other CTAs parked at that address)
        parked = parked[m.lane_cta[parked] == key[0]]
    return parked


def barrier_changed(m: Machine, key: tuple[int, int], phase_before: int, state: facts.MBarrierState,
                    prefer: bool = True, parked: np.ndarray | None = None) -> None:
    """The mbarrier at `key` changed (its phase was `phase_before`): a completed phase is published and wakes the
    lanes parked on it (`parked`: see `parked_on`), which run first where `prefer`."""
    m.sync_epoch += 1
    if state.phase != phase_before:
        m.tracker.hb.phase_completed(key)
        m.tracker.published(key)
        wake = parked_on(m, key, parked)
        m.woken += 1
        if len(wake):
            if prefer:
                m.preferred = np.zeros(m.lanes, bool)  # a release: the threads it wakes run first (see asynchrony)
                m.preferred[wake] = True
            m.status[wake] = RUN
            m.park_test[wake] = False
            m.park_address[wake] = -1


def apply(m: Machine, inst, lane: int, address: int, action, parked: np.ndarray | None = None) -> int:
    """Run `action(state)` on the mbarrier of `lane` at `address`, waking waiters on a phase change (`parked`: see
    `parked_on`); returns the action's result. A ValueError of the state machine becomes an execution error."""
    state = barrier_state(m, inst, lane, address)
    before = state.phase
    key = mbarrier_key(m, lane, address)
    try:
        result = action(state)
    except ValueError as error:
        last = m.tracker.last_arrival.get(key)
        if "pending arrivals" in str(error) and last is not None:  # an arrival the phase does not count
            raise m.tracker.hazard(inst, f"arrives on the mbarrier at shared address {address:#x} in phase "
                                         f"{state.phase}, whose arrivals are all in (the last at line {last[0]}, "
                                         f"{m.describe_lane(last[1])}; the phase waits for {state.tx_count} "
                                         "transaction bytes): this arrival belongs to a later phase, and no wait "
                                         "orders it after this one completes (race: a missing or wrong-parity "
                                         "wait before reusing the barrier)", lane) from None
        raise m.error(inst, f"mbarrier at {address:#x}: {error}", lane) from None
    if key[0] != int(m.lane_cta[lane]):
        m.cluster_state.remote_mbarrier(inst, lane, key, before)
    if state.phase != before:
        m.tracker.phase_changed(inst, key, lane)
    else:
        m.tracker.arrivals_changed(key)
    barrier_changed(m, key, before, state, parked=parked)
    return result
