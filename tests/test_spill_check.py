"""The default pipeline asks ptxas of a tight kernel only (`tessera.lowering.fallback`, `CONSUMER_HEADROOM`, with
the registers ptxas loads early, `spill_check.early_load_registers`): a kernel ptxas spills takes the next
configuration, one it assembles without a spill, or one no ptxas is found for, is kept. ptxas's answers are faked
here (the real ones: `-m slow -k swiglu_residual_tools` in tests/test_unseen_kernels5.py, and the FP8 flash kernels of
tests/test_fp8*.py): `tests/user_kernels/gemm_swiglu_residual.mlir` counts 235 of its consumers' 240, tight."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import toolchain
from tessera.host import describe
from tessera.kernels import gemm
from tessera.lowering import spill_check
from tessera.lowering.fallback import CONSUMER_HEADROOM
from tessera.lowering.spill_check import PtxasSpill

KERNELS = Path(__file__).parent / "user_kernels"
PTXAS = toolchain.ToolVersion("/fake/bin/ptxas", "13.5", (13, 5, 37), "Cuda compilation tools, release 13.5, V13.5.37")


def compiled(name: str):
    """The kernel's Target IR through the default pipeline, its host description and the fallback's warnings."""
    module = tessera.parse_module((KERNELS / f"{name}.mlir").read_text(), f"{name}.mlir")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = tessera.compile(module, target="target")
    (description,) = describe(lowered)
    return lowered, description, [str(w.message) for w in caught if "fell back" in str(w.message)]


def answering(monkeypatch, answer, only_warp_specialized=False):
    """ptxas's answer faked as `answer` (None, as a real ptxas answers, for a kernel without setmaxnreg when
    `only_warp_specialized`); the list of the modules it was asked of."""
    asked = []

    def fake(module):
        asked.append(module)
        if only_warp_specialized and not any("setmaxnreg" in str(op.name) for op in module.walk()):
            return None
        return answer

    monkeypatch.setattr(spill_check, "ptxas_spill", fake)
    return asked


def test_a_tight_kernel_that_ptxas_spills_takes_the_next_configuration(monkeypatch):
    asked = answering(monkeypatch, PtxasSpill("gemm_swiglu_residual", PTXAS, 4, 4), only_warp_specialized=True)
    _, description, fallbacks = compiled("gemm_swiglu_residual")
    # the warp-specialized configuration, then its form with the wgmma groups in the builder's order
    # (`Configuration.program`, tried where the default order is refused for registers): each asked once; then
    # the configuration kept (its peak and its 96 early-loaded registers pass 255 - CONSUMER_HEADROOM)
    assert len(asked) == 3 and all(any("setmaxnreg" in str(op.name) for op in m.walk()) for m in asked[:2])
    assert description.block == (256, 1, 1)  # no producer warpgroup
    refusal = ("warp-specialized with two stages: the consumer warpgroups' 235 registers per thread leave 5 of "
               "their 240, and ptxas 13.5.37 spills it, 4 bytes of spill stores and 4 of spill loads per thread")
    assert description.pipeline_note == ("compiled two stages without a producer warpgroup, the largest "
                                         f"configuration that fits (refused: {refusal})")
    assert len(fallbacks) == 1 and fallbacks[0].startswith(
        "gemm_swiglu_residual.mlir:5:3: kernel @gemm_swiglu_residual: the default pipeline fell back")


def test_a_tight_kernel_that_ptxas_assembles_without_a_spill_is_kept(monkeypatch):
    asked = answering(monkeypatch, None)
    _, description, fallbacks = compiled("gemm_swiglu_residual")
    assert len(asked) == 1
    assert (description.block, description.pipeline_note, fallbacks) == ((384, 1, 1), None, [])


def test_a_tight_kernel_is_kept_when_no_ptxas_is_found(monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("ptxas run without a ptxas found")

    monkeypatch.setattr(toolchain, "find_all_ptxas", lambda: [])
    monkeypatch.setattr(toolchain, "compile_ptx", no_run)
    _, description, fallbacks = compiled("gemm_swiglu_residual")
    assert (description.block, description.pipeline_note, fallbacks) == ((384, 1, 1), None, [])


def test_ptxas_is_not_asked_of_a_kernel_with_headroom(monkeypatch):
    """gemm_glu's consumers count 173 of their 240: no question, whatever ptxas would say."""
    asked = answering(monkeypatch, PtxasSpill("gemm_glu", PTXAS, 4, 4))
    lowered, description, fallbacks = compiled("gemm_glu")
    (fn,) = [op for op in lowered.walk() if "sm90.registers" in op.attributes]
    assert fn.attributes["sm90.registers"].data["peak"].value.data <= 240 - CONSUMER_HEADROOM
    assert (asked, description.block, description.pipeline_note, fallbacks) == ([], (384, 1, 1), None, [])


