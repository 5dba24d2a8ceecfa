"""Register pressure of kernels users write (tests/user_kernels/*.mlir, each saying what it computes and what it
cost before): a broadcast row is held as the distinct columns a thread owns, a fill costs what its use needs,
a refusal names what is live at the peak, and the default pipeline falls back to the largest configuration
that fits, spilling (its last rung) only what none fits. Numerics are checked against NumPy at the target and ptx levels, and
ptxas assembles every kernel that compiles with no spill."""

from __future__ import annotations

import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import arith, vector
from xdsl.dialects.builtin import VectorType

import tessera
import tessera.kernels
from tessera.ir.diagnostics import TesseraWarning
from tessera.dialects import sm90
from tessera.host import describe
from tessera.lowering.fallback import NoConfigurationFitsError, without_spilling
from tessera.passes import fallback_ladder as ladder
from tessera.lowering.fragments import AccumulatorLayout
from tessera.passes import TARGET_PIPELINE, apply_pipeline
from tessera.regalloc import RegisterBudgetError, allocate_registers
from tessera.toolchain import compile_ptx

KERNELS = Path(__file__).parent / "user_kernels"


def load(name: str):
    return tessera.parse_module((KERNELS / f"{name}.mlir").read_text(), f"{name}.mlir")


def bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(np.float64)


def glu_problem(rng, m=70, n=136, k=72, scaled=False):
    """Inputs and the NumPy result of gemm_glu (and of gemm_glu_rows with `scaled`)."""
    a, b1, b2 = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal((k, n))
    bias, scale = rng.standard_normal(n), rng.standard_normal(n)
    g, u = bf16(a) @ bf16(b1), bf16(a) @ bf16(b2)
    gb = g + bias
    gate = np.maximum(gb, 0) * 0.5 + 0.25 * gb
    if not scaled:
        return (a, b1, b2, bias), gate * u + 1.0
    out = gate * (u * scale + 1.0) + 1.0
    # The kernel's r0 .. r7 reduce each block's 128 columns, those past N read as zeros.
    for c in range(0, n, 128):
        gc, uc, gbc = (np.pad(x[:, c:c + 128], ((0, 0), (0, max(0, c + 128 - n)))) for x in (g, u, gb))
        rows = [gc.max(1), uc.sum(1), gc.sum(1), uc.max(1), gc.sum(1), uc.sum(1), gbc.sum(1), np.maximum(gbc, 0).sum(1)]
        out[:, c:c + 128] *= np.prod(rows, axis=0)[:, None]
    return (a, b1, b2, bias, scale), out


def norm_problem(rng, m=70):
    x, gamma, beta = rng.standard_normal((m, 128)), rng.standard_normal(128), rng.standard_normal(128)
    xc = x - x.mean(1, keepdims=True)
    var = (xc * xc).mean(1, keepdims=True)
    return (x, gamma, beta), np.maximum(1.0, gamma * (xc + 0.5) / (var + 1e-5) + beta)


def attention_problem(rng, seq_q=64, seq_k=130, weight=False):
    q, k, v = (rng.standard_normal((1, 1, s, 128)) for s in (seq_q, seq_k, seq_k))
    s = np.einsum("bhqd,bhkd->bhqk", bf16(q), bf16(k)) * 0.0883883461
    s = np.maximum(s, -8.0) * 0.75 + 0.5
    inputs = (q, k, v)
    if weight:
        w, b = rng.standard_normal(128), rng.standard_normal(128)
        inputs += (w, b)
        s = s * np.resize(w, s.shape[-1]) + np.resize(b, s.shape[-1])  # key block j's column c: weight w[c], bias b[c]
    p = np.exp(s - s.max(-1, keepdims=True))
    return inputs, np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), bf16(v))


def close(out, expected, tolerance):
    error = np.abs(out.astype(np.float64) - expected).max() / max(1.0, np.abs(expected).max())
    assert error < tolerance, f"relative error {error:.3g}"


