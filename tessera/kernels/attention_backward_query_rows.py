"""The backward's main kernel with queries on the rows of its register tiles (`build_main_query_rows`): the
layout at head_dim 64 and of 64 x 64 blocks; with a modifier it can split head_dim over thread blocks.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels.attention_backward_config import BackwardConfig
from tessera.kernels.attention_backward_frame import (add_captured_gradients, captured_gradient_scores, finish_main,
                                                     finite_or_zero, main_frame, visit_query_blocks)
from tessera.kernels.attention_mods import AttentionMods, ScoreContext, apply_mask_mod, apply_score_mod
from tessera.kernels.common import TileBuilder, register_tile
from tessera.numerics import LOG2E
from tessera.variants.derivative import may_be_unbounded, score_derivative


def build_main_query_rows(cfg: BackwardConfig, mods: AttentionMods | None = None, head_split: int = 1) -> ModuleOp:
    """One thread block per key block of one K/V head: dK, dV in registers, dQ partials into dq_accum. With
    `mods` (score_mod / mask_mod, `attention_backward`), their captured arrays are inputs after dPsum.
    `head_split` > 1: that many thread blocks per key block, each accumulating dK, dV and dQ for its slice of
    head_dim / head_split columns (from Q, dO and K slices copied beside the whole tiles, which S and dP need)."""
    c = cfg.attention
    elt, d, bm, bn = c.element_type, c.head_dim, c.block_m, c.block_n
    dh = d // head_split
    slices = {"Kh": [bn, dh], "Qh": [bm, dh], "dOh": [bm, dh]} if head_split > 1 else {}
    f = main_frame(cfg, mods, {"K": [bn, d], "V": [bn, d], "Q": [bm, d], "dO": [bm, d], "P": [bm, bn], "dS": [bm, bn],
                                **slices}, head_split)
    b, v, smem, d0 = f.b, f.v, f.smem, f.d0
    sliced = {name: smem[name + "h" if head_split > 1 else name] for name in ("K", "Q", "dO")}
    """The operands of the dV, dK and dQ products: the whole tiles, or this block's slices of head_dim."""
    n_block, batch, zero, seq_q, seq_k, k0 = f.n_block, f.batch, f.zero, f.seq_q, f.seq_k, f.k0

    def query_block(b: TileBuilder, m: SSAValue, carried, head: SSAValue, masked: bool = True,
                    rank: SSAValue | None = None) -> list[SSAValue]:
        """The work of query block m; not `masked`: a full block of the block lists (no mask_mod, no bounds).
        `rank`: the dQ semaphore count to wait for (default: this key block's index, every key block visits)."""
        dk, dv = carried
        q0 = b.muli(m, b.const(bm), "q0")
        for name in ("Q", "dO"):
            b.cp_async(b.view(v[name], [batch, head, q0, zero], [bm, d], f"{name.lower()}_window"), smem[name])
            if head_split > 1:
                b.cp_async(b.view(v[name], [batch, head, q0, d0], [bm, dh], f"{name.lower()}h_window"),
                           smem[name + "h"])
        b.cp_commit_group()
        b.cp_wait_group(0)  # the first trip's wait also covers K and V
        b.barrier()
        lse2 = b.load(b.view(v["LSE2"], [batch, head, q0], [bm], "lse2_window", in_bounds=True), "lse2")
        def dpsum_rows() -> SSAValue:
            return b.load(b.view(v["dPsum"], [batch, head, q0], [bm], "dpsum_window", in_bounds=True), "dpsum")
        # with a modifier, loaded where it is subtracted: not held beside P and the dP accumulator
        dpsum = dpsum_rows() if mods is None else None

        s = b.mma(smem["Q"], smem["K"], b.fill(0.0, register_tile([bm, bn]), "s_zero"), "s", transpose_b=True)
        dscore = None
        if mods is None:
            s = b.scale(s, c.scale * LOG2E, "s_log2")  # scale and log2 e folded into one f32 factor
        else:  # P from the modified scores, as the forward computed them; then to base 2
            s_raw = b.scale(s, c.scale, "s_scaled")
            ctx = ScoreContext(b, bm, bn, q0, k0, batch, head, {a.name: v[a.name] for a in mods.arrays})
            if mods.score_mod is not None:
                # d score_mod / d score, evaluated beside score_mod (they share nodes such as a soft-cap's tanh)
                # so that the raw score and those nodes die here; it multiplies P before the dP mma.
                s = apply_score_mod(ctx, mods.score_mod, s_raw)
                derivative = score_derivative(mods.score_mod)
                dscore, unbounded = ctx.emit(derivative.result), may_be_unbounded(derivative)
            else:
                s = s_raw
            s = s if mods.mask_mod is None or not masked else apply_mask_mod(ctx, mods.mask_mod, s)
            s = b.scale(s, LOG2E, "s_log2")
        if masked:
            s = b.mask_bounds(s, k0, seq_k, "s_in_bounds" if c.causal else "s_masked")
        if c.causal:
            s = b.mask_causal(s, q0, k0, seq_q, seq_k, "s_masked")
        p = b.binary(tile.Exp2SubtractOp, s, lse2, "p")
        p_scored = p
        if dscore is not None:
            # dS with respect to the raw score is P (dP - dPsum) d score_mod / d score: folded into P before
            # the dP mma, so that one tile, P d score_mod / d score, lives across it; before P's store, so that
            # the store's address arithmetic never runs beside both P and the derivative.
            p_scored = b.binary(tile.MulOp, p, dscore, "p_dscore")
            if unbounded:  # a padded or hidden score's derivative may be inf: 0 there, as the reference
                p_scored = finite_or_zero(b, p_scored)
        p_half = b.cast(p, elt, "p_half")
        p_plain, p = p, p_scored
        b.emit(tile.StoreSharedOp(p_half, smem["P"]))
        dp_zero = b.fill(0.0, register_tile([bm, bn]), "dp_zero")
        if dpsum is not None:
            # dP - dPsum in one product: the accumulator starts at -dPsum (along each row), so that dPsum is not
            # held beside P and the dP accumulator (2 registers a thread, which the deterministic causal kernel
            # at head_dim 64 lacks warp-specialized), as the keys-on-rows kernel does down its columns
            dp = b.mma(smem["dO"], smem["V"], b.binary(tile.SubRowsOp, dp_zero, dpsum, "neg_dpsum"),
                       "dp_minus_dpsum", transpose_b=True)
        else:
            dp = b.binary(tile.SubRowsOp, b.mma(smem["dO"], smem["V"], dp_zero, "dp", transpose_b=True),
                          dpsum_rows(), "dp_minus_dpsum")
        ds = b.binary(tile.MulOp, p, dp, "ds")
        ds_mod = captured_gradient_scores(b, mods, p_plain, dp)
        ds_half = b.cast(ds, elt, "ds_half")
        b.emit(tile.StoreSharedOp(ds_half, smem["dS"]))
        if ds_mod is not None:
            add_captured_gradients(ctx, mods, ds_mod, v, d0 if head_split > 1 else None)
        b.barrier()  # P and dS published to every warp
        dv = b.mma(smem["P"], sliced["dO"], dv, "dv_next", transpose_a=True)    # P^T dO
        dk = b.mma(smem["dS"], sliced["Q"], dk, "dk_next", transpose_a=True)    # dS^T Q
        dq = b.mma(smem["dS"], sliced["K"], b.fill(0.0, register_tile([bm, dh]), "dq_zero"), "dq_part")  # dS K
        dq_window = b.view(v["dQaccum"], [batch, head, q0, d0], [bm, dh], "dqaccum_window", in_bounds=True)
        if cfg.deterministic:
            sem = b.view(v["dQsemaphore"], [batch, head, m], [1], "sem_window")
            b.emit(tile.SemWaitOp(sem, n_block if rank is None else rank))
            b.emit(tile.AtomicAddOp(dq, dq_window))
            b.emit(tile.SemSignalOp(sem))
        else:
            b.emit(tile.AtomicAddOp(dq, dq_window))
        b.barrier()  # every warp has read Q, dO, P and dS before the next trip overwrites them
        return [dk, dv]

    dk, dv = visit_query_blocks(cfg, f, mods, b.fill(0.0, register_tile([bn, dh]), "acc_zero"), query_block)
    return finish_main(cfg, f, dk, dv)
