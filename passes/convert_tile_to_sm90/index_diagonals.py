"""convert-tile-to-sm90, differences of coordinates: `kv_idx - q_idx` (a column iota and a row iota) as the
thread's distinct values, and compares of it folded into immediates.

In the accumulator layout a thread's register k of an [BM, N] tile sits at row r0 + row_k and column
c0 + col_k, with row_k in {0, 8} and col_k in {8j, 8j + 1}. So `kv_idx - q_idx` at register k is
(k0 + c0 - q0 - r0) + (col_k - row_k): one scalar per thread plus a constant per register, and the constants
take only N/4 + 2 distinct values (the second row's are the first row's one 8-column group earlier): 34 at
128 keys, where the tile has 64 registers. Score modifiers made of such a difference (ALiBi's
`slope * (kv_idx - q_idx)`, a relative-position table `table[h, clip(q_idx - kv_idx + 31, 0, 62)]`) are then
computed on those 34 registers (`compute-distinct-lanes`): no [BM, BN] tile of them is live beside the score,
however ptxas schedules them (ptxas hoists what does not read the score above the wait for the score's wgmma,
where a whole tile of it would be live beside the accumulator in flight).

A compare of such a difference with a constant (`q_idx - kv_idx < 1024`, and `q_idx >= kv_idx` itself, a
difference compared with 0) needs no register beyond the scalar: (s + d_k) < c is s < c - d_k, one `setp`
per register against an immediate, as the bounds masks do. So does a compare with a bound that is the same
for every element (`q_idx - kv_idx < widths[h]`: a gather at the head's or batch's id, a splat, arithmetic of
such): (s + d_k) < w is (s - w') < -d_k with w' = w clamped to [-2^30, 2^30], one scalar subtraction for the
tile (the clamp changes no result, as |s + d_k| < 2^30, and keeps s - w' from wrapping), instead of the
difference's N/4 + 2 registers beside whatever else the tile computes.

Such a difference in f32 times a row vector, added to (or subtracted from) a tile, and used nowhere else (ALiBi's
`score + slopes[h] * (kv_idx - q_idx)`) is computed `SCALED_DIAGONAL_SLAB` registers at a time, each register's
difference rebuilt from the thread's scalar (f32(s) + d_k, then the product, then the sum: the whole-tile
values, bit for bit): no view of the N/4 + 2 distinct values is live beside the tile it is added to (a soft-cap's
output, whose tanh value the backward keeps for its derivative). (Indices are taken to be below 2^30, so no sum or
difference wraps; in f32, below 2^24, `attention_mods.F32_EXACT_INTEGERS`, where f32(a) - f32(b) is
f32(a - b) exactly.)
"""

from __future__ import annotations

from xdsl.dialects import arith, math, vector
from xdsl.dialects.builtin import Float32Type, IntegerAttr, UnitAttr, VectorType, f32, i32
from xdsl.ir import SSAValue

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import AccumulatorLayout
from tessera.passes.convert_tile_to_sm90.common import DISTINCT_LANES_ATTR, ColumnIota, constant_i32

ROW_VECTOR_ROWS = sorted(set(AccumulatorLayout(8).row_offsets))
"""The rows of a thread's two registers of a row vector, relative to its first row."""

_SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
"""The predicate of a compare with its operands swapped."""

SCALED_DIAGONAL_SLAB = 8
"""Registers of a scaled difference computed together (`_scaled_diagonal_sum`)."""


def _lanes_of(value: SSAValue) -> int:
    return value.type.get_shape()[0]


INDEX_LIMIT = 2**30
"""Indices, and sums and differences of two of them, are taken to be below this in magnitude (module docstring)."""

_UNIFORM_ARITHMETIC = (tile.AddOp, tile.SubOp, tile.MulOp, tile.ElementMinOp, tile.ElementMaxOp, tile.FloorDivOp,
                       tile.ModOp, *tile.BITWISE_OPS)


def uniform_row_vector(value: SSAValue) -> bool:
    """Whether `value` is an i32 row vector [BM] with every element the same: a splat, a gather whose indices
    are all such values (`widths[h]`), or arithmetic of such values."""
    ty = value.type
    if not (hasattr(ty, "rank") and ty.rank == 1 and ty.element_type == i32):
        return False
    return _uniform(value)


def _uniform(value: SSAValue) -> bool:
    owner = value.owner
    if isinstance(owner, tile.SplatOp):
        return True
    if isinstance(owner, tile.GatherOp):
        return all(_uniform(i) for i in owner.indices)
    if isinstance(owner, _UNIFORM_ARITHMETIC):
        return _uniform(owner.lhs) and _uniform(owner.rhs)
    return False


def constant_scalar(e: Emitter, value: int) -> SSAValue:
    """An i32 scalar constant."""
    return e.op(arith.ConstantOp(IntegerAttr(value, i32)))


