"""Upstream `arith`, `math` and `vector` on per-thread registers, with the machine's widths and roundings.

Every op is one or a few NumPy calls over all threads (arrays [T] or [T, N], see `registers`). Integers wrap
at their width (i32 and `index` at 32 bits, i64 at 64); shifts by the width or more give 0 (or the sign for
`shrsi`), as PTX `shl`/`shr` clamp the amount; division by zero in an active thread is an error. f32 ops round
to f32 after each op (IEEE round to nearest even); `math.fma`/`vector.fma` multiply exactly and round once
(through float64: exact product, then one rounding, except in the rare double-rounding case of a sum that is
not representable in float64). `maximumf`/`minimumf` propagate NaN and order -0 < +0 (MLIR semantics; PTX
`max.NaN.f32`); `maxnumf`/`minnumf` return the non-NaN operand (PTX `max.f32`). `fptosi`/`fptoui` truncate
and saturate, NaN to 0 (PTX `cvt.rzi`).
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects import arith, math, vector
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr, IntegerAttr
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.ir import Operation

from tessera.interpreters.sm90.cta import CtaState
from tessera.interpreters.sm90.registers import (
    bit_width,
    concatenated_lanes,
    dtype_of,
    full,
    row_mask,
    thread_shape,
    unsigned,
)
from tessera.interpreters.truth import all_set, any_set
from tessera.sm90.nan import with_canonical_nans

_SIGNED_PREDICATES = (np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal)


def _shift_left(a, s, w):
    return np.where(s >= w, 0, a << np.minimum(s, w - 1).astype(a.dtype))


def _shift_right_signed(a, s, w):
    return a >> np.minimum(s, w - 1).astype(a.dtype)


def _shift_right_unsigned(a, s, w):
    u = unsigned(a)
    return np.where(s >= w, 0, u >> np.minimum(s, w - 1).astype(u.dtype)).astype(u.dtype).view(a.dtype)


def _trunc_div(a, b):
    q = np.abs(a.astype(np.int64)) // np.abs(b.astype(np.int64))
    return np.where((a < 0) != (b < 0), -q, q)


def _floor_div(a, b):
    return a.astype(np.int64) // b.astype(np.int64)


def _ceil_div(a, b):
    return -(-a.astype(np.int64) // b.astype(np.int64))


def _unsigned_div(a, b):
    return unsigned(a) // unsigned(b)


def _unsigned_ceil_div(a, b):
    ua, ub = unsigned(a).astype(np.uint64), unsigned(b).astype(np.uint64)
    return (ua + ub - 1) // ub


_INTEGER = {
    arith.AddiOp: lambda a, b, w: a + b,
    arith.SubiOp: lambda a, b, w: a - b,
    arith.MuliOp: lambda a, b, w: a * b,
    arith.AndIOp: lambda a, b, w: a & b,
    arith.OrIOp: lambda a, b, w: a | b,
    arith.XOrIOp: lambda a, b, w: a ^ b,
    arith.ShLIOp: lambda a, b, w: _shift_left(a, unsigned(b).astype(np.int64), w),
    arith.ShRSIOp: lambda a, b, w: _shift_right_signed(a, unsigned(b).astype(np.int64), w),
    arith.ShRUIOp: lambda a, b, w: _shift_right_unsigned(a, unsigned(b).astype(np.int64), w),
    arith.MinSIOp: lambda a, b, w: np.minimum(a, b),
    arith.MaxSIOp: lambda a, b, w: np.maximum(a, b),
    arith.MinUIOp: lambda a, b, w: np.minimum(unsigned(a), unsigned(b)),
    arith.MaxUIOp: lambda a, b, w: np.maximum(unsigned(a), unsigned(b)),
    arith.DivSIOp: lambda a, b, w: _trunc_div(a, b),
    arith.RemSIOp: lambda a, b, w: a.astype(np.int64) - _trunc_div(a, b) * b.astype(np.int64),
    arith.DivUIOp: lambda a, b, w: _unsigned_div(a, b),
    arith.RemUIOp: lambda a, b, w: unsigned(a) % unsigned(b),
    arith.FloorDivSIOp: lambda a, b, w: _floor_div(a, b),
    arith.CeilDivSIOp: lambda a, b, w: _ceil_div(a, b),
    arith.CeilDivUIOp: lambda a, b, w: _unsigned_ceil_div(a, b),
}
_DIVISIONS = frozenset((arith.DivSIOp, arith.RemSIOp, arith.DivUIOp, arith.RemUIOp, arith.FloorDivSIOp,
                        arith.CeilDivSIOp, arith.CeilDivUIOp))
"""By exact type, as `_INTEGER` is looked up (xDSL's op classes make `isinstance` cost microseconds)."""
_UNSIGNED_DIVISIONS = frozenset((arith.DivUIOp, arith.RemUIOp, arith.CeilDivUIOp))
"""The `_DIVISIONS` on unsigned operands: with no zero divisor they cannot overflow, nor warn."""
_SHIFTS = frozenset((arith.ShLIOp, arith.ShRSIOp, arith.ShRUIOp))
"""The `_INTEGER` ops that read the bit width (the others are given 0)."""


_ZERO_BITS = {size: (np.dtype(ints), ints(np.iinfo(ints).min), ints(0))
              for size, ints in ((2, np.int16), (4, np.int32), (8, np.int64))}
"""Per float size: the signed integer as wide (its bits), and the bits of -0 (the integer's minimum) and +0."""


def _signed_zero_order(result, a, b, larger: bool):
    """max/min of +0 and -0: +0 is the larger. NumPy's choice between +0 and -0 can be wrong only where it gave -0
    for the larger (+0 for the smaller): one comparison of the result's bits with that zero's tells that none is
    (the usual), without a test of zeros and signs."""
    ints, negative_zero, positive_zero = _ZERO_BITS[result.dtype.itemsize]
    if not np.count_nonzero(result.view(ints) == (negative_zero if larger else positive_zero)):
        return result
    zeros = (a == 0) & (b == 0)
    pick = (np.signbit(a) & np.signbit(b)) if larger else (np.signbit(a) | np.signbit(b))
    return np.where(zeros, np.where(pick, -0.0, 0.0).astype(result.dtype), result)


def canonical_nan(x: np.ndarray) -> np.ndarray:
    """An f32 result with every NaN the hardware's canonical NaN (`tessera.sm90.nan`: an f32 add, sub, mul, div,
    min, max or fma with a NaN result gives 0x7fffffff, no payload of its inputs; NumPy keeps an input's payload
    or makes 0xffc00000), as the PTX executor's f32 arithmetic gives it; other dtypes as they are."""
    return with_canonical_nans(x) if x.dtype == np.float32 else x


_FLOAT = {
    arith.AddfOp: lambda a, b: a + b,
    arith.SubfOp: lambda a, b: a - b,
    arith.MulfOp: lambda a, b: a * b,
    arith.DivfOp: lambda a, b: a / b,
    arith.MaximumfOp: lambda a, b: _signed_zero_order(np.maximum(a, b), a, b, True),
    arith.MinimumfOp: lambda a, b: _signed_zero_order(np.minimum(a, b), a, b, False),
    arith.MaxnumfOp: lambda a, b: _signed_zero_order(np.fmax(a, b), a, b, True),
    arith.MinnumfOp: lambda a, b: _signed_zero_order(np.fmin(a, b), a, b, False),
}


def _cmpf(predicate: int, a, b):
    unordered = np.isnan(a) | np.isnan(b)
    name = arith.CMPF_COMPARISON_OPERATIONS[predicate]
    if name in ("false", "true"):
        return np.full(np.broadcast(a, b).shape, name == "true")
    if name in ("ord", "uno"):
        return ~unordered if name == "ord" else unordered
    compare = {"eq": np.equal, "gt": np.greater, "ge": np.greater_equal, "lt": np.less, "le": np.less_equal,
               "ne": np.not_equal}[name[1:]]
    with np.errstate(invalid="ignore"):
        result = compare(a, b)
    return (result & ~unordered) if name[0] == "o" else (result | unordered)


def fused_multiply_add(a, b, c):
    """a * b + c with one rounding to the result type: the product exact in float64, c added there in place
    (the operands widened inside the ufuncs' loops, not into three float64 temporaries: 4x less time at [384,
    64]; the same float64 operations, so the same bits)."""
    total = np.multiply(a, b, dtype=np.float64)
    if isinstance(total, np.ndarray) and np.broadcast_shapes(total.shape, np.shape(c)) == total.shape:
        np.add(total, c, out=total)
    else:
        total = total + np.asarray(c).astype(np.float64)
    return total.astype(a.dtype)


def saturating_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        clipped = np.clip(np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0)), info.min, info.max)
    return clipped.astype(dtype)


