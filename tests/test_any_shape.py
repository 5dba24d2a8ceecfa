"""Tensors of any innermost size at every level (issues 30 and 32).

- 16-bit register tiles to and from global tensors whose rows may start on any even byte: a packed pair there
  can straddle a 4-byte boundary, so the lowering moves one element per register (`st.global.b16`,
  `ld.global.u16`) unless `tile.divisible` makes the pairs aligned. Both simulators refuse misaligned accesses,
  so a 32-bit pair at an odd column would fail these tests rather than hide (200 x 135 faulted; 1 x 7 lost its
  last column before).
- A kernel whose `tile.divisible` promise the sizes break is refused at launch, naming the call and the size.
- The default GEMM takes any M, N, K at every level and picks the TMA path itself where the rows allow it
  (`tile.specialize`), without warnings.
- `tile.load_broadcast` of a row of a 2-D tensor; a one-row shared tile of a tensor TMA cannot read is refused.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import find_kernel, reference, reference_gemm
from tessera.host import describe
from tessera.kernel_abi import specialized
from tessera.kernels import gemm
from tessera.numerics import dtype_from_name
from tessera.passes import apply_pipeline
from tessera.passes.convert_tile_to_sm90 import LoweringError
from tessera.runtime.arguments import bind_sizes
from text_edits import checked, filled

NUMPY = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}

COPY = """
builtin.module {
  func.func @copy(%X: !tile.tile<?x?xSRC, global> {tile.dims = #tile.dims<M, N>},
                  %Y: !tile.tile<?x?xDST, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64), ceildiv(N, 16)>PROMISE} {
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %c64 = arith.constant 64 : index
    %c16 = arith.constant 16 : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c16 : index
    %x_window = tile.view %X[%m0, %n0] : !tile.tile<?x?xSRC, global> -> !tile.tile<64x16xSRC, global>
    %x = tile.load %x_window : !tile.tile<64x16xSRC, global> -> !tile.tile<64x16xSRC, register>
    CAST
    %y_window = tile.view %Y[%m0, %n0] : !tile.tile<?x?xDST, global> -> !tile.tile<64x16xDST, global>
    tile.store_global %y, %y_window : !tile.tile<64x16xDST, register>, !tile.tile<64x16xDST, global>
    func.return
  }
}
"""


def copy_kernel(src: str, dst: str, promise: str = ""):
    """Y = X rounded to `dst`: a [64, 16] register tile per block, loaded as `src` and stored as `dst`."""
    cast = ("%y = tile.cast %x : !tile.tile<64x16xSRC, register> -> !tile.tile<64x16xDST, register>"
            if src != dst else "%y = tile.fill 0.0 : !tile.tile<64x16xDST, register>")
    text = filled(COPY, CAST=cast, PROMISE=f", tile.divisible = {{{promise}}}" if promise else "")
    if src == dst:  # store the loaded tile itself: the load and the store both take the tensor's alignment
        text = checked(text).replace("tile.store_global %y,", "tile.store_global %x,").replace(
            "    %y = tile.fill 0.0 : !tile.tile<64x16xDST, register>\n", "")
    return tessera.parse_module(filled(text, SRC=src, DST=dst))


def _expected(x: np.ndarray, dst: str) -> np.ndarray:
    return x.astype(NUMPY[dst])


# region 16-bit tiles to and from rows of any length

SHAPES = [(200, 135), (1, 7), (3, 5), (17, 33)]
CASES = [(level, shape) for level in ("tile", "target", "ptx") for shape in SHAPES
         if not (level == "ptx" and shape == (17, 33))]  # the PTX executor's slice


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("level, shape", CASES, ids=[f"{level}-{m}x{n}" for level, (m, n) in CASES])
def test_narrowing_store_into_rows_of_any_length(dtype, level, shape, rng):
    """f32 -> 16-bit cast then tile.store_global: every element lands, none past the row (C[0, 6] of 1 x 7
    was 0 before)."""
    x = rng.standard_normal(shape).astype(np.float32)
    y = tessera.interpret(copy_kernel("f32", dtype), x, level=level)
    assert y.dtype == NUMPY[dtype] and np.array_equal(y, _expected(x, dtype))


@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("level, shape", [("target", (200, 135)), ("target", (17, 33)), ("ptx", (200, 135)),
                                          ("ptx", (1, 7))], ids=["target-200x135", "target-17x33", "ptx-200x135",
                                                                 "ptx-1x7"])
def test_load_then_store_of_the_same_type(dtype, level, shape, rng):
    """A tile loaded and stored as it is: both accesses per element for 16-bit rows of odd length, per word
    for f32."""
    x = rng.standard_normal(shape).astype(NUMPY[dtype])
    y = tessera.interpret(copy_kernel(dtype, dtype), x, level=level)
    assert np.array_equal(y, x)


def test_widening_load_from_rows_of_any_length(rng):
    x = rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16)
    for level in ("target", "ptx"):
        assert np.array_equal(tessera.interpret(copy_kernel("bf16", "f32"), x, level=level), x.astype(np.float32))


def test_promised_even_rows_store_pairs_and_agree(rng):
    """With N promised even, one st.global.b32 per packed pair, and the same bits as per element."""
    x = rng.standard_normal((70, 34)).astype(np.float32)
    promised, plain = copy_kernel("f32", "bf16", "N = 2 : i64"), copy_kernel("f32", "bf16")
    ptx_promised, ptx_plain = tessera.compile(promised), tessera.compile(plain)
    assert "st.global.b16" not in ptx_promised and "st.global.b32" in ptx_promised
    assert "st.global.b16" in ptx_plain
    assert np.array_equal(tessera.interpret(promised, x, level="ptx"), tessera.interpret(plain, x, level="ptx"))


@pytest.mark.usefixtures("ptxas")
def test_ptxas_accepts_the_per_element_store():
    for kernel in (copy_kernel("f32", "bf16"), copy_kernel("f16", "f16")):
        result = tessera.compile(kernel, target="cubin")
        assert not result.warnings and not result.log.diagnostics
        assert result.entry().spill_store_bytes == 0


# endregion
# region A promise the sizes break is refused at launch


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_false_divisibility_promise_is_refused_at_launch(level, rng):
    kernel = copy_kernel("f32", "bf16", "N = 2 : i64")
    with pytest.raises(ValueError, match=r"tessera.interpret: kernel @copy promises \(tile.divisible\) that N is a "
                                         r"multiple of 2, got N = 7"):
        tessera.interpret(kernel, rng.standard_normal((1, 7)), level=level)


def test_false_divisibility_promise_is_refused_by_the_gpu_launch_path():
    """The host description (what the GPU runtime launches) carries the promise and checks it."""
    lowered = tessera.compile(copy_kernel("f32", "bf16", "N = 2 : i64"), "target")
    (host,) = describe(lowered)
    assert bind_sizes(host, {0: (3, 8)}) == {"M": 3, "N": 8}
    with pytest.raises(ValueError, match=r"@copy promises \(tile.divisible\) that N is a multiple of 2, got N = 5"):
        bind_sizes(host, {0: (3, 5)})


# endregion
# region The default GEMM takes any shape

LAYOUTS = {"NN": (False, False), "NT": (False, True), "TN": (True, False), "TT": (True, True)}


def _gemm_case(rng, m, n, k, layout):
    ta, tb = LAYOUTS[layout]
    inputs, options = reference_gemm.gemm_operands(rng, m, n, k, transpose_a=ta, transpose_b=tb)
    return gemm(transpose_a=ta, transpose_b=tb), inputs, options


def _check_gemm(out, inputs, options):
    comparison = reference.check_gemm(out, inputs[0], inputs[1], dtype_from_name("bf16"), **options)
    assert comparison.ok, str(comparison)


@pytest.mark.filterwarnings("error")  # no warning about pipeline-loops or anything else
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("level, shape", [
    ("tile", (129, 67, 33)), ("tile", (1, 3, 7)), ("target", (129, 67, 33)), ("target", (1, 3, 7)),
    ("target", (1, 1, 1)), ("ptx", (1, 3, 7)), ("ptx", (1, 1, 1))])
def test_default_gemm_any_shape(layout, level, shape, rng):
    module, inputs, options = _gemm_case(rng, *shape, layout)
    _check_gemm(tessera.interpret(module, *inputs, level=level), inputs, options)


@pytest.mark.filterwarnings("error")  # fits without a fallback: no warning
@pytest.mark.parametrize("block_n, layout, level", [
    (256, "NN", "target"), (192, "NN", "target"), (256, "NN", "ptx"), (256, "NT", "target"), (256, "NT", "ptx")])
def test_gemm_tiles_wider_or_taller_than_the_threads_are_copied_without_tma(block_n, layout, level, rng):
    """Regression: B's [64, 256] tile of a gemm(block_m=64, block_n=256), at sizes whose rows need not start on
    16 bytes (N = 201, K = 37), was refused ("a copy without TMA needs a 16-bit tile whose 256 columns divide the
    block's 128 threads"); it is copied by the threads 32 columns at a time, as is a [64, 192] one. Given as B^T,
    its [256, 64] tile was copied 128 elements a thread at once (401 registers a thread, spilled): now 64 rows at
    a time, and the kernel fits."""
    ta, tb = LAYOUTS[layout]
    module = gemm(block_m=64, block_n=block_n, transpose_a=ta, transpose_b=tb)
    assert _copies(module, {"M": 65, "N": 201, "K": 37}) == {0: "ld.global", 1: "ld.global"}
    inputs, options = reference_gemm.gemm_operands(rng, 65, 201, 37, transpose_a=ta, transpose_b=tb)
    _check_gemm(tessera.interpret(module, *inputs, level=level), inputs, options)


@pytest.mark.filterwarnings("error")
def test_default_gemm_with_k_7_the_issue_case(rng):
    a, b = rng.standard_normal((8, 7)), rng.standard_normal((7, 8))
    _check_gemm(tessera.interpret(gemm(), a, b, level="target"), [a, b], {})


def _copies(module, sizes):
    sig = find_kernel(module)
    lowered = specialized(module, sig, sizes).clone()
    apply_pipeline(lowered, "assign-swizzle,pipeline-loops{stages=2},convert-tile-to-sm90")
    return describe(lowered)[0].copies


def test_default_gemm_is_specialized_on_the_sizes():
    """16-byte rows (K, N multiples of 8) get TMA; other sizes ld.global; each operand on its own size."""
    module = gemm()
    sig = find_kernel(module)
    assert sig.promised == {} and sig.specialize == sig.divisible == {"K": 8, "N": 8}
    assert _copies(module, {"M": 5, "N": 16, "K": 64}) == {0: "tma", 1: "tma"}
    assert _copies(module, {"M": 5, "N": 16, "K": 7}) == {0: "ld.global", 1: "tma"}
    assert _copies(module, {"M": 5, "N": 3, "K": 7}) == {0: "ld.global", 1: "ld.global"}


def test_default_gemm_compiled_without_sizes_is_the_tma_variant_and_says_so():
    """tessera.compile sees no sizes: the fast variant, whose Target IR kernel promises what it assumed, so a
    launch of it with K = 7 is refused by name instead of faulting."""
    lowered = tessera.compile(gemm(), "target")
    (host,) = describe(lowered)
    assert host.copies == {0: "tma", 1: "tma"}
    with pytest.raises(ValueError, match=r"@gemm_bf16 promises \(tile.divisible\) that K is a multiple of 8, got K = 7"):
        bind_sizes(host, {0: (8, 7), 1: (7, 8)})


@pytest.mark.filterwarnings("error")
def test_default_gemm_aligned_sizes_take_the_pipelined_tma_path(rng):
    a, b = rng.standard_normal((72, 80)), rng.standard_normal((80, 24))
    specialized_module = specialized(gemm(), find_kernel(gemm()), {"M": 72, "K": 80, "N": 24})
    target = tessera.print_module(tessera.compile(specialized_module, "target"))
    assert "sm90.tma_load" in target and "sm90.setmaxnreg" in target
    _check_gemm(tessera.interpret(gemm(), a, b, level="target"), [a, b], {})


def test_promising_gemm_refuses_other_sizes_by_name(rng):
    with pytest.raises(ValueError, match=r"tessera.interpret: kernel @gemm_bf16 promises \(tile.divisible\) that K "
                                         r"is a multiple of 8, got K = 7: .*default tessera.kernels.gemm\(\)"):
        tessera.interpret(gemm(aligned=True), rng.standard_normal((8, 7)), rng.standard_normal((7, 8)),
                          level="target")


# endregion
# region tile.load_broadcast of a row of a 2-D tensor

ROW_BROADCAST = """
builtin.module {
  func.func @row_broadcast(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<R, N>},
                           %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<R, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(R, 64), ceildiv(N, 16)>} {
    %bx = tile.program_id x : index
    %by = tile.program_id y : index
    %c64 = arith.constant 64 : index
    %c16 = arith.constant 16 : index
    %c2 = arith.constant 2 : index
    %m0 = arith.muli %bx, %c64 : index
    %n0 = arith.muli %by, %c16 : index
    %row = tile.view %X[%c2, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<16xf32, global>
    %b = tile.load_broadcast %row : !tile.tile<16xf32, global> -> !tile.tile<64x16xf32, register>
    %y_window = tile.view %Y[%m0, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x16xf32, global>
    tile.store_global %b, %y_window : !tile.tile<64x16xf32, register>, !tile.tile<64x16xf32, global>
    func.return
  }
}
"""


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
@pytest.mark.parametrize("shape", [(3, 7), (70, 33), (2, 5)], ids=["3x7", "70x33", "row-2-outside"])
def test_load_broadcast_of_a_row_of_a_matrix(level, shape, rng):
    """Row 2 of X on every row of Y; a tensor of 2 rows has no row 2, so the window reads zeros."""
    x = rng.standard_normal(shape).astype(np.float32)
    y = tessera.interpret(tessera.parse_module(ROW_BROADCAST), x, level=level)
    expected = np.broadcast_to(x[2], shape) if shape[0] > 2 else np.zeros(shape, np.float32)
    assert np.array_equal(y, expected)


def test_a_one_row_shared_tile_that_tma_cannot_fill_is_refused_by_name():
    """Row 2 of X through a one-row shared tile: X's rows need not start on 16 bytes, so TMA cannot copy it, and
    the copy by the block's threads handles swizzled tiles only (it stopped with a ZeroDivisionError from inside
    the compiler); refused at the copy's line, saying what to write instead."""
    text = checked(ROW_BROADCAST.replace("16", "32")).replace(  # a one-row tile of 128 bytes, a TMA box's
        "    %b = tile.load_broadcast %row : !tile.tile<32xf32, global> -> !tile.tile<64x32xf32, register>\n",
        "    %row2 = tile.view %X[%c2, %n0] : !tile.tile<?x?xf32, global> -> !tile.tile<1x32xf32, global>\n"
        "    %s = tile.alloc_shared : !tile.tile<1x32xf32, shared>\n"
        "    tile.cp_async %row2, %s : !tile.tile<1x32xf32, global>, !tile.tile<1x32xf32, shared>\n"
        "    tile.cp_commit_group\n    tile.cp_wait_group 0\n    tile.barrier\n"
        "    %b = tile.load_broadcast %s : !tile.tile<1x32xf32, shared> -> !tile.tile<64x32xf32, register>\n")
    module = tessera.parse_module(text, "k.mlir")
    x = np.arange(3 * 7, dtype=np.float32).reshape(3, 7)
    assert np.array_equal(tessera.interpret(module, x, level="tile"), np.broadcast_to(x[2], (3, 7)))
    with pytest.raises(LoweringError, match=r"k.mlir:16:5: .*tile.cp_async %row2, %s .*a one-row shared tile is "
                                            r"filled by TMA, but the rows of %X need not start on 16 bytes .*"
                                            r"tile.load_broadcast the row from its global window"):
        tessera.compile(module, target="target")


# endregion


def test_tessera_run_specializes_the_default_gemm(tmp_path):
    """tessera-run lowers for the sizes it is given, as tessera.interpret does: K = 7 runs and checks (in this
    process, as `python -m tessera.tools.tessera_run` runs: tests/inprocess.py)."""
    import sys

    import inprocess

    path = tmp_path / "gemm.mlir"
    path.write_text(tessera.print_module(gemm()))
    proc = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), "--level", "target",
                          "-d", "M=5", "-d", "N=3", "-d", "K=7", "--check"])
    assert proc.returncode == 0, proc.stderr
    assert "C[5, 3]" in proc.stdout and ": ok" in proc.stdout


