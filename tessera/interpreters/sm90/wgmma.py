"""Warpgroup MMA in the CTA simulator: operands through descriptors or registers, and the accumulator fragment
(the asynchrony of commit and wait groups is `wgmma_groups`).

`wgmma_mma_async` runs per warpgroup (threads 128w .. 128w+127, all of them active): A (64 x 16) comes from
shared memory through its descriptor (`facts.descriptor_element_address`, K-major for trans 0, MN-major for
trans 1, the swizzle taken on absolute addresses) or from the threads' four packed registers
(`facts.a_fragment_coords`, element 2i in the low half per `facts.mov_unpack_b32`; for e4m3/e5m2, A is 64 x 32
bytes, four per register, `facts.a8_fragment_coords`); B (16 x N, 32 x N for 8-bit types) always
from shared memory (trans_b: 0 = K-major, 1 = MN-major). Each operand is decoded with its own type
(`multiplicand_types`: e5m2 A by e4m3 B, and the reverse, mix). D = A x B (+ D), products exact, summed in float64
and rounded once to f32; the accumulator is scattered and gathered with `facts.accumulator_coords`.

The result is computed at once but is *pending* on the warpgroup's open group: the groups, their commits and
waits, and the checks that nothing reads a pending value, are `wgmma_groups` (`WgmmaGroups`, a base of
`WgmmaUnit`).

Happens-before (`happens_before`, `tessera.sm90.memory_model`): the time each group completed (the
`wgmma_wait_group` that completed it, `completed_at`) orders its shared-memory reads before a later write, which
must happen after that wait; and a wgmma's register operands (the accumulator, the A fragment) must have been
written before the warpgroup's latest `wgmma_fence` (`RegisterWrites` records when each value feeding a wgmma
was computed), except an accumulator chained from an earlier wgmma; a warpgroup's first wgmma needs a fence
before it too. The listeners that keep those records and check operands before each op are in `wgmma_checks`;
what an operand read through a descriptor touches (its addresses, chunks and gathers) is `wgmma_operands`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from xdsl.dialects import arith
from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.interpreters.block_batch import describe_op
from tessera.interpreters.sm90 import fragment_view
from tessera.interpreters.sm90.record_pool import records
from tessera.interpreters.sm90.registers import as_unsigned64
from tessera.interpreters.sm90.shared_memory import EPOCH_BYTES
from tessera.interpreters.sm90.wgmma_groups import Pending, WgmmaGroups
from tessera.interpreters.sm90.wgmma_operands import operand_addresses
from tessera.interpreters.truth import any_set, equal_arrays
from tessera.sm90 import facts

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta_view import CtaView

_SPAN_LIMIT = 8
"""`_check_read` takes whole lines when they hold at most this many bytes per byte read (a K-major 128B-swizzled
k-step reads a quarter of each row of its tile)."""

_HALVES = np.dtype("<u2")
"""16-bit elements as little-endian memory holds them (a dtype object: a string is parsed at every view)."""


class WgmmaForm(NamedTuple):
    """What a wgmma op's attributes and operand types say, read at each of its runs: n, A's and B's types
    (`multiplicand_types`), the transposes, the instruction's m and k (`facts.wgmma_shape`) and whether A is in
    registers (`a_in_registers`)."""

    n: int
    a_type: str
    b_type: str
    trans_a: int
    trans_b: int
    m: int
    k: int
    a_in_registers: bool


def wgmma_form(op: sm90.WgmmaMmaAsyncOp) -> WgmmaForm:
    """`op`'s `WgmmaForm`, kept on the op while its properties and operand tuple are the same objects (xDSL's
    accessors cost some 6 us a run of a wgmma, `a_in_registers` 2.5 us of it; xDSL replaces the operand tuple
    when an operand is rewired)."""
    key = (tuple(op.properties.values()), op._operands)  # noqa: SLF001 - the tuple itself, not a view of it
    cached = op.__dict__.get("_tessera_wgmma_form")
    if cached is not None and cached[0] == key:
        return cached[1]
    n, (a_type, b_type) = op.n.value.data, op.multiplicand_types
    m, _, k = facts.wgmma_shape(n, a_type, "f32")
    form = WgmmaForm(n, a_type, b_type, op.trans_a.value.data, op.trans_b.value.data, m, k, op.a_in_registers)
    op.__dict__["_tessera_wgmma_form"] = (key, form)
    return form


@lru_cache(maxsize=None)
def _warpgroup_threads(warpgroup: int) -> np.ndarray:
    """The threads of `warpgroup`, in order (read-only: kept, a wgmma takes them for each of its warpgroups)."""
    threads = np.arange(warpgroup * facts.WARPGROUP_SIZE, (warpgroup + 1) * facts.WARPGROUP_SIZE)
    threads.flags.writeable = False
    return threads


def _warpgroup_rows(warpgroups: list[int]) -> slice | np.ndarray:
    """The threads of `warpgroups` (ascending) as a slice where they are consecutive, else as an index array."""
    size = facts.WARPGROUP_SIZE
    if warpgroups[-1] - warpgroups[0] + 1 == len(warpgroups):
        return slice(warpgroups[0] * size, (warpgroups[-1] + 1) * size)
    return (np.asarray(warpgroups)[:, None] * size + np.arange(size)).reshape(-1)


def _stacked(leader: np.ndarray, followers: np.ndarray) -> np.ndarray:
    """The leader's [T, R] accumulator and the followers' [F, T, R] as one [1 + F, T, R] array: without a copy
    where the followers' is a broadcast of the leader's (a zero accumulator) or both are the parts of one
    such array (the result of the chain's previous wgmma, `WgmmaUnit.mma`)."""
    shape = (1 + len(followers),) + leader.shape
    if followers.strides[0] == 0 and followers.base is leader and followers.shape[1:] == leader.shape \
            and followers.strides[1:] == leader.strides:
        return np.broadcast_to(leader, shape)
    base = leader.base
    if base is not None and followers.base is base and base.shape == shape and base.flags.c_contiguous and \
            leader.ctypes.data == base.ctypes.data and followers.ctypes.data == base.ctypes.data + leader.nbytes \
            and leader.flags.c_contiguous and followers.flags.c_contiguous:
        return base
    return np.concatenate([leader[None], followers])


_ROW_PLACES: dict[int, tuple[np.ndarray | None, np.ndarray]] = {}


def _row_places(order: np.ndarray | None) -> np.ndarray:
    """Where row r of a tile goes when its rows are taken in `order` (the inverse permutation; the identity for
    None), kept per order."""
    entry = _ROW_PLACES.get(id(order))
    if entry is None or entry[0] is not order:
        places = np.arange(facts.WGMMA_M) if order is None else np.argsort(order)
        places.flags.writeable = False
        entry = _ROW_PLACES[id(order)] = (order, places)
    return entry[1]


@lru_cache(maxsize=None)
def _a8_coords() -> tuple[np.ndarray, np.ndarray]:
    """(row, k) of 8-bit A element i (register i / 4, byte i % 4) of each thread: [128, 16] each."""
    return facts.a8_fragment_coords(np.arange(facts.FP8_A_ELEMENTS)[None, :], np.arange(facts.WARPGROUP_SIZE)[:, None])


_A_GATHERS: dict[tuple, tuple[np.ndarray | None, np.ndarray | None]] = {}


def _a_gather(order: np.ndarray | None, m: int, k: int) -> np.ndarray | None:
    """For an m x k A tile of 16-bit elements from a warpgroup's packed registers, its rows in `order`: the index,
    for each element of the tile (row-major), of its half among the registers' 16-bit halves (thread-major,
    register, low half first, as little-endian memory holds them); None where the registers' elements do not
    fill the tile exactly once. Kept per order."""
    key = (id(order), m, k)
    entry = _A_GATHERS.get(key)
    if entry is not None and entry[0] is order:
        return entry[1]
    (row_lo, k_lo), (row_hi, k_hi) = _a_coords()
    place = _row_places(order)
    halves = row_lo.size + row_hi.size
    gather = None
    if halves == m * k and row_lo.max() < m and row_hi.max() < m:
        destinations = np.stack([place[row_lo] * k + k_lo, place[row_hi] * k + k_hi], axis=-1).reshape(-1)
        if equal_arrays(np.sort(destinations), np.arange(m * k)):
            gather = np.empty(m * k, np.intp)
            gather[destinations] = np.arange(halves)
            gather.flags.writeable = False
    _A_GATHERS[key] = (order, gather)
    return gather


@lru_cache(maxsize=None)
def _a_coords() -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    i = np.arange(facts.A_FRAGMENT_REGISTERS)[None, :]
    t = np.arange(facts.WARPGROUP_SIZE)[:, None]
    return facts.a_fragment_coords(i, 0, t), facts.a_fragment_coords(i, 1, t)


class WgmmaUnit(WgmmaGroups):
    """A CTA's tensor-core unit (module docstring): runs `wgmma_mma_async` per warpgroup after its checks, keeps
    the records of what each group reads, and the fences; the groups themselves are its base `WgmmaGroups`."""

    def __init__(self, cta: CtaView):
        self.cta = cta
        groups = max(1, cta.warpgroups)
        self.open = np.zeros(groups, np.int64)
        self.committed: list[list[int]] = [[] for _ in range(groups)]
        self.done = np.full(groups, -1, np.int64)
        self.registry: dict[int, Pending] = {}
        self.newest_read = np.full(groups, -1, np.int64)  # the newest group of each warpgroup that read shared memory
        # read_group[w, byte]: the newest group of warpgroup w with a wgmma reading that shared byte (-1: none; int32,
        # as a CTA's group count stays far below 2^31: half the bytes every CTA fills; a row is refilled for the
        # next CTA only if its warpgroup read: `_read_rows_changed`);
        # group_ops[(w, g)]: the first wgmma of that group, for messages.
        self.read_group = records(cta, (groups, cta.smem_bytes), -1, np.int32, self._read_rows_changed)
        self.group_ops: dict[tuple[int, int], Operation] = {}
        # _completed[w][g]: the time group g of warpgroup w completed (-1: not yet); wait_ops[(w, g)]: the wait
        self._completed = [np.full(16, -1, np.int64) for _ in range(groups)]
        # in a cluster, the same on the cluster clock (what a peer's multicast is judged against: `Cluster`)
        self._completed_cluster = [np.full(16, -1, np.int64) for _ in range(groups)]
        self.wait_ops: dict[tuple[int, int], Operation] = {}
        # fenced_at[w]: the time of warpgroup w's latest wgmma_fence (-1: none); produced: id(value) -> (value,
        # time, op) for values that feed wgmma register operands (see `wgmma_checks.RegisterWrites`)
        self.fenced_at = np.full(groups, -1, np.int64)
        self.produced: dict[int, tuple[np.ndarray, int, Operation]] = {}
        # _verified[w, line]: the shared-memory change at which warpgroup w found that line readable through the
        # async proxy (-1: not yet; see _check_read)
        self._verified = np.full((groups, len(cta.smem.changed)), -1, np.int64)
        self.register_fences = False
        """True when a register allocation is checked: `register_check` applies the fence rule to registers."""
        # without one: chain_read[id of a chain's first wgmma] = ([W] times a value of the chain was last read by
        # an instruction, -1 none; the op), kept by `wgmma_checks.RegisterWrites`; heads: id of a wgmma -> id of
        # its chain's first
        self.chain_read: dict[int, tuple[np.ndarray, Operation]] = {}
        self.heads: dict[int, int] = {}

    # region mma_async
    def _read_rows_changed(self):
        """The rows of `read_group` that may differ from -1 (`records`): those of the warpgroups that read shared
        memory (only `_shared_operand` sets a group there, and sets `newest_read` with it; a producer warpgroup's row
        stays -1)."""
        rows = np.flatnonzero(self.newest_read >= 0)
        return None if not len(rows) else Ellipsis if len(rows) == len(self.newest_read) else rows

    def mma(self, op: sm90.WgmmaMmaAsyncOp, acc: np.ndarray, a: np.ndarray, b: np.ndarray,
            scale_d: np.ndarray | None, followers=None, fargs: tuple = ()) -> np.ndarray:
        """D of `op` (pending on the warpgroups' open groups), after the checks. With `followers` (a batch's
        `followers.Followers` that follow, `fargs` their operands), theirs too in the same product: their
        tiles stacked after the leader's, one matrix product, one pass into the fragments
        (`Followers.merged_wgmma` hands their result over)."""
        cta = self.cta
        n, ab, b_type, trans_a, trans_b, m, k, a_in_registers = wgmma_form(op)
        warpgroups = cta.converged_units(op, facts.WARPGROUP_SIZE, "wgmma_mma_async")
        if cta.races:
            self._check_fenced(op, warpgroups, acc, a if a_in_registers else None, scale_d)
        # the checks and records per warpgroup, in order; the operand tiles, products and accumulation then
        # for all warpgroups at once (a tile read through the same descriptor is converted once)
        tiles: dict[tuple, np.ndarray] = {}
        a_tiles, b_tiles, accumulate = [], [], []
        a_order, b_order = fragment_view.operand_order("A", n), fragment_view.operand_order("B", n)
        for w in warpgroups:
            threads = _warpgroup_threads(w)
            if not a_in_registers:
                a_desc = self._uniform(op, a, threads, "A descriptor")
                a_tiles.append(self._shared_operand(op, w, a_desc, "MN" if trans_a else "K", m, k, ab, threads, "A",
                                                    tiles, a_order))
            b_desc = self._uniform(op, b, threads, "B descriptor")
            b_tiles.append(self._shared_operand(op, w, b_desc, "MN" if trans_b else "K", n, k, b_type, threads, "B",
                                                tiles, b_order))
            accumulate.append(scale_d is None or bool(self._uniform(op, scale_d, threads, "scale-d predicate")))
        if not warpgroups:
            return self._register(op, acc.copy(), acc, a, warpgroups, a_in_registers)
        rows = _warpgroup_rows(warpgroups)
        a_stack = (self._register_tiles(a[rows], ab, m, k, a_order) if a_in_registers else np.stack(a_tiles))
        b_stack = b_tiles[0][None] if all(t is b_tiles[0] for t in b_tiles) else np.stack(b_tiles)
        accs = acc[None]
        if followers is not None:  # the followers' operands after the leader's: [1 + F, W, ...]
            try:
                f_a, f_b = followers.wgmma_operands(op, a, b, fargs[1], warpgroups, rows, m, k)
                # an operand the followers share with the leader (None) broadcasts in the product
                a_stack = a_stack[None] if f_a is None else np.concatenate([a_stack[None], f_a])
                b_stack = b_stack[None] if f_b is None else np.concatenate([b_stack[None], f_b])
                accs = _stacked(acc, fargs[0])
            except Exception as error:  # noqa: BLE001 - the followers' failure, not the leader's: they run alone
                followers.drop(f"{op.name}: {type(error).__name__}: {error}")
                followers = None
        # the products summed in float64 (one matrix product per warpgroup and CTA), gathered into the fragment
        # (each thread's registers), plus D where the warpgroup's scale-d is on; the other rows keep D
        results = np.empty(accs.shape, np.float32)
        fragments = (len(accs), len(warpgroups), facts.WARPGROUP_SIZE, acc.shape[1])
        if isinstance(rows, slice):
            results[:, :rows.start], results[:, rows.stop:] = accs[:, :rows.start], accs[:, rows.stop:]
            out = results[:, rows].reshape(fragments)
        else:
            results[...] = accs
            out = np.empty(fragments, np.float32)
        fragment_view.multiply_accumulate(a_stack, b_stack, accs[:, rows].reshape(fragments), out,
                                          np.asarray(accumulate), n, ordered=True)
        if not isinstance(rows, slice):
            results[:, rows] = out.reshape(len(accs), -1, acc.shape[1])
        result = results[0]
        if followers is not None:
            followers.merged_wgmma = (result, results[1:])
        return self._register(op, result, acc, a, warpgroups, a_in_registers)

    def _register(self, op: sm90.WgmmaMmaAsyncOp, result: np.ndarray, acc: np.ndarray, a: np.ndarray,
                  warpgroups: list[int], a_in_registers: bool) -> np.ndarray:
        """`result` (and an RS wgmma's A registers, `a_in_registers`) pending on the warpgroups' open groups."""
        self.registry[id(result)] = Pending(result, self._opened(acc, warpgroups), "result", op)
        if a_in_registers:
            self.registry[id(a)] = Pending(a, self._opened(a, warpgroups), "A operand", op)
        return result

    def _opened(self, value, warpgroups: list[int]) -> np.ndarray:
        """The groups `value` waits for (`_groups_of`, copied), with those of `warpgroups` their open groups (one
        item each: a warpgroup or two, where a fancy index costs more than the items)."""
        groups = self._groups_of(value).copy()
        for w in warpgroups:
            groups[w] = self.open[w]
        return groups

    def _uniform(self, op: Operation, values: np.ndarray, threads: np.ndarray, what: str):
        mine = values[int(threads[0]):int(threads[-1]) + 1]  # a warpgroup's threads, in order
        differ = mine != mine[0]
        if np.count_nonzero(differ):
            t = int(threads[np.argmax(differ)])
            self.cta.fail(op, f"the {what} must be the same in all threads of warpgroup "
                              f"{threads[0] // facts.WARPGROUP_SIZE}: thread {int(threads[0])} has {mine[0]}, "
                              f"thread {t} has {values[t]}", t)
        return mine[0]

    def _shared_operand(self, op: Operation, warpgroup: int, descriptor, major: str, extent: int, k: int, ab: str,
                        threads: np.ndarray, what: str, tiles: dict, order: np.ndarray | None = None) -> np.ndarray:
        """The [extent, k] operand (rows = M of A or N of B, taken in `order`: `fragment_view.operand_order`) read
        through `descriptor`, after the checks (made and recorded for each warpgroup); `tiles` keeps the tiles one
        wgmma has converted, by what they read."""
        cta, smem = self.cta, self.cta.smem
        element_bytes = facts.WGMMA_K_BYTES // k
        try:
            operand = operand_addresses(int(as_unsigned64(descriptor)), major, extent, k, element_bytes)
        except ValueError as error:
            cta.fail(op, f"operand {what}: {error}", threads[0])
        fields, addresses, byte_addresses, (low, high) = (operand.fields, operand.addresses, operand.byte_addresses,
                                                          operand.span)
        if low < 0 or high > smem.size:
            smem.check_bounds(op, addresses, np.full(addresses.shape, threads[0]), element_bytes,
                              f"reads operand {what}:")
        buffer = smem.buffer_at(fields.start_address)
        if buffer is not None and buffer.swizzle != fields.swizzle:
            cta.fail(op, f"operand {what}: the descriptor swizzles {fields.swizzle}B but buffer '{buffer.name}' is "
                         f"declared with swizzle {buffer.swizzle}", threads[0])
        self._check_read(op, warpgroup, byte_addresses, low, high, threads, what)
        group = int(self.open[warpgroup])
        operand.mark(self.read_group[warpgroup], group)  # a row, then 1-D indexing: half the time
        self.newest_read[warpgroup] = group
        self.group_ops.setdefault((warpgroup, group), op)
        key = (int(descriptor), major, extent, k, ab)
        tile = tiles.get(key)
        if tile is None:
            if ab in facts.FP8_FORMATS:
                tile = facts.fp8_bits_to_f32(smem.data[operand.ordered(order)[0]], ab)
            else:  # (the rows in `order` have the shape of the rows in order)
                tile = facts.half_bits_to_f32(operand.gather(smem.data, order).view(_HALVES).reshape(
                    operand.addresses.shape), ab)
            tiles[key] = tile
        return tile

    @classmethod
    def _register_a(cls, registers: np.ndarray, ab: str, m: int, k: int) -> np.ndarray:
        """The m x k A tile from the [128, 4] packed registers of a warpgroup (`_register_tiles`)."""
        return cls._register_tiles(registers, ab, m, k)[0]

    @staticmethod
    def _register_tiles(registers: np.ndarray, ab: str, m: int, k: int, order: np.ndarray | None = None) -> np.ndarray:
        """The m x k A tiles, [W, m, k], from the [W * 128, 4] packed registers of W warpgroups (each register
        two halves, or four bytes for the 8-bit types, the low byte first), their rows taken in `order` (None: in
        order; `fragment_view.operand_order`): each element is placed straight into its row there."""
        count = len(registers) // facts.WARPGROUP_SIZE
        gather = None if ab in facts.FP8_FORMATS else _a_gather(order, m, k)
        if gather is not None:  # each element taken from its half of its register: one gather, one conversion
            halves = np.ascontiguousarray(registers.view(np.uint32)).view(_HALVES).reshape(count, -1)
            return facts.half_bits_to_f32(np.take(halves, gather, axis=1), ab).reshape(count, m, k)
        tile = np.zeros((count, m, k), np.float32)
        place = _row_places(order)
        if ab in facts.FP8_FORMATS:
            rows, ks = _a8_coords()
            data = np.ascontiguousarray(registers.view(np.uint32)).view(np.uint8)
            tile[:, place[rows], ks] = facts.fp8_bits_to_f32(
                data.reshape(count, facts.WARPGROUP_SIZE, facts.FP8_A_ELEMENTS), ab)
            return tile
        lo, hi = facts.mov_unpack_b32(registers.view(np.uint32))
        (row_lo, k_lo), (row_hi, k_hi) = _a_coords()
        shape = (count, facts.WARPGROUP_SIZE, -1)
        tile[:, place[row_lo], k_lo] = facts.half_bits_to_f32(lo, ab).reshape(shape)
        tile[:, place[row_hi], k_hi] = facts.half_bits_to_f32(hi, ab).reshape(shape)
        return tile

    def _check_fenced(self, op: Operation, warpgroups: list[int], acc: np.ndarray, a: np.ndarray | None,
                      scale_d: np.ndarray | None = None) -> None:
        """The register operands of a wgmma must be written before the warpgroup's latest wgmma_fence
        (`memory_model.WGMMA_FENCE`). Without a register allocation the registers are SSA values: the
        accumulator and A values an instruction computed after the fence are reported. Under scale-d 0 the
        accumulator is not read, but its registers are written, so one computed by an instruction after the
        fence is still reported (`memory_model.WGMMA_FENCE_SCALE_D`); a constant is no instruction there (Target
        IR constants are immediates, materialized only where an instruction reads them, and a scale-d 0 wgmma
        reads none: the printer folds it), so it accesses no register. The registers it writes are its chain's
        (the accumulator is tied through the chained wgmmas, and an SSA value keeps its registers in every loop
        trip): an instruction reading the chain's previous result after the fence is reported
        (`wgmma_checks.wgmma_accumulator_chains`)."""
        for w in warpgroups:
            fenced = int(self.fenced_at[w])
            if fenced < 0:
                self.cta.fail(op, f"warpgroup {w} issues its first wgmma_mma_async with no wgmma_fence before it "
                                  "(race: missing wgmma_fence)", w * facts.WARPGROUP_SIZE)
            if self.register_fences:
                continue
            overwrites = scale_d is not None and not any_set(scale_d[w * facts.WARPGROUP_SIZE:(w + 1) * facts.WARPGROUP_SIZE
                                                             ])
            for value, role in ((acc, "accumulator"), (a, "A fragment")):
                entry = self.produced.get(id(value)) if value is not None else None
                if entry is None or entry[0] is not value or entry[1] < fenced:
                    continue
                if overwrites and role == "accumulator" and isinstance(entry[2], arith.ConstantOp):
                    continue
                access = "writes" if overwrites and role == "accumulator" else "reads"
                self.cta.fail(op, f"{access} its {role} registers, written by `{describe_op(entry[2])}` after "
                                  f"warpgroup {w}'s latest wgmma_fence (race: missing wgmma_fence between the write and the "
                                  "wgmma)", w * facts.WARPGROUP_SIZE)
            read = self.chain_read.get(self.heads.get(id(op), id(op))) if overwrites else None
            if read is not None and read[0][w] >= fenced:
                self.cta.fail(op, f"writes its accumulator registers (scale-d 0), which `{describe_op(read[1])}` read "
                                  f"after warpgroup {w}'s latest wgmma_fence: the chain's previous result holds the "
                                  "same registers (race: missing wgmma_fence between the read and the wgmma, "
                                  "memory_model.WGMMA_FENCE_SCALE_D)", w * facts.WARPGROUP_SIZE)

    def fence(self, warpgroups: list[int]) -> None:
        """wgmma_fence by `warpgroups`: register writes so far are ordered before their later wgmmas."""
        now = self.cta.tick()
        self.fenced_at[warpgroups] = now
        if len(self.produced) > 64:
            oldest = int(self.fenced_at[self.fenced_at >= 0].min())
            self.produced = {k: e for k, e in self.produced.items() if e[1] >= oldest}

    def _check_read(self, op: Operation, warpgroup: int, byte_addresses: np.ndarray, low: int, high: int,
                    threads: np.ndarray, what: str) -> None:
        """The async-proxy read of an operand's bytes (in [low, high)) by `warpgroup`, checked once per epoch of
        their lines: whole lines found readable by the warpgroup (so are the bytes read among them) stay so until
        a write changes one of them (`shared_memory` change epochs), so the k-steps of a tile after the first
        (the lines found readable are every line its copy landed: `SharedReadChecks.readable_lines`), and a tile read
        again (Q in every trip), only compare stamps. Lines with a byte not readable (and a span
        much wider than the bytes read) take `check_async_read` of the bytes read, which reports it; after it,
        the lines of a buffer of generic stores all fenced for the warpgroup are verified the same way
        (`SharedMemory.fenced_lines`: the causal bias table, a different window of it each trip)."""
        smem = self.cta.smem
        lines = slice(low // EPOCH_BYTES, (high - 1) // EPOCH_BYTES + 1)
        verified = self._verified[warpgroup, lines]
        if not np.count_nonzero(verified < smem.changed[lines]):
            smem.note_read(byte_addresses, threads[0])
            return
        readable = smem.readable_lines(lines, threads) if (lines.stop - lines.start) * EPOCH_BYTES <= \
            _SPAN_LIMIT * len(byte_addresses) else None
        if readable is not None:
            self._verified[warpgroup, readable] = smem.changes  # the bytes read are among them: they pass
            smem.note_read(byte_addresses, threads[0])
            return
        smem.check_async_read(op, byte_addresses, threads, f"wgmma operand {what}")
        fenced = smem.fenced_lines(byte_addresses, threads)
        if fenced is not None:  # a table of generic stores, fenced: its other windows pass while it is unchanged
            self._verified[warpgroup, fenced] = smem.changes

    # endregion
