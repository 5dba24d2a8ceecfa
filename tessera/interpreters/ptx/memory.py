"""Memory instructions: ld, st (scalars and .v2/.v4/.v8 vectors), cvta, isspacep, prefetch, createpolicy; the
checks every access takes (`check_access`, `access`), which `atomics` (atom, red), `bulk_copy` and `cp_async`
(Ampere's cp.async) share.

Spaces and addresses are those of `state`: `.global` (and `.const`, whose variables live in global memory),
`.shared{::cta,::cluster}` (shared::cluster addresses reach the CTAs of the cluster, see `cluster`), `.local`, `.param` (the kernel's parameters, read-only; the
`.param` variables of functions and call sites are per-thread local memory) and generic addresses (no space:
routed by window). Every access is checked before it happens: it must lie inside one allocation of its
space and be aligned to its size (the whole vector for .v2/.v4/.v8); otherwise the run stops naming the
instruction, the thread and the address. Cache, eviction and memory-ordering qualifiers have no effect on
values in this sequentially consistent executor and are accepted (`.nc`, `.ca/.cg/.cs/.lu/.cv`, `.L1::*`,
`.L2::*`, `.weak/.volatile/.relaxed/.acquire/.release` and scopes); the ordering ones decide the race checks, and a
load through the non-coherent read-only path (`ld.global.nc`, `ldu`) of bytes the launch wrote is reported
(`_check_read_only`).

Under `serving_checks`, every 32-bit word loaded from a checked cache's page table is checked against the
cache's page count (a gathered row of a page out of range would read another allocation: they are contiguous).
A weak load whose value is the compare operand of an `atom.cas` at the same address (an atomicCAS loop's first
read) counts as relaxed for the race checks (`seeds_cas`).
"""

from __future__ import annotations


import numpy as np

from tessera.interpreters import serving_checks
from tessera.interpreters.ptx.cluster import shared_offsets
from tessera.interpreters.ptx.decode import DECODERS, Operands, Step, elements, opcode, per_lane
from tessera.interpreters.ptx.global_accesses import STRONG_CTA, WEAK, StridedBox, Words, strong_kind
from tessera.interpreters.ptx.state import (
    GLOBAL_BASE,
    LOCAL_WINDOW,
    PARAM_WINDOW,
    PARK,
    SHARED_WINDOW,
    WINDOW_SIZE,
    Machine,
)
from tessera.interpreters.ptx.syntax import Address, FloatImm, Reg, Sink, Symbol
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.truth import any_set

IGNORED_QUALIFIERS = ("weak", "volatile", "relaxed", "acquire", "release", "cta", "cluster", "gpu", "sys", "ca", "cg",
                      "cs", "lu", "cv", "wb", "wt", "nc", "unified", "mmio")
_SPACES = {"global": "global", "const": "global", "shared": "shared", "shared::cta": "shared",
           "shared::cluster": "shared", "local": "local", "param": "param"}
_WINDOWS = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "param": PARAM_WINDOW}


def take_space(mods, default: str | None = None) -> str | None:
    """The state space among the modifiers ("generic" when none), mapped as in `_SPACES`."""
    found = mods.take(*_SPACES)
    return _SPACES[found] if found else default


def lanes_of(m: Machine, sel) -> np.ndarray:
    return m.lane_ids if isinstance(sel, slice) else sel


def split_generic(m: Machine, inst, lanes: np.ndarray, addresses: np.ndarray):
    """[(space, lanes, space addresses)] for generic addresses, by window."""
    parts = []
    window = addresses // WINDOW_SIZE
    for space, base in (("global", 0), ("shared", SHARED_WINDOW), ("local", LOCAL_WINDOW), ("param", PARAM_WINDOW)):
        here = window == base // WINDOW_SIZE
        if any_set(here):
            parts.append((space, lanes[here], addresses[here] - base, np.flatnonzero(here)))
    covered = sum(len(p[1]) for p in parts)
    if covered != len(lanes):
        raise m.error(inst, "generic address outside every state space window", int(lanes[0]))
    return parts


