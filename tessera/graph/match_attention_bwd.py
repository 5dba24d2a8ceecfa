"""The backward attention matcher (seed 003's new workflow): with every forward found first, each dot_general
taking a forward's K is tried as bmm1_grad1 (dQ = dS K) and walked bottom-up:

- bmm1_grad2 (dK = dS^T Q) is the other dot_general taking the same dS and the forward's Q;
- under dS: the backward's scale (`multiply`/`divide` by the forward's constant) and mask (`select(pred, x,
  0)` with the forward's causal band), then the softmax gradient dS = P * (dP - rowsum(P * dP)), which JAX
  writes in several forms (through E = exp and the row sum rather than P): the slice of ops under dS is
  collected, it may use only the forward's softmax intermediates, constants and one product dP = dO V^T
  (bmm2_grad2, V the forward's), and is then checked numerically in float64 on random scores and dP against
  the formula (a structural walk alone cannot tell JAX's forms from a different function);
- bmm2_grad1 (dV = P^T dO) is the dot_general taking the forward's P and the same dO.

Dimensions are followed by label as in the forward (`tessera.graph.attention_match`). `resolve` then decides what
is rewritten: a forward whose intermediates have users outside it and its matched backward is refused ("P
has another user"), and a backward whose forward is refused is refused too ("its forward was not
rewritten"), as is any other product of a refused forward's P.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.ir import Block, Operation, SSAValue

from tessera.graph.attention_match import (
    DOT,
    MASK_OPS,
    ForwardMatch,
    Refusal,
    backward_config,
    describe,
    dot_labels,
    element,
    evaluate,
    perm_to,
    producer,
    shape,
    sides,
    splat_constant,
    strip,
    where,
    widened,
)

GRADIENT_OPS = {"stablehlo.multiply", "stablehlo.divide", "stablehlo.add", "stablehlo.subtract",
                "stablehlo.negate", "stablehlo.convert", "stablehlo.broadcast_in_dim", "stablehlo.reshape",
                "stablehlo.reduce", "stablehlo.constant", "stablehlo.exponential", "stablehlo.maximum",
                "stablehlo.compare"}
"""Ops a softmax gradient is written with (beyond those, the slice is not a softmax gradient). `compare` is
JAX's gradient through a max that is not stop-gradient'ed (`exp(s - s.max(-1, keepdims=True))` by hand): the
max's cotangent, -rowsum(dX), spread over `eq(s, max)` divided by its count, 0 in exact arithmetic, which the
numeric check sees."""

NUMERIC_CHECK_LIMIT = 2**25
"""Scores with more elements than this are not checked numerically (the check holds ~6 such tensors in f64)."""


@dataclass
class BackwardMatch:
    """A backward found for `forward`: the four products, dO and the labels of each tensor's dimensions."""

    forward: ForwardMatch
    place: str
    found: list[str] = field(default_factory=list)
    refusal: Refusal | None = None
    dq: Operation | None = None
    dk: Operation | None = None
    dv: Operation | None = None
    dp: Operation | None = None
    do: SSAValue | None = None
    do_labels: list = field(default_factory=list)
    dq_labels: list = field(default_factory=list)
    dk_labels: list = field(default_factory=list)
    dv_labels: list = field(default_factory=list)
    ops: list[Operation] = field(default_factory=list)
    became: str | None = None


GROUPED_BACKWARD = ("the backward of attention with query groups (jax.nn.dot_product_attention's rank-5 dS "
                    "[batch, kv_heads, groups, seq_q, seq_k]) is not matched: backwards are matched with rank-4 "
                    "products")
"""Why the backward of a forward matched with query groups is a near miss (and so, its P being used by the
backward, the forward too)."""


