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
followers' global stores wait until the leader has ended (`FollowerStore`) and are then made in the grid's order
with the followers' own CTA ids, each checked and recorded by the global-memory race checks as a one-at-a-time run makes
them; their loads are made at once as their own CTAs; their TMA reads need no records, since a batch runs only
where no tensor that a TMA copy or a load reads is written by the kernel (`batches.batchable`). Results are
bitwise those of one CTA at a time, hazards are found in the leader (the followers' are the same by
construction) and named with its CTA, or, for a follower that leaves, in its own run.

What a batch needs (`batches.batchable`): no cluster, no atomics, reductions or semaphores between CTAs, no
interpreter listeners, the round-robin schedule, and only ops with a follower rule (`follower_rules.follower_rule`);
otherwise the CTAs run one at a time as before.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np
from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.interpreters import serving_checks
from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.byte_box import put
from tessera.interpreters.sm90 import fragment_view
from tessera.interpreters.sm90 import wgmma as wgmma_unit
from tessera.interpreters.sm90.arith import RegisterArithFunctions
from tessera.interpreters.sm90.cta import NamesThreads
from tessera.interpreters.sm90.follower_rules import PURE_SM90, follower_rule, shuffle_followers
from tessera.interpreters.sm90.machine import Sm90Functions
from tessera.interpreters.sm90.registers import as_unsigned64, dtype_of, row_mask, unsigned
from tessera.interpreters.sm90.shared_memory import EPOCH_BYTES
from tessera.interpreters.sm90.strands import HazardUnwind
from tessera.interpreters.sm90.tma import shared_box
from tessera.interpreters.sm90.wgmma_operands import operand_addresses
from tessera.interpreters.truth import all_set, any_set, equal_arrays
from tessera.sm90 import facts


class FollowerDropout(Exception):
    """The followers of a batch cannot go on with the leader (they differ from it, or one of them fails)."""


# region the followers' view of the CTA


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


# endregion


def _differs(op: Operation) -> str:
    """Why followers leave at `op`: printing an op with regions prints them all, so those are named by their
    operands' names only."""
    if op.regions:
        names = ", ".join(f"%{value.name_hint}" if value.name_hint else "%_" for value in op.operands)
        where = f"{op.name} {names}"
    else:
        where = describe_op(op)
    return f"{where}: an operand differs between the CTAs of the batch"


class FollowerStore:
    """A follower's global store, made when the leader has ended: the op, its addresses, threads, words and
    width, the leader's happens-before matrix and clock at the store."""

    __slots__ = ("op", "addresses", "threads", "words", "nbytes", "ordered", "clock")

    def __init__(self, op, addresses, threads, words, nbytes, ordered, clock):
        self.op, self.addresses, self.threads, self.words, self.nbytes = op, addresses, threads, words, nbytes
        self.ordered, self.clock = ordered, clock


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