def test_the_answer_is_cached_by_the_ptx_text(monkeypatch):
    """The same kernel asked of twice runs ptxas once; the answer reads the spill bytes of ptxas' log."""
    runs = []

    def fake_ptxas(ptx, *args, ptxas=None, **kwargs):
        runs.append((ptx, ptxas))
        log = toolchain.parse_ptxas_log(
            "ptxas info    : Compiling entry function 'gemm_bias' for 'sm_90a'\n"
            "ptxas info    : Function properties for gemm_bias\n"
            "    8 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
            "ptxas info    : Used 255 registers, used 1 barriers\n")
        return toolchain.PtxasResult("sm_90a", PTXAS, (), log, "", b"", None)

    monkeypatch.setattr(toolchain, "find_all_ptxas", lambda: [PTXAS])
    monkeypatch.setattr(toolchain, "compile_ptx", fake_ptxas)
    lowered, _, _ = compiled("gemm_bias")
    first, again = spill_check.ptxas_spill(lowered), spill_check.ptxas_spill(lowered.clone())
    assert first == again == PtxasSpill("gemm_bias", PTXAS, 8, 4)
    assert len(runs) == 1 and runs[0][1] == PTXAS.path and ".entry gemm_bias" in runs[0][0]


def compiled_gemm(**config):
    """`tessera.kernels.gemm(**config)` through the default pipeline: its Target IR, host description and the
    fallback's warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = tessera.compile(gemm(**config), target="target")
    (description,) = describe(lowered)
    return lowered, description, [str(w.message) for w in caught if "fell back" in str(w.message)]


def test_early_loads_count_the_epilogue_global_loads(monkeypatch):
    """The C tile's 64 registers and the bias's 32 (N/4), loaded after the K loop; none for the plain GEMM, and
    none of the any-shape kernel's A and B loads, in the K loop."""
    answering(monkeypatch, None)  # each kept warp-specialized
    for config, registers in ((dict(beta=1.0, bias=True), 96), (dict(beta=1.0), 64), ({}, 0),
                              (dict(block_m=128, aligned=False, beta=1.0, bias=True), 96)):
        lowered = tessera.compile(gemm(**{"block_m": 192, **config}), target="target")
        (fn,) = [op for op in lowered.walk() if "sm90.registers" in op.attributes]
        assert spill_check.early_load_registers(fn) == registers