def read_only(view: np.ndarray) -> np.ndarray:
    """`view` (of a register value) marked read-only: values are never written in place, and a view of one
    must not become the first exception."""
    view.flags.writeable = False
    return view


def shuffle_plan(op: vector.ShuffleOp, lanes: int) -> tuple[int, slice] | tuple[int, np.ndarray] | np.ndarray:
    """The lanes `op` takes from the first operand of `lanes` lanes and the second: (0 or 1, a slice) where they
    are lanes of one operand at a constant ascending step (lanes 0 and 2 of four: `0:3:2`; taken as a view, whose
    lanes need not be contiguous, as those of a gather's result, which NumPy lays out lane-major, are not
    either), (2, a slice of the second) where they are all of the first's then the second's first lanes (a
    concatenation), (3, the mask) where they are all lanes of the first operand otherwise (a gather from it
    alone), else the mask as indices into both; decoded once per op and mask attribute (kept on the op) instead
    of at every run."""
    attribute = op.properties["mask"]  # (xDSL's accessor `mask` costs 3x)
    cached = op.__dict__.get("_tessera_shuffle")
    if cached is not None and cached[0] is attribute and cached[1] == lanes:
        return cached[2]
    mask = np.asarray(attribute.get_values(), np.intp)
    plan: tuple | np.ndarray = mask
    step = int(mask[1] - mask[0]) if len(mask) > 1 else 1
    if (len(mask) and mask[0] >= 0 and step >= 1 and all_set(np.diff(mask) == step)
            and (mask[0] >= lanes or mask[-1] < lanes)):
        second = int(mask[0] >= lanes)
        start = int(mask[0]) - second * lanes
        plan = (second, slice(start, start + step * (len(mask) - 1) + 1, step))
    elif len(mask) > lanes and all_set(mask == np.arange(len(mask))):
        plan = (2, slice(0, len(mask) - lanes))
    elif all_set(mask < lanes):
        mask.flags.writeable = False
        plan = (3, mask)
    op.__dict__["_tessera_shuffle"] = (attribute, lanes, plan)
    return plan


