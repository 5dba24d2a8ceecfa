"""A NumPy interpreter of Tessera's StableHLO subset (`dialects/stablehlo.py`), with `func.call` and
`stablehlo.composite` (which runs its decomposition).

    outputs = run_function(module, inputs)                   # the graph's own precision
    exact = run_function(module, inputs, exact=True)         # every float in float64, never rounded

Numerics. Values are NumPy arrays: floats of bf16/f16 are held as float32 arrays whose values are rounded
to the element type (nearest even) after every op that produces them, f32 as float32, f64 as float64,
integers in their width (ui32 as uint32), i1 as bool. Arithmetic on bf16/f16 runs in f32 and rounds the
result, as XLA's CPU backend does; `dot_general` multiplies exactly and sums in f32 (f64 for f64); `reduce`
folds in f32 and rounds once. With `exact=True` every float value is float64 and nothing is rounded (a
`convert` between float types does not round either): the float64 reference of the whole graph, against
which `tessera.graph.graph_runtime` judges the original and the rewritten graph alike. `optimization_barrier` is
the identity, and so is `custom_call @Sharding` (JAX's sharding annotation, on one device); `reduce_precision` rounds as XLA rounds (`reduce_precision`), and is the identity with `exact` (as a
`convert` is).

Ops outside the subset (opaque `stablehlo.*` ops) raise `GraphInterpretationError` naming the op and its
location. Ops of other dialects in the graph (Tessera's `tessera.attention`, its `custom_call` form) run
through `handlers`: a mapping from op name (or `custom_call` target) to `handler(op, operands, exact)`,
which returns the results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    AnyFloat,
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    ModuleOp,
    Signedness,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue

from tessera.ir.diagnostics import located
from tessera.numerics import BF16, F16, round_to

Handler = Callable[[Operation, list[np.ndarray], bool], Sequence[np.ndarray]]


class GraphInterpretationError(ValueError):
    """An op the interpreter cannot run, or inputs that do not fit the function: the message says where."""


def storage_dtype(element: Attribute, exact: bool = False) -> np.dtype:
    """The NumPy dtype that holds elements of `element` (see the module docstring)."""
    if isinstance(element, AnyFloat):
        if exact or isinstance(element, Float64Type):
            return np.dtype(np.float64)
        if isinstance(element, (BFloat16Type, Float16Type, Float32Type)):
            return np.dtype(np.float32)
        raise GraphInterpretationError(f"element type {element} is not supported by the StableHLO interpreter")
    if isinstance(element, IntegerType):
        width = element.width.data
        if width == 1:
            return np.dtype(np.bool_)
        unsigned = element.signedness.data == Signedness.UNSIGNED
        return np.dtype(f"{'u' if unsigned else ''}int{width}")
    raise GraphInterpretationError(f"element type {element} is not supported by the StableHLO interpreter")


def round_value(x: np.ndarray, type_: Attribute, exact: bool = False) -> np.ndarray:
    """`x` held as values of the tensor (or element) type `type_`: rounded to bf16/f16 where that is the
    element type (not with `exact`), converted to the storage dtype."""
    element = type_.element_type if isinstance(type_, TensorType) else type_
    dtype = storage_dtype(element, exact)
    x = np.asarray(x)
    if not exact and isinstance(element, (BFloat16Type, Float16Type)):
        x = round_to(x, BF16 if isinstance(element, BFloat16Type) else F16).astype(np.float32)
    elif np.issubdtype(dtype, np.integer) and not np.issubdtype(x.dtype, np.integer) and x.dtype != np.bool_:
        # toward zero; out of range saturates and NaN is 0 (XLA's conversion; NumPy's cast is undefined there)
        info, x = np.iinfo(dtype), np.trunc(np.asarray(x, np.float64))
        high, low = x >= float(info.max), x <= float(info.min)
        x = np.where(high, info.max, np.where(low, info.min, np.where(high | low | np.isnan(x), 0, x).astype(dtype)))
    return x.astype(dtype, copy=False)


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())


def constant_value(op: Operation, exact: bool = False) -> np.ndarray:
    """The value of a `stablehlo.constant` op as a NumPy array of its storage dtype."""
    attr = op.properties["value"]
    shape = tuple(attr.get_type().get_shape())
    values = attr.get_values()
    array = np.array(values[0] if attr.is_splat() or len(values) == 1 else values)
    array = np.broadcast_to(array, shape) if array.ndim == 0 else array.reshape(shape)
    return round_value(array, attr.get_type(), exact)


def reduce_kind(op: Operation) -> str:
    """The binary function a `reduce` body applies: add, maximum, minimum, multiply, and, or."""
    body = list(op.regions[0].block.ops)
    args = list(op.regions[0].block.args)
    if len(body) == 2 and body[1].name == "stablehlo.return" and body[0].name in (
            "stablehlo.add", "stablehlo.maximum", "stablehlo.minimum", "stablehlo.multiply", "stablehlo.and",
            "stablehlo.or") and set(body[0].operands) == set(args) and body[1].operands[0] is body[0].results[0]:
        return body[0].name.split(".")[1]
    raise GraphInterpretationError(located(op, "the interpreter runs reduce bodies that apply one add, maximum, "
                                               "minimum, multiply, and or or to their two arguments"))


def dot_general(op: Operation, lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """`dot_general` of two arrays by the op's dimension numbers (result in float64 or float32 as the inputs;
    integer inputs are multiplied and summed in the result's integer type, as StableHLO converts them to it:
    i8 x i8 -> i32 does not wrap at 8 bits)."""
    if lhs.dtype.kind in "iub" and rhs.dtype.kind in "iub":
        result = storage_dtype(op.results[0].type.element_type)
        lhs, rhs = lhs.astype(result), rhs.astype(result)
    d = op.dot_dimension_numbers
    lb, rb = d.dims("lhs_batching_dimensions"), d.dims("rhs_batching_dimensions")
    lc, rc = d.dims("lhs_contracting_dimensions"), d.dims("rhs_contracting_dimensions")
    lf = [i for i in range(lhs.ndim) if i not in lb + lc]
    rf = [i for i in range(rhs.ndim) if i not in rb + rc]
    batch = [lhs.shape[i] for i in lb]
    m = int(np.prod([lhs.shape[i] for i in lf], dtype=np.int64))
    n = int(np.prod([rhs.shape[i] for i in rf], dtype=np.int64))
    k = int(np.prod([lhs.shape[i] for i in lc], dtype=np.int64))
    nb = int(np.prod(batch, dtype=np.int64))
    a = np.ascontiguousarray(lhs.transpose(lb + lf + lc)).reshape(nb, m, k)
    b = np.ascontiguousarray(rhs.transpose(rb + rc + rf)).reshape(nb, k, n)
    out = np.empty((nb, m, n), np.result_type(a, b))
    for i in range(nb):
        np.matmul(a[i], b[i], out=out[i])
    return out.reshape(batch + [lhs.shape[i] for i in lf] + [rhs.shape[i] for i in rf])


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a^b; for integers a negative exponent gives 1/a^|b| truncated (0 but for a = 1 or -1), which NumPy
    refuses, and the rest wraps in the integer type as XLA's repeated squaring does."""
    if not (np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer)):
        return np.power(a, b)
    a, b = np.broadcast_arrays(a, b)
    negative = b < 0
    whole = np.power(a, np.where(negative, 0, b))
    odd = (np.abs(b) % 2).astype(bool)
    inverse = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)).astype(whole.dtype)
    return np.where(negative, inverse, whole)


