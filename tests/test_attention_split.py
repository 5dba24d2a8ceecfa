"""Split-KV attention (issue 15): `flash_attention(num_splits=S)` writes each part's O_s (f32) and lse_s,
`attention_combine` merges them (FlashAttention-3's edge cases: all parts empty gives O = 0 and LSE = -inf, an
empty part contributes nothing), `num_splits_heuristic` is FlashAttention-3's choice, and `tessera.attention`
runs both kernels. At Tile level on FA3's decode/prefill grid (S = 1 against S = 3, head_dim 64/128, causal or
not); a slice at target and PTX level through the default pipeline; ptxas accepts both kernels cleanly. The
larger grid (more heads, seq_k 20000, num_splits "auto") is bench/split_kv.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.kernels import attention_combine, flash_attention
from tessera.kernels.attention_split import choose_num_splits, num_splits_heuristic
from tessera.numerics import BF16
from tessera.reference_attention import attention_operands
from tessera.runtime.attention_plan import combine_lowering
from tessera.sm90.launch import L2_BYTES
from tessera.toolchain import compile_ptx, find_all_ptxas

SHAPES = [(1, 128), (1, 339), (3, 799), (64, 800), (128, 128), (256, 512)]
"""(seq_q, seq_k) of FlashAttention-3's split-KV tests that keep the suite fast (issue 15)."""


def _split(q, k, v, head_dim, causal, splits, level="tile"):
    """(O, LSE) through the split kernel and the combine kernel, the partial outputs reshaped as the runtime
    does ([S x batch, ...] is [S, batch, ...] in memory)."""
    o_part, lse_part = tessera.interpret(flash_attention(head_dim, causal=causal, num_splits=splits), q, k, v,
                                         level=level)
    batch = q.shape[0]
    assert o_part.shape == (splits * batch,) + q.shape[1:] and o_part.dtype == np.float32
    parts = [x.reshape((splits, batch) + x.shape[1:]) for x in (o_part, lse_part)]
    with combine_lowering():
        return tessera.interpret(attention_combine(head_dim, splits, return_lse=True), *parts, level=level)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("seq_q,seq_k", SHAPES)
def test_three_splits_agree_with_one_at_tile_level(seq_q, seq_k, head_dim, causal, rng):
    q, k, v = attention_operands(rng, seq_q, seq_k, head_dim, heads=2)
    o1, lse1 = tessera.interpret(flash_attention(head_dim, causal=causal, return_lse=True), q, k, v)
    o3, lse3 = _split(q, k, v, head_dim, causal, 3)
    check = reference.check_attention(o3, q, k, v, BF16, causal=causal)
    assert check.ok, check
    assert reference.check_lse(lse3, q, k, BF16, causal=causal).ok
    # The two agree as each agrees with float64: within the tolerance rule, LSE within 1e-4.
    assert np.abs(o3.astype(np.float64) - o1.astype(np.float64)).max() <= check.tolerance
    both = np.isfinite(lse1)
    assert np.array_equal(both, np.isfinite(lse3))
    assert np.abs(lse3[both] - lse1[both]).max(initial=0) <= reference.LSE_TOLERANCE


def test_empty_parts_write_zero_and_minus_infinity(rng):
    """seq_k = 128 is one key block: with 3 parts, parts 1 and 2 see no key and write O_s = 0, lse_s = -inf;
    part 0 is the whole answer."""
    q, k, v = attention_operands(rng, 5, 128, 64, heads=2)
    o_part, lse_part = tessera.interpret(flash_attention(64, num_splits=3), q, k, v)
    lse_part = lse_part.reshape(3, 1, 2, 5)
    assert np.all(np.isneginf(lse_part[1:])) and not np.any(o_part.reshape(3, 1, 2, 5, 64)[1:])
    assert reference.check_lse(lse_part[0], q, k, BF16).ok


def _combine_reference(o_parts, lse_parts):
    """The merge in float64, FA3's conventions: M = -inf counts as 0, and so does lse = -inf in the weights."""
    m = lse_parts.max(axis=0)
    m = np.where(np.isneginf(m), 0, m)
    with np.errstate(divide="ignore"):
        lse = np.log(np.exp(lse_parts - m).sum(axis=0)) + m
    weights = np.exp(lse_parts - np.where(np.isneginf(lse), 0, lse))
    return (weights * o_parts).sum(axis=0), lse


def _edge_case_parts(rng, splits=4, rows=70, head_dim=64):
    """Partial results for one head, with the edge cases: rows 0-9 see no key in any part (every lse_s = -inf,
    O_s = 0), part 1 is empty for every row, rows 10-19 see keys only in part 3, the rest in parts 0, 2, 3;
    lse_s spread over +-30 so that the max matters."""
    o = rng.standard_normal((splits, 1, 1, rows, head_dim)).astype(np.float32)
    lse = (rng.standard_normal((splits, 1, 1, rows, 1)) * 30).astype(np.float32)
    lse[:, :, :, :10] = -np.inf
    lse[1] = -np.inf
    lse[:3, :, :, 10:20] = -np.inf
    o[np.broadcast_to(np.isneginf(lse), o.shape)] = 0
    return o, lse