def test_an_epilogue_ptxas_loads_early_makes_a_kernel_with_headroom_tight(monkeypatch):
    """gemm(block_m=192, beta=1, bias=True) counts 135 of its consumers' 160 (25 spare), but ptxas issues the
    C tile's loads before the bias is added: 135 + 96 early-loaded registers pass 160 - CONSUMER_HEADROOM, so ptxas
    is asked, and where every configuration spills (ptxas 12.9 to 13.5: 20, 32 and 12 bytes) the kernel takes the
    spilling rung and its warning names ptxas's spill."""
    asked = answering(monkeypatch, PtxasSpill("gemm_bf16_bias_scaled", PTXAS, 12, 12))
    _, description, fallbacks = compiled_gemm(block_m=192, beta=1.0, bias=True)
    # warp-specialized in both wgmma orders, the two configurations without a producer, the spilling rung's note
    assert len(asked) == 5
    spill = "ptxas 13.5.37 spills it, 12 bytes of spill stores and 12 of spill loads per thread"
    assert description.pipeline_note.startswith(
        "compiled single-stage spilling past 255 registers: 135 registers per thread needed, none past its budget, "
        f"and {spill} (no configuration fits without spilling: warp-specialized with two stages: the consumer "
        f"warpgroups' 135 registers per thread leave 25 of their 160, and {spill}; two stages without a producer "
        f"warpgroup: the threads' 135 registers per thread leave 33 of their 168, and {spill}; single-stage: ")
    assert len(fallbacks) == 1 and description.pipeline_note in fallbacks[0]


def test_an_epilogue_ptxas_assembles_without_a_spill_is_kept_warp_specialized(monkeypatch):
    asked = answering(monkeypatch, None)
    _, description, fallbacks = compiled_gemm(block_m=192, beta=1.0, bias=True)
    assert len(asked) == 1
    assert (description.block, description.pipeline_note, fallbacks) == ((512, 1, 1), None, [])


def test_an_epilogue_whose_early_loads_fit_is_not_asked_of(monkeypatch):
    """At 128 x 128 the consumers have 240: 135 + 96 leave 9, no question."""
    asked = answering(monkeypatch, PtxasSpill("gemm_bf16_bias_scaled", PTXAS, 4, 4))
    _, description, fallbacks = compiled_gemm(beta=1.0, bias=True)
    assert (asked, description.block, description.pipeline_note, fallbacks) == ([], (384, 1, 1), None, [])


@pytest.mark.skipif(not toolchain.find_all_ptxas(), reason="needs a ptxas")
def test_the_epilogue_ptxas_spills_warns_under_a_real_ptxas():
    """The real answer (12.9, 13.0 and 13.5 agree): the warp-specialized kernel spilled 20 bytes with no warning;
    now the kernel kept names its spill, or does not spill."""
    lowered, description, fallbacks = compiled_gemm(block_m=192, beta=1.0, bias=True)
    spill = spill_check.ptxas_spill(lowered)
    assert spill is None or (len(fallbacks) == 1 and str(spill) in description.pipeline_note)


def bf16(x):
    """`x` rounded to bf16 (nearest, ties to even), as float64."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
@pytest.mark.parametrize("epilogue", [dict(beta=1.0, bias=True), dict(beta=0.5, alpha=-1.5, bias=True),
                                      dict(beta=1.0, alpha=2.0)], ids=["beta-bias", "scaled-bias", "scaled"])
def test_the_192_row_epilogues_compute_alpha_ab_plus_beta_c_plus_bias(level, epilogue):
    """Whichever configuration the fallback keeps (with ptxas: the spilling rung or two stages without a
    producer; without: warp-specialized), alpha A B + beta C + bias against float64, two 192-row blocks."""
    rng = np.random.default_rng(1)
    a, b, c, bias = (rng.standard_normal(shape) for shape in ((200, 72), (72, 136), (200, 136), (136,)))
    inputs = [a, b, c] + [bias] * epilogue.get("bias", False)
    expected = (epilogue.get("alpha", 1.0) * (bf16(a) @ bf16(b)) + epilogue["beta"] * c
                + (bias if "bias" in epilogue else 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = np.asarray(tessera.interpret(gemm(block_m=192, **epilogue), *inputs, level=level), np.float64)
    # the output's bf16 rounding (2^-8 of it), C's and the bias's, and f32 sums of 72 terms
    assert np.all(np.abs(out - expected) <= 2.0 ** -7 * (np.abs(expected) + np.abs(c) + 1))
