"""Attention for serving (issue 15): grouped heads (GQA/MQA, PackGQA), packed variable-length batches and a paged
KV cache, with split-KV and the LSE, at the Tile level on FlashAttention-3's grid and at the Target and PTX
levels on a slice; the packed kernels' grid of max_seqlen_q query blocks per sequence; the serving checks of
every simulator fire on seeded bugs; ptxas assembles the kernels cleanly. The grid's long shape (16, 20000)
and head_dim 256 with every heads_k run in `bench/decode.py --grid` and `--splits`."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference, reference_attention
from tessera.dialects import tile
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.serving_checks import PagedCache, SequenceRows, checking
from tessera.kernels import flash_attention, flash_attention_paged, flash_attention_varlen
from tessera.runtime.kvcache import attention_with_kvcache, pack_gqa
from tessera.toolchain import compile_ptx

from conftest import build_kernel


def trusting_launches(module):
    """`module` with its kernel's declarations of what a launch may give it removed (`tile.tables`: its index
    tables; `tile.divisible`: the TMA paged kernel's page_size): such a kernel is launched on any values, so the
    simulators' own serving checks are what catches a bad one."""
    from tessera.index_tables import TABLES_ATTR
    from tessera.kernel_abi import DIVISIBLE_ATTR, kernels

    module = module.clone()
    for fn in kernels(module):
        for declared in (TABLES_ATTR, DIVISIBLE_ATTR):
            fn.attributes.pop(declared, None)
    return module

BF16 = ml_dtypes.bfloat16
FA3_GRID = [(1, 128), (1, 339), (3, 799), (64, 800), (128, 128), (256, 512)]
"""FlashAttention-3's (seq_q, seq_k) test shapes that run in seconds (its (16, 20000) is in the bench)."""
HEADS = 6


def grouped_reference(o, q, k, v, causal: bool):
    """The tolerance rule of `reference.check_attention` for [B, H, S, D] q and [B, H_k, S, D] k, v: key head
    h // (H // H_k) for query head h."""
    group = q.shape[1] // k.shape[1]
    return reference.check_attention(o, q, np.repeat(k, group, 1), np.repeat(v, group, 1), BF16, causal=causal)


def bf16(rng, *shape):
    return rng.standard_normal(shape).astype(BF16)


# region grouped heads


GROUPED = [(64, 6), (64, 2), (64, 1), (128, 2)]
"""(head_dim, heads_k): MHA, GQA and MQA at head_dim 64; GQA at 128 (the suite's time; bench/decode.py --grid
runs every pair)."""


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim,heads_k", GROUPED)
def test_grouped_heads_on_the_fa3_grid(head_dim, heads_k, causal, rng):
    """Query head h reads key head h // (heads // heads_k), for MHA (6), GQA (2) and MQA (1)."""
    module = build_kernel("flash_attention", head_dim=head_dim, causal=causal, grouped=True)
    for seq_q, seq_k in FA3_GRID:
        q = rng.standard_normal((1, HEADS, seq_q, head_dim))
        k, v = (rng.standard_normal((1, heads_k, seq_k, head_dim)) for _ in range(2))
        out = tessera.interpret(module, q, k, v)
        comparison = grouped_reference(out, q, k, v, causal)
        assert comparison.ok, f"({seq_q}, {seq_k}): {comparison}"


def test_pack_gqa_rule():
    """Pack while a block's 128 rows hold the group's rows, and never causal prefill (masks need positions)."""
    assert pack_gqa(1, 6, causal=True) and pack_gqa(3, 3, causal=False) and pack_gqa(64, 2, causal=False)
    assert not pack_gqa(3, 3, causal=True) and not pack_gqa(1, 1, causal=False) and not pack_gqa(65, 2, False)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("heads_k", [2, 1])
def test_packed_decoding_matches_the_reference(heads_k, causal, rng):
    """Decoding shapes through attention_with_kvcache, whose PackGQA puts a group's query heads in one block."""
    for seq_q, seq_k in [(1, 128), (1, 339), (3, 799)]:
        k_cache, v_cache = (bf16(rng, 2, 800, heads_k, 64) for _ in range(2))
        q = bf16(rng, 2, seq_q, HEADS, 64)
        out = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=seq_k, causal=causal, level="tile")
        ks, vs = (c[:, :seq_k].transpose(0, 2, 1, 3) for c in (k_cache, v_cache))
        comparison = grouped_reference(out.transpose(0, 2, 1, 3), q.transpose(0, 2, 1, 3), ks, vs, causal)
        assert comparison.ok, f"({seq_q}, {seq_k}): {comparison}"


# endregion
# region varlen


