"""`tile.load` of a shared tile into registers below Tile IR (convert_tile_to_sm90/shared_loads.py): a tile
copied (by TMA or by the threads) or stored (`tile.store_shared`) into shared memory, read back with each thread's
registers at their swizzled addresses, bitwise against the Tile interpreter and a NumPy reference at target and
PTX level, over element types (f32, i32, bf16, f16), swizzles (32, 64, 128 bytes), one and two warpgroups, ring
stages and one-row tiles; the read that lacks its barrier is a race at every level; the shapes it cannot take are
refused by name."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

import inprocess
import tessera
from tessera import passes
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.ptx import PtxHazardError
from tessera.passes.convert_tile_to_sm90.common import LoweringError
from test_unseen_kernels24 import BF16, SHARED_READ_BACK

LEVELS = ("tile", "target", "ptx")
TYPES = {"f32": np.float32, "i32": np.int32, "bf16": BF16, "f16": np.float16}


def _values(shape, dtype, seed=0):
    """Small whole numbers (exact in every type, so every sum below is exact in f32)."""
    return np.random.default_rng(seed).integers(-8, 9, shape).astype(dtype)


def copy_load(elt: str, bm: int, bn: int, swizzle: int, then: str = "") -> str:
    """Y = X through a [bm, bn] shared tile of `swizzle` bytes: cp_async (TMA: N promised a multiple of 16
    bytes), wait, barrier, tile.load; `then` (optional) replaces the store of the loaded tile %r."""
    tt = f"!tile.tile<{bm}x{bn}x{elt}"
    store = then or f"""    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?x{elt}, global> -> {tt}, global>
    tile.store_global %r, %yw : {tt}, register>, {tt}, global>"""
    return f"""
