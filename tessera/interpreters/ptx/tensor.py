"""Tensor-core and bulk-copy instructions: cp.async.bulk(.tensor) with tensor maps (TMA), wgmma, ldmatrix and
stmatrix. (`cp.async` of the Ampere kind is dispatched to `memory`.)

TMA [P#data-movement-and-conversion-instructions-cp-async-bulk-tensor; facts.tma]:
`cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst], [map, {c..}], [mbar]`
reads the box at element coordinates c (innermost first) of the tensor the map describes, elements outside
the tensor reading as zero (FLOAT_OOB_FILL_NONE), writes it row-major from `dst` with the map's swizzle applied
to the absolute shared addresses (`facts.swizzle_address`), and completes `spec.box_bytes` of transaction on
the mbarrier. `[map]` must be the generic address of a tensor-map parameter (`mov` + `cvta.param`); anything
else is an error. The store form `cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [map, {c..}], [src]`
writes the box back, skipping out-of-bounds elements. Non-tensor `cp.async.bulk` copies bytes the same way.
Every executing thread issues its own copy. A load reads global memory at issue and is handed to `asynchrony`,
which lands its bytes and transaction count when a thread waits on the mbarrier (and reports reads before);
a store reads shared memory at issue, checked as an async-proxy read, and `asynchrony` keeps those bytes
read until the thread's cp.async.bulk.wait_group(.read) covers its bulk group.
`.multicast::cluster` with mask M stages the data at the same shared offset in every CTA of cluster
rank r with bit r of M set, as one copy per member on the mbarrier at the same offset in each (`cluster`);
`cp.async.bulk.shared::cluster.shared::cta` forwards the executing CTA's shared memory into a peer's,
`st.async` stores a thread's register into one and `red.async` updates a word of one with it (atomically, when
it lands), each completing on the receiving CTA's mbarrier.

wgmma [P#asynchronous-warpgroup-level-matrix-*; facts.wgmma, facts.descriptor]: per warpgroup (all 128
threads, collective) D = A x B (+ D when scale-d), A 64xK from shared memory through its descriptor (K-major,
or MN-major with imm-trans-a) or from four registers per thread (`facts.a_fragment_coords`), B KxN through its
descriptor (imm-trans-b: MN-major); imm-scale-a/b = -1 negates. K spans 32 bytes: .f16/.bf16 (k16), .tf32
(k8, the low 13 mantissa bits ignored), .e4m3/.e5m2 (k32, mixable, .f16/.f32 accumulator), .s8/.u8 (k32,
mixable, .s32 accumulator that wraps, or clamps with .satfinite); .b1 is refused. Float products are exact,
sums in float64 rounded once per instruction to the accumulator type (as the Target IR simulator does);
integer sums are exact. D is written at issue, and `asynchrony` reports any other access to the D and A
registers, or a write over the shared operands, before the wgmma.wait_group that covers the wgmma (commit and
wait are counted there; wgmma.fence has no effect). Descriptors must be uniform over the warpgroup.

ldmatrix/stmatrix m8n8 .x1/.x2/.x4 (.trans) .b16: lanes 8j..8j+7 address the eight 16-byte rows of matrix j;
lane l holds row l/4, columns 2(l%4), 2(l%4)+1 of each matrix (.trans: the transposed elements), low half
first (notes/ptx-sm90a.md section 8).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import ml_dtypes
import numpy as np

from tessera.interpreters.ptx import memory, sync
from tessera.interpreters.ptx.cluster import _OFFSET_MASK, cluster_address, multicast_slots, shared_offsets
from tessera.interpreters.ptx.decode import Operands, Step, elements, opcode
from tessera.interpreters.ptx.global_order import ASYNC, ASYNC_REDUCE, StridedBox
from tessera.interpreters.ptx.memory import access, lanes_of, take_space
from tessera.interpreters.ptx.state import GLOBAL_BASE, PARAM_WINDOW, WINDOW_SIZE, Machine, lane_rows, unique_rows
from tessera.interpreters.ptx.sync import PRED, U32, shared_addresses
from tessera.interpreters.ptx.numerics import flush_f32
from tessera.interpreters.ptx.syntax import Address, Reg, Vector
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters import serving_checks
from tessera.sm90 import facts

U64 = ptx_type("u64")


@dataclass(frozen=True)
class TensorMapObject:
    """A tensor map placed in parameter space: the encode arguments and the global address they name."""

    name: str
    spec: facts.TensorMapSpec
    address: int


# region TMA
def _tensor_map(m: Machine, inst, lane: int, address: int) -> TensorMapObject:
    offset = address - PARAM_WINDOW
    found = m.tensor_maps.get(offset) if 0 <= offset < WINDOW_SIZE else None
    if found is None:
        raise m.error(inst, f"address {address:#x} is not the generic address of a tensor-map parameter", lane)
    return found


def _oob_fill(spec: facts.TensorMapSpec) -> np.ndarray:
    """The bytes a load writes for an element outside the tensor: zeros, or with FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
    a quiet NaN of the element type (the hardware's "OOB-NaN"; its exact bits are not documented)."""
    if spec.oob_fill == facts.TensorMapFloatOOBFill.NONE:
        return np.zeros(spec.element_bytes, np.uint8)
    dtype = {2: np.float16, 4: np.float32, 8: np.float64}[spec.element_bytes]
    if spec.dtype == facts.TensorMapDataType.BFLOAT16:
        dtype = ml_dtypes.bfloat16
    return np.frombuffer(np.array(np.nan, dtype).tobytes(), np.uint8)


@lru_cache(maxsize=4096)
def _box_offsets(spec: facts.TensorMapSpec, coords: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, tuple | None]:
    """Byte offsets from the tensor's address of the box elements (row-major, innermost last), which of them
    lie inside the tensor (`TensorMapSpec.box_byte_offsets`), and the layout of the bytes inside it when they
    form a box (a box wholly inside, or one the tensor's edge clips: first offset, shape, strides:
    `global_order.StridedBox`, adjacent contiguous dimensions merged), else None; read-only, kept across
    copies, CTAs and launches (a grid's boxes give a handful of coordinates a map)."""
    offsets, valid = spec.box_byte_offsets(list(coords))
    offsets.setflags(write=False)
    valid.setflags(write=False)
    if not valid.any() or not offsets.size:
        return offsets, valid, None
    counts = [-(-spec.box_dims[k] // (1 if k == 0 and spec.interleave == facts.TensorMapInterleave.NONE
                                      else spec.strides[k])) for k in reversed(range(spec.rank))]
    grid, inside = offsets.reshape(counts), valid.reshape(counts)
    if not valid.all():  # the part inside the tensor, when it is a box: a range of indices along each axis
        ranges = []
        for axis in range(len(counts)):
            hit = np.flatnonzero(inside.any(axis=tuple(a for a in range(len(counts)) if a != axis)))
            if hit[-1] - hit[0] + 1 != len(hit):
                return offsets, valid, None
            ranges.append(slice(int(hit[0]), int(hit[-1]) + 1))
        if not inside[tuple(ranges)].all() or inside.sum() != inside[tuple(ranges)].size:
            return offsets, valid, None
        grid = grid[tuple(ranges)]
        counts = list(grid.shape)
    shape, strides = [spec.element_bytes], [1]
    for axis in reversed(range(len(counts))):
        if counts[axis] == 1:
            continue
        step = int(grid[(0,) * axis + (1,) + (0,) * (len(counts) - axis - 1)] - grid[(0,) * len(counts)])
        if step == shape[0] * strides[0]:
            shape[0] *= counts[axis]
        else:
            shape.insert(0, counts[axis])
            strides.insert(0, step)
    layout = (int(grid[(0,) * len(counts)]), tuple(shape), tuple(strides))
    box = StridedBox(*layout).index().reshape(-1, spec.element_bytes)[:, 0]
    return offsets, valid, layout if np.array_equal(box, offsets[valid]) else None