def cu_seqlens(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def check_varlen(out, q, k, v, lengths_q, lengths_k, causal, used=None):
    """Each sequence of a packed result against its own reference; sequences without a key give zeros."""
    cq, ck = cu_seqlens(lengths_q), cu_seqlens(lengths_k)
    for b in range(len(lengths_q)):
        rows = slice(cq[b], cq[b + 1])
        end = ck[b] + (lengths_k[b] if used is None else used[b])
        keys = slice(ck[b], end)
        if cq[b + 1] == cq[b]:
            continue
        if end == ck[b]:
            assert np.all(out[rows].astype(np.float32) == 0)
            continue
        head_major = [x.transpose(1, 0, 2)[None] for x in (out[rows], q[rows], k[keys], v[keys])]
        comparison = grouped_reference(*head_major, causal)
        assert comparison.ok, f"sequence {b}: {comparison}"


VARLEN = ([0, 1, 130, 5, 77], [3, 1, 200, 0, 300])
"""Lengths 0 and 1, one past a block, none a multiple of one; a sequence without keys."""


@pytest.mark.parametrize("head_dim,heads_k,causal", [(64, 2, False), (128, 1, True), (64, 6, True)])
def test_varlen_sequences_attend_to_their_own_keys(head_dim, heads_k, causal, rng):
    lengths_q, lengths_k = VARLEN
    q = bf16(rng, sum(lengths_q), HEADS, head_dim)
    k, v = (bf16(rng, sum(lengths_k), heads_k, head_dim) for _ in range(2))
    out = tessera.attention(q, k, v, causal=causal, cu_seqlens_q=cu_seqlens(lengths_q),
                            cu_seqlens_k=cu_seqlens(lengths_k), max_seqlen_q=130, max_seqlen_k=300, level="tile")
    assert out.shape == q.shape and out.dtype == BF16
    check_varlen(out, q, k, v, lengths_q, lengths_k, causal)


def test_varlen_without_queries_or_keys_launches_nothing(rng):
    q, k = bf16(rng, 3, 2, 64), np.zeros((0, 1, 64), BF16)
    empty = np.array([0, 0, 0], np.int32)
    out = tessera.attention(q, k, k, cu_seqlens_q=np.array([0, 1, 3], np.int32), cu_seqlens_k=empty,
                            max_seqlen_q=2, max_seqlen_k=0, level="tile")
    assert out.shape == q.shape and np.all(out.astype(np.float32) == 0)
    none = tessera.attention(q[:0], q, q, cu_seqlens_q=empty, cu_seqlens_k=np.array([0, 1, 3], np.int32),
                             max_seqlen_q=0, max_seqlen_k=2, level="tile")
    assert none.shape == (0, 2, 64)


def test_varlen_seqused_k_limits_the_keys(rng):
    lengths_q, lengths_k, used = [2, 9], [50, 140], np.array([0, 129], np.int32)
    q = bf16(rng, 11, 2, 64)
    k, v = (bf16(rng, 190, 1, 64) for _ in range(2))
    out = tessera.attention(q, k, v, cu_seqlens_q=cu_seqlens(lengths_q), cu_seqlens_k=cu_seqlens(lengths_k),
                            max_seqlen_q=9, max_seqlen_k=140, seqused_k=used, level="tile")
    check_varlen(out, q, k, v, lengths_q, lengths_k, False, used)


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_varlen_at_target_and_ptx_level(level, rng):
    lengths_q, lengths_k = [0, 1, 70, 5], [3, 1, 150, 7]
    q = bf16(rng, sum(lengths_q), 2, 64)
    k, v = (bf16(rng, sum(lengths_k), 1, 64) for _ in range(2))
    out = tessera.attention(q, k, v, causal=True, cu_seqlens_q=cu_seqlens(lengths_q),
                            cu_seqlens_k=cu_seqlens(lengths_k), max_seqlen_q=70, max_seqlen_k=150, level=level)
    check_varlen(out, q, k, v, lengths_q, lengths_k, True)


# endregion
# region paged KV cache


def paged_cache(rng, lengths, page_size, heads_k, head_dim, spare=0):
    """A cache of 3x the pages the sequences need (plus `spare` tokens each), pages in a random permutation."""
    need = [-(-(n + spare) // page_size) for n in lengths]
    pages = 3 * sum(need)
    order = iter(rng.permutation(pages))
    table = np.zeros((len(lengths), max(need)), np.int32)
    for b, n in enumerate(need):
        table[b, :n] = [next(order) for _ in range(n)]
    k_cache, v_cache = (bf16(rng, pages, page_size, heads_k, head_dim) for _ in range(2))
    return k_cache, v_cache, table


def cache_rows(cache, table, b, length):
    page_size = cache.shape[1]
    rows = (table[b, np.arange(length) // page_size] * page_size + np.arange(length) % page_size)
    return cache.reshape(-1, *cache.shape[2:])[rows]


def check_paged(out, q, k_cache, v_cache, table, lengths, causal):
    for b, length in enumerate(lengths):
        ks, vs = (cache_rows(c, table, b, length).transpose(1, 0, 2)[None] for c in (k_cache, v_cache))
        comparison = grouped_reference(out[b].transpose(1, 0, 2)[None], q[b].transpose(1, 0, 2)[None], ks, vs, causal)
        assert comparison.ok, f"sequence {b}: {comparison}"


@pytest.mark.parametrize("page_size,seq_q,causal", [(16, 1, True), (128, 3, True), (256, 2, False), (16, 3, False)])
def test_paged_cache_through_a_permuted_page_table(page_size, seq_q, causal, rng):
    lengths = [1, 339, 200]
    k_cache, v_cache, table = paged_cache(rng, lengths, page_size, 2, 64)
    q = bf16(rng, len(lengths), seq_q, HEADS, 64)
    out = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array(lengths, np.int32), page_table=table,
                                 causal=causal, level="tile")
    assert out.shape == q.shape and out.dtype == BF16
    check_paged(out, q, k_cache, v_cache, table, lengths, causal)


def test_appending_new_keys_writes_the_cache_through_the_page_table(rng):
    lengths, new = [5, 120], 3
    k_cache, v_cache, table = paged_cache(rng, lengths, 16, 1, 128, spare=new)
    before = k_cache.copy()
    k_new, v_new = (bf16(rng, 2, new, 1, 128) for _ in range(2))
    q = bf16(rng, 2, new, 4, 128)
    out = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array(lengths, np.int32), page_table=table,
                                 k_new=k_new, v_new=v_new, causal=True, level="tile")
    for b, length in enumerate(lengths):
        np.testing.assert_array_equal(cache_rows(k_cache, table, b, length + new)[length:], k_new[b])
        np.testing.assert_array_equal(cache_rows(k_cache, table, b, length), cache_rows(before, table, b, length))
    check_paged(out, q, k_cache, v_cache, table, [n + new for n in lengths], True)


@pytest.mark.parametrize("level,page_size", [("target", 128), ("ptx", 16)])
def test_paged_at_target_and_ptx_level(level, page_size, rng):
    lengths = [1, 150]
    k_cache, v_cache, table = paged_cache(rng, lengths, page_size, 1, 64)
    q = bf16(rng, 2, 1, 2, 64)
    out = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array(lengths, np.int32), page_table=table,
                                 causal=True, level=level)
    check_paged(out, q, k_cache, v_cache, table, lengths, True)


@pytest.mark.parametrize("seqlen_cache,level", [(400, "tile"), (1001, "tile"), (256, "tile"), (37, "ptx"),
                                                (128, "target")])
def test_contiguous_cache_without_a_page_table(seqlen_cache, level, rng):
    """One page a sequence: a length that is a multiple of the key block is read by TMA, any other (odd ones
    too) by the gather."""
    k_cache, v_cache = (bf16(rng, 2, seqlen_cache, 2, 64) for _ in range(2))
    q = bf16(rng, 2, 1, 4, 64)
    lengths = np.array([7, seqlen_cache], np.int32)
    out = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, level=level)
    for b, length in enumerate(lengths):
        ks, vs = (c[b, :length].transpose(1, 0, 2)[None] for c in (k_cache, v_cache))
        assert grouped_reference(out[b].transpose(1, 0, 2)[None], q[b].transpose(1, 0, 2)[None], ks, vs, False).ok


# endregion
# region serving checks on seeded bugs

LEVELS = ["tile", "target", "ptx"]


def unbounded_store(module):
    """The varlen kernel with its bounded store replaced by a plain tile.store_global (a seeded bug: the last
    block of a sequence writes its whole 128-row window, into the next sequence)."""
    module = module.clone()
    store = next(op for op in module.walk() if isinstance(op, tile.StoreGlobalRowsOp))
    store.parent_block().insert_op_before(tile.StoreGlobalOp(store.value, store.dest), store)
    store.detach()
    store.erase()
    return module


@pytest.mark.parametrize("level", LEVELS)
def test_a_store_past_the_sequence_end_is_reported(level, rng):
    lengths = [3, 5]
    cq = cu_seqlens(lengths)
    q, k, v = (rng.standard_normal((1, 8, 64)) for _ in range(3))
    tables = [cq[:-1], cq[1:], cq[:-1], np.diff(cq).astype(np.int32)]
    module = unbounded_store(build_kernel("flash_attention_varlen", head_dim=64))
    with checking(SequenceRows("O", 1, cq[:-1], cq[1:], (1, 8, 64), 2)):
        if level == "tile":  # the right kernel passes the check (at every level: the varlen tests run under it)
            tessera.interpret(build_kernel("flash_attention_varlen", head_dim=64), q, k, v, *tables, level=level,
                              max_seqlen_q=5)
        with pytest.raises(Exception, match=r"writes row \d+ of %O, outside its sequence 0's rows \[0, 3\)"):
            tessera.interpret(module, q, k, v, *tables, level=level, max_seqlen_q=5)


def paged_inputs(rng, page_size, table):
    q = rng.standard_normal((1, 1, 64))
    k, v = (rng.standard_normal((4, 1, page_size, 64)) for _ in range(2))
    return [q, k, v, np.array([0], np.int32), np.array([1], np.int32), np.array(table, np.int32),
            np.array([page_size * len(table[0])], np.int32)]


@pytest.mark.parametrize("level", LEVELS)
def test_a_box_across_a_page_boundary_is_reported(level, rng):
    """A kernel built for pages of 128 rows run on pages of 64: each 128-row box crosses into the next page. A
    launch of the kernel as built refuses the page_size first (test_unseen_tables.py)."""
    module = trusting_launches(build_kernel("flash_attention_paged", head_dim=64, page_size=128))
    with checking(PagedCache("K"), PagedCache("V")):
        with pytest.raises(Exception, match=r"rows \[0, 128\) of page 2 of %[KV] crosses a page boundary \(page_size 64\)"):
            tessera.interpret(module, *paged_inputs(rng, 64, [[2, 3]]), level=level, max_seqlen_q=1)


@pytest.mark.parametrize("level", ["tile", "ptx"])
def test_a_page_table_entry_out_of_range_is_reported(level, rng):
    """The TMA path (pages of 128); the gather's is in test_paged_gather.py. A launch of the kernel as built refuses
    the table first (test_unseen_tables.py)."""
    module = trusting_launches(build_kernel("flash_attention_paged", head_dim=64, page_size=128))
    with checking(PagedCache("K"), PagedCache("V")):
        with pytest.raises(Exception, match=r"page-table entry 9 of %[KV] is out of range \[0, 4\)"):
            tessera.interpret(module, *paged_inputs(rng, 128, [[1, 9]]), level=level, max_seqlen_q=1)


def test_a_table_read_outside_the_table_is_reported(rng):
    module = build_kernel("flash_attention_varlen", head_dim=64)
    q, k, v = (rng.standard_normal((1, 8, 64)) for _ in range(3))
    with pytest.raises(KernelHazardError, match=r"tile.load_index.*reads element \[1\] of a table of shape \[1\]"):
        from tessera.interpreters.launch import prepare_arguments, run_grid

        sig = tessera.find_kernel(module)
        arguments, sizes = prepare_arguments(sig, [q, k, v, *(np.array([0], np.int32),) * 4], {"max_seqlen_q": 8})
        sizes["batch"] = 2  # a launch over more sequences than the tables hold
        run_grid(sig, module, arguments, sizes)


# endregion
# region API checks


def varlen_args(**changes):
    q = np.zeros((9, 4, 64), BF16)
    k = np.zeros((12, 2, 64), BF16)
    args = dict(q=q, k=k, v=k.copy(), cu_seqlens_q=np.array([0, 4, 9], np.int32),
                cu_seqlens_k=np.array([0, 2, 12], np.int32), max_seqlen_q=5, max_seqlen_k=10)
    args.update(changes)
    return args


@pytest.mark.parametrize("changes,error,message", [
    ({"k": np.zeros((12, 3, 64), BF16), "v": np.zeros((12, 3, 64), BF16)}, ValueError, r"heads of q \(4\) must be a multiple of the heads of k \(3\)"),
    ({"v": np.zeros((11, 2, 64), BF16)}, ValueError, "k and v must have one shape"),
    ({"q": np.zeros((9, 4, 96), BF16)}, ValueError, "q and k must have the same head_dim"),
    ({"q": np.zeros((9, 4, 64), np.float16)}, ValueError, "one element type, got q float16"),
    ({"cu_seqlens_q": np.array([0, 4, 9], np.int64)}, ValueError, "cu_seqlens_q must hold int32, got int64"),
    ({"cu_seqlens_q": np.array([0, 5, 4], np.int32)}, ValueError, r"cu_seqlens_q\[2\] = 4 must lie in \[5, 9\]"),
    ({"cu_seqlens_q": np.array([0, 4, 10], np.int32)}, ValueError, r"cu_seqlens_q\[2\] = 10 must lie in \[4, 9\], .*within the 9 packed rows"),
    ({"cu_seqlens_k": np.array([0, 12], np.int32)}, ValueError, "cu_seqlens_k must have 3 entries"),
    ({"max_seqlen_k": 9}, ValueError, r"max_seqlen_k = 9 is smaller than the longest sequence \(10\)"),
    ({"max_seqlen_q": -1}, ValueError, "max_seqlen_q must be an int >= 0"),
    ({"seqused_k": np.array([3, 1], np.int32)}, ValueError, r"seqused_k\[0\] = 3 must lie in \[0, 2\], between 0 and sequence 0's length"),
    ({"q": np.zeros((9, 64), BF16)}, ValueError, r"q must be 3-D \[total_tokens, heads, head_dim\]"),
    ({"max_seqlen_q": 4}, ValueError, r"max_seqlen_q = 4 is smaller than the longest sequence \(5\)"),
    ({"max_seqlen_q": 5.0}, ValueError, "max_seqlen_q must be an int >= 0"),
    ({"num_splits": -1}, ValueError, "num_splits must be an integer from 1 to 256; got -1"),
    ({"num_splits": 257}, ValueError, "num_splits must be an integer from 1 to 256; got 257"),
    ({"num_splits": "many"}, ValueError, "num_splits must be an integer or \"auto\"; got 'many'"),
    ({"num_splits": 2.0}, ValueError, "num_splits must be an integer from 1 to 256; got 2.0"),
    ({"return_lse": 1}, ValueError, "return_lse must be True or False; got 1"),
    ({"q": np.zeros((9, 4, 256), BF16), "k": np.zeros((12, 2, 256), BF16), "v": np.zeros((12, 2, 256), BF16),
      "num_splits": 2}, ValueError, r"num_splits > 1 \(split-KV\) supports head_dim 64, 96, 128, 192"),
])
def test_varlen_refuses_bad_arguments_by_name(changes, error, message):
    with pytest.raises(error, match=message):
        tessera.attention(**varlen_args(**changes), level="tile")


def kv_args(**changes):
    args = dict(q=np.zeros((2, 1, 4, 64), BF16), k_cache=np.zeros((6, 16, 2, 64), BF16),
                v_cache=np.zeros((6, 16, 2, 64), BF16), cache_seqlens=np.array([3, 20], np.int32),
                page_table=np.array([[0, 1], [2, 3]], np.int32))
    args.update(changes)
    return args


@pytest.mark.parametrize("changes,error,message", [
    ({"q": np.zeros((2, 1, 3, 64), BF16)}, ValueError, r"heads of q \(3\) must be a multiple of the heads of k_cache"),
    ({"v_cache": np.zeros((6, 16, 2, 128), BF16)}, ValueError, "k_cache and v_cache must have one shape"),
    ({"k_cache": np.zeros((6, 0, 2, 64), BF16), "v_cache": np.zeros((6, 0, 2, 64), BF16)}, ValueError,
     r"k_cache has an empty dimension: shape \(6, 0, 2, 64\)"),
    ({"page_table": np.array([[0, 1], [2, 6]], np.int32)}, ValueError, "page_table holds page 6, outside the 6 pages"),
    ({"page_table": np.array([[0, 1]], np.int32)}, ValueError, "page_table must have 2 entries"),
    ({"cache_seqlens": np.array([3, 33], np.int32)}, ValueError, r"cache_seqlens\[1\] = 33 \(\+ seq_new = 0\) must lie in \[0, 32\], the rows the page table or cache reaches \(2 pages of 16 rows\)"),
    ({"cache_seqlens": np.array([3, 20], np.float32)}, ValueError, "cache_seqlens must hold int32, got float32"),
    ({"k_new": np.zeros((2, 1, 2, 64), BF16)}, ValueError, "k_new and v_new are given together"),
    ({"k_new": np.zeros((2, 1, 1, 64), BF16), "v_new": np.zeros((2, 1, 1, 64), BF16)}, ValueError,
     r"k_new and v_new must be \[batch=2, seq_new, heads_k=2"),
    ({"q": np.zeros((2, 1, 4, 64), np.float32)}, ValueError, "one element type"),
    ({"page_table": None}, ValueError, r"without page_table, k_cache is \[batch=2"),
    ({"num_splits": -1}, ValueError, "attention_with_kvcache: num_splits must be an integer from 1 to 256; got -1"),
    ({"num_splits": "max"}, ValueError, "attention_with_kvcache: num_splits must be an integer or \"auto\""),
    ({"num_splits": True}, ValueError, "attention_with_kvcache: num_splits must be an integer from 1 to 256"),
    ({"return_lse": "yes"}, ValueError, "attention_with_kvcache: return_lse must be True or False"),
    ({"q": np.zeros((2, 1, 4, 256), BF16), "k_cache": np.zeros((6, 16, 2, 256), BF16),
      "v_cache": np.zeros((6, 16, 2, 256), BF16), "num_splits": 3}, ValueError,
     r"num_splits > 1 \(split-KV\) supports head_dim 64, 96, 128, 192"),
])
def test_kvcache_refuses_bad_arguments_by_name(changes, error, message):
    with pytest.raises(error, match=message):
        attention_with_kvcache(**kv_args(**changes), level="tile")


def test_level_is_checked_and_none_needs_a_gpu():
    with pytest.raises(ValueError, match="level must be None"):
        attention_with_kvcache(**kv_args(), level="gpu")
    from tessera.runtime import CudaUnavailable
    from tessera.runtime.launch import usable_device

    try:
        usable_device([])
    except CudaUnavailable:
        with pytest.raises(CudaUnavailable):
            attention_with_kvcache(**kv_args())


# endregion
# region ptxas and the GPU launch's host side

PTXAS_KERNELS = [
    ("flash_attention_varlen", dict(head_dim=128, causal=True)),
    ("flash_attention_paged", dict(head_dim=64, page_size=16, causal=True)),
    ("flash_attention_varlen", dict(head_dim=128, causal=True, num_splits=3)),
    ("flash_attention_varlen", dict(head_dim=64, return_lse=True)),
    ("flash_attention_paged", dict(head_dim=128, page_size=128, causal=True, num_splits=3)),
    ("flash_attention_paged", dict(head_dim=64, page_size=16, return_lse=True)),
    ("flash_attention_paged", dict(head_dim=128, page_size=16, causal=True, num_splits=3)),
]


@pytest.mark.parametrize("variant,config", PTXAS_KERNELS, ids=[f"{v}-{'-'.join(map(str, c.values()))}" for v, c in PTXAS_KERNELS])
def test_ptxas_assembles_the_serving_kernels_cleanly(variant, config):
    """No warning, diagnostic, spill or stack frame (a slice: `bench/decode.py --ptxas` assembles the grouped,
    varlen and paged kernels at head_dim 64/128/256, causal or not, with every ptxas found)."""
    result = compile_ptx(tessera.compile(build_kernel(variant, **config)))
    entry = result.entry()
    assert not result.warnings and not result.log.diagnostics
    assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0
    assert entry.registers <= 255


def test_the_gpu_launch_takes_the_tables_and_a_strided_cache():
    """The runtime's host-side checks (tensor maps, sizes, grid) accept the paged kernel's inputs as
    attention_with_kvcache passes them: int32 tables and the cache as a transposed view (a PyTorch CUDA view
    is then read through its strides, `tessera.runtime.tensor_maps`; NumPy inputs are copied to the device)."""
    from tessera.runtime.compiler import KernelConfig, compile_kernel
    from tessera.runtime.launch import check_inputs

    kernel = compile_kernel(KernelConfig.of("flash_attention_paged", head_dim=64, causal=False, dtype="bf16",
                                            scale=0.125, page_size=128))
    cache = np.zeros((6, 128, 2, 64), BF16)
    inputs = [np.zeros((2, 3, 64), BF16), cache.transpose(0, 2, 1, 3), cache.transpose(0, 2, 1, 3),
              np.array([0, 1], np.int32), np.array([1, 3], np.int32), np.array([[0, 1], [2, 3]], np.int32),
              np.array([3, 20], np.int32)]
    sizes, _ = check_inputs(kernel.host, inputs, {"max_seqlen_q": 2})
    assert sizes == {"heads": 2, "total_q": 3, "num_pages": 6, "heads_k": 2, "page_size": 128, "batch": 2,
                     "max_pages": 2, "max_seqlen_q": 2}
    from tessera.runtime.launch import launch_shape

    assert launch_shape(kernel.host, sizes)[0] == (1, 2, 2)  # one query block a sequence: max_seqlen_q, not total_q
    with pytest.raises(ValueError, match="needs the launch size max_seqlen_q"):
        check_inputs(kernel.host, inputs)


# endregion


def test_serving_ops_print_and_parse_back_at_both_levels():
    """tile.load_index and tile.store_global_rows have custom forms, and their lowering's invariant loads keep
    their marking: the printed text is a fixed point of print(parse(.)) in Tile IR and Target IR."""
    from tessera.ir import parse_module, print_module

    module = build_kernel("flash_attention_paged", head_dim=64, page_size=16, causal=True)
    lowered = tessera.compile(module, target="target")
    for stage in (module, lowered):
        text = print_module(stage)
        assert print_module(parse_module(text, "serving.mlir")) == text
    assert "tile.store_global_rows" in print_module(module)
    assert "{sm90.invariant}" in print_module(lowered)


@pytest.mark.parametrize("seq_q,num_splits,causal", [(1, 3, True), (3, 2, True)])
def test_dense_gqa_with_split_kv_and_lse(seq_q, num_splits, causal, rng):
    """tessera.attention with grouped heads beside split-KV and the LSE: decoding is packed (PackGQA, the LSE
    reshaped back to [batch, heads, seq_q]), causal prefill runs the grouped kernel."""
    q = bf16(rng, 2, HEADS, seq_q, 64)
    k, v = (bf16(rng, 2, 2, 500, 64) for _ in range(2))
    out, lse = tessera.attention(q, k, v, causal=causal, return_lse=True, num_splits=num_splits, level="tile")
    assert out.shape == q.shape and lse.shape == (2, HEADS, seq_q)
    assert grouped_reference(out, q, k, v, causal).ok
    keys = np.repeat(k, 3, 1).astype(np.float64)
    scores = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), keys) / 8
    if causal:
        scores = np.where(reference_attention.causal_visible(seq_q, 500), scores, -np.inf)
    top = scores.max(-1)
    np.testing.assert_allclose(lse, top + np.log(np.exp(scores - top[..., None]).sum(-1)), atol=1e-4)


