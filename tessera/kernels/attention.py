"""The online one-pass attention kernel, `flash_attention` (FlashAttention-2's loop; FlashAttention-3's tiles):
its builder, the check of its modifiers and its key loop (`flash_loop`, which the varlen kernel shares).

Its configuration is `attention_config.AttentionConfig`; its arguments, grid, LSE and split-KV layout are
`attention_block`'s (module docstring); the loop's steps are `attention_steps`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from xdsl.dialects.builtin import ModuleOp, UnitAttr
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels import attention_fp8
from tessera.kernels.attention_block import AttentionBlock, attention_kernel
from tessera.kernels.attention_config import DEFAULT_BLOCK_M, DEFAULT_BLOCK_N, HEAD_DIMS, AttentionConfig
from tessera.kernels.attention_mods import AttentionMods
from tessera.kernels.attention_steps import (accumulate_pv, exponents_subtract_first, load_key_block, masked_scores,
                                             store_results)
from tessera.kernels.common import (
    DTYPES,
    TileBuilder,
    apply_cluster,
    check_cluster,
    check_flag,
    finish_kernel,
    register_tile,
)
from tessera.variants.index_ranges import check_at_launch
from tessera.variants.launch_lists import lists_at_launch
from tessera.variants.trace import trace_mod

PARTIAL_LOOP_OVERLAP = False
"""Whether a block-sparse kernel's loop over partial key blocks overlaps its softmax with the previous trip's
P.V mma (`overlap-softmax`). It does not (`tile.no_overlap`): mask_mod's [BM, BN] index tiles beside two
score tiles and the P.V mma's operands need 261 registers a thread of the consumer warpgroups at head_dim
128, BN 128 (232 are there) and 265 at head_dim 64; the loop over full blocks, which evaluates no mask,
overlaps as the dense kernel's does."""

NO_OVERLAP_ATTR = "tile.no_overlap"
"""`overlap_softmax.NO_OVERLAP_ATTR` (the kernels do not import the passes)."""

FLASH_BLOCK_N = {**DEFAULT_BLOCK_N, 128: 176}
"""Keys per inner-loop step of `flash_attention`'s dense forward by head_dim (`block_n=None`), 176 at head_dim
128: FlashAttention-3's 128 x 176 tile. It fits the consumers' 240 registers beside the producer's 24
(warp-specialize), without spill, causal or not, GQA, with the LSE or clusters of two. Those that keep
`DEFAULT_BLOCK_N`: with bias (single-stage at 176), causal with the LSE (241 registers: two stages without a
producer at 176), score_mod/mask_mod, split-KV and FP8 (`FP8_BLOCK_N`).
the fixed work of an iteration (descriptors, barriers, the 64-FMUL rescale of the accumulator) is spread over
176 keys instead of 128: 3.37 SASS instructions per key in the steady loop under ptxas 13.0, against 3.74
(`bench/pipeline.py`). The serving, training and multi-pass kernels keep `DEFAULT_BLOCK_N` (a paged cache
copies its pages by TMA when the page size is a multiple of the key block, and powers of two are not of 176)."""


