"""`pipeline-loops{stages=N}`: overlap the copies of the next N-1 trips of a loop with the compute of this one.

Input: Tile IR. Every `scf.for` that copies (owns a `tile.cp_async` or `tile.cp_async_gather`, the
`tile.ASYNC_COPY_OPS`, into a shared tile that is not a ring stage) must have the canonical shape every kernel builder emits (the pipelined Tile IR contract,
notes/pipeline_spec.md):

    scf.for %j = %lb to %ub step %step iter_args(...) {
      <load section: side-effect-free index arithmetic and tile.view ops, and the copies>
      tile.cp_async %window, %tile ...          // into unstaged tiles that only this loop refills
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      <compute, reading the tiles; no copy, commit or wait>
      tile.barrier                              // the trailing barrier
      scf.yield ...
    }

Output: each copied tile becomes a ring of N stages (same element type, swizzle, alignment; shape
[N, ...]) of its own for the loop; with n = ceildivsi(ub - lb, step) trips and %cN = N,

    prologue, for p = 0 .. N-2:  %go = p < n;  scf.if %go { load p into stage remui(p, N) };  commit
    [tile.cp_wait_group N-1; tile.barrier]      // only when a commit precedes the loop (the Q tile)
    scf.for ... {
      %t = iv, or (iv - lb) / step              // the use index, absolute in the original loop
      %L = t + (N-1);  %go = L < n;  scf.if %go { load L into stage remui(L, N) };  commit
      tile.cp_wait_group N-1                    // load t landed, and is published: ring copies are bulk
      tile.stage %ring[remui(t, N)] ...         // the views the compute reads
      <compute>
      tile.release <each view>                  // where the trailing barrier was
      [tile.barrier]                            // only when the body stores into a plain shared tile
    }

"Load u" is the load section cloned with iv = lb + u*step (u itself when lb = 0 and step = 1) and each copy
sent to stage remui(u, N) of its tile's ring. Every stage index is `arith.remui %u, %cN` of a fill or use
number u: `convert-tile-to-sm90` derives mbarrier parities from u. Every trip commits exactly one group
(possibly empty), so the wait N-1 of trip t leaves exactly the loads t+1 .. t+N-1 in flight; loads past the
last trip are skipped, so trip counts below N (0 and 1 included) and per-block trip counts (causal loops)
need nothing else. With N = 1 the loop copies and waits in the same trip, like its input, but reads a
ring stage. The fill numbers of a ring (and so its barrier parities) form one sequence, from 0. Loops of
one block that refill the same tiles one after the other (a block-sparse attention kernel's loop over its
full key blocks, then over its partial ones) share one ring: a later loop numbers its fills and uses from
the sum of the earlier loops' trip counts (`%ring_base`), so the sequence goes on and the ring holds N
stages however many loops refill it. A tile that loops refill otherwise gets one ring per loop.

A loop may ask for its own depth: `tile.stages = N` on the `scf.for` (`kernel_abi.STAGES_ATTR`, N from 1 to
`MAX_STAGES`) replaces the pass's `stages` option for that loop (and for the later loops continuing its rings,
which must ask for the same N or nothing); any other value is refused, naming the loop.

Loops without copies, and loops whose copies all go to ring stages already (pipelined loops), are left
alone (so the pass is idempotent); where such a loop's rings have another depth than the one asked for
(`pipeline-loops{stages=2},pipeline-loops{stages=3}`), a TesseraWarning located at the loop says that the
option changed nothing. A loop with a copy of a tensor whose rows TMA cannot read (`bulk_copyable`) is left single-stage and
says so: it gets the `tile.unpipelined` remark (`tessera.ir.remarks`), located at the loop and naming the copy
and the argument, which a later pass that needs the loop pipelined quotes in its refusal. Everything else
that copies is refused with a `PipelineLoopsError` naming the op: a load section
with other ops, copies after the commit or under control flow, a wait other than `cp_wait_group 0`, a missing
barrier after the wait or at the end of the body, copy windows that depend on loop-carried values, copy
destinations that are not unstaged `tile.alloc_shared` tiles or that are used outside the loops refilling
them, and loops that copy nested in loops that copy. The pass analyses every loop before it changes any, so
a refusal leaves the module as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, NoReturn

from xdsl.builder import Builder
from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint
from xdsl.traits import is_side_effect_free
from xdsl.utils.exceptions import DiagnosticException

from tessera.ir.diagnostics import located, warn
from tessera.ir.remarks import mark_unpipelined
from tessera.ir.walk import walk_ops
from tessera.dialects import tile
from tessera.dialects.tile_types import TileType
from tessera.interpreters.block_batch import describe_op
from tessera.kernel_abi import KERNEL_ATTR, MAX_STAGES, STAGES_ATTR, rows_aligned, signature
from tessera.sm90 import facts



class PipelineLoopsError(DiagnosticException):
    """A loop that copies but does not have the canonical shape; the message names the op and the rule."""


def requested_stages(loop: scf.ForOp, default: int) -> int:
    """The ring depth `loop` asks for with `tile.stages` (module docstring), else `default`; a value that is not
    an integer from 1 to MAX_STAGES is refused (PipelineLoopsError) at the loop."""
    attr = loop.attributes.get(STAGES_ATTR)
    if attr is None:
        return default
    value = attr.value.data if isinstance(attr, IntegerAttr) else None
    if not isinstance(value, int) or not 1 <= value <= MAX_STAGES:
        _refuse(loop, f"{STAGES_ATTR} must be an integer from 1 to {MAX_STAGES}, got {attr}")
    return value


def _refuse(op: Operation, message: str) -> NoReturn:
    """Raise the diagnostic `pipeline-loops: <op's first line>: <message>`."""
    raise PipelineLoopsError(located(op, f"pipeline-loops: {describe_op(op)}: {message}", name_op=False))


# region Analysis


def enclosing_loop(op: Operation) -> scf.ForOp | None:
    """The innermost `scf.for` strictly around `op` (None at the function level)."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, scf.ForOp | func.FuncOp):
        parent = parent.parent_op()
    return parent if isinstance(parent, scf.ForOp) else None