_BINARY = {
    "stablehlo.add": np.add, "stablehlo.subtract": np.subtract, "stablehlo.multiply": np.multiply,
    "stablehlo.maximum": np.maximum, "stablehlo.minimum": np.minimum, "stablehlo.power": _power,
    "stablehlo.and": np.bitwise_and, "stablehlo.or": np.bitwise_or,
}
_UNARY = {
    "stablehlo.exponential": np.exp, "stablehlo.log": np.log, "stablehlo.negate": np.negative,
    "stablehlo.sqrt": np.sqrt, "stablehlo.rsqrt": lambda x: 1 / np.sqrt(x), "stablehlo.tanh": np.tanh,
    "stablehlo.logistic": lambda x: 1 / (1 + np.exp(-x)), "stablehlo.abs": np.abs,
    "stablehlo.not": lambda x: np.logical_not(x) if x.dtype == np.bool_ else np.invert(x),
}
_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "GE": np.greater_equal, "GT": np.greater, "LE": np.less_equal,
            "LT": np.less}


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """XLA's `reduce_precision` of a float32 or float64 array, on its bit pattern as XLA computes it: the mantissa
    rounded to `mantissa_bits` bits (nearest even; a subnormal's bits alike), then, where `exponent_bits` is narrower
    than the storage's, exponents above the narrow range give +-inf and those at or below its smallest normal +-0;
    NaN stays NaN. (bf16 and f16 values are held as float32: their own widths leave them as they are.)"""
    x = np.asarray(x)
    bits_type, exponent, mantissa = (np.uint32, 8, 23) if x.dtype == np.float32 else (np.uint64, 11, 52)
    bits = x.astype(np.float64 if bits_type is np.uint64 else np.float32).view(bits_type)
    one = bits_type(1)
    if mantissa_bits < mantissa:
        shift = bits_type(mantissa - mantissa_bits)
        last = one << shift
        bias = ((bits & last) >> shift) + (last >> one) - one
        bits = (bits + bias) & ~(last - one)
    if exponent_bits < exponent:
        exponent_mask = ((one << bits_type(exponent)) - one) << bits_type(mantissa)
        source_bias, narrow_bias = (1 << (exponent - 1)) - 1, (1 << (exponent_bits - 1)) - 1
        field = bits & exponent_mask
        sign = bits & (one << bits_type(exponent + mantissa))
        bits = np.where(field > bits_type(source_bias + narrow_bias) << bits_type(mantissa), sign | exponent_mask,
                        np.where(field <= bits_type(source_bias - narrow_bias) << bits_type(mantissa), sign, bits))
    y = np.asarray(bits, bits_type).view(np.float64 if bits_type is np.uint64 else np.float32)
    return np.where(np.isnan(x), x, y)


