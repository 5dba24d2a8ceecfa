"""One default pipeline for every entry point, and the three levels of `tessera.interpret` agreeing.

`tessera.passes.DEFAULT_PIPELINE` (the warp-specialized pipeline with registers allocated) is what
`tessera.compile`, `tessera.interpret(level="target"|"ptx")`, `tessera.attention`'s compiler and `tessera-run
--level target` use when no pipeline is given; the single-stage pipeline stays available by name."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import passes, reference
from tessera.kernel_abi import is_target_kernel
from tessera.numerics import dtype_from_name

from conftest import build_kernel


def _target_kernel(module):
    return next(op for op in module.walk() if is_target_kernel(op))


# region the names


def test_default_pipeline_is_the_specialized_pipeline_with_registers_allocated():
    assert passes.DEFAULT_PIPELINE == passes.SPECIALIZED_PIPELINE + ",allocate-registers"
    assert passes.DEFAULT_PIPELINE == passes.allocated(passes.SPECIALIZED_PIPELINE)
    assert passes.PTX_PIPELINE == passes.allocated(passes.TARGET_PIPELINE)
    assert passes.allocated(passes.DEFAULT_PIPELINE) == passes.DEFAULT_PIPELINE  # idempotent


def test_every_entry_point_names_the_same_default():
    from tessera.runtime.compiler import KernelConfig
    from tessera.tools import tessera_run

    assert KernelConfig.of("flash_attention").pipeline == passes.DEFAULT_PIPELINE
    assert "DEFAULT_PIPELINE" in tessera_run.build_parser().format_help()


# endregion
# region compile


def test_compile_defaults_to_the_warp_specialized_kernel():
    """A producer warpgroup and two consumers (384 threads) with setmaxnreg budgets, registers allocated."""
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    target = tessera.compile(module, target="target")
    kernel = _target_kernel(target)
    assert kernel.attributes["sm90.kernel"].data["threads"].value.data == 384
    assert "sm90.registers" in kernel.attributes
    ptx = tessera.compile(module)
    assert ".reqntid 384" in ptx or ".maxntid 384" in ptx
    assert "setmaxnreg.inc" in ptx and "setmaxnreg.dec" in ptx


def test_the_single_stage_pipeline_stays_a_named_option():
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    ptx = tessera.compile(module, pipeline=passes.PTX_PIPELINE)
    assert "setmaxnreg" not in ptx
    assert _target_kernel(tessera.compile(module, "target", passes.PTX_PIPELINE)) \
        .attributes["sm90.kernel"].data["threads"].value.data == 256


def test_a_pipeline_that_stops_in_tile_ir_is_refused_by_compile():
    module = build_kernel("gemm", dtype="bf16")
    with pytest.raises(ValueError, match=r"tessera.compile: pipeline 'assign-swizzle' does not lower the kernels "
                                         r"to Target IR \(it needs convert-tile-to-sm90"):
        tessera.compile(module, pipeline="assign-swizzle")


# endregion
# region interpret: tile, target and ptx agree


def _flash_inputs(rng):
    q = rng.standard_normal((1, 1, 70, 64))
    k, v = (rng.standard_normal((1, 1, 150, 64)) for _ in range(2))
    return q, k, v


def test_levels_agree_on_flash_attention(rng):
    """Ragged shapes (70 queries: one partial row block; 150 keys: a partial K/V tile, causal): the Target IR
    and its PTX run the same kernel and agree bit for bit; both are within the tolerance of the Tile level."""
    module = build_kernel("flash_attention", head_dim=64, causal=True, dtype="bf16")
    q, k, v = _flash_inputs(rng)
    outputs = {level: tessera.interpret(module, q, k, v, level=level) for level in tessera.LEVELS}
    check = reference.check_attention(outputs["ptx"], q, k, v, dtype_from_name("bf16"), causal=True)
    assert check.ok, check
    np.testing.assert_array_equal(outputs["ptx"], outputs["target"])
    difference = np.abs(outputs["target"].astype(np.float32) - outputs["tile"].astype(np.float32)).max()
    assert difference <= 2 * check.tolerance


@pytest.mark.parametrize("m,n,k", [(70, 24, 40), (1, 8, 136)])
def test_levels_agree_on_gemm(m, n, k, rng):
    """GEMM on shapes that are not multiples of the tile (N and K stay multiples of 8, TMA's stride rule)."""
    module = build_kernel("gemm", dtype="bf16")
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    outputs = {level: tessera.interpret(module, a, b, level=level) for level in tessera.LEVELS}
    check = reference.check_gemm(outputs["ptx"], a, b, dtype_from_name("bf16"))
    assert check.ok, check
    np.testing.assert_array_equal(outputs["ptx"], outputs["target"])
    difference = np.abs(outputs["target"].astype(np.float32) - outputs["tile"].astype(np.float32)).max()
    assert difference <= 2 * check.tolerance


def test_ptx_level_takes_a_pipeline(rng):
    module = build_kernel("gemm", dtype="bf16")
    a, b = rng.standard_normal((64, 32)), rng.standard_normal((32, 16))
    single = tessera.interpret(module, a, b, level="ptx", pipeline=passes.PTX_PIPELINE)
    assert reference.check_gemm(single, a, b, dtype_from_name("bf16")).ok


def test_a_pipeline_must_leave_the_kernel_at_the_level_it_runs_at(rng):
    """Level "tile" takes a pipeline that stays in Tile IR; "target" (and "ptx") one that reaches Target IR."""
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    q, k, v = _flash_inputs(rng)
    with pytest.raises(ValueError, match="at level 'tile' the pipeline must stay in Tile IR"):
        tessera.interpret(module, q, k, v, pipeline=passes.TARGET_PIPELINE)
    with pytest.raises(ValueError, match="does not lower the kernels to Target IR"):
        tessera.interpret(module, q, k, v, level="target", pipeline="assign-swizzle")


# endregion


def test_a_tile_level_pipeline_runs_the_transformed_kernel(monkeypatch, rng):
    """The kernel that runs is the one the pipeline produced, in the transformed copy (not the kernel given)."""
    import tessera.interpreters.launch as launch

    ran = []
    run_grid = launch.run_grid
    monkeypatch.setattr(launch, "run_grid", lambda sig, module, *rest: (ran.append((sig.op, module)),
                                                                        run_grid(sig, module, *rest)))
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    q, k, v = _flash_inputs(rng)
    out = tessera.interpret(module, q, k, v, pipeline="assign-swizzle,pipeline-loops{stages=2}")
    ((kernel, transformed),) = ran
    assert transformed is not module and any(op is kernel for op in transformed.walk())
    np.testing.assert_array_equal(out, tessera.interpret(module, q, k, v))
