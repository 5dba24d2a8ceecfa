"""GEMM on every shape and layout a user hands cuBLAS: M, N, K from sizes that are multiples of nothing
(1, 7, 63, 65, 129, 300), the layouts NN, NT, TN, TT (A's letter first; T: the operand is stored transposed),
alpha, beta with C, a bias, and a batch, at the three levels:
- the Tile interpreter: every layout on six (M, N, K) triples in which each size takes each position once;
- the CTA simulator: each layout once on a ragged shape (the any-shape kernel, rows copied by ld.global) and
  once on a TMA shape with the whole epilogue;
- the PTX executor: a small slice (its runs cost the most);
and ptxas assembles every variant with no warning, no spill and no stack frame. The full matrix of shapes x
layouts x levels is `python bench/gemm_shapes.py`."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tessera
from tessera import find_kernel, reference, reference_gemm
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx.launcher import launch_described
from tessera.kernels import gemm
from tessera.numerics import dtype_from_name
from tessera.passes import PTX_PIPELINE, SPECIALIZED_PIPELINE, TARGET_PIPELINE, apply_pipeline
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers

SIZES = (1, 7, 63, 65, 129, 300)
TRIPLES = [tuple(SIZES[(i + j) % len(SIZES)] for j in range(3)) for i in range(len(SIZES))]
"""(M, N, K): (1, 7, 63), (7, 63, 65), ..., (300, 1, 7): each size once as M, once as N, once as K."""
LAYOUTS = {"NN": (False, False), "NT": (False, True), "TN": (True, False), "TT": (True, True)}
EPILOGUE = dict(alpha=-1.5, beta=0.5, bias=True)


def operands(rng, m, n, k, layout, batch=None, epilogue=False):
    """The inputs in the kernel's order (A, B[, C_in, bias]) and check_gemm's keywords."""
    ta, tb = LAYOUTS[layout]
    factors = dict(alpha=EPILOGUE["alpha"], beta=EPILOGUE["beta"]) if epilogue else {}
    return reference_gemm.gemm_operands(rng, m, n, k, transpose_a=ta, transpose_b=tb, batch=batch, **factors)


def kernel(layout, dtype="bf16", epilogue=False, **options):
    ta, tb = LAYOUTS[layout]
    return gemm(dtype, transpose_a=ta, transpose_b=tb, **(EPILOGUE if epilogue else {}), **options)


def check(out, inputs, options, dtype="bf16"):
    comparison = reference.check_gemm(out, inputs[0], inputs[1], dtype_from_name(dtype), **options)
    assert comparison.ok, str(comparison)
    return comparison


# region The Tile interpreter


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tile_level_every_layout_on_ragged_shapes(layout, rng):
    module = kernel(layout, aligned=False)
    for m, n, k in TRIPLES:
        inputs, options = operands(rng, m, n, k, layout)
        out = tessera.interpret(module, *inputs)
        assert out.shape == (m, n)
        check(out, inputs, options)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tile_level_batched_with_the_epilogue(layout, rng):
    module = kernel(layout, "f16", epilogue=True, batch=True, aligned=False)
    inputs, options = operands(rng, 65, 7, 129, layout, batch=3, epilogue=True)
    out = tessera.interpret(module, *inputs)
    assert out.shape == (3, 65, 7)
    check(out, inputs, options, "f16")
    # Each term counts: dropping the bias, or C, or alpha is far outside the tolerance.
    for wrong in (dict(options, bias=None), dict(options, beta=0.0), dict(options, alpha=1.0)):
        assert not reference.check_gemm(out, inputs[0], inputs[1], dtype_from_name("f16"), **wrong).ok


def test_the_transposed_operand_is_read_transposed(rng):
    """A square A read as TN is A^T B, not A B."""
    a, b = rng.standard_normal((63, 63)), rng.standard_normal((63, 7))
    out = tessera.interpret(kernel("TN", aligned=False), a, b)
    assert reference.check_gemm(out, a, b, dtype_from_name("bf16"), transpose_a=True).ok
    assert not reference.check_gemm(out, a, b, dtype_from_name("bf16")).ok


# endregion
# region The CTA simulator


@pytest.mark.parametrize("layout, shape", list(zip(LAYOUTS, [(7, 1, 65), (65, 63, 7), (1, 129, 63), (129, 7, 300)])))
def test_target_level_ragged_shapes_without_tma(layout, shape, rng):
    """Rows of 2 x 7, 2 x 63, ... bytes: the any-shape kernel copies A and B with every thread's ld.global
    (the single-stage pipeline: rings are filled by TMA only)."""
    module = kernel(layout, aligned=False)
    (host,) = describe(tessera.compile(module, "target", pipeline=TARGET_PIPELINE))
    assert host.copies == {0: "ld.global", 1: "ld.global"}
    inputs, options = operands(rng, *shape, layout)
    check(tessera.interpret(module, *inputs, level="target", pipeline=TARGET_PIPELINE), inputs, options)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_target_level_tma_layouts_batched_with_the_epilogue(layout, rng):
    """Sizes with 16-byte rows: both operands through TMA in every layout (the transpose bits of wgmma, no
    copy), a batch over the grid's z, alpha, beta with C and a bias, through the full pipeline."""
    module = kernel(layout, epilogue=True, batch=True, aligned=True)
    (host,) = describe(tessera.compile(module, "target", pipeline=SPECIALIZED_PIPELINE))
    assert host.copies == {0: "tma", 1: "tma"}
    inputs, options = operands(rng, 72, 24, 80, layout, batch=2, epilogue=True)  # two K trips around the ring
    check(tessera.interpret(module, *inputs, level="target", pipeline=SPECIALIZED_PIPELINE), inputs, options)