def is_ring_stage(value: SSAValue) -> bool:
    """Whether `value` is a stage of a ring (the result of `tile.stage`)."""
    return isinstance(value.owner, tile.StageOp)


def _copies_by_loop(module: Operation) -> dict[scf.ForOp, list[tile.CpAsyncOp | tile.CpAsyncGatherOp]]:
    """Every loop that owns a copy (is its innermost enclosing loop), in program order, with those copies."""
    owned: dict[scf.ForOp, list[tile.CpAsyncOp | tile.CpAsyncGatherOp]] = {}
    for op in walk_ops(module):
        if isinstance(op, tile.ASYNC_COPY_OPS) and (loop := enclosing_loop(op)) is not None:
            owned.setdefault(loop, []).append(op)
    return owned


def loops_with_copies(module: Operation) -> dict[scf.ForOp, list[tile.CpAsyncOp | tile.CpAsyncGatherOp]]:
    """The loops to pipeline, in program order, each with the copies it owns (those whose innermost
    enclosing loop it is). A loop qualifies when it owns a copy into a tile that is not a ring stage; loops
    whose copies all fill ring stages are pipelined already and are not listed."""
    return {loop: copies for loop, copies in _copies_by_loop(module).items()
            if not all(is_ring_stage(c.dest) for c in copies) and all(bulk_copyable(c) for c in copies)}


