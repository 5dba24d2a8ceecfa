"""Tensor maps built on the device [P#data-movement-and-conversion-instructions-tensormap-replace,
-tensormap-cp-fenceproxy; P#parallel-synchronization-and-communication-instructions-membar]: what Triton's
`tl.make_tensor_descriptor` writes (zero a 128-byte object in shared memory, set its fields with
`tensormap.replace`, copy it to global memory with `tensormap.cp_fenceproxy`, `fence.proxy.tensormap::generic
.acquire` it, then hand its global address to `cp.async.bulk.tensor`).

A tensor map is opaque [P]; the executor keeps its fields in the 128 bytes in a layout of its own
(`FIELDS`, little-endian), so that the object is bytes in memory like any other (copied, raced on, read back):
a zeroed object is a map of rank 1 with every field 0, which a copy refuses as cuTensorMapEncodeTiled would
(`TensorMapSpec.validate`) until its fields are set. `tensormap.replace.tile.FIELD{.ss}.b1024.bT [addr],
{ord,} new_val` is a read-modify-write of the object by each executing thread, checked like a store; the
values are the PTX ISA's encodings (`facts.TENSORMAP_REPLACE_ELEMTYPE` and the others): `.rank` is the rank
minus one, dimensions and strides are as cuTensorMapEncodeTiled takes them (global strides in bytes, of
dimensions 1 and up). `tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned
[dst], [src], 128` is executed by whole warps at one address: lane i copies bytes 4i..4i+3 (a generic read and
write each, in the race checks), and the copy is a release of the map to the tensor-map proxy.

A TMA whose map operand is a global address (`bulk_copy`) reads the map there (a generic 128-byte read of the
issuing thread, so a write no synchronisation orders before it is a race naming both sides) and needs the
issuing thread's `fence.proxy.tensormap::generic.acquire` of that address after the map's last copy: without
it, a `PtxHazardError` naming the TMA and the copy (or the last `tensormap.replace` of a map changed in place
in global memory, as CUTLASS's grouped GEMM does, which also needs a `fence.proxy.tensormap::generic.release` of
the writing thread after it: a copy by `tensormap.cp_fenceproxy` is its own release). `.swizzle_atomicity` and the sub-byte element types are
sm_100's, refused by name.
"""

from __future__ import annotations

import itertools

import numpy as np

from tessera.interpreters.ptx.decode import Operands, Step, opcode
from tessera.interpreters.ptx.memory import access, lanes_of, take_space
from tessera.interpreters.ptx.state import GLOBAL_BASE, PtxHazardError
from tessera.interpreters.ptx.syntax import Imm
from tessera.sm90 import facts

MAP_BYTES = facts.TENSOR_MAP_BYTES
FIELDS = {  # field: (byte offset of entry 0, bytes an entry, entries)
    "global_address": (0, 8, 1),
    "global_stride": (8, 8, 4),
    "global_dim": (40, 4, 5),
    "box_dim": (60, 4, 5),
    "element_stride": (80, 4, 5),
    "rank": (100, 4, 1),
    "elemtype": (104, 4, 1),
    "interleave_layout": (108, 4, 1),
    "swizzle_mode": (112, 4, 1),
    "fill_mode": (116, 4, 1),
}
"""Where the executor keeps each field of a tensor-map object (its own layout: the hardware's is opaque)."""
_SERIAL = itertools.count(1)


def _state(m) -> tuple[dict, dict]:
    """(global map address -> [serial, line, lane, released] of its last write (a copy, released by itself, or a
    `tensormap.replace` in place, released by a later `.release` fence of its thread); (lane, address) -> serial
    acquired)."""
    return m.__dict__.setdefault("device_map_copies", {}), m.__dict__.setdefault("device_map_acquires", {})


@opcode("tensormap")
def decode_tensormap(ops: Operands, inst, mods):
    if mods.take("replace"):
        return _decode_replace(ops, inst, mods)
    if mods.take("cp_fenceproxy"):
        return _decode_copy(ops, inst, mods)
    raise ops.refuse(inst, f"tensormap.{'.'.join(inst.modifiers)} is not supported by the PTX executor")


