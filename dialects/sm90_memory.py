"""Target IR memory ops, in the `sm90` dialect (`sm90.py` registers them and re-exports each as `sm90.X`).

Shared-memory buffers at byte offsets with their swizzle, the bulk tensor copy (TMA) that completes on an
mbarrier, global loads and stores of register fragments (with their per-register address immediates,
`COLUMN_BYTES`) and shared loads and stores. The cluster's multicast copy is in `sm90_cluster.py`, Ampere's
cp.async in `sm90_cp_async.py`, the backward's reductions and stmatrix in `sm90_reductions.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I32,
    I64,
    DenseArrayBase,
    Float32Type,
    IntegerAttr,
    IntegerType,
    StringAttr,
    VectorType,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    base,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure

from tessera.dialects.sm90_base import I32_OR_INDEX, TensorMapType, element_type, int_value, lanes, i64_attr
from tessera.sm90 import facts
from tessera.ir.diagnostics import require

# region Shared memory [P#state-spaces-shared]


@irdl_op_definition
class SharedBufferOp(IRDLOperation):
    """`%a = sm90.shared_buffer "name" offset 0 size 32768 align 1024 swizzle 128 : i32`: the 32-bit shared
    address of a buffer of the kernel's dynamic shared memory (`.extern .shared .align 1024 .b8 smem[]`).

    Invariants: offset is a multiple of align; align is a power of two, at least the swizzle period
    (1024/512/256 bytes for 128/64/32B swizzles, so that descriptors use base offset 0) and at least 8
    (the mbarrier size), at most 1024. Of one kernel, buffers lie within its `smem_bytes` and do not overlap
    (`tessera.target_kernel_abi`, which every module verification runs)."""

    name = "sm90.shared_buffer"
    sym = prop_def(StringAttr)
    offset = prop_def(IntegerAttr[I64])
    size = prop_def(IntegerAttr[I64])
    alignment = prop_def(IntegerAttr[I64])
    swizzle = prop_def(IntegerAttr[I64])
    result = result_def(I32)
    traits = traits_def(Pure())
    assembly_format = (
        "$sym `offset` $offset `size` $size `align` $alignment `swizzle` $swizzle attr-dict `:` type($result)"
    )

    def __init__(self, sym: str, offset: int, size: int, alignment: int, swizzle: int = 0):
        props = {"sym": StringAttr(sym), "offset": i64_attr(offset), "size": i64_attr(size),
                 "alignment": i64_attr(alignment), "swizzle": i64_attr(swizzle)}
        super().__init__(properties=props, result_types=[i32])

    def verify_(self) -> None:
        offset, size, align, swizzle = (int_value(a) for a in (self.offset, self.size, self.alignment, self.swizzle))
        require(swizzle in facts.SWIZZLE_MODES, self, f"swizzle must be one of {facts.SWIZZLE_MODES} bytes, got {swizzle}")
        # at most the 128B swizzle's period: the printed kernel rounds its shared memory's base up to the largest
        # alignment of its buffers at run time (.align in PTX, and as many bytes more at launch)
        largest = facts.swizzle_period_bytes(max(facts.SWIZZLE_MODES))
        require(facts.MBARRIER_BYTES <= align <= largest and align & (align - 1) == 0, self,
                f"alignment must be a power of two from {facts.MBARRIER_BYTES} to {largest}, got {align}")
        require(align >= facts.swizzle_period_bytes(swizzle), self,
                f"a {swizzle}B swizzle needs {facts.swizzle_period_bytes(swizzle)}-byte alignment, got {align}")
        require(offset >= 0 and offset % align == 0, self, f"offset {offset} is not a multiple of the alignment {align}")
        require(size > 0, self, f"size must be positive, got {size}")


# endregion
# region Asynchronous copies: TMA [P#data-movement-and-conversion-instructions-cp-async-bulk-tensor]


@irdl_op_definition
class TmaLoadOp(IRDLOperation):
    """`sm90.tma_load %map[%c0, %c1, ...], %dst, %mbar : index, index, ...`: one bulk tensor copy of the map's
    box at the given element coordinates (innermost first, may be out of bounds: those elements land as
    zero) into shared memory at %dst, completing `box bytes` of transaction on the mbarrier at %mbar.
    Prints as `cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes`.

    Invariants: 1 to 5 coordinates (i32 or index); %dst must be 128-byte aligned at run time. Every thread
    that executes it starts a copy: predicate it to one thread."""

    name = "sm90.tma_load"
    tensor_map = operand_def(TensorMapType)
    coords = var_operand_def(I32_OR_INDEX)
    dest = operand_def(I32)
    mbarrier = operand_def(I32)
    assembly_format = "$tensor_map `[` $coords `]` `,` $dest `,` $mbarrier attr-dict `:` type($coords)"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, tensor_map, coords: Sequence, dest, mbarrier):
        super().__init__(operands=[tensor_map, list(coords), dest, mbarrier])

    def verify_(self) -> None:
        require(1 <= len(self.coords) <= 5, self, f"a tensor copy has 1 to 5 coordinates, got {len(self.coords)}")


# endregion
# region Global memory [P#data-movement-and-conversion-instructions-st]


COLUMN_BYTES = """`column_bytes` (optional on `sm90.ld_global`, `sm90.ld_global_u16`, `sm90.st_global` and
`sm90.st_global_b16`; absent means all 0): a constant
byte offset per register, added to base + offsets[i]. It prints as the immediate of the address (`[%rd+imm]`),
so the register offsets hold only what varies at run time (the row pitch times the register's row). The
lowering of a window access puts each register's column there: its offsets then take as many distinct values
as the thread has rows (2), which ptxas folds into as many addresses, instead of one distinct offset per
register (64) that stays live from a load to a store of the same window (the second pass of three-pass
attention spilled under ptxas 13.3 with them). Invariant: one i32 entry per register."""


def column_bytes_properties(column_bytes: Sequence[int] | None) -> dict[str, Attribute]:
    """The properties of a global access with these per-register immediates (none when all are 0)."""
    if column_bytes is None or not any(column_bytes):
        return {}
    return {"column_bytes": DenseArrayBase.from_list(i32, list(column_bytes))}


def column_bytes_of(op: Operation, n: int) -> list[int]:
    """The `column_bytes` immediate of each of the `n` registers of an access (0 for each where it has none)."""
    return [0] * n if op.column_bytes is None else list(op.column_bytes.get_values())


def verify_column_bytes(op: Operation, n: int) -> None:
    """A global access's optional `column_bytes`: one i32 immediate per register of its `n`."""
    columns = op.column_bytes
    if columns is None:
        return
    require(columns.elt_type == i32 and len(columns.get_values()) == n, op,
            f"column_bytes must be {n} i32 values (one per register), got {columns}")


def verify_offsets_and_mask(op: IRDLOperation, n: int) -> None:
    """A per-register global access's address and predicate operands: one offset (i64, or i32 sign-extended) and
    one mask bit per register."""
    require(op.offsets.type in (VectorType(i64, [n]), VectorType(i32, [n])), op,
            f"offsets must be vector<{n}xi64> or vector<{n}xi32> (sign-extended), got {op.offsets.type}")
    require(op.mask.type == VectorType(i1, [n]), op, f"mask must be vector<{n}xi1>, got {op.mask.type}")


class _StGlobalBase(IRDLOperation):
    """What sm90.st_global and sm90.st_global_b16 share: `%base[%offsets], %values, %mask`, one offset, value and
    mask bit per register, the optional column_bytes, and their verifier; a subclass names the op, the register
    element types it stores (`STORED_ELEMENTS`) and how its verifier says so (`STORED_WHAT`)."""

    STORED_ELEMENTS: ClassVar[tuple] = ()
    STORED_WHAT: ClassVar[str] = ""
    irdl_options = (ParsePropInAttrDict(),)
    base_ptr = operand_def(I64)
    offsets = operand_def(base(VectorType))
    values = operand_def(base(VectorType))
    mask = operand_def(base(VectorType))
    column_bytes = opt_prop_def(DenseArrayBase)
    assembly_format = "$base_ptr `[` $offsets `]` `,` $values `,` $mask attr-dict `:` type($offsets) `,` type($values) `,` type($mask)"
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, base_ptr, offsets, values, mask, column_bytes: Sequence[int] | None = None):
        super().__init__(operands=[base_ptr, offsets, values, mask], properties=column_bytes_properties(column_bytes))

    def verify_(self) -> None:
        n = lanes(self.values.type)
        verify_column_bytes(self, n)
        require(element_type(self.values.type) in self.STORED_ELEMENTS, self,
                f"{self.STORED_WHAT}, got {self.values.type}")
        verify_offsets_and_mask(self, n)


