"""Kernels a user writes next, round 8 (`tests/user_kernels/*.mlir`, not rounds 1 to 7's): a GEMM whose K block is
32 (A's shared tile [64, 32] of 16-bit elements: 64-byte rows, the 64-byte swizzle) in f16 and in bf16 at sizes
no tile divides (200 x 135 x 72, 1 x 7 x 16, 65 x 129 x 40), an attention-like back-to-back GEMM at head_dim 96
(S = Q K^T over a K of 96, P V with a wgmma N of 96), a row softmax with a temperature read from a one-element
tensor, a masked fill of the strict upper triangle by `tile.iota` coordinates on bf16, a log-softmax over rows of
any length (two passes over column blocks), row statistics stored as a [M, 1] column and as a 1-D vector, every
kind of elementwise op at once (sigmoid, rsqrt, reciprocal, division, abs, min, max, compare, select), and a GEMM
fused with a residual and a LayerNorm over 256 columns that needs more registers than a thread has (the default
pipeline falls back to single-stage spilling and says so). Each runs through `tessera.launch` at the Tile, target
and PTX levels against a float64 NumPy reference.

Bugs found: an op computing on a 16-bit register tile (held packed, two elements to a register) was lowered as
f32 arithmetic on the packed registers: `tile.scale` and `tile.fma` gave silently wrong numbers in the CTA
simulator, `tile.select`, `tile.mul_rows`, `tile.div_rows`, `tile.exp_diff` and `tile.exp_subtract` stopped it
with a NumPy error (the PTX printer with one about Target IR); each is now refused at its line
(`tests/test_tile_elementwise.py`). A [1, 1] tile (one value for the whole block) was refused at the kernel's
line, as "register tiles must all have the same number of rows", not at the op that made it nor saying what to
write; the refusal now names the op and the row vector to use. A store into a window that a constant index puts
wholly past its tensor stored nothing, silently: `tile.view` refuses it. `tessera-opt -p default-pipeline
--validate` of the kernel too big for registers stopped at warp-specialize (exit 1) though the default pipeline
compiles it: validate walks the configuration the fallback keeps (`tests/test_validate.py`). Probing the GEMMs
with copies without TMA (`tests/test_any_shape.py`): a [64, 256] tile by 128 threads was refused, and a
[256, 64] one copied 128 elements a thread at once (401 registers, spilled).

Refused by name at their line, by the Python API and by the tools (exit 1, no traceback): a kernel argument that
is a bare f32 scalar, a `tile.mma` of f16 by bf16, a copy between tiles of other shapes, an f32 tile stored into
an f16 window, a store into a window that a constant index puts wholly past its tensor (it stored nothing,
silently), and below Tile IR arithmetic on a bf16 tile (and, until round 9, a row vector cast to bf16 and a bf16
bias broadcast).
`tessera-opt --validate` gives every level its verdict and exits 0 on these kernels, and 1 naming
convert-tile-to-sm90 when one op's lowering is seeded wrong.

The default run takes each kernel at one level and the refusals (about 12 s of CPU); `-m slow` runs every kernel
at every level on every shape, and checks each with every ptxas found (no warning, no spill) and with
`tessera-run --level ptx --check`.
"""

from __future__ import annotations

import re
import sys
import warnings

import ml_dtypes
import numpy as np
import pytest

import inprocess
import tessera
from tessera.sm90 import approx
from text_edits import checked
from unseen_rounds import KERNELS, LEVELS, Case, f64, round_tests

BF16 = ml_dtypes.bfloat16
F16 = np.float16
F32_U = 2.0**-24  # f32's unit roundoff


# region inputs and references

def _gemm_inputs(dtype):
    def inputs(shape, rng):
        m, n, k = shape
        return [rng.integers(-3, 4, (m, k)).astype(dtype), (rng.integers(-8, 9, (k, n)) / 8).astype(dtype)], {}
    return inputs


def _gemm_ref(dtype):
    def reference(a, b):
        a, b = f64(a, b)
        return ((a @ b).astype(dtype).astype(np.float64),)
    return reference


