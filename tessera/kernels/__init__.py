"""Kernel builders: each returns a verified `ModuleOp` holding one Tile IR kernel.

- `flash_attention`: online one-pass attention (with `return_lse`, its log-sum-exp; with `num_splits`, the
  split-KV parts that `attention_combine` merges, `attention_split`);
- `two_pass_attention`, `three_pass_attention`: the multi-pass variants (scratch buffers in global memory);
- `attention_backward`: the backward's three kernels (preprocess, main, postprocess), FlashAttention-3's
  structure;
- `flash_attention_varlen`, `flash_attention_paged`: packed sequences and a paged KV cache, with grouped heads;
- `gemm`: C = alpha op(A) op(B) + beta C_in + bias with an f32 output, in the layouts NN, NT, TN, TT, batched or
  not, for any M, N, K (the default: a launch specializes it to the TMA path where the sizes give 16-byte rows;
  `aligned=True` promises such sizes, `aligned=False` never uses TMA).
"""

from tessera.kernels.attention import flash_attention
from tessera.kernels.attention_backward import (
    AttentionBackward,
    BackwardConfig,
    attention_backward,
    attention_backward_main,
    attention_backward_postprocess,
    attention_backward_preprocess,
)
from tessera.kernels.attention_config import HEAD_DIMS, AttentionConfig
from tessera.kernels.attention_multipass import three_pass_attention, two_pass_attention
from tessera.kernels.attention_paged import flash_attention_paged
from tessera.kernels.attention_split import attention_combine
from tessera.kernels.attention_varlen import flash_attention_varlen
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
    "attention_combine",
    "flash_attention",
    "flash_attention_paged",
    "flash_attention_varlen",
    "gemm",
    "three_pass_attention",
    "two_pass_attention",
]
