"""convert-tile-to-sm90, the elementwise vocabulary (`dialects/tile_elementwise.py`): math, compare/select,
coordinates and splats, register by register.

How a register tile is held decides how an operand broadcasts (`registers`): an [BM, N] tile in the
accumulator layout (N/2 registers a thread), a row vector [BM] or column [BM, 1] as the thread's two rows
(2 registers, shuffled onto the registers of each row to meet an [BM, N] operand), and a column vector [1, N]
as the values of the thread's distinct columns (N/4 registers, shuffled onto the registers of each column to
meet an [BM, N] operand): a gather indexed by columns (`doc_ids[kv_idx]`) loads each column once.

Instruction selection (f32): add/sub/mul `.rn` (x + u * f32(kv_idx - q_idx), the product used once, slab by slab
from the thread's scalar: `index_diagonals`), div `div.rn.f32` (IEEE; by a constant +-2^k whose reciprocal is a
normal f32, `mul.rn.f32` by that reciprocal: bit for bit the same quotient, `numerics.exact_reciprocal`, without
the division's slow-path call), element_max/min `max/min.NaN`; exp = ex2.approx(x log2 e) (a `tile.scale` factor
folds into the multiplier), exp2 = ex2.approx, log2 = lg2.approx, tanh = tanh.approx.f32, sigmoid = rcp.approx(1 +
ex2.approx(-x log2 e)), silu = x sigmoid(x), sqrt = sqrt.rn.f32, floor/ceil/rint/trunc =
`math.floor/ceil/roundeven/trunc` (`cvt.rmi/rpi/rni/rzi.f32.f32`), rsqrt = rsqrt.approx, reciprocal = rcp.approx,
abs/neg exact (i32 abs one `abs.s32`, |-2^31| wrapping to itself); i32 add/sub/mul/min/max wrap; i32 floordiv/mod
(Python's // and %) by a constant 2^k are `shr.s32` by k and `and.b32` with 2^k - 1 (exact for negative dividends
in two's complement), floordiv by another divisor `arith.floordivsi` (printed for a constant b > 0 as s ^ ((a ^ s)
/ b) with s = a >> 31, an unsigned division), mod by another divisor the truncated remainder with a sign fix-up,
and by a run-time divisor either behind a guard that gives 0 for a zero divisor; cmp = setp per register, select =
selp; iota = the thread's base row or column (the accumulator's thread terms, `facts.ACCUMULATOR_THREAD_TERMS`)
plus the offset, plus each register's constant offset in the fragment; splat = a broadcast of the scalar (an index
truncated to i32). The error bounds of the approximate instructions are in `tessera.sm90.approx`.
"""

from __future__ import annotations

from xdsl.dialects import arith, math, vector
from xdsl.dialects.builtin import Float32Type, IndexType, UnitAttr, f32, i32
from xdsl.ir import Block, Operation, SSAValue

from tessera.dialects import sm90, tile
from tessera.dialects.tile_types import MemSpace, TileType
from tessera.lowering.emitter import Emitter
from tessera.numerics import (ERF_SERIES, ERF_SERIES_LIMIT, ERFC_FIT, INV_TWO_PI, LOG2E, TWO_PI_HIGH, TWO_PI_LOW,
                              exact_reciprocal, exp2_factor)
from tessera.passes.convert_tile_to_sm90.common import (DISTINCT_LANES_ATTR, INVARIANT_ATTR, ColumnIota, Scaled,
                                                        refuse, constant_f32, constant_i32)
from tessera.passes.convert_tile_to_sm90.small_tiles import is_scalar
from tessera.passes.convert_tile_to_sm90.index_diagonals import ROW_VECTOR_ROWS, IndexDiagonalLowering