def check_access(m: Machine, inst, space: str, lanes: np.ndarray, addresses: np.ndarray, nbytes: int, align: int):
    if space == "global":
        bad = None if len(addresses) and m.memory.segments and m.memory.holds(addresses, nbytes) else \
            m.memory.outside(addresses, nbytes)
        limit = None
    else:
        limit = {"shared": m.shared_bytes, "local": m.local_bytes, "param": len(m.params)}[space]
        offsets = shared_offsets(m, inst, lanes, addresses) if space == "shared" else addresses
        bad = (offsets < 0) | (offsets + nbytes > limit)
    if bad is not None and any_set(bad):
        i = int(np.argmax(bad))
        size = "" if limit is None else f" (the {space} space has {limit} bytes)"
        raise m.error(inst, f"{nbytes}-byte access at {space} address {int(addresses[i]):#x} is out of bounds{size}",
                      int(lanes[i]))
    # (an alignment that is a power of two, as every one is, tested by a mask: no remainder of each address)
    misaligned = (addresses & (align - 1) if align & (align - 1) == 0 else addresses % align) != 0
    if any_set(misaligned):
        i = int(np.argmax(misaligned))
        raise m.error(inst, f"misaligned {nbytes}-byte access at {space} address {int(addresses[i]):#x} "
                            f"(needs {align}-byte alignment)", int(lanes[i]))


def flat_offsets(m: Machine, space: str, lanes: np.ndarray, addresses: np.ndarray, nbytes: int):
    """(buffer, flat byte indices [n, nbytes]) of an access already checked."""
    offsets = np.arange(nbytes, dtype=np.int64)
    if space == "global":
        return m.memory.buffer, (addresses - GLOBAL_BASE)[:, None] + offsets
    if space == "shared":
        return m.shared, m.shared_flat(lanes, addresses)[:, None] + offsets
    if space == "local":
        return m.local.reshape(-1), (lanes * m.local.shape[1] + addresses)[:, None] + offsets
    return m.params, addresses[:, None] + offsets


def access(m: Machine, inst, space: str, lanes: np.ndarray, addresses: np.ndarray, nbytes: int,
           data: np.ndarray | None = None, align: int | None = None, watched: bool = True,
           how: int = WEAK) -> np.ndarray | None:
    """Read (data None) or write `nbytes` per lane at `addresses` of `space` ("generic" allowed); reads
    return uint8 [n, nbytes]. Plain accesses (`watched`) are shown to the machine's reduction watch, if any
    (`reductions.ReductionWatch`); global accesses to the happens-before of global memory as `how`
    (`global_order`: weak or strong, generic or async proxy)."""
    addresses = per_lane(addresses, lanes.shape, np.int64)
    align = nbytes if align is None else align
    if space == "generic":
        out = np.zeros((len(lanes), nbytes), np.uint8) if data is None else None
        for sub_space, sub_lanes, sub_addresses, index in split_generic(m, inst, lanes, addresses):
            part = access(m, inst, sub_space, sub_lanes, sub_addresses, nbytes,
                          None if data is None else data[index], align, watched, how)
            if out is not None:
                out[index] = part
        return out
    if space == "param" and data is not None:
        raise m.error(inst, "the parameter space is read-only", int(lanes[0]))
    check_access(m, inst, space, lanes, addresses, nbytes, align)
    if space == "global" and data is not None and serving_checks.active():
        _check_sequence_store(m, inst, lanes, addresses)
    words = Words.aligned(addresses - GLOBAL_BASE, nbytes, m.memory.buffer.size) \
        if space == "global" and data is not None and align % nbytes == 0 else None
    # (a plain store of aligned words, st.global.b32 and its vectors: recorded and written a word an item, no index)
    buffer, index = (m.memory.buffer, words) if words is not None else flat_offsets(m, space, lanes, addresses, nbytes)
    watch = getattr(m, "watch", None) if watched else None
    if watch is not None and space == "global":
        watch.on_global(inst, lanes, addresses, nbytes, data is not None)
    elif watch is not None and space == "shared" and data is not None:
        watch.on_shared_write(inst, lanes, index)
    if space == "shared":
        m.tracker.generic_access(inst, lanes, index, data is not None, how != WEAK, cta_scoped=how == STRONG_CTA)
    elif space == "global":
        note_global(m, lanes, index, data is not None, inst, how)
    if data is None:
        if space == "global" and nbytes == 4 and serving_checks.active():
            _check_page_table_read(m, inst, lanes, addresses, buffer[index])
        return buffer[index]
    if words is not None:
        words.store(buffer, data)
    else:
        buffer[index] = data
    return None


