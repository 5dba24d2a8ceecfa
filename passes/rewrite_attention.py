"""`rewrite-attention`: replace attention in a StableHLO graph by Tessera's attention kernels.

    tessera-opt graph.mlir -p rewrite-attention                       # stablehlo.composite "tessera.attention"
    tessera-opt graph.mlir -p 'rewrite-attention{match=patterns}'     # and the XLA-style pattern matcher
    tessera-opt graph.mlir -p 'rewrite-attention{form=custom_call}'   # emit custom_calls XLA could dispatch
    tessera-opt graph.mlir -p 'rewrite-attention{match=patterns}' --rewrite-report

`match=composite` (the default) replaces only the explicit marker `jax.lax.composite` emits,
`stablehlo.composite "tessera.attention"(%q, %k, %v)`, as its attributes say (`tessera.graph.match_composite`).
Its contract: Q, K, V rank 4 in JAX's layout [batch, seq, heads, head_dim] (`composite_attributes` may say
`layout = "BHSD"` for [batch, heads, seq, head_dim]), `causal` (bool, default false, bottom-right) and `scale`
(default 1/sqrt(head_dim)) in `composite_attributes`, which names nothing else; the result has Q's shape. A
decomposition that the forward matcher reads as another attention (masked, scaled or laid out otherwise) is a
near miss: the attributes and the decomposition disagree.

`match=patterns` also runs the XLA-style matcher, opt-in because such matchers are brittle (XLA removed its
rewriter in 2025 for that reason): first every forward (`tessera.graph.match_attention_fwd`: BMM1 - [scale] -
[bias] - [mask] - softmax - [dropout] - BMM2), then each backward anchored at a forward
(`tessera.graph.match_attention_bwd`: bmm1_grad1 walked bottom-up to the softmax gradient, bmm2_grad2, bmm1_grad2
and bmm2_grad1), as the seed's new workflow does. A forward is rewritten only if none of its intermediates
(S, P, ...) has a user outside it and its backward; a backward only with its forward, which then also returns
its log-sum-exp. An additive bias becomes the attention op's fourth operand, [batch|1, heads|1, seq_q, seq_k]
(the kernel `flash_attention(bias=True)`); dropout is found and reported, never rewritten, and so is the
backward of a forward with a bias (no backward kernel takes one). Only a function's top-level ops are rewritten:
attention inside another op's region (a `stablehlo.while` from `jax.lax.scan`) is reported as a near miss.

Each function is matched on a copy with JAX's helper calls inlined (`tessera.graph.graph_edit`) and, for
`match=patterns`, the backward's recompute under `jax.checkpoint` read as the forward it repeats, through
`stablehlo.optimization_barrier` (`tessera.graph.remat`: the uses the rewrite leaves read the barrier again); the copy
replaces the function only if something was rewritten, so a graph with nothing to rewrite is left exactly as
it was. The result (`form=tessera`, default) is `tessera.attention` / `tessera.attention_bwd`
(`dialects/attention.py`) between transposes from and to the graph's layout; `form=custom_call` writes each
as `stablehlo.custom_call @__tessera$attention` / `@__tessera$attention_bwd` (api_version 4, the kernel
configuration as the `backend_config` dictionary). Dead ops are removed. A report per function goes to
`tessera.graph.rewrite_report.REPORTS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BoolAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    f32,
    i32,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from tessera.graph.attention_match import (
    BACKWARD_TARGET, CANONICAL, FORWARD_TARGET, ForwardMatch, backward_config, kernel_config, perm_to, shape, where,
)
from tessera.graph.graph_edit import broadcast, converted, reshaped, transposed
from tessera.graph.match_attention_bwd import BackwardMatch
from tessera.graph.match_composite import COMPOSITE_NAME, match_composite
from tessera.graph.remat import Merge, merge_recomputes, restore
from tessera.graph.rewrite_report import REPORTS, Entry, RewriteReport

MATCH_MODES = ("composite", "patterns")
FORMS = ("tessera", "custom_call")


@dataclass(frozen=True)
class RewriteAttentionPass(ModulePass):
    """Replace attention in StableHLO graphs by Tessera's kernels (module docstring)."""

    name = "rewrite-attention"
    match: str = "composite"
    form: str = "tessera"
    input_level: ClassVar[None] = None

    def __post_init__(self) -> None:
        if self.match not in MATCH_MODES:
            raise ValueError(f"rewrite-attention: match must be one of {', '.join(MATCH_MODES)}, got '{self.match}'")
        if self.form not in FORMS:
            raise ValueError(f"rewrite-attention: form must be one of {', '.join(FORMS)}, got '{self.form}'")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from tessera.graph.graph_edit import remove_unused_functions

        changed = False
        for fn in [f for f in op.ops if isinstance(f, func.FuncOp) and f.body.blocks
                   and (f.sym_visibility is None or f.sym_visibility.data != "private")]:
            report, copy = rewrite_function(fn, op, self.match, self.form)
            REPORTS.append(report)
            if copy is not None:
                op.body.block.insert_op_before(copy, fn)
                op.body.block.erase_op(fn)
                changed = True
        if changed:
            remove_unused_functions(op)