@pytest.mark.parametrize("level", ["tile", "ptx"])
def test_combine_edge_cases(level, rng):
    o_parts, lse_parts = _edge_case_parts(rng)
    with combine_lowering():
        o, lse = tessera.interpret(attention_combine(64, 4, return_lse=True), o_parts, lse_parts, level=level)
    ref_o, ref_lse = _combine_reference(o_parts.astype(np.float64), lse_parts.astype(np.float64))
    assert np.all(np.isneginf(lse[..., :10, :])) and not np.any(o[..., :10, :].astype(np.float32))
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse))
    finite = np.isfinite(ref_lse)
    assert np.abs(lse[finite] - ref_lse[finite]).max() <= reference.LSE_TOLERANCE
    # O is rounded to bf16 once: half an ulp of the largest output, plus the f32 sum of 4 weighted parts.
    assert np.abs(o.astype(np.float64) - ref_o).max() <= 2.0**-8 * np.abs(ref_o).max() + 1e-5
    # Rows 10-19 are part 3 alone: its O_s exactly, up to the bf16 rounding.
    assert np.array_equal(o[0, 0, 10:20], o_parts[3, 0, 0, 10:20].astype(BF16))


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_split_kv_through_the_default_pipeline(level, rng):
    """The split kernel (warp-specialized, part-relative key positions) and the combine kernel in the CTA
    simulator and from their PTX text: a decode-like shape, causal, 3 parts of 2 key blocks each."""
    q, k, v = attention_operands(rng, 3, 700, 64)
    o, lse = _split(q, k, v, 64, True, 3, level=level)
    assert reference.check_attention(o, q, k, v, BF16, causal=True).ok
    assert reference.check_lse(lse, q, k, BF16, causal=True).ok


def test_split_and_combine_kernels_assemble_without_warning_or_spill():
    """head_dim 128 (the split kernel sits at the consumers' 240 registers) under the newest ptxas."""
    ptxas = find_all_ptxas()[0].path
    with combine_lowering():
        kernels = [flash_attention(128, causal=True, num_splits=3), attention_combine(128, 3, return_lse=True)]
        for module in kernels:
            result = compile_ptx(tessera.compile(module), ptxas=ptxas)
            entry = result.entry()
            assert not result.warnings and not result.log.diagnostics
            assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0


def test_split_kernel_grid_counts_parts_and_heads():
    module = flash_attention(64, num_splits=3)
    text = tessera.print_module(module)
    assert "tile.grid = #tile.dims<ceildiv(seq_q, 128), 3 * heads, batch>" in text
    assert "#tile.dims<3 * batch, heads, seq_q, 64>" in text and "@flash_attention_d64_bf16_split3" in text
    assert tessera.find_kernel(module).grid_size({"seq_q": 1, "heads": 6, "batch": 2, "seq_k": 9}) == (1, 18, 2)
    assert tessera.print_module(tessera.parse_module(text)) == text


def test_unsupported_split_configurations_are_refused_by_name():
    with pytest.raises(ValueError, match="num_splits must be an integer from 1 to 256; got 0"):
        flash_attention(64, num_splits=0)
    with pytest.raises(ValueError, match="num_splits > 1 .* supports head_dim 64, 96, 128, 192; got head_dim 256"):
        flash_attention(256, num_splits=2)
    with pytest.raises(ValueError, match="head_dim must be one of 64, 96, 128, 192; got 256"):
        attention_combine(256, 2)


# region num_splits="auto": FlashAttention-3's heuristic


def test_heuristic_takes_the_fewest_splits_within_85_percent_of_the_best_wave_efficiency():
    # FA3's own example (heuristics.h): 48 blocks on 108 SMs, 2 splits (0.89) rather than 3 (0.67).
    assert num_splits_heuristic(48, num_n_blocks=64, num_m_blocks=1, size_one_kv_head=0, causal=False,
                                num_sms=108) == 2
    # Decode, 6 heads, seq_k 20000 at head_dim 128 (157 key blocks) on 132 SMs: 22 splits fill one wave
    # exactly; 19 is the first to reach 85% of that (114 / 132 = 0.86).
    assert choose_num_splits(1, 6, 1, 20000, 128, causal=False) == 19
    efficiency = [6 * s / 132 / math.ceil(6 * s / 132) for s in range(1, 23)]
    assert efficiency[18] >= 0.85 * max(efficiency) > efficiency[17]


def test_heuristic_does_not_split_short_key_ranges_or_full_grids():
    assert num_splits_heuristic(1, num_n_blocks=4, num_m_blocks=1, size_one_kv_head=0, causal=False) == 1
    assert choose_num_splits(1, 1, 1, 512, 128, causal=False) == 1  # 4 key blocks: never split (FA3's example)
    assert num_splits_heuristic(106, num_n_blocks=100, num_m_blocks=1, size_one_kv_head=0, causal=False) == 1
    assert choose_num_splits(4, 32, 1024, 8192, 128, causal=True) == 1  # causal prefill: 1024 blocks


