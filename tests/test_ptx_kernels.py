"""PTX written from outside Tessera: hand-made sm_90a kernels in the style of nvcc, Triton and CUTLASS
(tests/ptx_kernels/; each file's header says what it computes and how it is launched) checked two ways:

- ptxas accepts every file for sm_90a with no warning, no performance advisory and no spill (the test command
  installs ptxas: without one the check fails);
- `tessera.ptx.launch(ptx, kernel, grid, block, args, shared_bytes)` runs each kernel on random inputs with
  fixed seeds, at several sizes including awkward ones (tails, one element, several CTAs, a grid smaller than
  the data), and the results match a NumPy reference written from the PTX ISA's definition of what the kernel
  computes, never derived from the PTX: bit-exact for integer, bit-manipulation and correctly rounded
  results; within the documented error of approximate instructions otherwise (see the tolerances below).

`launch` takes NumPy arrays for `.u64` pointer parameters, Python/NumPy scalars for scalar parameters and
tensor maps (`tensor_map` below: `tessera.interpreters.ptx.TensorMapArg`) for `.param .align 64 .b8 [128]`
parameters, and gives back the arrays after the run. The executor is imported inside the tests, so the ptxas
checks run without it.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tessera.toolchain import compile_ptx, find_all_ptxas

KERNELS = Path(__file__).parent / "ptx_kernels"
KERNEL_FILES = sorted(p.name for p in KERNELS.glob("*.ptx"))
BF16 = ml_dtypes.bfloat16
M32 = 0xFFFFFFFF

needs_ptxas = pytest.mark.usefixtures("ptxas")  # fails, never skips, without ptxas (conftest.require_tool)

# Tolerances of the approximate instructions, relative [PTX ISA 9.7.3 floating-point instructions]:
# ex2.approx.f32 max error 2 ulp (2^-22), rcp.approx.f32 1 ulp (2^-23), div.full.f32 2 ulp (2^-22). The
# checks below allow the sum of those, of f32 rounding in the argument of ex2 (|z| * 2^-24 for |z| <= 64)
# and of f32 accumulation over the reductions: 2^-15 relative before the final bf16 rounding.
SOFTMAX_REL = 2.0**-15
# wgmma with f32 accumulation: products exact, sums at least single precision, order unspecified
# [PTX ISA wgmma.mma_async]: |C - A.B| <= 2^-14 * (|A|.|B|) for K <= 256.
GEMM_REL = 2.0**-14


def source(name: str) -> str:
    return (KERNELS / name).read_text()


def launch(name: str, kernel: str, grid, block, args, shared_bytes: int = 0) -> list[np.ndarray]:
    """Run `kernel` of tests/ptx_kernels/`name`; the arrays after the run, one per NumPy array argument, in
    order (when the executor answers one entry per argument, the entries of the array arguments)."""
    from tessera.ptx import launch as ptx_launch

    result = list(ptx_launch(source(name), kernel, grid, block, args, shared_bytes=shared_bytes))
    if len(result) == len(args):
        result = [r for r, a in zip(result, args) if isinstance(a, np.ndarray)]
    return result


def tensor_map(array: np.ndarray, box: tuple[int, ...], swizzle: int):
    """The argument for a tensor-map parameter: cuTensorMapEncodeTiled's arguments for row-major `array`
    (dimensions innermost first), `box` innermost first, `swizzle` bytes, OOB fill none (zeros)."""
    from tessera.interpreters.ptx import TensorMapArg

    return TensorMapArg.tiled(array, box, swizzle)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# region ptxas


ALL_PTXAS = find_all_ptxas()


@needs_ptxas
@pytest.mark.parametrize("ptxas", [v.path for v in ALL_PTXAS], ids=[str(v) for v in ALL_PTXAS])
@pytest.mark.parametrize("name", KERNEL_FILES)
def test_ptxas_accepts_without_warnings(name, ptxas):
    """Under every ptxas found (the CUDA 12 and 13 ones of the test and ptx extras, a system one)."""
    result = compile_ptx(source(name), source_name=name, ptxas=ptxas)
    assert result.warnings == (), "\n".join(map(str, result.warnings))
    assert "warning" not in result.text.lower(), result.text
    assert result.entries, f"ptxas compiled no entry of {name}"
    for entry in result.entries.values():
        assert not entry.spills, f"{entry.name} spills: {entry}"


@pytest.mark.parametrize("name", KERNEL_FILES)
def test_header(name):
    """Every kernel is an sm_90a module with 64-bit addresses and says what it computes before `.version`."""
    text = source(name)
    head = text[: text.index(".version")]
    assert head.lstrip().startswith("//") and len(head.splitlines()) >= 3
    lines = [line.split("//")[0].strip() for line in text.splitlines()]
    directives = [line for line in lines if line][:3]
    assert directives[0] in (".version 8.0", ".version 8.3")
    assert directives[1:] == [".target sm_90a", ".address_size 64"]


def test_every_kernel_is_run():
    runs = {"vector_add.ptx", "divergent_branches.ptx", "cp_async_pipeline.ptx", "ldmatrix_reduce.ptx",
            "warp_shuffle_reduce.ptx", "softmax_row.ptx", "tma_wgmma_gemm.ptx", "integer_arith.ptx",
            "global_data.ptx", "transpose_2d.ptx"}
    assert set(KERNEL_FILES) == runs


# endregion

# region vector_add.ptx


@pytest.mark.parametrize("n, grid", [(1, 1), (3, 1), (4, 1), (5, 1), (511, 1), (512, 1), (513, 2), (1000, 2),
                                     (4099, 9), (4099, 2), (2000, 1)])
def test_vector_add(n, grid):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    specials = np.array([np.inf, -np.inf, 1e-45, -3e-39, 3.4e38, -0.0], np.float32)
    a[: min(n, 6)] = specials[: min(n, 6)]
    b[: min(n, 6)] = np.array([1.0, -2.0, 1e-45, 1e-39, 3.4e38, -0.0], np.float32)[: min(n, 6)]
    c = np.full(n, np.nan, np.float32)
    _, _, c = launch("vector_add.ptx", "add_kernel", (grid, 1, 1), (128, 1, 1), [a, b, c, n])
    with np.errstate(over="ignore"):
        want = a + b
    np.testing.assert_array_equal(c.view(np.uint32), want.view(np.uint32))


# endregion

# region divergent_branches.ptx


def _collatz_steps(x: int) -> int:
    steps = 0
    while x > 1:
        x = 3 * x + 1 if x % 2 else x // 2
        steps += 1
    return steps


def divergent_reference(values: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    n = len(values)
    out = np.zeros((n, 4), np.uint32)
    for i, x in enumerate(int(v) for v in values):
        lane = (i % block) % 32
        m = i % 37
        if x % 2:
            code = 100 + lane if lane < 16 else 200 + x % 7
        else:
            code = (x ^ 0x55, 3 * x, x >> 2)[lane % 3]
        out[i] = (_collatz_steps(x), m * (m - 1) // 2, bin(x).count("1"), code & M32)
    odd = out[:, 0] % 2 == 1
    ballot = np.zeros(n, np.uint32)
    for start in range(0, n, 32):
        word = sum(1 << lane for lane in range(32) if start + lane < n and odd[start + lane])
        ballot[start : start + 32] = word
    return out, ballot


@pytest.mark.parametrize("n, block, extra_ctas", [(1, 32, 0), (31, 32, 0), (32, 32, 1), (33, 64, 0), (100, 96, 0),
                                                  (257, 128, 1)])
def test_divergent_branches(n, block, extra_ctas):
    rng = np.random.default_rng(100 + n)
    values = rng.integers(0, 3000, n).astype(np.uint32)
    values[: min(n, 6)] = np.array([27, 0, 1, 2, 97, 6171], np.uint32)[: min(n, 6)]
    out = np.zeros((n, 4), np.uint32)
    ballot = np.zeros(n, np.uint32)
    grid = ceil_div(n, block) + extra_ctas
    _, out, ballot = launch("divergent_branches.ptx", "divergent_branches", (grid, 1, 1), (block, 1, 1),
                            [values, out, ballot, n])
    want_out, want_ballot = divergent_reference(values, block)
    np.testing.assert_array_equal(out, want_out)
    np.testing.assert_array_equal(ballot, want_ballot)


# endregion

# region cp_async_pipeline.ptx


@pytest.mark.parametrize("rows, cols, ld", [(1, 1, 4), (3, 5, 8), (2, 256, 256), (4, 257, 260), (2, 513, 516),
                                            (3, 1000, 1004), (5, 777, 780)])
def test_cp_async_pipeline(rows, cols, ld):
    rng = np.random.default_rng(rows * 1000 + cols)
    x = np.full((rows, ld), np.nan, np.float32)  # the padding is never read: NaN would reach the sums
    x[:, :cols] = rng.standard_normal((rows, cols)).astype(np.float32)
    y = np.full((rows, ld), -7.0, np.float32)
    rowsum = np.full(rows, np.nan, np.float32)
    scale = np.float32(0.75)
    _, y, rowsum = launch("cp_async_pipeline.ptx", "row_scale_sum", (rows, 1, 1), (64, 1, 1),
                          [x, y, rowsum, cols, ld, scale])
    scaled = x[:, :cols] * scale
    np.testing.assert_array_equal(y[:, :cols], scaled)
    np.testing.assert_array_equal(y[:, cols:], -7.0)
    want = scaled.astype(np.float64).sum(axis=1)
    bound = 4e-6 * np.abs(scaled).astype(np.float64).sum(axis=1) + 1e-30
    assert np.all(np.abs(rowsum - want) <= bound), (rowsum, want)


# endregion

# region ldmatrix_reduce.ptx


def ldmatrix_blocks(tile: np.ndarray) -> list[np.ndarray]:
    """The four 8 x 8 matrices of a 16 x 16 tile in mma A-operand order (the kernel's address assignment)."""
    return [tile[0:8, 0:8], tile[8:16, 0:8], tile[0:8, 8:16], tile[8:16, 8:16]]


def ldmatrix_fragments(tile_bits: np.ndarray, trans: bool) -> np.ndarray:
    """Registers of ldmatrix.m8n8.x4.b16 [PTX ISA ldmatrix, "ldmatrix fragment layout"]: lane l holds row
    l / 4, elements 2 (l % 4) (bits 15:0) and 2 (l % 4) + 1 (bits 31:16) of each matrix; with .trans the
    matrix is read column-major, i.e. the same fragment of its transpose."""
    frag = np.zeros((32, 4), np.uint32)
    for j, m in enumerate(ldmatrix_blocks(tile_bits)):
        m = m.T if trans else m
        for lane in range(32):
            row, col = lane // 4, 2 * (lane % 4)
            frag[lane, j] = int(m[row, col]) | int(m[row, col + 1]) << 16
    return frag


@pytest.mark.parametrize("ntiles", [1, 2, 3, 5])
def test_ldmatrix_reduce(ntiles):
    rng = np.random.default_rng(ntiles)
    # quarter integers in [-8, 8]: every f32 sum of them is exact, in any order
    tiles = (rng.integers(-32, 33, (ntiles, 16, 16)) / 4).astype(np.float16)
    outs = _run_ldmatrix(tiles)
    frag, frag_t, out_t, rowsum, total = outs
    bits = tiles.view(np.uint16)
    for t in range(ntiles):
        np.testing.assert_array_equal(frag[t], ldmatrix_fragments(bits[t], trans=False))
        np.testing.assert_array_equal(frag_t[t], ldmatrix_fragments(bits[t], trans=True))
    np.testing.assert_array_equal(out_t.view(np.uint16), bits.transpose(0, 2, 1))
    np.testing.assert_array_equal(rowsum, tiles.astype(np.float32).sum(axis=2))
    np.testing.assert_array_equal(total, tiles.astype(np.float32).sum(axis=(1, 2)))


def test_ldmatrix_moves_any_bits():
    """ldmatrix and stmatrix move 16-bit patterns untouched, NaN and subnormal patterns included."""
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 1 << 16, (3, 16, 16)).astype(np.uint16)
    bits[0, 0, :4] = [0x7E00, 0xFC00, 0x0001, 0x8000]
    frag, frag_t, out_t, _, _ = _run_ldmatrix(bits.view(np.float16))
    for t in range(3):
        np.testing.assert_array_equal(frag[t], ldmatrix_fragments(bits[t], trans=False))
        np.testing.assert_array_equal(frag_t[t], ldmatrix_fragments(bits[t], trans=True))
    np.testing.assert_array_equal(out_t.view(np.uint16), bits.transpose(0, 2, 1))