def _other(dot: Operation, value: SSAValue, widen: bool = False) -> tuple[int, SSAValue] | None:
    """(index, operand) of the operand of `dot` that is not `value`, if `value` is exactly one operand (with
    `widen`, also as the f32 it was converted to: the forward's Q, K or V read before such a convert)."""
    same = [x is value or widen and widened(x) is value for x in dot.operands]
    if same[0] and not same[1]:
        return 1, dot.operands[1]
    if same[1] and not same[0]:
        return 0, dot.operands[0]
    return None


def _converted_copies(value: SSAValue) -> list[SSAValue]:
    """The value `value` is converted from (through converts) and each convert of it, recursively: one tensor
    in the types JAX casts it to for each product (dO in f32 for one, in f32 again for the next)."""
    copies, stack = [], [strip(value, [])]
    while stack:
        copies.append(current := stack.pop())
        stack += [r for use in current.uses if use.operation.name == "stablehlo.convert" for r in use.operation.results]
    return copies


def _labels_of(dot: Operation, known_index: int, known_labels: list, free_label: str) -> list:
    """Labels of the operand of `dot` other than operand `known_index`, paired through its batching and
    contracting dimensions with the known operand's labels; its one free dimension gets `free_label`."""
    dims = sides(dot)
    k, o = ("lhs", "rhs") if known_index == 0 else ("rhs", "lhs")
    labels: list = [None] * len(shape(dot.operands[1 - known_index]))
    for kind in ("batching", "contracting"):
        for a, b in zip(dims[f"{k}_{kind}_dimensions"], dims[f"{o}_{kind}_dimensions"]):
            labels[b] = known_labels[a]
    free = [i for i, x in enumerate(labels) if x is None]
    if len(free) != 1:
        raise Refusal(f"the product at {where(dot)} does not leave one free dimension")
    labels[free[0]] = free_label
    return labels


def _result_labels(dot: Operation, labels0: list, labels1: list, contract: str, what: str) -> list:
    """The labels of a product's result, checking that it pairs equal labels and contracts `contract`."""
    dims = sides(dot)
    for kind in ("batching", "contracting"):
        for a, b in zip(dims[f"lhs_{kind}_dimensions"], dims[f"rhs_{kind}_dimensions"]):
            if labels0[a] != labels1[b]:
                raise Refusal(f"{what} at {where(dot)} pairs {labels0[a]} with {labels1[b]}")
    if [labels0[a] for a in dims["lhs_contracting_dimensions"]] != [contract]:
        raise Refusal(f"{what} at {where(dot)} does not sum over {contract}")
    return dot_labels(dot, labels0, labels1)


def _walk_ds(value: SSAValue, b: BackwardMatch) -> tuple[SSAValue, float, Operation | None]:
    """Down from bmm1_grad1's dS operand through converts, constant scales and a zeroing select: (dS, the
    scale, the select)."""
    scale, select = 1.0, None
    while True:
        value = strip(value, b.ops)
        op = producer(value)
        if op is None:
            break
        if op.name in ("stablehlo.multiply", "stablehlo.divide"):
            constants = [splat_constant(v, []) for v in op.operands]
            if constants[1] is not None and (op.name == "stablehlo.multiply" or constants[1] != 0):
                scale = scale * constants[1] if op.name == "stablehlo.multiply" else scale / constants[1]
                value = op.operands[0]
            elif constants[0] is not None and op.name == "stablehlo.multiply":
                scale, value = scale * constants[0], op.operands[1]
            else:
                break
        elif op.name == "stablehlo.select" and select is None:
            zeros = [splat_constant(v, []) for v in op.operands[1:]]
            if zeros[1] == 0.0:
                value = op.operands[1]
            elif zeros[0] == 0.0:
                value = op.operands[2]
            else:
                break
            select = op
        else:
            break
        b.ops.append(op)
    return value, scale, select


