"""`mask-by-mma`: let the tensor core add the bounds mask of a masked trip's scores (issue 28).

Input: Tile IR after `peel-masked-iterations{branch=true}`: a loop whose trips past `%mid` run a bounds mask
under the masks' branch

    %s = tile.mma %q, %k, %c transpose_b                    // the score mma, f32 [M, N]
    ...
    %t = tile.scale %s by c                                 // zero or more, c > 0
    %unmasked = arith.cmpi slt, %iv, %mid
    %m = scf.if %unmasked { scf.yield %t } else { %r = tile.mask_bounds %t, %k0, %seq_k; scf.yield %r }

Output: the mask is added to the accumulator by one more mma, issued right after the score mma's group, on
the masked trips only, and the masks' branch is gone:

    %s = tile.mma %q, %k, %c transpose_b
    %unmasked = arith.cmpi slt, %iv, %mid
    %b = scf.if %unmasked { scf.yield %s } else {
      tile.key_bias %bias, %k0, %seq_k                      // row n: +0 for key k0 + n < seq_k, -inf past it
      %ones = tile.fill 1.0 : !tile.tile<Mx16xbf16, register>
      %r = tile.mma %ones, %bias, %s transpose_b            // S[:, n] += 16 x (1 x bias[n]): +0 or -inf
      scf.yield %r }
    ...
    %t = tile.scale %b by c
    %m = %t

`%bias` is a [N, 16] bf16 shared tile of its own (32-byte rows, swizzle 32), one per shape for the kernel. Every
column of a bias row is the same, so each score gains the exact sum of 16 equal terms, +0 or -inf with no 0 x inf;
S + 0 = S (but -0 + 0 = +0, which no later op tells apart) and S + -inf = -inf, and c > 0 keeps -inf: the result is
`tile.mask_bounds`'s wherever the masked scores are finite. The lowering issues the bias mma as a group of its own
after the score group's commit and before the next group (the previous trip's P.V of a rotated loop), on the masked
path only; the wait before the softmax retires both (convert-tile-to-sm90's *accumulate branch*, control.py).

Precondition (otherwise the loop keeps its select): the masked scores are finite. The score mma's B operand (the
key tile, [N, K] with `transpose_b`: row n holds key k0 + n) is written only by `tile.cp_async` copies of windows
of one kernel argument whose key dimension is the mask's `%seq_k` (`tile.dim %K[axis]`, the window's row axis): a
masked key lies past the tensor's end, and a copy reads zeros there (the Tile interpreter's `GlobalView.read`;
TMA's tensor maps are the argument's dims with OOB fill NONE, `tessera.host.tensor_maps`), so its score is
Q . 0 = 0 (Q finite). Kernels whose keys past the limit are memory of another sequence, of a cache page or of the
next split (varlen, paged, split-KV: their limit is not the tensor's dimension, or their copies are gathers) fail
it and keep the select; so do causal diagonals (a mask per row and column, no per-key bias) and loops whose masks
peel-masked-iterations leaves unbranched (block-sparse's lists of visited blocks). Also required: the masks' branch
holds one `tile.mask_bounds` alone; the score mma's result is read only through the `tile.scale` chain into the
branch; `%k0`, `%seq_k` and `%mid` are defined before the score mma; the score tile is f32 with N a multiple of 8,
from 16-bit operands (the bias wgmma, k16, chains on the score's: one shape); and the kernel's shared memory with
the bias tile stays within a thread block's (`shared_bytes_bound`: a kernel near it, such as two_pass_attention at
head_dim 128 with its two stages, keeps its select rather than falling back to one stage).

Invariants: the same trips are masked (the branch's condition is the masks' branch's); the loop's other ops
are unchanged. With finite Q and K the kernel's results are bitwise those of the select.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import BFloat16Type, Float32Type, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from tessera.dialects import tile
from tessera.dialects.tile_types import MemSpace, TileType
from tessera.ir.walk import walk_ops
from tessera.lowering.fragments import element_type_bytes
from tessera.passes.peel_masked_iterations import is_unmasked_branch
from tessera.sm90.facts import MAX_SHARED_MEMORY_PER_BLOCK

BIAS_COLUMNS = 16
"""The bias tile's columns: one bf16 k-step of wgmma (the ones operand's 4 registers a thread)."""

BIAS_SWIZZLE = 32
"""16 bf16 columns are 32-byte rows: the 32-byte swizzle spans one row."""

BIAS_NAME = "key_bias"
"""The bias tile's name (one per shape and function, `bias_tile`)."""

SHARED_ALIGNMENT_BOUND = 1024
"""The largest alignment convert-tile-to-sm90 gives a shared tile (a 128-byte swizzle's 8-row atom)."""

SHARED_OVERHEAD_BOUND = 1024
"""Bytes convert-tile-to-sm90 places besides the tiles, at most (the mbarriers of the copy groups and rings)."""


@dataclass(frozen=True)
class MaskedScores:
    """One rewrite: the score mma, the masks' branch and its one bounds mask."""

    mma: tile.MmaOp
    branch: scf.IfOp
    mask: tile.MaskBoundsOp


