"""convert-tile-to-sm90, the attention pieces: row reductions over quads, exponentials, scaling and
rescaling, masks, casts and reshapes."""

from __future__ import annotations

import math as pymath

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    BFloat16Type,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float8E4M3FNType,
    IndexType,
    IntegerType,
    f32,
    i32,
)
from xdsl.ir import OpResult, SSAValue

from tessera.dialects import sm90, tile
from tessera.dialects.tile_types import is_fp8
from tessera.lowering.emitter import Emitter
from tessera.lowering.fragments import quad_shuffle_offsets
from tessera.numerics import F32_LARGEST, LN2, LOG2E, exp2_factor
from tessera.passes.convert_tile_to_sm90.common import (
    RoundOnStore,
    Scaled,
    feeds_mma_a_only,
    refuse,
)


PACK_SLAB = 8
"""f32 registers `tile.cast` to bf16/f16 packs per `sm90.cvt_pack` (`_packed_in_slabs`)."""


def _packed_in_slabs(e: Emitter, source: SSAValue, half: str) -> SSAValue:
    """`sm90.cvt_pack` of `source`, one slab of `PACK_SLAB` registers at a time, the packed slabs joined by
    shuffles (no instruction, no register): each f32 register dies at its own slab's conversion where the
    source dies at the cast, so that the packed tile grows as the f32 one shrinks (the backward's P^T and
    dS^T: half a tile's registers less at the peak), not beside the whole of it."""
    lanes = source.type.get_shape()[0]
    if lanes <= PACK_SLAB:
        return e.op(sm90.CvtPackOp(source, half))
    # every slab shuffled out first (the allocator keeps liveness per value: the source then dies here, and
    # each slab at its own conversion)
    slabs = [e.shuffle(source, list(range(first, min(first + PACK_SLAB, lanes)))) for first in range(0, lanes, PACK_SLAB)]
    packed = None
    for slab in slabs:
        part = e.op(sm90.CvtPackOp(slab, half))
        if packed is None:
            packed = part
        else:
            n, m = packed.type.get_shape()[0], part.type.get_shape()[0]
            packed = e.shuffle(packed, list(range(n + m)), part)
    return packed


def combine_across_quad(x: SSAValue, combine, e: Emitter) -> SSAValue:
    """A row vector combined over the four threads of each quad (butterfly shuffles)."""
    for offset in quad_shuffle_offsets():
        x = combine(x, e.op(sm90.ShflSyncOp("bfly", x, offset)))
    return x


def _integer_rows(op) -> bool:
    """Whether a row reduction reduces an i32 tile (max.s32 / add.s32, wrapping)."""
    return isinstance(op.source.type.element_type, IntegerType)


