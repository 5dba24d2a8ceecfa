"""GEMM tile schedules (`tessera.kernels.gemm.GEMM_SCHEDULES`) and the K loop's own ring depth (`tile.stages`).

- `tile.stages = N` on a loop gives it an N-stage ring whatever the pass's option; a value outside 1..4 is
  refused, naming the loop, before the module changes; the builder refuses such a `stages` by name.
- Every schedule computes bit for bit what the 128 x 128 default computes (the same K order into the same
  f32 accumulator), at the Tile interpreter, the CTA simulator and the PTX executor, on shapes with ragged M
  and N and a K of one, two and more k-steps, and within `check_gemm`'s tolerance of the float64 product.
- The 128 x 256 schedules compile to m64n256k16 wgmma with four stages and, under ptxas, without a spill;
  the clustered ones multicast B, the "-pingpong" ones take turns at named barriers. They refuse beta != 0 by name; sizes TMA cannot read keep the 128 x 128
  ld.global kernel.
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import scf
from xdsl.dialects.builtin import IntegerAttr, StringAttr

import tessera
from tessera import reference
from tessera.dialects import tile
from tessera.kernel_abi import STAGES_ATTR
from tessera.kernels import gemm
from tessera.kernels.gemm import GEMM_SCHEDULES
from tessera.numerics import BF16
from tessera.passes import PINGPONG_PIPELINE, apply_pipeline
from tessera.passes.pipeline_loops import PipelineLoopsError
from tessera.ptx.module import print_ptx
from tessera.runtime.gemm import gemm as run_gemm
from tessera.runtime.gemm import gemm_config

WIDE = ("128x256", "128x256-cluster2", "128x256-pingpong", "128x256-cluster2-pingpong")


def _k_loop(module) -> scf.ForOp:
    (loop,) = [op for op in module.walk() if isinstance(op, scf.ForOp)]
    return loop


def _ring_depths(module) -> set[int]:
    return {op.result.type.get_shape()[0] for op in module.walk()
            if isinstance(op, tile.AllocSharedOp) and op.result.name_hint and op.result.name_hint.endswith("_ring")}


# region tile.stages


@pytest.mark.parametrize("stages", [None, 1, 3, 4])
def test_the_loop_asks_for_its_ring_depth(stages):
    module = gemm("bf16", aligned=True, stages=stages)
    apply_pipeline(module, "assign-swizzle,pipeline-loops{stages=2}")
    module.verify()
    assert _ring_depths(module) == {2 if stages is None else stages}


@pytest.mark.parametrize("value", [IntegerAttr(5, 64), IntegerAttr(0, 64), StringAttr("4")])
def test_a_ring_depth_out_of_range_is_refused_at_the_loop(value):
    module = gemm("bf16", aligned=True)
    _k_loop(module).attributes[STAGES_ATTR] = value
    before = str(module)
    with pytest.raises(PipelineLoopsError, match=r"pipeline-loops: %acc_final = scf\.for .*tile\.stages must be an integer "
                                                 r"from 1 to 4"):
        apply_pipeline(module, "assign-swizzle,pipeline-loops{stages=2}")
    assert "_ring" not in str(module) and str(module).count("scf.for") == before.count("scf.for")


@pytest.mark.parametrize("stages", [0, 5, True, 2.0])
def test_the_builder_refuses_a_stage_count_by_name(stages):
    with pytest.raises(ValueError, match="stages must be None or an integer from 1 to 4"):
        gemm("bf16", stages=stages)
    with pytest.raises(ValueError, match=r"stages needs the TMA kernel \(aligned=True or None\)"):
        gemm("bf16", stages=4, aligned=False)


# endregion
# region Schedules


def _inputs(rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    return a, b


LEVEL_CASES = [
    ("tile", [(200, 264, 72), (77, 13, 9)], ("128x256", "128x256-cluster2")),  # ping-pong is no Tile IR matter
    ("target", [(130, 256, 64)], ("128x256",)),
    ("ptx", [(200, 264, 136)], ("128x256-cluster2-pingpong",)),
]
"""The default suite's slice: every kind of change at the level below it, ping-pong and clusters together in the
PTX executor. The slow test runs every schedule at every level."""


def _bitwise_the_default(level, shapes, schedules, rng):
    for m, n, k in shapes:
        a, b = _inputs(rng, m, n, k)
        default = run_gemm(a, b, level=level)
        assert reference.check_gemm(default, a, b, BF16).ok
        for schedule in schedules:
            out = run_gemm(a, b, level=level, schedule=schedule)
            assert np.array_equal(out, default), (level, (m, n, k), schedule)


@pytest.mark.parametrize("level, shapes, schedules", LEVEL_CASES, ids=[c[0] for c in LEVEL_CASES])
def test_the_wide_schedules_are_bitwise_the_default(level, shapes, schedules, rng):
    _bitwise_the_default(level, shapes, schedules, rng)


@pytest.mark.slow
@pytest.mark.parametrize("level, shapes", [(c[0], c[1]) for c in LEVEL_CASES], ids=[c[0] for c in LEVEL_CASES])
def test_every_schedule_is_bitwise_the_default_at_every_level(level, shapes, rng):
    _bitwise_the_default(level, shapes, WIDE, rng)


def test_the_wide_schedules_keep_the_epilogue_and_layouts_bitwise(rng):
    a = rng.standard_normal((2, 40, 72)).astype(BF16)  # [batch, K, M]: A^T
    b = rng.standard_normal((2, 136, 40)).astype(BF16)  # [batch, N, K]: B^T
    bias = rng.standard_normal(136).astype(np.float32)
    kw = dict(transpose_a=True, transpose_b=True, alpha=-1.5, bias=bias, level="ptx")
    default = run_gemm(a, b, **kw)
    assert reference.check_gemm(default, a, b, BF16, transpose_a=True, transpose_b=True, alpha=-1.5, bias=bias).ok
    assert np.array_equal(run_gemm(a, b, schedule="128x256-cluster2", **kw), default)


@pytest.mark.parametrize("schedule", ["128x256", "128x256-cluster2-pingpong"])
def test_the_wide_schedules_compile_to_n256_wgmma_four_stages(schedule):
    config = gemm_config(schedule=schedule)
    options = dict(config.options)
    assert options["block_n"] == 256 and options["stages"] == 4
    assert (config.pipeline == PINGPONG_PIPELINE) == schedule.endswith("-pingpong")
    module = gemm(**options)
    apply_pipeline(module, config.pipeline)
    ptx = print_ptx(module)
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in ptx and "m64n128k16" not in ptx
    assert ("multicast::cluster" in ptx) == ("cluster2" in schedule)
    assert ptx.count("mbarrier.init.shared::cta.b64") == 4 * 4  # A and B rings: full and empty, four stages
    assert ("bar.sync 1, 256" in ptx) == schedule.endswith("-pingpong")  # warpgroup 0's turn (named barrier 1)


@pytest.mark.usefixtures("ptxas")  # the test command installs it: without it this fails, never skips
@pytest.mark.parametrize("schedule", ["128x256", "128x256-cluster2-pingpong"])
def test_ptxas_assembles_the_wide_schedules_without_spilling(schedule):
    config = gemm_config(schedule=schedule, transpose_a=True, transpose_b=True, alpha=-1.5, bias=True)
    result = tessera.compile(gemm(**dict(config.options)), target="cubin", pipeline=config.pipeline)
    entry = result.entry()
    assert not result.warnings and not result.log.diagnostics
    assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0
    assert entry.registers <= 255


def test_the_default_schedule_keeps_the_kernel_key():
    assert gemm_config() == gemm_config(schedule="128x128")
    assert "block_n" not in dict(gemm_config().options)


def test_schedules_refuse_what_they_cannot_run():
    with pytest.raises(ValueError, match="schedule must be one of '128x128', '128x256', '128x256-cluster2', "):
        gemm_config(schedule="256x128")
    with pytest.raises(ValueError, match="schedule '128x256' does not take beta != 0"):
        gemm_config(schedule="128x256", beta=1.0)
    assert dict(gemm_config(schedule="128x256", aligned=False).options) == dict(gemm_config(aligned=False).options)
    assert set(GEMM_SCHEDULES) == {"128x128", *WIDE}


# endregion