def test_an_odd_first_column_moves_elements_even_under_a_promise(rng):
    """N promised even makes rows start on 4 bytes, but a window that starts at an odd column (here 16 j + 1)
    still puts pairs across 4-byte boundaries: one element per register there, and the right values."""
    text = tessera.print_module(copy_kernel("f32", "bf16", "N = 2 : i64"))
    text = checked(text).replace("%y_window = tile.view %Y[%m0, %n0]", "%one = arith.constant 1 : index\n"
                                 "    %n1 = arith.addi %n0, %one : index\n    %y_window = tile.view %Y[%m0, %n1]")
    kernel = tessera.parse_module(text)
    assert "st.global.b16" in tessera.compile(kernel)
    x = rng.standard_normal((3, 34)).astype(np.float32)
    expected = np.zeros((3, 34), ml_dtypes.bfloat16)
    for j in range(0, 34, 16):  # block j writes columns 16 j + 1 .. 16 j + 16 from X's 16 j .. 16 j + 15
        width = min(16, 34 - (j + 1))
        expected[:, j + 1: j + 1 + width] = x[:, j: j + width].astype(ml_dtypes.bfloat16)
    for level in ("tile", "target", "ptx"):
        assert np.array_equal(tessera.interpret(kernel, x, level=level), expected), level