def folded_lanes(op: vector.ShuffleOp, plan: np.ndarray, lanes: int) -> np.ndarray:
    """The lanes of a gather `plan` (`shuffle_plan`) of `op` taken from one operand of `lanes` lanes where both
    operands are the same value, kept on the op with its plan."""
    cached = op.__dict__.get("_tessera_shuffle_folded")
    if cached is not None and cached[0] is plan:
        return cached[1]
    folded = np.where(plan < lanes, plan, plan - lanes)
    op.__dict__["_tessera_shuffle_folded"] = (plan, folded)
    return folded


def _constant(op: arith.ConstantOp, threads: int) -> np.ndarray:
    """`op`'s value in every one of `threads` threads, read-only, kept on the op for its attribute, type and
    thread count (the CTAs of a launch, and later launches, share it)."""
    (result,) = op.results  # (xDSL's accessors `result`, `value` and its `results[0]` cost 2x)
    ty, attr = result.type, op.properties["value"]
    cached = op.__dict__.get("_tessera_constant")
    if cached is not None and cached[0] is attr and cached[1] is ty and cached[2] == threads:
        return cached[3]
    if isinstance(attr, (IntegerAttr, FloatAttr)):
        value = full(ty, threads, attr.value.data)
    elif isinstance(attr, DenseIntOrFPElementsAttr):
        elements = np.asarray(attr.get_values())
        value = np.empty(thread_shape(ty, threads), dtype_of(ty))
        value[...] = elements.astype(np.int64).astype(value.dtype) if value.dtype.kind in "iub" \
            else elements.astype(value.dtype)
    else:
        raise NotImplementedError(f"arith.constant {attr} in the CTA simulator")
    value.setflags(write=False)
    op.__dict__["_tessera_constant"] = (attr, ty, threads, value)
    return value


