"""Variable-length (packed) attention: several sequences of different lengths in one tensor, FlashAttention's
`cu_seqlens` layout, with grouped heads (GQA/MQA).

The kernel's arguments (head-major, so that a block's rows are one box of its tensor):

    %Q, %O : !tile.tile<?x?xDxT, global>  {tile.dims = #tile.dims<heads, total_q, D>}    (O: role "out")
    %K, %V : !tile.tile<?x?xDxT, global>  {tile.dims = #tile.dims<heads_k, total_k, D>}
    %seqstart_q, %seqend_q, %seqstart_k, %seqlen_k : !tile.tile<?xi32, global>  {tile.dims = #tile.dims<batch>}

Sequence b has the query rows [seqstart_q[b], seqend_q[b]) and the key rows [seqstart_k[b], seqstart_k[b] +
seqlen_k[b]): `cu_seqlens_q[:-1]`, `cu_seqlens_q[1:]`, `cu_seqlens_k[:-1]` and `seqused_k` (or the
differences of `cu_seqlens_k`) as FlashAttention takes them; `tessera.runtime.varlen` makes these views.
Lengths 0 and 1 and lengths that are no multiple of a block are all valid. Query head h reads key head
h // (heads // heads_k).

The grid is (ceildiv(max_seqlen_q, BM), heads, batch), as FlashAttention-3 launches it: max_seqlen_q, the
longest sequence's query rows, is a launch size (`tessera.kernel_abi`: the caller gives it beside the
inputs; a larger value only launches blocks that exit). The kernel declares what its tables hold
(`tile.tables`, `tessera.index_tables`: each sequence's rows within total_q and total_k, the query rows not
overlapping and at most max_seqlen_q of them), and every launch checks the tables it is given. A block whose rows start past the end of its sequence runs no key block and stores
nothing (its cost is a few table reads). Within a sequence every
position is relative to its start, so masks (`tile.mask_bounds` at the sequence's key length,
`tile.mask_causal` aligned bottom-right per sequence) are those of the dense kernel. Loads may read rows of
the next sequence (the Q rows past the end give rows that are not stored; the K rows are masked, and the V
rows are zeroed in shared memory before P.V, `tile.clear_rows`, since P = 0 times a NaN there is NaN); the output is stored with `tile.store_global_rows`, which writes only the
rows of the block's own sequence: O is never written with a box that crosses the sequence end
(FlashAttention-3 drops its TMA store of O in varlen mode for the same reason).

With `return_lse=True` the kernel also writes %LSE [heads, total_q, 1] f32 (FlashAttention-3's varlen LSE
[heads, total_q], natural log, -inf for a row that sees no key). With `num_splits = S > 1` it writes instead,
as the dense split kernel does (`tessera.kernels.attention`), each part's f32 results

    %O_partial   : [S x heads, total_q, D]     (the scratch [S, heads, total_q, D])
    %LSE_partial : [S x heads, total_q, 1]

block y = part x heads + head writing index y of the leading dimension; `attention_combine` merges them,
read as [S, 1, heads, total_q, ...] (a batch of one whose seq_q is total_q: a reshape). Every row of a
sequence is written by every part (an empty part writes O = 0, LSE = -inf); rows no sequence covers are not.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, ModuleOp
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.index_tables import TABLES_ATTR, SequenceRange, tables_attribute
from tessera.kernels.attention import flash_loop
from tessera.kernels.attention_block import (
    SPLIT_OUTPUTS,
    AttentionBlock,
    grid_heads,
    key_block_count,
    output_args,
    split_part,
)
from tessera.kernels.attention_config import DEFAULT_BLOCK_M, AttentionConfig
from tessera.kernels.attention_steps import store_results
from tessera.kernels.common import (
    ArgSpec,
    TileBuilder,
    ceildiv_dim,
    finish_kernel,
    global_tensor,
    kernel_function,
    shared_tile,
)

TABLES = ("seqstart_q", "seqend_q", "seqstart_k", "seqlen_k")
"""The i32 tables of a varlen kernel, in argument order after V, each [batch]."""

PACKED_ROWS = ("heads", "total_q")
"""The dimensions of the query rows of a packed output (`attention.output_args`)."""

LAUNCH_SIZES = ("max_seqlen_q",)
"""The packed kernels' launch size (`tessera.kernel_abi`): the longest sequence's query rows."""


def query_rows(start: int, end: int) -> SequenceRange:
    """What the packed kernels' query tables (arguments `start`, `end`) must hold (`tessera.index_tables`):
    sequence b's rows [start[b], end[b]) of total_q, at most max_seqlen_q of them (the grid's query blocks),
    written by its blocks alone."""
    return SequenceRange(start=start, end=end, rows="total_q", longest=LAUNCH_SIZES[0], written=True)

i32 = IntegerType(32)


@dataclass
class VarlenBlock(AttentionBlock):
    """An `AttentionBlock` whose positions (q0, seq_q, seq_k, k0) are relative to its sequence; `window`
    adds the sequence's first row (`q_start` for Q and O, `k_start` for K and V)."""

    q_start: SSAValue | None = None
    k_start: SSAValue | None = None

    def window(self, b: TileBuilder, tensor: str, row: SSAValue, col: SSAValue, shape) -> SSAValue:
        """The window of `tensor` at (head, start + row, col), K and V at `kv_head`, the split-KV partial
        results at `part_batch` (part x heads + head)."""
        is_kv = tensor in ("K", "V")
        head = self.kv_head if is_kv else self.part_batch if tensor in SPLIT_OUTPUTS else self.head
        start = self.k_start if is_kv else self.q_start
        absolute = b.addi(start, row, f"{tensor.lower()}_row")
        return b.view(self.args[tensor], [head, absolute, col], shape, f"{tensor.lower()}_window")

    def clear_past_keys(self, b: TileBuilder, k0: SSAValue) -> None:
        """Zero the V rows of the key block at k0 past the sequence's keys (`tile.clear_rows`): its copy reads
        the next sequence's rows (or a cache's rows past its length), and P.V would multiply a NaN or inf there
        by P = 0."""
        b.emit(tile.ClearRowsOp(self.smem["V"], k0, self.seq_k))