def _run_ldmatrix(tiles: np.ndarray) -> list[np.ndarray]:
    ntiles = len(tiles)
    frag = np.zeros((ntiles, 32, 4), np.uint32)
    frag_t = np.zeros((ntiles, 32, 4), np.uint32)
    out_t = np.zeros((ntiles, 16, 16), np.float16)
    rowsum = np.full((ntiles, 16), np.nan, np.float32)
    total = np.full(ntiles, np.nan, np.float32)
    outs = launch("ldmatrix_reduce.ptx", "ldmatrix_reduce", (ceil_div(ntiles, 2), 1, 1), (64, 1, 1),
                  [tiles, frag, frag_t, out_t, rowsum, total, ntiles])
    return outs[1:]


# endregion

# region warp_shuffle_reduce.ptx


def shuffle_reference(values: np.ndarray) -> np.ndarray:
    n = len(values)
    padded = np.zeros(ceil_div(n, 32) * 32, np.int64)
    padded[:n] = values
    out = np.zeros((len(padded), 8), np.int64)
    for start in range(0, len(padded), 32):
        v = padded[start : start + 32]
        w = out[start : start + 32]
        w[:, 0] = v.sum()
        w[:, 1] = np.maximum.accumulate(v[::-1])[::-1]
        w[:, 2] = np.cumsum(v)
        w[:, 3] = v[v[0] & 31]
        segments = v.reshape(4, 8)
        w[:, 4] = np.repeat(segments.sum(axis=1), 8)
        w[:, 5] = np.cumsum(segments, axis=1).reshape(32)
        w[:16, 6] = v[:16].sum()
        w[16:, 6] = v[16:].max()
        w[:, 7] = v.min()
    return out[:n].astype(np.int32)


