"""The multi-pass attention variants, as Tile IR kernels, to compare with the online one-pass kernel.

Both keep intermediates in scratch buffers in global memory (arguments with `tile.role = "scratch"`, f32,
allocated by the launcher). Each thread block only reads back what it wrote itself, and a `tile.barrier`
separates the passes so that one thread's global writes are visible to every other thread of the block.

- Three-pass: (1) S = mask(scale Q K^T), stored whole ([batch, heads, seq_q, seq_k]), and the row max m;
  (2) E = exp(S - m), stored whole, and the row sum l; (3) O = sum_j (E_j / l) V_j.
- Two-pass (K tiled, the seed's derivation): (1) per key tile t the local max LM_t and local sum
  SLD_t = rowsum exp(S_t - LM_t), stored as column t of [batch, heads, seq_q, ceildiv(seq_k, BN)], and the
  global max GM = max_t LM_t; then GD = sum_t SLD_t exp(LM_t - GM); (2) per key tile, recompute S_t and
  O += (exp(S_t - LM_t) exp(LM_t - GM) / GD) V_t.

Rows that see no key (causal, seq_q > seq_k) keep -inf maxima; the dialect's safe-max conventions make every
exp of them 0 and div_rows of a zero sum 0, so they produce zeros. With `return_lse=True` both also write
LSE = m + ln(l) (three-pass) or GM + ln(GD) (two-pass, head_dim 64 only), as `flash_attention` does (see
`attention`). Neither takes an additive bias (`bias=True` is refused by name; `flash_attention` takes one).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels.attention_block import AttentionBlock, attention_kernel
from tessera.kernels.attention_config import DEFAULT_BLOCK_M, AttentionConfig
from tessera.kernels.attention_steps import (
    accumulate_pv,
    apply_masks,
    exponents_subtract_first,
    load_key_block,
    masked_scores,
    store_lse,
    store_output,
)
from tessera.kernels.common import ArgSpec, TileBuilder, ceildiv_dim, f32, finish_kernel, global_tensor, register_tile


TWO_PASS_LSE_MAX_HEAD_DIM = 64
"""The largest head_dim at which two-pass attention can also write the LSE (see `two_pass_attention`)."""


def refuse_bias(builder: str, bias: object) -> None:
    """The multi-pass variants take no bias (they exist to compare memory traffic with the one-pass kernel);
    ValueError naming `bias` unless it is False."""
    if bias is not False:
        raise ValueError(f"bias: {builder} takes no bias (got bias={bias!r}); flash_attention(bias=True) does")


def _scratch(name: str, last_dim) -> ArgSpec:
    """A per-(batch, head, query) f32 scratch buffer whose last dimension is `last_dim`."""
    return ArgSpec(name, global_tensor([None] * 4, f32), ["batch", "heads", "seq_q", last_dim], role="scratch")


def _score_window(b: TileBuilder, blk: AttentionBlock, buffer: str, k0: SSAValue) -> SSAValue:
    c = blk.config
    return blk.window(b, buffer, blk.q0, k0, [c.block_m, c.block_n])


def three_pass_attention(
    head_dim: int = 128,
    causal: bool = False,
    dtype: str = "bf16",
    scale: float | None = None,
    block_m: int = DEFAULT_BLOCK_M,
    block_n: int | None = None,
    return_lse: bool = False,
    bias: bool = False,
) -> ModuleOp:
    """Three-pass attention, `three_pass_attention_d{D}_{dtype}[_causal]`, with scratch buffers %S (scores)
    and %E (exponentials), each [batch, heads, seq_q, seq_k] f32."""
    refuse_bias("three_pass_attention", bias)
    c = AttentionConfig.checked(head_dim, causal, dtype, scale, block_m, block_n, return_lse)
    scratch = [_scratch("S", "seq_k"), _scratch("E", "seq_k")]
    fn, b, blk = attention_kernel(c, "three_pass_attention", scratch)
    rows = register_tile([c.block_m])

    def score_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        (m,) = carried
        k0 = b.muli(j, b.const(c.block_n), "k0")
        load_key_block(b, blk, k0, ("K",))
        s = masked_scores(b, blk, k0)
        b.store_global(s, _score_window(b, blk, "S", k0))
        m_new = b.binary(tile.ElementMaxOp, m, b.unary(tile.RowMaxOp, s, "s_max"), "m_new")
        b.barrier()  # K is read before the next step's copy overwrites it
        return [m_new]

    (m,) = b.for_loop(blk.n_kv, [b.fill(float("-inf"), rows, "m_init")], ["m"], score_step)
    b.barrier()  # pass 1's stores of S are visible to every thread of the block

    def exp_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        (l,) = carried
        k0 = b.muli(j, b.const(c.block_n), "k0")
        # Keys past seq_k read back as 0, not -inf: mask again.
        s = apply_masks(b, blk, b.load(_score_window(b, blk, "S", k0), "s_loaded"), k0)
        e = b.emit(tile.ExpSubtractOp(s, m, subtract_first=exponents_subtract_first(c)), "e")
        b.store_global(e, _score_window(b, blk, "E", k0))
        return [b.binary(tile.AddOp, l, b.unary(tile.RowSumOp, e, "e_sum"), "l_new")]

    (l,) = b.for_loop(blk.n_kv, [b.fill(0.0, rows, "l_init")], ["l"], exp_step)
    b.barrier()  # pass 2's stores of E are visible to every thread of the block

    def output_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        (acc,) = carried
        k0 = b.muli(j, b.const(c.block_n), "k0")
        load_key_block(b, blk, k0, ("V",))
        e = b.load(_score_window(b, blk, "E", k0), "e_loaded")
        acc_new = accumulate_pv(b, blk, b.binary(tile.DivRowsOp, e, l, "p"), acc)
        b.barrier()  # V is read before the next step's copy overwrites it
        return [acc_new]

    acc_init = b.fill(0.0, register_tile([c.block_m, c.head_dim]), "acc_init")
    (acc,) = b.for_loop(blk.n_kv, [acc_init], ["acc"], output_step)
    store_output(b, blk, acc)
    if c.return_lse:
        store_lse(b, blk, m, l)
    return finish_kernel(fn, b)


def _column_window(b: TileBuilder, blk: AttentionBlock, buffer: str, t: SSAValue) -> SSAValue:
    """Column t of a per-key-tile statistics buffer, for this block's BM query rows: a [BM, 1] window."""
    return blk.window(b, buffer, blk.q0, t, [blk.config.block_m, 1])


