"""atom and red [P#parallel-synchronization-and-communication-instructions-atom, -red]: scalar atomics and
reductions on global or shared memory (generic addresses routed by window), per operation the types ptxas accepts
for sm_90a (`ATOMIC_OPS`). Threads of one execution that hit one location update it one at a time in increasing
lane order, one legal serialisation (see `decode_atom`); `red.async` goes to `bulk_copy`. Each location is
checked as `memory` checks any access, and global ones are recorded for the races between CTAs (`reductions`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import ml_dtypes
import numpy as np

from tessera.interpreters.ptx.decode import DECODERS, Operands, Step, decode, elements, opcode
from tessera.interpreters.ptx.global_accesses import STRONG_CTA, strong_kind
from tessera.interpreters.ptx.memory import (
    IGNORED_QUALIFIERS,
    check_access,
    flat_offsets,
    lanes_of,
    note_global,
    split_generic,
    sync_locations,
    take_space,
)
from tessera.interpreters.ptx.numerics import flush_f32
from tessera.interpreters.ptx.state import PARK, SHARED_WINDOW, Machine
from tessera.interpreters.ptx.syntax import Address
from tessera.interpreters.ptx.types import PtxType, half_pair, pack_pair, ptx_type
from tessera.interpreters.truth import any_set


@dataclass(frozen=True)
class AtomicOp:
    """One atom/red operation: the scalar types it is defined on, its update new = apply(old, b, c), and
    `combine`, an associative and commutative ufunc that folds any number of updates of one location in any
    order to the same value (None when the order matters)."""

    types: tuple[str, ...]
    apply: Callable[[np.ndarray, np.ndarray, np.ndarray | None], np.ndarray]
    combine: np.ufunc | None = None


ATOMIC_OPS = {
    "add": AtomicOp(("u32", "s32", "u64", "f32", "f64"), lambda old, b, c: old + b, np.add),
    "min": AtomicOp(("u32", "s32", "u64", "s64"), lambda old, b, c: np.minimum(old, b), np.minimum),
    "max": AtomicOp(("u32", "s32", "u64", "s64"), lambda old, b, c: np.maximum(old, b), np.maximum),
    "and": AtomicOp(("b32", "b64"), lambda old, b, c: old & b, np.bitwise_and),
    "or": AtomicOp(("b32", "b64"), lambda old, b, c: old | b, np.bitwise_or),
    "xor": AtomicOp(("b32", "b64"), lambda old, b, c: old ^ b, np.bitwise_xor),
    "inc": AtomicOp(("u32",), lambda old, b, c: np.where(old >= b, old.dtype.type(0), old + old.dtype.type(1))),
    "dec": AtomicOp(("u32",), lambda old, b, c: np.where((old == 0) | (old > b), b, old - old.dtype.type(1))),
    "exch": AtomicOp(("b32", "b64"), lambda old, b, c: b),
    "cas": AtomicOp(("b16", "b32", "b64"), lambda old, b, c: np.where(old == b, c, old)),  # .b16: sm_70+
}
_NOT_REDUCTIONS = ("exch", "cas")  # atom only: there is no red.exch or red.cas
_HALF_ADD_TYPES = ("f16", "bf16", "f16x2", "bf16x2")  # atom/red.add.noftz: scalar halves and packed pairs


def _half_add(t: PtxType):
    """new = old + b for .noftz.{f16,bf16} (one rounding of the exact sum: NumPy computes 16-bit float sums in
    float32, exact enough that rounding twice equals rounding once) and elementwise for the packed pairs."""
    if t.kind == "f":
        return lambda old, b, c: (old.astype(np.float32) + b.astype(np.float32)).astype(t.dtype)
    half = np.dtype(ml_dtypes.bfloat16) if t.half == "bf16" else np.dtype(np.float16)

    def add_pairs(old, b, c):
        (old_lo, old_hi), (b_lo, b_hi) = half_pair(old, t.half), half_pair(b, t.half)
        return pack_pair((old_lo + b_lo).astype(half).view(np.uint16), (old_hi + b_hi).astype(half).view(np.uint16))

    return add_pairs


def _flushing_add(old, b, c):
    """atom.add.f32 on global memory flushes subnormal inputs and results to sign-preserving zero."""
    return flush_f32(flush_f32(old) + flush_f32(b))


def _atomic_locations(m: Machine, inst, space: str, lanes: np.ndarray, addresses: np.ndarray, nbytes: int):
    """[(space, positions into lanes, buffer, flat byte indices [n, nbytes])] of checked atomic accesses."""
    whole = [(space, lanes, addresses, np.arange(len(lanes)))]
    parts = split_generic(m, inst, lanes, addresses) if space == "generic" else whole
    located = []
    for sub_space, sub_lanes, sub_addresses, positions in parts:
        if sub_space not in ("global", "shared"):
            raise m.error(inst, f"atomic access to the {sub_space} space (atom/red need global or shared memory)",
                          int(sub_lanes[0]))
        check_access(m, inst, sub_space, sub_lanes, sub_addresses, nbytes, nbytes)
        located.append((sub_space, positions, *flat_offsets(m, sub_space, sub_lanes, sub_addresses, nbytes)))
    return located


def _apply_atomics(buffer: np.ndarray, index: np.ndarray, lanes: np.ndarray, dtype: np.dtype, apply, b, c,
                   combine: np.ufunc | None) -> np.ndarray | None:
    """Update the locations `index` [n, nbytes] of `buffer`, lane by lane in increasing lane order where lanes
    share a location; the old value each lane saw (None when `combine` folds the updates instead)."""
    nbytes = index.shape[1]
    start = index[:, 0]

    def load(rows):
        return np.ascontiguousarray(buffer[rows]).view(dtype).reshape(-1)

    def store(rows, values):
        buffer[rows] = np.ascontiguousarray(np.asarray(values, dtype)).view(np.uint8).reshape(-1, nbytes)

    if combine is not None:
        _, first, inverse = np.unique(start, return_index=True, return_inverse=True)
        current = load(index[first])
        combine.at(current, inverse.reshape(-1), b)
        store(index[first], current)
        return None
    # Round r applies the r-th update (in lane order) of every location at once: the locations of one round
    # are distinct, and each location sees its updates in lane order.
    order = np.lexsort((lanes, start))
    ordered = start[order]
    begins = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    rank = np.empty(len(start), np.int64)
    rank[order] = np.arange(len(start)) - np.repeat(begins, np.diff(np.r_[begins, len(start)]))
    rounds = np.argsort(rank, kind="stable")
    old = np.empty(len(start), dtype)
    for pick in np.split(rounds, np.cumsum(np.bincount(rank))[:-1]):
        rows = index[pick]
        current = load(rows)
        old[pick] = current
        store(rows, apply(current, b[pick], None if c is None else c[pick]))
    return old


@opcode("atom", "red")
def decode_atom(ops: Operands, inst, mods):
    """atom{.sem}{.scope}{.space}.op.type d, [a], b{, c} and red{...}.op.type [a], b: new = op(old, b{, c})
    stored atomically, atom returning old. Where several threads of one execution hit one location, their
    updates apply one at a time in increasing lane order, which is thread order (CTAs in launch order, x
    fastest, then tid): a legal serialisation. red's add (integer), min, max, and, or, xor fold them with one
    ufunc.at instead, which gives the same values. Scalar types only, per operation those that ptxas accepts
    for sm_90a (`ATOMIC_OPS`); global or shared memory; `.L2::cache_hint` and its policy operand are ignored."""
    if inst.opcode == "red" and mods.take("async"):  # a reduction into a CTA of the cluster (`bulk_copy`)
        return DECODERS["red.async"](ops, inst, mods)
    space = take_space(mods, "generic")
    if space not in ("generic", "global", "shared"):
        raise ops.refuse(inst, f"{inst.opcode} on the .{space} space (needs .global or .shared)")
    release = bool(mods.take("release", "acq_rel"))  # a semaphore signal, not an accumulation
    acquire = inst.opcode == "atom" and ("acquire" in inst.modifiers or "acq_rel" in inst.modifiers)
    how = strong_kind(inst.modifiers)  # atom and red are strong (.relaxed and .gpu by default)
    mods.drop(*IGNORED_QUALIFIERS)
    hint = mods.take("L2::cache_hint")
    vector = mods.take("v2", "v4", "v8")
    if vector:
        mods.left = []
        return _vector_atom(ops, inst, vector, space)
    operation = mods.take(*ATOMIC_OPS)
    if operation is None:
        raise ops.refuse(inst, f"{inst.opcode} needs an operation (.{', .'.join(ATOMIC_OPS)})")
    noftz = bool(mods.take("noftz"))
    t = mods.type()
    returns = inst.opcode == "atom"
    half_add = operation == "add" and t.name in _HALF_ADD_TYPES
    if half_add != noftz or (noftz and operation != "add"):
        raise ops.refuse(inst, f"{inst.opcode}.add on .{t.name} " + ("needs .noftz" if half_add else "with .noftz"))
    if not returns and operation in _NOT_REDUCTIONS:
        raise ops.refuse(inst, f"red.{operation} (only atom has .{operation})")
    if t.name not in ATOMIC_OPS[operation].types and not half_add:
        supported = ", ".join(f".{name}" for name in ATOMIC_OPS[operation].types)
        raise ops.refuse(inst, f"{inst.opcode}.{operation} on .{t.name} (supported: {supported})")
    first = 1 if returns else 0
    count = first + 1 + (2 if operation == "cas" else 1) + (1 if hint else 0)
    if len(inst.operands) != count:
        raise ops.refuse(inst, f"{inst.opcode}.{operation} needs {count} operands")
    address = ops.address(inst, inst.operands[first])
    values = [ops.read(inst, o, t) for o in inst.operands[first + 1:count - (1 if hint else 0)]]
    write = ops.write(inst, inst.operands[0], t) if returns else None
    op = ATOMIC_OPS[operation]
    if half_add:
        op = AtomicOp(_HALF_ADD_TYPES, _half_add(t))
    combine = op.combine if not returns and t.kind not in ("f", "x2") else None
    m = ops.m

    def run(sel):
        lanes = lanes_of(m, sel)
        addresses = np.broadcast_to(np.asarray(address(sel), np.int64), lanes.shape)
        args = [np.broadcast_to(np.asarray(v(sel), t.dtype), lanes.shape) for v in values]
        old = np.empty(len(lanes), t.dtype)
        touched = []
        for part_space, positions, buffer, index in _atomic_locations(m, inst, space, lanes, addresses, t.bits // 8):
            apply = _flushing_add if (t.name, operation, part_space) == ("f32", "add", "global") else op.apply
            b = args[0][positions]
            c = args[1][positions] if len(args) > 1 else None
            with np.errstate(over="ignore", invalid="ignore"):
                seen = _apply_atomics(buffer, index, lanes[positions], t.dtype, apply, b, c, combine)
            if seen is not None:
                old[positions] = seen
            if part_space == "global":
                touched.append((lanes[positions], index))
            else:  # a plain access on either side needs synchronisation with it (`asynchrony.generic_access`)
                m.tracker.generic_access(inst, lanes[positions], index, True, True, atomic=True,
                                         cta_scoped=how == STRONG_CTA)
        watch = getattr(m, "watch", None)
        if watch is not None:
            on_global = addresses < SHARED_WINDOW if space == "generic" else np.full(lanes.shape, space == "global")
            if any_set(on_global):
                watch.on_add(inst, lanes[on_global], addresses[on_global], t.bits // 8,
                             reduction=not returns and not release)
        for part_lanes, index in touched:  # after the watch: its message names the CTAs for add/store races
            note_global(m, part_lanes, index, True, inst, how)
        order = m.global_order
        if order is not None:
            located = sync_locations(m, space, lanes, addresses)
            order.release(*located, how, fenced=not release)
            if inst.opcode == "atom":
                order.acquire(*located, how, now=acquire)
        if operation != "cas" or any_set(old == args[0]):
            m.sync_epoch += 1  # a write that may end another thread's spin wait (`nanosleep`, `_park_failed_cas`)
        if write is not None:
            write(sel, old)
        return old

    if operation == "cas":
        return _park_failed_cas(m, inst, run, values[0])
    return run


_VECTOR_ATOM = {"add": ("f32", "f16", "bf16", "f16x2", "bf16x2"), "min": ("f16", "bf16", "f16x2", "bf16x2"),
                "max": ("f16", "bf16", "f16x2", "bf16x2")}
"""sm_90's vector atom/red on global memory [P#parallel-synchronization-and-communication-instructions-atom]:
the operations and element types of `.v2`/`.v4` (and `.v8` of 16-bit elements)."""


def _vector_atom(ops: Operands, inst, vector: str, space: str):
    """atom/red.global.op.vN.type (CUDA's atomicAdd on float2 and float4): each element is its own atomic on
    consecutive elements, as the ISA says (the vector is not one atomic), so element i runs as the scalar
    instruction at offset i * size with the i-th source and destination, one after another."""
    operation = next((x for x in inst.modifiers if x in _VECTOR_ATOM), None)
    t = next((ptx_type(x) for x in inst.modifiers if ptx_type(x) is not None), None)
    width = int(vector[1:])
    if space not in ("global", "generic") or operation is None or t is None or t.name not in _VECTOR_ATOM[operation] \
            or (width == 8 and t.bits != 16):
        raise ops.refuse(inst, f"vector {inst.opcode} .{vector} (supported: .global .add/.min/.max of .v2/.v4 .f16x2 "
                               ".bf16x2 .f16 .bf16 and .add .f32, .v8 of .f16 and .bf16)")
    returns = inst.opcode == "atom"
    first = 1 if returns else 0
    address = inst.operands[first]
    sources = elements(inst.operands[first + 1])
    dests = elements(inst.operands[0]) if returns else (None,) * width
    if not isinstance(address, Address) or len(sources) != width or len(dests) != width:
        raise ops.refuse(inst, f"vector {inst.opcode} .{vector} needs {width} sources and destinations")
    scalar = tuple(x for x in inst.modifiers if x != vector)
    steps = []
    for i in range(width):
        moved = replace(address, offset=address.offset + i * (t.bits // 8))
        operands = ((dests[i],) if returns else ()) + (moved, sources[i]) + inst.operands[first + 2:]
        steps.append(decode(ops, replace(inst, modifiers=scalar, operands=operands)).run)

    def run(sel):
        for step in steps:
            step(sel)

    return run


def _park_failed_cas(m: Machine, inst, run, compare) -> Step:
    """atom.cas as a spin wait: a thread whose compare failed (a lock another thread holds) parks after the atom,
    as after `nanosleep`, until nothing else can run. Any thread may be delayed (a legal timing), and without it
    min-pc scheduling would run a CAS spin loop forever and never the holder, which sits at a higher pc (Triton's
    `while tl.atomic_cas(lock, 0, 1) == 1: pass`). Woken twice with no atomic write in between is a deadlock.
    A woken lane's next `nanosleep` before it retries (nvcc's `while (atomicCAS(m, 0, 1)) __nanosleep(t);`)
    does not park it again: it waited at the cas already (`Machine.cas_parked`)."""

    def run_cas(lanes, active):
        m.pc[lanes] += 1
        if not len(active):
            return
        old = run(active)
        failed = active[old != np.broadcast_to(np.asarray(compare(active), old.dtype), old.shape)]
        m.cas_parked[active] = False
        m.cas_parked[failed] = True
        m.status[failed] = PARK
        m.park_address[failed] = -1
        m.park_test[failed] = True

    return Step(inst, run_cas, control=True)