def _tma_lane(m: Machine, inst, lane: int, map_address: int, coords: list[int], smem: int, load: bool,
              slot: int | None = None, barrier: int | None = None, combine=None):
    """One thread's tensor copy between the box at `coords` and shared offset `smem` of CTA slot `slot` (the
    thread's own by default); returns the bytes of the box. A load completing on the mbarrier at `barrier` (a
    shared::cluster address of the thread's own CTA) reads global memory until that completes. A store with
    `combine` (old element bytes, box element bytes, data type -> new bytes) is a reduction into the tensor."""
    slot = int(m.lane_cta[lane]) if slot is None else slot
    tmap = _tensor_map(m, inst, lane, map_address)
    spec = tmap.spec
    if len(coords) != spec.rank:
        raise m.error(inst, f"a rank-{spec.rank} tensor map needs {spec.rank} coordinates, got {len(coords)}", lane)
    if smem % facts.TMA_SMEM_ALIGNMENT:
        raise m.error(inst, f"shared address {smem:#x} is not {facts.TMA_SMEM_ALIGNMENT}-byte aligned", lane)
    if load and (problem := serving_checks.check_box(tmap.name, spec.global_dims, coords, spec.box_dims)):
        raise m.error(inst, problem, lane)
    e = spec.element_bytes
    offsets, valid, layout = _box_offsets(spec, tuple(coords))
    size = len(offsets) * e
    if smem < 0 or smem + size > m.shared_bytes:
        raise m.error(inst, f"the {size}-byte box at shared address {smem:#x} overruns shared memory "
                            f"({m.shared_bytes} bytes)", lane)
    swizzled, dense, chunks = _swizzled(smem, size, facts.tensor_map_swizzle_bytes(spec.swizzle))
    base = slot * m.shared_bytes
    shared_index = base + swizzled
    span = None if dense is None else slice(base + dense[0], base + dense[1])
    if load and layout is not None:  # the bytes inside the tensor are a box: strided views, no index
        box = StridedBox(tmap.address - GLOBAL_BASE + layout[0], layout[1], layout[2])
        if valid.all():  # the whole box lies in the tensor (mostly)
            data = box.view(m.memory.buffer).flatten()  # a copy: the data as it is at issue
        else:
            data = m.memory.buffer[(tmap.address - GLOBAL_BASE + offsets)[:, None] + np.arange(e)]
            data = np.where(valid[:, None], data, _oob_fill(spec)).astype(np.uint8).reshape(-1)
        memory.note_global(m, np.array([lane]), box, False, inst, ASYNC)
        if barrier is not None and getattr(m, "global_order", None) is not None:
            key = sync.mbarrier_key(m, lane, barrier)
            m.global_order.read_until(inst, lane, box, m.tracker.barrier(key), sync._state(m, inst, lane, barrier).phase)
        m.tracker.stage(shared_index, data, span, None if chunks is None else (base, chunks))  # lands later
        return spec.box_bytes
    global_index = (tmap.address - GLOBAL_BASE + offsets)[:, None] + np.arange(e)
    inside = global_index if valid.all() else global_index[valid]  # the whole box lies in the tensor, mostly
    if load:
        data = m.memory.buffer[global_index]
        if inside is not global_index:
            data = np.where(valid[:, None], data, _oob_fill(spec)).astype(np.uint8)
        memory.note_global(m, np.array([lane]), inside.reshape(1, -1), False, inst, ASYNC)
        if barrier is not None and getattr(m, "global_order", None) is not None:
            key = sync.mbarrier_key(m, lane, barrier)
            m.global_order.read_until(inst, lane, inside, m.tracker.barrier(key),
                                      sync._state(m, inst, lane, barrier).phase)
        m.tracker.stage(shared_index, data.reshape(-1), span, None if chunks is None else (base, chunks))
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


