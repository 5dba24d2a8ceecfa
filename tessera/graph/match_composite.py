"""Matching `stablehlo.composite "tessera.attention"` (what `jax.lax.composite` writes): the forward match its
attributes stand for, under the contract `passes/rewrite_attention.py` states (Q, K, V rank 4 in layout "BSHD", the
default, or "BHSD"; `causal`, default false; `scale`, default 1/sqrt(head_dim); no other attribute), refused where
the decomposition, read by the forward matcher as an attention, computes another one.
"""

from __future__ import annotations

import math

from xdsl.dialects import func
from xdsl.dialects.builtin import BoolAttr, FloatAttr, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import BlockArgument, Operation

from tessera.graph.attention_match import DOT, ForwardMatch, Refusal, describe, element, refuse_empty, shape

COMPOSITE_NAME = "tessera.attention"
COMPOSITE_ATTRIBUTES = ("layout", "causal", "scale")
"""The composite_attributes the composite's contract names (`match_composite`); any other is refused by name."""


def match_composite(op: Operation, module: ModuleOp | None = None) -> ForwardMatch:
    """The forward match a `stablehlo.composite "tessera.attention"` stands for (its contract: module
    docstring); its `refusal` says why it cannot be replaced, among others that its decomposition (a function of
    `module`) computes another attention than its attributes say (`decomposition_disagrees`)."""
    from tessera.kernels import HEAD_DIMS

    attrs = op.composite_attributes.data if op.composite_attributes is not None else {}
    layout = attrs.get("layout", StringAttr("BSHD"))
    labels = {"BSHD": (["b0", "q", "b1", "d"], ["b0", "k", "b1", "d"]),
              "BHSD": (["b0", "b1", "q", "d"], ["b0", "b1", "k", "d"])}
    m = ForwardMatch(None, op, *(op.operands[:3] if len(op.operands) == 3 else (None, None, None)),
                     [], [], [], [], 1.0, False, 0, "", ops=[op])
    m.found.append(f"composite \"{COMPOSITE_NAME}\"")
    try:
        if len(op.operands) != 3 or len(op.results) != 1:
            raise Refusal(f"the composite takes {len(op.operands)} operands and has {len(op.results)} results; "
                          "the contract is (Q, K, V) -> O")
        unknown = sorted(set(attrs) - set(COMPOSITE_ATTRIBUTES))
        if unknown:  # (`is_causal` read as nothing would be a silently non-causal rewrite)
            raise Refusal(f"composite_attributes has {', '.join(unknown)}: the contract names only "
                          f"{', '.join(COMPOSITE_ATTRIBUTES)}")
        if not isinstance(layout, StringAttr) or layout.data not in labels:
            raise Refusal(f"composite_attributes.layout must be \"BSHD\" or \"BHSD\", got {layout}")
        q_labels, k_labels = labels[layout.data]
        m.q_labels, m.k_labels, m.v_labels, m.out_labels = list(q_labels), list(k_labels), list(k_labels), list(q_labels)
        shapes = [shape(v) for v in op.operands]
        if any(len(s) != 4 for s in shapes) or shape(op.results[0]) != shapes[0]:
            raise Refusal(f"Q, K, V and O must be rank 4 and O of Q's shape, got {[list(s) for s in shapes]}")
        q, k, v = ({lab: n for lab, n in zip(ls, s)} for ls, s in zip((q_labels, k_labels, k_labels), shapes))
        if q["b0"] != k["b0"] or q["b1"] != k["b1"] or k != v or q["d"] != k["d"]:
            raise Refusal(f"Q, K, V shapes {[list(s) for s in shapes]} do not agree in layout {layout.data}")
        refuse_empty(dict(zip("QKV", op.operands)))
        m.head_dim = q["d"]
        if m.head_dim not in HEAD_DIMS:
            raise Refusal(f"head_dim {m.head_dim} is not one the kernels support ({', '.join(map(str, HEAD_DIMS))})")
        types = {element(x) for x in op.operands} | {element(op.results[0])}
        if len(types) != 1 or not types <= {"bf16", "f16"}:
            raise Refusal(f"Q, K, V, O are {', '.join(sorted(types))}: the kernels take bf16 or f16 (all alike)")
        m.dtype = types.pop()
        causal = attrs.get("causal", BoolAttr.from_bool(False))
        if not isinstance(causal, IntegerAttr) or causal.type.width.data != 1:
            raise Refusal(f"composite_attributes.causal must be true or false, got {causal}")
        m.causal = bool(causal.value.data)
        scale = attrs.get("scale")
        if scale is not None and not isinstance(scale, FloatAttr):
            raise Refusal(f"composite_attributes.scale must be a float, got {scale}")
        m.scale = scale.value.data if scale is not None else 1 / math.sqrt(m.head_dim)
        if not (0 < m.scale < float("inf")):
            raise Refusal(f"composite_attributes.scale {m.scale:g} is not positive and finite")
        if m.causal and q["q"] > k["k"]:
            raise Refusal(f"causal with seq_q {q['q']} > seq_k {k['k']}: rows that see no key")
        m.found.append(f"layout {layout.data}, causal {str(m.causal).lower()}, scale {m.scale:g}")
        if module is not None and (otherwise := decomposition_disagrees(op, m, module)) is not None:
            raise Refusal(f"its decomposition @{op.decomposition.root_reference.data} {otherwise}: the attributes "
                          "and the decomposition must say one attention (jax.lax.composite's keyword arguments are "
                          "its attributes)")
    except Refusal as refusal:
        m.refusal = refusal
    return m


