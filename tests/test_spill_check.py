"""The default pipeline asks ptxas of a tight warp-specialized kernel only (`tessera.lowering.fallback`,
`CONSUMER_HEADROOM`): a kernel ptxas spills takes the next configuration, one it assembles without a spill, or
one no ptxas is found for, is kept warp-specialized. ptxas's answers are faked here (the real ones:
`-m slow -k swiglu_residual_tools` in tests/test_unseen_kernels5.py, and the FP8 flash kernels of
tests/test_fp8*.py): `tests/user_kernels/gemm_swiglu_residual.mlir` counts 235 of its consumers' 240, tight."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import tessera
from tessera import toolchain
from tessera.host import describe
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


def answering(monkeypatch, answer):
    """ptxas's answer faked as `answer`; the list of the modules it was asked of."""
    asked = []

    def fake(module):
        asked.append(module)
        return answer

    monkeypatch.setattr(spill_check, "ptxas_spill", fake)
    return asked


def test_a_tight_kernel_that_ptxas_spills_takes_the_next_configuration(monkeypatch):
    asked = answering(monkeypatch, PtxasSpill("gemm_swiglu_residual", PTXAS, 4, 4))
    _, description, fallbacks = compiled("gemm_swiglu_residual")
    # the warp-specialized configuration, then its form with the wgmma groups in the builder's order
    # (`Configuration.program`, tried where the default order is refused for registers): each asked once
    assert len(asked) == 2 and all(any("setmaxnreg" in str(op.name) for op in m.walk()) for m in asked)
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