def test_varlen_decoding_packs_the_group_and_leaves_uncovered_rows_zero(rng, monkeypatch):
    """Decoding (max_seqlen_q 1) with groups of 3: the kernel gets Q as [heads_k, 3 x total_q, D], the group's
    heads in one block's rows; tokens no sequence covers (before cu_seqlens_q[0], after its end) stay 0."""
    from tessera.runtime import serving

    seen = []
    run = serving.run_kernel
    monkeypatch.setattr(serving, "run_kernel", lambda *a: seen.append(a[3][0].shape) or run(*a))
    cq, ck = np.array([1, 2, 2, 3], np.int32), cu_seqlens([40, 1, 300])
    q = bf16(rng, 5, HEADS, 64)
    k, v = (bf16(rng, 341, 2, 64) for _ in range(2))
    out = tessera.attention(q, k, v, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=1,
                            max_seqlen_k=300, level="tile")
    assert seen == [(2, 15, 64)]
    assert np.all(out[[0, 3, 4]].astype(np.float32) == 0)
    for b, (t, keys) in enumerate([(1, slice(0, 40)), (2, slice(41, 341))]):
        head_major = [x.transpose(1, 0, 2)[None] for x in (out[t:t + 1], q[t:t + 1], k[keys], v[keys])]
        assert grouped_reference(*head_major, True).ok


