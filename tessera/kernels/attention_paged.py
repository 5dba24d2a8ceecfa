"""Attention over a paged KV cache (vLLM's and FlashAttention's `flash_attn_with_kvcache` layout), with grouped
heads and packed queries.

The cache is `num_pages` pages of `page_size` token rows; sequence b's token t lives in page
`page_table[b, t // page_size]`, row `t % page_size`, and the sequence has `cache_seqlens[b]` tokens. The
kernel's arguments:

    %Q, %O          : !tile.tile<?x?xDxT, global>    {tile.dims = #tile.dims<heads, total_q, D>}  (as varlen)
    %seqstart_q, %seqend_q : !tile.tile<?xi32, global>  {tile.dims = #tile.dims<batch>}
    %K_cache, %V_cache : !tile.tile<?x?x?xDxT, global>  {tile.dims = #tile.dims<num_pages, heads_k, page_size, D>}
    %page_table     : !tile.tile<?x?xi32, global>    {tile.dims = #tile.dims<batch, max_pages>}
    %cache_seqlens  : !tile.tile<?xi32, global>      {tile.dims = #tile.dims<batch>}

The cache arguments are [num_pages, heads_k, page_size, D]: FlashAttention's [num_pages, page_size, heads_k,
D] with its middle dimensions swapped, which is a view (strides), not a copy; a tensor map describes it
through its strides, so each key block is still one TMA box: {D, BN, 1, 1} at (0, row in page, key head,
page). The key block BN divides `page_size` (`paged_block_n`), so a block never crosses a page: with
page_size >= 128 a block is 128 (or head_dim 256's 48) rows of one page; with a smaller page (16, 32, 64)
the block is the page itself, one TMA box and one wgmma of N = page_size per page. (FlashAttention-3 gathers
the rows of several small pages into one 128-row tile with cp.async instead; Tessera's smaller key block
costs more loop trips and narrower wgmmas at page 16, but every copy stays one TMA box.)

Queries are packed as in `attention_varlen` (a decoding step of batch B with seq_q queries each is
seqstart_q = 0, seq_q, 2 seq_q, ...), and so are the grid (ceildiv(max_seqlen_q, BM), heads [x S], batch),
max_seqlen_q a launch size, the bounded stores, the LSE output (`return_lse`) and the split-KV partial
results (`num_splits`): the key range of a part is a contiguous run of the sequence's key blocks, each still
read through the page table.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.kernels.attention import DEFAULT_BLOCK_M, DEFAULT_BLOCK_N, HEAD_DIMS, AttentionConfig, output_args
from tessera.kernels.attention_varlen import (
    LAUNCH_SIZES,
    PACKED_ROWS,
    VarlenBlock,
    i32,
    load_q_and_run,
    packed_grid,
    varlen_block_start,
)
from tessera.kernels.common import (
    ArgSpec,
    TileBuilder,
    check_choice,
    finish_kernel,
    global_tensor,
    kernel_function,
)

PAGED_TABLES = ("page_table", "cache_seqlens")


def paged_block_n(head_dim: int, page_size: int) -> int:
    """The key block of the paged kernel for `page_size`: the largest multiple of 16 that divides page_size
    and is at most the head_dim's default block (`DEFAULT_BLOCK_N`). ValueError, naming page_size, when
    page_size is not a positive multiple of 16 (a TMA box of a page must be whole 16-row wgmma steps)."""
    check_choice("head_dim", head_dim, HEAD_DIMS)
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0 or page_size % 16:
        raise ValueError(f"page_size must be a positive multiple of 16; got {page_size!r}")
    return max(n for n in range(16, DEFAULT_BLOCK_N[head_dim] + 1, 16) if page_size % n == 0)


@dataclass
class PagedBlock(VarlenBlock):
    """A `VarlenBlock` whose K and V windows go through the page table: key row k0 of sequence `batch` is
    row k0 mod page_size of page page_table[batch, k0 // page_size]."""

    page_size: SSAValue | None = None

    def window(self, b: TileBuilder, tensor: str, row: SSAValue, col: SSAValue, shape) -> SSAValue:
        if tensor not in ("K", "V"):
            return super().window(b, tensor, row, col, shape)
        slot = b.emit(arith.DivUIOp(row, self.page_size), "page_slot")
        page = b.emit(tile.LoadIndexOp(self.args["page_table"], [self.batch, slot]), "page")
        in_page = b.emit(arith.RemUIOp(row, self.page_size), "row_in_page")
        return b.view(self.args[tensor], [page, self.kv_head, in_page, col], shape, f"{tensor.lower()}_window")


def flash_attention_paged(
    head_dim: int = 128,
    causal: bool = False,
    dtype: str = "bf16",
    scale: float | None = None,
    page_size: int = 128,
    block_m: int = DEFAULT_BLOCK_M,
    return_lse: bool = False,
    num_splits: int = 1,
) -> ModuleOp:
    """The online one-pass kernel over a paged KV cache, `flash_attention_paged{BN}_d{D}_{dtype}[_causal]`
    (`..._lse` with the LSE, `..._split{S}` for split-KV parts), for caches whose page_size is a multiple of
    the key block `paged_block_n(head_dim, page_size)` (the kernel takes any such page_size at run time).
    See the module docstring for its arguments."""
    block_n = paged_block_n(head_dim, page_size)
    c = AttentionConfig.checked(head_dim, causal, dtype, scale, block_m, block_n, return_lse, num_splits)
    elt, d = c.element_type, c.head_dim
    tensor = global_tensor([None, None, d], elt)
    cache = global_tensor([None, None, None, d], elt)
    args = [
        ArgSpec("Q", tensor, ["heads", "total_q", d]),
        ArgSpec("K", cache, ["num_pages", "heads_k", "page_size", d]),
        ArgSpec("V", cache, ["num_pages", "heads_k", "page_size", d]),
        ArgSpec("seqstart_q", global_tensor([None], i32), ["batch"]),
        ArgSpec("seqend_q", global_tensor([None], i32), ["batch"]),
        ArgSpec("page_table", global_tensor([None, None], i32), ["batch", "max_pages"]),
        ArgSpec("cache_seqlens", global_tensor([None], i32), ["batch"]),
        *output_args(c, PACKED_ROWS),
    ]
    fn, b = kernel_function(c.kernel_name(f"flash_attention_paged{block_n}"), args, c.kernel_info(), packed_grid(c),
                            LAUNCH_SIZES)
    values = dict(zip((a.name for a in args), fn.body.blocks.first.args))
    batch = b.program_id("z", "batch")
    seq_k = b.emit(tile.LoadIndexOp(values["cache_seqlens"], [batch]), "seq_k")
    varlen = varlen_block_start(b, c, values, k_start=b.const(0), seq_k=seq_k, batch=batch,
                                heads_k_axis=1)
    blk = PagedBlock(**{f: getattr(varlen, f) for f in varlen.__dataclass_fields__},
                     page_size=b.dim(values["K"], 2, "page_size"))
    load_q_and_run(b, blk)
    return finish_kernel(fn, b)
