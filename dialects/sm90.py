"""The Target IR dialect `sm90`: the machine operations of an sm_90a thread block.

Target IR is per thread. Ordinary computation stays in upstream dialects, as in MLIR's NVVM: `arith` and
`math` on `f32`, `i32`, `i64`, `i1` and on `vector<N x T>` values, and `vector.shuffle`/`vector.extract`/
`vector.broadcast` to move registers around. A `vector<N x T>` is N registers of one thread (a fragment, e.g.
the 64 f32 accumulators a thread holds of a m64n128 wgmma), never a SIMD value. `index` values are 32-bit
signed registers (`.s32`). `scf.for`/`scf.if`/`scf.while` are the control flow; a condition that differs
between the threads of a warp diverges. Register allocation later maps every value to PTX registers.

This dialect holds what only the machine has: special registers, shared-memory buffers at byte offsets with
their swizzle, tensor maps, bulk tensor copies (TMA) completing on mbarriers, Ampere's cp.async with its
groups (`sm90_cp_async`, the paged cache's row gather), the mbarrier operations, wgmma
with shared-memory descriptors or register A, warp shuffles, named barriers, elect, setmaxnreg and the
approximate transcendental functions. Each op says the PTX instruction it prints as, and its verifier rejects
what ptxas or the hardware would (sizes, shapes, counts, ranges), with the rule named. The numbers come
from `tessera.sm90.facts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I32,
    I64,
    ArrayAttr,
    DenseArrayBase,
    Float32Type,
    IndexType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    UnitAttr,
    VectorType,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    EqAttrConstraint,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure
from xdsl.utils.exceptions import VerifyException

from tessera.sm90 import facts


def _require(condition: bool, op: Operation, message: str) -> None:
    if not condition:
        raise VerifyException(f"'{op.name}' op {message}")


def _int(attr: IntegerAttr) -> int:
    return attr.value.data


def _lanes(ty: Attribute) -> int:
    """Registers per thread of a value: N for vector<N x T>, else 1. Fragments are 1-D."""
    if isinstance(ty, VectorType):
        if ty.get_num_dims() != 1:
            raise VerifyException(f"registers of a thread are 1-D vectors, got {ty}")
        return ty.get_shape()[0]
    return 1


def _element(ty: Attribute) -> Attribute:
    return ty.element_type if isinstance(ty, VectorType) else ty


F32_LIKE = base(Float32Type) | base(VectorType)
I32_OR_INDEX = EqAttrConstraint(i32) | base(IndexType)


@irdl_attr_definition
class TensorMapType(ParametrizedAttribute, TypeAttribute):
    """`!sm90.tensormap`: a 128-byte CUtensorMap passed as a kernel parameter (`.param .align 64 .b8 [128]`).

    What it describes (data type, dimensions, box, swizzle, out-of-bounds fill) is the `sm90.tensor_map`
    attribute of the kernel argument, which the host encodes with cuTensorMapEncodeTiled."""

    name = "sm90.tensormap"


# region Special registers [P#special-registers]


@irdl_op_definition
class SpecialRegOp(IRDLOperation):
    """`%t = sm90.special "tid.x" : index`: read a special register (tid.x/y/z, ntid.x, ctaid.x/y/z,
    nctaid.x/y/z, laneid). Prints as `mov.u32 %r, %tid.x;`."""

    name = "sm90.special"
    REGISTERS: ClassVar[tuple[str, ...]] = (
        "tid.x", "tid.y", "tid.z", "ntid.x", "ntid.y", "ntid.z", "ctaid.x", "ctaid.y", "ctaid.z",
        "nctaid.x", "nctaid.y", "nctaid.z", "laneid",
    ) + facts.CLUSTER_SPECIAL_REGISTERS
    register = prop_def(StringAttr)
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "$register attr-dict `:` type($result)"

    def __init__(self, register: str):
        super().__init__(properties={"register": StringAttr(register)}, result_types=[IndexType()])

    def verify_(self) -> None:
        _require(self.register.data in self.REGISTERS, self,
                 f"unknown special register '{self.register.data}' (known: {', '.join(self.REGISTERS)})")


# endregion
# region Shared memory [P#state-spaces-shared]


@irdl_op_definition
class SharedBufferOp(IRDLOperation):
    """`%a = sm90.shared_buffer "name" offset 0 size 32768 align 1024 swizzle 128 : i32`: the 32-bit shared
    address of a buffer of the kernel's dynamic shared memory (`.extern .shared .align 1024 .b8 smem[]`).

    Invariants: offset is a multiple of align; align is a power of two, at least the swizzle period
    (1024/512/256 bytes for 128/64/32B swizzles, so that descriptors use base offset 0) and at least 8
    (the mbarrier size); buffers of one kernel do not overlap (checked by the kernel verifier)."""

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
        props = {"sym": StringAttr(sym), "offset": IntegerAttr(offset, 64), "size": IntegerAttr(size, 64),
                 "alignment": IntegerAttr(alignment, 64), "swizzle": IntegerAttr(swizzle, 64)}
        super().__init__(properties=props, result_types=[i32])

    def verify_(self) -> None:
        offset, size, align, swizzle = (_int(a) for a in (self.offset, self.size, self.alignment, self.swizzle))
        _require(swizzle in facts.SWIZZLE_MODES, self, f"swizzle must be one of {facts.SWIZZLE_MODES} bytes, got {swizzle}")
        _require(align >= facts.MBARRIER_BYTES and align & (align - 1) == 0, self,
                 f"alignment must be a power of two >= {facts.MBARRIER_BYTES}, got {align}")
        _require(align >= facts.swizzle_period_bytes(swizzle), self,
                 f"a {swizzle}B swizzle needs {facts.swizzle_period_bytes(swizzle)}-byte alignment, got {align}")
        _require(offset >= 0 and offset % align == 0, self, f"offset {offset} is not a multiple of the alignment {align}")
        _require(size > 0, self, f"size must be positive, got {size}")


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
        _require(1 <= len(self.coords) <= 5, self, f"a tensor copy has 1 to 5 coordinates, got {len(self.coords)}")


# endregion
# region mbarrier [P#parallel-synchronization-and-communication-instructions-mbarrier]


@irdl_op_definition
class MBarrierInitOp(IRDLOperation):
    """`sm90.mbarrier_init %bar, 1`: initialise the 8-byte mbarrier at shared address %bar with an expected
    arrival count: phase 0, pending = count, tx-count 0. Prints as `mbarrier.init.shared::cta.b64`."""

    name = "sm90.mbarrier_init"
    mbarrier = operand_def(I32)
    count = prop_def(IntegerAttr[I64])
    assembly_format = "$mbarrier `,` $count attr-dict"
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, mbarrier, count: int):
        super().__init__(operands=[mbarrier], properties={"count": IntegerAttr(count, 64)})

    def verify_(self) -> None:
        count = _int(self.count)
        _require(1 <= count <= facts.MBARRIER_MAX_COUNT, self,
                 f"expected arrival count must be in [1, {facts.MBARRIER_MAX_COUNT}], got {count}")


@irdl_op_definition
class MBarrierArriveExpectTxOp(IRDLOperation):
    """`sm90.mbarrier_arrive_expect_tx %bar, 32768`: tx-count += bytes, then one arrival. Prints as
    `mbarrier.arrive.expect_tx.shared::cta.b64 _, [%bar], bytes;`."""

    name = "sm90.mbarrier_arrive_expect_tx"
    mbarrier = operand_def(I32)
    bytes = prop_def(IntegerAttr[I64])
    assembly_format = "$mbarrier `,` $bytes attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, mbarrier, nbytes: int):
        super().__init__(operands=[mbarrier], properties={"bytes": IntegerAttr(nbytes, 64)})

    def verify_(self) -> None:
        n = _int(self.bytes)
        _require(0 < n <= facts.MBARRIER_TX_LIMIT, self, f"transaction bytes must be in [1, {facts.MBARRIER_TX_LIMIT}], got {n}")


@irdl_op_definition
class MBarrierArriveOp(IRDLOperation):
    """`sm90.mbarrier_arrive %bar`: one arrival (pending -= 1). Prints as `mbarrier.arrive.shared::cta.b64 _, [%bar];`."""

    name = "sm90.mbarrier_arrive"
    mbarrier = operand_def(I32)
    assembly_format = "$mbarrier attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, mbarrier):
        super().__init__(operands=[mbarrier])


@irdl_op_definition
class MBarrierTryWaitParityOp(IRDLOperation):
    """`%done = sm90.mbarrier_try_wait_parity %bar, %parity`: true iff the phase with parity %parity (0 or
    1) has completed, i.e. %parity != (current phase & 1). Callers loop until it is true. A successful wait
    makes the shared memory written by the copies that completed the phase visible to the thread.
    Prints as `mbarrier.try_wait.parity.shared::cta.b64`."""

    name = "sm90.mbarrier_try_wait_parity"
    mbarrier = operand_def(I32)
    parity = operand_def(I32_OR_INDEX)
    result = result_def(i1)
    assembly_format = "$mbarrier `,` $parity attr-dict `:` type($parity)"
    # A write effect as well: a successful wait acquires the copies' data, so a spin loop around it must
    # never be removed as dead code.
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, mbarrier, parity):
        super().__init__(operands=[mbarrier, parity], result_types=[i1])


@irdl_op_definition
class MBarrierInvalOp(IRDLOperation):
    """`sm90.mbarrier_inval %bar`: invalidate the mbarrier before its memory is reused."""

    name = "sm90.mbarrier_inval"
    mbarrier = operand_def(I32)
    assembly_format = "$mbarrier attr-dict"
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, mbarrier):
        super().__init__(operands=[mbarrier])


class _NoOperandSyncOp(IRDLOperation):
    assembly_format = "attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self):
        super().__init__()


@irdl_op_definition
class FenceMBarrierInitOp(_NoOperandSyncOp):
    """`sm90.fence_mbarrier_init`: order this thread's mbarrier inits before later uses by other threads and
    the async proxy. Prints as `fence.mbarrier_init.release.cluster;`."""

    name = "sm90.fence_mbarrier_init"


@irdl_op_definition
class FenceProxyAsyncOp(_NoOperandSyncOp):
    """`sm90.fence_proxy_async`: make this thread's generic-proxy shared-memory writes visible to the async
    proxy (wgmma operands, TMA stores). Prints as `fence.proxy.async.shared::cta;`."""

    name = "sm90.fence_proxy_async"


# endregion
# region Warpgroup matrix multiply [P#asynchronous-warpgroup-level-matrix-instructions]


@irdl_op_definition
class WgmmaFenceOp(_NoOperandSyncOp):
    """`sm90.wgmma_fence`: order register accesses before the next wgmma.mma_async that reads them as
    accumulator or A. Prints as `wgmma.fence.sync.aligned;`."""

    name = "sm90.wgmma_fence"


@irdl_op_definition
class WgmmaCommitGroupOp(_NoOperandSyncOp):
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
        super().__init__(properties={"pending": IntegerAttr(pending, 64)})

    def verify_(self) -> None:
        _require(0 <= _int(self.pending) <= 7, self, f"pending group count must be in [0, 7], got {_int(self.pending)}")


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
        props = {"lbo": IntegerAttr(lbo, 64), "sbo": IntegerAttr(sbo, 64), "swizzle": IntegerAttr(swizzle, 64)}
        super().__init__(operands=[address], properties=props, result_types=[i64])

    def verify_(self) -> None:
        try:
            facts.encode_descriptor(0, _int(self.lbo), _int(self.sbo), _int(self.swizzle))
        except ValueError as e:
            raise VerifyException(f"'{self.name}' op {e}") from None


@irdl_op_definition
class DescriptorAdvanceOp(IRDLOperation):
    """`%d2 = sm90.descriptor_advance %d, 32 : i64`: descriptor %d with its start address moved `bytes`
    further (`facts.descriptor_start_delta`: bytes >> 4 added to the start field, bits 13-0). How a wgmma
    chain steps along K without re-encoding. Invariant: bytes is a multiple of 16 below 2^18 and the start
    field does not overflow (the simulator checks it). Prints as one 32-bit add on the low word."""

    name = "sm90.descriptor_advance"
    descriptor = operand_def(I64)
    bytes = prop_def(IntegerAttr[I64])
    result = result_def(I64)
    traits = traits_def(Pure())
    assembly_format = "$descriptor `,` $bytes attr-dict `:` type($result)"

    def __init__(self, descriptor, nbytes: int):
        super().__init__(operands=[descriptor], properties={"bytes": IntegerAttr(nbytes, 64)}, result_types=[i64])

    def verify_(self) -> None:
        try:
            facts.descriptor_start_delta(_int(self.bytes))
        except ValueError as e:
            raise VerifyException(f"'{self.name}' op {e}") from None


@irdl_op_definition
class WgmmaMmaAsyncOp(IRDLOperation):
    """`%d = sm90.wgmma_mma_async %acc, %a, %b [scale_d %p] n 128 type "bf16" trans 0, 1 : vector<64xf32>, i64`:
    D = A x B (+ D when scale-d is true), shape m64nNk16, f32 accumulators.

    %a is a descriptor (i64, A in shared memory, "SS") or vector<4xi32> (A from registers, packed pairs,
    "RS"); %b is always a descriptor. %acc and the result are vector<N/2 x f32>: thread t holds the
    elements `facts.accumulator_coords`. With no scale_d operand, D is accumulated (scale-d = 1).
    Asynchronous: the result may be touched only after a wgmma_wait_group covers the group it is committed
    in. Prints as `wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 {d...}, a, b, p, 1, 1, tA, tB;`.

    Invariants: N is a legal wgmma N for the type (8..256 step 8); type is bf16 or f16; trans_a only with
    a descriptor A; trans flags are 0 or 1."""

    name = "sm90.wgmma_mma_async"
    T: ClassVar = VarConstraint("T", base(VectorType))
    acc = operand_def(T)
    a = operand_def(base(IntegerType) | base(VectorType))
    b = operand_def(I64)
    scale_d = opt_operand_def(i1)
    n = prop_def(IntegerAttr[I64])
    ab_type = prop_def(StringAttr, prop_name="type")
    trans_a = prop_def(IntegerAttr[I64])
    trans_b = prop_def(IntegerAttr[I64])
    result = result_def(T)
    assembly_format = (
        "$acc `,` $a `,` $b (`scale_d` $scale_d^)? `n` $n `type` $type `trans` $trans_a `,` $trans_b "
        "attr-dict `:` type($acc) `,` type($a)"
    )
    traits = traits_def(MemoryReadEffect())

    def __init__(self, acc, a, b, n: int, ab_type: str, trans_a: int = 0, trans_b: int = 0, scale_d=None):
        props = {"n": IntegerAttr(n, 64), "type": StringAttr(ab_type), "trans_a": IntegerAttr(trans_a, 64),
                 "trans_b": IntegerAttr(trans_b, 64)}
        super().__init__(operands=[acc, a, b, [scale_d] if scale_d is not None else []], properties=props,
                         result_types=[SSAValue.get(acc).type])

    @property
    def a_in_registers(self) -> bool:
        return isinstance(self.a.type, VectorType)

    def verify_(self) -> None:
        n, ab = _int(self.n), self.ab_type.data
        _require(ab in ("bf16", "f16"), self, f"type must be bf16 or f16, got '{ab}'")
        try:
            facts.wgmma_shape(n, ab, "f32")
        except ValueError as e:
            raise VerifyException(f"'{self.name}' op {e}") from None
        regs = facts.accumulator_registers(n, "f32")
        acc = self.acc.type
        _require(isinstance(acc.element_type, Float32Type) and acc.get_shape() == (regs,), self,
                 f"accumulator must be vector<{regs}xf32> for n = {n}, got {acc}")
        for flag in ("trans_a", "trans_b"):
            _require(_int(getattr(self, flag)) in (0, 1), self, f"{flag} must be 0 or 1")
        if self.a_in_registers:
            _require(self.a.type == VectorType(i32, [facts.A_FRAGMENT_REGISTERS]), self,
                     f"a register A operand must be vector<{facts.A_FRAGMENT_REGISTERS}xi32>, got {self.a.type}")
            _require(_int(self.trans_a) == 0, self, "trans_a applies only to an A descriptor")
        else:
            _require(self.a.type == i64, self, f"a descriptor A operand must be i64, got {self.a.type}")


# endregion
# region Warp-level and block-level synchronisation [P#parallel-synchronization-and-communication-instructions-*]


@irdl_op_definition
class ShflSyncOp(IRDLOperation):
    """`%r = sm90.shfl_sync "bfly" %x, 1, 31 : vector<2xf32>`: each register of %x from another lane of the
    warp, per `facts.shfl_source_lane(mode, lane, offset, clamp)` (all 32 lanes participate). Prints as
    `shfl.sync.MODE.b32 r, x, offset, clamp, 0xffffffff;` per register."""

    name = "sm90.shfl_sync"
    MODES: ClassVar[tuple[str, ...]] = ("up", "down", "bfly", "idx")
    T: ClassVar = VarConstraint("T", base(Float32Type) | base(IntegerType) | base(VectorType))
    mode = prop_def(StringAttr)
    source = operand_def(T)
    offset = prop_def(IntegerAttr[I64])
    clamp = prop_def(IntegerAttr[I64])
    result = result_def(T)
    assembly_format = "$mode $source `,` $offset `,` $clamp attr-dict `:` type($source)"
    traits = traits_def(MemoryReadEffect())  # not Pure: it synchronises the warp

    def __init__(self, mode: str, source, offset: int, clamp: int = 0x1F):
        props = {"mode": StringAttr(mode), "offset": IntegerAttr(offset, 64), "clamp": IntegerAttr(clamp, 64)}
        super().__init__(operands=[source], properties=props, result_types=[SSAValue.get(source).type])

    def verify_(self) -> None:
        _require(self.mode.data in self.MODES, self, f"mode must be one of {', '.join(self.MODES)}, got '{self.mode.data}'")
        _require(0 <= _int(self.offset) < facts.WARP_SIZE, self, f"lane offset must be in [0, 32), got {_int(self.offset)}")
        _require(0 <= _int(self.clamp) < 1 << 13, self, f"clamp/segment mask must fit 13 bits, got {_int(self.clamp)}")
        elt = _element(self.source.type)
        _require(isinstance(elt, Float32Type) or elt == i32, self, f"shuffles move 32-bit registers, got {elt}")


class _NamedBarrierOp(IRDLOperation):
    barrier = prop_def(IntegerAttr[I64])
    threads = prop_def(IntegerAttr[I64])
    assembly_format = "$barrier `,` $threads attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, barrier: int, threads: int):
        super().__init__(properties={"barrier": IntegerAttr(barrier, 64), "threads": IntegerAttr(threads, 64)})

    def verify_(self) -> None:
        barrier, threads = _int(self.barrier), _int(self.threads)
        _require(0 <= barrier < facts.NAMED_BARRIERS, self, f"barrier id must be in [0, {facts.NAMED_BARRIERS}), got {barrier}")
        _require(threads > 0 and threads % facts.WARP_SIZE == 0, self,
                 f"thread count must be a positive multiple of {facts.WARP_SIZE}, got {threads}")


@irdl_op_definition
class BarSyncOp(_NamedBarrierOp):
    """`sm90.bar_sync 0, 256`: wait at named barrier `barrier` until `threads` threads have arrived; shared
    memory written before it by the participants is visible after it. Prints as `bar.sync id, n;`."""

    name = "sm90.bar_sync"


@irdl_op_definition
class BarArriveOp(_NamedBarrierOp):
    """`sm90.bar_arrive 1, 256`: arrive at a named barrier without waiting. Prints as `bar.arrive id, n;`."""

    name = "sm90.bar_arrive"


@irdl_op_definition
class ElectSyncOp(IRDLOperation):
    """`%leader = sm90.elect_sync`: true in exactly one lane of the warp (the lowest active one).
    Prints as `elect.sync _|%p, 0xffffffff;`."""

    name = "sm90.elect_sync"
    result = result_def(i1)
    assembly_format = "attr-dict"
    traits = traits_def(MemoryReadEffect())

    def __init__(self):
        super().__init__(result_types=[i1])


@irdl_op_definition
class SetMaxNRegOp(IRDLOperation):
    """`sm90.setmaxnreg "inc" 240`: change the register budget of this warpgroup's threads (all four warps
    execute it). Prints as `setmaxnreg.inc.sync.aligned.u32 240;`."""

    name = "sm90.setmaxnreg"
    action = prop_def(StringAttr)
    count = prop_def(IntegerAttr[I64])
    assembly_format = "$action $count attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, action: str, count: int):
        super().__init__(properties={"action": StringAttr(action), "count": IntegerAttr(count, 64)})

    def verify_(self) -> None:
        _require(self.action.data in ("inc", "dec"), self, f"action must be inc or dec, got '{self.action.data}'")
        try:
            facts.check_setmaxnreg(self.action.data, _int(self.count))
        except ValueError as e:
            raise VerifyException(f"'{self.name}' op {e}") from None


# endregion
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
        _require(isinstance(_element(self.source.type), Float32Type), self, f"operates on f32 registers, got {self.source.type}")


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
class CvtPackOp(IRDLOperation):
    """`%p = sm90.cvt_pack %x type "bf16" : vector<64xf32> -> vector<32xi32>`: round pairs of f32 to
    bf16 (or f16), nearest even, and pack each pair (x[2i], x[2i+1]) into one 32-bit register with x[2i]
    in the LOW half, as `cvt.rn.bf16x2.f32 p, x[2i+1], x[2i];` does (first source in the upper half)."""

    name = "sm90.cvt_pack"
    source = operand_def(base(VectorType))
    half_type = prop_def(StringAttr, prop_name="type")
    result = result_def(base(VectorType))
    traits = traits_def(Pure())
    assembly_format = "$source `type` $type attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source, half_type: str):
        n = _lanes(SSAValue.get(source).type)
        super().__init__(operands=[source], properties={"type": StringAttr(half_type)},
                         result_types=[VectorType(i32, [n // 2])])

    def verify_(self) -> None:
        n = _lanes(self.source.type)
        _require(self.half_type.data in ("bf16", "f16"), self, f"type must be bf16 or f16, got '{self.half_type.data}'")
        _require(isinstance(_element(self.source.type), Float32Type) and n % 2 == 0, self,
                 f"source must be an even number of f32 registers, got {self.source.type}")
        _require(self.result.type == VectorType(i32, [n // 2]), self, f"result must be vector<{n // 2}xi32>, got {self.result.type}")


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
        result = VectorType(i1, [_lanes(ty)]) if isinstance(ty, VectorType) else i1
        super().__init__(operands=[lhs, rhs], properties={"predicate": StringAttr(predicate)}, result_types=[result])

    def verify_(self) -> None:
        _require(self.predicate.data in self.PREDICATES, self,
                 f"predicate must be one of {', '.join(self.PREDICATES)}, got '{self.predicate.data}'")
        ty = self.lhs.type
        expected = VectorType(i1, [_lanes(ty)]) if isinstance(ty, VectorType) else i1
        _require(self.result.type == expected, self, f"result must be {expected}, got {self.result.type}")


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
        expected = VectorType(i1, [_lanes(ty)]) if isinstance(ty, VectorType) else i1
        _require(self.condition.type == expected, self, f"condition must be {expected}, got {self.condition.type}")


# endregion
# region Global memory [P#data-movement-and-conversion-instructions-st]


COLUMN_BYTES = """`column_bytes` (optional on `sm90.ld_global` and `sm90.st_global`; absent means all 0): a constant
byte offset per register, added to base + offsets[i]. It prints as the immediate of the address (`[%rd+imm]`),
so the register offsets hold only what varies at run time (the row pitch times the register's row). The
lowering of a window access puts each register's column there: its offsets then take as many distinct values
as the thread has rows (2), which ptxas folds into as many addresses, instead of one distinct offset per
register (64) that stays live from a load to a store of the same window (the second pass of three-pass
attention spilled under ptxas 13.3 with them). Invariant: one i32 entry per register."""


def _column_bytes(column_bytes: Sequence[int] | None) -> dict[str, Attribute]:
    """The properties of a global access with these per-register immediates (none when all are 0)."""
    if column_bytes is None or not any(column_bytes):
        return {}
    return {"column_bytes": DenseArrayBase.from_list(i32, list(column_bytes))}


def _verify_column_bytes(op: Operation, n: int) -> None:
    columns = op.column_bytes
    if columns is None:
        return
    _require(columns.elt_type == i32 and len(columns.get_values()) == n, op,
             f"column_bytes must be {n} i32 values (one per register), got {columns}")


@irdl_op_definition
class StGlobalOp(IRDLOperation):
    """`sm90.st_global %base[%offsets], %values, %mask : vector<32xi64>, vector<32xi32>, vector<32xi1>`: for each register i whose mask
    bit is set, store values[i] (32 bits) at global byte address base + offsets[i] + column_bytes[i].
    Prints as one predicated `st.global.b32` per register. Invariants: offsets, values and mask have one
    entry per register; offsets are multiples of 4 at run time. See `COLUMN_BYTES`."""

    name = "sm90.st_global"
    irdl_options = (ParsePropInAttrDict(),)
    base_ptr = operand_def(I64)
    offsets = operand_def(base(VectorType))
    values = operand_def(base(VectorType))
    mask = operand_def(base(VectorType))
    column_bytes = opt_prop_def(DenseArrayBase)
    assembly_format = "$base_ptr `[` $offsets `]` `,` $values `,` $mask attr-dict `:` type($offsets) `,` type($values) `,` type($mask)"
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, base_ptr, offsets, values, mask, column_bytes: Sequence[int] | None = None):
        super().__init__(operands=[base_ptr, offsets, values, mask], properties=_column_bytes(column_bytes))

    def verify_(self) -> None:
        n = _lanes(self.values.type)
        _verify_column_bytes(self, n)
        _require(_element(self.values.type) in (i32, Float32Type()), self, f"stores 32-bit registers, got {self.values.type}")
        _require(self.offsets.type in (VectorType(i64, [n]), VectorType(i32, [n])), self,
                 f"offsets must be vector<{n}xi64> or vector<{n}xi32> (sign-extended), got {self.offsets.type}")
        _require(self.mask.type == VectorType(i1, [n]), self, f"mask must be vector<{n}xi1>, got {self.mask.type}")


@irdl_op_definition
class LdGlobalOp(IRDLOperation):
    """`%v = sm90.ld_global %base[%offsets], %mask : vector<32xi64>, vector<32xi1> -> vector<32xf32>`: for
    each register i whose mask bit is set, load 32 bits from global byte address base + offsets[i] +
    column_bytes[i]; other registers are 0. Prints as one predicated `ld.global.b32` (after a `mov.b32 r, 0`)
    per register. See `COLUMN_BYTES`."""

    name = "sm90.ld_global"
    irdl_options = (ParsePropInAttrDict(),)
    base_ptr = operand_def(I64)
    offsets = operand_def(base(VectorType))
    mask = operand_def(base(VectorType))
    column_bytes = opt_prop_def(DenseArrayBase)
    result = result_def(base(VectorType))
    assembly_format = "$base_ptr `[` $offsets `]` `,` $mask attr-dict `:` type($offsets) `,` type($mask) `->` type($result)"
    traits = traits_def(MemoryReadEffect())

    def __init__(self, base_ptr, offsets, mask, result_type, column_bytes: Sequence[int] | None = None):
        super().__init__(operands=[base_ptr, offsets, mask], result_types=[result_type],
                         properties=_column_bytes(column_bytes))

    def verify_(self) -> None:
        n = _lanes(self.result.type)
        _verify_column_bytes(self, n)
        _require(_element(self.result.type) in (i32, Float32Type()), self, f"loads 32-bit registers, got {self.result.type}")
        _require(self.offsets.type in (VectorType(i64, [n]), VectorType(i32, [n])), self,
                 f"offsets must be vector<{n}xi64> or vector<{n}xi32> (sign-extended), got {self.offsets.type}")
        _require(self.mask.type == VectorType(i1, [n]), self, f"mask must be vector<{n}xi1>, got {self.mask.type}")


@irdl_op_definition
class LdGlobalU16Op(IRDLOperation):
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
    irdl_options = (ParsePropInAttrDict(),)
    base_ptr = operand_def(I64)
    offsets = operand_def(base(VectorType))
    mask = operand_def(base(VectorType))
    column_bytes = opt_prop_def(DenseArrayBase)
    result = result_def(base(VectorType))
    assembly_format = "$base_ptr `[` $offsets `]` `,` $mask attr-dict `:` type($offsets) `,` type($mask) `->` type($result)"
    traits = traits_def(MemoryReadEffect())

    def __init__(self, base_ptr, offsets, mask, lanes: int, column_bytes: Sequence[int] | None = None):
        super().__init__(operands=[base_ptr, offsets, mask], result_types=[VectorType(i32, [lanes])],
                         properties=_column_bytes(column_bytes))

    def verify_(self) -> None:
        n = _lanes(self.result.type)
        _verify_column_bytes(self, n)
        _require(_element(self.result.type) == i32, self, f"loads into 32-bit integer registers, got {self.result.type}")
        _require(self.offsets.type in (VectorType(i64, [n]), VectorType(i32, [n])), self,
                 f"offsets must be vector<{n}xi64> or vector<{n}xi32> (sign-extended), got {self.offsets.type}")
        _require(self.mask.type == VectorType(i1, [n]), self, f"mask must be vector<{n}xi1>, got {self.mask.type}")


# endregion
# region Shared memory loads and stores [P#data-movement-and-conversion-instructions-ld, -st]


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
        n = _lanes(self.values.type)
        _require(_element(self.values.type) in (i32, Float32Type()), self, f"stores 32-bit registers, got {self.values.type}")
        _require(_lanes(self.addresses.type) == n and _element(self.addresses.type) == i32, self,
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
        n = _lanes(self.values.type)
        _require(_element(self.values.type) == i32, self, f"stores from 32-bit integer registers, got {self.values.type}")
        _require(self.addresses.type == VectorType(i32, [n]), self,
                 f"one i32 shared address per register ({n}), got {self.addresses.type}")


@irdl_op_definition
class LdSharedOp(IRDLOperation):
    """`%v = sm90.ld_shared %addresses : vector<4xi32> -> vector<4xf32>`: load 32 bits from each shared byte
    address. Prints as one `ld.shared.b32` per register."""

    name = "sm90.ld_shared"
    addresses = operand_def(base(VectorType) | base(IntegerType))
    result = result_def(base(VectorType) | base(IntegerType) | base(Float32Type))
    assembly_format = "$addresses attr-dict `:` type($addresses) `->` type($result)"
    traits = traits_def(MemoryReadEffect())

    def __init__(self, addresses, result_type):
        super().__init__(operands=[addresses], result_types=[result_type])

    def verify_(self) -> None:
        n = _lanes(self.result.type)
        _require(_element(self.result.type) in (i32, Float32Type()), self, f"loads 32-bit registers, got {self.result.type}")
        _require(_lanes(self.addresses.type) == n and _element(self.addresses.type) == i32, self,
                 f"one i32 shared address per register ({n}), got {self.addresses.type}")


# endregion
# region Thread-block clusters [P#cluster], facts in tessera/sm90/cluster.py


@irdl_op_definition
class MapaOp(IRDLOperation):
    """`%r = sm90.mapa %addr, %rank : index`: the shared::cluster address of shared offset %addr in the CTA of
    %cluster_ctarank %rank (which may be this CTA). Prints as `mapa.shared::cluster.u32`."""

    name = "sm90.mapa"
    address = operand_def(I32)
    rank = operand_def(I32_OR_INDEX)
    result = result_def(I32)
    traits = traits_def(Pure())
    assembly_format = "$address `,` $rank attr-dict `:` type($rank)"

    def __init__(self, address, rank):
        super().__init__(operands=[address, rank], result_types=[i32])


@irdl_op_definition
class TmaLoadMulticastOp(IRDLOperation):
    """`sm90.tma_load_multicast %map[%c0, ...], %dst, %mbar mask 3 : index, ...`: one bulk tensor copy of the
    map's box delivered into every CTA r of the cluster whose bit r is set in `mask`, at shared offset %dst
    of each, completing `box bytes` of transaction on each one's mbarrier at offset %mbar. Prints as
    `cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster`
    with the mask as a 16-bit immediate.

    Invariants: as `sm90.tma_load`; the mask is non-zero and fits `facts.MULTICAST_MASK_BITS` bits; a bit past
    the cluster's size is an error the CTA simulator reports at run time."""

    name = "sm90.tma_load_multicast"
    tensor_map = operand_def(TensorMapType)
    coords = var_operand_def(I32_OR_INDEX)
    dest = operand_def(I32)
    mbarrier = operand_def(I32)
    mask = prop_def(IntegerAttr[I64])
    assembly_format = "$tensor_map `[` $coords `]` `,` $dest `,` $mbarrier `mask` $mask attr-dict `:` type($coords)"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, tensor_map, coords: Sequence, dest, mbarrier, mask: int):
        super().__init__(operands=[tensor_map, list(coords), dest, mbarrier], properties={"mask": IntegerAttr(mask, 64)})

    def verify_(self) -> None:
        _require(1 <= len(self.coords) <= 5, self, f"a tensor copy has 1 to 5 coordinates, got {len(self.coords)}")
        mask = _int(self.mask)
        _require(0 < mask < 1 << facts.MULTICAST_MASK_BITS, self,
                 f"the CTA mask must be non-zero and fit {facts.MULTICAST_MASK_BITS} bits, got {mask:#x}")