def compiled(name: str):
    """The kernel through the default pipeline: (Target IR module, warnings of the fallback)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = tessera.compile(load(name), target="target")
    return module, [str(w.message) for w in caught if "fell back" in str(w.message)]


def peak(module) -> int:
    (fn,) = [op for op in module.walk() if "sm90.registers" in op.attributes]
    return fn.attributes["sm90.registers"].data["peak"].value.data


# region Broadcast rows and fills


def test_a_broadcast_row_needs_one_register_per_distinct_column():
    """The wgmma D fragment (PTX ISA, "Register Fragments" of wgmma .m64nNk16): thread t holds columns
    8 j + 2 (t % 4) + {0, 1} of rows t/4 and t/4 + 8 for each j < N/8: N/2 elements, N/4 columns."""
    for n in (8, 64, 128, 256):
        columns, spread = AccumulatorLayout(n).distinct_columns
        assert columns == sorted(8 * j + c for j in range(n // 8) for c in (0, 1))
        layout = AccumulatorLayout(n)
        assert [columns[s] for s in spread] == layout.col_offsets


def test_the_bias_row_is_loaded_once_per_distinct_column():
    module = tessera.compile(load("gemm_glu"), target="target", pipeline=TARGET_PIPELINE)
    (load_row,) = [op for op in module.walk() if isinstance(op, sm90.LdGlobalOp)]
    assert load_row.result.type.get_shape() == (32,)  # 128 columns: 32 per thread, not 64
    assert list(load_row.column_bytes.get_values())[:4] == [0, 4, 32, 36]
    # the tile is a shuffle of the 32 (no instruction, no register of its own)
    assert all(isinstance(use.operation, vector.ShuffleOp) for use in load_row.result.uses)


def test_fills_become_immediates_or_one_register():
    """`tile.add %shift, %x` (the fill first): swapped into add's immediate; the layer norm's fills too."""
    module = tessera.compile(load("layer_norm"), target="target", pipeline=TARGET_PIPELINE)
    splats = [op for op in module.walk() if isinstance(op, arith.ConstantOp) and isinstance(op.result.type, VectorType)
              and op.result.type.get_shape()[0] == 64 and len(set(op.value.get_values())) == 1]
    for op in splats:  # every remaining whole-tile splat is an immediate operand
        (use,) = op.result.uses
        assert use.index > 0, f"{op} is a register operand of {use.operation.name}"


@pytest.mark.parametrize("name, single, default", [
    ("gemm_glu", 201, 201), ("layer_norm", 198, 198), ("attention_constants", 185, 223)])
def test_kernels_refused_before_now_fit(name, single, default):
    """Allocator peaks (per thread, 32-bit registers); before this change: 266 (both pipelines), 264 (both),
    182 single-stage and refused by the default pipeline (252 > 240)."""
    assert peak(tessera.compile(load(name), target="target", pipeline=TARGET_PIPELINE + ",allocate-registers")) <= single
    module, fallbacks = compiled(name)
    assert not fallbacks and peak(module) <= default
    assert describe(module)[0].pipeline_note is None


@pytest.mark.parametrize("name, problem, tolerance", [
    ("gemm_glu", glu_problem, 1e-5), ("layer_norm", norm_problem, 1e-5), ("attention_constants", attention_problem, 2e-2)])
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_kernels_compute_what_they_say(name, problem, tolerance, level, rng):
    inputs, expected = problem(rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TesseraWarning)  # the layer norm has no ring for warp-specialize
        out = tessera.interpret(load(name), *inputs, level=level)
    close(out, expected, tolerance)


# endregion
# region The pressure report


def test_a_refusal_names_what_is_live_at_the_peak_with_its_source_line():
    module = load("gemm_glu")
    apply_pipeline(module, TARGET_PIPELINE)
    (kernel,) = [op for op in module.walk() if "sm90.kernel" in op.attributes]
    with pytest.raises(RegisterBudgetError) as error:
        allocate_registers(kernel, budget=150)
    message = str(error.value)
    assert message.startswith("gemm_glu.mlir:6:3: @gemm_glu: 173 registers per thread are live at once, over the "
                              "budget of 150; the peak is at gemm_glu.mlir:")
    # the value, its op, the Tile IR line; the GLU chain is computed 8 registers at a time (slab-elementwise-
    # chains), so one slab of g + bias is live, and the accumulator's slabs still to be read
    assert "%gb (8 registers, arith.addf at gemm_glu.mlir:" in message
    assert "x %acc (120 registers, vector.shuffle at gemm_glu.mlir:" in message


# endregion
# region Fallback


def test_the_default_pipeline_falls_back_to_two_stages_without_a_producer(rng):
    module, fallbacks = compiled("gemm_glu_rows")
    note = describe(module)[0].pipeline_note
    assert len(fallbacks) == 1 and note in fallbacks[0]
    assert note.startswith("compiled two stages without a producer warpgroup, the largest configuration that fits "
                           "(refused: warp-specialized with two stages: the consumer warpgroups need ")
    assert fallbacks[0].startswith("gemm_glu_rows.mlir:7:3: kernel @gemm_glu_rows: the default pipeline fell back")
    assert describe(module)[0].block == (256, 1, 1)  # no producer warpgroup
    inputs, expected = glu_problem(rng, scaled=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TesseraWarning)
        close(tessera.interpret(load("gemm_glu_rows"), *inputs, level="target"), expected, 1e-5)


def test_the_default_pipeline_falls_back_to_single_stage(rng):
    module, fallbacks = compiled("attention_weighted")
    assert len(fallbacks) == 1
    note = describe(module)[0].as_dict()["pipeline_note"]
    assert note.startswith("compiled single-stage, the largest configuration that fits (refused: warp-specialized "
                           "with two stages: the consumer warpgroups need ")
    assert "; two stages without a producer warpgroup: " in note and "over the budget of 255)" in note
    inputs, expected = attention_problem(rng, weight=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TesseraWarning)
        close(tessera.interpret(load("attention_weighted"), *inputs, level="ptx"), expected, 2e-2)


def test_two_stages_past_the_shared_memory_fall_back_to_single_stage():
    """flash_attention(head_dim=256, block_n=96) runs in the Tile interpreter, and its two stages need 263,168
    bytes of shared memory: the default pipeline compiles it single-stage (one K/V tile), with the note, rather
    than refusing it below Tile IR."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = tessera.compile(tessera.kernels.flash_attention(256, block_n=96), target="target")
    fallbacks = [str(w.message) for w in caught if "fell back" in str(w.message)]
    note = describe(lowered)[0].pipeline_note
    assert len(fallbacks) == 1 and note in fallbacks[0]
    assert note.startswith("compiled single-stage, the largest configuration that fits (refused: warp-specialized "
                           "with two stages: convert-tile-to-sm90: the kernel needs 263168 bytes of shared memory")


