"""Attention over a paged KV cache (vLLM's and FlashAttention's `flash_attn_with_kvcache` layout), with grouped
heads and packed queries.

The cache is `num_pages` pages of `page_size` token rows; sequence b's token t lives in page
`page_table[b, t // page_size]`, row `t % page_size`, and the sequence has `cache_seqlens[b]` tokens. The key
block BN is the head_dim's default (`DEFAULT_BLOCK_N`: 128 for head_dim 64, 96 and 128, 112 for 192, 48 for
256) and the kernel reads each key block one of two ways (`paged_copy`), as FlashAttention-3 does:

- "tma", when page_size is a multiple of BN: a block never crosses a page, so it is one TMA box of one page
  (the kernel promises it, `tile.divisible = {page_size = BN}`, and every launch checks the cache's page_size),
  {D, BN, 1, 1} at (0, row in page, key head, page). The cache arguments are then [num_pages, heads_k,
  page_size, D]: FlashAttention's [num_pages, page_size, heads_k, D] with its middle dimensions swapped, a view
  (strides) that the tensor map describes, not a copy. Kernel `flash_attention_paged{BN}_d{D}_...` The rows of the
  last block past cache_seqlens[b] are read too: their V rows are zeroed in shared memory before P.V
  (`tile.clear_rows`), so whatever they hold (NaN from `torch.empty`) never reaches O.
- "cp.async", for any other page_size: the producer gathers the block's rows one by one through the page table
  (`tile.cp_async_gather`; on sm_90a 16-byte `cp.async`s whose completion arrives on the ring slot's full
  mbarrier): row r of the block at k0 is row (k0 + r) % page_size of page page_table[b, (k0 + r) // page_size],
  and rows past cache_seqlens[b] land as zero without a read (and are masked as in every kernel). The cache
  arguments are FlashAttention's own [num_pages, page_size, heads_k, D], read through a pointer (contiguous).
  Kernel `flash_attention_paged_gather_d{D}_...`. Any positive page_size works, 1 included.

The kernel's arguments:

    %Q, %O          : !tile.tile<?x?xDxT, global>    {tile.dims = #tile.dims<heads, total_q, D>}  (as varlen)
    %seqstart_q, %seqend_q : !tile.tile<?xi32, global>  {tile.dims = #tile.dims<batch>}
    %K_cache, %V_cache : !tile.tile<?x?x?xDxT, global>  (the layout of the copy path, above)
    %page_table     : !tile.tile<?x?xi32, global>    {tile.dims = #tile.dims<batch, max_pages>}
    %cache_seqlens  : !tile.tile<?xi32, global>      {tile.dims = #tile.dims<batch>}

Queries are packed as in `attention_varlen` (a decoding step of batch B with seq_q queries each is
seqstart_q = 0, seq_q, 2 seq_q, ...), and so are the grid (ceildiv(max_seqlen_q, BM), heads [x S], batch),
max_seqlen_q a launch size, the bounded stores, the LSE output (`return_lse`) and the split-KV partial
results (`num_splits`): the key range of a part is a contiguous run of the sequence's key blocks, each still
read through the page table. The kernel declares what its tables hold (`tile.tables`, `tessera.index_tables`):
the query rows as varlen's, cache_seqlens[b] within max_pages x page_size, and each page a sequence reads,
page_table[b, j] for j < ceil(cache_seqlens[b] / page_size), within the num_pages pages (the other slots are
never read: -1 padding there is accepted); every launch checks the tables it is given.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp
from xdsl.ir import SSAValue

from tessera.dialects import tile
from tessera.index_tables import TABLES_ATTR, SequenceRange, tables_attribute
from tessera.kernel_abi import DIVISIBLE_ATTR
from tessera.kernels.attention_block import output_args
from tessera.kernels.attention_config import DEFAULT_BLOCK_M, DEFAULT_BLOCK_N, HEAD_DIMS, AttentionConfig
from tessera.kernels.attention_varlen import (
    LAUNCH_SIZES,
    PACKED_ROWS,
    VarlenBlock,
    i32,
    load_q_and_run,
    packed_grid,
    query_rows,
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

PAGED_COPIES = ("tma", "cp.async")
"""How the paged kernel copies a key block (module docstring); the `copies` of its host description."""


def paged_copy(head_dim: int, page_size: int) -> str:
    """"tma" when `page_size` is a multiple of the head_dim's key block (`DEFAULT_BLOCK_N`), else "cp.async" (the
    row gather). ValueError, naming page_size, when it is not a positive integer."""
    check_choice("head_dim", head_dim, HEAD_DIMS)
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0:
        raise ValueError(f"page_size must be a positive integer; got {page_size!r}")
    return "tma" if page_size % DEFAULT_BLOCK_N[head_dim] == 0 else "cp.async"


GATHER_BLOCK_M = {64: DEFAULT_BLOCK_M, 96: DEFAULT_BLOCK_M, 128: 64, 192: 64, 256: 64}
"""The query block of the gather kernels when the caller does not choose one: at head_dim 128, 192 and 256 one
consumer warpgroup (64 rows). The producer warpgroup's gather keeps 37 registers live by the allocator's count
(table and cache pointers, ring barriers, a row's page lookup), so setmaxnreg would give it at least 40, which
leaves two consumer warpgroups 232 registers each; they need 235 at head_dim 128 (a TMA producer needs 32,
leaving them 240), and ptxas wants more still for the gather, whose table loads it hoists. With one consumer
warpgroup (240) the producer gets what is left (`warp-specialize`), and ptxas assembles every gather kernel
without a spill. Decoding has a few query rows per block anyway; pass block_m=128 to get two warpgroups where
the registers allow (head_dim 64 and 96 do, and it is the default there: two consumer warpgroups at 96
warp-specialize the gather without a spill)."""


def cache_row_axis(copy: str) -> int:
    """The dimension of the cache argument that numbers the rows of a page: 2 for TMA ([num_pages, heads_k,
    page_size, D]), 1 for the gather ([num_pages, page_size, heads_k, D])."""
    return 2 if copy == "tma" else 1


@dataclass
class PagedBlock(VarlenBlock):
    """A `VarlenBlock` whose K and V blocks go through the page table: key row k0 of sequence `batch` is row
    k0 mod page_size of page page_table[batch, k0 // page_size]. With `gather`, each block is a
    `tile.cp_async_gather` of its rows; otherwise a window of one page (a TMA box)."""

    page_size: SSAValue | None = None
    gather: bool = False

    def window(self, b: TileBuilder, tensor: str, row: SSAValue, col: SSAValue, shape) -> SSAValue:
        if tensor not in ("K", "V"):
            return super().window(b, tensor, row, col, shape)
        slot = b.emit(arith.DivUIOp(row, self.page_size), "page_slot")
        page = b.emit(tile.LoadIndexOp(self.args["page_table"], [self.batch, slot]), "page")
        in_page = b.emit(arith.RemUIOp(row, self.page_size), "row_in_page")
        return b.view(self.args[tensor], [page, self.kv_head, in_page, col], shape, f"{tensor.lower()}_window")

    def clear_past_keys(self, b: TileBuilder, k0: SSAValue) -> None:
        if not self.gather:  # the gather reads no row past cache_seqlens: those rows land as zero
            super().clear_past_keys(b, k0)

    def copy_key_block(self, b: TileBuilder, tensor: str, row: SSAValue) -> None:
        if not self.gather or tensor not in ("K", "V"):
            return super().copy_key_block(b, tensor, row)
        b.emit(tile.CpAsyncGatherOp(self.args[tensor], [self.kv_head, b.const(0)], self.args["page_table"],
                                    [self.batch], row, self.key_end(b), self.smem[tensor]))


def flash_attention_paged(
    head_dim: int = 128,
    causal: bool = False,
    dtype: str = "bf16",
    scale: float | None = None,
    page_size: int = 128,
    block_m: int | None = None,
    return_lse: bool = False,
    num_splits: int = 1,
) -> ModuleOp:
    """The online one-pass kernel over a paged KV cache of `page_size` rows per page: TMA boxes when page_size is
    a multiple of the key block, `flash_attention_paged{BN}_d{D}_{dtype}[_causal]` (any such page_size at run
    time), else the row gather, `flash_attention_paged_gather_d{D}_{dtype}[_causal]` (any page_size at run
    time); `..._lse` with the LSE, `..._split{S}` for split-KV parts. `block_m` None is `DEFAULT_BLOCK_M`, or
    `GATHER_BLOCK_M` for the gather. See the module docstring for its arguments."""
    copy = paged_copy(head_dim, page_size)
    if block_m is None:
        block_m = DEFAULT_BLOCK_M if copy == "tma" else GATHER_BLOCK_M[head_dim]
    c = AttentionConfig.checked(head_dim, causal, dtype, scale, block_m, DEFAULT_BLOCK_N[head_dim], return_lse,
                                num_splits)
    elt, d = c.element_type, c.head_dim
    tensor = global_tensor([None, None, d], elt)
    cache = global_tensor([None, None, None, d], elt)
    cache_dims = (["num_pages", "heads_k", "page_size", d] if copy == "tma"
                  else ["num_pages", "page_size", "heads_k", d])
    args = [
        ArgSpec("Q", tensor, ["heads", "total_q", d]),
        ArgSpec("K", cache, cache_dims),
        ArgSpec("V", cache, cache_dims),
        ArgSpec("seqstart_q", global_tensor([None], i32), ["batch"]),
        ArgSpec("seqend_q", global_tensor([None], i32), ["batch"]),
        ArgSpec("page_table", global_tensor([None, None], i32), ["batch", "max_pages"]),
        ArgSpec("cache_seqlens", global_tensor([None], i32), ["batch"]),
        *output_args(c, PACKED_ROWS),
    ]
    variant = f"flash_attention_paged{c.block_n}" if copy == "tma" else "flash_attention_paged_gather"
    fn, b = kernel_function(c.kernel_name(variant), args, c.kernel_info(), packed_grid(c), LAUNCH_SIZES)
    index = {a.name: i for i, a in enumerate(args)}  # the keys [0, cache_seqlens[b]) through the page table
    fn.attributes[TABLES_ATTR] = tables_attribute([
        query_rows(index["seqstart_q"], index["seqend_q"]),
        SequenceRange(length=index["cache_seqlens"], pages=index["page_table"], page_size="page_size",
                      num_pages="num_pages")])
    if copy == "tma":  # a key block's box must not cross a page: every launch checks the promise
        fn.attributes[DIVISIBLE_ATTR] = DictionaryAttr({"page_size": IntegerAttr(c.block_n, 64)})
    values = dict(zip((a.name for a in args), fn.body.blocks.first.args))
    batch = b.program_id("z", "batch")
    seq_k = b.emit(tile.LoadIndexOp(values["cache_seqlens"], [batch]), "seq_k")
    row_axis = cache_row_axis(copy)
    varlen = varlen_block_start(b, c, values, k_start=b.const(0), seq_k=seq_k, batch=batch,
                                heads_k_axis=3 - row_axis)
    gather = copy == "cp.async"  # the gather reads its page size from the cache's shape itself
    blk = PagedBlock(**{f: getattr(varlen, f) for f in varlen.__dataclass_fields__},
                     page_size=None if gather else b.dim(values["K"], row_axis, "page_size"), gather=gather)
    load_q_and_run(b, blk)
    return finish_kernel(fn, b)
