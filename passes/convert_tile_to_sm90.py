"""`convert-tile-to-sm90`: translate Tile IR kernels into Target IR for one sm_90a thread block.

Input: verified Tile IR kernels whose shared tiles have a 128-byte swizzle (run `assign-swizzle` first).
Output: each kernel `func.func` replaced by a Target IR kernel (`sm90.kernel = {threads, smem_bytes}`, the
`tile.kernel`/`tile.grid` attributes kept) whose arguments are tensor maps, global pointers and named sizes
(each with `sm90.source`, `sm90.box`, `sm90.swizzle` or `sm90.size`; see `tessera.interpreters.sm90`).

How each piece maps:
- Warpgroups: every register tile is [BM, N] with BM = 64 x W; W warpgroups (128 threads each) split the
  rows, 64 each, in the wgmma accumulator layout (`tessera.lowering.fragments`).
- Shared tiles are buffers of `sm90.shared_buffer`, stored as boxes of 128-byte rows: an [R, C] tile is
  C x elt / 128 boxes of R rows (head_dim 128 in bf16 is two 64-column boxes).
- `tile.cp_async` becomes one TMA load per box, issued by thread 0, on the mbarrier of the
  `tile.cp_commit_group` that closes its group; the commit is thread 0's `arrive.expect_tx` of the group's
  bytes. `tile.cp_wait_group` waits (try_wait.parity loops, every thread) on the barriers of the groups it
  covers, with the parity of the execution it waits for (the loop trip, mod 2). `tile.barrier` is bar.sync 0.
- `tile.mma` is a wgmma chain over K in steps of 16 (shared A and B through descriptors: K-major for A and
  for B^T, MN-major for B; bf16/f16 A from registers, packed, for P x V), then commit and wait 0.
- Row reductions reduce a thread's registers of each row, then across the 4 lanes of the row with
  shfl.sync.bfly; exponentials are ex2.approx with log2(e) folded into an fma; division is rcp.approx with
  rows of sum 0 giving 0; masks compare per-register row/column coordinates.
- `tile.store_global` / `tile.load` of a global window store / load each thread's registers (packed pairs
  for bf16/f16) with a bounds mask (out-of-bounds loads give 0).
Refused by name: shared tiles that are staged or not 128B-swizzled with whole 128-byte rows, register tiles
that are not [64 W, N] with a legal wgmma N, reshapes other than [BM] <-> [BM, 1], waits whose groups come from a
previous loop trip (pipelining is `pipeline-loops`' job), and any op not listed here.
"""

from __future__ import annotations

import math as pymath
from collections import defaultdict
from dataclasses import dataclass, field
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    IndexType,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    UnitAttr,
    VectorType,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import DiagnosticException

from tessera.diagnostics import located
from tessera.dialects import sm90, tile
from tessera.dialects.tile_types import MemSpace, TileType
from tessera.kernel_abi import (
    BOX_ATTR,
    DIMS_ATTR,
    ELEMENT_ATTR,
    GRID_ATTR,
    KERNEL_ATTR,
    ROLE_ATTR,
    SIZE_ATTR,
    SOURCE_ATTR,
    SWIZZLE_ATTR,
    TARGET_KERNEL_ATTR,
    KernelSignature,
    kernels,
    signature,
)
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import (
    ROW_VECTOR_TYPE,
    AccumulatorLayout,
    a_operand_registers,
    element_type_bytes,
    quad_shuffle_offsets,
)
from tessera.sm90 import facts


LINE = facts.SWIZZLE_LINE_BYTES                     # bytes of one swizzled row of a box
CORE_ROWS = facts.swizzle_period_bytes(128) // LINE  # rows per 1024-byte swizzle atom (the descriptor SBO)
K_STEP = 16                                         # wgmma k for 16-bit types
LOG2E = 1.4426950408889634
PRODUCER_ATTR = "sm90.producer"
"""Marks the scf.if in which thread 0 refills a ring stage: the work warp-specialize gives the producer."""


def _constant(value: SSAValue) -> int | None:
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


class LoweringError(DiagnosticException):
    """A Tile IR construct convert-tile-to-sm90 cannot lower; the message names the op and the rule."""


def _refuse(op: Operation, message: str) -> None:
    """Raise the LoweringError `message` about `op` (the kernel itself for what concerns it as a whole), located
    in the input (`tessera.diagnostics.located`)."""
    where = f"{tile_text(op)}: " if not isinstance(op, func.FuncOp) else ""
    raise LoweringError(located(op, f"convert-tile-to-sm90: {where}{message}", name_op=False))


def tile_text(op: Operation) -> str:
    text = str(op).splitlines()[0].strip()
    return text if len(text) < 140 else text[:137] + "..."


@dataclass
class SharedTile:
    """A shared tile placed in dynamic shared memory: [rows, cols] of `elt_bytes`, stored as boxes of
    128-byte rows."""

    address: SSAValue
    rows: int
    cols: int
    elt_bytes: int
    stage: Stage | None = None

    @property
    def box_cols(self) -> int:
        return LINE // self.elt_bytes

    @property
    def boxes(self) -> int:
        return self.cols // self.box_cols

    @property
    def box_bytes(self) -> int:
        return self.rows * LINE


@dataclass
class Ring:
    """A staged shared buffer [slots, rows, cols]: `slots` tiles of `slot_bytes` from `address`, and per slot
    a "full" mbarrier (one arrival with the copy's transaction bytes: the data landed) and an "empty" one
    (one arrival per thread of the block: every thread finished reading it), 8 bytes apart from `full` and
    `empty`. Fill and use number u go to slot u mod slots; each wraps the ring every `slots` uses, so
    the phase parity of both barriers flips once per trip around the ring: use u waits for full's phase
    u / slots (parity (u / slots) & 1) and fill u for empty's phase u / slots - 1 (parity flipped; for the
    first trip that is the phase "before" a fresh barrier, which counts as complete)."""

    address: SSAValue
    slots: int
    rows: int
    cols: int
    elt_bytes: int
    full: SSAValue
    empty: SSAValue

    @property
    def slot_bytes(self) -> int:
        return self.rows * self.cols * self.elt_bytes


@dataclass
class Stage:
    """One `tile.stage %ring[remui(use, slots)]`: the ring, the slot (index) and the use number (index)."""

    ring: Ring
    slot: SSAValue
    use: SSAValue
    full: SSAValue
    empty: SSAValue


@dataclass
class Scaled:
    """A register tile `raw * factor` (factor > 0) not multiplied out yet: masks, row maxima and exp_subtract
    fold the factor (max(f x) = f max(x); exp(f x - m) = ex2(x (f log2 e) - m log2 e)), saving one multiply
    per element; any other use multiplies it out once per block."""

    raw: SSAValue
    factor: float