@pytest.mark.parametrize("n, block", [(1, 32), (17, 32), (32, 32), (45, 64), (64, 64), (200, 128)])
def test_warp_shuffle_reduce(n, block):
    rng = np.random.default_rng(200 + n)
    values = rng.integers(-1000, 1001, n).astype(np.int32)
    out = np.zeros((n, 8), np.int32)
    _, out = launch("warp_shuffle_reduce.ptx", "warp_shuffle_reduce", (ceil_div(n, block), 1, 1), (block, 1, 1),
                    [values, out, n])
    np.testing.assert_array_equal(out, shuffle_reference(values))


# endregion

# region softmax_row.ptx


def bf16_within(got: np.ndarray, exact: np.ndarray, rel: float) -> np.ndarray:
    """Whether each bf16 `got` is the round-to-nearest bf16 of some value within `rel` of `exact`."""
    lo = (exact * (1 - rel)).astype(np.float32).astype(BF16).astype(np.float64)
    hi = (exact * (1 + rel)).astype(np.float32).astype(BF16).astype(np.float64)
    g = got.astype(np.float64)
    return (g >= np.minimum(lo, hi)) & (g <= np.maximum(lo, hi))


@pytest.mark.parametrize("rows, cols", [(1, 1), (2, 3), (3, 100), (2, 511), (2, 512), (2, 513), (4, 1000),
                                        (2, 1024)])
