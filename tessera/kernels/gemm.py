"""The GEMM kernel: C = alpha op(A) op(B) + beta C_in + bias, with A, B in bf16 or f16 and C in f32.

op(X) is X or X^T: with `transpose_a` the A argument holds A^T ([K, M], "column-major A"), with `transpose_b`
the B argument holds B^T ([N, K]); the four layouts NN, NT, TN, TT (A's letter first) reach the tensor core
through its descriptors' transpose bits, never through a copy. `beta` != 0 adds an f32 input C_in [M, N],
`bias` an f32 input [N] added to every row, `batch` a leading dimension to every tensor (one GEMM per index,
the grid's z axis).

The output is f32, the tensor core's accumulator type: the kernel stores its result as it is, and a caller
that wants bf16/f16 rounds once, outside (one rounding, no epilogue choice baked into the kernel).

Which sizes it may assume (`aligned`):
- None (the default): any M, N, K >= 1, and the fast path where the sizes allow it: the kernel asks to be
  specialized (`tile.specialize`, see `tessera.kernel_abi`) on the innermost sizes of A and B being multiples
  of 8 elements. A launch that sees the sizes (`tessera.interpret` at "target" or "ptx") compiles, for 16-byte
  rows, the variant that reads A and B with TMA, pipelined and warp-specialized, and for other sizes the one
  that reads them with per-element ld.global (see convert-tile-to-sm90), whose K loop pipeline-loops leaves
  single-stage (ring stages are filled by bulk copies only). Compiled without sizes (`tessera.compile`,
  tessera-opt) it is the TMA variant, whose launches refuse other sizes by name.
- True: the kernel promises (`tile.divisible`) those multiples of 8, so it always compiles to the TMA path; a
  launch with other sizes is refused by name.
- False: any sizes, never specialized (always the ld.global path).
`tessera.runtime.gemm.gemm` picks True or False for the arrays it is given (their addresses count too).

Thread block (x, y, z) of the grid (ceildiv(M, BM), ceildiv(N, BN)[, batch]) computes C[z, x*BM : x*BM + BM,
y*BN : y*BN + BN]. Any M, N and K >= 1 work: copies of partial tiles fill zeros (which add nothing to the
products) and the bounded store drops rows and columns past M and N.
"""

from __future__ import annotations

import math
import numbers

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr, FloatAttr, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.dialects.tile_types import element_byte_width
from tessera.kernel_abi import DIVISIBLE_ATTR, MAX_STAGES, SPECIALIZE_ATTR, STAGES_ATTR
from tessera.kernels.common import (
    ArgSpec,
    TileBuilder,
    apply_cluster,
    ceildiv_dim,
    check_block,
    check_cluster,
    check_dtype,
    check_flag,
    f32,
    finish_kernel,
    global_tensor,
    kernel_function,
    register_tile,
    shared_tile,
)
from tessera.sm90 import facts


GEMM_SCHEDULES = {
    "128x128": {},
    "128x256": dict(block_n=256, stages=4),
    "128x256-cluster2": dict(block_n=256, stages=4, cluster=(2, 1)),
    "128x256-pingpong": dict(block_n=256, stages=4, pingpong=True),
    "128x256-cluster2-pingpong": dict(block_n=256, stages=4, cluster=(2, 1), pingpong=True),
}
"""The tile schedules `tessera.runtime.gemm` offers: `gemm` keyword arguments, and `pingpong` for the pass
pipeline (`passes.PINGPONG_PIPELINE` where True). "128x128" (the default, the one measured on an H200): 128 x 128
x 64 tiles, the pipeline's two stages. "128x256": CUTLASS's cooperative Hopper tile, 128 x 256 x 64, each
consumer warpgroup a 64 x 256 slab (m64n256k16 wgmma), four stages (4 x 48 KiB of shared memory): half the
shared-memory and L2 bytes per FLOP of B, twice the tensor-core work per k-step's barrier round
(docs/performance.md, "GEMM"). "-cluster2": in 2 x 1 clusters, each B copy multicast to the two M-blocks of a
cluster (CUTLASS's 2x1 cluster). "-pingpong": the two consumer warpgroups issue their k-step's wgmmas in turn,
so that one's wait for its wgmmas overlaps the other's instead of both draining the tensor core at once."""
DEFAULT_GEMM_SCHEDULE = "128x128"


