"""The checked parameters of an attention kernel (`AttentionConfig`) and the checks of its arguments: head
dimensions, default tiles, bias broadcasting, split-KV counts. Every attention builder (flash, multi-pass,
paged, varlen, backward) starts from an `AttentionConfig`; the kernel it then writes is `attention_block`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, StringAttr
from xdsl.ir import Attribute

from tessera.kernels import attention_fp8
from tessera.kernels.common import (
    F32_LARGEST,
    check_block,
    check_choice,
    check_dtype,
    check_flag,
    check_scale,
    f32,
)

HEAD_DIMS = (64, 96, 128, 192, 256)
"""Head dimensions the attention builders support (FlashAttention-3's forward set)."""

DEFAULT_BLOCK_M = 128
"""Queries per thread block: two warpgroups' worth of 64-row wgmma tiles."""

DEFAULT_BLOCK_N = {64: 128, 96: 128, 128: 128, 192: 112, 256: 48}
"""Keys per inner-loop step by head_dim (see `AttentionConfig`)."""


@dataclass(frozen=True)
class AttentionConfig:
    """The checked parameters of an attention kernel.

    Defaults: BM = 128; BN = 128 for head_dim 64, 96 and 128, 112 for head_dim 192, 48 for head_dim 256.
    BM = BN = 128 is FlashAttention-3's Hopper tile for head_dim 128 (causal) and the BN it uses for head_dim
    64; with bf16, Q + K + V in shared memory take 96 KiB at head_dim 128 (48 KiB at 64), which leaves room for
    a second K/V stage when the loop is pipelined, and the 128x128 f32 score tile is 64 registers per thread over two
    warpgroups. BN = 64 (FlashAttention-2's Ampere choice) halves the score tile but doubles the loop trips
    and the per-step softmax bookkeeping; on Hopper the register file affords 128.

    At head_dim 256 the [64, 256] f32 accumulator of each consumer warpgroup alone takes 128 registers per
    thread, so the key block shrinks (FlashAttention-3 uses 80): with BN = 48 the full pipeline's two score
    tiles in flight (overlap-softmax) fit the 240 registers a consumer warpgroup gets beside the producer
    (BN = 64 needs 252), and two-pass attention's shared memory fits 227 KiB (BN = 64 needs 257 KiB). A row
    of a 48-wide score tile spans 12 registers of a thread, not a power of two, which the row reductions
    handle.

    Head_dim 96 (some Phi and StableLM sizes) is a 64-byte-swizzled row of bf16 (96 x 2 = 192 bytes, three
    64-byte chunks); its [64, 96] f32 accumulator is 48 registers per thread, and BN = 128 warp-specializes
    with 168 registers under ptxas 13.0, no spill. Head_dim 192 (DeepSeek's MLA q/k dimension) takes
    FlashAttention-3's 128 x 112 tile: at BN = 128 the pipelined K/V stages need 246,784 bytes of shared memory,
    over the 232,448 a block may have, and the kernel falls back to a single stage; at 112 it warp-specializes
    (168 registers, no spill). A row of a 112-wide score tile spans 28 registers of a thread. Any multiple of 16
    may be asked for; the passes refuse what does not fit, by name.
    """

    head_dim: int
    causal: bool
    dtype: str
    scale: float
    block_m: int
    block_n: int
    return_lse: bool = False
    num_splits: int = 1
    bias: bool = False
    bias_broadcast: tuple[str, ...] = ()
    """The dimensions (of BIAS_BROADCAST_DIMS) along which the bias has size 1 and is broadcast."""
    fp8: bool = False
    """Q, K, V in e4m3 with descale inputs, O in `dtype` (bf16): the FP8 kernel (`attention_fp8`), which only
    `flash_attention(dtype="e4m3")` builds."""
    v_transposed: bool | str = False
    """With `fp8`: V is given as V^T [batch, heads_k, head_dim, seq_k] (truthy), its keys in P8 key order
    ("p8", `attention_fp8.V_TRANSPOSED_ORDERS`; `flash_attention` refuses True, keys in their own order, by name:
    `attention_fp8.V_TRANSPOSED_NATURAL_REFUSAL`)."""

    @classmethod
    def checked(
        cls,
        head_dim: object,
        causal: object = False,
        dtype: object = "bf16",
        scale: object = None,
        block_m: object = DEFAULT_BLOCK_M,
        block_n: object = None,
        return_lse: object = False,
        num_splits: object = 1,
        bias: object = False,
        bias_broadcast: object = (),
    ) -> AttentionConfig:
        """Validate builder arguments; raises ValueError naming the argument, the value and what is allowed.
        `block_n=None` is the head_dim's default (`DEFAULT_BLOCK_N`)."""
        check_choice("head_dim", head_dim, HEAD_DIMS)
        if block_n is None:
            block_n = DEFAULT_BLOCK_N[head_dim]  # type: ignore[index]
        check_dtype(dtype)
        num_splits = check_num_splits(num_splits)
        if num_splits > 1 and head_dim not in SPLIT_HEAD_DIMS:
            raise ValueError(f"num_splits > 1 (split-KV) supports head_dim {', '.join(map(str, SPLIT_HEAD_DIMS))}; "
                             f"got head_dim {head_dim}: the f32 partial output, {DEFAULT_BLOCK_M} x {head_dim} "
                             f"({head_dim // 2} registers per thread beside the accumulator's {head_dim // 2} when "
                             "it is stored), does not fit the consumer warpgroups' 240 registers")
        return cls(
            head_dim=head_dim,  # type: ignore[arg-type]
            causal=check_flag("causal", causal),
            dtype=dtype,  # type: ignore[arg-type]
            scale=check_scale(scale, head_dim),  # type: ignore[arg-type]
            block_m=check_block("block_m", block_m),
            block_n=check_block("block_n", block_n),
            return_lse=check_flag("return_lse", return_lse),
            num_splits=num_splits,
            bias=check_bias_scale(check_flag("bias", bias), check_scale(scale, head_dim)),  # type: ignore[arg-type]
            bias_broadcast=check_bias_broadcast(bias_broadcast, bias, num_splits),
        )

    @property
    def element_type(self) -> Attribute:
        """The element type of Q, K, V (and of P in the P.V product): e4m3 in the FP8 kernel."""
        return attention_fp8.fp8_element_type() if self.fp8 else check_dtype(self.dtype)

    @property
    def output_type(self) -> Attribute:
        """The element type of O: `dtype` (bf16 in the FP8 kernel)."""
        return check_dtype(self.dtype)

    @property
    def split(self) -> bool:
        """Whether the kernel writes split-KV partial results (num_splits > 1) instead of O."""
        return self.num_splits > 1

    def kernel_name(self, variant: str) -> str:
        """`flash_attention_d128_bf16_causal`, `..._bias` with an additive bias (`_bias_b1`, `_bias_h1`,
        `_bias_b1_h1` broadcast over batch and/or heads), `..._lse` with the LSE output, `..._split3` for
        split-KV parts."""
        dtype = attention_fp8.FP8_DTYPES[0] if self.fp8 else self.dtype
        return (f"{variant}_d{self.head_dim}_{dtype}" + ("_vt" if self.v_transposed else "") + ("p8" if self.v_transposed == "p8" else "")
                + ("_causal" if self.causal else "")
                + ("_bias" + "".join(f"_{d[0]}1" for d in self.bias_broadcast) if self.bias else "")
                + ("_lse" if self.return_lse and not self.split else "")
                + (f"_split{self.num_splits}" if self.split else ""))

    def kernel_info(self) -> dict[str, Attribute]:
        if self.split or self.fp8:  # partial results, descale inputs: no "attention" reference describes them
            return {"kind": StringAttr("custom")}
        info = {
            "kind": StringAttr("attention"),
            "causal": IntegerAttr(int(self.causal), 1),
            "scale": FloatAttr(self.scale, f32),
        }
        if self.bias:
            info["bias"] = IntegerAttr(1, 1)
        return info

    def bias_dims(self) -> list[str | int]:
        """The named dimensions of the Bias input: [batch, heads, seq_q, seq_k], with 1 for a broadcast one."""
        return [1 if d in self.bias_broadcast else d for d in BIAS_BROADCAST_DIMS] + ["seq_q", "seq_k"]


BIAS_BROADCAST_DIMS = ("batch", "heads")
"""The dimensions along which a bias may have size 1 (PyTorch SDPA's attn_mask [1, heads, Sq, Sk] or
[batch, 1, Sq, Sk]): the kernel reads it at index 0 there, with no stride of its own to pass."""


def check_bias_broadcast(value: object, bias: object, num_splits: int) -> tuple[str, ...]:
    """The checked `bias_broadcast`: a tuple of distinct names from BIAS_BROADCAST_DIMS, only with `bias`;
    a bias with split-KV is refused by name (ValueError)."""
    if bias is True and num_splits > 1:
        raise ValueError("bias is not supported with num_splits > 1 (split-KV): the partial kernels take no bias")
    if isinstance(value, str):
        value = (value,)
    if not isinstance(value, tuple | list) or not all(isinstance(d, str) and d in BIAS_BROADCAST_DIMS for d in value) \
            or len(set(value)) != len(value):
        raise ValueError(f"bias_broadcast must be a tuple of distinct names from {', '.join(BIAS_BROADCAST_DIMS)}; "
                         f"got {value!r}")
    if value and bias is not True:
        raise ValueError(f"bias_broadcast applies to a bias (bias=True); got bias={bias!r}")
    return tuple(d for d in BIAS_BROADCAST_DIMS if d in value)


def check_bias_scale(bias: bool, scale: float) -> bool:
    """`bias`, if the score mma's accumulator can start at Bias / scale (`bias_accumulator`): 1/scale must be a
    finite f32; ValueError naming bias and scale otherwise."""
    if bias and 1.0 / scale > F32_LARGEST:
        raise ValueError(f"bias needs 1/scale to be a finite f32 (the bias enters the scores as Bias / scale); "
                         f"got scale={scale!r}")
    return bias


SPLIT_HEAD_DIMS = (64, 96, 128, 192)
"""Head dimensions of the split-KV kernel (`AttentionConfig.checked` says why not 256)."""

MAX_SPLITS = 256
"""The most key-range splits a split-KV kernel takes (FlashAttention-3 caps its heuristic's choice at 128)."""


def check_num_splits(value: object) -> int:
    """A split count: an int from 1 to MAX_SPLITS; ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SPLITS:
        raise ValueError(f"num_splits must be an integer from 1 to {MAX_SPLITS}; got {value!r}")
    return value
