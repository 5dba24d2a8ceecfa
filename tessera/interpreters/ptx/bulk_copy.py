"""Bulk copies: cp.async.bulk(.tensor) with tensor maps (TMA), their .add reduction (cp.reduce.async.bulk.tensor),
st.async and red.async, and the `cp` opcode's dispatch (`cp.async` of the Ampere kind goes to `memory`, the
non-tensor cp.reduce forms and bulk groups to `reductions`).

TMA [P#data-movement-and-conversion-instructions-cp-async-bulk-tensor; facts.tma]:
`cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst], [map, {c..}], [mbar]`
reads the box at element coordinates c (innermost first) of the tensor the map describes, elements outside
the tensor reading as zero (FLOAT_OOB_FILL_NONE), writes it row-major from `dst` with the map's swizzle applied
to the absolute shared addresses (`facts.swizzle_address`), and completes `spec.box_bytes` of transaction on
the mbarrier. `[map]` is the generic address of a tensor-map parameter (`mov` + `cvta.param`) or the global
address of a map built on the device (`tensormaps`); anything else is an error. The store form `cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [map, {c..}], [src]`
writes the box back, skipping out-of-bounds elements. Non-tensor `cp.async.bulk` copies bytes the same way.
Every executing thread issues its own copy. A load reads global memory at issue and is handed to `asynchrony`,
which lands its bytes and transaction count when a thread waits on the mbarrier (and reports reads before);
a store reads shared memory at issue, checked as an async-proxy read, and `asynchrony` keeps those bytes
read until the thread's cp.async.bulk.wait_group(.read) covers its bulk group.
`.multicast::cluster` with mask M stages the data at the same shared offset in every CTA of cluster
rank r with bit r of M set, as one copy per member on the mbarrier at the same offset in each (`cluster`);
`cp.async.bulk.shared::cluster.shared::cta` forwards the executing CTA's shared memory into a peer's (an async-proxy
read of the source, until the copy's complete-tx: `copy_sources`),
`st.async` stores a thread's register into one and `red.async` updates a word of one with it (atomically, when
it lands), each completing on the receiving CTA's mbarrier.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tessera.interpreters.ptx import atomics, cp_async, mbarrier, mbarrier_state, memory
from tessera.interpreters.ptx.cluster import OFFSET_MASK, cluster_address, multicast_slots, shared_offsets
from tessera.interpreters.ptx.decode import Operands, elements, opcode, per_lane
from tessera.interpreters.ptx.global_accesses import ASYNC, ASYNC_REDUCE, StridedBox
from tessera.interpreters.ptx.mbarrier_state import shared_addresses
from tessera.interpreters.ptx.memory import access, lanes_of, take_space
from tessera.interpreters.ptx.state import CLUSTER_RANK_SHIFT, GLOBAL_BASE, Machine, unique_rows
from tessera.interpreters.ptx.sync import U32
from tessera.interpreters.ptx.numerics import flush_f32
from tessera.interpreters.ptx.syntax import Address
from tessera.interpreters.ptx.tma_boxes import Box, box_data, checked_box, in_shared_order, swizzled_at
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.truth import all_set, any_set
from tessera.sm90 import facts

U64 = ptx_type("u64")


def _tma_lane(m: Machine, inst, lane: int, map_address: int, coords: list[int], smem: int, load: bool,
              slot: int | None = None, barrier: int | None = None, combine=None, loaded: dict | None = None):
    """One thread's tensor copy between the box at `coords` and shared offset `smem` of CTA slot `slot` (the
    thread's own by default); returns the bytes of the box. A load completing on the mbarrier at `barrier` (a
    shared::cluster address of the thread's own CTA) reads global memory until that completes. A store with
    `combine` (old element bytes, box element bytes, data type -> new bytes) is a reduction into the tensor.
    `loaded`: the boxes' bytes read by the step so far (`_load_bytes`)."""
    slot = int(m.lane_cta[lane]) if slot is None else slot
    checked = checked_box(m, inst, lane, map_address, coords, smem, load)
    tmap, offsets, valid, layout, _, size, swizzle, dense, _ = checked
    spec = tmap.spec
    e = spec.element_bytes
    base = slot * m.shared_bytes
    shared_index = swizzled_at(base, smem, size, swizzle)
    span = None if dense is None else slice(base + dense[0], base + dense[1])
    if load and layout is not None:  # the bytes inside the tensor are a box: strided views, no index
        box = StridedBox(tmap.address - GLOBAL_BASE + layout[0], layout[1], layout[2])
        data, order = _load_bytes(m, checked, box, (map_address, tuple(coords), smem), loaded)
        memory.note_global(m, np.array([lane]), box, False, inst, ASYNC)
        _read_until_complete(m, inst, lane, box, [] if barrier is None else [barrier])
        m.tracker.stage(shared_index, data, span, order)  # lands later
        return spec.box_bytes
    global_index = (tmap.address - GLOBAL_BASE + offsets)[:, None] + np.arange(e)
    inside = global_index if all_set(valid) else global_index[valid]  # the whole box lies in the tensor, mostly
    if load:
        data, order = _load_bytes(m, checked, None, (map_address, tuple(coords), smem), None)
        memory.note_global(m, np.array([lane]), inside.reshape(1, -1), False, inst, ASYNC)
        _read_until_complete(m, inst, lane, inside, [] if barrier is None else [barrier])
        m.tracker.stage(shared_index, data, span, order)
    else:
        m.tracker.bulk_store_reads(inst, lane, shared_index, "the TMA store", span)
        data = m.shared[shared_index].reshape(-1, e)
        data = data if inside is global_index else data[valid]
        if combine is not None:
            watch = getattr(m, "watch", None)
            if watch is not None:  # races between CTAs' reductions and plain accesses (`reductions`)
                watch.on_add(inst, np.full(len(inside), lane), GLOBAL_BASE + inside[:, 0], e, reduction=True)
            data = combine(m.memory.buffer[inside], data, spec.dtype)
        m.memory.buffer[inside] = data
        memory.note_global(m, np.array([lane]), inside.reshape(1, -1), True, inst,
                           ASYNC if combine is None else ASYNC_REDUCE)
    return spec.box_bytes


