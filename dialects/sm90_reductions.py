"""Target IR ops of the attention backward, in the `sm90` dialect (registered with `tessera.dialects.sm90.SM90`):
reductions into global memory shared between CTAs, and stores of wgmma fragments to shared memory.

- `sm90.red_global_add` / `sm90.atom_global_add`: f32 atomic adds, one per register, `red.global.add.f32` (no
  result) and `atom.global.add.f32` (returns the old value) [P#parallel-synchronization-and-communication-
  instructions-red, -atom]. Several CTAs may add into one address; the simulators check that no CTA stores to
  it plainly (a race) and that nobody reads a reduction target before every contribution has landed.
- `sm90.bulk_reduce_add`, `sm90.bulk_commit_group`, `sm90.bulk_wait_group`: FlashAttention-3's dQ
  accumulation, `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [dst], [src], bytes`
  [P#data-movement-and-conversion-instructions-cp-reduce-async-bulk]: one thread adds `bytes` of f32 from
  shared memory into global memory, asynchronously. The source is read through the async proxy (data written
  by st.shared/stmatrix needs `sm90.fence_proxy_async` and a barrier first). Operations of a thread are
  grouped by `cp.async.bulk.commit_group`; `cp.async.bulk.wait_group.read N` waits until all but the N newest
  groups have *read their source* (the shared buffer may then be reused), `cp.async.bulk.wait_group N` until
  they have also *written* global memory [P#data-movement-and-conversion-instructions-cp-async-bulk-wait-
  group]. Reusing the source before a covering `.read` wait is a hazard the simulators report.
- `sm90.stmatrix`: `stmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16` [P#warp-level-matrix-instructions-
  stmatrix], the warp-collective store of N 8x8 matrices of 16-bit elements, each register packing two
  (`tessera.sm90.matrix`). With the packed pairs of a wgmma accumulator it stores the fragment as laid out
  (`.x4` of pairs 8s..8s+7: the warp's 16 x 16 block s), with `.trans` its transpose.
- `sm90.sem_try_wait`, `sm90.sem_signal`: the deterministic backward's semaphores between CTAs,
  `ld.acquire.gpu.global.b32` compared with an expected count, and `red.release.gpu.global.add.s32` of 1.

Every op says what it prints as; the verifiers refuse what ptxas would (types, sizes, counts).
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I32,
    I64,
    DenseArrayBase,
    Float32Type,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    VectorType,
    i1,
    i32,
)
from xdsl.ir import SSAValue
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
)
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure

from tessera.dialects.sm90_base import lanes, i64_attr
from tessera.dialects.sm90_memory import column_bytes_properties, verify_column_bytes, verify_offsets_and_mask
from tessera.sm90 import matrix as matrix_facts
from tessera.ir.diagnostics import require
from tessera.sm90 import facts

# region Atomic adds into global memory [P#parallel-synchronization-and-communication-instructions-red, -atom]


def _verify_global_adds(op: IRDLOperation) -> None:
    """An atomic add's operands: f32 values, and as for every per-register global access, one offset, mask bit
    and column immediate per register."""
    n = lanes(op.values.type)
    verify_column_bytes(op, n)
    require(op.values.type == VectorType(Float32Type(), [n]), op, f"adds f32 registers, got {op.values.type}")
    verify_offsets_and_mask(op, n)


@irdl_op_definition
class RedGlobalAddOp(IRDLOperation):
    """`sm90.red_global_add %base[%offsets], %values, %mask : vector<4xi64>, vector<4xf32>, vector<4xi1>`: for each
    register i whose mask bit is set, atomically add values[i] to the f32 at global byte address base +
    offsets[i] + column_bytes[i] (`sm90.COLUMN_BYTES`). Prints as one predicated `red.global.add.f32` per
    register. The add is relaxed and unordered with other CTAs' adds: the final value is the sum in some order
    (f32 rounding makes it order-dependent). Global memory flushes subnormal inputs and results to zero (the
    f32 atomic add of global memory is `.ftz`). Invariants: one offset and mask bit per f32 register; addresses
    are 4-byte aligned at run time."""

    name = "sm90.red_global_add"
    irdl_options = (ParsePropInAttrDict(),)
    base_ptr = operand_def(I64)
    offsets = operand_def(base(VectorType))
    values = operand_def(base(VectorType))
    mask = operand_def(base(VectorType))
    column_bytes = opt_prop_def(DenseArrayBase)
    assembly_format = ("$base_ptr `[` $offsets `]` `,` $values `,` $mask attr-dict `:` type($offsets) `,` "
                       "type($values) `,` type($mask)")
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, base_ptr, offsets, values, mask, column_bytes: Sequence[int] | None = None):
        super().__init__(operands=[base_ptr, offsets, values, mask], properties=column_bytes_properties(column_bytes))

    def verify_(self) -> None:
        _verify_global_adds(self)


@irdl_op_definition
class AtomGlobalAddOp(IRDLOperation):
    """`%old = sm90.atom_global_add %base[%offsets], %values, %mask : vector<1xi64>, vector<1xf32>, vector<1xi1>
    -> vector<1xf32>`:
    as `sm90.red_global_add`, and each register of the result is the value its address held just before
    this add (0 where the mask bit is clear). Prints as `mov.f32 d, 0f00000000; @p atom.global.add.f32 d,
    [addr], v;` per register. For when the old value is needed (a counter, a semaphore); `red` is cheaper."""

    name = "sm90.atom_global_add"
    irdl_options = (ParsePropInAttrDict(),)
    base_ptr = operand_def(I64)
    offsets = operand_def(base(VectorType))
    values = operand_def(base(VectorType))
    mask = operand_def(base(VectorType))
    column_bytes = opt_prop_def(DenseArrayBase)
    result = result_def(base(VectorType))
    assembly_format = ("$base_ptr `[` $offsets `]` `,` $values `,` $mask attr-dict `:` type($offsets) `,` "
                       "type($values) `,` type($mask) `->` type($result)")
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, base_ptr, offsets, values, mask, column_bytes: Sequence[int] | None = None):
        super().__init__(operands=[base_ptr, offsets, values, mask], properties=column_bytes_properties(column_bytes),
                         result_types=[SSAValue.get(values).type])

    def verify_(self) -> None:
        _verify_global_adds(self)
        require(self.result.type == self.values.type, self,
                f"result must be {self.values.type} (the old values), got {self.result.type}")


# endregion
# region Bulk reductions from shared memory [P#data-movement-and-conversion-instructions-cp-reduce-async-bulk]

BULK_ALIGNMENT = 16
"""cp.reduce.async.bulk: both addresses and the size are multiples of 16 bytes [P#...-cp-reduce-async-bulk]."""


@irdl_op_definition
class BulkReduceAddOp(IRDLOperation):
    """`sm90.bulk_reduce_add %dst, %src, 512 : i64`: add the `bytes / 4` f32 values at shared address %src to
    those at global address %dst, element by element, asynchronously (the bulk-group completion mechanism).
    Prints as `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [dst], [src], bytes;`.

    Every thread that executes it starts its own reduction: predicate it to one thread. The source is read
    by the async proxy: data another thread wrote with st.shared/stmatrix needs that thread's
    `sm90.fence_proxy_async` and a barrier before. The source may be overwritten only after a
    `sm90.bulk_wait_group ... read` covering the group this op is committed in; the global values may be read
    only after the kernel ends (other CTAs add to them too). Invariants: bytes is a positive multiple of 16,
    at most a block's shared memory; both addresses are 16-byte aligned at run time."""

    name = "sm90.bulk_reduce_add"
    dest = operand_def(I64)
    source = operand_def(I32)
    bytes = prop_def(IntegerAttr[I64])
    assembly_format = "$dest `,` $source `,` $bytes attr-dict `:` type($dest)"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, dest, source, nbytes: int):
        super().__init__(operands=[dest, source], properties={"bytes": i64_attr(nbytes)})

    def verify_(self) -> None:
        n = self.bytes.value.data
        require(0 < n <= facts.MAX_SHARED_MEMORY_PER_BLOCK and n % BULK_ALIGNMENT == 0, self,
                f"bytes must be a positive multiple of {BULK_ALIGNMENT} up to a block's "
                f"{facts.MAX_SHARED_MEMORY_PER_BLOCK} bytes of shared memory, got {n}")


