"""`mask-causal-by-mma`: let the tensor core add the causal diagonal's mask of a masked trip (issue 28), the
sibling of `mask-by-mma` (the bounds mask, a per-key bias) for a mask per row and column.

Input: Tile IR after `peel-masked-iterations{branch=true}`: a loop whose masked trips run a causal mask under
the masks' branch

    %s = tile.mma %q, %k, %c transpose_b                    // the score mma, f32 [M, N]
    ...
    %t = tile.scale %s by c                                 // zero or more, c > 0
    %unmasked = arith.cmpi slt, %iv, %mid
    %m = scf.if %unmasked { scf.yield %t } else {
      %r = tile.mask_causal %t, %q0, %k0, %seq_q, %seq_k; scf.yield %r }

Output: the table written once per block, the mask added after the score mma's group by one more group of
wgmmas (`tile.causal_bias`) on the masked trips of blocks whose first row sees key 0, the select kept for the
others:

    tile.causal_bias_table %causal_table                    // entry block, once: [2 (M + N) - 8, 8] bf16
    %blind = arith.cmpi slt, %q0 + %seq_k - %seq_q, 0       // before the loop: the block's first row sees no key
    %biased_from = arith.select %blind, %ub, %mid           // the loop's end where a path is never taken
    %selected_from = arith.select %blind, %mid, %ub
    ...
    %s = tile.mma %q, %k, %c transpose_b
    %b = scf.if (arith.cmpi slt, %iv, %biased_from) { scf.yield %s } else {
      %r = tile.causal_bias %s, %causal_table, %q0, %k0, %seq_q, %seq_k; scf.yield %r }
    ...
    %t = tile.scale %b by c
    %m = scf.if (arith.cmpi slt, %iv, %selected_from) { scf.yield %t } else { tile.mask_causal ... }

Why the guard (`tile_causal_bias`'s docstring): a hidden score becomes -H = -2^100, not -inf; a row that has
seen no visible key would take -H c as its maximum and p = 1 where the select gives -inf and p = 0. With the
mask aligned bottom-right, row q sees keys 0 .. q + seq_k - seq_q, so either key 0 or none: every row of the
block sees key 0 on its first trip iff q0 + seq_k - seq_q >= 0 (always where seq_q <= seq_k), and from then on
has a visible maximum. Blocks where it fails (seq_q > seq_k: the first rows see nothing and must end as zeros)
keep the select on their masked trips: a block-uniform runtime branch, as the masks' own.

Preconditions (otherwise the loop keeps its select), besides the guard's:
- the masks' branch holds one `tile.mask_causal` alone, reached from the score mma only through `tile.scale`s
  with a positive product c <= 2^26 (-H c, and its product with log2(e) in the exponent, stay finite in f32);
  the score mma's result is read only on that way; `%q0`, `%seq_q`, `%seq_k` and `%mid` are defined before the
  loop and `%k0` before the score mma;
- the score tile is f32 [M, N] with M a multiple of 64 and N of 8, 128 <= N <= 256 (one wgmma's N; fewer
  keys select more cheaply: `MIN_KEYS`), from 16-bit operands (the bias wgmmas, k16, chain on the score's
  accumulator: one shape; they are bf16 whatever the scores' type, -2^100 being no f16, as mask-by-mma's bias
  mma is bf16 on an f16 kernel's scores);
- the score mma starts from zeros (S = Q K^T: an additive bias in its accumulator, `flash_attention(bias=True)`,
  may hold -inf, and a row whose visible keys are all -inf would then take -H c as its maximum);
- the loop visits the key blocks from key 0 (`%k0 = %iv * N`, from trip 0), and the masked scores feed an
  online softmax only (`feeds_online_softmax`: its running maximum, and exponentials against it), so that -H
  acts as -inf does for a row that has seen key 0;
- the keys past `%seq_k` are a tensor's zero-filled end (`mask_by_mma.keys_past_limit_are_zero`): the padding
  rows of the last query block see them, and their scores must be finite. Varlen, paged and split-KV kernels,
  FP8 (8-bit operands), score_mod (ops between the mma and the mask) and block-sparse (masks unbranched) fail
  them;
- the kernel's shared memory with the table stays within a block's (`mask_by_mma.shared_bytes_bound`).
Also required of the inputs (not checkable here): Q and K finite and every visible score below 2^75 in
magnitude, so that a hidden one becomes exactly -H. With them the kernel's results are bitwise the select's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tessera.dialects import tile
from tessera.dialects import tile_causal_bias as causal_bias
from tessera.dialects.tile_types import MemSpace, TileType
from tessera.passes.mask_by_mma import (
    SHARED_ALIGNMENT_BOUND,
    branch_after_mma,
    defined_before,
    sites,
    keys_past_limit_are_zero,
    shared_bytes_bound,
)
from tessera.sm90.facts import MAX_SHARED_MEMORY_PER_BLOCK

SCALE_CHAIN_BOUND = 2.0 ** 26
"""The largest product of the `tile.scale` factors between the score mma and the mask: -2^100 c, and its
product with log2(e) where the softmax exponentiates base 2, stay below f32's 2^128."""

