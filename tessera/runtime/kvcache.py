"""`tessera.attention_with_kvcache`: decoding attention against a KV cache, named and shaped like
FlashAttention's `flash_attn_with_kvcache`.

    o = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, page_table=None, k_new=None, v_new=None,
                               causal=False, scale=None, num_splits=1, return_lse=False, level=None)

- q: [batch, seq_q, heads, head_dim];
- k_cache, v_cache: [num_pages, page_size, heads_k, head_dim] with `page_table` (int32 [batch, max_pages]: page
  j of sequence b is page_table[b, j]), or [batch, seqlen_cache, heads_k, head_dim] without one (sequence b in
  row b); heads % heads_k == 0;
- cache_seqlens: int32 [batch] (or an int for every sequence; default: the whole cache): the tokens of sequence
  b already in the cache;
- k_new, v_new: [batch, seq_new, heads_k, head_dim], optional: appended to the cache in place at positions
  cache_seqlens[b] .. cache_seqlens[b] + seq_new - 1 (through the page table) before attending, as
  FlashAttention does; the keys attended to are then cache_seqlens[b] + seq_new;
- o: [batch, seq_q, heads, head_dim]. Causal masks are aligned bottom-right (query i of seq_q sees keys up to
  i + seqlen_k - seq_q), so one decoding query sees the whole cache;
- num_splits: 1, an integer up to 256, or "auto" (0 means "auto" too, FlashAttention's convention):
  split-KV, each sequence's key range divided over that many thread blocks whose partial results the combine
  kernel merges; "auto" is FlashAttention-3's heuristic (`attention_split.choose_num_splits`) for the
  kernel's blocks against the longest cache length (cache_seqlens + seq_new where the host can read
  cache_seqlens, else the cache's capacity);
- return_lse: also return lse, f32 [batch, heads, seq_q] (FlashAttention's `softmax_lse` with
  `return_softmax_lse=True`): the natural log of each row's softmax denominator, -inf for a row that sees no
  key (an empty cache), whose o is 0.

`level` None runs on the GPU; "tile", "target", "ptx" run the same kernel
(`tessera.kernels.flash_attention_paged`) in that interpreter, with `tessera.interpreters.serving_checks`
watching the page reads and the output rows. A page_size that is a multiple of the key block is read one TMA
box per key block (the cache passed as a [num_pages, heads_k, page_size, D] view); any other is gathered row
by row with cp.async (the cache passed as it is). A cache without a page table is the paged kernel with one
page a sequence (page_size = seqlen_cache, page_table[b] = [b]): TMA when seqlen_cache is a multiple of the
key block, the gather for any other length.

Grouped heads are packed (FlashAttention-3's PackGQA) when a block's rows would be mostly empty otherwise
(seq_q x group <= 128 query rows, and seq_q == 1 or not causal): the group's query heads become the rows of
one block's Q tile, so each K/V tile is read once per key head rather than once per query head. In the
kernel's head-major layout, Q for key head g of sequence b is [group, seq_q] rows, contiguous once q is
transposed to [heads_k, batch, group, seq_q, D], so the packed Q tile is one TMA box. (In FlashAttention's
token-major q [batch, seq_q, heads, D] the rows (s, h) of a group are a [seq_q, group] sub-box whose
flattening into the M dimension of a 128-row tile does not start on a box boundary unless the group divides
128, which is why FA3 loads that tile with cp.async; Tessera pays a transposing copy of q instead, which at
decoding is batch x seq_q x heads x D elements, nothing beside the cache.) Causal masks of packed rows
would need each row's position modulo seq_q, so causal prefill (seq_q > 1) is not packed.
"""

from __future__ import annotations

import numpy as np

from tessera.index_tables import check_interval, check_pages
from tessera.runtime.no_backward import no_backward
from tessera.runtime.serving import (
    check_groups,
    check_head_dim,
    check_level,
    check_table,
    check_one_kind,
    check_values,
    element_type,
    is_torch,
    pack_gqa,
    run_packed,
)

def _lib(x):
    if is_torch(x):
        import torch

        return torch
    return np


