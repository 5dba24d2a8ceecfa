"""The views of a leader CTA that its batch's followers (`followers`) are run and checked through: the leader as
the pure implementations see it for all followers at once (`_WideCta`: F * T threads), one follower as the global
memory sees it when its stores are made (`FollowerView`, with the leader's happens-before at the store,
`_Ordered`), and a follower's CTA id for its special registers (`_SpecialView`).

Invariants: a view holds no state of its own but its CTA id, clock and happens-before matrix; everything else is
the leader's (its threads, active mask, mbarriers, shared memory), read, never written. A failure seen through
`_WideCta` raises `FollowerDropout`: the followers cannot go on with the leader, the leader goes on alone.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.sm90.cta import NamesThreads


class FollowerDropout(Exception):
    """The followers of a batch cannot go on with the leader (they differ from it, or one of them fails)."""


class _WideCta:
    """The leader as the pure implementations (`arith`, `machine`) see it for all followers at once: F * T
    threads, the leader's active mask repeated for each follower; a failure drops the followers out."""

    def __init__(self, leader, count: int):
        self.leader = leader
        self.count = count
        self.threads = leader.threads * count
        self.tid = np.arange(self.threads, dtype=np.int32)  # a row of the wide arrays (warps keep their lanes)
        self.cluster = None
        self.rank = 0
        self._mask: tuple = (None, None)

    @property
    def active(self) -> np.ndarray:
        leader_mask = self.leader.active
        if self._mask[0] is not leader_mask:  # masks are never changed in place (`strands`)
            self._mask = (leader_mask, np.tile(leader_mask, self.count))
        return self._mask[1]

    def converged_units(self, op: Operation, unit: int, what: str) -> list[int]:
        self.leader.converged_units(op, unit, what)  # the leader's threads are the followers' (checked there)
        groups = self.active.reshape(-1, unit)
        return [int(g) for g in np.nonzero(groups.any(axis=1))[0]]

    def fail(self, op: Operation, message: str, threads=None) -> NoReturn:
        raise FollowerDropout(f"{describe_op(op)}: {message}")


class FollowerView(NamesThreads):
    """One follower as the global memory sees it when its stores are made (`Followers.commit`): its CTA id, the
    leader's happens-before as it was at the store, a clock from that time."""

    def __init__(self, leader, cta_id: tuple[int, int, int], ordered: np.ndarray, clock: int):
        self.leader = leader
        self.cta_id = cta_id
        self.grid = leader.grid
        self.threads = leader.threads
        self.rank = 0
        self.cluster = None
        self.clock = clock
        self.hb = _Ordered(ordered)
        self.races = leader.races
        # what a store's checks read only of tensors a TMA copy reads, which a batch does not write (`batchable`)
        self.bulk, self.mbarriers, self.smem = leader.bulk, leader.mbarriers, leader.smem


class _Ordered:
    """The leader's happens-before as the global race checks read it at a follower's store: `ordered` and what
    the threads knew of other CTAs through semaphores (`grid`: none, a batch has no semaphores)."""

    def __init__(self, ordered: np.ndarray, grid: dict | None = None):
        self.ordered = ordered
        self.grid = {} if grid is None else grid


class _SpecialView:
    """A follower's CTA id and grid, for its special registers."""

    def __init__(self, leader, cta_id):
        self.cta_id, self.grid, self.threads, self.tid = cta_id, leader.grid, leader.threads, leader.tid
        self.cluster, self.rank = None, 0


class _Functions:
    """The `functions` object a special register's implementation reads its CTA from (`cta`: a `_SpecialView`)."""

    def __init__(self, cta):
        self.cta = cta


__all__ = ["FollowerDropout", "FollowerView"]