def _gradient_slice(ds: SSAValue, forward: ForwardMatch) -> tuple[list[Operation], Operation]:
    """The ops computing dS from the forward's intermediates, constants and one product dP (returned)."""
    stop = forward.values | {forward.softmax.x}
    ops: list[Operation] = []
    products: list[Operation] = []
    seen: set[Operation] = set()
    stack = [ds]
    while stack:
        value = stack.pop()
        if value in stop:
            continue
        op = producer(value)
        if op is None:
            raise Refusal(f"the softmax gradient uses {describe(value)}")
        if op in seen:
            continue
        seen.add(op)
        if op.name == DOT:
            products.append(op)
            continue
        if op.name not in GRADIENT_OPS:
            raise Refusal(f"'{op.name}' at {where(op)} is not part of a softmax gradient")
        ops.append(op)
        stack.extend(op.operands)
    if len(products) != 1:
        raise Refusal(f"the softmax gradient uses {len(products)} products, not one dP = dO V^T")
    return ops, products[0]


def _numeric_check(forward: ForwardMatch, slice_ops: list[Operation], dp: Operation, ds: SSAValue,
                   block: Block) -> None:
    """Run the forward's softmax and the slice in float64 on random scores and dP; dS must be
    P * (dP - rowsum(P * dP)) over the softmax axis. Refusal otherwise."""
    from tessera.graph.stablehlo_interpreter import Interpreter, round_value

    rng = np.random.default_rng(0)
    x = forward.softmax.x
    env: dict[SSAValue, np.ndarray] = {x: rng.standard_normal(shape(x)), dp.results[0]: rng.standard_normal(shape(dp.results[0]))}
    interpreter = Interpreter(None, exact=True)  # type: ignore[arg-type]
    ops = sorted(set(forward.softmax.ops) | set(slice_ops), key=block.get_operation_index)

    def value_of(v: SSAValue) -> np.ndarray:
        if v not in env:
            env[v] = evaluate(v, MASK_OPS)
        return env[v]

    for op in ops:
        if all(r in env for r in op.results):
            continue
        try:
            results = interpreter.run_op(op, [value_of(o) for o in op.operands])
        except ValueError as e:  # shapes the parser does not verify (a seeded edit), a body the interpreter refuses
            raise Refusal(f"'{op.name}' at {where(op)} under dS cannot be evaluated: {e}") from None
        for r, value in zip(op.results, results):
            env[r] = round_value(np.asarray(value), r.type, exact=True)
    p, d_p, got = env[forward.softmax.p], env[dp.results[0]], env[ds]
    axis = forward.softmax.axis
    expected = p * (d_p - (p * d_p).sum(axis=axis, keepdims=True))
    error = float(np.abs(got - expected).max()) if got.shape == expected.shape else float("inf")
    if not error <= 1e-9 * max(1.0, float(np.abs(expected).max())):
        raise Refusal(f"the ops under dS at {where(producer(ds))} do not compute the softmax gradient "
                      f"P * (dP - rowsum(P dP)) (checked in float64: off by {error:.2e})")


def _reads_softmax(value: SSAValue, f: ForwardMatch) -> bool:
    """Whether `value` is computed from forward `f`'s softmax (its P or one of its intermediates) other than
    through f's output O, as every dS of f is. A product of f's K with anything else (another attention's Q K^T
    over the same keys, its Q an argument or f's own O) is no bmm1_grad1 of f: taken for one, it was reported as
    a backward near miss, and it blocked f's real backward, which came later in the block (a forward takes the
    first backward candidate found)."""
    targets = f.values
    seen: set[Operation] = {f.bmm2}
    stack = [value]
    while stack:
        current = stack.pop()
        if current in targets:
            return True
        op = producer(current)
        if op is not None and op not in seen:
            seen.add(op)
            stack.extend(op.operands)
    return False