def test_softmax_row(rows, cols):
    rng = np.random.default_rng(rows * 10000 + cols)
    ld_x, ld_y = cols + 3, cols + 2 + cols % 2
    x = np.full((rows, ld_x), np.nan, np.float32)  # padding never read
    x[:, :cols] = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    y = np.full((rows, ld_y), 0x7FBB, np.uint16).view(BF16)  # a NaN pattern: columns >= cols keep it
    stats = np.full((rows, 2), np.nan, np.float32)
    _, y, stats = launch("softmax_row.ptx", "softmax_kernel", (rows, 1, 1), (128, 1, 1),
                         [x, y, stats, cols, ld_x, ld_y], shared_bytes=64)
    xs = x[:, :cols].astype(np.float64)
    row_max = xs.max(axis=1)
    e = np.exp(xs - row_max[:, None])
    want = e / e.sum(axis=1, keepdims=True)
    ok = bf16_within(y[:, :cols], want, SOFTMAX_REL)
    assert ok.all(), f"{(~ok).sum()} of {ok.size} outside: got {y[:, :cols][~ok][:8]}, want {want[~ok][:8]}"
    np.testing.assert_array_equal(y[:, cols:].view(np.uint16), 0x7FBB)
    np.testing.assert_array_equal(stats[:, 0], x[:, :cols].max(axis=1))
    np.testing.assert_allclose(stats[:, 1], 1 / e.sum(axis=1), rtol=SOFTMAX_REL)


