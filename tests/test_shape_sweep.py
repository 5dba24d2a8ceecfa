"""Shapes nobody picked, through the public entry points (tests/shape_sweep.py draws them), and bad shapes and
types at each entry point: a named refusal, never a traceback or a silently wrong result.

The default suite runs a small slice of the Tile-level sweep and the refusals; `pytest -m slow
tests/test_shape_sweep.py` runs the whole sweep (seeds 0 and 1, every family), the same shapes' distinct code
paths in the CTA simulator and the PTX executor, and ptxas 13.0 on their kernels (docs/testing.md).
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference

import shape_sweep

bf16 = ml_dtypes.bfloat16


DEFAULT_SLICE = 3
"""Cases per family in the default suite: the first of seed 0 whose `shape_sweep.cost` is at most SMALL."""
SMALL = 500_000
SLOW_SEEDS, SLOW_COUNT = (0, 1), 40


def _default_slice() -> list:
    params = []
    for family in shape_sweep.FAMILIES:
        small = [(i, c) for i, c in enumerate(shape_sweep.cases(family, 0, 40)) if shape_sweep.cost(c) <= SMALL]
        for i, case in small[:DEFAULT_SLICE]:
            params.append(pytest.param(family, case, id=f"{family}-0-{i}"))
    return params


def _whole_sweep() -> list:
    params = []
    for seed in SLOW_SEEDS:
        for family in shape_sweep.FAMILIES:
            for i, case in enumerate(shape_sweep.cases(family, seed, SLOW_COUNT)):
                params.append(pytest.param(family, case, seed, id=f"{family}-{seed}-{i}"))
    return params


@pytest.mark.parametrize("family, case", _default_slice())
def test_the_sweeps_default_slice_matches_float64(family, case):
    assert shape_sweep.run(family, case) == [], case


@pytest.mark.slow
@pytest.mark.parametrize("family, case, seed", _whole_sweep())
def test_the_whole_sweep_matches_float64(family, case, seed):
    assert shape_sweep.run(family, case, seed) == [], (seed, case)


def _bf16(rng, *shape):
    return rng.standard_normal(shape).astype(bf16)


# region Appending into a shared page


def test_an_append_onto_a_row_another_sequence_reads_is_refused_by_name(rng):
    """Two sequences sharing pages 0 and 1 with 5 cached tokens each would both append token 5 to page 0,
    row 5: the second append overwrote the first, and sequence 0 attended to sequence 1's key (O off by 0.15,
    tolerance 0.008). Refused before anything is written."""
    k_cache, v_cache = _bf16(rng, 4, 16, 1, 64), _bf16(rng, 4, 16, 1, 64)
    before = k_cache.copy()
    q, k_new, v_new = _bf16(rng, 2, 1, 1, 64), _bf16(rng, 2, 1, 1, 64), _bf16(rng, 2, 1, 1, 64)
    with pytest.raises(ValueError, match=r"k_new would overwrite a key that is read: sequence 0's token 5 is "
                                         r"appended to page 0, row 5, which sequence 1 reads as its token 5"):
        tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array([5, 5], np.int32),
                                       page_table=np.array([[0, 1], [0, 1]], np.int32), k_new=k_new,
                                       v_new=v_new, level="tile")
    assert np.array_equal(k_cache.view(np.uint16), before.view(np.uint16))


def test_an_append_onto_a_page_listed_twice_in_one_table_row_is_refused(rng):
    """Page 0 twice in one sequence's table: its token 16 would overwrite its own token 0."""
    k_cache, v_cache = _bf16(rng, 2, 16, 1, 64), _bf16(rng, 2, 16, 1, 64)
    with pytest.raises(ValueError, match=r"sequence 0's token 16 is appended to page 0, row 0, which sequence 0 "
                                         r"reads as its token 0"):
        tessera.attention_with_kvcache(_bf16(rng, 1, 1, 1, 64), k_cache, v_cache,
                                       cache_seqlens=np.array([16], np.int32),
                                       page_table=np.array([[0, 0]], np.int32), k_new=_bf16(rng, 1, 1, 1, 64),
                                       v_new=_bf16(rng, 1, 1, 1, 64), level="tile")


