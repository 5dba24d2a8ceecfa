"""Split-KV attention (flash-decoding): the combine kernel that merges the parts, and how many parts to use.

`flash_attention(..., num_splits=S)` (S > 1) divides each query block's key blocks into S contiguous parts and
runs one thread block per part, so that a decode step (one or a few query rows per head) still fills the GPU.
Part s writes its own normalised result O_s (f32) and log-sum-exp lse_s to

    O_partial   [S, batch, heads, seq_q, D]  f32
    LSE_partial [S, batch, heads, seq_q, 1]  f32      (-inf for a part that sees no key; its O_s is 0)

(the split kernel declares them [S x batch, heads, ...], the same memory: see `tessera.kernels.attention_block`; a
reshape, which copies nothing, gives the combine kernel's inputs) and `attention_combine` merges them, per
query row:

    M   = max_s lse_s
    lse = M + ln(sum_s exp(lse_s - M))
    O   = sum_s exp(lse_s - lse) O_s

With the same conventions as the forward kernel (FlashAttention-3's combine): where every lse_s is -inf (a row
that sees no key at all) M counts as 0 in the exponentials, the sum is 0, lse = -inf and every weight
exp(lse_s - lse) is taken with lse counted as 0, i.e. exp(-inf) = 0, so O = 0; a part that saw no key
(lse_s = -inf) gets weight 0 and contributes nothing. `num_splits_heuristic` is FlashAttention-3's choice of S.
"""

from __future__ import annotations

import math

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels.attention_block import lse_arg
from tessera.kernels.attention_config import DEFAULT_BLOCK_M, SPLIT_HEAD_DIMS, check_num_splits
from tessera.kernels.common import (
    ArgSpec,
    TileBuilder,
    ceildiv_dim,
    check_block,
    check_choice,
    check_dtype,
    check_flag,
    f32,
    finish_kernel,
    global_tensor,
    kernel_function,
    register_tile,
)
from tessera.sm90.launch import L2_BYTES, SM_COUNT

MAX_SPLITS_AUTO = 128
"""The most parts `num_splits="auto"` chooses (FlashAttention-3's cap)."""

WAVE_EFFICIENCY_SHARE = 0.85
"""`num_splits_heuristic` takes the fewest parts whose wave efficiency reaches this share of the best one."""