def varlen_block_start(
    b: TileBuilder, c: AttentionConfig, values: dict[str, SSAValue], k_start: SSAValue | None = None,
    seq_k: SSAValue | None = None, batch: SSAValue | None = None, heads_k_axis: int = 0,
) -> VarlenBlock:
    """Block coordinates, the sequence's extents read from the tables, the key-block count (0 for a block past
    its sequence's end) and the key head; `k_start`/`seq_k` replace the key tables' values and `batch` the
    program id z when given, and K's head count is its dimension `heads_k_axis` (the paged kernel has no
    packed K). With split-KV, grid y is part x heads + head (`attention.split_part`), the part's partial
    results are at y of their leading dimension, and its keys are those from kv_base on."""
    q_block = b.program_id("x", "q_block")
    head = b.program_id("y", "part_head" if c.split else "head")
    if batch is None:
        batch = b.program_id("z", "batch")
    q_start = b.emit(tile.LoadIndexOp(values["seqstart_q"], [batch]), "q_start")
    q_end = b.emit(tile.LoadIndexOp(values["seqend_q"], [batch]), "q_end")
    seq_q = b.subi(q_end, q_start, "seq_q")
    if k_start is None:
        k_start = b.emit(tile.LoadIndexOp(values["seqstart_k"], [batch]), "k_start")
    if seq_k is None:
        seq_k = b.emit(tile.LoadIndexOp(values["seqlen_k"], [batch]), "seq_k")
    q0 = b.muli(q_block, b.const(c.block_m), "q0")
    # 1 if the block has rows of its sequence, else 0: multiplies the key-block count.
    has_rows = b.minsi(b.maxsi(b.subi(seq_q, q0, "rows_left"), b.const(0), "rows_left_pos"), b.const(1), "has_rows")
    n_kv = b.muli(key_block_count(b, c, q0, seq_q, seq_k), has_rows, "n_kv_block")
    heads = b.dim(values["Q"], 0, "heads")
    part_batch = kv_base = None
    if c.split:
        part_batch = head
        _, head, n_kv, kv_base, seq_k = split_part(b, c, head, heads, n_kv, seq_k)
    group = b.emit(arith.DivUIOp(heads, b.dim(values["K"], heads_k_axis, "heads_k")), "group")
    kv_head = b.emit(arith.DivUIOp(head, group), "kv_head")
    return VarlenBlock(c, values, batch, head, q0, seq_q, seq_k, n_kv, kv_head=kv_head, part_batch=part_batch,
                       kv_base=kv_base, q_start=q_start, k_start=k_start)