def test_a_shared_prefix_page_with_appends_into_own_pages_runs(rng):
    """Sharing a full prefix page is fine when each sequence appends into its own page."""
    k_cache, v_cache = _bf16(rng, 3, 16, 1, 64), _bf16(rng, 3, 16, 1, 64)
    table, lengths = np.array([[0, 1], [0, 2]], np.int32), np.array([16, 20], np.int32)
    q, k_new, v_new = _bf16(rng, 2, 1, 1, 64), _bf16(rng, 2, 1, 1, 64), _bf16(rng, 2, 1, 1, 64)
    o = tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, page_table=table, k_new=k_new,
                                       v_new=v_new, level="tile")
    for s in range(2):
        keys, values = (np.concatenate([c[table[s]].reshape(-1, 1, 64)[: lengths[s]], new[s]])
                        for c, new in ((k_cache, k_new), (v_cache, v_new)))
        assert np.array_equal(keys[-1], k_new[s, 0])  # appended in place before attending
        head = lambda x: x.transpose(1, 0, 2)[None]  # noqa: E731
        assert reference.check_attention(head(o[s]), head(q[s]), head(keys), head(values), bf16).ok


# endregion
# region Bad shapes and types at each entry point: refused by name


def _a(*shape, dtype=bf16):
    return np.random.default_rng(0).standard_normal(shape).astype(dtype)


def _varlen(cu_q, cu_k, max_q=5, max_k=5, rows=10, **options):
    cu_q, cu_k = (np.asarray(c, options.pop("cu_dtype", np.int32)) for c in (cu_q, cu_k))
    return tessera.attention(_a(rows, 2, 64), _a(10, 2, 64), _a(10, 2, 64), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                             max_seqlen_q=max_q, max_seqlen_k=max_k, level="tile", **options)


def _kvcache(table=((0, 1),), lengths=(20,), q=(1, 1, 2, 64), cache=(4, 16, 2, 64), **options):
    table = None if table is None else np.asarray(table, options.pop("table_dtype", np.int32))
    lengths = np.asarray(lengths, np.int32) if isinstance(lengths, tuple) else lengths
    return tessera.attention_with_kvcache(_a(*q), _a(*cache), _a(*cache), cache_seqlens=lengths, page_table=table,
                                          level="tile", **options)


def _dense(q=(1, 2, 65, 64), k=(1, 2, 70, 64), dtype=bf16, **options):
    return tessera.attention(_a(*q, dtype=dtype), _a(*k, dtype=dtype), _a(*k, dtype=dtype), level="tile", **options)


def _backward(q=(1, 2, 65, 64), k=(1, 2, 70, 64), lse=(1, 2, 65), lse_dtype=np.float32, do_dtype=bf16):
    return tessera.attention_backward(_a(*q), _a(*k), _a(*k), _a(*q), np.zeros(lse, lse_dtype), _a(*q, dtype=do_dtype),
                                      level="tile")


def _fp8(q=(1, 2, 65, 64), k=(1, 2, 70, 64), **options):
    e4m3 = ml_dtypes.float8_e4m3fn
    return tessera.attention(_a(*q, dtype=e4m3), _a(*k, dtype=e4m3), _a(*k, dtype=e4m3), level="tile", **options)