@irdl_op_definition
class StGlobalOp(_StGlobalBase):
    """`sm90.st_global %base[%offsets], %values, %mask : vector<32xi64>, vector<32xi32>, vector<32xi1>`: for each register i whose mask
    bit is set, store values[i] (32 bits) at global byte address base + offsets[i] + column_bytes[i].
    Prints as one predicated `st.global.b32` per register. Invariants: offsets, values and mask have one
    entry per register; offsets are multiples of 4 at run time. See `COLUMN_BYTES`."""

    name = "sm90.st_global"
    STORED_ELEMENTS: ClassVar[tuple] = (i32, Float32Type())
    STORED_WHAT: ClassVar[str] = "stores 32-bit registers"


@irdl_op_definition
class StGlobalB16Op(_StGlobalBase):
    """`sm90.st_global_b16 %base[%offsets], %values, %mask : vector<32xi32>, vector<32xi32>, vector<32xi1>`: for
    each register i whose mask bit is set, store the low 16 bits of values[i] at global byte address base +
    offsets[i] + column_bytes[i]. For 16-bit tensors whose rows need not start on 4 bytes (an odd innermost
    size): a packed pair there would straddle a 4-byte boundary, which `st.global.b32` refuses (misaligned
    address); and for 8-bit tensors, one byte pair (`sm90.cvt_pack` to e4m3/e5m2) per register. Prints as one predicated `st.global.b16` of the 32-bit register per register (PTX lets st's
    source be wider than its type: the low bits are stored [P#operand-size-exceeding-instruction-type-size]).
    Invariants: one offset and one mask bit per register; addresses are even at run time. See
    `COLUMN_BYTES`."""

    name = "sm90.st_global_b16"
    STORED_ELEMENTS: ClassVar[tuple] = (i32,)
    STORED_WHAT: ClassVar[str] = "stores from 32-bit integer registers"