def check_appends(where: str, table: np.ndarray, lengths: np.ndarray, seq_new: int, page_size: int) -> None:
    """Refuse k_new/v_new rows that land on a cache row another position reads (ValueError naming both):
    sequences sharing a page past one's cache_seqlens, or a page listed twice in one table row, would have
    the append overwrite a key that is attended to, and the result would be silently wrong (FlashAttention
    leaves this undefined). Reading a shared page (a shared prefix) without appending into it is fine.
    `table` and `lengths` are host values (int32 [batch, max_pages], [batch])."""
    ends = lengths.astype(np.int64) + seq_new
    seq = np.repeat(np.arange(len(ends)), ends)
    pos = np.arange(int(ends.sum())) - np.repeat(np.cumsum(ends) - ends, ends)
    cells = table[seq, pos // page_size].astype(np.int64) * page_size + pos % page_size
    readers = np.bincount(cells)
    written = pos >= np.repeat(lengths.astype(np.int64), ends)
    clash = written & (readers[cells] > 1)
    if clash.any():
        i = int(np.argmax(clash))
        page, row = divmod(int(cells[i]), page_size)
        other = int(np.flatnonzero((cells == cells[i]) & (np.arange(len(cells)) != i))[0])
        raise ValueError(f"{where}: k_new would overwrite a key that is read: sequence {int(seq[i])}'s token "
                         f"{int(pos[i])} is appended to page {page}, row {row}, which sequence {int(seq[other])} reads "
                         f"as its token {int(pos[other])} (page_table shares that page; give each sequence its "
                         "own pages past its cache_seqlens)")


def check_lengths(where: str, lengths: np.ndarray, seq_new: int, capacity: int, reach: str) -> None:
    """ValueError naming the first sequence b whose cache_seqlens[b] is negative, or which with the seq_new
    appended tokens would pass the `capacity` rows its page table (or its row of a contiguous cache) reaches:
    the kernel would read, and the append write, rows that are not the sequence's."""
    ends = lengths.astype(np.int64) + seq_new
    check_interval(where, lambda b: f"cache_seqlens[{b}]", ends, seq_new, capacity,
                   f"the rows the page table or cache reaches ({reach})",
                   shown=lambda b: f"{int(lengths[b])} (+ seq_new = {seq_new})")


def append_to_cache(k_cache, v_cache, k_new, v_new, page_table, cache_seqlens) -> None:
    """Write k_new/v_new [batch, seq_new, heads_k, D] into the paged caches at positions cache_seqlens[b] + i
    (row (pos mod page_size) of page page_table[b, pos // page_size]), in place."""
    batch, seq_new = k_new.shape[0], k_new.shape[1]
    page_size = k_cache.shape[1]
    lib = _lib(k_cache)
    if lib is np:
        pos = np.asarray(cache_seqlens, np.int64)[:, None] + np.arange(seq_new)[None, :]
        pages = np.asarray(page_table)[np.arange(batch)[:, None], pos // page_size]
        k_cache[pages, pos % page_size] = k_new
        v_cache[pages, pos % page_size] = v_new
    else:
        pos = cache_seqlens.long()[:, None] + lib.arange(seq_new, device=k_cache.device)[None, :]
        pages = page_table.long()[lib.arange(batch, device=k_cache.device)[:, None], pos // page_size]
        k_cache[pages, pos % page_size] = k_new
        v_cache[pages, pos % page_size] = v_new


def check_writable(where: str, k_cache, v_cache) -> None:
    """ValueError unless both caches take k_new/v_new in place, checked before either is written: NumPy arrays
    that are writable (not a `np.broadcast_to` view or a read-only buffer), and two caches that share no memory
    (one array passed twice, or two views of one buffer, would have v_new's rows overwrite k_new's)."""
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if isinstance(cache, np.ndarray) and not cache.flags.writeable:
            raise ValueError(f"{where}: k_new and v_new are appended to the caches in place, but {name} is "
                             "read-only (pass a writable array, e.g. np.array(...) of it)")
    if _share_memory(k_cache, v_cache):
        raise ValueError(f"{where}: k_new and v_new are appended to the caches in place, but k_cache and v_cache "
                         "share memory (v_new would overwrite the keys appended): pass two separate caches")


def _share_memory(a, b) -> bool:
    """Whether arrays `a` and `b` (NumPy, or torch tensors) may overlap in memory."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.may_share_memory(a, b))
    if is_torch(a) and is_torch(b):
        start_a, start_b = a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr()
        return start_a == start_b or (start_a < start_b + b.untyped_storage().nbytes()
                                      and start_b < start_a + a.untyped_storage().nbytes())
    return False


@no_backward("attention_with_kvcache")
def attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=None, page_table=None, k_new=None, v_new=None,
                           causal: bool = False, scale: float | None = None, num_splits: int | str = 1,
                           return_lse: bool = False, level=None):
    """Attention of q against a (paged) KV cache, appending k_new/v_new first; see the module docstring."""
    where = "attention_with_kvcache"
    check_level(where, level)
    (q_shape,) = check_values(where, ("q",), (q,), 4, "[batch, seq_q, heads, head_dim]", packed=False)
    cache_layout = "[num_pages, page_size, heads_k, head_dim]" if page_table is not None else \
        "[batch, seqlen_cache, heads_k, head_dim]"
    kc_shape, vc_shape = check_values(where, ("k_cache", "v_cache"), (k_cache, v_cache), 4, cache_layout,
                                      packed=False)
    if kc_shape != vc_shape:
        raise ValueError(f"{where}: k_cache and v_cache must have one shape {cache_layout}, got {kc_shape} and {vc_shape}")
    batch, seq_q, heads, head_dim = q_shape
    if kc_shape[3] != head_dim:
        raise ValueError(f"{where}: q and k_cache must have the same head_dim, got {head_dim} and {kc_shape[3]}")
    check_head_dim(where, head_dim)
    heads_k = kc_shape[2]
    check_groups(where, heads, heads_k, "q", "k_cache")
    arrays = {"q": q, "k_cache": k_cache, "v_cache": v_cache}
    if (k_new is None) != (v_new is None):
        raise ValueError(f"{where}: k_new and v_new are given together or not at all")
    seq_new = 0
    if k_new is not None:
        kn_shape, vn_shape = check_values(where, ("k_new", "v_new"), (k_new, v_new), 4,
                                          "[batch, seq_new, heads_k, head_dim]")
        if kn_shape != vn_shape or kn_shape[0] != batch or kn_shape[2:] != (heads_k, head_dim):
            raise ValueError(f"{where}: k_new and v_new must be [batch={batch}, seq_new, heads_k={heads_k}, "
                             f"head_dim={head_dim}], got {kn_shape} and {vn_shape}")
        seq_new = kn_shape[1]
        arrays.update(k_new=k_new, v_new=v_new)
    dtype = element_type(where, arrays)
    check_one_kind(where, {**arrays, "cache_seqlens": cache_seqlens if hasattr(cache_seqlens, "shape") else None,
                           "page_table": page_table})

    lib = _lib(q)
    if page_table is None:
        if kc_shape[0] != batch:
            raise ValueError(f"{where}: without page_table, k_cache is [batch={batch}, seqlen_cache, heads_k, "
                             f"head_dim], got {kc_shape}")
        # One page a sequence: [batch, seqlen_cache, heads_k, D] is already [num_pages, page_size, heads_k, D].
        pages_k, pages_v, page_size = k_cache, v_cache, kc_shape[1]
        table = np.arange(batch, dtype=np.int32).reshape(batch, 1)
        table = lib.from_numpy(table).to(q.device) if lib is not np else table
        capacity = kc_shape[1]
    else:
        table_values = check_table(where, "page_table", page_table, batch, rank=2)
        if int(page_table.shape[1]) == 0:
            raise ValueError(f"{where}: page_table has no column: shape {tuple(page_table.shape)} (each sequence "
                             "needs a page, even an empty one)")
        pages_k, pages_v, table, page_size = k_cache, v_cache, page_table, kc_shape[1]
        from tessera.kernels.attention_paged import paged_copy

        try:
            paged_copy(head_dim, page_size)
        except ValueError as error:
            raise ValueError(f"{where}: k_cache's page_size: {error}") from None
        capacity = int(page_table.shape[1]) * page_size

    if cache_seqlens is None:
        cache_seqlens = np.full(batch, capacity - seq_new, np.int32)
        cache_seqlens = lib.from_numpy(cache_seqlens).to(q.device) if lib is not np else cache_seqlens
    elif isinstance(cache_seqlens, int | np.integer) and not isinstance(cache_seqlens, bool):
        cache_seqlens = np.full(batch, int(cache_seqlens), np.int32)
        cache_seqlens = lib.from_numpy(cache_seqlens).to(q.device) if lib is not np else cache_seqlens
    lengths = check_table(where, "cache_seqlens", cache_seqlens, batch)
    if lengths is not None:
        reach = f"{page_table.shape[1]} pages of {page_size} rows" if page_table is not None else "the cache's rows"
        check_lengths(where, lengths, seq_new, capacity, reach)

    if page_table is not None and table_values is not None:
        ends = None if lengths is None else lengths.astype(np.int64) + seq_new
        check_pages(where, table_values, ends, page_size, kc_shape[0], "page_table", "k_cache")
    if page_table is not None and seq_new and table_values is not None and lengths is not None:
        check_appends(where, table_values, lengths, seq_new, page_size)

    if not isinstance(return_lse, bool):
        raise ValueError(f"{where}: return_lse must be True or False; got {return_lse!r}")
    from tessera.kernels import AttentionConfig
    from tessera.runtime.attention_plan import auto_for_zero, resolve_num_splits

    group = heads // heads_k
    packed = pack_gqa(seq_q, group, causal)
    rows, q_heads = (group * seq_q, heads_k) if packed else (seq_q, heads)
    longest = capacity if lengths is None or not lengths.size else int(lengths.max()) + seq_new
    splits = resolve_num_splits(auto_for_zero(num_splits), batch, q_heads, rows, max(longest, 1), head_dim, causal,
                                where)
    checked = AttentionConfig.checked(head_dim, causal, dtype, scale, return_lse=return_lse, num_splits=splits)

    from tessera.kernels.attention_paged import cache_row_axis, paged_copy

    copy = paged_copy(head_dim, page_size)
    if copy == "cp.async":
        from tessera.passes.convert_tile_to_sm90.serving import CHUNK, GATHER_CHUNK_LIMIT

        chunks = int(np.prod(kc_shape)) * (2 if dtype in ("bf16", "f16") else 4) // CHUNK
        if chunks > GATHER_CHUNK_LIMIT:
            raise ValueError(f"{where}: k_cache holds {chunks} 16-byte chunks; the gather of pages of {page_size} "
                             f"rows numbers them in 32 bits (at most {GATHER_CHUNK_LIMIT})")

    if k_new is not None:
        check_writable(where, k_cache, v_cache)
        if level is None:  # a call refused for want of a GPU leaves the caches as they were
            from tessera.runtime.launch import usable_device

            usable_device(list(arrays.values()))
        append_to_cache(pages_k, pages_v, k_new, v_new, table, cache_seqlens)
        cache_seqlens = cache_seqlens + seq_new

    # Q head-major: [heads_k, batch, group, seq_q, D] flattened to [q_heads, batch * rows, D].
    if packed:
        q5 = q.reshape(batch, seq_q, heads_k, group, head_dim)
        qk = q5.transpose(2, 0, 3, 1, 4) if lib is np else q5.permute(2, 0, 3, 1, 4)
    else:
        qk = q.transpose(2, 0, 1, 3) if lib is np else q.permute(2, 0, 1, 3)
    qk = qk.reshape(q_heads, batch * rows, head_dim)
    starts = np.arange(batch, dtype=np.int32) * rows
    starts_t = lib.from_numpy(starts).to(q.device) if lib is not np else starts
    ends_t = starts_t + rows
    if copy == "tma":  # [num_pages, heads_k, page_size, D], a view: a tensor map reads it through its strides
        cache_k = pages_k.transpose(0, 2, 1, 3) if lib is np else pages_k.transpose(1, 2)
        cache_v = pages_v.transpose(0, 2, 1, 3) if lib is np else pages_v.transpose(1, 2)
    else:  # the gather reads FlashAttention's own layout through a pointer
        cache_k, cache_v = pages_k, pages_v
    options = {"head_dim": head_dim, "causal": checked.causal and not (packed and seq_q == 1), "dtype": dtype,
               "scale": checked.scale, "page_size": page_size}
    inputs = [qk, cache_k, cache_v, starts_t, ends_t, table, cache_seqlens]
    o, lse = run_packed(where, "flash_attention_paged", options, inputs, (q_heads, batch * rows, head_dim), starts,
                        starts + rows, rows, splits, return_lse, level, ("K", "V"), row_axis=cache_row_axis(copy),
                        pages=int(pages_k.shape[0]))
    # Back to [batch, seq_q, heads, D] (and the LSE to [batch, heads, seq_q]).
    if packed:
        o5 = o.reshape(heads_k, batch, group, seq_q, head_dim)
        o = o5.transpose(1, 3, 0, 2, 4) if lib is np else o5.permute(1, 3, 0, 2, 4)
    else:
        o4 = o.reshape(heads, batch, seq_q, head_dim)
        o = o4.transpose(1, 2, 0, 3) if lib is np else o4.permute(1, 2, 0, 3)
    o = np.ascontiguousarray(o.reshape(batch, seq_q, heads, head_dim)) if lib is np else \
        o.reshape(batch, seq_q, heads, head_dim).contiguous()
    if not return_lse:
        return o
    lse4 = lse.reshape(q_heads, batch, rows // seq_q, seq_q)  # [heads_k, batch, group, seq_q] when packed
    lse4 = lse4.transpose(1, 0, 2, 3) if lib is np else lse4.permute(1, 0, 2, 3)
    lse = lse4.reshape(batch, heads, seq_q)
    return o, (np.ascontiguousarray(lse) if lib is np else lse.contiguous())


__all__ = ["attention_with_kvcache", "append_to_cache", "check_writable", "pack_gqa"]