def note_global(m: Machine, lanes: np.ndarray, index: np.ndarray | StridedBox | Words, write: bool, inst=None,
                how: int = WEAK) -> None:
    """Note global bytes `index` ([n, k] flat buffer positions, row i touched by lane `lanes[i]`; a TMA box's
    `StridedBox`; a store's aligned `Words`) accessed by `inst` as `how` in the happens-before of global memory
    (`global_order`), and in the memory's access log when a worker runs a group of CTAs
    (`tessera.interpreters.parallel`)."""
    order = getattr(m, "global_order", None)
    box = isinstance(index, StridedBox)  # one thread's TMA box read: its records through strided views
    if order is not None and inst is not None:
        if box and not write:
            order.read_box(inst, int(lanes[0]), index, how)
        else:
            order.access(inst, lanes, index.index() if box else index, write, how)
    log = m.memory.log
    if log is not None:
        index = index.index() if isinstance(index, (StridedBox, Words)) else index
        gx, gy, _ = m.grid
        cta = m.ctaid[m.lane_cta[lanes]]
        log.note(0, index, (cta[:, 0] + gx * (cta[:, 1] + gy * cta[:, 2]))[:, None], write)


def _check_page_table_read(m: Machine, inst, lanes: np.ndarray, addresses: np.ndarray, words: np.ndarray) -> None:
    """`serving_checks`: a page number read from a paged cache's table lies in the cache. The gather's cp.async
    reads a row at cache + page x page bytes, which for a page out of range is another allocation's bytes
    (this executor's allocations are contiguous), so the entry is checked where the kernel reads it."""
    index = np.searchsorted(m.memory._starts, addresses, side="right") - 1
    for k in np.unique(index):
        here = index == k
        values = words[here].view("<i4").reshape(-1)
        problem = serving_checks.check_page_numbers(m.memory.segments[k].name, values)
        if problem:
            raise m.error(inst, problem, int(lanes[here][0]))


def _check_sequence_store(m: Machine, inst, lanes: np.ndarray, addresses: np.ndarray) -> None:
    """`serving_checks`: a store into a packed output stays in the rows of its CTA's sequence."""
    segments = m.memory.segments
    index = np.searchsorted(m.memory._starts, addresses, side="right") - 1
    for k in np.unique(index):
        here = index == k
        z = m.ctaid[m.lane_cta[lanes[here]], 2]
        problem = serving_checks.check_byte_store(segments[k].name, addresses[here] - segments[k].start, z)
        if problem:
            raise m.error(inst, problem, int(lanes[here][0]))


# region ld, st
def vector_width(mods) -> int:
    found = mods.take("v2", "v4", "v8")
    return int(found[1:]) if found else 1


def _param_space(ops: Operands, inst, space: str, operand) -> str:
    """`space`, or "local" for ld.param/st.param of a function's or call site's .param variable (these live
    per thread in local memory, see state.py)."""
    if space == "param" and isinstance(operand, Address) and isinstance(operand.base, Symbol) and \
            operand.base.name in ops.m.local_params:
        return "local"
    return space