def _root(value: SSAValue) -> SSAValue:
    """The allocation behind a shared tile value (a ring stage's ring)."""
    return value.owner.source if isinstance(value.owner, tile.StageOp) else value


def keys_past_limit_are_zero(fn: func.FuncOp, mma: tile.MmaOp, seq_k: SSAValue) -> bool:
    """Whether the rows of `mma`'s B tile past `seq_k` are zeros (module docstring, precondition): every write
    of its allocation is a `tile.cp_async` of a `tile.view` of one kernel argument whose window's row axis is
    the dimension `seq_k` is a `tile.dim` of."""
    dim = seq_k.owner
    if not isinstance(dim, tile.DimOp) or not isinstance(dim.source, BlockArgument):
        return False
    root = _root(mma.b)
    writers = [op for op in fn.walk() if any(_root(v) is root for v in op.operands) and op is not mma
               and not isinstance(op, tile.StageOp | tile.MmaOp | tile.ReleaseOp)]
    if not writers:
        return False
    for op in writers:
        if not isinstance(op, tile.CpAsyncOp) or _root(op.dest) is not root:
            return False
        view = op.source.owner
        if not isinstance(view, tile.ViewOp) or view.source is not dim.source:
            return False
        rank = view.source.type.rank
        row_axis = rank - len(view.result.type.get_shape())
        if dim.index.value.data != row_axis:
            return False
    return True


def defined_before(value: SSAValue, op: Operation) -> bool:
    """Whether `value` is available at `op`: a block argument of a block around it, or the result of an op
    before it in its block or before one of its ancestors in theirs."""
    owner = value.owner
    block = owner if isinstance(owner, Block) else owner.parent_block()
    here: Operation | None = op
    while here is not None:
        if here.parent_block() is block:
            return isinstance(owner, Block) or block.get_operation_index(owner) < block.get_operation_index(here)
        here = here.parent_op()
    return False


def find_masked_scores(fn: func.FuncOp, branch: scf.IfOp) -> MaskedScores | None:
    """The rewrite of masks' branch `branch`, or None where the module docstring's conditions do not hold."""
    if not branch.false_region.blocks or len(branch.results) != 1:
        return None
    masked = list(branch.false_region.block.ops)
    identity = list(branch.true_region.block.ops)
    if len(masked) != 2 or not isinstance(masked[0], tile.MaskBoundsOp) or len(identity) != 1:
        return None
    mask = masked[0]
    if list(masked[1].operands) != [mask.result] or list(identity[0].operands) != [mask.source]:
        return None
    # every value from the score mma to the mask is read only on that way (and by the identity's yield): the
    # rewrite makes each of them masked, so no other reader may expect it unmasked
    if {use.operation for use in mask.source.uses} != {mask, identity[0]}:
        return None
    value = mask.source
    while isinstance(value.owner, tile.ScaleOp) and value.owner.factor.value.data > 0:
        if len({use.operation for use in value.owner.source.uses}) != 1:
            return None
        value = value.owner.source
    mma = value.owner
    if not isinstance(mma, tile.MmaOp) or not mma.transpose_b or mma.parent_block() is not branch.parent_block():
        return None
    ty = mma.result.type
    if not isinstance(ty.element_type, Float32Type) or ty.rank != 2 or ty.get_shape()[1] % 8:
        return None
    if element_type_bytes(mma.a.type.element_type) != 2:  # the bias mma chains on S's wgmmas: one shape (k16)
        return None
    cond = branch.cond.owner
    if not isinstance(cond, arith.CmpiOp):
        return None
    if not all(defined_before(v, mma) for v in (mask.k_start, mask.seq_k, cond.rhs, cond.lhs)):
        return None
    if not keys_past_limit_are_zero(fn, mma, mask.seq_k):
        return None
    site = MaskedScores(mma, branch, mask)
    extra = 0 if _existing_bias(fn, bias_type(site)) else math.prod(bias_type(site).get_shape()) * 2
    if shared_bytes_bound(fn) + extra > MAX_SHARED_MEMORY_PER_BLOCK:
        return None
    return site


def sites(op: ModuleOp):
    """(function, loop, masks' branch) of every masked loop of `op`'s kernels, found before any is rewritten:
    what `mask-by-mma` and `mask-causal-by-mma` each look at."""
    for fn in [o for o in walk_ops(op) if isinstance(o, func.FuncOp)]:
        for loop in [o for o in fn.walk() if isinstance(o, scf.ForOp)]:
            for branch in masks_branches(loop):
                yield fn, loop, branch


def masks_branches(loop: scf.ForOp) -> list[scf.IfOp]:
    """The masks' branches of `loop` (`peel-masked-iterations{branch=true}`: `scf.if %iv < %mid`)."""
    iv = loop.body.block.args[0]
    found = []
    for op in loop.body.block.ops:
        if isinstance(op, scf.IfOp) and isinstance(op.cond.owner, arith.CmpiOp) \
                and op.cond.owner.lhs is iv and is_unmasked_branch(op, iv, op.cond.owner.rhs):
            found.append(op)
    return found