class _LdGlobalBase(IRDLOperation):
    """What sm90.ld_global and sm90.ld_global_u16 share: `%base[%offsets], %mask -> result`, one offset and mask
    bit per register, the optional column_bytes, and their verifier; a subclass names the op, its builder, the
    register element types it loads into (`LOADED_ELEMENTS`) and how its verifier says so (`LOADED_WHAT`)."""

    LOADED_ELEMENTS: ClassVar[tuple] = ()
    LOADED_WHAT: ClassVar[str] = ""
    irdl_options = (ParsePropInAttrDict(),)
    base_ptr = operand_def(I64)
    offsets = operand_def(base(VectorType))
    mask = operand_def(base(VectorType))
    column_bytes = opt_prop_def(DenseArrayBase)
    result = result_def(base(VectorType))
    assembly_format = "$base_ptr `[` $offsets `]` `,` $mask attr-dict `:` type($offsets) `,` type($mask) `->` type($result)"
    traits = traits_def(MemoryReadEffect())

    def verify_(self) -> None:
        n = lanes(self.result.type)
        verify_column_bytes(self, n)
        require(element_type(self.result.type) in self.LOADED_ELEMENTS, self, f"{self.LOADED_WHAT}, got {self.result.type}")
        verify_offsets_and_mask(self, n)


