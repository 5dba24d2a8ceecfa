"""What the backward's two main kernels share (`attention_backward`'s module docstring, step 2): the frame
(arguments, grid, coordinates, K and V copied into shared memory, the query blocks a key block visits), the walk
over those query blocks (the GQA group, causal start, or the block lists), the finite guard of a score_mod's
derivative, and the end (dK scaled, dK and dV stored). The two layouts are `attention_backward_query_rows`
(queries on the rows) and `attention_backward_key_rows` (keys on the rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, ModuleOp, StringAttr
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels.attention_backward_config import BackwardConfig, head_dim_tensor, padded_rows, rows_tensor
from tessera.kernels.attention_mods import AttentionMods
from tessera.kernels.common import (
    ArgSpec,
    TileBuilder,
    ceildiv_dim,
    f32,
    finish_kernel,
    global_tensor,
    kernel_function,
    register_tile,
    shared_tile,
)
from tessera.variants.block_mask import VISIT_HEAD
from tessera.variants.derivative import captured_derivatives, may_be_unbounded
from tessera.variants.trace import Trace


@dataclass
class MainFrame:
    """What both main-kernel builders share: the kernel, its builder and arguments, the block's coordinates, its
    shared tiles (K and V copied in, one commit group), and the query blocks it visits (`trips` from `m_start`)."""

    fn: object
    b: TileBuilder
    v: dict
    n_block: SSAValue
    head_k: SSAValue
    batch: SSAValue
    zero: SSAValue
    seq_q: SSAValue
    seq_k: SSAValue
    group: SSAValue
    k0: SSAValue
    smem: dict
    m_start: SSAValue
    trips: SSAValue
    d0: SSAValue
    """The first head_dim column this thread block accumulates (0 unless the kernel splits head_dim)."""
    dh: int
    """The head_dim columns it accumulates (head_dim / head_split)."""


def main_frame(cfg: BackwardConfig, mods: AttentionMods | None, shared: dict, head_split: int = 1) -> MainFrame:
    """The main kernel's arguments (with `mods`' captured arrays after dPsum), grid, coordinates, the shared tiles
    `shared` (name -> shape; K and V copied in, and with `head_split` > 1 this block's slice of K, "Kh") and its
    query-block range. `head_split` > 1: that many thread blocks per key block (program id x = key block *
    head_split + the slice of head_dim)."""
    c = cfg.attention
    elt, d, bm, bn = c.element_type, c.head_dim, c.block_m, c.block_n
    q_t, q_dims = head_dim_tensor(c, "heads", "seq_q")
    k_t, k_dims = head_dim_tensor(c, "heads_k", "seq_k")
    acc, acc_dims = head_dim_tensor(c, "heads", padded_rows(c), f32)
    rows, rows_dims = rows_tensor(padded_rows(c))
    args = [
        ArgSpec("Q", q_t, q_dims),
        ArgSpec("K", k_t, k_dims),
        ArgSpec("V", k_t, k_dims),
        ArgSpec("dO", q_t, q_dims),
        ArgSpec("LSE2", rows, rows_dims),
        ArgSpec("dPsum", rows, rows_dims),
        *(mods.inputs(c, backward=True, ranks=cfg.deterministic) if mods is not None else []),
        ArgSpec("dQaccum", acc, acc_dims, role="out"),
        ArgSpec("dK", k_t, k_dims, role="out"),
        ArgSpec("dV", k_t, k_dims, role="out"),
        *(captured_gradient_outputs(mods) if mods is not None else []),
    ]
    if cfg.deterministic:
        sem = global_tensor([None, None, None], IntegerType(32))
        args.append(ArgSpec("dQsemaphore", sem, ["batch", "heads", ceildiv_dim("seq_q", bm)], role="scratch"))
    grid = [tile.DimExprAttr("seq_k", bn, head_split), "heads_k", "batch"]
    info = cfg.kernel_info() if mods is None else {"kind": StringAttr("custom")}
    name = cfg.kernel_name("main") + (f"_head_split{head_split}" if head_split > 1 else "")
    fn, b = kernel_function(name, args, info, grid)
    v = dict(zip((a.name for a in args), fn.body.blocks.first.args))

    head_k = b.program_id("y", "head_k")
    batch = b.program_id("z", "batch")
    zero = b.const(0)
    dh = d // head_split
    if head_split == 1:
        n_block, d0 = b.program_id("x", "k_block"), zero
    else:  # program id x = key block * head_split + the slice of head_dim
        part = b.program_id("x", "k_block_part")
        n_block = b.emit(arith.DivUIOp(part, b.const(head_split)), "k_block")
        d0 = b.muli(b.emit(arith.RemUIOp(part, b.const(head_split)), "d_slice"), b.const(dh), "d0")
    seq_q, seq_k = b.dim(v["Q"], 2, "seq_q"), b.dim(v["K"], 2, "seq_k")
    group = b.emit(arith.DivUIOp(b.dim(v["Q"], 1, "heads"), b.dim(v["K"], 1, "heads_k")), "group")
    k0 = b.muli(n_block, b.const(bn), "k0")

    smem = {name: b.alloc_shared(shared_tile(shape, elt), f"{name.lower()}_smem") for name, shape in shared.items()}
    for name in ("K", "V"):
        b.cp_async(b.view(v[name], [batch, head_k, k0, zero], [bn, d], f"{name.lower()}_window"), smem[name])
    if head_split > 1:
        b.cp_async(b.view(v["K"], [batch, head_k, k0, d0], [bn, dh], "kh_window"), smem["Kh"])
    b.cp_commit_group()

    # The query blocks that see this key block: from m_start (causal: the first block with a row that sees
    # key k0) to the last; none when m_start is past the end.
    n_q = b.ceildivui(seq_q, b.const(bm), "n_q")
    m_start = zero
    if c.causal:
        first_row = b.maxsi(b.subi(b.addi(k0, seq_q, "k0_plus_seq_q"), seq_k, "first_row_signed"), zero, "first_row")
        m_start = b.emit(arith.DivUIOp(first_row, b.const(bm)), "m_start")
    trips = b.maxsi(b.subi(n_q, m_start, "q_blocks_signed"), zero, "q_blocks")
    return MainFrame(fn, b, v, n_block, head_k, batch, zero, seq_q, seq_k, group, k0, smem, m_start, trips, d0, dh)


def finish_main(cfg: BackwardConfig, f: MainFrame, dk: SSAValue, dv: SSAValue) -> ModuleOp:
    """After the loops: dK scaled, dK and dV rounded and stored."""
    c, b = cfg.attention, f.b
    b.cp_wait_group(0)  # the K and V copy, had no query block seen this key block
    dk = b.scale(dk, c.scale, "dk_scaled")
    for name, value in (("dK", dk), ("dV", dv)):
        window = b.view(f.v[name], [f.batch, f.head_k, f.k0, f.d0], [c.block_n, f.dh], f"{name.lower()}_window")
        b.store_global(b.cast(value, c.element_type, f"{name.lower()}_half"), window)
    return finish_kernel(f.fn, b)


def captured_gradient_outputs(mods: AttentionMods) -> list[ArgSpec]:
    """The outputs `d_<name>` (f32, the array's shape, zeroed by the launch) of the captured arrays whose
    gradient the main kernel adds into (`AttentionMods.grads`), in that order."""
    arrays = {a.name: a for a in mods.arrays}
    return [ArgSpec(f"d_{name}", global_tensor(list(arrays[name].array.shape), f32), list(arrays[name].array.shape),
                    role="out") for name in mods.grads]


def captured_gradient_scores(b, mods: AttentionMods | None, p: SSAValue, dp: SSAValue) -> SSAValue | None:
    """dS_mod = P (dP - dPsum), the loss's gradient with respect to the modified score, where the kernel adds
    captured arrays' gradients (`AttentionMods.grads`), else None; `p` is P before the score_mod's derivative
    is folded in."""
    if mods is None or not mods.grads:
        return None
    return b.binary(tile.MulOp, p, dp, "ds_mod")


def add_captured_gradients(ctx, mods: AttentionMods | None, ds_mod: SSAValue | None, v: dict,
                           d0: SSAValue | None = None) -> None:
    """For each gather of an array in `mods.grads` (`captured_derivatives`), d_<array>[indices] += dS_mod
    d score_mod / d (the value read), per element of the score tile (`tile.scatter_add`, atomic). `ds_mod`
    (`captured_gradient_scores`) is in `ctx`'s layout (S or S^T); a hidden or padded score has P = 0 and adds 0
    (the finite guard keeps an infinite derivative there from making it NaN), and an index outside the array adds
    nothing. Emitted after dS's store, so that P and dP are dead and one tile, dS_mod, is live beside the
    accumulators.

    `d0` (a head-split kernel's first head_dim column, `MainFrame.d0`): every thread block of a key block holds
    the whole dS_mod (S and dP take the whole head_dim), so only the one with d0 = 0 adds; the others' scatters
    are pushed outside the array (`split_scatter_index`), which `tile.scatter_add` drops, so each score's
    gradient is added once."""
    if ds_mod is None:
        return
    b = ctx.b
    for g in captured_derivatives(mods.score_mod, list(mods.grads), mods.mask_mod):
        if g.derivative.op == "const" and float(g.derivative.value) == 0.0:
            continue  # no gradient flows through this read (a condition's operand): it adds 0
        contribution = ds_mod
        if not (g.derivative.op == "const" and float(g.derivative.value) == 1.0):
            contribution = b.binary(tile.MulOp, ds_mod, ctx.emit(g.derivative), "dcaptured")
            if may_be_unbounded(Trace(mods.score_mod.function, g.derivative)):
                contribution = finite_or_zero(b, contribution)
        indices = [ctx.emit(i) for i in g.indices]
        if d0 is not None:
            indices = split_scatter_index(b, indices, g.array.array.shape, d0)
        b.emit(tile.ScatterAddOp(contribution, v[f"d_{g.array.name}"], indices))


def split_scatter_index(b, indices: list[SSAValue], shape, d0: SSAValue) -> list[SSAValue]:
    """`indices` (a `tile.scatter_add`'s, into an array of `shape`) unchanged where `d0` is 0, else with one
    index raised to at least its dimension, outside the array: max(i, floor) with floor = -2^31 (no i32 is
    below it, so i itself) or the dimension (so every element is dropped, whatever i was). The index raised is
    the one of most elements (a [BM, BN] coordinate tile is computed beside its use, so the max is one instruction
    a register and holds nothing across other work; a row vector's raised copy is held beside dS_mod: 256
    registers of 255 for a relative table with ALiBi under a causal mask at head_dim 128)."""
    k = max(range(len(indices)), key=lambda j: math.prod(indices[j].type.get_shape()))
    first = b.emit(arith.CmpiOp(d0, b.const(0), "eq"), "first_split")
    floor = b.emit(arith.SelectOp(first, b.const(-2 ** 31), b.const(int(shape[k]))), "scatter_floor")
    raised = b.binary(tile.ElementMaxOp, indices[k],
                      b.emit(tile.SplatOp(floor, indices[k].type), "scatter_floor_tile"), "scatter_index")
    return [raised if j == k else index for j, index in enumerate(indices)]


def finite_or_zero(b, scored: SSAValue) -> SSAValue:
    """P d score_mod / d score where it is finite, else 0 (`derivative.may_be_unbounded`): the derivative of a
    padded or hidden score, where P is 0 (or a padded query row's P, whose dO and Q are 0), may be infinite,
    and 0 * inf would be NaN in dK and dQ. (At a finite score whose derivative is infinite, |x| ** 0.5 at 0,
    the gradient is then 0 there.)"""
    rows = scored.type.get_shape()[0]
    magnitude = b.emit(tile.AbsOp(scored), "p_dscore_abs")
    finite = b.emit(tile.CmpOp("lt", magnitude, b.fill(float("inf"), register_tile([rows]), "inf")), "p_dscore_finite")
    return b.emit(tile.SelectOp(finite, scored, b.fill(0.0, register_tile([rows]), "dscore_zero")), "p_dscore_seen")


def visit_query_blocks(cfg: BackwardConfig, f: MainFrame, mods: AttentionMods | None, acc_zero: SSAValue,
                        query_block) -> tuple[SSAValue, SSAValue]:
    """(dK, dV) after `query_block(b, m, (dk, dv), head, masked=, rank=)` over the query blocks this key block
    visits, from `acc_zero`: with the block lists (`mods.block_sparse`), its full pairs (`masked=False`) then its
    partial ones; else, for each head of the GQA group, the query blocks from `m_start`."""
    b, v, c = f.b, f.v, cfg.attention
    if mods is not None and mods.block_sparse:
        # The work lists (`BlockMask.backward_inputs`): this thread block's full (head, query block) pairs, then
        # its partial ones, each one loop whose trip count is read from the lists (over the GQA group's heads
        # together): two loops refilling the same Q and dO tiles, which pipeline-loops gives one ring.
        coords = [f.batch, f.head_k, f.n_block]
        full = b.emit(tile.LoadIndexOp(v["Q_NUM_VISITS"], [*coords, f.zero]), "full_visits")
        partial = b.emit(tile.LoadIndexOp(v["Q_NUM_VISITS"], [*coords, b.const(1)]), "partial_visits")
        carried = [acc_zero, acc_zero]
        for count, first, masked in ((full, None, False), (partial, full, True)):
            def listed(b: TileBuilder, t: SSAValue, inner, first=first, masked=masked) -> list[SSAValue]:
                i = t if first is None else b.addi(first, t, "visit")
                visit = b.emit(tile.LoadIndexOp(v["Q_VISITS"], [*coords, i]), "packed_visit")
                head = b.emit(arith.DivUIOp(visit, b.const(VISIT_HEAD)), "head")
                m = b.emit(arith.RemUIOp(visit, b.const(VISIT_HEAD)), "m")
                rank = b.emit(tile.LoadIndexOp(v["Q_VISIT_RANKS"], [*coords, i]), "rank") if cfg.deterministic else None
                return query_block(b, m, inner, head, masked=masked, rank=rank)
            carried = list(b.for_loop(count, carried, ["dk", "dv"], listed, iv_name="t"))
        return carried[0], carried[1]

    def group_head(b: TileBuilder, g: SSAValue, carried) -> list[SSAValue]:
        head = b.addi(b.muli(f.head_k, f.group, "group_first_head"), g, "head")

        def step(b: TileBuilder, t: SSAValue, inner) -> list[SSAValue]:
            return query_block(b, b.addi(f.m_start, t, "m") if c.causal else t, inner, head)
        return list(b.for_loop(f.trips, list(carried), ["dk", "dv"], step, iv_name="t"))

    dk, dv = b.for_loop(f.group, [acc_zero, acc_zero], ["dk", "dv"], group_head, iv_name="g")
    return dk, dv