def _absolute_difference(value: SSAValue) -> tuple[tile.AddOp | tile.SubOp, bool] | None:
    """(the i32 sum or difference, True) of `tile.cast` to f32 of `tile.abs` of an i32 sum or difference (the
    whole-tile lowering computes it in i32, then converts); None for anything else."""
    cast = value.owner
    if not (isinstance(cast, tile.CastOp) and cast.source.type.element_type == i32
            and isinstance(cast.result.type.element_type, Float32Type) and isinstance(cast.source.owner, tile.AbsOp)):
        return None
    inner = cast.source.owner.source.owner
    return (inner, True) if isinstance(inner, tile.SubOp | tile.AddOp) else None


class IndexDiagonalLowering:
    """Lowering of differences of coordinates (a mixin of `KernelLowering`, through `ElementwiseLowering`)."""

    def _iota_start(self, value: SSAValue) -> tuple[SSAValue, str, bool] | None:
        """(the thread's i32 start, "rows" or "cols", whether cast to f32) of a row vector `tile.iota rows`
        [BM] or a column vector `tile.iota cols` [1, N], or of its `tile.cast` to f32; None for anything else."""
        owner, as_f32 = value.owner, False
        if isinstance(owner, tile.CastOp) and owner.source.type.element_type == i32 \
                and isinstance(owner.result.type.element_type, Float32Type):
            owner, as_f32 = owner.source.owner, True
        if not isinstance(owner, tile.IotaOp):
            return None
        lowered = self.values.get(owner.result)
        if isinstance(lowered, ColumnIota) and owner.axis.data == "cols":
            return lowered.start, "cols", as_f32
        if owner.axis.data != "rows" or owner.result.type.rank != 1 or not isinstance(lowered, SSAValue):
            return None
        added = lowered.owner  # _lower_IotaOp's row vector: broadcast(start) + [0, 8]
        if isinstance(added, arith.AddiOp) and isinstance(added.lhs.owner, vector.BroadcastOp):
            return added.lhs.owner.source, "rows", as_f32
        return None

    def _index_terms(self, op, lhs: SSAValue, rhs: SSAValue, sign: int, e: Emitter):
        """(scalar, per-register constants, f32) with lhs + sign rhs = scalar + constant_k at register k of
        `op`'s [BM, N] result, where lhs and rhs are a row iota and a column iota (`_iota_start`), both i32 or
        both cast to f32; None otherwise."""
        if self._kind(op.result.type) != "full":
            return None
        starts = [self._iota_start(v) for v in (lhs, rhs)]
        if None in starts or starts[0][1] == starts[1][1] or starts[0][2] != starts[1][2]:
            return None
        layout = self._layout(op, op.result.type)
        offsets = [layout.col_offsets if axis == "cols" else [ROW_VECTOR_ROWS[r] for r in layout.row_of_element]
                   for _, axis, _ in starts]
        scalar = e.op((arith.SubiOp if sign < 0 else arith.AddiOp)(starts[0][0], starts[1][0]))
        return scalar, [a + sign * b for a, b in zip(*offsets)], starts[0][2]

    def _index_diagonal(self, op: tile.AddOp | tile.SubOp, e: Emitter) -> SSAValue | None:
        """lhs +- rhs of a row iota and a column iota as a view of the thread's distinct values (module
        docstring), marked for `compute-distinct-lanes`; None where the operands are not two such iotas."""
        terms = self._index_terms(op, op.lhs, op.rhs, 1 if isinstance(op, tile.AddOp) else -1, e)
        if terms is None:
            return None
        scalar, per_register, as_f32 = terms
        distinct = sorted(set(per_register))
        values = e.broadcast(scalar, len(distinct))
        if any(distinct):
            values = e.op(arith.AddiOp(values, e.dense(i32, distinct)))
        if as_f32:
            values = e.op(sm90.CvtOp(values, VectorType(f32, [len(distinct)])))
        values.name_hint = op.result.name_hint
        values.owner.attributes[DISTINCT_LANES_ATTR] = UnitAttr()
        return e.shuffle(values, [distinct.index(k) for k in per_register])

    def _scaled_diagonal_sum(self, op: tile.AddOp | tile.SubOp, e: Emitter) -> SSAValue | None:
        """x +- u * f32(kv_idx - q_idx) (ALiBi's bias added to the score), or x +- u * f32(|kv_idx - q_idx|)
        (symmetric ALiBi's, `tile.cast` of an i32 `tile.abs`), where u is a row vector and the product has no
        other use, computed slab by slab (`SCALED_DIAGONAL_SLAB` registers at a time), each register's
        difference rebuilt from the thread's scalar: f32(s) + d_k (exact below 2^24), its magnitude (the
        conversion of the i32 magnitude, exactly), times u, then added; None for any other add or sub. The same instructions on the same values as the whole-tile
        lowering, register by register (bitwise equal), but no view of the difference's N/4 + 2 distinct
        values is live beside x: only a slab's. x's registers are cut into slabs first, so that each dies at
        its slab's add, where the sum takes it."""
        if self._kind(op.result.type) != "full":
            return None
        candidates = [(op.rhs, op.lhs, False)] + ([(op.lhs, op.rhs, True)] if isinstance(op, tile.AddOp) else [])
        for product, other, product_first in candidates:
            owner = product.owner
            if not isinstance(owner, tile.MulOp) or not product.has_one_use() or self._kind(other.type) != "full":
                continue
            for scale, diagonal in ((owner.lhs, owner.rhs), (owner.rhs, owner.lhs)):
                inner, absolute = _absolute_difference(diagonal) or (diagonal.owner, False)
                if self._kind(scale.type) != "row" or not isinstance(inner, tile.SubOp | tile.AddOp):
                    continue
                terms = self._index_terms(inner, inner.lhs, inner.rhs, 1 if isinstance(inner, tile.AddOp) else -1, e)
                if terms is None or terms[2] == absolute:  # f32(kv_idx) - f32(q_idx), or f32(|kv_idx - q_idx|)
                    continue
                return self._scaled_diagonal_slabs(op, other, scale, terms[0], terms[1], product_first, absolute, e)
        return None

    def _scaled_diagonal_slabs(self, op, other: SSAValue, scale: SSAValue, scalar: SSAValue, per_register: list[int],
                               product_first: bool, absolute: bool, e: Emitter) -> SSAValue:
        """`op`'s result from x = `other`, u = `scale` and the difference's thread scalar and per-register
        constants (`_index_terms`), of its magnitude where `absolute`, slab by slab (`_scaled_diagonal_sum`),
        joined by shuffles."""
        layout = self._layout(op, op.result.type)
        x = self._broadcast_operand(op, other, op.result.type, e)
        u = self._get(scale)
        start = e.op(sm90.CvtOp(scalar, f32))
        lanes = len(per_register)
        slabs = range(0, lanes, SCALED_DIAGONAL_SLAB)
        cut = [e.shuffle(x, list(range(first, min(first + SCALED_DIAGONAL_SLAB, lanes)))) for first in slabs]
        arith_op = arith.AddfOp if isinstance(op, tile.AddOp) else arith.SubfOp
        joined = None
        for first, x_slab in zip(slabs, cut):
            registers = range(first, min(first + SCALED_DIAGONAL_SLAB, lanes))
            offsets = e.dense(f32, [float(per_register[k]) for k in registers])
            distance = e.addf(e.broadcast(start, len(registers)), offsets)
            if absolute:  # |f32(s + d_k)| = f32(|s + d_k|): both exact below 2^24
                distance = e.op(math.AbsFOp(distance))
            scale_slab = e.shuffle(u, [layout.row_of_element[k] for k in registers])
            bias = e.mulf(scale_slab, distance)
            part = e.op(arith_op(bias, x_slab) if product_first else arith_op(x_slab, bias))
            if joined is not None:  # the slabs side by side: registers of one thread, no instruction
                part = e.shuffle(joined, list(range(_lanes_of(joined) + len(registers))), part)
            joined = part
        joined.name_hint = op.result.name_hint
        return joined

    def _index_comparison(self, op: tile.CmpOp, e: Emitter) -> SSAValue | None:
        """A compare of a difference (or sum) of a row iota and a column iota, i32, with a constant or a uniform
        bound (either side), or of the two iotas themselves, as one setp per register of the thread's scalar
        (less the clamped bound) against an immediate (module docstring); None for any other compare."""
        predicate, lhs, rhs = op.predicate.data, op.lhs, op.rhs
        if constant_i32(lhs) is not None or uniform_row_vector(lhs):
            predicate, lhs, rhs = _SWAPPED[predicate], rhs, lhs
        constant = constant_i32(rhs)
        bound = rhs if constant is None and uniform_row_vector(rhs) else None
        if bound is not None:
            constant = 0
        if constant is not None and isinstance(lhs.owner, tile.AddOp | tile.SubOp):
            inner = lhs.owner
            terms = self._index_terms(op, inner.lhs, inner.rhs, 1 if isinstance(inner, tile.AddOp) else -1, e)
        elif constant is None:
            constant, terms = 0, self._index_terms(op, lhs, rhs, -1, e)  # a < b as a - b < 0
        else:
            return None
        if terms is None or terms[2]:
            return None
        scalar, per_register, _ = terms
        if bound is not None:
            w = e.op(vector.ExtractOp(self._get(bound), [0], i32))
            w = e.op(arith.MinSIOp(e.op(arith.MaxSIOp(w, constant_scalar(e, -INDEX_LIMIT))),
                                   constant_scalar(e, INDEX_LIMIT)))
            scalar = e.op(arith.SubiOp(scalar, w))
        spread = e.broadcast(scalar, len(per_register))
        # seeded for `compute-distinct-lanes`: a compare whose users compute on distinct registers (T5's
        # `kv_idx - q_idx > 0` selecting its bucket's half) is then computed on the N/4 + 2 distinct immediates
        # too; one that masks the score stays a setp a register
        spread.owner.attributes[DISTINCT_LANES_ATTR] = UnitAttr()
        return e.setp(predicate, spread, e.dense(i32, [constant - k for k in per_register]))
