"""Real compiler output through the PTX executor: kernels compiled by Triton 3.9 (LLVM's NVPTX back end) for
sm_90a/sm_80 without a GPU (tests/ptx_samples/external/, generators/ beside them), each checked with ptxas
and run against NumPy on random inputs.

Triton's PTX differs from Tessera's in ways that matter to an executor: `.loc`/`.file` lines and DWARF
`.section`s, `.param .u64 .ptr .global .align 1` pointers, every `i32` declared `.u32` (negative values
arrive as their two's complement), inline-asm blocks with their own `.reg` and labels, `cvta.param` of a
tensor-map parameter, `elect.sync`, cp.async with a src-size operand (zero fill), and two hidden trailing
pointer parameters, global_scratch and profile_scratch, that every kernel takes (given zero-size arrays
here, except where the kernel uses global scratch). Each file's header gives the generator command and the
launch (grid, block, dynamic shared bytes, argument order).

These are small, reviewed golden files (generated once; `.loc` lines stripped from the attention kernel). What
the executor refuses of Triton's output is asserted by name on the instructions themselves: `mma.sync` (sm_80
tensor cores, Triton's pre-Hopper dot) and sm_100's `tensormap.replace` fields.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tessera.interpreters.ptx import PtxExecutionError, TensorMapArg, launch
from tessera.toolchain import find_all_ptxas

SAMPLES = Path(__file__).parent / "ptx_samples" / "external"
FILES = sorted(p.name for p in SAMPLES.glob("*.ptx"))


def source(name: str) -> str:
    return (SAMPLES / f"{name}.ptx").read_text()


def header_launch(text: str) -> tuple[int, int]:
    """(threads per block, dynamic shared bytes) from the sample's header line."""
    match = re.search(r"^// Launch: .*block \((\d+), 1, 1\); dynamic shared bytes (\d+)\.", text, re.M)
    assert match, "sample header must state the launch"
    return int(match.group(1)), int(match.group(2))


def run(name: str, kernel: str, grid, args, scratch_bytes: int = 0, **options) -> list:
    """Launch sample `name` with `args` plus Triton's two hidden scratch pointers (`options`: as `launch`)."""
    text = source(name)
    threads, shared = header_launch(text)
    hidden = [np.zeros(scratch_bytes, np.uint8), np.zeros(0, np.uint8)]
    return launch(text, kernel, grid, (threads, 1, 1), [*args, *hidden], shared_bytes=shared, **options)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def test_every_sample_is_tested():
    tested = {name for name in FILES if f'"{name[:-4]}"' in Path(__file__).read_text()}
    assert FILES and tested == set(FILES)


ALL_PTXAS = find_all_ptxas()


