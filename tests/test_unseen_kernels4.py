"""Kernels a user writes next, round 4 (`tests/user_kernels/*.mlir`, not rounds 1 to 3's): a two-layer MLP in one
kernel (X W1, silu, rounded to bf16 into shared memory, then W2: two GEMMs whose hidden activations never leave
the block), a weighted histogram by atomic adds (a one-hot tile summed by a transposed tensor-core product,
then `tile.atomic_add` per bin), 64 x 80 tiles (a wgmma N that is no power of two) over odd shapes with
f16 and bf16 outputs of f32 math and row sums added across column blocks, and a GEMM that stores its result
transposed (both operands of `tile.mma` transposed; the same through a transposed atomic add is refused by
name below Tile level). Each runs through `tessera.launch`
at the Tile, target and PTX levels on odd shapes (M = 1, N = 1, N = 1000, 17, 129) against a float64 NumPy
reference. Tiles of 48 rows are refused by name at their kernel's line below Tile IR, by `tessera-run` too
(exit 1, no traceback).

The default run takes the histogram and the 64 x 80 tiles at Tile level, the transposed store in the CTA
simulator, and the refusals (about 4 s); `-m slow`
runs every kernel at every level on every shape, and checks each with every ptxas found (no warning, no spill)
and with `tessera-run --level ptx --check`.
"""

from __future__ import annotations

import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera.sm90 import approx
from unseen_rounds import KERNELS, LEVELS, Case, check_tools, round_tests

BF16 = ml_dtypes.bfloat16
F32_ULP = 2.0**-23


# region inputs and references

def _histogram_inputs(shape, rng):
    m, bins = shape
    return [rng.integers(-3, bins + 3, m).astype(np.int32),  # a few values outside [0, bins): counted nowhere
            (2.0 ** rng.integers(-3, 4, bins)).astype(np.float32)], {}


def _histogram_ref(x, w):
    inside = x[(x >= 0) & (x < w.size)]
    return (np.bincount(inside, minlength=w.size) * w.astype(np.float64),)


def _awkward_inputs(shape, rng):
    return [(rng.standard_normal(shape) * 4).astype(np.float32)], {}


def _awkward_ref(x):
    squares = x * x  # one f32 rounding, as the kernel's tile.mul
    return (squares.astype(np.float16).astype(np.float64), (x + np.float32(0.25)).astype(BF16).astype(np.float64),
            (x.astype(np.float64) ** 2).sum(1))


def _gemm_inputs(shape, rng):
    m, k, n = shape
    return [rng.integers(-4, 5, (m, k)).astype(BF16), rng.integers(-4, 5, (k, n)).astype(BF16)], {}


def _gemm_transposed_ref(a, b):
    a, b = (x.astype(np.float64) for x in (a, b))
    return ((a @ b).T,)


# endregion

CASES = {
    # exact: small integers, every partial sum an integer below 2^24
    "gemm_store_transposed": Case("gemm_store_transposed", _gemm_inputs, _gemm_transposed_ref, 0.0, 0.0,
                                  ((70, 100, 130), (1, 1, 1), (17, 129, 1000), (128, 64, 64))),
    # exact: counts below 2^24 times powers of two, added in any order
    "histogram": Case("histogram", _histogram_inputs, _histogram_ref, 0.0, 0.0, ((200, 70), (1000, 70), (1, 1),
                                                                                 (129, 200), (64, 64))),
    # the 16-bit outputs bit for bit (each one f32 operation, then the 16-bit rounding); R: f32 squares and an f32
    # sum of at most 1000 terms in any order (2 N ulp of the sum of squares, which is R itself)
    "awkward_tiles": Case("awkward_tiles", _awkward_inputs, _awkward_ref, (0.0, 0.0, 2 * 1000 * F32_ULP),
                          0.0, ((129, 81), (1, 1000), (70, 1), (64, 80))),
}

FAST = {"histogram": ("tile",), "awkward_tiles": ("tile",), "gemm_store_transposed": ("target",)}

TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "histogram": ["M=300", "NB=70"], "awkward_tiles": ["M=70", "N=81"],
    "gemm_store_transposed": ["M=70", "K=100", "N=130"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


# region the MLP: a bound that follows silu's approximation through the bf16 rounding of the hidden units

MLP_SHAPES = ((70, 100, 129, 65), (1, 1, 1, 1), (17, 129, 64, 1000), (130, 64, 17, 64))  # (M, D, F, N)
SILU = approx.approx_relative_error("ex2") + approx.approx_relative_error("rcp") + 4 * F32_ULP


def _check_mlp(shape, level):
    """Y against float64 with the hidden units rounded to bf16 as the kernel rounds them. A hidden unit whose
    exact value lies within the first GEMM's f32 sum error (D ulp of |X| |W1|) and silu's approximation bound
    of a bf16 rounding boundary may round either way: the bound is the sum of those units' possible change
    times |W2|, plus the second GEMM's f32 sum error (F ulp of |H| |W2|)."""
    m, d, f, n = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((m, d)).astype(BF16)
    w1 = (rng.standard_normal((d, f)) / np.sqrt(d)).astype(BF16)
    w2 = (rng.standard_normal((f, n)) / np.sqrt(f)).astype(BF16)
    module = tessera.parse_module((KERNELS / "mlp.mlir").read_text(), "mlp.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = tessera.launch(module, x, w1, w2, level=level)
    x, w1, w2 = (a.astype(np.float64) for a in (x, w1, w2))
    h = x @ w1
    slack = d * F32_ULP * (np.abs(x) @ np.abs(w1))
    silu = [(h + s) / (1 + np.exp(-(h + s))) for s in (-slack, 0.0, slack)]
    low, mid, high = (np.asarray(v, np.float32).astype(BF16).astype(np.float64) for v in silu)
    low, high = (low * (1 - SILU), high * (1 + SILU))
    rounded = [np.asarray(v, np.float32).astype(BF16).astype(np.float64) for v in (low, high)]
    change = np.maximum(np.abs(rounded[0] - mid), np.abs(rounded[1] - mid))
    expected = mid @ w2
    bound = change @ np.abs(w2) + f * F32_ULP * (np.abs(mid) @ np.abs(w2)) + 1e-30
    error = np.abs(y.astype(np.float64) - expected)
    assert y.shape == (m, n) and np.all(error <= bound), f"mlp at {level} {shape}: max excess {(error - bound).max()}"


@pytest.mark.parametrize("level", ["tile", pytest.param("target", marks=pytest.mark.slow),
                                   pytest.param("ptx", marks=pytest.mark.slow)])
def test_mlp(level):
    _check_mlp(MLP_SHAPES[1], level)


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_mlp_every_shape(level):
    for shape in MLP_SHAPES:
        _check_mlp(shape, level)

# endregion


@pytest.mark.slow
def test_mlp_tools():
    check_tools("mlp", ["M=70", "D=100", "F=129", "N=65"])


def test_tiles_of_48_rows_are_refused_by_name(tmp_path):
    """64 x 80 tiles lower (above); 48 x 80 ones run at Tile level and are refused below it at the kernel's
    line, by the Python API and by `tessera-run` (exit 1, no traceback): a warpgroup takes 64 rows."""
    text = (KERNELS / "awkward_tiles.mlir").read_text().replace("64x80", "48x80").replace(
        "%c64 = arith.constant 64", "%c64 = arith.constant 48").replace("ceildiv(M, 64)", "ceildiv(M, 48)")
    text = text.replace("!tile.tile<64xf32", "!tile.tile<48xf32")
    module = tessera.parse_module(text, "k.mlir")
    x = np.random.default_rng(0).standard_normal((50, 81)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y16, yb, r = tessera.launch(module, x, level="tile")
    np.testing.assert_array_equal(y16, (x * x).astype(np.float16))
    message = "register tiles have 48 rows; warpgroups take 64 rows each"
    with pytest.raises(Exception, match=rf"k.mlir:7:3: kernel @awkward_tiles: convert-tile-to-sm90: {message}"):
        tessera.compile(module, target="target")
    path = tmp_path / "k.mlir"
    path.write_text(text)
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), "--level", "target",
                            "-d", "M=50", "-d", "N=81"])
    assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_transposed_atomic_add_into_an_inner_window_is_refused_by_name():
    """`tile.atomic_add ... transpose` into a window that does not start at column 0 runs at Tile level (the
    answer of gemm_store_transposed) and is refused below it at its line, by `tessera-run` with exit 1 and no
    traceback (the lowering's transposed add covers the backward's dQ^T windows only)."""
    rng = np.random.default_rng(19)
    a, b = _gemm_inputs((70, 100, 130), rng)[0]
    module = tessera.parse_module((KERNELS / "gemm_atomic_transposed.mlir").read_text(),
                                  "gemm_atomic_transposed.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(tessera.launch(module, a, b, level="tile"), *_gemm_transposed_ref(a, b))
    path = str(KERNELS / "gemm_atomic_transposed.mlir")
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", path, "--level", "target",
                            "-d", "M=70", "-d", "K=100", "-d", "N=130"])
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "gemm_atomic_transposed.mlir:43:5: kernel @gemm_atomic_transposed: convert-tile-to-sm90" in result.stderr
    assert "a transposed add needs a window from column 0" in result.stderr