def _access_modifiers(ops: Operands, inst, mods, address_at: int):
    """(state space, vector width, type) of an ld/st whose address is operand `address_at`; the ordering,
    scope and cache modifiers are dropped (the executor's memory is sequentially consistent and uncached)."""
    space = take_space(mods, "generic")
    if len(inst.operands) > address_at:
        space = _param_space(ops, inst, space, inst.operands[address_at])
    mods.drop(*IGNORED_QUALIFIERS)
    mods.drop_prefixed("L1::", "L2::")
    return space, vector_width(mods), mods.type()


_STRONG_SEMANTICS = ("relaxed", "acquire", "release", "acq_rel", "volatile")


def sync_locations(m: Machine, space: str, lanes: np.ndarray, addresses) -> tuple[np.ndarray, np.ndarray]:
    """(lanes, locations) of the strong accesses of `lanes` at `addresses` for release/acquire
    (`global_order`): a global byte's flat position, or -1 - the flat index of a shared byte."""
    addresses = per_lane(addresses, lanes.shape, np.int64)
    if space == "generic":
        window = addresses // WINDOW_SIZE
        global_ = (addresses >= GLOBAL_BASE) & (window == 0)
        shared = window == SHARED_WINDOW // WINDOW_SIZE
        keep = global_ | shared
        where = np.where(global_, addresses - GLOBAL_BASE,
                         -1 - m.shared_flat(lanes, np.where(shared, addresses - SHARED_WINDOW, 0)))
        return lanes[keep], where[keep]
    if space == "global":
        return lanes, addresses - GLOBAL_BASE
    if space == "shared":
        return lanes, -1 - m.shared_flat(lanes, addresses)
    return lanes[:0], addresses[:0]


def seeds_cas(m: Machine, inst) -> bool:
    """Whether the weak load `inst` reads the expected value of an `atom.cas` at its own address: its
    destination, or a register `mov` copies it into (a float's bits handed to the cas: `float old = *p; ...
    atomicCAS((int*)p, __float_as_int(old), ...)`), is the cas's compare operand (nvcc's atomicCAS loops, the
    CUDA guide's `old = *p; do { assumed = old; old = atomicCAS(p, assumed, f(assumed)); } while (assumed !=
    old)`). Such a load is taken as relaxed (strong, .gpu) by the race checks (`global_order`): the cas checks
    the value it read, so its races with other threads' atomics at that address decide nothing the cas does
    not check again."""
    seeds = getattr(m, "cas_seeds", None)
    if seeds is None:  # such loads (by identity: a module built without source lines has them all 0), once
        instructions = m.entry.instructions
        cas = {(i.operands[1], i.operands[2]) for i in instructions
               if i.opcode == "atom" and "cas" in i.modifiers and len(i.operands) == 4}
        copies: dict[Reg, set[Reg]] = {}  # register -> the registers a mov copies it into
        for i in instructions:
            if i.opcode == "mov" and len(i.operands) == 2 and all(isinstance(o, Reg) for o in i.operands):
                copies.setdefault(i.operands[1], set()).add(i.operands[0])
        seeds = m.cas_seeds = frozenset(id(i) for i in instructions if i.opcode == "ld" and len(i.operands) == 2
                                        and any((i.operands[1], r) in cas for r in _copies_of(i.operands[0], copies)))
    return id(inst) in seeds


def _copies_of(register, copies: dict) -> set:
    """`register` and every register a chain of movs copies it into (`copies`: register -> direct copies)."""
    found, todo = {register}, [register]
    while todo:
        for r in copies.get(todo.pop(), ()):
            if r not in found:
                found.add(r)
                todo.append(r)
    return found