def _decode_replace(ops: Operands, inst, mods):
    m = ops.m
    if not mods.take("tile"):
        raise ops.refuse(inst, "tensormap.replace needs .tile (the only mode)")
    field = mods.take(*FIELDS, "swizzle_atomicity")
    if field is None or field == "swizzle_atomicity":
        raise ops.refuse(inst, f"tensormap.replace.{field or '?'} is not supported by the PTX executor "
                               "(.swizzle_atomicity is sm_100's)")
    space = take_space(mods, "generic")
    if not mods.take("b1024"):
        raise ops.refuse(inst, "tensormap.replace needs .b1024")
    t = mods.type()
    offset, size, entries = FIELDS[field]
    if t is None or t.bits != size * 8:
        raise ops.refuse(inst, f"tensormap.replace.{field} takes .b{size * 8}")
    ordered = entries > 1
    if len(inst.operands) != 2 + ordered:
        raise ops.refuse(inst, f"tensormap.replace.{field} takes [addr], {'ord, ' if ordered else ''}new_val")
    index = 0
    if ordered:
        if not isinstance(inst.operands[1], Imm) or not 0 <= inst.operands[1].value < entries:
            raise ops.refuse(inst, f"tensormap.replace.{field}'s ord must be an immediate in [0, {entries})")
        index = int(inst.operands[1].value)
    value = ops.read(inst, inst.operands[-1], t)
    address = ops.address(inst, inst.operands[0])
    at = offset + index * size
    copies, _ = _state(m)

    def run(sel):
        lanes = lanes_of(m, sel)
        where = np.broadcast_to(address(sel), lanes.shape)
        data = access(m, inst, space, lanes, where, MAP_BYTES, align=64).copy()
        data[:, at:at + size] = np.asarray(value(sel)).astype(t.dtype).reshape(-1, 1).view(np.uint8)
        access(m, inst, space, lanes, where, MAP_BYTES, data, align=64)
        if space != "shared":  # a map changed in place in global memory needs the acquire fence too
            serial = next(_SERIAL)
            for lane, map_address in zip(lanes.tolist(), where.tolist()):
                if map_address >= GLOBAL_BASE:
                    copies[map_address] = [serial, inst.line, lane, False]

    return run


