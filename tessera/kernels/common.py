"""What every kernel builder shares: argument checking, a small IR builder, kernel signatures, verification.

`TileBuilder` wraps xDSL's explicit `Builder` (no `ImplicitBuilder`, so helper code never inserts ops by
accident): each method inserts one op at the end of the current block, gives its result a name hint and returns
the result value. `kernel_function` creates the `func.func` with the argument attributes and kernel attributes
that `tessera.kernel_abi` reads; `finish_kernel` verifies the ops and the signature before a builder returns.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.builder import Builder
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    IndexType,
    ModuleOp,
    StringAttr,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint

from tessera.dialects import tile
from tessera.dialects.tile_types import (
    DYNAMIC,
    SWIZZLE_BYTES,
    DimsAttr,
    MemSpace,
    TileType,
    element_byte_width,
)
from tessera.kernel_abi import (
    DIMS_ATTR, GRID_ATTR, KERNEL_ATTR, LAUNCH_SIZES_ATTR, MULTIPLES_ATTR, ROLE_ATTR, KernelSignature, signature,
)
from tessera.numerics import F32_LARGEST

# region Argument checking

DTYPES: dict[str, type[Attribute]] = {"bf16": BFloat16Type, "f16": Float16Type}
"""Element types a kernel's tensors may have (the tensor-core input types)."""

f32 = Float32Type()
index = IndexType()


def check_choice(name: str, value: object, choices: Sequence[object]) -> None:
    """Raise ValueError unless `value` is one of `choices` and of its type: bools never count as ints, nor
    floats (64.0 == 64, but a float head_dim would reach the IR's dimension attributes and fail there)."""
    if not any(type(value) is type(choice) and value == choice for choice in choices):
        supported = ", ".join(repr(c) if isinstance(c, str) else str(c) for c in choices)
        raise ValueError(f"{name} must be one of {supported}; got {value!r}")


def check_dtype(dtype: object) -> Attribute:
    """The element type named by `dtype` ("bf16" or "f16"); ValueError otherwise."""
    check_choice("dtype", dtype, tuple(DTYPES))
    return DTYPES[dtype]()  # type: ignore[index]


def check_block(name: str, value: object) -> int:
    """A block size: a positive multiple of 16 (the tensor-core k/n granule); ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value % 16:
        raise ValueError(f"{name} must be a positive multiple of 16; got {value!r}")
    return value


def check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return value


F32_SMALLEST = float(np.finfo(np.float32).smallest_subnormal)
"""With F32_LARGEST, the range of positive f32 values, in which a kernel's scale attribute must lie."""


def check_scale(scale: object, head_dim: int) -> float:
    """The softmax scale: `scale` (a Python or NumPy real number, such as `1 / np.sqrt(np.float32(d))`), or
    1/sqrt(head_dim) when it is None; ValueError unless positive and finite."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if (isinstance(scale, bool | np.bool_) or not isinstance(scale, numbers.Real) or not math.isfinite(scale)
            or scale <= 0):
        raise ValueError(f"scale must be a positive finite number, or None for 1/sqrt(head_dim); got {scale!r}")
    if not F32_SMALLEST <= scale <= F32_LARGEST:  # the kernels hold the scale as an f32
        raise ValueError(f"scale must be representable as an f32 (between {F32_SMALLEST:.7g} and "
                         f"{F32_LARGEST:.8g}); got {scale!r}")
    return float(scale)


# endregion
# region Types


def widest_swizzle(row_bytes: int) -> int:
    """The largest swizzle width (bytes) that divides a shared tile's rows; 0 when none does."""
    return max((s for s in SWIZZLE_BYTES if s and row_bytes % s == 0), default=0)


