"""Finding attention in a StableHLO function: the XLA-style forward matcher and what every matcher shares.

Forward pattern (XLA's cuDNN rewriter, seed 003): walking bottom-up from each `dot_general` taken as BMM2,

    BMM1 - [scale] - [bias] - [mask] - softmax - [dropout] - BMM2

- BMM1 = dot_general(Q, K) contracting head_dim, two batching dimensions (batch, heads);
- scale: `multiply` or `divide` by a splat constant (through broadcast_in_dim/convert) or a scalar computed from
  constants (`jnp.sqrt(d)`: folded), possibly repeated;
- bias: `add` of a non-constant tensor after the scale, in Q's element type (converts from it allowed), of the
  scores' shape or broadcast to it (`broadcast_in_dim`) along batch and/or heads only: the kernel's Bias
  [batch or 1, heads or 1, seq_q, seq_k] (`tessera.kernels.flash_attention(bias=True)`); a bias added before
  a scale, broadcast along the queries or keys, or of another type is a near miss;
- mask: `select(pred, S, fill)` with fill -inf (or a large negative constant) where `pred` is computed from
  iota/constant/compare only, or `S + m` where `m` is computed so and holds only 0 and large negative values
  (`jnp.where(mask, 0, -1e9)`; other constant additions, ALiBi say, are a bias); it is evaluated and must be a lower-triangular band, whose diagonal offset is
  read off the values and mapped onto Tessera's bottom-right causal mask (only offset seq_k - seq_q maps);
- softmax = exp(x - max(x)) / sum(exp(x - max(x))) over one axis (reduce max and reduce add, broadcast
  back along that axis; converts anywhere, `maximum(-inf, max)` as jax.nn.softmax writes it);
- dropout: `select(keep, P / c, 0)` or `P * mask` between softmax and BMM2 (found, never rewritten, with or
  without a bias);
- BMM2 = dot_general(P, V) contracting the softmax axis, which must be BMM1's key axis; Q, K, V converted from
  bf16 or f16 to float32 for the products are read before the convert when the output is rounded back after
  (`widened`, `rounded_to`).

Dimensions are followed by label (b0, b1 for the two batching dimensions, q, k, d), through the products
and through transposes of the scores on their way to the softmax, so any layout JAX picks (BSHD arguments,
transposes folded into dot_general, jax.nn.dot_product_attention's transposed rank-5 scores) is understood;
a rank-5 Q has query groups "g" (the free dimension right after its heads b1), head = b1 * groups + g. The
rewrite transposes (and reshapes) Q, K, V to Tessera's [batch, heads, seq, head_dim] and the output back. A candidate that fails a rule after its softmax
was found is a near miss, reported with the rule (`Refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue

from tessera.ir.diagnostics import source_location

CANONICAL = ("b0", "b1", "q", "d")
"""Tessera's layout of Q and O ([batch, heads, seq_q, head_dim]); K and V have "k" for "q"."""
FORWARD_TARGET = "__tessera$attention"
BACKWARD_TARGET = "__tessera$attention_bwd"
"""The custom_call targets a rewritten forward and backward call (the `custom_call` form of the rewrite)."""

DOT = "stablehlo.dot_general"
"""The batched matrix product both matchers start from (BMM1, BMM2 and the backward's products)."""

NEGATIVE_FILL = -1e4
"""A mask fill at or below this (or -inf) hides a key: exp(fill - max) underflows to 0 in bf16 and f32."""

FOLDED_OPS = {"stablehlo.constant", "stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.reshape",
              "stablehlo.sqrt", "stablehlo.rsqrt", "stablehlo.multiply", "stablehlo.divide", "stablehlo.add",
              "stablehlo.subtract", "stablehlo.negate", "stablehlo.power", "stablehlo.exponential", "stablehlo.log"}
"""Ops a scalar constant may be computed with in the graph (`jnp.sqrt(d)`, `lax.rsqrt(jnp.float32(d))`): folded."""