def _decode_copy(ops: Operands, inst, mods):
    m = ops.m
    for needed in ("global", "shared::cta", "tensormap::generic", "release", "sync", "aligned"):
        if not mods.take(needed):
            raise ops.refuse(inst, f"tensormap.cp_fenceproxy needs .{needed} (the form Hopper has)")
    mods.take("gpu", "cta", "cluster", "sys")
    if len(inst.operands) != 3 or not isinstance(inst.operands[2], Imm) or inst.operands[2].value != MAP_BYTES:
        raise ops.refuse(inst, f"tensormap.cp_fenceproxy takes [dst], [src], {MAP_BYTES}")
    dst, src = ops.address(inst, inst.operands[0]), ops.address(inst, inst.operands[1])
    copies, _ = _state(m)

    def run(sel):
        lanes = lanes_of(m, sel)
        to, frm = dst(sel), src(sel)
        warps = lanes // 32
        for warp in np.unique(warps):
            members = warps == warp
            if members.sum() != 32 or len(set(to[members])) != 1 or len(set(frm[members])) != 1:
                raise m.error(inst, "tensormap.cp_fenceproxy is .sync.aligned: every thread of the warp executes "
                                    "it at one source and destination", int(lanes[members][0]))
        part = (lanes % 32) * (MAP_BYTES // 32)
        data = access(m, inst, "shared", lanes, frm + part, MAP_BYTES // 32, align=4)
        access(m, inst, "global", lanes, to + part, MAP_BYTES // 32, data, align=4)
        serial = next(_SERIAL)
        for address, lane in zip(to[::32].tolist(), lanes[::32].tolist()):  # one copy a warp (checked above)
            copies[address] = [serial, inst.line, lane, True]

    return run


@opcode("fence.proxy.tensormap")
def decode_acquire_fence(ops: Operands, inst, mods):
    """`fence.proxy.tensormap::generic.acquire.SCOPE [addr], 128`: the executing threads may use the map at
    addr (a global or generic address) in a TMA after its last `tensormap.cp_fenceproxy` (`sync` hands
    `fence.proxy.tensormap::generic` here); the `.release` form releases the executing threads' `tensormap.replace`
    writes of maps in global memory to the tensor-map proxy (a `tensormap.cp_fenceproxy` is its own release)."""
    m = ops.m
    mods.left = []
    if "acquire" not in inst.modifiers:
        copies, _ = _state(m)

        def release(sel):
            writers = set(lanes_of(m, sel).tolist())
            for entry in copies.values():
                if entry[2] in writers:
                    entry[3] = True
        return Step(inst, release)
    if len(inst.operands) != 2 or not isinstance(inst.operands[1], Imm) or inst.operands[1].value != MAP_BYTES:
        raise ops.refuse(inst, f"fence.proxy.tensormap::generic.acquire takes [addr], {MAP_BYTES}")
    address = ops.address(inst, inst.operands[0])
    copies, acquires = _state(m)

    def run(sel):
        lanes = lanes_of(m, sel)
        for lane, where in zip(lanes.tolist(), np.broadcast_to(address(sel), lanes.shape).tolist()):
            acquires[(lane, where)] = copies.get(where, (0,))[0]  # the map's last write it has seen

    return Step(inst, run)


def read_map(m, inst, lane: int, address: int) -> facts.TensorMapSpec:
    """The tensor map at global `address` as the TMA of `lane` sees it (see the module docstring)."""
    copies, acquires = _state(m)
    copied = copies.get(address)
    if copied is not None and (acquires.get((lane, address), 0) < copied[0] or not copied[3]):
        where = f" ({m.describe_lane(lane)})"
        missing = (f"no fence.proxy.tensormap::generic.acquire of it by this thread since"
                   if acquires.get((lane, address), 0) < copied[0] else
                   "no fence.proxy.tensormap::generic.release of the writing thread after it")
        raise PtxHazardError(
            f"{m.source}:{inst.line}: error: {inst.name}: reads the tensor map at global address {address:#x} "
            f"that the tensormap instruction at line {copied[1]} ({m.describe_lane(copied[2])}) wrote, with "
            f"{missing}{where}")
    data = access(m, inst, "global", np.array([lane]), np.array([address], np.int64), MAP_BYTES, align=64)[0]

    def field(name, count=None):
        offset, size, entries = FIELDS[name]
        kind = np.uint64 if size == 8 else np.uint32
        return [int(v) for v in data[offset:offset + size * entries].view(kind)[:count or entries]]

    rank = field("rank")[0] + 1
    if not 1 <= rank <= facts.TENSOR_MAP_MAX_RANK:
        raise m.error(inst, f"the tensor map at {address:#x} has rank {rank} (tensormap.replace.rank is the rank "
                            "minus one)", lane)
    codes = {"elemtype": (facts.TENSORMAP_REPLACE_ELEMTYPE, "element type"),
             "swizzle_mode": (facts.TENSORMAP_REPLACE_SWIZZLE, "swizzle mode"),
             "interleave_layout": (facts.TENSORMAP_REPLACE_INTERLEAVE, "interleave layout"),
             "fill_mode": (facts.TENSORMAP_REPLACE_FILL, "fill mode")}
    values = {}
    for name, (table, what) in codes.items():
        code = field(name)[0]
        if code not in table:
            raise m.error(inst, f"the tensor map at {address:#x} has {what} {code}, which the PTX executor does not "
                                f"support (tensormap.replace.{name}: {sorted(table)})", lane)
        values[name] = table[code]
    if values["interleave_layout"] != facts.TensorMapInterleave.NONE:
        raise m.error(inst, f"tensor maps with interleave {values['interleave_layout'].name} are not supported by the "
                            "PTX executor", lane)
    spec = facts.TensorMapSpec(values["elemtype"], tuple(field("global_dim", rank)),
                               tuple(field("global_stride", rank - 1)), tuple(field("box_dim", rank)),
                               tuple(field("element_stride", rank)), values["swizzle_mode"], values["fill_mode"],
                               values["interleave_layout"], global_address=field("global_address")[0])
    try:
        spec.validate()
    except ValueError as error:
        raise m.error(inst, f"the tensor map at {address:#x} (built by tensormap.replace) is invalid: {error}",
                      lane) from None
    return spec


__all__ = ["FIELDS", "decode_acquire_fence", "decode_tensormap", "read_map"]