# endregion

# region tma_wgmma_gemm.ptx

GEMM_SHAPES = [(64, 64, 64), (128, 192, 128), (100, 72, 136), (1, 8, 8), (130, 64, 200)]


@pytest.mark.parametrize("kernel", ["gemm_tn", "gemm_nn"])
@pytest.mark.parametrize("m, n, k", GEMM_SHAPES)
def test_tma_wgmma_gemm(kernel, m, n, k):
    rng = np.random.default_rng(m * 7 + n * 11 + k)
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    stored_b = np.ascontiguousarray(b.T) if kernel == "gemm_tn" else b
    c = np.full((m, n), np.nan, np.float32)
    maps = [tensor_map(a, (64, 64), 128), tensor_map(stored_b, (64, 64), 128)]
    (c,) = launch("tma_wgmma_gemm.ptx", kernel, (ceil_div(m, 64), ceil_div(n, 64), 1), (128, 1, 1),
                  [*maps, c, m, n, k], shared_bytes=16384 + 1024)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    bound = GEMM_REL * (np.abs(a64) @ np.abs(b64)) + 1e-30
    assert not np.isnan(c).any(), "unwritten elements of C"
    bad = np.abs(c - want) > bound
    assert not bad.any(), f"{bad.sum()} of {bad.size} wrong, first at {np.argwhere(bad)[:4].tolist()}"


# endregion

# region integer_arith.ptx

A_EDGES = [0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF8000, 0x7FFFFFFF, 0x80000000, 0x80000001,
           0xFFFFFFFE, 0xFFFFFFFF, 0x12345678, 0xDEADBEEF, 0x01000000, 0x00FFFFFF, 0xFF000000]
B_EDGES = [0, 1, 31, 32, 33, 63, 0x1F1F, 0x2004, 0x0820, 0x3F3F, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x3210,
           0x7654, 0xBA98, 0x00200000, 0x00100000, 0x80200001, 0xFFE00000]
F_EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, 1e-45, -1e-40, 3e9, -3e9, 4294967296.0,
           4294967040.0, 2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, np.inf, -np.inf, np.nan, 1e38,
           65504.0, 65520.0, 65519.996, 1e-8, 0.1, 1.0000001, 2.0**-24, 3.0 * 2.0**-25, 1.00390625, 1.01171875]


def integer_inputs(count: int, seed: int):
    rng = np.random.default_rng(seed)
    ab = np.array([(a, b) for a in A_EDGES for b in B_EDGES], np.uint32)
    fg = np.array([(f, g) for f in F_EDGES for g in F_EDGES], np.float32)
    a = rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32)
    f = (rng.standard_normal(count) * 1e3).astype(np.float32)
    g = (rng.standard_normal(count) * 1e3).astype(np.float32)
    a[: min(count, len(ab))], b[: min(count, len(ab))] = ab[:count, 0], ab[:count, 1]
    f[: min(count, len(fg))], g[: min(count, len(fg))] = fg[:count, 0], fg[:count, 1]
    return a, b, f, g


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, np.int64) & M32


def _bit(x, i):
    return (x >> i) & 1


def _s32(u: np.ndarray) -> np.ndarray:
    return np.asarray(u, np.uint32).view(np.int32).astype(np.int64)


def _bfe(a, pos, length, signed):
    """bfe [PTX ISA 9.7.1.19]: d[i] = (i < len && pos + i <= 31) ? a[pos + i] : sbit."""
    sbit = np.where(signed & (length > 0), _bit(a, np.minimum(pos + length - 1, 31)), 0)
    d = np.zeros_like(a)
    for i in range(32):
        take = (i < length) & (pos + i <= 31)
        d |= np.where(take, _bit(a, np.minimum(pos + i, 31)), sbit) << i
    return d


def _bfi(a, b, pos, length):
    """bfi [PTX ISA 9.7.1.20]: f = b; f[pos + i] = a[i] for i < len and pos + i <= 31."""
    f = b.copy()
    for i in range(32):
        put = (i < length) & (pos + i <= 31)
        at = np.minimum(pos + i, 31)
        f = np.where(put, (f & ~(1 << at)) | (_bit(a, i) << at), f)
    return f