def shared_tile(shape: Sequence[int], element_type: Attribute) -> TileType:
    """A shared tile laid out with the widest swizzle its rows allow (none for a one-row tile, as
    `assign-swizzle` lays it out)."""
    row_bytes = shape[-1] * element_byte_width(element_type)
    one_row = len(shape) >= 2 and shape[-2] == 1
    return TileType(shape, element_type, MemSpace.SHARED, 0 if one_row else widest_swizzle(row_bytes))


def register_tile(shape: Sequence[int], element_type: Attribute = f32) -> TileType:
    return TileType(shape, element_type, MemSpace.REGISTER)


def global_tensor(static_shape: Sequence[int | None], element_type: Attribute) -> TileType:
    """A global tensor type; None marks a dynamic (`?`) dimension."""
    return TileType([DYNAMIC if d is None else d for d in static_shape], element_type, MemSpace.GLOBAL)


# endregion
# region Building


class TileBuilder:
    """Inserts ops at the end of one block; every method returns the (named) result value."""

    def __init__(self, block: Block, parent: TileBuilder | None = None):
        self.block = block
        self._builder = Builder(InsertPoint.at_end(block))
        # Index constants live in the kernel's entry block, so every nested loop body can use them.
        self._root = parent._root if parent is not None else self
        self._constants: dict[int, SSAValue] = {}

    def emit(self, op: Operation, name: str | None = None) -> SSAValue | None:
        self._builder.insert(op)
        if not op.results:
            return None
        if name is not None:
            op.results[0].name_hint = name
        return op.results[0]

    # -- index arithmetic ---------------------------------------------------------------------------------
    def const(self, value: int) -> SSAValue:
        """An index constant, emitted once in the kernel's entry block (reused when asked again).

        Loop bodies are built before their `scf.for` is inserted, so a constant first asked for inside a
        body still lands before the loop."""
        root = self._root
        if value not in root._constants:
            op = arith.ConstantOp.from_int_and_width(value, index)
            root._constants[value] = root.emit(op, f"c{value}")
        return root._constants[value]

    def muli(self, a, b, name=None):
        return self.emit(arith.MuliOp(a, b), name)

    def addi(self, a, b, name=None):
        return self.emit(arith.AddiOp(a, b), name)

    def subi(self, a, b, name=None):
        return self.emit(arith.SubiOp(a, b), name)

    def ceildivui(self, a, b, name=None):
        return self.emit(arith.CeilDivUIOp(a, b), name)

    def ceildivsi(self, a, b, name=None):
        return self.emit(arith.CeilDivSIOp(a, b), name)

    def divui(self, a, b, name=None):
        return self.emit(arith.DivUIOp(a, b), name)

    def remui(self, a, b, name=None):
        return self.emit(arith.RemUIOp(a, b), name)

    def maxsi(self, a, b, name=None):
        return self.emit(arith.MaxSIOp(a, b), name)

    def minsi(self, a, b, name=None):
        return self.emit(arith.MinSIOp(a, b), name)

    # -- identity, sizes, memory --------------------------------------------------------------------------
    def program_id(self, axis: str, name: str) -> SSAValue:
        return self.emit(tile.ProgramIdOp(axis), name)

    def dim(self, tensor: SSAValue, axis: int, name: str) -> SSAValue:
        return self.emit(tile.DimOp(tensor, axis), name)

    def view(self, tensor: SSAValue, indices: Sequence[SSAValue], shape: Sequence[int], name: str,
             in_bounds: bool = False) -> SSAValue:
        """`tile.view`; `in_bounds` promises that the window lies inside the tensor (no bounds masks)."""
        return self.emit(tile.ViewOp(tensor, indices, shape, in_bounds), name)

    def alloc_shared(self, ty: TileType, name: str) -> SSAValue:
        return self.emit(tile.AllocSharedOp(ty), name)

    def cp_async(self, window: SSAValue, shared: SSAValue) -> None:
        self.emit(tile.CpAsyncOp(window, shared))

    def cp_commit_group(self) -> None:
        self.emit(tile.CpCommitGroupOp())

    def cp_wait_group(self, pending: int = 0) -> None:
        self.emit(tile.CpWaitGroupOp(pending))

    def barrier(self) -> None:
        self.emit(tile.BarrierOp())

    def load(self, window: SSAValue, name: str) -> SSAValue:
        return self.emit(tile.LoadOp(window), name)

    def load_broadcast(self, window: SSAValue, rows: int, name: str) -> SSAValue:
        return self.emit(tile.LoadBroadcastOp(window, rows), name)

    def store_global(self, value: SSAValue, window: SSAValue) -> None:
        self.emit(tile.StoreGlobalOp(value, window))

    # -- compute ------------------------------------------------------------------------------------------
    def fill(self, value: float, ty: TileType, name: str) -> SSAValue:
        return self.emit(tile.FillOp(value, ty), name)

    def mma(self, a, b, acc, name: str, transpose_b: bool = False, transpose_a: bool = False) -> SSAValue:
        return self.emit(tile.MmaOp(a, b, acc, transpose_b=transpose_b, transpose_a=transpose_a), name)

    def scale(self, x, factor: float, name: str) -> SSAValue:
        return self.emit(tile.ScaleOp(x, factor), name)

    def saturating_scale(self, x, factor: float, bound: float, name: str) -> SSAValue:
        return self.emit(tile.SaturatingScaleOp(x, factor, bound), name)

    def unary(self, op_class: type[Operation], x, name: str) -> SSAValue:
        """row_max, row_sum and other one-operand tile ops."""
        return self.emit(op_class(x), name)

    def binary(self, op_class: type[Operation], a, b, name: str) -> SSAValue:
        """element_max, exp_diff, add, mul, exp_subtract, mul_rows, div_rows."""
        return self.emit(op_class(a, b), name)

    def fma(self, a, b, c, name: str) -> SSAValue:
        return self.emit(tile.FmaOp(a, b, c), name)

    def cast(self, x, element_type: Attribute, name: str) -> SSAValue:
        return self.emit(tile.CastOp(x, element_type), name)

    def reshape(self, x, shape: Sequence[int], name: str) -> SSAValue:
        return self.emit(tile.ReshapeOp(x, shape), name)

    def mask_bounds(self, s, k0, seq_k, name: str) -> SSAValue:
        return self.emit(tile.MaskBoundsOp(s, k0, seq_k), name)

    def mask_causal(self, s, q0, k0, seq_q, seq_k, name: str) -> SSAValue:
        return self.emit(tile.MaskCausalOp(s, q0, k0, seq_q, seq_k), name)

    # -- structured control flow --------------------------------------------------------------------------
    def for_loop(
        self,
        upper: SSAValue,
        inits: Sequence[SSAValue],
        names: Sequence[str],
        body: Callable[[TileBuilder, SSAValue, tuple[SSAValue, ...]], Sequence[SSAValue]],
        iv_name: str = "j",
    ) -> tuple[SSAValue, ...]:
        """`scf.for %iv = 0 to upper step 1 iter_args(names = inits)`; `body(b, iv, carried)` returns the
        values to yield. The loop's results are named like the carried values."""
        block = Block(arg_types=[index, *(SSAValue.get(v).type for v in inits)])
        block.args[0].name_hint = iv_name
        for arg, name in zip(block.args[1:], names):
            arg.name_hint = name
        inner = TileBuilder(block, parent=self)
        inner.emit(scf.YieldOp(*body(inner, block.args[0], tuple(block.args[1:]))))
        loop = scf.ForOp(self.const(0), upper, self.const(1), list(inits), block)
        self.emit(loop)
        for result, name in zip(loop.results, names):
            result.name_hint = f"{name}_final"
        return tuple(loop.results)


