"""head_dim 96 and 192 (FlashAttention-3's other forward head dims: some Phi/StableLM sizes, DeepSeek's MLA q/k
dimension) through the public API, against `reference` in float64:

- at Tile level, a grid: causal or not, seq_q != seq_k, lengths a multiple of no block, GQA 4:1, the LSE, bf16
  and f16; then each feature once (bias, split-KV, clusters of two, a score_mod, packed sequences, a paged KV
  cache through TMA pages and through the cp.async gather, the two- and three-pass builders);
- in the CTA simulator and the PTX executor, a small slice (one head, seq <= 200), bit for bit between the two;
- what stays refused, by name: FP8 at 96 and 192 (`attention_fp8.FP8_HEAD_DIMS`), and head dims FlashAttention-3
  does not take either (80, 160);
- the backward: 64 x 64 blocks, head_dim 192 with a head split, at Tile level (causal or not, deterministic at
  96, a score_mod with a mask_mod), in the CTA simulator and the PTX executor bit for bit, its main kernel
  warp-specialized and ptxas-clean under every ptxas found; deterministic at 192 refused by name.

- the JAX graph rewriter replaces a head_dim 96 or 192 attention.

The forward defaults' ptxas checks are tests/test_compile.py's (among its configurations). `-m slow` runs the
paged and packed kernels and a score_mod with a mask_mod at target and PTX level, the d96 backward there, and
the serving kernels (paged, packed, split-KV, combine) under every ptxas found (docs/testing.md)."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.runtime.attention_base import UnsupportedKernel

BF16, F16 = ml_dtypes.bfloat16, np.float16
HEAD_DIMS = (96, 192)


def _arrays(shapes, dtype=BF16, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _expand(x, heads):
    return np.repeat(x, heads // x.shape[1], axis=1)


# region Tile level


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq_q,seq_k", [(150, 150), (70, 201), (201, 33), (1, 129)])
def test_tile_grid(head_dim, causal, seq_q, seq_k):
    q, k, v = _arrays([(1, 2, seq_q, head_dim), (1, 2, seq_k, head_dim), (1, 2, seq_k, head_dim)],
                      seed=seq_q + seq_k)
    o = tessera.attention(q, k, v, causal=causal, level="tile")
    assert o.shape == q.shape and o.dtype == BF16
    check = reference.check_attention(o, q, k, v, BF16, causal=causal)
    assert check.ok, check


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("dtype", [BF16, F16])
def test_tile_gqa_with_lse(head_dim, dtype):
    """GQA 4:1, causal, bottom-right aligned (seq_q < seq_k), with the LSE."""
    q, k, v = _arrays([(2, 4, 77, head_dim), (2, 1, 140, head_dim), (2, 1, 140, head_dim)], dtype)
    o, lse = tessera.attention(q, k, v, causal=True, return_lse=True, level="tile")
    k4, v4 = _expand(k, 4), _expand(v, 4)
    assert (check := reference.check_attention(o, q, k4, v4, dtype, causal=True)).ok, check
    assert (check := reference.check_lse(lse, q, k4, dtype, causal=True)).ok, check


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_tile_features(head_dim):
    """A bias, split-KV (3 parts and "auto"), clusters of two and a soft-cap score_mod."""
    q, k, v = _arrays([(1, 2, 130, head_dim), (1, 2, 150, head_dim), (1, 2, 150, head_dim)])
    (bias,) = _arrays([(1, 2, 130, 150)], seed=1)
    check = reference.check_attention(tessera.attention(q, k, v, bias=bias, level="tile"), q, k, v, BF16, bias=bias)
    assert check.ok, check
    for splits in (3, "auto"):
        o = tessera.attention(q[:, :, :4], k, v, num_splits=splits, level="tile")
        assert (check := reference.check_attention(o, q[:, :, :4], k, v, BF16)).ok, (splits, check)
    o = tessera.attention(q, k, v, cluster=2, level="tile")  # causal with clusters is refused at every head_dim
    assert (check := reference.check_attention(o, q, k, v, BF16)).ok, check

    def soft_cap(score, b, h, q_idx, kv_idx):
        return 20 * np.tanh(score / 20)
    o = tessera.attention(q, k, v, score_mod=soft_cap, level="tile")
    assert (check := reference.check_attention_mods(o, q, k, v, BF16, score_mod=soft_cap)).ok, check


def _packed(head_dim, level, causal=True):
    cu_q, cu_k = np.array([0, 37, 90], np.int32), np.array([0, 50, 170], np.int32)
    q, k, v = _arrays([(90, 4, head_dim), (170, 1, head_dim), (170, 1, head_dim)], seed=2)
    o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                               max_seqlen_q=53, max_seqlen_k=120, level=level)
    for checks in reference.check_packed_attention(o, lse, q, k, v, cu_q, cu_k, BF16, causal=causal):
        assert all(c.ok for c in checks), checks
    return o


def _kvcache(head_dim, page_size, level, splits=1):
    """Two sequences, GQA 2:1, three query tokens each, through a page table; checked sequence by sequence."""
    rng = np.random.default_rng(page_size)
    k_cache, v_cache = _arrays([(8, page_size, 1, head_dim)] * 2, seed=page_size)
    pages = rng.permutation(8).astype(np.int32).reshape(2, 4)
    lens = np.array([3 * page_size // 2, page_size + 5], np.int32)
    (q,) = _arrays([(2, 3, 2, head_dim)], seed=5)
    o = tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens, page_table=pages,
                                       num_splits=splits, level=level)
    for b in range(2):
        k, v = (np.concatenate([c[p] for p in pages[b]])[:lens[b]].transpose(1, 0, 2)[None] for c in (k_cache, v_cache))
        qb, ob = q[b].transpose(1, 0, 2)[None], o[b].transpose(1, 0, 2)[None]
        assert (check := reference.check_attention(ob, qb, _expand(k, 2), _expand(v, 2), BF16)).ok, (b, check)
    return o


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_tile_packed_and_paged(head_dim):
    """Packed sequences (GQA 4:1, causal, the LSE); a paged cache with pages of 16 rows (the cp.async gather)
    and of one key block (TMA boxes), split-KV or not."""
    _packed(head_dim, "tile")
    _kvcache(head_dim, 16, "tile", splits=2)
    _kvcache(head_dim, tessera.kernels.attention_config.DEFAULT_BLOCK_N[head_dim], "tile")


@pytest.mark.parametrize("builder", ["two_pass_attention", "three_pass_attention"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_tile_multipass_builders(builder, head_dim):
    q, k, v = _arrays([(1, 1, 100, head_dim), (1, 1, 130, head_dim), (1, 1, 130, head_dim)])
    module = getattr(tessera.kernels, builder)(head_dim=head_dim, causal=True)
    o = tessera.interpret(module, q, k, v)
    assert (check := reference.check_attention(o, q, k, v, BF16, causal=True)).ok, check


# endregion
# region target and PTX level


@pytest.mark.parametrize("head_dim,causal,seq_q,seq_k", [(96, True, 150, 150), (192, False, 70, 130)])
def test_target_and_ptx_agree_bit_for_bit(head_dim, causal, seq_q, seq_k):
    """The default kernel (warp-specialized, two stages) in the CTA simulator and the PTX executor: the same bits,
    within the float64 tolerance."""
    q, k, v = _arrays([(1, 1, seq_q, head_dim), (1, 1, seq_k, head_dim), (1, 1, seq_k, head_dim)], seed=7)
    target = tessera.attention(q, k, v, causal=causal, level="target")
    ptx = tessera.attention(q, k, v, causal=causal, level="ptx")
    assert np.array_equal(target.view(np.uint16), ptx.view(np.uint16))
    assert (check := reference.check_attention(ptx, q, k, v, BF16, causal=causal)).ok, check


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_score_mod_and_mask_mod_below_tile_level(head_dim):
    """A soft-cap score_mod with a causal sliding-window mask_mod: within the float64 tolerance in the CTA
    simulator and the PTX executor, bit for bit between the two, without a fallback warning."""
    from tessera.ir.diagnostics import TesseraWarning

    def soft_cap(score, b, h, q_idx, kv_idx):
        return 20 * np.tanh(score / 20)

    def window(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx < 40) & (q_idx >= kv_idx)
    q, k, v = _arrays([(1, 1, 130, head_dim)] * 3, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)
        target, ptx = (tessera.attention(q, k, v, score_mod=soft_cap, mask_mod=window, level=level)
                       for level in ("target", "ptx"))
    assert np.array_equal(target.view(np.uint16), ptx.view(np.uint16))
    check = reference.check_attention_mods(ptx, q, k, v, BF16, score_mod=soft_cap, mask_mod=window)
    assert check.ok, check


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_packed_and_paged_below_tile_level(head_dim):
    """Packed sequences, the cp.async gather (12 or 24 chunks a row: threads idle, a last partial round of rows)
    and TMA pages (`tile.clear_rows` with threads idle), in the CTA simulator and the PTX executor, bit for bit."""
    for run in (lambda level: _packed(head_dim, level), lambda level: _kvcache(head_dim, 16, level),
                lambda level: _kvcache(head_dim, tessera.kernels.attention_config.DEFAULT_BLOCK_N[head_dim], level)):
        target, ptx = run("target"), run("ptx")
        assert np.array_equal(target.view(np.uint16), ptx.view(np.uint16))


# endregion
# region refusals


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_fp8_refuses_96_and_192_by_name(head_dim):
    with pytest.raises(ValueError, match=f"head_dim {head_dim} is not supported by the FP8 attention kernel"):
        tessera.kernels.flash_attention(head_dim=head_dim, dtype="e4m3")
    e4m3 = np.zeros((1, 1, 16, head_dim), ml_dtypes.float8_e4m3fn)
    with pytest.raises(UnsupportedKernel, match=f"head_dim {head_dim} is not supported by Tessera's FP8 attention "
                                                r"kernel \(supported: 64, 128, 256\)"):
        tessera.attention(e4m3, e4m3, e4m3, level="tile")


@pytest.mark.parametrize("head_dim", [96, 192])
def test_the_rewriter_replaces_a_jax_graphs_attention(head_dim, tmp_path, capsys):
    """A JAX-exported StableHLO attention at head_dim 96 or 192 (the d64 fixture with its head dim changed)
    is rewritten to the attention op, and the rewritten graph agrees with the original (`tessera-run
    --compare`, the kernel in the Tile interpreter)."""
    from pathlib import Path

    from tessera.tools import tessera_run

    text = (Path(__file__).parent / "rewriter" / "fwd_plain_s256_d64.mlir").read_text()
    path = tmp_path / f"fwd_plain_s256_d{head_dim}.mlir"
    path.write_text(text.replace("x64xbf16", f"x{head_dim}xbf16").replace("4x64x256", f"4x{head_dim}x256"))
    assert tessera_run.main([str(path), "-p", "rewrite-attention{match=patterns}", "--compare", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "(1 forward, 0 backward)" in out and "MISMATCH" not in out, out


@pytest.mark.parametrize("head_dim", [80, 160])
def test_other_head_dims_stay_refused(head_dim):
    (q,) = _arrays([(1, 1, 16, head_dim)])
    with pytest.raises(UnsupportedKernel, match=rf"head_dim {head_dim} is not supported .*"
                                                r"\(supported: 64, 96, 128, 192, 256\)"):
        tessera.attention(q, q, q, level="tile")


# endregion


# region lowering


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_defaults_warp_specialize_without_fallback(head_dim, causal):
    """The default pipeline's first rung (warp-specialized, two stages) takes the default kernels, with no
    fallback warning: at 192 the key block 112 keeps the two K/V stages in shared memory (128 does not)."""
    from tessera.runtime.flex import warp_specialized_refusal

    module = tessera.kernels.flash_attention(head_dim=head_dim, causal=causal)
    assert warp_specialized_refusal(module) is None


SERVING = {
    "paged TMA": lambda d: tessera.kernels.flash_attention_paged(d, page_size=128 if d == 96 else 112),
    "paged gather": lambda d: tessera.kernels.flash_attention_paged(d, causal=True, page_size=16),
    "packed": lambda d: tessera.kernels.flash_attention_varlen(d, causal=True, return_lse=True),
    "split-KV": lambda d: tessera.kernels.flash_attention(head_dim=d, num_splits=3),
    "combine": lambda d: tessera.kernels.attention_combine(d, 3),
}


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("kernel", list(SERVING))
def test_serving_kernels_warp_specialize_and_assemble_cleanly(kernel, head_dim):
    """The serving kernels at 96 and 192 (the gather with threads idle among them) lower with the default
    pipeline's first rung, without a fallback warning, and every ptxas found assembles them without a warning,
    a spill or a stack frame."""
    from tessera.ir.diagnostics import TesseraWarning
    from tessera.runtime.flex import warp_specialized_refusal
    from tessera.toolchain import compile_ptx, find_all_ptxas

    module = SERVING[kernel](head_dim)
    if kernel != "combine":  # no loop to pipeline
        assert warp_specialized_refusal(module) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)
        ptx = tessera.compile(module)
    for version in find_all_ptxas():
        result = compile_ptx(ptx, ptxas=version.path)
        assert not result.warnings and not result.log.diagnostics, (version, result.warnings)
        entry = result.entry()
        assert entry.spill_store_bytes == entry.stack_frame_bytes == 0, (version, entry)


# endregion


# region the backward


def _backward_problem(head_dim, causal, seq_q=90, seq_k=130, seed=11):
    q = _arrays([(1, 1, seq_q, head_dim)], seed=seed)[0]
    k, v, do = _arrays([(1, 1, seq_k, head_dim), (1, 1, seq_k, head_dim), (1, 1, seq_q, head_dim)], seed=seed + 1)
    o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True, level="tile")
    return q, k, v, o, lse, do


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_backward_tile(head_dim, causal):
    """64 x 64 blocks (`DEFAULT_BLOCKS`), head_dim 192 with two thread blocks per key block (`HEAD_SPLIT`)."""
    q, k, v, o, lse, do = _backward_problem(head_dim, causal)
    grads = tessera.attention_backward(q, k, v, o, lse, do, causal=causal, level="tile")
    for check in reference.check_attention_backward(grads, q, k, v, o, do, BF16, causal=causal):
        assert check.ok, check


def test_backward_deterministic_and_score_mod_tile():
    """deterministic=True at 96; a soft-cap with a causal mask_mod at 96 and 192."""
    q, k, v, o, lse, do = _backward_problem(96, False)
    grads = tessera.attention_backward(q, k, v, o, lse, do, deterministic=True, level="tile")
    assert all(c.ok for c in reference.check_attention_backward(grads, q, k, v, o, do, BF16))

    def soft_cap(score, b, h, q_idx, kv_idx):
        return 20 * np.tanh(score / 20)

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    for head_dim in HEAD_DIMS:
        q, k, v, _, _, do = _backward_problem(head_dim, False)
        o, lse = tessera.attention(q, k, v, score_mod=soft_cap, mask_mod=causal_mask, return_lse=True, level="tile")
        grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=soft_cap, mask_mod=causal_mask,
                                           level="tile")
        checks = reference.check_attention_mods_backward(grads, q, k, v, o, do, BF16, score_mod=soft_cap,
                                                         mask_mod=causal_mask)
        assert all(c.ok for c in checks), (head_dim, checks)


def test_backward_deterministic_refuses_192_by_name():
    q, k, v, o, lse, do = _backward_problem(192, False, seq_q=16, seq_k=16)
    with pytest.raises(ValueError, match=r"head_dim 192 is not supported by the attention backward with "
                                         r"deterministic=True: its dK and dV need head_split=2"):
        tessera.attention_backward(q, k, v, o, lse, do, deterministic=True, level="tile")


@pytest.mark.parametrize("head_dim", [pytest.param(96, marks=pytest.mark.slow), 192])
def test_backward_target_and_ptx_agree_bit_for_bit(head_dim):
    """The default pipeline's kernels (warp-specialized main kernel, no fallback warning) in the CTA simulator
    and the PTX executor: the same bits, within the backward's rule."""
    from tessera.ir.diagnostics import TesseraWarning

    problem = _backward_problem(head_dim, True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)
        target, ptx = (tessera.attention_backward(*problem, causal=True, level=level) for level in ("target", "ptx"))
    assert all(np.array_equal(a.view(np.uint16), b.view(np.uint16)) for a, b in zip(target, ptx))
    q, k, v, o, _, do = problem
    assert all(c.ok for c in reference.check_attention_backward(ptx, q, k, v, o, do, BF16, causal=True))


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_backward_main_kernel_ptxas_clean(head_dim):
    """The main kernel the GPU runs (`attention_backward_main`: at 192 with the head split) warp-specializes with
    the default pipeline, without a fallback warning, and every ptxas found (CUDA 12 and 13) assembles it
    without a warning, a spill or a stack frame."""
    from tessera.ir.diagnostics import TesseraWarning
    from tessera.kernels.attention_backward import attention_backward_main
    from tessera.runtime.flex import warp_specialized_refusal
    from tessera.toolchain import compile_ptx, find_all_ptxas

    main = attention_backward_main(head_dim=head_dim, causal=True)
    assert warp_specialized_refusal(main) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)
        ptx = tessera.compile(main)
    for version in find_all_ptxas():
        result = compile_ptx(ptx, ptxas=version.path)
        assert not result.warnings and not result.log.diagnostics, (version, result.warnings)
        entry = result.entry()
        assert entry.spill_store_bytes == entry.stack_frame_bytes == 0, (version, entry)


# endregion