def _prmt(a, b, c, mode):
    """prmt [PTX ISA 9.7.9.7] on the bytes {b, a} = b7..b4 b3..b0."""
    tmp = (b << 32) | a
    d = np.zeros_like(a)
    for k in range(4):
        if mode is None:
            sel = (c >> (4 * k)) & 0xF
            byte = (tmp >> (8 * (sel & 7))) & 0xFF
            byte = np.where(sel & 8, np.where(byte & 0x80, 0xFF, 0), byte)
        else:
            ctl = c & 3
            index = (ctl + k) & 7 if mode == "f4e" else (ctl - k) & 7
            byte = (tmp >> (8 * index)) & 0xFF
        d |= byte << (8 * k)
    return d


def _popc(a):
    return sum(_bit(a, i) for i in range(32))


def _brev(a):
    return sum(_bit(a, i) << (31 - i) for i in range(32))


def _float_bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32).astype(np.int64)


def _f32_directed(values: list[int], toward_minus_inf: bool) -> np.ndarray:
    """Integers to f32 rounded toward zero (or toward -inf): keep the leading 24 significant bits."""
    out = []
    for v in values:
        m = abs(v)
        shift = max(m.bit_length() - 24, 0)
        kept = (m >> shift) << shift
        if toward_minus_inf and v < 0 and kept != m:
            kept += 1 << shift
        out.append(float(-kept if v < 0 else kept))
    return np.array(out, np.float32)


def _float_to_int(x: np.ndarray, rounding, lo: int, hi: int) -> np.ndarray:
    """cvt.{rni,rzi,rmi,rpi} float -> integer: round, clamp to the destination range, NaN -> 0."""
    with np.errstate(invalid="ignore"):
        r = np.clip(rounding(x.astype(np.float64)), lo, hi)
    return _bits(np.where(np.isnan(r), 0, r).astype(np.int64))


def _max_num(x: np.ndarray, y: np.ndarray, take_max: bool) -> np.ndarray:
    """max/min.f32 [PTX ISA 9.7.3.11-12] for non-NaN operands, +0 > -0."""
    gt = (x > y) | ((x == y) & (x == 0) & ~np.signbit(x) & np.signbit(y))
    lt = (x < y) | ((x == y) & (x == 0) & np.signbit(x) & ~np.signbit(y))
    return np.where(gt if take_max else lt, x, y)


