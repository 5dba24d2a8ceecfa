"""How a Tile IR kernel is described: which `func.func` is a kernel, what its arguments are, its grid.

A kernel is a `func.func` with these attributes:

    tile.kernel = {kind = "attention", causal = false, scale = 0.0883883461 : f32}
    tile.grid   = #tile.dims<ceildiv(seq_q, 128), heads, batch>

`kind` is "attention" (arguments Q, K, V in, O out, optionally LSE out, and optionally i32 tables in after V,
see `is_table`; `causal` and `scale` say what it computes; `bias = true`: a fourth input Bias [batch, heads,
seq_q, seq_k] added to the scaled scores, with 1 for a dimension it is broadcast along), "attention_backward" (one of the backward's three
kernels; `causal` and `scale` too), "gemm"
(A, B in, C out; with `beta` also C_in in and with `bias` a bias in, see `GemmOptions`) or "custom" (no
reference). Each argument is a global tile carrying

    tile.dims = #tile.dims<batch, heads, seq_q, 128>    (one expression per dimension; required)
    tile.role = "in" | "out" | "scratch"                (default "in")

A kernel may also promise divisibility of its named sizes, `tile.divisible = {K = 8 : i64, N = 8 : i64}`: the
lowering may rely on it (GEMM reads rows with TMA only where their byte pitch is then a multiple of 16; 16-bit
tiles move one 32-bit pair per register only where rows start on 4 bytes). convert-tile-to-sm90 keeps it on the
Target IR kernel, and every launch (each interpreter level and the GPU runtime) refuses sizes that break it
(`check_divisible`): a kernel compiled on the promise would fault or be silently wrong.

A kernel may also require a named size to be a multiple of another, `tile.multiples = {heads = "heads_k"}`
(grouped-query attention: each key head serves heads / heads_k query heads, and a kernel given other counts
would divide by zero or read a key head past the last); every launch refuses sizes that break it
(`check_multiples`), and convert-tile-to-sm90 keeps it on the Target IR kernel.

A kernel written for any sizes may ask to be specialized on their divisibility, `tile.specialize = {K = 8 : i64,
N = 8 : i64}` (as Triton specializes on the divisibility of its integer arguments). Compiled without sizes
(`tessera.compile`, tessera-opt) it is the fast variant: the lowering assumes the entries as if promised
(`KernelSignature.divisible`), and the Target IR kernel promises them. A launch that sees the sizes
(`tessera.interpret` at levels "target" and "ptx") compiles the variant that promises only the entries its sizes
meet (`specialized`): a GEMM whose rows are 16-byte multiples reads them with TMA, any other takes the path
that needs no promise. The Tile interpreter checks the promise alone (`KernelSignature.promised`).

Inputs name their dimensions with plain names or constants; the same name in two places means the same size.
Outputs and scratch buffers may also use `ceildiv(name, N)` (with a factor: `64 * ceildiv(seq_q, 64)`), but
only of names some input defines or launch sizes. An input may use such an expression too, of the same names:
it defines nothing and is checked against them (the attention backward's intermediates, whose rows are
padded to whole query blocks, `64 * ceildiv(seq_q, 64)`, as FlashAttention-3 pads them). The launcher
allocates outputs (zeros) and scratch buffers, checks that inputs agree with the named sizes, and computes the
grid from `tile.grid`.

A grid may also use launch sizes, sizes no input's shape gives that the launch supplies beside the inputs,
declared as `tile.launch_sizes = ["max_seqlen_q"]`: the packed (varlen, paged) attention kernels launch
ceildiv(max_seqlen_q, BM) query blocks per sequence, the longest sequence being a number only the caller
knows (FlashAttention's `max_seqlen_q`). Used by the grid only (no tensor, no kernel parameter), a
kernel must be correct for any value at least what its blocks need (the varlen kernels: every sequence's
length), and says so in `tile.tables` (`longest`), which every launch checks. A launch size that a tensor's dimensions use is a size like the others,
exact and a kernel parameter (`KernelSignature.size_names`): the backward's postprocess takes seq_q so, since
its one input, dq_accum, has padded rows that do not give it.

A kernel that reaches its tensors through int32 index tables declares what they must hold, `tile.tables`
(`tessera.index_tables`: each sequence's rows within a size or reached through a page table, at most a launch
size long, not overlapping where written), and every launch checks the tables it is given against it
(`KernelSignature.tables`, `index_tables.check_tables`).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FloatAttr, IntegerAttr, IntegerType, ModuleOp, StringAttr
from xdsl.ir import Attribute, BlockArgument, Operation
from xdsl.utils.exceptions import VerifyException

from tessera.dialects.tile_types import DYNAMIC, DimsAttr, MemSpace, TileType, element_byte_width, is_fp8
from tessera.index_tables import TABLES_ATTR, SequenceRange, check_tables, parse_tables, table_problem
from tessera.ir.walk import walk_ops
from tessera.ir.diagnostics import located
from tessera.ir.kernel_marks import KERNEL_ATTR, TARGET_KERNEL_ATTR, is_kernel, is_target_kernel  # noqa: F401 (ABI names)
from tessera.target_kernel_abi import (  # noqa: F401 (ABI names: the arguments of a Target IR kernel)
    BOX_ATTR, COPY_ATTR, ELEMENT_ATTR, SIZE_ATTR, SOURCE_ATTR, SWIZZLE_ATTR, UNREAD_ATTR, verify_target_kernels,
)

GRID_ATTR = "tile.grid"
DIMS_ATTR = "tile.dims"
ROLE_ATTR = "tile.role"
DIVISIBLE_ATTR = "tile.divisible"
SPECIALIZE_ATTR = "tile.specialize"
MULTIPLES_ATTR = "tile.multiples"
LAUNCH_SIZES_ATTR = "tile.launch_sizes"
KEY_ORDER_ATTR = "tile.key_order"
"""`tile.key_order = "p8"` on an 8-bit input: its innermost dimension holds keys in the order of
`tessera.sm90.fp8.P8_KEY_ORDER` within each group of 16 (position j of a group holds key order[j]), the order
an 8-bit P.V wgmma reads V^T in (`sm90.cvt_pack_fp8`). Every level takes the array so ordered; the Tile IR
interpreter restores the keys' own order on the host. The kernel must promise (`tile.divisible`) that the
innermost size is a multiple of 16."""
KEY_ORDERS = ("p8",)
STAGES_ATTR = "tile.stages"
"""`tile.stages = N : i64` on an `scf.for` that copies: the loop asks `pipeline-loops` for a ring of N stages
(1 to `MAX_STAGES`) instead of the pass's `stages` option, e.g. a GEMM K loop whose tiles are
small enough for four stages where the attention loops keep two. Loops without it take the option."""
MAX_STAGES = 4
"""The deepest ring `pipeline-loops` builds (the pipelined contract's N is 1 to 4)."""
ROLES = ("in", "out", "scratch")
KINDS = {"attention": (("Q", "K", "V"), ("O",)), "gemm": (("A", "B"), ("C",)), "custom": (None, None),
         "attention_backward": (None, None)}
"""Kinds, with the inputs and outputs a kernel of that kind takes (None: any). "attention_backward" is one of
the backward's three kernels (`tessera.kernels.attention_backward`), whose arguments differ from kernel to
kernel; like "attention" it carries `causal` and `scale`."""
ATTENTION_KINDS = ("attention", "attention_backward")
"""The kinds whose `tile.kernel` may say `causal` and `scale`."""
OPTIONAL_OUTPUTS = {"attention": ("LSE",)}
"""Outputs a kind may add after its own: attention's log-sum-exp per query row (`return_lse=True`)."""


GEMM_ENTRIES = ("transpose_a", "transpose_b", "alpha", "beta", "bias")
ATTENTION_ENTRIES = ("bias",)
"""`tile.kernel` entries of an "attention" kernel beside kind, causal and scale."""

@dataclass(frozen=True)
class GemmOptions:
    """What a "gemm" kernel computes: C = alpha op(A) op(B) + beta C_in + bias, op(X) = X^T where the flag is
    set. A is [.., M, K] ([.., K, M] with `transpose_a`), B [.., K, N] ([.., N, K] with `transpose_b`); C_in
    (an input, present when beta != 0) and C are [.., M, N]; bias (present with `bias`) is [N], added to every
    row. A leading dimension, when the tensors have one, is a batch. Kernel attribute entries of the same names
    (`transpose_a = true`, `alpha = 2.0 : f32`, ...); absent ones take the defaults below."""

    transpose_a: bool = False
    transpose_b: bool = False
    alpha: float = 1.0
    beta: float = 0.0
    bias: bool = False

    @property
    def layout(self) -> str:
        """"NN", "NT", "TN" or "TT": A's letter first, T where the operand is stored transposed."""
        return "".join("T" if t else "N" for t in (self.transpose_a, self.transpose_b))

    @property
    def input_names(self) -> tuple[str, ...]:
        return ("A", "B") + (("C_in",) if self.beta != 0 else ()) + (("bias",) if self.bias else ())


@dataclass(frozen=True)
class KernelArg:
    """One kernel argument: its name (the SSA name hint, or argN), role, tile type and named dimensions."""

    name: str
    role: str
    type: TileType
    dims: DimsAttr
    key_order: str | None = None  # KEY_ORDER_ATTR

    def shape(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return self.dims.evaluate(sizes)


@dataclass(frozen=True)
class KernelSignature:
    """Everything a launcher needs to know about a kernel, read from its attributes."""

    op: func.FuncOp
    name: str
    kind: str
    causal: bool
    scale: float | None
    args: tuple[KernelArg, ...]
    grid: DimsAttr
    gemm: GemmOptions | None = None
    """What a "gemm" kernel computes (None for other kinds)."""
    divisible: Mapping[str, int] = field(default_factory=dict)
    """Named sizes the lowering may assume are multiples of these: the promise (`tile.divisible`) and the
    entries of `tile.specialize` (the variant compiled without sizes), the least common multiple where both
    name a size."""
    cluster: tuple[int, int, int] = (1, 1, 1)
    """The cluster shape the kernel declares (`tile.cluster`, see `tessera.cluster`)."""
    launch_sizes: tuple[str, ...] = ()
    """Sizes the launch supplies, used by the grid only (`tile.launch_sizes`, module docstring)."""
    bias: bool = False
    """An "attention" kernel's additive bias: a fourth input, Bias (`bias = true` in `tile.kernel`)."""
    specialize: Mapping[str, int] = field(default_factory=dict)
    """Named sizes whose divisibility a launch specializes the kernel on (`tile.specialize`, `specialized`)."""
    promised: Mapping[str, int] = field(default_factory=dict)
    """The promise alone (`tile.divisible`): what every launch of the kernel as written must meet."""
    multiples: Mapping[str, str] = field(default_factory=dict)
    """Named sizes that must be multiples of other named sizes (`tile.multiples`): every launch checks them."""
    tables: tuple[SequenceRange, ...] = ()
    """What the kernel's index tables must hold (`tile.tables`, `tessera.index_tables`); every launch checks it."""

    @property
    def inputs(self) -> tuple[KernelArg, ...]:
        return tuple(a for a in self.args if a.role == "in")

    @property
    def outputs(self) -> tuple[KernelArg, ...]:
        return tuple(a for a in self.args if a.role == "out")

    def dim_names(self) -> list[str]:
        """Names of the sizes the inputs define (plain names), in the order they first appear."""
        names: list[str] = []
        for arg in self.inputs:
            for e in arg.dims:
                if e.is_name and e.symbol.data not in names:
                    names.append(e.symbol.data)
        return names

    def size_names(self) -> list[str]:
        """The sizes the kernel receives as parameters: `dim_names`, then each launch size that an argument's
        dimensions use."""
        used = set().union(*(a.dims.symbols() for a in self.args)) if self.args else set()
        return self.dim_names() + [n for n in self.launch_sizes if n in used]

    def sizes_from_inputs(self, shapes: Sequence[Sequence[int]], launch: Mapping[str, int] | None = None
                          ) -> dict[str, int]:
        """Bind the named sizes from the shapes of the inputs, checking every constraint, and the kernel's
        launch sizes from `launch` (`bind_launch_sizes`; other entries of `launch` are ignored here).

        Raises ValueError naming the argument and dimension that disagree, or a launch size not given."""
        inputs = self.inputs
        if len(shapes) != len(inputs):
            names = ", ".join(a.name for a in inputs)
            raise ValueError(f"kernel @{self.name} takes {len(inputs)} inputs ({names}), got {len(shapes)}")
        sizes: dict[str, int] = {}
        derived = []
        for arg, shape in zip(inputs, shapes):
            shape = tuple(int(d) for d in shape)
            if len(shape) != arg.type.rank:
                raise ValueError(f"input {arg.name} of @{self.name} must have rank {arg.type.rank}, got shape {shape}")
            for axis, (expr, static, actual) in enumerate(zip(arg.dims, arg.type.get_shape(), shape)):
                what = f"input {arg.name} of @{self.name}, dimension {axis} ({expr})"
                if actual <= 0:
                    raise ValueError(f"{what}: sizes must be positive, got {actual}")
                if static != DYNAMIC and actual != static:
                    raise ValueError(f"{what}: the kernel is compiled for {static}, got {actual}")
                if expr.is_constant:
                    continue
                if not expr.is_name:  # checked once every name is bound
                    derived.append((what, expr, actual))
                    continue
                name = expr.symbol.data
                if sizes.setdefault(name, actual) != actual:
                    raise ValueError(f"{what}: '{name}' is {sizes[name]} elsewhere, got {actual}")
        check_divisible(self.name, self.promised, sizes, self.kind)
        check_multiples(self.name, self.multiples, sizes)
        bound = bind_launch_sizes(self.name, self.launch_sizes, sizes, launch or {})
        for what, expr, actual in derived:
            if expr.evaluate(bound) != actual:
                raise ValueError(f"{what}: the other sizes give {expr.evaluate(bound)}, got {actual}")
        return bound

    def check_tables(self, where: str, inputs: Sequence, sizes: Mapping[str, int]) -> None:
        """Check the index tables among `inputs` (the kernel's inputs in order) against `tables` at the bound
        `sizes` (`index_tables.check_tables`: ValueError naming the table, entry, value and bound)."""
        if self.tables:
            given = {i: x for i, x in zip((i for i, a in enumerate(self.args) if a.role == "in"), inputs)}
            check_tables(where, self.tables, given, lambda i: self.args[i].name, sizes)

    def grid_size(self, sizes: Mapping[str, int]) -> tuple[int, int, int]:
        grid = self.grid.evaluate(sizes)
        return tuple(grid) + (1,) * (3 - len(grid))  # type: ignore[return-value]




def kernels(module: ModuleOp) -> list[func.FuncOp]:
    return [op for op in walk_ops(module) if is_kernel(op)]


def launch_size_names(op: func.FuncOp) -> tuple[str, ...]:
    """The launch sizes a (Tile IR or Target IR) kernel declares (`tile.launch_sizes`), () for none."""
    attr = op.attributes.get(LAUNCH_SIZES_ATTR)
    if attr is None:
        return ()
    if not isinstance(attr, ArrayAttr) or not all(isinstance(a, StringAttr) for a in attr.data):
        _fail(op, f"'{LAUNCH_SIZES_ATTR}' must be an array of size names such as [\"max_seqlen_q\"]")
    return tuple(a.data for a in attr.data)


def kernel_kind(op: func.FuncOp) -> str | None:
    """The `kind` of a kernel's `tile.kernel` attribute (kept on its Target IR), or None where it has none."""
    info = op.attributes.get(KERNEL_ATTR)
    kind = info.data.get("kind") if isinstance(info, DictionaryAttr) else None
    return kind.data if isinstance(kind, StringAttr) else None


def divisible_sizes(op: func.FuncOp) -> dict[str, int]:
    """The promise `tile.divisible` of a Tile IR or Target IR kernel as {size name: multiple} ({} for none;
    `signature` checks its form on Tile IR kernels)."""
    attr = op.attributes.get(DIVISIBLE_ATTR)
    if not isinstance(attr, DictionaryAttr):
        return {}
    return {name: v.value.data for name, v in attr.data.items() if isinstance(v, IntegerAttr)}


def check_divisible(kernel: str, divisible: Mapping[str, int], sizes: Mapping[str, int],
                    kind: str | None = None) -> None:
    """ValueError naming the size, its value and the promise where `sizes` break the kernel's `tile.divisible`
    promise (its lowering may read rows with TMA or 32-bit pairs that such sizes misalign), and what to do: for
    a GEMM (`kind`), the builder's kernel for any size; for any other kernel, `tile.specialize`."""
    for name, multiple in divisible.items():
        value = sizes.get(name)
        if value is not None and value % multiple:
            instead = ("compile a kernel that does not promise it (tessera.interpret compiles the default "
                       "tessera.kernels.gemm() for the sizes it is given)" if kind == "gemm" else
                       "build the kernel for these sizes (a builder's: call it with them, e.g. "
                       "flash_attention_paged(page_size=...)), or make the kernel ask for it with tile.specialize "
                       "instead (its launches then compile the variant the sizes meet: docs/any-shape.md)")
            raise ValueError(f"kernel @{kernel} promises (tile.divisible) that {name} is a multiple of {multiple}, "
                             f"got {name} = {value}: launch it with such sizes, or {instead}")


def size_multiples(op: func.FuncOp) -> dict[str, str]:
    """`tile.multiples` of a Tile IR or Target IR kernel as {size: the size it is a multiple of} ({} for none;
    `signature` checks its form on Tile IR kernels)."""
    attr = op.attributes.get(MULTIPLES_ATTR)
    if not isinstance(attr, DictionaryAttr):
        return {}
    return {name: v.data for name, v in attr.data.items() if isinstance(v, StringAttr)}


def check_multiples(kernel: str, multiples: Mapping[str, str], sizes: Mapping[str, int]) -> None:
    """ValueError naming both sizes and their values where `sizes` break the kernel's `tile.multiples`."""
    for name, of in multiples.items():
        if name in sizes and of in sizes and sizes[name] % sizes[of]:
            raise ValueError(f"kernel @{kernel} needs {name} to be a multiple of {of} (tile.multiples), got "
                             f"{name} = {sizes[name]} and {of} = {sizes[of]}")


def specialized(module: ModuleOp, kernel: KernelSignature, sizes: Mapping[str, int]) -> ModuleOp:
    """`module` if kernel `kernel` asks for no specialization (`tile.specialize`), else a copy in which it
    promises (`tile.divisible`) its own promise and each entry of `tile.specialize` that `sizes` meet, and asks
    for nothing more: the variant a launch with these sizes compiles."""
    if not kernel.specialize:
        return module
    met = specialization(kernel, sizes)
    copy = module.clone()
    fn = next(op for op in kernels(copy) if op.sym_name.data == kernel.name)
    promise = _merge_multiples(kernel.promised, met)
    del fn.attributes[SPECIALIZE_ATTR]
    if promise:
        fn.attributes[DIVISIBLE_ATTR] = DictionaryAttr({n: IntegerAttr(v, 64) for n, v in promise.items()})
    elif DIVISIBLE_ATTR in fn.attributes:
        del fn.attributes[DIVISIBLE_ATTR]
    return copy


def specialization(kernel: KernelSignature, sizes: Mapping[str, int]) -> dict[str, int]:
    """The entries of kernel `kernel`'s `tile.specialize` that `sizes` meet (name -> multiple): which variant
    (`specialized`) a launch with these sizes compiles."""
    return {name: multiple for name, multiple in kernel.specialize.items() if sizes[name] % multiple == 0}


def bind_launch_sizes(kernel: str, names: Sequence[str], sizes: Mapping[str, int],
                      given: Mapping[str, int]) -> dict[str, int]:
    """`sizes` with each launch size of `names` taken from `given`; ValueError naming a launch size that is
    not given or not a positive integer (a grid dimension of 0 blocks launches nothing)."""
    bound = dict(sizes)
    for name in names:
        value = given.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            got = "none" if value is None else repr(value)
            raise ValueError(f"kernel @{kernel} needs the launch size {name} (a positive integer that sizes its "
                             f"grid), got {got}")
        bound[name] = int(value)
    return bound


def _fail(op: func.FuncOp, message: str) -> None:
    raise VerifyException(located(op, message))  # "file:line:col: kernel @name: message"


def signature(op: func.FuncOp) -> KernelSignature:
    """Read and check a kernel's attributes; raises VerifyException naming the rule that is broken."""
    info = op.attributes.get(KERNEL_ATTR)
    if not isinstance(info, DictionaryAttr):
        _fail(op, f"'{KERNEL_ATTR}' must be a dictionary such as {{kind = \"attention\"}}")
    entries = info.data
    kind_attr = entries.get("kind")
    if not isinstance(kind_attr, StringAttr) or kind_attr.data not in KINDS:
        _fail(op, f"'{KERNEL_ATTR}' needs kind = one of {', '.join(map(repr, KINDS))}")
    kind = kind_attr.data
    extra = GEMM_ENTRIES if kind == "gemm" else ATTENTION_ENTRIES if kind == "attention" else ()
    unknown = set(entries) - {"kind", "causal", "scale"} - set(extra)
    if unknown:
        _fail(op, f"unknown '{KERNEL_ATTR}' entries {sorted(unknown)} (known: kind, causal, scale{''.join(', ' + e for e in extra)})")
    bias_attr = entries.get("bias")
    bias = kind == "attention" and bias_attr is not None
    if bias and not (isinstance(bias_attr, IntegerAttr) and bias_attr.type == IntegerType(1)):
        _fail(op, "'bias' must be true or false")
    bias = bias and bool(bias_attr.value.data)
    causal_attr = entries.get("causal")
    causal = False
    if causal_attr is not None:
        if not (isinstance(causal_attr, IntegerAttr) and causal_attr.type == IntegerType(1)):
            _fail(op, "'causal' must be true or false")
        causal = bool(causal_attr.value.data)
    scale_attr = entries.get("scale")
    scale = None
    if scale_attr is not None:
        if not isinstance(scale_attr, FloatAttr):
            _fail(op, "'scale' must be a float such as 0.125 : f32")
        scale = scale_attr.value.data
    if kind not in ATTENTION_KINDS and (causal or scale is not None):
        _fail(op, "'causal' and 'scale' apply to attention kernels only")

    grid = op.attributes.get(GRID_ATTR)
    if not isinstance(grid, DimsAttr) or not 1 <= len(grid) <= 3:
        _fail(op, f"'{GRID_ATTR}' must be #tile.dims<...> with 1 to 3 entries")
    from tessera.cluster import CLUSTER_ATTR, parse_cluster

    cluster = parse_cluster(op.attributes.get(CLUSTER_ATTR))
    if isinstance(cluster, str):
        _fail(op, cluster)

    if op.function_type.outputs.data:
        _fail(op, "kernels return nothing; outputs are arguments with tile.role = \"out\"")
    block_args = op.body.blocks.first.args if op.body.blocks else ()
    arg_attrs = op.arg_attrs.data if op.arg_attrs is not None else [DictionaryAttr({})] * len(op.function_type.inputs)
    args: list[KernelArg] = []
    for i, (ty, attrs) in enumerate(zip(op.function_type.inputs.data, arg_attrs)):
        name = block_args[i].name_hint if i < len(block_args) and block_args[i].name_hint else f"arg{i}"
        where = f"argument {i} (%{name})"
        if not isinstance(ty, TileType) or ty.memory_space != MemSpace.GLOBAL:
            _fail(op, f"{where} must be a global tile, got {ty}")
        dims = attrs.data.get(DIMS_ATTR)
        if not isinstance(dims, DimsAttr):
            _fail(op, f"{where} needs '{DIMS_ATTR} = #tile.dims<...>' naming each dimension")
        if len(dims) != ty.rank:
            _fail(op, f"{where} has rank {ty.rank} but '{DIMS_ATTR}' names {len(dims)} dimensions")
        role_attr = attrs.data.get(ROLE_ATTR, StringAttr("in"))
        if not isinstance(role_attr, StringAttr) or role_attr.data not in ROLES:
            _fail(op, f"{where}: '{ROLE_ATTR}' must be one of {', '.join(map(repr, ROLES))}")
        role = role_attr.data
        for expr, static in zip(dims, ty.get_shape()):
            if expr.is_constant and static != DYNAMIC and expr.value.data != static:
                _fail(op, f"{where}: dimension '{expr}' contradicts the static size {static}")
        order = attrs.data.get(KEY_ORDER_ATTR)
        if order is not None:
            if not (isinstance(order, StringAttr) and order.data in KEY_ORDERS and role == "in"
                    and is_fp8(ty.element_type) and list(dims)[-1].is_name):
                _fail(op, f"{where}: '{KEY_ORDER_ATTR}' must be one of {', '.join(map(repr, KEY_ORDERS))}, on an "
                          "8-bit input whose innermost dimension is a named size")
            order = order.data
        args.append(KernelArg(name, role, ty, dims, order))

    defined = {e.symbol.data for a in args if a.role == "in" for e in a.dims if e.is_name}
    launch = launch_size_names(op)
    for arg in args:
        if missing := arg.dims.symbols() - defined - set(launch):
            _fail(op, f"{arg.role} argument %{arg.name} uses sizes no input defines: {sorted(missing)}")
    if overlap := set(launch) & defined:
        _fail(op, f"'{LAUNCH_SIZES_ATTR}' names {sorted(overlap)}, which an input's shape already defines")
    if missing := grid.symbols() - defined - set(launch):
        _fail(op, f"'{GRID_ATTR}' uses sizes no input defines: {sorted(missing)}")

    expected_in, expected_out = KINDS[kind]
    gemm = gemm_options(op, entries) if kind == "gemm" else None
    if gemm is not None:
        expected_in = gemm.input_names
    if bias:
        expected_in = expected_in + ("Bias",)
    if expected_in is not None:
        # Attention kernels may also take i32 tables after Q, K, V (sequence starts, page tables: serving).
        n_in = sum(a.role == "in" and not (kind == "attention" and is_table(a.type)) for a in args)
        n_out = sum(a.role == "out" for a in args)
        optional = OPTIONAL_OUTPUTS.get(kind, ())
        if n_in != len(expected_in) or n_out not in (len(expected_out), len(expected_out) + len(optional)):
            also = f" (it may also output {', '.join(optional)})" if optional else ""
            _fail(
                op,
                f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} kernel takes inputs {', '.join(expected_in)} and output {', '.join(expected_out)}, "
                f"got {n_in} inputs and {n_out} outputs{also}",
            )
    divisible, specialize = ({}, {})
    for key, found in ((DIVISIBLE_ATTR, divisible), (SPECIALIZE_ATTR, specialize)):
        promise = op.attributes.get(key)
        if promise is None:
            continue
        if not isinstance(promise, DictionaryAttr):
            _fail(op, f"'{key}' must be a dictionary such as {{K = 8 : i64}}")
        for name, attr in promise.data.items():
            if not (isinstance(attr, IntegerAttr) and attr.value.data > 0):
                _fail(op, f"'{key}': {name} must be a positive integer, got {attr}")
            if name not in defined:
                _fail(op, f"'{key}' names '{name}', which no input defines")
            found[name] = attr.value.data
    for arg in args:
        last = list(arg.dims)[-1]
        if arg.key_order is not None and divisible.get(last.symbol.data, 1) % 16:
            _fail(op, f"argument %{arg.name} is in '{KEY_ORDER_ATTR}' order by groups of 16 keys: the kernel must "
                      f"promise ('{DIVISIBLE_ATTR}') that {last.symbol.data} is a multiple of 16")
    multiples = op.attributes.get(MULTIPLES_ATTR, DictionaryAttr({}))
    if not isinstance(multiples, DictionaryAttr) or not all(
            isinstance(v, StringAttr) and {k, v.data} <= defined for k, v in multiples.data.items()):
        _fail(op, f"'{MULTIPLES_ATTR}' must be a dictionary such as {{heads = \"heads_k\"}} of sizes the inputs define")
    tables = parse_tables(op.attributes.get(TABLES_ATTR))
    if isinstance(tables, str) or (problem := table_problem(tables, args, defined, launch)):
        _fail(op, tables if isinstance(tables, str) else problem)
    assumed = _merge_multiples(divisible, specialize)
    return KernelSignature(op, op.sym_name.data, kind, causal, scale, tuple(args), grid, gemm, assumed, cluster,
                           launch, bias, specialize, divisible, size_multiples(op), tables)


def _merge_multiples(*promises: Mapping[str, int]) -> dict[str, int]:
    """One promise that implies each of `promises`: per size, the least common multiple of its entries."""
    merged: dict[str, int] = {}
    for promise in promises:
        for name, multiple in promise.items():
            merged[name] = math.lcm(merged.get(name, 1), multiple)
    return merged


def is_table(ty: TileType) -> bool:
    """An i32 global tensor: a table of indices (`tile.load_index` reads it), not a tensor of values."""
    return isinstance(ty.element_type, IntegerType) and ty.element_type.width.data == 32


def rows_aligned(sig: KernelSignature, arg: int, alignment: int) -> bool:
    """Whether every row of argument `arg` starts on a multiple of `alignment` bytes for every size the kernel
    accepts: its innermost size is a constant, or a named size the kernel promises (`tile.divisible`) to be a
    multiple of a count of elements that long, or an expression `f * ceildiv(name, N)` whose factor f is (the
    backward's LSE2 and dPsum rows, padded to whole query blocks) (a tensor whose base is so aligned, rows
    contiguous)."""
    a = sig.args[arg]
    inner = list(a.dims)[-1]
    if inner.is_constant:
        count = inner.value.data
    elif inner.is_name:
        count = sig.divisible.get(inner.symbol.data, 1)
    else:  # f * ceildiv(name, N) (or f * name): a multiple of f, of f * the promised multiple for a plain name
        count = inner.factor.data * (sig.divisible.get(inner.symbol.data, 1) if inner.value.data == 1 else 1)
    return count * element_byte_width(a.type.element_type) % alignment == 0


def gemm_options(op: func.FuncOp, entries: Mapping[str, Attribute]) -> GemmOptions:
    """What the GEMM kernel `op` computes, read from the entries of its `tile.kernel` dictionary (which
    convert-tile-to-sm90 keeps on the Target IR kernel too)."""
    values = {}
    for name in ("transpose_a", "transpose_b", "bias"):
        attr = entries.get(name)
        if attr is not None:
            if not (isinstance(attr, IntegerAttr) and attr.type == IntegerType(1)):
                _fail(op, f"'{name}' must be true or false")
            values[name] = bool(attr.value.data)
    for name in ("alpha", "beta"):
        attr = entries.get(name)
        if attr is not None:
            if not isinstance(attr, FloatAttr):
                _fail(op, f"'{name}' must be a float such as 1.0 : f32")
            values[name] = attr.value.data
    return GemmOptions(**values)


WRITES = {"tile.store_global": "dest", "tile.store_global_rows": "dest", "tile.atomic_add": "dest",
          "tile.sem_signal": "sem"}
"""The Tile IR ops that write global memory, and the operand naming what they write."""

TILE_KERNEL_DIALECTS = ("tile", "arith", "scf", "func")
"""The dialects of a Tile IR kernel's ops: every level (the Tile interpreter, convert-tile-to-sm90) knows them."""

TILE_KERNEL_SCF_OPS = ("scf.for", "scf.if", "scf.yield")
"""The control flow of a Tile IR kernel: loops with a trip count and conditionals (no level runs scf.while,
scf.parallel or scf.index_switch in Tile IR)."""


def check_body(op: func.FuncOp, sig: KernelSignature) -> None:
    """A Tile IR kernel holds ops of `TILE_KERNEL_DIALECTS` only (an `sm90` op is Target IR, which
    convert-tile-to-sm90 makes; `math` and others have no meaning at any level; of `func`, only its return: no
    level calls a function; of `scf`, `TILE_KERNEL_SCF_OPS`), and it writes only its "out"
    and "scratch" arguments. An input is the caller's: the GPU launch copies a NumPy input to the device and
    never back, so a store into it would change the caller's array at the CPU levels only, and a second run
    (the next level of a validation) would read the changed values."""
    entry = op.body.blocks.first
    for inner in op.walk():
        if inner is op:
            continue
        dialect = inner.dialect_name()
        if dialect == "func" and inner.name != "func.return":
            raise VerifyException(located(inner, f"'{inner.name}': a Tile IR kernel is one function, which calls "
                                                 "none (write the callee's ops into the kernel)", name_op=False))
        if dialect == "scf" and inner.name not in TILE_KERNEL_SCF_OPS:
            raise VerifyException(located(inner, f"'{inner.name}' is not supported in a Tile IR kernel, whose control "
                                                 f"flow is {', '.join(TILE_KERNEL_SCF_OPS)} (a loop has a trip count; "
                                                 "leave it early with scf.if)", name_op=False))
        if dialect not in TILE_KERNEL_DIALECTS:
            what = "a Target IR op, which convert-tile-to-sm90 makes" if dialect == "sm90" else "not an op of Tile IR"
            raise VerifyException(located(inner, f"'{inner.name}' is {what}: a Tile IR kernel holds "
                                                 f"{', '.join(TILE_KERNEL_DIALECTS)} ops", name_op=False))
        if inner.name == "scf.for":
            _check_step(inner)
        if inner.name == "scf.yield":
            _check_if_yield(inner)
        field = WRITES.get(inner.name)
        if field is None:
            continue
        target = getattr(inner, field)
        while not isinstance(target, BlockArgument) and target.owner.name == "tile.view":
            target = target.owner.operands[0]  # the viewed tensor
        if isinstance(target, BlockArgument) and target.block is entry and sig.args[target.index].role == "in":
            name = sig.args[target.index].name
            raise VerifyException(located(inner, f"writes argument %{name}, an input: a kernel writes only its "
                                                 f"outputs and scratch buffers (declare %{name} with "
                                                 f"tile.role = \"out\")"))


def _check_if_yield(yield_op: Operation) -> None:
    """What an scf.if's branch yields has the types of the scf.if's results (MLIR's scf.if verifier rule, which
    xDSL 0.74 does not check: a bf16 tile yielded as an f32 result verified, and each level read it its way)."""
    parent = yield_op.parent_op()
    if parent is None or parent.name != "scf.if":
        return
    got = [v.type for v in yield_op.operands]
    expected = [r.type for r in parent.results]
    if got != expected:
        raise VerifyException(located(yield_op, (
            f"'scf.yield' yields ({', '.join(map(str, got))}) to an scf.if whose results are "
            f"({', '.join(map(str, expected))})"), name_op=False))


def _check_step(loop: Operation) -> None:
    """A loop whose step is a constant must step by a positive amount (MLIR's scf.for verifier rule, which
    xDSL 0.74 does not check): a zero step never ends, and a negative one has no meaning for scf.for."""
    step = loop.operands[2].owner
    if step.name == "arith.constant" and isinstance(step.value, IntegerAttr) and step.value.value.data <= 0:
        raise VerifyException(located(loop, f"'scf.for' constant step operand must be positive, got "
                                            f"{step.value.value.data}", name_op=False))


FUNCTION_ATTRS = (KERNEL_ATTR, GRID_ATTR, DIVISIBLE_ATTR, SPECIALIZE_ATTR, LAUNCH_SIZES_ATTR, "tile.cluster")
"""The `tile.` attributes of a kernel function (`tessera.cluster.CLUSTER_ATTR` is the last)."""
ARGUMENT_ATTRS = (DIMS_ATTR, ROLE_ATTR, KEY_ORDER_ATTR)
"""The `tile.` attributes of a kernel's arguments."""


def check_attribute_names(op: func.FuncOp) -> None:
    """Refuse a `tile.` attribute of function `op` or of its arguments that is not one of FUNCTION_ATTRS or
    ARGUMENT_ATTRS but close to one (`tile.kernal`, `tile.dim`, `tile.rol`), naming the one meant: misspelt, it
    is ignored, and the function is no kernel (a pass then says its Tile IR was not lowered) or the argument
    no output (its store is refused as a write of an input). Other unknown names are left alone."""
    known = FUNCTION_ATTRS + ARGUMENT_ATTRS
    arg_attrs = op.arg_attrs.data if op.arg_attrs is not None else ()
    named = [(name, "") for name in op.attributes] + [
        (name, f"argument {i}: ") for i, attrs in enumerate(arg_attrs) for name in attrs.data]
    for name, where in named:
        if name.startswith("tile.") and name not in known:
            if close := difflib.get_close_matches(name, known, n=1, cutoff=0.8):
                raise VerifyException(located(op, f"{where}unknown attribute '{name}' (did you mean '{close[0]}'?)"))


def verify_kernels(module: ModuleOp) -> None:
    """Check the attribute names of every function of `module` (`check_attribute_names`) and, of a kernel, its
    signature and body (`check_body`), then what every Target IR kernel declares and its shared-memory layout
    (`tessera.target_kernel_abi`); raises VerifyException."""
    for op in walk_ops(module):  # function by function, in order: the first one that is wrong is reported
        if isinstance(op, func.FuncOp):
            check_attribute_names(op)
            if is_kernel(op):
                check_body(op, signature(op))
    verify_target_kernels(module)
