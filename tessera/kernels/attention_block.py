"""How an attention kernel starts: its arguments, its launch grid and the values one thread block's code is
written in terms of (`AttentionBlock`, set up by `attention_kernel`), including the split-KV part a block
handles. The steps of the key loop are `attention_steps`; the flash kernel is `attention`.

Every attention kernel is launched over the grid (ceildiv(seq_q, BM), heads, batch): thread block
(x, y, z) computes the output rows [x*BM, x*BM + BM) of head y of batch entry z. Its arguments are

    %Q, %O : !tile.tile<?x?x?xDxT, global>  {tile.dims = #tile.dims<batch, heads, seq_q, D>}   (O: role "out")
    %K, %V : !tile.tile<?x?x?xDxT, global>  {tile.dims = #tile.dims<batch, heads, seq_k, D>}

then any scratch buffers a multi-pass variant needs (`attention_multipass`). Key blocks are BN keys wide; the
last one may be partial (its copy fills zeros and `tile.mask_bounds` hides those keys). With `causal`, the mask
is aligned bottom-right (`tile.mask_causal`, which then hides those keys from every stored row: `apply_masks`),
and key blocks entirely past the diagonal are not visited.

With `return_lse=True` a kernel also writes the log-sum-exp of each query row's scaled scores,

    %LSE : !tile.tile<?x?x?x1xf32, global>  {tile.dims = #tile.dims<batch, heads, seq_q, 1>}  (role "out")

LSE = m + ln(l) with m the running maximum of the scaled scores (row_max * scale) and l the running sum: the
natural log of sum_j exp(scale * s_j), and -inf for a row that sees no key (m = -inf, l = 0; its O is 0). The
trailing 1 is the column in which the lowering stores one f32 per row (a [BM, 1] window, as two-pass attention
stores its row statistics); the memory is LSE[batch, heads, seq_q]. Without it the kernel is unchanged.

With `num_splits = S > 1` (split-KV, flash-decoding; `flash_attention` only) the key blocks a query block
visits are divided into S contiguous ranges of ceildiv(n, S) blocks, one thread block each: the grid is
(ceildiv(seq_q, BM), S x heads, batch), thread block (x, y, z) handling part s = y / heads of head y mod heads,
and the outputs are each part's normalised result and its LSE, in f32,

    %O_partial   : [S x batch, heads, seq_q, D]  f32   O_s = softmax over the part's keys, times V
    %LSE_partial : [S x batch, heads, seq_q, 1]  f32   lse_s of the part's keys (-inf for an empty part)

laid out as [S, batch, heads, seq_q, ...] (index s x batch + b of the leading dimension), which
`attention_combine` (tessera/kernels/attention_split.py) reads and merges into O (and LSE). Two choices keep
the split kernel within the consumer warpgroups' 240 registers, where the kernel with LSE already sits at
head_dim 128: the leading index s x batch + b is one register live through the key loop (not s, b and the
batch size), and the loop counts the part's key blocks from 0 with key positions relative to the part's
first key, kv_base (the masks compare with seq_k - kv_base, the same predicates), so that only the producer,
which addresses K and V at kv_base + k0, holds kv_base.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import StringAttr
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels import attention_fp8
from tessera.kernels.attention_config import BIAS_BROADCAST_DIMS, AttentionConfig
from tessera.kernels.attention_mods import AttentionMods
from tessera.kernels.common import (
    ArgSpec,
    TileBuilder,
    ceildiv_dim,
    f32,
    global_tensor,
    kernel_function,
    shared_tile,
)

LSE_DIMS = ("batch", "heads", "seq_q", 1)
"""The named dimensions of the LSE output: one f32 per query row, in a column of width 1 (module docstring)."""


def lse_arg(rows: Sequence[str] = LSE_DIMS[:-1]) -> ArgSpec:
    """The f32 LSE output argument %LSE [batch, heads, seq_q, 1] (module docstring), or [*rows, 1] for
    another layout of the query rows (packed sequences: [heads, total_q, 1])."""
    return ArgSpec("LSE", global_tensor([None] * len(rows) + [1], f32), [*rows, 1], role="out")


@dataclass
class AttentionBlock:
    """The values one thread block's code is written in terms of (set up by `attention_kernel`). In a split-KV
    part the key loop's positions are relative to the part's first key `kv_base`: n_kv counts the part's key
    blocks and seq_k is seq_k - kv_base; `part_batch` = part x batch + batch indexes the partial outputs."""

    config: AttentionConfig
    args: dict[str, SSAValue]
    batch: SSAValue
    head: SSAValue
    q0: SSAValue
    seq_q: SSAValue
    seq_k: SSAValue
    n_kv: SSAValue
    smem: dict[str, SSAValue] = field(default_factory=dict)
    kv_head: SSAValue | None = None
    """The head of K and V this block reads: `head`, or head // (heads // heads_k) with grouped heads."""
    part_batch: SSAValue | None = None
    kv_base: SSAValue | None = None
    rows_left: SSAValue | None = None
    """With packed sequences, the rows of the block's own sequence from q0 on: its stores stop there."""
    mods: AttentionMods | None = None
    """The traced score_mod / mask_mod and whether the key loop reads block lists (`flash_attention`)."""
    q_block: SSAValue | None = None
    descale: dict[str, SSAValue] = field(default_factory=dict)
    """The FP8 kernel's factor row vectors (`attention_fp8.load_descales`): "qk" and "v"."""

    def window(self, b: TileBuilder, tensor: str, row: SSAValue, col: SSAValue, shape: Sequence[int]) -> SSAValue:
        """The window of argument `tensor` (Q, K, V, Bias, O, LSE or a scratch buffer) at (batch, head, row, col);
        a split-KV partial output (O_partial, LSE_partial) at (part x batch + batch, head, row, col); K and V
        are read at `kv_head` (grouped heads)."""
        name = f"{tensor.lower()}_window"
        lead = self.part_batch if tensor in SPLIT_OUTPUTS else self.batch
        head = self.kv_head if tensor in ("K", "V") and self.kv_head is not None else self.head
        if tensor == "Bias":  # a broadcast dimension has size 1: index 0
            broadcast = self.config.bias_broadcast
            lead, head = (b.const(0) if d in broadcast else v for d, v in zip(BIAS_BROADCAST_DIMS, (lead, head)))
        return b.view(self.args[tensor], [lead, head, row, col], shape, name)

    def copy_key_block(self, b: TileBuilder, tensor: str, row: SSAValue) -> None:
        """Start the copy of the key block of `tensor` (K or V) at key row `row` into its shared tile: one
        `tile.cp_async` of its window (the paged kernel's gather overrides this)."""
        c = self.config
        if tensor == "V" and c.v_transposed:  # V^T [.., head_dim, seq_k]: the key block is a column block
            b.cp_async(self.window(b, tensor, b.const(0), row, [c.head_dim, c.block_n]), self.smem[tensor])
            return
        b.cp_async(self.window(b, tensor, row, b.const(0), [c.block_n, c.head_dim]), self.smem[tensor])

    def clear_past_keys(self, b: TileBuilder, k0: SSAValue) -> None:
        """Zero the V rows of the key block at k0 that lie past the block's keys (`tile.clear_rows`) where its
        copy may read such rows; here none: the copy of a window past K's and V's end fills zeros."""

    def key_row(self, b: TileBuilder, k0: SSAValue) -> SSAValue:
        """The row of K and V that key position k0 of the loop is: k0, or kv_base + k0 in a split-KV part."""
        return k0 if self.kv_base is None else b.addi(self.kv_base, k0, "key_row")

    def key_end(self, b: TileBuilder) -> SSAValue:
        """The row of K and V past the block's last key: seq_k, or kv_base + seq_k in a split-KV part (whose
        seq_k counts from kv_base)."""
        return self.seq_k if self.kv_base is None else b.addi(self.kv_base, self.seq_k, "key_end")