def _read_ends(m: Machine, lane: int, targets: list[tuple[int, int, int]]) -> int | None:
    """Which of a load's `targets` ((CTA slot, data, mbarrier) each, the CTAs it lands in) ends its read of the
    source with its complete-tx: the issuer's own CTA's where the copy lands there (where the issuer sees it end),
    else the first (a peer's: the source is read once, before any target's complete-tx); None for no target (a
    multicast with an empty mask)."""
    own = int(m.lane_cta[lane])
    return next((j for j, (slot, _, _) in enumerate(targets) if slot == own), 0 if targets else None)


def _read_until_complete(m: Machine, inst, lane: int, where, barriers: list[int]) -> None:
    """A TMA or bulk load of `lane` read global bytes `where` (flat positions [1, n] or a `StridedBox`): the read
    lasts until the copy's complete-tx on the mbarrier at `barriers` (its shared::cluster address, `_read_ends`)
    [memory_model.TMA_READ_UNTIL_COMPLETE]. On the issuer's own barrier a writer of its CTA must have observed that
    phase (`global_order`); on a peer's (a copy that lands only in peers) a writer must be ordered after a wait on
    it, as for a bulk copy's shared source (`copy_sources`)."""
    if getattr(m, "global_order", None) is None:
        return
    for barrier in barriers:
        key = mbarrier_state.mbarrier_key(m, lane, barrier)
        if key[0] != int(m.lane_cta[lane]):
            flat = where.index() if isinstance(where, StridedBox) else np.asarray(where, np.int64)
            m.tracker.global_sources.issued(inst, key, lane, flat.reshape(-1))
            continue
        m.global_order.read_until(inst, lane, where, m.tracker.barrier(key),
                                  mbarrier_state.barrier_state(m, inst, lane, barrier).phase)


