"""Attention kernels: the pieces every variant shares, and the online one-pass (flash) kernel.

Every attention kernel is launched over the grid (ceildiv(seq_q, BM), heads, batch): thread block
(x, y, z) computes the output rows [x*BM, x*BM + BM) of head y of batch entry z. Its arguments are

    %Q, %O : !tile.tile<?x?x?xDxT, global>  {tile.dims = #tile.dims<batch, heads, seq_q, D>}   (O: role "out")
    %K, %V : !tile.tile<?x?x?xDxT, global>  {tile.dims = #tile.dims<batch, heads, seq_k, D>}

then any scratch buffers a multi-pass variant needs (`attention_multipass`). Key blocks are BN keys wide; the
last one may be partial (its copy fills zeros and `tile.mask_bounds` hides those keys). With `causal`, the mask
is aligned bottom-right (`tile.mask_causal`), and key blocks entirely past the diagonal are not visited.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Attribute, SSAValue

from tessera.dialects import tile
from tessera.kernels.common import (
    ArgSpec,
    TileBuilder,
    apply_cluster,
    ceildiv_dim,
    check_block,
    check_choice,
    check_cluster,
    check_dtype,
    check_flag,
    check_scale,
    f32,
    finish_kernel,
    global_tensor,
    kernel_function,
    register_tile,
    shared_tile,
)

HEAD_DIMS = (64, 128, 256)
"""Head dimensions the attention builders support."""

DEFAULT_BLOCK_M = 128
"""Queries per thread block: two warpgroups' worth of 64-row wgmma tiles."""

DEFAULT_BLOCK_N = {64: 128, 128: 128, 256: 48}
"""Keys per inner-loop step by head_dim (see `AttentionConfig`)."""


@dataclass(frozen=True)
class AttentionConfig:
    """The checked parameters of an attention kernel.

    Defaults: BM = 128; BN = 128 for head_dim 64 and 128, 48 for head_dim 256. BM = BN = 128 is
    FlashAttention-3's Hopper tile for head_dim 128 (causal) and the BN it uses for head_dim 64; with bf16,
    Q + K + V in shared memory take 96 KiB at head_dim 128 (48 KiB at 64), which leaves room for a second K/V
    stage when the loop is pipelined, and the 128x128 f32 score tile is 64 registers per thread over two
    warpgroups. BN = 64 (FlashAttention-2's Ampere choice) halves the score tile but doubles the loop trips
    and the per-step softmax bookkeeping; on Hopper the register file affords 128.

    At head_dim 256 the [64, 256] f32 accumulator of each consumer warpgroup alone takes 128 registers per
    thread, so the key block shrinks (FlashAttention-3 uses 80): with BN = 48 the full pipeline's two score
    tiles in flight (overlap-softmax) fit the 240 registers a consumer warpgroup gets beside the producer
    (BN = 64 needs 252), and two-pass attention's shared memory fits 227 KiB (BN = 64 needs 257 KiB). A row
    of a 48-wide score tile spans 12 registers of a thread, not a power of two, which the row reductions
    handle. Any multiple of 16 may be asked for; the passes refuse what does not fit, by name.
    """

    head_dim: int
    causal: bool
    dtype: str
    scale: float
    block_m: int
    block_n: int

    @classmethod
    def checked(
        cls,
        head_dim: object,
        causal: object = False,
        dtype: object = "bf16",
        scale: object = None,
        block_m: object = DEFAULT_BLOCK_M,
        block_n: object = None,
    ) -> AttentionConfig:
        """Validate builder arguments; raises ValueError naming the argument, the value and what is allowed.
        `block_n=None` is the head_dim's default (`DEFAULT_BLOCK_N`)."""
        check_choice("head_dim", head_dim, HEAD_DIMS)
        if block_n is None:
            block_n = DEFAULT_BLOCK_N[head_dim]  # type: ignore[index]
        check_dtype(dtype)
        return cls(
            head_dim=head_dim,  # type: ignore[arg-type]
            causal=check_flag("causal", causal),
            dtype=dtype,  # type: ignore[arg-type]
            scale=check_scale(scale, head_dim),  # type: ignore[arg-type]
            block_m=check_block("block_m", block_m),
            block_n=check_block("block_n", block_n),
        )

    @property
    def element_type(self) -> Attribute:
        return check_dtype(self.dtype)

    def kernel_name(self, variant: str) -> str:
        """`flash_attention_d128_bf16_causal` and the like."""
        return f"{variant}_d{self.head_dim}_{self.dtype}" + ("_causal" if self.causal else "")

    def kernel_info(self) -> dict[str, Attribute]:
        return {
            "kind": StringAttr("attention"),
            "causal": IntegerAttr(int(self.causal), 1),
            "scale": FloatAttr(self.scale, f32),
        }