@irdl_op_definition
class MBarrierArriveClusterOp(IRDLOperation):
    """`sm90.mbarrier_arrive_cluster %remote`: one arrival on the mbarrier at shared::cluster address %remote
    (from `sm90.mapa`; a peer's or this CTA's own), with release semantics at cluster scope. Prints as
    `mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%remote];`."""

    name = "sm90.mbarrier_arrive_cluster"
    mbarrier = operand_def(I32)
    assembly_format = "$mbarrier attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, mbarrier):
        super().__init__(operands=[mbarrier])


@irdl_op_definition
class ClusterArriveOp(_NoOperandSyncOp):
    """`sm90.cluster_arrive`: this thread arrives at the cluster barrier, releasing its prior memory accesses
    at cluster scope. Prints as `barrier.cluster.arrive.release;`."""

    name = "sm90.cluster_arrive"


@irdl_op_definition
class ClusterWaitOp(_NoOperandSyncOp):
    """`sm90.cluster_wait`: wait until every non-exited thread of every CTA of the cluster has arrived at the
    cluster barrier's current phase, acquiring their released accesses. Prints as
    `barrier.cluster.wait.acquire;`."""

    name = "sm90.cluster_wait"


CLUSTER_OPS = (MapaOp, TmaLoadMulticastOp, MBarrierArriveClusterOp, ClusterArriveOp, ClusterWaitOp)