@register_impls
class RegisterArithFunctions(InterpreterFunctions):
    """`arith`, `math.fma` and `vector` ops on the registers of a CTA."""

    def __init__(self, cta: CtaState):
        super().__init__()
        self.cta = cta

    def _result(self, op: Operation, value: np.ndarray) -> tuple[np.ndarray]:
        (result,) = op.results  # (xDSL's `results[0]` is a Python call)
        return (np.asarray(value).astype(dtype_of(result.type), copy=False),)

    # region constants and integers
    @impl(arith.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: arith.ConstantOp, args: PythonValues):
        return (_constant(op, self.cta.threads),)


    def _integer(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        a, b = args
        kind = type(op)
        division = kind in _DIVISIONS
        if division and np.count_nonzero(b) != b.size:  # some divisor is zero: an error where its thread is active
            zero = (b == 0) & row_mask(self.cta.active, b)
            if any_set(zero):
                self.cta.fail(op, "divides by zero", np.argmax(zero.reshape(len(zero), -1).any(axis=1)))
            b = np.where(b == 0, np.ones((), b.dtype), b)
        dtype = a.dtype
        boolean = dtype.kind == "b"
        if boolean:
            a, b = a.astype(np.int8), b.astype(np.int8)
        width = bit_width(op.results[0].type) if kind in _SHIFTS else 0
        if (division and kind not in _UNSIGNED_DIVISIONS) or a.ndim == 0 or b.ndim == 0:
            with np.errstate(all="ignore"):  # may warn (an overflowing signed division, scalar math)
                result = _INTEGER[kind](a, b, width)
        else:  # arithmetic on arrays wraps without warnings (NumPy does not check it); unsigned division by
            # nonzero divisors (zeros were replaced above) cannot warn
            result = _INTEGER[kind](a, b, width)
        result = np.asarray(result)  # (a new array: no operation above returns an operand)
        if boolean:
            return ((result & 1).astype(bool),)
        return (result.astype(np.int64).astype(dtype) if result.dtype.kind == "u" and dtype.kind == "i"
                else result.astype(dtype, copy=False),)

    for _op in _INTEGER:
        locals()[f"run_{_op.__name__}"] = impl(_op)(_integer)

    @impl(arith.CmpiOp)
    def run_cmpi(self, interpreter: Interpreter, op: arith.CmpiOp, args: PythonValues):
        a, b = args
        predicate = op.predicate.value.data
        if predicate >= 6:
            a, b = unsigned(a), unsigned(b)
        return (_SIGNED_PREDICATES[(predicate - 4) if predicate >= 6 else predicate](a, b),)

    @impl(arith.SelectOp)
    def run_select(self, interpreter: Interpreter, op: arith.SelectOp, args: PythonValues):
        cond, a, b = args
        if cond.shape != a.shape:
            cond = row_mask(cond, a)
        return (np.where(cond, a, b),)

    # endregion
    # region floats
    def _float(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        # overflows and invalid operations are IEEE results, not warnings: the strands run under
        # np.errstate(all="ignore") (`strands`)
        return (canonical_nan(self._result(op, _FLOAT[type(op)](*args))[0]),)

    for _op in _FLOAT:
        locals()[f"run_{_op.__name__}"] = impl(_op)(_float)
    del _op

    @impl(arith.NegfOp)
    def run_negf(self, interpreter: Interpreter, op: arith.NegfOp, args: PythonValues):
        return (-args[0],)

    @impl(math.AbsFOp)
    def run_absf(self, interpreter: Interpreter, op: math.AbsFOp, args: PythonValues):
        return (np.abs(args[0]),)

    @impl(math.AbsIOp)
    def run_absi(self, interpreter: Interpreter, op: math.AbsIOp, args: PythonValues):
        with np.errstate(all="ignore"):  # the most negative value is itself, as PTX `abs.s32` wraps
            return (np.abs(args[0]),)

    @impl(math.FloorOp)
    def run_floor(self, interpreter: Interpreter, op: math.FloorOp, args: PythonValues):
        return self._result(op, np.floor(args[0]))

    @impl(math.CeilOp)
    def run_ceil(self, interpreter: Interpreter, op: math.CeilOp, args: PythonValues):
        return self._result(op, np.ceil(args[0]))

    @impl(math.RoundEvenOp)
    def run_roundeven(self, interpreter: Interpreter, op: math.RoundEvenOp, args: PythonValues):
        return self._result(op, np.rint(args[0]))

    @impl(math.TruncOp)
    def run_trunc(self, interpreter: Interpreter, op: math.TruncOp, args: PythonValues):
        return self._result(op, np.trunc(args[0]))

    @impl(math.SqrtOp)
    def run_sqrt(self, interpreter: Interpreter, op: math.SqrtOp, args: PythonValues):
        """IEEE sqrt (PTX `sqrt.rn.f32`): the float64 root of an f32 rounded once more is correctly rounded."""
        with np.errstate(invalid="ignore"):
            return self._result(op, np.sqrt(args[0].astype(np.float64)))

    @impl(arith.CmpfOp)
    def run_cmpf(self, interpreter: Interpreter, op: arith.CmpfOp, args: PythonValues):
        return (_cmpf(op.predicate.value.data, *args),)

    @impl(math.FmaOp)
    def run_math_fma(self, interpreter: Interpreter, op: math.FmaOp, args: PythonValues):
        return (canonical_nan(fused_multiply_add(*args)),)

    @impl(vector.FMAOp)
    def run_vector_fma(self, interpreter: Interpreter, op: vector.FMAOp, args: PythonValues):
        return (canonical_nan(fused_multiply_add(*args)),)

    # endregion
    # region conversions
    def _integer_resize(self, interpreter: Interpreter, op: Operation, args: PythonValues):
        """index_cast/extsi/trunci: sign-extend or truncate (two's complement)."""
        (x,) = args
        target = dtype_of(op.results[0].type)
        if target == np.bool_:
            return ((x & 1).astype(bool),)
        if x.dtype == np.bool_:
            return (np.where(x, -1, 0).astype(target) if isinstance(op, arith.ExtSIOp) else x.astype(target),)
        return (x.astype(np.int64).astype(target),)

    for _op in (arith.IndexCastOp, arith.ExtSIOp, arith.TruncIOp):
        locals()[f"run_{_op.__name__}"] = impl(_op)(_integer_resize)
    del _op

    @impl(arith.ExtUIOp)
    def run_extui(self, interpreter: Interpreter, op: arith.ExtUIOp, args: PythonValues):
        return (unsigned(args[0]).astype(np.uint64).astype(dtype_of(op.result.type)),)

    @impl(arith.SIToFPOp)
    def run_sitofp(self, interpreter: Interpreter, op: arith.SIToFPOp, args: PythonValues):
        return self._result(op, args[0].astype(np.int64) if args[0].dtype == np.bool_ else args[0])

    @impl(arith.UIToFPOp)
    def run_uitofp(self, interpreter: Interpreter, op: arith.UIToFPOp, args: PythonValues):
        return self._result(op, unsigned(args[0]))

    @impl(arith.FPToSIOp)
    def run_fptosi(self, interpreter: Interpreter, op: arith.FPToSIOp, args: PythonValues):
        return (saturating_to_int(args[0], dtype_of(op.result.type)),)

    @impl(arith.FPToUIOp)
    def run_fptoui(self, interpreter: Interpreter, op: arith.FPToUIOp, args: PythonValues):
        target = dtype_of(op.result.type)
        return (saturating_to_int(args[0], np.dtype(f"u{target.itemsize}")).view(target),)

    @impl(arith.ExtFOp)
    def run_extf(self, interpreter: Interpreter, op: arith.ExtFOp, args: PythonValues):
        return self._result(op, args[0])

    @impl(arith.TruncFOp)
    def run_truncf(self, interpreter: Interpreter, op: arith.TruncFOp, args: PythonValues):
        with np.errstate(over="ignore"):
            return self._result(op, args[0])

    @impl(arith.BitcastOp)
    def run_bitcast(self, interpreter: Interpreter, op: arith.BitcastOp, args: PythonValues):
        return (args[0].view(dtype_of(op.result.type)),)

    # endregion
    # region vector: registers of one thread
    @impl(vector.BroadcastOp)
    def run_broadcast(self, interpreter: Interpreter, op: vector.BroadcastOp, args: PythonValues):
        (x,) = args
        shape = thread_shape(op.vector.type, self.cta.threads)
        source = x if x.ndim == 2 else x[:, None]
        return (np.broadcast_to(source, shape).copy(),)

    def _position(self, op, args_positions) -> tuple[np.ndarray | int, ...]:
        return tuple(p if isinstance(p, int) else args_positions.pop(0) for p in op.get_mixed_position())

    def _index(self, op: Operation, position, size: int):
        if isinstance(position, int):
            return position
        bad = ((position < 0) | (position >= size)) & self.cta.active
        if any_set(bad):
            self.cta.fail(op, f"position {int(position[np.argmax(bad)])} is outside the {size} registers", bad)
        return np.clip(position, 0, size - 1)

    @impl(vector.ExtractOp)
    def run_extract(self, interpreter: Interpreter, op: vector.ExtractOp, args: PythonValues):
        source, *dynamic = args
        (position,) = self._position(op, list(dynamic))
        index = self._index(op, position, source.shape[1])
        if isinstance(index, int):
            return (source[:, index].copy(),)
        return (source[np.arange(len(source)), index],)

    @impl(vector.InsertOp)
    def run_insert(self, interpreter: Interpreter, op: vector.InsertOp, args: PythonValues):
        value, dest, *dynamic = args
        (position,) = self._position(op, list(dynamic))
        index = self._index(op, position, dest.shape[1])
        result = dest.copy()
        if isinstance(index, int):
            result[:, index] = value
        else:
            result[np.arange(len(dest)), index] = value
        return (result,)

    @impl(vector.ShuffleOp)
    def run_shuffle(self, interpreter: Interpreter, op: vector.ShuffleOp, args: PythonValues):
        v1, v2 = args  # a scalar operand (one lane) as a vector of one: no generator at each of ~700 runs a launch
        v1, v2 = (v1 if v1.ndim == 2 else v1[:, None]), (v2 if v2.ndim == 2 else v2[:, None])
        plan = shuffle_plan(op, v1.shape[1])
        if isinstance(plan, tuple):
            kind, lanes = plan
            if kind == 3:  # lanes of the first operand only: a gather from it
                return (v1[:, lanes],)
            if kind == 2:  # a concatenation: no gather
                return (concatenated_lanes(v1, v2[:, lanes]),)
            return (read_only((v2 if kind else v1)[:, lanes]),)  # lanes of one operand: a view, no copy
        if args[0] is args[1]:
            return (v1[:, folded_lanes(op, plan, v1.shape[1])],)
        return (np.concatenate([v1, v2], axis=1)[:, plan],)

    # endregion
