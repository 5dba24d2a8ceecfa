"""Target IR arithmetic the machine does differently, in the `sm90` dialect (`sm90.py` registers it and
re-exports each op as `sm90.X`).

The approximate transcendental functions (ex2, rcp, lg2, tanh, rsqrt), packing pairs of f32 into bf16x2/f16x2 registers,
and register-by-register compare and select on fragments; ordinary arithmetic stays in upstream `arith`.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import I64, Float32Type, IndexType, IntegerAttr, IntegerType, StringAttr, VectorType, i1, i32
from xdsl.ir import SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure

from tessera.dialects.sm90_base import F32_LIKE, element_type, lanes, i64_attr
from tessera.sm90.fp8 import FP8_FORMATS
from tessera.ir.diagnostics import require

# region Arithmetic the machine does differently [P#floating-point-instructions-ex2, -rcp; P#...-cvt]


class _ApproxUnaryOp(IRDLOperation):
    T: ClassVar = VarConstraint("T", F32_LIKE)
    source = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source)"

    def __init__(self, source):
        super().__init__(operands=[source], result_types=[SSAValue.get(source).type])

    def verify_(self) -> None:
        require(isinstance(element_type(self.source.type), Float32Type), self, f"operates on f32 registers, got {self.source.type}")


@irdl_op_definition
class Ex2ApproxOp(_ApproxUnaryOp):
    """`%r = sm90.ex2_approx %x : f32`: 2^x per register, `ex2.approx.ftz.f32` (max relative error 2^-22
    for |x| < 126 [P#floating-point-instructions-ex2]; ex2(-inf) = +0)."""

    name = "sm90.ex2_approx"


@irdl_op_definition
class RcpApproxOp(_ApproxUnaryOp):
    """`%r = sm90.rcp_approx %x : f32`: 1/x per register, `rcp.approx.ftz.f32` (max relative error 2^-23
    [P#floating-point-instructions-rcp]); rcp(0) = +inf."""

    name = "sm90.rcp_approx"


@irdl_op_definition
class Lg2ApproxOp(_ApproxUnaryOp):
    """`%r = sm90.lg2_approx %x : f32`: log2(x) per register, `lg2.approx.ftz.f32` (max absolute error
    2^-22 for x in [0.5, 2], else max relative error 2^-22 [P#floating-point-instructions-lg2];
    `tessera.sm90.facts.LG2_APPROX_ERROR`). lg2(+0) = lg2(subnormal) = -inf (ftz), lg2(x < 0) = NaN,
    lg2(+inf) = +inf. The forward's log-sum-exp: ln(l) = lg2(l) * ln 2."""

    name = "sm90.lg2_approx"


@irdl_op_definition
class TanhApproxOp(_ApproxUnaryOp):
    """`%r = sm90.tanh_approx %x : f32`: tanh(x) per register, `tanh.approx.f32` (sm_75+; no .ftz form:
    subnormals are kept; max relative error `tessera.sm90.approx.TANH_APPROX_RELATIVE_ERROR`
    [P#floating-point-instructions-tanh]); tanh(+-inf) = +-1, tanh(+-0) = +-0."""

    name = "sm90.tanh_approx"


@irdl_op_definition
class SinApproxOp(_ApproxUnaryOp):
    """`%r = sm90.sin_approx %x : f32`: sin(x) per register, `sin.approx.f32` (no .ftz: subnormals are kept;
    max absolute error 2^-20.5 on [-2 pi, 2 pi], 2^-14.7 on [-100 pi, 100 pi], none beyond:
    `tessera.sm90.approx.SIN_COS_APPROX_ABSOLUTE_ERROR` [P#floating-point-instructions-sin]); sin(+-inf) = NaN,
    sin(+-0) = +-0."""

    name = "sm90.sin_approx"


@irdl_op_definition
class CosApproxOp(_ApproxUnaryOp):
    """`%r = sm90.cos_approx %x : f32`: cos(x) per register, `cos.approx.f32` (no .ftz; the bounds of
    `sm90.sin_approx` [P#floating-point-instructions-cos]); cos(+-inf) = NaN, cos(+-0) = 1."""

    name = "sm90.cos_approx"


@irdl_op_definition
class RsqrtApproxOp(_ApproxUnaryOp):
    """`%r = sm90.rsqrt_approx %x : f32`: 1/sqrt(x) per register, `rsqrt.approx.ftz.f32` (max relative error
    `tessera.sm90.approx.RSQRT_APPROX_RELATIVE_ERROR` [P#floating-point-instructions-rsqrt]); rsqrt(+0) = +inf,
    rsqrt(+inf) = +0, NaN for x < 0; subnormal inputs flush to zero."""

    name = "sm90.rsqrt_approx"


@irdl_op_definition
class CvtPackOp(IRDLOperation):
    """`%p = sm90.cvt_pack %x type "bf16" : vector<64xf32> -> vector<32xi32>`: round pairs of f32 to
    bf16 (or f16), nearest even, and pack each pair (x[2i], x[2i+1]) into one 32-bit register with x[2i]
    in the LOW half, as `cvt.rn.bf16x2.f32 p, x[2i+1], x[2i];` does (first source in the upper half).

    With an 8-bit type (e4m3, e5m2) each pair becomes two bytes in bits 15:0, x[2i] in bits 7:0, rounded as
    `cvt.rn.satfinite.<type>x2.f32 h, x[2i+1], x[2i]` does (nearest even; beyond MAX_NORM and infinities to
    +-MAX_NORM; NaN stays NaN: `facts.cvt_rn_satfinite_x2`), bits 31:16 zero: the pairs an FP8 tile is stored in
    (`sm90.st_global_b16`). Prints as that cvt into a 16-bit register and `cvt.u32.u16 p, h`. Invariants: an even
    number of f32 registers in, half as many i32 out; type bf16, f16, e4m3 or e5m2."""

    name = "sm90.cvt_pack"
    source = operand_def(base(VectorType))
    half_type = prop_def(StringAttr, prop_name="type")
    result = result_def(base(VectorType))
    traits = traits_def(Pure())
    assembly_format = "$source `type` $type attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source, half_type: str):
        n = lanes(SSAValue.get(source).type)
        super().__init__(operands=[source], properties={"type": StringAttr(half_type)},
                         result_types=[VectorType(i32, [n // 2])])

    def verify_(self) -> None:
        n = lanes(self.source.type)
        require(self.half_type.data in ("bf16", "f16", *FP8_FORMATS), self,
                f"type must be bf16, f16, e4m3 or e5m2, got '{self.half_type.data}'")
        require(isinstance(element_type(self.source.type), Float32Type) and n % 2 == 0, self,
                f"source must be an even number of f32 registers, got {self.source.type}")
        require(self.result.type == VectorType(i32, [n // 2]), self, f"result must be vector<{n // 2}xi32>, got {self.result.type}")


@irdl_op_definition
class CvtPackFp8Op(IRDLOperation):
    """`%a = sm90.cvt_pack_fp8 %d type "e4m3" : vector<64xf32> -> vector<16xi32>`: the A operand of an 8-bit
    P.V wgmma from the f32 accumulator P of the scores, in each thread's own registers: for every K-slice s
    (P columns 32s .. 32s + 31, accumulator elements d[16s .. 16s + 15]), register 4s + j holds the four
    elements `facts.p8_register_sources(s)[j]`, low byte first, each rounded as `cvt.rn.satfinite.<type>x2.f32`
    does (nearest even; beyond MAX_NORM and infinities to +-MAX_NORM; NaN stays NaN).

    No value crosses threads; the keys land at k-positions `facts.P8_KEY_ORDER` instead of their own, so the
    B operand (V^T) must hold its keys in that order. Prints as two `cvt.rn.satfinite.<type>x2.f32` and one
    `mov.b32 a, {lo, hi}` per register. Invariants: a multiple of 16 f32 registers in, a quarter as many i32
    out; type e4m3 or e5m2."""

    name = "sm90.cvt_pack_fp8"
    source = operand_def(base(VectorType))
    fp8_type = prop_def(StringAttr, prop_name="type")
    result = result_def(base(VectorType))
    traits = traits_def(Pure())
    assembly_format = "$source `type` $type attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source, fp8_type: str):
        n = lanes(SSAValue.get(source).type)
        super().__init__(operands=[source], properties={"type": StringAttr(fp8_type)},
                         result_types=[VectorType(i32, [n // 4])])

    def verify_(self) -> None:
        n = lanes(self.source.type)
        require(self.fp8_type.data in FP8_FORMATS, self, f"type must be e4m3 or e5m2, got '{self.fp8_type.data}'")
        require(isinstance(element_type(self.source.type), Float32Type) and n % 16 == 0, self,
                f"source must be a multiple of 16 f32 registers (whole 32-key slices), got {self.source.type}")
        require(self.result.type == VectorType(i32, [n // 4]), self, f"result must be vector<{n // 4}xi32>, got {self.result.type}")


@irdl_op_definition
class PrmtOp(IRDLOperation):
    """`%d = sm90.prmt %a, %b selector 0x5140 : vector<4xi32>`: register by register, pick four bytes of the pair
    {b, a} (bytes 0-3 from a, 4-7 from b) into d, byte i by the 4-bit field i of the constant selector
    (`facts.prmt_b32`; bit 3 of a field replicates the byte's sign). Prints as `prmt.b32 d, a, b, SELECTOR;`
    [P#data-movement-and-conversion-instructions-prmt], the generic form; FlashAttention-3 transposes 8-bit
    tiles with it. Invariants: a, b and d of one i32 type; selector in [0, 0xFFFF]."""

    name = "sm90.prmt"
    T: ClassVar = VarConstraint("T", base(VectorType) | base(IntegerType))
    a = operand_def(T)
    b = operand_def(T)
    selector = prop_def(IntegerAttr[I64])
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$a `,` $b `selector` $selector attr-dict `:` type($result)"

    def __init__(self, a, b, selector: int):
        super().__init__(operands=[a, b], properties={"selector": i64_attr(selector)},
                         result_types=[SSAValue.get(a).type])

    def verify_(self) -> None:
        require(element_type(self.result.type) == i32, self, f"permutes the bytes of i32 registers, got {self.result.type}")
        selector = self.selector.value.data
        require(0 <= selector <= 0xFFFF, self, f"selector must be four 4-bit fields (0 .. 0xFFFF), got {selector}")


@irdl_op_definition
class CvtOp(IRDLOperation):
    """`%r = sm90.cvt %x : vector<32xi32> -> vector<32xf32>`: convert register by register between s32 and f32:
    s32 to f32 rounds to nearest even (`cvt.rn.f32.s32`), f32 to s32 truncates toward zero, saturates and gives
    0 for NaN (`cvt.rzi.s32.f32`) [P#data-movement-and-conversion-instructions-cvt]. Upstream `arith.sitofp` and
    `arith.fptosi` in xDSL 0.74 convert scalars only."""

    name = "sm90.cvt"
    source = operand_def(base(Float32Type) | base(IntegerType) | base(VectorType))
    result = result_def(base(Float32Type) | base(IntegerType) | base(VectorType))
    traits = traits_def(Pure())
    assembly_format = "$source attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source, result_type):
        super().__init__(operands=[source], result_types=[result_type])

    def verify_(self) -> None:
        src, dst = element_type(self.source.type), element_type(self.result.type)
        require({src, dst} == {i32, Float32Type()}, self, f"converts between i32 and f32, got {src} -> {dst}")
        require(lanes(self.source.type) == lanes(self.result.type) and
                isinstance(self.source.type, VectorType) == isinstance(self.result.type, VectorType), self,
                f"keeps the register count: {self.source.type} -> {self.result.type}")


@irdl_op_definition
class SetpOp(IRDLOperation):
    """`%p = sm90.setp "lt" %a, %b : vector<64xi64> -> vector<64xi1>`: compare register by register
    (integers signed, floats ordered: a NaN compares false except for `ne`). Prints as `setp.CMP.TYPE`.
    Upstream `arith.cmpi/cmpf` in xDSL 0.74 compare scalars only; predicates of fragments need this."""

    name = "sm90.setp"
    PREDICATES: ClassVar[tuple[str, ...]] = ("eq", "ne", "lt", "le", "gt", "ge")
    T: ClassVar = VarConstraint("T", base(Float32Type) | base(IntegerType) | base(IndexType) | base(VectorType))
    predicate = prop_def(StringAttr)
    lhs = operand_def(T)
    rhs = operand_def(T)
    result = result_def(base(IntegerType) | base(VectorType))
    traits = traits_def(Pure())
    assembly_format = "$predicate $lhs `,` $rhs attr-dict `:` type($lhs) `->` type($result)"

    def __init__(self, predicate: str, lhs, rhs):
        ty = SSAValue.get(lhs).type
        result = VectorType(i1, [lanes(ty)]) if isinstance(ty, VectorType) else i1
        super().__init__(operands=[lhs, rhs], properties={"predicate": StringAttr(predicate)}, result_types=[result])

    def verify_(self) -> None:
        require(self.predicate.data in self.PREDICATES, self,
                f"predicate must be one of {', '.join(self.PREDICATES)}, got '{self.predicate.data}'")
        ty = self.lhs.type
        expected = VectorType(i1, [lanes(ty)]) if isinstance(ty, VectorType) else i1
        require(self.result.type == expected, self, f"result must be {expected}, got {self.result.type}")


@irdl_op_definition
class SelpOp(IRDLOperation):
    """`%r = sm90.selp %p, %a, %b : vector<64xi1>, vector<64xf32>`: r = p ? a : b register by register.
    Prints as `selp.TYPE`."""

    name = "sm90.selp"
    T: ClassVar = VarConstraint("T", base(Float32Type) | base(IntegerType) | base(IndexType) | base(VectorType))
    condition = operand_def(base(IntegerType) | base(VectorType))
    lhs = operand_def(T)
    rhs = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure())
    assembly_format = "$condition `,` $lhs `,` $rhs attr-dict `:` type($condition) `,` type($lhs)"

    def __init__(self, condition, lhs, rhs):
        super().__init__(operands=[condition, lhs, rhs], result_types=[SSAValue.get(lhs).type])

    def verify_(self) -> None:
        ty = self.lhs.type
        expected = VectorType(i1, [lanes(ty)]) if isinstance(ty, VectorType) else i1
        require(self.condition.type == expected, self, f"condition must be {expected}, got {self.condition.type}")


# endregion
