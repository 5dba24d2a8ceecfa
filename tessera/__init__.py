"""Tessera: a multi-level tile compiler on xDSL for sm_90a, with an interpreter at every level.

Public API:
- `tessera.kernels`: builders of Tile IR kernels (flash/two-pass/three-pass attention, GEMM);
- `tessera.launch(module, *arrays, kernel=None, level=None, pipeline=None, **sizes)`: run any Tile IR kernel on
  the GPU (level=None), or with `level="tile" | "target" | "ptx"` in the Tile IR interpreter, the CTA simulator
  (Target IR) or the PTX executor, `workers=N` / `executor=` running the CTAs in parallel
  (`tessera.interpreters.parallel`); `tessera.interpret` is the same call defaulting to level "tile" (compat);
- `tessera.gemm(a, b, ..., level=None)`: GEMM on the GPU or in an interpreter (`tessera.runtime.gemm`);
- `tessera.compile(module, target="ptx", pipeline=None)`: Target IR, PTX text, or a ptxas result with the cubin;
- `tessera.parse_module(text)` / `tessera.print_module(module)`; `tessera.find_kernel(module, kernel)`;
- `tessera.attention(q, k, v, causal=False, scale=None, return_lse=False, num_splits=1, level=None)`: run attention
  on an H100/H200 (with `cuda-bindings`; see `tessera.runtime`, imported on first use), or with `level=` the
  same kernels in an interpreter;
- `tessera.attention_backward(q, k, v, o, lse, do, causal=False, scale=None, deterministic=False, level=None)`:
  (dq, dk, dv) on the GPU, or with `level=` in an interpreter (`tessera.runtime.attention_backward`; `dlse=`, the
  loss's gradient in the LSE where the loss reads it).
- both with FlexAttention's `score_mod=` and `mask_mod=` (plain Python traced into the kernel,
  `tessera.variants`; in the interpreters so far);
- `tessera.attention(..., cu_seqlens_q=, cu_seqlens_k=, ...)`: packed variable-length batches
  (`tessera.runtime.serving`); `tessera.attention_with_kvcache(...)`: decoding against a (paged) KV cache
  (`tessera.runtime.kvcache`), both with `return_lse=` and `num_splits=` and also in the interpreters with
  `level=`.
- the subpackages of `SUBMODULES` (`tessera.passes`, `tessera.validate`, `tessera.ptx`, `tessera.kernels`,
  `tessera.runtime`, ...) after `import tessera` alone: each is imported on first access.

Every entry point that lowers a kernel uses one default, `tessera.passes.DEFAULT_PIPELINE` (the full,
warp-specialized pipeline ending in register allocation); `pipeline=` picks another. Arguments are checked at
this boundary (`tessera.arguments`): TypeError for the wrong kind of argument, ValueError for a value the
function does not take, each naming the parameter and the rule.
"""

from __future__ import annotations

from tessera.api import (  # noqa: F401 (lower_to_target: public, outside __all__ as before)
    LEVELS, TARGETS, compile, find_kernel, interpret, lower_to_target, parse_module, print_module,
)
from tessera.version import __version__

__all__ = ["compile", "launch", "interpret", "parse_module", "print_module", "find_kernel", "LEVELS", "TARGETS", "__version__"]


SUBMODULES = (
    "analysis", "dialects", "graph", "host", "interpreters", "ir", "kernels", "lowering", "passes", "ptx", "regalloc",
    "runtime", "sm90", "toolchain", "tools", "validate", "validation", "variants",
)
"""The public subpackages and modules, reached from `import tessera` alone (`tessera.passes.DEFAULT_PIPELINE`):
each is imported on first access, so `import tessera` stays light."""
_LAZY_FUNCTIONS = {
    # They run on the GPU (with cuda-bindings) or, with level=, in an interpreter; the runtime loads the CUDA
    # bindings only when called.
    "attention": "tessera.runtime.attention",
    "attention_backward": "tessera.runtime.attention_backward",
    "attention_with_kvcache": "tessera.runtime.kvcache",
    "gemm": "tessera.runtime.gemm",
    # Any kernel, on the GPU or (level=) in an interpreter: above both the API and the runtime.
    "launch": "tessera.runtime.entry",
}


def __getattr__(name: str):
    """PEP 562: a name of `SUBMODULES` imports that submodule, a name of `_LAZY_FUNCTIONS` the function of its
    module, on first access."""
    import importlib

    if name in SUBMODULES:
        # Importing the submodule binds it as an attribute of the package; `kernels` does not clash with the
        # kernel_abi function, which tessera.api imports as `kernel_functions`.
        return importlib.import_module(f"tessera.{name}")
    if name in _LAZY_FUNCTIONS:
        return getattr(importlib.import_module(_LAZY_FUNCTIONS[name]), name)
    raise AttributeError(f"module 'tessera' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted({*globals(), *SUBMODULES, *_LAZY_FUNCTIONS})