MIN_KEYS = 128
"""The fewest score columns the rewrite takes: a select per score costs a thread N / 2 FSEL and about N / 4
compares, the bias a fixed 4 HGMMA and ~25 uniform instructions. At 48 keys (head_dim 256's 128 x 48 tile) the
select's masked trip is 1.13x the steady one, and with the bias the steady trip was 19 SASS longer under every
ptxas (383 against 364): kept as it is."""

TABLE_NAME = "causal_table"
"""The table's name (one per score shape and function)."""


@dataclass(frozen=True)
class CausalScores:
    """One rewrite: the score mma, the masks' branch, its causal mask and the loop around them."""

    mma: tile.MmaOp
    branch: scf.IfOp
    mask: tile.MaskCausalOp
    loop: scf.ForOp


def table_type(score: TileType) -> TileType:
    """The [2 (M + N) - 8, 8] bf16 unswizzled shared table of an [M, N] score tile."""
    return TileType([causal_bias.table_rows(*score.get_shape()), causal_bias.TABLE_COLUMNS], BFloat16Type(),
                    MemSpace.SHARED)


def _scale_chain(value: SSAValue) -> tuple[SSAValue, float] | None:
    """The value before a chain of positive `tile.scale`s ending in `value`, each read only by the next, and
    the chain's product; None where a scale is not positive or a value on the way has another reader."""
    product = 1.0
    while isinstance(value.owner, tile.ScaleOp):
        factor = value.owner.factor.value.data
        if factor <= 0 or len({use.operation for use in value.owner.source.uses}) != 1:
            return None
        product *= factor
        value = value.owner.source
    return value, product


def _constant(value: SSAValue) -> int | None:
    owner = value.owner
    return owner.value.value.data if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr) \
        else None


def starts_at_key_zero(loop: scf.ForOp, k_start: SSAValue, keys: int) -> bool:
    """Whether trip t of `loop` holds keys t N .. t N + N - 1 from trip 0 on: `%k0 = arith.muli %iv, N` in a
    loop from 0 by 1 (so a row that sees key 0 sees it on the first trip)."""
    owner = k_start.owner
    if not isinstance(owner, arith.MuliOp) or (_constant(loop.lb), _constant(loop.step)) != (0, 1):
        return False
    iv = loop.body.block.args[0]
    return {owner.lhs, owner.rhs} & {iv} != set() and keys in (_constant(owner.lhs), _constant(owner.rhs))


def feeds_online_softmax(masked: SSAValue, loop: scf.ForOp) -> bool:
    """Whether the masked scores are read only as the online softmax reads them: `tile.row_max`, whose result
    only a `tile.element_max` with a running maximum (an iter_arg of `loop`) reads, and `tile.exp_subtract` /
    `tile.exp2_subtract` of that element_max's result. There a hidden score -H c, which a row that has seen a
    visible key never takes as its maximum, gives exp(-H c - m) = 0 as -inf does; a store of the scores, or an
    exponential against the tile's own maximum (two_pass_attention's), would not."""
    carried = set(loop.body.block.args[1:])
    maxima = set()
    for use in masked.uses:
        op = use.operation
        if isinstance(op, tile.RowMaxOp):
            for inner in op.result.uses:
                update = inner.operation
                if not isinstance(update, tile.ElementMaxOp) or not carried & set(update.operands):
                    return False
                maxima.add(update.result)
        elif not isinstance(op, tile.ExpSubtractOp | tile.Exp2SubtractOp) or use.index != 0:
            return False
    return bool(maxima) and all(use.operation.operands[1] in maxima for use in masked.uses
                                if not isinstance(use.operation, tile.RowMaxOp))