builtin.module {{
  func.func @copy_load(
      %X: !tile.tile<?x?x{elt}, global> {{tile.dims = #tile.dims<M, N>}},
      %Y: !tile.tile<?x?x{elt}, global> {{tile.dims = #tile.dims<M, N>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<ceildiv(M, {bm}), ceildiv(N, {bn})>,
                  tile.divisible = {{N = {16 // (2 if elt in ("bf16", "f16") else 4)} : i64}}}} {{
    %cm = arith.constant {bm} : index
    %cn = arith.constant {bn} : index
    %bi = tile.program_id x : index
    %bj = tile.program_id y : index
    %m0 = arith.muli %bi, %cm : index
    %n0 = arith.muli %bj, %cn : index
    %s = tile.alloc_shared : {tt}, shared, swizzle {swizzle}>
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?x{elt}, global> -> {tt}, global>
    tile.cp_async %xw, %s : {tt}, global>, {tt}, shared, swizzle {swizzle}>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %r = tile.load %s : {tt}, shared, swizzle {swizzle}> -> {tt}, register>
{store}
    func.return
  }}
}}
"""


def run_levels(text: str, arrays, levels=LEVELS):
    module = tessera.parse_module(text, "k.mlir")
    return [tessera.launch(module, *arrays, level=level) for level in levels]


def assert_bitwise(results, expected):
    for result in results:
        assert result.dtype == expected.dtype
        np.testing.assert_array_equal(result.view(np.uint8), np.ascontiguousarray(expected).view(np.uint8))


# (element, block rows, block columns, swizzle): rows of one swizzle span and of several boxes, two warpgroups
GRID = [("f32", 64, 8, 32), ("f32", 64, 16, 64), ("f32", 64, 32, 128), ("f32", 64, 64, 128), ("f32", 128, 96, 128),
        ("i32", 64, 64, 128), ("bf16", 64, 16, 32), ("bf16", 64, 32, 64), ("bf16", 64, 128, 128),
        ("f16", 128, 64, 128), ("f16", 64, 256, 128)]


@pytest.mark.parametrize("elt,bm,bn,swizzle", GRID)
def test_a_copied_tile_reads_back_bitwise_at_target_level(elt, bm, bn, swizzle):
    """Sizes that leave partial blocks on both axes: TMA's zero fill outside the tensor, the stores masked."""
    m, n = bm + 9, 2 * bn + (8 if elt in ("f32", "i32") else 16) - (bn if bn >= 128 else 0)
    x = _values((m, n), TYPES[elt])
    assert_bitwise(run_levels(copy_load(elt, bm, bn, swizzle), [x], ("tile", "target")), x)


@pytest.mark.parametrize("elt,bm,bn,swizzle", [("f32", 64, 16, 64), ("bf16", 128, 64, 128), ("i32", 64, 8, 32)])
def test_a_copied_tile_reads_back_bitwise_in_the_ptx_executor(elt, bm, bn, swizzle):
    x = _values((bm + 3, bn + 8), TYPES[elt], seed=1)
    assert_bitwise(run_levels(copy_load(elt, bm, bn, swizzle), [x], ("target", "ptx")), x)


def test_a_tile_copied_by_the_threads_reads_back_at_every_level():
    """16-bit rows that start anywhere (K = 130): copied without TMA, by every thread, then read back: another
    thread's stores, ordered by the barrier."""
    module = tessera.parse_module(SHARED_READ_BACK, "k.mlir")
    a = _values((70, 130), BF16)
    for level in LEVELS:
        np.testing.assert_array_equal(tessera.launch(module, a, level=level), a.astype(np.float32))


@pytest.mark.parametrize("level,error", [("tile", KernelHazardError), ("target", KernelHazardError),
                                         ("ptx", PtxHazardError)])
def test_a_read_without_the_barrier_after_other_threads_stores_is_a_race(level, error):
    """The seeded bug: the barrier between the threads' copy and the read left out. Each thread reads elements
    other threads stored: every level reports it, none returns numbers."""
    module = tessera.parse_module(SHARED_READ_BACK.replace("    tile.barrier\n", ""), "k.mlir")
    with pytest.raises(error, match="tile.barrier|race"):
        tessera.launch(module, _values((70, 130), BF16), level=level)


STORE_THEN_LOAD = """
builtin.module {
  func.func @store_then_load(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>} {
    %c64 = arith.constant 64 : index
    %bi = tile.program_id x : index
    %bj = tile.program_id y : index
    %m0 = arith.muli %bi, %c64 : index
    %n0 = arith.muli %bj, %c64 : index
    %s = tile.alloc_shared : !tile.tile<64x64xELT, shared, swizzle 128>
    %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %x2 = tile.scale %x by 2.0 : !tile.tile<64x64xf32, register>
    %h = tile.cast %x2 : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xELT, register>
    tile.store_shared %h, %s : !tile.tile<64x64xELT, register>, !tile.tile<64x64xELT, shared, swizzle 128>
    tile.barrier
    %r = tile.load %s : !tile.tile<64x64xELT, shared, swizzle 128> -> !tile.tile<64x64xELT, register>
    %f = tile.cast %r : !tile.tile<64x64xELT, register> -> !tile.tile<64x64xf32, register>
    %y = tile.add %f, %x : !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
"""


@pytest.mark.parametrize("elt,mode", [("bf16", "st_shared"), ("f16", "st_shared"), ("bf16", "stmatrix")])
def test_a_tile_stored_to_shared_reads_back_through_the_same_registers(elt, mode):
    """Y = round(2 X) + X: tile.store_shared (either lowering of it: `store-shared`), barrier, tile.load (the
    mirror of the store's addresses)."""
    text = STORE_THEN_LOAD.replace("ELT", elt)
    pipeline = passes.DEFAULT_PIPELINE.replace("convert-tile-to-sm90", f"convert-tile-to-sm90{{store-shared={mode}}}")
    x = np.random.default_rng(2).standard_normal((70, 100)).astype(np.float32)
    expected = (2 * x.astype(np.float64)).astype(TYPES[elt]).astype(np.float64) + x
    module = tessera.parse_module(text, "k.mlir")
    results = [tessera.launch(module, x, level="tile")]
    results += [tessera.launch(module, x, level=level, pipeline=pipeline) for level in ("target", "ptx")]
    np.testing.assert_allclose(results[0], expected, rtol=1e-6)
    assert_bitwise(results[1:], results[0])


def _row_sums_text(stride: str = "64") -> str:
    """S[m] = sum over n of X[m, n]: a loop over 64-column tiles, each copied to shared memory and read into
    registers (pipeline-loops makes the tile a ring: the loads read ring stages)."""
    return """
builtin.module {
  func.func @staged_row_sums(
      %X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %S: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>,
                  tile.divisible = {N = 4 : i64}} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c64 = arith.constant 64 : index
    %bi = tile.program_id x : index
    %m0 = arith.muli %bi, %c64 : index
    %n = tile.dim %X[1] : !tile.tile<?x?xf32, global>
    %n_t = arith.ceildivui %n, %c64 : index
    %s = tile.alloc_shared : !tile.tile<64x64xf32, shared, swizzle 128>
    %acc0 = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %acc = scf.for %j = %c0 to %n_t step %c1 iter_args(%a = %acc0) -> (!tile.tile<64x64xf32, register>) {
      %n0 = arith.muli %j, %c64 : index
      %xw = tile.view %X[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
      tile.cp_async %xw, %s : !tile.tile<64x64xf32, global>, !tile.tile<64x64xf32, shared, swizzle 128>
      tile.cp_commit_group
      tile.cp_wait_group 0
      tile.barrier
      %x = tile.load %s : !tile.tile<64x64xf32, shared, swizzle 128> -> !tile.tile<64x64xf32, register>
      %a2 = tile.add %a, %x : !tile.tile<64x64xf32, register>
      tile.barrier
      scf.yield %a2 : !tile.tile<64x64xf32, register>
    }
    %rs = tile.row_sum %acc : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %sw = tile.view %S[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %rs, %sw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
"""


def test_row_sums_of_tiles_staged_in_a_loop():
    x = _values((70, 200), np.float32, seed=3)
    results = run_levels(_row_sums_text(), [x])
    np.testing.assert_array_equal(results[0], x.astype(np.float64).sum(axis=1).astype(np.float32))
    assert_bitwise(results[1:], results[0])


GEMM_STAGED_RESIDUAL = (Path(__file__).parent / "user_kernels" / "gemm_bias.mlir").read_text().replace(
    """      %C: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})""",
    """      %R: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
      %C: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})""").replace(
    """    %acc0 = tile.fill""",
    """    %r_smem = tile.alloc_shared : !tile.tile<128x64xf32, shared, swizzle 128>
    %rw = tile.view %R[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<128x64xf32, global>
    tile.cp_async %rw, %r_smem : !tile.tile<128x64xf32, global>, !tile.tile<128x64xf32, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %acc0 = tile.fill""").replace(
    """    %out = tile.cast %sum""",
    """    %res = tile.load %r_smem : !tile.tile<128x64xf32, shared, swizzle 128> -> !tile.tile<128x64xf32, register>
    %sum2 = tile.add %sum, %res : !tile.tile<128x64xf32, register>
    %out = tile.cast %sum2""")


def test_a_gemm_epilogue_adds_a_residual_tile_staged_once():
    """C = bf16(A B + bias + R), R's [128, 64] f32 tile copied to shared memory before the K loop and read after
    it: two warpgroups, rows of two swizzle boxes."""
    m, n, k = 130, 72, 80
    a, b = _values((m, k), BF16, 4), _values((k, n), BF16, 5)
    bias, r = _values((n,), np.float32, 6), _values((m, n), np.float32, 7)
    expected = (a.astype(np.float64) @ b.astype(np.float64) + bias + r).astype(BF16)
    results = run_levels(GEMM_STAGED_RESIDUAL, [a, b, bias, r])
    assert_bitwise(results, expected)


def row_tile(elt: str, n: int) -> str:
    """Y[r] = 2 X[r], row r of X copied into a one-row shared tile [1, n] and read into a [1, n] register row (a
    16-bit row doubled in f32: tile.add takes f32 and i32)."""
    row = f"!tile.tile<1x{n}x{elt}"
    if elt in ("bf16", "f16"):
        double = f"""    %rf = tile.cast %r : {row}, register> -> !tile.tile<1x{n}xf32, register>
    %yf = tile.add %rf, %rf : !tile.tile<1x{n}xf32, register>
    %y = tile.cast %yf : !tile.tile<1x{n}xf32, register> -> {row}, register>"""
    else:
        double = f"    %y = tile.add %r, %r : {row}, register>"
    return f"""
builtin.module {{
  func.func @row_through_shared(
      %X: !tile.tile<?x?x{elt}, global> {{tile.dims = #tile.dims<M, N>}},
      %Y: !tile.tile<?x?x{elt}, global> {{tile.dims = #tile.dims<M, N>, tile.role = "out"}})
      attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<M, ceildiv(N, {n})>,
                  tile.divisible = {{N = 8 : i64}}}} {{
    %cn = arith.constant {n} : index
    %row = tile.program_id x : index
    %bj = tile.program_id y : index
    %n0 = arith.muli %bj, %cn : index
    %s = tile.alloc_shared : {row}, shared>
    %xw = tile.view %X[%row, %n0] : !tile.tile<?x?x{elt}, global> -> {row}, global>
    tile.cp_async %xw, %s : {row}, global>, {row}, shared>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %r = tile.load %s : {row}, shared> -> {row}, register>
{double}
    %yw = tile.view %Y[%row, %n0] : !tile.tile<?x?x{elt}, global> -> {row}, global>
    tile.store_global %y, %yw : {row}, register>, {row}, global>
    func.return
  }}
}}
"""


@pytest.mark.parametrize("elt,n", [("f32", 64), ("i32", 32), ("bf16", 64), ("f16", 128)])
def test_a_one_row_tile_reads_back_into_a_register_row(elt, n):
    x = _values((3, 2 * n + 8), TYPES[elt], 8)
    assert_bitwise(run_levels(row_tile(elt, n), [x]), (2 * x.astype(np.float64)).astype(TYPES[elt]))


def test_a_shared_tile_of_other_rows_than_the_block_is_refused_by_name():
    """A [128, 64] tile read in a kernel of 64-row register tiles: no thread layout holds it (the block's rows
    are one warpgroup's); refused at the load's line, not a traceback."""
    text = copy_load("f32", 128, 64, 128, then="""    %rs = tile.row_sum %r : !tile.tile<128x64xf32, register> -> !tile.tile<128xf32, register>
    %o = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %o, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>""")
    module = tessera.parse_module(text, "k.mlir")
    with pytest.raises(LoweringError, match=r"k\.mlir:\d+:\d+: .*register tiles must all have the same number of rows"):
        tessera.launch(module, _values((128, 64), np.float32), level="target")


def test_tessera_run_takes_a_staged_read_and_refuses_the_other_rows_by_name(tmp_path):
    """The command line: the row sums through shared memory run (`--check`: against the Tile level); a read of a
    tile of other rows than the block's exits 1 at the load's line, without a traceback."""
    good, bad = tmp_path / "rows.mlir", tmp_path / "bad.mlir"
    good.write_text(_row_sums_text())
    bad.write_text(copy_load("f32", 128, 64, 128, then="""    %rs = tile.row_sum %r : !tile.tile<128x64xf32, register> -> !tile.tile<128xf32, register>
    %o = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %yw = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %o, %yw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>"""))
    run = [sys.executable, "-m", "tessera.tools.tessera_run"]
    result = inprocess.run([*run, str(good), "--level", "ptx", "--check", "-d", "M=70", "-d", "N=132"])
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    result = inprocess.run([*run, str(bad), "--level", "target", "-d", "M=128", "-d", "N=64"])
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert re.search(r"bad\.mlir:\d+:\d+: .*same number of rows", result.stderr), result.stderr


@pytest.mark.parametrize("name", ["f32", "bf16-64B", "stored", "rows", "gemm"])
def test_the_reads_compile_with_ptxas_without_spills_and_pair_32_bit_columns(name, ptxas):
    text = {"f32": copy_load("f32", 64, 64, 128), "bf16-64B": copy_load("bf16", 64, 32, 64),
            "stored": STORE_THEN_LOAD.replace("ELT", "bf16"), "rows": _row_sums_text(),
            "gemm": GEMM_STAGED_RESIDUAL}[name]
    module = tessera.parse_module(text, "k.mlir")
    ptx = tessera.compile(module, "ptx")
    if name in ("f32", "rows"):  # a thread's two adjacent f32 columns: one 8-byte load
        assert "ld.shared.v2.b32" in ptx
    (resources,) = tessera.compile(module, "cubin").log.functions.values()
    assert resources.spill_store_bytes == resources.spill_load_bytes == 0


REUSED_TWICE = """
builtin.module {
  func.func @reused_twice(
      %A: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<M, K>},
      %W: !tile.tile<?x?xbf16, global> {tile.dims = #tile.dims<K, N>},
      %C: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 64)>,
                  tile.divisible = {K = 8 : i64, N = 8 : i64}} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %bi = tile.program_id x : index
    %bj = tile.program_id y : index
    %m0 = arith.muli %bi, %c64 : index
    %n0 = arith.muli %bj, %c64 : index
    %a_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %w_smem = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
    %aw = tile.view %A[%m0, %c0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %aw, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    %ww = tile.view %W[%c0, %n0] : !tile.tile<?x?xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %ww, %w_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %a = tile.load %a_smem : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %p = tile.mma %a, %w_smem, %zero : !tile.tile<64x64xbf16, register>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    %af = tile.cast %a : !tile.tile<64x64xbf16, register> -> !tile.tile<64x64xf32, register>
    %y = tile.add %p, %af : !tile.tile<64x64xf32, register>
    %cw = tile.view %C[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %y, %cw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
"""


def test_a_tile_read_once_feeds_a_register_mma_and_an_elementwise_add():
    """C = A W + A (K = N = 64): A's tile read from shared memory into registers once, the A operand of a
    register-A wgmma and an addend (the accumulator layout is the 16-bit A fragment's)."""
    a, w = _values((70, 64), BF16, 9), _values((64, 64), BF16, 10)
    expected = (a.astype(np.float64) @ w.astype(np.float64) + a).astype(np.float32)
    assert_bitwise(run_levels(REUSED_TWICE, [a, w]), expected)