def integer_reference(a_u32, b_u32, f, g) -> dict[int, np.ndarray]:
    """Column -> expected u32 (as int64) of integer_arith.ptx, from the PTX ISA definitions."""
    a, b = a_u32.astype(np.int64), b_u32.astype(np.int64)
    s, t = _s32(a_u32), _s32(b_u32)
    sh = b & 63
    col = {}
    col[0] = (a + b) & M32
    col[1] = (a - b) & M32
    col[2] = _bits((a_u32.astype(np.uint64) * b_u32.astype(np.uint64)) & M32)
    col[3] = _bits((a_u32.astype(np.uint64) * b_u32.astype(np.uint64)) >> np.uint64(32))
    col[4] = ((s * t) >> 32) & M32
    col[5] = (s * t) & M32
    col[6] = ((s * t) >> 32) & M32
    col[7] = (s * t + (a ^ b)) & M32
    col[8] = (a << np.minimum(sh, 32)) & M32
    col[9] = a >> np.minimum(sh, 32)
    col[10] = (s >> np.minimum(sh, 31)) & M32
    length = (b >> 8) & 63
    col[11] = _bfe(a, sh, length, signed=False)
    col[12] = _bfe(a, sh, length, signed=True)
    col[13] = _bfi(a, b, (b >> 16) & 63, (a >> 24) & 63)
    col[14] = _prmt(a, b, b >> 16, None)
    col[15] = _prmt(a, b, b, "f4e")
    col[16] = _prmt(a, b, a, "b4e")
    du = (b >> 20) | 1
    col[17], col[18] = a // du, a % du
    ds = ((b >> 21) & 1023) + 2
    ds = np.where(b & 1, -ds, ds)
    quotient = np.sign(s) * np.sign(ds) * (np.abs(s) // np.abs(ds))  # C: toward zero
    col[19], col[20] = quotient & M32, (s - quotient * ds) & M32
    col[21] = np.minimum(s, t) & M32
    col[22] = np.maximum(a, b)
    col[23] = _popc(a)
    col[24] = np.array([32 - int(v).bit_length() for v in a], np.int64)
    col[25] = _brev(a)
    col[26] = np.clip(s + t, -(2**31), 2**31 - 1) & M32
    col[27] = np.clip(s - t, -(2**31), 2**31 - 1) & M32
    col[28] = np.abs(s) & M32
    col[29] = -s & M32
    col[30] = np.array([((((int(y) << 32) | int(x)) << (int(y) & 31)) >> 32) & M32 for x, y in zip(a, b)], np.int64)
    col[31] = np.array([(((int(y) << 32) | int(x)) >> min(int(y) & 63, 32)) & M32 for x, y in zip(a, b)], np.int64)
    c = (a * 0x9E3779B9) & M32
    col[32] = (a & b) | (a & c) | (b & c)
    carry = (a + b) >> 32
    col[33] = (b + a + carry) & M32
    borrow = (a < b).astype(np.int64)
    col[34] = (b - a - borrow) & M32
    col[35] = np.clip(s, 0, 255)
    col[36] = a & 0xFF
    col[37] = np.clip(s, -128, 127) & M32
    col[38] = (((a & 0xFFFF) ^ 0x8000) - 0x8000) & M32
    col[39] = np.clip(s, -32768, 32767) & M32
    col[40] = _float_bits(s.astype(np.float32))  # exact int64 -> f32: one rounding, to nearest even
    col[41] = _float_bits(_f32_directed([int(v) for v in a], toward_minus_inf=False))
    col[42] = _float_bits(_f32_directed([int(v) for v in s], toward_minus_inf=True))
    col[43] = _float_to_int(f, np.rint, -(2**31), 2**31 - 1)
    col[44] = _float_to_int(f, np.trunc, -(2**31), 2**31 - 1)
    col[45] = _float_to_int(f, np.floor, -(2**31), 2**31 - 1)
    col[46] = _float_to_int(f, np.ceil, 0, 2**32 - 1)
    # 47, 48 (packed 16-bit floats) and 51..54 (floats that may be NaN) are checked by _check_floats
    unordered = np.isnan(f) | np.isnan(g)
    with np.errstate(invalid="ignore"):
        lt, ge, eq, gt = f < g, f >= g, f == g, f > g
    ne = ~eq & ~unordered
    bits = [lt, lt | unordered, eq | unordered, ne | unordered, ~unordered, unordered, ge, ge | unordered, ne, eq,
            gt | np.isnan(f), ~gt | np.isnan(f)]
    col[49] = sum(p.astype(np.int64) << i for i, p in enumerate(bits))
    col[50] = np.where(gt | unordered, a, b)
    col[55] = (_float_bits(g) & 0x7FFFFFFF) | (_float_bits(f) & 0x80000000)
    return col


def _check_floats(got_bits: np.ndarray, want: np.ndarray, what: str, signed_zero: bool = True):
    """f32 results bit-exact, except that a NaN may have any payload (and, unless signed_zero, 0 any sign)."""
    got = got_bits.astype(np.uint32).view(np.float32)
    want = np.asarray(want, np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaN where none is due, or none where one is"
    if signed_zero:
        np.testing.assert_array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan], err_msg=what)
    else:
        np.testing.assert_array_equal(got[~nan], want[~nan], err_msg=what)


def _check_half_pairs(word: np.ndarray, hi: np.ndarray, lo: np.ndarray, dtype, what: str):
    """A packed pair of 16-bit floats: bits 31:16 = `hi`, bits 15:0 = `lo`, each as `dtype`; NaNs by NaN-ness."""
    for got16, want in (((word >> 16) & 0xFFFF, hi), (word & 0xFFFF, lo)):
        with np.errstate(over="ignore", invalid="ignore"):
            want16 = np.asarray(want, np.float32).astype(dtype)
        got = got16.astype(np.uint16).view(dtype)
        nan = np.isnan(want16.astype(np.float32))
        assert np.array_equal(np.isnan(got.astype(np.float32)), nan), what
        np.testing.assert_array_equal(got16[~nan], want16.view(np.uint16)[~nan].astype(np.int64), err_msg=what)