def _f32(x: float) -> float:
    import numpy as np

    return float(np.float32(x))


def _config_text(config: dict) -> str:
    bias = ", with the bias as its fourth operand" if "_bias" in config["kernel"] else ""
    return f"kernel {config['kernel']}, scale {config['scale']:g}, causal {str(config['causal']).lower()}{bias}"


def _emit(name: str, target: str, form: str, operands: list[SSAValue], result_types: list, config: dict,
          before: Operation) -> Operation:
    """A `tessera` op (form "tessera") or its custom_call (form "custom_call") inserted before `before`."""
    from tessera.dialects.attention import AttentionBwdOp, AttentionOp

    if form == "tessera":
        cls = AttentionOp if name == "tessera.attention" else AttentionBwdOp
        op = cls.create(operands=operands, result_types=result_types,
                        properties=cls.config_properties(**config))
    else:
        from tessera.dialects import stablehlo

        backend = {"causal": BoolAttr.from_bool(config["causal"]), "scale": FloatAttr(config["scale"], f32),
                   "head_dim": IntegerAttr(config["head_dim"], 64), "dtype": StringAttr(config["dtype"]),
                   "kernel": StringAttr(config["kernel"]), "block_m": IntegerAttr(config["block_m"], 64),
                   "block_n": IntegerAttr(config["block_n"], 64)}
        if name == "tessera.attention" and len(operands) == 4:  # (q, k, v, bias)
            backend["bias"] = BoolAttr.from_bool(True)
        op = stablehlo.CustomCallOp.create(operands=operands, result_types=result_types, properties={
            "call_target_name": StringAttr(target), "api_version": IntegerAttr(4, i32),
            "backend_config": DictionaryAttr(backend)})
    op.location = before.location  # diagnostics of the new op point at what it replaces
    before.parent_block().insert_op_before(op, before)
    return op


BIAS_LABELS = ("b0", "b1", "g", "q", "k")
"""The kernel's bias layout [batch, heads, seq_q, seq_k] by label (heads: kv heads b1 times query groups g)."""


def group_count(m: ForwardMatch) -> int:
    """The query groups of `m` (jax.nn.dot_product_attention's rank-5 Q, "g"), 1 when Q has none."""
    return shape(m.q)[m.q_labels.index("g")] if "g" in m.q_labels else 1


def bias_operand(m: ForwardMatch, at: Operation) -> tuple[SSAValue, tuple[str, ...]]:
    """The bias of `m` as the kernel reads it, [b0 or 1, b1 * g or 1, q, k] (a transpose and, for a bias of
    lower rank, a reshape inserted before `at`; dimensions without a label are of size 1), and the dimensions it
    is broadcast along ("batch", "heads")."""
    present = sorted((x for x in m.bias_labels if x in BIAS_LABELS), key=BIAS_LABELS.index)
    others = [i for i, x in enumerate(m.bias_labels) if x not in BIAS_LABELS]
    bias = transposed(m.bias, [m.bias_labels.index(label) for label in present] + others, at)
    sizes = dict(zip(present, bias.type.get_shape()))
    target = [sizes.get("b0", 1), sizes.get("b1", 1) * sizes.get("g", 1), sizes.get("q", 1), sizes.get("k", 1)]
    bias = reshaped(bias, target, at)
    heads = shape(m.q)[m.q_labels.index("b1")] if "b1" in m.q_labels else 1
    full = (shape(m.q)[m.q_labels.index("b0")], heads * group_count(m))
    broadcast = tuple(name for name, size, n in zip(("batch", "heads"), target[:2], full) if size == 1 and n != 1)
    return bias, broadcast