def find_causal_scores(fn: func.FuncOp, loop: scf.ForOp, branch: scf.IfOp) -> CausalScores | None:
    """The rewrite of masks' branch `branch`, or None where the module docstring's preconditions fail."""
    if not branch.false_region.blocks or len(branch.results) != 1:
        return None
    masked, identity = list(branch.false_region.block.ops), list(branch.true_region.block.ops)
    if len(masked) != 2 or not isinstance(masked[0], tile.MaskCausalOp) or len(identity) != 1:
        return None
    mask = masked[0]
    if list(masked[1].operands) != [mask.result] or list(identity[0].operands) != [mask.source]:
        return None
    if {use.operation for use in mask.source.uses} != {mask, identity[0]}:
        return None
    chain = _scale_chain(mask.source)
    if chain is None or chain[1] > SCALE_CHAIN_BOUND:
        return None
    mma = chain[0].owner
    if not isinstance(mma, tile.MmaOp) or not mma.transpose_b or mma.parent_block() is not branch.parent_block():
        return None
    ty = mma.result.type
    if not isinstance(ty.element_type, Float32Type) or ty.rank != 2:
        return None
    rows, keys = ty.get_shape()
    if rows % causal_bias.WARPGROUP_ROWS or keys % 8 or not MIN_KEYS <= keys <= 256:
        return None
    if not isinstance(mma.a.type.element_type, BFloat16Type | Float16Type):
        return None
    fill = mma.acc.owner
    if not isinstance(fill, tile.FillOp) or fill.value.value.data != 0.0:  # S = Q K^T alone: no additive bias
        return None
    cond = branch.cond.owner
    if not isinstance(cond, arith.CmpiOp):
        return None
    if not all(defined_before(v, loop) for v in (mask.q_start, mask.seq_q, mask.seq_k, cond.rhs)):
        return None
    if not defined_before(mask.k_start, mma):
        return None
    if not keys_past_limit_are_zero(fn, mma, mask.seq_k):
        return None
    if not starts_at_key_zero(loop, mask.k_start, keys) or not feeds_online_softmax(branch.results[0], loop):
        return None
    table = table_type(ty)
    extra = 0 if _existing_table(fn, table) else -(-math.prod(table.get_shape()) * 2 // SHARED_ALIGNMENT_BOUND) \
        * SHARED_ALIGNMENT_BOUND
    if shared_bytes_bound(fn) + extra > MAX_SHARED_MEMORY_PER_BLOCK:
        return None
    return CausalScores(mma, branch, mask, loop)


def _existing_table(fn: func.FuncOp, ty: TileType) -> tile.AllocSharedOp | None:
    return next((o for o in fn.body.block.ops if isinstance(o, tile.AllocSharedOp) and o.result.type == ty
                 and o.result.name_hint == TABLE_NAME), None)


def causal_table(fn: func.FuncOp, ty: TileType) -> SSAValue:
    """The function's table of type `ty`: allocated after the entry block's last tile allocation and written
    right after it, once (it never changes: every loop and trip reads windows of it)."""
    existing = _existing_table(fn, ty)
    if existing is not None:
        return existing.result
    entry = fn.body.block
    allocs = [o for o in entry.ops if isinstance(o, tile.AllocSharedOp)]
    table = tile.AllocSharedOp(ty)
    table.result.name_hint = TABLE_NAME
    Rewriter.insert_op([table, tile.CausalBiasTableOp(table.result)],
                       InsertPoint.after(allocs[-1]) if allocs else InsertPoint.at_start(entry))
    return table.result


def _named(op: Operation, name: str) -> Operation:
    op.results[0].name_hint = name
    return op


def add_causal_bias(fn: func.FuncOp, site: CausalScores) -> None:
    """Rewrite one site (module docstring): the guard before the loop, the bias branch after the score mma,
    the masks' branch taken only by blind blocks."""
    mask, mma = site.mask, site.mma
    table = causal_table(fn, table_type(mma.result.type))
    cond = site.branch.cond.owner
    shift = _named(arith.SubiOp(_named(arith.AddiOp(mask.q_start, mask.seq_k), "q0_plus_seq_k"), mask.seq_q),
                   "first_row_limit")
    zero = arith.ConstantOp(IntegerAttr(0, IndexType()))
    blind = _named(arith.CmpiOp(shift.results[0], zero.result, "slt"), "blind")
    # the first trip of each masked path, or the loop's end where the block never takes it: one compare a trip
    biased_from = _named(arith.SelectOp(blind.results[0], site.loop.ub, cond.rhs), "biased_from")
    selected_from = _named(arith.SelectOp(blind.results[0], cond.rhs, site.loop.ub), "selected_from")
    Rewriter.insert_op([shift.operands[0].owner, shift, zero, blind, biased_from, selected_from],
                       InsertPoint.before(site.loop))
    plain = _named(arith.CmpiOp(cond.lhs, biased_from.results[0], "slt"), "unbiased")
    scores = mma.result
    biased = tile.CausalBiasOp(scores, table, mask.q_start, mask.k_start, mask.seq_q, mask.seq_k)
    biased.result.name_hint = f"{scores.name_hint or 's'}_biased"
    branch_after_mma(mma, plain, [biased])
    kept = _named(arith.CmpiOp(cond.lhs, selected_from.results[0], "slt"), "unselected")
    Rewriter.insert_op(kept, InsertPoint.before(site.branch))
    site.branch.operands[0] = kept.results[0]
    if not cond.result.uses:
        Rewriter.erase_op(cond)


@dataclass(frozen=True)
class MaskCausalByMmaPass(ModulePass):
    """Add the causal masks of masked trips to the score accumulator with the tensor core (module docstring)."""

    name = "mask-causal-by-mma"
    input_level: ClassVar[str] = "tile"
    """The kernels it transforms (Tile IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn, loop, branch in sites(op):
            site = find_causal_scores(fn, loop, branch)
            if site is not None:
                add_causal_bias(fn, site)