REFUSALS = {
    "attention batch mismatch": (lambda: _dense(q=(2, 2, 65, 64)), "must have the same batch"),
    "attention heads not a multiple": (lambda: _dense(q=(1, 3, 65, 64)), "a divisor of q's"),
    "attention seq_q 0": (lambda: _dense(q=(1, 2, 0, 64)), "q has an empty dimension"),
    "attention float32": (lambda: _dense(dtype=np.float32), "element type float32 is not supported"),
    "attention head_dim 80": (lambda: _dense(q=(1, 2, 5, 80), k=(1, 2, 5, 80)), "head_dim 80 is not supported"),
    "attention split-KV at 256": (lambda: _dense(q=(1, 2, 5, 256), k=(1, 2, 5, 256), num_splits=2),
                                  "num_splits > 1 .split-KV. supports head_dim 64, 96, 128, 192; got head_dim 256"),
    "attention num_splits 300": (lambda: _dense(num_splits=300), "num_splits must be an integer from 1 to 256"),
    "attention a list": (lambda: tessera.attention([[1.0]], _a(1, 2, 5, 64), _a(1, 2, 5, 64), level="tile"),
                         "q must be a NumPy array or a PyTorch tensor"),
    "varlen negative cu_seqlens": (lambda: _varlen([0, -1, 10], [0, 5, 10], max_q=11),
                                   r"cu_seqlens_q\[1\] = -1 must lie in \[0, 10\]"),
    "varlen non-monotone cu_seqlens": (lambda: _varlen([0, 7, 5, 10], [0, 3, 5, 10], max_q=7),
                                       r"cu_seqlens_q\[2\] = 5 must lie in \[7, 10\]"),
    "varlen cu_seqlens past the rows": (lambda: _varlen([0, 5, 12], [0, 5, 10]), r"cu_seqlens_q\[2\] = 12 must lie in \[5, 10\]"),
    "varlen batch mismatch": (lambda: _varlen([0, 5, 10], [0, 10], max_k=10), "cu_seqlens_k must have 3 entries"),
    "varlen int64 cu_seqlens": (lambda: _varlen([0, 5, 10], [0, 5, 10], cu_dtype=np.int64),
                                "cu_seqlens_q must hold int32, got int64"),
    "varlen max_seqlen too small": (lambda: _varlen([0, 5, 10], [0, 5, 10], max_q=3),
                                    "max_seqlen_q = 3 is smaller than the longest sequence"),
    "varlen seqused_k past a sequence": (lambda: _varlen([0, 5, 10], [0, 5, 10],
                                                         seqused_k=np.array([6, 1], np.int32)),
                                         r"seqused_k\[0\] = 6 must lie in \[0, 5\]"),
    "varlen no sequence": (lambda: _varlen([0], [0], max_q=0, max_k=0), "must have batch . 1 >= 2 entries"),
    "kvcache page out of range": (lambda: _kvcache(table=((0, 4),)), "page_table holds page 4, outside the 4"),
    "kvcache negative page": (lambda: _kvcache(table=((0, -1),)), "page_table holds page -1"),
    "kvcache float table": (lambda: _kvcache(table_dtype=np.float64), "page_table must hold int32"),
    "kvcache table batch": (lambda: _kvcache(table=((0, 1), (2, 3))), "page_table must have 1 entries"),
    "kvcache cache_seqlens past the pages": (lambda: _kvcache(lengths=(40,)), r"must lie in \[0, 32\]"),
    "kvcache negative cache_seqlens": (lambda: _kvcache(lengths=-1), r"must lie in \[0, 32\]"),
    "kvcache seq_q 0": (lambda: _kvcache(q=(1, 0, 2, 64)), "q has an empty dimension"),
    "kvcache page_size 0": (lambda: _kvcache(cache=(4, 0, 2, 64), lengths=(0,)), "k_cache has an empty dimension"),
    "kvcache k_new batch": (lambda: _kvcache(lengths=(5,), k_new=_a(2, 1, 2, 64), v_new=_a(2, 1, 2, 64)),
                            r"k_new and v_new must be \[batch=1"),
    "gemm K mismatch": (lambda: tessera.gemm(_a(5, 7), _a(8, 3), level="tile"), "whose K differ"),
    "gemm M 0": (lambda: tessera.gemm(_a(0, 7), _a(7, 3), level="tile"), "a has an empty dimension"),
    "gemm batch mismatch": (lambda: tessera.gemm(_a(2, 5, 7), _a(3, 7, 3), level="tile"), "same batch size"),
    "gemm mixed types": (lambda: tessera.gemm(_a(5, 7), _a(7, 3, dtype=np.float16), level="tile"),
                         "one element type"),
    "backward lse shape": (lambda: _backward(lse=(1, 2, 64)), r"lse must be \[batch, heads, seq_q\]"),
    "backward dO type": (lambda: _backward(do_dtype=np.float16), "one element type"),
    "backward head_dim 256": (lambda: _backward(q=(1, 1, 5, 256), k=(1, 1, 5, 256), lse=(1, 1, 5)),
                              "head_dim 256 is not supported by the backward kernels"),
    "fp8 descale shape": (lambda: _fp8(descale_q=np.ones((2, 2), np.float32)), "descale_q must have shape"),
    "fp8 negative descale": (lambda: _fp8(descale_q=-np.ones((1, 2), np.float32)), "must be non-negative"),
    "fp8 head_dim 96": (lambda: _fp8(q=(1, 1, 5, 96), k=(1, 1, 5, 96)), "head_dim 96 is not supported"),
    "fp8 seq_q 0": (lambda: _fp8(q=(1, 2, 0, 64)), "must be a non-empty 4-D"),
    "fp8 with split-KV": (lambda: _fp8(num_splits=2), "not supported with num_splits=2"),
    "launch batch mismatch": (lambda: tessera.launch(tessera.kernels.gemm(), _a(2, 5, 7), _a(7, 3), level="tile"),
                              "must have rank 2"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_a_bad_shape_or_type_is_refused_by_name(name):
    call, message = REFUSALS[name]
    with pytest.raises((ValueError, TypeError), match=message):
        call()


# endregion
# region The sweep's code paths in the CTA simulator and the PTX executor


def _attention(batch=1, heads=1, heads_k=1, seq_q=1, seq_k=1, head_dim=64, causal=False, dtype="bf16", num_splits=1):
    return dict(batch=batch, heads=heads, heads_k=heads_k, seq_q=seq_q, seq_k=seq_k, head_dim=head_dim,
                causal=causal, dtype=dtype, num_splits=num_splits)


def _gemm(m, n, k, transpose_a=False, transpose_b=False, dtype="bf16", batch=None, epilogue=False):
    return dict(m=m, n=n, k=k, transpose_a=transpose_a, transpose_b=transpose_b, dtype=dtype, batch=batch,
                epilogue=epilogue)


def _paged(page_size, lengths, head_dim=64, seq_new=0, paged=True, heads=2, heads_k=1, seq_q=2, num_splits=1):
    return dict(batch=len(lengths), seq_q=seq_q, heads=heads, heads_k=heads_k, head_dim=head_dim,
                page_size=page_size, lengths=lengths, seq_new=seq_new, causal=False, dtype="bf16",
                num_splits=num_splits, paged=paged)


LOWERED_SLICE = {
    # tails in M, N and K of each layout; the unaligned ("any") kernel for rows not a multiple of 8
    "gemm tails m1 n7 k65": ("gemm", _gemm(1, 7, 65)),
    "gemm tails m65 n1 k7 tt f16": ("gemm", _gemm(65, 1, 7, True, True, "f16")),
    "gemm tails m7 n65 k1 tn": ("gemm", _gemm(7, 65, 1, True)),
    "gemm m200 n7 k200 nt batched epilogue": ("gemm", _gemm(200, 7, 200, False, True, batch=2, epilogue=True)),
    # causal with seq_q > seq_k: rows that see no key (O = 0, LSE = -inf)
    "attention causal 65 x 2": ("attention", _attention(seq_q=65, seq_k=2, causal=True)),
    "attention head_dim 256 tails": ("attention", _attention(heads=2, heads_k=2, seq_q=65, seq_k=129, head_dim=256)),
    # decoding: PackGQA 8:1 with split-KV, and more splits than key blocks
    "decode gqa 8:1 split 3": ("decode", _attention(heads=8, seq_q=1, seq_k=129, head_dim=128, causal=True,
                                                    num_splits=3)),
    "attention 16 splits over one key block": ("attention", _attention(seq_q=63, seq_k=63, num_splits=16)),
    # packed sequences with empty ones either way
    "varlen empty sequences": ("varlen", dict(lengths_q=[0, 3, 65, 2], lengths_k=[5, 0, 70, 1], heads=2, heads_k=1,
                                              head_dim=64, causal=True, dtype="bf16", num_splits=1)),
    # the cp.async gather (page 3 and 100 do not divide the key block), an empty cache, appends, no table
    "paged page 3 with an empty cache": ("paged", _paged(3, [0, 70], seq_new=1)),
    "paged page 100 split 3": ("paged", _paged(100, [130, 1], num_splits=3)),
    "paged page 16 head_dim 256": ("paged", _paged(16, [50], head_dim=256)),
    "unpaged odd length": ("paged", _paged(0, [77], paged=False, seq_new=2)),
    # FP8 with a key count that is not a multiple of 16, GQA, causal
    "fp8 65 x 63 gqa causal": ("fp8", dict(batch=1, heads=2, heads_k=1, seq_q=65, seq_k=63, head_dim=64,
                                           causal=True)),
    # the three-pass builder through tessera.launch: scratch buffers, causal tails at head_dim 256
    "three-pass 256 causal 191 x 63": ("multipass", dict(builder="three_pass_attention", batch=1, heads=1, seq_q=191,
                                                         seq_k=63, head_dim=256, causal=True, dtype="bf16")),
    # the backward's three kernels on rows that see no key and key tails
    "backward 65 x 63 gqa causal": ("backward", dict(batch=1, heads=2, heads_k=1, seq_q=65, seq_k=63, head_dim=64,
                                                     causal=True, dtype="bf16")),
}


SYSTEM_PTXAS = "/usr/local/bin/ptxas"
"""ptxas 13.0, the one the lowered slice's kernels must assemble cleanly with (the wheels' others have their own
tests: docs/performance.md)."""


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", list(LOWERED_SLICE))
def test_the_sweeps_code_paths_lowered(name, level, monkeypatch):
    """Each code path in the CTA simulator and the PTX executor; at "ptx", every kernel the call ran assembles
    with ptxas 13.0 without a warning or a spill."""
    from tessera.interpreters.ptx import printed
    from tessera.toolchain import compile_ptx

    texts = []

    def recorded(module):
        result = ptx_text(module)
        texts.append(result[0])
        return result

    ptx_text = printed.ptx_text
    monkeypatch.setattr(printed, "ptx_text", recorded)
    family, case = LOWERED_SLICE[name]
    assert shape_sweep.run(family, case, level=level) == [], case
    assert (level == "ptx") == bool(texts)
    if texts and not os.path.exists(SYSTEM_PTXAS):
        pytest.skip(f"no {SYSTEM_PTXAS}")
    for text in texts:
        result = compile_ptx(text, ptxas=SYSTEM_PTXAS)
        assert not result.warnings and not result.log.diagnostics, result.log
        for entry in result.entries.values():
            assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0


# endregion
# region The validation verdict on sizes the fast variant does not meet


def test_validate_runs_the_variant_a_launch_with_those_sizes_runs():
    """gemm() asks for specialization on K and N; with K = 65 (rows of 130 bytes) a launch compiles the variant
    without TMA, and validate must judge that one: it lowered the fast variant and reported the TMA map's
    refusal as convert-tile-to-sm90 making the kernel fail. (The default suite's one lowered run: the GEMM's
    tails in M, N and K at target and PTX level.)"""
    from tessera.passes import PTX_PIPELINE
    from tessera.validate import validate

    report = validate(tessera.kernels.gemm(), PTX_PIPELINE, sizes={"M": 1, "N": 7, "K": 65})
    assert report.ok, report.mismatch
    assert [c.level for c in report.checks][-1] == "ptx" and all(c.ok for c in report.checks)


@pytest.mark.parametrize("builder", ["flash_attention_varlen", "flash_attention_paged"])
def test_validate_refuses_a_kernel_sized_by_its_launch_by_name(builder):
    """validate generated no index tables and took no launch size: it reported 'needs the launch size
    max_seqlen_q', and refused max_seqlen_q as an unknown size when given."""
    from tessera.passes import PTX_PIPELINE
    from tessera.validate import validate

    with pytest.raises(ValueError, match=r"sized by its launch \(max_seqlen_q\) and reads index tables that are not generated"):
        validate(getattr(tessera.kernels, builder)(head_dim=64), PTX_PIPELINE, sizes={"max_seqlen_q": 5})


def test_validate_takes_a_launch_size_an_argument_uses():
    """A launch size that sizes an argument (tests/lit/tools/tessera-run-launch-size.mlir's n, the backward
    postprocess's seq_q) is a size like the others: validate was refusing it as a kernel of index tables."""
    from pathlib import Path

    from tessera.passes import PTX_PIPELINE
    from tessera.validate import validate

    text = (Path(__file__).parent / "lit" / "tools" / "tessera-run-launch-size.mlir").read_text()
    report = validate(tessera.parse_module(text), PTX_PIPELINE, sizes={"n": 70})
    assert report.ok, report.mismatch


# endregion


def test_the_fp8_rule_allows_the_kernels_own_rounding_of_p():
    """The sweep's fp8 case 33 (seed 0): a causal row that sees two keys. The kernel rounds 2^8 exp(s - rowmax)
    to e4m3 (FlashAttention-3's P): 256 and 153.4 become 256 and 160 (e4m3's step is 16 there), and O is 0.22
    off (V's rows differ by up to 17.7); the baseline that rounded the normalized softmax, 160.09 and 95.9 to
    160 and 96, was 0.03 off, and the rule (twice that) failed the kernel. Both roundings are the kernel's
    precision: the rule takes the larger error."""
    case = shape_sweep.cases("fp8", 0, 40)[33]
    assert (case["seq_q"], case["seq_k"], case["causal"]) == (127, 2, True)
    assert shape_sweep.run("fp8", case) == []