class AttentionLowering:
    """The Attention handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _reduce_rows(self, op, x: SSAValue, combine, e: Emitter, across_quad: bool = True) -> SSAValue:
        """Each row's registers folded by `combine` in a halving tree (`row_fold_tree`), then across the quad by
        shuffles. Where the tile is read again (the softmax's scores and P), the tree is emitted a chunk at a
        time (`_fold`): only a chunk's partial results are live beside it (a block_n = 176 tile's 88 scores would
        otherwise carry 44 more registers through the row sum). Where the reduction is its last use (a layer
        norm's squares), level by level: each level's result takes the registers of the level before. An [BM, 1]
        column is held as a row vector already (one value per row), so its reduction is itself."""
        if self._is_column(op.source.type):
            return x
        layout = self._layout(op, op.source.type)
        rows = layout.row_of_element
        grouped = [v for r in range(2) for v in range(layout.lanes) if rows[v] == r]
        x = e.shuffle(x, grouped)
        source = op.source
        defined_here = source.owner.parent_block() is op.parent_block() if isinstance(source, OpResult) else False
        dies_here = defined_here and source.has_one_use()
        x = _fold(x, layout.lanes // 2, combine, e, chunk=None if dies_here else FOLD_CHUNK_LEAVES)
        return combine_across_quad(x, combine, e) if across_quad else x

    def _lower_RowMaxOp(self, op: tile.RowMaxOp, e: Emitter) -> None:
        x = self._peek(op.source)
        if isinstance(x, Scaled):  # max(f x) = f max(x) for f > 0: two multiplies instead of one per element
            rows = self._reduce_rows(op, x.raw, e.maxf, e)
            self._set(op.result, e.mulf(rows, e.splat(f32, x.factor, rows.type.get_shape()[0])))
            return
        combine = (lambda a, b: e.op(arith.MaxSIOp(a, b))) if _integer_rows(op) else e.maxf
        self._set(op.result, self._reduce_rows(op, self._get(op.source), combine, e))

    def _lower_RowMinOp(self, op: tile.RowMinOp, e: Emitter) -> None:
        """As the row maximum: a tree of min.NaN.f32 / min.s32, then across the quad (no `Scaled` shortcut)."""
        combine = arith.MinSIOp if _integer_rows(op) else arith.MinimumfOp
        self._set(op.result, self._reduce_rows(op, self._get(op.source), lambda a, b: e.op(combine(a, b)), e))

    def _lower_RowSumOp(self, op: tile.RowSumOp, e: Emitter) -> None:
        """Each row's registers added, then across the quad; a sum held as per-thread partial sums
        (`row_sums.partial_row_sums`) is added across the quad later, once."""
        partial = op.result in self.partial_rows
        combine = e.addi if _integer_rows(op) else e.addf
        self._set(op.result, self._reduce_rows(op, self._get(op.source), combine, e, across_quad=not partial))

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
        scaled_a = self._scaled_before_first_read(a, LOG2E, e)
        self._set(op.result, e.ex2(e.addf(scaled_a, self._neg_scaled_max(self._get(op.rhs), e))))

    @staticmethod
    def _scaled_before_first_read(a: SSAValue, factor: float, e: Emitter) -> SSAValue:
        """a factor, made right before the first op of the emitter's block that reads `a` (where there is one):
        the online softmax's alpha = exp(m - m') reads the old running maximum m after m' = max(m, rowmax) is
        made; with m log2e taken first, m dies at that max and the loop-carried m' gets m's registers (else
        each trip ends with a move per row, which ptxas keeps). The same ops, so the same values."""
        constant = arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(a.type, [factor] * a.type.get_shape()[0]))
        product = arith.MulfOp(a, constant.result)
        readers = {use.operation for use in a.uses if use.operation.parent_block() is e.block}
        first = next((o for o in e.block.ops if o in readers), None) if readers else None
        if first is None:
            e.op(constant)
            return e.op(product)
        e.block.insert_ops_before([constant, product], first)
        return product.result

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
            refuse(op, "only reshapes between a row vector [BM] and a column [BM, 1] are supported")
        self._set(op.result, self._get(op.source))

    def _lower_CastOp(self, op: tile.CastOp, e: Emitter) -> None:
        src, dst = op.source.type, op.result.type
        integer = {src.element_type, dst.element_type} == {i32, f32}
        if integer and self._vector_type(op, src).get_shape() == self._vector_type(op, dst).get_shape():
            # i32 -> f32 rounds to nearest even (cvt.rn.f32.s32), f32 -> i32 truncates (cvt.rzi.s32.f32)
            self._set(op.result, e.op(sm90.CvtOp(self._get(op.source), self._vector_type(op, dst))))
            return
        if isinstance(src.element_type, Float32Type) and is_fp8(dst.element_type) and src.rank == 2:
            # the A operand of an 8-bit P.V wgmma, in each thread's registers (keys in facts.P8_KEY_ORDER)
            fmt = "e4m3" if isinstance(dst.element_type, Float8E4M3FNType) else "e5m2"
            if _stored_only(op.result):  # a quantize epilogue: byte pairs, stored two bytes a register
                self._set(op.result, e.op(sm90.CvtPackOp(self._get(op.source), fmt)))
                return
            if not feeds_mma_a_only(op.result):
                refuse(op, "an 8-bit register tile is lowered as the A operand of an 8-bit tile.mma (its "
                            "registers hold the keys in the order facts.P8_KEY_ORDER), directly or through "
                            "the loop-carried values of scf.for/scf.if, or stored by tile.store_global only")
            self._set(op.result, e.op(sm90.CvtPackFp8Op(self._get(op.source), fmt)))
            return
        if not (isinstance(src.element_type, Float32Type) and isinstance(dst.element_type, BFloat16Type | Float16Type)):
            refuse(op, "only casts of f32 register tiles to bf16/f16 (and back), and between i32 and f32, are supported")
        half = "bf16" if isinstance(dst.element_type, BFloat16Type) else "f16"
        users = [use.operation for use in op.result.uses]
        if len(users) == 1 and isinstance(users[0], tile.StoreSharedOp) and users[0].value is op.result \
                and users[0].parent_block() is op.parent_block():
            self._set(op.result, RoundOnStore(self._get(op.source), half))  # packed by the store, a slab at a time
            return
        self._set(op.result, _packed_in_slabs(e, self._get(op.source), half))

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
        if _feeds_causal_mask(op):  # applied with it, one compare per register (_lower_MaskCausalOp)
            self.values[op.result] = self._peek(op.source)
            return
        _, col_offsets = self._thread_offsets(op, op.source.type)
        _, col = self._origin(e, e.index(0), self._get(op.k_start))
        limit = e.op(arith.SubiOp(self._get(op.seq_k), col))
        self._mask(op, e, _compare_per_distinct(e, "le", limit, col_offsets))

    def _lower_MaskCausalOp(self, op: tile.MaskCausalOp, e: Emitter) -> None:
        # Key k0 + c is hidden where k0 + c > q0 + r + seq_k - seq_q, i.e. where (c - r) > t with
        # t = q0 + r0 + seq_k - seq_q - k0 - c0 for the thread's first element (r0, c0).
        row_offsets, col_offsets = self._thread_offsets(op, op.source.type)
        row, col = self._origin(e, self._get(op.q_start), self._get(op.k_start))
        shift = e.op(arith.SubiOp(self._get(op.seq_k), self._get(op.seq_q)))
        t = e.op(arith.SubiOp(e.addi(row, shift), col))
        if isinstance(op.source, OpResult) and isinstance(op.source.owner, tile.MaskBoundsOp) and _feeds_causal_mask(
                op.source.owner):
            self._mask(op, e, self._hidden_causal_or_beyond(op.source.owner, t, col, row_offsets, col_offsets, e))
            return
        diagonal = [c - r for r, c in zip(row_offsets, col_offsets)]
        self._mask(op, e, _compare_per_distinct(e, "lt", t, diagonal))

    def _hidden_causal_or_beyond(self, bounds: tile.MaskBoundsOp, t: SSAValue, col: SSAValue, row_offsets: list[int],
                                 col_offsets: list[int], e: Emitter) -> SSAValue:
        """The causal mask and the bounds mask before it as one compare per register, as FlashAttention-3 masks:
        register i (row r_i, column c_i from the thread's first element) is hidden past the diagonal (c_i - r_i
        > t) or at a key past seq_k (c_i >= seq_k - k0 - c0 = limit), i.e. where c_i > min(t + r_i, limit - 1):
        a threshold per row (two per thread) against the constant columns. The same registers are hidden as by
        the two masks one after the other, so the result is the same bits."""
        limit = e.op(arith.SubiOp(self._get(bounds.seq_k), col))
        last = e.op(arith.SubiOp(limit, e.index(1)))
        lanes = len(col_offsets)
        thresholds = None
        for r in sorted(set(row_offsets)):
            row_threshold = e.broadcast(e.op(arith.MinSIOp(e.addi(t, e.index(r)), last)), lanes)
            thresholds = row_threshold if thresholds is None else e.shuffle(
                thresholds, [lanes + i if row_offsets[i] == r else i for i in range(lanes)], row_threshold)
        return e.setp("lt", thresholds, e.dense(IndexType(), col_offsets))



def _compare_per_distinct(e: Emitter, predicate: str, scalar: SSAValue, offsets: list[int]) -> SSAValue:
    """The predicate vector `scalar <predicate> offsets[i]` for each register i, with one compare per distinct
    offset: registers of equal offsets (a thread's two rows share their columns) share one predicate register
    through a shuffle (an alias, no instruction), where a compare per register printed each setp twice."""
    distinct = list(dict.fromkeys(offsets))
    hidden = e.setp(predicate, e.broadcast(scalar, len(distinct)), e.dense(IndexType(), distinct))
    if len(distinct) == len(offsets):
        return hidden
    lane = {offset: i for i, offset in enumerate(distinct)}
    return e.shuffle(hidden, [lane[offset] for offset in offsets])


FOLD_CHUNK_LEAVES = 8
"""`_fold` emits a subtree of at most this many leaves level by level (one op per level for both rows and all of
its nodes), larger ones depth first: the registers live beside the row's are then a chunk's first level (this
many per row) and one result per level of the path to the root."""


def row_fold_tree(size: int) -> tuple[list[tuple[int, int]], list[int]]:
    """The halving tree that folds one row's `size` registers into one: leaves are 0 .. size-1, internal node
    size + k is `nodes[k]` = (left, right), and `levels[k]` is the fold level that makes it. At each level the
    first half of the current values is combined with the second half (value i with value half + i); an odd
    count's last value joins the next level unchanged (a tile BN = 16 k wide has k registers per row, odd for
    BN = 48, 80, ...). The last node is the root (leaf 0 itself for size 1)."""
    nodes: list[tuple[int, int]] = []
    levels: list[int] = []
    current, level = list(range(size)), 0
    while len(current) > 1:
        half = len(current) // 2
        folded = []
        for i in range(half):
            nodes.append((current[i], current[half + i]))
            levels.append(level)
            folded.append(size + len(nodes) - 1)
        current = folded + ([current[-1]] if len(current) % 2 else [])
        level += 1
    return nodes, levels


def _fold(x: SSAValue, size: int, combine, e: Emitter, chunk: int | None = FOLD_CHUNK_LEAVES) -> SSAValue:
    """Both rows of `x` (row 0's `size` registers, then row 1's) folded by `row_fold_tree(size)`: each op
    combines the nodes of one level of one chunk for both rows (vectors [row 0's nodes, row 1's nodes]): the
    subtrees of at most `chunk` leaves level by level, larger ones depth first (chunk None: the whole tree
    level by level). Every node is combined from the same operands as a level-by-level fold, so the
    result is the same bits; only the order of the ops, and so the registers live at once, differ."""
    nodes, levels = row_fold_tree(size)
    if not nodes:
        return x
    place: dict[int, tuple[SSAValue, int]] = {leaf: (x, leaf) for leaf in range(size)}  # node -> (vector, lane)

    def gather(refs: list[int]) -> SSAValue:
        sources = list(dict.fromkeys(place[n][0] for n in refs))
        while len(sources) > 2:  # merge the first two into one vector of their lanes (an alias, no instruction)
            a, b = sources[0], sources[1]
            half_a, half_b = a.type.get_shape()[0] // 2, b.type.get_shape()[0] // 2
            merged = e.shuffle(a, [*range(half_a), *range(2 * half_a, 2 * half_a + half_b),
                                   *range(half_a, 2 * half_a), *range(2 * half_a + half_b, 2 * (half_a + half_b))], b)
            for n, (vec, lane) in list(place.items()):
                if vec is a:
                    place[n] = (merged, lane)
                elif vec is b:
                    place[n] = (merged, half_a + lane)
            sources = [merged, *sources[2:]]
        first = sources[0]
        width = first.type.get_shape()[0]
        def index(n: int, row: int) -> int:
            vec, lane = place[n]
            own = vec.type.get_shape()[0]
            return (0 if vec is first else width) + row * (own // 2) + lane
        indices = [index(n, row) for row in range(2) for n in refs]
        if len(sources) == 1 and indices == list(range(width)):
            return first
        return e.shuffle(first, indices, sources[1] if len(sources) > 1 else None)

    def emit(group: list[int]) -> None:
        pairs = [nodes[n - size] for n in group]
        result = combine(gather([a for a, _ in pairs]), gather([b for _, b in pairs]))
        for lane, n in enumerate(group):
            place[n] = (result, lane)

    def subtree(root: int) -> list[int]:
        if root < size:
            return []
        left, right = nodes[root - size]
        return subtree(left) + subtree(right) + [root]

    def by_level(group: list[int]) -> None:
        for level in sorted({levels[n - size] for n in group}):
            emit(sorted(n for n in group if levels[n - size] == level))

    leaves = [1] * size + [0] * len(nodes)
    for k, (left, right) in enumerate(nodes):
        leaves[size + k] = leaves[left] + leaves[right]

    def emit_tree(root: int) -> None:
        if root < size:
            return
        if chunk is None or leaves[root] <= chunk:
            by_level(subtree(root))
            return
        left, right = nodes[root - size]
        for child in sorted((left, right), key=lambda n: -leaves[n]):  # the larger subtree first
            emit_tree(child)
        emit([root])

    emit_tree(size + len(nodes) - 1)
    root = size + len(nodes) - 1
    return gather([root])


def _feeds_causal_mask(bounds: tile.MaskBoundsOp) -> bool:
    """Whether the bounds mask's only use is the tile a causal mask of the same key block and seq_k hides more
    of (the flash kernels' order: `tile.mask_bounds` then `tile.mask_causal`): then both are one compare."""
    use = bounds.result.get_unique_use() if bounds.result.has_one_use() else None
    causal = use.operation if use is not None else None
    return (isinstance(causal, tile.MaskCausalOp) and use.index == 0 and causal.k_start == bounds.k_start
            and causal.seq_k == bounds.seq_k and causal.parent_block() is bounds.parent_block())


def _stored_only(value: SSAValue) -> bool:
    """Whether `value` (an 8-bit register tile) is used, at least once, and only as the value of a
    tile.store_global: its registers may then hold byte pairs in the accumulator's order (`sm90.cvt_pack`), not P8's."""
    uses = list(value.uses)
    return bool(uses) and all(isinstance(u.operation, tile.StoreGlobalOp) and u.index == 0 for u in uses)
