"""`rematerialize-constants`: give every use of an `arith.constant` its own copy, right before the user, in the
form that costs the fewest registers there.

Input and output: Target IR. Canonicalization hoists constants to the top of the kernel, where a splat
`vector<64xf32>` or a table of lane offsets would hold its registers across the whole K/V loop. A constant
costs one `mov` (or nothing, as an immediate operand), so re-creating it at each use is always cheaper than
keeping it live: after this pass a constant lives from the instruction before its use to that use (for a wgmma operand,
from before the wgmma_fence that opens its chain). Run it
after `canonicalize`/`cse` (which would hoist the copies back) and before `allocate-registers`. Given only Tile
IR, every entry point refuses it (`input_level`, `tessera.passes.apply_pass`): it would copy the Tile IR's
constants and leave the kernel no cheaper, the user's pipeline silently not doing what it says.

A splat (every lane the same value, such as a `tile.fill`) costs what its use needs and no more:
- an operand of a commutative instruction (add, mul, max, min, and/or/xor, the two factors of an fma) where
  PTX takes no immediate is swapped with the other operand, which takes one: the fill becomes the
  instruction's immediate (`add.f32 %f1, %f2, 0f3F000000`) and needs no register at all;
- where no swap helps (the minuend of a sub, a select's condition side, a store's value), the copy is one
  scalar constant and a `vector.broadcast` of it: one register for all lanes (the allocator gives a
  broadcast its source's register), where the whole vector would hold a register per lane;
- a loop's initial value, a yielded value and a wgmma accumulator keep the whole vector: their registers
  become the loop-carried or accumulator registers, which exist anyway, so the vector costs no more there;
  so does an operand of an elementwise op whose result takes its registers (no other operand has registers
  of its own to give the result: each is a shuffle, a broadcast or a constant).
A row vector's splat (two lanes: a thread's two rows) is left whole: one register is all a broadcast would
save, and the flash kernels' -inf running-max initialisers would then change their register assignment for it.

A wgmma descriptor `offset` bytes further (`sm90.descriptor_advance`, one 64-bit add) is re-created at each
use the same way, right before its wgmma: CSE merges the loop's advances of the Q descriptor with those of a peeled trip before the
loop, and each would then hold two registers across the K/V loop (14 at head_dim 128), which the consumer
warpgroups of a warp-specialized kernel with a bias cannot spare. Only its base descriptor stays live.

An index vector made of a scalar and constant lane offsets (`arith.addi` of a `vector.broadcast` and a
constant: a `tile.iota`'s columns, k0 + col_base + lane offsets) used more than once is re-created the same
way, one add per lane right before each use: CSE merges the key index a score_mod reads with the one a
mask_mod reads, which would then hold a register per lane (32 at 64 x 64) across everything between them.
Only the scalar stays live. So is a small index expression over such vectors, row vectors' shuffles and
constants (integer add/sub/mul, at most `INDEX_TREE_DEPTH` deep, its inner values used only inside it): a
score_mod's `(kv_idx - q_idx) % 5` and a mask_mod's `(kv_idx - q_idx) % period[h]` each compute their own
`kv_idx - q_idx`, a few instructions a register, instead of one [BM, BN] tile live from the first to the
second. Its ops may be an abs (`abs(kv_idx - q_idx)`) and may read each other through views (compute-distinct-
lanes computes them on a thread's 34 distinct offsets and views those from each reader): T5's buckets read the
distance's magnitude n for the logarithm and again in `np.where(n < 8, n, ...)` after its conversion to an
integer, so n is re-created there (an add and an abs a register) rather than held beside that conversion (the
head_dim 64 backward at 128 x 128: 253 registers, 223 after). Its leaves own no tile of registers: constants,
broadcast scalars and views of row vectors (an expression reading a view of another tile would keep that tile
live in its place).

A size expression (`arith.ceildivsi` of a kernel's size argument by a constant, and its product with a
constant: `64 * ceildiv(seq_q, 64)`, the rows of the attention backward's padded intermediates, which every
address into them multiplies by) is re-created right before each use too: a shift and an add or two where CSE
would hold it in a register across every loop (the deterministic head_dim 64 backward's consumers had one too
many for the warp-specialized kernel).

A scalar integer product of a value and a constant (a byte offset: a row index times 4) used again later,
where that value is itself read later still, is re-created right before the later use: CSE merges LSE2's byte
offset with dPsum's, which the keys-on-rows backward reads after P^T, and the product held two registers
(64-bit) from one to the other, where the row index it is made from is live anyway.

A shared buffer's address (`sm90.shared_buffer`: the dynamic shared memory's base plus a constant offset, one
`add` or none) is a constant too, re-created at each use the same way, and so is an address a fixed distance
into it (`arith.addi` of the buffer and an offset: a ring stage's slot, not its barriers) is re-created right
before each use: hoisted, each buffer, ring and mbarrier address held a register across every loop, and a stage's
addresses (the Q and dO slots) were held from the top of a trip to its last wgmma; the offset they share (the
slot's) stays live instead. The copies name the same buffer (its symbol and offset),
which is all the interpreters and multicast-cluster-copies look at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, func, math, scf, vector
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    VectorType,
)
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from tessera.ir.class_tests import subclass_test
from tessera.ir.walk import walk_ops
from tessera.dialects import sm90
from tessera.passes.convert_tile_to_sm90.common import DISTINCT_LANES_ATTR
from tessera.lowering.fragments import ROWS_PER_THREAD
from tessera.regalloc.groups import ELEMENTWISE
from tessera.regalloc.registers import IMMEDIATE_OPERANDS

COMMUTATIVE = (
    arith.AddfOp, arith.MulfOp, arith.MaximumfOp, arith.MinimumfOp, arith.AddiOp, arith.MuliOp, arith.AndIOp,
    arith.OrIOp, arith.XOrIOp, arith.MinSIOp, arith.MaxSIOp, arith.MinUIOp, arith.MaxUIOp, math.FmaOp,
)
"""Ops whose operands 0 and 1 may be swapped without changing the result (for an fma, the two factors)."""
_is_commutative = subclass_test(COMMUTATIVE)
_is_elementwise = subclass_test(ELEMENTWISE)
_is_addi = subclass_test(arith.AddiOp)

_TAKE_REGISTERS = (scf.ForOp, scf.YieldOp, sm90.WgmmaMmaAsyncOp)
"""Users whose registers a whole vector constant becomes (loop-carried, accumulator): no broadcast there."""


def _insertion_point(user: Operation) -> Operation:
    """Right before `user`, except for a wgmma: before the wgmma_fence that opens its chain. Registers a
    wgmma reads must be written before that fence; a `mov` between the fence and the wgmma (a zero
    accumulator) makes ptxas serialize the wgmma pipeline while other groups are in flight. So is a
    `vector.shuffle` read only by wgmmas (a constant A fragment's k-step: `mask-by-mma`'s ones), unless the
    shuffle itself comes before that fence (`mask-causal-by-mma`'s A fragments): then right before the shuffle."""
    shuffle = None
    if isinstance(user, vector.ShuffleOp) and user.result.uses \
            and all(isinstance(use.operation, sm90.WgmmaMmaAsyncOp) for use in user.result.uses):
        shuffle, user = user, user.result.get_unique_use().operation if user.result.has_one_use() else user
    if not isinstance(user, sm90.WgmmaMmaAsyncOp):
        return user
    op, after_fence = user.prev_op, shuffle is None
    while op is not None and not isinstance(op, sm90.WgmmaFenceOp):
        after_fence = after_fence or op is shuffle
        op = op.prev_op
    if not after_fence:
        return shuffle
    return op if op is not None else user


def splat_value(value: SSAValue) -> float | int | None:
    """The lane value of a constant vector of a register tile (more lanes than a row vector's two) whose lanes
    are all equal (not of predicates, which have no register to share); None for anything else."""
    owner = value.owner
    if not isinstance(owner, arith.ConstantOp) or not isinstance(value.type, VectorType):
        return None
    attr = owner.value
    if not isinstance(attr, DenseIntOrFPElementsAttr) or value.type.get_shape()[0] <= ROWS_PER_THREAD:
        return None
    element = value.type.element_type
    if isinstance(element, IntegerType) and element.width.data == 1:
        return None
    values = list(attr.get_values())
    return values[0] if all(v == values[0] for v in values) else None


def _is_immediate_use(user: Operation, index: int) -> bool:
    return index in IMMEDIATE_OPERANDS.get(type(user), ())


def _becomes_result(user: Operation, index: int) -> bool:
    """Whether the splat operand `index` of `user` would give its registers to the result, which then costs
    nothing more: `user` computes in place (`ELEMENTWISE`, a result of the splat's type) and no other operand
    of that type has registers of its own to give instead (each is a constant, or a shuffle or broadcast,
    whose registers are another value's)."""
    ty = user.operands[index].type
    if not _is_elementwise(user) or len(user.results) != 1 or user.results[0].type != ty:
        return False
    return all(isinstance(other.owner, arith.ConstantOp | vector.ShuffleOp | vector.BroadcastOp)
               for k, other in enumerate(user.operands) if k != index and other.type == ty)


def _swap_splats_into_immediates(module: ModuleOp) -> None:
    """Swap a commutative op's operands where operand 0 is a splat that does not become the result and
    operand 1, which is not a constant, takes an immediate there."""
    for op in walk_ops(module):
        if not _is_commutative(op) or _is_immediate_use(op, 0) or not _is_immediate_use(op, 1):
            continue
        first, second = op.operands[0], op.operands[1]
        if splat_value(first) is not None and not isinstance(second.owner, arith.ConstantOp) \
                and not _becomes_result(op, 0):
            op.operands[0], op.operands[1] = second, first


def _broadcast(copy: arith.ConstantOp, lane: float | int) -> list[Operation]:
    """`copy` as one scalar constant and its broadcast (the result named as `copy`'s)."""
    ty = copy.result.type
    element = ty.element_type
    attr = IntegerAttr(int(lane), element) if isinstance(element, IntegerType | IndexType) else FloatAttr(float(lane), element)
    scalar = arith.ConstantOp(attr)
    spread = vector.BroadcastOp(scalar.result, ty)
    spread.vector.name_hint = copy.result.name_hint
    return [scalar, spread]


def _readers(op: Operation) -> int:
    """How many copies re-creating `op` at its uses makes: one per user for a value computed on a thread's
    distinct registers (`DISTINCT_LANES_ATTR`: its view reads it as both shuffle operands, and two copies of an
    index diagonal held 68 registers where one holds 34) and for a view of one, one per use otherwise (as
    before, so that other kernels' PTX stays as it was: their epilogue's store offsets are copied once per
    operand of a view)."""
    if _copies_per_user(op):
        return len({use.operation for use in op.results[0].uses})
    return len(list(op.results[0].uses))


def _copies_per_user(op: Operation) -> bool:
    """Whether `_readers` counts users (not uses) for `op`."""
    return DISTINCT_LANES_ATTR in op.attributes or isinstance(op, vector.ShuffleOp)


def _is_lane_offsets(op: Operation) -> bool:
    """An integer vector `arith.addi` of a broadcast scalar and a constant, used more than once."""
    if not _is_addi(op) or not isinstance(op.result.type, VectorType) or _readers(op) < 2:
        return False
    owners = {type(v.owner) for v in op.operands}
    return owners == {vector.BroadcastOp, arith.ConstantOp}


def _recreate_at_uses(op: arith.AddiOp) -> None:
    """A copy of `op` (and of its broadcast) right before each user (module docstring)."""
    spread = next(v.owner for v in op.operands if isinstance(v.owner, vector.BroadcastOp))
    copies: dict[object, SSAValue] = {}  # one per user (`_readers`): a view reading it as both operands takes one
    for use in list(op.result.uses):
        user = use.operation
        key = user if _copies_per_user(op) else (user, use.index)
        if key not in copies:
            new_spread, copy = spread.clone(), op.clone()
            copy.operands[[v.owner for v in op.operands].index(spread)] = new_spread.results[0]
            copy.result.name_hint = op.result.name_hint
            user.parent_block().insert_ops_before([new_spread, copy], _insertion_point(user))
            copies[key] = copy.result
        user.operands[use.index] = copies[key]
    op.detach()
    op.erase()
    if not spread.results[0].uses:
        spread.detach()
        spread.erase()


def _is_shared_offset(op: Operation) -> bool:
    """An i32 `arith.addi` of a shared buffer's address and an offset (a ring stage's slot address), used
    anywhere but right after it, and not by an mbarrier operation (a barrier's address stays where the stage
    made it: one add per stage, and the barrier operations keep the order in which their addresses are made)."""
    if not _is_addi(op):
        return False
    uses = [use.operation for use in op.result.uses]
    return (any(user is not op.next_op for user in uses)
            and not any(user.name.startswith("sm90.mbarrier") for user in uses)
            and any(isinstance(v.owner, sm90.SharedBufferOp) for v in op.operands))


def _recreate_address_at_uses(op: arith.AddiOp) -> None:
    """A copy of `op` right before each user (module docstring); the buffer's address is then re-created at the
    copy's own use like every buffer's."""
    for use in list(op.result.uses):
        user = use.operation
        copy = op.clone()
        copy.result.name_hint = op.result.name_hint
        user.parent_block().insert_ops_before([copy], _insertion_point(user))
        user.operands[use.index] = copy.result
    op.detach()
    op.erase()


_SCALED = (arith.MuliOp, arith.ShLIOp)
_is_scaled = subclass_test(_SCALED)


def _ancestor_in(block, op: Operation) -> Operation | None:
    """The op of `block` that is or contains `op` (None if `op` is not inside `block`)."""
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()
    return op


def _recreate_late_offsets(module: ModuleOp) -> None:
    """A scalar integer product of a value x and a constant (`arith.muli`, `arith.shli`: a byte offset, x times
    an element size) is re-created right before each later use where x itself is read after that use, in
    the same block: x is live there anyway, so the copy's one instruction costs no register, where the product
    would hold its own from its first use to its last (module docstring)."""
    for op in [o for o in walk_ops(module) if _is_scaled(o)]:
        result = op.result
        if isinstance(result.type, VectorType) or len(list(result.uses)) < 2:
            continue
        constants = [v for v in op.operands if isinstance(v.owner, arith.ConstantOp)]
        values = [v for v in op.operands if not isinstance(v.owner, arith.ConstantOp)]
        if len(constants) != 1 or len(values) != 1:
            continue
        block, x = op.parent_block(), values[0]
        order = {o: k for k, o in enumerate(block.ops)}
        x_reads = [order[a] for use in x.uses if use.operation is not op
                   for a in (_ancestor_in(block, use.operation),) if a is not None]
        uses = sorted((use for use in result.uses if _ancestor_in(block, use.operation) is not None),
                      key=lambda use: order[_ancestor_in(block, use.operation)])
        for use in uses[1:]:  # the first keeps the product
            user = use.operation
            at = order[_ancestor_in(block, user)]
            if any(name in user.name for name in ("mbarrier", "wgmma")) or not any(r > at for r in x_reads):
                continue
            copy = op.clone()
            copy.result.name_hint = result.name_hint
            user.parent_block().insert_op_before(copy, user)
            user.operands[use.index] = copy.result


_INDEX_ARITHMETIC = (arith.AddiOp, arith.SubiOp, arith.MuliOp, math.AbsIOp)
_is_index_arithmetic = subclass_test(_INDEX_ARITHMETIC)
INDEX_TREE_DEPTH = 3
"""The most integer ops an index expression re-created at each use may have on a path to its leaves."""


def _is_index_tree(op: Operation, depth: int = 1) -> bool:
    """An i32 vector add/sub/mul/abs whose operands are leaves that own no registers of their own (constants, a
    broadcast scalar, a shuffle of a row vector) or, used only here, such expressions: at most
    `INDEX_TREE_DEPTH` deep (`kv_idx - q_idx`, `(kv_idx - q_idx) * 2 + 1`, `abs(kv_idx - q_idx)`); or a view
    (`vector.shuffle`) of one, such as compute-distinct-lanes leaves between an op on a thread's distinct
    offsets and its readers: a view costs no instruction and is re-created with what it views."""
    if isinstance(op, vector.ShuffleOp):
        return op.v2 is op.v1 and _is_inner(op.v1, depth)
    if not _is_index_arithmetic(op) or not isinstance(op.results[0].type, VectorType) \
            or not isinstance(op.results[0].type.element_type, IntegerType):
        return False
    return all(_is_inner(value, depth + 1) or _is_index_leaf(value) for value in op.operands)


def _is_index_leaf(value: SSAValue) -> bool:
    """A constant, a broadcast scalar, or a view of row vectors (or of leaves): what an index expression may
    read without holding a tile's registers (a view of 34 distinct offsets as a leaf would keep them live)."""
    owner = value.owner
    if isinstance(owner, vector.ShuffleOp):
        return all(v.type.get_shape()[0] <= ROWS_PER_THREAD or _is_index_leaf(v) for v in (owner.v1, owner.v2))
    return isinstance(owner, arith.ConstantOp | vector.BroadcastOp)


def _is_inner(value: SSAValue, depth: int) -> bool:
    """Whether `value`, an operand at `depth` of an index expression (`_is_index_tree`), is part of it: used
    only there, and itself an index expression within `INDEX_TREE_DEPTH` (a view of one included); otherwise
    it is a leaf, shared by the copies."""
    owner = value.owner
    return (isinstance(owner, Operation) and depth <= INDEX_TREE_DEPTH
            and len({use.operation for use in value.uses}) == 1 and _is_index_tree(owner, depth))


def _inner_operands(op: Operation, depth: int) -> list[tuple[int, Operation, int]]:
    """(position, owner, its depth) of the operands of the index expression `op` (at `depth`) that are part of
    it: a view's source is at the view's depth, an op's operands one deeper."""
    inner_depth = depth if isinstance(op, vector.ShuffleOp) else depth + 1
    return [(k, value.owner, inner_depth) for k, value in enumerate(op.operands) if _is_inner(value, inner_depth)]


def _clone_tree(op: Operation, before: Operation, depth: int = 1) -> SSAValue:
    """A copy of the index expression `op` before `before`: its ops and views cloned (a view reads its copy as
    both operands), its leaves shared."""
    inner = _inner_operands(op, depth)  # before the clone, which reads them too
    copy = op.clone()
    copies: dict[Operation, SSAValue] = {}
    for k, owner, inner_depth in inner:
        if owner not in copies:
            copies[owner] = _clone_tree(owner, before, inner_depth)
        copy.operands[k] = copies[owner]
    copy.results[0].name_hint = op.results[0].name_hint
    before.parent_block().insert_op_before(copy, before)
    return copy.results[0]


def _recreate_index_trees(module: ModuleOp) -> None:
    """Each index expression (`_is_index_tree`, an op or a view) with more than one use re-created right before
    each user, as lane offsets are (module docstring)."""
    trees = [o for o in walk_ops(module) if _is_index_tree(o) and _readers(o) > 1]
    for op in trees:
        copies: dict[object, SSAValue] = {}  # one per user or per use (`_readers`)
        for use in list(op.results[0].uses):
            user = use.operation
            key = user if _copies_per_user(op) else (user, use.index)
            if key not in copies:
                copies[key] = _clone_tree(op, _insertion_point(user))
            user.operands[use.index] = copies[key]
        _erase_tree(op)


def _is_size_expression(op: Operation) -> bool:
    """An index `arith.ceildivsi` of a kernel argument (an entry block argument) by a constant, or an index
    `arith.muli` of such a ceildiv (used only there) by a constant (module docstring)."""
    if not isinstance(op.results[0].type if op.results else None, IndexType):
        return False
    if isinstance(op, arith.CeilDivSIOp):
        lhs, rhs = op.operands
        entry = isinstance(lhs, BlockArgument) and isinstance(lhs.owner.parent_op(), func.FuncOp)
        return entry and isinstance(rhs.owner, arith.ConstantOp)
    if isinstance(op, arith.MuliOp):
        inner = [v for v in op.operands if not isinstance(v.owner, arith.ConstantOp)]
        return (len(inner) == 1 and len(list(inner[0].uses)) == 1 and isinstance(inner[0].owner, Operation)
                and isinstance(inner[0].owner, arith.CeilDivSIOp) and _is_size_expression(inner[0].owner))
    return False


def _clone_size(op: Operation, before: Operation) -> SSAValue:
    copy = op.clone()
    for k, value in enumerate(op.operands):
        if isinstance(value.owner, arith.CeilDivSIOp):
            copy.operands[k] = _clone_size(value.owner, before)
    copy.results[0].name_hint = op.results[0].name_hint
    before.parent_block().insert_op_before(copy, before)
    return copy.results[0]


def _recreate_sizes(module: ModuleOp) -> None:
    """Each size expression (`_is_size_expression`, outermost) re-created right before each user."""
    sizes = [o for o in walk_ops(module) if _is_size_expression(o)
             and not any(_is_size_expression(u.operation) for u in o.results[0].uses)]
    for op in sizes:
        for use in list(op.results[0].uses):
            user = use.operation
            user.operands[use.index] = _clone_size(op, _insertion_point(user))
        inner = [v.owner for v in op.operands if isinstance(v.owner, arith.CeilDivSIOp)]
        op.detach()
        op.erase()
        for owner in inner:
            if not owner.results[0].uses:
                owner.detach()
                owner.erase()


def _erase_tree(op: Operation, depth: int = 1) -> None:
    inner = {owner: inner_depth for _, owner, inner_depth in _inner_operands(op, depth)}
    op.detach()
    op.erase()
    for owner, inner_depth in inner.items():
        if not owner.results[0].uses:
            _erase_tree(owner, inner_depth)


@dataclass(frozen=True)
class RematerializeConstantsPass(ModulePass):
    """Clone each constant (and descriptor advance) next to each of its uses, in its cheapest form there, and
    erase the original (module docstring)."""

    name = "rematerialize-constants"
    input_level: ClassVar[str] = "target"
    """The kernels it transforms (Target IR); a module with only Tile IR kernels is refused."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        _swap_splats_into_immediates(op)
        for offsets in [o for o in walk_ops(op) if _is_lane_offsets(o)]:
            _recreate_at_uses(offsets)
        for address in [o for o in walk_ops(op) if _is_shared_offset(o)]:
            _recreate_address_at_uses(address)
        _recreate_index_trees(op)
        _recreate_sizes(op)
        _recreate_late_offsets(op)
        cheap_ops: dict[type, list[Operation]] = {sm90.DescriptorAdvanceOp: [], sm90.SharedBufferOp: [],
                                                  arith.ConstantOp: []}
        for o in walk_ops(op):  # one walk: the advances, then the buffers, then the constants, each in program order
            found = cheap_ops.get(type(o))
            if found is not None:
                found.append(o)
        for cheap in [o for ops in cheap_ops.values() for o in ops]:
            lane = splat_value(cheap.result) if isinstance(cheap, arith.ConstantOp) else None
            for use in list(cheap.result.uses):
                user = use.operation
                # An advance is no accumulator: it may sit between the fence and its wgmma, where only one
                # descriptor of a chain is live at a time (before the fence, all 15 of head_dim 256's would be).
                where = user if isinstance(cheap, sm90.DescriptorAdvanceOp) else _insertion_point(user)
                copy = cheap.clone()
                copy.result.name_hint = cheap.result.name_hint
                if lane is not None and not _is_immediate_use(user, use.index) \
                        and not isinstance(user, _TAKE_REGISTERS) and not _becomes_result(user, use.index):
                    ops = _broadcast(copy, lane)
                    copy.erase()
                else:
                    ops = [copy]
                user.parent_block().insert_ops_before(ops, where)
                user.operands[use.index] = ops[-1].results[0]
            cheap.detach()
            cheap.erase()