def decomposition_disagrees(op: Operation, m: ForwardMatch, module: ModuleOp) -> str | None:
    """How the decomposition of the composite `op` (matched as `m` from its attributes) computes another attention,
    where the forward matcher reads it as one, without a bias or dropout: masked otherwise (causal), scaled
    otherwise, Q, K or V another operand or laid out otherwise; None when it agrees or is not read so (the
    attributes are the contract then). `jax.lax.composite(f, name=...)(q, k, v)` with `causal=True` written inside
    `f` rather than passed as a keyword gives a causal decomposition and no `causal` attribute."""
    from tessera.graph.graph_edit import inline_calls
    from tessera.graph.match_attention_fwd import match_forward

    name = op.decomposition.root_reference.data
    fn = next((f for f in module.ops if isinstance(f, func.FuncOp) and f.sym_name.data == name and f.body.blocks),
              None)
    if fn is None:
        return None
    copy = fn.clone()
    inline_calls(copy, module)
    block = copy.body.blocks.first
    found = [x for o in block.ops if o.name == DOT and (x := match_forward(o)) is not None and x.refusal is None
             and x.bias is None]
    if len(found) != 1:
        return None
    x = found[0]
    if x.causal != m.causal:
        return f"is {'' if x.causal else 'not '}causal"
    if not all(isinstance(value, BlockArgument) for value in (x.q, x.k, x.v)):
        return None  # (Q scaled before the product, say: the scale and the roles are not read off the products)
    for role, value, labels, expected in (("Q", x.q, x.q_labels, m.q_labels), ("K", x.k, x.k_labels, m.k_labels),
                                          ("V", x.v, x.v_labels, m.v_labels)):
        index = "QKV".index(role)
        if value.index != index:
            return f"takes {describe(value)} as {role}, not its argument %arg{index}"
        if _axes(labels) != _axes(expected):
            return f"reads {role} as {_layout(labels)}, not {_layout(expected)}"
    if abs(x.scale - m.scale) > m.scale / 128:  # (a bf16 scale in the graph is within 2^-9 of the attribute)
        return f"scales by {x.scale:g}, not {m.scale:g}"
    return None


def _axes(labels: list) -> tuple:
    """Where the sequence and head_dim are among `labels` (batch and heads may be paired in either order)."""
    return tuple(i for i, x in enumerate(labels) if x in ("q", "k")), labels.index("d")


def _layout(labels: list) -> str:
    return "[" + ", ".join({"q": "seq", "k": "seq", "d": "head_dim"}.get(x, "batch or heads") for x in labels) + "]"
