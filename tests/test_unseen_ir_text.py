"""Hand-written IR text through tessera-opt, op by op (round 24 of the unseen cases): for every op of the Tile IR,
Target IR (sm90), StableHLO-subset and graph-attention dialects, one well-formed use that verifies and prints back
to itself (custom and generic form), and two or three malformed ones a user would plausibly write (wrong element
type, rank, shape or memory space, an attribute out of range, an operand or property missing, one too many),
each one diagnostic at `file:line:col` naming the op, exit status 1, no traceback. The tables are
tests/ir_text_tile.py, ir_text_sm90.py and ir_text_graph.py; `CONTEXT` holds the mistakes a lone op cannot
show (a ring stage used after its release, a missing terminator or `}`, an undefined value, a misspelt op or
attribute, a Target IR kernel's shared memory), and `RING_KERNEL` a new hand-written kernel checked at every
level against NumPy. About 25 s."""

from __future__ import annotations

import re

import numpy as np
import pytest

import inprocess
import ir_text_graph
import ir_text_sm90
import ir_text_tile
from tessera.tools import tessera_opt

WELL_FORMED = {**ir_text_tile.WELL_FORMED, **ir_text_sm90.WELL_FORMED, **ir_text_graph.WELL_FORMED}
MALFORMED = [*ir_text_tile.MALFORMED, *ir_text_sm90.MALFORMED, *ir_text_graph.MALFORMED]
IN_CONTEXT = {"tile.release"}
"""Ops whose well-formed use needs more than a function of arguments (a ring's `tile.stage`): in `RING_KERNEL`."""
WITH_REGIONS = {"stablehlo.reduce", "stablehlo.return"}
"""StableHLO's reduction and the terminator of its region, used in the rewriter's graphs (tests/test_rewriter*.py)."""


def function(args: str, body: str) -> str:
    return f"func.func @f({args}) {{\n  {body}\n  func.return\n}}\n"


