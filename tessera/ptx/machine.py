"""PTX of the `sm90` machine ops: each op's docstring in `tessera.dialects.sm90` names the instruction; the
PTX facts are those of ../shared/notes/ptx-sm90a.md (checked with ptxas), the numbers come from
`tessera.sm90.facts`.

Shared-memory addresses are 32-bit registers (`.shared` window addresses; the dynamic shared memory base is
rounded up at run time, see `kernel`). Tensor maps are the generic addresses of their `.param`s. Per-register
ops (shuffles, ex2/rcp, cvt packing, setp/selp, global and shared loads and stores) print one instruction (or
a short sequence) per register, as `Job`s of one parallel assignment.

wgmma: `wgmma.mma_async` reads and writes the same `{d...}` registers, so its result is its accumulator's
registers when nothing reads those after it (`KernelPrinter.may_overwrite`, or the register assignment says
so); otherwise the accumulator is first copied into the result's registers, before the `wgmma.fence` that
precedes the mma when the accumulator already exists there (a register written between the fence and the mma
would make ptxas insert another fence and serialize the pipeline).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.ir import Operation, SSAValue

from tessera.dialects import sm90
from tessera.dialects.sm90_memory import column_bytes_of
from tessera.ptx.arith import (
    UNGUARDED_WHEN_TRUE,
    compare_integers,
    constant_values,
    elementwise,
    immediate,
    is_true_constant,
    select,
)
from tessera.ptx.kernel import Job, KernelPrinter, element_lists, handles
from tessera.ptx.registers import B16, B32, B64, F32, is_register, lanes
from tessera.sm90 import facts

FULL_WARP = (1 << facts.WARP_SIZE) - 1
"""The membermask of a shuffle all lanes of the warp take part in."""

DESCRIPTOR_ADDRESS_MASK = facts.DESCRIPTOR_ADDRESS_MASK
DESCRIPTOR_ADDRESS_SHIFT = facts.SWIZZLE_CHUNK_BYTES.bit_length() - 1
"""The start address field (bits 13-0) is enc(address) = (address & 0x3FFFF) >> 4: 16-byte units."""


def descriptor_constant(lbo: int, sbo: int, swizzle: int) -> int:
    """The descriptor bits that do not depend on the start address (LBO, SBO, swizzle; base offset 0)."""
    return facts.encode_descriptor(0, lbo, sbo, swizzle)


def descriptor_of_address(address: int, lbo: int, sbo: int, swizzle: int) -> int:
    """What the printed `sm90.make_descriptor` computes, in Python (the and/shr/cvt/or sequence)."""
    return ((address & DESCRIPTOR_ADDRESS_MASK) >> DESCRIPTOR_ADDRESS_SHIFT) | descriptor_constant(lbo, sbo, swizzle)


def _int(op: Operation, name: str) -> int:
    return getattr(op, name).value.data


# region special registers, shared memory ----------------------------------------------------------------------


@handles(sm90.SpecialRegOp)
def print_special(p: KernelPrinter, op: sm90.SpecialRegOp) -> None:
    (d,) = p.define(op.result)
    p.emit(f"mov.u32 {d}, %{op.register.data}")


@handles(sm90.SharedBufferOp)
def print_shared_buffer(p: KernelPrinter, op: sm90.SharedBufferOp) -> None:
    """The dynamic shared memory's base plus the buffer's offset; printed together with the add right after it
    when that add is a barrier slot's address (`_barrier_slot_add`)."""
    offset = _int(op, "offset")
    if offset == 0:
        p.alias(op.result, [p.smem_base])
        return
    slot = _barrier_slot_add(p, op)
    if slot is not None:
        add, other = slot
        (d,) = p.define(add.result)
        p.emit(f"add.s32 {d}, {p.smem_base}, {p.reg(other)}", f"add.s32 {d}, {d}, {offset}")
        p.folded[add] = f"printed with {p.name(op.result)}, its constant last"
        return
    (d,) = p.define(op.result)
    p.emit(f"add.u32 {d}, {p.smem_base}, {offset}")