def _erf(x: np.ndarray) -> np.ndarray:
    from math import erf

    return np.vectorize(erf, otypes=[np.float64])(x)


class Interpreter:
    """Runs functions of one module (see the module docstring); `handlers` run non-StableHLO ops."""

    def __init__(self, module: ModuleOp | None, exact: bool = False, handlers: Mapping[str, Handler] | None = None):
        self.module = module
        self.exact = exact
        self.handlers = dict(handlers or {})
        self.functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)} \
            if module is not None else {}

    def call(self, name: str, args: Sequence[np.ndarray], at: Operation | None = None,
             entry: bool = False) -> list[np.ndarray]:
        """Run function `name` on `args` (converted to its argument types); returns its results. The arguments
        of the `entry` call are rounded to their element types even when `exact` (the graph's inputs are
        what its types hold); those of inner calls are passed as they are."""
        fn = self.functions.get(name)
        if fn is None or not fn.body.blocks:
            raise GraphInterpretationError(located(at, f"no function @{name} with a body in the module"))
        block = fn.body.blocks.first
        if len(args) != len(block.args):
            raise GraphInterpretationError(located(fn, f"@{name} takes {len(block.args)} arguments, got {len(args)}"))
        env: dict[SSAValue, np.ndarray] = {}
        for value, arg in zip(block.args, args):
            arg = np.asarray(arg)
            if arg.shape != _shape(value):
                raise GraphInterpretationError(located(fn, f"argument {value.index} of @{name} must have shape "
                                                           f"{list(_shape(value))}, got {list(arg.shape)}"))
            if entry:
                arg = round_value(arg, value.type)
            env[value] = round_value(arg, value.type, self.exact)
        return self.run_block(block, env)

    def run_block(self, block, env: dict[SSAValue, np.ndarray]) -> list[np.ndarray]:
        for op in block.ops:
            if op.name in ("func.return", "stablehlo.return"):
                return [env[v] for v in op.operands]
            operands = [env[v] for v in op.operands]
            results = self.run_op(op, operands)
            if len(results) != len(op.results):
                raise GraphInterpretationError(located(op, f"produced {len(results)} values for "
                                                           f"{len(op.results)} results"))
            for value, result in zip(op.results, results):
                result = np.asarray(result)
                if result.shape != _shape(value):
                    raise GraphInterpretationError(located(op, f"computed shape {list(result.shape)}, but the "
                                                               f"result type is {value.type}"))
                try:
                    env[value] = round_value(result, value.type, self.exact)
                except GraphInterpretationError as e:  # an element type it holds no values of (f8E4M3FN)
                    raise GraphInterpretationError(located(op, str(e))) from None
        raise GraphInterpretationError(located(block.parent_op(), "a block without a return"))

    def run_op(self, op: Operation, x: list[np.ndarray]) -> Sequence[np.ndarray]:
        """The results of one op on its operand values (before rounding to the result types)."""
        name = op.name
        if name in self.handlers:
            return self.handlers[name](op, x, self.exact)
        result_type = op.results[0].type if op.results else None
        if name in _BINARY:  # IEEE results (inf - inf is NaN), as the unary ops and divide: no NumPy warning
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                return [_BINARY[name](x[0], x[1])]
        if name == "stablehlo.divide":
            if np.issubdtype(x[0].dtype, np.integer):  # C's division, toward zero, exact at any width
                with np.errstate(divide="ignore"):
                    quotient = x[0] // x[1]
                    inexact = (quotient * x[1] != x[0]) & ((x[0] < 0) != (x[1] < 0)) & (x[1] != 0)
                return [quotient + inexact.astype(quotient.dtype)]
            with np.errstate(divide="ignore", invalid="ignore"):
                return [x[0] / x[1]]
        if name in _UNARY:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                return [_UNARY[name](x[0])]
        if name == "chlo.erf":
            return [_erf(x[0])]
        if name == "chlo.square":
            return [x[0] * x[0]]
        if name == "stablehlo.convert":
            return [x[0]]
        if name == "stablehlo.optimization_barrier":  # a fence for XLA's optimiser; its values pass unchanged
            return list(x)
        if name == "stablehlo.reduce_precision":  # (with `exact`, a narrower float is not rounded to: the identity)
            return [x[0] if self.exact else reduce_precision(x[0], op.exponent_bits.value.data,
                                                             op.mantissa_bits.value.data)]
        if name == "stablehlo.constant":
            return [constant_value(op, self.exact)]
        if name == "stablehlo.iota":
            shape = _shape(op.results[0])
            axis = op.iota_dimension.value.data
            index = np.arange(shape[axis]).reshape([-1 if i == axis else 1 for i in range(len(shape))])
            return [np.broadcast_to(index, shape)]
        if name == "stablehlo.broadcast_in_dim":
            shape = _shape(op.results[0])
            dims = [int(d) for d in op.broadcast_dimensions.get_values()]
            view = [1] * len(shape)
            for i, d in enumerate(dims):
                view[d] = x[0].shape[i]
            order = np.argsort(dims) if dims else []
            source = x[0].transpose(order) if len(dims) > 1 else x[0]
            return [np.broadcast_to(source.reshape(view), shape)]
        if name == "stablehlo.reshape":
            return [x[0].reshape(_shape(op.results[0]))]
        if name == "stablehlo.transpose":
            return [x[0].transpose([int(p) for p in op.permutation.get_values()])]
        if name == "stablehlo.slice":
            start, limit, strides = ([int(i) for i in a.get_values()]
                                     for a in (op.start_indices, op.limit_indices, op.strides))
            return [x[0][tuple(slice(a, b, c) for a, b, c in zip(start, limit, strides))]]
        if name == "stablehlo.select":
            return [np.where(x[0], x[1], x[2])]
        if name == "stablehlo.compare":
            return [_COMPARE[op.comparison_direction.word](x[0], x[1])]
        if name == "stablehlo.dot_general":
            return [dot_general(op, x[0], x[1])]
        if name == "stablehlo.reduce":
            return self._reduce(op, x)
        if name == "func.call":
            return self.call(op.callee.root_reference.data, x, op)
        if name == "stablehlo.composite":
            return self.call(op.decomposition.root_reference.data, x, op)
        if name == "stablehlo.custom_call":
            target = op.call_target_name.data
            if target in self.handlers:
                return self.handlers[target](op, x, self.exact)
            if target == "Sharding" and len(x) == len(op.results) == 1:  # a sharding annotation: the value itself
                return [x[0]]
            raise GraphInterpretationError(located(op, f"custom_call @{target} is not a target the StableHLO "
                                                       "interpreter runs (it runs @Sharding and Tessera's attention)"))
        del result_type
        if op.name == "builtin.unregistered":
            name = op.op_name.data
        raise GraphInterpretationError(located(op, f"'{name}' is not an op the StableHLO interpreter runs "
                                                   "(Tessera's subset: dialects/stablehlo.py)"))

    def _reduce(self, op: Operation, x: list[np.ndarray]) -> list[np.ndarray]:
        if len(x) != 2:
            raise GraphInterpretationError(located(op, "the interpreter runs reduce with one input and one init"))
        kind = reduce_kind(op)
        axes = tuple(int(d) for d in op.dimensions.get_values())
        data, init = x
        if kind == "add":
            out = data.sum(axis=axes) + init
        elif kind == "multiply":
            out = data.prod(axis=axes) * init
        elif kind == "maximum":
            out = np.maximum(data.max(axis=axes, initial=-np.inf) if data.dtype.kind == "f"
                             else data.max(axis=axes), init)
        elif kind == "minimum":
            out = np.minimum(data.min(axis=axes, initial=np.inf) if data.dtype.kind == "f"
                             else data.min(axis=axes), init)
        elif kind == "and":
            out = np.logical_and(data.all(axis=axes), init) if data.dtype == np.bool_ else \
                np.bitwise_and.reduce(data, axis=axes) & init
        else:
            out = np.logical_or(data.any(axis=axes), init) if data.dtype == np.bool_ else \
                np.bitwise_or.reduce(data, axis=axes) | init
        return [out]


def run_function(module: ModuleOp, inputs: Sequence[np.ndarray], *, exact: bool = False, function: str = "main",
                 handlers: Mapping[str, Handler] | None = None) -> list[np.ndarray]:
    """Run `function` of `module` on `inputs`; returns its results (see the module docstring)."""
    return Interpreter(module, exact, handlers).call(function, inputs, entry=True)


def entry_function(module: ModuleOp) -> func.FuncOp:
    """The function a graph runs: `@main` (as JAX names it), else the module's only public function."""
    functions = [op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks]
    for op in functions:
        if op.sym_name.data == "main":
            return op
    public = [op for op in functions if op.sym_visibility is None or op.sym_visibility.data == "public"]
    if len(public) == 1:
        return public[0]
    names = ", ".join(f"@{op.sym_name.data}" for op in public) or "none"
    raise GraphInterpretationError(f"the module has no @main and not exactly one public function ({names})")