def flash_attention(
    head_dim: int = 128,
    causal: bool = False,
    dtype: str = "bf16",
    scale: float | None = None,
    block_m: int = DEFAULT_BLOCK_M,
    block_n: int | None = None,
    grouped: bool = False,
    return_lse: bool = False,
    num_splits: int = 1,
    cluster: int = 1,
    bias: bool = False,
    bias_broadcast: Sequence[str] = (),
    *,
    score_mod: Callable | None = None,
    mask_mod: Callable | None = None,
    block_sparse: bool = False,
    v_transposed: bool = False,
) -> ModuleOp:
    """The online one-pass attention kernel (FlashAttention-2 style), `flash_attention_d{D}_{dtype}[_causal]`
    (`flash_attention_gqa_...` with `grouped`: K and V with heads_k heads, see `attention_kernel`).

    `cluster=N` groups N consecutive query blocks of a head into a cluster that shares its K and V copies
    (`tessera.passes.form_clusters`; on sm_90a, TMA multicast): not with `causal` (the members' key ranges
    differ), refused by name.

    Per key block j: S = mask(scale Q K_j^T); m' = max(m, rowmax S); alpha = exp(m - m'); P = exp(S - m');
    l' = alpha l + rowsum P; acc' = alpha acc + P V_j. After the loop O = acc / l. Live per block: the
    running max m [BM], sum l [BM] and accumulator acc [BM, D] (all f32), and one [BM, BN] score tile.
    `block_n=None` takes `FLASH_BLOCK_N` (176 keys at head_dim 128, FlashAttention-3's tile), and
    `DEFAULT_BLOCK_N` with bias, modifiers, split-KV, or causal with the LSE (FP8: `FP8_BLOCK_N`).

    `return_lse=True` adds the LSE output (`..._lse`); `num_splits=S > 1` makes the split-KV kernel
    (`..._split{S}`) whose partial results `attention_combine` merges (`attention_block`'s module docstring).

    `bias=True` (`..._bias`) adds an input after V, Bias [batch, heads, seq_q, seq_k] in the kernel's element
    type, and computes softmax(scale Q K^T + Bias [+ causal mask]) V: per key block the bias block [BM, BN]
    is loaded into the score tile's register layout and added after the scale, before the masks (a -inf bias
    entry hides its key, like attn_mask in PyTorch's SDPA; a row whose every key is hidden gives O = 0 and
    LSE = -inf). The LSE is then that of the biased scores. The bias block enters as the score mma's initial
    accumulator, Bias / scale (`bias_accumulator`), so the scores are scale (Bias / scale + Q K^T). The lowering
    computes exp(x - m) as ex2((x - m) log2 e), the score x rounded from the accumulator as the row maximum m
    was, then subtracted, then scaled (`subtract_first` on the kernel's tile.exp_subtract and tile.exp_diff: a
    bias may hold huge finite fills, for which the unbiased kernel's one fma ex2(acc scale log2 e - m log2 e)
    would lose exp(0) = 1 for the row's maximum). Bias / scale is an f32 saturated at +-V (`bias_accumulator`,
    `numerics.bias_bound`): a finite bias beyond +-V scale (e.g. bf16's lowest, -3.39e38, used as a mask fill,
    with scale 1/8) acts as +-V scale and stays finite, so a row whose every key has that fill averages V
    uniformly (as float64 and PyTorch's eager attention do), not O = 0. `bias_broadcast` names the dimensions, "batch" and/or
    "heads", in which the bias has size 1 (`..._bias_b1`, `_bias_h1`): read at index 0 there, as PyTorch
    broadcasts an attn_mask [1, heads, Sq, Sk] or [batch, 1, Sq, Sk]. Not with split-KV, grouped heads or
    clusters (refused by name).

    `score_mod(score, b, h, q_idx, kv_idx)` and `mask_mod(b, h, q_idx, kv_idx)` (FlexAttention's modifiers,
    `tessera.variants.trace`; `flex_attention_...`) are traced into the score tile: S = score_mod(scale Q K^T),
    then -inf where mask_mod is false, then the bounds (and causal) masks. q_idx and kv_idx are absolute
    positions from 0 (a mask_mod `q_idx >= kv_idx` is top-left causal). NumPy arrays they read become inputs
    after V (and Bias), named `score_mod_NAME` / `mask_mod_NAME`. `block_sparse=True` (needs mask_mod) adds
    the block lists (`attention_mods.BLOCK_LISTS`, from `tessera.variants.block_mask.create_block_mask`): the loop visits
    each query block's full key blocks without evaluating mask_mod, then its partial ones with it, and never
    an empty one. Not with split-KV or clusters (refused by name).

    `dtype="e4m3"` builds the FP8 kernel (`flash_attention_d{D}_e4m3[_vt]...`, FlashAttention-3's FP8 forward,
    `tessera.kernels.attention_fp8`): Q, K, V in f8E4M3FN with three f32 descale inputs [batch, heads_k] after
    V, O in bf16, the LSE (with `return_lse`) in f32; causal, GQA (`grouped`), any lengths and head_dim
    64/128/256 (`attention_fp8.FP8_HEAD_DIMS`: 96 and 192 are refused by name); lowered, the producer
    warpgroup transposes each V tile in shared memory (the default pipeline:
    passes/convert_tile_to_sm90/transpose.py). `v_transposed="p8"` takes V as V^T [batch, heads_k,
    head_dim, seq_k] with its keys in P8 key order (`attention_fp8.V_TRANSPOSED_ORDERS`), lowered without a
    transpose (seq_k a multiple of 16); `v_transposed=True` (V^T with its keys in their own order, which no
    level below Tile IR can lower) is refused by name (`attention_fp8.V_TRANSPOSED_NATURAL_REFUSAL`); its default
    block_n is `attention_fp8.FP8_BLOCK_N`. e5m2, and FP8
    with bias, split-KV, score_mod/mask_mod or clusters, are refused by name."""
    if block_n is None and isinstance(head_dim, int) and isinstance(dtype, str) and dtype in DTYPES \
            and bias is False and score_mod is None and mask_mod is None and num_splits == 1 \
            and not (causal is True and return_lse is True):
        block_n = FLASH_BLOCK_N.get(head_dim)  # None for a head_dim refused by name below
    fp8 = attention_fp8.check_fp8_options(dtype, bias=bias is True, num_splits=num_splits if isinstance(num_splits, int) else 1,
                                          mods=score_mod is not None or mask_mod is not None,
                                          cluster=check_cluster("cluster", cluster, 1), v_transposed=v_transposed)
    if fp8:
        attention_fp8.check_fp8_head_dim(head_dim, HEAD_DIMS)
    if fp8 and block_n is None and head_dim in attention_fp8.FP8_BLOCK_N:
        block_n = attention_fp8.FP8_BLOCK_N[head_dim]
    c = AttentionConfig.checked(head_dim, causal, attention_fp8.FP8_OUTPUT_DTYPE if fp8 else dtype, scale, block_m,
                                block_n, return_lse, num_splits, bias, bias_broadcast)
    if fp8:
        c = replace(c, fp8=True, v_transposed=v_transposed)
    check_flag("grouped", grouped)
    shape = check_cluster("cluster", cluster, 1)
    if c.bias and grouped:
        raise ValueError("bias is not supported with grouped=True (GQA/MQA) yet; expand K and V to the query heads")
    if c.bias and shape != (1, 1, 1):
        raise ValueError("bias is not supported with cluster > 1 yet (a biased kernel is not validated with "
                         "multicast K/V copies); use cluster=1")
    mods = check_mods(score_mod, mask_mod, block_sparse, c, shape)
    variant = "flex_attention" if mods is not None else "flash_attention"
    fn, b, blk = attention_kernel(c, variant + ("_gqa" if grouped else ""), grouped=grouped, mods=mods)
    m, l, acc = flash_loop(b, blk)
    # The one normalisation: O = acc / l (a row that saw no key has l = 0 and gives 0).
    store_results(b, blk, acc, m, l)
    if c.v_transposed == "p8":
        attention_fp8.order_v_keys(fn)
    module = apply_cluster(finish_kernel(fn, b), shape)
    if mods is not None:  # a launch proves the modifiers' reads in bounds for its shapes
        check_at_launch(module, mods.traced())
    if mods is not None and mods.block_sparse:  # and its block lists made for its lengths
        lists_at_launch(module, mods.mask_mod.function, c.block_m, c.block_n)
    return module