def _heads(value: SSAValue, labels: list, seq: str, groups: int, at: Operation) -> SSAValue:
    """Q, K or V in Tessera's layout [batch, heads, seq, head_dim]: a Q with query groups has its heads
    b1 * groups + g (the groups merged after the kv heads); K and V of grouped attention are repeated over the
    groups (query head h reads kv head h // groups, Tessera's GQA convention), else transposed only; a single
    head's [batch, seq, head_dim] (no b1) gets a heads dimension of 1."""
    if "b1" not in labels:
        value, labels = reshaped(value, [*value.type.get_shape(), 1], at), [*labels, "b1"]
    if "g" in labels:
        value = transposed(value, perm_to(labels, ("b0", "b1", "g", seq, "d")), at)
    else:
        value = transposed(value, perm_to(labels, ("b0", "b1", seq, "d")), at)
        if groups == 1:
            return value
        b, h, n, d = value.type.get_shape()
        value = broadcast(value, [b, h, groups, n, d], [0, 1, 3, 4], at)
    b, h, g, n, d = value.type.get_shape()
    return reshaped(value, [b, h * g, n, d], at)


def current(value: SSAValue, replaced: dict[SSAValue, SSAValue]) -> SSAValue:
    """`value`, or the value an earlier rewrite of the function replaced it by: the matches are all made before
    the first rewrite, so a match reads what the graph computed then (the second of two chained attentions
    reads the first's BMM2, which the first's rewrite replaces by the kernel's output)."""
    while value in replaced:
        value = replaced[value]
    return value