SPLIT_OUTPUTS = ("O_partial", "LSE_partial")
"""The outputs of a split-KV kernel, each led by the dimension S x batch (module docstring)."""


def output_args(c: AttentionConfig, rows: Sequence[str] = LSE_DIMS[:-1]) -> list[ArgSpec]:
    """The outputs of an attention kernel: O (and LSE with `return_lse`), or with split-KV the f32 partial
    results O_partial [S x batch, heads, seq_q, D] and LSE_partial [S x batch, heads, seq_q, 1]. `rows` names
    the dimensions of the query rows ([batch, heads, seq_q]; packed sequences: [heads, total_q], whose
    partial results are then [S x heads, total_q, ...])."""
    d = c.head_dim
    free = [None] * len(rows)
    if c.split:
        dims = [tile.DimExprAttr(rows[0], 1, c.num_splits), *rows[1:]]
        o_partial = ArgSpec("O_partial", global_tensor([*free, d], f32), [*dims, d], role="out")
        lse_partial = ArgSpec("LSE_partial", global_tensor([*free, 1], f32), [*dims, 1], role="out")
        return [o_partial, lse_partial]
    o = ArgSpec("O", global_tensor([*free, d], c.output_type), [*rows, d], role="out")
    return [o, lse_arg(rows)] if c.return_lse else [o]


