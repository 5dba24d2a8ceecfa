"""wgmma [P#asynchronous-warpgroup-level-matrix-*; facts.wgmma, facts.descriptor]: per warpgroup (all 128
threads, collective) D = A x B (+ D when scale-d), A 64xK from shared memory through its descriptor (K-major,
or MN-major with imm-trans-a) or from four registers per thread (`facts.a_fragment_coords`), B KxN through its
descriptor (imm-trans-b: MN-major); imm-scale-a/b = -1 negates. K spans 32 bytes: .f16/.bf16 (k16), .tf32
(k8, the low 13 mantissa bits ignored), .e4m3/.e5m2 (k32, mixable, .f16/.f32 accumulator), .s8/.u8 (k32,
mixable, .s32 accumulator that wraps, or clamps with .satfinite); .b1 is refused. Float products are exact,
sums in float64 rounded once per instruction to the accumulator type (as the Target IR simulator does;
under `tensor_core_numerics` "hopper", Hopper's measured block FMA instead);
integer sums are exact. D is written at issue, and `asynchrony` reports any other access to the D and A
registers, or a write over the shared operands, before the wgmma.wait_group that covers the wgmma (commit and
wait are counted there; wgmma.fence has no effect; a chain's f32 accumulators are kept in product order until
then, `wgmma_accumulators`). Descriptors must be uniform over the warpgroup. The
operands are read by `wgmma_operands`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from tessera.interpreters.ptx import tensor_core_numerics, wgmma_accumulators
from tessera.interpreters.ptx.decode import Operands, Step, elements, opcode
from tessera.interpreters.ptx.memory import lanes_of
from tessera.interpreters.ptx.state import Machine, lane_rows
from tessera.interpreters.ptx.sync import PRED
from tessera.interpreters.ptx.syntax import Reg, Vector
from tessera.interpreters.ptx.types import ptx_type
from tessera.interpreters.ptx.wgmma_operands import (FAMILIES, MULTIPLICANDS, ReadPlan, descriptor_reads,
                                                     descriptor_tiles, plan_reads, register_operands, register_words)
from tessera.interpreters.truth import all_set, any_set, equal_arrays
from tessera.sm90 import facts

U64 = ptx_type("u64")
_PLANS_KEPT = 64
"""Plans a wgmma step keeps (`StepPlan`): a ring's slots and the batch's lane sets give a few."""


class StepPlan(NamedTuple):
    """What a wgmma step works out once per set of warpgroups and descriptor values, kept in the step: `reads`, its
    descriptor operands' `wgmma_operands.ReadPlan`; `a_words`, where the words of a register A's tiles lie among
    the A registers (`register_words`; None for A in shared memory); `rows`, the lanes' rows of an accumulator
    block updated in place (`state.lane_rows`; None where not, or where they are not runs at equal strides)."""

    reads: ReadPlan
    a_words: np.ndarray | None
    rows: np.ndarray | None


@lru_cache(maxsize=None)
def thread_rows(n: int) -> np.ndarray:
    """The order of the 64 rows of m64nNk*'s D = A x B in which the product is taken (its A tiles' rows gathered
    so), so that D' = D[rows], viewed as [warp w, row group g, half m, column block h, lane quad q, pair l]
    (4 x 8 x 2 x N/8 x 4 x 2), holds thread 32w + 4g + q's accumulator element 4h + 2m + l there
    [facts.accumulator_coords: row 16w + g + 8m, column 8h + 2q + l]: the fragment order is D' with its axes
    (m, h, q) turned round to (q, h, m), whole pairs l moving together (`fragment_order`, `wgmma_accumulators`),
    no gather by element. The columns keep their order: B's tiles are gathered as they lie."""
    h = n // 8
    v, t = np.arange(n // 2), np.arange(facts.WARPGROUP_SIZE)
    row, col = facts.accumulator_coords(v[None, :], t[:, None])  # [thread, element]
    row6, col6 = row.reshape(4, 8, 4, h, 2, 2), col.reshape(4, 8, 4, h, 2, 2)  # [w, g, q | h, m, l]
    rows = row6[:, :, 0, 0, :, 0].reshape(-1)
    w, g, q, hh, m, l = np.indices((4, 8, 4, h, 2, 2))
    at = ((w * 8 + g) * 2 + m) * n + (hh * 4 + q) * 2 + l  # each element's place in D'
    place = np.argsort(rows)[row6] * n + col6
    assert equal_arrays(place, at), "the accumulator layout is D' [(w, g, m), (h, q, l)]"
    rows.setflags(write=False)
    return rows


def fragment_order(d: np.ndarray) -> np.ndarray:
    """[warpgroups x 128 threads, N/2 elements] float64 in fragment order from the products D' [warpgroups, 64, N]
    (`thread_rows`), the pairs moved as one 16-byte item each (bits kept)."""
    groups, _, n = d.shape
    out = np.empty((groups * 32, 4, n // 8, 2, 2))  # [(w, g), q, h, m, l]
    source = d.reshape(groups * 32, 2, n // 8, 4, 2).view(np.complex128)[..., 0]  # [(w, g), m, h, q]
    out.view(np.complex128)[..., 0] = source.transpose(0, 3, 2, 1)
    return out.reshape(groups * facts.WARPGROUP_SIZE, n // 2)


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
        if name not in MULTIPLICANDS:
            raise ops.refuse(inst, f"wgmma multiplicand type .{name} (supported: "
                                   f".{', .'.join(MULTIPLICANDS)})")
    if FAMILIES[a_name] != FAMILIES[b_name]:
        raise ops.refuse(inst, f"wgmma .{a_name} with .{b_name}: A and B types must match (only .e4m3/.e5m2 "
                               "and .s8/.u8 mix)")
    if satfinite and FAMILIES[a_name] != "int":
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
    family = FAMILIES[a_name]
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
    a_rows = thread_rows(n)  # the product taken in thread order: D' (`fragment_order`)
    f16_acc = dtype_name == "f16"
    # f32 accumulators in one block: updated in place (float products)
    in_place = d_block is not None and dtype_name == "f32" and family != "int" and d_block.itemsize == 4
    plans: dict[tuple, StepPlan] = {}  # (warpgroups, descriptor values) -> what they need
    static_accumulate: dict[int, np.ndarray] = {}  # warpgroups run -> an immediate scale-d's per-warpgroup values

    def _requests(lanes, starts, b_descs, a_descs) -> tuple[list[tuple], list[int]]:
        """`descriptor_read`'s arguments for the step's operands, in warpgroup order: B once per CTA and
        descriptor (two consumers of a CTA sharing a K tile read it once), A per warpgroup; and each
        warpgroup's B read (its position among the B requests)."""
        lanes = lanes.copy()  # kept in the plan
        sharing: dict[tuple[int, int], list[int]] = {}
        for i, start in enumerate(starts.tolist()):
            sharing.setdefault((int(m.lane_cta[lanes[start]]), int(b_descs[i])), []).append(start)
        b_of: dict[tuple[int, int], int] = {}
        requests, b_index = [], []
        for i, start in enumerate(starts.tolist()):
            wg = lanes[start:start + facts.WARPGROUP_SIZE]
            key = (int(m.lane_cta[wg[0]]), int(b_descs[i]))
            if key not in b_of:
                b_of[key] = len(b_of)
                readers = np.concatenate([lanes[j:j + facts.WARPGROUP_SIZE] for j in sharing[key]])
                requests.append((readers, key[1], "MN" if trans_b else "K", n, b_name, "B"))
            b_index.append(b_of[key])
            if not registers_a:
                requests.append((wg, int(a_descs[i]), "MN" if trans_a else "K", facts.WGMMA_M, a_name, "A"))
        return requests, b_index

    def _plan(lanes, starts, b_descs, a_descs) -> StepPlan:
        reads = plan_reads(m, *_requests(lanes, starts, b_descs, a_descs), a_rows)
        a_words = None
        if registers_a:  # the A registers of `lanes` in their block, else gathered [lanes, 4] (`run`)
            a_words = register_words(lanes if a_block is not None else np.arange(len(lanes)), a_rows)
        return StepPlan(reads, a_words, lane_rows(d_block, lanes) if in_place else None)

    def run(sel):
        # every warpgroup at this wgmma in one batched product: operands per warpgroup, accumulators of all
        # lanes gathered and scattered once per register
        lanes = lanes_of(m, sel)
        starts, warpgroups = _warpgroups_kept(m, inst, lanes)
        b_descs = _uniform_per_group(m, inst, read_b(sel), lanes, "B descriptor")
        a_descs = None if registers_a else _uniform_per_group(m, inst, read_a(sel), lanes, "A descriptor")
        if read_scale is None:
            accumulate = static_accumulate.get(len(starts))
            if accumulate is None:  # (read-only: every run of as many warpgroups shares it)
                accumulate = static_accumulate[len(starts)] = np.full(len(starts), bool(static_scale))
                accumulate.setflags(write=False)
        else:
            accumulate = _uniform_per_group(m, inst, read_scale(sel), lanes, "scale-d predicate").astype(bool)
        # whole warpgroups: their numbers name the lanes
        key = (warpgroups.tobytes(), b_descs.tobytes(), None if registers_a else a_descs.tobytes())
        plan = plans.get(key)
        if plan is None:
            if len(plans) >= _PLANS_KEPT:
                plans.clear()
            plan = plans[key] = _plan(lanes, starts, b_descs, a_descs)
        reads = plan.reads
        descriptor_reads(m, inst, reads)  # checked and recorded in warpgroup order, then gathered across CTAs
        if registers_a:  # every warpgroup's A tile in one gather of words from its registers
            words = a_block if a_block is not None else np.stack([r[lanes] for r in a_regs], axis=1)
            a_stack = register_operands(words, plan.a_words, a_name)
        else:
            a_stack = descriptor_tiles(m, reads.a_tiles, a_name)
        b_stack = descriptor_tiles(m, reads.b_tiles, b_name)
        if reads.b_run > 1:  # warpgroups sharing a B read: their A tiles stacked, one product each B
            a_stack = a_stack.reshape(len(b_stack), -1, a_stack.shape[2])
        elif reads.b_index is not None:
            b_stack = b_stack[reads.b_index]
        if scale_a != 1:
            a_stack = scale_a * a_stack
        if scale_b != 1:
            b_stack = scale_b * b_stack
        # D' [warpgroups, 64, N] (`thread_rows`)
        if family != "int" and m.wgmma_numerics == "hopper":  # C entered, rounded: written as scale-d 0
            d = tensor_core_numerics.modelled_product(m, inst, a_stack, b_stack.transpose(0, 2, 1), accumulate, lanes,
                                                      d_block, d_regs, n, a_name, b_name, dtype_name)
            accumulate = np.zeros_like(accumulate)
        else:  # B [K, N] contiguous: BLAS's faster non-transposed product
            d = np.matmul(a_stack, b_stack).reshape(len(starts), facts.WGMMA_M, n)
        if plan.rows is not None and (all_set(accumulate) or not any_set(accumulate)):
            # kept in product order until a wait (`wgmma_accumulators`)
            wgmma_accumulators.accumulate(m, d_block, lanes, plan.rows, d, bool(accumulate[0]))
            return
        if m.deferred:
            wgmma_accumulators.write_back(m)
        product = fragment_order(d)  # [lanes, elements]
        # [lanes, registers]; one gather where the accumulators are one block (Machine.register_blocks)
        acc_words = d_block[lanes] if d_block is not None else np.stack([r[lanes] for r in d_regs], axis=1)
        if f16_acc:
            acc = np.stack([(acc_words & 0xFFFF), acc_words >> 16], axis=2).reshape(len(lanes), -1)
            acc = acc.astype(np.uint16).view(np.float16).astype(np.float64)
        elif family == "int":
            acc = acc_words.astype(np.uint32).view(np.int32).astype(np.float64)
        else:
            acc = acc_words.view(np.float32).astype(np.float64)
        if all_set(accumulate):
            result = product + acc
        elif not any_set(accumulate):
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


def _warpgroups(m: Machine, inst, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each warpgroup's lanes start in `lanes` (ascending), which must be whole warpgroups; the
    warpgroups)."""
    unit, size = m.unit_of[facts.WARPGROUP_SIZE], facts.WARPGROUP_SIZE
    if len(lanes) % size == 0:  # each run of 128 lanes (ascending, each once) one warpgroup: its ends in it
        firsts = unit[lanes[::size]]
        if equal_arrays(firsts, unit[lanes[size - 1::size]]):
            return np.arange(0, len(lanes), size), firsts
    groups = unit[lanes]
    starts = np.flatnonzero(np.diff(groups, prepend=-1))  # lanes ascend: each warpgroup's lanes are one run
    counts = np.diff(starts, append=len(groups))
    short = counts != size
    if any_set(short):
        raise m.error(inst, "wgmma needs all 128 threads of the warpgroup", int(lanes[starts[np.argmax(short)]]))
    return starts, groups[starts]


def _warpgroups_kept(m: Machine, inst, lanes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`_warpgroups` of `lanes`, kept for the last lanes object any wgmma.mma_async step of `m` ran
    (`Machine.wgmma_lanes`): the wgmmas of a straight run (a main loop's K steps) get one lanes object, never
    modified, and a machine's warpgroup numbering (`unit_of`) is fixed, so they are found once for it (read-only)."""
    kept = m.wgmma_lanes
    if kept is not None and kept[0] is lanes:
        return kept[1], kept[2]
    starts, warpgroups = _warpgroups(m, inst, lanes)
    starts.setflags(write=False)
    warpgroups.setflags(write=False)
    m.wgmma_lanes = (lanes, starts, warpgroups)
    return starts, warpgroups


def _uniform_per_group(m: Machine, inst, values, lanes, what: str) -> np.ndarray:
    """The value of `values` (per lane of `lanes`: whole warpgroups, in order) in each warpgroup, which must
    agree across it."""
    values = np.asarray(values)
    if values.shape != lanes.shape:  # an immediate
        values = np.broadcast_to(values, lanes.shape)
    if all_set(values == values[0]):  # one value in every lane (a main loop's descriptors): one comparison
        return values[::facts.WARPGROUP_SIZE]
    values = values.reshape(-1, facts.WARPGROUP_SIZE)
    differ = values != values[:, :1]
    if any_set(differ):
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