@lru_cache(maxsize=1024)
def _swizzled(smem: int, size: int, swizzle: int) -> tuple[np.ndarray, tuple[int, int] | None, np.ndarray | None]:
    """The swizzled shared offsets of the `size` bytes of a box at `smem` (read-only; a ring's slots give a
    handful of values, kept across copies, CTAs and launches), their range when they fill one (`_dense`), and
    the 16-byte chunks they are, in order, when they are whole chunks (`_chunks`: every swizzle moves whole
    chunks)."""
    offsets = facts.swizzle_address(smem + np.arange(size, dtype=np.int64), swizzle)
    offsets.setflags(write=False)
    return offsets, _dense(offsets), _chunks(offsets)


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
    if (np.diff(warps) > 0).all():  # one lane of each warp (lanes ascend): each issues its own
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
        smem_addresses = np.broadcast_to(np.asarray(smem(sel), np.int64), lanes.shape)
        if barrier is not None:
            barriers = shared_addresses(m, inst, "shared", lanes, barrier(sel))
        if mask is not None:
            masks = np.broadcast_to(np.asarray(mask(sel), np.int64), lanes.shape)
        if tensor:
            maps = np.broadcast_to(np.asarray(map_address(sel), np.int64), lanes.shape)
            values = [np.broadcast_to(np.asarray(c(sel), np.int64), lanes.shape) for c in coords]
        else:
            sources = np.broadcast_to(np.asarray(global_address(sel), np.int64), lanes.shape)
            sizes = np.broadcast_to(np.asarray(size(sel), np.int64), lanes.shape)
        issued = _issued_per_warp(m, lanes, smem_addresses, *([maps, *values] if tensor else [sources, sizes]),
                                  *([np.broadcast_to(np.asarray(barriers, np.int64), lanes.shape)] if load else []),
                                  *([masks] if mask is not None else []))
        for i in issued:
            lane = int(lanes[i])
            one = lanes[i:i + 1]
            if load:  # the CTAs the copy lands in, and the shared::cluster addresses of data and barrier there
                shared_offsets(m, inst, one, smem_addresses[i:i + 1])
                slots, offsets, _ = m.shared_target(one, smem_addresses[i:i + 1])
                if mask is not None:
                    targets = [(slot, cluster_address(m, slot, int(offsets[0])),
                                cluster_address(m, slot, int(barriers[i]) & _OFFSET_MASK))
                               for slot in multicast_slots(m, inst, lane, int(masks[i]))]
                else:
                    targets = [(int(slots[0]), int(smem_addresses[i]), int(barriers[i]))]
            if tensor:
                coordinates = [int(v[i]) for v in values]
                if not load:
                    nbytes = _tma_lane(m, inst, lane, int(maps[i]), coordinates, int(smem_addresses[i]), load)
                for slot, destination, target_barrier in targets if load else ():
                    own = barrier is not None and slot == int(m.lane_cta[lane])  # where the issuer sees it end
                    nbytes = _tma_lane(m, inst, lane, int(maps[i]), coordinates,
                                       destination & _OFFSET_MASK, load, slot, target_barrier if own else None)
                    if barrier is not None:
                        m.tracker.issue(inst, lane, target_barrier, nbytes, "TMA load")
            else:
                nbytes = int(sizes[i])
                if nbytes % 16:
                    raise m.error(inst, f"bulk copy size {nbytes} is not a multiple of 16", lane)
                if load:
                    data = access(m, inst, source_space, one, sources[i:i + 1], nbytes, align=16, how=ASYNC)
                    for _, destination, target_barrier in targets:
                        place = np.array([destination], np.int64)
                        memory._check(m, inst, "shared", one, place, nbytes, 16)
                        start = int(m.shared_flat(one, place)[0])
                        m.tracker.stage(start + np.arange(nbytes), data.reshape(-1), slice(start, start + nbytes),
                                        "ordered")
                        if barrier is not None:
                            m.tracker.issue(inst, lane, target_barrier, nbytes, "bulk copy")
                else:
                    memory._check(m, inst, "shared", one, smem_addresses[i:i + 1], nbytes, 16)
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
    apply = memory._ATOMIC[operation].apply
    nbytes = t.bits // 8

    def data(sel, lanes):
        values = np.broadcast_to(np.asarray(read(sel), t.dtype), lanes.shape)

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
        places = np.broadcast_to(np.asarray(address(sel), np.int64), lanes.shape)
        barriers = shared_addresses(m, inst, "shared", lanes, barrier(sel))
        memory._check(m, inst, "shared", lanes, places, nbytes, nbytes)
        slots = m.shared_target(lanes, places)[0]
        if (m.shared_target(lanes, barriers)[0] != slots).any():
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
        smem_addresses = np.broadcast_to(np.asarray(smem(sel), np.int64), lanes.shape)
        maps = np.broadcast_to(np.asarray(map_address(sel), np.int64), lanes.shape)
        values = [np.broadcast_to(np.asarray(c(sel), np.int64), lanes.shape) for c in coords]
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
        return sync.decode_cp_async_mbarrier_arrive(ops, inst, mods)
    return memory.decode_cp_async(ops, inst, mods)