# region split-KV and the LSE with packed sequences and the paged cache

SPLITS = [1, 3, "auto"]


def check_split_results(results, q, k, v, cq, ck, causal):
    """Each num_splits' (o, lse) by `reference.check_packed_attention` (every sequence within the tolerance
    rule, its LSE within 1e-4, O = 0 and LSE = -inf without keys), O = 0 wherever the LSE is -inf (rows that see
    no key), and split 1 and split 3 within the rule's tolerance of each other; returns the worst
    error/tolerance ratios (O, LSE)."""
    worst = [0.0, 0.0]
    checked = {}
    for splits, (o, lse) in results.items():
        checked[splits] = reference.check_packed_attention(o, lse, q, k, v, cq, ck, BF16, causal)
        for b, found in enumerate(checked[splits]):
            if found is not None:
                assert found[0].ok and found[1].ok, f"num_splits={splits}, sequence {b}: O {found[0]}, LSE {found[1]}"
                worst = [max(w, c.max_error / c.tolerance) for w, c in zip(worst, found)]
        assert np.all(o.astype(np.float32)[np.isneginf(lse).T] == 0)
    for b, found in enumerate(checked[1]):
        if found is not None:
            rows = slice(cq[b], cq[b + 1])
            apart = np.abs(results[1][0][rows].astype(np.float64) - results[3][0][rows].astype(np.float64)).max()
            assert apart <= found[0].tolerance, f"sequence {b}: split 1 and 3 differ by {apart}"
    return worst


