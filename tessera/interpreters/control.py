"""`scf` and `arith` on a batch of blocks: index values are [B] arrays, and loops may run a different number
of trips in each block (blocks past their last trip are inactive until the loop ends)."""

from __future__ import annotations

import operator

import numpy as np
from xdsl.dialects import arith, func, scf
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    ReturnedValues,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.dialects.builtin import FloatAttr, IntegerAttr
from xdsl.utils.exceptions import InterpretationError

from tessera.interpreters.block_batch import BlockBatch
from tessera.interpreters.limits import MAX_LOOP_TRIPS


def _floordiv(a, b):
    return np.floor_divide(a, b)


def _ceildiv(a, b):
    return -np.floor_divide(-np.asarray(a), b)


def _truncdiv(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((np.asarray(a) < 0) != (np.asarray(b) < 0), -q, q)


def _truncrem(a, b):
    return np.asarray(a) - _truncdiv(a, b) * np.asarray(b)


_BINARY = {
    arith.AddiOp: operator.add,
    arith.SubiOp: operator.sub,
    arith.MuliOp: operator.mul,
    arith.DivSIOp: _truncdiv,
    arith.DivUIOp: _floordiv,
    arith.RemSIOp: _truncrem,
    arith.RemUIOp: np.remainder,
    arith.FloorDivSIOp: _floordiv,
    arith.CeilDivSIOp: _ceildiv,
    arith.CeilDivUIOp: _ceildiv,
    arith.MinSIOp: np.minimum,
    arith.MaxSIOp: np.maximum,
    arith.MinUIOp: np.minimum,
    arith.MaxUIOp: np.maximum,
    arith.AndIOp: np.bitwise_and,
    arith.OrIOp: np.bitwise_or,
    arith.XOrIOp: np.bitwise_xor,
}
_FLOAT_BINARY = {
    arith.AddfOp: np.add,
    arith.SubfOp: np.subtract,
    arith.MulfOp: np.multiply,
    arith.DivfOp: np.divide,
    arith.MaximumfOp: np.maximum,  # NaN if either is NaN
    arith.MinimumfOp: np.minimum,
    arith.MaxnumfOp: np.fmax,  # the other operand if one is NaN
    arith.MinnumfOp: np.fmin,
}
"""Scalar f32 arithmetic (a value `tile.splat` spreads over a tile): f32 NumPy scalars or [B] arrays, IEEE."""
_DIVISIONS = (arith.DivSIOp, arith.DivUIOp, arith.RemSIOp, arith.RemUIOp, arith.FloorDivSIOp,
              arith.CeilDivSIOp, arith.CeilDivUIOp)
_PREDICATES = {0: np.equal, 1: np.not_equal, 2: np.less, 3: np.less_equal, 4: np.greater,
               5: np.greater_equal, 6: np.less, 7: np.less_equal, 8: np.greater, 9: np.greater_equal}
_FLOAT_PREDICATES = {1: np.equal, 2: np.greater, 3: np.greater_equal, 4: np.less, 5: np.less_equal, 6: np.not_equal}
"""arith.cmpf's ordered predicates (false where either operand is NaN); 8-13 are their unordered forms, true where
either is NaN; 0/15 are false/true, 7/14 ord/uno."""


def _simplify(value):
    """Keep a value that is the same in every block as a plain Python int or bool."""
    value = np.asarray(value)
    if value.ndim == 0:
        return value.item()
    return value


@register_impls
class BatchedControlFunctions(InterpreterFunctions):
    """Integer `arith` and `scf.for`/`scf.if`/`scf.yield` for a `BlockBatch`. Index arithmetic is exact
    (Python/NumPy int64); unsigned ops assume non-negative operands, as index values in kernels are. Scalar f32
    add/sub/mul/div/max/min/neg and sitofp/uitofp round to f32 (`_FLOAT_BINARY`); cmpf and fptosi are exact."""

    def __init__(self, batch: BlockBatch):
        super().__init__()
        self.batch = batch

    # -- arith --------------------------------------------------------------------------------------------
    @impl(arith.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: arith.ConstantOp, args: PythonValues) -> PythonValues:
        value = op.value
        if isinstance(value, IntegerAttr):
            return (value.value.data,)
        if isinstance(value, FloatAttr):
            return (np.float32(value.value.data),)
        raise InterpretationError(f"arith.constant of {value} is not supported by the Tile interpreter")

    def _binary(self, interpreter: Interpreter, op, args: PythonValues) -> PythonValues:
        lhs, rhs = args
        if isinstance(op, _DIVISIONS):
            zero = self.batch.active & (self.batch.index_array(rhs) == 0)
            if zero.any():
                self.batch.fail(op, "divides by zero", zero)
            rhs = np.where(np.asarray(rhs) == 0, 1, rhs)
        return (_simplify(_BINARY[type(op)](lhs, rhs)),)

    for _op_type in _BINARY:
        locals()[f"run_{_op_type.__name__}"] = impl(_op_type)(_binary)
    del _op_type

    def _float_binary(self, interpreter: Interpreter, op, args: PythonValues) -> PythonValues:
        with np.errstate(all="ignore"):  # IEEE infinities and NaNs, as f32 registers
            return (_simplify(_FLOAT_BINARY[type(op)](*(np.float32(a) if np.ndim(a) == 0 else a for a in args))),)

    for _op_type in _FLOAT_BINARY:
        locals()[f"run_{_op_type.__name__}"] = impl(_op_type)(_float_binary)
    del _op_type

    @impl(arith.NegfOp)
    def run_negf(self, interpreter: Interpreter, op: arith.NegfOp, args: PythonValues) -> PythonValues:
        return (_simplify(-np.float32(args[0]) if np.ndim(args[0]) == 0 else -args[0]),)

    @impl(arith.SIToFPOp)
    def run_sitofp(self, interpreter: Interpreter, op: arith.SIToFPOp, args: PythonValues) -> PythonValues:
        """An integer (index or i32) to f32, rounded to nearest even (as cvt.rn.f32.s32)."""
        return (_simplify(np.asarray(args[0], np.int64).astype(np.float32)),)

    @impl(arith.CmpiOp)
    def run_cmpi(self, interpreter: Interpreter, op: arith.CmpiOp, args: PythonValues) -> PythonValues:
        return (_simplify(_PREDICATES[op.predicate.value.data](*args)),)

    @impl(arith.CmpfOp)
    def run_cmpf(self, interpreter: Interpreter, op: arith.CmpfOp, args: PythonValues) -> PythonValues:
        a, b = (np.asarray(x, np.float32) for x in args)
        predicate = op.predicate.value.data
        unordered = np.isnan(a) | np.isnan(b)
        if predicate in (0, 15):
            result = np.broadcast_to(predicate == 15, np.broadcast(a, b).shape)
        elif predicate in (7, 14):
            result = ~unordered if predicate == 7 else unordered
        elif predicate < 7:
            result = _FLOAT_PREDICATES[predicate](a, b) & ~unordered
        else:
            result = _FLOAT_PREDICATES[predicate - 7](a, b) | unordered
        return (_simplify(result),)

    @impl(arith.UIToFPOp)
    def run_uitofp(self, interpreter: Interpreter, op: arith.UIToFPOp, args: PythonValues) -> PythonValues:
        """A non-negative integer (index values are) to f32, rounded to nearest even (cvt.rn.f32.u32)."""
        return (_simplify(np.asarray(args[0], np.int64).astype(np.float32)),)

    @impl(arith.FPToSIOp)
    def run_fptosi(self, interpreter: Interpreter, op: arith.FPToSIOp, args: PythonValues) -> PythonValues:
        """f32 to a signed integer, rounded toward zero and saturated to the result's range, NaN to 0 (as
        cvt.rzi.s32.f32)."""
        width = op.result.type.width.data if hasattr(op.result.type, "width") else 64
        low, high = -(2 ** (width - 1)), 2 ** (width - 1) - 1
        x = np.asarray(args[0], np.float64)
        with np.errstate(invalid="ignore"):
            value = np.where(np.isnan(x), 0, np.clip(np.trunc(x), low, high))
        return (_simplify(value.astype(np.int64)),)

    @impl(arith.SelectOp)
    def run_select(self, interpreter: Interpreter, op: arith.SelectOp, args: PythonValues) -> PythonValues:
        cond, a, b = args
        if isinstance(cond, bool):
            return (a if cond else b,)
        return (self.batch.select(np.asarray(cond, bool), a, b),)

    @impl(arith.IndexCastOp)
    def run_index_cast(self, interpreter: Interpreter, op: arith.IndexCastOp, args: PythonValues) -> PythonValues:
        return args

    # -- scf ----------------------------------------------------------------------------------------------
    @impl(scf.ForOp)
    def run_for(self, interpreter: Interpreter, op: scf.ForOp, args: PythonValues) -> PythonValues:
        batch = self.batch
        lb, ub, step = (batch.index_array(v) for v in args[:3])
        values = tuple(args[3:])
        bad_step = batch.active & (step <= 0)
        if bad_step.any():
            batch.fail(op, "loop step must be positive", bad_step)
        trips = np.where(batch.active, np.maximum(0, _ceildiv(ub - lb, np.maximum(step, 1))), 0)
        if trips.max(initial=0) > MAX_LOOP_TRIPS:
            batch.fail(op, f"would run {int(trips.max())} trips, more than the interpreters' limit of {MAX_LOOP_TRIPS} "
                           "(tessera.interpreters.limits.MAX_LOOP_TRIPS)", trips > MAX_LOOP_TRIPS)
        uniform = bool((trips[batch.active] == trips.max()).all()) if batch.active.any() else True
        for i in range(int(trips.max(initial=0))):
            taking = trips > i
            iv = _simplify(lb + i * step)
            if uniform:
                values = interpreter.run_ssacfg_region(op.body, (iv, *values), "for_loop")
                continue
            batch.push(taking)
            try:
                new = interpreter.run_ssacfg_region(op.body, (iv, *values), "for_loop")
            finally:
                batch.pop()
            values = tuple(batch.select(taking, n, o) for n, o in zip(new, values))
        return values

    @impl(scf.IfOp)
    def run_if(self, interpreter: Interpreter, op: scf.IfOp, args: PythonValues) -> PythonValues:
        batch = self.batch
        cond = np.broadcast_to(np.asarray(args[0], bool), (batch.size,))
        results = []
        for region, mask in ((op.true_region, cond), (op.false_region, ~cond)):
            if not region.blocks or not (batch.active & mask).any():
                results.append(None)
                continue
            batch.push(mask)
            try:
                results.append(interpreter.run_ssacfg_region(region, (), "if"))
            finally:
                batch.pop()
        then_values, else_values = results
        if not op.results:
            return ()
        if then_values is None:
            return else_values
        if else_values is None:
            return then_values
        return tuple(batch.select(cond, t, e) for t, e in zip(then_values, else_values))

    @impl_terminator(scf.YieldOp)
    def run_yield(self, interpreter: Interpreter, op: scf.YieldOp, args: PythonValues):
        return ReturnedValues(args), ()

    @impl_terminator(func.ReturnOp)
    def run_return(self, interpreter: Interpreter, op: func.ReturnOp, args: PythonValues):
        return ReturnedValues(args), ()