def warn_pipelined_already(module: Operation, stages: int) -> None:
    """Warn, located at the loop, where a loop whose copies all fill ring stages (pipelined already, left alone)
    has rings of another depth than `stages` (or its own `tile.stages`): the option asked for changes nothing.
    Only the innermost such loop of a nest (the loop around a pipelined loop owns its prologue's copies)."""
    pipelined = {loop: copies for loop, copies in _copies_by_loop(module).items()
                 if all(is_ring_stage(c.dest) for c in copies)}
    for loop, copies in pipelined.items():
        if any(other is not loop and loop.is_ancestor(other) for other in pipelined):
            continue
        depth = copies[0].dest.owner.source.type.get_shape()[0]
        if depth != requested_stages(loop, stages):
            warn(located(loop, f"pipeline-loops: {describe_op(loop)}: pipelined already over {depth}-stage rings; "
                               f"stages={requested_stages(loop, stages)} changes nothing (pipeline it once, with the "
                               "stages wanted)", name_op=False))


def mark_loops_left_single_stage(module: Operation) -> None:
    """Leave the `tile.unpipelined` remark (`tessera.ir.remarks`) on every loop that copies into a plain shared
    tile but that `loops_with_copies` leaves out because a copy is not `bulk_copyable`: naming the loop, the
    copy and the argument whose rows TMA cannot read, for a later pass that needs the loop pipelined to quote."""
    for loop, copies in _copies_by_loop(module).items():
        stuck = next((c for c in copies if not bulk_copyable(c)), None)
        if stuck is None or all(is_ring_stage(c.dest) for c in copies):
            continue
        view = stuck.source.owner
        fn = view.source.owner.parent_op()
        arg = signature(fn).args[view.source.index]
        hint = loop.body.block.args[0].name_hint
        over = f"the loop over %{hint}" if hint else "this loop"
        mark_unpipelined(loop, located(loop, f"pipeline-loops left {over} single-stage: its copy "
                                             f"into %{stuck.dest.name_hint} reads argument %{arg.name}, whose rows "
                                             f"may start anywhere (no tile.divisible promise puts them on "
                                             f"{facts.TENSOR_MAP_GLOBAL_ALIGNMENT} bytes), and ring stages are filled "
                                             "by bulk copies (TMA), which need rows on that alignment", name_op=False))


def bulk_copyable(copy: tile.CpAsyncOp | tile.CpAsyncGatherOp) -> bool:
    """Whether `copy` can fill a ring stage. Ring stages are filled by bulk copies (TMA on sm_90a), which need
    rows that start on 16 bytes (`facts.TENSOR_MAP_GLOBAL_ALIGNMENT`): a loop that copies a tensor whose rows
    may start anywhere (a GEMM that promises nothing about K or N, `tile.divisible`) is left as it is, and
    convert-tile-to-sm90 copies that tensor with every thread. Copies of anything but a view of a kernel
    argument count as bulk (the canonical-loop checks and the lowering judge them), and so does a
    `tile.cp_async_gather` (the producer warpgroup's cp.asyncs complete on the stage's full barrier)."""
    view = copy.source.owner
    if not isinstance(view, tile.ViewOp) or not isinstance(view.source, BlockArgument):
        return True
    fn = copy.parent_op()
    while fn is not None and not isinstance(fn, func.FuncOp):
        fn = fn.parent_op()
    if fn is None or KERNEL_ATTR not in fn.attributes or view.source.owner is not fn.body.blocks.first:
        return True
    return rows_aligned(signature(fn), view.source.index, facts.TENSOR_MAP_GLOBAL_ALIGNMENT)


def is_index_computation(op: Operation) -> bool:
    """Whether `op` may be part of a load section: it has no regions, and is `arith` (index arithmetic,
    whose divisions are safe wherever the original loop ran them: loads run only for real trips) or free
    of side effects (tile.view, tile.dim, tile.stage, tile.program_id), or `tile.load_index` (an element of an
    input table, which no op of the kernel writes: a page number of a paged cache)."""
    if isinstance(op, tile.LoadIndexOp):
        return True
    return not op.regions and (op.dialect_name() == "arith" or is_side_effect_free(op))