def _opt(capsys, tmp_path, text: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "case.mlir"
    path.write_text(text)
    return inprocess.main_in_process(tessera_opt.main, capsys, str(path), *args)


def test_every_op_has_a_well_formed_and_two_malformed_uses():
    from tessera.dialects.attention import TesseraAttention
    from tessera.dialects.sm90 import SM90
    from tessera.dialects.stablehlo import CHLO, StableHLO
    from tessera.dialects.tile import Tile

    ops = {op.name for dialect in (Tile, SM90, StableHLO, CHLO, TesseraAttention) for op in dialect.operations}
    assert ops - set(WELL_FORMED) - IN_CONTEXT - WITH_REGIONS == set()
    malformed = {op: sum(case[0] == op for case in MALFORMED) for op in WELL_FORMED}
    assert [op for op, n in malformed.items() if n < 2] == []


@pytest.mark.parametrize("op", sorted(WELL_FORMED))
def test_a_well_formed_use_verifies_and_prints_back_to_itself(op, tmp_path, capsys):
    status, custom, err = _opt(capsys, tmp_path, function(*WELL_FORMED[op]))
    assert status == 0, err
    status, again, err = _opt(capsys, tmp_path, custom)
    assert status == 0 and again == custom, err
    status, generic, err = _opt(capsys, tmp_path, custom, "--print-op-generic")
    assert status == 0, err
    status, back, err = _opt(capsys, tmp_path, generic)
    assert status == 0 and back == custom, err


@pytest.mark.parametrize("op, what, old, new, words", MALFORMED,
                         ids=[f"{case[0]}: {case[1]}" for case in MALFORMED])
def test_a_malformed_use_is_one_located_diagnostic_naming_the_op(op, what, old, new, words, tmp_path, capsys):
    text = function(*WELL_FORMED[op])
    assert old in text
    status, out, err = _opt(capsys, tmp_path, text.replace(old, new))
    assert status == 1 and out == "", err
    assert re.match(r"\S*case\.mlir:\d+:\d+", err) and op in err and words in err, err


RING_KERNEL = """func.func @ring_mma(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<M, 64>},
                    %B: !tile.tile<64x64xbf16, global> {tile.dims = #tile.dims<64, 64>},
                    %C: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c64 = arith.constant 64 : index
  %b = tile.program_id x : index
  %m0 = arith.muli %b, %c64 : index
  %ring = tile.alloc_shared align 1024 : !tile.tile<2x64x64xbf16, shared, swizzle 128>
  %slot = arith.remui %c0, %c2 : index
  %a_s = tile.stage %ring[%slot] : !tile.tile<2x64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, shared, swizzle 128>
  %b_s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %aw = tile.view %A[%m0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
  %bw = tile.view %B[%c0, %c0] : !tile.tile<64x64xbf16, global> -> !tile.tile<64x64xbf16, global>
  tile.cp_async %aw, %a_s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  tile.cp_async %bw, %b_s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
  tile.cp_commit_group
  tile.cp_wait_group 0
  tile.barrier
  %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %acc = tile.mma %a_s, %b_s, %zero : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
  tile.release %a_s : !tile.tile<64x64xbf16, shared, swizzle 128>
  %cw = tile.view %C[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %acc, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}
"""
"""A GEMM step written by hand with its A tile in a ring stage (released after the mma reads it) and B in an
unstaged buffer, each copy in its own group (a group fills stages only or unstaged tiles only)."""
MMA = "  %acc = tile.mma %a_s"
RELEASE = "  tile.release %a_s : !tile.tile<64x64xbf16, shared, swizzle 128>\n"


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_the_ring_kernel_computes_a_times_b_at_every_level(level):
    import tessera
    from tessera.numerics import BF16

    rng = np.random.default_rng(24)
    a, b = rng.standard_normal((100, 64)), rng.standard_normal((64, 64))
    module = tessera.parse_module(RING_KERNEL, "ring_mma.mlir")
    c = tessera.interpret(module, a, b, level=level)
    expected = a.astype(BF16).astype(np.float64) @ b.astype(BF16).astype(np.float64)  # exact products, f32 sums
    assert c.shape == (100, 64) and np.abs(c - expected).max() <= 1e-5 * np.abs(expected).max()


def test_the_ring_kernel_survives_the_default_pipeline_to_ptx(tmp_path, capsys):
    status, ptx, err = _opt(capsys, tmp_path, RING_KERNEL, "-p", "default-pipeline", "-t", "ptx")
    assert status == 0 and "wgmma.mma_async" in ptx, err


KERNEL_TAIL = """  func.return
}
"""
TARGET_KERNEL = """func.func @k(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                sm90.kernel = {threads = 64 : i64, smem_bytes = 256 : i64}} {
  %a = sm90.shared_buffer "a" offset 0 size 128 align 16 swizzle 0 : i32
  sm90.bar_sync 0, 64
  func.return
}
"""
CONTEXT = {  # name: (the text, its line the diagnostic points at, the diagnostic's words)
    "a ring stage read after its release": (
        RING_KERNEL.replace(RELEASE, "").replace(MMA, RELEASE + MMA), 23,
        "'tile.release' op releases the stage that tile.mma at "),
    "a function without its terminator": (
        RING_KERNEL.replace(KERNEL_TAIL, "}\n"), 26,
        "Operation tile.store_global terminates block in single-block region but is not a terminator"),
    "a function without its closing brace": (
        RING_KERNEL.removesuffix("}\n"), 28, "the input ends inside a region: a '}' is missing"),
    "an undefined value": (
        RING_KERNEL.replace("tile.view %A[%m0, %c0]", "tile.view %A[%m1, %c0]"), 14, "use of undefined value %m1"),
    "a misspelt op": (
        RING_KERNEL.replace("tile.barrier", "tile.barier"), 21,
        "Operation tile.barier is not registered (did you mean 'tile.barrier'?)"),
    "a misspelt kernel attribute": (
        RING_KERNEL.replace("tile.kernel =", "tile.kernal ="), 1,
        "unknown attribute 'tile.kernal' (did you mean 'tile.kernel'?)"),
    "a misspelt memory space": (
        RING_KERNEL.replace("tile.fill 0.0 : !tile.tile<64x64xf32, register>", "tile.fill 0.0 : "
                            "!tile.tile<64x64xf32, registers>"), 22, "Expected `global`, `shared`, or `register`."),
    "a Target IR buffer past the kernel's shared memory": (
        TARGET_KERNEL.replace("size 128", "size 512"), 4,
        "shared buffer 'a' [0, 512) does not fit the kernel's 256 bytes of shared memory"),
    "two Target IR buffers sharing bytes": (
        TARGET_KERNEL.replace("  sm90.bar_sync", '  %b = sm90.shared_buffer "b" offset 64 size 64 align 16 '
                              'swizzle 0 : i32\n  sm90.bar_sync'), 5,
        "shared buffer 'b' [64, 128) overlaps shared buffer 'a' [0, 128)"),
    "a Target IR kernel of more threads than a block has": (
        TARGET_KERNEL.replace("threads = 64 : i64", "threads = 2048 : i64"), 1,
        "'sm90.kernel': threads must be a positive multiple of 32 up to 1024, got 2048"),
    "a StableHLO add of an i8 and an f32 tensor (NumPy promoted it)": (
        function("%a: tensor<4xi8>, %b: tensor<4xf32>",
                 '%r = "stablehlo.add"(%a, %b) : (tensor<4xi8>, tensor<4xf32>) -> tensor<4xf32>'), 2,
        "'stablehlo.add' op operands and result must have one element type, got i8, f32"),
    "a StableHLO compare of two shapes": (
        function("%a: tensor<4xf32>, %b: tensor<8xf32>", '%r = "stablehlo.compare"(%a, %b) '
                 "<{comparison_direction = #stablehlo<comparison_direction LT>}> : (tensor<4xf32>, tensor<8xf32>) "
                 "-> tensor<4xi1>"), 2, "'stablehlo.compare' op lhs, rhs and the result must have one shape"),
    "a StableHLO reshape to more elements (NumPy's error, unlocated, when run)": (
        function("%a: tensor<4x8xf32>", '%r = "stablehlo.reshape"(%a) : (tensor<4x8xf32>) -> tensor<64xf32>'), 2,
        "'stablehlo.reshape' op operand and result must hold as many elements, got 32 and 64"),
    "a named barrier for more threads than a block has": (
        TARGET_KERNEL.replace("sm90.bar_sync 0, 64", "sm90.bar_sync 0, 2048"), 5,
        "'sm90.bar_sync' op thread count must be a positive multiple of 32 up to a block's 1024 threads"),
}


@pytest.mark.parametrize("name", CONTEXT)
def test_a_mistake_in_context_is_one_located_diagnostic(name, tmp_path, capsys):
    text, line, words = CONTEXT[name]
    status, out, err = _opt(capsys, tmp_path, text)
    assert status == 1 and out == "", err
    assert re.match(rf"\S*case\.mlir:{line}:\d+", err) and words in err, err


def test_the_target_kernel_of_the_context_cases_is_well_formed(tmp_path, capsys):
    status, ptx, err = _opt(capsys, tmp_path, TARGET_KERNEL, "-t", "ptx")
    assert status == 0 and "bar.sync 0, 64;" in ptx, err