MASK_OPS = {"stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.reshape",
            "stablehlo.convert", "stablehlo.compare", "stablehlo.add", "stablehlo.subtract", "stablehlo.and",
            "stablehlo.or", "stablehlo.not", "stablehlo.select", "stablehlo.transpose", "stablehlo.multiply"}
"""Ops a causal mask's predicate may be computed with (no argument, no data: it is evaluated)."""


class Refusal(Exception):
    """A rule that stopped a match: `rule` says which, `op` where; `matched` when the whole pattern was found
    but is not rewritten (dropout): reported as "matched, not rewritten: RULE"."""

    def __init__(self, rule: str, op: Operation | None = None, matched: bool = False):
        super().__init__(rule)
        self.rule, self.op, self.matched = rule, op, matched


def where(op: Operation | None) -> str:
    """`file:line:col` of an op (the rewriter's report names ops by place), or '?'."""
    return (source_location(op) or "?") if op is not None else "?"


def shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape()) if isinstance(value.type, TensorType) else ()


def element(value: SSAValue) -> str:
    return str(value.type.element_type) if isinstance(value.type, TensorType) else str(value.type)


def producer(value: SSAValue) -> Operation | None:
    return value.op if isinstance(value, OpResult) else None


def describe(value: SSAValue) -> str:
    """A value for a message: `argument %argN` for an argument (seen through broadcasts, reshapes and
    converts), else the producing op and its place."""
    through = strip(value, [], ("stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.reshape"))
    if isinstance(through, BlockArgument):
        value = through
    if isinstance(value, BlockArgument):
        return f"argument %arg{value.index}"
    op = producer(value)
    return f"'{op.name}' at {where(op)}" if op is not None else "?"


def strip(value: SSAValue, ops: list[Operation], names=("stablehlo.convert",)) -> SSAValue:
    """Follow `value` down through ops named in `names` (single-operand), recording them in `ops`."""
    while (op := producer(value)) is not None and op.name in names:
        ops.append(op)
        value = op.operands[0]
    return value


KERNEL_TYPES = ("bf16", "f16")
"""The element types the attention kernels take (Q, K, V, dO, O and the bias)."""


def widened(value: SSAValue) -> SSAValue:
    """The bf16 or f16 tensor `value` was converted from, if every convert on the way holds its values exactly (to
    f32 or f64, or back to its own type: `v.astype(jnp.float32)` before a float32 product), else `value`."""
    chain: list[Operation] = []
    source = strip(value, chain)
    kind = element(source)
    if not chain or kind not in KERNEL_TYPES or any(element(op.results[0]) not in (kind, "f32", "f64") for op in chain):
        return value
    return source


def rounded_to(value: SSAValue, kind: str) -> bool:
    """Whether every use of `value` rounds it to `kind` (a convert to it), through transposes, reshapes and
    converts to f32: the graph keeps it only in `kind`, as the kernels write it."""
    uses = [use.operation for use in value.uses]
    for op in uses:
        result = element(op.results[0]) if op.results else ""
        if op.name == "stablehlo.convert" and result == kind:
            continue
        if not (op.name in ("stablehlo.transpose", "stablehlo.reshape") or op.name == "stablehlo.convert"
                and result == "f32") or not rounded_to(op.results[0], kind):
            return False
    return bool(uses)


def refuse_empty(tensors: dict[str, SSAValue]) -> None:
    """Raise the Refusal naming the first of `tensors` (Q, K, V by name) with a dimension of size 0: the kernels
    take sizes of at least 1 (the attention op's verifier and `tessera.attention` refuse an empty one), so a
    graph of no batch, head, query or key is left as it is (its softmax over no key computes P.V = 0)."""
    for name, value in tensors.items():
        if 0 in shape(value):
            raise Refusal(f"{name} has an empty dimension ({list(shape(value))}): the kernels take sizes of at least 1")