def _barrier_slot_add(p: KernelPrinter, op: sm90.SharedBufferOp) -> tuple[arith.AddiOp, SSAValue] | None:
    """(the add, its run-time operand) when `op`'s one use is the i32 `arith.addi` right after it, adding a value
    that is not a constant (a ring stage's slot offset), and that add's result is read only by mbarrier ops.
    Printed as `(base + slot) + offset`, the constant last, ptxas folds it into the barrier instruction's
    immediate (`SYNCS... [UR+0x28]`) where `base + offset` first costs a uniform add per barrier and trip
    (docs/performance.md)."""
    add = op.next_op
    if not (isinstance(add, arith.AddiOp) and p.cls(add.result) is B32 and all(use.operation is add for use in op.result.uses)):
        return None
    other = add.rhs if add.lhs is op.result else add.lhs
    if other is op.result or isinstance(other.owner, arith.ConstantOp) or other not in p.values:
        return None
    users = [use.operation for use in add.result.uses]
    if not users or not all(user.name.startswith("sm90.mbarrier") for user in users):
        return None
    return add, other


# endregion
# region TMA and mbarriers -------------------------------------------------------------------------------------


@handles(sm90.TmaLoadOp)
def print_tma_load(p: KernelPrinter, op: sm90.TmaLoadOp) -> None:
    coords = ", ".join(p.reg(c) for c in op.coords)
    p.emit(f"cp.async.bulk.tensor.{len(op.coords)}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
           f"[{p.reg(op.dest)}], [{p.reg(op.tensor_map)}, {{{coords}}}], [{p.reg(op.mbarrier)}]")


@handles(sm90.MBarrierInitOp)
def print_mbarrier_init(p: KernelPrinter, op: sm90.MBarrierInitOp) -> None:
    p.emit(f"mbarrier.init.shared::cta.b64 [{p.reg(op.mbarrier)}], {_int(op, 'count')}")


