"""`tessera.attention(..., score_mod=, mask_mod=)` and `tessera.attention_backward(..., score_mod=, mask_mod=)`:
FlexAttention-style modifiers (`tessera.variants.trace`), run in the interpreters.

The forward builds `flash_attention(score_mod=, mask_mod=, block_sparse=True)` (block-sparse whenever there is a
mask_mod, the block lists from `tessera.variants.block_mask.create_block_mask` on the host) and runs it at `level`; the
backward runs `attention_backward(score_mod=, mask_mod=, block_sparse=True)`'s three kernels (with the
transposed lists, `BlockMask.transposed_inputs`, whenever there is a mask_mod). The GPU (`level=None`) is refused
by name: these kernels are checked in the simulators and by ptxas, not yet launched.
"""

from __future__ import annotations

import numpy as np

from tessera.variants.trace import trace_mod
from tessera.variants.block_mask import create_block_mask


SPARSE_BACKWARD_HEAD_DIMS = (64,)
"""Head dims whose block-sparse backward (`attention_backward(block_sparse=True)`) fits the registers below
Tile IR. At head_dim 128 the block lists' pointers, counts and loop state add 21 registers to the main
kernel's 249 (dK and dV alone hold 128): there, below Tile IR, the backward visits every query block and
masks per element (a score_mod there needs 259 registers and is refused by the register allocator)."""


def _captured(score_mod, mask_mod) -> list[np.ndarray]:
    """The arrays the modifiers read, in the kernels' argument order (each once)."""
    arrays: dict[str, np.ndarray] = {}
    for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
        if fn is not None:
            for captured in trace_mod(fn, kind).arrays:
                arrays.setdefault(captured.name, captured.array)
    return list(arrays.values())


def _check_level(where: str, level) -> None:
    if level is None:
        raise ValueError(f"{where}: score_mod/mask_mod run in the interpreters only so far (level='tile', "
                         "'target' or 'ptx'); the GPU launch of these kernels is not validated")


def attention_mods(q, k, v, *, score_mod, mask_mod, causal: bool, scale, return_lse: bool, level,
                   head_dim: int, dtype: str, block_n: int | None = None):
    """(O[, LSE]) of softmax(mask_mod(score_mod(scale Q K^T))) V at `level` (module docstring)."""
    from tessera import api
    from tessera.kernels import flash_attention

    _check_level("attention", level)
    (batch, heads, seq_q, _), seq_k = q.shape, k.shape[2]
    module = flash_attention(head_dim, causal=causal, dtype=dtype, scale=scale, block_n=block_n,
                             grouped=k.shape[1] != heads, return_lse=return_lse, score_mod=score_mod,
                             mask_mod=mask_mod, block_sparse=mask_mod is not None)
    inputs = [q, k, v, *_captured(score_mod, mask_mod)]
    if mask_mod is not None:
        from tessera.kernels.attention import DEFAULT_BLOCK_M, DEFAULT_BLOCK_N

        bn = DEFAULT_BLOCK_N[head_dim] if block_n is None else block_n
        inputs += create_block_mask(mask_mod, batch, heads, seq_q, seq_k, DEFAULT_BLOCK_M, bn).inputs()
    out = api.interpret(module, *inputs, level=level)
    if return_lse:
        o, lse = out
        return o, lse[..., 0]
    return out


def attention_backward_mods(q, k, v, o, lse, do, *, score_mod, mask_mod, causal: bool, scale, level,
                            head_dim: int, dtype: str, pipeline: str):
    """(dq, dk, dv) of `attention_mods` at `level`, from its O and LSE ([batch, heads, seq_q]); `pipeline` is
    the backward's (single-stage) pipeline below Tile level."""
    from tessera import api
    from tessera.kernels import attention_backward

    _check_level("attention_backward", level)
    pipeline = None if level == "tile" else pipeline
    sparse = mask_mod is not None and (level == "tile" or head_dim in SPARSE_BACKWARD_HEAD_DIMS)
    kernels = attention_backward(head_dim, causal=causal, dtype=dtype, scale=scale, score_mod=score_mod,
                                 mask_mod=mask_mod, block_sparse=sparse)
    dpsum, lse2, _ = api.interpret(kernels.preprocess, o, do, np.asarray(lse, np.float32), level=level,
                                       pipeline=pipeline)
    lists = []
    if sparse:
        c = kernels.config.attention
        (batch, heads, seq_q, _), seq_k = q.shape, k.shape[2]
        lists = create_block_mask(mask_mod, batch, heads, seq_q, seq_k, c.block_m, c.block_n).transposed_inputs()
    dq_accum, dk, dv = api.interpret(kernels.main, q, k, v, do, lse2, dpsum, *_captured(score_mod, mask_mod),
                                         *lists, level=level, pipeline=pipeline)
    return api.interpret(kernels.postprocess, dq_accum, level=level, pipeline=pipeline), dk, dv