FA3_SEQUENCES = FA3_GRID + [(0, 7), (1, 0), (5, 2)]
"""The grid's shapes as one packed batch, with a sequence without queries, one without keys and (causal) rows
that see no key."""


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim,heads_k", GROUPED)
def test_varlen_splits_and_lse_on_the_fa3_grid(head_dim, heads_k, causal, rng):
    """tessera.attention over packed sequences with num_splits 1, 3 and "auto" and return_lse: O within the
    tolerance rule, the [heads, total_q] LSE within 1e-4 of float64 logsumexp, -inf and O = 0 for rows that
    see no key, split 1 and split 3 in agreement."""
    lengths_q, lengths_k = zip(*FA3_SEQUENCES)
    cq, ck = cu_seqlens(lengths_q), cu_seqlens(lengths_k)
    q = bf16(rng, cq[-1], HEADS, head_dim)
    k, v = (bf16(rng, ck[-1], heads_k, head_dim) for _ in range(2))
    results = {}
    for splits in SPLITS:
        o, lse = tessera.attention(q, k, v, causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck,
                                   max_seqlen_q=max(lengths_q), max_seqlen_k=max(lengths_k), return_lse=True,
                                   num_splits=splits, level="tile")
        assert o.shape == q.shape and lse.shape == (HEADS, cq[-1]) and lse.dtype == np.float32
        results[splits] = (o, lse)
    check_split_results(results, q, k, v, cq, ck, causal)