@pytest.mark.parametrize("ptxas", [v.path for v in ALL_PTXAS], ids=[str(v) for v in ALL_PTXAS])
@pytest.mark.parametrize("name", FILES)
def test_ptxas_accepts(name, ptxas, tmp_path):
    """Under every ptxas found (the CUDA 12 and 13 ones of the test and ptx extras, a system one)."""
    result = subprocess.run([ptxas, "-arch=sm_90a", str(SAMPLES / name), "-o", str(tmp_path / "k.cubin")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# region elementwise, reductions, scans
def test_vector_add(rng):
    n = 1000
    x, y = rng.random(n, np.float32), rng.random(n, np.float32)
    out = run("triton_vector_add", "add_kernel", 4, [x, y, np.zeros(n, np.float32), n])
    np.testing.assert_array_equal(out[2], x + y)


def test_softmax(rng):
    rows, cols, stride = 6, 200, 256
    x = rng.standard_normal((rows, stride)).astype(np.float32)
    out = run("triton_softmax", "softmax_kernel", 4, [np.zeros_like(x), x, stride, stride, rows, cols])
    e = np.exp(x[:, :cols].astype(np.float64) - x[:, :cols].max(1, keepdims=True))
    np.testing.assert_allclose(out[0][:, :cols], e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_integer_division_remainder_and_wide_multiply(rng):
    """Division by constants (multiply-high sequences) and by a negative runtime divisor, umulhi, 64-bit
    products, f32 -> s32 truncation, shifts; the divisor arrives in a `.u32` parameter as -5."""
    n = 1000
    x = rng.integers(-2**31, 2**31 - 1, n).astype(np.int32)
    x[:10] = [0, -1, 1, 7, -7, 13, -13, 2**31 - 1, -2**31, 100]
    d = -5
    out = run("triton_integer", "int_kernel", 4, [x, np.zeros(8 * n, np.int32), n, d])[1].reshape(8, n)
    xi = x.astype(np.int64)

    def quotient(a, b):  # C division: truncates toward zero
        return np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))

    expected = [quotient(xi, 7), xi - 13 * quotient(xi, 13), quotient(xi, d), xi - d * quotient(xi, d),
                (x.view(np.uint32).astype(np.uint64) * 0x9E3779B9) >> np.uint64(32), (xi * 3000000007) >> 7,
                np.trunc(x.astype(np.float32) * np.float32(0.37)), ((xi >> 3) ^ (xi << 5)) | (xi & 0xFF)]
    for i, value in enumerate(expected):
        wrapped = np.asarray(value).astype(np.int64).astype(np.uint64).astype(np.uint32).view(np.int32)
        np.testing.assert_array_equal(out[i], wrapped, err_msg=f"part {i}")


def test_atomics(rng):
    n = 1000
    x = rng.integers(0, 1000, n).astype(np.int32)
    out = run("triton_atomics", "atomic_kernel", 4,
              [x, np.zeros(16, np.int32), np.zeros(1, np.float32), np.full(1, -5, np.int32), n])
    np.testing.assert_array_equal(out[1], np.bincount(x % 16, minlength=16))
    np.testing.assert_allclose(out[2][0], x.sum(), rtol=1e-6)
    assert out[3][0] == x.max()



def test_layer_norm_backward_takes_its_locks_in_turn(rng):
    """Tutorial 05's dx kernel: rows accumulate partial dW/dB into GROUP_SIZE_M buffers, each behind a spin lock
    (`while tl.atomic_cas(Lock, 0, 1) == 1: pass`, no nanosleep) and a first-writer count (atomic_xchg); the
    lock's acquire/release orders the plain loads and stores of the buffers (CTAs run last to first here)."""
    rows, n, groups = 11, 100, 4
    x, dy = rng.standard_normal((rows, n)).astype(np.float32), rng.standard_normal((rows, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    mean, rstd = x.mean(1).astype(np.float32), (1 / np.sqrt(x.var(1) + 1e-5)).astype(np.float32)
    out = run("triton_layer_norm_bwd", "_layer_norm_bwd_dx_fused", rows,
              [np.zeros_like(x), dy, np.zeros((groups, n), np.float32), np.zeros((groups, n), np.float32), x, w,
               mean, rstd, np.zeros(2 * groups, np.int32), n, n], cta_order=list(range(rows))[::-1])
    xhat, wdy = (x - mean[:, None]) * rstd[:, None], w * dy
    c1, c2 = (xhat * wdy).sum(1, keepdims=True) / n, wdy.sum(1, keepdims=True) / n
    np.testing.assert_allclose(out[0], (wdy - (xhat * c1 + c2)) * rstd[:, None], rtol=1e-4, atol=1e-5)
    for got, part in ((out[2], dy * xhat), (out[3], dy)):  # the order of the additions is the CTAs' order
        np.testing.assert_allclose(got, [part[g::groups].sum(0) for g in range(groups)], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[8], [0] * groups + [1] * groups)  # locks released, every group written


def test_half_double_and_float_min_max_atomics(rng):
    """tl.atomic_add on fp16/bf16 (atom.add.noftz.f16/.bf16), fp64, and tl.atomic_max/min on fp32, which Triton
    splits by sign into atom.max.s32 / atom.min.u32 on the bit patterns."""
    n = 160
    x16, xb = rng.standard_normal(n).astype(np.float16), rng.standard_normal(n).astype(ml_dtypes.bfloat16)
    xd, xf = rng.standard_normal(n), rng.standard_normal(n).astype(np.float32)
    xf[:4] = [-0.0, 0.0, -5e-40, 1e30]
    out = run("triton_atomics2", "atomics2_kernel", 2,
              [x16, xb, xd, xf, np.zeros(4, np.float16), np.zeros(4, ml_dtypes.bfloat16), np.zeros(4),
               np.full(4, -np.inf, np.float32), np.full(4, np.inf, np.float32), n])
    slot = np.arange(n) % 4
    for i, values, tolerance in ((4, x16, 2e-2), (5, xb, 2e-1), (6, xd, 1e-12)):
        sums = [values[slot == s].astype(np.float64).sum() for s in range(4)]
        np.testing.assert_allclose(out[i].astype(np.float64), sums, rtol=tolerance, atol=tolerance)
    np.testing.assert_array_equal(out[7], [xf[slot == s].max() for s in range(4)])
    np.testing.assert_array_equal(out[8], [xf[slot == s].min() for s in range(4)])


def same_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    match = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    assert match.all(), f"{what}: {np.flatnonzero(~match)[:8]} got {got[~match][:8]} want {want[~match][:8]}"


def test_fp8_upcasts_and_satfinite_downcast():
    """Every e4m3 and e5m2 byte to f16 (cvt.rn.f16x2.e4m3x2/.e5m2x2), e4m3 to bf16 through cvt.bf16.f16 (no
    rounding modifier) and f32, and an f16 product back to e5m2 (cvt.rn.satfinite.e5m2x2.f16x2: clamped)."""
    e4m3 = np.tile(np.arange(256, dtype=np.uint8), 2).view(ml_dtypes.float8_e4m3fn)
    e5m2 = np.concatenate([np.arange(256, dtype=np.uint8), np.arange(255, -1, -1, dtype=np.uint8)])
    e5m2 = e5m2.view(ml_dtypes.float8_e5m2)
    n = len(e4m3)
    out = run("triton_fp8_upcast", "fp8_upcast_kernel", 2, [e4m3, e5m2, np.zeros(5 * n, np.float16), n])[2]
    out = out.reshape(5, n)
    same_bits(out[0], e4m3.astype(np.float16), "e4m3 -> f16")
    same_bits(out[1], e5m2.astype(np.float16), "e5m2 -> f16")
    same_bits(out[2], e4m3.astype(ml_dtypes.bfloat16).astype(np.float16), "e4m3 -> bf16 -> f16")
    same_bits(out[3], e4m3.astype(np.float32).astype(np.float16), "e4m3 -> f32 -> f16")
    with np.errstate(over="ignore"):
        product = e4m3.astype(np.float16) * e5m2.astype(np.float16)
    clamped = np.where(np.isnan(product), product, np.clip(product, -57344, 57344))
    same_bits(out[4], clamped.astype(ml_dtypes.float8_e5m2).astype(np.float16), "f16 product -> e5m2")

# endregion
# region matrix multiply and attention
def check_matmul(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """f16 products are exact and f32 sums nearly so; the f16 output rounds to 2^-11 relative."""
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2e-3, atol=2e-3)


REFUSED = {  # instruction: (body, what the refusal says)
    "mma": ("""
    .reg .b32 %r<12>; .reg .f32 %f<8>;
    mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7}, {%r4, %r5},
        {%r8, %r9}, {%f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7};""", r"not supported by the PTX executor: mma .m8n8k4"),
    "cp": ("""
    .reg .b64 %rd<2>; .reg .b32 %r<2>;
    cp.reduce.async.bulk.tensor.1d.global.shared::cta.min.bulk_group [%rd0, {%r0}], [%r1];""",
           "TMA reductions other than cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.bulk_group"),
    "tensormap": ("""
    .reg .b64 %rd<2>; .reg .b32 %r<2>;
    mov.u32 %r0, 0;
    tensormap.replace.tile.swizzle_atomicity.global.b1024.b32 [%rd0], %r0;""", r"\.swizzle_atomicity is sm_100's"),
}


@pytest.mark.parametrize("opcode", REFUSED)
def test_unsupported_triton_instructions_are_refused_by_name(opcode):
    """Instructions Triton emits that the executor does not model fail with the line and the instruction: the
    m8n8k4 mma.sync of Triton's Volta dot (the m16n8k8/k16/k32 ones of sm_80 and small sm_90a dots run), TMA
    reductions other than .add, and sm_100's `tensormap.replace` fields (tensor maps built on the device run:
    tests/test_ptx_triton.py)."""
    body, message = REFUSED[opcode]
    text = ".version 8.5\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{" + body + "\n    ret;\n}\n"
    with pytest.raises(PtxExecutionError, match=rf"<ptx>:\d+: error: {opcode}\..*{message}"):
        launch(text, "k", 1, (32, 1, 1), [])


def tensor_map(array: np.ndarray) -> TensorMapArg:
    return TensorMapArg.tiled(array, box=(64, 64), swizzle=128)


def descriptor_args(array: np.ndarray) -> list:
    """A host TensorDescriptor as Triton passes it: the map, then its shape (u32) and strides (u64)."""
    return [tensor_map(array), *array.shape, array.shape[1], 1]


def test_matmul_tma_descriptors(rng):
    m, n, k = 128, 64, 192
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((n, k)).astype(np.float16)
    c = np.zeros((m, n), np.float16)
    out = run("triton_matmul_tma", "matmul_tma_kernel", (m // 64, n // 64, 1),
              [*descriptor_args(a), *descriptor_args(b), *descriptor_args(c), k])
    check_matmul(out[10], a, b.T)


DOT_TYPES = {  # sample: (multiplicand dtype, output dtype, K)
    "triton_dot_fp8": (ml_dtypes.float8_e4m3fn, np.float32, 32), "triton_dot_int8": (np.int8, np.int32, 32),
}


@pytest.mark.parametrize("name", DOT_TYPES)
def test_single_dot_every_wgmma_type(name, rng):
    """tl.dot on one 64x64 tile: wgmma .e4m3 and .s8 (exact)."""
    dtype, out_dtype, k = DOT_TYPES[name]
    if dtype == np.int8:
        a, b = (rng.integers(-128, 128, shape).astype(np.int8) for shape in ((64, k), (k, 64)))
    else:
        a, b = (rng.standard_normal(shape).astype(np.float32).astype(dtype) for shape in ((64, k), (k, 64)))
    out = run(name, "dot_kernel", 1, [a, b, np.zeros((64, 64), out_dtype)])
    exact = a.astype(np.float64) @ b.astype(np.float64)
    if dtype == np.int8:
        np.testing.assert_array_equal(out[2], exact.astype(np.int32))
    else:
        np.testing.assert_allclose(out[2].astype(np.float64), exact, rtol=1e-5, atol=4e-5)


def test_small_dot_runs_on_mma_sync(rng):
    """tl.dot of 16 x 32 by 32 x 32 in one warp: below a warpgroup's 64 rows Triton emits mma.sync m16n8k16
    (fed by ldmatrix and ldmatrix.trans) on sm_90a instead of wgmma."""
    a, b = rng.standard_normal((16, 32)).astype(np.float16), rng.standard_normal((32, 32)).astype(np.float16)
    out = run("triton_dot_mma16", "_dot_small", 1, [a, b, np.zeros((16, 32), np.float32)])
    np.testing.assert_allclose(out[2], a.astype(np.float64) @ b.astype(np.float64), rtol=1e-6, atol=1e-5)


def test_tma_reduce_add_from_every_program(rng):
    """TensorDescriptor.atomic_add: cp.reduce.async.bulk.tensor.2d...add of a swizzled shared box into the tensor,
    f32 as the map says, from 4 CTAs into one box: the sum in any CTA order, no race between the reductions."""
    d, x = rng.standard_normal((32, 32)).astype(np.float32), rng.standard_normal((4, 32, 32)).astype(np.float32)
    out = run("triton_tma_reduce", "tma_reduce_kernel", 4,
              [TensorMapArg.tiled(d, box=(32, 32), swizzle=128), 32, 32, 32, 1, x], cta_order=[2, 0, 3, 1])
    np.testing.assert_allclose(out[0], d.astype(np.float64) + x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-5)


def test_flash_attention_forward(rng):
    """Tutorial 06 forward (causal, head_dim 64, plain pointers): cp.async, wgmma with P from registers,
    exp2 online softmax; checks O and the log2-sum-exp M."""
    z, h, n, d = 1, 2, 128, 64
    q, k, v = (rng.standard_normal((z, h, n, d)).astype(np.float16) for _ in range(3))
    strides = [h * n * d, n * d, d]
    sm_scale = 0.5
    out = run("triton_attention_fwd", "_attn_fwd", (n // 64, z * h, 1),
              [q, k, v, np.float32(sm_scale), np.zeros(z * h * n, np.float32), np.zeros_like(q),
               *strides * 4, z, h])
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) * sm_scale
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    top = s.max(-1, keepdims=True)
    p = np.exp(s - top)
    np.testing.assert_allclose(out[5].astype(np.float64), p / p.sum(-1, keepdims=True) @ v.astype(np.float64),
                               rtol=1e-2, atol=1e-2)  # P is rounded to f16 before P.V
    lse2 = (np.log(p.sum(-1)) + top[..., 0]) / np.log(2)
    np.testing.assert_allclose(out[4], lse2.reshape(-1), rtol=1e-5, atol=1e-5)


# endregion
