"""Warp collectives [P#parallel-synchronization-and-communication-instructions-*]: elect.sync, shfl.sync,
vote.sync, match.sync, redux.sync and activemask. Each runs once all non-exited threads of its member mask
reach it (the scheduler's `unit`); reading a lane outside the mask is an error. vote, match and redux give each
thread the result over the threads of its own mask (lanes of one warp may name different masks at one
instruction: a half-warp tile's reduction). `elect.sync` elects the lowest active lane of the mask.
(bar.warp.sync is a named-barrier form: `sync`.)
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.decode import Operands, Step, elements, opcode, per_lane
from tessera.interpreters.ptx.memory import lanes_of
from tessera.interpreters.ptx.state import unique_rows
from tessera.interpreters.ptx.sync import PRED, U32, member_mask
from tessera.interpreters.ptx.syntax import Imm, Sink
from tessera.interpreters.truth import all_set, any_set, equal_arrays
from tessera.sm90 import facts


def _member_groups(m, sel, lanes: np.ndarray, mask) -> np.ndarray:
    """For a vote, match or redux over `lanes`: a group number per lane, equal for the lanes of one warp that
    name one member mask. Each thread's result is over the threads of its own mask, so a warp whose halves
    name their own halves (cooperative groups' `thread_block_tile<16>`: `0xffff << (laneid & 16)`) computes two
    results at one instruction."""
    warp = m.unit_of[facts.WARP_SIZE][lanes].astype(np.int64)
    masks = np.broadcast_to(np.asarray(mask(sel), np.uint32), lanes.shape).astype(np.int64)
    if all_set(masks == masks[0]):
        return warp
    return np.unique((warp << 32) | masks, return_inverse=True)[1].reshape(-1)


@opcode("elect")
def decode_elect(ops: Operands, inst, mods):
    mods.take("sync")
    m = ops.m
    dests = elements(inst.operands[0])
    write_d = ops.write(inst, dests[0], U32)
    write_p = ops.write(inst, dests[1], PRED) if len(dests) > 1 else None
    mask, static = member_mask(ops, inst, inst.operands[1])

    def run(sel):
        lanes = lanes_of(m, sel)
        members = ((np.broadcast_to(np.asarray(mask(sel), np.uint32), lanes.shape) >> m.laneid[lanes].astype(np.uint32))
                   & 1).astype(bool)
        warp = m.unit_of[facts.WARP_SIZE][lanes]
        leader_lane = np.full(lanes.shape, -1)
        for w in np.unique(warp):
            candidates = lanes[(warp == w) & members]
            if len(candidates):
                leader_lane[warp == w] = candidates.min()
        write_d(sel, np.where(leader_lane >= 0, m.laneid[np.maximum(leader_lane, 0)], 0).astype(np.uint32))
        if write_p is not None:
            write_p(sel, lanes == leader_lane)

    return Step(inst, run, unit=facts.WARP_SIZE, mask=static, member_mask=mask)


@opcode("shfl")
def decode_shfl(ops: Operands, inst, mods):
    mods.take("sync")
    mode = mods.take(*facts.SHFL_MODES)
    t = mods.type()
    if mode is None or t.bits != 32:
        raise ops.refuse(inst, "shfl needs .sync.{up,down,bfly,idx}.b32")
    m = ops.m
    dests = elements(inst.operands[0])
    write_d = ops.write(inst, dests[0], t)
    write_p = ops.write(inst, dests[1], PRED) if len(dests) > 1 and not isinstance(dests[1], Sink) else None
    read_a = ops.read(inst, inst.operands[1], t)
    read_b, read_c = (ops.read(inst, o, U32) for o in inst.operands[2:4])
    mask, static = member_mask(ops, inst, inst.operands[4])
    # with b, c and the mask immediates (a butterfly's offsets, a full warp) the lanes decide where each reads
    # and whether that is allowed: kept for the lanes of the last run (a softmax's row reductions run each shuffle
    # for the same consumer lanes at every K step; the scheduler never modifies a lanes array)
    constant = static is not None and all(isinstance(o, Imm) for o in inst.operands[2:4])
    kept: list = [None, None, None]  # lanes, source, valid

    def sources(sel, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the lane each of `lanes` reads, whether its source lane is in range: the predicate's value); raises
        where one reads a lane outside the member mask or not executing the shfl."""
        n = len(lanes)
        b, c = np.asarray(read_b(sel), np.int64), np.asarray(read_c(sel), np.int64)
        member = per_lane(mask(sel), (n,), np.int64)
        executing = np.zeros(m.lanes, bool)
        executing[lanes] = True
        if b.ndim == 0 and c.ndim == 0:  # immediates (a butterfly's offset): one rule for every lane
            src, ok = facts.shfl_source_lane(mode, m.laneid[lanes], int(b), int(c))
            source = lanes - m.laneid[lanes] + src
            valid = per_lane(ok, (n,))
        else:
            b, c = np.broadcast_to(b, (n,)), np.broadcast_to(c, (n,))
            source = np.empty(n, np.int64)
            valid = np.empty(n, bool)
            for bc in unique_rows(np.stack([b, c], axis=1)):
                pick = (b == bc[0]) & (c == bc[1])
                src, ok = facts.shfl_source_lane(mode, m.laneid[lanes[pick]], int(bc[0]), int(bc[1]))
                source[pick] = lanes[pick] - m.laneid[lanes[pick]] + src
                valid[pick] = ok
        wanted = source - lanes + m.laneid[lanes]  # the lane id read
        outside = source >= m.lanes  # a lane past the last thread of a partial warp
        source = np.where(outside, lanes, source)
        bad = outside | ~executing[source] | (((member >> m.laneid[source]) & 1) == 0)
        if any_set(bad):
            i = int(np.argmax(bad))
            raise m.error(inst, f"reads lane {int(wanted[i])}, which is not in the member mask or not "
                                "executing the shfl", int(lanes[i]))
        return source, valid

    def run(sel):
        lanes = lanes_of(m, sel)
        last = kept[0]
        if last is lanes or (last is not None and len(last) == len(lanes) and equal_arrays(last, lanes)):
            source, valid = kept[1], kept[2]
        else:
            source, valid = sources(sel, lanes)
            if constant:
                kept[:] = lanes, source, valid
        values = per_lane(read_a(m.lane_ids), (m.lanes,))
        write_d(sel, values[source])
        if write_p is not None:
            write_p(sel, valid)

    return Step(inst, run, unit=facts.WARP_SIZE, mask=static, member_mask=mask)


@opcode("vote")
def decode_vote(ops: Operands, inst, mods):
    mods.take("sync")
    mode = mods.take("all", "any", "uni", "ballot")
    t = mods.type()
    if mode is None:
        raise ops.refuse(inst, "vote mode")
    m = ops.m
    write = ops.write(inst, inst.operands[0], t)
    pred = ops.read(inst, inst.operands[1], PRED)
    mask, static = member_mask(ops, inst, inst.operands[2])

    def run(sel):
        lanes = lanes_of(m, sel)
        p = np.broadcast_to(pred(sel), lanes.shape)
        warp = _member_groups(m, sel, lanes, mask)
        ballot = np.zeros(warp.max() + 1, np.uint64)
        np.bitwise_or.at(ballot, warp, np.where(p, np.uint64(1) << m.laneid[lanes].astype(np.uint64), np.uint64(0)))
        present = np.zeros(warp.max() + 1, np.uint64)
        np.bitwise_or.at(present, warp, np.uint64(1) << m.laneid[lanes].astype(np.uint64))
        b, here = ballot[warp], present[warp]
        if mode == "ballot":
            write(sel, b.astype(np.uint32))
        elif mode == "all":
            write(sel, b == here)
        elif mode == "any":
            write(sel, b != 0)
        else:
            write(sel, (b == here) | (b == 0))

    return Step(inst, run, unit=facts.WARP_SIZE, mask=static, member_mask=mask)


@opcode("match")
def decode_match(ops: Operands, inst, mods):
    """`match.any.sync.b32|b64 d, a, mask`: d = the lanes of the mask holding the same a as this one;
    `match.all.sync.b32|b64 d{|p}, a, mask`: d = the mask when all its lanes hold the same a, else 0 (p: same)."""
    mods.take("sync")
    mode = mods.take("any", "all")
    t = mods.type()
    if mode is None or t.name not in ("b32", "b64"):
        raise ops.refuse(inst, "match variant")
    m = ops.m
    dests = elements(inst.operands[0])
    if mode == "any" and len(dests) != 1:
        raise ops.refuse(inst, "match.any with a predicate destination")
    write = ops.write(inst, dests[0], U32)
    write_p = ops.write(inst, dests[1], PRED) if len(dests) > 1 else None
    read = ops.read(inst, inst.operands[1], t)
    mask, static = member_mask(ops, inst, inst.operands[2])

    def run(sel):
        lanes = lanes_of(m, sel)
        x = np.broadcast_to(read(sel), lanes.shape)
        warp = _member_groups(m, sel, lanes, mask)
        bit = np.uint64(1) << m.laneid[lanes].astype(np.uint64)
        out = np.zeros(len(lanes), np.uint64)
        same_all = np.zeros(len(lanes), bool)
        for w in np.unique(warp):
            here = warp == w
            values, bits = x[here], bit[here]
            equal = values[:, None] == values[None, :]
            any_mask = (equal * bits[None, :]).sum(axis=1, dtype=np.uint64)
            uniform = all_set(equal)
            out[here] = any_mask if mode == "any" else (np.bitwise_or.reduce(bits) if uniform else 0)
            same_all[here] = uniform
        write(sel, out.astype(np.uint32))
        if write_p is not None:
            write_p(sel, same_all)

    return Step(inst, run, unit=facts.WARP_SIZE, mask=static, member_mask=mask)


@opcode("redux")
def decode_redux(ops: Operands, inst, mods):
    mods.take("sync")
    operation = mods.take("add", "min", "max", "and", "or", "xor")
    t = mods.type()
    if operation is None or t.name not in ("u32", "s32", "b32"):
        raise ops.refuse(inst, "redux variant")
    m = ops.m
    write = ops.write(inst, inst.operands[0], t)
    read = ops.read(inst, inst.operands[1], t)
    mask, static = member_mask(ops, inst, inst.operands[2])
    ufunc = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
             "xor": np.bitwise_xor}[operation]

    def run(sel):
        lanes = lanes_of(m, sel)
        x = np.broadcast_to(read(sel), lanes.shape)
        warp = _member_groups(m, sel, lanes, mask)
        out = np.empty(len(lanes), t.dtype)
        for w in np.unique(warp):
            out[warp == w] = ufunc.reduce(x[warp == w])
        write(sel, out)

    return Step(inst, run, unit=facts.WARP_SIZE, mask=static, member_mask=mask)


@opcode("activemask")
def decode_activemask(ops: Operands, inst, mods):
    mods.take("b32")
    m = ops.m
    write = ops.write(inst, inst.operands[0], U32)

    def run(sel):
        lanes = lanes_of(m, sel)
        warp = m.unit_of[facts.WARP_SIZE][lanes]
        present = np.zeros(warp.max() + 1, np.uint64)
        np.bitwise_or.at(present, warp, np.uint64(1) << m.laneid[lanes].astype(np.uint64))
        write(sel, present[warp].astype(np.uint32))

    return run