def test_each_kernel_of_a_module_gets_its_own_configuration():
    """A module of gemm_glu (fits warp-specialized) and gemm_glu_rows (251 registers a consumer: two stages
    without a producer): the fallback is gemm_glu_rows' alone; gemm_glu keeps the producer warpgroup, lowered
    exactly as on its own, with no note and no warning."""
    module = load("gemm_glu")
    for op in list(load("gemm_glu_rows").body.block.ops):
        op.detach()
        module.body.block.add_op(op)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = tessera.compile(module, target="target")
    fallbacks = [str(w.message) for w in caught if "fell back" in str(w.message)]
    glu, rows = describe(lowered)
    assert (glu.kernel, glu.block, glu.pipeline_note) == ("gemm_glu", (384, 1, 1), None)
    assert (rows.kernel, rows.block) == ("gemm_glu_rows", (256, 1, 1))
    assert rows.pipeline_note.startswith("compiled two stages without a producer warpgroup")
    assert len(fallbacks) == 1 and "kernel @gemm_glu_rows: the default pipeline fell back" in fallbacks[0]
    alone, _ = compiled("gemm_glu")
    assert [str(op) for op in alone.body.block.ops] == [str(lowered.body.block.first_op)]


def test_what_no_configuration_fits_is_refused_naming_each():
    """Without the spilling rung (`without_spilling`: a caller with rungs of its own), a kernel no
    configuration fits is refused naming each configuration tried."""
    with pytest.raises(NoConfigurationFitsError) as error, without_spilling():
        tessera.compile(load("gemm_glu_wide"), target="target")
    lines = str(error.value).splitlines()
    assert lines[0] == ("gemm_glu_wide.mlir:4:3: kernel @gemm_glu_wide: no configuration of the default pipeline "
                        "fits, tried:")
    assert [line.split(":")[0].strip() for line in lines[1:]] == [c.name for c in ladder() if not c.spills]
    assert "the consumer warpgroups need 333 registers per thread but only 240 are left" in lines[1]
    assert all("333 registers per thread are live at once, over the budget of 255" in line for line in lines[2:])


