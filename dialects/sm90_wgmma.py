"""Target IR warpgroup matrix multiply, in the `sm90` dialect (`sm90.py` registers it and re-exports each op as
`sm90.X`).

`wgmma.mma_async` with its fence, commit and wait groups, and the shared-memory matrix descriptors it reads
its operands through (made once, then advanced along K). Fragment layouts and descriptor bits come from
`tessera.sm90.facts`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects import arith
from xdsl.dialects.builtin import I32, I64, Float32Type, IntegerAttr, IntegerType, StringAttr, VectorType, i1, i32, i64
from xdsl.ir import SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure
from xdsl.utils.exceptions import VerifyException

from tessera.dialects.sm90_base import int_value, NoOperandSyncOp, i64_attr
from tessera.sm90 import facts
from tessera.ir.diagnostics import require

# region Warpgroup matrix multiply [P#asynchronous-warpgroup-level-matrix-instructions]


@irdl_op_definition
class WgmmaFenceOp(NoOperandSyncOp):
    """`sm90.wgmma_fence`: order register accesses before the next wgmma.mma_async that reads them as
    accumulator or A. Prints as `wgmma.fence.sync.aligned;`."""

    name = "sm90.wgmma_fence"


@irdl_op_definition
class WgmmaCommitGroupOp(NoOperandSyncOp):
    """`sm90.wgmma_commit_group`: close the group of this warpgroup's uncommitted wgmma.mma_async.
    Prints as `wgmma.commit_group.sync.aligned;`."""

    name = "sm90.wgmma_commit_group"


@irdl_op_definition
class WgmmaWaitGroupOp(IRDLOperation):
    """`sm90.wgmma_wait_group 0`: wait until at most N committed wgmma groups are pending; the accumulators
    and A registers of the others may then be touched. Prints as `wgmma.wait_group.sync.aligned N;`."""

    name = "sm90.wgmma_wait_group"
    pending = prop_def(IntegerAttr[I64])
    assembly_format = "$pending attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, pending: int):
        super().__init__(properties={"pending": i64_attr(pending)})

    def verify_(self) -> None:
        require(0 <= int_value(self.pending) <= 7, self, f"pending group count must be in [0, 7], got {int_value(self.pending)}")


@irdl_op_definition
class MakeDescriptorOp(IRDLOperation):
    """`%d = sm90.make_descriptor %addr lbo 16 sbo 1024 swizzle 128 : i64`: the 64-bit shared-memory matrix
    descriptor of the operand at shared address %addr (base offset 0), encoded as
    `tessera.sm90.facts.encode_descriptor`. Invariants: LBO and SBO are multiples of 16 below 2^18."""

    name = "sm90.make_descriptor"
    address = operand_def(I32)
    lbo = prop_def(IntegerAttr[I64])
    sbo = prop_def(IntegerAttr[I64])
    swizzle = prop_def(IntegerAttr[I64])
    result = result_def(I64)
    traits = traits_def(Pure())
    assembly_format = "$address `lbo` $lbo `sbo` $sbo `swizzle` $swizzle attr-dict `:` type($result)"

    def __init__(self, address, lbo: int, sbo: int, swizzle: int):
        props = {"lbo": i64_attr(lbo), "sbo": i64_attr(sbo), "swizzle": i64_attr(swizzle)}
        super().__init__(operands=[address], properties=props, result_types=[i64])

    def verify_(self) -> None:
        try:
            facts.encode_descriptor(0, int_value(self.lbo), int_value(self.sbo), int_value(self.swizzle))
        except ValueError as e:
            raise VerifyException(f"'{self.name}' op {e}") from None


@irdl_op_definition
class DescriptorAdvanceOp(IRDLOperation):
    """`%d2 = sm90.descriptor_advance %d, 32 : i64`: descriptor %d with its start address moved `bytes`
    further (`facts.descriptor_start_delta`: bytes >> 4 added to the start field, bits 13-0). How a wgmma
    chain steps along K without re-encoding. Invariant: bytes is a multiple of 16 below 2^18 and the start
    field does not overflow (the simulator checks it). Prints as one 64-bit add (`add.s64`)."""

    name = "sm90.descriptor_advance"
    descriptor = operand_def(I64)
    bytes = prop_def(IntegerAttr[I64])
    result = result_def(I64)
    traits = traits_def(Pure())
    assembly_format = "$descriptor `,` $bytes attr-dict `:` type($result)"

    def __init__(self, descriptor, nbytes: int):
        super().__init__(operands=[descriptor], properties={"bytes": i64_attr(nbytes)}, result_types=[i64])

    def verify_(self) -> None:
        try:
            facts.descriptor_start_delta(int_value(self.bytes))
        except ValueError as e:
            raise VerifyException(f"'{self.name}' op {e}") from None


@irdl_op_definition
class DescriptorOffsetOp(IRDLOperation):
    """`%d2 = sm90.descriptor_offset %d, %bytes : i64`: descriptor %d with its start address moved %bytes
    further, a byte count known only at run time (an i32: a ring slot's offset, `slot * slot_bytes`):
    (bytes >> 4) added to the start field (bits 13-0), as `sm90.descriptor_advance` adds a constant. With it
    a ring buffer's descriptor is made once, outside the loops, and each trip adds its slot's offset
    (`hoist-invariant-descriptors`), where `sm90.make_descriptor` of the slot's address would mask, shift and
    or on every trip. Invariant: bytes is a non-negative multiple of 16 below 2^18 (the verifier checks a
    constant one, the simulator a run-time one) and the start field does not overflow (the simulator). Prints as a 32-bit shift, a widening and one
    64-bit add (`add.s64`)."""

    name = "sm90.descriptor_offset"
    descriptor = operand_def(I64)
    offset = operand_def(I32)
    result = result_def(I64)
    traits = traits_def(Pure())
    assembly_format = "$descriptor `,` $offset attr-dict `:` type($result)"

    def __init__(self, descriptor, offset):
        super().__init__(operands=[descriptor, offset], result_types=[i64])

    def verify_(self) -> None:
        # An offset known here is held to descriptor_advance's rule; a run-time one is checked by the simulator.
        owner = self.offset.owner
        if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
            try:
                facts.descriptor_start_delta(owner.value.value.data)
            except ValueError as e:
                raise VerifyException(f"'{self.name}' op {e}") from None


WGMMA_TYPES = ("bf16", "f16", "e4m3", "e5m2")
"""The multiplicand types `sm90.wgmma_mma_async` takes (f32 accumulation; A and B of one type, or e4m3 and e5m2
mixed)."""


@irdl_op_definition
class WgmmaMmaAsyncOp(IRDLOperation):
    """`%d = sm90.wgmma_mma_async %acc, %a, %b [scale_d %p] n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64`:
    D = A x B (+ D when scale-d is true), shape m64nNk16 (m64nNk32 for the 8-bit types), f32 accumulators.

    %a is a descriptor (i64, A in shared memory, "SS") or vector<4xi32> (A from registers, packed pairs,
    "RS"); %b is always a descriptor. %acc and the result are vector<N/2 x f32>: thread t holds the
    elements `facts.accumulator_coords`. With no scale_d operand, D is accumulated (scale-d = 1).
    Asynchronous: the result may be touched only after a wgmma_wait_group covers the group it is committed
    in. Prints as `wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 {d...}, a, b, p, 1, 1, tA, tB;`.

    The 8-bit types e4m3 and e5m2 (`tessera.sm90.fp8`) read 32 one-byte elements of K per instruction, the
    same 32 bytes as bf16's 16, and both operands K-major only (trans 0, 0; `facts.wgmma_transpose_immediate`):
    their PTX has no transpose immediates. A register A holds four bytes per register (`fp8.a8_fragment_coords`).

    `type` is A's type and B's; `b_type "e4m3"` after it gives B another type (FP8 training's dgrad/wgrad GEMMs
    multiply e5m2 gradients by e4m3 weights or activations: `.f32.e5m2.e4m3`); the verifier takes it only when it
    differs from `type`, so one wgmma has one spelling. `multiplicand_types` gives (A's, B's).

    Invariants: N is a legal wgmma N for the type (8..256 step 8); type is bf16, f16, e4m3 or e5m2; b_type, when
    given, differs from type and the two mix (`facts.wgmma_multiplicand_types`: e4m3 with e5m2 only); trans_a only
    with a descriptor A; trans flags are 0 or 1, and 0 for the 8-bit types."""

    name = "sm90.wgmma_mma_async"
    T: ClassVar = VarConstraint("T", base(VectorType))
    acc = operand_def(T)
    a = operand_def(base(IntegerType) | base(VectorType))
    b = operand_def(I64)
    scale_d = opt_operand_def(i1)
    n = prop_def(IntegerAttr[I64])
    ab_type = prop_def(StringAttr, prop_name="type")
    b_type = opt_prop_def(StringAttr)
    trans_a = prop_def(IntegerAttr[I64])
    trans_b = prop_def(IntegerAttr[I64])
    result = result_def(T)
    assembly_format = (
        "$acc `,` $a `,` $b (`scale_d` $scale_d^)? `n` $n `type` $type (`b_type` $b_type^)? `trans` $trans_a `,` $trans_b "
        "attr-dict `:` type($acc) `,` type($a)"
    )
    traits = traits_def(MemoryReadEffect())

    def __init__(self, acc, a, b, n: int, ab_type: str, trans_a: int = 0, trans_b: int = 0, scale_d=None,
                 b_type: str | None = None):
        props = {"n": i64_attr(n), "type": StringAttr(ab_type), "trans_a": i64_attr(trans_a),
                 "trans_b": i64_attr(trans_b)}
        if b_type is not None and b_type != ab_type:
            props["b_type"] = StringAttr(b_type)
        super().__init__(operands=[acc, a, b, [scale_d] if scale_d is not None else []], properties=props,
                         result_types=[SSAValue.get(acc).type])

    @property
    def multiplicand_types(self) -> tuple[str, str]:
        """(A's type, B's type): `type` for both unless `b_type` gives B's."""
        a = self.ab_type.data
        return a, a if self.b_type is None else self.b_type.data

    @property
    def a_in_registers(self) -> bool:
        return isinstance(self.a.type, VectorType)

    @property
    def accumulates(self) -> bool:
        """Whether D is added to (False only for a scale_d that is a constant false: then %acc is not read, and
        the printer leaves the result's registers unwritten before the wgmma)."""
        scale = self.scale_d
        if scale is None or not isinstance(scale.owner, arith.ConstantOp):
            return True
        return bool(scale.owner.value.value.data)

    def verify_(self) -> None:
        n, ab = int_value(self.n), self.ab_type.data
        a_type, b_type = self.multiplicand_types
        for name, value in (("type", a_type), ("b_type", b_type)):
            require(value in WGMMA_TYPES, self, f"{name} must be bf16, f16, e4m3 or e5m2, got '{value}'")
        require(self.b_type is None or b_type != a_type, self,
                f"b_type '{b_type}' is type's: give b_type only for a B of another type")
        try:
            facts.wgmma_multiplicand_types(a_type, b_type)
            facts.wgmma_shape(n, ab, "f32")
            for operand, flag, value in (("A", self.trans_a, a_type), ("B", self.trans_b, b_type)):
                facts.wgmma_transpose_immediate("MN" if int_value(flag) == 1 else "K", value, operand)
        except ValueError as e:
            raise VerifyException(f"'{self.name}' op {e}") from None
        regs = facts.accumulator_registers(n, "f32")
        acc = self.acc.type
        require(isinstance(acc.element_type, Float32Type) and acc.get_shape() == (regs,), self,
                f"accumulator must be vector<{regs}xf32> for n = {n}, got {acc}")
        for flag in ("trans_a", "trans_b"):
            require(int_value(getattr(self, flag)) in (0, 1), self, f"{flag} must be 0 or 1")
        if self.a_in_registers:
            require(self.a.type == VectorType(i32, [facts.A_FRAGMENT_REGISTERS]), self,
                    f"a register A operand must be vector<{facts.A_FRAGMENT_REGISTERS}xi32>, got {self.a.type}")
            require(int_value(self.trans_a) == 0, self, "trans_a applies only to an A descriptor")
        else:
            require(self.a.type == i64, self, f"a descriptor A operand must be i64, got {self.a.type}")


# endregion