# endregion
# region wgmma
@lru_cache(maxsize=None)
def _accumulator_coords(n: int) -> tuple[np.ndarray, np.ndarray]:
    v = np.arange(n // 2)
    return facts.accumulator_coords(v[None, :], np.arange(facts.WARPGROUP_SIZE)[:, None])


@lru_cache(maxsize=None)
def _a_coords() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    i = np.arange(facts.A_FRAGMENT_REGISTERS)[None, :]
    t = np.arange(facts.WARPGROUP_SIZE)[:, None]
    (r0, k0), (r1, k1) = facts.a_fragment_coords(i, 0, t), facts.a_fragment_coords(i, 1, t)
    return r0, k0, r1, k1


_MULTIPLICANDS = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.uint32,
                  "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "s8": np.int8, "u8": np.uint8}
"""wgmma multiplicand type -> the NumPy dtype of its stored element (.tf32 as its 32-bit pattern)."""

_FAMILIES = {"f16": "f16", "bf16": "bf16", "tf32": "tf32", "e4m3": "fp8", "e5m2": "fp8", "s8": "int", "u8": "int"}
"""A and B must have the same family (.e4m3/.e5m2 mix freely, so do .s8/.u8)."""

_TF32_MASK = np.uint32(0xFFFFE000)
"""A .tf32 element is an f32 pattern of which the tensor core reads sign, exponent and 10 mantissa bits."""


def _multiplicand_values(raw: np.ndarray, name: str) -> np.ndarray:
    """Stored elements (of `_MULTIPLICANDS[name]`) as exact float64 values."""
    if name == "tf32":
        return (raw & _TF32_MASK).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


@lru_cache(maxsize=4096)
def _descriptor_bytes(descriptor: int, major: str, e: int, extent: int) -> tuple | str:
    """(element addresses [extent, K elements], byte offsets [extent * K * e], lowest and highest address, the
    range the offsets fill when they fill one, the range [lowest, highest] byte holding them, the 16-byte chunks
    holding them (`_chunk_set`), the offsets as 16-byte chunks in order or None) a descriptor reads, or the reason it is invalid: computed once per descriptor value
    and kept across wgmmas, CTAs and launches (a ring's slots give a handful of values)."""
    try:
        fields = facts.decode_descriptor(descriptor)
        addresses = np.asarray(facts.descriptor_element_address(
            fields, major, e, np.arange(extent)[:, None], np.arange(facts.WGMMA_K_BYTES // e)[None, :]), np.int64)
    except ValueError as error:
        return str(error)
    offsets = (addresses[..., None] + np.arange(e)).reshape(-1)
    addresses.setflags(write=False)
    offsets.setflags(write=False)
    return (addresses, offsets, int(addresses.min()), int(addresses.max()), _dense(offsets),
            (int(offsets.min()), int(offsets.max()) + 1), _chunk_set(offsets), _chunks(offsets))


_CHUNK = facts.SWIZZLE_CHUNK_BYTES
"""The bytes every swizzle keeps together (a core matrix row): a descriptor's bytes are whole such chunks."""


def _chunks(offsets: np.ndarray) -> np.ndarray | None:
    """The chunk numbers c (bytes 16c to 16c + 15) whose bytes, in order, are `offsets`, when they are, else
    None: the operand is then gathered, and its asynchrony records written, a chunk at a time."""
    if offsets.size % _CHUNK:
        return None
    rows = offsets.reshape(-1, _CHUNK)
    if (rows[:, 0] % _CHUNK).any() or not np.array_equal(rows, rows[:, :1] + np.arange(_CHUNK)):
        return None
    chunks = rows[:, 0] // _CHUNK
    chunks.setflags(write=False)
    return chunks


def _chunk_set(offsets: np.ndarray) -> np.ndarray | slice:
    """The 16-byte chunks (byte // 16) the offsets lie in, ascending, as a range where they are consecutive: the
    columns of the wgmma read records (`wgmma_tracking.WgmmaTracking.wgmma_reads`). A descriptor reads whole chunks
    (its addresses and strides are 16-byte units, a core matrix row is one chunk)."""
    chunks = np.unique(offsets // _CHUNK)
    if len(chunks) and int(chunks[-1]) - int(chunks[0]) + 1 == len(chunks):
        return slice(int(chunks[0]), int(chunks[-1]) + 1)
    chunks.setflags(write=False)
    return chunks


def _dense(offsets: np.ndarray) -> tuple[int, int] | None:
    """(low, high) when `offsets` are the bytes [low, high) each once, in some order (a swizzled tile), else
    None: the asynchrony records of such bytes are read and written as one range (`asynchrony`)."""
    if not offsets.size:
        return None
    low, high = int(offsets.min()), int(offsets.max()) + 1
    if high - low != offsets.size or np.bincount(offsets - low, minlength=high - low).max() != 1:
        return None
    return low, high


def _descriptor_read(m: Machine, inst, lanes: np.ndarray, descriptor: int, major: str, extent: int,
                     name: str, operand: str = "B") -> tuple:
    """The [extent, K] operand (K spanning facts.WGMMA_K_BYTES) `lanes` (whole warpgroups of one CTA) read
    through a descriptor from their CTA's shared memory: checked and recorded as an async-proxy read
    (`wgmma_tracking.WgmmaTracking.wgmma_reads`); returns what `_descriptor_tiles` gathers it with."""
    e = np.dtype(_MULTIPLICANDS[name]).itemsize
    decoded = _descriptor_bytes(descriptor, major, e, extent)
    if isinstance(decoded, str):
        raise m.error(inst, f"matrix descriptor {descriptor:#x}: {decoded}", int(lanes[0]))
    addresses, offsets, low, high, dense, hull, chunk_set, chunks = decoded
    if low < 0 or high + e > m.shared_bytes:
        raise m.error(inst, f"matrix descriptor {descriptor:#x} reads outside shared memory", int(lanes[0]))
    cta = int(m.lane_cta[lanes[0]])
    base = cta * m.shared_bytes
    span = None if dense is None else slice(base + dense[0], base + dense[1])
    own_rows = operand == "A"  # the bytes row by row (addresses [rows, K]): each warp reads its own rows
    m.tracker.wgmma_reads(inst, lanes, None if chunks is not None else offsets + base, operand, span,
                          slice(base + hull[0], base + hull[1]), chunks, base, own_rows=own_rows,
                          chunk_set=chunk_set)
    return cta, (descriptor, major, e, extent), decoded


def _descriptor_tiles(m: Machine, reads: list[tuple], name: str) -> np.ndarray:
    """[len(reads), extent, K] float64: the operands `reads` (`_descriptor_read`'s, one per CTA and
    descriptor, all of one operand of one wgmma) hold, gathered once per descriptor value for every CTA reading
    through it (the CTAs of a batch run the same program: their descriptors agree), a 16-byte chunk at a time
    where the descriptor reads whole chunks in order."""
    dtype = np.dtype(_MULTIPLICANDS[name])
    size = m.shared_bytes
    by_value: dict[tuple, list[int]] = {}
    for i, (_, key, _) in enumerate(reads):
        by_value.setdefault(key, []).append(i)
    parts = []
    for positions in by_value.values():
        decoded = reads[positions[0]][2]
        ctas = np.array([reads[i][0] for i in positions], np.int64)[:, None]
        chunks = decoded[7]
        if chunks is not None and size % _CHUNK == 0:
            raw = m.shared.reshape(-1, _CHUNK)[ctas * (size // _CHUNK) + chunks]
        else:  # byte by byte (an MN-major tile: whole chunks out of order; gathering them first is slower)
            raw = m.shared[ctas * size + decoded[1]]
        parts.append((positions, raw.reshape(len(positions), -1)))
    if len(parts) == 1:
        raw = parts[0][1]
    else:
        raw = np.empty((len(reads), parts[0][1].shape[1]), np.uint8)
        for positions, part in parts:
            raw[positions] = part
    return _multiplicand_values(raw.view(dtype).reshape(len(reads), *reads[0][2][0].shape), name)


@lru_cache(maxsize=None)
def _a_tile_bytes() -> np.ndarray:
    """For each byte of the 64 x 32-byte A tile (row-major), its position in the bytes of the 128 threads' four
    A registers ([thread, register, byte] flattened): the fragment fills the tile, each byte once.

    Every multiplicand type packs the same bytes of the tile into a register (Figure 148 and its .tf32/8-bit
    siblings): register a[i] holds the 4 bytes of row 16w + g + 8(i & 1) starting at byte 4c + 16(i >> 1) of
    the row's 32 K-bytes, the positions of the f16 fragment's pair (`facts.a_fragment_coords`, half 0)."""
    r0, k0, _, _ = _a_coords()
    source = np.full((facts.WGMMA_M, facts.WGMMA_K_BYTES), -1, np.int64)
    source[r0[..., None], 2 * k0[..., None] + np.arange(4)] = np.arange(r0.size * 4).reshape(*r0.shape, 4)
    assert (source >= 0).all(), "the A fragment fills the tile"
    source.setflags(write=False)
    return source.reshape(-1)


def _register_operands(words: np.ndarray, name: str) -> np.ndarray:
    """The 64xK A tiles [warpgroups, 64, K] from the four 32-bit A registers of each thread of each warpgroup
    (`words` [warpgroups, 128, 4]), in one gather."""
    raw = np.take(np.ascontiguousarray(words, np.uint32).view(np.uint8).reshape(len(words), -1), _a_tile_bytes(), axis=1)
    return _multiplicand_values(raw.reshape(len(words), facts.WGMMA_M, facts.WGMMA_K_BYTES)
                                .view(_MULTIPLICANDS[name]), name)


def _wgmma_types(ops: Operands, inst, mods) -> tuple[str, str, str, bool]:
    """(.dtype, .atype, .btype, .satfinite) of wgmma.mma_async, refusing combinations outside the ISA."""
    if "popc" in mods.left:
        raise ops.refuse(inst, "single-bit wgmma (.b1 with .and.popc)")
    satfinite = mods.take("satfinite") is not None
    if len(mods.left) < 3:
        raise ops.refuse(inst, "wgmma needs .dtype.atype.btype")
    dtype_name, a_name, b_name = mods.left[-3:]
    del mods.left[-3:]
    for name in (a_name, b_name):
        if name not in _MULTIPLICANDS:
            raise ops.refuse(inst, f"wgmma multiplicand type .{name} (supported: "
                                   f".{', .'.join(_MULTIPLICANDS)})")
    if _FAMILIES[a_name] != _FAMILIES[b_name]:
        raise ops.refuse(inst, f"wgmma .{a_name} with .{b_name}: A and B types must match (only .e4m3/.e5m2 "
                               "and .s8/.u8 mix)")
    if satfinite and _FAMILIES[a_name] != "int":
        raise ops.refuse(inst, "wgmma .satfinite applies to .s8/.u8 multiplicands only")
    return dtype_name, a_name, b_name, satfinite


def _wgmma_async(ops: Operands, inst, mods):
    m = ops.m
    mods.drop("sync", "aligned")
    shape = next((x for x in mods.left if x.startswith("m64n")), None)
    if shape is None:
        raise ops.refuse(inst, "wgmma shape")
    mods.left.remove(shape)
    dtype_name, a_name, b_name, satfinite = _wgmma_types(ops, inst, mods)
    n = int(shape[4:shape.index("k")])
    try:
        _, _, k = facts.wgmma_shape(n, a_name, dtype_name)
        facts.wgmma_shape(n, b_name, dtype_name)
    except ValueError as error:
        raise ops.refuse(inst, str(error)) from None
    if shape != f"m64n{n}k{k}":
        raise ops.refuse(inst, f"wgmma .{a_name} has K = {k}, got .{shape}")
    family = _FAMILIES[a_name]
    operands = list(inst.operands)
    registers_a = isinstance(operands[1], Vector)
    count = len(operands)
    # Immediates after scale-d: imm-scale-a/b for floats, imm-trans-a/b (f16/bf16 only; no trans-a for
    # register A), nothing for integers.
    if family == "int":
        allowed = (4,)
    elif family in ("f16", "bf16"):
        allowed = (7, 6) if registers_a else (8, 6)
    else:
        allowed = (6,)
    if count not in allowed:
        raise ops.refuse(inst, f"wgmma .{a_name} with {count} operands (expected {' or '.join(map(str, allowed))})")
    d_regs = [ops.register(inst, r)[0] for r in elements(operands[0])]
    d_block = m.register_blocks.get(tuple(getattr(r, "name", None) for r in elements(operands[0])))
    if len(d_regs) != facts.accumulator_registers(n, dtype_name):
        raise ops.refuse(inst, f"{len(d_regs)} accumulator registers for m64n{n} .{dtype_name}")
    if registers_a:
        a_regs = [ops.register(inst, r)[0] for r in elements(operands[1])]
        a_block = m.register_blocks.get(tuple(getattr(r, "name", None) for r in elements(operands[1])))
        if len(a_regs) != facts.A_FRAGMENT_REGISTERS:
            raise ops.refuse(inst, "register A needs four registers")
        read_a = None
    else:
        a_block = None
        read_a = ops.read(inst, operands[1], U64)
    read_b = ops.read(inst, operands[2], U64)
    scale_d = operands[3]
    read_scale = ops.read(inst, scale_d, PRED) if isinstance(scale_d, Reg) else None
    static_scale = ops.static(inst, scale_d) if read_scale is None else None
    immediates = [ops.static(inst, o) for o in operands[4:]]
    scale_a, scale_b = immediates[:2] if immediates else (1, 1)
    trans = immediates[2:]
    trans_a = 0 if registers_a else (trans[0] if trans else 0)
    trans_b = trans[-1] if (len(trans) == 2 or (registers_a and trans)) else 0
    if scale_a not in (1, -1) or scale_b not in (1, -1) or any(t not in (0, 1) for t in trans):
        raise ops.refuse(inst, "imm-scale must be 1 or -1 and imm-trans 0 or 1")
    rows, cols = _accumulator_coords(n)
    fragment = (rows * n + cols).reshape(-1)  # thread t's register v: element fragment[t * n / 2 + v] of D
    f16_acc = dtype_name == "f16"
    # f32 accumulators in one block: updated in place (float products)
    in_place = d_block is not None and dtype_name == "f32" and family != "int" and d_block.itemsize == 4
    viewed = [np.empty(0, np.int64), None]  # the lanes last run and their rows of d_block (`lane_rows`)

    def run(sel):
        # every warpgroup at this wgmma in one batched product: operands per warpgroup, accumulators of all
        # lanes gathered and scattered once per register
        lanes = lanes_of(m, sel)
        groups = m.unit_of[facts.WARPGROUP_SIZE][lanes]
        size = facts.WARPGROUP_SIZE
        if len(groups) % size == 0 and (groups[::size] == groups[size - 1::size]).all():
            starts = np.arange(0, len(groups), size)  # whole warpgroups (lanes ascend, each once)
        else:
            starts = np.flatnonzero(np.diff(groups, prepend=-1))  # lanes ascend: each warpgroup's lanes are one run
            counts = np.diff(starts, append=len(groups))
            short = counts != size
            if short.any():
                raise m.error(inst, "wgmma needs all 128 threads of the warpgroup", int(lanes[starts[np.argmax(short)]]))
        b_descs = _uniform_per_group(m, inst, read_b(sel), lanes, "B descriptor")
        a_descs = None if registers_a else _uniform_per_group(m, inst, read_a(sel), lanes, "A descriptor")
        accumulate = np.full(len(starts), bool(static_scale)) if read_scale is None else \
            _uniform_per_group(m, inst, read_scale(sel), lanes, "scale-d predicate").astype(bool)
        # warpgroups of one CTA reading B through one descriptor (two consumers sharing a K tile) read it once
        sharing: dict[tuple[int, int], list[int]] = {}
        for i, start in enumerate(starts.tolist()):
            sharing.setdefault((int(m.lane_cta[lanes[start]]), int(b_descs[i])), []).append(start)
        # every read checked and recorded in warpgroup order, then gathered across CTAs (`_descriptor_tiles`)
        b_of: dict[tuple[int, int], int] = {}
        b_reads, a_reads, b_index = [], [], []
        for i, start in enumerate(starts.tolist()):
            wg = lanes[start:start + facts.WARPGROUP_SIZE]
            key = (int(m.lane_cta[wg[0]]), int(b_descs[i]))
            if key not in b_of:
                readers = np.concatenate([lanes[j:j + facts.WARPGROUP_SIZE] for j in sharing[key]])
                b_of[key] = len(b_reads)
                b_reads.append(_descriptor_read(m, inst, readers, key[1], "MN" if trans_b else "K", n, b_name))
            b_index.append(b_of[key])
            if not registers_a:
                a_reads.append(_descriptor_read(m, inst, wg, int(a_descs[i]), "MN" if trans_a else "K",
                                                facts.WGMMA_M, a_name, "A"))
        if registers_a:  # every warpgroup's A fragment in one gather (one block of registers: one more)
            words = a_block[lanes] if a_block is not None else np.stack([r[lanes] for r in a_regs], axis=1)
            a_stack = _register_operands(words.reshape(len(starts), facts.WARPGROUP_SIZE, -1), a_name)
        else:
            a_stack = _descriptor_tiles(m, a_reads, a_name)
        b_stack = _descriptor_tiles(m, b_reads, b_name)
        if len(b_reads) != len(starts):
            b_stack = b_stack[b_index]
        if scale_a != 1:
            a_stack = scale_a * a_stack
        if scale_b != 1:
            b_stack = scale_b * b_stack
        d = np.matmul(a_stack, b_stack.transpose(0, 2, 1))
        product = np.take(d.reshape(len(starts), -1), fragment, axis=1).reshape(len(lanes), -1)  # [lanes, registers]
        if in_place and (accumulate.all() or not accumulate.any()):
            if len(viewed[0]) != len(lanes) or not np.array_equal(viewed[0], lanes):
                viewed[:] = [lanes.copy(), lane_rows(d_block, lanes)]  # kept: the same warpgroups run each wgmma
            rows = viewed[1]
            if rows is not None:  # the accumulators of every warpgroup updated where they lie: one pass
                _accumulate_fragments(product, rows.view(np.float32), bool(accumulate[0]))
                return
        # [lanes, registers]; one gather where the accumulators are one block (Machine.register_blocks)
        acc_words = d_block[lanes] if d_block is not None else np.stack([r[lanes] for r in d_regs], axis=1)
        if f16_acc:
            acc = np.stack([(acc_words & 0xFFFF), acc_words >> 16], axis=2).reshape(len(lanes), -1)
            acc = acc.astype(np.uint16).view(np.float16).astype(np.float64)
        elif family == "int":
            acc = acc_words.astype(np.uint32).view(np.int32).astype(np.float64)
        else:
            acc = acc_words.view(np.float32).astype(np.float64)
        if accumulate.all():
            result = product + acc
        elif not accumulate.any():
            result = product
        else:
            result = np.where(np.repeat(accumulate, facts.WARPGROUP_SIZE)[:, None], product + acc, product)
        if f16_acc:
            bits = result.astype(np.float16).view(np.uint16).astype(np.uint32).reshape(len(lanes), -1, 2)
            out = bits[..., 0] | (bits[..., 1] << 16)
        elif family == "int":
            # Integer sums are exact in float64 (|sum| < 2^53); .s32 wraps, .satfinite clamps.
            total = result.astype(np.int64)
            if satfinite:
                total = np.clip(total, -(1 << 31), (1 << 31) - 1)
            out = total.astype(np.uint32)
        else:
            out = result.astype(np.float32).view(np.uint32)
        if d_block is not None:
            d_block[lanes] = out
            return
        columns = np.ascontiguousarray(out.T)  # one register's values contiguous: a faster scatter
        for v, r in enumerate(d_regs):
            r[lanes] = columns[v]

    return Step(inst, run, unit=facts.WARPGROUP_SIZE)


def _accumulate_fragments(product: np.ndarray, target: np.ndarray, accumulate: bool) -> None:
    """target (f32 accumulators [runs, lanes of a run, registers], whole warpgroups, a view of the register
    block) = product (+ target when `accumulate`), `product` the float64 fragments [lanes, registers] in the
    same order: the sum taken in float64 and rounded once to f32, as a gather, add and scatter would, in one
    pass over the registers where they lie (each run's rows are contiguous)."""
    product = product.reshape(target.shape)
    if accumulate:
        np.add(product, target, out=target, dtype=np.float64, casting="unsafe")
    else:
        np.copyto(target, product, casting="unsafe")


def _uniform_per_group(m: Machine, inst, values, lanes, what: str) -> np.ndarray:
    """The value of `values` (per lane of `lanes`: whole warpgroups, in order) in each warpgroup, which must
    agree across it."""
    values = np.asarray(values)
    if values.shape != lanes.shape:  # an immediate
        values = np.broadcast_to(values, lanes.shape)
    values = values.reshape(-1, facts.WARPGROUP_SIZE)
    differ = values != values[:, :1]
    if differ.any():
        g, i = np.unravel_index(np.argmax(differ), differ.shape)
        raise m.error(inst, f"the {what} must be the same in the whole warpgroup",
                      int(lanes[g * facts.WARPGROUP_SIZE + i]))
    return values[:, 0]


@opcode("wgmma")
def decode_wgmma(ops: Operands, inst, mods):
    if mods.take("mma_async"):
        return _wgmma_async(ops, inst, mods)
    if mods.take("fence", "commit_group", "wait_group") is None:
        raise ops.refuse(inst, "wgmma form (sparse wgmma.mma_async.sp is not supported)")
    mods.drop("sync", "aligned")
    return lambda sel: None  # groups are counted by async_checks.install's wrapper


# endregion
# region ldmatrix, stmatrix
def _matrix_step(ops: Operands, inst, mods, store: bool):
    mods.drop("sync", "aligned")
    if not mods.take("m8n8"):
        raise ops.refuse(inst, "shapes other than .m8n8")
    count = mods.take("x1", "x2", "x4")
    transpose = bool(mods.take("trans"))
    space = take_space(mods, "generic")
    mods.take("b16")
    if count is None:
        raise ops.refuse(inst, "needs .x1, .x2 or .x4")
    matrices = int(count[1])
    m = ops.m
    address = ops.address(inst, inst.operands[0 if store else 1])
    regs = elements(inst.operands[1 if store else 0])
    if len(regs) != matrices:
        raise ops.refuse(inst, f"{matrices} registers expected")
    b32 = ptx_type("b32")
    readers = [ops.read(inst, r, b32) for r in regs] if store else None
    writers = None if store else [ops.write(inst, r, b32) for r in regs]
    lane = np.arange(facts.WARP_SIZE)
    row, col = lane // 4, 2 * (lane % 4)

    def run(sel):
        lanes = lanes_of(m, sel)
        warps = m.unit_of[facts.WARP_SIZE][lanes]
        addresses = np.broadcast_to(np.asarray(address(sel), np.int64), lanes.shape)
        outputs = [np.zeros(len(lanes), np.uint32) for _ in range(matrices)]
        for w in np.unique(warps):
            here = np.flatnonzero(warps == w)
            if len(here) != facts.WARP_SIZE:
                raise m.error(inst, "needs all 32 threads of the warp", int(lanes[here[0]]))
            warp_lanes = lanes[here]
            for j in range(matrices):
                row_lanes = warp_lanes[8 * j:8 * j + 8]
                row_addresses = addresses[here[8 * j:8 * j + 8]]
                if store:
                    words = np.stack([np.broadcast_to(r(warp_lanes), (32,)) for r in readers])[j]
                    halves = np.stack([words & 0xFFFF, words >> 16], axis=1).astype(np.uint16)
                    matrix = np.zeros((8, 8), np.uint16)
                    if transpose:
                        matrix[col, row], matrix[col + 1, row] = halves[:, 0], halves[:, 1]
                    else:
                        matrix[row, col], matrix[row, col + 1] = halves[:, 0], halves[:, 1]
                    access(m, inst, space, row_lanes, row_addresses, 16, matrix.view(np.uint8).reshape(8, 16))
                else:
                    matrix = access(m, inst, space, row_lanes, row_addresses, 16).view(np.uint16).reshape(8, 8)
                    lo, hi = (matrix[col, row], matrix[col + 1, row]) if transpose else \
                        (matrix[row, col], matrix[row, col + 1])
                    outputs[j][here] = lo.astype(np.uint32) | (hi.astype(np.uint32) << 16)
        if not store:
            for j, write in enumerate(writers):
                write(sel, outputs[j])

    return Step(inst, run, unit=facts.WARP_SIZE)


@opcode("ldmatrix")
def decode_ldmatrix(ops: Operands, inst, mods):
    return _matrix_step(ops, inst, mods, store=False)


@opcode("stmatrix")
def decode_stmatrix(ops: Operands, inst, mods):
    return _matrix_step(ops, inst, mods, store=True)


# endregion