def _b2b_inputs(shape, rng):
    m, n = shape
    return [rng.integers(-2, 3, (m, 96)).astype(BF16), rng.integers(-2, 3, (n, 96)).astype(BF16),
            rng.integers(-2, 3, (n, 96)).astype(BF16)], {}


def _b2b_ref(q, k, v):
    q, k, v = f64(q, k, v)
    return ((q @ k.T * 0.125).astype(BF16).astype(np.float64) @ v,)


def _temperature_inputs(shape, rng):
    m, n, t = shape
    return [(rng.standard_normal((m, n)) * 4).astype(np.float32), np.array([t / 8], np.float32)], {}


def _temperature_ref(x, t):
    x, t = f64(x, t)
    z = x / t[0]
    e = np.exp(z - z.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True),)


def _triu_inputs(shape, rng):
    return [rng.standard_normal(shape).astype(BF16)], {}


def _triu_ref(x):
    x, = f64(x)
    i, j = np.indices(x.shape)
    return (np.where(j > i, -2.5, x),)


def _log_softmax_inputs(shape, rng):
    return [(rng.standard_normal(shape) * 8).astype(np.float32)], {}


def _log_softmax_ref(x):
    x, = f64(x)
    top = x.max(1, keepdims=True)
    return (x - top - np.log(np.exp(x - top).sum(1, keepdims=True)),)


def _stats_inputs(shape, rng):
    return [(rng.standard_normal(shape) * 3).astype(np.float32)], {}


def _stats_ref(x):
    x, = f64(x)
    return np.abs(x).sum(1, keepdims=True), x.max(1)


def _mix_inputs(shape, rng):
    x = (rng.standard_normal(shape) * 2).astype(np.float32)
    y = (rng.standard_normal(shape) * 2).astype(np.float32)
    y[::3] = x[::3]  # ties: x > y is false there
    return [x, y], {}


def _mix_ref(x, y):
    x, y = f64(x, y)
    big = 1 / (1 + np.exp(-x)) / np.sqrt(np.abs(y) + 1)
    small = 1 / (1 + np.abs(x)) / np.maximum(np.minimum(x, y), 0.25)
    return np.where(x > y, big, small), np.clip(x * y, -2, 2) - np.abs(x - y) / (1 + y * y)


def _layernorm_inputs(shape, rng):
    m, k = shape
    return [rng.integers(-3, 4, (m, k)).astype(BF16), (rng.integers(-8, 9, (k, 256)) / 8).astype(BF16),
            rng.standard_normal((m, 256)).astype(np.float32), rng.standard_normal(256).astype(np.float32),
            rng.standard_normal(256).astype(np.float32)], {}


def _layernorm_ref(a, b, r, gamma, beta):
    a, b, r, gamma, beta = f64(a, b, r, gamma, beta)
    h = a @ b + r
    d = h - h.mean(1, keepdims=True)
    return ((d / np.sqrt((d * d).mean(1, keepdims=True) + 1e-5) * gamma + beta).astype(BF16).astype(np.float64),)


# endregion

RSQRT = approx.approx_relative_error("rsqrt")
GEMM_SHAPES = ((200, 135, 72), (1, 7, 16), (65, 129, 40), (64, 64, 32), (3, 5, 7))