# endregion

from tessera.dialects.sm90_reductions import REDUCTION_OPS  # noqa: E402 - the backward's ops, in their own file
from tessera.dialects.sm90_cp_async import (  # noqa: E402 - the paged gather's copies, in their own file
    CP_ASYNC_OPS,
    CpAsyncCommitGroupOp,
    CpAsyncMBarrierArriveNoIncOp,
    CpAsyncOp,
    CpAsyncWaitGroupOp,
)

SM90 = Dialect(
    "sm90",
    [
        SpecialRegOp,
        SharedBufferOp,
        TmaLoadOp,
        MBarrierInitOp,
        MBarrierArriveExpectTxOp,
        MBarrierArriveOp,
        MBarrierTryWaitParityOp,
        MBarrierInvalOp,
        FenceMBarrierInitOp,
        FenceProxyAsyncOp,
        WgmmaFenceOp,
        WgmmaCommitGroupOp,
        WgmmaWaitGroupOp,
        MakeDescriptorOp,
        DescriptorAdvanceOp,
        WgmmaMmaAsyncOp,
        ShflSyncOp,
        BarSyncOp,
        BarArriveOp,
        ElectSyncOp,
        SetMaxNRegOp,
        Ex2ApproxOp,
        RcpApproxOp,
        Lg2ApproxOp,
        CvtPackOp,
        SetpOp,
        SelpOp,
        StGlobalOp,
        LdGlobalOp,
        LdGlobalU16Op,
        StSharedOp,
        StSharedB16Op,
        LdSharedOp,
        *REDUCTION_OPS,
        *CP_ASYNC_OPS,
        *CLUSTER_OPS,
    ],
    [TensorMapType],
)