def rewrite_forward(m: ForwardMatch, with_lse: bool, form: str,
                    replaced: dict[SSAValue, SSAValue] | None = None) -> tuple[Operation, dict]:
    """Replace the forward `m` (its BMM2's result, or the composite's) by Tessera's attention between
    transposes (and, for query groups, reshapes), with its bias as a fourth operand; returns the new op and
    its configuration. `replaced` maps the values earlier rewrites replaced to their replacements (`current`);
    this one's are added."""
    replaced = {} if replaced is None else replaced
    m.q, m.k, m.v = (current(x, replaced) for x in (m.q, m.k, m.v))
    m.bias = None if m.bias is None else current(m.bias, replaced)
    at = m.bmm2
    groups = group_count(m)
    q = _heads(m.q, m.q_labels, "q", groups, at)
    k = _heads(m.k, m.k_labels, "k", groups, at)
    v = _heads(m.v, m.v_labels, "k", groups, at)
    operands, broadcast_along = [q, k, v], None
    if m.bias is not None:
        bias, broadcast_along = bias_operand(m, at)
        operands.append(bias)
    config = kernel_config(m.head_dim, m.causal, m.dtype, _f32(m.scale), broadcast_along)
    element_type = q.type.element_type
    types = [TensorType(element_type, q.type.get_shape())]
    if with_lse:
        types.append(TensorType(f32, q.type.get_shape()[:3]))
    op = _emit("tessera.attention", FORWARD_TARGET, form, operands, types, config, at)
    out, order = op.results[0], CANONICAL
    if "g" in m.out_labels:
        b, h, n, d = out.type.get_shape()
        out, order = reshaped(out, [b, h // groups, groups, n, d], at), ("b0", "b1", "g", "q", "d")
    out_labels = m.out_labels if "b1" in m.out_labels else [*m.out_labels, "b1"]  # a single head: dropped after
    out = transposed(out, [order.index(label) for label in out_labels], at)
    out = reshaped(out, shape(m.bmm2.results[0]), at)
    out = converted(out, m.bmm2.results[0].type.element_type, at)
    replaced[m.bmm2.results[0]] = out
    m.bmm2.results[0].replace_all_uses_with(out)
    if m.bmm2.name == "stablehlo.composite":
        at.parent_block().erase_op(at)
    return op, config


def rewrite_backward(b: BackwardMatch, forward_op: Operation, config: dict, form: str,
                     replaced: dict[SSAValue, SSAValue] | None = None) -> Operation:
    """Replace dQ, dK, dV of `b` by Tessera's backward op, taking the forward op's O and LSE; it is inserted
    before the first of the three products (which `match_backward` checked comes after the forward)."""
    block = forward_op.parent_block()
    at = min((b.dq, b.dk, b.dv), key=block.get_operation_index)
    q, k, v = forward_op.operands
    o, lse = forward_op.results
    replaced = {} if replaced is None else replaced
    do = converted(_heads(current(b.do, replaced), b.do_labels, "q", 1, at), q.type.element_type, at)
    op = _emit("tessera.attention_bwd", BACKWARD_TARGET, form, [q, k, v, o, lse, do], [q.type, k.type, v.type],
               config, at)
    for result, product, labels, seq in ((op.results[0], b.dq, b.dq_labels, "q"),
                                         (op.results[1], b.dk, b.dk_labels, "k"),
                                         (op.results[2], b.dv, b.dv_labels, "k")):
        order = ("b0", "b1", seq, "d")
        labels = labels if "b1" in labels else [*labels, "b1"]  # a single head: dropped after
        out = transposed(result, [order.index(label) for label in labels], at)
        out = converted(reshaped(out, shape(product.results[0]), at), product.results[0].type.element_type, at)
        replaced[product.results[0]] = out
        product.results[0].replace_all_uses_with(out)
    return op


def nested_near_misses(block, module: ModuleOp) -> list[Entry]:
    """A near miss for each attention inside another op's region (the body of the `stablehlo.while` that
    `jax.lax.scan` writes, a `case` branch), directly or in a function called from there: the matcher rewrites
    a function's top-level ops only, and the StableHLO interpreter does not run those ops, so a rewrite there
    could not be compared."""
    from tessera.graph.match_attention_fwd import match_forward

    functions = {f.sym_name.data: f for f in module.ops if isinstance(f, func.FuncOp)}
    entries: list[Entry] = []

    def visit(ops, inside: str, seen: set) -> None:
        for op in ops:
            if isinstance(op, func.CallOp) and (callee := functions.get(op.callee.root_reference.data)) is not None \
                    and callee not in seen:
                seen.add(callee)
                visit(callee.body.walk(), inside, seen)
            elif op.name == "stablehlo.dot_general" and (m := match_forward(op)) is not None:
                entries.append(Entry("forward", where(op), list(m.found),
                                     rule=f"it is inside the region of {inside}: only attention "
                                          "in a function's top-level block is rewritten"))

    for top in block.ops:
        name = top.op_name.data if hasattr(top, "op_name") else top.name  # an opaque op keeps its own name
        for region in top.regions:
            visit(region.walk(), f"'{name}' at {where(top)}", set())
    return entries


def rewrite_function(fn: func.FuncOp, module: ModuleOp, mode: str, form: str) -> tuple[RewriteReport, func.FuncOp | None]:
    """Match and rewrite one function on a copy (module docstring); returns the report and the rewritten copy
    (None when nothing was rewritten)."""
    from tessera.graph.graph_edit import fold_transposes_of, inline_calls, remove_dead_ops
    from tessera.graph.match_attention_bwd import match_backwards, resolve

    copy = fn.clone()
    report = RewriteReport(fn.sym_name.data, mode)
    inline_calls(copy, module)
    block = copy.body.blocks.first
    forwards = [match_composite(op, module) for op in block.ops
                if op.name == "stablehlo.composite" and op.name_.data == COMPOSITE_NAME]
    backwards = []
    merge = Merge()
    if mode == "patterns":
        from tessera.graph.match_attention_fwd import match_forward

        merge = merge_recomputes(block)  # jax.checkpoint's recompute read as the forward it repeats
        forwards += [m for op in list(block.ops) if op.name == "stablehlo.dot_general" and op not in merge.merged
                     and (m := match_forward(op)) is not None]
        backwards = match_backwards(forwards, block, merge.merged)
        forwards = resolve(forwards, backwards)
        report.entries += nested_near_misses(block, module)
    rewritten, replaced = 0, {}
    for m in forwards:
        kind = "composite" if m.bmm1 is None and m.bmm2.name == "stablehlo.composite" else "forward"
        entry = Entry(kind, where(m.bmm2), list(m.found))
        if m.refusal is not None:
            entry.rule, entry.matched = m.refusal.rule, m.refusal.matched
        else:
            backward = m.backward if m.backward is not None and m.backward.refusal is None else None
            op, config = rewrite_forward(m, backward is not None, form, replaced)
            entry.became = f"{op.name if form == 'tessera' else 'custom_call @' + FORWARD_TARGET} ({_config_text(config)})"
            rewritten += 1
            if backward is not None:

                bwd_config = backward_config(m.head_dim, m.causal, m.dtype, config["scale"])
                bwd_op = rewrite_backward(backward, op, bwd_config, form, replaced)
                backward.became = (f"{bwd_op.name if form == 'tessera' else 'custom_call @' + BACKWARD_TARGET} "
                                   f"({_config_text(bwd_config)})")
        report.entries.append(entry)
    for b in backwards:
        entry = Entry("backward", b.place, list(b.found), rule=b.refusal.rule if b.refusal else None,
                      became=getattr(b, "became", None))
        report.entries.append(entry)
        rewritten += entry.became is not None
    if not rewritten:
        return report, None
    restore(merge)
    fold_transposes_of(block, ("tessera.attention", "tessera.attention_bwd"))
    remove_dead_ops(block)
    return report, copy