@irdl_op_definition
class LdGlobalOp(_LdGlobalBase):
    """`%v = sm90.ld_global %base[%offsets], %mask : vector<32xi64>, vector<32xi1> -> vector<32xf32>`: for
    each register i whose mask bit is set, load 32 bits from global byte address base + offsets[i] +
    column_bytes[i]; other registers are 0. Prints as one predicated `ld.global.b32` (after a `mov.b32 r, 0`)
    per register. See `COLUMN_BYTES`."""

    name = "sm90.ld_global"
    LOADED_ELEMENTS: ClassVar[tuple] = (i32, Float32Type())
    LOADED_WHAT: ClassVar[str] = "loads 32-bit registers"

    def __init__(self, base_ptr, offsets, mask, result_type, column_bytes: Sequence[int] | None = None):
        super().__init__(operands=[base_ptr, offsets, mask], result_types=[result_type],
                         properties=column_bytes_properties(column_bytes))


@irdl_op_definition
class LdGlobalU16Op(_LdGlobalBase):
    """`%v = sm90.ld_global_u16 %base[%offsets], %mask : vector<32xi32>, vector<32xi1> -> vector<32xi32>`: for
    each register i whose mask bit is set, load the 16 bits at global byte address base + offsets[i], zero-
    extended into the 32-bit register; other registers are 0. For 16-bit tensors whose rows need not start on
    4 bytes (a GEMM operand with an odd row length). Prints as one predicated `ld.global.u16` into a 32-bit
    register (PTX lets ld's destination be wider than its type [P#operand-size-exceeding-instruction-type-
    size]) after a `mov.b32 r, 0`. Invariants: one offset and one mask bit per register; offsets are even at
    run time. Optional `column_bytes` as for `sm90.ld_global` (`COLUMN_BYTES`): a register tile of 16-bit
    elements whose rows need not start on 4 bytes (attention's bias [.., seq_k] for any seq_k) is loaded one
    element per register with its column in the address immediate."""

    name = "sm90.ld_global_u16"
    LOADED_ELEMENTS: ClassVar[tuple] = (i32,)
    LOADED_WHAT: ClassVar[str] = "loads into 32-bit integer registers"

    def __init__(self, base_ptr, offsets, mask, lanes: int, column_bytes: Sequence[int] | None = None):
        super().__init__(operands=[base_ptr, offsets, mask], result_types=[VectorType(i32, [lanes])],
                         properties=column_bytes_properties(column_bytes))


# endregion
# region Shared memory loads and stores [P#data-movement-and-conversion-instructions-ld, -st]
SHARED_PAIR_BYTES = 8
"""Bytes of `ld.shared.v2.b32`, to which its address must be aligned (PTX ISA, ld: a vector access is aligned to
the size of the whole vector)."""


@irdl_op_definition
class StSharedOp(IRDLOperation):
    """`sm90.st_shared %addresses, %values : vector<4xi32>, vector<4xi32>`: store each 32-bit register at its
    shared byte address (generic proxy). Data read afterwards by wgmma or a TMA store needs a
    `sm90.fence_proxy_async` first. Prints as one `st.shared.b32` per register."""

    name = "sm90.st_shared"
    addresses = operand_def(base(VectorType) | base(IntegerType))
    values = operand_def(base(VectorType) | base(IntegerType) | base(Float32Type))
    assembly_format = "$addresses `,` $values attr-dict `:` type($addresses) `,` type($values)"
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, addresses, values):
        super().__init__(operands=[addresses, values])

    def verify_(self) -> None:
        n = lanes(self.values.type)
        require(element_type(self.values.type) in (i32, Float32Type()), self, f"stores 32-bit registers, got {self.values.type}")
        require(lanes(self.addresses.type) == n and element_type(self.addresses.type) == i32, self,
                f"one i32 shared address per register ({n}), got {self.addresses.type}")