def test_the_first_rung_is_asked_in_both_wgmma_orders_without_lowering_the_module():
    """`first_rung_refusal` (what `runtime.flex` asks): gemm_glu lowers warp-specialized in the default wgmma order,
    so the builder's order is not tried; gemm_glu_rows' consumers need more than their budget in both orders, and
    the builder's order's refusal is returned. Neither module is changed."""
    from tessera.ir import make_context
    from tessera.lowering.fallback import first_rung_refusal
    from tessera.passes import parse_pipeline

    first = ladder()[0]
    for name, tried_specs, refused in (("gemm_glu", [first.pipeline], False),
                                       ("gemm_glu_rows", [first.pipeline, first.program], True)):
        module, tried = load(name), []

        def run(spec, m):
            tried.append(spec)
            parse_pipeline(spec).apply(make_context(), m)

        before = str(module)
        error = first_rung_refusal(module, ladder(), run)
        assert tried == tried_specs and str(module) == before
        if refused:
            assert isinstance(error, RegisterBudgetError) and "the consumer warpgroups need" in str(error)
            assert "mma-order=program" in first.program
        else:
            assert error is None


def test_a_named_pipeline_does_not_fall_back():
    from tessera.passes import SPECIALIZED_PIPELINE, allocated

    with pytest.raises(RegisterBudgetError, match="the consumer warpgroups need"):
        tessera.compile(load("attention_weighted"), target="target", pipeline=allocated(SPECIALIZED_PIPELINE) + ",canonicalize")


# endregion
# region ptxas


@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("name", ["gemm_glu", "layer_norm", "attention_constants", "attention_weighted", "gemm_glu_rows"])
def test_ptxas_assembles_without_spilling(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TesseraWarning)
        result = compile_ptx(tessera.compile(load(name), target="ptx"))
    (function,) = result.log.functions.values()
    assert function.spill_store_bytes == 0 and function.spill_load_bytes == 0 and function.stack_frame_bytes == 0
    assert not result.log.diagnostics


@pytest.mark.parametrize("level", ["target", pytest.param("ptx", marks=pytest.mark.slow)])
def test_the_spilling_rung_runs_right(rng, level):
    """gemm_glu_wide through the default pipeline's spilling rung: re-allocated to run (the CTA simulator) or to
    print (the PTX executor) without being refused again, and right."""
    inputs, expected = glu_problem(rng, m=40, n=136, k=24)
    with pytest.warns(TesseraWarning, match="compiled single-stage spilling past 255 registers: 333 registers"):
        out = tessera.interpret(load("gemm_glu_wide"), *inputs, level=level)
    close(out, expected, 1e-5)


@pytest.mark.usefixtures("ptxas")
def test_ptxas_assembles_the_spilling_rung_with_spills():
    """ptxas accepts the kernel the spilling rung left over 255 registers and reports the spill bytes."""
    with pytest.warns(TesseraWarning, match="spilling past 255 registers"):
        result = tessera.compile(load("gemm_glu_wide"), target="cubin")
    entry = result.entry("gemm_glu_wide")
    assert entry.registers <= 255 and entry.spill_store_bytes > 0 and entry.spill_load_bytes > 0, entry


def test_tessera_opt_with_the_default_pipeline_falls_back_to_spilling():
    """`tessera-opt -p <DEFAULT_PIPELINE>` runs the same ladder: down to its spilling rung, the warning naming
    each configuration refused; a pipeline spelled otherwise refuses (exit 1, no traceback) (`python -m
    tessera.tools.tessera_opt`, run in this process as its own process would: tests/inprocess.py)."""
    import sys

    import inprocess
    from tessera.passes import DEFAULT_PIPELINE, PTX_PIPELINE, SPILL_PIPELINE

    command = [sys.executable, "-m", "tessera.tools.tessera_opt", str(KERNELS / "gemm_glu_wide.mlir"), "-p", DEFAULT_PIPELINE]
    result = inprocess.run(command)
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert ("kernel @gemm_glu_wide: the default pipeline fell back: compiled single-stage spilling past 255 "
            "registers: 333 registers per thread needed, 78 past the 255") in result.stderr
    assert all(f"{c.name}: " in result.stderr for c in ladder())
    assert "sm90.spilled_registers = 78" in result.stdout
    result = inprocess.run(command[:-1] + [PTX_PIPELINE])  # a pipeline named: no spill unless it says so
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "333 registers per thread are live at once, over the budget of 255" in result.stderr
    result = inprocess.run(command[:-1] + [SPILL_PIPELINE])  # asked for: spilled, without a warning
    assert result.returncode == 0 and "sm90.spilled_registers = 78" in result.stdout and "fell back" not in result.stderr
    # tessera-run re-allocates the spilled Target IR to run it, without refusing it again
    run = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", "-", "-d", "M=40", "-d", "N=136",
                         "-d", "K=24"], stdin=result.stdout)
    assert run.returncode == 0 and "Target IR, CTA simulator" in run.stdout, run.stderr