def check_mods(score_mod, mask_mod, block_sparse, c: AttentionConfig, cluster) -> AttentionMods | None:
    """The traced modifiers of `flash_attention` (None without any); ValueError naming what is refused."""
    check_flag("block_sparse", block_sparse)
    if block_sparse and mask_mod is None:
        raise ValueError("block_sparse=True needs a mask_mod (the block lists are computed from it)")
    if score_mod is None and mask_mod is None:
        return None
    if c.split:
        raise ValueError("score_mod/mask_mod are not supported with num_splits > 1 (split-KV)")
    if cluster != (1, 1, 1):
        raise ValueError("score_mod/mask_mod are not supported with cluster > 1")
    return AttentionMods(None if score_mod is None else trace_mod(score_mod, "score_mod"),
                         None if mask_mod is None else trace_mod(mask_mod, "mask_mod"), block_sparse)


def flash_loop(b: TileBuilder, blk: AttentionBlock) -> tuple[SSAValue, SSAValue, SSAValue]:
    """The online-softmax loop over the block's `n_kv` key blocks (see `flash_attention`); returns the final
    running max m, sum l and unnormalised accumulator acc. With block sparsity (`blk.mods.block_sparse`) two
    loops: over the query block's full key blocks (no mask_mod), then over its partial ones, each reading the
    key block's index from its list (`tile.load_index`)."""
    c = blk.config
    rows = register_tile([c.block_m])
    m_init = b.fill(float("-inf"), rows, "m_init")
    l_init = b.fill(0.0, rows, "l_init")
    acc_init = b.fill(0.0, register_tile([c.block_m, c.head_dim]), "acc_init")

    def key_step(b: TileBuilder, k0: SSAValue, carried: tuple[SSAValue, ...], mask_mod: bool) -> list[SSAValue]:
        m, l, acc = carried
        load_key_block(b, blk, k0, ("K", "V"))
        s = masked_scores(b, blk, k0, mask_mod)
        blk.clear_past_keys(b, k0)  # V rows past the keys hold anything: P = 0 times NaN is NaN
        m_new = b.binary(tile.ElementMaxOp, m, b.unary(tile.RowMaxOp, s, "s_max"), "m_new")
        huge = exponents_subtract_first(c)
        alpha = b.emit(tile.ExpDiffOp(m, m_new, subtract_first=huge), "alpha")
        p = b.emit(tile.ExpSubtractOp(s, m_new, subtract_first=huge), "p")
        l_new = b.fma(alpha, l, b.unary(tile.RowSumOp, p, "p_sum"), "l_new")
        acc_scaled = b.binary(tile.MulRowsOp, acc, alpha, "acc_scaled")
        acc_new = accumulate_pv(b, blk, p, acc_scaled)
        b.barrier()  # every warp has read K and V before the next step's copies overwrite them
        return [m_new, l_new, acc_new]

    carried = (m_init, l_init, acc_init)
    if blk.mods is None or not blk.mods.block_sparse:
        def dense_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
            return key_step(b, b.muli(j, b.const(c.block_n), "k0"), carried, True)

        return b.for_loop(blk.n_kv, list(carried), ["m", "l", "acc"], dense_step)
    coords = [blk.batch, blk.head, blk.q_block]
    # Both counts are read before the loops: the second count's pointer then does not live through the first
    # loop (the producer warpgroup's registers decide the consumers' budget).
    counts = [b.emit(tile.LoadIndexOp(blk.args[name], coords), name.lower())
              for name in ("FULL_KV_NUM_BLOCKS", "KV_NUM_BLOCKS")]
    for count, list_name, mask_mod in ((counts[0], "FULL_KV_INDICES", False), (counts[1], "KV_INDICES", True)):

        def listed_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...],
                        list_name: str = list_name, mask_mod: bool = mask_mod) -> list[SSAValue]:
            block = b.emit(tile.LoadIndexOp(blk.args[list_name], [*coords, j]), "kv_block")
            return key_step(b, b.muli(block, b.const(c.block_n), "k0"), carried, mask_mod)

        carried = b.for_loop(count, list(carried), ["m", "l", "acc"], listed_step)
        if mask_mod and not PARTIAL_LOOP_OVERLAP:
            carried[0].owner.attributes[NO_OVERLAP_ATTR] = UnitAttr()
    return carried