@irdl_op_definition
class BulkCommitGroupOp(IRDLOperation):
    """`sm90.bulk_commit_group`: close the group of this thread's uncommitted bulk operations
    (`sm90.bulk_reduce_add`). Prints as `cp.async.bulk.commit_group;`."""

    name = "sm90.bulk_commit_group"
    assembly_format = "attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self):
        super().__init__()


BULK_WAIT_GROUP_MAX = 63
"""cp.async.bulk.wait_group N: N is an integer constant; ptxas accepts 0..63 (checked with ptxas 13.0)."""


@irdl_op_definition
class BulkWaitGroupOp(IRDLOperation):
    """`sm90.bulk_wait_group 0 read`: wait until at most `pending` of this thread's newest committed bulk groups
    are incomplete. With `read`, complete means the operations have read their shared-memory source (which may
    then be reused); without, that they have also written their destination. Prints as
    `cp.async.bulk.wait_group.read N;` / `cp.async.bulk.wait_group N;`."""

    name = "sm90.bulk_wait_group"
    pending = prop_def(IntegerAttr[I64])
    read = opt_prop_def(UnitAttr)
    assembly_format = "$pending (`read` $read^)? attr-dict"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, pending: int, read: bool = True):
        props = {"pending": i64_attr(pending)}
        if read:
            props["read"] = UnitAttr()
        super().__init__(properties=props)

    def verify_(self) -> None:
        n = self.pending.value.data
        require(0 <= n <= BULK_WAIT_GROUP_MAX, self, f"pending group count must be in [0, {BULK_WAIT_GROUP_MAX}], got {n}")


