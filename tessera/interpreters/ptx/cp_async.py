"""Ampere-style cp.async with commit/wait groups (the `cp` opcode's dispatch in `bulk_copy` sends it here).

`cp.async.{ca,cg}.shared.global [d], [s], size{, src-size | ignore-src}` reads its source when issued and
writes shared memory when a `cp.async.wait_group N` / `wait_all` of the issuing thread covers its group
(groups are per thread, closed by `commit_group`): its data is not visible before the wait, as in PTX, and
a read of its bytes before is reported (`asynchrony`, which also checks every shared access).
`cp.async.mbarrier.arrive{.noinc}` (`mbarrier`) lands the thread's pending copies (`land_copies`), then (with
`.noinc`) arrives. The source and the target take `memory`'s access checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.interpreters.ptx.decode import Operands, per_lane
from tessera.interpreters.ptx.memory import access, check_access, lanes_of, take_space
from tessera.interpreters.ptx.state import GLOBAL_BASE, Machine
from tessera.interpreters.ptx.syntax import Reg
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.truth import all_set, any_set


@dataclass
class AsyncCopy:
    """Copies of one cp.async instruction `inst` not yet landed: per lane its group, shared indices, data and the
    flat global bytes it reads (`source`, -1 for a lane that reads none: src-size 0 or ignore-src)."""

    lanes: np.ndarray
    groups: np.ndarray
    index: np.ndarray
    data: np.ndarray
    source: np.ndarray
    inst: object = None

    def part(self, rows: np.ndarray) -> "AsyncCopy":
        return AsyncCopy(self.lanes[rows], self.groups[rows], self.index[rows], self.data[rows], self.source[rows],
                         self.inst)


def land_copies(m: Machine, lanes: np.ndarray, before_group: np.ndarray | None,
                through_mbarrier: bool = False) -> None:
    """Write the pending copies of `lanes` whose group < before_group[lane] (all when None); `through_mbarrier`: at a
    cp.async.mbarrier.arrive, not a wait_group."""
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
        if any_set(done):
            m.shared[copy.index[done]] = copy.data[done]
            m.tracker.cp_async_landed(copy.index[done], copy.lanes[done], through_mbarrier)
            if m.global_order is not None:
                m.global_order.cp_async_read_done(copy.part(done))
        if not all_set(done):
            keep.append(copy.part(~done))
    m.async_copies = keep


def read_cp_async_source(m: Machine, inst, lanes: np.ndarray, addresses: np.ndarray, size: int) -> np.ndarray:
    """The `size` source bytes of the cp.async of each lane that reads (src-size > 0), when it issues."""
    return access(m, inst, "global", lanes, addresses, size, align=size)


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
        flat = np.full((len(lanes), size), -1, np.int64)
        if any_set(reading):
            source = per_lane(src(sel), lanes.shape, np.int64)
            got = read_cp_async_source(m, inst, lanes[reading], source[reading], size)
            data[reading] = np.where(np.arange(size) < count[reading][:, None], got, 0)
            flat[reading] = (source[reading] - GLOBAL_BASE)[:, None] + np.arange(size)
        target = per_lane(dst(sel), lanes.shape, np.int64)
        check_access(m, inst, "shared", lanes, target, size, size)
        index = m.shared_flat(lanes, target)[:, None] + np.arange(size)
        m.tracker.cp_async_issued(inst, lanes, index)
        copy = AsyncCopy(lanes.copy(), m.cp_groups[lanes].copy(), index, data, flat, inst)
        if m.global_order is not None:
            m.global_order.cp_async_reading(copy)
        m.async_copies.append(copy)

    return run
