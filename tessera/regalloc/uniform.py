"""Uniform descriptors: the 64-bit wgmma descriptors ptxas keeps in uniform registers (URx), which the
allocator's per-thread count does not include.

A value is *warp-uniform* (the same in every lane of a warp, provably so from its definition) when it is an
integer constant, a `sm90.shared_buffer` address, a kernel argument, a special register of the CTA or grid
(`ctaid`, `nctaid`, `ntid`, cluster ids; not `tid` or `laneid`), a full-warp `sm90.shfl_sync "idx"` (every
lane reads one lane: CUTLASS's and warp-specialize's way of making the warpgroup index uniform), or an integer
`arith` op, `sm90.make_descriptor`, `sm90.descriptor_advance` or `sm90.descriptor_offset` of warp-uniform
operands. Loop-carried values,
loads and everything else are not.

A *uniform descriptor* is the result of a `sm90.make_descriptor`, `sm90.descriptor_advance` or
`sm90.descriptor_offset` that is warp-uniform, is defined outside every `scf.for` (computed once, so ptxas has
no per-trip reason to move it) and is read only as a wgmma descriptor or as the base of another advance or
offset (a ring buffer's descriptor, whose slots the loop reaches by `sm90.descriptor_offset`). HGMMA reads its descriptors from
uniform registers, so ptxas computes such values on the uniform datapath and keeps them there: with all seven
of the flash d128 forward's Q k-step descriptors held over the K/V loops (16 registers by the per-thread
count), ptxas 12.9, 13.0 and 13.5 keep them in URx, with no R2UR and no spill (docs/performance.md).

They cost 0 per-thread registers in `Allocation.peak` and the region pressures, and
`tessera.sm90.warp.UNIFORM_REGISTERS_PER_WARP` bounds them: `UNIFORM_DESCRIPTOR_REGISTERS` of a warp's 63 may
hold such values at once, the rest is left to ptxas' own uniform work (loop descriptors, TMA and mbarrier
addresses, loop counters). A kernel whose uniform descriptors would need more at one position gets the
conservative count for all of them (2 per-thread registers each, as any .b64), so that a kernel the
allocator says fits never depends on uniform registers ptxas may not have. PTX names do not change: they are
.b64 %rd registers like any other (PTX has no uniform registers; ptxas chooses).
"""

from __future__ import annotations

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IntegerType, IndexType
from xdsl.ir import Operation, SSAValue

from tessera.dialects import sm90
from tessera.ir.walk import walk_ops
from tessera.sm90.warp import UNIFORM_REGISTERS_PER_WARP

UNIFORM_DESCRIPTOR_REGISTERS = UNIFORM_REGISTERS_PER_WARP // 2
"""Uniform registers the allocator lets uniform descriptors hold at once (15 descriptors); the other half of a
warp's 63 is left to what ptxas itself puts on the uniform datapath. Measured under ptxas 13.0: the flash d128
forward with all 8 of Q's descriptors (16 registers) held names 39 uniform registers (highest UR45); d256, 50
(highest UR61)."""

_UNIFORM_SPECIALS = ("ctaid.", "nctaid.", "ntid.", "clusterid.", "nclusterid.", "cluster_ctaid.",
                     "cluster_nctaid.", "cluster_ctarank", "cluster_nctarank")
"""Special registers with one value per CTA (or cluster): the same in every lane."""


DESCRIPTOR_OPS = (sm90.MakeDescriptorOp, sm90.DescriptorAdvanceOp, sm90.DescriptorOffsetOp)
"""The ops whose results are wgmma descriptors."""


def _is_integer(value: SSAValue) -> bool:
    return isinstance(value.type, IntegerType | IndexType)


def _in_loop(op: Operation) -> bool:
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent, scf.ForOp):
            return True
        parent = parent.parent_op()
    return False


def _reads_as_descriptor(use) -> bool:
    op = use.operation
    if isinstance(op, sm90.DescriptorAdvanceOp) or (isinstance(op, sm90.DescriptorOffsetOp) and use.index == 0):
        return True
    return isinstance(op, sm90.WgmmaMmaAsyncOp) and use.index in (1, 2) and isinstance(
        op.operands[use.index].type, IntegerType)


_CONSTANT, _SPECIAL, _SHUFFLE, _DESCRIPTOR, _ARITH = range(5)
_KINDS: dict[type, int | None] = {}
"""The kind of each op class `warp_uniform_values` tells apart, decided once per class (xDSL's op classes are
ABCs: a chain of failing isinstance checks per op was most of the walk)."""


def _kind(op: Operation) -> int | None:
    cls = type(op)
    if cls not in _KINDS:
        _KINDS[cls] = (_CONSTANT if issubclass(cls, arith.ConstantOp | sm90.SharedBufferOp) else
                       _SPECIAL if issubclass(cls, sm90.SpecialRegOp) else
                       _SHUFFLE if issubclass(cls, sm90.ShflSyncOp) else
                       _DESCRIPTOR if issubclass(cls, DESCRIPTOR_OPS) else
                       _ARITH if str(getattr(cls, "name", "")).startswith("arith.") else None)
    return _KINDS[cls]


def _uniform_walk(fn: func.FuncOp) -> tuple[set[SSAValue], list[Operation]]:
    """(the warp-uniform values of `fn`, its descriptor ops), in one walk in program order."""
    uniform: set[SSAValue] = {arg for arg in fn.body.block.args}
    descriptors = []
    for op in walk_ops(fn):
        kind = _kind(op)
        if kind is None:
            continue
        if kind == _CONSTANT:
            uniform.update(op.results)
        elif kind == _SPECIAL:
            if op.register.data.startswith(_UNIFORM_SPECIALS):
                uniform.add(op.result)
        elif kind == _SHUFFLE:
            if op.mode.data == "idx" and op.clamp.value.data == 0x1F and _is_integer(op.result):
                uniform.add(op.result)
        elif kind == _DESCRIPTOR or (op.results and all(_is_integer(r) for r in op.results)):
            if kind == _DESCRIPTOR:
                descriptors.append(op)
            if op.operands and all(operand in uniform for operand in op.operands):
                uniform.update(op.results)
    return uniform, descriptors


def warp_uniform_values(fn: func.FuncOp) -> set[SSAValue]:
    """The values of `fn` that are warp-uniform (module docstring), in one walk in program order."""
    return _uniform_walk(fn)[0]


def uniform_descriptors(fn: func.FuncOp) -> set[SSAValue]:
    """The uniform descriptors of `fn` (module docstring), before the register budget of the uniform file."""
    uniform, descriptors = _uniform_walk(fn)
    return {op.result for op in descriptors
            if op.result in uniform
            and not _in_loop(op) and op.result.uses and all(_reads_as_descriptor(u) for u in op.result.uses)}