def attention_combine(
    head_dim: int = 128,
    num_splits: int = 2,
    dtype: str = "bf16",
    return_lse: bool = False,
    block_m: int = DEFAULT_BLOCK_M,
) -> ModuleOp:
    """The combine stage of split-KV attention, `attention_combine_d{D}_{dtype}_split{S}[_lse]` (module
    docstring for what it computes). Inputs O_partial and LSE_partial (f32, as the split kernel writes them),
    output O [batch, heads, seq_q, D] in `dtype` and, with `return_lse`, LSE [batch, heads, seq_q, 1] f32.
    Grid (ceildiv(seq_q, BM), heads, batch): thread block (x, y, z) merges rows [x BM, x BM + BM) of head y of
    batch entry z, in three loops over the parts (max, sum, weighted sum of the O_s), with live state two row
    vectors and one [BM, D] f32 accumulator.

    This is the GU stage of the Ascend design (seed 001: compute_gu reduces the partial PV products into the
    final O with the stored rescale factors exp_max and the global sum l2_global_sum, "in the flash-decoding
    case ... each core keeping partial O and another kernel to do the final GU"), as a kernel of its own:

        seed 001 (per key tile t, one core)              here (per part s, one thread block each)
        exp_max_t = exp(m_{t-1} - m_t)                    folded into exp(lse_s - lse)
        runningO = exp_max_t runningO + pv_part_t         O = sum_s exp(lse_s - lse) O_s
        l2_global_sum (S_i)                               sum_s exp(lse_s - M), in lse
        last tile: O = runningO / l2_global_sum           O_s arrive normalised: no final division

    Each part's statistics (m_s, l_s) travel as one number, lse_s = m_s + ln l_s, and since
    exp(lse_s - lse) = l_s exp(m_s - M) / sum_r l_r exp(m_r - M), the weight is the seed's rescale factor
    times the part's sum over the global sum: the same reduction, done once per part instead of once per
    tile, by a separate kernel because the parts ran on different SMs."""
    check_choice("head_dim", head_dim, SPLIT_HEAD_DIMS)  # 256: O_s and the sum, 2 x 128 f32 registers, do not fit
    s = check_num_splits(num_splits)
    elt = check_dtype(dtype)
    return_lse = check_flag("return_lse", return_lse)
    bm = check_block("block_m", block_m)
    d = head_dim
    args = [
        ArgSpec("O_partial", global_tensor([s, None, None, None, d], f32), [s, "batch", "heads", "seq_q", d]),
        ArgSpec("LSE_partial", global_tensor([s, None, None, None, 1], f32), [s, "batch", "heads", "seq_q", 1]),
        ArgSpec("O", global_tensor([None, None, None, d], elt), ["batch", "heads", "seq_q", d], role="out"),
    ]
    if return_lse:
        args.append(lse_arg())
    name = f"attention_combine_d{d}_{dtype}_split{s}" + ("_lse" if return_lse else "")
    grid = [ceildiv_dim("seq_q", bm), "heads", "batch"]
    fn, b = kernel_function(name, args, {"kind": StringAttr("custom")}, grid)
    values = dict(zip((a.name for a in args), fn.body.blocks.first.args))
    q0 = b.muli(b.program_id("x", "q_block"), b.const(bm), "q0")
    head = b.program_id("y", "head")
    batch = b.program_id("z", "batch")
    rows = register_tile([bm])

    def window(b: TileBuilder, tensor: str, part: SSAValue | None, shape: list[int]) -> SSAValue:
        lead = [part] if part is not None else []
        return b.view(values[tensor], [*lead, batch, head, q0, b.const(0)], shape, f"{tensor.lower()}_window")

    def part_lse(b: TileBuilder, part: SSAValue) -> SSAValue:
        column = b.load(window(b, "LSE_partial", part, [bm, 1]), "lse_part_column")
        return b.reshape(column, [bm], "lse_part")

    def max_step(b: TileBuilder, part: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        return [b.binary(tile.ElementMaxOp, carried[0], part_lse(b, part), "lse_max_next")]

    (lse_max,) = b.for_loop(b.const(s), [b.fill(float("-inf"), rows, "lse_max_init")], ["lse_max"], max_step,
                            iv_name="part")

    def sum_step(b: TileBuilder, part: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        # exp(lse_s - M), with M = -inf counted as 0 (tile.exp_diff): 0 for an empty part or row
        term = b.binary(tile.ExpDiffOp, part_lse(b, part), lse_max, "part_weight")
        return [b.binary(tile.AddOp, carried[0], term, "lse_sum_next")]

    (lse_sum,) = b.for_loop(b.const(s), [b.fill(0.0, rows, "lse_sum_init")], ["lse_sum"], sum_step, iv_name="part")
    lse = b.binary(tile.AddOp, lse_max, b.unary(tile.LogOp, lse_sum, "log_sum"), "lse")

    def output_step(b: TileBuilder, part: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        # exp(lse_s - lse), with lse = -inf counted as 0: every weight of an empty row is exp(-inf) = 0
        weight = b.binary(tile.ExpDiffOp, part_lse(b, part), lse, "o_weight")
        o_part = b.load(window(b, "O_partial", part, [bm, d]), "o_part")
        return [b.binary(tile.AddOp, carried[0], b.binary(tile.MulRowsOp, o_part, weight, "o_weighted"), "acc_next")]

    acc_init = b.fill(0.0, register_tile([bm, d]), "acc_init")
    (acc,) = b.for_loop(b.const(s), [acc_init], ["acc"], output_step, iv_name="part")
    b.store_global(b.cast(acc, elt, "o_half"), window(b, "O", None, [bm, d]))
    if return_lse:
        b.store_global(b.reshape(lse, [bm, 1], "lse_column"), window(b, "LSE", None, [bm, 1]))
    return finish_kernel(fn, b)


def num_splits_heuristic(
    total_mblocks: int,
    num_n_blocks: int,
    num_m_blocks: int,
    size_one_kv_head: int,
    causal: bool,
    num_sms: int = SM_COUNT,
    max_splits: int = MAX_SPLITS_AUTO,
) -> int:
    """FlashAttention-3's split count (hopper/heuristics.h, `num_splits_heuristic`), a pure function.

    - `total_mblocks` thread blocks (batch x heads x query blocks) that reach 80% of the SMs already fill
      the GPU: no split, except when one KV head is larger than the L2 cache (50 MiB) and there are at least
      2 x num_sms query blocks to reread it, and not causal (causal prefill is never split): then
      ceildiv(size_one_kv_head, L2) parts, at most max_splits;
    - a key range of `num_n_blocks` <= 4 blocks is not split;
    - otherwise, for S = 1 .. min(max_splits, num_sms, num_n_blocks), the wave efficiency
      w(S) = waves / ceil(waves), waves = total_mblocks S / num_sms; the answer is the smallest S with
      w(S) >= 0.85 max_S w(S) (more parts cost more partial results to write and combine)."""
    if total_mblocks >= 0.8 * num_sms:
        if size_one_kv_head > L2_BYTES and num_m_blocks >= 2 * num_sms and not causal:
            return min(-(-size_one_kv_head // L2_BYTES), max_splits)
        return 1
    if num_n_blocks <= 4:
        return 1
    limit = min(max_splits, num_sms, num_n_blocks)
    efficiency = []
    for splits in range(1, limit + 1):
        waves = total_mblocks * splits / num_sms
        efficiency.append(waves / math.ceil(waves))
    best = max(efficiency)
    return next(splits for splits, e in enumerate(efficiency, 1) if e >= WAVE_EFFICIENCY_SHARE * best)


def choose_num_splits(batch: int, heads: int, seq_q: int, seq_k: int, head_dim: int, causal: bool,
                      block_m: int = DEFAULT_BLOCK_M, block_n: int | None = None, element_bytes: int = 2,
                      num_sms: int = SM_COUNT) -> int:
    """`num_splits="auto"` for an attention call, as FlashAttention-3's `get_num_splits` feeds the heuristic:
    query blocks ceildiv(seq_q, BM), key blocks ceildiv(seq_k, BN), total_mblocks = batch x heads x query
    blocks, one KV head seq_k x 2 D x element_bytes bytes (K and V)."""
    from tessera.kernels.attention_config import DEFAULT_BLOCK_N

    bn = DEFAULT_BLOCK_N[head_dim] if block_n is None else block_n
    num_m_blocks = -(-seq_q // block_m)
    num_n_blocks = -(-seq_k // bn)
    size_one_kv_head = seq_k * 2 * head_dim * element_bytes
    return num_splits_heuristic(batch * heads * num_m_blocks, num_n_blocks, num_m_blocks, size_one_kv_head,
                                causal, num_sms)
