"""`peel-masked-iterations`: run the trips of a loop whose masks are identities in a loop without the masks.

Input: Tile IR kernels, pipelined by `pipeline-loops`, rotated by `overlap-softmax`, or neither; every
`scf.for` (at any depth) is considered on its own, innermost first.

A `tile.mask_bounds %s, %k0, %seq_k` or `tile.mask_causal %s, %q0, %k0, %seq_q, %seq_k` on a [BM, BN] score
tile is the identity when k0 + BN <= T, with T = seq_k (bounds) or T = q0 + 1 + seq_k - seq_q (causal: the
first row of the tile, query q0, sees the keys up to q0 + seq_k - seq_q). When k0 is affine in the trip
number k of the loop, k0(k) = k0(0) + a k with a constant slope a > 0 (`tessera.analysis.loop_trips`), and
the other operands are loop-invariant, the mask is the identity exactly for the trips
k <= floordiv(T - BN - k0(0), a): a prefix of the loop. The loop is split at trip

    k_mid = clamp(min over the masks of (floordiv(T - BN - k0(0), a) + 1), 0, n),  n = ceildivsi(ub - lb, step)
    mid   = lb + k_mid * step                       (a trip boundary: "rounded up to lb + k * step")

into `scf.for %iv = %lb to %mid` with every mask replaced by its source, and `scf.for %iv = %mid to %ub` with
the original body, chained through the iter_args. All of it is signed index arithmetic (`floordivsi`,
`minsi`, `maxsi`), so negative slack (a block whose first key block is already masked, as in causal blocks
near the diagonal) gives an empty first loop; block-dependent operands (causal q0, seq_q != seq_k) are
computed per block at run time. Where k0 goes through divsi/divui (e.g. the use index (iv - lb) / step of a
pipelined loop), the dividend must not be negative at trip 0 for the affine form to hold; that is checked at
run time and the first loop is empty when it fails.

A `tile.clear_rows %v, %k0, %seq_k` of a [R, C] key tile (the V rows past the sequence's keys, zeroed before
P.V) is the identity when k0 + R <= seq_k, as a bounds mask of width R: the split point counts its limit too,
the first loop drops it, and with `branch=true` it runs on the masked path only, in the else block of the
masks' branch right before it (the builders clear V right after the score masks; the lowering keeps the wgmma
groups in flight across that branch too) or else under an `scf.if %iv < %mid {} else { clear }` of its own.
A loop whose only such op is a clear is skipped.

Invariants: both loops run the body of the original loop for the same values of iv, in order, so anything
computed from iv (pipelined stage indices, load guards, the previous trip's values of a rotated loop) is
unchanged; only masks that are identities on their trips are removed.

With `branch=true` the loop is not split: its masks run under a warp-uniform branch on the trip,

    %unmasked = arith.cmpi slt, %iv, %mid
    %s_masked = scf.if %unmasked -> (tile) { scf.yield %s } else { <the mask chain on %s>; scf.yield %m }

one `scf.if` per chain of masks (a mask whose source is another mask's result joins its chain), the identity
first, so that %s is last read by the first mask and that mask's result may take its registers. The
key-block body is then printed once instead of twice (the steady loop and the masked tail); a trip pays for
the compare and the branch, not for the masks, where they are identities. The branch holds only the masks
(pure register ops on the score tile, no wgmma, memory or control flow), so the wgmma groups in flight
around it (the previous trip's P.V mma of a rotated loop) stay in flight across it: convert-tile-to-sm90
keeps pending, over an scf.if that holds only pure register ops, every group whose result it does not read.
The same values are masked on the same trips as with the split, so results are bit-identical.

Idempotent: each loop it splits or branches (both loops of a split) gets the mark `tile.peeled` (`PEELED_ATTR`,
a unit attribute; convert-tile-to-sm90 builds new loops without it), and a marked loop is skipped, so a second
run (`-p 'peel-masked-iterations,peel-masked-iterations'`, or a pipeline of the user's that peels before the
default pipeline's passes) does not split the masked loop again at a trip it never reaches, nor branch a second
time inside the masks' branch.

Skipped (the loop is left unchanged): loops this pass split or branched already (`tile.peeled`); loops without masks (a clear alone included); loops whose step is not a positive constant;
loops with a mask whose k_start is not affine in iv with a positive constant slope (including a mask in a
nested loop that depends on that loop's iv), or whose q0 / seq_q / seq_k vary between trips. Masks outside
any loop (the first trip a rotated loop peels) stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tessera.analysis.loop_trips import IndexBuilder, clone_at_iv, constant_index, erase_dead_code, trip_slope
from tessera.ir.walk import walk_ops
from tessera.dialects import tile

MASKS = (tile.MaskBoundsOp, tile.MaskCausalOp)
LIMITED = (*MASKS, tile.ClearRowsOp)
"""The ops that are identities on the trips whose key block ends by a limit: the masks, and `tile.clear_rows`
(k0 + rows <= seq_k: no row to clear), which the split drops and the branch skips with them."""


PEELED_ATTR = "tile.peeled"
"""The mark of a loop this pass split or branched: its masks run only on the trips that need them already."""


@dataclass(frozen=True)
class MaskLimit:
    """One mask of a loop body: it is the identity on trip k when k0(0) + slope * k + width <= threshold."""

    mask: tile.MaskBoundsOp | tile.MaskCausalOp | tile.ClearRowsOp
    slope: int

    @property
    def width(self) -> int:
        if isinstance(self.mask, tile.ClearRowsOp):
            return self.mask.rows
        return self.mask.source.type.get_shape()[1]

    def invariant_operands(self) -> list[SSAValue]:
        if isinstance(self.mask, tile.MaskBoundsOp | tile.ClearRowsOp):
            return [self.mask.seq_k]
        return [self.mask.q_start, self.mask.seq_q, self.mask.seq_k]


@dataclass(frozen=True)
class SplitPlan:
    limits: list[MaskLimit]
    nonnegative: list[SSAValue]  # body values that must be >= 0 at trip 0 (dividends of divsi/divui in k0)


def plan_split(loop: scf.ForOp) -> SplitPlan | None:
    """How to split `loop`, or None when it is skipped (see the module docstring)."""
    if PEELED_ATTR in loop.attributes:
        return None
    step = constant_index(loop.step)
    body = loop.body.block
    masks = [op for op in body.walk() if isinstance(op, LIMITED)]
    if step is None or step <= 0 or not any(isinstance(op, MASKS) for op in masks):
        return None
    nonnegative: list[SSAValue] = []
    memo: dict = {}
    limits = []
    for mask in masks:
        slope = trip_slope(mask.k_start, body, step, nonnegative, memo)
        if slope is None or slope <= 0:
            return None
        limit = MaskLimit(mask, slope)
        if any(trip_slope(v, body, step, nonnegative, memo) != 0 for v in limit.invariant_operands()):
            return None
        limits.append(limit)
    return SplitPlan(limits, list(dict.fromkeys(nonnegative)))


def _threshold(b: IndexBuilder, limit: MaskLimit, at: dict[SSAValue, SSAValue]) -> SSAValue:
    """T of the module docstring, from the operands' values before the loop."""
    mask = limit.mask
    if isinstance(mask, tile.MaskBoundsOp | tile.ClearRowsOp):
        return at[mask.seq_k]
    first_row_sees = b.add(b.add(at[mask.q_start], b.const(1)), at[mask.seq_k])
    return b.sub(first_row_sees, at[mask.seq_q], "causal_limit")


