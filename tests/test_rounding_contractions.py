"""The own-reference tolerance through contractions (`tessera.validation.rounding.CARRIED`): a `tile.mma` or
`tile.row_sum` moves by sum |move of each operand element| x |the other operand|, where an operand's move is
the bound its producer applied, in registers or through a shared buffer it was stored into. The coherent moves
of the straightforward runs cancel in a sum over terms of mixed signs; a lower level rounding one term the
other way does not (docs/validation.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr

import inprocess
import tessera
import tessera.passes
from tessera.tools import tessera_run
from tessera.validation import rounding
from tessera.validation.levels import generate_inputs
from text_edits import checked

B2B = Path(__file__).parents[1] / "examples" / "kernels" / "b2b_gemm.mlir"
B2B_SIZES = {"M": 70, "K": 104, "N": 72}


def _b2b_through_shared() -> str:
    """The gallery's back-to-back GEMM with its bf16 intermediate stored into a shared tile that the second mma
    reads (the attention backward's dS path), instead of taken from registers."""
    text = checked(B2B.read_text()).replace(
        "    %b1_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>\n",
        "    %b1_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>\n"
        "    %h_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>\n")
    return str(text.replace(
        "    %c = tile.mma %h_bf16, %b1_smem, %zero : !tile.tile<64x64xbf16, register>,",
        "    tile.store_shared %h_bf16, %h_smem : !tile.tile<64x64xbf16, register>, "
        "!tile.tile<64x64xbf16, shared, swizzle 128>\n"
        "    tile.barrier\n"
        "    %c = tile.mma %h_smem, %b1_smem, %zero : !tile.tile<64x64xbf16, shared, swizzle 128>,"))


def _tolerance(text: str) -> np.ndarray:
    module = tessera.parse_module(text)
    sig = tessera.find_kernel(module)
    inputs = generate_inputs(sig, B2B_SIZES, seed=0)
    return rounding.kernel_reference(module, sig, inputs, B2B_SIZES).tolerances[0]


def _carried_term() -> np.ndarray:
    """|move of the bf16 intermediate| @ |B1| in float64 NumPy: half an ulp of bf16 of each element of A B0."""
    import ml_dtypes

    sig = tessera.find_kernel(tessera.parse_module(B2B.read_text()))
    a, b0, b1 = (x.astype(ml_dtypes.bfloat16).astype(np.float64) for x in generate_inputs(sig, B2B_SIZES, seed=0))
    return (2.0**-8 * np.abs(a @ b0)) @ np.abs(b1)


@pytest.mark.parametrize("path", ["registers", "shared"])
def test_an_mma_moves_by_its_operands_rounding_with_any_signs(path, monkeypatch):
    text = B2B.read_text() if path == "registers" else _b2b_through_shared()
    term = _carried_term()
    tolerance = _tolerance(text)
    assert np.all(tolerance >= term), np.min(tolerance / term)
    monkeypatch.setattr(rounding, "CARRIED", {})
    without = _tolerance(text)
    assert np.any(without < term) and without.mean() < tolerance.mean()


def test_a_shared_buffer_carries_the_move_of_what_was_stored_into_it():
    """The same computation through a shared tile gets the same tolerance as through registers."""
    np.testing.assert_array_equal(_tolerance(_b2b_through_shared()), _tolerance(B2B.read_text()))


def test_a_shared_buffer_written_since_the_store_carries_nothing(monkeypatch):
    """The stored bf16 intermediate is overwritten by a copy of B1 before the mma reads the buffer: the mma's
    operands are loads, and its tolerance is the one without carried moves."""
    text = str(checked(_b2b_through_shared()).replace(
        "    tile.barrier\n    %c = tile.mma %h_smem,",
        "    tile.barrier\n"
        "    tile.cp_async %b1w, %h_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>\n"
        "    tile.cp_commit_group\n    tile.cp_wait_group 0\n    tile.barrier\n"
        "    %c = tile.mma %h_smem,"))
    tolerance = _tolerance(text)
    monkeypatch.setattr(rounding, "CARRIED", {})
    np.testing.assert_array_equal(tolerance, _tolerance(text))


def test_row_sum_moves_by_the_sum_of_its_operands_moves():
    x = np.array([[[1.0, -2.0, 3.0]]])
    assert rounding._row_sum_carried(None, (x,), (np.array([[[0.5, 0.25, 0.0]]]),)).tolist() == [[0.75]]
    assert rounding._row_sum_carried(None, (x,), (0.0,)).tolist() == [[0.0]]


# region the attention backward's dQ = sum_j dS_j K_j, dS rounded to f16 and read from shared memory
BACKWARD_SIZES = ("-d", "batch=1", "-d", "heads=2", "-d", "heads_k=1", "-d", "seq_q=70", "-d", "seq_k=33")


@pytest.fixture(scope="module")
def backward_main(tmp_path_factory) -> str:
    from tessera.kernels.attention_backward import attention_backward_main

    path = tmp_path_factory.mktemp("backward") / "main.mlir"
    path.write_text(str(attention_backward_main(head_dim=128, causal=True, dtype="f16")))
    return str(path)


def test_the_backward_dq_is_within_its_tolerance_at_target_level(backward_main, capsys):
    """Without the carried moves, dV[0,0,10,...] was off by 0.016 against a tolerance of 0.006 here (with 4
    heads, dQaccum[0,0,45,...] by 0.138 against 0.068): a false MISMATCH, the f16 roundings of P and dS, moved
    coherently, cancelling in the sums over rows of mixed signs."""
    status, out, err = inprocess.main_in_process(tessera_run.main, capsys, backward_main, "--check", "--level",
                                                 "target", *BACKWARD_SIZES)
    assert status == 0 and "check: max error" in out and ": ok (" in out, out + err


def test_a_wrong_score_scale_in_the_backward_is_still_a_mismatch(backward_main, capsys, monkeypatch):
    """convert-tile-to-sm90 makes the backward's score scale (scale log2 e) 1.001 times larger."""
    cls = tessera.passes.PASSES["convert-tile-to-sm90"]()
    original = cls.apply

    def apply(self, ctx, module):
        original(self, ctx, module)
        for op in module.walk():
            if isinstance(op, arith.ConstantOp) and op.result.name_hint == "score_scale":
                values = [x * 1.001 for x in op.value.get_values()]
                op.value = DenseIntOrFPElementsAttr.from_list(op.value.get_type(), values)

    monkeypatch.setattr(cls, "apply", apply)
    status, out, err = inprocess.main_in_process(tessera_run.main, capsys, backward_main, "--check", "--level",
                                                 "target", *BACKWARD_SIZES)
    assert status == 1 and "MISMATCH" in out and "dQaccum[" in out, out + err


# endregion
