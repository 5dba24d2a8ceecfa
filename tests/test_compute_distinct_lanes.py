"""`compute-distinct-lanes` and the lowering of coordinate differences (`convert_tile_to_sm90/index_diagonals.py`):
the same arithmetic on fewer registers, so the kernel's results are bitwise those of the whole-tile lowering,
and the registers it saves are the ones the allocator counts. (Target and PTX level against float64 with
these modifiers: tests/test_attention_mods_ws.py; the figures: bench/attention_variants.py --backward.)"""

from __future__ import annotations

import numpy as np

import tessera
from tessera import passes
from tessera.kernels import flash_attention
from tessera.numerics import BF16, round_to

SLOPES = np.array([0.5, 0.25])
TABLE = np.linspace(-1.0, 1.0, 2 * 63).reshape(2, 63)


def alibi_table(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h] * (kv_idx - q_idx) + TABLE[h, np.clip(q_idx - kv_idx + 31, 0, 62)]


def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 40) & (3 <= kv_idx + q_idx)


def test_distinct_lanes_are_bitwise_the_whole_tile_lowering():
    """The forward with ALiBi, a table and a window, single-stage at target level, with and without the pass (the
    differences are lowered as views either way: without it, each op runs on all 64 registers)."""
    rng = np.random.default_rng(0)
    q, k, v = (round_to(rng.standard_normal((1, 1, n, 64)), BF16) for n in (70, 90, 90))
    module = flash_attention(64, score_mod=alibi_table, mask_mod=window, return_lse=True, block_n=64)
    arrays = [SLOPES.astype(np.float32), TABLE.astype(np.float32)]
    without = passes.PTX_PIPELINE.replace("compute-distinct-lanes,", "")
    assert without != passes.PTX_PIPELINE
    runs = [tessera.interpret(module, q, k, v, *arrays, level="target", pipeline=p) for p in (passes.PTX_PIPELINE,
                                                                                                 without)]
    for a, b in zip(*runs):
        assert np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32), equal_nan=True)


def test_fewer_registers_with_the_pass():
    """ALiBi's product and the table's gather on the thread's 18 distinct offsets at 64 keys: the single-stage
    kernel's count drops by at least what a [BM, 64] tile of the product takes beyond them, 32 - 18 registers.
    (Without the pass the kernel at 128 keys does not fit single-stage: 273 registers.)"""
    module = flash_attention(64, score_mod=alibi_table, block_n=64)
    counts = []
    for pipeline in (passes.PTX_PIPELINE, passes.PTX_PIPELINE.replace("compute-distinct-lanes,", "")):
        lowered = tessera.compile(module, target="target", pipeline=pipeline)
        (fn,) = [op for op in lowered.walk() if "sm90.registers" in op.attributes]
        counts.append(fn.attributes["sm90.registers"].data["peak"].value.data)
    assert counts[0] <= counts[1] - 14, counts