CASES = {
    # integer A times B in eighths: every product and partial sum exact in f32, then one f16 rounding on both sides
    "gemm_k32_f16": Case("gemm_k32_f16", _gemm_inputs(F16), _gemm_ref(F16), 0.0, 0.0, GEMM_SHAPES),
    # S = Q K^T exact (integers), P = bf16(S / 8) rounded alike on both sides, P V of bf16 values of at most 8
    # significant bits in steps of 1/8 times integers: every partial sum exact in f32
    "b2b_hd96": Case("b2b_hd96", _b2b_inputs, _b2b_ref, 0.0, 0.0, ((70, 100), (1, 1), (129, 64), (64, 257))),
    # x / T as x rcp.approx(T) (1 ulp and a rounding), ex2.approx on |z| < 2^7 (2^-22 + |z| 2^-23 relative), the
    # f32 sum of at most 64 terms (64 U) and the division: below 2^-14 relative
    "softmax_temperature": Case("softmax_temperature", _temperature_inputs, _temperature_ref, 2.0**-14, 2.0**-30,
                                ((70, 33, 5), (1, 1, 8), (129, 64, 1), (3, 17, 40))),
    # values moved, never computed: exact
    "masked_fill_triu": Case("masked_fill_triu", _triu_inputs, _triu_ref, 0.0, 0.0,
                             ((70, 135), (1, 1), (129, 65), (200, 3), (3, 200))),
    # the log-sum-exp: ex2.approx on |x - m| < 2^7, f32 sums of N <= 1000 terms and their rescales (below 2^7 U
    # relative), lg2.approx's absolute bound, the add to the max (|lse| < 2^7: 2^-17); then x - lse (2^-16): below
    # 2^-13 absolute
    "log_softmax": Case("log_softmax", _log_softmax_inputs, _log_softmax_ref, 2.0**-20, 2.0**-13,
                        ((70, 33), (1, 1), (129, 200), (3, 1000), (65, 64))),
    # the sum: N <= 1000 f32 additions of |x| in any order (N U of the sum); the max exact
    "row_stats_columns": Case("row_stats_columns", _stats_inputs, _stats_ref, (1000 * F32_U, 0.0), (2.0**-30, 0.0),
                              ((70, 33), (1, 1), (129, 200), (3, 1000), (65, 64))),
    # Z: sigmoid (ex2 of -x log2 e, |x| < 12: 2^-22 + |x| 2^-23; rcp's ulp), rsqrt's bound, rcp's, a division and a
    # product: below 2^-17 relative. W: a product, a clamp, a subtraction, a square, a sum and a division, half an
    # ulp each, then a subtraction of values below 2^4: 2^-18 absolute
    "elementwise_mix": Case("elementwise_mix", _mix_inputs, _mix_ref, (2.0**-17, 2.0**-20), (2.0**-30, 2.0**-18),
                            ((70, 135), (1, 1), (129, 65), (3, 200))),
}

FAST = {"gemm_k32_f16": ("target",), "b2b_hd96": ("target",), "softmax_temperature": ("ptx",),
        "masked_fill_triu": ("target",), "log_softmax": ("target",), "row_stats_columns": ("ptx",),
        "elementwise_mix": ("target",)}

TOOL_SIZES = {  # -d sizes for tessera-run: partial last blocks everywhere
    "gemm_k32_f16": ["M=200", "N=135", "K=72"], "b2b_hd96": ["M=70", "N=100"], "softmax_temperature": ["M=70", "N=33"],
    "masked_fill_triu": ["M=70", "N=135"], "log_softmax": ["M=70", "N=200"], "row_stats_columns": ["M=70", "N=200"],
    "elementwise_mix": ["M=70", "N=135"],
}

test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools = \
    round_tests(CASES, FAST, TOOL_SIZES)


def _launch(module, arrays, level):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize: nothing to specialize in these kernels
        return tessera.launch(module, *arrays, level=level)


# region the K block of 32 in bf16, and the kernel too big for registers

@pytest.mark.parametrize("level", LEVELS)
def test_a_bf16_gemm_with_k_blocks_of_32_at_odd_sizes(level):
    """gemm_k32_f16 with every f16 made bf16 (the same 64-byte swizzle), exact against NumPy at odd sizes."""
    text = (KERNELS / "gemm_k32_f16.mlir").read_text()
    module = tessera.parse_module(checked(text).replace("xf16", "xbf16"), "gemm_k32_bf16.mlir")
    shapes = GEMM_SHAPES if level == "tile" else GEMM_SHAPES[1:3]
    for shape in shapes:
        arrays, _ = _gemm_inputs(BF16)(shape, np.random.default_rng(sum(shape)))
        c = _launch(module, arrays, level)
        assert c.dtype == BF16
        np.testing.assert_array_equal(c.astype(np.float64), _gemm_ref(BF16)(*arrays)[0], f"{shape} at {level}")


def _layernorm_module():
    return tessera.parse_module((KERNELS / "gemm_residual_layernorm.mlir").read_text(), "gemm_residual_layernorm.mlir")


