"""Memory instructions: ld, st (scalars and .v2/.v4/.v8 vectors), cvta, isspacep, prefetch, atom/red, and
the Ampere-style cp.async with commit/wait groups.

Spaces and addresses are those of `state`: `.global` (and `.const`, whose variables live in global memory),
`.shared{::cta,::cluster}` (a cluster is one CTA), `.local`, `.param` (read-only) and generic addresses (no
space: routed by window). Every access is checked before it happens: it must lie inside one allocation of its
space and be aligned to its size (the whole vector for .v2/.v4/.v8); otherwise the run stops naming the
instruction, the thread and the address. Cache, eviction and memory-ordering qualifiers have no effect on
values in this sequentially consistent executor and are accepted (`.nc`, `.ca/.cg/.cs/.lu/.cv`, `.L1::*`,
`.L2::*`, `.weak/.volatile/.relaxed/.acquire/.release` and scopes).

`cp.async.{ca,cg}.shared.global [d], [s], size{, src-size | ignore-src}` reads its source when issued and
writes shared memory when a `cp.async.wait_group N` / `wait_all` of the issuing thread covers its group
(groups are per thread, closed by `commit_group`): its data is not visible before the wait, as in PTX.
`cp.async.mbarrier.arrive{.noinc}` lands the thread's pending copies, then (with `.noinc`) arrives.
`atom`/`red` run lane by lane in lane order (one legal serialisation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.interpreters.ptx.decode import Operands, elements, opcode
from tessera.interpreters.ptx.state import (
    GLOBAL_BASE,
    LOCAL_WINDOW,
    PARAM_WINDOW,
    SHARED_WINDOW,
    WINDOW_SIZE,
    Machine,
)
from tessera.interpreters.ptx.syntax import Reg, Sink
from tessera.interpreters.ptx.types import ptx_type

_IGNORED = ("weak", "volatile", "relaxed", "acquire", "release", "cta", "cluster", "gpu", "sys", "ca", "cg", "cs",
            "lu", "cv", "wb", "wt", "nc", "unified", "mmio")
_SPACES = {"global": "global", "const": "global", "shared": "shared", "shared::cta": "shared",
           "shared::cluster": "shared", "local": "local", "param": "param"}
_WINDOWS = {"shared": SHARED_WINDOW, "local": LOCAL_WINDOW, "param": PARAM_WINDOW}


def take_space(mods, default: str | None = None) -> str | None:
    """The state space among the modifiers ("generic" when none), mapped as in `_SPACES`."""
    found = mods.take(*_SPACES)
    return _SPACES[found] if found else default


def lanes_of(m: Machine, sel) -> np.ndarray:
    return m.lane_ids if isinstance(sel, slice) else sel


def _split_generic(m: Machine, inst, lanes: np.ndarray, addresses: np.ndarray):
    """[(space, lanes, space addresses)] for generic addresses, by window."""
    parts = []
    window = addresses // WINDOW_SIZE
    for space, base in (("global", 0), ("shared", SHARED_WINDOW), ("local", LOCAL_WINDOW), ("param", PARAM_WINDOW)):
        here = window == base // WINDOW_SIZE
        if here.any():
            parts.append((space, lanes[here], addresses[here] - base, np.flatnonzero(here)))
    covered = sum(len(p[1]) for p in parts)
    if covered != len(lanes):
        raise m.error(inst, "generic address outside every state space window", int(lanes[0]))
    return parts


def _check(m: Machine, inst, space: str, lanes: np.ndarray, addresses: np.ndarray, nbytes: int, align: int):
    if space == "global":
        bad = m.memory.outside(addresses, nbytes)
        limit = None
    else:
        limit = {"shared": m.shared_bytes, "local": m.local_bytes, "param": len(m.params)}[space]
        bad = (addresses < 0) | (addresses + nbytes > limit)
    if bad.any():
        i = int(np.argmax(bad))
        size = "" if limit is None else f" (the {space} space has {limit} bytes)"
        raise m.error(inst, f"{nbytes}-byte access at {space} address {int(addresses[i]):#x} is out of bounds{size}",
                      int(lanes[i]))
    misaligned = addresses % align != 0
    if misaligned.any():
        i = int(np.argmax(misaligned))
        raise m.error(inst, f"misaligned {nbytes}-byte access at {space} address {int(addresses[i]):#x} "
                            f"(needs {align}-byte alignment)", int(lanes[i]))


def _flat(m: Machine, space: str, lanes: np.ndarray, addresses: np.ndarray, nbytes: int):
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
           data: np.ndarray | None = None, align: int | None = None) -> np.ndarray | None:
    """Read (data None) or write `nbytes` per lane at `addresses` of `space` ("generic" allowed); reads
    return uint8 [n, nbytes]."""
    addresses = np.broadcast_to(np.asarray(addresses, np.int64), lanes.shape)
    align = nbytes if align is None else align
    if space == "generic":
        out = np.zeros((len(lanes), nbytes), np.uint8) if data is None else None
        for sub_space, sub_lanes, sub_addresses, index in _split_generic(m, inst, lanes, addresses):
            part = access(m, inst, sub_space, sub_lanes, sub_addresses, nbytes,
                          None if data is None else data[index], align)
            if out is not None:
                out[index] = part
        return out
    if space == "param" and data is not None:
        raise m.error(inst, "the parameter space is read-only", int(lanes[0]))
    _check(m, inst, space, lanes, addresses, nbytes, align)
    buffer, index = _flat(m, space, lanes, addresses, nbytes)
    if data is None:
        return buffer[index]
    buffer[index] = data
    return None


# region ld, st
def _vector(mods) -> int:
    found = mods.take("v2", "v4", "v8")
    return int(found[1:]) if found else 1


@opcode("ld", "ldu")
def decode_ld(ops: Operands, inst, mods):
    space = take_space(mods, "generic")
    mods.drop(*_IGNORED)
    mods.drop_prefixed("L1::", "L2::")
    width = _vector(mods)
    t = mods.type()
    if len(inst.operands) not in (2, 3):
        raise ops.refuse(inst, "ld needs a destination and an address")
    dests = elements(inst.operands[0])
    if len(dests) != width:
        raise ops.refuse(inst, f"{width} destination(s) expected, got {len(dests)}")
    writers = [ops.write(inst, d, t) for d in dests]
    address = ops.address(inst, inst.operands[1])
    nbytes = max(t.bits // 8, 1)
    m = ops.m

    def run(sel):
        lanes = lanes_of(m, sel)
        data = access(m, inst, space, lanes, address(sel), nbytes * width)
        values = np.ascontiguousarray(data).view(t.dtype).reshape(len(lanes), width)
        for i, w in enumerate(writers):
            w(sel, values[:, i])

    return run


@opcode("st")
def decode_st(ops: Operands, inst, mods):
    space = take_space(mods, "generic")
    if space == "param":
        raise ops.refuse(inst, "st.param (function calls)")
    mods.drop(*_IGNORED)
    mods.drop_prefixed("L1::", "L2::")
    width = _vector(mods)
    t = mods.type()
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
        access(m, inst, space, lanes, address(sel), nbytes * width, values.view(np.uint8).reshape(len(lanes), -1))

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


# endregion
# region atom, red
_ATOMIC = {"add": lambda old, x: old + x, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and,
           "or": np.bitwise_or, "xor": np.bitwise_xor, "exch": lambda old, x: x}


@opcode("atom", "red")
def decode_atom(ops: Operands, inst, mods):
    space = take_space(mods, "generic")
    mods.drop(*_IGNORED)
    mods.drop_prefixed("L2::")
    operation = mods.take("add", "min", "max", "and", "or", "xor", "exch", "cas", "inc", "dec")
    t = mods.type()
    if operation is None or t.kind not in ("b", "u", "s", "f") or t.bits not in (32, 64) or \
            (t.kind == "f" and operation not in ("add", "exch", "min", "max")):
        raise ops.refuse(inst, f"{inst.opcode} variant")
    returns = inst.opcode == "atom"
    first = 1 if returns else 0
    address = ops.address(inst, inst.operands[first])
    values = [ops.read(inst, o, t) for o in inst.operands[first + 1:]]
    write = ops.write(inst, inst.operands[0], t) if returns else None
    nbytes = t.bits // 8
    m = ops.m

    def run(sel):
        lanes = lanes_of(m, sel)
        addresses = np.broadcast_to(np.asarray(address(sel), np.int64), lanes.shape)
        args = [np.broadcast_to(v(sel), lanes.shape) for v in values]
        old_values = np.empty(len(lanes), t.dtype)
        for i, lane in enumerate(lanes):  # one lane at a time, in lane order
            one = lanes[i:i + 1]
            old = access(m, inst, space, one, addresses[i:i + 1], nbytes).view(t.dtype)[0]
            x = [a[i] for a in args]
            if operation == "cas":
                new = x[1] if old == x[0] else old
            elif operation == "inc":
                new = t.dtype.type(0) if old >= x[0] else old + t.dtype.type(1)
            elif operation == "dec":
                new = x[0] if (old == 0 or old > x[0]) else old - t.dtype.type(1)
            else:
                new = _ATOMIC[operation](old, x[0])
            access(m, inst, space, one, addresses[i:i + 1], nbytes, np.asarray([new], t.dtype).view(np.uint8)[None])
            old_values[i] = old
        if write is not None:
            write(sel, old_values)

    return run


# endregion
# region cp.async (Ampere)
@dataclass
class AsyncCopy:
    """Copies of one cp.async instruction not yet landed: per lane its group, shared indices and data."""

    lanes: np.ndarray
    groups: np.ndarray
    index: np.ndarray
    data: np.ndarray


def land_copies(m: Machine, lanes: np.ndarray, before_group: np.ndarray | None) -> None:
    """Write the pending copies of `lanes` whose group < before_group[lane] (all when None)."""
    if not m.async_copies:
        return
    selected = np.zeros(m.lanes, bool)
    selected[lanes] = True
    limit = np.full(m.lanes, np.iinfo(np.int64).max) if before_group is None else np.zeros(m.lanes, np.int64)
    if before_group is not None:
        limit[lanes] = before_group
    keep = []
    for copy in m.async_copies:
        done = selected[copy.lanes] & (copy.groups < limit[copy.lanes])
        if done.any():
            m.shared[copy.index[done]] = copy.data[done]
        if not done.all():
            keep.append(AsyncCopy(copy.lanes[~done], copy.groups[~done], copy.index[~done], copy.data[~done]))
    m.async_copies = keep


def decode_cp_async(ops: Operands, inst, mods):
    m = ops.m
    if mods.take("commit_group"):
        return lambda sel: m.cp_groups.__setitem__(sel, m.cp_groups[sel] + 1)
    if mods.take("wait_group", "wait_all") is not None:
        if "wait_all" in inst.modifiers:
            def run_all(sel):
                lanes = lanes_of(m, sel)
                m.cp_groups[lanes] += 1
                land_copies(m, lanes, None)
            return run_all
        n = ops.static(inst, inst.operands[0])
        return lambda sel: land_copies(m, lanes_of(m, sel), m.cp_groups[lanes_of(m, sel)] - n)
    if mods.take("mbarrier"):
        from tessera.interpreters.ptx.sync import mbarrier_arrive_lanes

        mods.take("arrive")
        noinc = bool(mods.take("noinc"))
        space = take_space(mods, "generic")
        mods.drop("b64")
        address = ops.address(inst, inst.operands[0])

        def run_arrive(sel):
            lanes = lanes_of(m, sel)
            land_copies(m, lanes, None)
            if noinc:
                mbarrier_arrive_lanes(m, inst, space, lanes, address(sel), 1)
        return run_arrive
    kind = mods.take("ca", "cg")
    if kind is None or take_space(mods) != "shared" or take_space(mods) != "global":
        raise ops.refuse(inst, "cp.async form (expected cp.async.{ca,cg}.shared.global)")
    mods.drop_prefixed("L2::")
    dst, src = (ops.address(inst, o) for o in inst.operands[:2])
    size = ops.static(inst, inst.operands[2])
    if size not in (4, 8, 16) or (kind == "cg" and size != 16):
        raise ops.refuse(inst, f"cp.async.{kind} of {size} bytes")
    source_size, ignore = None, None
    if len(inst.operands) > 3:
        extra = inst.operands[3]
        if isinstance(extra, Reg) and ops.register(inst, extra)[1].kind == "pred":
            ignore = ops.read(inst, extra, ptx_type("pred"))
        else:
            source_size = ops.read(inst, extra, ptx_type("u32"))

    def run(sel):
        lanes = lanes_of(m, sel)
        count = np.full(len(lanes), size, np.int64)
        if source_size is not None:
            count = np.minimum(np.broadcast_to(np.asarray(source_size(sel), np.int64), count.shape), size)
        if ignore is not None:
            count = np.where(np.broadcast_to(ignore(sel), count.shape), 0, count)
        data = np.zeros((len(lanes), size), np.uint8)
        reading = count > 0
        if reading.any():
            source = np.broadcast_to(np.asarray(src(sel), np.int64), lanes.shape)
            got = access(m, inst, "global", lanes[reading], source[reading], size, align=size)
            data[reading] = np.where(np.arange(size) < count[reading][:, None], got, 0)
        target = np.broadcast_to(np.asarray(dst(sel), np.int64), lanes.shape)
        _check(m, inst, "shared", lanes, target, size, size)
        index = m.shared_flat(lanes, target)[:, None] + np.arange(size)
        m.async_copies.append(AsyncCopy(lanes.copy(), m.cp_groups[lanes].copy(), index, data))

    return run


# endregion