_FLOAT_BINARY = {
    tile.AddOp: arith.AddfOp, tile.SubOp: arith.SubfOp, tile.MulOp: arith.MulfOp, tile.DivOp: arith.DivfOp,
    tile.ElementMaxOp: arith.MaximumfOp, tile.ElementMinOp: arith.MinimumfOp,
}
_INTEGER_BINARY = {
    tile.AddOp: arith.AddiOp, tile.SubOp: arith.SubiOp, tile.MulOp: arith.MuliOp,
    tile.ElementMaxOp: arith.MaxSIOp, tile.ElementMinOp: arith.MinSIOp,
    tile.AndOp: arith.AndIOp, tile.OrOp: arith.OrIOp, tile.XorOp: arith.XOrIOp,
    tile.ShlOp: arith.ShLIOp, tile.ShrsOp: arith.ShRSIOp, tile.ShruOp: arith.ShRUIOp,  # PTX clamps amounts to 32
}

_ROUNDING = {tile.FloorOp: math.FloorOp, tile.CeilOp: math.CeilOp, tile.RintOp: math.RoundEvenOp,
             tile.TruncOp: math.TruncOp}
"""Rounding to an integral f32: upstream `math` on the registers, printed as `cvt.rmi/rpi/rni/rzi.f32.f32`."""


def _floored(e: Emitter, a: SSAValue, b: SSAValue, modulus: bool, constant: int | None = None) -> SSAValue:
    """floor(a / b) as `arith.floordivsi` (the PTX printer's sequence per register: by a constant b > 0
    s ^ ((a ^ s) / b) with s = a >> 31, else div/rem with a sign fix-up), or a - b floor(a / b) from the
    truncated remainder r (`rem.s32`; ptxas turns a division by a constant into a multiply-high): r + b where
    r is non-zero with a sign other than b's (for a constant b > 0 where r < 0, for b < 0 where r > 0, for a
    run-time b compared on predicates), so that no other [BM, BN] tile is live beside r. b has no zero."""
    if not modulus:  # one op: its sequence per register (the PTX printer) holds no other tile
        return e.op(arith.FloorDivSIOp(a, b))
    lanes = a.type.get_shape()[0]
    zero = e.splat(i32, 0, lanes)
    r = e.op(arith.RemSIOp(a, b))
    if constant is not None:
        wrong_sign = e.setp("lt" if constant > 0 else "gt", r, zero)
    else:
        signs_differ = e.op(arith.XOrIOp(e.setp("lt", r, zero), e.setp("lt", b, zero)))
        wrong_sign = e.andi(e.setp("ne", r, zero), signs_differ)
    return e.select(wrong_sign, e.op(arith.AddiOp(r, b)), r)