def load_q_and_run(b: TileBuilder, blk: VarlenBlock) -> None:
    """Shared tiles, the Q copy, the online-softmax loop and the bounded stores of its results
    (`attention.store_results`: O, the LSE, or the split-KV partial results; rows of the block's sequence
    only)."""
    c = blk.config
    elt, d = c.element_type, c.head_dim
    blk.smem["Q"] = b.alloc_shared(shared_tile([c.block_m, d], elt), "q_smem")
    blk.smem["K"] = b.alloc_shared(shared_tile([c.block_n, d], elt), "k_smem")
    blk.smem["V"] = b.alloc_shared(shared_tile([c.block_n, d], elt), "v_smem")
    b.cp_async(blk.window(b, "Q", blk.q0, b.const(0), [c.block_m, d]), blk.smem["Q"])
    b.cp_commit_group()
    m, l, acc = flash_loop(b, blk)
    blk.rows_left = b.subi(blk.seq_q, blk.q0, "rows_left")
    store_results(b, blk, acc, m, l)


def packed_grid(c: AttentionConfig) -> list:
    """The grid of the packed kernels: (ceildiv(max_seqlen_q, BM), heads [x S], batch), max_seqlen_q a launch
    size (module docstring)."""
    return [ceildiv_dim("max_seqlen_q", c.block_m), grid_heads(c), "batch"]


def flash_attention_varlen(
    head_dim: int = 128,
    causal: bool = False,
    dtype: str = "bf16",
    scale: float | None = None,
    block_m: int = DEFAULT_BLOCK_M,
    block_n: int | None = None,
    return_lse: bool = False,
    num_splits: int = 1,
) -> ModuleOp:
    """The online one-pass kernel over packed sequences, `flash_attention_varlen_d{D}_{dtype}[_causal][_lse]`
    or `..._split{S}` (see the module docstring for its arguments); the loop is `attention.flash_loop`, the
    same as the dense kernel's."""
    c = AttentionConfig.checked(head_dim, causal, dtype, scale, block_m, block_n, return_lse, num_splits)
    elt, d = c.element_type, c.head_dim
    tensor = global_tensor([None, None, d], elt)
    table = global_tensor([None], i32)
    args = [
        ArgSpec("Q", tensor, ["heads", "total_q", d]),
        ArgSpec("K", tensor, ["heads_k", "total_k", d]),
        ArgSpec("V", tensor, ["heads_k", "total_k", d]),
        *(ArgSpec(name, table, ["batch"]) for name in TABLES),
        *output_args(c, PACKED_ROWS),
    ]
    fn, b = kernel_function(c.kernel_name("flash_attention_varlen"), args, c.kernel_info(), packed_grid(c),
                            LAUNCH_SIZES)
    index = {a.name: i for i, a in enumerate(args)}  # the key rows [seqstart_k[b], + seqlen_k[b]) of total_k
    fn.attributes[TABLES_ATTR] = tables_attribute([
        query_rows(index["seqstart_q"], index["seqend_q"]),
        SequenceRange(start=index["seqstart_k"], length=index["seqlen_k"], rows="total_k")])
    values = dict(zip((a.name for a in args), fn.body.blocks.first.args))
    blk = varlen_block_start(b, c, values)
    load_q_and_run(b, blk)
    return finish_kernel(fn, b)