ROUTER = Path(__file__).parent / "user_kernels" / "router_top1.mlir"


def _router(experts: int, k_step: int) -> str:
    """tests/user_kernels/router_top1.mlir (a wgmma of N = 8 over Wr^T's [8, 64] tiles) with `experts` rows of Wr
    and K steps of `k_step`."""
    swizzle = {64: 128, 32: 64}[k_step]
    return str(checked(ROUTER.read_text())
               .replace("64x8x", f"64x{experts}x").replace("1x8x", f"1x{experts}x")
               .replace("8x?xbf16", f"{experts}x?xbf16").replace("?x8xf32", f"?x{experts}xf32")
               .replace("#tile.dims<8, K>", f"#tile.dims<{experts}, K>")
               .replace("#tile.dims<M, 8>", f"#tile.dims<M, {experts}>")
               .replace("8x64xbf16, global", f"{experts}x{k_step}xbf16, global")
               .replace("8x64xbf16, shared, swizzle 128", f"{experts}x{k_step}xbf16, shared, swizzle {swizzle}")
               .replace("64x64xbf16, shared, swizzle 128", f"64x{k_step}xbf16, shared, swizzle {swizzle}")
               .replace("64x64xbf16, global", f"64x{k_step}xbf16, global")
               .replace("%k0 = arith.muli %j, %c64", f"%k0 = arith.muli %j, %c{k_step}")
               .replace("%n_k = arith.ceildivui %k_size, %c64", f"%n_k = arith.ceildivui %k_size, %c{k_step}")
               .replace("%c64 = arith.constant 64 : index",
                        f"%c64 = arith.constant 64 : index\n    %c{k_step} = arith.constant {k_step} : index"
                        if k_step != 64 else "%c64 = arith.constant 64 : index"))