@irdl_op_definition
class StSharedB16Op(IRDLOperation):
    """`sm90.st_shared_b16 %addresses, %values : vector<32xi32>, vector<32xi32>`: store the low 16 bits of each
    32-bit register at its shared byte address (generic proxy; a wgmma reading them needs a
    `sm90.fence_proxy_async` first). Prints as one `st.shared.b16` of the 32-bit register per register (PTX
    lets st's source be wider than its type: the low bits are stored). Invariants: one i32 address per
    register; addresses are even at run time."""

    name = "sm90.st_shared_b16"
    addresses = operand_def(base(VectorType))
    values = operand_def(base(VectorType))
    assembly_format = "$addresses `,` $values attr-dict `:` type($addresses) `,` type($values)"
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, addresses, values):
        super().__init__(operands=[addresses, values])

    def verify_(self) -> None:
        n = lanes(self.values.type)
        require(element_type(self.values.type) == i32, self, f"stores from 32-bit integer registers, got {self.values.type}")
        require(self.addresses.type == VectorType(i32, [n]), self,
                f"one i32 shared address per register ({n}), got {self.addresses.type}")


@irdl_op_definition
class LdSharedOp(IRDLOperation):
    """`%v = sm90.ld_shared %addresses : vector<4xi32> -> vector<4xf32>`: load 32 bits from each shared byte
    address. Prints as one `ld.shared.b32` per register. With `column_bytes` (see `COLUMN_BYTES`) register i
    reads addresses[i] + column_bytes[i] (the immediate of its address); `addresses` may then be one i32
    scalar that serves every register (a row of a one-row shared tile: one base, the columns immediates).

    `aligned` (optional, bytes, a power of two of at least 4): a promise that every address operand is a multiple
    of it at run time (the CTA simulator checks it). With one scalar address and `aligned` a multiple of
    `SHARED_PAIR_BYTES`, two consecutive registers whose columns are c and c + 4, c a multiple of 8, print as one
    `ld.shared.v2.b32` (a vector access must be aligned to its size): the backward's LSE2 and dPsum columns, which
    ptxas 13.5 no longer pairs into LDS.64 itself (13.0 does)."""

    name = "sm90.ld_shared"
    irdl_options = (ParsePropInAttrDict(),)
    addresses = operand_def(base(VectorType) | base(IntegerType))
    column_bytes = opt_prop_def(DenseArrayBase)
    aligned = opt_prop_def(IntegerAttr[I64])
    result = result_def(base(VectorType) | base(IntegerType) | base(Float32Type))
    assembly_format = "$addresses attr-dict `:` type($addresses) `->` type($result)"
    traits = traits_def(MemoryReadEffect())

    def __init__(self, addresses, result_type, column_bytes: Sequence[int] | None = None, aligned: int | None = None):
        properties = column_bytes_properties(column_bytes)
        if aligned is not None:
            properties["aligned"] = IntegerAttr(aligned, i64)
        super().__init__(operands=[addresses], result_types=[result_type], properties=properties)

    def verify_(self) -> None:
        n = lanes(self.result.type)
        verify_column_bytes(self, n)
        if self.aligned is not None:
            a = int_value(self.aligned)
            require(a >= 4 and a & (a - 1) == 0, self, f"aligned must be a power of two of at least 4 bytes, got {a}")
        require(element_type(self.result.type) in (i32, Float32Type()), self, f"loads 32-bit registers, got {self.result.type}")
        scalar = self.column_bytes is not None and self.addresses.type == i32
        require(scalar or (lanes(self.addresses.type) == n and element_type(self.addresses.type) == i32), self,
                f"one i32 shared address per register ({n}), or one with column_bytes, got {self.addresses.type}")


# endregion