def _load_bytes(m: Machine, checked: Box, box: StridedBox | None, key: tuple, loaded: dict | None
                ) -> tuple[np.ndarray, str | None]:
    """(the bytes a TMA load of the box `checked` stages, `AsyncTracker.stage`'s layout of them): "ordered", in the
    order they lie in shared memory, where the box fills a range of whole chunks (a swizzled tile: it lands as
    one copy of that range), else None, in the box's order (`box_data`, through `box` where the bytes inside the
    tensor are one), for the box at `key` = (map, coordinates, shared offset). `loaded` ({`key`: those}): the
    bytes the step has read so far; the CTAs of a batch loading the same K or V tile into the same slot read
    global memory once (nothing writes it between their copies)."""
    found = None if loaded is None else loaded.get(key)
    if found is not None:
        return found
    tmap, offsets, valid, _, window, size, swizzle, dense, chunks = checked
    data = box_data(m, tmap, offsets, valid, box, window)  # a copy: the data as it is at issue
    found = (data, None) if dense is None or chunks is None else \
        (in_shared_order(data, key[2], size, swizzle), "ordered")
    if loaded is not None:
        loaded[key] = found
    return found


def _tma_loads_together(m: Machine, inst, lanes: np.ndarray, maps: np.ndarray, values: list[np.ndarray],
                        smem: np.ndarray, barriers: np.ndarray, loaded: dict) -> bool:
    """The TMA loads of `lanes` (ascending, one thread of each of one or more CTAs) as one unit where every CTA does
    the same thing: the same box (map, coordinates) into the same offset of its own shared memory, completing on
    the mbarrier at the same offset of its own: the operands checked and the box read once, each thread's global
    read records made in order (`_tma_lane`'s), and the copies' checks and records in shared memory made over
    the CTAs' ranges at once (`AsyncCopies.loads_clear`, `issue_loads`). Returns False, having changed nothing,
    where the loads differ or a check of one might report: the caller then issues them one by one, in order,
    which reports the same as ever (the global records are made in the same order either way, and the
    shared-memory checks, which the global ones never affect, pass)."""
    slots = m.lane_cta[lanes]
    if not 0 <= int(barriers[0]) < 1 << CLUSTER_RANK_SHIFT:
        return False
    ctas = slots.tolist()  # (a handful of values each: compared as ints)
    if len(lanes) > 1 and (any(a >= b for a, b in zip(ctas, ctas[1:])) or any(
            row.count(row[0]) != len(row) for row in (x.tolist() for x in (maps, smem, barriers, *values)))):
        return False
    map_address, coords, barrier, offset = int(maps[0]), [int(v[0]) for v in values], int(barriers[0]), int(smem[0])
    checked = checked_box(m, inst, int(lanes[0]), map_address, coords, offset, True)
    tmap, _, _, layout, _, size, swizzle, dense, chunks = checked
    keys = [(slot, barrier) for slot in ctas]
    if layout is None or dense is None or chunks is None or not m.tracker.loads_clear(lanes, keys, dense):
        return False
    box = StridedBox(tmap.address - GLOBAL_BASE + layout[0], layout[1], layout[2])
    data, _ = _load_bytes(m, checked, box, (map_address, tuple(coords), offset), loaded)  # (in shared order)
    order = getattr(m, "global_order", None)
    together = order is not None and m.memory.log is None
    for i, (lane, key) in enumerate(zip(lanes.tolist(), keys)):  # the global reads: the rest as one where they can be
        if together and i < len(keys) - 1 and order.read_box_ctas(inst, lanes[i:], box, ASYNC):
            for lane_, key_ in zip(lanes[i:].tolist(), keys[i:]):
                order.read_until(inst, lane_, box, m.tracker.barrier(key_), m.mbarriers[key_].phase)
            break
        memory.note_global(m, np.array([lane]), box, False, inst, ASYNC)
        if order is not None:
            order.read_until(inst, lane, box, m.tracker.barrier(key), m.mbarriers[key].phase)
    indices = [swizzled_at(key[0] * m.shared_bytes, offset, size, swizzle) for key in keys]
    m.tracker.issue_loads(inst, lanes, keys, dense, indices, data, tmap.spec.box_bytes, "TMA load")
    return True