def commit_precedes(loop: scf.ForOp) -> bool:
    """Whether a `tile.cp_commit_group` outside `loop` can run before it: one earlier in program order, or
    one anywhere in an enclosing loop (it runs before the next trip of that loop reaches `loop` again)."""
    top: Operation = loop
    while (parent := top.parent_op()) is not None and not isinstance(parent, ModuleOp):
        top = parent
    for op in top.walk():
        if op is loop:
            break
        if isinstance(op, tile.CpCommitGroupOp):
            return True
    outer = enclosing_loop(loop)
    while outer is not None:
        if any(isinstance(op, tile.CpCommitGroupOp) and not loop.is_ancestor(op) for op in outer.walk()):
            return True
        outer = enclosing_loop(outer)
    return False


@dataclass
class CanonicalLoop:
    """A loop in the canonical input shape (module docstring), taken apart.

    Invariants: `load_section` is the ops before `commit` that the copies need (their backward slice inside
    the body: region-free index computations, see `is_index_computation`, of the induction variable and of
    values defined outside the loop), with the copies, in program order; `copies` send distinct unstaged tiles (`tiles`,
    their `tile.alloc_shared` ops, in copy order) from global windows; the body is
    load section (and other index computations), `commit`, `wait` (0), `publish` (a barrier), compute,
    `trailing` (a barrier), yield; every use of a tile inside the loop other than its copy is in the
    compute; `commit_before` says whether a commit outside the loop can run before it."""

    loop: scf.ForOp
    load_section: list[Operation]
    copies: list[tile.CpAsyncOp | tile.CpAsyncGatherOp]
    tiles: list[tile.AllocSharedOp]
    commit: tile.CpCommitGroupOp
    wait: tile.CpWaitGroupOp
    publish: tile.BarrierOp
    trailing: tile.BarrierOp
    commit_before: bool


def _top_level(op: Operation, loop: scf.ForOp) -> Operation:
    """The op of the loop body's block that is, or holds, `op` (which must be inside `loop`)."""
    while op.parent_op() is not loop:
        op = op.parent_op()
    return op


def _load_slice(loop: scf.ForOp, before_commit: Sequence[Operation], copies: Sequence[tile.CpAsyncOp | tile.CpAsyncGatherOp]) -> list[Operation]:
    """The ops of `before_commit` that the copies' windows are computed with, plus the copies, in program
    order. Refuses windows that depend on loop-carried values (they are not known for later trips)."""
    candidates = set(before_commit)
    needed: set[Operation] = set(copies)
    pending = [(copy, value) for copy in copies for value in copy.operands if value is not copy.dest]
    iv = loop.body.block.args[0]
    while pending:
        copy, value = pending.pop()
        if isinstance(value, BlockArgument) and value.owner is loop.body.block and value is not iv:
            _refuse(copy, f"the copied window depends on the loop-carried value %{value.name_hint or value.index}, "
                          "which is not known for the trips the prologue and the next trips load ahead")
        owner = value.owner
        if isinstance(owner, Operation) and owner in candidates and owner not in needed:
            needed.add(owner)
            pending.extend((copy, v) for v in owner.operands)
    return [op for op in before_commit if op in needed]