def bias_type(site: MaskedScores) -> TileType:
    """The [N, 16] bf16 shared bias tile of a site's score tile [M, N]."""
    keys = site.mma.result.type.get_shape()[1]
    return TileType([keys, BIAS_COLUMNS], BFloat16Type(), MemSpace.SHARED, BIAS_SWIZZLE)


def shared_bytes_bound(fn: func.FuncOp) -> int:
    """An upper bound of the shared memory convert-tile-to-sm90 places for `fn`: each tile rounded up to the
    largest alignment it gives a tile (`SHARED_ALIGNMENT_BOUND`), `SHARED_OVERHEAD_BOUND` for its barriers and
    the launch's 1023 bytes to align the base."""
    total = SHARED_OVERHEAD_BOUND + 1023
    for op in fn.walk():
        if isinstance(op, tile.AllocSharedOp):
            ty = op.result.type
            size = math.prod(ty.get_shape()) * element_type_bytes(ty.element_type)
            total += -(-size // SHARED_ALIGNMENT_BOUND) * SHARED_ALIGNMENT_BOUND
    return total


def _existing_bias(fn: func.FuncOp, ty: TileType) -> tile.AllocSharedOp | None:
    return next((o for o in fn.body.block.ops if isinstance(o, tile.AllocSharedOp) and o.result.type == ty
                 and o.result.name_hint == BIAS_NAME), None)


def bias_tile(fn: func.FuncOp, ty: TileType, user: Operation) -> SSAValue:
    """The function's bias tile of type `ty` for `user`: one per shape, shared by its loops (each masked trip
    writes it whole before its mma reads it; the loops run one after another), placed in the entry block after
    the other tiles allocated before `user` (their alignment, 1024 bytes for a 128-byte swizzle, would pad
    around it)."""
    existing = _existing_bias(fn, ty)
    if existing is not None:
        return existing.result
    entry = fn.body.block
    while user.parent_block() is not entry:
        user = user.parent_op()
    allocs = [o for o in entry.ops if isinstance(o, tile.AllocSharedOp)
              and entry.get_operation_index(o) < entry.get_operation_index(user)]
    bias = tile.AllocSharedOp(ty)
    bias.result.name_hint = BIAS_NAME
    Rewriter.insert_op(bias, InsertPoint.after(allocs[-1]) if allocs else InsertPoint.at_start(entry))
    return bias.result


def branch_after_mma(mma: tile.MmaOp, condition: Operation, biased: list[Operation]) -> scf.IfOp:
    """`scf.if %condition { yield S } else { <biased>; yield <biased's last result> }` placed right after the score
    mma, `condition` (an op yielding i1: true where the trip keeps S as it is) before it; every other reader of S
    reads the branch's result. The shape of both passes' accumulate branch (convert-tile-to-sm90 issues the
    biased path's mma as a wgmma group of its own)."""
    scores = mma.result
    last = biased[-1]
    then = Block([scf.YieldOp(scores)])
    otherwise = Block([*biased, scf.YieldOp(last.results[0])])
    new = scf.IfOp(condition.results[0], [scores.type], Region(then), Region(otherwise))
    new.results[0].name_hint = last.results[0].name_hint
    Rewriter.insert_op([condition, new], InsertPoint.after(mma))
    scores.replace_uses_with_if(new.results[0], lambda use: use.operation not in (then.last_op, last))
    return new


def add_mask_by_mma(fn: func.FuncOp, site: MaskedScores) -> None:
    """Rewrite one site (module docstring): the bias branch after the score mma, the masks' branch gone."""
    rows = site.mma.result.type.get_shape()[0]
    bias = bias_tile(fn, bias_type(site), site.mma).owner
    cond = site.branch.cond.owner
    unmasked = arith.CmpiOp(cond.lhs, cond.rhs, "slt")
    unmasked.result.name_hint = "unmasked"
    scores = site.mma.result
    ones = tile.FillOp(1.0, TileType([rows, BIAS_COLUMNS], BFloat16Type(), MemSpace.REGISTER))
    ones.result.name_hint = "ones"
    biased = tile.MmaOp(ones.result, bias.result, scores, transpose_b=True)
    biased.result.name_hint = f"{scores.name_hint or 's'}_biased"
    key_bias = tile.KeyBiasOp(bias.result, site.mask.k_start, site.mask.seq_k)
    branch_after_mma(site.mma, unmasked, [key_bias, ones, biased])
    site.branch.results[0].replace_all_uses_with(site.mask.source)
    Rewriter.erase_op(site.branch)
    if not cond.result.uses:
        Rewriter.erase_op(cond)


@dataclass(frozen=True)
class MaskByMmaPass(ModulePass):
    """Add the bounds masks of masked trips to the score accumulator with the tensor core (module docstring)."""

    name = "mask-by-mma"
    input_level: ClassVar[str] = "tile"
    """The kernels it transforms (Tile IR); tools refuse a module with only the other kind."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn, _, branch in sites(op):
            site = find_masked_scores(fn, branch)
            if site is not None:
                add_mask_by_mma(fn, site)