# endregion
# region Kernel functions


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument: SSA name, global tensor type, named dimensions, role ("in", "out", "scratch")."""

    name: str
    type: TileType
    dims: Sequence[str | int | tile.DimExprAttr]
    role: str = "in"


def ceildiv_dim(name: str, divisor: int) -> tile.DimExprAttr:
    """The dimension expression `ceildiv(name, divisor)` (the plain name when divisor is 1)."""
    return tile.DimExprAttr(name, divisor)


def kernel_function(
    name: str,
    args: Sequence[ArgSpec],
    kernel_info: dict[str, Attribute],
    grid: Sequence[str | int | tile.DimExprAttr],
    launch_sizes: Sequence[str] = (),
) -> tuple[func.FuncOp, TileBuilder]:
    """An empty kernel `func.func` with its argument and kernel attributes, and a builder for its body;
    `launch_sizes` are sizes the grid uses that the launch gives (`tessera.kernel_abi`)."""
    arg_attrs = []
    for arg in args:
        attrs: dict[str, Attribute] = {DIMS_ATTR: DimsAttr(arg.dims)}
        if arg.role != "in":
            attrs[ROLE_ATTR] = StringAttr(arg.role)
        arg_attrs.append(DictionaryAttr(attrs))
    fn = func.FuncOp(name, ([a.type for a in args], []), arg_attrs=ArrayAttr(arg_attrs))
    fn.attributes[KERNEL_ATTR] = DictionaryAttr(kernel_info)
    fn.attributes[GRID_ATTR] = DimsAttr(grid)
    if launch_sizes:
        fn.attributes[LAUNCH_SIZES_ATTR] = ArrayAttr([StringAttr(n) for n in launch_sizes])
    used = {str(d) for arg in args for d in arg.dims}
    if {"heads", "heads_k"} <= used:  # grouped heads, as every builder names them: query head h reads key head
        fn.attributes[MULTIPLES_ATTR] = DictionaryAttr({"heads": StringAttr("heads_k")})  # h // (heads / heads_k)
    block = fn.body.blocks.first
    for value, arg in zip(block.args, args):
        value.name_hint = arg.name
    return fn, TileBuilder(block)


def finish_kernel(fn: func.FuncOp, body: TileBuilder) -> ModuleOp:
    """Close the kernel body, wrap it in a module, and verify the ops and the kernel signature."""
    body.emit(func.ReturnOp())
    module = ModuleOp([fn])
    module.verify()
    kernel_signature(module)
    return module


def kernel_signature(module: ModuleOp) -> KernelSignature:
    """The signature of the one kernel a builder's module holds (raises VerifyException if malformed)."""
    (fn,) = [op for op in module.ops if isinstance(op, func.FuncOp)]
    return signature(fn)


