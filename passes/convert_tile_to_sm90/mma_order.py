"""convert-tile-to-sm90, the issue order of a block's `tile.mma` groups (`order_mmas`, the pass option
`mma-order`), decided on the Tile IR kernel before it is lowered.

The lowering waits for a wgmma group where its result is first read (`KernelLowering._get`: `wait_group N`, N the
groups committed after it), and groups complete in commit order. So a group committed before one whose result is
read earlier is waited for there too, and a group committed after the first read of an earlier one's result does
not run while that wait and the code after it do. `MMA_ORDERS`:

  "program"     the mmas stay where the builder wrote them, and a `tile.barrier` waits for every group;
  "first-read"  (the default) in each block, the top-level mmas are placed one by one in the order of their
                results' first reads in the block (a result read only by the terminator, a loop-carried
                accumulator, is read last; ties keep the program order), each issued before the first read of
                an earlier group's result that it may precede:

    1. Take the mmas in that order. Mma M whose result is read in the block (not a loop-carried
       accumulator only: that one is waited for at the trip's end whatever its place, and moving it up would
       only hold its operands longer) goes up, with the register-only ops and reads its operands need
       (its *slice*), past every op that neither defines an operand outside the slice nor is a *fence* for it,
       to the first op in that range that reads the result of an mma committed before it (it stays where it is
       when there is none: moving gains nothing then). Its slice goes further up, before the first group still
       in flight there, where it may (past no fence and nothing it reads): nothing but wgmma then writes M's
       input registers (the dP accumulator's initial -dPsum) while a group is in flight, which ptxas
       otherwise answers by waiting for that group (C7517: S's group, before dP is issued) or by serializing
       every wgmma of the kernel (C7512/C7513, overlap_softmax.py).
    2. A fence for M: an op with regions, `tile.barrier`, `tile.cp_wait_group`, `tile.sem_wait`/`sem_signal`,
       an mma already placed (the order above), an op that writes a shared tile M or its slice reads (a
       `tile.store_shared`, a copy, `tile.clear_rows`: the tile compared by its allocation, a ring stage by its
       ring), and, for a slice that reads global memory, a global write.
    3. The mma committed just before M, if it is still to place (its result is read after M's), is moved to
       just after M where that is legal: no op between writes a shared tile it reads, releases a stage it
       reads, or has regions (moving a wgmma down past a `tile.barrier` is safe: what the barrier publishes is
       written before it in program order, by every thread). M's wait then leaves that group in flight, and
       its wgmmas run while M's result is used; the older groups stay where they were, running while the ops
       between them and M do (moving every later-read group past M held their register A fragments and
       accumulators across M's use as well: ptxas 13.5 serialized the backward's wgmmas, C7512).

    And a `tile.barrier` waits only for the groups that read a shared tile other than a ring stage (another
    thread may write such a tile after the barrier); a group that reads registers and ring stages only stays in
    flight across it: a stage is refilled only once every thread has released it, and each thread retires the
    groups reading a stage before releasing it (`_lower_ReleaseOp`).

The attention backward's trip (FlashAttention-3's `bwd_step`) then issues S and dP together (dP's initial
-dPsum computed before S is issued), computes P while dP runs (`wait_group 1`), issues dV (P^T dO, P from
registers) without a wait (it stays in flight across the barrier that publishes dS^T), and dQ before dK, whose
wgmmas run while dQ is staged for its reduction (`wait_group 1`): two drains a trip (dP's, with P computed
under it, and at the stages' release) instead of four.
Only the order of commits changes: every value is computed by the same ops from the same operands, so the
kernel's outputs are bitwise the same.

Registers: with S and dP in flight together, P is computed beside S, dP, dK, dV and LSE2's 16 registers (the
allocator's consumer peak at head_dim 128, 64 x 128: 223 against 214 in program order, causal 224; at head_dim 64,
128 x 128: 219 against 217, causal 221). ptxas 12.9, 13.0 and 13.5 assemble all four kernels without a spill or a
serialized wgmma (bench/backward_sass.py --mma-order program first-read). The default pipeline keeps the bulk dQ
reduction there: `red`, which `tessera.lowering.fallback` tries past `AUTO_BULK_HEADROOM`, peaks higher, and ptxas
takes the bulk form without a spill. Where the
first-read order does not fit the consumers' budget (a score_mod's ops run while dP is in flight: the head_dim 64
soft-cap backward at 128 x 128 needs 284 registers), the default pipeline lowers the kernel again with
`mma-order=program`, silently (`tessera.lowering.fallback`, `Configuration.program`).
"""