def match_canonical_loop(
    loop: scf.ForOp, copies: Sequence[tile.CpAsyncOp | tile.CpAsyncGatherOp], refilled_by: dict[SSAValue, set[scf.ForOp]]
) -> CanonicalLoop:
    """Take apart a loop that copies (`copies`, from `loops_with_copies`), or refuse it naming the op that
    breaks the canonical shape. `refilled_by` maps each copied tile to the loops that copy into it: a tile
    may be used outside `loop` only inside those (each of which refills it before reading it)."""
    ops = list(loop.body.block.ops)
    commit_at = next((i for i, op in enumerate(ops) if isinstance(op, tile.CpCommitGroupOp)), None)
    if commit_at is None:
        _refuse(loop, "the loop copies but commits no group (expected tile.cp_commit_group after its copies)")
    commit, wait, publish = (ops + [None, None])[commit_at : commit_at + 3]
    if not isinstance(wait, tile.CpWaitGroupOp) or wait.pending.value.data != 0:
        _refuse(wait if wait is not None else commit, "expected tile.cp_wait_group 0 right after the loop's "
                                                      "tile.cp_commit_group")
    if not isinstance(publish, tile.BarrierOp):
        _refuse(publish or wait, "expected tile.barrier right after the loop's tile.cp_wait_group")
    trailing = ops[-2]
    if not isinstance(trailing, tile.BarrierOp) or trailing is publish:
        _refuse(loop, "the loop body does not end with a tile.barrier (the one that keeps the next trip's copies "
                      "from overwriting tiles still being read); pipeline-loops replaces it by tile.release")
    compute = ops[commit_at + 3 : -2]
    for top in compute:
        for op in top.walk():
            if isinstance(op, tile.ASYNC_COPY_OPS + (tile.CpCommitGroupOp, tile.CpWaitGroupOp)):
                _refuse(op, "copies and copy groups after the loop's tile.cp_wait_group are not supported (a "
                            "pipelined loop copies only in its load section)")
    before_commit = ops[:commit_at]
    for copy in copies:
        if copy not in before_commit:
            _refuse(copy, "copy under control flow: the load section copies unconditionally, at the top of the "
                          "loop body")
        if is_ring_stage(copy.dest):
            _refuse(copy, "the loop copies both into ring stages and into plain shared tiles")
    for op in before_commit:
        if not isinstance(op, tile.ASYNC_COPY_OPS) and not is_index_computation(op):
            _refuse(op, "only index arithmetic, tile.view and the copies may come before the loop's "
                        "tile.cp_commit_group (the load section)")
    compute_ops = set(compute)

    tiles: list[tile.AllocSharedOp] = []
    for copy in copies:
        alloc = copy.dest.owner
        if not isinstance(alloc, tile.AllocSharedOp) or alloc.result.type.rank >= 3:
            _refuse(copy, "the copy destination must be an unstaged tile.alloc_shared tile (it becomes a ring)")
        if alloc in tiles:
            _refuse(copy, f"copies into %{alloc.result.name_hint} twice in one trip")
        tiles.append(alloc)
        for use in alloc.result.uses:
            user = use.operation
            if user in copies:
                continue
            if loop.is_ancestor(user):
                if _top_level(user, loop) not in compute_ops:
                    _refuse(user, f"uses %{alloc.result.name_hint}, copied by the loop, in its load section")
                continue
            outer = enclosing_loop(user)
            while outer is not None and outer not in refilled_by.get(alloc.result, ()):
                outer = enclosing_loop(outer)
            if outer is None:
                _refuse(copy, f"the copy destination %{alloc.result.name_hint} is also used outside the loop (by "
                              f"'{describe_op(user)}'); only tiles that each loop refills before reading become rings")
    return CanonicalLoop(loop, _load_slice(loop, before_commit, copies), list(copies), tiles, commit, wait,
                         publish, trailing, commit_precedes(loop))


# endregion
# region Rewriting


def constant_value(value: SSAValue) -> int | None:
    """The integer of an `arith.constant` index/integer value; None for anything else."""
    op = value.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    return None


class IndexConstants:
    """`arith.constant v : index` values usable right before `anchor`: one that dominates it (earlier in
    its block, or earlier in the block of an enclosing op, up to the function) is reused, else a new one is
    inserted before `anchor`."""

    def __init__(self, anchor: Operation):
        self.anchor = anchor
        self.known: dict[int, SSAValue] = {}

    def __call__(self, value: int) -> SSAValue:
        if value not in self.known:
            self.known[value] = self._dominating(value) or _insert_before(
                self.anchor, arith.ConstantOp.from_int_and_width(value, IndexType()), f"c{value}")
        return self.known[value]

    def _dominating(self, value: int) -> SSAValue | None:
        node: Operation | None = self.anchor
        while node is not None and not isinstance(node, func.FuncOp | ModuleOp) and node.parent_block() is not None:
            for op in node.parent_block().ops:
                if op is node:
                    break
                if isinstance(op, arith.ConstantOp) and isinstance(op.result.type, IndexType) \
                        and constant_value(op.result) == value:
                    return op.result
            node = node.parent_op()
        return None