@pytest.mark.parametrize("n, block", [(1, 32), (1200, 128)])
def test_integer_arith(n, block):
    a, b, f, g = integer_inputs(n, seed=n)
    out = np.zeros((n, 56), np.uint32)
    *_, out = launch("integer_arith.ptx", "integer_arith", (ceil_div(n, block), 1, 1), (block, 1, 1),
                     [a, b, f, g, out, n])
    got = out.astype(np.int64)
    for k, want in integer_reference(a, b, f, g).items():
        np.testing.assert_array_equal(got[:, k], want, err_msg=f"column {k}")
    _check_half_pairs(got[:, 47], f, g, BF16, "cvt.rn.bf16x2.f32")
    _check_half_pairs(got[:, 48], f, g, np.float16, "cvt.rn.f16x2.f32")
    nan_f, nan_g = np.isnan(f), np.isnan(g)
    max_want = np.where(nan_f, g, np.where(nan_g, f, _max_num(f, g, take_max=True)))
    _check_floats(got[:, 51], max_want, "max.f32")
    _check_floats(got[:, 52], np.where(nan_f | nan_g, np.nan, _max_num(f, g, take_max=False)), "min.NaN.f32")
    _check_floats(got[:, 53], np.where(np.isnan(f), 0, np.clip(f, 0, 1)), "cvt.sat.f32.f32", signed_zero=False)
    _check_floats(got[:, 54], np.rint(f), "cvt.rni.f32.f32")


# endregion

# region global_data.ptx

LUT = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]
SALT = 0x9E3779B97F4A7C15
POLY_BITS = np.array([0x3F800000, 0xBF000000, 0x3E2AAAAB, 0x3D2AAAAB], np.uint32)  # c0..c3


@pytest.mark.parametrize("n, block", [(1, 32), (100, 64), (1000, 256)])
def test_global_data(n, block):
    rng = np.random.default_rng(300 + n)
    v = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    xs = rng.uniform(-2, 2, n).astype(np.float32)
    out = np.zeros((n, 3), np.uint32)
    y = np.full(n, np.nan, np.float32)
    hist, counters, ticket = np.zeros(16, np.uint32), np.zeros(16, np.uint32), np.full(n, M32, np.uint32)
    _, _, out, y, hist, counters, ticket = launch(
        "global_data.ptx", "global_data", (ceil_div(n, block), 1, 1), (block, 1, 1),
        [v, xs, out, y, hist, counters, ticket, n])
    k = (v & 15).astype(np.int64)
    nibbles = [[(int(x) >> (4 * j)) & 15 for j in range(8)] for x in v]
    weighted = [sum((j + 1) * nib[(j + int(kk)) & 7] for j in range(8)) for nib, kk in zip(nibbles, k)]
    np.testing.assert_array_equal(out[:, 0], np.array(LUT)[k])
    np.testing.assert_array_equal(out[:, 1], [(SALT >> (4 * int(kk))) & M32 for kk in k])
    np.testing.assert_array_equal(out[:, 2], weighted)
    c = POLY_BITS.view(np.float32).astype(np.float64)
    x64 = xs.astype(np.float64)
    acc = np.full(n, c[3])
    for coefficient in c[2::-1]:
        # fma.rn.f32 rounds once; here the product is exact in f64, the sum is rounded in f64 and then to f32,
        # which can differ from one rounding by 1 ulp
        acc = (acc * x64 + coefficient).astype(np.float32).astype(np.float64)
    np.testing.assert_array_max_ulp(y, acc.astype(np.float32), maxulp=1)
    counts = np.bincount(k, minlength=16)
    np.testing.assert_array_equal(hist, counts)
    np.testing.assert_array_equal(counters, counts)
    for bin_ in range(16):
        np.testing.assert_array_equal(np.sort(ticket[k == bin_]), np.arange(counts[bin_]))


# endregion

# region transpose_2d.ptx


@pytest.mark.parametrize("rows, cols", [(1, 1), (31, 33), (32, 32), (64, 100), (100, 64), (7, 129)])
def test_transpose_2d(rows, cols):
    rng = np.random.default_rng(rows * 1000 + cols)
    src = rng.integers(0, 1 << 32, (rows, cols), dtype=np.uint64).astype(np.uint32)
    out = np.zeros((cols, rows), np.uint32)
    out, _ = launch("transpose_2d.ptx", "transpose_2d", (ceil_div(cols, 32), ceil_div(rows, 32), 1), (32, 8, 1),
                    [out, src, rows, cols])
    np.testing.assert_array_equal(out, src.T)


# endregion