@handles(sm90.MBarrierArriveExpectTxOp)
def print_arrive_expect_tx(p: KernelPrinter, op: sm90.MBarrierArriveExpectTxOp) -> None:
    p.emit(f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [{p.reg(op.mbarrier)}], {_int(op, 'bytes')}")


@handles(sm90.MBarrierArriveOp)
def print_arrive(p: KernelPrinter, op: sm90.MBarrierArriveOp) -> None:
    p.emit(f"mbarrier.arrive.shared::cta.b64 _, [{p.reg(op.mbarrier)}]")


@handles(sm90.MBarrierTryWaitParityOp)
def print_try_wait_parity(p: KernelPrinter, op: sm90.MBarrierTryWaitParityOp) -> None:
    bar, parity = p.reg(op.mbarrier), p.reg(op.parity)
    (d,) = p.define(op.result)
    p.emit(f"mbarrier.try_wait.parity.shared::cta.b64 {d}, [{bar}], {parity}")


@handles(sm90.MBarrierInvalOp)
def print_mbarrier_inval(p: KernelPrinter, op: sm90.MBarrierInvalOp) -> None:
    p.emit(f"mbarrier.inval.shared::cta.b64 [{p.reg(op.mbarrier)}]")


_FIXED = {
    sm90.FenceMBarrierInitOp: "fence.mbarrier_init.release.cluster",
    sm90.FenceProxyAsyncOp: "fence.proxy.async.shared::cta",
    sm90.WgmmaCommitGroupOp: "wgmma.commit_group.sync.aligned",
}


@handles(*_FIXED)
def print_fixed(p: KernelPrinter, op: Operation) -> None:
    p.emit(_FIXED[type(op)])


# endregion
# region wgmma -------------------------------------------------------------------------------------------------


def _following_mmas(fence: sm90.WgmmaFenceOp) -> list[tuple[sm90.WgmmaMmaAsyncOp, list[Operation]]]:
    """The mma ops after `fence` up to the next fence in its block, each with the ops between the fence and it."""
    found, between = [], []
    op = fence.next_op
    while op is not None and not isinstance(op, sm90.WgmmaFenceOp):
        if isinstance(op, sm90.WgmmaMmaAsyncOp):
            found.append((op, list(between)))
        between.append(op)
        op = op.next_op
    return found


def _in_place(p: KernelPrinter, op: sm90.WgmmaMmaAsyncOp) -> bool:
    assigned = p.assigned(op.result)
    if assigned is not None:
        return assigned == p.regs(op.acc)
    return p.may_overwrite(op.acc, op)


def _touches(p: KernelPrinter, ops: list[Operation], registers: set[str]) -> bool:
    """Whether any of `ops` (or ops nested in them) reads or writes one of `registers` (by the assignment;
    fresh registers are new to everything)."""
    for outer in ops:
        for op in outer.walk():
            for value in (*op.operands, *op.results):
                names = p.values.get(value) or p.assigned(value) or []
                if registers.intersection(names):
                    return True
    return False


def _constant_accumulator(p: KernelPrinter, mma: sm90.WgmmaMmaAsyncOp, between: list[Operation]) -> bool:
    """A constant accumulator is written as immediates straight into the result registers before the fence
    (the constant itself, if it comes between and has no other use, prints nothing)."""
    constant = mma.acc.owner
    if not isinstance(constant, arith.ConstantOp):
        return False
    if not mma.accumulates:  # scale-d = 0: the accumulator is not read, its registers need no value
        p.comment(f"{p.name(mma.acc)} (constant) is not read: scale-d = 0")
        p.prepared[mma] = p.define(mma.result)
        if constant in between and mma.acc.has_one_use():
            p.folded[constant] = f"not read by {p.name(mma.result)} (scale-d = 0)"
        return True
    assigned = p.assigned(mma.result)
    if assigned is not None and _touches(p, [o for o in between if o is not constant], set(assigned)):
        return False
    p.comment(f"{p.name(mma.acc)} (constant) into the registers of {p.name(mma.result)}")
    d = p.prepared[mma] = p.define(mma.result)
    p.emit(*(f"mov.f32 {r}, {immediate(v, F32)}" for r, v in zip(d, constant_values(constant), strict=True)))
    if constant in between and mma.acc.has_one_use():
        p.folded[constant] = f"written into {p.name(mma.result)} at the wgmma.fence"
    return True


@handles(sm90.WgmmaFenceOp)
def print_wgmma_fence(p: KernelPrinter, op: sm90.WgmmaFenceOp) -> None:
    for mma, between in _following_mmas(op):
        if mma in p.prepared or _constant_accumulator(p, mma, between) or mma.acc not in p.values:
            continue
        acc = p.regs(mma.acc)
        holders = {h for n in acc if is_register(n) for h in p.holders[n]}
        inside = {o for b in between for o in b.walk()}
        if any(use.operation in inside for h in holders for use in h.uses):
            continue  # something between reads the accumulator: decide at the mma
        if _in_place(p, mma):
            continue
        assigned = p.assigned(mma.result)
        if assigned is not None and _touches(p, between, set(assigned)):
            continue
        p.comment(f"{p.name(mma.acc)} is read after {p.name(mma.result)} is computed: copy it first")
        p.prepared[mma] = p.define(mma.result)
        p.move(p.prepared[mma], acc, F32)
    p.emit("wgmma.fence.sync.aligned")


@handles(sm90.WgmmaMmaAsyncOp)
def print_wgmma(p: KernelPrinter, op: sm90.WgmmaMmaAsyncOp) -> None:
    d = p.prepared.pop(op, None)
    if d is None:
        if _in_place(p, op):
            d = p.regs(op.acc)
            p.bind(op.result, d)
        else:
            d = p.define(op.result)
            p.move(d, p.regs(op.acc), F32)
    if len(set(d)) != len(d):
        p.refuse(op, "the accumulator registers must be distinct")
    a = "{" + ", ".join(p.regs(op.a)) + "}" if op.a_in_registers else p.reg(op.a)
    p.emit(wgmma_instruction(p, op, d, a, p.reg(op.b)))


def wgmma_instruction(p: KernelPrinter, op: sm90.WgmmaMmaAsyncOp, d: list[str], a: str, b: str) -> str:
    """The `wgmma.mma_async` instruction of `op` writing the registers `d`, with A (`{...}` registers or a
    descriptor) and B's descriptor as given: the op's own operands, or others of the same values
    (fold_epilogue's dummy score wgmma reads loop-invariant descriptors)."""
    ab, b_type = op.multiplicand_types
    _, n, k = facts.wgmma_shape(_int(op, "n"), ab, "f32")
    if op.scale_d is None or isinstance(op.scale_d.owner, arith.ConstantOp):
        scale_d = "1" if op.accumulates else "0"
    else:
        scale_d = p.reg(op.scale_d)
    trans_b = _int(op, "trans_b")
    if ab in facts.FP8_FORMATS:  # K-major only: the 8-bit forms have no imm-trans operands
        flags = f"{scale_d}, 1, 1"
    elif op.a_in_registers:
        flags = f"{scale_d}, 1, 1, {trans_b}"
    else:
        flags = f"{scale_d}, 1, 1, {_int(op, 'trans_a')}, {trans_b}"
    return (f"wgmma.mma_async.sync.aligned.m{facts.WGMMA_M}n{n}k{k}.f32.{ab}.{b_type} "
            f"{{{', '.join(d)}}}, {a}, {b}, {flags}")


@handles(sm90.WgmmaWaitGroupOp)
def print_wgmma_wait(p: KernelPrinter, op: sm90.WgmmaWaitGroupOp) -> None:
    p.emit(f"wgmma.wait_group.sync.aligned {_int(op, 'pending')}")


@handles(sm90.MakeDescriptorOp)
def print_make_descriptor(p: KernelPrinter, op: sm90.MakeDescriptorOp) -> None:
    """enc(address) at bit 0 or'ed with the constant fields (`descriptor_of_address`)."""
    address = p.reg(op.address)
    constant = descriptor_constant(_int(op, "lbo"), _int(op, "sbo"), _int(op, "swizzle"))
    masked, wide = p.temp(B32), p.temp(B64)
    (d,) = p.define(op.result)
    p.emit(f"and.b32 {masked}, {address}, {DESCRIPTOR_ADDRESS_MASK:#x}",
           f"shr.u32 {masked}, {masked}, {DESCRIPTOR_ADDRESS_SHIFT}",
           f"cvt.u64.u32 {wide}, {masked}",
           f"or.b64 {d}, {wide}, {constant:#018x}")


@handles(sm90.DescriptorAdvanceOp)
def print_descriptor_advance(p: KernelPrinter, op: sm90.DescriptorAdvanceOp) -> None:
    """One 64-bit add of `facts.descriptor_start_delta` (the start field does not overflow: the op's
    invariant), as CUTLASS's descriptor iterator adds. Not a 32-bit add on the low word: with the word split
    out and joined again, ptxas 13.4 and later compute the descriptors in ordinary registers and move each to
    a uniform one for the HGMMA (R2UR), two or three per HGMMA of the flash main loop."""
    (d,) = p.define(op.result)
    p.emit(f"add.s64 {d}, {p.reg(op.descriptor)}, {facts.descriptor_start_delta(_int(op, 'bytes'))}")


@handles(sm90.DescriptorOffsetOp)
def print_descriptor_offset(p: KernelPrinter, op: sm90.DescriptorOffsetOp) -> None:
    """The offset's 16-byte units, widened, added to the descriptor in one 64-bit add: the start field
    cannot carry into the high word (the op's invariant). ptxas 12.9 to 13.5 fold the shift into the slot
    index's multiply and keep the add on the uniform datapath (docs/performance.md)."""
    units, wide = p.temp(B32), p.temp(B64)
    (d,) = p.define(op.result)
    p.emit(f"shr.u32 {units}, {p.reg(op.offset)}, {DESCRIPTOR_ADDRESS_SHIFT}",
           f"cvt.u64.u32 {wide}, {units}",
           f"add.s64 {d}, {p.reg(op.descriptor)}, {wide}")


# endregion
# region warps and the CTA -------------------------------------------------------------------------------------


@handles(sm90.ShflSyncOp)
def print_shfl(p: KernelPrinter, op: sm90.ShflSyncOp) -> None:
    mode, offset, clamp = op.mode.data, _int(op, "offset"), _int(op, "clamp")
    elementwise(p, op.result, [op.source],
                lambda d, s: [f"shfl.sync.{mode}.b32 {d}, {s[0]}, {offset}, {clamp:#x}, {FULL_WARP:#x}"])


@handles(sm90.BarSyncOp, sm90.BarArriveOp)
def print_named_barrier(p: KernelPrinter, op: Operation) -> None:
    kind = "sync" if isinstance(op, sm90.BarSyncOp) else "arrive"
    p.emit(f"bar.{kind} {_int(op, 'barrier')}, {_int(op, 'threads')}")


@handles(sm90.ElectSyncOp)
def print_elect(p: KernelPrinter, op: sm90.ElectSyncOp) -> None:
    (d,) = p.define(op.result)
    p.emit(f"elect.sync _|{d}, {FULL_WARP:#x}")


@handles(sm90.SetMaxNRegOp)
def print_setmaxnreg(p: KernelPrinter, op: sm90.SetMaxNRegOp) -> None:
    p.emit(f"setmaxnreg.{op.action.data}.sync.aligned.u32 {_int(op, 'count')}")


# endregion
# region arithmetic the machine does its own way --------------------------------------------------------------

_APPROX = {sm90.Ex2ApproxOp: "ex2.approx.ftz.f32", sm90.RcpApproxOp: "rcp.approx.ftz.f32",
           sm90.Lg2ApproxOp: "lg2.approx.ftz.f32", sm90.TanhApproxOp: "tanh.approx.f32",
           sm90.RsqrtApproxOp: "rsqrt.approx.ftz.f32", sm90.SinApproxOp: "sin.approx.f32",
           sm90.CosApproxOp: "cos.approx.f32"}


@handles(*_APPROX)
def print_approx(p: KernelPrinter, op: Operation) -> None:
    mnemonic = _APPROX[type(op)]
    elementwise(p, op.results[0], list(op.operands), lambda d, s: [f"{mnemonic} {d}, {s[0]}"])


@handles(sm90.CvtOp)
def print_cvt(p: KernelPrinter, op: sm90.CvtOp) -> None:
    """`cvt.rn.f32.s32` or `cvt.rzi.s32.f32`, register by register."""
    mnemonic = "cvt.rzi.s32.f32" if p.cls(op.source) is F32 else "cvt.rn.f32.s32"
    elementwise(p, op.result, [op.source], lambda d, s: [f"{mnemonic} {d}, {s[0]}"])


@handles(sm90.CvtPackOp)
def print_cvt_pack(p: KernelPrinter, op: sm90.CvtPackOp) -> None:
    """Pair (x[2i], x[2i+1]) into register i with x[2i] in the low half: `cvt` puts its first source in the
    high half (`facts.cvt_rn_x2`), so the odd element goes first. An 8-bit pair is rounded into a 16-bit register
    and zero-extended (`cvt.u32.u16`)."""
    x = p.regs(op.source)
    half = op.half_type.data
    narrow = facts.FP8_CVT_NARROW.get(half)
    pair = p.temp(B16) if narrow else None
    jobs = []
    for i, dst in enumerate(p.define(op.result)):
        hi, lo = x[2 * i + 1], x[2 * i]
        if narrow:
            jobs.append(Job(dst, B32, (hi, lo), lambda d, hi=hi, lo=lo: [f"{narrow} {pair}, {hi}, {lo}",
                                                                        f"cvt.u32.u16 {d}, {pair}"]))
        else:
            jobs.append(Job(dst, B32, (hi, lo), lambda d, hi=hi, lo=lo: [f"cvt.rn.{half}x2.f32 {d}, {hi}, {lo}"]))
    p.run(jobs)


@handles(sm90.PrmtOp)
def print_prmt(p: KernelPrinter, op: sm90.PrmtOp) -> None:
    """`prmt.b32 d, a, b, SELECTOR` register by register (the generic form, a constant selector)."""
    selector = f"{op.selector.value.data:#x}"
    elementwise(p, op.result, [op.a, op.b], lambda d, s: [f"prmt.b32 {d}, {s[0]}, {s[1]}, {selector}"])


@handles(sm90.CvtPackFp8Op)
def print_cvt_pack_fp8(p: KernelPrinter, op: sm90.CvtPackFp8Op) -> None:
    """Register 4s + j from `facts.p8_register_sources(s)[j]` = (e0, e1, e2, e3): `cvt` puts its first source in
    the high byte, so `cvt...x2.f32 lo, e1, e0`, `cvt...x2.f32 hi, e3, e2`, `mov.b32 a, {lo, hi}` (the first
    operand of the pack in bits 15:0)."""
    x = p.regs(op.source)
    narrow = facts.FP8_CVT_NARROW[op.fp8_type.data]
    lo, hi = p.temp(B16), p.temp(B16)
    sources = [e for s in range(len(x) // 16) for e in facts.p8_register_sources(s)]
    jobs = []
    for dst, (e0, e1, e2, e3) in zip(p.define(op.result), sources, strict=True):
        regs = tuple(x[e] for e in (e0, e1, e2, e3))
        jobs.append(Job(dst, B32, regs, lambda d, r=regs: [f"{narrow} {lo}, {r[1]}, {r[0]}",
                                                            f"{narrow} {hi}, {r[3]}, {r[2]}",
                                                            f"mov.b32 {d}, {{{lo}, {hi}}}"]))
    p.run(jobs)


_SETP_FLOAT = {"eq": "eq", "ne": "neu", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
"""The IR's float compares are ordered (false on NaN) except `ne` (true on NaN): PTX `neu`."""


@handles(sm90.SetpOp)
def print_setp(p: KernelPrinter, op: sm90.SetpOp) -> None:
    predicate = op.predicate.data
    if p.cls(op.lhs) is F32:
        cmp = _SETP_FLOAT[predicate]
        elementwise(p, op.result, [op.lhs, op.rhs], lambda d, s: [f"setp.{cmp}.f32 {d}, {s[0]}, {s[1]}"])
        return
    compare_integers(p, op.result, op.lhs, op.rhs, predicate, signed=True)


@handles(sm90.SelpOp)
def print_selp(p: KernelPrinter, op: sm90.SelpOp) -> None:
    select(p, op.result, op.condition, op.lhs, op.rhs)


# endregion
# region global and shared memory ------------------------------------------------------------------------------


def global_address_operand(p: KernelPrinter, base: str, offset: str, offset_cls, column: int = 0) -> tuple[list[str], str]:
    """Instructions computing base + offset (an i32 offset sign-extended) and the address operand, with
    `column` (a constant, `sm90.COLUMN_BYTES`) as its immediate."""
    immediate = f"+{column}" if column else ""
    if not is_register(offset):
        return [], f"[{base}+{int(offset, 0) + column}]" if column else f"[{base}+{offset}]"
    lines = []
    if offset_cls is B32:
        wide = p.temp(B64)
        lines.append(f"cvt.s64.s32 {wide}, {offset}")
        offset = wide
    address = p.temp(B64)
    lines.append(f"add.s64 {address}, {base}, {offset}")
    return lines, f"[{address}{immediate}]"


@handles(sm90.StGlobalOp)
def print_st_global(p: KernelPrinter, op: sm90.StGlobalOp) -> None:
    """One predicated `st.global.b32` per register at base + offset."""
    _print_predicated_stores(p, op, "st.global.b32")


@handles(sm90.StGlobalB16Op)
def print_st_global_b16(p: KernelPrinter, op: sm90.StGlobalB16Op) -> None:
    """One predicated `st.global.b16` of each 32-bit register's low half at base + offset."""
    _print_predicated_stores(p, op, "st.global.b16")


def guard(mask: SSAValue) -> Callable[[str], str]:
    """The predicate prefix of a register's access, `@p ` for its mask register p; none for a mask that is a
    constant all-true vector (an access through a `tile.view ... in_bounds`: `UNGUARDED_WHEN_TRUE`)."""
    always = is_true_constant(mask)
    return lambda predicate: "" if always else f"@{predicate} "


def _print_predicated_stores(p: KernelPrinter, op: sm90.StGlobalOp | sm90.StGlobalB16Op, instruction: str) -> None:
    """`@p INSTRUCTION [base + offset + column], value` per register (no `@p` under an all-true mask)."""
    n = lanes(op.values.type)
    base = p.reg(op.base_ptr)
    offset_cls = p.cls(op.offsets)
    offsets, values, mask = element_lists(p, [op.offsets, op.values, op.mask], n)

    def store(offset: str, value: str, predicate: str, column: int):
        def lines(_: str | None) -> list[str]:
            address_lines, address = global_address_operand(p, base, offset, offset_cls, column)
            return address_lines + [f"{prefix(predicate)}{instruction} {address}, {value}"]
        return lines

    prefix = guard(op.mask)
    columns = column_bytes_of(op, n)
    p.run([Job(None, None, (base, o, v, m), store(o, v, m, c)) for o, v, m, c in zip(offsets, values, mask, columns)])


@handles(sm90.LdGlobalOp)
def print_ld_global(p: KernelPrinter, op: sm90.LdGlobalOp) -> None:
    """One predicated `ld.global.b32` per register; a masked-off register is 0.

    Each register is first set to 0, then loaded under its predicate (`mov d, 0; @p ld d`), so every register
    has an unconditional definition. The complementary pair `@p ld d; @!p mov d, 0` computes the same, but
    ptxas 13.3 and later do not see that it defines d on every path: they keep d's earlier contents live up
    to the pair, from as far back as the kernel's entry. The three-pass kernels' 64 loaded scores then
    spilled 4 bytes even with 256 registers to spare; written this way they assemble without a spill under
    every ptxas from 12.1 to 13.5."""
    _print_predicated_loads(p, op, "ld.global.b32")


@handles(sm90.LdGlobalU16Op)
def print_ld_global_u16(p: KernelPrinter, op: sm90.LdGlobalU16Op) -> None:
    """One predicated `ld.global.u16` into a 32-bit register per register (zero-extended); a masked-off
    register is 0. Written as `print_ld_global` writes its loads, column immediates included."""
    _print_predicated_loads(p, op, "ld.global.u16")


def _print_predicated_loads(p: KernelPrinter, op: sm90.LdGlobalOp | sm90.LdGlobalU16Op, instruction: str) -> None:
    """`mov d, 0; @p INSTRUCTION d, [base + offset + column]` per register (see `print_ld_global`)."""
    n = lanes(op.result.type)
    base = p.reg(op.base_ptr)
    offset_cls = p.cls(op.offsets)
    cls = p.cls(op.result)
    zero = "0f00000000" if cls is F32 else "0"
    offsets, mask = element_lists(p, [op.offsets, op.mask], n)

    def load(offset: str, predicate: str, column: int):
        def lines(d: str | None) -> list[str]:
            address_lines, address = global_address_operand(p, base, offset, offset_cls, column)
            # The address is computed first: d may be the register of the offset (a job reads before it writes).
            if always:
                return address_lines + [f"{instruction} {d}, {address}"]
            return address_lines + [f"{cls.move} {d}, {zero}", f"@{predicate} {instruction} {d}, {address}"]
        return lines

    always = is_true_constant(op.mask)  # no predicate, and so no zero first, under an all-true mask
    dsts = p.define(op.result)
    columns = column_bytes_of(op, n)
    p.run([Job(d, cls, (base, o, m), load(o, m, c)) for d, o, m, c in zip(dsts, offsets, mask, columns)])


UNGUARDED_WHEN_TRUE.update({sm90.StGlobalOp, sm90.StGlobalB16Op, sm90.LdGlobalOp, sm90.LdGlobalU16Op})


@handles(sm90.StSharedB16Op)
def print_st_shared_b16(p: KernelPrinter, op: sm90.StSharedB16Op) -> None:
    """One `st.shared.b16` of each 32-bit register's low half."""
    n = lanes(op.values.type)
    addresses, values = element_lists(p, [op.addresses, op.values], n)
    p.run([Job(None, None, (a, v), lambda _, a=a, v=v: [f"st.shared.b16 [{a}], {v}"]) for a, v in zip(addresses, values)])


@handles(sm90.StSharedOp)
def print_st_shared(p: KernelPrinter, op: sm90.StSharedOp) -> None:
    n = lanes(op.values.type)
    addresses, values = element_lists(p, [op.addresses, op.values], n)
    p.run([Job(None, None, (a, v), lambda _, a=a, v=v: [f"st.shared.b32 [{a}], {v}"]) for a, v in zip(addresses, values)])


@handles(sm90.LdSharedOp)
def print_ld_shared(p: KernelPrinter, op: sm90.LdSharedOp) -> None:
    """One `ld.shared.b32 d, [address+column]` per register (`column_bytes` as the immediate); under `aligned`,
    consecutive registers of columns c and c + 4 of one address as one `ld.shared.v2.b32 {d, e}` (`_shared_pairs`)."""
    n = lanes(op.result.type)
    (addresses,) = element_lists(p, [op.addresses], n)
    columns = column_bytes_of(op, n)
    dsts = p.define(op.result)

    def at(address: str, column: int) -> str:
        return f"[{address}{f'+{column}' if column else ''}]"

    groups = _shared_pairs(op, addresses, columns, dsts)
    if groups is not None:  # no destination is the address: the loads need no order
        for group in groups:
            names = ", ".join(dsts[i] for i in group)
            vector = f"v{len(group)}." if len(group) > 1 else ""
            p.emit(f"ld.shared.{vector}b32 {'{' + names + '}' if vector else names}, {at(addresses[0], columns[group[0]])}")
        return

    def load(address: str, column: int):
        return lambda d: [f"ld.shared.b32 {d}, {at(address, column)}"]
    cls = p.cls(op.result)
    p.run([Job(d, cls, (a,), load(a, c)) for d, a, c in zip(dsts, addresses, columns)])


def _shared_pairs(op: sm90.LdSharedOp, addresses: list[str], columns: list[int],
                  dsts: list[str]) -> list[list[int]] | None:
    """The registers of `op` grouped into loads: [i, i + 1] where register i + 1's column follows register i's
    (c and c + 4) and c is a multiple of `SHARED_PAIR_BYTES`, [i] otherwise; None where `op` promises no
    alignment of a multiple of `SHARED_PAIR_BYTES`, its registers have more than one address, or one destination
    is the address (then each register is loaded alone, in the order `KernelPrinter.run` finds)."""
    pair = sm90.SHARED_PAIR_BYTES
    if (op.aligned is None or op.aligned.value.data % pair or len(set(addresses)) != 1
            or addresses[0] in dsts):
        return None
    groups, i = [], 0
    while i < len(columns):
        if i + 1 < len(columns) and columns[i] % pair == 0 and columns[i + 1] == columns[i] + pair // 2:
            groups.append([i, i + 1])
            i += 2
        else:
            groups.append([i])
            i += 1
    return groups


# endregion
