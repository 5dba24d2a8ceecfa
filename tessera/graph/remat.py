"""Seeing through `jax.checkpoint` (`jax.remat`, `checkpoint_policies`) for the attention matcher.

A training step exported with attention under `jax.checkpoint` computes the backward from a recompute of the
forward: what the policy did not save is computed again from the results of a `stablehlo.optimization_barrier`
(XLA's fence: its results are its operands, but nothing computed from them may be merged with what is computed from
the operands, so the recompute survives XLA's CSE). For matching, a barrier's result is the tensor its operand is,
and a recompute is the value the forward computed: `merge_recomputes` edits the matcher's copy of a function so that

- each use of a barrier's result i reads the barrier's operand i instead (and each use of a `reduce_precision` to
  its own type's widths, which a policy such as `dots_saveable` puts on what it saves, reads its operand), and
- each op computed from a barrier's results (through other such ops) that computes what an earlier op computes
  (same op, properties and result types; operands the same values after this merge; a `reduce` with the same
  body) reads as that earlier op: its uses read the earlier op's results,

which leaves the graph the matcher knows, the forward and its backward over one P (a policy that saves the scores,
`dots_saveable`, puts the barrier between BMM1 and the softmax: the same). The merge is exact: the barrier is the
identity, and the merged ops are pure (StableHLO's registered subset; no `custom_call`, opaque op or op with a
region other than a `reduce` is merged).

After the rewrite, `restore` puts back every use the merge redirected whose op is still in the graph and still reads
what the merge gave it: what the rewrite did not replace (a transformer block's MLP, recomputed from the same
barrier) reads the barrier's results again, so a barrier that still has uses stays, with its fence. The attention
ops read the forward's Q, K, V: the backward kernel recomputes P from them and the forward's O and log-sum-exp,
which is what `jax.checkpoint` asked of the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.ir import Block, Operation, SSAValue

BARRIER = "stablehlo.optimization_barrier"
_NOT_MERGED = {"stablehlo.custom_call", "stablehlo.composite", "stablehlo.return", BARRIER}
_WIDTHS = {"bf16": (8, 7), "f16": (5, 10), "f32": (8, 23), "f64": (11, 52)}
"""(exponent bits, mantissa bits) of the float types: a `reduce_precision` to a type's own widths is the identity."""


def passes_through(op: Operation) -> bool:
    """Whether each result of `op` is its operand of the same index: an `optimization_barrier`, or a
    `reduce_precision` to the widths of its own element type (which JAX writes around what a checkpoint policy
    saves, `dots_saveable`'s scores)."""
    if op.name == BARRIER:
        return True
    if op.name != "stablehlo.reduce_precision":
        return False
    widths = (op.exponent_bits.value.data, op.mantissa_bits.value.data)
    own = _WIDTHS.get(str(op.results[0].type.element_type))
    return own is not None and widths[0] >= own[0] and widths[1] >= own[1]


@dataclass
class Merge:
    """What `merge_recomputes` did: the uses it redirected (for `restore`) and the ops whose uses it gave to an earlier
    op computing the same (left unused in the block: no candidate for the matcher)."""

    redirects: list[Redirect] = field(default_factory=list)
    merged: set[Operation] = field(default_factory=set)


@dataclass
class Redirect:
    """Operand `index` of `op` read `original` (a barrier's result, or a recompute) and reads `merged` now."""

    op: Operation
    index: int
    original: SSAValue
    merged: SSAValue


def _key(op: Operation, canonical: dict[SSAValue, SSAValue]) -> tuple | None:
    """What `op` computes, for finding an earlier op that computes the same (None: never merged)."""
    from tessera.graph.stablehlo_interpreter import GraphInterpretationError, reduce_kind

    if op.name in _NOT_MERGED or op.name == "builtin.unregistered" or op.dialect_name() not in ("stablehlo", "chlo"):
        return None
    body = None
    if op.regions:
        if op.name != "stablehlo.reduce":
            return None
        try:
            body = reduce_kind(op)
        except GraphInterpretationError:
            return None
    return (op.name, tuple(id(canonical.get(v, v)) for v in op.operands),
            tuple(sorted(op.properties.items())), tuple(sorted(op.attributes.items())),
            tuple(r.type for r in op.results), body)  # (attributes hash by value; a large constant once)


def merge_recomputes(block: Block) -> Merge:
    """Redirect the uses of barrier results and of recomputes in `block` (module docstring); returns what was
    redirected, for `restore`. A block without a barrier (or an identity `reduce_precision`: `passes_through`) is
    left as it is."""
    merge = Merge()
    if not any(passes_through(op) for op in block.ops):
        return merge
    canonical: dict[SSAValue, SSAValue] = {}
    recomputed: set[SSAValue] = set()  # barrier results and what is computed from them
    first: dict[tuple, Operation] = {}
    for op in block.ops:
        if passes_through(op):
            for result, operand in zip(op.results, op.operands):
                canonical[result] = canonical.get(operand, operand)
                recomputed.add(result)
            continue
        if any(v in recomputed for v in op.operands):
            recomputed.update(op.results)
        key = _key(op, canonical)
        if key is None:
            continue
        earlier = first.setdefault(key, op)
        if earlier is not op:  # (ops merged from the forward side too: JAX repeats constants in the recompute)
            canonical.update(zip(op.results, earlier.results))
            if any(r in recomputed for r in op.results):
                merge.merged.add(op)
    for value in [v for v in canonical if v in recomputed]:
        merged = canonical[value]
        for use in list(value.uses):
            merge.redirects.append(Redirect(use.operation, use.index, value, merged))
        value.replace_all_uses_with(merged)
    return merge


def restore(merge: Merge) -> None:
    """Give each op the rewrite kept the operand it read before `merge_recomputes` (module docstring)."""
    for r in merge.redirects:
        if r.op.parent is not None and r.op.operands[r.index] is r.merged:
            r.op.operands[r.index] = r.original

