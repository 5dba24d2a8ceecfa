"""Several CTAs of a grid in one run of the CTA simulator: a leader and its followers.

CTAs of a grid that do not interact run the same ops in the same order on the same shared addresses whenever
their control flow, their shared-memory, mbarrier and descriptor operands and their waits' outcomes agree; they
differ in their data (what TMA loads from global memory at their coordinates, what the tensor cores compute from
it, where they store the results). So a batch of them is simulated as one CTA, the *leader*, run by the whole
engine with every check (shared-memory and happens-before records, mbarriers, wgmma groups, the register-file
check, the strands and their schedule), and its *followers*, whose values are computed alongside the leader's
with one NumPy call per op for all of them: every value of the frame has a follower array [F, T, ...]
(`program.CompiledCta.shadow`), the followers' shared memory is an array [F, smem bytes].

The followers' bookkeeping is the leader's because their operands are the leader's: each op whose operands feed
a check or a decision (a control-flow condition or bound, a shared or mbarrier address, a descriptor, a wait's
outcome) compares the followers' operands with the leader's (`Followers.same`). A follower whose operand differs
(a causal trip count, a sequence's length) *leaves* the batch, noting where and with what operand (`left`); the
others go on, and the rows of those that left are no longer compared or stored. A follower whose TMA box or load
fails leaves the same way; a failure that cannot be told apart (a division by zero in one NumPy call for all)
*drops* the batch (`dropped`): the leader goes on alone. Those that left or dropped run later (`batches`), as if
there had been no batch. An `scf.if` of pure ops whose condition differs does not make followers leave: they
compute the branch the leader does not take by themselves (`follower_rules.pure_if`, `Followers.region`). The
followers' memory (their TMA boxes, wgmma operands, global loads and the stores made when the leader has ended) is
`follower_memory`, the views of the leader they are run and checked through `follower_views`. Results are
bitwise those of one CTA at a time, hazards are found in the leader (the followers' are the same by
construction) and named with its CTA, or, for a follower that leaves, in its own run.

What a batch needs (`batches.batchable`): no cluster, no atomics, reductions or semaphores between CTAs, no
interpreter listeners, the round-robin schedule, and only ops with a follower rule (`follower_rules.follower_rule`);
otherwise the CTAs run one at a time as before.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.sm90.arith import RegisterArithFunctions
from tessera.interpreters.sm90.follower_memory import FollowerMemory, FollowerStore
from tessera.interpreters.sm90.follower_rules import PURE_SM90, follower_rule, shuffle_followers
from tessera.interpreters.sm90.follower_views import FollowerDropout, _Functions, _SpecialView, _WideCta
from tessera.interpreters.sm90.machine import Sm90Functions
from tessera.interpreters.sm90.shared_memory import EPOCH_BYTES
from tessera.interpreters.sm90.strands import HazardUnwind
from tessera.interpreters.truth import all_set, any_set, equal_arrays


def _differs(op: Operation) -> str:
    """Why followers leave at `op`: printing an op with regions prints them all, so those are named by their
    operands' names only."""
    if op.regions:
        names = ", ".join(f"%{value.name_hint}" if value.name_hint else "%_" for value in op.operands)
        where = f"{op.name} {names}"
    else:
        where = describe_op(op)
    return f"{where}: an operand differs between the CTAs of the batch"


_BROADCASTS: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
"""(id of a read-only leader value, follower count) -> (the value, its `Followers.broadcast`): kept across
batches and launches (a constant's array lives on its op), up to `_BROADCAST_LIMIT` bytes of values."""
_BROADCAST_BYTES = 0
_BROADCAST_LIMIT = 32 << 20


def _broadcast(value: np.ndarray, count: int) -> np.ndarray:
    """`value` repeated `count` times along a new first axis, a read-only view: built directly on an array that
    owns its data (a quarter of `np.broadcast_to`'s cost; its base is `value`, as `Followers._uniform` expects)."""
    if value.base is None and value.flags.c_contiguous:
        view = np.ndarray((count,) + value.shape, value.dtype, value, 0, (0,) + value.strides)
        view.flags.writeable = False
        return view
    return np.broadcast_to(value, (count,) + value.shape)