from __future__ import annotations

from xdsl.ir import Block, Operation, SSAValue
from xdsl.traits import IsTerminator, Pure

from tessera.dialects import tile
from tessera.dialects.tile_types import MemSpace, TileType
from tessera.ir.walk import walk_ops

MMA_ORDERS = ("first-read", "program")
"""The issue orders of `tile.mma` groups (module docstring): the default first, then the builder's own."""

_FENCES = (tile.BarrierOp, tile.CpWaitGroupOp, tile.SemWaitOp, tile.SemSignalOp)
_READS = (tile.LoadBroadcastOp, tile.LoadOp, tile.LoadIndexOp, tile.GatherOp)
"""Ops that only read memory: they may move up with an mma's slice."""
_GLOBAL_WRITES = (tile.StoreGlobalOp, tile.StoreGlobalRowsOp, tile.AtomicAddOp, tile.ScatterAddOp)


def order_mmas(fn: Operation) -> None:
    """Reorder the top-level `tile.mma` ops of every block of kernel `fn` as "first-read" (module docstring)."""
    for block in [b for op in walk_ops(fn) for region in op.regions for b in region.blocks]:
        if sum(isinstance(op, tile.MmaOp) for op in block.ops) > 1:
            _order_block(block)


def _order_block(block: Block) -> None:
    ops = list(block.ops)
    terminator = ops.pop() if ops and ops[-1].has_trait(IsTerminator) else None
    order = list(ops)
    mmas = [op for op in order if isinstance(op, tile.MmaOp)]
    first = {m: _first_read(m, ops) for m in mmas}
    placed: list[tile.MmaOp] = []
    for m in sorted(mmas, key=lambda m: (first[m], ops.index(m))):
        if first[m] < len(ops):  # an accumulator read only by the terminator is waited for at the end anyway
            _hoist(m, order, placed)
        placed.append(m)
        _sink_before(m, order, placed)
    if order == ops:
        return
    for op in order:
        op.detach()
    for op in order:
        if terminator is not None:
            block.insert_op_before(op, terminator)
        else:
            block.add_op(op)


def _first_read(m: tile.MmaOp, ops: list[Operation]) -> int:
    """The index in `ops` of the first op (or the op around it) reading m's result; len(ops) when only the
    block's terminator reads it."""
    positions = [ops.index(a) for use in m.result.uses if (a := _in_block(use.operation, m.parent_block()))
                 is not None and a in ops]
    return min(positions, default=len(ops))


def _in_block(op: Operation, block: Block) -> Operation | None:
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()
    return op


def _hoist(m: tile.MmaOp, order: list[Operation], placed: list) -> None:
    """Step 1 of the module docstring: move m and its slice up to the first read of an earlier group's result."""
    position = order.index(m)
    need = {v for v in m.operands}
    slice_ops: list[Operation] = []
    reads = _shared_roots(m)
    global_reads = False
    earlier = {p.result for p in placed}
    target = None
    for i in range(position - 1, -1, -1):
        op = order[i]
        if op in placed or _is_fence(op, reads, global_reads):
            break
        if any(r in need for r in op.results):
            if not _movable(op):
                break
            slice_ops.append(op)
            need.update(op.operands)
            reads |= _shared_roots(op)
            global_reads |= isinstance(op, _READS) and not _shared_roots(op)
            continue
        if any(v in earlier for v in _reads_in(op)):
            target = i
    if target is None:
        return
    # the slice ops after the target move up with m; those before it stay (their other users may lie between)
    moving = [op for op in order[target + 1:position] if op in slice_ops]
    rest = [op for op in order if op not in moving and op is not m]
    at = rest.index(order[target])
    first = _first_in_flight(rest, at, placed)
    if first is not None and _may_precede(moving, rest[first:at], reads, global_reads):
        rest[first:first] = moving  # written before the groups in flight at m are issued (step 1 of the docstring)
        at += len(moving)
        moving = []
    order[:] = rest[:at] + moving + [m] + rest[at:]