@pytest.mark.parametrize("heads_k,causal", [(2, True), (1, False)])
def test_varlen_decoding_splits_pack_the_group(heads_k, causal, rng):
    """Decoding (max_seqlen_q 1, PackGQA) with lengths 0 and 1 and long caches, split and with the LSE; rows
    no sequence covers (before cu_seqlens_q[0], after its end) have O = 0 and LSE = -inf."""
    lengths_k = [128, 339, 0, 799, 1]
    cq = np.array([1, 2, 3, 3, 4, 5], np.int32)  # token 0 and token 5 belong to no sequence
    ck = cu_seqlens(lengths_k)
    q = bf16(rng, 6, HEADS, 64)
    k, v = (bf16(rng, ck[-1], heads_k, 64) for _ in range(2))
    results = {splits: tessera.attention(q, k, v, causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=1,
                                         max_seqlen_k=799, return_lse=True, num_splits=splits, level="tile")
               for splits in SPLITS}
    check_split_results(results, q, k, v, cq, ck, causal)
    for o, lse in results.values():
        assert np.all(o[[0, 5]].astype(np.float32) == 0) and np.all(np.isneginf(lse[:, [0, 5]]))


@pytest.mark.parametrize("page_size,seq_q,heads_k,causal", [(16, 1, 2, True), (128, 3, 1, True), (256, 2, 6, False),
                                                              (16, 3, 2, False)])