@opcode("ld", "ldu")
def decode_ld(ops: Operands, inst, mods):
    strong = any(q in inst.modifiers for q in _STRONG_SEMANTICS)
    how = strong_kind(inst.modifiers) if strong or seeds_cas(ops.m, inst) else WEAK
    acquire = "acquire" in inst.modifiers
    space, width, t = _access_modifiers(ops, inst, mods, 1)
    if len(inst.operands) not in (2, 3):
        raise ops.refuse(inst, "ld needs a destination and an address")
    dests = elements(inst.operands[0])
    if len(dests) != width:
        raise ops.refuse(inst, f"{width} destination(s) expected, got {len(dests)}")
    writers = [ops.write(inst, d, t) for d in dests]
    address = ops.address(inst, inst.operands[1])
    nbytes = max(t.bits // 8, 1)
    m = ops.m

    read_only = inst.opcode == "ldu" or "nc" in inst.modifiers

    def run(sel):
        lanes = lanes_of(m, sel)
        where = address(sel)
        if read_only and m.global_order is not None and space in ("global", "generic"):
            _check_read_only(m, inst, space, lanes, where, nbytes * width)
        data = access(m, inst, space, lanes, where, nbytes * width, watched=not strong, how=how)
        if strong and m.global_order is not None and m.global_order.releases:
            m.global_order.acquire(*sync_locations(m, space, lanes, where), how, now=acquire)
        values = np.ascontiguousarray(data).view(t.dtype).reshape(len(lanes), width)
        for i, w in enumerate(writers):
            w(sel, values[:, i])

    if strong and space in ("global", "generic", "shared"):
        return _spin_wait(m, inst, run)
    return run


def _check_read_only(m: Machine, inst, space: str, lanes: np.ndarray, addresses, nbytes: int) -> None:
    """`ld.global.nc` and `ldu` (`__ldg`, nvcc's loads through `const __restrict__` pointers) read through the
    non-coherent read-only path, whose data must be read-only for the whole launch (the CUDA programming guide's
    read-only data cache): its cache is not kept coherent with writes, so no synchronisation makes a write of the
    launch visible to it. Such a load of global bytes that a thread of this launch wrote before it is reported
    (`GlobalOrder.check_read_only`); a write after it (an in-place `x[i] = f(__ldg(&x[i]))`) is judged as any
    write after a weak read."""
    addresses = per_lane(addresses, lanes.shape, np.int64)
    if space == "generic":
        inside = (addresses >= GLOBAL_BASE) & (addresses // WINDOW_SIZE == 0)
        lanes, addresses = lanes[inside], addresses[inside]
    if len(lanes):
        check_access(m, inst, "global", lanes, addresses, nbytes, nbytes)
        m.global_order.check_read_only(inst, lanes, (addresses - GLOBAL_BASE)[:, None] + np.arange(nbytes))


def _spin_wait(m: Machine, inst, run) -> Step:
    """A strong load of global or shared memory as a spin wait (CUTLASS's `GenericBarrier::wait_eq`: thread 0
    loops on `ld.acquire.gpu` until a flag in a workspace reaches its value, with no nanosleep; a warp polling a
    flag in shared memory with `ld.acquire.cta.shared`): a lane that comes back to the same load with no strong
    write, atomic or synchronisation since (`sync_epoch` unchanged) would read the same value, so it parks before
    the load, as after `nanosleep`, until nothing else can run, and then loads again. Any thread may be delayed (a
    legal timing); without it min-pc scheduling runs the loop forever and never the CTA that would write the flag,
    which sits at a higher pc, and a delayed warp (`schedule`) would never run while its CTA's spinner can. Woken
    twice with no progress between is a deadlock (`schedule`), reported at the load."""

    def run_load(lanes, active):
        pc = int(m.pc[lanes[0]])
        spinning = (m.spin_pc[active] == pc) & (m.spin_epoch[active] == m.sync_epoch)
        parked, going = active[spinning], active[~spinning]
        if len(going):
            run(going)
        m.spin_pc[going] = pc
        m.spin_epoch[going] = m.sync_epoch
        if not len(parked):
            m.pc[lanes] += 1
            return
        m.pc[np.setdiff1d(lanes, parked, assume_unique=True)] += 1
        m.spin_pc[parked] = -1  # woken, it loads again
        m.status[parked] = PARK
        m.park_address[parked] = -1
        m.park_test[parked] = True

    return Step(inst, run_load, control=True)


@opcode("st")
def decode_st(ops: Operands, inst, mods):
    if mods.take("async"):  # a copy into a CTA of the cluster (`bulk_copy`, which imports this module)
        return DECODERS["st.async"](ops, inst, mods)
    strong = any(q in inst.modifiers for q in _STRONG_SEMANTICS)
    how = strong_kind(inst.modifiers) if strong else WEAK
    release = "release" in inst.modifiers
    space, width, t = _access_modifiers(ops, inst, mods, 0)
    if space == "param":
        raise ops.refuse(inst, "st.param to a kernel parameter (read-only)")
    if len(inst.operands) not in (2, 3):
        raise ops.refuse(inst, "st needs an address and a source")
    sources = elements(inst.operands[1])
    if len(sources) != width:
        raise ops.refuse(inst, f"{width} source(s) expected, got {len(sources)}")
    readers = [ops.read(inst, s, t) if not isinstance(s, Sink) else None for s in sources]
    if any(r is None for r in readers):
        raise ops.refuse(inst, "a sink in a store")
    address = ops.address(inst, inst.operands[0])
    nbytes = max(t.bits // 8, 1)
    m = ops.m

    def run(sel):
        lanes = lanes_of(m, sel)
        values = np.empty((len(lanes), width), t.dtype)
        for i, r in enumerate(readers):
            values[:, i] = r(sel)
        where = address(sel)
        access(m, inst, space, lanes, where, nbytes * width, values.view(np.uint8).reshape(len(lanes), -1),
               watched=not strong, how=how)
        if strong and m.global_order is not None:
            m.global_order.release(*sync_locations(m, space, lanes, where), how, fenced=not release)
        if strong:
            m.sync_epoch += 1  # a write that may end another thread's spin wait (`_spin_wait`)

    return run


# endregion
# region cvta, isspacep, prefetch
@opcode("cvta")
def decode_cvta(ops: Operands, inst, mods):
    to = bool(mods.take("to"))
    space = take_space(mods)
    if space is None:
        raise ops.refuse(inst, "cvta needs a state space")
    t = mods.type()
    if t.name not in ("u32", "u64"):
        raise ops.refuse(inst, "cvta size must be .u32 or .u64")
    if t.name == "u32" and not to:
        raise ops.refuse(inst, "32-bit generic addresses (cvta to generic with .u32)")
    src = inst.operands[1]
    source_type = ptx_type("u64") if isinstance(src, Reg) and ops.register(inst, src)[1].bits == 64 else t
    read = ops.read(inst, src, source_type)
    write = ops.write(inst, inst.operands[0], t)
    base = np.uint64(_WINDOWS.get(space, 0))
    m = ops.m
    if not to:
        return lambda sel: write(sel, (np.asarray(read(sel), np.uint64) + base).astype(t.dtype))

    def run_to(sel):
        x = np.asarray(read(sel), np.uint64)
        if base:
            outside = (x < base) | (x >= base + np.uint64(WINDOW_SIZE))
            if np.any(outside):
                lane = lanes_of(m, sel)[int(np.argmax(np.broadcast_to(outside, (len(lanes_of(m, sel)),))))]
                raise m.error(inst, f"address {int(np.broadcast_to(x, outside.shape)[np.argmax(outside)]):#x} is "
                                    f"not a generic {space} address", int(lane))
        write(sel, (x - base).astype(t.dtype))

    return run_to


@opcode("isspacep")
def decode_isspacep(ops: Operands, inst, mods):
    space = take_space(mods)
    if space is None:
        raise ops.refuse(inst, "isspacep needs a state space")
    read = ops.read(inst, inst.operands[1], ptx_type("u64"))
    write = ops.write(inst, inst.operands[0], ptx_type("pred"))
    window = _WINDOWS.get(space, 0) // WINDOW_SIZE
    return lambda sel: write(sel, (np.asarray(read(sel), np.uint64) // np.uint64(WINDOW_SIZE)) == window)


@opcode("prefetch", "prefetchu")
def decode_prefetch(ops: Operands, inst, mods):
    mods.left = []  # a prefetch has no effect on values
    return lambda sel: None


_PRIMARY_PRIORITIES = ("L2::evict_last", "L2::evict_normal", "L2::evict_first", "L2::evict_unchanged")
_SECONDARY_PRIORITIES = ("L2::evict_first", "L2::evict_unchanged")


@opcode("createpolicy")
def decode_createpolicy(ops: Operands, inst, mods):
    """createpolicy.fractional.L2::primary{.L2::secondary}.b64 policy{, fraction}, createpolicy.range{.global}...
    .b64 policy, [a], primary-size, total-size and createpolicy.cvt.L2.b64 policy, access-property [PTX ISA,
    createpolicy]: an opaque 64-bit cache eviction policy for the `.L2::cache_hint` operands of ld/st/cp.async
    (Triton's `eviction_policy=`). Caches do not change values, and those operands are ignored, so the policy
    only has to be a well-formed b64 value: its primary and secondary priorities' indices. An immediate fraction
    outside (0.0, 1.0] is refused, as ptxas refuses it; a register fraction (libcu++'s `annotated_ptr` passes
    1.0f in one) outside it stops the run naming the thread."""
    kind = mods.take("fractional", "range", "cvt")
    if kind is None:
        raise ops.refuse(inst, "createpolicy needs .fractional, .range or .cvt")
    if kind == "cvt":
        mods.take("L2")
        primary, secondary, count = 0, 0, (2,)
    else:
        if kind == "range":
            mods.take("global")
        primary = mods.take(*_PRIMARY_PRIORITIES)
        if primary is None:
            raise ops.refuse(inst, f"createpolicy needs a primary priority (.{', .'.join(_PRIMARY_PRIORITIES)})")
        secondary = mods.take(*_SECONDARY_PRIORITIES)
        count = (1, 2) if kind == "fractional" else (4,)
        primary = 1 + _PRIMARY_PRIORITIES.index(primary)
        secondary = 0 if secondary is None else 1 + _SECONDARY_PRIORITIES.index(secondary)
    if mods.type().name != "b64" or len(inst.operands) not in count:
        raise ops.refuse(inst, f"createpolicy.{kind} takes .b64 and {' or '.join(map(str, count))} operands")
    fraction_of = None
    if kind == "fractional" and len(inst.operands) == 2:
        fraction = inst.operands[1]
        if isinstance(fraction, FloatImm):
            value = np.uint64(fraction.bits).view(np.float64) if fraction.width == 64 \
                else np.uint32(fraction.bits).view(np.float32)
            if not 0.0 < value <= 1.0:
                raise ops.refuse(inst, "createpolicy.fractional needs a fraction in (0.0, 1.0]")
        else:
            fraction_of = ops.read(inst, fraction, ptx_type("f32"))
    write = ops.write(inst, inst.operands[0], ptx_type("b64"))
    policy = np.uint64(primary | secondary << 4)
    m = ops.m

    def run(sel):
        if fraction_of is not None:
            lanes = lanes_of(m, sel)
            values = np.broadcast_to(np.asarray(fraction_of(sel), np.float32), lanes.shape)
            outside = ~((values > 0) & (values <= 1))
            if any_set(outside):
                i = int(np.argmax(outside))
                raise m.error(inst, f"createpolicy.fractional: the fraction {float(values[i])} is outside "
                                    "(0.0, 1.0]", int(lanes[i]))
        write(sel, policy)

    return run


# endregion