def match_backward(f: ForwardMatch, grad1: Operation, block: Block) -> BackwardMatch | None:
    """The backward of forward `f` with `grad1` (a dot_general taking f's K) as bmm1_grad1, or None when
    `grad1` does not take a dS-like operand (of the scores' rank, computed from f's softmax); a BackwardMatch
    with `refusal` is a near miss."""
    found = _other(grad1, f.k, widen=True)
    if found is not None and len(shape(found[1])) == 5 and "g" in f.q_labels:
        return BackwardMatch(f, where(grad1), [f"a product of dS and the forward's K at {where(grad1)}"],
                             Refusal(GROUPED_BACKWARD), dq=grad1, ops=[grad1])
    if found is None or len(shape(found[1])) != (4 if "b1" in f.q_labels else 3) or not _reads_softmax(found[1], f):
        return None
    ds_index, ds_prime = found
    b = BackwardMatch(f, where(grad1), dq=grad1, ops=[grad1])
    try:
        if "V" in f.widened:
            raise Refusal(f"its forward at {where(f.bmm2)} keeps P in float32 for P.V (V converted from {f.dtype}): "
                          f"the graph's softmax gradient is float32 throughout, the backward kernel's takes P in "
                          f"{f.dtype} and rowsum(dO O) from the {f.dtype} output, which cancels less exactly (a key "
                          "bias's gradient, zero in exact arithmetic, comes out far beyond the graph's error)")
        q_is_lhs = f.q in (f.bmm1.operands[0], widened(f.bmm1.operands[0]))
        s_labels = dot_labels(f.bmm1, *((f.q_labels, f.k_labels) if q_is_lhs else (f.k_labels, f.q_labels)))
        ds, scale, select = _walk_ds(ds_prime, b)
        slice_ops, dp = _gradient_slice(ds, f)
        b.dp = dp
        b.ops += slice_ops + [dp]
        # dP = dO V^T (bmm2_grad2): dO is the operand that is not V
        other = _other(dp, f.v, widen=True)
        if other is None:
            raise Refusal(f"the softmax gradient's product at {where(dp)} does not take the forward's V")
        do_index, b.do = other
        b.do_labels = _labels_of(dp, 1 - do_index, f.v_labels, "q")
        dp_labels = dot_labels(dp, *((b.do_labels, f.v_labels) if do_index == 0 else (f.v_labels, b.do_labels)))
        _result_labels(dp, *((b.do_labels, f.v_labels) if do_index == 0 else (f.v_labels, b.do_labels)), "d",
                       "bmm2_grad2")
        if dp_labels != s_labels:
            raise Refusal(f"dP at {where(dp)} is laid out {dp_labels}, the scores {s_labels}")
        b.found.append(f"bmm2_grad2 (dP = dO V^T) at {where(dp)}, dO {describe(b.do)}")
        if int(np.prod(shape(ds))) <= NUMERIC_CHECK_LIMIT:
            _numeric_check(f, slice_ops, dp, ds, block)
            b.found.append("softmax gradient (checked in float64)")
        else:
            raise Refusal(f"the scores have {int(np.prod(shape(ds)))} elements: too many to check the softmax "
                          f"gradient numerically (limit {NUMERIC_CHECK_LIMIT})")
        # the backward's mask and scale are the forward's
        if (select is not None) != f.causal and not (select is None and f.mask is not None and f.mask.additive):
            raise Refusal("the backward masks dS but the forward is not causal" if select is not None
                          else "the forward is causal but the backward does not mask dS")
        if select is not None:
            values = np.broadcast_to(evaluate(select.operands[0], MASK_OPS | {"stablehlo.select"}),
                                     shape(select.results[0]))
            visible = values if splat_constant(select.operands[2], []) == 0.0 else ~values
            sq, sk = f.mask.visible.shape
            visible = visible.transpose(perm_to(s_labels, tuple(x for x in ("b0", "b1", "q", "k") if x in s_labels)))
            visible = visible.reshape(-1, sq, sk)
            if not all(np.array_equal(v, f.mask.visible) for v in visible):
                raise Refusal(f"the backward's mask at {where(select)} is not the forward's")
            b.found.append(f"mask at {where(select)}")
        if not abs(scale - f.scale) <= 1e-6 * f.scale:
            raise Refusal(f"the backward scales dS by {scale:g}, the forward S by {f.scale:g}")
        b.found.append(f"scale {scale:g}")
        b.found.insert(0, f"bmm1_grad1 (dQ = dS K) at {where(grad1)}")
        b.dq_labels = _result_labels(grad1, *((s_labels, f.k_labels) if ds_index == 0 else (f.k_labels, s_labels)),
                                     "k", "bmm1_grad1")
        # bmm1_grad2: the other product of the same dS, with Q
        grad2 = [(u.operation, copy) for copy in _converted_copies(ds_prime) for u in copy.uses
                 if u.operation is not grad1 and u.operation.name == DOT and _other(u.operation, copy) is not None
                 and f.q in (_other(u.operation, copy)[1], widened(_other(u.operation, copy)[1]))]
        if len(grad2) != 1:
            raise Refusal(f"no single bmm1_grad2 (dK = dS^T Q) shares dS with bmm1_grad1 at {where(grad1)}")
        b.dk, ds_copy = grad2[0]
        q_index = _other(b.dk, ds_copy)[0]
        b.dk_labels = _result_labels(b.dk, *((f.q_labels, s_labels) if q_index == 0 else (s_labels, f.q_labels)),
                                     "q", "bmm1_grad2")
        b.found.append(f"bmm1_grad2 (dK = dS^T Q) at {where(b.dk)}")
        # bmm2_grad1: P^T dO (dO, or a convert of it: P.V in float32 from a bf16 P)
        p = f.softmax.p
        grad = [(u.operation, copy) for copy in _converted_copies(b.do) for u in copy.uses
                if u.operation is not dp and u.operation.name == DOT and _other(u.operation, copy) is not None
                and strip(_other(u.operation, copy)[1], []) is p]
        if len(grad) != 1:
            raise Refusal(f"no single bmm2_grad1 (dV = P^T dO) takes the forward's P and dO {describe(b.do)}")
        b.dv, do_copy = grad[0]
        p_index = _other(b.dv, do_copy)[0]
        b.dv_labels = _result_labels(b.dv, *((s_labels, b.do_labels) if p_index == 0 else (b.do_labels, s_labels)),
                                     "q", "bmm2_grad1")
        b.ops += [b.dk, b.dv, *(op for op in _converts(ds_copy) if op not in b.ops)]
        b.ops += [strip_op for strip_op in _converts(_other(b.dv, do_copy)[1])]
        b.do = strip(b.do, [])  # the rewrite converts it to the kernels' type if it is wider
        if element(b.do) != f.dtype:
            b.found.append(f"dO in {element(b.do)}: given to the kernel in {f.dtype}")
        b.found.append(f"bmm2_grad1 (dV = P^T dO) at {where(b.dv)}")
        try:  # (a refused forward has no kernel configuration: `resolve` names its rule)
            if f.refusal is None:
                backward_config(f.head_dim, f.causal, f.dtype, float(np.float32(f.scale)))
        except ValueError as e:
            raise Refusal(f"no backward kernel: {e}") from None
        block_index = block.get_operation_index
        if min(block_index(b.dq), block_index(b.dk), block_index(b.dv)) < block_index(f.bmm2):
            raise Refusal(f"a gradient product comes before the forward's BMM2 at {where(f.bmm2)}")
        for labels, what in ((b.dq_labels, "dQ"), (b.dk_labels, "dK"), (b.dv_labels, "dV"), (b.do_labels, "dO")):
            heads = ["b1"] if "b1" in f.q_labels else []  # (none for a single head)
            if sorted(map(str, labels)) != sorted(["b0", *heads, "k" if what in ("dK", "dV") else "q", "d"]):
                raise Refusal(f"{what} has dimensions {labels}")
    except Refusal as refusal:
        b.refusal = refusal
    return b


