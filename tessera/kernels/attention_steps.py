"""The steps of an attention kernel's key loop, written over an `AttentionBlock`: copy a key block into shared
memory, compute its masked scores (with a bias, score_mod and mask_mod), accumulate P.V, and store the block's
results (O, the LSE, or a split-KV part's partial results).

With an additive bias (`flash_attention(bias=True)`), Bias [batch, heads, seq_q, seq_k] is an input after V
(`bias_accumulator`): -inf hides a key (a row that sees no key gives O = 0, LSE = -inf), and a finite bias
stays finite, Bias / scale saturated at +-V (`tile.saturating_scale`; V = 2^127 for any scale below 1.38),
so a mask fill of bf16's lowest value gives a padded query row the uniform average of V, as float64 and
PyTorch's eager attention do.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels import attention_fp8
from tessera.kernels.attention_block import AttentionBlock
from tessera.kernels.attention_config import AttentionConfig
from tessera.kernels.common import TileBuilder, f32, register_tile
from tessera.numerics import ONE_FMA_SCALE_LIMIT, bias_bound


def load_key_block(b: TileBuilder, blk: AttentionBlock, k0: SSAValue, tensors: Sequence[str]) -> None:
    """Copy the key block at k0 of each of `tensors` (K and/or V) into its shared tile and make it visible:
    cp_async each, commit, wait for every group (this also covers the Q copy), barrier."""
    row = blk.key_row(b, k0)
    for name in tensors:
        blk.copy_key_block(b, name, row)
    b.cp_commit_group()
    b.cp_wait_group(0)
    b.barrier()


def apply_masks(b: TileBuilder, blk: AttentionBlock, s: SSAValue, k0: SSAValue, bounds: bool = True) -> SSAValue:
    """-inf for keys past seq_k (unless not `bounds`: a full block of a block mask ends before seq_k; else
    always, as the last key block may be partial) and, if causal, for keys after the bottom-right-aligned
    diagonal. Causal, the diagonal alone: query q < seq_q sees the keys up to q + seq_k - seq_q < seq_k, so
    the bounds mask hides nothing more on any row the kernel stores; only the padding rows of the last query
    block (q >= seq_q, never stored) then see keys past seq_k, whose copies filled zeros. The diagonal of a
    thread's two rows, eight apart, is then one compare per distinct column - row (46 at 176 keys) where the
    two masks together took one per score (88)."""
    if blk.config.causal:
        return b.mask_causal(s, blk.q0, k0, blk.seq_q, blk.seq_k, "s_masked")
    return b.mask_bounds(s, k0, blk.seq_k, "s_masked") if bounds else s


def exponents_subtract_first(c: AttentionConfig) -> bool:
    """Whether the kernel's exponentials subtract before they scale (`subtract_first` on tile.exp_subtract and
    tile.exp_diff): a bias may hold huge finite fills (-1e20), FP8 descales (300 x 300) make scores of 1e6 to 1e10,
    and a scale past `ONE_FMA_SCALE_LIMIT` scores of 2^10 past 2^14, where the one fma's rounding of m log2 e would
    move P (by 2^128 at 2^31: p = inf, O = NaN)."""
    return c.bias or c.fp8 or c.scale > ONE_FMA_SCALE_LIMIT


def masked_scores(b: TileBuilder, blk: AttentionBlock, k0: SSAValue, mask_mod: bool = True) -> SSAValue:
    """S = mask(scale * Q K^T [+ Bias]) for the key block at k0, from the shared Q and K tiles: [BM, BN] f32.
    With modifiers (`blk.mods`): S = score_mod(S, ...), then -inf where mask_mod is false, before the bounds
    and causal masks; a full block of the block mask (not `mask_mod`) skips mask_mod and the bounds mask
    (`tessera.variants.block_mask`: its keys all come before seq_k)."""
    c = blk.config
    init = bias_accumulator(b, blk, k0) if c.bias else b.fill(0.0, register_tile([c.block_m, c.block_n]), "s_zero")
    s = b.mma(blk.smem["Q"], blk.smem["K"], init, "s", transpose_b=True)
    if c.fp8:  # scale x descale_q x descale_k, one f32 factor per block
        s = b.binary(tile.MulRowsOp, s, blk.descale["qk"], "s_scaled")
    else:
        s = b.scale(s, c.scale, "s_scaled")
    if blk.mods is not None:
        s = blk.mods.apply(b, blk, s, k0, mask_mod)
    return apply_masks(b, blk, s, k0, bounds=mask_mod)


def bias_accumulator(b: TileBuilder, blk: AttentionBlock, k0: SSAValue) -> SSAValue:
    """The initial value of the score mma's accumulator with a bias: Bias / scale for the block's [BM, BN] bias
    block (batch, head, q0, k0), so that scale * (Bias / scale + Q K^T) = scale Q K^T + Bias.

    The bias is read from global memory straight into the accumulator's registers (`tile.load`, as GEMM's C_in
    epilogue reads its tile), widened to f32 and multiplied by the f32 1/scale; it costs no registers beside the
    score tile's own, which is what lets the pipelined, warp-specialized kernel keep two score tiles in flight.
    The load is bounded: rows past seq_q and columns past seq_k are never addressed and read 0 (those columns
    are masked to -inf after, those rows never stored).

    Bias / scale saturates (`tile.saturating_scale`) at +-V, V = `numerics.bias_bound(scale)` (2^127 for
    scale < 1.38): a finite bias beyond +-V scale (bf16's lowest, -3.39e38, a mask fill, with scale 1/8, which
    plain f32 would overflow to -inf) stays finite and acts as +-V scale, while -inf (and +inf) stay infinite
    through the mma. A row whose every key has such a fill has exactly equal scores -V scale (Q K^T is far
    below V's ulp), and so does a row whose every key has any other huge fill below V scale (-1e12, -1e20,
    -1e30): each gets exactly exp(0) = 1 at every level, because a biased kernel's exponents subtract before
    they scale (`subtract_first` on tile.exp_subtract and tile.exp_diff: ex2((s - m) log2 e), not the unbiased
    kernel's one fma, whose rounding of m log2 e would leave the maximum ex2 of a residual of up to 2^42): the
    uniform average over the keys the row sees, as float64 and PyTorch's eager attention give, with LSE
    -V scale + ln(keys) for a saturated fill (`reference_attention.saturate_bias`); beside any other key a fill weighs 0.
    A -inf bias hides its key, and a row that sees no key gives O = 0, LSE = -inf (FlashAttention's
    convention). Costs per bias element: mul, max, min, two setp and two selp, in place (no register: the
    warp-specialized head_dim 128 kernel keeps its 232 of 240), and for the subtraction first two more f32
    ops per score (mul, sub, mul instead of one fma, in place; one more, fma and mul, where scale is 2^k)."""
    c = blk.config
    window = blk.window(b, "Bias", blk.q0, blk.key_row(b, k0), [c.block_m, c.block_n])
    bias = b.cast(b.load(window, "bias_half"), f32, "bias")
    return b.saturating_scale(bias, 1.0 / c.scale, bias_bound(c.scale), "bias_unscaled")


def accumulate_pv(b: TileBuilder, blk: AttentionBlock, p: SSAValue, acc: SSAValue) -> SSAValue:
    """acc + cast(P) @ V from the shared V tile (P rounded to the kernel's element type for the tensor core; in
    the FP8 kernel 2^8 P rounded to e4m3, `attention_fp8.round_p`, times V or the transposed V^T tile)."""
    c = blk.config
    if c.fp8:
        return b.mma(attention_fp8.round_p(b, p), blk.smem["V"], acc, "acc_next", transpose_b=bool(c.v_transposed))
    p_half = b.cast(p, c.element_type, "p_half")
    return b.mma(p_half, blk.smem["V"], acc, "acc_next")


def store_rows(b: TileBuilder, blk: AttentionBlock, value: SSAValue, tensor: str) -> None:
    """Store the block's [BM, n] tile `value` at its rows of `tensor`: rows past the tensor's end are
    dropped, and with packed sequences (`rows_left`) rows past the sequence's end too (`tile.store_global_rows`:
    they belong to the next sequence)."""
    window = blk.window(b, tensor, blk.q0, b.const(0), list(value.type.get_shape()))
    if blk.rows_left is None:
        b.store_global(value, window)
    else:
        b.emit(tile.StoreGlobalRowsOp(value, window, blk.rows_left))


def store_output(b: TileBuilder, blk: AttentionBlock, o: SSAValue) -> None:
    """Round the normalised [BM, D] output tile to the output type and store it (`store_rows`); the FP8 kernel
    first multiplies it by descale_v 2^-8 (`attention_fp8`)."""
    if blk.config.fp8:
        o = b.binary(tile.MulRowsOp, o, blk.descale["v"], "o_descaled")
    store_rows(b, blk, b.cast(o, blk.config.output_type, "o_half"), "O")


def store_lse(b: TileBuilder, blk: AttentionBlock, m: SSAValue, l: SSAValue, tensor: str = "LSE") -> None:
    """Store LSE = m + ln(l) of the block's rows into `tensor` (LSE or LSE_partial) as a [BM, 1] column;
    a row that saw no key has m = -inf and l = 0, so its LSE is -inf (`store_rows`)."""
    lse = b.binary(tile.AddOp, m, b.unary(tile.LogOp, l, "log_l"), "lse")
    store_rows(b, blk, b.reshape(lse, [blk.config.block_m, 1], "lse_column"), tensor)


def store_results(b: TileBuilder, blk: AttentionBlock, acc: SSAValue, m: SSAValue, l: SSAValue) -> None:
    """The end of an online-softmax kernel: O = acc / l (0 for a row of l = 0) rounded and stored, with the
    LSE if asked; with split-KV, O_partial = acc / l in f32 and LSE_partial instead."""
    o = b.binary(tile.DivRowsOp, acc, l, "o")
    if blk.config.split:
        store_rows(b, blk, o, "O_partial")
        store_lse(b, blk, m, l, "LSE_partial")
        return
    store_output(b, blk, o)
    if blk.config.return_lse:
        store_lse(b, blk, m, l)