class ElementwiseLowering(IndexDiagonalLowering):
    """The elementwise handlers of `KernelLowering` (a mixin: it uses the kernel's state)."""

    def _kind(self, ty: TileType) -> str:
        if ty.rank == 1 or self._is_column(ty):
            return "row"
        return "column" if self._is_column_vector(ty) else "full"

    def _broadcast_operand(self, op: Operation, value: SSAValue, result: TileType, e: Emitter) -> SSAValue:
        """The lowered `value` laid out as the result's registers (module docstring)."""
        source, target = self._kind(value.type), self._kind(result)
        if source == "column" and target == "full" and isinstance(self.values.get(value), ColumnIota):
            return self._column_iota(self.values[value], e, self._layout(op, result).col_offsets)
        lowered = self._get(value)
        if source == target:
            return lowered
        if source == "column" and target == "full":  # each register the value of its column
            return e.shuffle(lowered, self._layout(op, result).distinct_columns[1])
        if source == "row" and target == "full":
            return e.shuffle(lowered, self._layout(op, result).row_of_element)
        if is_scalar(value.type) and target == "column":  # one value for the block, on every column
            return e.shuffle(lowered, [0] * self._vector_type(op, result).get_shape()[0])
        refuse(op, f"cannot broadcast {value.type} to {result}")

    def _f32_only(self, op: Operation) -> None:
        element = op.result.type.element_type
        if not isinstance(element, Float32Type):
            refuse(op, f"only f32 register tiles are lowered, got {element}")

    # -- arithmetic ------------------------------------------------------------------------------------------
    def _lower_binary(self, op, e: Emitter) -> None:
        if isinstance(op, tile.AddOp | tile.SubOp):
            diagonal = self._index_diagonal(op, e)
            if diagonal is None and isinstance(op.result.type.element_type, Float32Type):
                diagonal = self._scaled_diagonal_sum(op, e)
            if diagonal is not None:
                self._set(op.result, diagonal)
                return
        element = op.result.type.element_type
        divisor = constant_f32(op.rhs) if isinstance(op, tile.DivOp) else None
        reciprocal = None if divisor is None else exact_reciprocal(divisor)
        if reciprocal is not None and isinstance(element, Float32Type):
            lanes = self._vector_type(op, op.result.type).get_shape()[0]
            x = self._broadcast_operand(op, op.lhs, op.result.type, e)
            self._set(op.result, e.op(arith.MulfOp(x, e.splat(f32, reciprocal, lanes))))
            return
        a, b = (self._broadcast_operand(op, v, op.result.type, e) for v in (op.lhs, op.rhs))
        table = _FLOAT_BINARY if isinstance(element, Float32Type) else _INTEGER_BINARY
        if type(op) not in table or self._vector_type(op, op.result.type).element_type != element:
            refuse(op, f"no lowering of {op.name} on {element} register tiles")
        self._set(op.result, e.op(table[type(op)](a, b)))

    _lower_AddOp = _lower_SubOp = _lower_MulOp = _lower_DivOp = _lower_binary
    _lower_ElementMaxOp = _lower_ElementMinOp = _lower_binary
    _lower_AndOp = _lower_OrOp = _lower_XorOp = _lower_ShlOp = _lower_ShrsOp = _lower_ShruOp = _lower_binary

    def _lower_integer_division(self, op: tile.FloorDivOp | tile.ModOp, e: Emitter) -> None:
        """Python's a // b and a % b (module docstring): a constant divisor 2^k is a shift or a mask, another
        constant one division (ptxas turns a division by an immediate into a multiply), a constant 0 the
        constant 0; a divisor known only at run time is guarded (0 where it is 0, as the op's semantics say,
        and no division by zero is executed)."""
        modulus = isinstance(op, tile.ModOp)
        lanes = self._vector_type(op, op.result.type).get_shape()[0]
        a = self._broadcast_operand(op, op.lhs, op.result.type, e)
        d = constant_i32(op.rhs)
        if d == 0:
            self._set(op.result, e.splat(i32, 0, lanes))
            return
        if d is not None and d > 0 and d & (d - 1) == 0:  # two's complement: exact for negative a too
            if modulus:
                self._set(op.result, e.andi(a, e.splat(i32, d - 1, lanes)))
            else:
                self._set(op.result, e.op(arith.ShRSIOp(a, e.splat(i32, d.bit_length() - 1, lanes))))
            return
        if d is not None:
            self._set(op.result, _floored(e, a, e.splat(i32, d, lanes), modulus, d))
            return
        b = self._broadcast_operand(op, op.rhs, op.result.type, e)
        zero = e.splat(i32, 0, lanes)
        by_zero = e.setp("eq", b, zero)
        quotient = _floored(e, a, e.select(by_zero, e.splat(i32, 1, lanes), b), modulus)
        self._set(op.result, e.select(by_zero, zero, quotient))

    _lower_FloorDivOp = _lower_ModOp = _lower_integer_division

    def _splat_like(self, value: SSAValue, constant: float, e: Emitter) -> SSAValue:
        return e.splat(f32, constant, value.type.get_shape()[0])

    def _exp_of(self, x, e: Emitter, factor: float) -> SSAValue:
        """e^(factor raw) = ex2(raw f32(factor log2 e)) of a lowered or `Scaled` value."""
        if isinstance(x, Scaled):
            raw, factor = x.raw, factor * x.factor
            return e.ex2(e.mulf(raw, self._splat_like(raw, exp2_factor(factor), e)))
        return e.ex2(e.mulf(x, self._splat_like(x, exp2_factor(factor), e)))

    def _sigmoid_of(self, x: SSAValue, e: Emitter) -> SSAValue:
        return e.rcp(e.addf(self._splat_like(x, 1.0, e), self._exp_of(x, e, -1.0)))

    def _lower_ExpOp(self, op: tile.ExpOp, e: Emitter) -> None:
        self._set(op.result, self._exp_of(self._peek(op.source), e, 1.0))

    def _lower_Exp2Op(self, op: tile.Exp2Op, e: Emitter) -> None:
        self._set(op.result, e.ex2(self._get(op.source)))

    def _lower_Log2Op(self, op: tile.Log2Op, e: Emitter) -> None:
        self._set(op.result, e.op(sm90.Lg2ApproxOp(self._get(op.source))))

    def _lower_TanhOp(self, op: tile.TanhOp, e: Emitter) -> None:
        self._set(op.result, e.op(sm90.TanhApproxOp(self._get(op.source))))

    def _reduced_angle(self, x: SSAValue, e: Emitter) -> SSAValue:
        """x - n 2 pi with n = rint(x / 2 pi), as two fmas with 2 pi split into an f32 and its remainder (Cody
        and Waite): within about [-pi, pi] for |x| <= 2^24, where sin.approx/cos.approx are bounded
        (`tessera.sm90.approx.sin_cos_error_bound`)."""
        lanes = x.type.get_shape()[0]
        n = e.op(math.RoundEvenOp(e.mulf(x, e.splat(f32, INV_TWO_PI, lanes))))
        high = e.fma(n, e.splat(f32, -TWO_PI_HIGH, lanes), x)
        return e.fma(n, e.splat(f32, -TWO_PI_LOW, lanes), high)

    def _lower_SinOp(self, op: tile.SinOp, e: Emitter) -> None:
        self._set(op.result, e.op(sm90.SinApproxOp(self._reduced_angle(self._get(op.source), e))))

    def _lower_CosOp(self, op: tile.CosOp, e: Emitter) -> None:
        self._set(op.result, e.op(sm90.CosApproxOp(self._reduced_angle(self._get(op.source), e))))

    def _lower_ErfOp(self, op: tile.ErfOp, e: Emitter) -> None:
        """x Q(x^2) where |x| < 1, sign(x) (1 - t ex2((P(t) - x^2) log2 e)) with t = rcp(1 + |x| / 2) elsewhere
        (`tile.ErfOp`); both computed, one selected per register (NaN takes the second: NaN < 1 is false)."""
        x = self._get(op.source)
        lanes = x.type.get_shape()[0]

        def horner(coefficients: tuple[float, ...], v: SSAValue) -> SSAValue:
            acc = e.splat(f32, coefficients[-1], lanes)
            for c in reversed(coefficients[:-1]):
                acc = e.fma(acc, v, e.splat(f32, c, lanes))
            return acc

        z = e.op(math.AbsFOp(x))
        small = e.mulf(x, horner(ERF_SERIES, e.mulf(x, x)))
        t = e.rcp(e.fma(z, e.splat(f32, 0.5, lanes), e.splat(f32, 1.0, lanes)))
        argument = e.fma(e.op(arith.NegfOp(z)), z, horner(ERFC_FIT, t))
        erfc = e.mulf(t, e.ex2(e.mulf(argument, e.splat(f32, LOG2E, lanes))))
        magnitude = e.subf(e.splat(f32, 1.0, lanes), erfc)
        negative = e.setp("lt", x, e.splat(f32, 0.0, lanes))
        large = e.select(negative, e.op(arith.NegfOp(magnitude)), magnitude)
        self._set(op.result, e.select(e.setp("lt", z, e.splat(f32, ERF_SERIES_LIMIT, lanes)), small, large))

    def _lower_SigmoidOp(self, op: tile.SigmoidOp, e: Emitter) -> None:
        self._set(op.result, self._sigmoid_of(self._get(op.source), e))

    def _lower_SiluOp(self, op: tile.SiluOp, e: Emitter) -> None:
        x = self._get(op.source)
        self._set(op.result, e.mulf(x, self._sigmoid_of(x, e)))

    def _lower_SqrtOp(self, op: tile.SqrtOp, e: Emitter) -> None:
        self._set(op.result, e.op(math.SqrtOp(self._get(op.source))))

    def _lower_rounding(self, op: tile.FloorOp | tile.CeilOp | tile.RintOp | tile.TruncOp, e: Emitter) -> None:
        self._set(op.result, e.op(_ROUNDING[type(op)](self._get(op.source))))

    _lower_FloorOp = _lower_CeilOp = _lower_RintOp = _lower_TruncOp = _lower_rounding

    def _lower_RsqrtOp(self, op: tile.RsqrtOp, e: Emitter) -> None:
        self._set(op.result, e.op(sm90.RsqrtApproxOp(self._get(op.source))))

    def _lower_ReciprocalOp(self, op: tile.ReciprocalOp, e: Emitter) -> None:
        self._set(op.result, e.rcp(self._get(op.source)))

    def _lower_AbsOp(self, op: tile.AbsOp, e: Emitter) -> None:
        x = self._get(op.source)
        if isinstance(op.result.type.element_type, Float32Type):
            self._set(op.result, e.op(math.AbsFOp(x)))
            return
        self._set(op.result, e.op(math.AbsIOp(x)))  # one abs.s32 holds one value, max(x, 0 - x) three

    def _lower_NegOp(self, op: tile.NegOp, e: Emitter) -> None:
        x = self._get(op.source)
        if isinstance(op.result.type.element_type, Float32Type):
            shuffled = x.owner if isinstance(x.owner, vector.ShuffleOp) and x.owner.v1 is x.owner.v2 else None
            if shuffled is not None:
                # -shuffle(v) = shuffle(-v): a broadcast tile (`tile.load_broadcast`'s distinct columns) is negated
                # once per distinct register, and stays as few registers as it was loaded into
                negated = e.op(arith.NegfOp(shuffled.v1))
                self._set(op.result, e.shuffle(negated, [int(i) for i in shuffled.mask.get_values()]))
                return
            self._set(op.result, e.op(arith.NegfOp(x)))
            return
        self._set(op.result, e.op(arith.SubiOp(e.splat(i32, 0, x.type.get_shape()[0]), x)))

    # -- compare and select ----------------------------------------------------------------------------------
    def _lower_CmpOp(self, op: tile.CmpOp, e: Emitter) -> None:
        folded = self._index_comparison(op, e)
        if folded is not None:
            self._set(op.result, folded)
            return
        a, b = (self._broadcast_operand(op, v, op.result.type, e) for v in (op.lhs, op.rhs))
        self._set(op.result, e.setp(op.predicate.data, a, b))

    def _lower_SelectOp(self, op: tile.SelectOp, e: Emitter) -> None:
        c, a, b = (self._broadcast_operand(op, v, op.result.type, e) for v in (op.condition, op.lhs, op.rhs))
        self._set(op.result, e.select(c, a, b))

    def _select_tiles(self, op: arith.SelectOp, e: Emitter) -> None:
        """`arith.select %c, %a, %b` of two register tiles by one i1 scalar (the same choice for every element):
        sm90.selp register by register, the condition broadcast to each register."""
        if op.result.type.memory_space != MemSpace.REGISTER:
            refuse(op, f"arith.select chooses between register tiles only, got {op.result.type.memory_space.value} "
                        "tiles (select the indices of a view instead)")
        a, b = self._get(op.lhs), self._get(op.rhs)
        self._set(op.result, e.select(e.broadcast(self._get(op.cond), a.type.get_shape()[0]), a, b))

    # -- coordinates and splats ------------------------------------------------------------------------------
    def _lower_IotaOp(self, op: tile.IotaOp, e: Emitter) -> None:
        """base + offset once per thread (an index, cast to i32), broadcast, plus each register's constant
        offset in the fragment; a coordinate the tile does not vary along (rows of [1, N], columns of
        [BM, 1]) is the offset alone."""
        ty = op.result.type
        kind, rows = self._kind(ty), op.axis.data == "rows"
        lanes = self._vector_type(op, ty).get_shape()[0]
        if kind == "row":
            base, offsets = (self.row_base, ROW_VECTOR_ROWS) if rows else (None, [0] * lanes)
        elif kind == "column":  # the thread's distinct columns
            base, offsets = (None, [0] * lanes) if rows else (self.col_base, self._layout(op, ty).distinct_columns[0])
        else:
            layout = self._layout(op, ty)
            base = self.row_base if rows else self.col_base
            offsets = layout.row_offsets if rows else layout.col_offsets
        start = base
        if op.offset is not None:
            offset = self._get(op.offset)
            start = offset if base is None else e.addi(base, offset)
        start = e.index(0) if start is None else start
        if kind == "column" and not rows:  # laid out where it is used (ColumnIota)
            self._set(op.result, ColumnIota(e.op(arith.IndexCastOp(start, i32)), ty.get_shape()[1], op.result.name_hint))
            return
        value = e.broadcast(e.op(arith.IndexCastOp(start, i32)), lanes)
        if any(offsets):
            value = e.op(arith.AddiOp(value, e.dense(i32, list(offsets))))
        self._set(op.result, value)

    @staticmethod
    def _column_iota(iota: ColumnIota, e: Emitter, offsets: list[int]) -> SSAValue:
        """A `ColumnIota`'s registers at these column offsets from the thread's first column."""
        value = e.broadcast(iota.start, len(offsets))
        value = e.op(arith.AddiOp(value, e.dense(i32, list(offsets)))) if any(offsets) else value
        value.name_hint = iota.name
        return value

    def _lower_SplatOp(self, op: tile.SplatOp, e: Emitter) -> None:
        scalar = self._get(op.value)
        if isinstance(scalar.type, IndexType):
            scalar = e.op(arith.IndexCastOp(scalar, i32))
        splat = e.broadcast(scalar, self._vector_type(op, op.result.type).get_shape()[0])
        splat.owner.attributes[DISTINCT_LANES_ATTR] = UnitAttr()
        self._set(op.result, splat)

    # -- gathers ---------------------------------------------------------------------------------------------
    def _table_access(self, op: Operation, arg: int, indices, ty: TileType, e: Emitter):
        """(base, byte offsets, mask) of the elements of a 32-bit table (kernel argument `arg`) at per-element
        coordinates `indices`, one per register of a tile of type `ty`: the indices, laid out as its registers, give
        the row-major element index (i32: tables of at most 2^31 - 1 elements) and the mask 0 <= index_k < size_k
        for every dimension k (`tile.gather`'s reads, `tile.scatter_add`'s additions)."""
        lanes = self._vector_type(op, ty).get_shape()[0]
        flat, inside = None, None
        for k, index in enumerate(indices):
            i = self._broadcast_operand(op, index, ty.with_(element_type=i32), e)
            size = e.op(arith.IndexCastOp(self._dim_value(arg, k, e), i32))
            sizes = e.broadcast(size, lanes)
            ok = e.andi(e.setp("ge", i, e.splat(i32, 0, lanes)), e.setp("lt", i, sizes))
            inside = ok if inside is None else e.andi(inside, ok)
            flat = i if flat is None else e.op(arith.AddiOp(e.op(arith.MuliOp(flat, sizes)), i))
        offsets = e.op(arith.MuliOp(flat, e.splat(i32, 4, lanes)))
        return self.entry_args[self.pointer_args[arg]], offsets, inside

    def _lower_GatherOp(self, op: tile.GatherOp, e: Emitter) -> None:
        """One predicated `ld.global.b32` per register of the result: the indices, laid out as the result's
        registers, give the row-major element index (i32: tables of at most 2^31 - 1 elements) and the
        predicate 0 <= index_k < size_k for every dimension k; a register whose coordinates fall outside the
        table is 0 (the op's semantics), as `sm90.ld_global` leaves an unpredicated register."""
        if not isinstance(op.source.owner, Block):
            refuse(op, "tile.gather must read a kernel argument")
        result = op.result.type
        vector_type = self._vector_type(op, result)
        base, offsets, inside = self._table_access(op, op.source.index, op.indices, result, e)
        loaded = e.op(sm90.LdGlobalOp(base, offsets, inside, vector_type))
        loaded.owner.attributes[INVARIANT_ATTR] = UnitAttr()  # an input of the kernel, never written
        self._set(op.result, loaded)