def _converts(value: SSAValue) -> list[Operation]:
    ops: list[Operation] = []
    strip(value, ops)
    return ops


def match_backwards(forwards: list[ForwardMatch], block: Block, skip: set[Operation] = frozenset()) -> list[BackwardMatch]:
    """Every backward anchored at a forward that was matched through BMM1 (the second walk of the seed); the products
    in `skip` are no candidates (a recompute merged with the forward: `tessera.graph.remat`)."""
    found: list[BackwardMatch] = []
    anchored = [f for f in forwards if f.bmm1 is not None and f.k is not None and f.q_labels
                and (f.refusal is None or f.refusal.matched is False and f.head_dim)]
    for op in list(block.ops):
        if op.name != DOT or op in skip:
            continue
        for f in anchored:
            if op is f.bmm1 or op is f.bmm2 or f.backward is not None:
                continue
            b = match_backward(f, op, block)
            if b is not None:
                if b.refusal is None or f.backward is None:
                    f.backward = b
                found.append(b)
                break
    return found


def resolve(forwards: list[ForwardMatch], backwards: list[BackwardMatch]) -> list[ForwardMatch]:
    """Decide what is rewritten (module docstring); returns the forward entries to report (forwards that are
    products of another forward's P become backward entries)."""
    for b in backwards:
        if b.refusal is None and b.forward.refusal is not None:
            b.refusal = Refusal(f"its forward at {where(b.forward.bmm2)} was not rewritten: {b.forward.refusal.rule}")
        elif b.refusal is None and b.forward.bias is not None:
            b.refusal = Refusal(f"its forward at {where(b.forward.bmm2)} adds a bias: the backward kernels take none "
                                "(they recompute P without it and give no dBias)")
    from tessera.graph.match_attention_fwd import escaping_use

    changed = True
    while changed:
        changed = False
        for f in forwards:
            if f.refusal is not None or f.bmm1 is None:
                continue
            b = f.backward if f.backward is not None and f.backward.refusal is None else None
            allowed = set(f.ops) | (set(b.ops) if b is not None else set())
            rule = escaping_use(f, allowed)
            if rule is None and b is not None:
                rule = _backward_escape(b, allowed)
            if rule is not None:
                if f.backward is not None and f.backward.refusal is not None:
                    rule += f" (its backward at {f.backward.place}: {f.backward.refusal.rule})"
                f.refusal = Refusal(rule)
                if b is not None:
                    b.refusal = Refusal(f"its forward at {where(f.bmm2)} was not rewritten: {rule}")
                changed = True
    claimed = {op for b in backwards for op in (b.dq, b.dk, b.dv, b.dp) if op is not None}
    kept: list[ForwardMatch] = []
    for f in forwards:
        if f.bmm2 in claimed and f.refusal is not None:
            continue  # bmm2_grad1 = P^T dO looks like a forward over the wrong axis: it is the backward's
        orphan = _without_forward(f, forwards)
        if orphan is not None:
            backwards.append(orphan)
            continue
        owner = _owner(f, forwards)
        if owner is not None:  # another product of a forward's P, not claimed by a backward
            rule = (f"its forward at {where(owner.bmm2)} was not rewritten: {owner.refusal.rule}"
                    if owner.refusal is not None else f.refusal.rule if f.refusal is not None else "not a backward")
            backwards.append(BackwardMatch(owner, where(f.bmm2), [f"a product of the forward's P at {where(f.bmm2)}"],
                                           Refusal(rule)))
            continue
        kept.append(f)
    return kept


