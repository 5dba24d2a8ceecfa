"""convert-tile-to-sm90, tile.mma: wgmma chains over K through shared-memory descriptors (or A from registers)."""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float8E4M3FNType,
    Float8E5M2Type,
    IntegerAttr,
    i1,
    i32,
)
from xdsl.ir import Block, SSAValue

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import a_operand_registers
from tessera.sm90 import facts
from tessera.passes.convert_tile_to_sm90.common import (
    LINE,
    CORE_ROWS,
    K_STEP,
    refuse,
    SharedTile,
    PendingMma,
)


FP8_WGMMA_TYPES = ("e4m3", "e5m2")
"""The 8-bit wgmma operand types: k32 steps, both operands K-major."""


def _wgmma_type(element) -> str:
    """The wgmma operand type of a tile element type (bf16, f16, e4m3 or e5m2)."""
    if isinstance(element, BFloat16Type):
        return "bf16"
    if isinstance(element, Float8E4M3FNType):
        return "e4m3"
    if isinstance(element, Float8E5M2Type):
        return "e5m2"
    return "f16"


class MmaLowering:
    """The Mma handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _lower_MmaOp(self, op: tile.MmaOp, e: Emitter) -> None:
        """One wgmma group: fence, the chain over K, commit. It is NOT waited for here: the wait comes at
        the first use of the result (`_get`), before control flow, or before its shared operands are
        released or refilled, so independent work (the softmax of another tile) runs meanwhile."""
        a, b = (self._get(v) for v in (op.a, op.b))
        # an accumulate branch's mma chains onto the group in flight that writes its accumulator (control.py)
        acc = self.values[op.acc] if op in self.accumulating else self._get(op.acc)
        ab, b_type = _wgmma_type(op.a.type.element_type), _wgmma_type(op.b.type.element_type)  # e4m3/e5m2 mix
        k = op.a.type.get_shape()[0 if op.transpose_a else 1]
        n = op.acc.type.get_shape()[1]
        k_step = facts.WGMMA_K_BYTES * 8 // facts.WGMMA_ELEMENT_BITS[ab]  # 32 bytes of K: k16 for 16-bit types, k32 for e4m3/e5m2
        if k % k_step:
            refuse(op, f"the contraction size must be a multiple of {k_step}, got {k}")
        if not isinstance(b, SharedTile):
            refuse(op, "operand B must be in shared memory")
        transposed = self._is_transposed_stage(op.b)  # V^T written by the producer's transpose (transpose.py)
        if ab in FP8_WGMMA_TYPES and (op.transpose_a or not (op.transpose_b or transposed)):
            refuse(op, f"8-bit ({ab}) operands must both be K-major (A [M, K], B given as B^T [N, K] with "
                        "transpose_b): wgmma's MN-major (transposed) forms take 16-bit types only")
        if ab in FP8_WGMMA_TYPES and not isinstance(a, SharedTile) and not transposed:
            self._check_p8_key_order(op)
        # K-major operands: A [M, K] and B^T [N, K] tiles (imm-trans 0); MN-major ones: A^T [K, M] and B [K, N]
        # tiles (imm-trans 1, 16-bit types only). Each warpgroup reads its 64 rows of A: 64 K-major rows further,
        # or, MN-major, the next box (64 16-bit columns are one 128-byte box row).
        trans_a = facts.wgmma_transpose_immediate("MN" if op.transpose_a else "K", ab, "A")
        trans_b = facts.wgmma_transpose_immediate("K" if op.transpose_b or transposed else "MN", b_type, "B")
        reads = [t for t in (a, b) if isinstance(t, SharedTile)]
        for value, t in ((op.a, a), (op.b, b)):
            if isinstance(t, SharedTile):
                self._await_stage(value, t, e)
        if isinstance(a, SharedTile) and trans_a:
            if a.box_cols != facts.WGMMA_M:
                refuse(op, f"an MN-major A needs boxes of {facts.WGMMA_M} columns, got {a.box_cols}")
            box_offset = e.op(arith.MuliOp(self.warpgroup, e.op(arith.ConstantOp(IntegerAttr(a.box_bytes, i32)))))
            a_base = self._descriptor(e, e.op(arith.AddiOp(a.address, box_offset)), a, True)
        elif isinstance(a, SharedTile):
            # the warpgroup's 64 rows of A are 64 box rows further
            row_offset = self.a_row_offset if a.swizzle == LINE else e.op(arith.MuliOp(
                self.warpgroup, e.op(arith.ConstantOp(IntegerAttr(facts.WGMMA_M * a.swizzle, i32)))))
            a_base = self._descriptor(e, e.op(arith.AddiOp(a.address, row_offset)), a, False)
        b_base = self._descriptor(e, b.address, b, bool(trans_b))
        zero = _is_zero_splat(acc)
        e.op(sm90.WgmmaFenceOp())
        for step in range(k // k_step):
            if isinstance(a, SharedTile):
                a_operand = self._step(e, a_base, self._operand_offset(a, trans_a, step))
            elif ab in FP8_WGMMA_TYPES:  # sm90.cvt_pack_fp8's registers: four per k32 slice
                a_operand = e.shuffle(a, list(range(4 * step, 4 * step + 4)))
            else:
                a_operand = e.shuffle(a, a_operand_registers(step))
            b_desc = self._step(e, b_base, self._operand_offset(b, trans_b, step))
            # A chain that starts from zeros starts with scale-d = 0 (D = A B): the zeros are never written
            # (CUTLASS's ScaleOut::Zero); the printer leaves the accumulator's registers as they are.
            scale_d = e.op(arith.ConstantOp(IntegerAttr(0, i1))) if zero and step == 0 else None
            acc = e.op(sm90.WgmmaMmaAsyncOp(acc, a_operand, b_desc, n, ab, trans_a, trans_b, scale_d=scale_d,
                                            b_type=b_type))
        e.op(sm90.WgmmaCommitGroupOp())
        self._set(op.result, acc)
        self.pending.append(PendingMma(op.result, reads, None if isinstance(a, SharedTile) else op.a))

    def _check_p8_key_order(self, op: tile.MmaOp) -> None:
        """An 8-bit A in registers (`sm90.cvt_pack_fp8`) holds its keys in the order `facts.P8_KEY_ORDER`, so the
        B tile must be filled only from inputs given in that order (`tile.key_order = "p8"`): refuse otherwise."""
        root = op.b.owner.source if isinstance(op.b.owner, tile.StageOp) else op.b
        sources = set()
        for copy in self.fn.walk():
            if isinstance(copy, tile.ASYNC_COPY_OPS):
                dest = copy.dest.owner.source if isinstance(copy.dest.owner, tile.StageOp) else copy.dest
                if dest is root:
                    view = copy.source.owner if isinstance(copy, tile.CpAsyncOp) else None
                    sources.add(view.source.index if isinstance(view, tile.ViewOp)
                                and isinstance(view.source.owner, Block) else None)
        if not sources or any(s is None or self.sig.args[s].key_order != "p8" for s in sources):
            refuse(op, "an 8-bit P in registers (sm90.cvt_pack_fp8) holds its keys in P8 key order, so the B "
                        "operand must be copied by TMA from an input in that order (tile.key_order = \"p8\": "
                        "flash_attention(dtype='e4m3', v_transposed='p8'))")

    @classmethod
    def _operand_offset(cls, t: SharedTile, mn_major: int, step: int) -> int:
        """Bytes from an operand tile's start to k-step `step`: 16 box rows further for an MN-major tile (K
        runs down its rows), `_k_major_offset` for a K-major one."""
        return step * K_STEP * t.swizzle if mn_major else cls._k_major_offset(t, step)

    @staticmethod
    def _k_major_offset(t: SharedTile, step: int) -> int:
        """Bytes from a K-major tile's start to k-step `step`: whole boxes, then 32 bytes per step within."""
        byte = step * facts.WGMMA_K_BYTES
        return (byte // t.swizzle) * t.box_bytes + byte % t.swizzle

    @staticmethod
    def _descriptor(e: Emitter, start: SSAValue, t: SharedTile, mn_major: bool) -> SSAValue:
        """The descriptor of operand tile `t` from `start`, in the canonical swizzled layouts of its swizzle W
        (`facts.canonical_layout_offset`): 8-row groups SBO = 8 W apart; MN-major, the next W bytes of M/N are
        the next box (LBO = box bytes); K-major, LBO is unused (16, CUTLASS's 1 in encoded units)."""
        lbo = t.box_bytes if mn_major else facts.SWIZZLE_CHUNK_BYTES
        return e.op(sm90.MakeDescriptorOp(start, lbo, CORE_ROWS * t.swizzle, t.swizzle))

    @staticmethod
    def _step(e: Emitter, base: SSAValue, offset: int) -> SSAValue:
        """The descriptor `offset` bytes after `base`'s start (one 64-bit add in PTX)."""
        if not offset:
            return base
        return e.op(sm90.DescriptorAdvanceOp(base, offset))



def _is_zero_splat(value: SSAValue) -> bool:
    """Whether `value` is an `arith.constant` of +0.0 in every lane (a `tile.fill 0.0`)."""
    owner = value.owner
    if not isinstance(owner, arith.ConstantOp) or not isinstance(owner.value, DenseIntOrFPElementsAttr):
        return False
    values = list(owner.value.get_values())
    return bool(values) and all(v == 0.0 and str(v) == "0.0" for v in values)
