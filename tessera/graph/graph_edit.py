"""Small edits of StableHLO graphs the attention rewriter needs: inlining calls, transposes and converts,
dead-code removal, reshapes and broadcasts.

JAX outlines helpers as private functions (`@tril`, `@_where`) called with `func.call`; the matcher walks one
block, so calls to functions of the module are inlined first (`inline_calls`). Dead-code removal only
erases ops of the StableHLO subset and of the `tessera` dialect whose results are all unused (all are free
of side effects; `custom_call` and opaque ops are kept), and private functions no call refers to any more.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp, SymbolRefAttr, TensorType, i64
from xdsl.ir import Block, OpResult, Operation, SSAValue

from tessera.dialects import stablehlo


def inline_calls(fn: func.FuncOp, module: ModuleOp) -> int:
    """Inline every `func.call` in the body of `fn` (top-level block, repeatedly, so calls inside inlined
    bodies too) whose callee is a function of `module` with a single-block body; returns how many."""
    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}
    block = fn.body.blocks.first
    count = 0
    while True:
        calls = [op for op in block.ops if isinstance(op, func.CallOp)
                 and (callee := functions.get(op.callee.root_reference.data)) is not None
                 and callee is not fn and len(callee.body.blocks) == 1]
        if not calls:
            return count
        for call in calls:
            callee = functions[call.callee.root_reference.data]
            body = callee.body.blocks.first
            mapping: dict[SSAValue, SSAValue] = dict(zip(body.args, call.operands))
            results: list[SSAValue] = []
            for op in body.ops:
                if isinstance(op, func.ReturnOp):
                    results = [mapping.get(v, v) for v in op.operands]
                    break
                block.insert_op_before(op.clone(value_mapper=mapping), call)
            for old, new in zip(call.results, results):
                old.replace_all_uses_with(new)
            block.erase_op(call)
            count += 1


def remove_unused_functions(module: ModuleOp) -> None:
    """Erase private functions no symbol reference in the module names any more."""
    while True:
        used = {attr.root_reference.data for op in module.walk() for attr in
                [*op.properties.values(), *op.attributes.values()] if isinstance(attr, SymbolRefAttr)}
        dead = [op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_visibility is not None
                and op.sym_visibility.data == "private" and op.sym_name.data not in used]
        if not dead:
            return
        for op in dead:
            module.body.block.erase_op(op)


_KEEP = {"stablehlo.custom_call", "stablehlo.composite", "stablehlo.return"}


def is_dead(op: Operation) -> bool:
    """Whether `op` is an op `remove_dead_ops` erases: of the StableHLO subset or the tessera dialect (free of side
    effects; not a `custom_call`, `composite` or opaque op), with results, none of them used. A use by such an op is
    no use: the rewriter does not count it as one of an attention's intermediates (a recompute `jax.checkpoint`
    repeats, once `tessera.graph.remat` has merged it with the forward, is one)."""
    return (op.name not in _KEEP and bool(op.results) and not any(r.uses for r in op.results)
            and op.dialect_name() in ("stablehlo", "chlo", "tessera") and op.name != "builtin.unregistered")


def remove_dead_ops(block: Block) -> None:
    """Erase the ops of `block` that are dead (`is_dead`), until none is left (see the module docstring)."""
    changed = True
    while changed:
        changed = False
        for op in reversed(list(block.ops)):
            if is_dead(op):
                block.erase_op(op)
                changed = True


def transposed(value: SSAValue, perm: Sequence[int], before: Operation) -> SSAValue:
    """`value` transposed by `perm` (a new `stablehlo.transpose` inserted before `before`), or `value`
    itself when `perm` is the identity; a transpose of a transpose is one transpose of the inner operand."""
    inner = value.owner if isinstance(value, OpResult) else None
    if isinstance(inner, stablehlo.TransposeOp):  # transpose(transpose(x, p), q) = transpose(x, p o q)
        first = [int(p) for p in inner.permutation.get_values()]
        value, perm = inner.operand, [first[p] for p in perm]
    if list(perm) == list(range(len(perm))):
        return value
    source = value.type
    shape = [source.get_shape()[p] for p in perm]
    op = stablehlo.TransposeOp.create(operands=[value],
                                      properties={"permutation": DenseArrayBase.from_list(i64, list(perm))},
                                      result_types=[TensorType(source.element_type, shape)])
    before.parent_block().insert_op_before(op, before)
    return op.results[0]


def reshaped(value: SSAValue, shape: Sequence[int], before: Operation) -> SSAValue:
    """`value` reshaped to `shape` (a new `stablehlo.reshape` before `before`), or itself when it has it."""
    if list(value.type.get_shape()) == list(shape):
        return value
    op = stablehlo.ReshapeOp.create(operands=[value], result_types=[TensorType(value.type.element_type, list(shape))])
    before.parent_block().insert_op_before(op, before)
    return op.results[0]


def broadcast(value: SSAValue, shape: Sequence[int], dims: Sequence[int], before: Operation) -> SSAValue:
    """`value` broadcast to `shape`, its dimension i becoming dimension `dims[i]` (a new
    `stablehlo.broadcast_in_dim` before `before`)."""
    op = stablehlo.BroadcastInDimOp.create(
        operands=[value], properties={"broadcast_dimensions": DenseArrayBase.from_list(i64, list(dims))},
        result_types=[TensorType(value.type.element_type, list(shape))])
    before.parent_block().insert_op_before(op, before)
    return op.results[0]


def converted(value: SSAValue, element_type, before: Operation) -> SSAValue:
    """`value` converted to `element_type` (a new `stablehlo.convert` before `before`), or itself."""
    if value.type.element_type == element_type:
        return value
    op = stablehlo.ConvertOp.create(operands=[value],
                                    result_types=[TensorType(element_type, value.type.get_shape())])
    before.parent_block().insert_op_before(op, before)
    return op.results[0]


def fold_transposes_of(block: Block, names: tuple[str, ...]) -> None:
    """Fold each transpose of a transpose of a result of an op named in `names` (the rewriter's transpose
    back to the graph's layout, followed by JAX's own) into one transpose, or none if they cancel."""
    for op in list(block.ops):
        if not isinstance(op, stablehlo.TransposeOp):
            continue
        inner = op.operand.owner if isinstance(op.operand, OpResult) else None
        if not isinstance(inner, stablehlo.TransposeOp):
            continue
        source = inner.operand.owner if isinstance(inner.operand, OpResult) else None
        if source is None or source.name not in names and not (
                source.name == "stablehlo.custom_call" and source.call_target_name.data.startswith("__tessera$")):
            continue
        folded = transposed(op.operand, [int(p) for p in op.permutation.get_values()], op)
        op.results[0].replace_all_uses_with(folded)
        block.erase_op(op)