NO_FORWARD = ("the graph computes no forward output P V from this softmax (jax.grad of a loss linear in the attention's "
              "output drops it): the backward kernel reads the forward's O and log-sum-exp, so a backward is rewritten "
              "with its forward only")
"""Why a backward whose softmax feeds no forward BMM2 is a near miss (found as a product P^T dO, which looked like a
forward over the wrong axis)."""
RECOMPUTED = ("its softmax is computed again from Q K^T at {bmm1}, a second copy of the scores of the forward at {forward} "
              "(jax.checkpoint(prevent_cse=False) recomputes without an optimization_barrier): a backward is matched on "
              "its forward's own softmax, or on a recompute read from a barrier")
"""Why a backward over a barrier-less recompute of a forward's softmax is a near miss."""


def _without_forward(f: ForwardMatch, forwards: list[ForwardMatch]) -> BackwardMatch | None:
    """A backward near miss for `f` if its "BMM2" is a backward's dV = P^T dO (it sums P over the other axis than
    the softmax's, and a product of f's K with a dS computed from f's softmax, dQ = dS K, is in the graph) and no
    forward computes P V from this softmax (`NO_FORWARD`), or a forward computes it from a second copy of its
    scores, the same product of the same Q and K (`RECOMPUTED`); else None."""
    if f.refusal is None or f.softmax is None or f.k is None or f.bmm2.name != DOT or _sums_softmax_axis(f) \
            or any(strip(u.operation.operands[i], []) is f.softmax.p and u.operation is not f.bmm2
                   for u in f.softmax.p.uses for i in (0, 1) if u.operation.name == DOT):
        return None
    block = f.bmm2.parent_block()
    for op in block.ops:
        if op.name == DOT and op not in (f.bmm1, f.bmm2) and (other := _other(op, f.k, widen=True)) is not None \
                and _reads_softmax(other[1], f):
            twin = next((g for g in forwards if g is not f and g.bmm1 is not None and g.softmax is not None
                         and g.bmm2.name == DOT and _sums_softmax_axis(g) and list(g.bmm1.operands) == list(f.bmm1.operands)
                         and g.bmm1.dot_dimension_numbers == f.bmm1.dot_dimension_numbers), None)
            rule = NO_FORWARD if twin is None else RECOMPUTED.format(bmm1=where(f.bmm1), forward=where(twin.bmm2))
            return BackwardMatch(f, where(op), [f"bmm1_grad1 (dQ = dS K) at {where(op)}",
                                                f"bmm2_grad1 (dV = P^T dO) at {where(f.bmm2)}"], Refusal(rule))
    return None