def test_heuristic_splits_a_kv_head_larger_than_l2_unless_causal():
    big = 3 * L2_BYTES + 1  # 4 L2-sized pieces
    assert num_splits_heuristic(400, 1000, num_m_blocks=264, size_one_kv_head=big, causal=False) == 4
    assert num_splits_heuristic(400, 1000, num_m_blocks=264, size_one_kv_head=big, causal=True) == 1
    assert num_splits_heuristic(400, 1000, num_m_blocks=263, size_one_kv_head=big, causal=False) == 1


# endregion
# region tessera.attention


def test_attention_api_runs_split_kv_and_returns_the_lse(rng):
    q, k, v = (x.astype(BF16) for x in attention_operands(rng, 2, 600, 64, batch=2, heads=2))
    o, lse = tessera.attention(q, k, v, return_lse=True, num_splits=3, level="tile")
    assert o.shape == q.shape and o.dtype == BF16 and lse.shape == (2, 2, 2) and lse.dtype == np.float32
    assert reference.check_lse(lse, q, k, BF16).ok and reference.check_attention(o, q, k, v, BF16).ok
    auto = tessera.attention(q, k, v, num_splits="auto", level="tile")
    assert reference.check_attention(auto, q, k, v, BF16).ok


def test_zero_splits_is_auto_in_every_entry_point(rng):
    """Regression: docs/serving.md reads num_splits=0 as "auto" (FlashAttention's convention, in each of its
    entry points); tessera.attention refused it, dense and packed, where attention_with_kvcache took it."""
    q, k, v = (x.astype(BF16) for x in attention_operands(rng, 1, 3000, 64, heads=2))
    assert choose_num_splits(1, 2, 1, 3000, 64, causal=False) > 1
    for got, want in zip(tessera.attention(q, k, v, return_lse=True, num_splits=0, level="tile"),
                         tessera.attention(q, k, v, return_lse=True, num_splits="auto", level="tile")):
        np.testing.assert_array_equal(got, want)
    packed = dict(cu_seqlens_q=np.array([0, 1], np.int32), cu_seqlens_k=np.array([0, 3000], np.int32),
                  max_seqlen_q=1, max_seqlen_k=3000, level="tile")
    q, k, v = (x[0].swapaxes(0, 1) for x in (q, k, v))
    np.testing.assert_array_equal(tessera.attention(q, k, v, num_splits=0, **packed),
                                  tessera.attention(q, k, v, num_splits="auto", **packed))


@pytest.mark.parametrize("options,message", [
    (dict(num_splits=-1), "num_splits must be an integer from 1 to 256; got -1"),
    (dict(num_splits="many"), "num_splits must be an integer or \"auto\"; got 'many'"),
    (dict(return_lse="yes"), "return_lse must be True or False"),
    (dict(level="gpu"), "level must be None \\(the GPU\\) or one of 'tile', 'target', 'ptx'; got 'gpu'"),
])
def test_attention_api_refuses_bad_options_by_name(options, message, rng):
    q, k, v = (x.astype(BF16) for x in attention_operands(rng, 2, 60, 64, heads=2))
    with pytest.raises(ValueError, match=message):
        tessera.attention(q, k, v, **options)


# endregion


def test_split_kv_with_lse_runs_through_the_driver_calls(monkeypatch, tmp_path, rng):
    """The GPU path without a GPU: tessera.attention compiles both kernels, launches the split kernel over
    (ceildiv(seq_q, 128), 3 x heads, batch) and the combine kernel over (ceildiv(seq_q, 128), heads, batch) on
    the partial outputs it got back, through a fake driver that runs each kernel's PTX in the PTX executor."""
    from test_runtime import FakeCuda

    from tessera.runtime import launch as launch_module
    from tessera.runtime.attention_plan import attention_plan
    from tessera.runtime.compiler import compile_kernel
    from tessera.runtime.driver import Driver

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    q, k, v = (x.astype(BF16) for x in attention_operands(rng, 3, 300, 64, batch=2))
    plan = attention_plan(q.shape, k.shape, 64, True, "bf16", None, True, 3)
    with combine_lowering():
        fake = FakeCuda([compile_kernel(plan.forward), compile_kernel(plan.combine)])
    monkeypatch.setattr(launch_module, "get_driver", lambda: Driver(fake))
    o, lse = tessera.attention(q, k, v, causal=True, return_lse=True, num_splits=3)
    assert reference.check_attention(o, q, k, v, BF16, causal=True).ok
    assert lse.shape == (2, 1, 3) and reference.check_lse(lse, q, k, BF16, causal=True).ok
    assert [launch.grid for launch in fake.launches] == [(1, 3, 2), (1, 1, 2)]