def splat_constant(value: SSAValue, ops: list[Operation]) -> float | None:
    """The scalar a value holds if it is a splat constant seen through broadcast_in_dim/reshape/convert
    (recording those ops in `ops`), or a scalar computed from constants by `FOLDED_OPS`, else None."""
    from tessera.graph.stablehlo_interpreter import constant_value

    seen: list[Operation] = []
    scalar = strip(value, [], ("stablehlo.broadcast_in_dim", "stablehlo.reshape"))
    value = strip(value, seen, ("stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.reshape"))
    op = producer(value)
    if op is not None and op.name in FOLDED_OPS and op.name != "stablehlo.constant" and shape(scalar) in ((), (1,)):
        try:  # a scalar computed from constants alone (`s / jnp.sqrt(d)`), rounded as the graph rounds it
            return float(evaluate(scalar, FOLDED_OPS, exact=False).flat[0])
        except Refusal:
            return None
    if op is None or op.name != "stablehlo.constant":
        return None
    array = constant_value(op, exact=True)
    if array.size == 0 or not np.all(array == array.flat[0]):
        return None
    ops.extend(seen + [op])
    return float(array.flat[0])


def row_reduce(value: SSAValue, kind: str, full: SSAValue, ops: list[Operation],
               source: SSAValue | None = None, masked: list[SSAValue] | None = None) -> tuple[Operation, int] | None:
    """If `value` (of `full`'s shape) is a `reduce` of kind `kind` ("add", "maximum") over one axis of a
    tensor, broadcast back along that axis, return (the reduce op, the axis in `full`'s frame); converts and,
    for "maximum", `maximum(-inf, r)` around the reduce are allowed. With `source`, the reduce must take
    `source` itself or the tensor `source` transposes (`transposed_from`: the reduced axis and the broadcast
    back are then read in `source`'s frame), else None; with `masked`, also `source` masked as
    jax.nn.softmax(where=) masks it (`_unmasked`: the mask's predicate is appended to `masked`, for the caller to
    check). Ops are recorded in `ops`."""
    from tessera.graph.stablehlo_interpreter import reduce_kind

    seen: list[Operation] = []
    current = value
    while True:  # down to the reduce, through broadcasts, reshapes, converts and a maximum with -inf
        op = producer(current)
        if op is None:
            return None
        if op.name == "stablehlo.reduce":
            break
        if op.name in ("stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.convert", "stablehlo.transpose"):
            current = op.operands[0]
        elif op.name == "stablehlo.maximum" and kind == "maximum":
            constants = [splat_constant(v, []) for v in op.operands]
            if constants[0] == -np.inf:
                current = op.operands[1]
            elif constants[1] == -np.inf:
                current = op.operands[0]
            else:
                return None
        else:
            return None
        seen.append(op)
    reduce = op
    try:
        if reduce_kind(reduce) != kind or len(reduce.operands) != 2:
            return None
    except Exception:
        return None
    dims = [int(d) for d in reduce.dimensions.get_values()]
    init = splat_constant(reduce.operands[1], [])
    if len(dims) != 1 or init != (0.0 if kind == "add" else -np.inf):
        return None  # (dimensions in range and the result's shape: the reduce verifier, dialects/stablehlo.py)
    rank = len(shape(full))
    perm = list(range(rank))
    if source is not None:
        operand = reduce.operands[0] if masked is None else _unmasked(reduce.operands[0], kind, source, seen, masked)
        found = transposed_from(source, operand)
        if found is None:
            return None
        perm = found
    # the broadcast back must map the reduced tensor's dimensions onto every axis but the reduced one
    reduced = dims[0]
    after: list[Operation] = []
    rebuilt = _origin_through(value, reduce.results[0], after)
    expected: list[int | None] = [p if p < reduced else p - 1 for p in perm]
    axis = perm.index(reduced)
    expected[axis] = None
    if rebuilt != expected:
        return None
    ops.extend(seen + [reduce])
    return reduce, axis