def _sums_softmax_axis(f: ForwardMatch) -> bool:
    """Whether f's BMM2 sums P over the axis its softmax normalises (a forward's BMM2 does, P^T dO not)."""
    dims = sides(f.bmm2)
    p_side = "lhs" if strip(f.bmm2.operands[0], []) is f.softmax.p or f.bmm2.operands[0] is f.softmax.p else "rhs"
    return dims[f"{p_side}_contracting_dimensions"] == [f.softmax.axis]


def _owner(f: ForwardMatch, forwards: list[ForwardMatch]) -> ForwardMatch | None:
    """The forward whose P `f`'s BMM2 also takes, if `f` is not itself that forward (it sums P over the other
    axis, as bmm2_grad1 does), else None."""
    if f.softmax is None or f.bmm2.name != DOT or _sums_softmax_axis(f):
        return None
    return next((g for g in forwards if g is not f and g.softmax is not None and g.softmax.p is f.softmax.p
                 and g.bmm2.name == DOT and _sums_softmax_axis(g)), None)


def _backward_escape(b: BackwardMatch, allowed: set[Operation]) -> str | None:
    """A rule naming an intermediate of backward `b` (dS, dP, ...) used outside `allowed`, or None."""
    from tessera.graph.graph_edit import is_dead

    for op in b.ops:
        if op in (b.dq, b.dk, b.dv):
            continue
        for result in op.results:
            for use in result.uses:
                if use.operation not in allowed and not is_dead(use.operation):
                    return (f"the backward's intermediate '{op.name}' at {where(op)} has another user: "
                            f"'{use.operation.name}' at {where(use.operation)}")
    return None
