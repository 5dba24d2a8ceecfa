"""The checked parameters of the attention backward's kernels (`BackwardConfig`: head dimensions, default
tiles with and without modifiers, the head_dim split) and the layout of the tensors its three kernels share:
[batch, heads, seq, D] tensors and the f32 row statistics, whose rows are padded to whole query blocks
(`padded_rows`). The kernels are `attention_backward`'s (module docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Attribute

from tessera.dialects import tile
from tessera.kernels.attention_config import AttentionConfig
from tessera.kernels.common import check_choice, check_flag, f32, global_tensor
from tessera.numerics import ONE_FMA_SCALE_LIMIT

HEAD_DIMS = (64, 96, 128, 192)
"""Head dimensions the backward supports. 256 is refused: the main kernel's dK and dV accumulators alone,
2 x [BN, 256] f32, take 256 registers per thread of two consumer warpgroups at BN = 64 (Hopper gives a
thread at most 255), before S, dP and their fragments. 192 takes a head split (`HEAD_SPLIT`)."""

DEFAULT_BLOCKS = {64: (128, 128), 96: (64, 64), 128: (64, 128), 192: (64, 64)}
"""(BM, BN) by head_dim: FlashAttention-3's Hopper backward tiles. The dK and dV accumulators [BN, D] f32 stay
live through the whole kernel. At head_dim 64 every register tile has 128 rows (S, dP: BM; dK, dV: BN), two
consumer warpgroups of 64 rows each. At head_dim 128 the main kernel puts keys on the rows
(`build_main_key_rows`): S^T, dP^T [BN, BM], dK, dV [BN, D] and dQ^T [D, BM] all have BN = D = 128 rows, so the
two consumer warpgroups each own 64 keys of the block with 64 queries (convert-tile-to-sm90 gives every register
tile of a kernel one row count). 64 x 64 (`block_m=64, block_n=64`) is the single-warpgroup kernel, the
default at head_dim 96 and 192: at 96 keys on the rows would need dQ^T's 96 rows beside the 128 of the
others, and 128 x 128 needs 250 registers a consumer thread warp-specialized (240 are there), where 64 x 64
warp-specializes without a spill (ptxas 12.9 to 13.5); 192 at 64 x 64 takes `HEAD_SPLIT`."""

HEAD_SPLIT = {192: 2}
"""Main-kernel thread blocks per key block by head_dim without a modifier (`attention_backward`'s
`head_split`). At head_dim 192, 64 x 64, one thread block's dK and dV ([64, 192] f32 each: 192 registers a
thread of the one consumer warpgroup) beside S and dP need 310 registers warp-specialized and spill even
single-stage (309 needed, 255 a thread has); each of two thread blocks holding 96 of the 192 columns
warp-specializes without a spill. Both compute S and dP over all 192 columns (as `MODS_HEAD_SPLIT` says of
128). With `deterministic=True`, which takes no head split, head_dim 192 is refused by name."""

MODS_BLOCKS = {64: (64, 64), 96: (64, 64), 128: (64, 64), 192: (64, 64)}
"""(BM, BN) by head_dim with a score_mod or mask_mod: the builder's default, the smallest blocks the lowering
takes (one consumer warpgroup: 256 registers warp-specialized), where soft-cap + ALiBi + a window fits the
default pipeline's first rung at head_dim 64. `tessera.attention_backward` takes the dense kernel's blocks first
where the main kernel lowers warp-specialized with them (`runtime.flex.WARP_SPECIALIZED_FIRST`, which says which
modifiers fit them): at head_dim 64 128 x 128, at head_dim 128 the keys-on-rows 64 x 128, then 64 x 64 with one
thread block per key block, then `MODS_HEAD_SPLIT`."""

MODS_HEAD_SPLIT = {128: 2, 192: 2}
"""Main-kernel thread blocks per key block by head_dim with a score_mod or mask_mod (`attention_backward`'s
`head_split`). At head_dim 128, dK and dV ([64, 128] f32 each: 128 registers a thread) leave no room for a
modifier's tiles beside S and dP (soft-cap + ALiBi + a window with the block lists: 277 registers
warp-specialized, where one consumer warpgroup has 256); each of two thread blocks accumulating 64 of the 128
columns holds 64. The price: both compute S = Q K^T and dP = dO V^T over all 128 columns, 7 units of wgmma
work where one thread block does 5 (1.4x), and copy Q, dO and K slices beside the whole tiles. The builder's
default with 64 x 64 blocks; `tessera.attention_backward` builds the keys-on-rows 64 x 128 kernel, then head_split=1,
first and keeps the first that lowers warp-specialized (`runtime.flex.warp_specialized_refusal`). The
keys-on-rows kernel (`block_m=64, block_n=128`) never splits."""

@dataclass(frozen=True)
class BackwardConfig:
    """The checked parameters of the backward kernels: the forward's (`AttentionConfig`) and `deterministic`."""

    attention: AttentionConfig
    deterministic: bool

    @classmethod
    def checked(cls, head_dim: object = 128, causal: object = False, dtype: object = "bf16", scale: object = None,
                block_m: object = None, block_n: object = None, deterministic: object = False) -> BackwardConfig:
        """Validate builder arguments; ValueError naming the argument, the value and what is allowed."""
        if head_dim == 256 and not isinstance(head_dim, bool):
            raise ValueError("head_dim 256 is not supported by the attention backward: its dK and dV accumulators "
                             "(2 x [BN, 256] f32) need more registers than a thread has; head_dim must be 64, 96, "
                             "128 or 192")
        check_choice("head_dim", head_dim, HEAD_DIMS)
        if head_dim in HEAD_SPLIT and deterministic is True:
            raise ValueError(f"head_dim {head_dim} is not supported by the attention backward with deterministic=True: "
                             f"its dK and dV need head_split={HEAD_SPLIT[head_dim]} (2 x [64, {head_dim}] f32 "
                             f"accumulators: {head_dim * 2 * 64 // 128} registers a thread of one warpgroup), "
                             "and the dQ semaphores count one addition per key block")
        bm, bn = DEFAULT_BLOCKS[head_dim]  # type: ignore[index]
        config = AttentionConfig.checked(head_dim, causal, dtype, scale,
                                         bm if block_m is None else block_m, bn if block_n is None else block_n)
        if config.scale > ONE_FMA_SCALE_LIMIT:
            raise ValueError(f"scale {config.scale!r} is not supported by the attention backward: it recomputes P as "
                             "ex2(s scale log2 e - LSE log2 e) in one fma, whose rounding of LSE log2 e grows with the "
                             f"scale (at 2^26, P = inf); scale must be at most {ONE_FMA_SCALE_LIMIT:.6g} "
                             "(16 / log2 e, tessera.numerics.ONE_FMA_SCALE_LIMIT)")
        return cls(config, check_flag("deterministic", deterministic))

    @property
    def key_rows(self) -> bool:
        """Whether the main kernel puts keys on the rows of its register tiles (`build_main_key_rows`): when the
        key block is the larger (FlashAttention-3's 64 x 128 at head_dim 128)."""
        return self.attention.block_n > self.attention.block_m

    def kernel_name(self, part: str) -> str:
        """`attention_backward_preprocess_d128_bf16_causal` and the like (main: `attention_backward_d128_...`,
        with `_deterministic` when it orders its dQ additions)."""
        base = self.attention.kernel_name("attention_backward" + (f"_{part}" if part != "main" else ""))
        return base + ("_deterministic" if part == "main" and self.deterministic else "")

    def kernel_info(self) -> dict[str, Attribute]:
        """The forward's `tile.kernel` entries (causal, scale) with kind "attention_backward"."""
        return {**self.attention.kernel_info(), "kind": StringAttr("attention_backward")}