@dataclass
class PendingMma:
    """A committed wgmma group not waited for yet: its result (Tile value) and the shared tiles it reads."""

    tile_value: SSAValue
    reads: list


@dataclass
class Window:
    """A `tile.view`: source argument index, its (new) index values, window shape."""

    arg: int
    indices: list[SSAValue]
    shape: tuple[int, ...]


@dataclass
class Group:
    """A `tile.cp_commit_group`: its mbarrier, the bytes its copies bring, the loop it executes in."""

    barrier: SSAValue
    loop: scf.ForOp | None
    nbytes: int = 0


@dataclass
class LoopInfo:
    op: scf.ForOp
    trip: SSAValue  # the trip index (iv - lb) / step in the new IR


@dataclass
class KernelLowering:
    """Lowers one Tile IR kernel; see the module docstring."""

    fn: func.FuncOp
    sig: KernelSignature = field(init=False)
    values: dict = field(default_factory=dict)
    groups: dict = field(default_factory=dict)  # commit op -> Group
    copy_group: dict = field(default_factory=dict)  # cp_async op -> commit op
    loops: list = field(default_factory=list)  # enclosing LoopInfo, innermost last
    outstanding: list = field(default_factory=list)  # commit ops possibly in flight
    committed_this_trip: set = field(default_factory=set)  # commit ops executed so far in the innermost trip
    ring_commits: set = field(default_factory=set)  # commit ops whose copies all fill ring stages
    rings: dict = field(default_factory=dict)  # staged tile.alloc_shared -> (full, empty) barrier bases
    pending: list = field(default_factory=list)  # PendingMma, oldest first, of the block being emitted
    materialized: dict = field(default_factory=dict)  # (Tile value, Block) -> value of a Scaled multiplied out
    waited_stages: set = field(default_factory=set)  # (stage Tile value, Block) whose full barrier was waited on
    e: Emitter | None = None  # the emitter of the op being translated

    def __post_init__(self) -> None:
        self.sig = signature(self.fn)

    # region set-up --------------------------------------------------------------------------------------
    def _block_rows(self) -> int:
        rows = set()
        for op in self.fn.walk():
            for value in op.results:
                ty = value.type
                if isinstance(ty, TileType) and ty.memory_space == MemSpace.REGISTER:
                    rows.add(ty.get_shape()[0])
        if len(rows) != 1:
            _refuse(self.fn, f"register tiles must all have the same number of rows (the block's query/row tile), got {sorted(rows)}")
        (bm,) = rows
        if bm % facts.WGMMA_M:
            _refuse(self.fn, f"register tiles have {bm} rows; warpgroups take {facts.WGMMA_M} rows each")
        return bm

    def _plan_groups(self) -> None:
        """Map each copy to the commit that closes its group: the next tile.cp_commit_group after it in its
        block or, for a copy inside an scf.if, after that scf.if. A group whose copies all fill ring stages
        (and an empty group) is a ring group: its completion is tracked by the stages' full barriers, not by
        a barrier of the group."""
        ring_copies = defaultdict(list)
        for op in self.fn.walk():
            if isinstance(op, tile.CpAsyncOp):
                anchor = op
                while True:
                    nxt = anchor.next_op
                    while nxt is not None and not isinstance(nxt, tile.CpCommitGroupOp):
                        nxt = nxt.next_op
                    if nxt is not None:
                        break
                    parent = anchor.parent_op()
                    if not isinstance(parent, scf.IfOp):
                        _refuse(op, "a copy must be followed by a tile.cp_commit_group in its block (or after its scf.if)")
                    anchor = parent
                self.copy_group[op] = nxt
                ring_copies[nxt].append(isinstance(op.dest.owner, tile.StageOp))
        for op in self.fn.walk():
            if isinstance(op, tile.CpCommitGroupOp):
                kinds = ring_copies.get(op, [])
                if all(kinds):
                    self.ring_commits.add(op)
                elif any(kinds):
                    _refuse(op, "a copy group must fill either ring stages only or unstaged tiles only")

    def _tensor_maps(self) -> dict[tuple[int, int], int]:
        """(source argument, box rows) of every TMA the kernel issues."""
        keys = {}
        for op in self.fn.walk():
            if isinstance(op, tile.CpAsyncOp):
                view = op.source.owner
                if not isinstance(view, tile.ViewOp) or not isinstance(view.source.owner, Block):
                    _refuse(op, "copies must read a tile.view of a kernel argument")
                arg = view.source.index
                keys.setdefault((arg, view.result.type.get_shape()[0]), len(keys))
        return keys

    def _pointer_args(self) -> list[int]:
        args = []
        for op in self.fn.walk():
            if isinstance(op, tile.StoreGlobalOp | tile.LoadOp):
                view = (op.dest if isinstance(op, tile.StoreGlobalOp) else op.source).owner
                if not isinstance(view, tile.ViewOp) or not isinstance(view.source.owner, Block):
                    _refuse(op, "global loads and stores must access a tile.view of a kernel argument")
                if view.source.index not in args:
                    args.append(view.source.index)
        return args

    # endregion
    # region driver --------------------------------------------------------------------------------------
    def run(self) -> func.FuncOp:
        self.bm = self._block_rows()
        self.warpgroups = self.bm // facts.WGMMA_M
        self.threads = self.warpgroups * facts.WARPGROUP_SIZE
        self._plan_groups()
        maps = self._tensor_maps()
        pointers = self._pointer_args()
        names = self.sig.dim_names()

        arg_types, arg_attrs, self.map_args, self.pointer_args, self.size_args = [], [], {}, {}, {}
        src_args = self.sig.args
        for (arg, rows), _ in sorted(maps.items(), key=lambda kv: kv[1]):
            a = src_args[arg]
            elt = element_type_bytes(a.type.element_type)
            box = [LINE // elt, rows] + [1] * (a.type.rank - 2)
            self.map_args[(arg, rows)] = len(arg_types)
            arg_types.append(sm90.TensorMapType())
            arg_attrs.append(DictionaryAttr({
                SOURCE_ATTR: IntegerAttr(arg, 64), BOX_ATTR: ArrayAttr([IntegerAttr(b, 64) for b in box]),
                SWIZZLE_ATTR: IntegerAttr(128, 64), ELEMENT_ATTR: a.type.element_type, DIMS_ATTR: a.dims,
                ROLE_ATTR: StringAttr(a.role)}))
        for arg in pointers:
            a = src_args[arg]
            self.pointer_args[arg] = len(arg_types)
            arg_types.append(i64)
            arg_attrs.append(DictionaryAttr({SOURCE_ATTR: IntegerAttr(arg, 64), ELEMENT_ATTR: a.type.element_type,
                                             DIMS_ATTR: a.dims, ROLE_ATTR: StringAttr(a.role)}))
        for name in names:
            self.size_args[name] = len(arg_types)
            arg_types.append(IndexType())
            arg_attrs.append(DictionaryAttr({SIZE_ATTR: StringAttr(name)}))

        entry = Block(arg_types=arg_types)
        for attrs, barg in zip(arg_attrs, entry.args):
            barg.name_hint = self._arg_name(attrs)
        self.entry_args = entry.args
        e = Emitter(entry)
        self.smem_offset = 0
        self._prologue(e)
        old = self.fn.body.blocks.first
        for i, barg in enumerate(old.args):
            self.values[barg] = ("arg", i)
        self._translate_block(old, e)

        # The launch asks for 1023 bytes more, to align the base at run time (tessera.ptx).
        if self.smem_offset + 1023 > facts.MAX_SHARED_MEMORY_PER_BLOCK:
            _refuse(self.fn, f"the kernel needs {self.smem_offset} bytes of shared memory (+1023 to align the base), more "
                          f"than the {facts.MAX_SHARED_MEMORY_PER_BLOCK} a thread block of sm_90 may have: use fewer "
                          "pipeline stages or smaller tiles")
        attributes = {KERNEL_ATTR: self.fn.attributes[KERNEL_ATTR], GRID_ATTR: self.fn.attributes[GRID_ATTR]}
        attributes[TARGET_KERNEL_ATTR] = DictionaryAttr({
            "threads": IntegerAttr(self.threads, 64), "smem_bytes": IntegerAttr(self.smem_offset, 64)})
        new = func.FuncOp(self.fn.sym_name.data, (arg_types, []), Region(entry), arg_attrs=ArrayAttr(arg_attrs))
        new.attributes.update(attributes)
        new.location = self.fn.location  # diagnostics about the Target IR kernel point at its Tile IR source
        return new

    def _arg_name(self, attrs: DictionaryAttr) -> str:
        if SIZE_ATTR in attrs.data:
            return attrs.data[SIZE_ATTR].data
        source = self.sig.args[attrs.data[SOURCE_ATTR].value.data].name
        if BOX_ATTR in attrs.data:
            return f"{source}_map{attrs.data[BOX_ATTR].data[1].value.data}"
        return f"{source}_ptr"

    def _alloc(self, e: Emitter, name: str, size: int, align: int, swizzle: int) -> SSAValue:
        offset = -(-self.smem_offset // align) * align
        self.smem_offset = offset + size
        value = e.op(sm90.SharedBufferOp(name, offset, size, align, swizzle))
        value.name_hint = name
        return value

    def _prologue(self, e: Emitter) -> None:
        """Thread ids, this thread's accumulator coordinates, and the mbarriers of every commit group."""
        self.tid = e.op(sm90.SpecialRegOp("tid.x"))
        self.tid.name_hint = "tid"
        zero = e.index(0)
        self.is_thread0 = e.cmpi(self.tid, zero, "eq")
        self.row_base = self._thread_term(e, "row")
        self.col_base = self._thread_term(e, "col")
        # The warpgroup index, read from lane 0 with shfl.sync.idx as CUTLASS does: ptxas then knows it is
        # warp-uniform and keeps the wgmma descriptors built from it in uniform registers (no R2UR each).
        warpgroup = e.op(arith.IndexCastOp(e.op(arith.DivUIOp(self.tid, e.index(facts.WARPGROUP_SIZE))), i32))
        warpgroup = e.op(sm90.ShflSyncOp("idx", warpgroup, 0))
        warpgroup.name_hint = "warpgroup"
        self.a_row_offset = e.op(arith.MuliOp(warpgroup, e.op(arith.ConstantOp(IntegerAttr(facts.WGMMA_M * LINE, i32)))))
        commits = [op for op in self.fn.walk() if isinstance(op, tile.CpCommitGroupOp) and op not in self.ring_commits]
        for k, op in enumerate(commits):
            bar = self._alloc(e, f"group{k}_bar", facts.MBARRIER_BYTES, facts.MBARRIER_BYTES, 0)
            self.groups[op] = Group(bar, self._enclosing_loop(op))
        staged = [op for op in self.fn.walk() if isinstance(op, tile.AllocSharedOp) and op.result.type.rank >= 3]
        for op in staged:
            name, slots = op.result.name_hint or "ring", op.result.type.get_shape()[0]
            self.rings[op] = tuple(self._alloc(e, f"{name}_{kind}", slots * facts.MBARRIER_BYTES, facts.MBARRIER_BYTES, 0)
                                   for kind in ("full", "empty"))
        if commits or staged:
            def init(t: Emitter):
                for g in self.groups.values():
                    t.op(sm90.MBarrierInitOp(g.barrier, 1))
                for op, (full, empty) in self.rings.items():
                    for slot in range(op.result.type.get_shape()[0]):
                        t.op(sm90.MBarrierInitOp(self._slot_barrier(t, full, slot), 1))
                        t.op(sm90.MBarrierInitOp(self._slot_barrier(t, empty, slot), self.threads))
                t.op(sm90.FenceMBarrierInitOp())
            e.if_(self.is_thread0, init)
            e.op(sm90.BarSyncOp(0, self.threads))

    @staticmethod
    def _slot_barrier(e: Emitter, base: SSAValue, slot: int | SSAValue) -> SSAValue:
        """The mbarrier of `slot` in an array of 8-byte barriers at `base` (a constant or an index slot)."""
        if isinstance(slot, int):
            return base if slot == 0 else e.op(arith.AddiOp(base, e.op(arith.ConstantOp(IntegerAttr(slot * facts.MBARRIER_BYTES, i32)))))
        offset = e.op(arith.IndexCastOp(e.muli(slot, e.index(facts.MBARRIER_BYTES)), i32))
        return e.op(arith.AddiOp(base, offset))

    def _thread_term(self, e: Emitter, which: str) -> SSAValue:
        total = e.index(0)
        for divisor, modulus, multiplier in facts.ACCUMULATOR_THREAD_TERMS[which]:
            part = e.op(arith.DivUIOp(self.tid, e.index(divisor))) if divisor != 1 else self.tid
            if modulus:
                part = e.op(arith.RemUIOp(part, e.index(modulus)))
            total = e.addi(total, e.muli(part, e.index(multiplier)))
        total.name_hint = f"{which}_base"
        return total

    @staticmethod
    def _enclosing_loop(op: Operation) -> scf.ForOp | None:
        parent = op.parent_op()
        while parent is not None and not isinstance(parent, scf.ForOp | func.FuncOp):
            parent = parent.parent_op()
        return parent if isinstance(parent, scf.ForOp) else None

    # endregion
    # region translation ---------------------------------------------------------------------------------
    def _translate_block(self, block: Block, e: Emitter) -> None:
        for op in block.ops:
            self._translate(op, e)

    def _translate(self, op: Operation, e: Emitter) -> None:
        """Lower one op with its `_lower_<OpClass>` handler; index `arith` is copied as it is."""
        handler = getattr(self, f"_lower_{type(op).__name__}", None)
        self.e = e
        if isinstance(op, scf.ForOp | scf.IfOp | scf.YieldOp | func.ReturnOp):
            self._retire_all(e)  # wgmma groups never stay in flight across control flow
        if handler is not None:
            handler(op, e)
        elif op.dialect_name() == "arith":
            self._clone(op, e)
        else:
            _refuse(op, f"no lowering for '{op.name}'")

    def _get(self, value: SSAValue):
        """The lowered value of a Tile value: a wgmma result still in flight is waited for first, and a
        `Scaled` tile is multiplied out (once per block)."""
        lowered = self._peek(value)
        if isinstance(lowered, Scaled):
            key = (value, self.e.block)
            if key not in self.materialized:
                lanes = lowered.raw.type.get_shape()[0]
                self.materialized[key] = self.e.mulf(lowered.raw, self.e.splat(f32, lowered.factor, lanes))
            return self.materialized[key]
        return lowered

    def _peek(self, value: SSAValue):
        """Like `_get`, but a `Scaled` tile stays scaled (for the ops that fold the factor)."""
        if any(p.tile_value is value for p in self.pending):
            self._retire(value, self.e)
        return self.values[value]

    # -- wgmma groups in flight ---------------------------------------------------------------------------
    def _retire(self, value: SSAValue, e: Emitter) -> None:
        """Wait for the wgmma group producing Tile value `value` (and every older one): wait_group N with N
        the groups committed after it, which stay in flight."""
        index = next(i for i, p in enumerate(self.pending) if p.tile_value is value)
        e.op(sm90.WgmmaWaitGroupOp(len(self.pending) - 1 - index))
        self.pending = self.pending[index + 1:]

    def _retire_all(self, e: Emitter) -> None:
        if self.pending:
            e.op(sm90.WgmmaWaitGroupOp(0))
            self.pending = []

    def _retire_readers(self, address: SSAValue, e: Emitter) -> None:
        """Wait for every group in flight that reads the shared tile at `address` (before it is refilled
        or released)."""
        readers = [p for p in self.pending if any(t.address is address for t in p.reads)]
        if readers:
            self._retire(readers[-1].tile_value, e)

    def _clone(self, op: Operation, e: Emitter) -> None:
        new = op.clone(value_mapper={v: self.values[v] for v in op.operands})
        e.builder.insert(new)
        for old, res in zip(op.results, new.results):
            res.name_hint = old.name_hint
            self.values[old] = res

    def _set(self, old: SSAValue, new) -> None:
        if isinstance(new, SSAValue) and old.name_hint and new.name_hint is None:
            new.name_hint = old.name_hint
        self.values[old] = new

    def _arg_tile(self, index: int) -> TileType:
        return self.sig.args[index].type

    def _lower_ProgramIdOp(self, op: tile.ProgramIdOp, e: Emitter) -> None:
        self._set(op.result, e.op(sm90.SpecialRegOp(f"ctaid.{op.axis.data}")))

    def _lower_DimOp(self, op: tile.DimOp, e: Emitter) -> None:
        kind, arg = self._get(op.source)
        self._set(op.result, self._dim_value(arg, op.index.value.data, e))

    def _dim_value(self, arg: int, dim: int, e: Emitter) -> SSAValue:
        expr = list(self.sig.args[arg].dims)[dim]
        if expr.is_constant:
            return e.index(expr.value.data)
        size = self.entry_args[self.size_args[expr.symbol.data]]
        if expr.is_name:
            return size
        return e.op(arith.CeilDivSIOp(size, e.index(expr.value.data)))

    def _lower_AllocSharedOp(self, op: tile.AllocSharedOp, e: Emitter) -> None:
        ty = op.result.type
        elt = element_type_bytes(ty.element_type)
        if ty.rank not in (2, 3):
            _refuse(op, "shared tiles must be [rows, cols] or rings [stages, rows, cols]")
        *stages, rows, cols = ty.get_shape()
        if ty.swizzle_bytes != 128 or (cols * elt) % LINE:
            _refuse(op, "shared tiles must have a 128B swizzle and rows of a multiple of 128 bytes (run assign-swizzle)")
        if rows % CORE_ROWS:
            _refuse(op, f"shared tiles must have a multiple of {CORE_ROWS} rows")
        size = rows * cols * elt
        slots = stages[0] if stages else 1
        address = self._alloc(e, op.result.name_hint or "smem", slots * size, facts.swizzle_period_bytes(128), 128)
        if stages:
            full, empty = self.rings[op]
            self.values[op.result] = Ring(address, slots, rows, cols, elt, full, empty)
        else:
            self.values[op.result] = SharedTile(address, rows, cols, elt)

    def _lower_StageOp(self, op: tile.StageOp, e: Emitter) -> None:
        ring = self._get(op.source)
        index = op.index.owner
        if not (isinstance(index, arith.RemUIOp) and _constant(index.rhs) == ring.slots):
            _refuse(op, f"a stage index must be `arith.remui %use, {ring.slots}` (the use number modulo the ring "
                        "size, as pipeline-loops writes it): the mbarrier parities come from the use number")
        slot, use = self._get(op.index), self._get(index.lhs)
        offset = e.op(arith.IndexCastOp(e.muli(slot, e.index(ring.slot_bytes)), i32))
        address = e.op(arith.AddiOp(ring.address, offset))
        stage = Stage(ring, slot, use, self._slot_barrier(e, ring.full, slot), self._slot_barrier(e, ring.empty, slot))
        self.values[op.result] = SharedTile(address, ring.rows, ring.cols, ring.elt_bytes, stage)

    def _phase_parity(self, stage: Stage, e: Emitter, flip: bool) -> SSAValue:
        """(use / slots) & 1: the parity of the phase of the stage's barriers that use number `use` waits
        for (flipped for the empty barrier: a fill waits for the release of the previous trip)."""
        trip = stage.use if stage.ring.slots == 1 else e.op(arith.DivUIOp(stage.use, e.index(stage.ring.slots)))
        parity = e.op(arith.AndIOp(trip, e.index(1)))
        return e.op(arith.XOrIOp(parity, e.index(1))) if flip else parity

    def _await_stage(self, value: SSAValue, t: SharedTile, e: Emitter) -> None:
        """Every thread waits for the full barrier of a stage before its first read in this block."""
        if t.stage is None or (value, e.block) in self.waited_stages:
            return
        self.waited_stages.add((value, e.block))
        parity = self._phase_parity(t.stage, e, flip=False)
        e.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(t.stage.full, parity)))

    def _lower_ReleaseOp(self, op: tile.ReleaseOp, e: Emitter) -> None:
        t = self._get(op.stage)
        self._retire_readers(t.address, e)
        e.op(sm90.MBarrierArriveOp(t.stage.empty))

    def _lower_ViewOp(self, op: tile.ViewOp, e: Emitter) -> None:
        source = self._get(op.source)
        if not (isinstance(source, tuple) and source[0] == "arg"):
            _refuse(op, "views must be of kernel arguments")
        if op.result.type.rank != 2:
            _refuse(op, "only 2-D windows are supported")
        self.values[op.result] = Window(source[1], [self._get(i) for i in op.indices], op.result.type.get_shape())

    def _lower_CpAsyncOp(self, op: tile.CpAsyncOp, e: Emitter) -> None:
        window, dest = self._get(op.source), self._get(op.dest)
        rows = window.shape[0]
        tmap = self.entry_args[self.map_args[(window.arg, rows)]]
        self._retire_readers(dest.address, e)
        if dest.stage is not None:
            self._fill_stage(window, dest, tmap, e)
            return
        group = self.groups[self.copy_group[op]]
        group.nbytes += dest.rows * dest.cols * dest.elt_bytes

        e.if_(self.is_thread0, lambda t: self._tma_boxes(t, window, dest, tmap, group.barrier))

    def _tma_boxes(self, t: Emitter, window: Window, dest: SharedTile, tmap: SSAValue, barrier: SSAValue) -> None:
        coords = list(reversed(window.indices))
        for b in range(dest.boxes):
            inner = t.addi(coords[0], t.index(b * dest.box_cols)) if b else coords[0]
            box_addr = t.op(arith.AddiOp(dest.address, t.op(arith.ConstantOp(IntegerAttr(b * dest.box_bytes, i32)))))
            t.op(sm90.TmaLoadOp(tmap, [inner] + coords[1:], box_addr, barrier))

    def _fill_stage(self, window: Window, dest: SharedTile, tmap: SSAValue, e: Emitter) -> None:
        """Thread 0, the producer: wait until every thread released the slot's previous contents (the empty
        barrier's phase of the previous trip around the ring), expect the copy's bytes on the full barrier,
        issue the boxes on it. The scf.if is marked `sm90.producer` for warp-specialize."""
        stage = dest.stage

        def produce(t: Emitter):
            parity = self._phase_parity(stage, t, flip=True)
            t.spin_until(lambda w: w.op(sm90.MBarrierTryWaitParityOp(stage.empty, parity)))
            t.op(sm90.MBarrierArriveExpectTxOp(stage.full, dest.rows * dest.cols * dest.elt_bytes))
            self._tma_boxes(t, window, dest, tmap, stage.full)
        e.if_(self.is_thread0, produce).attributes[PRODUCER_ATTR] = UnitAttr()

    def _lower_CpCommitGroupOp(self, op: tile.CpCommitGroupOp, e: Emitter) -> None:
        self.outstanding.append(op)
        if op in self.ring_commits:
            return  # ring stages signal their own full barriers
        group = self.groups[op]

        def arrive(t: Emitter):
            if group.nbytes:
                t.op(sm90.MBarrierArriveExpectTxOp(group.barrier, group.nbytes))
            else:
                t.op(sm90.MBarrierArriveOp(group.barrier))
        e.if_(self.is_thread0, arrive)

    def _lower_CpWaitGroupOp(self, op: tile.CpWaitGroupOp, e: Emitter) -> None:
        pending = op.pending.value.data
        waited = self.outstanding[: len(self.outstanding) - pending] if pending else list(self.outstanding)
        self._wait_for(op, waited, e)
        self.outstanding = [c for c in self.outstanding if c not in waited]

    def _wait_for(self, op: Operation, commits: list, e: Emitter) -> None:
        """Every thread spins on the mbarrier of each group until the phase its copies complete is done."""
        for commit in commits:
            if commit in self.ring_commits:
                continue  # waited for at the stage's first read, on its full barrier
            group = self.groups[commit]
            parity = self._parity(op, commit, group, e)
            e.spin_until(lambda t: t.op(sm90.MBarrierTryWaitParityOp(group.barrier, parity)))

    def _parity(self, wait: Operation, commit: Operation, group: Group, e: Emitter) -> SSAValue:
        """The parity of the barrier phase that the execution of `commit` being waited for completes."""
        if group.loop is None:
            return e.index(0)
        info = next((l for l in self.loops if l.op is group.loop), None)
        if info is None:
            _refuse(wait, "waiting after a loop for copies committed inside it is not supported")
        if commit not in self.committed_this_trip:
            _refuse(wait, "waits for copies committed in an earlier loop trip need pipeline-loops (not supported yet)")
        return e.op(arith.AndIOp(info.trip, e.index(1)))

    def _lower_BarrierOp(self, op: tile.BarrierOp, e: Emitter) -> None:
        # Reads before the barrier are done after it (another thread may refill the tiles next): the
        # tensor core's reads of shared operands included.
        self._retire_all(e)
        e.op(sm90.BarSyncOp(0, self.threads))

    # -- register tiles --------------------------------------------------------------------------------------
    def _layout(self, op: Operation, ty: TileType) -> AccumulatorLayout:
        shape = ty.get_shape()
        if len(shape) != 2:
            _refuse(op, f"expected a 2-D register tile, got {ty}")
        n = shape[1]
        try:
            facts.wgmma_shape(n, "bf16", "f32")
        except ValueError:
            _refuse(op, f"register tiles need a column count that is a legal wgmma N (8..256 step 8), got {n}")
        return AccumulatorLayout(n)

    @staticmethod
    def _is_column(ty: TileType) -> bool:
        """An [BM, 1] tile: held like a row vector (each thread its two rows)."""
        return ty.rank == 2 and ty.get_shape()[1] == 1

    def _vector_type(self, op: Operation, ty: TileType) -> VectorType:
        if ty.rank == 1 or self._is_column(ty):
            if not isinstance(ty.element_type, Float32Type):
                _refuse(op, "row vectors must be f32")
            return ROW_VECTOR_TYPE
        layout = self._layout(op, ty)
        if isinstance(ty.element_type, Float32Type):
            return layout.vector_type()
        if isinstance(ty.element_type, BFloat16Type | Float16Type):
            return layout.vector_type(packed=True)
        _refuse(op, f"register tiles of {ty.element_type} are not supported")

    def _lower_FillOp(self, op: tile.FillOp, e: Emitter) -> None:
        ty = op.result.type
        vt = self._vector_type(op, ty)
        if not isinstance(ty.element_type, Float32Type):
            _refuse(op, "fills of 16-bit register tiles are not supported")
        self._set(op.result, e.splat(f32, op.value.value.data, vt.get_shape()[0]))

    def _lower_MmaOp(self, op: tile.MmaOp, e: Emitter) -> None:
        """One wgmma group: fence, the chain over K, commit. It is NOT waited for here: the wait comes at
        the first use of the result (`_get`), before control flow, or before its shared operands are
        released or refilled, so independent work (the softmax of another tile) runs meanwhile."""
        a, b, acc = (self._get(v) for v in (op.a, op.b, op.acc))
        ab = "bf16" if isinstance(op.a.type.element_type, BFloat16Type) else "f16"
        m, k = op.a.type.get_shape()
        n = op.acc.type.get_shape()[1]
        if k % K_STEP:
            _refuse(op, f"the contraction size must be a multiple of {K_STEP}, got {k}")
        if not isinstance(b, SharedTile):
            _refuse(op, "operand B must be in shared memory")
        reads = [t for t in (a, b) if isinstance(t, SharedTile)]
        for value, t in ((op.a, a), (op.b, b)):
            if isinstance(t, SharedTile):
                self._await_stage(value, t, e)
        if isinstance(a, SharedTile):
            a_base = self._descriptor(e, e.op(arith.AddiOp(a.address, self.a_row_offset)), facts.SWIZZLE_CHUNK_BYTES)
        b_base = self._descriptor(e, b.address, facts.SWIZZLE_CHUNK_BYTES if op.transpose_b else b.box_bytes)
        e.op(sm90.WgmmaFenceOp())
        for step in range(k // K_STEP):
            if isinstance(a, SharedTile):
                a_operand = self._step(e, a_base, self._k_major_offset(a, step))
            else:
                a_operand = e.shuffle(a, a_operand_registers(step))
            if op.transpose_b:
                b_desc, trans_b = self._step(e, b_base, self._k_major_offset(b, step)), 0
            else:
                b_desc, trans_b = self._step(e, b_base, step * K_STEP * LINE), 1
            acc = e.op(sm90.WgmmaMmaAsyncOp(acc, a_operand, b_desc, n, ab, 0, trans_b))
        e.op(sm90.WgmmaCommitGroupOp())
        self._set(op.result, acc)
        self.pending.append(PendingMma(op.result, reads))

    @staticmethod
    def _k_major_offset(t: SharedTile, step: int) -> int:
        """Bytes from a K-major tile's start to k-step `step`: whole boxes, then 32 bytes per step within."""
        byte = step * K_STEP * t.elt_bytes
        return (byte // LINE) * t.box_bytes + byte % LINE

    @staticmethod
    def _descriptor(e: Emitter, start: SSAValue, lbo: int) -> SSAValue:
        return e.op(sm90.MakeDescriptorOp(start, lbo, CORE_ROWS * LINE, 128))

    @staticmethod
    def _step(e: Emitter, base: SSAValue, offset: int) -> SSAValue:
        """The descriptor `offset` bytes after `base`'s start (one 32-bit add in PTX)."""
        if not offset:
            return base
        return e.op(sm90.DescriptorAdvanceOp(base, offset))

    def _reduce_rows(self, op, x: SSAValue, combine, e: Emitter) -> SSAValue:
        layout = self._layout(op, op.source.type)
        rows = layout.row_of_element
        grouped = [v for r in range(2) for v in range(layout.lanes) if rows[v] == r]
        x = e.shuffle(x, grouped)
        size = layout.lanes // 2  # registers per row; a tile BN = 16 k wide has k, odd for BN = 48, 80, ...
        while size > 1:
            half = size // 2
            left = e.shuffle(x, [r * size + i for r in range(2) for i in range(half)])
            right = e.shuffle(x, [r * size + half + i for r in range(2) for i in range(half)])
            folded = combine(left, right)
            if size % 2:  # each row's last register has no partner at this level: it joins the folded ones
                x = e.shuffle(folded, [i for r in range(2) for i in
                                       (*range(r * half, (r + 1) * half), 2 * half + r * size + size - 1)], x)
                size = half + 1
            else:
                x, size = folded, half
        for offset in quad_shuffle_offsets():
            x = combine(x, e.op(sm90.ShflSyncOp("bfly", x, offset)))
        return x

    def _lower_RowMaxOp(self, op: tile.RowMaxOp, e: Emitter) -> None:
        x = self._peek(op.source)
        if isinstance(x, Scaled):  # max(f x) = f max(x) for f > 0: two multiplies instead of one per element
            rows = self._reduce_rows(op, x.raw, e.maxf, e)
            self._set(op.result, e.mulf(rows, e.splat(f32, x.factor, rows.type.get_shape()[0])))
            return
        self._set(op.result, self._reduce_rows(op, self._get(op.source), e.maxf, e))

    def _lower_RowSumOp(self, op: tile.RowSumOp, e: Emitter) -> None:
        self._set(op.result, self._reduce_rows(op, self._get(op.source), e.addf, e))

    def _broadcast_rows(self, op, rows: SSAValue, e: Emitter) -> SSAValue:
        return e.shuffle(rows, self._layout(op, op.source.type).row_of_element)

    def _safe_max(self, m: SSAValue, e: Emitter) -> SSAValue:
        lanes = m.type.get_shape()[0]
        is_inf = e.setp("eq", m, e.splat(f32, float("-inf"), lanes))
        return e.select(is_inf, e.splat(f32, 0.0, lanes), m)

    def _exp_minus(self, op, x: SSAValue, rows: SSAValue, e: Emitter, broadcast: bool, factor: float = 1.0) -> SSAValue:
        """exp(factor x - m) = ex2(x (factor log2e) - m log2e): -m log2e is computed once per row (two
        registers), then one fma per register and ex2 (a `Scaled` operand's factor folds into the fma)."""
        lanes = x.type.get_shape()[0]
        m = self._safe_max(rows, e)
        neg_scaled_m = e.op(arith.NegfOp(e.mulf(m, e.splat(f32, LOG2E, m.type.get_shape()[0]))))
        if broadcast:
            neg_scaled_m = self._broadcast_rows(op, neg_scaled_m, e)
        return e.ex2(e.fma(x, e.splat(f32, factor * LOG2E, lanes), neg_scaled_m))

    def _lower_ExpSubtractOp(self, op: tile.ExpSubtractOp, e: Emitter) -> None:
        x = self._peek(op.source)
        raw, factor = (x.raw, x.factor) if isinstance(x, Scaled) else (x, 1.0)
        self._set(op.result, self._exp_minus(op, raw, self._get(op.rows), e, broadcast=True, factor=factor))

    def _lower_ExpDiffOp(self, op: tile.ExpDiffOp, e: Emitter) -> None:
        self._set(op.result, self._exp_minus(op, self._get(op.lhs), self._get(op.rhs), e, broadcast=False))

    def _lower_ElementMaxOp(self, op, e: Emitter) -> None:
        self._set(op.result, e.maxf(self._get(op.lhs), self._get(op.rhs)))

    def _lower_AddOp(self, op, e: Emitter) -> None:
        self._set(op.result, e.addf(self._get(op.lhs), self._get(op.rhs)))

    def _lower_MulOp(self, op, e: Emitter) -> None:
        self._set(op.result, e.mulf(self._get(op.lhs), self._get(op.rhs)))

    def _lower_FmaOp(self, op, e: Emitter) -> None:
        self._set(op.result, e.fma(self._get(op.a), self._get(op.b), self._get(op.c)))

    def _lower_ScaleOp(self, op: tile.ScaleOp, e: Emitter) -> None:
        x, factor = self._get(op.source), op.factor.value.data
        if factor > 0 and pymath.isfinite(factor):
            self.values[op.result] = Scaled(x, factor)  # multiplied out only where no consumer folds it
            return
        self._set(op.result, e.mulf(x, e.splat(f32, factor, x.type.get_shape()[0])))

    def _lower_MulRowsOp(self, op, e: Emitter) -> None:
        self._set(op.result, e.mulf(self._get(op.source), self._broadcast_rows(op, self._get(op.rows), e)))

    def _lower_DivRowsOp(self, op, e: Emitter) -> None:
        rows = self._get(op.rows)
        zero_rows = e.setp("eq", rows, e.splat(f32, 0.0, 2))
        inverse = e.select(zero_rows, e.splat(f32, 0.0, 2), e.rcp(rows))
        self._set(op.result, e.mulf(self._get(op.source), self._broadcast_rows(op, inverse, e)))

    def _lower_ReshapeOp(self, op: tile.ReshapeOp, e: Emitter) -> None:
        if self._vector_type(op, op.source.type) != self._vector_type(op, op.result.type) or not (
            op.source.type.rank == 1 or self._is_column(op.source.type)
        ):
            _refuse(op, "only reshapes between a row vector [BM] and a column [BM, 1] are supported")
        self._set(op.result, self._get(op.source))

    def _lower_CastOp(self, op: tile.CastOp, e: Emitter) -> None:
        src, dst = op.source.type, op.result.type
        if not (isinstance(src.element_type, Float32Type) and isinstance(dst.element_type, BFloat16Type | Float16Type) and src.rank == 2):
            _refuse(op, "only casts of 2-D f32 register tiles to bf16/f16 are supported")
        half = "bf16" if isinstance(dst.element_type, BFloat16Type) else "f16"
        self._set(op.result, e.op(sm90.CvtPackOp(self._get(op.source), half)))

    def _thread_offsets(self, op, ty: TileType, pairs: bool = False) -> tuple[list[int], list[int]]:
        """Per register of this thread's share of an [BM, N] tile (or of an [BM, 1] column, or per packed
        pair): its row and column relative to the thread's first element."""
        if self._is_column(ty):
            rows = sorted(set(AccumulatorLayout(8).row_offsets))
            return rows, [0] * len(rows)
        layout = self._layout(op, ty)
        elements = layout.packed_pairs() if pairs else list(range(layout.lanes))
        return [layout.row_offsets[v] for v in elements], [layout.col_offsets[v] for v in elements]

    def _origin(self, e: Emitter, row0: SSAValue, col0: SSAValue, column: bool = False) -> tuple[SSAValue, SSAValue]:
        """The absolute (row, col) of this thread's first element of a tile whose corner is (row0, col0)."""
        return e.addi(row0, self.row_base), (col0 if column else e.addi(col0, self.col_base))

    @staticmethod
    def _below(e: Emitter, limit: SSAValue, offsets: list[int]) -> SSAValue:
        """Per register: offsets[i] < limit (a scalar threshold against constant offsets, so a mask costs
        one setp per register and no vector of coordinates)."""
        return e.setp("gt", e.broadcast(limit, len(offsets)), e.dense(IndexType(), offsets))

    def _mask(self, op, e: Emitter, hidden: SSAValue) -> None:
        """-inf where hidden. A `Scaled` source stays scaled: f * -inf = -inf for f > 0."""
        x = self._peek(op.source)
        raw = x.raw if isinstance(x, Scaled) else x
        lanes = raw.type.get_shape()[0]
        masked = e.select(hidden, e.splat(f32, float("-inf"), lanes), raw)
        if isinstance(x, Scaled):
            self.values[op.result] = Scaled(masked, x.factor)
        else:
            self._set(op.result, masked)

    def _lower_MaskBoundsOp(self, op: tile.MaskBoundsOp, e: Emitter) -> None:
        # Key k0 + col is hidden where col >= seq_k - k0, i.e. unless col < seq_k - k0.
        _, col_offsets = self._thread_offsets(op, op.source.type)
        _, col = self._origin(e, e.index(0), self._get(op.k_start))
        limit = e.op(arith.SubiOp(self._get(op.seq_k), col))
        hidden = e.setp("le", e.broadcast(limit, len(col_offsets)), e.dense(IndexType(), col_offsets))
        self._mask(op, e, hidden)

    def _lower_MaskCausalOp(self, op: tile.MaskCausalOp, e: Emitter) -> None:
        # Key k0 + c is hidden where k0 + c > q0 + r + seq_k - seq_q, i.e. where (c - r) > t with
        # t = q0 + r0 + seq_k - seq_q - k0 - c0 for the thread's first element (r0, c0).
        row_offsets, col_offsets = self._thread_offsets(op, op.source.type)
        row, col = self._origin(e, self._get(op.q_start), self._get(op.k_start))
        shift = e.op(arith.SubiOp(self._get(op.seq_k), self._get(op.seq_q)))
        t = e.op(arith.SubiOp(e.addi(row, shift), col))
        diagonal = [c - r for r, c in zip(row_offsets, col_offsets)]
        hidden = e.setp("lt", e.broadcast(t, len(diagonal)), e.dense(IndexType(), diagonal))
        self._mask(op, e, hidden)

    def _window_access(self, op, window: Window, ty: TileType, e: Emitter) -> tuple[SSAValue, SSAValue, SSAValue]:
        """The global address of this thread's first element, and the byte offsets from it and in-bounds mask of
        each register of its share of an [BM, N] window: one per element, or per packed pair for 16-bit tiles."""
        packed = not isinstance(ty.element_type, Float32Type)
        if packed and (ty.get_shape()[1] % 2 or self._is_column(ty)):
            _refuse(op, "16-bit tiles in registers need an even number of columns")
        *lead, row0, col0 = window.indices
        row_offsets, col_offsets = self._thread_offsets(op, ty, pairs=packed)
        row, col = self._origin(e, row0, col0, column=self._is_column(ty))
        dims = [self._dim_value(window.arg, d, e) for d in range(len(window.indices))]
        in_rows = self._below(e, e.op(arith.SubiOp(dims[-2], row)), row_offsets)
        last = [c + 1 if packed else c for c in col_offsets]
        in_cols = self._below(e, e.op(arith.SubiOp(dims[-1], col)), last)
        # The thread's first element is at byte ((lead..., row) * C + col) * elt (i64, added to the pointer);
        # register i is (row_offset[i] * C + col_offset[i]) * elt bytes further (i32: within one tile).
        wide = [e.to_i64(d) for d in dims]
        flat = e.i64(0)
        for index, dim in zip(lead, wide):
            flat = e.addi(e.muli(flat, dim), e.to_i64(index))
        elt = element_type_bytes(self._arg_tile(window.arg).element_type)
        first = e.addi(e.muli(e.addi(e.muli(flat, wide[-2]), e.to_i64(row)), wide[-1]), e.to_i64(col))
        base = e.addi(self.entry_args[self.pointer_args[window.arg]], e.muli(first, e.i64(elt)))
        lanes = len(row_offsets)
        pitch = e.op(arith.IndexCastOp(e.muli(dims[-1], e.index(elt)), i32))
        offsets = e.addi(e.muli(e.broadcast(pitch, lanes), e.dense(i32, row_offsets)), e.dense(i32, [c * elt for c in col_offsets]))
        return base, offsets, e.andi(in_rows, in_cols)

    def _lower_StoreGlobalOp(self, op: tile.StoreGlobalOp, e: Emitter) -> None:
        window = self._get(op.dest)
        base, offsets, mask = self._window_access(op, window, op.value.type, e)
        if self._is_column(op.value.type):
            # The lanes of a row's quad hold the same value: the one whose column base is 0 writes it.
            first = e.setp("eq", self.col_base, e.index(0))
            mask = e.andi(mask, e.op(sm90.SelpOp(first, e.dense(i1, [1, 1]), e.dense(i1, [0, 0]))))
        e.op(sm90.StGlobalOp(base, offsets, self._get(op.value), mask))

    def _lower_LoadOp(self, op: tile.LoadOp, e: Emitter) -> None:
        window = self._get(op.source)
        if not isinstance(window, Window):
            _refuse(op, "loads from shared memory are not supported")
        ty = op.result.type
        base, offsets, mask = self._window_access(op, window, ty, e)
        value = e.op(sm90.LdGlobalOp(base, offsets, mask, self._vector_type(op, ty)))
        self._set(op.result, value)

    # -- control flow --------------------------------------------------------------------------------------
    def _lower_ForOp(self, op: scf.ForOp, e: Emitter) -> None:
        lb, ub, step = (self._get(v) for v in (op.lb, op.ub, op.step))
        inits = [self._get(v) for v in op.iter_args]
        body = Block(arg_types=[IndexType()] + [v.type for v in inits])
        iv = body.args[0]
        iv.name_hint = op.body.block.args[0].name_hint
        self.values[op.body.block.args[0]] = iv
        for old, new in zip(op.body.block.args[1:], body.args[1:]):
            new.name_hint = old.name_hint
            self.values[old] = new
        be = Emitter(body)
        trip = be.op(arith.DivSIOp(be.op(arith.SubiOp(iv, lb)), step))
        trip.name_hint = "trip"
        saved_outstanding, saved_trip = list(self.outstanding), self.committed_this_trip
        self.loops.append(LoopInfo(op, trip))
        self.committed_this_trip = set()
        self._translate_loop_body(op, be)
        self.loops.pop()
        left = [c for c in self.outstanding if c in self.committed_this_trip and c not in self.ring_commits]
        if left:
            _refuse(left[0], "copies committed in a loop trip must be waited for in the same trip "
                             "(overlapping trips is pipeline-loops' job)")
        self.committed_this_trip = saved_trip
        # Groups outstanding before the loop stay so: the loop may run no trip.
        self.outstanding = saved_outstanding
        new = e.op(scf.ForOp(lb, ub, step, inits, body))
        results = new.results if isinstance(new, Operation) else [new]
        for old, res in zip(op.results, results):
            self._set(old, res)

    def _translate_loop_body(self, op: scf.ForOp, e: Emitter) -> None:
        for inner in op.body.block.ops:
            if isinstance(inner, tile.CpCommitGroupOp):
                self.committed_this_trip.add(inner)
            self._translate(inner, e)

    def _lower_IfOp(self, op: scf.IfOp, e: Emitter) -> None:
        """A block-uniform scf.if (Tile IR conditions are values of the whole block). Copy groups must not
        be committed inside it unless they fill ring stages (their count would depend on the branch)."""
        for inner in op.walk():
            if isinstance(inner, tile.CpCommitGroupOp) and inner not in self.ring_commits:
                _refuse(inner, "copy groups of unstaged tiles cannot be committed inside an scf.if")
        regions = []
        for region in op.regions:
            if not region.blocks:
                regions.append(Region())
                continue
            block = Block()
            be = Emitter(block)
            saved = list(self.outstanding)
            for inner in region.block.ops:
                self._translate(inner, be)
            self.outstanding = saved + [c for c in self.outstanding if c not in saved]
            regions.append(Region(block))
        self.e = e
        result_types = [v.type for v in regions[0].block.last_op.operands]
        new = e.op(scf.IfOp(self._get(op.cond), result_types, regions[0], regions[1] if regions[1].blocks else None))
        results = new.results if isinstance(new, Operation) else [new]
        for old, res in zip(op.results, results):
            self._set(old, res)

    def _lower_YieldOp(self, op: scf.YieldOp, e: Emitter) -> None:
        # `_translate` has retired the wgmma groups in flight: no group outlives its region.
        e.op(scf.YieldOp(*[self._get(v) for v in op.operands]))

    def _lower_ReturnOp(self, op: func.ReturnOp, e: Emitter) -> None:
        # A block must not exit with a bulk copy still writing its shared memory: drain what may be in flight.
        self._wait_for(op, self.outstanding, e)
        e.op(func.ReturnOp())


def op_tile_type(op: Operation) -> TileType:
    return op.operands[0].type


@dataclass(frozen=True)
class ConvertTileToSm90Pass(ModulePass):
    """Replace every Tile IR kernel of the module by its sm_90a Target IR kernel (module docstring)."""

    name = "convert-tile-to-sm90"
    input_level: ClassVar[str] = "tile"
    """The kernels it transforms (Tile IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in kernels(op):
            lowered = KernelLowering(kernel).run()
            kernel.parent_block().insert_op_before(lowered, kernel)
            kernel.detach()
            kernel.erase()