def _insert(builder: Builder, op: Operation, name: str | None = None) -> SSAValue | None:
    """Insert `op` with `builder`; name its first result `name`, and return that result (None if it has none)."""
    builder.insert(op)
    if op.results and name is not None:
        op.results[0].name_hint = name
    return op.results[0] if op.results else None


def _insert_before(anchor: Operation, op: Operation, name: str | None = None) -> SSAValue | None:
    """`_insert` right before `anchor`."""
    return _insert(Builder(InsertPoint.before(anchor)), op, name)


def ring_name(tile_name: str | None) -> str:
    """`k_smem` -> `k_ring`, `a_tile` -> `a_tile_ring`."""
    return (tile_name or "tile").removesuffix("_smem") + "_ring"


def make_ring(alloc: tile.AllocSharedOp, stages: int) -> SSAValue:
    """A new `tile.alloc_shared` of `stages` copies of `alloc`'s tile ([stages, ...], same element type,
    swizzle, alignment and attributes), inserted right before `alloc`."""
    ty = alloc.result.type
    assert isinstance(ty, TileType)
    ring = tile.AllocSharedOp(ty.with_(shape=(stages, *ty.get_shape())),
                              None if alloc.alignment is None else alloc.alignment.value.data)
    ring.attributes.update(alloc.attributes)
    ring.location = alloc.location  # diagnostics about the ring point at the tile it replaces
    return _insert_before(alloc, ring, ring_name(alloc.result.name_hint))


