"""Running a rewritten StableHLO graph: the StableHLO interpreter for the graph, Tessera's kernels for its
attention ops (`tessera.attention`, `tessera.attention_bwd` and their custom_calls
`__tessera$attention`, `__tessera$attention_bwd`).

    outputs = run_graph(module, inputs)                    # attention in the Tile interpreter
    outputs = run_graph(module, inputs, level="ptx")       # the forward's kernel as PTX in the PTX executor

- a forward without a log-sum-exp result runs `tessera.kernels.flash_attention` with the op's configuration
  through `tessera.interpret(..., level=level)`; a fourth operand is its bias (`flash_attention(bias=True)`,
  broadcast along the dimensions where the operand has size 1);
- a forward with one, and the backward, run through `tessera.attention(q, k, v, causal=, scale=,
  return_lse=True, level="tile")` and `tessera.attention_backward(q, k, v, o, lse, do, causal=, scale=,
  level="tile") -> (dq, dk, dv)` (issue 14's API). Where this checkout does not have them yet, running such
  an op is an error that says so (`KernelUnavailable`); it is never replaced by a NumPy gradient.

The attention ops have no float64 form: `exact=True` runs of a graph holding them are refused (the float64
reference of a comparison is the original graph's).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from tessera.ir.diagnostics import located
from tessera.graph.stablehlo_interpreter import GraphInterpretationError, entry_function, run_function

LEVELS = ("tile", "ptx")


class KernelUnavailable(GraphInterpretationError):
    """An attention op whose kernel API this checkout does not have (the LSE forward, the backward)."""


def op_config(op: Operation) -> dict:
    """The kernel configuration of an attention op: its properties, or a custom_call's backend_config."""
    if op.name == "stablehlo.custom_call":
        source = op.backend_config.data if op.backend_config is not None else {}
    else:
        source = op.properties
    try:
        return {"causal": bool(source["causal"].value.data), "scale": float(source["scale"].value.data),
                "head_dim": int(source["head_dim"].value.data), "dtype": source["dtype"].data,
                "block_m": int(source["block_m"].value.data), "block_n": int(source["block_n"].value.data)}
    except (KeyError, AttributeError) as e:
        raise GraphInterpretationError(located(op, f"the attention op lacks its kernel configuration ({e})")) from None


@lru_cache(maxsize=16)
def _forward_kernel(head_dim: int, causal: bool, dtype: str, scale: float, block_m: int, block_n: int,
                    bias_broadcast: tuple[str, ...] | None = None):
    from tessera.kernels import flash_attention

    return flash_attention(head_dim, causal, dtype, scale, block_m, block_n, bias=bias_broadcast is not None,
                           bias_broadcast=bias_broadcast or ())


def _bias_broadcast(q: np.ndarray, bias: np.ndarray) -> tuple[str, ...]:
    """The dimensions ("batch", "heads") a [batch|1, heads|1, seq_q, seq_k] bias is broadcast along."""
    return tuple(name for name, size, n in zip(("batch", "heads"), bias.shape[:2], q.shape[:2]) if size == 1 != n)


def _api(name: str, *parameters: str):
    """`tessera.<name>` if it exists and takes `parameters`, else None."""
    import tessera

    try:
        fn = getattr(tessera, name)
    except AttributeError:
        return None
    try:
        taken = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    return fn if all(p in taken for p in parameters) else None


def _as_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """A tensor the graph holds (values already rounded to `dtype`) in `dtype` itself, as the APIs take it."""
    from tessera.numerics import dtype_from_name

    return np.asarray(x).astype(dtype_from_name(dtype))


def _as_f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def run_forward(op: Operation, operands: list[np.ndarray], exact: bool, level: str = "tile") -> list[np.ndarray]:
    """Run a forward attention op (see the module docstring)."""
    import tessera

    if exact:
        raise GraphInterpretationError(located(op, "attention ops run in Tessera's kernels: they have no float64 "
                                                   "form (compare against the original graph)"))
    c = op_config(op)
    q, k, v, *bias = operands
    broadcast = _bias_broadcast(q, bias[0]) if bias else None
    if len(op.results) == 1:
        module = _forward_kernel(c["head_dim"], c["causal"], c["dtype"], c["scale"], c["block_m"], c["block_n"],
                                 broadcast)
        return [_as_f32(tessera.interpret(module, q, k, v, *bias, level=level))]
    fn = _api("attention", "return_lse", "level")
    if fn is None:
        raise KernelUnavailable(located(op, "this forward also returns its log-sum-exp for the backward, which needs "
                                            "tessera.attention(..., return_lse=True, level='tile') (issue 14; not in "
                                            "this checkout)"))
    q, k, v = (_as_dtype(x, c["dtype"]) for x in (q, k, v))
    options = {"bias": _as_dtype(bias[0], c["dtype"])} if bias else {}
    o, lse = fn(q, k, v, causal=c["causal"], scale=c["scale"], return_lse=True, level=level, **options)
    return [_as_f32(o), np.asarray(lse, np.float32)]


def run_backward(op: Operation, operands: list[np.ndarray], exact: bool, level: str = "tile") -> list[np.ndarray]:
    """Run a backward attention op (see the module docstring)."""
    if exact:
        raise GraphInterpretationError(located(op, "attention ops run in Tessera's kernels: they have no float64 form"))
    c = op_config(op)
    fn = _api("attention_backward", "level")
    if fn is None:
        raise KernelUnavailable(located(op, "the backward needs tessera.attention_backward(q, k, v, o, lse, do, "
                                            "causal=, scale=, level='tile') (issue 14; not in this checkout)"))
    q, k, v, o, do = (_as_dtype(x, c["dtype"]) for x in (operands[0], operands[1], operands[2], operands[3],
                                                         operands[5]))
    lse = np.asarray(operands[4], np.float32)
    try:
        dq, dk, dv = fn(q, k, v, o, lse, do, causal=c["causal"], scale=c["scale"], level=level)
    except NotImplementedError as e:  # a level the backward does not reach yet (BackwardNotLowered)
        raise KernelUnavailable(located(op, str(e))) from e
    return [_as_f32(dq), _as_f32(dk), _as_f32(dv)]


def handlers(level: str = "tile") -> dict:
    """The StableHLO interpreter's handlers for Tessera's attention ops and custom_calls at `level`."""
    from tessera.graph.attention_match import BACKWARD_TARGET, FORWARD_TARGET

    if level not in LEVELS:
        raise ValueError(f"attention level must be one of {', '.join(LEVELS)}, got '{level}'")
    forward = lambda op, x, exact: run_forward(op, x, exact, level)  # noqa: E731
    backward = lambda op, x, exact: run_backward(op, x, exact, level)  # noqa: E731
    return {"tessera.attention": forward, FORWARD_TARGET: forward,
            "tessera.attention_bwd": backward, BACKWARD_TARGET: backward}


def run_graph(module: ModuleOp, inputs: Sequence[np.ndarray], *, exact: bool = False,
              level: str = "tile") -> list[np.ndarray]:
    """Run the module's entry function (`@main`) on `inputs`, attention ops in Tessera's kernels."""
    fn = entry_function(module)
    return run_function(module, inputs, exact=exact, function=fn.sym_name.data, handlers=handlers(level))