def _unmasked(operand: SSAValue, kind: str, source: SSAValue, seen: list[Operation], masked: list[SSAValue]) -> SSAValue:
    """`source` if `operand` is it masked as jax.nn.softmax(where=) masks what it reduces: the sum's
    select(pred, e, 0) of the exponential e, the max's select(pred, s, -inf) of the scores s that `source`, the
    softmax's input, selects too (pred appended to `masked`, the ops to `seen`); else `operand`."""
    if transposed_from(source, operand) is not None:  # `source` itself (a softmax of masked scores)
        return operand
    chain: list[Operation] = []
    select = producer(strip(operand, chain))
    fill = 0.0 if kind == "add" else -np.inf
    if select is None or select.name != "stablehlo.select" or splat_constant(select.operands[2], []) != fill:
        return operand
    target = strip(source, [])
    inner = producer(target)
    if kind == "maximum" and inner is not None and inner.name == "stablehlo.select":
        target = strip(inner.operands[1], [])
    if strip(select.operands[1], chain) is not target:
        return operand
    seen.extend([*chain, select])
    masked.append(select.operands[0])
    return source


def transposed_from(value: SSAValue, base: SSAValue) -> list[int] | None:
    """The permutation p with `value` = transpose(`base`, p) (the identity when they are one value), converts
    seen through on both; else None."""
    value, base = strip(value, []), strip(base, [])
    if value is base:
        return list(range(len(shape(value))))
    op = producer(value)
    if op is not None and op.name == "stablehlo.transpose" and strip(op.operands[0], []) is base:
        return [int(d) for d in op.permutation.get_values()]
    return None


def _origin_through(value: SSAValue, reduced: SSAValue, ops: list[Operation]) -> list[int | None] | None:
    """`broadcast_origin`, letting `maximum(-inf, .)` and converts pass (they keep the dimensions)."""
    chain: list[SSAValue] = []
    current = value
    while current is not reduced:
        op = producer(current)
        if op is None:
            return None
        chain.append(current)
        if op.name == "stablehlo.maximum":
            current = next((v for v in op.operands if splat_constant(v, []) is None), op.operands[0])
            continue
        current = op.operands[0]
    origin: list[int | None] = list(range(len(shape(reduced))))
    for v in reversed(chain):
        op = producer(v)
        if op.name in ("stablehlo.maximum", "stablehlo.convert"):
            continue
        source, result = shape(op.operands[0]), shape(op.results[0])
        if op.name == "stablehlo.transpose":
            origin = [origin[int(p)] for p in op.permutation.get_values()]
        elif op.name == "stablehlo.broadcast_in_dim":
            dims = [int(d) for d in op.broadcast_dimensions.get_values()]
            new: list[int | None] = [None] * len(result)
            for i, d in enumerate(dims):
                new[d] = origin[i] if source[i] == result[d] else None
            origin = new
        else:  # reshape: only size-1 dimensions in or out
            if [n for n in source if n != 1] != [n for n in result if n != 1]:
                return None
            kept = iter([o for o, n in zip(origin, source) if n != 1])
            origin = [next(kept) if n != 1 else None for n in result]
    return origin


@dataclass
class Softmax:
    """exp(x - max) / sum over `axis`: `x` its input, `p` its output, `exp` the exponential's result."""

    x: SSAValue
    p: SSAValue
    exp: SSAValue
    axis: int
    ops: list[Operation]


def match_softmax(value: SSAValue) -> Softmax | None:
    """The softmax whose output `value` is (through converts), or None. jax.nn.softmax(x, where=mask) is one too
    when x is the scores masked with -inf by that mask (its max, sum and output masked by it as well: `_unmasked`;
    the output's select(mask, P, 0) then zeroes what P already holds as 0)."""
    ops: list[Operation] = []
    p = strip(value, ops)
    masked: list[SSAValue] = []
    post = producer(p)
    if post is not None and post.name == "stablehlo.select" and splat_constant(post.operands[2], []) == 0.0:
        ops.append(post)
        masked.append(post.operands[0])
        div = producer(strip(post.operands[1], ops))
    else:
        div = producer(p)
    if div is None or div.name != "stablehlo.divide":
        return None
    ops.append(div)
    exp_value = strip(div.operands[0], ops)
    exp = producer(exp_value)
    if exp is None or exp.name != "stablehlo.exponential":
        return None
    found = row_reduce(div.operands[1], "add", p, ops, exp_value, masked)
    if found is None:
        return None
    total, axis = found
    strip(total.operands[0], ops)
    ops.append(exp)
    sub = producer(exp.operands[0])
    if sub is None or sub.name != "stablehlo.subtract":
        return None
    ops.append(sub)
    x = strip(sub.operands[0], ops)
    found = row_reduce(sub.operands[1], "maximum", p, ops, x, masked)
    if found is None:
        return None
    maximum, max_axis = found
    if max_axis != axis or masked and not _masked_alike(x, masked):
        return None
    return Softmax(x, p, exp_value, axis, ops)


