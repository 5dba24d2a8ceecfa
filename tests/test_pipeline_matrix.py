"""The full pipeline (`passes.SPECIALIZED_PIPELINE`: rings, overlap-softmax, peeling, a TMA producer
warpgroup) over the foundation issue's whole matrix in the CTA simulator, against NumPy: every attention
builder (flash, two-pass, three-pass) x head_dim 64/128 x causal or not x bf16/f16, at 2 stages (the
default), and every builder again at 1, 3 and 4 stages; GEMM at every stage count.

The CTA simulator costs ~50x the Tile interpreter, so each configuration runs the shapes that take the
different paths of a pipelined loop, alternating along the matrix (consecutive configurations differ in
dtype only, so each head_dim/causal pair gets both): fewer trips than ring slots and a partial key block
(17 x 200: two trips, the second masked), a 0-trip row block under the causal mask (200 x 17), and, for the
stage counts, more trips than slots (64 x 600: five)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tessera
from tessera import reference
from tessera.numerics import dtype_from_name
from tessera.passes import SPECIALIZED_PIPELINE

from conftest import build_kernel
from text_edits import checked

BUILDERS = ["flash_attention", "two_pass_attention", "three_pass_attention"]
MATRIX = list(itertools.product(BUILDERS, (64, 128), (False, True), ("bf16", "f16")))


def _with_stages(stages: int) -> str:
    """The full pipeline with `stages` ring slots (overlap-softmax needs two: it is left out for one)."""
    pipeline = checked(SPECIALIZED_PIPELINE).replace("pipeline-loops{stages=2}", f"pipeline-loops{{stages={stages}}}")
    assert pipeline != SPECIALIZED_PIPELINE or stages == 2
    return checked(pipeline).replace("overlap-softmax,", "") if stages == 1 else pipeline


def _check(builder, head_dim, causal, dtype, stages, shapes, rng, **options):
    module = build_kernel(builder, head_dim=head_dim, causal=causal, dtype=dtype, **options)
    for seq_q, seq_k in shapes:
        q = rng.standard_normal((1, 1, seq_q, head_dim))
        k, v = (rng.standard_normal((1, 1, seq_k, head_dim)) for _ in range(2))
        out = tessera.interpret(module, q, k, v, level="target", pipeline=_with_stages(stages))
        check = reference.check_attention(out, q, k, v, dtype_from_name(dtype), causal=causal)
        assert check.ok, (f"{builder} d{head_dim} causal={causal} {dtype} stages={stages} {options} "
                          f"{seq_q}x{seq_k}: {check}")


@pytest.mark.parametrize("builder, head_dim, causal, dtype", MATRIX,
                         ids=[f"{b}-d{d}-{'causal' if c else 'full'}-{t}" for b, d, c, t in MATRIX])
def test_default_pipeline_matrix(builder, head_dim, causal, dtype, rng):
    shapes = [(17, 200), (200, 17)]
    _check(builder, head_dim, causal, dtype, 2, [shapes[MATRIX.index((builder, head_dim, causal, dtype)) % 2]], rng)


HEAD_DIM_256 = [("flash_attention", False, "bf16"), ("flash_attention", True, "f16"),
                ("two_pass_attention", True, "bf16"), ("three_pass_attention", False, "f16")]


@pytest.mark.parametrize("builder, causal, dtype", HEAD_DIM_256,
                         ids=[f"{b}-{'causal' if c else 'full'}-{t}" for b, c, t in HEAD_DIM_256])
def test_head_dim_256(builder, causal, dtype, rng):
    """head_dim 256 at its default key block (48: a score-tile row spans 12 registers of a thread), with
    a partial key block, a masked trip and more trips than ring slots."""
    _check(builder, 256, causal, dtype, 2, [(130, 200)], rng)


ODD_KEY_BLOCKS = [("flash_attention", 64, 80, True, "bf16"), ("two_pass_attention", 128, 48, False, "f16"),
                  ("three_pass_attention", 64, 80, True, "bf16")]


@pytest.mark.parametrize("builder, head_dim, block_n, causal, dtype", ODD_KEY_BLOCKS,
                         ids=[f"{b}-d{d}-bn{n}-{'causal' if c else 'full'}-{t}" for b, d, n, c, t in ODD_KEY_BLOCKS])
def test_key_blocks_that_are_not_powers_of_two(builder, head_dim, block_n, causal, dtype, rng):
    """A row of a [64, BN] wgmma accumulator spans BN / 4 registers of a thread: 20 for BN = 80, 12 for 48.
    The row reductions (max, sum) fold them pairwise and must carry the odd one at each level."""
    _check(builder, head_dim, causal, dtype, 2, [(130, 300)], rng, block_n=block_n)


STAGE_RUNS = [
    ("flash_attention", 1, (128, True, "f16")), ("flash_attention", 3, (128, False, "bf16")),
    ("flash_attention", 4, (64, True, "bf16")),
    ("two_pass_attention", 1, (128, False, "bf16")), ("two_pass_attention", 3, (64, True, "f16")),
    ("two_pass_attention", 4, (64, False, "bf16")),
    ("three_pass_attention", 1, (64, True, "bf16")), ("three_pass_attention", 3, (128, True, "f16")),
    ("three_pass_attention", 4, (64, False, "f16")),
]
"""Each builder at 1, 3 and 4 stages; head_dim 128 at 4 stages (and two-pass at 3) needs more than the 227 KiB
of shared memory a block may have, which `test_too_many_stages_are_refused` checks."""


@pytest.mark.parametrize("builder, stages, config", STAGE_RUNS,
                         ids=[f"{b}-stages{s}-d{c[0]}-{'causal' if c[1] else 'full'}-{c[2]}" for b, s, c in STAGE_RUNS])
def test_stage_counts(builder, stages, config, rng):
    head_dim, causal, dtype = config
    # flash_attention's default at head_dim 128 is FlashAttention-3's 176 keys, whose K and V slots take three
    # stages past 227 KiB (refused by name); its three-stage run keeps 128 keys.
    options = {"block_n": 128} if (builder, head_dim) == ("flash_attention", 128) and stages >= 3 else {}
    _check(builder, head_dim, causal, dtype, stages, [(64, 600)], rng, **options)


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_gemm_stage_counts(stages, rng):
    module = build_kernel("gemm", dtype="bf16")
    m, n, k = 130, 136, 5 * 64 + 8  # six K trips, the last partial
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    out = tessera.interpret(module, a, b, level="target", pipeline=_with_stages(stages))
    check = reference.check_gemm(out, a, b, dtype_from_name("bf16"))
    assert check.ok, f"stages={stages}: {check}"


@pytest.mark.parametrize("builder, stages", [("flash_attention", 4), ("two_pass_attention", 3)])
def test_too_many_stages_are_refused(builder, stages):
    module = build_kernel(builder, head_dim=128, causal=False, dtype="bf16")
    with pytest.raises(Exception, match=r"more than the 232448 a thread block of sm_90 may have: use fewer pipeline "
                                        r"stages or smaller tiles"):
        tessera.lower_to_target(module, module.body.block.first_op.sym_name.data, _with_stages(stages))