def check_schedule(schedule: object) -> tuple[dict, bool]:
    """(the builder keyword arguments, whether the consumers ping-pong) of a `GEMM_SCHEDULES` name; ValueError
    naming the known ones otherwise."""
    if not isinstance(schedule, str) or schedule not in GEMM_SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(map(repr, GEMM_SCHEDULES))}; got {schedule!r}")
    options = dict(GEMM_SCHEDULES[schedule])
    return options, options.pop("pingpong", False)


def check_factor(name: str, value: object) -> float:
    """alpha or beta: a finite real number (a Python or NumPy one, such as `np.float32(0.5)`, never a bool) within
    f32's range (ValueError otherwise)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number; got {value!r}")
    if abs(float(value)) > 3.4e38:
        raise ValueError(f"{name} must fit in f32; got {value!r}")
    return float(value)


def gemm_name(dtype: str, transpose_a: bool = False, transpose_b: bool = False, batch: bool = False,
              bias: bool = False, beta: float = 0.0, alpha: float = 1.0, aligned: bool = True) -> str:
    """The kernel's symbol: `gemm_{dtype}` for plain NN, then `_tn`/`_nt`/`_tt`, `_any` (any sizes),
    `_batched`, `_bias` and `_scaled` (alpha != 1 or beta != 0) for what it adds."""
    layout = "".join("t" if t else "n" for t in (transpose_a, transpose_b))
    parts = [f"gemm_{dtype}"] + ([layout] if layout != "nn" else [])
    parts += ["any"] * (not aligned) + ["batched"] * batch + ["bias"] * bias + ["scaled"] * (alpha != 1 or beta != 0)
    return "_".join(parts)


def gemm(dtype: str = "bf16", block_m: int = 128, block_n: int = 128, block_k: int = 64, *,
         transpose_a: bool = False, transpose_b: bool = False, alpha: float = 1.0, beta: float = 0.0,
         bias: bool = False, batch: bool = False, aligned: bool | None = None, cluster: tuple[int, int] = (1, 1),
         stages: int | None = None) -> ModuleOp:
    """The GEMM kernel (module docstring). Defaults: 128x128 output tiles (one f32 accumulator of 64 KiB over
    the block) and BK = 64, so a bf16/f16 K-major tile row is exactly one 128-byte swizzle span; A and B
    tiles take 16 + 16 KiB of shared memory per stage. Arguments: A, B, then C_in when beta != 0, then bias
    when `bias`, then the output C.

    `cluster=(X, Y)` groups X M-blocks by Y N-blocks into a cluster: (2, 1) shares each B copy between the two
    blocks of a cluster (CUTLASS's 2x1 cluster: on sm_90a, a TMA multicast), (1, 2) each A copy; a shape under
    which no copy is shared is refused by name.

    `stages` (1 to 4) asks `pipeline-loops` for that many ring stages for the K loop (`tile.stages` on the loop,
    see `tessera.kernel_abi.STAGES_ATTR`); None takes the pipeline's own (two in the default pipeline). It is the
    TMA variant's: `aligned=False` refuses it, and the ld.global variant of `aligned=None` stays single-stage.
    `GEMM_SCHEDULES` names the combinations the runtime offers."""
    elt = check_dtype(dtype)
    shape = check_cluster("cluster", cluster, 2)
    bm, bn, bk = (check_block(n, v) for n, v in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)))
    transpose_a, transpose_b, bias, batch = (check_flag(n, v) for n, v in (
        ("transpose_a", transpose_a), ("transpose_b", transpose_b), ("bias", bias), ("batch", batch)))
    if aligned is not None:
        aligned = check_flag("aligned", aligned)
    alpha, beta = check_factor("alpha", alpha), check_factor("beta", beta)
    if stages is not None and (isinstance(stages, bool) or not isinstance(stages, int) or not 1 <= stages <= MAX_STAGES):
        raise ValueError(f"stages must be None or an integer from 1 to {MAX_STAGES}; got {stages!r}")
    if stages is not None and aligned is False:
        raise ValueError("stages needs the TMA kernel (aligned=True or None): with aligned=False the K loop reads "
                         "A and B with ld.global and stays single-stage")
    lead = ["batch"] if batch else []

    def matrix(element, rows: str, cols: str) -> tuple:
        return global_tensor([None] * (len(lead) + 2), element), lead + [rows, cols]

    args = [
        ArgSpec("A", *matrix(elt, *(("K", "M") if transpose_a else ("M", "K")))),
        ArgSpec("B", *matrix(elt, *(("N", "K") if transpose_b else ("K", "N")))),
    ]
    if beta != 0:
        args.append(ArgSpec("C_in", *matrix(f32, "M", "N")))
    if bias:
        args.append(ArgSpec("bias", global_tensor([None], f32), ["N"]))
    args.append(ArgSpec("C", *matrix(f32, "M", "N"), role="out"))
    info = {"kind": StringAttr("gemm")}
    for key, on in (("transpose_a", transpose_a), ("transpose_b", transpose_b), ("bias", bias)):
        if on:
            info[key] = IntegerAttr(1, 1)
    for key, value, default in (("alpha", alpha, 1.0), ("beta", beta, 0.0)):
        if value != default:
            info[key] = FloatAttr(value, f32)
    grid = [ceildiv_dim("M", bm), ceildiv_dim("N", bn)] + lead
    name = gemm_name(dtype, transpose_a, transpose_b, batch, bias, beta, alpha, aligned is not False)
    fn, b = kernel_function(name, args, info, grid)
    if aligned is not False:  # the innermost sizes of A and B: 16-byte rows, promised or specialized on
        multiple = facts.TENSOR_MAP_GLOBAL_ALIGNMENT // element_byte_width(elt)
        inner = sorted({args[0].dims[-1], args[1].dims[-1]})
        key = DIVISIBLE_ATTR if aligned else SPECIALIZE_ATTR
        fn.attributes[key] = DictionaryAttr({d: IntegerAttr(multiple, 64) for d in inner})
    values = dict(zip([a.name for a in args], fn.body.blocks.first.args))
    a_arg, b_arg = values["A"], values["B"]

    m0 = b.muli(b.program_id("x", "m_block"), b.const(bm), "m0")
    n0 = b.muli(b.program_id("y", "n_block"), b.const(bn), "n0")
    index = [b.program_id("z", "batch_index")] if batch else []
    k_size = b.dim(a_arg, len(lead) + (0 if transpose_a else 1), "k_size")
    n_k = b.ceildivui(k_size, b.const(bk), "n_k")
    a_smem = b.alloc_shared(shared_tile([bk, bm] if transpose_a else [bm, bk], elt), "a_smem")
    b_smem = b.alloc_shared(shared_tile([bn, bk] if transpose_b else [bk, bn], elt), "b_smem")

    def k_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        (acc,) = carried
        k0 = b.muli(j, b.const(bk), "k0")
        a_corner, a_shape = ([k0, m0], [bk, bm]) if transpose_a else ([m0, k0], [bm, bk])
        b_corner, b_shape = ([n0, k0], [bn, bk]) if transpose_b else ([k0, n0], [bk, bn])
        b.cp_async(b.view(a_arg, index + a_corner, a_shape, "a_window"), a_smem)
        b.cp_async(b.view(b_arg, index + b_corner, b_shape, "b_window"), b_smem)
        b.cp_commit_group()
        b.cp_wait_group(0)
        b.barrier()
        acc_new = b.mma(a_smem, b_smem, acc, "acc_next", transpose_b=transpose_b, transpose_a=transpose_a)
        b.barrier()  # A and B are read before the next step's copies overwrite them
        return [acc_new]

    acc_init = b.fill(0.0, register_tile([bm, bn]), "acc_init")
    (acc,) = b.for_loop(n_k, [acc_init], ["acc"], k_step)
    if stages is not None:
        acc.owner.attributes[STAGES_ATTR] = IntegerAttr(stages, 64)
    out = b.scale(acc, alpha, "scaled") if alpha != 1 else acc
    # The bias first: C_in's addresses are the store's, so from C_in's load on they stay live (register
    # pressure: the accumulator, C_in and those offsets are 3 x 64 registers per thread at 128 x 128).
    if bias:
        row = b.load_broadcast(b.view(values["bias"], [n0], [bn], "bias_window"), bm, "bias_rows")
        out = b.binary(tile.AddOp, out, row, "with_bias")
    if beta != 0:
        c_in = b.load(b.view(values["C_in"], index + [m0, n0], [bm, bn], "c_in_window"), "c_in")
        c_in = b.scale(c_in, beta, "c_in_scaled") if beta != 1 else c_in
        out = b.binary(tile.AddOp, out, c_in, "with_c")
    b.store_global(out, b.view(values["C"], index + [m0, n0], [bm, bn], "c_window"))
    return apply_cluster(finish_kernel(fn, b), shape)
