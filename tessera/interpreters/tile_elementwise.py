"""Tile-interpreter semantics of the elementwise ops of `dialects/tile_elementwise.py` (a mixin of
`TileFunctions`).

Each function is evaluated in float64 on the f32 operands and rounded once to f32 (the exact function, rounded
to nearest even); a lowering's approximate instruction is within its documented bound of it
(`tessera.sm90.approx`). f32 add/sub/mul/div are IEEE; floor/ceil/rint/trunc are exact; i32 arithmetic wraps;
i32 floordiv/mod are Python's //
and % (a zero divisor gives 0). Broadcasting follows the op's docstring: a row vector [B, M] is read as
[B, M, 1]; a column vector [B, 1, N] broadcasts as it is.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.interpreter import Interpreter, PythonValues, impl

from tessera.dialects import tile
from tessera.dialects.tile_types import TileType
from tessera.numerics import numpy_dtype


def aligned_operand(value: np.ndarray, ty: TileType, result: TileType) -> np.ndarray:
    """A [B, *shape] operand shaped to broadcast against the [B, *result shape] result."""
    if ty.rank == 1 and result.rank == 2:
        return value[..., None]
    return value


def _signed_zero(result: np.ndarray, a: np.ndarray, b: np.ndarray, larger: bool) -> np.ndarray:
    """max/min of +0 and -0 orders -0 < +0 (numpy returns either)."""
    if result.dtype.kind != "f":
        return result
    zeros = (a == 0) & (b == 0)
    pick_negative = (np.signbit(a) & np.signbit(b)) if larger else (np.signbit(a) | np.signbit(b))
    return np.where(zeros, np.where(pick_negative, -0.0, 0.0).astype(result.dtype), result)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def integer_division(a: np.ndarray, b: np.ndarray, modulus: bool) -> np.ndarray:
    """Python's a // b (floor) or a % b (the divisor's sign) on i32, through int64; a zero divisor gives 0
    (NumPy's integer convention) and -2^31 // -1 wraps to -2^31."""
    a64, b64 = np.asarray(a, np.int64), np.asarray(b, np.int64)
    safe = np.where(b64 == 0, 1, b64)
    value = np.where(b64 == 0, 0, a64 % safe if modulus else a64 // safe)
    return value.astype(np.int32)


def shift(a: np.ndarray, b: np.ndarray, kind: str) -> np.ndarray:
    """PTX's `shl.b32` / `shr.s32` / `shr.u32` on i32 tiles, through int64: the amount read as unsigned and
    clamped to 32 (an amount of 32 or more gives 0, or a's sign for the arithmetic shift right)."""
    a64 = np.asarray(a, np.int64)
    amount = np.minimum(np.asarray(b, np.int64) & 0xFFFFFFFF, 32)
    if kind == "shl":
        bits = (a64 << amount) & 0xFFFFFFFF
    elif kind == "shru":
        bits = (a64 & 0xFFFFFFFF) >> amount
    else:  # shrs: an int64 shift by up to 32 fills with the sign, as shr.s32 by 32 does
        bits = (a64 >> amount) & 0xFFFFFFFF
    return bits.astype(np.uint32).view(np.int32)


_BINARY = {
    tile.AddOp: lambda a, b: a + b,
    tile.SubOp: lambda a, b: a - b,
    tile.MulOp: lambda a, b: a * b,
    tile.DivOp: lambda a, b: a / b,
    tile.FloorDivOp: lambda a, b: integer_division(a, b, False),
    tile.ModOp: lambda a, b: integer_division(a, b, True),
    tile.AndOp: lambda a, b: np.bitwise_and(a, b),
    tile.OrOp: lambda a, b: np.bitwise_or(a, b),
    tile.XorOp: lambda a, b: np.bitwise_xor(a, b),
    tile.ShlOp: lambda a, b: shift(a, b, "shl"),
    tile.ShrsOp: lambda a, b: shift(a, b, "shrs"),
    tile.ShruOp: lambda a, b: shift(a, b, "shru"),
    tile.ElementMaxOp: lambda a, b: _signed_zero(np.maximum(a, b), a, b, True),
    tile.ElementMinOp: lambda a, b: _signed_zero(np.minimum(a, b), a, b, False),
}

_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
            "ne": np.not_equal}

UNARY_FUNCTIONS = {
    tile.ExpOp: np.exp,
    tile.Exp2Op: np.exp2,
    tile.Log2Op: np.log2,
    tile.TanhOp: np.tanh,
    tile.SinOp: np.sin,
    tile.CosOp: np.cos,
    tile.ErfOp: lambda x: np.asarray(np.frompyfunc(math.erf, 1, 1)(x), np.float64),
    tile.SigmoidOp: _sigmoid,
    tile.SiluOp: lambda x: x * _sigmoid(x),
    tile.SqrtOp: np.sqrt,
    tile.RsqrtOp: lambda x: 1.0 / np.sqrt(x),
    tile.ReciprocalOp: lambda x: 1.0 / x,
    tile.FloorOp: np.floor,
    tile.CeilOp: np.ceil,
    tile.RintOp: np.rint,
    tile.TruncOp: np.trunc,
}
"""The exact function of each f32 unary op, evaluated in float64 (then rounded once to f32)."""


class ElementwiseFunctions:
    """The `@impl`s of the elementwise ops; mixed into `TileFunctions`, whose `batch` and `_register_tile`
    they use."""

    def _operands(self, op) -> tuple[TileType, list]:
        return op.result.type, [o.type for o in op.operands]

    def _binary(self, interpreter: Interpreter, op, args: PythonValues):
        result, types = self._operands(op)
        a, b = (aligned_operand(v, t, result) for v, t in zip(args, types))
        with np.errstate(all="ignore"):  # IEEE infinities and NaNs, and i32 wrap-around, as the hardware
            return self._register_tile(op, _BINARY[type(op)](a, b))

    for _op in _BINARY:
        locals()[f"run_{_op.__name__}"] = impl(_op)(_binary)

    def _unary(self, interpreter: Interpreter, op, args: PythonValues):
        with np.errstate(all="ignore"):
            value = UNARY_FUNCTIONS[type(op)](np.asarray(args[0], np.float64))
        return self._register_tile(op, value.astype(np.float32))

    for _op in UNARY_FUNCTIONS:
        locals()[f"run_{_op.__name__}"] = impl(_op)(_unary)
    del _op

    @impl(tile.AbsOp)
    def run_abs(self, interpreter: Interpreter, op: tile.AbsOp, args: PythonValues):
        return self._register_tile(op, np.abs(args[0]))

    @impl(tile.NegOp)
    def run_neg(self, interpreter: Interpreter, op: tile.NegOp, args: PythonValues):
        return self._register_tile(op, -args[0])

    @impl(tile.CmpOp)
    def run_cmp(self, interpreter: Interpreter, op: tile.CmpOp, args: PythonValues):
        result, types = self._operands(op)
        a, b = (aligned_operand(v, t, result) for v, t in zip(args, types))
        with np.errstate(invalid="ignore"):
            return self._register_tile(op, _COMPARE[op.predicate.data](a, b))

    @impl(tile.SelectOp)
    def run_select(self, interpreter: Interpreter, op: tile.SelectOp, args: PythonValues):
        result, types = self._operands(op)
        c, a, b = (aligned_operand(v, t, result) for v, t in zip(args, types))
        return self._register_tile(op, np.where(c, a, b))

    @impl(tile.IotaOp)
    def run_iota(self, interpreter: Interpreter, op: tile.IotaOp, args: PythonValues):
        ty = op.result.type
        shape = ty.get_shape()
        axis = op.axis_index
        coords = np.arange(shape[axis], dtype=np.int64).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        offset = self.batch.index_array(args[0] if args else 0).reshape((-1,) + (1,) * len(shape))
        value = np.broadcast_to(coords + offset, (self.batch.size,) + shape)
        return self._register_tile(op, value.astype(np.int64).astype(np.int32))  # i32 wraps, as the registers

    @impl(tile.SplatOp)
    def run_splat(self, interpreter: Interpreter, op: tile.SplatOp, args: PythonValues):
        ty = op.result.type
        dtype = numpy_dtype(ty.element_type)
        scalar = np.asarray(args[0])
        if scalar.ndim == 0:
            scalar = np.broadcast_to(scalar, (self.batch.size,))
        if dtype.kind == "i":
            scalar = scalar.astype(np.int64).astype(dtype)  # an index truncated to 32 bits
        value = np.broadcast_to(scalar.reshape((-1,) + (1,) * ty.rank), (self.batch.size,) + ty.get_shape())
        return self._register_tile(op, value.astype(dtype))
