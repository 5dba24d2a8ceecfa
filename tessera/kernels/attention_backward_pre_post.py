"""The backward's preprocess and postprocess kernels (`attention_backward`'s module docstring, steps 1 and 3):
dPsum, LSE2 and a zeroed dq_accum before the main kernel; dQ = dq_accum * scale after it.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp, i32
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels.attention_backward_config import BackwardConfig, head_dim_tensor, padded_rows, rows_tensor
from tessera.kernels.common import ArgSpec, ceildiv_dim, f32, finish_kernel, kernel_function, register_tile
from tessera.numerics import LOG2E


def build_preprocess(cfg: BackwardConfig) -> ModuleOp:
    """dPsum = rowsum(dO * O) (f32), LSE2 = LSE * log2 e (+inf where LSE = -inf, and on the padded rows past
    seq_q), dq_accum = 0, one [BM] query block per thread block."""
    c = cfg.attention
    half, half_dims = head_dim_tensor(c, "heads", "seq_q")
    acc, acc_dims = head_dim_tensor(c, "heads", padded_rows(c), f32)
    rows, rows_dims = rows_tensor()
    padded, padded_dims = rows_tensor(padded_rows(c))
    args = [
        ArgSpec("O", half, half_dims),
        ArgSpec("dO", half, half_dims),
        ArgSpec("LSE", rows, rows_dims),
        ArgSpec("dPsum", padded, padded_dims, role="out"),
        ArgSpec("LSE2", padded, padded_dims, role="out"),
        ArgSpec("dQaccum", acc, acc_dims, role="out"),
    ]
    grid = [ceildiv_dim("seq_q", c.block_m), "heads", "batch"]
    fn, b = kernel_function(cfg.kernel_name("preprocess"), args, cfg.kernel_info(), grid)
    v = dict(zip((a.name for a in args), fn.body.blocks.first.args))
    q0 = b.muli(b.program_id("x", "q_block"), b.const(c.block_m), "q0")
    head, batch = b.program_id("y", "head"), b.program_id("z", "batch")
    zero = b.const(0)

    def window(name: str, shape) -> SSAValue:
        indices = [batch, head, q0] + ([zero] if len(shape) == 2 else [])
        # the outputs' rows are padded to whole query blocks: every window lies inside
        return b.view(v[name], indices, shape, f"{name.lower()}_window", in_bounds=name in ("dPsum", "LSE2", "dQaccum"))

    bm, d = c.block_m, c.head_dim
    o = b.cast(b.load(window("O", [bm, d]), "o"), f32, "o_f32")
    do = b.cast(b.load(window("dO", [bm, d]), "do"), f32, "do_f32")
    b.store_global(b.unary(tile.RowSumOp, b.binary(tile.MulOp, do, o, "do_o"), "dpsum"), window("dPsum", [bm]))
    lse = b.load(window("LSE", [bm]), "lse")
    # a row that sees no key (LSE = -inf) gets LSE2 = +inf: exp2(s - LSE2) = 0 for every score s, -inf included
    # (exp2(-inf - -inf) would be NaN), whichever way the main kernel subtracts it
    sees_none = b.emit(tile.CmpOp("eq", lse, b.fill(float("-inf"), register_tile([bm]), "minus_inf")), "sees_none")
    plus_inf = b.fill(float("inf"), register_tile([bm]), "plus_inf")
    lse2 = b.emit(tile.SelectOp(sees_none, plus_inf, b.scale(lse, LOG2E, "lse_log2")), "lse2_seen")
    # and so does a padded row past seq_q (its LSE reads 0): the main kernel's P there is 0, not exp2 of a score a
    # score_mod may have made large (a bias slopes[h] * (kv_idx - q_idx) past the last query: exp2 overflows to
    # inf, and inf * (dP - dPsum) = inf * 0 = NaN in dK and dV)
    rows = b.emit(tile.IotaOp("rows", register_tile([bm], i32), q0), "row")
    past_end = b.emit(tile.CmpOp("ge", rows, b.emit(tile.SplatOp(b.dim(v["O"], 2, "seq_q"), register_tile([bm], i32)),
                                                     "seq_q_rows")), "past_end")
    lse2 = b.emit(tile.SelectOp(past_end, plus_inf, lse2), "lse2")
    b.store_global(lse2, window("LSE2", [bm]))
    b.store_global(b.fill(0.0, register_tile([bm, d]), "dq_zero"), window("dQaccum", [bm, d]))
    return finish_kernel(fn, b)


def build_postprocess(cfg: BackwardConfig) -> ModuleOp:
    """dQ = dq_accum * scale, rounded to the element type. seq_q is a launch size (`tessera.kernel_abi`):
    dq_accum's padded rows (`padded_rows`) do not give it."""
    c = cfg.attention
    acc, acc_dims = head_dim_tensor(c, "heads", padded_rows(c), f32)
    half, half_dims = head_dim_tensor(c, "heads", "seq_q")
    args = [ArgSpec("dQaccum", acc, acc_dims), ArgSpec("dQ", half, half_dims, role="out")]
    grid = [ceildiv_dim("seq_q", c.block_m), "heads", "batch"]
    fn, b = kernel_function(cfg.kernel_name("postprocess"), args, cfg.kernel_info(), grid, launch_sizes=["seq_q"])
    v = dict(zip((a.name for a in args), fn.body.blocks.first.args))
    q0 = b.muli(b.program_id("x", "q_block"), b.const(c.block_m), "q0")
    head, batch = b.program_id("y", "head"), b.program_id("z", "batch")
    shape = [c.block_m, c.head_dim]
    indices = [batch, head, q0, b.const(0)]
    dq = b.scale(b.load(b.view(v["dQaccum"], indices, shape, "dqaccum_window", in_bounds=True), "dq_accum"), c.scale,
                 "dq_scaled")
    b.store_global(b.cast(dq, c.element_type, "dq"), b.view(v["dQ"], indices, shape, "dq_window"))
    return finish_kernel(fn, b)