def test_tma_kernel_refuses_rows_tma_cannot_read(rng):
    """The TMA kernel promises 16-byte rows (tile.divisible); K = 63 breaks it and the launch says so, by name."""
    module = kernel("NN", aligned=True)
    assert find_kernel(module).divisible == {"K": 8, "N": 8}
    with pytest.raises(ValueError, match=r"tessera.interpret: kernel @gemm_bf16 promises \(tile.divisible\) that K is "
                                         r"a multiple of 8, got K = 63"):
        tessera.interpret(module, rng.standard_normal((8, 63)), rng.standard_normal((63, 8)), level="target")


def test_full_pipeline_keeps_the_any_shape_loop_single_stage(rng):
    """pipeline-loops leaves a loop that copies rows TMA cannot read as it is (ring stages are filled by bulk
    copies); warp-specialize then finds no producer work: the full pipeline runs the any-shape kernel."""
    module = kernel("NT", aligned=False)
    target = tessera.print_module(tessera.compile(module, "target", pipeline=SPECIALIZED_PIPELINE))
    assert "tile.stage" not in target and "sm90.setmaxnreg" not in target and "sm90.ld_global_u16" in target
    inputs, options = operands(rng, 65, 7, 129, "NT")
    check(tessera.interpret(module, *inputs, level="target", pipeline=SPECIALIZED_PIPELINE), inputs, options)


def test_rings_without_tma_are_refused_by_name():
    """A ring stage of a tensor TMA cannot read (here: rings built under a promise, then the promise taken
    away) is refused by convert-tile-to-sm90, by name."""
    module = kernel("NN", aligned=True).clone()
    apply_pipeline(module, "assign-swizzle,pipeline-loops{stages=2}")
    del find_kernel(module).op.attributes["tile.divisible"]
    with pytest.raises(Exception, match=r"ring stages are filled by TMA, but the rows of %A need not start on 16 bytes"):
        apply_pipeline(module, "convert-tile-to-sm90")


# endregion
# region The PTX executor


def run_ptx(module, inputs, pipeline=PTX_PIPELINE):
    lowered = module.clone()
    apply_pipeline(lowered, pipeline)
    arrays, sizes = prepare_arguments(find_kernel(module), inputs)
    launch_described(print_ptx(lowered, registers=allocated_registers), describe(lowered)[0], arrays, sizes)
    return arrays[-1]


@pytest.mark.parametrize("layout, shape, aligned", [
    ("NT", (65, 7, 63), False), ("TN", (7, 63, 1), False), ("TT", (8, 16, 24), True)], ids=["NT-any", "TN-any", "TT-tma"])
def test_ptx_level(layout, shape, aligned, rng):
    module = kernel(layout, epilogue=layout == "TT", batch=layout == "TT", aligned=aligned)
    inputs, options = operands(rng, *shape, layout, batch=2 if layout == "TT" else None, epilogue=layout == "TT")
    check(run_ptx(module, inputs), inputs, options)


# endregion
# region ptxas

FULL = SPECIALIZED_PIPELINE + ",allocate-registers"
VARIANTS = [(layout, epilogue, aligned, pipeline) for layout in LAYOUTS for epilogue in (False, True)
            for aligned, pipeline in ((True, PTX_PIPELINE), (True, FULL), (False, FULL))]


@pytest.mark.usefixtures("ptxas")  # the test command installs it: without it this fails, never skips
@pytest.mark.parametrize("layout, epilogue, aligned, pipeline", VARIANTS, ids=[
    f"{l}-{'epilogue' if e else 'plain'}-{'tma' if a else 'any'}-{'full' if p == FULL else 'single'}"
    for l, e, a, p in VARIANTS])
def test_ptxas_accepts_every_variant(layout, epilogue, aligned, pipeline):
    result = tessera.compile(kernel(layout, epilogue=epilogue, batch=epilogue, aligned=aligned), target="cubin",
                             pipeline=pipeline)
    entry = result.entry()
    assert not result.warnings, [str(w) for w in result.warnings]
    assert not result.log.diagnostics, [str(d) for d in result.log.diagnostics]
    assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0
    assert entry.registers <= 255


# endregion