def test_paged_splits_and_lse_through_a_permuted_page_table(page_size, seq_q, heads_k, causal, rng):
    """attention_with_kvcache with num_splits 1, 3, "auto" and return_lse over a permuted page table with an
    empty cache among the sequences: lse [batch, heads, seq_q] as FlashAttention's softmax_lse."""
    lengths = [1, 339, 0, 799]
    k_cache, v_cache, table = paged_cache(rng, lengths, page_size, heads_k, 64)
    q = bf16(rng, len(lengths), seq_q, HEADS, 64)
    cache_seqlens = np.array(lengths, np.int32)
    results = {}
    for splits in SPLITS:
        o, lse = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, page_table=table,
                                        causal=causal, num_splits=splits, return_lse=True, level="tile")
        assert o.shape == q.shape and lse.shape == (len(lengths), HEADS, seq_q)
        results[splits] = (o.reshape(-1, HEADS, 64), lse.transpose(1, 0, 2).reshape(HEADS, -1))
    # The cache rows of each sequence, packed as varlen keys, so the varlen checks apply.
    keys = [np.concatenate([cache_rows(c, table, b, n) for b, n in enumerate(lengths)]) for c in (k_cache, v_cache)]
    check_split_results(results, q.reshape(-1, HEADS, 64), *keys, cu_seqlens([seq_q] * len(lengths)),
                        cu_seqlens(lengths), causal)


class Launched(Exception):
    """Raised by a stand-in for `serving.run_kernel` once it has recorded the kernel's options."""


def test_auto_uses_the_heuristic_with_the_cache_length(rng, monkeypatch):
    """num_splits="auto" (and FlashAttention's 0) is `choose_num_splits` for the kernel's blocks (PackGQA: heads_k
    blocks of group x seq_q rows) against the longest cache; varlen's against max_seqlen_k."""
    from tessera.kernels.attention_split import choose_num_splits
    from tessera.runtime import serving

    seen = []

    def record(where, builder, options, *rest):
        seen.append(options.get("num_splits", 1))
        raise Launched

    monkeypatch.setattr(serving, "run_kernel", record)
    k_cache, v_cache, table = paged_cache(rng, [3000, 20], 128, 1, 64)
    q = bf16(rng, 2, 1, HEADS, 64)
    for splits in ("auto", 0):
        with pytest.raises(Launched):
            attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array([3000, 20], np.int32),
                                   page_table=table, num_splits=splits, level="tile")
    expected = choose_num_splits(2, 1, HEADS, 3000, 64, False)
    assert expected > 1 and seen == [expected, expected]
    k = bf16(rng, 3000, 1, 64)
    with pytest.raises(Launched):
        tessera.attention(q[:, 0], k, k, causal=True, cu_seqlens_q=np.array([0, 1, 2], np.int32),
                          cu_seqlens_k=np.array([0, 2990, 3000], np.int32), max_seqlen_q=1, max_seqlen_k=2990,
                          num_splits="auto", level="tile")
    assert seen[-1] == choose_num_splits(2, 1, HEADS, 2990, 64, False)


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_varlen_splits_and_lse_at_target_and_ptx_level(level, rng):
    lengths_q, lengths_k = [0, 1, 70, 5], [3, 1, 150, 0]
    cq, ck = cu_seqlens(lengths_q), cu_seqlens(lengths_k)
    q = bf16(rng, cq[-1], 2, 64)
    k, v = (bf16(rng, ck[-1], 1, 64) for _ in range(2))
    results = {splits: tessera.attention(q, k, v, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=70,
                                         max_seqlen_k=150, return_lse=True, num_splits=splits, level=level)
               for splits in (1, 3)}
    check_split_results(results, q, k, v, cq, ck, True)


@pytest.mark.parametrize("level,page_size", [("target", 16), ("ptx", 128)])
def test_paged_splits_and_lse_at_target_and_ptx_level(level, page_size, rng):
    lengths = [1, 300, 0]
    k_cache, v_cache, table = paged_cache(rng, lengths, page_size, 1, 64)
    q = bf16(rng, 3, 1, 2, 64)
    results = {}
    for splits in (1, 3):
        o, lse = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array(lengths, np.int32),
                                        page_table=table, causal=True, num_splits=splits, return_lse=True,
                                        level=level)
        results[splits] = (o.reshape(-1, 2, 64), lse.transpose(1, 0, 2).reshape(2, -1))
    keys = [np.concatenate([cache_rows(c, table, b, n) for b, n in enumerate(lengths)]) for c in (k_cache, v_cache)]
    check_split_results(results, q.reshape(-1, 2, 64), *keys, cu_seqlens([1] * 3), cu_seqlens(lengths), True)


def test_a_split_store_past_the_sequence_end_is_reported(rng):
    """The split kernel's partial results are watched too: its bounded stores replaced by plain ones write
    into the next sequence's rows of %O_partial."""
    cq = cu_seqlens([3, 5])
    q, k, v = (rng.standard_normal((1, 8, 64)) for _ in range(3))
    tables = [cq[:-1], cq[1:], cq[:-1], np.diff(cq).astype(np.int32)]
    module = build_kernel("flash_attention_varlen", head_dim=64, num_splits=2)
    for store in [op for op in module.walk() if isinstance(op, tile.StoreGlobalRowsOp)]:
        store.parent_block().insert_op_before(tile.StoreGlobalOp(store.value, store.dest), store)
        store.detach()
        store.erase()
    shapes = {"O_partial": ((2, 8, 64), 4), "LSE_partial": ((2, 8, 1), 4)}
    with checking(*(SequenceRows(name, 1, cq[:-1], cq[1:], shape, size) for name, (shape, size) in shapes.items())):
        with pytest.raises(Exception, match=r"writes row \d+ of %(O|LSE)_partial, outside its sequence 0's rows"):
            tessera.interpret(module, q, k, v, *tables, max_seqlen_q=5)


