"""The GEMM kernel: C = A x B for A [M, K] and B [K, N] in bf16 or f16, C [M, N] in f32.

The output is f32, the tensor core's accumulator type: the kernel stores its accumulator as it is, and a
caller that wants bf16/f16 rounds once, outside (one rounding, no epilogue choice baked into the kernel).

Thread block (x, y) of the grid (ceildiv(M, BM), ceildiv(N, BN)) computes C[x*BM : x*BM + BM,
y*BN : y*BN + BN]. Any M, N and K work: copies of partial tiles fill zeros (which add nothing to the
products) and the bounded store drops rows and columns past M and N.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import SSAValue

from tessera.kernels.common import (
    ArgSpec,
    TileBuilder,
    ceildiv_dim,
    check_block,
    check_dtype,
    f32,
    finish_kernel,
    global_tensor,
    kernel_function,
    register_tile,
    shared_tile,
)


def gemm(dtype: str = "bf16", block_m: int = 128, block_n: int = 128, block_k: int = 64) -> ModuleOp:
    """The GEMM kernel `gemm_{dtype}`. Defaults: 128x128 output tiles (one f32 accumulator of 64 KiB over
    the block) and BK = 64, so a bf16/f16 A tile row is exactly one 128-byte swizzle span; A and B tiles
    take 16 + 16 KiB of shared memory per stage."""
    elt = check_dtype(dtype)
    bm, bn, bk = (check_block(n, v) for n, v in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)))
    matrix = global_tensor([None, None], elt)
    args = [
        ArgSpec("A", matrix, ["M", "K"]),
        ArgSpec("B", matrix, ["K", "N"]),
        ArgSpec("C", global_tensor([None, None], f32), ["M", "N"], role="out"),
    ]
    grid = [ceildiv_dim("M", bm), ceildiv_dim("N", bn)]
    fn, b = kernel_function(f"gemm_{dtype}", args, {"kind": StringAttr("gemm")}, grid)
    a_arg, b_arg, c_arg = fn.body.blocks.first.args

    m0 = b.muli(b.program_id("x", "m_block"), b.const(bm), "m0")
    n0 = b.muli(b.program_id("y", "n_block"), b.const(bn), "n0")
    n_k = b.ceildivui(b.dim(a_arg, 1, "k_size"), b.const(bk), "n_k")
    a_smem = b.alloc_shared(shared_tile([bm, bk], elt), "a_smem")
    b_smem = b.alloc_shared(shared_tile([bk, bn], elt), "b_smem")

    def k_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        (acc,) = carried
        k0 = b.muli(j, b.const(bk), "k0")
        b.cp_async(b.view(a_arg, [m0, k0], [bm, bk], "a_window"), a_smem)
        b.cp_async(b.view(b_arg, [k0, n0], [bk, bn], "b_window"), b_smem)
        b.cp_commit_group()
        b.cp_wait_group(0)
        b.barrier()
        acc_new = b.mma(a_smem, b_smem, acc, "acc_next")
        b.barrier()  # A and B are read before the next step's copies overwrite them
        return [acc_new]

    acc_init = b.fill(0.0, register_tile([bm, bn]), "acc_init")
    (acc,) = b.for_loop(n_k, [acc_init], ["acc"], k_step)
    b.store_global(acc, b.view(c_arg, [m0, n0], [bm, bn], "c_window"))
    return finish_kernel(fn, b)