def _masked_alike(x: SSAValue, masks: list[SSAValue]) -> bool:
    """Whether the softmax input `x` is select(pred, s, -inf) and each of `masks` (predicates of the masked max,
    sum and output of jax.nn.softmax(where=)) evaluates to pred, where the walk down from `x` then finds it as the
    attention's mask: a max, sum or output masked otherwise is not this softmax."""
    select = producer(x)
    if select is None or select.name != "stablehlo.select" or splat_constant(select.operands[2], []) != -np.inf:
        return False
    try:
        expected = np.broadcast_to(evaluate(select.operands[0], MASK_OPS), shape(x))
        return all(np.array_equal(np.broadcast_to(evaluate(m, MASK_OPS), shape(x)), expected) for m in masks)
    except (Refusal, ValueError):
        return False


def dot_labels(op: Operation, lhs: list[str | None], rhs: list[str | None]) -> list[str | None]:
    """The labels of a dot_general's result dimensions from its operands' labels (batch, lhs free, rhs free)."""
    d = op.dot_dimension_numbers
    lb, rb = d.dims("lhs_batching_dimensions"), d.dims("rhs_batching_dimensions")
    lc, rc = d.dims("lhs_contracting_dimensions"), d.dims("rhs_contracting_dimensions")
    return ([lhs[i] for i in lb] + [lhs[i] for i in range(len(lhs)) if i not in lb + lc]
            + [rhs[i] for i in range(len(rhs)) if i not in rb + rc])


def sides(op: Operation) -> dict[str, list[int]]:
    d = op.dot_dimension_numbers
    return {f: d.dims(f) for f in d.FIELDS}


def perm_to(labels: list[str | None], order: tuple[str, ...]) -> list[int]:
    """The transpose permutation taking a tensor with dimension `labels` to the label order `order`."""
    return [labels.index(name) for name in order]


@dataclass
class Mask:
    """A causal mask found in the graph: `pred` (the i1 value `select` takes, or the values an additive mask
    adds), `offset` (query i sees keys up to i + offset), `visible` ([seq_q, seq_k])."""

    select: Operation
    pred: SSAValue
    offset: int
    visible: np.ndarray
    ops: list[Operation]
    additive: bool = False
    """Added to the scores (0 visible, <= NEGATIVE_FILL hidden) rather than selected: `select` is the add, and
    the backward needs no mask on dS (P, hence dS, is already 0 where it hides)."""


@dataclass
class ForwardMatch:
    """One forward attention found by the pattern matcher (or a composite), and how to rewrite it."""

    bmm1: Operation | None
    bmm2: Operation
    q: SSAValue
    k: SSAValue
    v: SSAValue
    q_labels: list[str | None]
    k_labels: list[str | None]
    v_labels: list[str | None]
    out_labels: list[str | None]
    scale: float
    causal: bool
    head_dim: int
    dtype: str
    softmax: Softmax | None = None
    mask: Mask | None = None
    scale_ops: list[Operation] = field(default_factory=list)
    ops: list[Operation] = field(default_factory=list)
    found: list[str] = field(default_factory=list)
    refusal: Refusal | None = None
    backward: object | None = None  # a BackwardMatch once one is found for it
    bias: SSAValue | None = None
    """The additive bias as the kernel reads it: a tensor whose dimensions are labelled `bias_labels` (each of
    b0, b1, q, k once; b0 and b1 may be missing or of size 1: broadcast), rewritten to [b0|1, b1|1, q, k]."""
    bias_labels: list[str] = field(default_factory=list)
    widened: str = ""
    """Which of Q, K, V ("QKV", "V", ...) are read before a convert from bf16 or f16 to float32 (`widened`): a
    float32 P.V keeps P in float32, which the backward kernel does not."""

    @property
    def values(self) -> set[SSAValue]:
        """Every value the matched ops define, but BMM2's result (what the rewrite replaces)."""
        return {r for op in self.ops if op is not self.bmm2 for r in op.results}