@dataclass
class AttentionBlock:
    """The values one thread block's code is written in terms of (set up by `attention_kernel`)."""

    config: AttentionConfig
    args: dict[str, SSAValue]
    batch: SSAValue
    head: SSAValue
    q0: SSAValue
    seq_q: SSAValue
    seq_k: SSAValue
    n_kv: SSAValue
    smem: dict[str, SSAValue] = field(default_factory=dict)

    def window(self, b: TileBuilder, tensor: str, row: SSAValue, col: SSAValue, shape: Sequence[int]) -> SSAValue:
        """The window of argument `tensor` (Q, K, V, O or a scratch buffer) at (batch, head, row, col)."""
        name = f"{tensor.lower()}_window"
        return b.view(self.args[tensor], [self.batch, self.head, row, col], shape, name)


def attention_kernel(
    config: AttentionConfig, variant: str, scratch: Sequence[ArgSpec] = ()
) -> tuple[func.FuncOp, TileBuilder, AttentionBlock]:
    """Start an attention kernel: signature, block coordinates, sizes, key-block count, shared tiles, and the
    asynchronous copy of this block's Q tile (one commit group; the first wait in the key loop covers it).

    Returns (func, builder, block)."""
    c = config
    elt, d = c.element_type, c.head_dim
    q_dims = ["batch", "heads", "seq_q", d]
    k_dims = ["batch", "heads", "seq_k", d]
    tensor = global_tensor([None, None, None, d], elt)
    args = [
        ArgSpec("Q", tensor, q_dims),
        ArgSpec("K", tensor, k_dims),
        ArgSpec("V", tensor, k_dims),
        ArgSpec("O", tensor, q_dims, role="out"),
        *scratch,
    ]
    grid = [ceildiv_dim("seq_q", c.block_m), "heads", "batch"]
    fn, b = kernel_function(c.kernel_name(variant), args, c.kernel_info(), grid)
    values = dict(zip((a.name for a in args), fn.body.blocks.first.args))

    q_block = b.program_id("x", "q_block")
    head = b.program_id("y", "head")
    batch = b.program_id("z", "batch")
    seq_q = b.dim(values["Q"], 2, "seq_q")
    seq_k = b.dim(values["K"], 2, "seq_k")
    q0 = b.muli(q_block, b.const(c.block_m), "q0")
    n_kv = key_block_count(b, c, q0, seq_q, seq_k)
    blk = AttentionBlock(c, values, batch, head, q0, seq_q, seq_k, n_kv)

    blk.smem["Q"] = b.alloc_shared(shared_tile([c.block_m, d], elt), "q_smem")
    blk.smem["K"] = b.alloc_shared(shared_tile([c.block_n, d], elt), "k_smem")
    blk.smem["V"] = b.alloc_shared(shared_tile([c.block_n, d], elt), "v_smem")
    b.cp_async(blk.window(b, "Q", q0, b.const(0), [c.block_m, d]), blk.smem["Q"])
    b.cp_commit_group()
    return fn, b, blk


def key_block_count(b: TileBuilder, c: AttentionConfig, q0: SSAValue, seq_q: SSAValue, seq_k: SSAValue) -> SSAValue:
    """ceildiv(seq_k, BN) key blocks; with `causal`, only those up to the diagonal of the block's last row:
    min(ceildiv(seq_k, BN), ceildiv(max(0, q0 + BM + seq_k - seq_q), BN)), in signed index arithmetic
    because q0 + BM + seq_k - seq_q is negative for query blocks that see no key."""
    bn = b.const(c.block_n)
    n_all = b.ceildivui(seq_k, bn, "n_kv_all" if c.causal else "n_kv")
    if not c.causal:
        return n_all
    end = b.addi(q0, b.const(c.block_m), "q_end")
    shifted = b.subi(b.addi(end, seq_k, "q_end_plus_seq_k"), seq_q, "visible_end")
    visible = b.maxsi(shifted, b.const(0), "visible_keys")
    return b.minsi(n_all, b.ceildivsi(visible, bn, "n_kv_causal"), "n_kv")


def load_key_block(b: TileBuilder, blk: AttentionBlock, k0: SSAValue, tensors: Sequence[str]) -> None:
    """Copy the key block at k0 of each of `tensors` (K and/or V) into its shared tile and make it visible:
    cp_async each, commit, wait for every group (this also covers the Q copy), barrier."""
    c = blk.config
    for name in tensors:
        b.cp_async(blk.window(b, name, k0, b.const(0), [c.block_n, c.head_dim]), blk.smem[name])
    b.cp_commit_group()
    b.cp_wait_group(0)
    b.barrier()


