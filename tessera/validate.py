"""Per-level validation (the public API; the parts live in `tessera.validation`).

- `validate(module, pipeline, sizes=..., seed=..., kernel=..., ptx=True) -> ValidationReport`: apply the
  passes one at a time, run the kernel at each new level (Tile IR, Target IR, then its PTX) on the same
  generated inputs, compare with the level before and with the NumPy reference, and on a mismatch name the
  pass and the first diverging op (`tessera-opt FILE -p PIPELINE --validate`);
- `attention_trace(module, q, k, v, level=..., pipeline=..., block=(b, h, row_block), bias=None)`: the running
  max, rescale factor, running sum and partial output of flash attention per K/V tile (a kernel built with
  `bias=True` takes its bias and refuses to run without it);
  `golden_attention_trace(..., bias=None)` computes them in float64 and `compare_traces` / `first_loss` say
  where precision is lost.

A kernel with an additive bias is validated like any other: its generated inputs include the Bias (in its own,
possibly broadcast, shape) and every level is held to the float64 reference with that bias.
"""

from tessera.validation.compare import Divergence, Expectation
from tessera.validation.levels import DEFAULT_SIZES
from tessera.validation.pipeline import LevelCheck, Mismatch, ValidationError, ValidationReport, validate
from tessera.validation.trace import (
    DEFAULT_TOLERANCES,
    AttentionTrace,
    TileErrors,
    attention_trace,
    compare_traces,
    first_loss,
    golden_attention_trace,
)

__all__ = [
    "DEFAULT_SIZES",
    "DEFAULT_TOLERANCES",
    "AttentionTrace",
    "Divergence",
    "Expectation",
    "LevelCheck",
    "Mismatch",
    "TileErrors",
    "ValidationError",
    "ValidationReport",
    "attention_trace",
    "compare_traces",
    "first_loss",
    "golden_attention_trace",
    "validate",
]
