"""convert-tile-to-sm90, the attention pieces: row reductions over quads, exponentials, scaling and
rescaling, masks, casts and reshapes."""

from __future__ import annotations

import math as pymath

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    IndexType,
    f32,
    i32,
)
from xdsl.ir import SSAValue

from tessera.dialects import sm90, tile
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import quad_shuffle_offsets
from tessera.numerics import F32_LARGEST, exp2_factor
from tessera.passes.convert_tile_to_sm90.common import (
    LN2,
    LOG2E,
    _refuse,
    Scaled,
)


class AttentionLowering:
    """The Attention handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

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

    def _neg_scaled_max(self, rows: SSAValue, e: Emitter) -> SSAValue:
        """-m log2e of a running maximum (m = -inf read as 0), once per row: two registers."""
        m = self._safe_max(rows, e)
        return e.op(arith.NegfOp(e.mulf(m, e.splat(f32, LOG2E, m.type.get_shape()[0]))))

    def _lower_ExpSubtractOp(self, op: tile.ExpSubtractOp, e: Emitter) -> None:
        """exp(factor x - m) = ex2(x C - m log2e), C = `exp2_factor(factor)`: -m log2e once per row, then one fma
        per register and ex2 (a `Scaled` operand's factor folds into the fma). The row's largest score gives
        ex2(0) = 1 exactly when it is +-2^k (a saturated bias, `tessera.numerics.bias_bound`): m is then
        f32(2^k factor) and both products are 2^k C. With `subtract_first` (huge operands), see
        `_exp_subtracted`: three f32 ops per register instead of the fma (two for a factor 2^k)."""
        x = self._peek(op.source)
        raw, factor = (x.raw, x.factor) if isinstance(x, Scaled) else (x, 1.0)
        lanes = raw.type.get_shape()[0]
        if op.subtract_first:
            self._set(op.result, self._exp_subtracted(op, raw, factor, e))
            return
        neg_scaled_m = self._broadcast_rows(op, self._neg_scaled_max(self._get(op.rows), e), e)
        self._set(op.result, e.ex2(e.fma(raw, e.splat(f32, exp2_factor(factor), lanes), neg_scaled_m)))

    def _exp_subtracted(self, op: tile.ExpSubtractOp, raw: SSAValue, factor: float, e: Emitter) -> SSAValue:
        """ex2((f32(raw factor) - m) log2e) per register (m = -inf read as 0): the score rounded exactly as the
        row maximum was (`_lower_RowMaxOp`: f32(max(raw) factor), and rounding is monotonic), so every
        difference is <= 0, the largest score's exactly 0 at any magnitude, and close scores subtract exactly
        (Sterbenz); only then is the difference scaled. mul, sub, mul in place, each reading register i alone
        (no register beside the score's); `.rn` keeps ptxas from contracting the mul and the sub into an fma.
        For a factor 2^k (head_dim 64 and 256's default scale) raw factor is exact, so the mul and the sub are
        one fma(raw, factor, -m) with the same result, bit for bit."""
        lanes = raw.type.get_shape()[0]
        m = self._safe_max(self._get(op.rows), e)
        if factor != 1.0 and pymath.frexp(factor)[0] == 0.5:
            neg_m = self._broadcast_rows(op, e.op(arith.NegfOp(m)), e)
            difference = e.fma(raw, e.splat(f32, factor, lanes), neg_m)
        else:
            score = raw if factor == 1.0 else e.mulf(raw, e.splat(f32, factor, lanes))
            difference = e.subf(score, self._broadcast_rows(op, m, e))
        return e.ex2(e.mulf(difference, e.splat(f32, LOG2E, lanes)))

    def _lower_ExpDiffOp(self, op: tile.ExpDiffOp, e: Emitter) -> None:
        """exp(a - b) = ex2(f32(a log2e) - f32(b log2e)) on row vectors (two registers): a mul and an add, not
        one fma, so that a = b gives ex2(0) = 1 exactly at any magnitude (a row of saturated bias scores keeps
        its maximum from one key block to the next); a = -inf gives 0. The rounding of b log2e is the one
        `tile.exp_subtract`'s fma leaves in the row's exponentials, so the factor carries it and it cancels. With
        `subtract_first`: ex2((a - b) log2e), a sub and a mul, matching `_exp_subtracted` (a = b still gives 1;
        a = -inf, or both -inf with b read as 0, gives 0)."""
        a = self._get(op.lhs)
        lanes = a.type.get_shape()[0]
        if op.subtract_first:
            difference = e.subf(a, self._safe_max(self._get(op.rhs), e))
            self._set(op.result, e.ex2(e.mulf(difference, e.splat(f32, LOG2E, lanes))))
            return
        scaled_a = e.mulf(a, e.splat(f32, LOG2E, lanes))
        self._set(op.result, e.ex2(e.addf(scaled_a, self._neg_scaled_max(self._get(op.rhs), e))))

    def _lower_SaturatingScaleOp(self, op: tile.SaturatingScaleOp, e: Emitter) -> None:
        """clamp(x factor, -bound, bound), then +-inf where x is +-inf (two predicates, taken before x dies): each
        f32 op reads register i of its operands only, so the chain runs in place and costs no register beside
        x's. max/min propagate NaN (arith.maximumf/minimumf)."""
        x = self._get(op.source)
        lanes = x.type.get_shape()[0]
        splat = lambda value: e.splat(f32, value, lanes)  # noqa: E731
        bound = op.bound.value.data
        plus_inf = e.setp("gt", x, splat(F32_LARGEST))
        minus_inf = e.setp("lt", x, splat(-F32_LARGEST))
        scaled = e.mulf(x, splat(op.factor.value.data))
        clamped = e.op(arith.MinimumfOp(e.maxf(scaled, splat(-bound)), splat(bound)))
        clamped = e.select(minus_inf, splat(float("-inf")), clamped)
        self._set(op.result, e.select(plus_inf, splat(float("inf")), clamped))

    def _lower_LogOp(self, op: tile.LogOp, e: Emitter) -> None:
        """ln(x) = lg2(x) ln 2: `lg2.approx.ftz.f32` then one multiply per register (lg2(0) = -inf stays -inf)."""
        x = self._get(op.source)
        log2 = e.op(sm90.Lg2ApproxOp(x))
        self._set(op.result, e.mulf(log2, e.splat(f32, LN2, x.type.get_shape()[0])))

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
        integer = {src.element_type, dst.element_type} == {i32, f32}
        if integer and self._vector_type(op, src).get_shape() == self._vector_type(op, dst).get_shape():
            # i32 -> f32 rounds to nearest even (cvt.rn.f32.s32), f32 -> i32 truncates (cvt.rzi.s32.f32)
            self._set(op.result, e.op(sm90.CvtOp(self._get(op.source), self._vector_type(op, dst))))
            return
        if not (isinstance(src.element_type, Float32Type) and isinstance(dst.element_type, BFloat16Type | Float16Type) and src.rank == 2):
            _refuse(op, "only casts of 2-D f32 register tiles to bf16/f16, and between i32 and f32, are supported")
        half = "bf16" if isinstance(dst.element_type, BFloat16Type) else "f16"
        self._set(op.result, e.op(sm90.CvtPackOp(self._get(op.source), half)))

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