def _first_in_flight(order: list[Operation], at: int, placed: list) -> int | None:
    """The index of the first mma of `placed` before position `at` of `order` whose result nothing before `at`
    reads (its group is still in flight there); None when there is none."""
    for i, op in enumerate(order[:at]):
        if op in placed and not any(v is op.result for later in order[i + 1:at] for v in _reads_in(later)):
            return i
    return None


def _may_precede(slice_ops: list[Operation], between: list[Operation], reads: set, global_reads: bool) -> bool:
    """Whether `slice_ops` may move up past `between`: none of them reads what those ops define, and none of
    those is a fence for them."""
    defined = {r for op in between for r in op.results}
    if any(v in defined for op in slice_ops for v in op.operands):
        return False
    return not any(_is_fence(op, reads, global_reads) for op in between if not isinstance(op, tile.MmaOp))


def _sink_before(m: tile.MmaOp, order: list[Operation], placed: list) -> None:
    """Step 3: the mma committed just before m, when it is still to place (read later), goes to just after it
    where moving it is legal."""
    position = order.index(m)
    before = [op for op in order[:position] if isinstance(op, tile.MmaOp)]
    if not before or before[-1] in placed:
        return
    x = before[-1]
    if _may_sink(x, order[order.index(x) + 1:position + 1]):
        order.remove(x)
        order.insert(order.index(m) + 1, x)


def _may_sink(x: tile.MmaOp, between: list[Operation]) -> bool:
    roots = _shared_roots(x)
    for op in between:
        if op.regions or any(operand in x.results for operand in op.operands):
            return False
        if isinstance(op, tile.ReleaseOp) and _root(op.stage) in roots:
            return False
        if _writes(op) & roots:
            return False
    return True


def _is_fence(op: Operation, reads: set, global_reads: bool) -> bool:
    if op.regions or isinstance(op, _FENCES):
        return True
    if _writes(op) & reads:
        return True
    return global_reads and isinstance(op, _GLOBAL_WRITES)


def _movable(op: Operation) -> bool:
    """A register-only op (pure, or index `arith`) or a read, without regions: it may move up with a slice."""
    if op.regions or isinstance(op, tile.MmaOp):
        return False
    return op.has_trait(Pure) or op.dialect_name() == "arith" or isinstance(op, _READS)


def _reads_in(op: Operation):
    """The values op reads, those of the ops nested in it included."""
    for inner in walk_ops(op):
        yield from inner.operands


def _writes(op: Operation) -> set:
    """The shared allocations op may write: those of its shared operands, unless it only reads or views them."""
    if isinstance(op, (tile.MmaOp, tile.StageOp, tile.ReleaseOp, *_READS)) or op.has_trait(Pure):
        return set()
    return {_root(v) for inner in walk_ops(op) for v in inner.operands if _is_shared(v)}


def _shared_roots(op: Operation) -> set:
    return {_root(v) for v in op.operands if _is_shared(v)}


def _is_shared(value: SSAValue) -> bool:
    return isinstance(value.type, TileType) and value.type.memory_space == MemSpace.SHARED


def _root(value: SSAValue) -> SSAValue:
    """The allocation a shared tile value is part of: a ring stage's ring."""
    while isinstance(value.owner, tile.StageOp):
        value = value.owner.source
    return value