class Followers(FollowerMemory):
    """The followers of one leader CTA (module docstring): their CTA ids, shared memory [F, bytes], the
    stores they make at the end, and why they dropped out (None while they follow)."""

    def __init__(self, leader, cta_ids: list[tuple[int, int, int]]):
        self.leader = leader
        self.cta_ids = list(cta_ids)
        self.count = len(cta_ids)
        self.smem = np.zeros((self.count, leader.smem_bytes), np.uint8)
        self.same_lines = np.zeros(-(-leader.smem_bytes // EPOCH_BYTES), bool)
        """Per `EPOCH_BYTES`-byte line of shared memory: every follower holds the leader's bytes there (a TMA box
        at the leader's coordinates landed on it: K and V of one head), so a wgmma operand read there is the
        leader's tile (`wgmma_operands`). Only TMA copies write the followers' shared memory (`land`)."""
        self.stores: list[list[FollowerStore]] = [[] for _ in cta_ids]
        self.dropped: str | None = None
        """Why every follower stopped following (a failure, or the last one left), None while any follows."""
        self.alive = np.ones(self.count, bool)
        """Which followers still follow; one whose operand differs from the leader's leaves alone (`same`)."""
        self.left: dict[int, tuple[str, tuple]] = {}
        """Follower index -> (why it left, its signature: the op and its differing operand, by which the
        followers that left together are batched again, `launch`)."""
        self.wide = _WideCta(leader, self.count)
        self._pure = {"arith": RegisterArithFunctions(self.wide), "machine": Sm90Functions(self.wide, None)}
        self._pure_of: dict[type, object] = {}
        """Op type -> which of `_pure` runs it."""
        self._special: dict[Operation, np.ndarray] = {}
        self.control_results: tuple = ()
        """The follower values of the control-flow op that just ran (`control`)."""
        self.merged_wgmma: tuple | None = None
        """(the leader's result, the followers') of the wgmma that just ran, where the leader computed both in
        one product (`WgmmaUnit.mma`); `_wgmma` takes them."""

    def drop(self, reason: str) -> None:
        if self.dropped is None:
            self.dropped = reason

    def following(self) -> list[tuple[int, int, int]]:
        """The CTA ids of the followers that follow to the end (with no failure of the batch)."""
        return [] if self.dropped is not None else [c for c, alive in zip(self.cta_ids, self.alive) if alive]

    # region operands
    def same(self, op: Operation, leader, followers) -> None:
        """The followers' operand must be the leader's (it decides control flow or addresses): the followers
        whose operand differs leave the batch (`leave`); the others go on. The rows of followers that left hold
        whatever their values became and are not compared again."""
        if followers is leader:
            return
        if isinstance(leader, np.ndarray) and isinstance(followers, np.ndarray) and \
                followers.shape[1:] == leader.shape:
            if followers.strides[0] == 0 and followers.base is leader and followers.strides[1:] == leader.strides:
                return  # a broadcast of the leader's own array (`broadcast`): its bytes, nothing to compare
            equal = followers == leader
            if np.count_nonzero(equal) == equal.size:
                return
            differs = ~equal.reshape(self.count, -1).all(axis=1) & self.alive
            if np.count_nonzero(differs):
                self.leave(differs, _differs(op), op, followers)
            return
        raise FollowerDropout(_differs(op))

    def differ(self, leader, followers) -> bool:
        """Whether a follower that follows holds another value than the leader's `leader`."""
        if followers is leader:
            return False
        if not (isinstance(leader, np.ndarray) and isinstance(followers, np.ndarray)):
            return True
        equal = followers == leader
        return not all_set(equal) and any_set(~equal.reshape(self.count, -1).all(axis=1) & self.alive)

    def region(self, interpreter, region) -> tuple:
        """The followers' values of a pure region (`pure_if`) that the leader does not run: its ops computed
        for the followers alone, from their frame (`interpreter.shadow`); the values its terminator yields."""
        code = interpreter.kernel.blocks[region.blocks.first]
        shadow, frame = interpreter.shadow, interpreter._ctx  # noqa: SLF001
        implementations = interpreter._steps.implementations  # noqa: SLF001
        checks = [listener for listener in interpreter.listeners if hasattr(listener, "check_pure_region")]
        inside: set[int] = set()
        for op_code in code.ops:
            op = op_code.op
            fargs = tuple(shadow[slot] for slot in op_code.reads)
            try:
                for listener in checks:
                    if listener.in_pure_region(op):
                        listener.check_pure_region(op, tuple(None if slot in inside else frame[slot]
                                                             for slot in op_code.reads))
            except HazardUnwind as unwind:  # a follower's own run reports it, naming that CTA
                raise FollowerDropout(str(unwind.error)) from None
            inside.update(op_code.writes)
            rule = follower_rule(op)
            if rule == "terminator":
                return fargs
            position, implementation = implementations[type(op)]
            functions = interpreter.functions[position]
            if rule == "pure":
                results = self._run_wide(op, implementation, fargs)
            elif rule == "vector.shuffle":
                results = (shuffle_followers(op, *fargs),)
            elif rule == "sm90.special":
                results = (self._special_register(op, functions),)
            else:  # a constant or a shared address: the leader's, computed by its implementation
                results = tuple(self.broadcast(r) for r in implementation(functions, interpreter, op, ()).values)
            for slot, value in zip(op_code.writes, results):
                shadow[slot] = value
        return ()

    def leave(self, which: np.ndarray, reason: str, op: Operation, values: np.ndarray) -> None:
        """The followers `which` ([F] bool) leave the batch at `op`, whose operand is `values` ([F, ...]); when
        none is left, the batch is dropped (`dropped`)."""
        for f in np.nonzero(which)[0]:
            self.left[int(f)] = (reason, (id(op), values[f].tobytes()))
        self.alive &= ~which
        if not any_set(self.alive):
            self.drop(reason)

    @staticmethod
    def _uniform(leader, followers) -> bool:
        """Whether every follower holds `leader` (a broadcast of a value equal to it; of the leader's own array, as
        `broadcast` makes it, without comparing its elements)."""
        if not isinstance(followers, np.ndarray):
            return followers is leader
        if followers.strides[0] != 0:
            return False
        if followers.base is leader and followers.shape[1:] == leader.shape and followers.strides[1:] == leader.strides:
            return True  # a view of the leader's array itself: the same bytes
        return equal_arrays(followers[0], leader)

    def broadcast(self, value):
        """The leader's value in every follower (a read-only view). A read-only value (a constant, a shared
        address, a special register: the same array at every run of its op, in every launch) keeps its view
        (`_BROADCASTS`)."""
        if not isinstance(value, np.ndarray):
            return value
        if value.flags.writeable:
            return _broadcast(value, self.count)
        key = (id(value), self.count)
        cached = _BROADCASTS.get(key)
        if cached is not None and cached[0] is value:
            return cached[1]
        view = _broadcast(value, self.count)
        global _BROADCAST_BYTES
        if _BROADCAST_BYTES + value.nbytes > _BROADCAST_LIMIT:
            _BROADCASTS.clear()
            _BROADCAST_BYTES = 0
        _BROADCASTS[key] = (value, view)
        _BROADCAST_BYTES += value.nbytes
        return view

    # endregion
    # region running an op
    def run(self, op: Operation, impl, functions, args: tuple, fargs: tuple, results: tuple) -> tuple:
        """The follower values of `op`'s results (the leader's `results` computed from `args`)."""
        rule = follower_rule(op)  # (map, not generators: this runs at every op of a batch)
        if rule == "control":
            return self.control_results
        if rule == "as leader":
            for leader, followers in zip(args, fargs):
                self.same(op, leader, followers)
            return tuple(map(self.broadcast, results))
        if rule == "checked":
            for leader, followers in zip(args, fargs):
                self.same(op, leader, followers)
            return ()
        if rule == "pure":
            if all(map(self._uniform, args, fargs)):
                return tuple(map(self.broadcast, results))  # the leader's operands: its results
            return self._run_pure(op, impl, functions, fargs, args)
        if rule == "vector.shuffle":
            if all(map(self._uniform, args, fargs)):
                return tuple(map(self.broadcast, results))
            return (shuffle_followers(op, *fargs),)
        if rule == "sm90.special":
            return (self._special_register(op, functions),)
        if rule == "sm90.tma_load":
            return self._tma_load(op, args, fargs)
        if rule == "sm90.wgmma_mma_async":
            return (self._wgmma(op, args, fargs, results[0]),)
        if rule in ("sm90.st_global", "sm90.st_global_b16"):
            return self._st_global(op, fargs, 4 if rule == "sm90.st_global" else 2)
        if rule in ("sm90.ld_global", "sm90.ld_global_u16"):
            return (self._ld_global(op, fargs, functions.memory, 4 if rule == "sm90.ld_global" else 2),)
        if rule == "sm90.st_shared":
            return self._st_shared(op, args, fargs)
        raise FollowerDropout(f"{op.name} has no follower rule")

    def _run_pure(self, op: Operation, impl, functions, fargs: tuple, args: tuple = ()) -> tuple:
        try:
            return self._run_wide(op, impl, fargs)
        except FollowerDropout:
            if all_set(self.alive) or not args:
                raise
        # a follower that left may hold anything: its rows take the leader's operands, and only a failure of
        # the followers that follow drops the batch
        return self._run_wide(op, impl, tuple(
            np.where(self.alive.reshape((-1,) + (1,) * (f.ndim - 1)), f, a) if isinstance(f, np.ndarray) else f
            for f, a in zip(fargs, args)))

    def _run_wide(self, op: Operation, impl, fargs: tuple) -> tuple:
        count, threads = self.count, self.leader.threads
        wide = tuple([a.reshape((count * threads,) + a.shape[2:]) if isinstance(a, np.ndarray) else a for a in fargs])
        kind = type(op)
        own = self._pure_of.get(kind)
        if own is None:
            own = self._pure_of[kind] = self._pure["machine" if isinstance(op, PURE_SM90) else "arith"]
        out = impl(own, self, op, wide).values
        return tuple([r.reshape((count, threads) + r.shape[1:]) for r in out])  # (a list: no generator)

    def _special_register(self, op: sm90.SpecialRegOp, functions) -> np.ndarray:
        value = self._special.get(op)
        if value is None:
            rows = []
            for cta_id in self.cta_ids:
                view = _SpecialView(self.leader, cta_id)
                rows.append(type(functions)._special(_Functions(view), op))
            value = self._special[op] = np.stack(rows)
            value.setflags(write=False)
        return value

    # endregion


__all__ = ["Followers"]