@pytest.mark.parametrize("experts, k_step", [(8, 64), (24, 64), (8, 32)])
def test_tiles_of_fewer_rows_than_the_threads_share_are_copied_without_tma(experts, k_step, rng):
    """Regression: the [8, 64] B^T tile of a wgmma with N = 8 (a router over 8 experts, Wr [8, K] read
    transposed) at a K whose rows need not start on 16 bytes was refused below Tile IR ("a copy without TMA needs
    a 16-bit tile whose columns ... divide the block's 128 threads into groups of a multiple of 8 rows"): 128
    threads over 8 rows of 64 give a thread 4 rows, half the swizzle's period. 64 threads copy it, 8 rows each; a
    [24, 64] tile in a slice of 16 rows by every thread and one of 8 by half of them; an [8, 32] tile by 32."""
    module = tessera.parse_module(_router(experts, k_step), "router.mlir")
    assert _copies(module, {"M": 70, "K": 37}) == {0: "ld.global", 1: "ld.global"}
    x = rng.integers(-3, 4, (70, 37)).astype(ml_dtypes.bfloat16)
    w = (rng.integers(-8, 9, (experts, 37)) / 8).astype(ml_dtypes.bfloat16)
    logits = x.astype(np.float64) @ w.astype(np.float64).T
    p, top, _ = tessera.interpret(module, x, w, level="target")
    e = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(p, e / e.sum(1, keepdims=True), rtol=2.0**-16, atol=2.0**-30)
    np.testing.assert_array_equal(top, logits.argmax(1))