def split_point(loop: scf.ForOp, plan: SplitPlan) -> SSAValue:
    """Emit, before `loop`, the iv `mid` at which its masks stop being identities (see the module docstring)."""
    b = IndexBuilder(loop)
    body = loop.body.block
    needed = [v for limit in plan.limits for v in (limit.mask.k_start, *limit.invariant_operands())]
    mapping: dict[SSAValue, SSAValue] = {}
    clone_at_iv(needed + plan.nonnegative, body, loop.lb, b, mapping)
    at = {v: mapping.get(v, v) for v in needed + plan.nonnegative}
    zero = b.const(0)
    trips = b.trip_count(loop)
    seen: set[tuple] = set()  # masks with the same operands have the same limit (a clear's is a bounds mask's)
    mid_trip = None
    for limit in plan.limits:
        key = (isinstance(limit.mask, tile.MaskCausalOp), limit.slope, limit.width, *(at[v] for v in (limit.mask.k_start, *limit.invariant_operands())))
        if key in seen:
            continue
        seen.add(key)
        slack = b.sub(_threshold(b, limit, at), b.add(at[limit.mask.k_start], b.const(limit.width)), "mask_slack")
        last_unmasked = b.floordiv(slack, b.const(limit.slope), "last_unmasked_trip")
        unmasked = b.add(last_unmasked, b.const(1), "unmasked_trips")
        mid_trip = unmasked if mid_trip is None else b.min(mid_trip, unmasked)
    mid_trip = b.max(b.min(mid_trip, trips), zero, "peeled_trips")
    for dividend in plan.nonnegative:
        known = constant_index(at[dividend])
        if known is None:
            affine = b.cmp("sge", at[dividend], zero, "affine")
            mid_trip = b.emit(arith.SelectOp(affine, mid_trip, zero), "peeled_trips")
        elif known < 0:
            mid_trip = zero
    return b.iv_of_trip(loop, mid_trip, "mid")


