"""Kernel builders: each returns a verified `ModuleOp` holding one Tile IR kernel.

- `flash_attention`: online one-pass attention;
- `two_pass_attention`, `three_pass_attention`: the multi-pass variants (scratch buffers in global memory);
- `attention_backward`: the backward's three kernels (preprocess, main, postprocess), FlashAttention-3's
  structure;
- `gemm`: C = alpha op(A) op(B) + beta C_in + bias with an f32 output, in the layouts NN, NT, TN, TT, batched or
  not, for any M, N, K (`aligned=False`) or sizes TMA can read (the default).
"""

from tessera.kernels.attention import HEAD_DIMS, AttentionConfig, flash_attention
from tessera.kernels.attention_backward import (
    AttentionBackward,
    BackwardConfig,
    attention_backward,
    attention_backward_main,
    attention_backward_postprocess,
    attention_backward_preprocess,
)
from tessera.kernels.attention_multipass import three_pass_attention, two_pass_attention
from tessera.kernels.gemm import gemm

ATTENTION_BUILDERS = {
    "flash": flash_attention,
    "two_pass": two_pass_attention,
    "three_pass": three_pass_attention,
}

__all__ = [
    "ATTENTION_BUILDERS",
    "AttentionBackward",
    "BackwardConfig",
    "attention_backward",
    "attention_backward_main",
    "attention_backward_postprocess",
    "attention_backward_preprocess",
    "HEAD_DIMS",
    "AttentionConfig",
    "flash_attention",
    "gemm",
    "three_pass_attention",
    "two_pass_attention",
]
