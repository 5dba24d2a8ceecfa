"""The raw packed and paged attention kernels launched with bad and edge index tables (round 24).

`tessera.launch(flash_attention_varlen(...) / flash_attention_paged(...), ..., max_seqlen_q=...)` checks the
tables against what the kernel declares (`tile.tables`, `tessera.index_tables`) at every level and before the
GPU is asked: a table that would give wrong numbers is refused by name (the table, its entry, the value, the
bound); padding that is never read is accepted. Each result is judged against a float64 NumPy reference written
here from the tables' meaning. About 20 s on one core."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera.kernels import flash_attention_paged, flash_attention_varlen
from tessera.runtime import CudaUnavailable
from tessera.tools import tessera_opt, tessera_run

BF16 = ml_dtypes.bfloat16
D = 64
LEVELS = ("tile", "target", "ptx")


def rounded(rng, *shape):
    """Standard normal values as the kernel reads them (rounded to bf16), in float64."""
    return rng.standard_normal(shape).astype(BF16).astype(np.float64)


def attend(q, k, v, causal=False):
    """softmax(q k^T / sqrt(D)) v in float64 for one head: q [m, D], k, v [n, D]; causal aligned bottom-right;
    a row that sees no key is 0."""
    m, n = len(q), len(k)
    s = q @ k.T / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(n)[None, :] <= np.arange(m)[:, None] + n - m, s, -np.inf)
    out = np.zeros((m, v.shape[-1]))
    seen = np.isfinite(s).any(axis=1) if n else np.zeros(m, bool)
    if seen.any():
        p = np.exp(s[seen] - s[seen].max(axis=1, keepdims=True))
        out[seen] = (p / p.sum(axis=1, keepdims=True)) @ v
    return out


def varlen_reference(q, k, v, q_rows, k_rows, causal=False):
    """O [heads, total_q, D] of the varlen kernel: sequence b's query rows q_rows[b] = (start, end) attend to its
    keys k_rows[b]; rows no sequence covers stay 0 (the launch allocates outputs zeroed)."""
    o = np.zeros(q.shape)
    for (qs, qe), (ks, ke) in zip(q_rows, k_rows):
        for h in range(q.shape[0]):
            o[h, qs:qe] = attend(q[h, qs:qe], k[h, ks:ke], v[h, ks:ke], causal)
    return o


def assert_close(got, want):
    got = np.asarray(got, np.float64)
    assert np.abs(got - want).max() <= 2e-2 * max(1.0, np.abs(want).max()), np.abs(got - want).max()


def varlen_case(rng, lengths_q, lengths_k, heads=1):
    cq, ck = (np.concatenate([[0], np.cumsum(n)]).astype(np.int32) for n in (lengths_q, lengths_k))
    q = rounded(rng, heads, int(cq[-1]), D)
    k, v = rounded(rng, heads, int(ck[-1]), D), rounded(rng, heads, int(ck[-1]), D)
    tables = [cq[:-1], cq[1:], ck[:-1], np.diff(ck).astype(np.int32)]
    return q, k, v, tables


# region Accepted: edge tables give the right numbers

@pytest.mark.parametrize("level", LEVELS)
def test_empty_sequences_and_an_exact_max_seqlen_give_the_right_rows(level, rng):
    """Sequences of 0 queries, of 0 keys, and max_seqlen_q exactly the longest (one block)."""
    lengths_q, lengths_k = [3, 0, 5, 2], [4, 6, 0, 7]
    q, k, v, tables = varlen_case(rng, lengths_q, lengths_k)
    o = tessera.launch(flash_attention_varlen(head_dim=D), q, k, v, *tables, level=level, max_seqlen_q=5)
    rows = [(int(a), int(b)) for a, b in zip(tables[0], tables[1])]
    keys = [(int(a), int(a + n)) for a, n in zip(tables[2], tables[3])]
    assert_close(o, varlen_reference(q, k, v, rows, keys))


def test_rows_past_the_last_sequence_and_a_larger_max_seqlen_are_accepted(rng):
    """cu_seqlens_q ending before the packed tensor does, and max_seqlen_q past the longest (blocks that exit)."""
    q, k, v, tables = varlen_case(rng, [4, 9], [5, 3], heads=2)
    q = np.concatenate([q, rounded(rng, 2, 3, D)], axis=1)  # 3 rows no sequence covers
    o = tessera.launch(flash_attention_varlen(head_dim=D, causal=True), q, k, v, *tables, level="tile",
                       max_seqlen_q=300)
    assert_close(o, varlen_reference(q, k, v, [(0, 4), (4, 13)], [(0, 5), (5, 8)], causal=True))
    assert not np.asarray(o[:, 13:], np.float64).any()


def test_non_contiguous_and_int64_tables_are_read_by_value(rng):
    """Starts and ends as the two columns of one [batch, 2] int64 array (strided views), key lengths reversed
    with a negative stride: the values count, not the layout or the integer width."""
    q, k, v, tables = varlen_case(rng, [6, 2, 7], [3, 8, 4])
    pairs = np.stack([tables[0], tables[1]], axis=1).astype(np.int64)
    lengths = tables[3][::-1].copy()[::-1]
    assert not lengths.flags.c_contiguous or lengths.strides[0] < 0
    o = tessera.launch(flash_attention_varlen(head_dim=D), q, k, v, pairs[:, 0], pairs[:, 1],
                       tables[2].astype(np.int64), lengths, level="tile", max_seqlen_q=7)
    rows = [(int(a), int(b)) for a, b in pairs]
    keys = [(int(a), int(a + n)) for a, n in zip(tables[2], tables[3])]
    assert_close(o, varlen_reference(q, k, v, rows, keys))


def paged_case(rng, page_size, lengths, spare_columns=1, num_pages=None):
    """A cache [num_pages, page_size, 1, D] (FlashAttention's layout), a page table whose slots past each
    sequence's pages hold -1 (as vLLM writes them), one query per sequence."""
    need = [-(-n // page_size) for n in lengths]
    num_pages = num_pages or sum(need) + 2
    order = iter(rng.permutation(num_pages))
    table = np.full((len(lengths), max(need) + spare_columns), -1, np.int32)
    for b, n in enumerate(need):
        table[b, :n] = [next(order) for _ in range(n)]
    k_cache, v_cache = rounded(rng, num_pages, page_size, 1, D), rounded(rng, num_pages, page_size, 1, D)
    q = rounded(rng, 1, len(lengths), D)
    return q, k_cache, v_cache, table, np.array(lengths, np.int32)


def paged_inputs(page_size, q, k_cache, v_cache, table, lengths):
    """The paged kernel's inputs: the cache as its copy path takes it ([num_pages, heads_k, page_size, D] for
    TMA), one query row per sequence."""
    starts = np.arange(len(lengths), dtype=np.int32)
    if page_size % 128 == 0:
        k_cache, v_cache = k_cache.transpose(0, 2, 1, 3), v_cache.transpose(0, 2, 1, 3)
    return [q, k_cache, v_cache, starts, starts + 1, table, lengths]


def paged_reference(q, k_cache, v_cache, table, lengths):
    page_size = k_cache.shape[1]
    o = np.zeros(q.shape)
    for b, n in enumerate(lengths):
        rows = [k_cache[table[b, t // page_size], t % page_size, 0] for t in range(n)]
        vals = [v_cache[table[b, t // page_size], t % page_size, 0] for t in range(n)]
        o[0, b] = attend(q[0, b:b + 1], np.array(rows).reshape(n, D), np.array(vals).reshape(n, D))[0]
    return o


@pytest.mark.parametrize("page_size,level", [(16, "tile"), (16, "ptx"), (128, "tile"), (128, "ptx")])
def test_minus_one_padding_past_the_used_pages_is_accepted(page_size, level, rng):
    """vLLM's block table: -1 in every slot past a sequence's pages, and a sequence with no token at all."""
    case = paged_case(rng, page_size, [page_size + 3, 0, 2 * page_size])
    module = flash_attention_paged(head_dim=D, page_size=page_size)
    inputs = paged_inputs(page_size, *case)
    o = tessera.launch(module, *inputs, level=level, max_seqlen_q=1)
    assert_close(o, paged_reference(*case))
    if level == "tile":  # the GPU path accepts the padding too: it gets as far as asking for the GPU
        try:
            o = tessera.launch(module, *(x.astype(BF16) if x.dtype.kind == "f" else x for x in inputs),
                               max_seqlen_q=1)
        except CudaUnavailable:
            return
        assert_close(o, paged_reference(*case))


@pytest.mark.parametrize("level", ["tile", "ptx"])
def test_split_kv_parts_of_a_padded_table_with_an_empty_cache_combine_to_the_reference(level, rng):
    """num_splits=2 on the gather path: each part's f32 O and LSE, merged here in float64 (FlashAttention-3's
    combine); the sequence with no cached token gives LSE -inf in both parts and O = 0."""
    case = paged_case(rng, 16, [40, 0, 17])
    module = flash_attention_paged(head_dim=D, page_size=16, num_splits=2)
    o_parts, lse_parts = tessera.launch(module, *paged_inputs(16, *case), level=level, max_seqlen_q=1)
    o_parts, lse_parts = o_parts.astype(np.float64), lse_parts[..., 0].astype(np.float64)  # [2 x heads, total, ...]
    assert np.isneginf(lse_parts[:, 1]).all() and not o_parts[:, 1].any()
    top = np.where(np.isneginf(lse_parts.max(0)), 0, lse_parts.max(0))
    with np.errstate(divide="ignore"):  # log(0) = -inf: the row that sees no key
        lse = top + np.log(np.exp(lse_parts - top).sum(0))
    o = (np.exp(lse_parts - np.where(np.isneginf(lse), 0, lse))[..., None] * o_parts).sum(0)[None]
    assert_close(o, paged_reference(*case))


def test_pytorch_cpu_tables_are_checked_and_read_like_numpy(rng):
    torch = pytest.importorskip("torch")
    q, k, v, tables = varlen_case(rng, [4, 9], [5, 3])
    module = flash_attention_varlen(head_dim=D)
    bad = [torch.from_numpy(t) for t in tables[:3]] + [torch.tensor([5, 4], dtype=torch.int32)]
    arrays = [torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16) for x in (q, k, v)]
    with pytest.raises(ValueError, match=r"seqlen_k\[1\] = 4 must lie in \[0, 3\]"):
        try:
            tessera.launch(module, *arrays, *bad, max_seqlen_q=9)
        except CudaUnavailable:
            pytest.fail("the GPU was asked before the tables were checked")

# endregion
# region Refused: tables that would give wrong numbers, by name, at every level and before the GPU


def launch_everywhere(module, inputs, match, **sizes):
    """The refusal at each CPU level and on the GPU path (raised before the GPU is asked: the same message with
    or without one; CudaUnavailable here would mean the tables were not checked)."""
    for level in LEVELS:
        with pytest.raises(ValueError, match=match):
            tessera.launch(module, *inputs, level=level, **sizes)
    with pytest.raises(ValueError, match=match):
        try:
            tessera.launch(module, *inputs, **sizes)
        except CudaUnavailable:
            pytest.fail("the GPU was asked before the tables were checked")


VARLEN_BAD = {
    "max_seqlen_q below a sequence": (lambda t: t, 6, r"max_seqlen_q = 6 is smaller than the longest sequence \(9\), "
                                                      r"sequence 1"),
    "the last end past the packed rows": (lambda t: [t[0], np.array([4, 14], np.int32), *t[2:]], 10,
                                          r"seqend_q\[1\] = 14 must lie in \[4, 13\]"),
    "decreasing entries": (lambda t: [np.array([0, 9], np.int32), np.array([4, 4], np.int32), *t[2:]], 9,
                           r"seqend_q\[1\] = 4 must lie in \[9, 13\]"),
    "a negative start": (lambda t: [np.array([-2, 4], np.int32), *t[1:]], 9,
                         r"seqstart_q\[0\] = -2 must lie in \[0, 13\]"),
    "two sequences writing one row": (lambda t: [np.array([0, 2], np.int32), np.array([4, 13], np.int32), *t[2:]], 11,
                                      r"sequences 0 and 1 both cover row 2: their rows are \[0, 4\) and \[2, 13\) "
                                      r"\(seqstart_q\[0\], seqstart_q\[1\]\)"),
    "keys past the packed keys": (lambda t: [*t[:3], np.array([5, 4], np.int32)], 9,
                                  r"seqlen_k\[1\] = 4 must lie in \[0, 3\]"),
    "a negative key length": (lambda t: [*t[:3], np.array([-1, 3], np.int32)], 9,
                              r"seqlen_k\[0\] = -1 must lie in \[0, 8\]"),
}


@pytest.mark.parametrize("case", VARLEN_BAD)
def test_bad_varlen_tables_are_refused_by_name(case, rng):
    change, max_seqlen_q, match = VARLEN_BAD[case]
    q, k, v, tables = varlen_case(rng, [4, 9], [5, 3])
    launch_everywhere(flash_attention_varlen(head_dim=D), [q, k, v, *change(tables)], match,
                      max_seqlen_q=max_seqlen_q)


PAGED_BAD = {
    "a page past the cache on the TMA path": (128, lambda t, n: (t.__setitem__((0, 1), 9), n)[1],
                                              r"page_table holds page 9, outside the 6 pages of the cache "
                                              r"\(num_pages\), at \[0, 1\], which sequence 0 reads"),
    "a negative page on the gather path": (16, lambda t, n: (t.__setitem__((1, 0), -1), n)[1],
                                           r"page_table holds page -1, outside the 6 pages .* at \[1, 0\]"),
    "cache_seqlens past the page table": (16, lambda t, n: np.array([n[0], 16 * t.shape[1] + 1], np.int32),
                                          r"cache_seqlens\[1\] = 49 must lie in \[0, 48\], .*within the 48 rows "
                                          r"page_table reaches \(3 pages of page_size = 16\)"),
    "a negative cache length": (128, lambda t, n: np.array([-1, n[1]], np.int32),
                                r"cache_seqlens\[0\] = -1 must lie in \[0, 384\]"),
}


@pytest.mark.parametrize("case", PAGED_BAD)
def test_bad_paged_tables_are_refused_by_name(case, rng):
    page_size, change, match = PAGED_BAD[case]
    q, k_cache, v_cache, table, lengths = paged_case(rng, page_size, [page_size + 1, 1], num_pages=6)
    lengths = change(table, lengths)
    inputs = paged_inputs(page_size, q, k_cache, v_cache, table, lengths)
    launch_everywhere(flash_attention_paged(head_dim=D, page_size=page_size), inputs, match, max_seqlen_q=1)


@pytest.mark.parametrize("level", LEVELS)
def test_a_max_seqlen_q_far_past_the_sequences_is_refused_not_run_for_hours(level, rng):
    """Regression: max_seqlen_q = 2^31 - 1 passed the table checks (larger than needed is allowed) and the Tile
    interpreter ran its 2^24 empty query blocks a sequence for hours; the interpreters now refuse a grid of more
    than MAX_GRID_BLOCKS, naming the launch size (on a GPU the blocks exit at once: it runs)."""
    q, k, v, tables = varlen_case(rng, [4, 9], [5, 3])
    with pytest.raises(ValueError, match=r"grid \(16777216, 1, 2\) is 33554432 thread blocks, more than the 1048576 "
                                         r"the interpreters run in one launch; a launch size larger than the kernel "
                                         r"needs \(max_seqlen_q = 2147483647\)"):
        tessera.launch(flash_attention_varlen(head_dim=D), q, k, v, *tables, level=level, max_seqlen_q=2**31 - 1)


def test_a_cache_of_smaller_pages_than_the_tma_kernel_was_built_for_is_refused(rng):
    """Regression: the TMA kernel built for pages of 128 rows, given a cache of 64-row pages, read each key block
    as one 128-row box across two pages (the simulators reported it; on a GPU a silently wrong result). The
    kernel now promises page_size a multiple of its key block, and every launch checks it."""
    q, k_cache, v_cache, table, lengths = paged_case(rng, 64, [70, 3])
    inputs = paged_inputs(128, q, k_cache, v_cache, table, lengths)  # the [num_pages, heads_k, page_size, D] view
    launch_everywhere(flash_attention_paged(head_dim=D, page_size=128), inputs,
                      r"promises \(tile.divisible\) that page_size is a multiple of 128, got page_size = 64: .*"
                      r"flash_attention_paged\(page_size=...\)", max_seqlen_q=1)


@pytest.mark.parametrize("heads,heads_k", [(3, 2), (2, 3)])
def test_query_heads_that_are_no_multiple_of_the_key_heads_are_refused(heads, heads_k, rng):
    """Regression: the raw varlen kernel given 3 query heads over 2 key heads read key head 2 (past the last: TMA's
    zero fill, a silently wrong head at every level), and 2 over 3 divided by zero (the simulators refused it, the
    GPU leaves it unspecified). The builders now declare `tile.multiples = {heads = "heads_k"}`, which every
    launch checks, the compiled kernel's too."""
    from tessera.runtime.compiler import KernelConfig, compile_kernel
    from tessera.runtime.launch import run

    q, k, v, tables = varlen_case(rng, [4, 9], [5, 3], heads=heads)
    k, v = np.repeat(k[:1], heads_k, 0), np.repeat(v[:1], heads_k, 0)
    match = rf"needs heads to be a multiple of heads_k \(tile.multiples\), got heads = {heads} and heads_k = {heads_k}"
    launch_everywhere(flash_attention_varlen(head_dim=D), [q, k, v, *tables], match, max_seqlen_q=9)
    kernel = compile_kernel(KernelConfig.of("flash_attention_varlen", head_dim=D, dtype="bf16"))
    with pytest.raises(ValueError, match=match):
        run(kernel, *(x.astype(BF16) for x in (q, k, v)), *tables, sizes={"max_seqlen_q": 9})


def test_a_zero_length_batch_is_refused_by_name(rng):
    """No sequence at all: the grid would have no block along z, and the tables no entry."""
    q, k, v, _ = varlen_case(rng, [4], [4])
    empty = np.zeros(0, np.int32)
    with pytest.raises(ValueError, match=r"input seqstart_q of @flash_attention_varlen_d64_bf16, dimension 0 "
                                         r"\(batch\): sizes must be positive, got 0"):
        tessera.launch(flash_attention_varlen(head_dim=D), q, k, v, *[empty] * 4, level="tile", max_seqlen_q=1)
    with pytest.raises(ValueError, match=r"cu_seqlens_q must have batch \+ 1 >= 2 entries, got 1"):
        tessera.attention(q[0][:, None].astype(BF16), k[0][:, None].astype(BF16), v[0][:, None].astype(BF16),
                          cu_seqlens_q=np.zeros(1, np.int32), cu_seqlens_k=np.zeros(1, np.int32), max_seqlen_q=1,
                          max_seqlen_k=1, level="tile")


def test_an_int64_entry_past_int32_is_refused_not_wrapped(rng):
    q, k, v, tables = varlen_case(rng, [4, 9], [5, 3])
    ends = tables[1].astype(np.int64)
    ends[1] = 2**32 + 13  # 13 once wrapped to 32 bits
    with pytest.raises(ValueError, match=r"seqend_q of @\S+\) holds int32 values, from -2147483648 to 2147483647; "
                                         r"got 4294967309"):
        tessera.launch(flash_attention_varlen(head_dim=D), q, k, v, tables[0], ends, *tables[2:], level="tile",
                       max_seqlen_q=9)


def test_the_gpu_runtime_checks_the_tables_of_a_compiled_kernel(rng):
    """`tessera.runtime.launch.run` on a kernel compiled from a builder's name: the host description keeps the
    declaration, and the refusal names the kernel's tensor before the driver is touched."""
    from tessera.runtime.compiler import KernelConfig, compile_kernel
    from tessera.runtime.launch import run

    q, k, v, tables = varlen_case(rng, [4, 9], [5, 3])
    kernel = compile_kernel(KernelConfig.of("flash_attention_varlen", head_dim=D, dtype="bf16"))
    arrays = [x.astype(BF16) for x in (q, k, v)]
    with pytest.raises(ValueError, match=r"@flash_attention_varlen_d64_bf16: max_seqlen_q = 8 is smaller than the "
                                         r"longest sequence \(9\)"):
        run(kernel, *arrays, *tables, sizes={"max_seqlen_q": 8})
    with pytest.raises(ValueError, match=r"tensor 6 \(seqlen_k_ptr\)\[1\] = 7 must lie in \[0, 3\]"):
        run(kernel, *arrays, *tables[:3], np.array([5, 7], np.int32), sizes={"max_seqlen_q": 9})

# endregion
# region The declaration itself


def declared(tables: str) -> str:
    """A custom kernel whose block b copies row starts[b] of X, the first of its rows [starts[b], ends[b]), with
    `tile.tables = tables`."""
    return f"""
builtin.module {{
  func.func @first_rows(%X: !tile.tile<?x16xf32, global> {{tile.dims = #tile.dims<N, 16>}},
                        %starts: !tile.tile<?xi32, global> {{tile.dims = #tile.dims<B>}},
                        %ends: !tile.tile<?xi32, global> {{tile.dims = #tile.dims<B>}},
                        %Y: !tile.tile<?x16xf32, global> {{tile.dims = #tile.dims<B, 16>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<B>, tile.tables = {tables}}} {{
    %b = tile.program_id x : index
    %c0 = arith.constant 0 : index
    %row = tile.load_index %starts[%b] : !tile.tile<?xi32, global>
    %xw = tile.view %X[%row, %c0] : !tile.tile<?x16xf32, global> -> !tile.tile<1x16xf32, global>
    %x = tile.load %xw : !tile.tile<1x16xf32, global> -> !tile.tile<1x16xf32, register>
    %yw = tile.view %Y[%b, %c0] : !tile.tile<?x16xf32, global> -> !tile.tile<1x16xf32, global>
    tile.store_global %x, %yw : !tile.tile<1x16xf32, register>, !tile.tile<1x16xf32, global>
    func.return
  }}
}}
"""


ROWS = '[{rows = "N", start = 1 : i64, end = 2 : i64}]'


@pytest.mark.parametrize("level", ["tile", "ptx"])
def test_a_custom_kernel_declares_its_tables_and_the_launch_checks_them(level, rng):
    module = tessera.parse_module(declared(ROWS))
    x = rng.standard_normal((5, 16)).astype(np.float32)
    starts, ends = np.array([4, 0, 2], np.int32), np.array([5, 2, 3], np.int32)
    assert np.array_equal(tessera.launch(module, x, starts, ends, level=level), x[starts])
    with pytest.raises(ValueError, match=r"ends\[1\] = 6 must lie in \[0, 5\], the sequence's end: from its start "
                                         r"starts\[1\] on, within the 5 rows of N"):
        tessera.launch(module, x, starts, np.array([5, 6, 3], np.int32), level=level)


@pytest.mark.parametrize("tables,message", [
    ('[{rows = "N", start = 1 : i64}]', "entry 0 needs one of 'end' and 'length'"),
    ('[{rows = "M", start = 1 : i64, end = 2 : i64}]', "names the size 'M', which no input defines"),
    ('[{rows = "N", start = 0 : i64, end = 2 : i64}]', r"names argument 0 \(%X\), which is not an int32 input"),
    ('[{rows = "N", start = 1 : i64, end = 3 : i64}]', r"names argument 3 \(%Y\), which is not an int32 input"),
    ('[{rows = "N", start = 1 : i64, end = 2 : i64, longest = "L"}]',
     "neither a size an input defines nor a launch size"),
    ('[{rows = "N", start = 1 : i64, end = 2 : i64, stride = 2 : i64}]', "unknown or malformed 'stride'"),
    ('{rows = "N"}', "must be an array of dictionaries"),
    (ROWS + ', tile.multiples = {N = "Q"}', "'tile.multiples' must be a dictionary such as {heads = \"heads_k\"} of "
                                          "sizes the inputs define"),
])
def test_a_malformed_declaration_is_a_located_diagnostic(tables, message, tmp_path, capsys):
    """tessera-opt reads the file and refuses the declaration at the kernel, exit status 1, no traceback."""
    path = tmp_path / "k.mlir"
    path.write_text(declared(tables))
    status, _, err = inprocess.main_in_process(tessera_opt.main, capsys, str(path))
    assert status == 1 and f"{path}:3:3" in err and message.replace("\\", "") in err.replace("\\", ""), err


def test_tessera_run_refuses_a_kernel_whose_tables_it_cannot_generate(tmp_path, capsys):
    path = tmp_path / "k.mlir"
    path.write_text(declared(ROWS))
    status, _, err = inprocess.main_in_process(tessera_run.main, capsys, str(path), "-d", "N=5", "-d", "B=3")
    assert status == 1 and f"{path}:3:3" in err
    assert "declares ('tile.tables') what its index tables (ends, starts) hold" in err, err


def test_tessera_run_reads_the_declaration_back_from_target_ir(tmp_path, capsys):
    """The Target IR keeps `tile.tables`: tessera-run refuses the kernel as it refuses its Tile IR, and a
    declaration edited to name an argument the kernel does not have is a located diagnostic, not a traceback."""
    target = str(tessera.compile(flash_attention_varlen(head_dim=D), "target"))
    assert 'length = 6 : i64' in target  # seqlen_k, argument 6
    for text, message in ((target, "sized by its launch (max_seqlen_q) and reads index tables that are not generated"),
                          (target.replace("length = 6 : i64", "length = 9 : i64"), "names argument 9; the kernel has 8")):
        path = tmp_path / "k.target.mlir"
        path.write_text(text)
        status, _, err = inprocess.main_in_process(tessera_run.main, capsys, str(path), *(
            f"-d{n}=8" for n in ("heads", "total_q", "heads_k", "total_k", "batch")))
        assert status == 1 and message in err, err
    from tessera.host import describe  # the GPU runtime's view of the same Target IR

    (host,) = describe(tessera.parse_module(target.replace("length = 6 : i64", "length = 9 : i64")))
    with pytest.raises(ValueError, match=r"'tile.tables' names an argument that is not one of the kernel's inputs"):
        host.tables

# endregion