def split_loop(loop: scf.ForOp, mid: SSAValue) -> tuple[scf.ForOp, scf.ForOp]:
    """Replace `loop` by the unmasked loop [lb, mid) and the original loop [mid, ub), chained."""
    unmasked_body = loop.body.clone()
    for mask in [op for op in unmasked_body.walk() if isinstance(op, LIMITED)]:
        if not isinstance(mask, tile.ClearRowsOp):
            mask.result.replace_all_uses_with(mask.source)
        Rewriter.erase_op(mask)
    first = scf.ForOp(loop.lb, mid, loop.step, loop.iter_args, unmasked_body)
    erase_dead_code(first)
    rest = scf.ForOp(mid, loop.ub, loop.step, first.results, loop.body.clone())
    for new in (first, rest):
        new.attributes.update(loop.attributes)
        new.attributes[PEELED_ATTR] = UnitAttr()
        for old_result, result in zip(loop.results, new.results):
            result.name_hint = old_result.name_hint
    Rewriter.insert_op([first, rest], InsertPoint.before(loop))
    Rewriter.replace_op(loop, [], list(rest.results))
    return first, rest


def mask_chains(body: Block) -> list[list[tile.MaskBoundsOp | tile.MaskCausalOp]]:
    """The masks of `body` (at any depth) as chains: a mask whose source is not a mask's result starts one,
    and a mask whose only use is a mask of the same block follows it."""
    chains = []
    for op in body.walk():
        if not isinstance(op, MASKS) or isinstance(op.source.owner, MASKS):
            continue
        chain = [op]
        while chain[-1].result.has_one_use():
            user = chain[-1].result.get_unique_use().operation
            if not isinstance(user, MASKS) or user.source is not chain[-1].result \
                    or user.parent_block() is not op.parent_block():
                break
            chain.append(user)
        chains.append(chain)
    return chains


def branch_masks(loop: scf.ForOp, mid: SSAValue) -> None:
    """Put each chain of masks of `loop` under `scf.if %iv < %mid` with the unmasked tile in the then-branch
    (module docstring, `branch=true`). A mask of a chain that another mask reads but does not follow in the
    same block stays where it is, masked on every trip."""
    iv = loop.body.block.args[0]
    for chain in mask_chains(loop.body.block):
        head, last = chain[0], chain[-1]
        b = IndexBuilder(InsertPoint.before(head))
        unmasked = b.cmp("slt", iv, mid, "unmasked")
        identity = Block([scf.YieldOp(head.source)])
        masked = Block()
        branch = scf.IfOp(unmasked, [last.result.type], Region(identity), Region(masked))
        Rewriter.insert_op(branch, InsertPoint.before(head))
        last.result.replace_all_uses_with(branch.results[0])
        for mask in chain:
            mask.detach()
            masked.add_op(mask)
        masked.add_op(scf.YieldOp(last.result))
        branch.results[0].name_hint = last.result.name_hint
    branch_clears(loop, mid)
    loop.attributes[PEELED_ATTR] = UnitAttr()


def is_unmasked_branch(op: Operation | None, iv: SSAValue, mid: SSAValue) -> bool:
    """Whether `op` is an `scf.if %iv < %mid` with an else block (the masks' branch of `branch_masks`)."""
    if not isinstance(op, scf.IfOp) or not op.false_region.blocks:
        return False
    compare = op.cond.owner
    return isinstance(compare, arith.CmpiOp) and compare.lhs is iv and compare.rhs is mid \
        and compare.predicate.value.data == arith.CMPI_COMPARISON_OPERATIONS.index("slt")


def branch_clears(loop: scf.ForOp, mid: SSAValue) -> None:
    """Put each `tile.clear_rows` of `loop`'s body on the masked path (`branch=true`): into the else block of the
    masks' branch right before it (the builders clear V right after the score masks), or else under an
    `scf.if %iv < %mid {} else { clear }` of its own. The split point counted its limit (`LIMITED`), so it
    clears nothing on the trips that skip it, and such a trip runs none of its instructions."""
    block = loop.body.block
    iv = block.args[0]
    for clear in [op for op in block.ops if isinstance(op, tile.ClearRowsOp)]:
        branch = clear.prev_op
        if not is_unmasked_branch(branch, iv, mid):
            unmasked = IndexBuilder(InsertPoint.before(clear)).cmp("slt", iv, mid, "unmasked")
            branch = scf.IfOp(unmasked, [], Region(Block([scf.YieldOp()])), Region(Block([scf.YieldOp()])))
            Rewriter.insert_op(branch, InsertPoint.before(clear))
        clear.detach()
        masked = branch.false_region.block
        masked.insert_op_before(clear, masked.last_op)


@dataclass(frozen=True)
class PeelMaskedIterationsPass(ModulePass):
    """Split each loop with masks into a first loop without them (the trips where they are identities) and
    the rest, or with `branch` put the masks of the one loop under a branch on the trip (see the module
    docstring)."""

    name = "peel-masked-iterations"
    branch: bool = False
    """Keep one loop and branch around its masks instead of splitting it."""
    input_level: ClassVar[str] = "tile"
    """The kernels it transforms (Tile IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        loops = [o for o in walk_ops(op) if isinstance(o, scf.ForOp)]
        for loop in reversed(loops):  # inner loops first: an outer split clones them already split
            plan = plan_split(loop)
            if plan is None:
                continue
            if self.branch:
                branch_masks(loop, split_point(loop, plan))
            else:
                split_loop(loop, split_point(loop, plan))
