"""What every op of the `sm90` dialect shares: the verifier helpers, the register-type constraints, the tensor
map type and the base of the operand-less synchronisation ops.

The ops sit in `sm90.py` (special registers), `sm90_memory.py`, `sm90_sync.py`, `sm90_wgmma.py`,
`sm90_arithmetic.py`, `sm90_cluster.py`, `sm90_reductions.py` and `sm90_cp_async.py`; `sm90.py` registers them
all as the `sm90` dialect (`SM90`, with `TensorMapType`) and re-exports each as `sm90.X`.
"""

from __future__ import annotations

from functools import lru_cache

from xdsl.dialects.builtin import Float32Type, IndexType, IntegerAttr, VectorType, i32
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import EqAttrConstraint, IRDLOperation, base, irdl_attr_definition, traits_def
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect
from xdsl.utils.exceptions import VerifyException


@lru_cache(maxsize=4096)
def i64_attr(value: int) -> IntegerAttr:
    """The i64 attribute of a property (an offset, a count, a mode number), built and verified once per value:
    attributes are immutable, and a lowering gives the same few numbers to hundreds of ops."""
    return IntegerAttr(value, 64)


def int_value(attr: IntegerAttr) -> int:
    return attr.value.data


def lanes(ty: Attribute) -> int:
    """Registers per thread of a value: N for vector<N x T>, else 1. Fragments are 1-D."""
    if isinstance(ty, VectorType):
        if ty.get_num_dims() != 1:
            raise VerifyException(f"registers of a thread are 1-D vectors, got {ty}")
        return ty.get_shape()[0]
    return 1


def element_type(ty: Attribute) -> Attribute:
    return ty.element_type if isinstance(ty, VectorType) else ty


F32_LIKE = base(Float32Type) | base(VectorType)
I32_OR_INDEX = EqAttrConstraint(i32) | base(IndexType)


@irdl_attr_definition
class TensorMapType(ParametrizedAttribute, TypeAttribute):
    """`!sm90.tensormap`: a 128-byte CUtensorMap passed as a kernel parameter (`.param .align 64 .b8 [128]`).

    What it describes (data type, dimensions, box, swizzle, out-of-bounds fill) is the `sm90.tensor_map`
    attribute of the kernel argument, which the host encodes with cuTensorMapEncodeTiled."""

    name = "sm90.tensormap"


class NoOperandSyncOp(IRDLOperation):
    """The base of the operand-less synchronisation ops (`sm90.barrier`, the fences, the cluster barrier's arrive
    and wait): no operand, no result, printed as its name alone, reading and writing memory (so that no pass moves
    memory accesses across it or removes it)."""

    assembly_format = "attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self):
        super().__init__()
