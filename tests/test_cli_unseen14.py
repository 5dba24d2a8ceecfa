"""`tessera-run` given what a kernel author writes next (round 8 of the unseen cases): `--check` of a lowering
that is wrong in the second of two outputs, and kernels that are wrong (a reduction over a dimension the tile
does not have, operands of two element types, a store into a window of another shape or type, a window promised
`in_bounds` that leaves its tensor, every block storing the same window). `--check` printed only the largest error and the tolerance; it now says
which output's elements are off, how many and where. Each bad kernel is one located diagnostic and exit
status 1, no traceback. About 1 s."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import inprocess
from tessera.tools import tessera_run

KERNELS = Path(__file__).resolve().parent / "user_kernels"


def _run(capsys, path: Path, *args: str) -> tuple[int, str, str]:
    return inprocess.main_in_process(tessera_run.main, capsys, str(path), *args)


def test_check_names_the_elements_of_the_output_that_is_off(monkeypatch, capsys):
    """Regression: with `tile.rint` lowered as a truncation (seeded), `--check` printed "max error 1.000e+00,
    tolerance 0.000e+00: MISMATCH" and nothing of where; it now names Q, the output that is off, how many of its
    elements are beyond their tolerance and the box they lie in."""
    from xdsl.dialects import math

    from tessera.dialects import tile

    lowering = importlib.import_module("tessera.passes.convert_tile_to_sm90.elementwise")
    monkeypatch.setitem(lowering._ROUNDING, tile.RintOp, math.TruncOp)
    status, out, err = _run(capsys, KERNELS / "copy_and_round.mlir", "--level", "target", "-d", "M=70", "-d", "N=33",
                            "--check")
    assert status == 1, out + err
    assert "MISMATCH" in out and " of 2310 elements of Q, in Q[0..69,0..32] beyond their tolerance" in out, out


HEAD = """builtin.module {
  func.func @bad(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
"""
TAIL = """    func.return
  }
}
"""
R64 = "!tile.tile<64xf32, register>"
T64 = "!tile.tile<64x64xf32, register>"
BAD = {  # the kernel's body after HEAD: (its lines, the diagnostic's line and text)
    "a reduction over a dimension the tile does not have": (
        f"    %s = tile.row_sum %x : {T64} -> {R64}\n    %t = tile.row_sum %s : {R64} -> {R64}\n",
        13, "'tile.row_sum' op source must have rank 2, got rank 1"),
    "an f32 tile added to a bf16 one": (
        f"    %h = tile.cast %x : {T64} -> !tile.tile<64x64xbf16, register>\n"
        f"    %s = tile.add %x, %h : {T64}, !tile.tile<64x64xbf16, register>\n",
        13, "'tile.add' op operands must share one element type, got f32, bf16"),
    "a bf16 tile stored into an f32 window": (
        f"    %h = tile.cast %x : {T64} -> !tile.tile<64x64xbf16, register>\n"
        "    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>\n"
        "    tile.store_global %h, %yw : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xf32, global>\n",
        14, "value element type bf16 must match the window's f32"),
    "a [64, 64] tile stored into a [64, 32] window": (
        "    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>\n"
        f"    tile.store_global %x, %yw : {T64}, !tile.tile<64x32xf32, global>\n",
        13, "value shape [64, 64] and window shape [64, 32] must match"),
    "a store through an in_bounds window past the tensor": (
        "    %c1 = arith.constant 1 : index\n    %m1 = arith.addi %m0, %c1 : index\n"
        "    %yw = tile.view %Y[%m1, %c0] in_bounds : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>\n"
        f"    tile.store_global %x, %yw : {T64}, !tile.tile<64x64xf32, global>\n",
        14, "is in_bounds, but its window [64, 64] at [1, 0] leaves the tensor of shape [70, 50]"),
    "every block storing the same window (a race between blocks)": (
        "    %yw = tile.view %Y[%c0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>\n"
        f"    tile.store_global %x, %yw : {T64}, !tile.tile<64x64xf32, global>\n",
        13, "writes Y[0, 0], which block (1, 0, 0) writes too: blocks run in no order"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_wrong_kernel_is_one_located_diagnostic(case, tmp_path, capsys):
    body, line, text = BAD[case]
    path = tmp_path / "bad.mlir"
    path.write_text(HEAD + body + TAIL)
    status, out, err = _run(capsys, path, "-d", "M=70", "-d", "N=50", "--check")
    assert status == 1 and "Traceback" not in out + err, out + err
    assert f"bad.mlir:{line}:" in err and text in err, err