# endregion
# region Matrix stores to shared memory [P#warp-level-matrix-instructions-stmatrix]


@irdl_op_definition
class StMatrixOp(IRDLOperation):
    """`sm90.stmatrix %address, %values trans : i32, vector<4xi32>`: the warp stores N = 1, 2 or 4 (the
    registers of %values) 8x8 matrices of 16-bit elements. Lane 8j + r gives in %address the shared address of
    row r of matrix j (16 bytes, 16-byte aligned; lanes past 8N are ignored); register j of lane l packs two
    elements of matrix j, low half first, at the positions of `tessera.sm90.matrix.stmatrix_coords` (row l/4,
    columns 2(l%4), 2(l%4)+1; with `trans`, the transposed positions). Prints as
    `stmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 [address], {r...};`. All 32 lanes execute it
    (.sync.aligned); the rows are written through the generic proxy (a wgmma reading them needs
    `sm90.fence_proxy_async`)."""

    name = "sm90.stmatrix"
    address = operand_def(I32)
    values = operand_def(base(VectorType))
    trans = opt_prop_def(UnitAttr)
    assembly_format = "$address `,` $values (`trans` $trans^)? attr-dict `:` type($address) `,` type($values)"
    traits = traits_def(MemoryWriteEffect())

    def __init__(self, address, values, trans: bool = False):
        super().__init__(operands=[address, values], properties={"trans": UnitAttr()} if trans else {})

    def verify_(self) -> None:
        n = lanes(self.values.type)
        require(n in matrix_facts.STMATRIX_COUNTS and self.values.type == VectorType(i32, [n]), self,
                f"values must be vector<Nxi32> with N in {matrix_facts.STMATRIX_COUNTS} (one register per matrix), "
                f"got {self.values.type}")


# endregion
# region Unpacking 16-bit pairs [P#data-movement-and-conversion-instructions-cvt]


