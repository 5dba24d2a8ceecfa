"""The forward attention matcher: `match_forward(bmm2)` walks bottom-up from a dot_general taken as BMM2
(pattern and rules: `tessera.graph.attention_match`).

It returns None when the dot_general is not the end of a softmax (most matmuls of a model: nothing to
report), else a `ForwardMatch`; a match whose `refusal` is set is reported with that rule and not rewritten
(a near miss, or "matched, not rewritten" for dropout). An additive bias is rewritten as the kernel's Bias
operand (`match_bias`).
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation, SSAValue

from tessera.graph.attention_match import (
    DOT,
    FOLDED_OPS,
    KERNEL_TYPES,
    MASK_OPS,
    NEGATIVE_FILL,
    ForwardMatch,
    Mask,
    Refusal,
    Softmax,
    causal_offset,
    describe,
    dot_labels,
    element,
    evaluate,
    match_softmax,
    perm_to,
    producer,
    refuse_empty,
    rounded_to,
    shape,
    sides,
    splat_constant,
    strip,
    where,
    widened,
)

BIAS_OPS = MASK_OPS | FOLDED_OPS | {"stablehlo.abs", "stablehlo.maximum", "stablehlo.minimum"}
"""Ops a bias computed from iota and constants (ALiBi's `-slope |i - j|`) is evaluated through
(`_refuse_rows_without_keys`)."""
ADDED_MASK_LIMIT = 2**25
"""An added tensor with more elements than this is not evaluated to see whether it is a mask: it stays a bias
(what it is written as; the bound of the backward's numeric check, `NUMERIC_CHECK_LIMIT`)."""
SCORE_ORDER = ("b0", "b1", "g", "q", "k")
"""The scores' dimensions in Tessera's order: batch, heads (kv heads, query groups), queries, keys (a single head's
scores, of one batching dimension, have no b1)."""
GROUPED = ("scores reshaped on their way to the softmax, or a max or sum over another axis or on a copy of the "
           "softmax's input laid out otherwise, are not matched: dimensions are followed through products and transposes (jax.nn."
           "dot_product_attention's rank-5 [batch, kv_heads, groups, seq_q, seq_k] scores are)")
"""Why scores that change shape between BMM1 and the softmax are a near miss."""


def match_dropout(value: SSAValue, ops: list[Operation]) -> Softmax | None:
    """If `value` is dropout applied to a softmax output — `select(keep, P [/ c | * c], 0)` or `P * mask` —
    the softmax (dropout's ops recorded in `ops`), else None."""
    seen: list[Operation] = []
    current = strip(value, seen)
    op = producer(current)
    if op is None:
        return None
    if op.name == "stablehlo.select" and splat_constant(op.operands[2], []) == 0.0:
        inner = strip(op.operands[1], seen)
        seen.append(op)
        scaled = producer(inner)
        if scaled is not None and scaled.name in ("stablehlo.divide", "stablehlo.multiply") \
                and splat_constant(scaled.operands[1], []) is not None:
            seen.append(scaled)
            inner = scaled.operands[0]
        softmax = match_softmax(inner)
    elif op.name == "stablehlo.multiply":
        seen.append(op)
        softmax = match_softmax(op.operands[0]) or match_softmax(op.operands[1])
    else:
        return None
    if softmax is not None:
        ops.extend(seen)
    return softmax


def _reaches_dot(value: SSAValue, depth: int = 8) -> bool:
    """Whether `value` comes from a dot_general through a few elementwise ops (which operand of a binary op on
    the score path is the scores, and which the scale or bias)."""
    op = producer(value)
    if op is None or depth == 0:
        return False
    if op.name == DOT:
        return True
    if op.name in ("stablehlo.convert", "stablehlo.multiply", "stablehlo.divide", "stablehlo.add",
                   "stablehlo.select", "stablehlo.subtract", "stablehlo.transpose", "stablehlo.reshape"):
        return any(_reaches_dot(v, depth - 1) for v in op.operands)
    return False


class _ScoreWalk:
    """What lies between BMM1 and the softmax input: scale factors, a bias, masks (module docstring)."""

    def __init__(self) -> None:
        self.scale = 1.0
        self.scale_text: list[str] = []
        self.bias: Operation | None = None
        self.bias_factor = 1.0  # the scale factors applied after the bias (met before it, walking down)
        self.masks: list[tuple[Operation, SSAValue, bool | None, float]] = []
        """(select or add, predicate or added values, whether pred true is visible (None: added, 0 is), the fill
        (of an added mask: the scale factors met before it, walking down, as `bias_factor`))"""
        self.ops: list[Operation] = []
        self.transposes: list[list[int]] = []
        """The permutations of the transposes met, walking down (jax.nn.dot_product_attention's)."""
        self.depth: dict[Operation, int] = {}
        """For each mask and the bias: how many transposes were met above it (`labels_at`)."""

    def labels_at(self, op: Operation | None, bmm1_labels: list) -> list:
        """The labels of the scores where `op` (a mask, the bias; None: the softmax input) takes them, from
        BMM1's result labels through the transposes below it."""
        labels = list(bmm1_labels)
        for perm in reversed(self.transposes[self.depth[op] if op is not None else 0:]):
            labels = [labels[p] for p in perm]
        return labels

    def walk(self, value: SSAValue) -> Operation:
        """Walk from the softmax input down to BMM1; returns it, or raises Refusal."""
        while True:
            value = strip(value, self.ops)
            op = producer(value)
            if op is None:
                raise Refusal(f"the softmax input comes from {describe(value)}, not from a product Q K^T")
            if op.name == DOT:
                return op
            if op.name == "stablehlo.select":
                # a fill hides a key where it reaches the softmax at or below NEGATIVE_FILL: times the scale
                # factors applied after the mask (x 1e-9 makes a -1e9 fill -1, which hides nothing)
                fills = [splat_constant(v, []) for v in op.operands[1:]]
                fills = [None if f is None else f * self.scale for f in fills]
                self.depth[op] = len(self.transposes)
                if fills[1] is not None and fills[1] <= NEGATIVE_FILL:
                    self.masks.append((op, op.operands[0], True, fills[1]))
                    value = op.operands[1]
                elif fills[0] is not None and fills[0] <= NEGATIVE_FILL:
                    self.masks.append((op, op.operands[0], False, fills[0]))
                    value = op.operands[2]
                else:
                    raise Refusal(f"a select at {where(op)} on the scores is not a mask (neither branch, times the "
                                  f"scale after it, is -inf or at most {NEGATIVE_FILL:g})", op)
            elif op.name in ("stablehlo.multiply", "stablehlo.divide"):
                constants = [splat_constant(v, []) for v in op.operands]
                if constants[1] is not None:
                    factor, value = constants[1], op.operands[0]
                elif constants[0] is not None and op.name == "stablehlo.multiply":
                    factor, value = constants[0], op.operands[1]
                else:
                    data = [v for v in op.operands if _reaches_dot(v)]
                    other = [v for v in op.operands if v not in data]
                    culprit = other[0] if other else op.operands[1]
                    raise Refusal(f"the scale at {where(op)} is not a constant: it is {describe(culprit)}", op)
                if op.name == "stablehlo.divide" and factor == 0:
                    raise Refusal(f"the scores are divided by 0 at {where(op)}", op)
                if op.name == "stablehlo.divide":
                    self.scale /= factor
                    self.scale_text.append(f"/ {factor:g} (divide)")
                else:
                    self.scale *= factor
                    self.scale_text.append(f"x {factor:g} (multiply)")
            elif op.name == "stablehlo.add":
                if any(splat_constant(v, []) is not None for v in op.operands):
                    raise Refusal(f"a constant is added to the scores at {where(op)}", op)
                data = [v for v in op.operands if _reaches_dot(v)]
                if len(data) != 1:
                    raise Refusal(f"the add at {where(op)} on the scores has no single score operand", op)
                other = op.operands[1] if op.operands[0] is data[0] else op.operands[0]
                self.depth[op] = len(self.transposes)
                if _is_additive_mask(other, self.scale):
                    self.masks.append((op, other, None, self.scale))
                    value = data[0]
                elif self.bias is not None:
                    raise Refusal(f"two biases are added to the scores (at {where(op)} and {where(self.bias)})", op)
                else:
                    self.bias, self.bias_factor = op, self.scale
                    value = data[0]
            elif op.name == "stablehlo.transpose":
                self.transposes.append([int(d) for d in op.permutation.get_values()])
                value = op.operands[0]
            elif op.name == "stablehlo.reshape":
                raise Refusal(f"'{op.name}' at {where(op)} between BMM1 and the softmax: {GROUPED}", op)
            else:
                raise Refusal(f"'{op.name}' at {where(op)} between BMM1 and the softmax is not a scale, bias or "
                              "mask", op)
            self.ops.append(op)


def _is_additive_mask(value: SSAValue, factor: float) -> bool:
    """Whether `value`, added to the scores and then scaled by `factor` (the scale factors applied after the
    add), is a mask written as a bias (`s + jnp.where(mask, 0, -1e9)`): computed from iota and constants alone,
    every element 0 or, times `factor`, at most NEGATIVE_FILL, some of them hidden. Anything else added (data,
    ALiBi slopes computed from iota, a fill a small factor brings above NEGATIVE_FILL) is a bias."""
    if int(np.prod(shape(value))) > ADDED_MASK_LIMIT:
        return False
    try:
        values = evaluate(value, MASK_OPS)
    except Refusal:
        return False
    hidden = values * factor <= NEGATIVE_FILL
    return bool(hidden.any() and np.all(hidden | (values == 0)))


def _through_layout(value: SSAValue, labels: list) -> tuple[SSAValue, list]:
    """Follow a bias down through converts, transposes and reshapes that only add or drop dimensions of size 1
    (jax.nn.dot_product_attention's [batch, kv_heads, 1, seq_q, seq_k]), carrying its dimensions' labels
    (None for a dimension of size 1 a reshape added on the way up). A convert into bf16 or f16 ends the walk: the
    bias the graph adds is the rounded tensor (ALiBi computed in float32, cast to bf16, then to the float32
    scores' type by jax.nn.dot_product_attention)."""
    while (op := producer(value)) is not None:
        if op.name == "stablehlo.convert":
            if element(value) in KERNEL_TYPES:
                break
        elif op.name == "stablehlo.transpose":
            perm = [int(d) for d in op.permutation.get_values()]
            inner: list = [None] * len(perm)
            for i, p in enumerate(perm):
                inner[p] = labels[i]
            labels = inner
        elif op.name == "stablehlo.reshape":
            source, result = shape(op.operands[0]), shape(op.results[0])
            if [n for n in source if n != 1] != [n for n in result if n != 1]:
                break
            kept = iter([x for x, n in zip(labels, result) if n != 1])
            labels = [next(kept) if n != 1 else None for n in source]
        else:
            break
        value = op.operands[0]
    return value, labels


def match_bias(m: ForwardMatch, add: Operation, s_labels: list[str | None], bias_factor: float) -> None:
    """Set `m.bias` and `m.bias_labels` from the `add` of a bias to the scores (labelled `s_labels`), or raise
    the Refusal naming what the kernel's Bias [batch|1, heads|1, seq_q, seq_k] in Q's type cannot be: a bias
    the scale multiplies too (added before it), one broadcast along the queries or keys, one of another
    element type. Converts from Q's type and a `broadcast_in_dim` along batch and heads are seen through."""
    bias = next(v for v in add.operands if not _reaches_dot(v))
    if bias_factor != 1.0:
        raise Refusal(f"the bias at {where(add)} is added before a scale (x {bias_factor:g}): the kernel adds its "
                      "bias after the scale", add)
    source, labels = _through_layout(bias, list(s_labels))
    broadcast = producer(source)
    if broadcast is not None and broadcast.name == "stablehlo.broadcast_in_dim":
        dims = [int(d) for d in broadcast.broadcast_dimensions.get_values()]
        inner = shape(broadcast.operands[0])
        full = shape(broadcast.results[0])
        spread = [labels[d] for d in range(len(full)) if d not in dims or inner[dims.index(d)] != full[d]]
        if "q" in spread or "k" in spread:
            along = " and ".join(x for x, name in (("the queries", "q"), ("the keys", "k")) if name in spread)
            raise Refusal(f"the bias at {where(add)} ({describe(bias)}, {list(inner)}) is broadcast along {along}: "
                          "the kernel reads a bias [batch or 1, heads or 1, seq_q, seq_k]", add)
        source, labels = _through_layout(broadcast.operands[0], [labels[d] for d in dims])
    if element(source) != m.dtype:
        raise Refusal(f"the bias at {where(add)} is {element(source)}: the kernel reads a bias in {m.dtype} (the type "
                      "of Q, K and V)", add)
    sizes = {x: n for x, n in zip(labels, shape(source)) if n != 1}
    if "g" in m.q_labels and shape(m.q)[m.q_labels.index("g")] != 1 and ("b1" in sizes) != ("g" in sizes):
        raise Refusal(f"the bias at {where(add)} is broadcast along the {'query groups' if 'b1' in sizes else 'kv heads'}"
                      " only: the kernel reads a bias [batch or 1, heads or 1, seq_q, seq_k]", add)
    m.bias, m.bias_labels = source, labels


def _label_bmm1(bmm1: Operation, walk: _ScoreWalk, axis: int) -> tuple[bool, list, list]:
    """(whether Q is BMM1's lhs, Q's labels, K's labels): batching dimensions b0, b1 in pairing order, the
    contracting one d; K is the operand whose free dimension the softmax normalises (`axis` of the softmax
    input, followed through the walk's transposes), "k"; Q's free dimension is "q", or, of rank 5, Q has two
    and the one right after its heads (b1) is the query group "g" (jax.nn.dot_product_attention's
    [batch, seq, kv_heads, groups, head_dim]: query head b1 * groups + g). Raises Refusal otherwise."""
    dims = sides(bmm1)
    batching = len(dims["lhs_batching_dimensions"])
    if batching not in (1, 2) or len(dims["lhs_contracting_dimensions"]) != 1:
        raise Refusal(f"BMM1 at {where(bmm1)} is not a product over two batching dimensions (batch, heads), or one "
                      "(a single head: `q @ k.swapaxes(-1, -2)` on [batch, seq, head_dim]), and one contracting "
                      "dimension (head_dim)", bmm1)
    labels = {}
    for side in ("lhs", "rhs"):
        rank = len(shape(bmm1.operands[0 if side == "lhs" else 1]))
        names: list = [f"{side}{i}" for i in range(rank)]
        for i, d in enumerate(dims[f"{side}_batching_dimensions"]):
            names[d] = f"b{i}"
        names[dims[f"{side}_contracting_dimensions"][0]] = "d"
        labels[side] = names
    softmax_labels = walk.labels_at(None, dot_labels(bmm1, labels["lhs"], labels["rhs"]))
    key = softmax_labels[axis]
    if key in ("b0", "b1", "d"):
        raise Refusal(f"the softmax runs over axis {axis} of the scores, a batching dimension, not the keys")
    q_is_lhs = key.startswith("rhs")
    k_side, q_side = ("rhs", "lhs") if q_is_lhs else ("lhs", "rhs")
    k_labels = ["k" if x == key else x for x in labels[k_side]]
    q_free = [i for i, x in enumerate(labels[q_side]) if x.startswith(q_side)]
    if any(x.startswith(k_side) for x in k_labels) or len(k_labels) != 2 + batching:
        raise Refusal(f"K of BMM1 at {where(bmm1)} has dimensions other than batch, heads, keys and head_dim", bmm1)
    q_labels = list(labels[q_side])
    if len(q_free) == 1:
        q_labels[q_free[0]] = "q"
    elif len(q_free) == 2 and "b1" in q_labels and q_labels.index("b1") + 1 in q_free:
        g = q_labels.index("b1") + 1
        q_labels = ["g" if i == g else "q" if i in q_free else x for i, x in enumerate(q_labels)]
    else:
        raise Refusal(f"Q of BMM1 at {where(bmm1)} has {len(q_free)} free dimensions: attention takes the queries, "
                      "and, right after the heads, the query groups", bmm1)
    return q_is_lhs, q_labels, k_labels


def match_forward(bmm2: Operation) -> ForwardMatch | None:
    """The attention ending at `bmm2` (a dot_general), or None if neither operand is a softmax output."""
    for p_index in (0, 1):
        dropout_ops: list[Operation] = []
        softmax = match_softmax(bmm2.operands[p_index]) or match_dropout(bmm2.operands[p_index], dropout_ops)
        if softmax is not None:
            break
    else:
        for p_index in (0, 1):
            exp, masked = _unmatched_softmax(bmm2.operands[p_index])
            if exp is not None:
                rule = (f"the softmax at {where(exp)} is masked after it or in its max or sum (jax.nn.softmax(where=)) "
                        "otherwise than its input is masked with -inf: not matched" if masked else
                        f"the max or the sum of the softmax at {where(exp)} is not taken over the axis it normalises: "
                        f"{GROUPED}")
                return ForwardMatch(None, bmm2, None, None, None, [], [], [], [], 1.0, False, 0, "",
                                    found=[f"exp(x - max) / sum at {where(exp)}"], refusal=Refusal(rule))
        for p_index in (0, 1):
            exp = _logsumexp_softmax(bmm2.operands[p_index])
            if exp is not None:
                return ForwardMatch(None, bmm2, None, None, None, [], [], [], [], 1.0, False, 0, "",
                                    found=[f"exp(x - logsumexp(x)) at {where(exp)}"],
                                    refusal=Refusal(f"the softmax at {where(exp)} is written exp(x - logsumexp(x)): not "
                                                    "matched (exp(x - max) / sum, as jax.nn.softmax writes it, is)"))
        return None
    ops = [bmm2, *dropout_ops, *softmax.ops]
    match = ForwardMatch(None, bmm2, None, None, bmm2.operands[1 - p_index], [], [], [], [], 1.0, False, 0, "",
                         softmax=softmax, ops=ops)
    try:
        _complete(match, p_index, dropout_ops)
    except Refusal as refusal:
        match.refusal = refusal
    return match


def _causal_mask(m: ForwardMatch, s_labels: list, select: Operation, pred: SSAValue, visible_when: bool | None,
                 sq: int, sk: int) -> None:
    """Check a mask (`_ScoreWalk.masks`) is Tessera's bottom-right causal mask and set `m.causal`, `m.mask`;
    a mask that hides nothing is noted and dropped; anything else raises the Refusal naming what it is."""
    values = evaluate(pred, MASK_OPS)
    values = np.broadcast_to(values, shape(select.results[0]))
    visible = values == 0 if visible_when is None else values if visible_when else ~values
    visible = visible.transpose(perm_to(s_labels, tuple(x for x in SCORE_ORDER if x in s_labels)))
    visible = visible.reshape(-1, sq, sk)
    if not all(np.array_equal(visible[0], v) for v in visible[1:]):
        raise Refusal(f"the mask at {where(select)} differs between batch entries or heads: not causal", select)
    offset = causal_offset(visible[0])
    if visible[0].all():
        m.found.append(f"mask at {where(select)} that hides nothing")
    elif offset is None:
        raise Refusal(f"the mask at {where(select)} is not causal (not 'query i sees keys 0 .. i + offset')", select)
    elif offset != sk - sq:
        raise Refusal(f"causal mask at {where(select)} with offset {offset} (query i sees keys 0 .. i{offset:+d}); "
                      f"Tessera's causal mask is bottom-right, offset seq_k - seq_q = {sk - sq}", select)
    elif sq > sk:
        raise Refusal(f"causal mask at {where(select)} hides every key from the first {sq - sk} queries: the "
                      "graph computes NaN there, the kernel 0", select)
    else:
        m.causal = True
        m.mask = Mask(select, pred, offset, visible[0], [select], additive=visible_when is None)
        m.found.append(f"causal mask at {where(select)} (offset {offset} = seq_k - seq_q: bottom-right)")


def _refuse_rows_without_keys(s_labels: list, add: Operation) -> None:
    """Refuse a bias (`add` adds it to the scores labelled `s_labels`; an added mask that is not causal, or ALiBi
    with padded rows) computed from iota and constants that hides every key from a query with -inf: the graph's
    softmax is NaN on that row (-inf - max(-inf)), the kernel's 0 (its bias reads -inf as a hidden key, and a row
    that sees none gives O = 0), as `_causal_mask` refuses a causal mask with seq_q > seq_k. A finite fill (-1e9)
    is no such row: the graph and the kernel both average V over it. A bias given as data is the caller's."""
    added = next(v for v in add.operands if not _reaches_dot(v))
    if int(np.prod(shape(add.results[0]))) > ADDED_MASK_LIMIT:
        return
    try:
        values = np.broadcast_to(evaluate(added, BIAS_OPS), shape(add.results[0]))
    except Refusal:
        return
    blind = np.isneginf(values).all(axis=s_labels.index("k"))
    if blind.any():
        index = dict(zip([x for x in s_labels if x != "k"], np.argwhere(blind)[0]))
        raise Refusal(f"the bias at {where(add)} hides every key from query {index['q']} with -inf: the graph "
                      "computes NaN there, the kernel 0", add)


def _logsumexp_softmax(value: SSAValue) -> Operation | None:
    """The `exponential` of `value` = exp(x - lse) (through converts) where lse is a log (of a sum, plus a max:
    jax.scipy.special.logsumexp) broadcast back, for a near-miss report; else None. Never rewritten."""
    exp = producer(strip(value, []))
    if exp is None or exp.name != "stablehlo.exponential":
        return None
    sub = producer(exp.operands[0])
    if sub is None or sub.name != "stablehlo.subtract":
        return None
    lse = producer(strip(sub.operands[1], [], ("stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.reshape")))
    while lse is not None and lse.name == "stablehlo.add":  # log(sum) + max
        lse = next((op for op in map(producer, lse.operands) if op is not None and op.name == "stablehlo.log"), None)
    return exp if lse is not None and lse.name == "stablehlo.log" else None


def _unmatched_softmax(value: SSAValue) -> tuple[Operation | None, bool]:
    """The `exponential` of `value` = exp(x - m) / r (through converts, and a `select(mask, ., 0)` after it, as
    jax.nn.softmax(where=) writes) that `match_softmax` did not take (its max or sum seen through a transpose, or
    masked), and whether a select masked it after, for a near-miss report; else (None, False). Never rewritten."""
    value = strip(value, [])
    select = producer(value)
    masked = select is not None and select.name == "stablehlo.select" and splat_constant(select.operands[2], []) == 0.0
    if masked:
        value = strip(select.operands[1], [])
    div = producer(value)
    if div is None or div.name != "stablehlo.divide":
        return None, False
    exp = producer(strip(div.operands[0], []))
    if exp is None or exp.name != "stablehlo.exponential":
        return None, False
    sub = producer(exp.operands[0])
    return (exp, masked) if sub is not None and sub.name == "stablehlo.subtract" else (None, False)


def _complete(m: ForwardMatch, p_index: int, dropout_ops: list[Operation]) -> None:
    """Fill in a forward match from its softmax down to BMM1 and across to V; raises Refusal."""
    softmax = m.softmax
    walk = _ScoreWalk()
    try:
        bmm1 = walk.walk(softmax.x)
    finally:  # what was found on the way down, in dataflow order
        m.found = [f"scale {t}" for t in reversed(walk.scale_text)] + [f"softmax at {where(producer(softmax.p))}"]
    m.bmm1 = bmm1
    m.ops += [*walk.ops, bmm1]
    axis = softmax.axis
    q_is_lhs, q_labels, k_labels = _label_bmm1(bmm1, walk, axis)
    m.q, m.k = (bmm1.operands[0], bmm1.operands[1]) if q_is_lhs else (bmm1.operands[1], bmm1.operands[0])
    m.q_labels, m.k_labels = q_labels, k_labels
    s_labels = dot_labels(bmm1, *((q_labels, k_labels) if q_is_lhs else (k_labels, q_labels)))
    p_labels = walk.labels_at(None, s_labels)
    m.found = [f"BMM1 at {where(bmm1)} (Q {describe(m.q)}, K {describe(m.k)})"]
    if walk.transposes:
        m.found.append(f"scores transposed {len(walk.transposes)} time(s) on the way to the softmax")
    m.found += [f"scale {t}" for t in reversed(walk.scale_text)]
    if walk.bias is not None:
        m.found.append(f"bias at {where(walk.bias)} ({describe(next(v for v in walk.bias.operands if not _reaches_dot(v)))})")

    # BMM2: contracts P's softmax axis with V's sequence
    dims = sides(m.bmm2)
    p_side, v_side = ("lhs", "rhs") if p_index == 0 else ("rhs", "lhs")
    p_contract = dims[f"{p_side}_contracting_dimensions"]
    if p_contract != [axis]:
        raise Refusal(f"the softmax normalises axis {axis} of the scores, but BMM2 at {where(m.bmm2)} sums over "
                      f"axis {p_contract[0] if p_contract else '?'}: attention normalises the axis it sums (the "
                      "keys)", m.bmm2)
    p_batch = dims[f"{p_side}_batching_dimensions"]
    if sorted(p_labels[d] for d in p_batch) != [x for x in ("b0", "b1") if x in p_labels]:
        raise Refusal(f"BMM2 at {where(m.bmm2)} does not pair P's batch and heads with V's", m.bmm2)
    v_labels: list = [None] * len(shape(m.v))
    for i, d in enumerate(dims[f"{v_side}_batching_dimensions"]):
        v_labels[d] = p_labels[p_batch[i]]
    v_labels[dims[f"{v_side}_contracting_dimensions"][0]] = "k"
    if v_labels.count(None) != 1:
        raise Refusal(f"V of BMM2 at {where(m.bmm2)} has dimensions other than batch, heads, keys and head_dim",
                      m.bmm2)
    v_labels = ["d" if x is None else x for x in v_labels]
    m.v_labels = v_labels
    m.out_labels = dot_labels(m.bmm2, *((p_labels, v_labels) if p_index == 0 else (v_labels, p_labels)))
    m.found.append(f"softmax over the keys at {where(producer(softmax.p))}")

    # masks: evaluated (on scores of no empty dimension), a causal band mapped onto the bottom-right convention
    refuse_empty({"Q": m.q, "K": m.k, "V": m.v})
    sq, sk = shape(m.q)[q_labels.index("q")], shape(m.k)[k_labels.index("k")]
    if len(walk.masks) > 1:
        raise Refusal(f"two masks on the scores (at {where(walk.masks[0][0])} and {where(walk.masks[1][0])})")
    for select, pred, visible_when, fill in walk.masks:
        try:
            _causal_mask(m, walk.labels_at(select, s_labels), select, pred, visible_when, sq, sk)
        except Refusal:
            if visible_when is not None or walk.bias is not None:
                raise
            # an added mask that is not Tessera's causal one is what it is written as: a bias (the
            # "fill" of an added mask is the scale applied after it)
            walk.bias, walk.bias_factor = select, fill
            m.found.append(f"bias at {where(select)} ({describe(pred)}, a mask that is not causal)")
    if walk.bias is not None:
        _refuse_rows_without_keys(walk.labels_at(walk.bias, s_labels), walk.bias)
    if dropout_ops:
        m.found.append(f"dropout at {where(dropout_ops[-1])}")
    m.found.append(f"BMM2 at {where(m.bmm2)} (V {describe(m.v)})")

    # what the kernels take
    from tessera.kernels import HEAD_DIMS

    d = shape(m.q)[q_labels.index("d")]
    dv = shape(m.v)[v_labels.index("d")]
    m.head_dim = d
    m.scale = walk.scale
    if {element(x) for x in (m.q, m.k, m.v)} - set(KERNEL_TYPES):  # bf16 converted to f32 for a f32 product
        narrow = [widened(x) for x in (m.q, m.k, m.v)]
        if len({element(x) for x in narrow}) == 1 and element(narrow[0]) in KERNEL_TYPES \
                and element(m.bmm2.results[0]) != element(narrow[0]) \
                and not rounded_to(m.bmm2.results[0], element(narrow[0])):
            raise Refusal(f"Q, K, V are {element(narrow[0])} converted to f32 and the output is kept in "
                          f"{element(m.bmm2.results[0])}: the kernels write {element(narrow[0])}, less precise than the "
                          "graph")
        if len({element(x) for x in narrow}) == 1 and element(narrow[0]) in KERNEL_TYPES:
            m.found.append(", ".join(f"{name} {element(x)}" for name, x, y in zip("QKV", (m.q, m.k, m.v), narrow)
                                     if x is not y) + f" converted from {element(narrow[0])}: read before the convert")
            m.widened = "".join(name for name, x, y in zip("QKV", (m.q, m.k, m.v), narrow) if x is not y)
            m.q, m.k, m.v = narrow
    types = {element(x) for x in (m.q, m.k, m.v)}
    if dv != d:
        raise Refusal(f"V's head_dim {dv} differs from Q's and K's {d}: the kernels take one head_dim")
    if d not in HEAD_DIMS:
        raise Refusal(f"head_dim {d} is not one the kernels support ({', '.join(map(str, HEAD_DIMS))})")
    if len(types) != 1 or not types <= {"bf16", "f16"}:
        raise Refusal(f"Q, K, V are {', '.join(sorted(types))}: the kernels take bf16 or f16 (all three alike)")
    m.dtype = types.pop()
    if not (0 < m.scale < float("inf")):
        raise Refusal(f"the scale {m.scale:g} is not positive and finite")
    if dropout_ops:
        _refuse_dropout(dropout_ops)
    if walk.bias is not None:
        match_bias(m, walk.bias, walk.labels_at(walk.bias, s_labels), walk.bias_factor)


def _refuse_dropout(dropout_ops: list[Operation]) -> None:
    """Dropout is "matched, not rewritten"; a `select(keep, P, 0)` whose `keep` is computed from iota and
    constants is no dropout but a mask applied to P after the softmax (its rows no longer sum to 1): a near
    miss that says so."""
    select = next((op for op in dropout_ops if op.name == "stablehlo.select"), None)
    if select is not None:
        try:
            evaluate(select.operands[0], MASK_OPS)
        except Refusal:
            pass
        else:
            raise Refusal(f"P is zeroed after the softmax by a mask computed from iota and constants at {where(select)} "
                          "that its input is not masked by (the rows are not renormalised): a mask on the scores before "
                          "the softmax, or jax.nn.softmax(where=mask), is matched", select)
    raise Refusal("dropout (no Tessera kernel applies dropout)", matched=True)


def escaping_use(match: ForwardMatch, allowed: set[Operation]) -> str | None:
    """A rule naming an intermediate of `match` used outside `allowed` (the kernel computes it internally and
    never returns it), or None."""
    from tessera.graph.graph_edit import is_dead

    for op in match.ops:
        if op is match.bmm2:
            continue
        for result in op.results:
            for use in result.uses:
                if use.operation not in allowed and not is_dead(use.operation):
                    role = ("P (the softmax output)" if result is match.softmax.p
                            else "S = Q K^T" if match.bmm1 is not None and result is match.bmm1.results[0]
                            else f"the intermediate '{op.name}' at {where(op)}")
                    return f"{role} has another user: '{use.operation.name}' at {where(use.operation)}"
    return None
