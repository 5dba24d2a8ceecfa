"""The float64 reference of the GEMM kernels (alpha op(A) op(B) + beta C + bias) and their standard inputs.
"""

from __future__ import annotations

import numpy as np


def gemm(a, b) -> np.ndarray:
    """A @ B in float64 on the given (already rounded) inputs."""
    return np.matmul(np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))


def gemm_inputs(sig, inputs) -> dict:
    """check_gemm's keywords for a "gemm" kernel's signature and inputs (A, B, [C_in], [bias])."""
    g = sig.gemm
    rest = list(inputs[2:])
    c = rest.pop(0) if g.beta != 0 else None
    bias = rest.pop(0) if g.bias else None
    return dict(c=c, bias=bias, transpose_a=g.transpose_a, transpose_b=g.transpose_b, alpha=g.alpha, beta=g.beta)


def gemm_operands(rng: np.random.Generator, m: int, n: int, k: int, *, transpose_a: bool = False,
                  transpose_b: bool = False, batch: int | None = None, alpha: float | None = None,
                  beta: float | None = None) -> tuple[list[np.ndarray], dict]:
    """Standard-normal inputs of a GEMM in the kernel's argument order (A as [K, M] when `transpose_a`, else
    [M, K]; B as [N, K] when `transpose_b`, else [K, N]; with an epilogue, `alpha` and `beta` given, also an
    f32 C_in [M, N] and an f32 bias [N]), each led by `batch` when given, and the keywords `check_gemm`
    takes for them. Drawn in that order from `rng`."""
    lead = (batch,) if batch else ()
    a = rng.standard_normal(lead + ((k, m) if transpose_a else (m, k)))
    b = rng.standard_normal(lead + ((n, k) if transpose_b else (k, n)))
    inputs, options = [a, b], dict(transpose_a=transpose_a, transpose_b=transpose_b)
    if alpha is not None and beta is not None:
        c, bias = rng.standard_normal(lead + (m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        inputs += [c, bias]
        options.update(c=c, bias=bias, alpha=alpha, beta=beta)
    return inputs, options


def gemm_kernel(sig, inputs) -> np.ndarray:
    """The float64 reference output of the "gemm" kernel `sig` on (already rounded) `inputs`."""
    o = gemm_inputs(sig, inputs)
    a, b = (np.swapaxes(x, -1, -2) if t else x for x, t in ((inputs[0], o["transpose_a"]), (inputs[1], o["transpose_b"])))
    ref = o["alpha"] * np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))
    if o["c"] is not None:
        ref = ref + o["beta"] * np.asarray(o["c"], np.float64)
    if o["bias"] is not None:
        ref = ref + np.asarray(o["bias"], np.float64)
    return ref