def apply_masks(b: TileBuilder, blk: AttentionBlock, s: SSAValue, k0: SSAValue) -> SSAValue:
    """-inf for keys past seq_k (always: the last key block may be partial) and, if causal, for keys after
    the bottom-right-aligned diagonal."""
    s = b.mask_bounds(s, k0, blk.seq_k, "s_masked" if not blk.config.causal else "s_in_bounds")
    if blk.config.causal:
        s = b.mask_causal(s, blk.q0, k0, blk.seq_q, blk.seq_k, "s_masked")
    return s


def masked_scores(b: TileBuilder, blk: AttentionBlock, k0: SSAValue) -> SSAValue:
    """S = mask(scale * Q K^T) for the key block at k0, from the shared Q and K tiles: [BM, BN] f32."""
    c = blk.config
    zero = b.fill(0.0, register_tile([c.block_m, c.block_n]), "s_zero")
    s = b.mma(blk.smem["Q"], blk.smem["K"], zero, "s", transpose_b=True)
    s = b.scale(s, c.scale, "s_scaled")
    return apply_masks(b, blk, s, k0)


def accumulate_pv(b: TileBuilder, blk: AttentionBlock, p: SSAValue, acc: SSAValue) -> SSAValue:
    """acc + cast(P) @ V from the shared V tile (P rounded to the kernel's element type for the tensor core)."""
    p_half = b.cast(p, blk.config.element_type, "p_half")
    return b.mma(p_half, blk.smem["V"], acc, "acc_next")


def store_output(b: TileBuilder, blk: AttentionBlock, o: SSAValue) -> None:
    """Round the normalised [BM, D] output tile to the element type and store it; rows past seq_q are
    dropped by the bounded store."""
    c = blk.config
    o_half = b.cast(o, c.element_type, "o_half")
    b.store_global(o_half, blk.window(b, "O", blk.q0, b.const(0), [c.block_m, c.head_dim]))


def flash_attention(
    head_dim: int = 128,
    causal: bool = False,
    dtype: str = "bf16",
    scale: float | None = None,
    block_m: int = DEFAULT_BLOCK_M,
    block_n: int | None = None,
    cluster: int = 1,
) -> ModuleOp:
    """The online one-pass attention kernel (FlashAttention-2 style), `flash_attention_d{D}_{dtype}[_causal]`.

    `cluster=N` groups N consecutive query blocks of a head into a cluster that shares its K and V copies
    (`tessera.passes.form_clusters`; on sm_90a, TMA multicast): not with `causal` (the members' key ranges
    differ), refused by name.

    Per key block j: S = mask(scale Q K_j^T); m' = max(m, rowmax S); alpha = exp(m - m'); P = exp(S - m');
    l' = alpha l + rowsum P; acc' = alpha acc + P V_j. After the loop O = acc / l. Live per block: the
    running max m [BM], sum l [BM] and accumulator acc [BM, D] (all f32), and one [BM, BN] score tile."""
    c = AttentionConfig.checked(head_dim, causal, dtype, scale, block_m, block_n)
    shape = check_cluster("cluster", cluster, 1)
    fn, b, blk = attention_kernel(c, "flash_attention")
    rows = register_tile([c.block_m])
    m_init = b.fill(float("-inf"), rows, "m_init")
    l_init = b.fill(0.0, rows, "l_init")
    acc_init = b.fill(0.0, register_tile([c.block_m, c.head_dim]), "acc_init")

    def key_step(b: TileBuilder, j: SSAValue, carried: tuple[SSAValue, ...]) -> list[SSAValue]:
        m, l, acc = carried
        k0 = b.muli(j, b.const(c.block_n), "k0")
        load_key_block(b, blk, k0, ("K", "V"))
        s = masked_scores(b, blk, k0)
        m_new = b.binary(tile.ElementMaxOp, m, b.unary(tile.RowMaxOp, s, "s_max"), "m_new")
        alpha = b.binary(tile.ExpDiffOp, m, m_new, "alpha")
        p = b.binary(tile.ExpSubtractOp, s, m_new, "p")
        l_new = b.fma(alpha, l, b.unary(tile.RowSumOp, p, "p_sum"), "l_new")
        acc_scaled = b.binary(tile.MulRowsOp, acc, alpha, "acc_scaled")
        acc_new = accumulate_pv(b, blk, p, acc_scaled)
        b.barrier()  # every warp has read K and V before the next step's copies overwrite them
        return [m_new, l_new, acc_new]

    _, l, acc = b.for_loop(blk.n_kv, [m_init, l_init, acc_init], ["m", "l", "acc"], key_step)
    # The one normalisation: O = acc / l (a row that saw no key has l = 0 and gives 0).
    store_output(b, blk, b.binary(tile.DivRowsOp, acc, l, "o"))
    return apply_cluster(finish_kernel(fn, b), shape)