def evaluate(value: SSAValue, allowed: set[str], exact: bool = True) -> np.ndarray:
    """The value of `value` computed from constants alone by the StableHLO interpreter, through ops named in
    `allowed`; Refusal naming what it depends on otherwise (an argument, a data op)."""
    from tessera.graph.stablehlo_interpreter import Interpreter

    order: list[Operation] = []
    seen: set[Operation] = set()

    def visit(v: SSAValue) -> None:
        op = producer(v)
        if op is None:
            raise Refusal(f"the mask depends on {describe(v)}: data, not a causal mask")
        if op in seen:
            return
        if op.name not in allowed:
            raise Refusal(f"the mask depends on {describe(v)}: data, not a causal mask (a causal mask is "
                          "computed from iota and constants)")
        seen.add(op)
        for operand in op.operands:
            visit(operand)
        order.append(op)

    visit(value)
    interpreter = Interpreter(None, exact)  # type: ignore[arg-type]
    env: dict[SSAValue, np.ndarray] = {}
    from tessera.graph.stablehlo_interpreter import round_value

    for op in order:
        try:
            results = interpreter.run_op(op, [env[o] for o in op.operands])
        except ValueError as e:  # shapes the parser does not verify (a seeded edit), a body the interpreter refuses
            raise Refusal(f"'{op.name}' at {where(op)} cannot be evaluated: {e}", op) from None
        for r, x in zip(op.results, results):
            env[r] = round_value(np.asarray(x), r.type, exact)
    return env[value]


def causal_offset(visible: np.ndarray) -> int | None:
    """The offset o if `visible` [seq_q, seq_k] is exactly "key j visible from query i iff j <= i + o", else
    None (any other pattern). o is read off the first row that sees key 0 (or row 0's last visible key)."""
    sq, sk = visible.shape
    if visible[0].any():
        o = int(np.nonzero(visible[0])[0][-1])
    elif visible[:, 0].any():
        o = -int(np.argmax(visible[:, 0]))
    else:
        return None
    expected = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + o
    return o if np.array_equal(visible, expected) else None


def kernel_config(head_dim: int, causal: bool, dtype: str, scale: float,
                  bias_broadcast: tuple[str, ...] | None = None) -> dict:
    """The kernel configuration of an attention op (the properties of `tessera.attention`); `bias_broadcast`
    (None: no bias) names the dimensions its bias operand has size 1 in, which the kernel's name says."""
    from tessera.kernels import AttentionConfig

    config = AttentionConfig.checked(head_dim, causal, dtype, scale, bias=bias_broadcast is not None,
                                     bias_broadcast=bias_broadcast or ())
    return dict(causal=causal, scale=config.scale, head_dim=head_dim, dtype=dtype,
                kernel=config.kernel_name("flash_attention"), block_m=config.block_m, block_n=config.block_n)


def backward_config(head_dim: int, causal: bool, dtype: str, scale: float) -> dict:
    """The kernel configuration of the backward op (`tessera.kernels.attention_backward`'s main kernel);
    ValueError for what the backward builders refuse (head_dim 256)."""
    from tessera.kernels.attention_backward_config import BackwardConfig

    config = BackwardConfig.checked(head_dim, causal, dtype, scale)
    return dict(causal=causal, scale=config.attention.scale, head_dim=head_dim, dtype=dtype,
                kernel=config.kernel_name("main"), block_m=config.attention.block_m,
                block_n=config.attention.block_n)