def test_too_many_registers_falls_back_and_says_so():
    """The accumulator and the residual (128 registers each) live at once: 266 registers per thread, so the default
    pipeline compiles single-stage spilling, with a warning at the kernel naming each configuration it tried."""
    from tessera.host import describe

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = tessera.compile(_layernorm_module(), target="target")
    note = describe(lowered)[0].pipeline_note
    assert note.startswith("compiled single-stage spilling past 255 registers: 266 registers per thread needed"), note
    assert "warp-specialized with two stages" in note and "single-stage: 266 registers per thread" in note
    assert any("gemm_residual_layernorm.mlir:7:3" in str(w.message) and note in str(w.message) for w in caught)


@pytest.mark.parametrize("level", LEVELS)
def test_too_many_registers_runs_right(level):
    # the products are exact and H one or two f32 roundings; the mean and variance f32 sums of 256 terms and
    # rsqrt.approx move the normalized value below 2^-14 relative, after which bf16 may round the other way: one
    # bf16 ulp (2^-7 relative at most) of the value
    for shape in ((70, 72), (1, 16)) if level == "tile" else ((70, 72),):
        arrays, _ = _layernorm_inputs(shape, np.random.default_rng(sum(shape)))
        y = _launch(_layernorm_module(), arrays, level).astype(np.float64)
        expected = _layernorm_ref(*arrays)[0]
        assert np.all(np.abs(y - expected) <= 2.0**-12 + 2.0**-7 * np.abs(expected)), f"{shape} at {level}"


@pytest.mark.slow
def test_too_many_registers_tools():
    """`tessera-run --check` passes (ptxas spills it, as the fallback's note says: no check of a clean ptxas), and
    `tessera-opt -p default-pipeline --validate` walks the configuration the fallback keeps (it stopped at
    warp-specialize, exit 1)."""
    path = str(KERNELS / "gemm_residual_layernorm.mlir")
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", path, "--level", "ptx", "--check",
                            "-d", "M=70", "-d", "K=72"])
    assert result.returncode == 0, result.stdout + result.stderr
    result = _validate("gemm_residual_layernorm", ["M=70", "K=72"])
    assert result.returncode == 0, result.stderr
    assert "(the default pipeline compiles it single-stage spilling past 255 registers)" in result.stderr

# endregion
# region refusals: by name at the line, from Python and from the tools


def _softmax_temperature_text():
    return checked((KERNELS / "softmax_temperature.mlir").read_text())