@irdl_op_definition
class CvtUnpackOp(IRDLOperation):
    """`%x = sm90.cvt_unpack %p type "f16" : vector<16xi32> -> vector<32xf32>`: the inverse of `sm90.cvt_pack`:
    register i of %p holds elements 2i (bits 15:0) and 2i+1 (bits 31:16), each widened exactly to f32. Prints
    per register, bf16: `shl.b32 x[2i], p, 16; and.b32 x[2i+1], p, 0xffff0000` (a bf16 is the upper half of
    an f32); f16: `cvt.f32.f16 x[2i], p` (the low 16 bits), then `shr.b32 t, p, 16; cvt.f32.f16 x[2i+1], t`.
    The backward's preprocess reads O and dO this way."""

    name = "sm90.cvt_unpack"
    source = operand_def(base(VectorType))
    half_type = prop_def(StringAttr, prop_name="type")
    result = result_def(base(VectorType))
    traits = traits_def(Pure())
    assembly_format = "$source `type` $type attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source, half_type: str):
        n = lanes(SSAValue.get(source).type)
        super().__init__(operands=[source], properties={"type": StringAttr(half_type)},
                         result_types=[VectorType(Float32Type(), [2 * n])])

    def verify_(self) -> None:
        n = lanes(self.source.type)
        require(self.half_type.data in ("bf16", "f16"), self, f"type must be bf16 or f16, got '{self.half_type.data}'")
        require(self.source.type == VectorType(i32, [n]), self, f"source must be i32 registers, got {self.source.type}")
        require(self.result.type == VectorType(Float32Type(), [2 * n]), self,
                f"result must be vector<{2 * n}xf32>, got {self.result.type}")


# endregion
# region Semaphores between CTAs [P#parallel-synchronization-and-communication-instructions-ld, -red]


SEM_BACKOFF_NS = 32
"""nanosleep of a semaphore spin whose count differs: short (the CTAs it waits for are running)."""


@irdl_op_definition
class SemTryWaitOp(IRDLOperation):
    """`%done = sm90.sem_try_wait %sem, %expected : i64, i32`: read the i32 semaphore at global address %sem with
    acquire semantics at GPU scope and compare it with %expected: %done is whether they are equal. Prints as
    `ld.acquire.gpu.global.b32 r, [sem]; setp.eq.s32 done, r, expected; @!done nanosleep.u32
    SEM_BACKOFF_NS;` (a back-off while the count differs). Where %done is true, the writes and
    reductions that signalling CTAs made before their `sm90.sem_signal` are visible to this thread.
    `tile.sem_wait` is a spin on it (an `scf.while`) by one thread, then a CTA barrier. A spin that no CTA can
    end any more is a deadlock, which the simulators report naming this op. Invariants: %sem is 4-byte
    aligned at run time."""

    name = "sm90.sem_try_wait"
    sem = operand_def(I64)
    expected = operand_def(I32)
    result = result_def(i1)
    assembly_format = "$sem `,` $expected attr-dict `:` type($sem) `,` type($expected)"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, sem, expected):
        super().__init__(operands=[sem, expected], result_types=[i1])


@irdl_op_definition
class SemSignalOp(IRDLOperation):
    """`sm90.sem_signal %sem : i64`: add 1 to the i32 semaphore at global address %sem with release semantics
    at GPU scope: the global writes and reductions this thread made before it (and, after a CTA barrier, those
    of every thread of the CTA: a barrier is cumulative) are visible to a CTA whose `sm90.sem_try_wait` sees
    the new count. Prints as `red.release.gpu.global.add.s32 [sem], 1;`. Execute it on one thread (every
    thread that executes it adds 1). Bulk reductions are visible only once a `sm90.bulk_wait_group 0`
    (without `read`) of their thread has covered them. Invariants: %sem is 4-byte aligned at run time."""

    name = "sm90.sem_signal"
    sem = operand_def(I64)
    assembly_format = "$sem attr-dict `:` type($sem)"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    def __init__(self, sem):
        super().__init__(operands=[sem])


# endregion

REDUCTION_OPS = (RedGlobalAddOp, AtomGlobalAddOp, BulkReduceAddOp, BulkCommitGroupOp, BulkWaitGroupOp, StMatrixOp,
                 CvtUnpackOp, SemTryWaitOp, SemSignalOp)
"""The ops of this file, registered in the `sm90` dialect."""