def grid_heads(c: AttentionConfig) -> str | tile.DimExprAttr:
    """The grid's y extent: heads, or S x heads with split-KV (block y handles part y / heads of head
    y mod heads, `split_part`)."""
    return tile.DimExprAttr("heads", 1, c.num_splits) if c.split else "heads"


def attention_kernel(
    config: AttentionConfig, variant: str, scratch: Sequence[ArgSpec] = (), grouped: bool = False,
    mods: AttentionMods | None = None,
) -> tuple[func.FuncOp, TileBuilder, AttentionBlock]:
    """Start an attention kernel: signature, block coordinates, sizes, key-block count, shared tiles, and the
    asynchronous copy of this block's Q tile (one commit group; the first wait in the key loop covers it).

    With `grouped` (GQA/MQA), K and V have their own head count `heads_k` (tile.dims `heads_k`), which must
    divide `heads` (the caller checks it: the kernel reads zeros past K's heads otherwise), and query head h
    reads key head h // (heads // heads_k).

    With `mods` (score_mod / mask_mod), their captured arrays and, with block sparsity, the block lists are
    inputs after V (and Bias): `AttentionMods.inputs`.

    Returns (func, builder, block)."""
    c = config
    elt, d = c.element_type, c.head_dim
    q_dims = ["batch", "heads", "seq_q", d]
    k_dims = ["batch", "heads_k" if grouped else "heads", "seq_k", d]
    tensor = global_tensor([None, None, None, d], elt)
    v_spec = ArgSpec("V", tensor, k_dims)
    if c.v_transposed:
        v_spec = ArgSpec("V", global_tensor([None, None, d, None], elt), [*k_dims[:2], d, "seq_k"])
    args = [
        ArgSpec("Q", tensor, q_dims),
        ArgSpec("K", tensor, k_dims),
        v_spec,
        *(attention_fp8.descale_args(grouped) if c.fp8 else []),
        *([ArgSpec("Bias", global_tensor([None] * 4, elt), c.bias_dims())] if c.bias else []),
        *(mods.inputs(c) if mods is not None else []),
        *output_args(c),
        *scratch,
    ]
    grid = [ceildiv_dim("seq_q", c.block_m), grid_heads(c), "batch"]
    info = c.kernel_info() if mods is None else {"kind": StringAttr("custom")}  # no "attention" reference fits
    fn, b = kernel_function(c.kernel_name(variant), args, info, grid)
    values = dict(zip((a.name for a in args), fn.body.blocks.first.args))

    q_block = b.program_id("x", "q_block")
    head = b.program_id("y", "part_head" if c.split else "head")
    batch = b.program_id("z", "batch")
    seq_q = b.dim(values["Q"], 2, "seq_q")
    seq_k = b.dim(values["K"], 2, "seq_k")
    q0 = b.muli(q_block, b.const(c.block_m), "q0")
    n_kv = key_block_count(b, c, q0, seq_q, seq_k)
    if not c.split:
        blk = AttentionBlock(c, values, batch, head, q0, seq_q, seq_k, n_kv)
    else:
        part, head, count, kv_base, seq_k_part = split_part(b, c, head, b.dim(values["Q"], 1, "heads"), n_kv, seq_k)
        part_batch = b.addi(b.muli(part, b.dim(values["Q"], 0, "batch_size"), "part_offset"), batch, "part_batch")
        blk = AttentionBlock(c, values, batch, head, q0, seq_q, seq_k_part, count, part_batch=part_batch,
                             kv_base=kv_base)
    if grouped:
        blk.kv_head = grouped_kv_head(b, values["Q"], values["K"], blk.head)
    blk.mods, blk.q_block = mods, q_block

    blk.smem["Q"] = b.alloc_shared(shared_tile([c.block_m, d], elt), "q_smem")
    blk.smem["K"] = b.alloc_shared(shared_tile([c.block_n, d], elt), "k_smem")
    v_shape = [d, c.block_n] if c.v_transposed else [c.block_n, d]
    blk.smem["V"] = b.alloc_shared(shared_tile(v_shape, elt), "vt_smem" if c.v_transposed else "v_smem")
    b.cp_async(blk.window(b, "Q", q0, b.const(0), [c.block_m, d]), blk.smem["Q"])
    b.cp_commit_group()
    if c.fp8:
        kv_head = blk.kv_head if blk.kv_head is not None else blk.head
        blk.descale = attention_fp8.load_descales(b, values, blk.batch, kv_head, c.block_m, c.scale)
    return fn, b, blk