REFUSED = {  # name: (the edited kernel, "line:col", message)
    "a bare f32 argument": (
        lambda: _softmax_temperature_text().replace(
            '%T: !tile.tile<1xf32, global> {tile.dims = #tile.dims<1>}', "%T: f32").replace(
            "%t = tile.gather %T[%zero] : !tile.tile<1xf32, global>, !tile.tile<64xi32, register> -> "
            "!tile.tile<64xf32, register>", "%t = tile.splat %T : f32 -> !tile.tile<64xf32, register>"),
        "6:3", "kernel @softmax_temperature: argument 1 (%T) must be a global tile, got f32"),
    "an f16 by bf16 mma": (
        lambda: checked((KERNELS / "gemm_k32_f16.mlir").read_text()).replace(
            "%s2 = tile.mma %a_smem, %b_smem, %s : !tile.tile<64x32xf16, shared, swizzle 64>, !tile.tile<32x64xf16",
            "%b16 = tile.alloc_shared : !tile.tile<32x64xbf16, shared, swizzle 128>\n"
            "      %s2 = tile.mma %a_smem, %b16, %s : !tile.tile<64x32xf16, shared, swizzle 64>, "
            "!tile.tile<32x64xbf16"),
        "35:7", "'tile.mma' op A (f16) and B (bf16) must have the same element type"),
    "a copy between shapes": (
        lambda: checked((KERNELS / "gemm_k32_f16.mlir").read_text()).replace(
            "tile.cp_async %bw, %b_smem : !tile.tile<32x64xf16, global>",
            "tile.cp_async %aw, %b_smem : !tile.tile<64x32xf16, global>"),
        "30:7", "'tile.cp_async' op source shape [64, 32] and destination shape [32, 64] must match"),
    "an f32 store into f16": (
        lambda: checked((KERNELS / "gemm_k32_f16.mlir").read_text()).replace(
            "tile.store_global %out, %cw : !tile.tile<64x64xf16, register>",
            "tile.store_global %acc, %cw : !tile.tile<64x64xf32, register>"),
        "40:5", "'tile.store_global' op value element type f32 must match the window's f16 (insert a tile.cast)"),
    "a store wholly past a tensor": (  # column 1 of S [M, 1]: it stored nothing, silently
        lambda: checked((KERNELS / "row_stats_columns.mlir").read_text()).replace(
            "%sw = tile.view %S[%m0, %c0]", "%sw = tile.view %S[%m0, %c1]"),
        "37:5", "'tile.view' op the window [1, 2) of dimension 1 lies wholly outside the tensor's 1: it would read "
                "only zeros and store nothing"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_a_wrong_kernel_is_refused_at_its_line(name, tmp_path):
    edit, place, message = REFUSED[name]
    text = str(edit())
    with pytest.raises(Exception, match=rf"k.mlir:{place}[\s\S]*{re.escape(message)}"):
        tessera.parse_module(text, "k.mlir")
    path = tmp_path / "k.mlir"
    path.write_text(text)
    for tool in ("tessera_opt", "tessera_run"):
        result = inprocess.run([sys.executable, "-m", f"tessera.tools.{tool}", str(path), "-d", "M=70", "-d", "N=33"]
                               if tool == "tessera_run" else [sys.executable, "-m", f"tessera.tools.{tool}", str(path)])
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert f"k.mlir:{place}" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_bf16_arithmetic_runs_at_tile_level_and_is_refused_below_by_the_tools(tmp_path):
    """The masked fill selecting between bf16 tiles without casting: right at Tile level; below it refused at the
    select's line by `tessera-run` (it stopped the CTA simulator with a NumPy error) and `--validate` (exit 1)."""
    text = checked((KERNELS / "masked_fill_triu.mlir").read_text()).replace(
        "%y = tile.select %upper, %fill, %x : !tile.tile<64x64xi1, register>, !tile.tile<64x64xf32, register>, "
        "!tile.tile<64x64xf32, register>\n    %yh = tile.cast %y : !tile.tile<64x64xf32, register> -> "
        "!tile.tile<64x64xbf16, register>",
        "%fh = tile.cast %fill : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>\n"
        "    %yh = tile.select %upper, %fh, %xh : !tile.tile<64x64xi1, register>, !tile.tile<64x64xbf16, register>, "
        "!tile.tile<64x64xbf16, register>")
    arrays, _ = _triu_inputs((70, 135), np.random.default_rng(0))
    y = _launch(tessera.parse_module(text, "k.mlir"), arrays, "tile")
    np.testing.assert_array_equal(y.astype(np.float64), _triu_ref(*arrays)[0])
    path = tmp_path / "k.mlir"
    path.write_text(text)
    message = ("tile.select computes on f32 or i32 register tiles, and a bf16 register tile is held packed, 2 elements "
               "to a 32-bit register: tile.cast it to f32 first")
    for command in (["tessera_run", str(path), "--level", "target", "-d", "M=70", "-d", "N=135"],
                    ["tessera_opt", str(path), "-p", "default-pipeline", "--validate", "-d", "M=70", "-d", "N=135"]):
        result = inprocess.run([sys.executable, "-m", f"tessera.tools.{command[0]}", *command[1:]])
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert "k.mlir:22:5" in result.stderr and "Traceback" not in result.stderr, result.stderr

@pytest.mark.parametrize("level", ("tile", "target"))
def test_a_16_bit_row_vector_is_stored(level):
    """A row statistic saved in bf16 (MX of row_stats_columns cast before its store): right at Tile level, and
    below it since round 9 (it was refused by name: row vectors were f32, i32 or i1; `test_unseen_row_vectors.py`)."""
    text = checked((KERNELS / "row_stats_columns.mlir").read_text()).replace(
        "%MX: !tile.tile<?xf32, global>", "%MX: !tile.tile<?xbf16, global>").replace(
        "    %mw = tile.view %MX[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>\n"
        "    tile.store_global %mx, %mw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>",
        "    %mh = tile.cast %mx : !tile.tile<64xf32, register> -> !tile.tile<64xbf16, register>\n"
        "    %mw = tile.view %MX[%m0] : !tile.tile<?xbf16, global> -> !tile.tile<64xbf16, global>\n"
        "    tile.store_global %mh, %mw : !tile.tile<64xbf16, register>, !tile.tile<64xbf16, global>")
    module = tessera.parse_module(text, "k.mlir")
    arrays, _ = _stats_inputs((70, 33), np.random.default_rng(0))
    _, mx = _launch(module, arrays, level)
    np.testing.assert_array_equal(mx, arrays[0].max(1).astype(BF16))


@pytest.mark.parametrize("level", ("tile", "target"))
def test_a_16_bit_bias_broadcast(level):
    """The gallery's GEMM + bias + GELU with its bias in bf16, broadcast by `tile.load_broadcast` and cast to f32:
    right at Tile level, and below it since round 9 (it was refused by name: a broadcast row was f32 or i32)."""
    text = checked((KERNELS.parent.parent / "examples" / "kernels" / "gemm_bias_gelu.mlir").read_text()).replace(
        "%bias: !tile.tile<?xf32, global>", "%bias: !tile.tile<?xbf16, global>").replace(
        "    %biasw = tile.view %bias[%n0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>\n"
        "    %bv = tile.load_broadcast %biasw : !tile.tile<64xf32, global> -> !tile.tile<1x64xf32, register>",
        "    %biasw = tile.view %bias[%n0] : !tile.tile<?xbf16, global> -> !tile.tile<64xbf16, global>\n"
        "    %bvh = tile.load_broadcast %biasw : !tile.tile<64xbf16, global> -> !tile.tile<1x64xbf16, register>\n"
        "    %bv = tile.cast %bvh : !tile.tile<1x64xbf16, register> -> !tile.tile<1x64xf32, register>")
    module = tessera.parse_module(text, "k.mlir")
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-2, 3, shape).astype(BF16) for shape in ((70, 64), (64, 72)))
    bias = (rng.integers(-8, 9, 72) / 8).astype(BF16)
    x = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
    gelu = 0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))
    c = _launch(module, [a, b, bias], level).astype(np.float64)
    assert np.all(np.abs(c - gelu) <= 2.0**-7 * np.abs(gelu) + 2.0**-10)  # one bf16 rounding, tanh in f32


