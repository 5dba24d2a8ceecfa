"""convert-tile-to-sm90, one kernel: set-up (block rows, copy groups, tensor maps, pointers), the new
kernel's signature and prologue, and the op-by-op translation that dispatches to the mixins."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FileLineColLoc,
    IndexType,
    IntegerAttr,
    StringAttr,
    f32,
    i32,
    i64,
)
from xdsl.ir import (
    Block,
    Operation,
    Region,
    SSAValue,
)

from tessera.dialects import sm90, tile
from tessera.ir.walk import walk_ops
from tessera.dialects.tile_types import MemSpace, TileType
from tessera.cluster import CLUSTER_ATTR
from tessera.kernel_abi import (
    BOX_ATTR,
    COPY_ATTR,
    DIMS_ATTR,
    DIVISIBLE_ATTR,
    ELEMENT_ATTR,
    GRID_ATTR,
    KERNEL_ATTR,
    LAUNCH_SIZES_ATTR,
    MULTIPLES_ATTR,
    TABLES_ATTR,
    ROLE_ATTR,
    SIZE_ATTR,
    SOURCE_ATTR,
    UNREAD_ATTR,
    SWIZZLE_ATTR,
    TARGET_KERNEL_ATTR,
    KernelSignature,
    signature,
)
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import AccumulatorLayout, element_type_bytes
from tessera.sm90 import facts
from tessera.passes.convert_tile_to_sm90.row_sums import partial_row_sums
from tessera.passes.convert_tile_to_sm90.common import (
    LINE,
    refuse,
    ColumnIota,
    Scaled,
    Group,
    SharedMemoryError,
)
from tessera.passes.convert_tile_to_sm90.attention import AttentionLowering
from tessera.passes.convert_tile_to_sm90.backward import BackwardLowering
from tessera.passes.convert_tile_to_sm90.causal_bias import CausalBiasLowering
from tessera.passes.convert_tile_to_sm90.clear_rows import ClearRowsLowering
from tessera.passes.convert_tile_to_sm90.col_reductions import ColReductionLowering
from tessera.passes.convert_tile_to_sm90.control import ControlFlowLowering
from tessera.passes.convert_tile_to_sm90.copies import CopyLowering
from tessera.passes.convert_tile_to_sm90.elementwise import ElementwiseLowering
from tessera.passes.convert_tile_to_sm90.mma import MmaLowering
from tessera.passes.convert_tile_to_sm90.reduction_slots import ReductionSlotsLowering, StagingDoesNotFit
from tessera.passes.convert_tile_to_sm90.registers import RegisterTileLowering
from tessera.passes.convert_tile_to_sm90.riding_rings import RidingRings, plan_riding_rings
from tessera.passes.convert_tile_to_sm90.serving import ServingLowering
from tessera.passes.convert_tile_to_sm90.shared_tiles import SharedTileLowering
from tessera.passes.convert_tile_to_sm90.shared_loads import SharedLoadLowering
from tessera.passes.convert_tile_to_sm90.small_tiles import SmallTileLowering, is_scalar
from tessera.passes.convert_tile_to_sm90.tidy import tidy_kernel
from tessera.passes.convert_tile_to_sm90.transpose import TransposeLowering
from tessera.passes.convert_tile_to_sm90.windows import WindowLowering


HANDLED = ("tile", "scf", "func")
"""The dialects whose ops `_translate` gives to a `_lower_<OpClass>` handler."""


@dataclass
class KernelLowering(SharedLoadLowering, SmallTileLowering, BackwardLowering, SharedTileLowering, CopyLowering, WindowLowering,
                     RegisterTileLowering, MmaLowering, AttentionLowering, ElementwiseLowering, ControlFlowLowering,
                     ServingLowering, TransposeLowering, ReductionSlotsLowering, ClearRowsLowering,
                     CausalBiasLowering, ColReductionLowering):
    """Lowers one Tile IR kernel; see the module docstring."""

    fn: func.FuncOp
    atomic_add_mode: str = "auto"  # how tile.atomic_add is lowered (backward.ATOMIC_ADD_MODES)
    store_shared_mode: str = "st_shared"  # how tile.store_shared is lowered (backward.STORE_SHARED_MODES)
    mma_order: str = "first-read"  # the issue order of tile.mma groups (mma_order.MMA_ORDERS; the barriers' waits)
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
    copied_by_threads: set = field(default_factory=set)  # arguments copied to shared memory without TMA
    gathered: set = field(default_factory=set)  # arguments tile.cp_async_gather reads (with cp.async)
    gather_commits: set = field(default_factory=set)  # commit ops whose copies are all gathers into plain tiles
    gather_rings: set = field(default_factory=set)  # staged tile.alloc_shared filled by gathers
    transposed_rings: dict = field(default_factory=dict)  # staged tile.alloc_shared of V the producer transposes -> staging Ring
    riding: RidingRings = field(default_factory=RidingRings)  # one-row rings on another ring's barriers
    reduction_slots: dict = field(default_factory=dict)  # tile.atomic_add -> ReductionSlots (the producer adds)
    staging_barriers: dict = field(default_factory=dict)  # such a ring -> its staging (full, empty) barrier bases
    waited_stages: set = field(default_factory=set)  # (stage Tile value, Block) whose full barrier was waited on
    counted_loops: dict = field(default_factory=dict)  # Tile scf.for -> commits whose phase it counts (control.py)
    phase_counters: dict = field(default_factory=dict)  # commit op -> its executions so far, in the current block
    commit_phase: dict = field(default_factory=dict)  # commit op -> its count at its latest execution
    e: Emitter | None = None  # the emitter of the op being translated
    branches_in_flight: set = field(default_factory=set)  # Tile scf.if ops the wgmma groups in flight cross (control.py)
    accumulating: set = field(default_factory=set)  # the tile.mma of accumulate branches (control.py)
    partial_rows: set = field(init=False)  # row tiles held as per-thread partial sums (row_sums.py)

    def __post_init__(self) -> None:
        self.sig = signature(self.fn)
        self.partial_rows = partial_row_sums(self.fn)

    # region set-up --------------------------------------------------------------------------------------
    def _block_rows(self) -> int:
        """The rows of the block's register tiles, BM: every register tile but a column vector [1, N] and a [1, 1]
        tile (one value for the block, small_tiles.py) has them (a row vector [BM] and a column [BM, 1] one value
        per row). A tile of other rows is refused at the op that makes it; a 1-D one of 1 row ([1]) is told to
        use a [1, 1] tile. A kernel of column vectors and [1, 1] tiles only runs on one warpgroup."""
        rows = {}  # rows -> the first op whose register tile has them
        for op in walk_ops(self.fn):
            for value in op.results:
                ty = value.type
                if isinstance(ty, TileType) and ty.memory_space == MemSpace.REGISTER and not (
                        self._is_column_vector(ty) or is_scalar(ty)):
                    rows.setdefault(ty.get_shape()[0], (op, ty))
        if not rows:
            return facts.WGMMA_M
        if len(rows) > 1:
            bm, odd = max(rows), min(rows)
            op, ty = rows[odd]
            hint = "; one value for the whole block is a [1, 1] tile" if odd == 1 else ""
            refuse(op, f"register tiles must all have the same number of rows (the block's query/row tile), got "
                       f"{sorted(rows)}: {ty} has {odd}, others {bm}{hint}")
        (bm,) = rows
        if bm % facts.WGMMA_M:
            refuse(self.fn, f"register tiles have {bm} rows; warpgroups take {facts.WGMMA_M} rows each")
        return bm

    def _plan_groups(self) -> None:
        """Map each copy to the commit that closes its group: the next tile.cp_commit_group after it in its
        block or, for a copy inside an scf.if, after that scf.if. A group whose copies all fill ring stages
        (and an empty group) is a ring group: its completion is tracked by the stages' full barriers, not by
        a barrier of the group. A group of gathers into plain tiles completes with cp.async.wait_group
        (`gather_commits`, no barrier); a ring a gather refills (`gather_rings`) counts the producer
        warpgroup's arrivals on its full barriers."""
        ring_copies = defaultdict(list)
        gathers = defaultdict(list)
        for op in walk_ops(self.fn):
            if isinstance(op, tile.ASYNC_COPY_OPS):
                anchor = op
                while True:
                    nxt = anchor.next_op
                    while nxt is not None and not isinstance(nxt, tile.CpCommitGroupOp):
                        nxt = nxt.next_op
                    if nxt is not None:
                        break
                    parent = anchor.parent_op()
                    if not isinstance(parent, scf.IfOp):
                        refuse(op, "a copy must be followed by a tile.cp_commit_group in its block (or after its scf.if)")
                    anchor = parent
                self.copy_group[op] = nxt
                staged = isinstance(op.dest.owner, tile.StageOp)
                ring_copies[nxt].append(staged)
                gathers[nxt].append(isinstance(op, tile.CpAsyncGatherOp))
                if staged and isinstance(op, tile.CpAsyncGatherOp):
                    self.gather_rings.add(op.dest.owner.source.owner)
        for op in walk_ops(self.fn):
            if isinstance(op, tile.CpCommitGroupOp):
                kinds = ring_copies.get(op, [])
                if all(kinds):
                    self.ring_commits.add(op)
                elif any(kinds):
                    refuse(op, "a copy group must fill either ring stages only or unstaged tiles only")
                elif all(gathers[op]):
                    self.gather_commits.add(op)
                elif any(gathers[op]):
                    refuse(op, "a copy group of plain tiles must be all TMA copies or all gathers (their "
                                "completions differ: an mbarrier, or cp.async.wait_group)")
        for ring in self.gather_rings:
            fills = [use.operation for stage in ring.result.uses for use in stage.operation.result.uses
                     if isinstance(use.operation, tile.ASYNC_COPY_OPS) and use.operation.dest is stage.operation.result]
            if not all(isinstance(f, tile.CpAsyncGatherOp) for f in fills):
                refuse(ring, "a ring must be refilled by TMA copies only or by gathers only (its full barrier "
                              "counts one arrival, or the producer warpgroup's)")

    def _tensor_maps(self) -> dict[tuple[int, int, int], int]:
        """(source argument, box rows, swizzle bytes of the destination) of every TMA the kernel issues. An
        unswizzled destination (a one-row tile) takes the window's whole row as its box (`row_box_cols`)."""
        keys = {}
        self.row_box_cols = {}
        for op in walk_ops(self.fn):
            if isinstance(op, tile.CpAsyncOp):
                view = op.source.owner
                if not isinstance(view, tile.ViewOp) or not isinstance(view.source.owner, Block):
                    refuse(op, "copies must read a tile.view of a kernel argument")
                arg = view.source.index
                if self._tma_allowed(arg):
                    shape = view.result.type.get_shape()
                    rows, cols = shape[0], shape[-1]
                    key = (arg, rows, op.dest.type.swizzle_bytes)
                    # A box is the window's rows by one swizzle span (or, unswizzled, its whole row); past
                    # cuTensorMapEncodeTiled's limit the map could not be made at launch, so refuse it here.
                    for extent, size in (("rows", rows), ("columns", None if key[2] else cols)):
                        if size is not None and size > facts.TENSOR_MAP_MAX_BOX:
                            refuse(op, f"a TMA box has at most {facts.TENSOR_MAP_MAX_BOX} {extent} "
                                        f"(cuTensorMapEncodeTiled's boxDim), this copy's has {size}: copy "
                                        f"smaller windows (a smaller block)")
                    if not key[2] and self.row_box_cols.setdefault(key, cols) != cols:
                        refuse(op, f"unswizzled copies of one argument share a tensor map, so one box width: got "
                                    f"{cols} and {self.row_box_cols[key]} columns")
                    keys.setdefault(key, len(keys))
        return keys

    def _pointer_args(self) -> list[int]:
        args = []
        for op in walk_ops(self.fn):
            if isinstance(op, tile.CpAsyncOp) and not self._tma_allowed(op.source.owner.source.index):
                self.copied_by_threads.add(op.source.owner.source.index)  # without TMA, through a pointer
                if op.source.owner.source.index not in args:
                    args.append(op.source.owner.source.index)
            if isinstance(op, tile.CpAsyncGatherOp):
                for value in (op.source, op.table):
                    if not isinstance(value.owner, Block):
                        refuse(op, "a gather reads a kernel argument through a table argument")
                    if value.index not in args:
                        args.append(value.index)
                self.gathered.add(op.source.index)
                continue
            if isinstance(op, tile.LoadIndexOp | tile.GatherOp) and isinstance(op.source.owner, Block):
                if op.source.index not in args:
                    args.append(op.source.index)
                continue
            if isinstance(op, tile.ScatterAddOp) and isinstance(op.table.owner, Block):
                if op.table.index not in args:
                    args.append(op.table.index)
                continue
            stores = tile.StoreGlobalOp | tile.StoreGlobalRowsOp | tile.AtomicAddOp
            semaphores = tile.SemWaitOp | tile.SemSignalOp  # the deterministic backward's, through a pointer
            if isinstance(op, tile.LoadBroadcastOp) and op.source.type.memory_space == MemSpace.SHARED:
                continue  # a row of shared memory (a one-row tile)
            if isinstance(op, tile.LoadOp) and op.source.type.memory_space == MemSpace.SHARED:
                continue  # a shared tile read into registers (shared_loads.py)
            if isinstance(op, stores | semaphores | tile.LoadOp | tile.LoadBroadcastOp):
                view = (op.dest if isinstance(op, stores) else op.sem if isinstance(op, semaphores)
                        else op.source).owner
                if not isinstance(view, tile.ViewOp) or not isinstance(view.source.owner, Block):
                    refuse(op, "global loads and stores must access a tile.view of a kernel argument")
                if view.source.index not in args:
                    args.append(view.source.index)
        return args

    # endregion
    # region driver --------------------------------------------------------------------------------------
    def run(self) -> func.FuncOp:
        self._refuse_packed_arithmetic()
        self._refuse_misplaced_scalars()
        self.bm = self._block_rows()
        self.warpgroups = self.bm // facts.WGMMA_M
        self.threads = self.warpgroups * facts.WARPGROUP_SIZE
        self._plan_groups()
        self._plan_transposes()
        self.riding = plan_riding_rings(self.fn, self.gather_rings | set(self.transposed_rings))
        self._plan_reduction_slots()
        maps = self._tensor_maps()
        pointers = self._pointer_args()
        names = self.sig.size_names()

        arg_types, arg_attrs, self.map_args, self.pointer_args, self.size_args = [], [], {}, {}, {}
        src_args = self.sig.args
        for (arg, rows, swizzle), _ in sorted(maps.items(), key=lambda kv: kv[1]):
            a = src_args[arg]
            elt = element_type_bytes(a.type.element_type)
            # one swizzle span per box row; an unswizzled box is the window's whole row
            box = [swizzle // elt if swizzle else self.row_box_cols[(arg, rows, swizzle)], rows] + [1] * (a.type.rank - 2)
            self.map_args[(arg, rows, swizzle)] = len(arg_types)
            arg_types.append(sm90.TensorMapType())
            arg_attrs.append(DictionaryAttr({
                SOURCE_ATTR: IntegerAttr(arg, 64), BOX_ATTR: ArrayAttr([IntegerAttr(b, 64) for b in box]),
                SWIZZLE_ATTR: IntegerAttr(swizzle, 64), ELEMENT_ATTR: a.type.element_type, DIMS_ATTR: a.dims,
                ROLE_ATTR: StringAttr(a.role)}))
        for arg in pointers:
            a = src_args[arg]
            self.pointer_args[arg] = len(arg_types)
            arg_types.append(i64)
            attrs = {SOURCE_ATTR: IntegerAttr(arg, 64), ELEMENT_ATTR: a.type.element_type, DIMS_ATTR: a.dims,
                     ROLE_ATTR: StringAttr(a.role)}
            if arg in self.copied_by_threads:
                attrs[COPY_ATTR] = StringAttr("ld.global")
            if arg in self.gathered:
                attrs[COPY_ATTR] = StringAttr("cp.async")
            arg_attrs.append(DictionaryAttr(attrs))
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
            if self.atomic_add_mode == "auto" and self.reduction_slots:
                raise StagingDoesNotFit(self.fn)
            refuse(self.fn, f"the kernel needs {self.smem_offset} bytes of shared memory (+1023 to align the base), more "
                          f"than the {facts.MAX_SHARED_MEMORY_PER_BLOCK} a thread block of sm_90 may have: use fewer "
                          "pipeline stages or smaller tiles", SharedMemoryError)
        attributes = {KERNEL_ATTR: self.fn.attributes[KERNEL_ATTR], GRID_ATTR: self.fn.attributes[GRID_ATTR]}
        for kept in (CLUSTER_ATTR, LAUNCH_SIZES_ATTR, MULTIPLES_ATTR, TABLES_ATTR):  # the launch reads them from the Target IR kernel
            if kept in self.fn.attributes:
                attributes[kept] = self.fn.attributes[kept]
        if self.sig.divisible:  # what the lowering assumed (promised or specialized on): every launch checks it
            attributes[DIVISIBLE_ATTR] = DictionaryAttr({n: IntegerAttr(v, 64) for n, v in self.sig.divisible.items()})
        given = {arg for arg, _, _ in self.map_args} | set(self.pointer_args)
        unread = [DictionaryAttr({SOURCE_ATTR: IntegerAttr(i, 64), ELEMENT_ATTR: a.type.element_type, DIMS_ATTR: a.dims,
                                  ROLE_ATTR: StringAttr(a.role), "name": StringAttr(a.name)})
                  for i, a in enumerate(self.sig.args) if i not in given]
        if unread:  # a launch from this Target IR alone still numbers every tensor (kernel_abi.UNREAD_ATTR)
            attributes[UNREAD_ATTR] = ArrayAttr(unread)
        attributes[TARGET_KERNEL_ATTR] = DictionaryAttr({
            "threads": IntegerAttr(self.threads, 64), "smem_bytes": IntegerAttr(self.smem_offset, 64)})
        new = func.FuncOp(self.fn.sym_name.data, (arg_types, []), Region(entry), arg_attrs=ArrayAttr(arg_attrs))
        new.attributes.update(attributes)
        new.location = self.fn.location  # diagnostics about the Target IR kernel point at its Tile IR source
        tidy_kernel(new)  # nothing left for canonicalize to erase or hoist (tidy.py)
        return new

    def _arg_name(self, attrs: DictionaryAttr) -> str:
        if SIZE_ATTR in attrs.data:
            return attrs.data[SIZE_ATTR].data
        source = self.sig.args[attrs.data[SOURCE_ATTR].value.data].name
        if BOX_ATTR in attrs.data:
            swizzle = attrs.data[SWIZZLE_ATTR].value.data
            return f"{source}_map{attrs.data[BOX_ATTR].data[1].value.data}" + (f"_s{swizzle}" if swizzle != LINE else "")
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
        self.warpgroup = warpgroup
        self.a_row_offset = e.op(arith.MuliOp(warpgroup, e.op(arith.ConstantOp(IntegerAttr(facts.WGMMA_M * LINE, i32)))))
        commits = [op for op in walk_ops(self.fn) if isinstance(op, tile.CpCommitGroupOp)
                   and op not in self.ring_commits and op not in self.gather_commits]
        for k, op in enumerate(commits):
            bar = self._alloc(e, f"group{k}_bar", facts.MBARRIER_BYTES, facts.MBARRIER_BYTES, 0)
            self.groups[op] = Group(bar, self._enclosing_loop(op))
        staged = [op for op in walk_ops(self.fn) if isinstance(op, tile.AllocSharedOp) and op.result.type.rank >= 3]
        for op in staged:
            if op in self.riding.leader:
                continue  # its leader's barriers (riding_rings.py)
            name, slots = op.result.name_hint or "ring", op.result.type.get_shape()[0]
            self.rings[op] = tuple(self._alloc(e, f"{name}_{kind}", slots * facts.MBARRIER_BYTES, facts.MBARRIER_BYTES, 0)
                                   for kind in ("full", "empty"))
            if op in self.transposed_rings:
                self.staging_barriers[op] = tuple(
                    self._alloc(e, f"{name}_staging_{kind}", slots * facts.MBARRIER_BYTES, facts.MBARRIER_BYTES, 0)
                    for kind in ("full", "empty"))
        self._alloc_reduction_slots(e)
        if commits or staged or self.reduction_slots:
            def init(t: Emitter):
                for g in self.groups.values():
                    t.op(sm90.MBarrierInitOp(g.barrier, 1))
                for op, (full, empty) in self.rings.items():
                    for slot in range(op.result.type.get_shape()[0]):
                        producers = facts.WARPGROUP_SIZE * facts.CP_ASYNC_NOINC_ARRIVALS if op in self.gather_rings else 1
                        if op in self.transposed_rings:  # the transposing warpgroup's arrivals; TMA's, its own
                            producers = facts.WARPGROUP_SIZE
                            s_full, s_empty = self.staging_barriers[op]
                            t.op(sm90.MBarrierInitOp(self._slot_barrier(t, s_full, slot), 1))
                            t.op(sm90.MBarrierInitOp(self._slot_barrier(t, s_empty, slot), facts.WARPGROUP_SIZE))
                        t.op(sm90.MBarrierInitOp(self._slot_barrier(t, full, slot), producers))
                        t.op(sm90.MBarrierInitOp(self._slot_barrier(t, empty, slot), self.threads))
                self._init_reduction_slots(t)
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
        """Lower one op with its `_lower_<OpClass>` handler; index `arith` is copied as it is. Handlers are for
        `tile` ops and the control flow (`scf`, `func`): another dialect's op of the same class name
        (`arith.select`, `math.exp`) is not a `tile.select` or `tile.exp`."""
        handler = getattr(self, f"_lower_{type(op).__name__}", None) if op.dialect_name() in HANDLED else None
        if isinstance(op, arith.SelectOp) and isinstance(op.result.type, TileType):
            handler = self._select_tiles  # a whole tile chosen by a scalar: arith.select is not a tile op
        self.e = e
        if isinstance(op, scf.ForOp | scf.IfOp | scf.YieldOp | func.ReturnOp) and not self._keeps_groups_in_flight(op):
            self._retire_all(e)  # wgmma groups stay in flight across control flow only as control.py allows
        last = e.block.last_op
        if handler is not None:
            handler(op, e)
        elif op.dialect_name() == "arith":
            self._clone(op, e)
        else:
            refuse(op, f"no lowering for '{op.name}'")
        _locate(last.next_op if last is not None else e.block.first_op, op.location)

    def _get(self, value: SSAValue):
        """The lowered value of a Tile value: a wgmma result still in flight is waited for first, and a
        `Scaled` tile is multiplied out (once per block)."""
        lowered = self._peek(value)
        if isinstance(lowered, ColumnIota):  # the thread's distinct columns
            columns = AccumulatorLayout(lowered.columns).distinct_columns[0]
            return self._column_iota(lowered, self.e, columns)
        if isinstance(lowered, Scaled):
            key = (value, self.e.block)
            if key not in self.materialized:
                lanes = lowered.raw.type.get_shape()[0]
                self.materialized[key] = self.e.mulf(lowered.raw, self.e.splat(f32, lowered.factor, lanes))
            return self.materialized[key]
        return lowered

    def _peek(self, value: SSAValue):
        """Like `_get`, but a `Scaled` tile stays scaled (for the ops that fold the factor). A value that a group in
        flight writes (its result) or reads from registers (its A operand) is waited for first."""
        readers = [p for p in self.pending if p.tile_value is value or p.register_a is value]
        if readers:
            self._retire(readers[-1].tile_value, self.e)
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
        """Copy an `arith` op onto the lowered operands, folded as canonicalize would fold it (`Emitter.op`: a
        peeled trip's `iv * 176` with iv = 0 is the constant 0). An existing value it folds to keeps a name of
        its own, as under canonicalize's replacement; a new op takes the copied op's."""
        new = op.clone(value_mapper={v: self.values[v] for v in op.operands})
        if len(new.results) != 1:
            e.builder.insert(new)
            for old, res in zip(op.results, new.results):
                res.name_hint = old.name_hint
                self.values[old] = res
            return
        last = e.block.last_op
        result = e.op(new)
        inserted = e.block.last_op is not last and result.owner is e.block.last_op
        if inserted or result.name_hint is None:
            result.name_hint = op.results[0].name_hint
        self.values[op.results[0]] = result

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
        if expr.value.data != 1:
            size = e.op(arith.CeilDivSIOp(size, e.index(expr.value.data)))
        return size if expr.factor.data == 1 else e.muli(size, e.index(expr.factor.data))


def _locate(first: Operation | None, location) -> None:
    """Give `first`, the ops after it in its block and the ops nested in them the Tile op's `location` where
    they have no file location of their own: diagnostics about Target IR values (the register pressure
    report) then point at the Tile IR line they come from."""
    if not isinstance(location, FileLineColLoc):
        return
    while first is not None:
        for inner in first.walk():
            if not isinstance(inner.location, FileLineColLoc):
                inner.location = location
        first = first.next_op
