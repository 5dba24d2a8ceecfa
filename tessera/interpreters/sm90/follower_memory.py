"""The followers' memory (`followers`): what a batch's followers load, land, read and store, each follower in its
own shared memory [F, bytes] or as its own CTA in global memory, as the mixin `FollowerMemory` of `Followers`.

TMA boxes are read at each follower's coordinates and land in its shared memory with the leader's copy (`land`);
a box at the leader's coordinates is the leader's bytes (`Followers.same_lines`). A wgmma reads the followers'
operands through the leader's descriptors from their shared memory (`wgmma_operands`). The followers' global
stores wait until the leader has ended (`FollowerStore`) and are then made in the grid's order with the
followers' own CTA ids (`commit`), each checked and recorded by the global-memory race checks as a one-at-a-time
run makes them; their loads are made at once as their own CTAs; their TMA reads need no records, since a batch
runs only where no tensor that a TMA copy or a load reads is written by the kernel (`batches.batchable`).

Invariants: the operands that address memory (shared addresses, descriptors, mbarriers) are the leader's, checked
with `Followers.same` before use; a follower that fails a load or a box leaves the batch (`Followers.leave`) and
its own run reports the failure; only TMA copies and st.shared write the followers' shared memory.
"""

from __future__ import annotations

import numpy as np

from tessera.dialects import sm90
from tessera.interpreters import serving_checks
from tessera.interpreters.byte_box import put
from tessera.interpreters.sm90 import fragment_view
from tessera.interpreters.sm90 import wgmma as wgmma_unit
from tessera.interpreters.sm90.follower_views import FollowerView, _Ordered
from tessera.interpreters.sm90.registers import as_unsigned64, dtype_of, row_mask, unsigned
from tessera.interpreters.sm90.shared_memory import EPOCH_BYTES
from tessera.interpreters.sm90.strands import HazardUnwind
from tessera.interpreters.sm90.tma import shared_box
from tessera.interpreters.sm90.wgmma_operands import operand_addresses
from tessera.interpreters.truth import all_set
from tessera.sm90 import facts


class FollowerStore:
    """A follower's global store, made when the leader has ended: the op, its addresses, threads, words and
    width, the leader's happens-before matrix and clock at the store."""

    __slots__ = ("op", "addresses", "threads", "words", "nbytes", "ordered", "clock")

    def __init__(self, op, addresses, threads, words, nbytes, ordered, clock):
        self.op, self.addresses, self.threads, self.words, self.nbytes = op, addresses, threads, words, nbytes
        self.ordered, self.clock = ordered, clock


class FollowerMemory:
    """The memory ops of a batch's followers, a mixin of `Followers` (module docstring): it reads the host's
    `leader`, `count`, `cta_ids`, `alive`, `smem`, `same_lines`, `stores` and `merged_wgmma`, and calls its `same`
    and `leave` for operands that differ and followers that fail, and `following` for the stores to make."""

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



__all__ = ["FollowerMemory", "FollowerStore"]