def test_the_packed_grid_is_max_seqlen_q_blocks_a_sequence():
    """FlashAttention-3's grid: ceildiv(max_seqlen_q, 128) query blocks per sequence (not per packed tensor),
    x heads (x num_splits), x batch; the launch size is refused by name when missing or not positive."""
    from tessera.interpreters.launch import prepare_arguments

    for builder, options in [("flash_attention_varlen", {}), ("flash_attention_paged", {"page_size": 16})]:
        sig = tessera.find_kernel(build_kernel(builder, head_dim=64, num_splits=3, **options))
        assert sig.launch_sizes == ("max_seqlen_q",)
        assert sig.grid_size({"max_seqlen_q": 129, "heads": 6, "batch": 4, "total_q": 1000}) == (2, 18, 4)
    sig = tessera.find_kernel(build_kernel("flash_attention_varlen", head_dim=64))
    inputs = [np.zeros((1, 8, 64))] * 3 + [np.array([0], np.int32)] * 4
    for sizes, got in [({}, "none"), ({"max_seqlen_q": 0}, "0")]:
        with pytest.raises(ValueError, match=f"needs the launch size max_seqlen_q .*got {got}"):
            prepare_arguments(sig, inputs, sizes)


# endregion


def test_a_larger_max_seqlen_q_launches_blocks_that_exit(rng):
    """max_seqlen_q only sizes the grid: a value above the longest sequence launches query blocks past every
    sequence's end, which run no key block and store nothing, so the results are the same bits."""
    cq, ck = cu_seqlens([130, 3, 0]), cu_seqlens([200, 5, 9])
    q = bf16(rng, cq[-1], 2, 64)
    k, v = (bf16(rng, ck[-1], 1, 64) for _ in range(2))
    exact, larger = (tessera.attention(q, k, v, causal=True, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=m,
                                       max_seqlen_k=200, return_lse=True, num_splits=2, level="tile")
                     for m in (130, 400))
    for a, b in zip(exact, larger):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_varlen_without_keys_returns_an_lse_of_minus_infinity(rng):
    """Nothing to launch (no key for any sequence): O = 0 and the LSE [heads, total_q] is -inf, as FA3's."""
    q, k = bf16(rng, 3, 2, 64), np.zeros((0, 1, 64), BF16)
    o, lse = tessera.attention(q, k, k, cu_seqlens_q=np.array([0, 1, 3], np.int32),
                               cu_seqlens_k=np.array([0, 0, 0], np.int32), max_seqlen_q=2, max_seqlen_k=0,
                               return_lse=True, num_splits="auto", level="tile")
    assert np.all(o.astype(np.float32) == 0) and lse.shape == (2, 3) and np.all(np.isneginf(lse))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_packed_lse_at_head_dim_256(causal, rng):
    """head_dim 256 has the LSE but no split kernel: "auto" chooses 1 there, and 3 is refused by name."""
    lengths_q, lengths_k = zip(*FA3_SEQUENCES)
    cq, ck = cu_seqlens(lengths_q), cu_seqlens(lengths_k)
    q = bf16(rng, cq[-1], HEADS, 256)
    k, v = (bf16(rng, ck[-1], 2, 256) for _ in range(2))
    args = dict(causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(lengths_q),
                max_seqlen_k=max(lengths_k), return_lse=True, level="tile")
    o, lse = tessera.attention(q, k, v, num_splits="auto", **args)
    for found in filter(None, reference.check_packed_attention(o, lse, q, k, v, cq, ck, BF16, causal)):
        assert found[0].ok and found[1].ok, found
    with pytest.raises(ValueError, match=r"num_splits > 1 \(split-KV\) supports head_dim 64, 96, 128, 192"):
        tessera.attention(q, k, v, num_splits=3, **args)


@pytest.mark.parametrize("page_size", [16, 128], ids=["gather", "tma"])
def test_page_table_padding_past_the_pages_read_is_accepted(page_size):
    """A serving stack pads each block-table row past its sequence's pages (vLLM with -1 or a stale page): those
    slots are never read, so they are accepted, as FlashAttention accepts them; the kernel reads none of them (the
    PTX executor bounds-checks every global read), and a padded slot a sequence does read is refused by name."""
    rng = np.random.default_rng(7)
    lengths = np.array([20, 150], np.int32)
    used = -(-lengths // page_size)
    slots = int(used.max()) + 2
    k_cache, v_cache = (rng.standard_normal((int(used.sum()), page_size, 2, 64)).astype(BF16) for _ in range(2))
    table = np.full((2, slots), -1, np.int32)
    pages = rng.permutation(int(used.sum())).astype(np.int32)
    table[0, :used[0]], table[1, :used[1]] = pages[:used[0]], pages[used[0]:]
    q = rng.standard_normal((2, 3, 4, 64)).astype(BF16)
    dense = np.zeros((2, int(used.max()) * page_size, 2, 64), BF16), np.zeros((2, int(used.max()) * page_size, 2, 64), BF16)
    for b in range(2):
        for j in range(used[b]):
            for cache, out in zip((k_cache, v_cache), dense):
                out[b, j * page_size:(j + 1) * page_size] = cache[table[b, j]]
    expected = tessera.attention_with_kvcache(q, *dense, cache_seqlens=lengths, causal=True, level="tile")
    for level in ("tile", "ptx"):
        got = tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, page_table=table,
                                             causal=True, level=level)
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(expected, np.float32), atol=2e-2)
    table[1, used[1] - 1] = -1
    with pytest.raises(ValueError, match=rf"page_table holds page -1, outside the {int(used.sum())} pages of k_cache, "
                                         rf"at \[1, {used[1] - 1}\], which sequence 1 reads"):
        tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, page_table=table, level="tile")
