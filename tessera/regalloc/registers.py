"""Register classes of Target IR values and the constants that print as PTX immediates (see the package
docstring for how they are allocated)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith, func, math, scf
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr, IntegerAttr
from xdsl.dialects.builtin import Float32Type, IndexType, IntegerType, VectorType
from xdsl.ir import Attribute, SSAValue

from tessera.dialects import sm90
from tessera.ir.walk import walk_ops
from tessera.ir.class_tests import subclass_test



CLASS_PREFIX = {"f32": "%f", "acc": "%fa", "b32": "%r", "b64": "%rd", "pred": "%p"}

IMMEDIATE_OPERANDS = {
    **{op: (1,) for op in (
        arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.AndIOp, arith.OrIOp, arith.XOrIOp, arith.DivSIOp,
        arith.DivUIOp, arith.RemSIOp, arith.RemUIOp, arith.MinSIOp, arith.MaxSIOp, arith.MinUIOp,
        arith.MaxUIOp, arith.CeilDivSIOp, arith.CeilDivUIOp, arith.FloorDivSIOp, arith.ShLIOp, arith.ShRSIOp,
        arith.ShRUIOp, arith.AddfOp, arith.SubfOp, arith.MulfOp,
        arith.MaximumfOp, arith.MinimumfOp, arith.CmpiOp, sm90.SetpOp)},
    math.FmaOp: (1, 2),
    sm90.SelpOp: (1, 2),
    sm90.LdGlobalOp: (1,),
    sm90.LdGlobalU16Op: (1,),
    scf.ForOp: (2,),
}
"""Operand positions where PTX takes an immediate (the b and c sources of ALU instructions; the offsets of a
global load, which become the address's immediate `[%rd+8]`; a loop's step, the latch's `add.s32 iv, iv, 1`,
which would otherwise hold a register through the loop)."""
CLASS_WIDTH = {"f32": 1, "acc": 1, "b32": 1, "b64": 2, "pred": 0}
"""32-bit registers each class costs (predicates live in their own file)."""


is_vector = subclass_test(VectorType)
_is_constant = subclass_test(arith.ConstantOp)
_is_wgmma = subclass_test(sm90.WgmmaMmaAsyncOp)
_is_f32 = subclass_test(Float32Type)
_is_index = subclass_test(IndexType)
_is_integer = subclass_test(IntegerType)


def _per_type(compute: Callable[[Attribute], object]) -> Callable[[Attribute], object]:
    """`compute(ty)`, decided once per type object: the allocator asks a value's class and element count
    several times over (about 12,000 times for the flash d128 kernel), and a kernel has a few dozen distinct
    type objects. Each entry keeps its type alive, so an id is not reused while its entry is held."""
    known: dict[int, tuple[Attribute, object]] = {}

    def lookup(ty: Attribute):
        entry = known.get(id(ty))
        if entry is None or entry[0] is not ty:
            if len(known) > 4096:  # types of kernels compiled long ago
                known.clear()
            entry = known[id(ty)] = (ty, compute(ty))
        return entry[1]

    lookup.__doc__ = compute.__doc__
    return lookup


@_per_type
def register_class(ty: Attribute) -> str | None:
    """The PTX register class of a value of type `ty` (`CLASS_PREFIX`'s keys but "acc"); None for a type that
    takes no register (tensor maps and other parameters)."""
    element = ty.element_type if is_vector(ty) else ty
    if _is_f32(element):
        return "f32"
    if _is_index(element):
        return "b32"
    if _is_integer(element):
        return {1: "pred", 32: "b32", 64: "b64"}.get(element.width.data)
    return None


@_per_type
def element_count(ty: Attribute) -> int:
    """The registers of a class a value of type `ty` takes: a vector's length, else 1."""
    return ty.get_shape()[0] if is_vector(ty) else 1


def immediate_text(value: float | int, ty: Attribute) -> str:
    """PTX immediate syntax: 0fXXXXXXXX for f32 (exact bits), decimal for integers."""
    element = ty.element_type if isinstance(ty, VectorType) else ty
    if isinstance(element, Float32Type):
        import struct

        return "0f%08X" % struct.unpack("<I", struct.pack("<f", value))[0]
    return str(int(value))


def immediates(fn: func.FuncOp) -> dict[SSAValue, list[str]]:
    """Constants every use of which is an operand position that takes a PTX immediate (for a predicate: the
    scale-d of a wgmma, 0 or 1), or the accumulator of a wgmma whose scale-d is a constant 0 (not read: it
    needs neither registers nor instructions)."""
    found = {}
    for op in walk_ops(fn):
        if not _is_constant(op):
            continue
        result = op.results[0]  # (the tuple, not the `result` accessor: about 1,900 reads a compile)
        cls = register_class(result.type)
        if cls is None:
            continue
        uses = list(result.uses)
        if not uses:
            continue
        if cls == "pred":  # only wgmma's scale-d takes a predicate immediate
            takes = all(_is_wgmma(use.operation) and use.operation.scale_d is result for use in uses)
        else:  # an immediate operand, or the accumulator a wgmma with scale-d = 0 does not read
            takes = all(use.index in IMMEDIATE_OPERANDS.get(type(use.operation), ()) or (
                use.index == 0 and _is_wgmma(use.operation) and not use.operation.accumulates) for use in uses)
        if takes:
            attr = op.value
            if isinstance(attr, DenseIntOrFPElementsAttr):
                values = list(attr.get_values())
            elif isinstance(attr, IntegerAttr | FloatAttr):
                values = [attr.value.data]
            else:
                continue
            found[result] = [immediate_text(v, result.type) for v in values]
    return found