class LoopPipeliner:
    """Rewrites one `CanonicalLoop` into the pipelined shape of the module docstring with `stages` stages.

    `run` inserts, before the loop, the rings (one per copied tile, `rings[i]` for `shape.tiles[i]`), the
    trip count n (`trips`), the prologue and, if a commit precedes the loop, the wait and barrier that
    publish it; then rewrites the body. Index constants come from `const` (reused where one dominates the
    loop). Fill and use numbers u are counted from the loop's first trip, whatever its bounds."""

    def __init__(self, shape: CanonicalLoop, stages: int, follows: LoopPipeliner | None = None):
        self.shape = shape
        self.stages = stages
        self.follows = follows
        """The pipeliner of the earlier loop of the same block whose rings this loop continues (module
        docstring), or None: the loop gets rings of its own."""
        loop = shape.loop
        self.trivial = constant_value(loop.lb) == 0 and constant_value(loop.step) == 1
        self.const = IndexConstants(loop)
        self.rings: list[SSAValue] = []
        self.trips: SSAValue | None = None
        self.base: SSAValue | None = None
        """The ring's number of this loop's first fill and use (None: 0)."""

    def run(self) -> None:
        """Rewrite the loop (class docstring); runs once per pipeliner."""
        loop, n_stages = self.shape.loop, self.stages
        for value in (n_stages, n_stages - 1, *range(n_stages - 1)):
            self.const(value)  # before the loop, ahead of everything that uses them
        before = Builder(InsertPoint.before(loop))
        if self.follows is None:
            self.rings = [make_ring(alloc, n_stages) for alloc in self.shape.tiles]
        else:
            earlier = self.follows
            self.rings = earlier.rings
            self.base = earlier.trips if earlier.base is None else \
                _insert(before, arith.AddiOp(earlier.base, earlier.trips), "ring_base")
        span = _insert(before, arith.SubiOp(loop.ub, loop.lb), "span")
        self.trips = _insert(before, arith.CeilDivSIOp(span, loop.step), "trips")
        for p in range(n_stages - 1):
            self._guarded_load(before, self.const(p))
            _insert(before, tile.CpCommitGroupOp())
        if self.shape.commit_before:
            _insert(before, tile.CpWaitGroupOp(n_stages - 1))
            _insert(before, tile.BarrierOp())
        self._rewrite_body()

    def _iv_of(self, builder: Builder, u: SSAValue) -> SSAValue:
        """The induction variable of trip u: lb + u * step (u itself when lb = 0 and step = 1)."""
        if self.trivial:
            return u
        loop = self.shape.loop
        offset = _insert(builder, arith.MuliOp(u, loop.step), "fill_offset")
        return _insert(builder, arith.AddiOp(loop.lb, offset), "fill_iv")

    def _stage_views(self, builder: Builder, u: SSAValue, slot_name: str, suffix: str) -> list[SSAValue]:
        """`tile.stage %ring[arith.remui %u, %cN]` of every ring, in ring order (one remui for all); u counts
        from `base` when the loop continues an earlier loop's rings."""
        if self.base is not None:
            u = _insert(builder, arith.AddiOp(self.base, u), "ring_number")
        slot = _insert(builder, arith.RemUIOp(u, self.const(self.stages)), slot_name)
        return [_insert(builder, tile.StageOp(ring, slot), ring.name_hint.removesuffix("_ring") + suffix)
                for ring in self.rings]

    def _guarded_load(self, builder: Builder, u: SSAValue) -> None:
        """`%go = u < n; scf.if %go { load u }`: the load section cloned with iv = that of trip u and each
        copy sent to stage remui(u, N) of its tile's ring. The caller adds the (unconditional) commit."""
        go = _insert(builder, arith.CmpiOp(u, self.trips, "slt"), "go")
        block = Block()
        inside = Builder(InsertPoint.at_end(block))
        mapping: dict[SSAValue, SSAValue] = {self.shape.loop.body.block.args[0]: self._iv_of(inside, u)}
        dests = dict(zip((a.result for a in self.shape.tiles), self._stage_views(inside, u, "fill_slot", "_fill")))
        for op in self.shape.load_section:
            if isinstance(op, tile.ASYNC_COPY_OPS):  # the same copy (properties kept), into the ring stage
                inside.insert(op.clone(value_mapper={**mapping, op.dest: dests[op.dest]}))
            else:
                inside.insert(op.clone(value_mapper=mapping))
        inside.insert(scf.YieldOp())
        builder.insert(scf.IfOp(go, [], Region(block)))

    def _rewrite_body(self) -> None:
        """Trip t: t = use index (iv, or (iv - lb) / step, first in the body); load t + N-1 if it exists, in
        place of the copies (which go, with the load-section ops nothing else uses); the commit stays; the
        wait becomes `cp_wait_group N-1` followed by the read views of stage remui(t, N), which replace the
        tiles in the compute; the barrier after the wait goes; the trailing barrier becomes one release per
        view (and stays after them where the body stores into a plain shared tile, `_stores_plain_shared`)."""
        shape, loop = self.shape, self.shape.loop
        block = loop.body.block
        iv = block.args[0]
        if self.trivial:
            t = iv
        else:
            top = Builder(InsertPoint.at_start(block))
            t = _insert(top, arith.DivUIOp(_insert(top, arith.SubiOp(iv, loop.lb), "iv_offset"), loop.step), "use")
        at_commit = Builder(InsertPoint.before(shape.commit))
        self._guarded_load(at_commit, _insert(at_commit, arith.AddiOp(t, self.const(self.stages - 1)), "fill"))
        for op in reversed(shape.load_section):
            if isinstance(op, tile.ASYNC_COPY_OPS) or not any(r.uses for r in op.results):
                op.detach()
                op.erase()
        after_wait = Builder(InsertPoint.after(shape.wait))
        _insert(after_wait, tile.CpWaitGroupOp(self.stages - 1))
        views = self._stage_views(after_wait, t, "use_slot", "_stage")
        for op in (shape.wait, shape.publish):
            op.detach()
            op.erase()
        for alloc, view in zip(shape.tiles, views):
            alloc.result.replace_uses_with_if(view, lambda operand_use: loop.is_ancestor(operand_use.operation))
        at_end = Builder(InsertPoint.before(shape.trailing))
        for view in views:
            _insert(at_end, tile.ReleaseOp(view))
        if not _stores_plain_shared(loop):
            shape.trailing.detach()
            shape.trailing.erase()