# endregion
# region --validate: a verdict at every level, exit 1 on a lowering seeded wrong


def _validate(kernel: str, sizes: list[str]):
    arguments = [arg for size in sizes for arg in ("-d", size)]
    return inprocess.run([sys.executable, "-m", "tessera.tools.tessera_opt", str(KERNELS / f"{kernel}.mlir"),
                          "-p", "default-pipeline", "--validate", *arguments])


def test_validate_gives_every_level_a_verdict():
    result = _validate("elementwise_mix", TOOL_SIZES["elementwise_mix"])
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stderr.splitlines() if line[:1].isdigit()]
    assert {row[2] for row in rows} == {"tile", "target", "ptx"} and all(row[-1] == "ok" for row in rows), result.stderr


def test_validate_names_a_lowering_seeded_wrong(monkeypatch):
    """tile.abs lowered as the identity: `--validate` exits 1 naming convert-tile-to-sm90 and the first value off
    (|y| + 1: the identity makes no op of its own, so |y| is y's register)."""
    from tessera.passes.convert_tile_to_sm90.elementwise import ElementwiseLowering

    def identity(self, op, e):
        self._set(op.result, self._get(op.source))

    monkeypatch.setattr(ElementwiseLowering, "_lower_AbsOp", identity)
    result = _validate("elementwise_mix", TOOL_SIZES["elementwise_mix"])
    assert result.returncode == 1, result.stderr
    assert re.search(r"pass \d+ 'convert-tile-to-sm90' changed the result: Z\[", result.stderr), result.stderr
    assert "first diverging op: %ay1 = arith.addf %y, %one" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr

# endregion