class Followers:
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

    def _tma_load(self, op: sm90.TmaLoadOp, args: tuple, fargs: tuple) -> tuple:
        tensor_map, *coords, dest, mbarrier = args
        _, *fcoords, fdest, fbarrier = fargs
        self.same(op, dest, fdest)
        self.same(op, mbarrier, fbarrier)
        threads = np.nonzero(self.leader.active)[0]
        copies = self.leader.tma.in_flight[len(self.leader.tma.in_flight) - len(threads):]
        spec = tensor_map.spec
        for copy, thread in zip(copies, threads):
            start = int(dest[thread])
            # a box at the leader's coordinates (K and V of the same head) is the leader's bytes: a batch reads
            # only tensors that no CTA writes (`batches.batchable`); followers with the same coordinates share one
            boxes = {tuple(int(c[thread]) for c in coords): copy.data}
            rows = []
            same = True
            for f in range(self.count):
                if not self.alive[f]:  # its rows are not read again; it loads nothing
                    rows.append(np.zeros(copy.data.size, np.uint8))
                    continue
                at = tuple(int(c[f, thread]) for c in fcoords)
                box = boxes.get(at)
                if box is None:
                    problem = serving_checks.check_box(tensor_map.name, spec.global_dims, list(at), spec.box_dims)
                    if problem:  # it fails: its own run reports it
                        self.leave(np.arange(self.count) == f, problem, op, np.arange(self.count))
                        rows.append(np.zeros(copy.data.size, np.uint8))
                        continue
                    box = boxes[at] = shared_box(start, tensor_map.read_box(list(at)), tensor_map.swizzle)[1]
                same = same and box is copy.data
                rows.append(box)
            copy.follower_same = same and all_set(self.alive)
            copy.follower_data = (np.broadcast_to(copy.data, (self.count,) + copy.data.shape) if copy.follower_same
                                  else np.stack(rows))
        return ()

    def land(self, addresses: np.ndarray, data: np.ndarray, same: bool = False) -> None:
        """A TMA copy landed in the leader's shared memory at `addresses`: the followers' boxes [F, n] land too;
        `same`: they are the leader's bytes (`same_lines`)."""
        box = getattr(addresses, "box", None)
        if box is not None and len(box[1]) == 1 and box[2] == (1,):
            low, high = box[0], box[0] + box[1][0]
            self.smem[:, low:high] = data
        else:
            for f in range(self.count):
                put(self.smem[f], addresses, data[f])
            low, high, same = int(addresses.min()), int(addresses.max()) + 1, False
        if same:  # the lines it fills wholly hold the leader's bytes; the others keep what they held
            self.same_lines[-(-low // EPOCH_BYTES):high // EPOCH_BYTES] = True
        else:
            self.same_lines[low // EPOCH_BYTES:(high - 1) // EPOCH_BYTES + 1] = False

    def wgmma_operands(self, op: sm90.WgmmaMmaAsyncOp, a, b, fa, warpgroups: list[int], rows, m: int,
                       k: int, leaders: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
        """The followers' A tiles [F, W, m, k] and B tiles [F, 1 or W, n, k] of wgmma `op` for `warpgroups`
        (threads `rows`), read through the leader's descriptors `a` and `b` (a descriptor the followers must
        share: `_wgmma` checks it) from their shared memory, or from their A registers `fa`; B is [F, 1, n, k]
        where every warpgroup reads the same B, as the leader's (`WgmmaUnit.mma`). Their rows are in
        `fragment_view.operand_order`, as the leader's. With `leaders`, None for an operand read from shared
        memory wholly on `same_lines`: every follower's tiles are the leader's."""
        form = wgmma_unit.wgmma_form(op)
        n, ab = form.n, form.a_type
        types = {"A": ab, "B": form.b_type}
        size, count = facts.WARPGROUP_SIZE, self.count
        element_bytes = facts.WGMMA_K_BYTES // k
        orders = {"A": fragment_view.operand_order("A", n), "B": fragment_view.operand_order("B", n)}

        def operand(descriptor, major: str, extent: int):
            return operand_addresses(as_unsigned64(descriptor), major, extent, k, element_bytes)

        def same(operands) -> bool:
            lines = (self.same_lines[low // EPOCH_BYTES:(high - 1) // EPOCH_BYTES + 1] for low, high in
                     (o.span for o in operands))
            return leaders and all(np.count_nonzero(span) == len(span) for span in lines)

        def tile(read, what: str) -> np.ndarray:
            addresses, _ = read.ordered(orders[what])
            if types[what] in facts.FP8_FORMATS:
                return facts.fp8_bits_to_f32(np.take(self.smem, addresses, axis=1), types[what])
            bits = np.ascontiguousarray(read.gather(self.smem, orders[what])).view("<u2")
            bits = bits.reshape((count,) + addresses.shape)
            return facts.half_bits_to_f32(bits, types[what])

        descriptors = [int(b[w * size]) for w in warpgroups]
        b_reads = {d: operand(d, "MN" if form.trans_b else "K", n) for d in descriptors}
        b_stack = None
        if not same(b_reads.values()):
            b_tiles = {d: tile(read, "B") for d, read in b_reads.items()}
            b_stack = (b_tiles[descriptors[0]][:, None] if len(b_tiles) == 1
                       else np.stack([b_tiles[d] for d in descriptors], axis=1))
        if form.a_in_registers:
            registers = fa[:, rows].reshape((-1,) + fa.shape[2:])
            a_stack = wgmma_unit.WgmmaUnit._register_tiles(registers, ab, m, k, orders["A"]).reshape(  # noqa: SLF001
                count, len(warpgroups), m, k)
            return a_stack, b_stack
        a_reads = [operand(int(a[w * size]), "MN" if form.trans_a else "K", m) for w in warpgroups]
        if same(a_reads):
            return None, b_stack
        return np.stack([tile(read, "A") for read in a_reads], axis=1), b_stack

    def _wgmma(self, op: sm90.WgmmaMmaAsyncOp, args: tuple, fargs: tuple, leader_result) -> np.ndarray:
        """The followers' result: the one the leader computed with its own (`WgmmaUnit.mma`, `merged_wgmma`), or
        computed here."""
        merged, self.merged_wgmma = self.merged_wgmma, None
        acc, a, b, *scale = args
        facc, fa, fb, *fscale = fargs
        form = wgmma_unit.wgmma_form(op)
        self.same(op, b, fb)
        if not form.a_in_registers:
            self.same(op, a, fa)
        if scale:
            self.same(op, scale[0], fscale[0])
        if merged is not None and merged[0] is leader_result:
            return merged[1]
        n, m, k = form.n, form.m, form.k
        size, count = facts.WARPGROUP_SIZE, self.count
        warpgroups = self.leader.converged_units(op, size, "wgmma_mma_async")
        if not warpgroups:
            return np.array(facc, copy=True)
        rows = wgmma_unit._warpgroup_rows(warpgroups)  # noqa: SLF001
        if isinstance(rows, slice):  # the other rows keep the accumulator; these are all written below
            result = np.empty(facc.shape, facc.dtype)
            result[:, :rows.start], result[:, rows.stop:] = facc[:, :rows.start], facc[:, rows.stop:]
        else:
            result = np.array(facc, copy=True)
        a_stack, b_stack = self.wgmma_operands(op, a, b, fa, warpgroups, rows, m, k, leaders=False)
        accumulate = [not scale or bool(scale[0][w * size]) for w in warpgroups]
        fragments = (count, len(warpgroups), size, facc.shape[2])
        out = result[:, rows].reshape(fragments) if isinstance(rows, slice) else np.empty(fragments, np.float32)
        fragment_view.multiply_accumulate(a_stack, b_stack, facc[:, rows].reshape(fragments), out,
                                          np.asarray(accumulate), n, ordered=True)
        if not isinstance(rows, slice):
            result[:, rows] = out.reshape(count, -1, facc.shape[2])
        return result

    def _ld_global(self, op, fargs: tuple, memory, nbytes: int) -> np.ndarray:
        """Each follower's load, made now as its own CTA (checked and recorded as a one-at-a-time run makes it):
        a batch loads only from tensors the kernel does not write (`launch.batchable`), so their bytes are the
        same whenever it is made. A follower whose load fails leaves the batch (its own run reports it)."""
        base, offsets, mask = fargs
        leader = self.leader
        columns = 0 if op.column_bytes is None else np.asarray(op.column_bytes.get_values(), np.int64)
        words = np.zeros(mask.shape, np.uint32)
        for f in np.nonzero(self.alive)[0]:
            selected = mask[f] & row_mask(leader.active, mask[f])
            thread, _ = np.nonzero(selected)
            view = FollowerView(leader, self.cta_ids[f], leader.hb.ordered, leader.clock)  # read now, not kept
            try:
                words[f][selected] = memory.load_words(view, op, (base[f][:, None] + offsets[f] + columns)[selected],
                                                       thread, nbytes)
            except (Exception, HazardUnwind) as failure:  # noqa: BLE001 - its own run reports it
                self.leave(np.arange(self.count) == f, str(getattr(failure, "error", failure)), op,
                           np.arange(self.count))
        return words.view(dtype_of(op.result.type))

    def _st_shared(self, op: sm90.StSharedOp, args: tuple, fargs: tuple) -> tuple:
        """st.shared (tile.clear_rows' zeros): at the leader's addresses (the followers' must be the same), each
        follower's words into its own shared memory, by the leader's active threads (the leader's store made
        every check)."""
        addresses, faddresses, values = args[0], fargs[0], fargs[1]
        self.same(op, addresses, faddresses)
        active = self.leader.active
        where = (np.asarray(addresses, np.int64)[active].reshape(-1, 1) + np.arange(4)).reshape(-1)
        words = unsigned(values) if values.dtype.kind in "iu" else values.view(np.uint32)
        for f in np.nonzero(self.alive)[0]:
            self.smem[f, where] = words[f][active].astype("<u4").view(np.uint8).reshape(-1)
        return ()

    def _st_global(self, op, fargs: tuple, nbytes: int) -> tuple:
        base, offsets, values, mask = fargs
        leader = self.leader
        columns = 0 if op.column_bytes is None else np.asarray(op.column_bytes.get_values(), np.int64)
        words = unsigned(values) if values.dtype.kind in "iu" else values.view(np.uint32)  # as `machine` stores
        ordered, clock = leader.hb.ordered.copy(order="K"), leader.clock  # in its layout (`HappensBefore`)
        for f in np.nonzero(self.alive)[0]:
            selected = mask[f] & row_mask(leader.active, mask[f])
            thread, _ = np.nonzero(selected)
            addresses = (base[f][:, None] + offsets[f] + columns)[selected]
            self.stores[f].append(FollowerStore(op, addresses, thread, words[f][selected], nbytes, ordered, clock))
        return ()

    # endregion
    def commit(self, memory, on_cta=None, following=None) -> list:
        """Make the stores of the followers that followed to the end, follower by follower (the grid's order),
        as their own CTAs (`on_cta(cta_id)` called before each); the views (for their traffic)."""
        views = []
        following = set(self.following()) if following is None else following
        for cta_id, stores in zip(self.cta_ids, self.stores):
            if cta_id not in following:
                continue
            if on_cta is not None:
                on_cta(cta_id)
            view = FollowerView(self.leader, cta_id, self.leader.hb.ordered, self.leader.clock)
            for store in stores:
                view.hb = _Ordered(store.ordered)
                view.clock = store.clock
                memory.store_words(view, store.op, store.addresses, store.threads, store.words, store.nbytes)
            views.append(view)
        return views

    def release(self) -> None:
        """Drop the followers' shared memory and stores once they are made (`commit`; see
        `program.CompiledCta.release`)."""
        self.smem = None
        self.stores = [[] for _ in self.cta_ids]


class _SpecialView:
    """A follower's CTA id and grid, for its special registers."""

    def __init__(self, leader, cta_id):
        self.cta_id, self.grid, self.threads, self.tid = cta_id, leader.grid, leader.threads, leader.tid
        self.cluster, self.rank = None, 0


class _Functions:
    def __init__(self, cta):
        self.cta = cta


__all__ = ["FollowerDropout", "Followers"]
