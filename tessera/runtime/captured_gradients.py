"""Which captured arrays' gradients a backward with a score_mod computes (`tessera.attention_backward(...,
captured_grads=)`, `tessera.runtime.autograd.attention`): the names asked for, or the tensors that require grad,
resolved to the kernel inputs of the score_mod's trace (`CapturedArray.name`), each checked to get a gradient
(`tessera.variants.derivative.captured_derivatives`, which refuses by name what gets none). docs/variant-gradients.md.
"""

from __future__ import annotations

from tessera.variants.derivative import captured_derivatives
from tessera.variants.nodes import F32
from tessera.variants.trace import trace_mod


def captured_gradient_names(where: str, score_mod, mask_mod, asked) -> dict[str, str]:
    """The gradients `tessera.attention_backward(..., captured_grads=asked)` returns, as {the key it returns
    each by: the kernel input's name (`CapturedArray.name`)}. `asked`: True, every float array the score_mod
    reads at traced indices, by the name the function calls it (by the kernel input's name where two arrays
    share one); or names, each the function's name for an array or a kernel input's. A ValueError names what
    is not an array of the score_mod; `captured_derivatives` refuses (ModTraceError, by name) an array no
    gradient reaches."""
    if score_mod is None:
        raise ValueError(f"{where}: captured_grads needs a score_mod (the gradients are those of the arrays it reads)")
    trace = trace_mod(score_mod, "score_mod")
    inputs: dict[str, set[str]] = {}
    for name, unique in ((r.name, r.array.name) for r in trace.reads):
        inputs.setdefault(name, set()).add(unique)
    by_input = {unique: name for name, uniques in inputs.items() for unique in uniques if len(uniques) == 1}
    if asked is True:
        found = {by_input.get(a.name, a.name): a.name for a in trace.arrays if a.dtype == F32 and not a.boolean}
        if not found:
            raise ValueError(f"{where}: captured_grads=True, but score_mod '{trace.name}' reads no float array at "
                             "traced indices")
    else:
        if isinstance(asked, str) or not all(isinstance(n, str) for n in asked):
            raise TypeError(f"{where}: captured_grads must be True or a sequence of names; got {asked!r}")
        found = {}
        for name in asked:
            uniques = {name} if name in by_input or any(a.name == name for a in trace.arrays) \
                else inputs.get(name, set())
            if len(uniques) != 1:
                known = sorted(set(inputs) | {a.name for a in trace.arrays})
                what = "names two arrays" if uniques else "is not an array score_mod reads at traced indices"
                raise ValueError(f"{where}: captured_grads {name!r} {what} (its arrays: {', '.join(known) or 'none'})")
            found[name] = next(iter(uniques))
    trace_mask = None if mask_mod is None else trace_mod(mask_mod, "mask_mod")
    captured_derivatives(trace, list(found.values()), trace_mask)  # refused here, by name
    return found


def read_by(fn, kind: str, tensors: dict[str, object]) -> dict[str, object]:
    """Those of `tensors` (by name: `rebinding.captured_tensors_requiring_grad` of `fn`) that the trace of `fn`
    reads, gathered at traced indices or used otherwise (`Trace.opaque`, refused later by name); one it can reach
    but does not read (another parameter of a `self` it reads, as a score_mod defined in a model's forward does)
    gets no gradient, as in torch, and is no reason to refuse a mask_mod."""
    if not tensors:
        return tensors
    trace = trace_mod(fn, kind)
    read = {a.name for a in trace.arrays} | set(trace.opaque)
    return {name: tensor for name, tensor in tensors.items() if trace.sources.get(id(tensor)) in read}


def captured_tensor_inputs(where: str, score_mod, mask_mod, tensors: dict[str, object]) -> tuple[list[str], list]:
    """(kernel input names, tensors) of the captured tensors `tensors` (by the name the function calls each,
    `rebinding.captured_tensors_requiring_grad`), found by identity in the score_mod's trace (`Trace.sources`),
    each checked to get a gradient (`captured_derivatives`: ModTraceError naming one that does not)."""
    trace = trace_mod(score_mod, "score_mod")
    trace_mask = None if mask_mod is None else trace_mod(mask_mod, "mask_mod")
    names = []
    for name, tensor in tensors.items():
        unique = trace.sources.get(id(tensor))
        if unique is None or not any(a.name == unique for a in trace.arrays) and unique not in trace.opaque:
            raise ValueError(f"{where}: the score_mod names {name}, which requires grad, but never reads it at traced "
                             "indices: no gradient reaches it (pass it detached)")
        names.append(unique)
    captured_derivatives(trace, names, trace_mask)
    return names, list(tensors.values())
