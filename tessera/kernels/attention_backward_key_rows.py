"""The backward's main kernel with keys on the rows of its register tiles (`build_main_key_rows`,
FlashAttention-3's SdP_swapAB and dQ_swapAB): the layout of the 64 x 128 blocks at head_dim 128.
"""

from __future__ import annotations

from xdsl.dialects.builtin import IntegerType, ModuleOp
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels.attention_backward_config import BackwardConfig
from tessera.kernels.attention_backward_frame import (add_captured_gradients, captured_gradient_scores, finish_main,
                                                     finite_or_zero, main_frame, visit_query_blocks)
from tessera.kernels.attention_mods import AttentionMods, ScoreContext, apply_mask_mod, apply_score_mod
from tessera.kernels.common import TileBuilder, f32, register_tile, shared_tile
from tessera.numerics import LOG2E
from tessera.variants.derivative import may_be_unbounded, score_derivative


def build_main_key_rows(cfg: BackwardConfig, mods: AttentionMods | None = None) -> ModuleOp:
    """The main kernel with keys on the rows of every register tile (FlashAttention-3's SdP_swapAB and
    dQ_swapAB at head_dim 128): S^T = K Q^T and dP^T = V dO^T are [BN, BM], dK and dV [BN, D], dQ^T = K^T dS^T
    [D, BM], so with BN = D every register tile has BN rows and two consumer warpgroups each own BN/2 keys of
    the block. P^T and dS^T are then already the A operands of dV += P^T dO and dK += dS^T Q, taken from
    registers (no shared round trip for P); dS^T goes to shared memory once, as the B operand of dQ^T, which is
    added into dq_accum transposed (`tile.atomic_add ... transpose`). LSE2 and dPsum are per query, i.e. per
    column: broadcast down the columns (`tile.load_broadcast`). The masks are written with coordinates
    (`tile.iota`/`tile.cmp`/`tile.select`): key rows past seq_k, and bottom-right causal. The arguments, grid,
    traversal (GQA group loop, causal first query block) and results are `build_main_query_rows`'s.

    With `mods` (score_mod / mask_mod, `attention_backward`), as `build_main_query_rows` applies them, on S^T
    (`ScoreContext.keys_on_rows`: kv_idx runs down the rows, q_idx along the columns), the block lists walked
    by `visit_query_blocks` (full blocks with no mask_mod and no bounds), and d score_mod / d score folded into P^T
    before the dP^T mma, after P^T's store: P^T and dS^T reach the dV and dK products through shared memory."""
    c = cfg.attention
    elt, d, bm, bn = c.element_type, c.head_dim, c.block_m, c.block_n
    shared = {"K": [bn, d], "V": [bn, d], "Q": [bm, d], "dO": [bm, d], "dS": [bn, bm]}
    f = main_frame(cfg, mods, shared if mods is None else {**shared, "P": [bn, bm]})
    b, v, smem = f.b, f.v, f.smem
    n_block, batch, zero, seq_q, seq_k, k0 = f.n_block, f.batch, f.zero, f.seq_q, f.seq_k, f.k0
    # LSE2 and dPsum come through shared memory with Q and dO (one-row tiles, FlashAttention-3's sLSE and
    # sdPsum): the copy's producer loads them, and each consumer thread reads its columns with ld.shared
    # instead of its own ld.global of each (48 LDG at 64 x 128, their addresses live beside the accumulators)
    for name in ("LSE2", "dPsum"):
        smem[name] = b.alloc_shared(shared_tile([1, bm], f32), f"{name.lower()}_smem")
    i32 = IntegerType(32)
    # key k of row r is k0 + r; a key past seq_k is masked. Causal (bottom-right): key k is hidden from
    # query q = q0 + c when k > q + seq_k - seq_q.
    if not c.causal:
        key_rows = b.emit(tile.IotaOp("rows", register_tile([bn], i32), k0), "key")
        seq_k_rows = b.emit(tile.SplatOp(seq_k, register_tile([bn], i32)), "seq_k_rows")
        keys_inside = b.emit(tile.CmpOp("lt", key_rows, seq_k_rows), "key_inside")
    minus_inf = b.fill(float("-inf"), register_tile([bn, bm]), "minus_inf")
    score_scale = b.fill(c.scale * LOG2E if mods is None else LOG2E, register_tile([bn, bm]), "score_scale")

    def query_block(b: TileBuilder, m: SSAValue, carried, head: SSAValue, masked: bool = True,
                    rank: SSAValue | None = None) -> list[SSAValue]:
        """The work of query block m; not `masked`: a full block of the block lists (no mask_mod, no bounds).
        `rank`: the dQ semaphore count to wait for (default: this key block's index, every key block visits)."""
        dk, dv = carried
        q0 = b.muli(m, b.const(bm), "q0")
        # LSE2 after Q and dPsum after dO: pipelined, each row rides on the barriers of the tile copied before it
        # (convert-tile-to-sm90's riding rings), read when that tile is (S^T's exponent, dP^T's initial value)
        for name, row in (("Q", "LSE2"), ("dO", "dPsum")):
            b.cp_async(b.view(v[name], [batch, head, q0, zero], [bm, d], f"{name.lower()}_window"), smem[name])
            # rows padded to whole query blocks: every window lies inside
            b.cp_async(b.view(v[row], [batch, head, q0], [1, bm], f"{row.lower()}_window", in_bounds=True), smem[row])
        b.cp_commit_group()
        b.cp_wait_group(0)  # the first trip's wait also covers K and V
        b.barrier()
        st = b.mma(smem["K"], smem["Q"], b.fill(0.0, register_tile([bn, bm]), "st_zero"), "st", transpose_b=True)
        dscore = None
        if mods is not None:  # S^T from the modified scores, as the forward computed them
            st = b.scale(st, c.scale, "st_scaled")
            ctx = ScoreContext(b, bn, bm, q0, k0, batch, head, {a.name: v[a.name] for a in mods.arrays},
                               keys_on_rows=True)
            if mods.score_mod is not None:
                st = apply_score_mod(ctx, mods.score_mod, st)
                derivative = score_derivative(mods.score_mod)
                dscore, unbounded = ctx.emit(derivative.result), may_be_unbounded(derivative)
            if mods.mask_mod is not None and masked:
                st = apply_mask_mod(ctx, mods.mask_mod, st)
        if masked or c.causal:  # (a full block of the lists is masked by the built-in causal mask all the same)
            if c.causal:  # a key past seq_k is past every query's diagonal too (q < seq_q): one mask does both
                # (the diagonal added on the query side, per trip, from q0: k0 - (seq_k - seq_q) or seq_k - seq_q
                # would hold a register across the loops)
                diagonal = b.subi(b.addi(q0, seq_k, "q0_plus_seq_k"), seq_q, "q0_diagonal")
                keys = b.emit(tile.IotaOp("rows", register_tile([bn], i32), k0), "key")
                queries = b.emit(tile.IotaOp("cols", register_tile([1, bm], i32), diagonal), "query_diagonal")
                visible = b.emit(tile.CmpOp("le", keys, queries), "visible")
            else:
                visible = keys_inside
            st = b.emit(tile.SelectOp(visible, st, minus_inf), "st_masked")
        lse2 = b.load_broadcast(smem["LSE2"], bn, "lse2")
        st_log2 = b.fma(st, score_scale, b.emit(tile.NegOp(lse2), "neg_lse2"), "st_log2")
        pt = b.emit(tile.Exp2Op(st_log2), "pt")
        # Where a modifier's tiles are computed (a score_mod, or a partial block's mask_mod), P^T and dS^T are the
        # A operands of dV += P^T dO and dK += dS^T Q from shared memory (K-major, as stored), not registers:
        # their rounded tiles are then never live in registers (each is rounded a slab at a time as it is
        # stored), which leaves room for the modifier's. A full block's trip is the dense kernel's.
        pt_plain = pt
        shared_p = mods is not None and (masked or dscore is not None)
        if shared_p:
            b.emit(tile.StoreSharedOp(b.cast(pt, elt, "pt_half"), smem["P"]))
            if dscore is not None:
                # dS^T = P^T (dP^T - dPsum) d score_mod / d score: the derivative folded into P^T before the dP^T
                # mma, so that one [BN, BM] tile lives across it
                scored = b.binary(tile.MulOp, pt, dscore, "pt_dscore")
                pt = finite_or_zero(b, scored) if unbounded else scored
        # dP^T - dPsum in one product: the accumulator starts at -dPsum (down each column), so that dPsum is
        # never held beside P^T and dP^T (16 registers a thread, which the warp-specialized consumers lack)
        dpsum = b.load_broadcast(smem["dPsum"], bn, "dpsum")
        # (-1 x dPsum: one multiplication per accumulator register, which the accumulator's initial values cost anyway)
        neg_dpsum = b.scale(dpsum, -1.0, "neg_dpsum")
        dpt = b.mma(smem["V"], smem["dO"], neg_dpsum, "dpt_minus_dpsum", transpose_b=True)
        dst = b.binary(tile.MulOp, pt, dpt, "dst")
        dst_mod = captured_gradient_scores(b, mods, pt_plain, dpt)
        if not shared_p:
            pt_half = b.cast(pt, elt, "pt_half")
            dst_half = b.cast(dst, elt, "dst_half")
            b.emit(tile.StoreSharedOp(dst_half, smem["dS"]))
            dv = b.mma(pt_half, smem["dO"], dv, "dv_next")                                # P^T dO
            dk = b.mma(dst_half, smem["Q"], dk, "dk_next")                                # dS^T Q
            b.barrier()  # dS^T published to every warp
        else:
            b.emit(tile.StoreSharedOp(b.cast(dst, elt, "dst_half"), smem["dS"]))
            if dst_mod is not None:
                add_captured_gradients(ctx, mods, dst_mod, v)
            b.barrier()  # P^T and dS^T published to every warp
            dv = b.mma(smem["P"], smem["dO"], dv, "dv_next")                              # P^T dO
            dk = b.mma(smem["dS"], smem["Q"], dk, "dk_next")                              # dS^T Q
        dqt = b.mma(smem["K"], smem["dS"], b.fill(0.0, register_tile([d, bm]), "dqt_zero"), "dqt_part",
                    transpose_a=True)                                                     # K^T dS^T
        dq_window = b.view(v["dQaccum"], [batch, head, q0, zero], [bm, d], "dqaccum_window", in_bounds=True)
        if cfg.deterministic:
            sem = b.view(v["dQsemaphore"], [batch, head, m], [1], "sem_window")
            b.emit(tile.SemWaitOp(sem, n_block if rank is None else rank))
            b.emit(tile.AtomicAddOp(dqt, dq_window, transpose=True))
            b.emit(tile.SemSignalOp(sem))
        else:
            b.emit(tile.AtomicAddOp(dqt, dq_window, transpose=True))
        b.barrier()  # every warp has read Q, dO and dS^T before the next trip overwrites them
        return [dk, dv]

    dk, dv = visit_query_blocks(cfg, f, mods, b.fill(0.0, register_tile([bn, d]), "acc_zero"), query_block)
    return finish_main(cfg, f, dk, dv)