def grouped_kv_head(b: TileBuilder, q: SSAValue, k: SSAValue, head: SSAValue) -> SSAValue:
    """The key head of query head `head` under GQA: head // (heads // heads_k), heads and heads_k read from
    dimension 1 of Q and K."""
    group = b.emit(arith.DivUIOp(b.dim(q, 1, "heads"), b.dim(k, 1, "heads_k")), "group")
    return b.emit(arith.DivUIOp(head, group), "kv_head")


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


def split_key_range(b: TileBuilder, c: AttentionConfig, part: SSAValue, n_kv: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(first key block, key block count) of part `part` of a block's n_kv key blocks, as FlashAttention-3
    divides them: ceildiv(n_kv, S) blocks per part, the first at part x that, the count
    max(0, min(that, n_kv - first)). Trailing parts may be empty (no trip: they write O = 0, LSE = -inf)."""
    per_part = b.ceildivui(n_kv, b.const(c.num_splits), "n_kv_per_part")
    start = b.muli(part, per_part, "kv_start")
    left = b.maxsi(b.subi(n_kv, start, "n_kv_after_start"), b.const(0), "n_kv_left")
    return start, b.minsi(per_part, left, "n_kv_part")


def split_part(b: TileBuilder, c: AttentionConfig, y: SSAValue, heads: SSAValue, n_kv: SSAValue,
               seq_k: SSAValue) -> tuple[SSAValue, SSAValue, SSAValue, SSAValue, SSAValue]:
    """The split-KV coordinates of a block whose grid y is part x heads + head and whose query block sees
    n_kv key blocks: (part, head, the part's key block count, its first key kv_base, seq_k - kv_base). The
    loop then sees the part's keys from kv_base on (module docstring)."""
    part = b.divui(y, heads, "part")
    head = b.remui(y, heads, "head")
    start, count = split_key_range(b, c, part, n_kv)
    kv_base = b.muli(start, b.const(c.block_n), "kv_base")
    return part, head, count, kv_base, b.subi(seq_k, kv_base, "seq_k_part")