def _stores_plain_shared(loop: scf.ForOp) -> bool:
    """Whether the body writes a shared tile that is no ring stage (`tile.store_shared`: the backward's dS): the
    trailing barrier then also keeps the next trip's store from overwriting what another warp (another consumer
    warpgroup's wgmma) still reads, which no release covers, and it stays after the releases."""
    return any(isinstance(op, tile.StoreSharedOp) for op in loop.body.walk())


# endregion


@dataclass(frozen=True)
class PipelineLoopsPass(ModulePass):
    """Pipeline every loop that copies over `stages` ring stages (module docstring): load t + stages - 1
    while computing on load t, publish ring stages by their waits and hand them back with `tile.release`.

    Invariants of the output: every trip commits exactly one copy group; every stage index is
    `arith.remui %u, %cN`; a stage is read only after the wait covering its copy and before its release,
    and refilled only after that release. Refuses (PipelineLoopsError) the loops described in the module
    docstring, before changing anything."""

    name = "pipeline-loops"
    input_level: ClassVar[str] = "tile"
    """The kernels it transforms (Tile IR); tools refuse a module with only the other kind."""

    stages: int = 2

    def __post_init__(self) -> None:
        """Reject a stage count outside 1..MAX_STAGES (a pipeline error, before any input is read)."""
        if isinstance(self.stages, bool) or not isinstance(self.stages, int) or not 1 <= self.stages <= MAX_STAGES:
            raise ValueError(f"pipeline-loops: stages must be an integer from 1 to {MAX_STAGES}, got {self.stages!r}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        """Analyse every loop that copies (refusing nested ones and non-canonical ones), then rewrite each,
        then erase the tiles that became rings and have no use left."""
        owned = loops_with_copies(op)
        mark_loops_left_single_stage(op)
        warn_pipelined_already(op, self.stages)
        for loop in owned:
            inner = next((other for other in owned if other is not loop and loop.is_ancestor(other)), None)
            if inner is not None:
                _refuse(loop, f"holds another loop that copies ('{describe_op(inner)}'); nested pipelined loops "
                              "are not supported")
        refilled_by: dict[SSAValue, set[scf.ForOp]] = {}
        for loop, copies in owned.items():
            for copy in copies:
                refilled_by.setdefault(copy.dest, set()).add(loop)
        shapes = [match_canonical_loop(loop, copies, refilled_by) for loop, copies in owned.items()]
        depths = [requested_stages(shape.loop, self.stages) for shape in shapes]
        first_depth: dict[tuple, int] = {}
        for shape, depth in zip(shapes, depths):
            key = (shape.loop.parent_block(), tuple(shape.tiles))
            if first_depth.setdefault(key, depth) != depth:
                _refuse(shape.loop, f"asks for {depth} stages, but continues the rings of an earlier loop of "
                                    f"{first_depth[key]} stages ({STAGES_ATTR} must agree)")
        last_of: dict[tuple, LoopPipeliner] = {}  # (block, tiles) -> the pipeliner of the latest such loop
        for shape, depth in zip(shapes, depths):
            key = (shape.loop.parent_block(), tuple(shape.tiles))
            pipeliner = LoopPipeliner(shape, depth, follows=last_of.get(key))
            pipeliner.run()
            last_of[key] = pipeliner
        for alloc in {a for shape in shapes for a in shape.tiles}:
            if not alloc.result.uses:
                alloc.detach()
                alloc.erase()