# endregion


def check_cluster(name: str, value: object, axes: int) -> tuple[int, int, int]:
    """A builder's `cluster` argument: an int (clusters of that many blocks along x) or a tuple of up to `axes`
    ints >= 1; returns the (x, y, z) shape. ValueError/TypeError name the argument and the rule."""
    values = (value,) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(values, tuple | list) or not 1 <= len(values) <= axes or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise TypeError(f"{name} must be an int or a tuple of up to {axes} ints, got {value!r}")
    if any(v < 1 for v in values):
        raise ValueError(f"{name} sizes must be >= 1, got {value!r}")
    return tuple(values) + (1,) * (3 - len(values))  # type: ignore[return-value]


def apply_cluster(module: ModuleOp, shape: tuple[int, int, int]) -> ModuleOp:
    """Cluster the module's kernel `shape` and mark its shared copies (`tessera.passes.form_clusters`); a
    kernel that cannot be clustered that way raises ValueError with form-clusters' message."""
    if shape == (1, 1, 1):
        return module
    from tessera.passes.form_clusters import FormClustersError, form_clusters

    fn = next(op for op in module.walk() if isinstance(op, func.FuncOp))
    try:
        form_clusters(fn, shape)
    except FormClustersError as error:
        raise ValueError(str(error)) from None
    return module
