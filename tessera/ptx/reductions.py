"""PTX of the backward's Target IR ops (`tessera.dialects.sm90_reductions`): atomic adds into global memory,
bulk reductions from shared memory with their bulk groups, and stmatrix. Each op's docstring names the
instruction; the forms were checked with ptxas (tests/test_reductions.py)."""

from __future__ import annotations

from tessera.dialects import sm90_reductions as ops
from tessera.ptx.kernel import Job, KernelPrinter, element_lists, handles
from tessera.ptx.arith import UNGUARDED_WHEN_TRUE
from tessera.ptx.machine import _columns, _global_address, guard
from tessera.ptx.registers import B32, F32, lanes


def _per_register_atomic(p: KernelPrinter, op, returns: bool) -> None:
    n = lanes(op.values.type)
    base = p.reg(op.base_ptr)
    offset_cls = p.cls(op.offsets)
    offsets, values, mask = element_lists(p, [op.offsets, op.values, op.mask], n)

    def add(offset: str, value: str, predicate: str, column: int):
        def lines(d: str | None) -> list[str]:
            address_lines, address = _global_address(p, base, offset, offset_cls, column)
            if d is None:
                return address_lines + [f"{prefix(predicate)}red.global.add.f32 {address}, {value}"]
            return address_lines + [f"mov.f32 {d}, 0f00000000", f"@{predicate} atom.global.add.f32 {d}, {address}, {value}"]
        return lines

    prefix = guard(op.mask)
    columns = _columns(op, n)
    dsts = p.define(op.result) if returns else [None] * n
    p.run([Job(d, F32 if returns else None, (base, o, v, m), add(o, v, m, c))
           for d, o, v, m, c in zip(dsts, offsets, values, mask, columns)])


@handles(ops.RedGlobalAddOp)
def print_red_global_add(p: KernelPrinter, op: ops.RedGlobalAddOp) -> None:
    """One predicated `red.global.add.f32` per register at base + offset (+ its column immediate)."""
    _per_register_atomic(p, op, returns=False)


UNGUARDED_WHEN_TRUE.add(ops.RedGlobalAddOp)


@handles(ops.AtomGlobalAddOp)
def print_atom_global_add(p: KernelPrinter, op: ops.AtomGlobalAddOp) -> None:
    """Per register: the result is set to 0, then `@p atom.global.add.f32 d, [addr], v` (an unconditional
    definition first, as `sm90.ld_global` prints, so ptxas sees d defined on every path)."""
    _per_register_atomic(p, op, returns=True)


@handles(ops.BulkReduceAddOp)
def print_bulk_reduce_add(p: KernelPrinter, op: ops.BulkReduceAddOp) -> None:
    p.emit(f"cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [{p.reg(op.dest)}], [{p.reg(op.source)}], "
           f"{op.bytes.value.data}")


@handles(ops.BulkCommitGroupOp)
def print_bulk_commit_group(p: KernelPrinter, op: ops.BulkCommitGroupOp) -> None:
    p.emit("cp.async.bulk.commit_group")


@handles(ops.BulkWaitGroupOp)
def print_bulk_wait_group(p: KernelPrinter, op: ops.BulkWaitGroupOp) -> None:
    read = ".read" if op.read is not None else ""
    p.emit(f"cp.async.bulk.wait_group{read} {op.pending.value.data}")


@handles(ops.CvtUnpackOp)
def print_cvt_unpack(p: KernelPrinter, op: ops.CvtUnpackOp) -> None:
    words = p.regs(op.source)
    dsts = p.define(op.result)
    half = op.half_type.data
    jobs = []
    for i, word in enumerate(words):
        if half == "bf16":
            jobs.append(Job(dsts[2 * i], F32, (word,), lambda d, w=word: [f"shl.b32 {d}, {w}, 16"]))
            jobs.append(Job(dsts[2 * i + 1], F32, (word,), lambda d, w=word: [f"and.b32 {d}, {w}, 0xffff0000"]))
        else:
            def high(d, w=word):
                t = p.temp(B32)
                return [f"shr.b32 {t}, {w}, 16", f"cvt.f32.f16 {d}, {t}"]
            jobs.append(Job(dsts[2 * i], F32, (word,), lambda d, w=word: [f"cvt.f32.f16 {d}, {w}"]))
            jobs.append(Job(dsts[2 * i + 1], F32, (word,), high))
    p.run(jobs)


@handles(ops.StMatrixOp)
def print_stmatrix(p: KernelPrinter, op: ops.StMatrixOp) -> None:
    values = p.regs(op.values)
    trans = ".trans" if op.trans is not None else ""
    p.emit(f"stmatrix.sync.aligned.m8n8.x{len(values)}{trans}.shared.b16 [{p.reg(op.address)}], "
           f"{{{', '.join(values)}}}")


@handles(ops.SemTryWaitOp)
def print_sem_try_wait(p: KernelPrinter, op: ops.SemTryWaitOp) -> None:
    """`ld.acquire.gpu.global.b32 r, [sem]; setp.eq.s32 done, r, expected; @!done nanosleep.u32 N` (the
    back-off lets other warps issue while this one spins)."""
    count = p.temp(B32)
    (done,) = p.define(op.result)
    p.emit(f"ld.acquire.gpu.global.b32 {count}, [{p.reg(op.sem)}]",
           f"setp.eq.s32 {done}, {count}, {p.reg(op.expected)}",
           f"@!{done} nanosleep.u32 {ops.SEM_BACKOFF_NS}")


@handles(ops.SemSignalOp)
def print_sem_signal(p: KernelPrinter, op: ops.SemSignalOp) -> None:
    p.emit(f"red.release.gpu.global.add.s32 [{p.reg(op.sem)}], 1")