def head_dim_tensor(c: AttentionConfig, heads: str, seq, element=None) -> tuple[object, list]:
    """A [batch, `heads`, `seq`, D] tensor of the kernel's element type (or `element`) and its named dimensions."""
    d = c.head_dim
    return global_tensor([None, None, None, d], element or c.element_type), ["batch", heads, seq, d]


def rows_tensor(seq="seq_q") -> tuple[object, list]:
    """A [batch, heads, `seq`] f32 tensor of row statistics (LSE, LSE2, dPsum) and its named dimensions."""
    return global_tensor([None, None, None], f32), ["batch", "heads", seq]


def padded_rows(c: AttentionConfig) -> tile.DimExprAttr:
    """The rows of the intermediates LSE2, dPsum and dq_accum: seq_q rounded up to whole query blocks,
    BM ceildiv(seq_q, BM) (FlashAttention-3's seqlen_q_rounded). Every query block's window of them lies
    inside, so the main kernel reads and adds them through `tile.view ... in_bounds` views, without a bounds
    mask per element (a predicated `red` costs a branch around it in the SASS); the preprocess writes the
    padding rows (LSE2 = dPsum = dq_accum = 0 there: O, dO and LSE read as 0 past seq_q)."""
    return tile.DimExprAttr("seq_q", c.block_m, c.block_m)