def _store_column(b: TileBuilder, blk: AttentionBlock, buffer: str, t: SSAValue, rows: SSAValue) -> None:
    column = b.reshape(rows, [blk.config.block_m, 1], f"{buffer.lower()}_column")
    b.store_global(column, _column_window(b, blk, buffer, t))


def _load_column(b: TileBuilder, blk: AttentionBlock, buffer: str, t: SSAValue) -> SSAValue:
    name = buffer.lower()
    column = b.load(_column_window(b, blk, buffer, t), f"{name}_column")
    return b.reshape(column, [blk.config.block_m], f"{name}_t")


def two_pass_attention(
    head_dim: int = 128,
    causal: bool = False,
    dtype: str = "bf16",
    scale: float | None = None,
    block_m: int = DEFAULT_BLOCK_M,
    block_n: int | None = None,
    return_lse: bool = False,
    bias: bool = False,
) -> ModuleOp:
    """Two-pass attention, `two_pass_attention_d{D}_{dtype}[_causal]`, with scratch buffers %LM (local row
    maxima) and %SLD (local row sums), each [batch, heads, seq_q, ceildiv(seq_k, BN)] f32."""
    refuse_bias("two_pass_attention", bias)
    c = AttentionConfig.checked(head_dim, causal, dtype, scale, block_m, block_n, return_lse)
    if c.return_lse and c.head_dim > TWO_PASS_LSE_MAX_HEAD_DIM:
        raise ValueError(f"two_pass_attention: return_lse=True supports head_dim up to {TWO_PASS_LSE_MAX_HEAD_DIM}; got "
                         f"head_dim {c.head_dim}: GM, GD and the LSE pointer live through the output loop beside the "
                         "accumulator need 245 registers per consumer thread, more than the 240 warp specialization "
                         "leaves (flash_attention and three_pass_attention give the LSE at every head_dim)")
    n_tiles = ceildiv_dim("seq_k", c.block_n)
    fn, b, blk = attention_kernel(c, "two_pass_attention", [_scratch("LM", n_tiles), _scratch("SLD", n_tiles)])
    rows = register_tile([c.block_m])

    def statistics_step(b: TileBuilder, t: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        (gm,) = carried
        k0 = b.muli(t, b.const(c.block_n), "k0")
        load_key_block(b, blk, k0, ("K",))
        s = masked_scores(b, blk, k0)
        lm = b.unary(tile.RowMaxOp, s, "lm")
        gm_new = b.binary(tile.ElementMaxOp, gm, lm, "gm_new")
        sln = b.emit(tile.ExpSubtractOp(s, lm, subtract_first=exponents_subtract_first(c)), "sln")
        sld = b.unary(tile.RowSumOp, sln, "sld")
        _store_column(b, blk, "LM", t, lm)
        _store_column(b, blk, "SLD", t, sld)
        b.barrier()  # K is read before the next step's copy overwrites it
        return [gm_new]

    (gm,) = b.for_loop(blk.n_kv, [b.fill(float("-inf"), rows, "gm_init")], ["gm"], statistics_step, iv_name="t")
    b.barrier()  # pass 1's stores of LM and SLD are visible to every thread of the block

    def denominator_step(b: TileBuilder, t: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        (gd,) = carried
        lm = _load_column(b, blk, "LM", t)
        sld = _load_column(b, blk, "SLD", t)
        prm = b.emit(tile.ExpDiffOp(lm, gm, subtract_first=exponents_subtract_first(c)), "prm")
        return [b.fma(sld, prm, gd, "gd_new")]

    (gd,) = b.for_loop(blk.n_kv, [b.fill(0.0, rows, "gd_init")], ["gd"], denominator_step, iv_name="t")

    def output_step(b: TileBuilder, t: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        (acc,) = carried
        k0 = b.muli(t, b.const(c.block_n), "k0")
        load_key_block(b, blk, k0, ("K", "V"))
        s = masked_scores(b, blk, k0)
        lm = _load_column(b, blk, "LM", t)
        huge = exponents_subtract_first(c)
        sln = b.emit(tile.ExpSubtractOp(s, lm, subtract_first=huge), "sln")
        cn = b.binary(tile.MulRowsOp, sln, b.emit(tile.ExpDiffOp(lm, gm, subtract_first=huge), "prm"), "cn")
        acc_new = accumulate_pv(b, blk, b.binary(tile.DivRowsOp, cn, gd, "a"), acc)
        b.barrier()  # K and V are read before the next step's copies overwrite them
        return [acc_new]

    acc_init = b.fill(0.0, register_tile([c.block_m, c.head_dim]), "acc_init")
    (acc,) = b.for_loop(blk.n_kv, [acc_init], ["acc"], output_step, iv_name="t")
    store_output(b, blk, acc)
    if c.return_lse:
        store_lse(b, blk, gm, gd)
    return finish_kernel(fn, b)