def _coords(ops: Operands, inst, operand):
    """(map address reader, coordinate readers) of a tensor operand `[map, {c0, c1, ...}]`."""
    coords = getattr(operand, "coords", None)
    if not isinstance(operand, Address) or coords is None:
        raise ops.refuse(inst, "a tensor operand [map, {coordinates}]")
    return ops.address(inst, Address(operand.base, 0)), [ops.read(inst, c, ptx_type("s32")) for c in coords.elements]


def _issued_per_warp(m: Machine, lanes: np.ndarray, *operands: np.ndarray) -> np.ndarray:
    """The positions in `lanes` of the bulk copies issued: one for each warp and distinct set of operand values
    its active lanes hold (`tessera.sm90.tma.BULK_COPY_ISSUED_PER_DISTINCT_OPERANDS`; CUTLASS's sm90 epilogue
    issues its TMA stores from every lane of one warp: 32 copies would be reported as threads of one
    instruction writing the same bytes, 32 loads would complete 32 times the transaction bytes)."""
    if len(lanes) < 2:
        return np.arange(len(lanes))
    warps = lanes // m.threads * m.threads + lanes % m.threads // 32
    if all_set(np.diff(warps) > 0):  # one lane of each warp (lanes ascend): each issues its own
        return np.arange(len(lanes))
    keys = np.stack([lanes // m.threads, lanes % m.threads // 32, *operands], axis=1)
    return np.sort(unique_rows(keys, return_index=True)[1])


def decode_bulk(ops: Operands, inst, mods):
    """cp.async.bulk{.tensor}, its commit/wait groups and prefetches."""
    m = ops.m
    if mods.take("commit_group", "wait_group") or mods.take("prefetch"):
        mods.left = []
        return lambda sel: None
    tensor = bool(mods.take("tensor"))
    rank = mods.take("1d", "2d", "3d", "4d", "5d")
    mods.take("tile")
    if mods.take("im2col", "im2col_no_offs", "tile::gather4", "tile::scatter4"):
        raise ops.refuse(inst, "TMA modes other than .tile")
    mods.drop_prefixed("L2::")
    spaces = [m_ for m_ in inst.modifiers if m_ in ("global", "shared::cluster", "shared::cta", "shared")]
    load = spaces[:1] != ["global"]
    source_space = "shared" if load and spaces[1:2] in (["shared::cta"], ["shared"]) else "global"
    mods.drop("global", "shared::cluster", "shared::cta", "shared")
    if load:
        if not mods.take("mbarrier::complete_tx::bytes"):
            raise ops.refuse(inst, "a bulk load needs .mbarrier::complete_tx::bytes")
        multicast = bool(mods.take("multicast::cluster"))
    else:
        if not mods.take("bulk_group"):
            raise ops.refuse(inst, "a bulk store needs .bulk_group")
        multicast = False
    operands = list(inst.operands)
    if tensor != (rank is not None):
        raise ops.refuse(inst, "cp.async.bulk.tensor needs a rank .1d-.5d")
    if tensor:
        shared_operand = operands[0] if load else operands[1]
        map_operand = operands[1] if load else operands[0]
        map_address, coords = _coords(ops, inst, map_operand)
        if len(coords) != int(rank[0]):
            raise ops.refuse(inst, f"{rank} needs {rank[0]} coordinates")
    else:
        shared_operand = operands[0] if load else operands[1]
        global_address = ops.address(inst, operands[1] if load else operands[0])
        size = ops.read(inst, operands[2], U32)
    smem = ops.address(inst, shared_operand)
    barrier = ops.address(inst, operands[2] if tensor else operands[3]) if load else None
    mask = ops.read(inst, operands[3 if tensor else 4], ptx_type("u16")) if multicast else None

    def run(sel):
        lanes = lanes_of(m, sel)
        smem_addresses = per_lane(smem(sel), lanes.shape, np.int64)
        if barrier is not None:
            barriers = shared_addresses(m, inst, "shared", lanes, barrier(sel))
        if mask is not None:
            masks = per_lane(mask(sel), lanes.shape, np.int64)
        if tensor:
            maps = per_lane(map_address(sel), lanes.shape, np.int64)
            values = [per_lane(c(sel), lanes.shape, np.int64) for c in coords]
        else:
            sources = per_lane(global_address(sel), lanes.shape, np.int64)
            sizes = per_lane(size(sel), lanes.shape, np.int64)
        loaded: dict = {}  # the boxes this step read (`_tma_lane`)
        issued = _issued_per_warp(m, lanes, smem_addresses, *([maps, *values] if tensor else [sources, sizes]),
                                  *([per_lane(barriers, lanes.shape, np.int64)] if load else []),
                                  *([masks] if mask is not None else []))
        every = slice(None) if len(issued) == len(lanes) else issued  # (views where every lane issues its own)
        clustered = load and any_set(smem_addresses[every] >> CLUSTER_RANK_SHIFT)
        if tensor and load and mask is None and not clustered and \
                _tma_loads_together(m, inst, lanes[every], maps[every], [v[every] for v in values],
                                    smem_addresses[every], barriers[every], loaded):
            return
        if load:  # the CTAs the copies land in (checked copy by copy below, in order, where a rank is named)
            issued_slots, issued_offsets, _ = m.shared_target(lanes[issued], smem_addresses[issued])
        for k, i in enumerate(issued.tolist()):
            lane = int(lanes[i])
            one = lanes[i:i + 1]
            if load:  # the CTAs the copy lands in, and the shared::cluster addresses of data and barrier there
                if clustered:
                    shared_offsets(m, inst, one, smem_addresses[i:i + 1])
                if mask is not None:
                    targets = [(slot, cluster_address(m, slot, int(issued_offsets[k])),
                                cluster_address(m, slot, int(barriers[i]) & OFFSET_MASK))
                               for slot in multicast_slots(m, inst, lane, int(masks[i]))]
                else:
                    targets = [(int(issued_slots[k]), int(smem_addresses[i]), int(barriers[i]))]
            if tensor:
                coordinates = [int(v[i]) for v in values]
                if not load:
                    nbytes = _tma_lane(m, inst, lane, int(maps[i]), coordinates, int(smem_addresses[i]), load)
                ending = _read_ends(m, lane, targets) if load else None
                for j, (slot, destination, target_barrier) in enumerate(targets if load else ()):
                    nbytes = _tma_lane(m, inst, lane, int(maps[i]), coordinates,
                                       destination & OFFSET_MASK, load, slot, target_barrier if j == ending else None,
                                       loaded=loaded)
                    if barrier is not None:
                        m.tracker.issue(inst, lane, target_barrier, nbytes, "TMA load")
            else:
                nbytes = int(sizes[i])
                if nbytes % 16:
                    raise m.error(inst, f"bulk copy size {nbytes} is not a multiple of 16", lane)
                if load:
                    source = None
                    if source_space == "shared":  # an async-proxy read, until its complete-tx (`copy_sources`)
                        memory.check_access(m, inst, "shared", one, sources[i:i + 1], nbytes, 16)
                        first = int(m.shared_flat(one, sources[i:i + 1])[0])
                        source = slice(first, first + nbytes)
                        m.tracker.async_read(inst, one, np.arange(first, first + nbytes), "the bulk copy", source)
                        data = m.shared[source][None].copy()
                    else:
                        data = access(m, inst, "global", one, sources[i:i + 1], nbytes, align=16, how=ASYNC)
                    if source_space == "global":  # read until the copy's complete-tx (`_read_ends`)
                        ending = _read_ends(m, lane, targets)
                        _read_until_complete(m, inst, lane, (sources[i] - GLOBAL_BASE) + np.arange(nbytes)[None],
                                             [] if ending is None else [targets[ending][2]])
                    for _, destination, target_barrier in targets:
                        place = np.array([destination], np.int64)
                        memory.check_access(m, inst, "shared", one, place, nbytes, 16)
                        start = int(m.shared_flat(one, place)[0])
                        m.tracker.stage(start + np.arange(nbytes), data.reshape(-1), slice(start, start + nbytes),
                                        "ordered")
                        if barrier is not None:
                            m.tracker.issue(inst, lane, target_barrier, nbytes, "bulk copy", source=source)
                else:
                    memory.check_access(m, inst, "shared", one, smem_addresses[i:i + 1], nbytes, 16)
                    shared_index = m.shared_flat(one, smem_addresses[i:i + 1])[0] + np.arange(nbytes)
                    m.tracker.bulk_store_reads(inst, lane, shared_index, "the bulk store")
                    access(m, inst, "global", one, sources[i:i + 1], nbytes, m.shared[shared_index][None], align=16,
                           how=ASYNC)

    return run


@opcode("st.async")
def decode_st_async(ops: Operands, inst, mods):
    """`st.async{.weak}{.cluster}.shared::cluster.mbarrier::complete_tx::bytes{.v2,.v4}.type [a], b, [mbar]`
    [P#data-movement-and-conversion-instructions-st-async] (`memory`'s `st` sends it here): each executing thread
    stores b into the shared memory of the CTA of the cluster that shared::cluster address a names (this one's
    too), asynchronously, completing its bytes of transaction on the mbarrier at mbar, which must be in that same
    CTA. The bytes are handed to `asynchrony` as a copy into that CTA: in flight until a thread waits on the
    mbarrier, and judged as a write into it by what the storing thread knows of its threads (happens-before)."""
    mods.take("weak")
    mods.take("cluster")
    if take_space(mods) != "shared" or not mods.take("mbarrier::complete_tx::bytes"):
        raise ops.refuse(inst, "st.async form (st.async.shared::cluster.mbarrier::complete_tx::bytes)")
    width = memory.vector_width(mods)
    t = mods.type()
    if t.bits not in (32, 64) or width * t.bits > 128 or len(inst.operands) != 3:
        raise ops.refuse(inst, f"st.async of {width} x {t.name}")
    sources = elements(inst.operands[1])
    if len(sources) != width:
        raise ops.refuse(inst, f"{width} source(s) expected, got {len(sources)}")
    readers = [ops.read(inst, source, t) for source in sources]
    nbytes = width * t.bits // 8

    def data(sel, lanes):
        values = np.empty((len(lanes), width), t.dtype)
        for i, read in enumerate(readers):
            values[:, i] = read(sel)
        return values.view(np.uint8).reshape(len(lanes), nbytes), None

    return _into_cluster(ops, inst, nbytes, data, "st.async")


_RED_ASYNC = {"inc": ("u32",), "dec": ("u32",), "min": ("u32", "s32"), "max": ("u32", "s32"), "and": ("b32",),
              "or": ("b32",), "xor": ("b32",), "add": ("u32", "s32", "u64")}
"""The operations and types of red.async [P#parallel-synchronization-and-communication-instructions-red-async]."""


@opcode("red.async")
def decode_red_async(ops: Operands, inst, mods):
    """`red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.op.type [a], b, [mbar]`
    [P#parallel-synchronization-and-communication-instructions-red-async] (`memory`'s `red` sends it here): each
    executing thread updates the word at shared::cluster address a (in any CTA of the cluster, this one's too)
    with op(old, b) (`_RED_ASYNC`: .inc/.dec .u32, .min/.max .u32/.s32, .and/.or/.xor .b32, .add .u32/.s32/.u64,
    as atom defines each), asynchronously, completing the word's bytes of transaction on the mbarrier at mbar,
    which must be in that same CTA. As `st.async`'s store, the update is in flight until a thread of that CTA
    waits on the mbarrier (a read before is reported) and is judged as a write into it by what the issuing thread
    knows of its threads (a plain access of the word racing it is reported); it applies to the word's value when
    it lands, in issue order. Other red.async updates of the word in flight do not race it (relaxed, cluster
    scope: morally strong [memory_model.MORALLY_STRONG])."""
    if not (mods.take("relaxed") and mods.take("cluster")) or take_space(mods) != "shared" \
            or not mods.take("mbarrier::complete_tx::bytes"):
        raise ops.refuse(inst, "red.async form (red.async.relaxed.cluster.shared::cluster."
                               "mbarrier::complete_tx::bytes.op.type)")
    operation = mods.take(*_RED_ASYNC)
    t = mods.type()
    if operation is None or t.name not in _RED_ASYNC[operation] or len(inst.operands) != 3:
        raise ops.refuse(inst, f"red.async{'.' + operation if operation else ''} on .{t.name} "
                               f"(supported: {', '.join(f'.{o}.{n}' for o, ns in _RED_ASYNC.items() for n in ns)})")
    read = ops.read(inst, inst.operands[1], t)
    apply = atomics.ATOMIC_OPS[operation].apply
    nbytes = t.bits // 8

    def data(sel, lanes):
        values = per_lane(read(sel), lanes.shape, t.dtype)

        def combine(value):
            def update(old: np.ndarray) -> np.ndarray:
                with np.errstate(over="ignore"):
                    return np.asarray(apply(old.view(t.dtype), value, None), t.dtype).view(np.uint8)
            return update

        return np.zeros((len(lanes), nbytes), np.uint8), [combine(values[i:i + 1]) for i in range(len(lanes))]

    return _into_cluster(ops, inst, nbytes, data, "red.async")


def _into_cluster(ops: Operands, inst, nbytes: int, data, kind: str):
    """The run of `st.async`/`red.async`: `data(sel, lanes)` gives each lane's bytes [lanes, nbytes] and, for a
    reduction, each lane's update (else None); each lane's copy is staged into the CTA its address names and
    completes on that CTA's mbarrier."""
    address, barrier = ops.address(inst, inst.operands[0]), ops.address(inst, inst.operands[2])
    m = ops.m

    def run(sel):
        lanes = lanes_of(m, sel)
        bytes_, updates = data(sel, lanes)
        places = per_lane(address(sel), lanes.shape, np.int64)
        barriers = shared_addresses(m, inst, "shared", lanes, barrier(sel))
        memory.check_access(m, inst, "shared", lanes, places, nbytes, nbytes)
        slots = m.shared_target(lanes, places)[0]
        if any_set(m.shared_target(lanes, barriers)[0] != slots):
            i = int(np.argmax(m.shared_target(lanes, barriers)[0] != slots))
            raise m.error(inst, f"the mbarrier of {kind} must be in the CTA its data is stored into", int(lanes[i]))
        starts = m.shared_flat(lanes, places)
        for i, lane in enumerate(lanes.tolist()):  # one copy per thread, each completing on its barrier
            start = int(starts[i])
            m.tracker.stage(start + np.arange(nbytes), bytes_[i], slice(start, start + nbytes), "ordered")
            m.tracker.issue(inst, lane, int(barriers[i]), nbytes, kind, None if updates is None else updates[i])

    return run


_TMA_ADD = {facts.TensorMapDataType.FLOAT32: np.float32, facts.TensorMapDataType.FLOAT16: np.float16,
            facts.TensorMapDataType.BFLOAT16: ml_dtypes.bfloat16, facts.TensorMapDataType.INT32: np.int32,
            facts.TensorMapDataType.UINT32: np.uint32, facts.TensorMapDataType.UINT64: np.uint64}
"""Tensor-map data types whose TMA .add reduction runs (PTX ISA cp.reduce.async.bulk.tensor: .add on .f32, .f16,
.bf16, .s32, .u32, .u64), with their NumPy element types."""


def _tma_add(old: np.ndarray, box: np.ndarray, dtype) -> np.ndarray:
    """Element-wise old + box on raw bytes [n, e]: .f32 flushes subnormal inputs and results to zero, as this
    executor's non-tensor bulk .add.f32 does (`reductions`: as global f32 atomics do; the cp.reduce text does not
    say); .f16/.bf16 round each sum once to nearest even; integers wrap."""
    kind = _TMA_ADD[dtype]
    a, b = (np.ascontiguousarray(x).view(kind).reshape(-1) for x in (old, box))
    with np.errstate(over="ignore", invalid="ignore"):
        if kind == np.float32:
            total = flush_f32(flush_f32(a) + flush_f32(b))
        elif kind in (np.float16, ml_dtypes.bfloat16):
            total = (a.astype(np.float64) + b.astype(np.float64)).astype(kind)
        else:
            total = a + b
    return np.asarray(total, kind).view(np.uint8).reshape(old.shape)


def _decode_tma_reduce(ops: Operands, inst, mods):
    """cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add{.tile}.bulk_group{.L2::cache_hint} [map, coords],
    [smem]: the box in shared memory added into the tensor element by element, in the tensor map's data type
    (Triton's TensorDescriptor.atomic_add), as a TMA store that combines (`_tma_lane`): its source is read until
    the issuing thread's bulk wait_group.read, and races with plain accesses of other CTAs are reported. Other
    operations (.min, .max, .inc, .dec, .and, .or, .xor) and modes are refused by name."""
    m = ops.m
    mods.drop("reduce", "async", "bulk", "tensor", "tile")
    rank = mods.take("1d", "2d", "3d", "4d", "5d")
    operation = mods.take("add", "min", "max", "inc", "dec", "and", "or", "xor")
    form = [mods.take("global"), mods.take("shared::cta"), mods.take("bulk_group")]
    hinted = mods.take("L2::cache_hint") is not None
    if operation != "add" or not all(form) or rank is None or len(inst.operands) != 2 + hinted:
        raise ops.refuse(inst, "TMA reductions other than cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add"
                               ".bulk_group")
    map_address, coords = _coords(ops, inst, inst.operands[0])
    if len(coords) != int(rank[0]):
        raise ops.refuse(inst, f"{rank} needs {rank[0]} coordinates")
    smem = ops.address(inst, inst.operands[1])

    def combine(old, box, dtype):
        if dtype not in _TMA_ADD:
            raise m.error(inst, f"a TMA .add into a tensor of data type {dtype.name} (supported: "
                                f"{', '.join(t.name for t in _TMA_ADD)})")
        return _tma_add(old, box, dtype)

    def run(sel):
        lanes = lanes_of(m, sel)
        smem_addresses = per_lane(smem(sel), lanes.shape, np.int64)
        maps = per_lane(map_address(sel), lanes.shape, np.int64)
        values = [per_lane(c(sel), lanes.shape, np.int64) for c in coords]
        for i in _issued_per_warp(m, lanes, smem_addresses, maps, *values):
            _tma_lane(m, inst, int(lanes[i]), int(maps[i]), [int(v[i]) for v in values], int(smem_addresses[i]),
                      False, combine=combine)

    return run


@opcode("cp")
def decode_cp(ops: Operands, inst, mods):
    from tessera.interpreters.ptx import reductions

    if "reduce" in inst.modifiers and "tensor" in inst.modifiers:
        return _decode_tma_reduce(ops, inst, mods)
    if "reduce" in inst.modifiers:
        return reductions.decode_cp_reduce(ops, inst, mods)
    if "bulk" in inst.modifiers and ("commit_group" in inst.modifiers or "wait_group" in inst.modifiers):
        return reductions.decode_bulk_group(ops, inst, mods)
    if not mods.take("async"):
        raise ops.refuse(inst, "cp forms other than cp.async (e.g. cp.reduce.async.bulk)")
    if mods.take("bulk"):
        return decode_bulk(ops, inst, mods)
    if "mbarrier" in inst.modifiers:
        return mbarrier.decode_cp_async_mbarrier_arrive(ops, inst, mods)
    return cp_async.decode_cp_async(ops, inst, mods)
