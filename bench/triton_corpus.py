"""Triton 3.9 kernels of many kinds through the PTX executor against NumPy: compiles each kernel of
tests/ptx_samples/external/generators/ (gen.py .. gen4.py) for sm_90a into a scratch folder, runs it with the
race checks on, on random inputs of odd sizes, and prints one line per kernel (OK, or the failure).

    pip install triton            # 3.9; no GPU needed
    python bench/triton_corpus.py [--out DIR] [KERNEL ...]     # every kernel by default, ~1 min on one core

A handful of these kernels are golden files checked by tests/test_ptx_external.py; this is the rest of the
corpus (not run by the suite: it needs Triton). `print` checks that printf is refused by name.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from math import erf
from pathlib import Path

import ml_dtypes
import numpy as np

from tessera.interpreters.ptx import PtxExecutionError, TensorMapArg, launch

GENERATORS = Path(__file__).resolve().parent.parent / "tests" / "ptx_samples" / "external" / "generators"
OUT = Path(".")
rng = np.random.default_rng(1)
bf16 = ml_dtypes.bfloat16

KERNELS = {  # check name: (generator, its argument)
    **{
        name: ("gen4.py", name)
        for name in (
            "rmsnorm",
            "ln_bwd",
            "msoftmax",
            "scan",
            "argmax",
            "gelu",
            "gelu_tanh",
            "fp8gemm",
            "int4gemm",
            "rotary",
            "spinlock",
            "convert",
            "math2",
            "attn_bwd",
            "atomics2",
            "intmath",
            "welford",
            "gather",
            "fp8up",
            "print",
            "dot16",
            "dot16_bf16",
            "dot16_tf32",
            "dot16_fp8",
            "dot16_i8",
            "hints",
            "misc",
            "join",
            "tmareduce",
        )
    },
    "ln": ("gen2.py", "ln"),
    "scan_sort": ("gen2.py", "scan"),
    "rand": ("gen2.py", "rand"),
    "matmul_ws": ("gen3.py", "ws"),
    "dot_bf16": ("gen3.py", "bf16"),
    "dot_tf32": ("gen3.py", "tf32"),
    "dot_f16acc": ("gen3.py", "f16acc"),
    "mm90s": ("gen.py", "mm90s"),
    "mm80": ("gen.py", "mm80"),
}


def compile_kernels(names: list[str]) -> None:
    """Run the generators for `names` in OUT (they write out/NAME.ptx and out/NAME.json)."""
    by_generator: dict[str, list[str]] = {}
    for name in names:
        generator, argument = KERNELS[name]
        by_generator.setdefault(generator, []).append(argument)
    env = dict(os.environ, TRITON_DEFAULT_FP_FUSION="1", PYTHONPATH=str(GENERATORS))
    for generator, arguments in by_generator.items():
        subprocess.run(
            [sys.executable, str(GENERATORS / generator), *sorted(set(arguments))],
            cwd=OUT,
            env=env,
            check=True,
            capture_output=True,
        )


def run(name, kernel, grid, args, **options):
    meta = json.loads((OUT / "out" / f"{name}.json").read_text())
    text = (OUT / "out" / f"{name}.ptx").read_text()
    hidden = [np.zeros(0, np.uint8), np.zeros(0, np.uint8)]
    return launch(
        text, kernel, grid, (meta["num_warps"] * 32, 1, 1), [*args, *hidden], shared_bytes=meta["shared"], **options
    )


def k_rmsnorm():
    rows, n, stride = 5, 200, 208
    x = rng.standard_normal((rows, stride)).astype(np.float16)
    w = rng.standard_normal(stride).astype(np.float32)
    out = run("triton_rmsnorm", "rmsnorm_kernel", rows, [x, w, np.zeros_like(x), stride, n, np.float32(1e-5)])
    xf = x[:, :n].astype(np.float64)
    ref = xf / np.sqrt((xf * xf).mean(1, keepdims=True) + 1e-5) * w[:n]
    np.testing.assert_allclose(out[2][:, :n].astype(np.float64), ref, rtol=2e-3, atol=2e-3)
    assert not out[2][:, n:].any()


def k_ln_bwd():
    rows, n, G = 11, 100, 4
    x = rng.standard_normal((rows, n)).astype(np.float32)
    dy = rng.standard_normal((rows, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    mean = x.mean(1).astype(np.float32)
    rstd = (1 / np.sqrt(x.var(1) + 1e-5)).astype(np.float32)
    out = run(
        "triton_layer_norm_bwd",
        "_layer_norm_bwd_dx_fused",
        rows,
        [
            np.zeros_like(x),
            dy,
            np.zeros((G, n), np.float32),
            np.zeros((G, n), np.float32),
            x,
            w,
            mean,
            rstd,
            np.zeros(2 * G, np.int32),
            n,
            n,
        ],
    )
    xhat = (x - mean[:, None]) * rstd[:, None]
    wdy = w * dy
    c1 = (xhat * wdy).sum(1, keepdims=True) / n
    c2 = wdy.sum(1, keepdims=True) / n
    np.testing.assert_allclose(out[0], (wdy - (xhat * c1 + c2)) * rstd[:, None], rtol=1e-4, atol=1e-5)
    dw = np.stack([(dy * xhat)[g::G].sum(0) for g in range(G)])
    db = np.stack([dy[g::G].sum(0) for g in range(G)])
    np.testing.assert_allclose(out[2], dw, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[3], db, rtol=1e-4, atol=1e-5)
    assert (out[8][:G] == 0).all() and (out[8][G:] == 1).all()


def k_msoftmax():
    rows, n, stride = 6, 100, 128
    x = rng.standard_normal((rows, stride)).astype(np.float16)
    m = (rng.random((rows, stride)) < 0.7).astype(np.int8)
    m[:, 0] = 1
    out = run(
        "triton_masked_softmax", "masked_softmax_kernel", rows, [np.zeros_like(x), x, m, stride, n, np.float32(0.7)]
    )
    s = np.where(m[:, :n] != 0, x[:, :n].astype(np.float64) * 0.7, -np.inf)
    e = np.exp(s - s.max(1, keepdims=True))
    np.testing.assert_allclose(out[0][:, :n].astype(np.float64), e / e.sum(1, keepdims=True), rtol=2e-3, atol=1e-3)


def k_scan():
    rows, n = 3, 230
    x = rng.standard_normal((rows, n)).astype(np.float32)
    a = rng.uniform(0.5, 1.0, (rows, n)).astype(np.float32)
    out = run("triton_scan", "scan_kernel", rows, [x, a, *(np.zeros_like(x) for _ in range(3)), n])
    np.testing.assert_allclose(out[2], np.cumsum(x.astype(np.float64), 1), rtol=1e-5, atol=1e-5)
    h = np.zeros_like(x, dtype=np.float64)
    acc = np.zeros(rows)
    for j in range(n):
        acc = acc * a[:, j] + x[:, j]
        h[:, j] = acc
    np.testing.assert_allclose(out[3], h, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[4], np.maximum.accumulate(x, 1))


def k_argmax():
    rows, n = 10, 117
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x[3, 5] = x[3, 50] = 9.0
    x[4, 7] = x[4, 9] = -9.0
    out = run(
        "triton_argmax",
        "argmax_kernel",
        3,
        [x, np.zeros(rows, np.int32), np.zeros(rows, np.int32), np.zeros(rows, np.float32), rows, n],
    )
    np.testing.assert_array_equal(out[1], x.argmax(1))
    np.testing.assert_array_equal(out[2], x.argmin(1))
    np.testing.assert_array_equal(out[3], x.max(1))


def gemm_case(name):
    m, n, k = 70, 90, 40
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    bias = rng.standard_normal(n).astype(np.float32)
    out = run(
        f"triton_gemm_{name}", "gemm_bias_gelu_kernel", (2, 2, 1), [a, b, bias, np.zeros((m, n), np.float16), m, n, k]
    )
    acc = a.astype(np.float64) @ b.astype(np.float64) + bias
    if name == "gelu":
        ref = 0.5 * acc * (1 + np.vectorize(erf)(acc / np.sqrt(2)))
    else:
        ref = 0.5 * acc * (1 + np.tanh(0.7978845608028654 * (acc + 0.044715 * acc**3)))
    np.testing.assert_allclose(out[3].astype(np.float64), ref, rtol=3e-3, atol=3e-3)


def k_gelu():
    gemm_case("gelu")


def k_gelu_tanh():
    gemm_case("gelu_tanh")


def k_fp8gemm():
    m, n, k = 70, 100, 128
    f8 = ml_dtypes.float8_e4m3fn
    a = rng.standard_normal((m, k)).astype(np.float32).astype(f8)
    b = rng.standard_normal((n, k)).astype(np.float32).astype(f8)
    sa = rng.uniform(0.5, 2, m).astype(np.float32)
    sb = rng.uniform(0.5, 2, n).astype(np.float32)
    out = run("triton_fp8_gemm", "fp8_gemm_kernel", (2, 2, 1), [a, b, sa, sb, np.zeros((m, n), bf16), m, n, k])
    ref = (a.astype(np.float64) @ b.astype(np.float64).T) * sa[:, None] * sb[None, :]
    np.testing.assert_allclose(out[4].astype(np.float64), ref, rtol=1e-2, atol=1e-2)


def k_int4gemm():
    m, n, k = 70, 96, 64
    a = rng.standard_normal((m, k)).astype(np.float16)
    q = rng.integers(-8, 8, (k, n)).astype(np.int8)
    packed = ((q[0::2] & 0xF) | (q[1::2] << 4)).astype(np.int8)
    s = rng.uniform(0.01, 0.1, n).astype(np.float16)
    out = run(
        "triton_int4_gemm", "int4_gemm_kernel", (2, 2, 1), [a, packed, s, np.zeros((m, n), np.float16), m, n, k]
    )
    ref = (a.astype(np.float64) @ q.astype(np.float64)) * s.astype(np.float64)
    np.testing.assert_allclose(out[3].astype(np.float64), ref, rtol=3e-3, atol=3e-3)


def k_rotary():
    heads, seq, half = 2, 37, 32
    x = rng.standard_normal((heads, seq, 2 * half)).astype(bf16)
    ang = rng.uniform(0, 6, (seq, half))
    c, s = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    out = run("triton_rotary", "rotary_kernel", (3, heads, 1), [x, c, s, np.zeros_like(x), seq])
    x1, x2 = x[..., :half].astype(np.float64), x[..., half:].astype(np.float64)
    ref = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1)
    np.testing.assert_allclose(out[3].astype(np.float64), ref, rtol=1e-2, atol=1e-2)


def k_spinlock():
    n = 1500
    x = rng.standard_normal(n).astype(np.float32)
    out = run(
        "triton_spinlock",
        "spinlock_sum_kernel",
        6,
        [x, np.zeros(1, np.float32), np.zeros(1, np.int32), np.zeros(1, np.int32), n],
    )
    np.testing.assert_allclose(out[1][0], x.astype(np.float64).sum(), rtol=1e-5)
    assert out[2][0] == 6 and out[3][0] == 0


def k_convert():
    n = 1000
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32)
    x[:8] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, 70000.0, 500.0]
    out = run(
        "triton_convert",
        "convert_kernel",
        4,
        [
            x,
            np.zeros(2 * n, bf16),
            np.zeros(2 * n, np.float16),
            np.zeros(n, ml_dtypes.float8_e4m3fn),
            np.zeros(n, ml_dtypes.float8_e5m2),
            n,
        ],
    )

    def same(a, b, what):
        a, b = np.asarray(a), np.asarray(b)
        bad = ~(
            (a.view(np.uint8 if a.itemsize == 1 else np.uint16) == b.view(np.uint8 if b.itemsize == 1 else np.uint16))
            | (np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32)))
        )
        assert not bad.any(), f"{what}: {np.flatnonzero(bad)[:5]} {x[bad][:5]} got {a[bad][:5]} want {b[bad][:5]}"

    same(out[1][:n], x.astype(bf16), "bf16 rn")
    rz = (x.view(np.uint32) & 0xFFFF0000).view(np.float32).astype(bf16)
    rz = np.where(np.isnan(x), np.float32(np.nan), rz.astype(np.float32)).astype(bf16)
    same(out[1][n:], rz, "bf16 rz")
    same(out[2][:n], x.astype(np.float16), "f16 rn")
    h = x.astype(np.float16)
    over = np.abs(h.astype(np.float64)) > np.abs(x.astype(np.float64))
    hz = np.where(over, np.nextafter(h, np.float16(0)), h)
    same(out[2][n:], hz, "f16 rz")
    for j, (f8, top) in enumerate(((ml_dtypes.float8_e4m3fn, 448.0), (ml_dtypes.float8_e5m2, 57344.0))):
        want = np.where(np.isnan(x), x, np.clip(x, -top, top)).astype(f8)  # .satfinite: clamp, NaN stays NaN
        same(out[3 + j], want, f"f8 {j}")
    return out


def k_math2():
    n = 1000
    x = rng.uniform(-10, 10, n).astype(np.float32)
    y = (rng.uniform(0.1, 5, n) * rng.choice([-1, 1], n)).astype(np.float32)
    out = run("triton_math2", "math2_kernel", 4, [x, y, np.zeros(14 * n, np.float32), n])[2].reshape(14, n)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    ax = np.abs(x) + np.float32(0.125)
    ref = [
        1 / np.sqrt(ax),
        np.exp2(xd),
        np.log2(ax),
        np.sin(xd),
        np.cos(xd),
        xd / yd,
        xd * yd + ax,
        np.sqrt(ax),
        xd / yd,
        np.sqrt(ax),
        np.exp(xd),
        np.log(ax),
        1 / (1 + np.exp(-xd)),
        np.rint(x * np.float32(3)),
    ]
    for i, r in enumerate(ref):
        np.testing.assert_allclose(out[i], r, rtol=3e-6, atol=1e-6, err_msg=f"part {i}")
    np.testing.assert_array_equal(out[5], (x / y))
    np.testing.assert_array_equal(out[6], np.float32(xd * yd + ax))
    np.testing.assert_array_equal(out[7], np.sqrt(ax))


def k_attn_bwd():
    z, h, n, d = 1, 2, 128, 64
    sm_scale = 0.5
    q, k, v, do = (rng.standard_normal((z, h, n, d)).astype(np.float16) for _ in range(4))
    qd, kd, vd, dod = (t.astype(np.float64) for t in (q, k, v, do))
    s = qd @ kd.transpose(0, 1, 3, 2) * sm_scale
    s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    top = s.max(-1, keepdims=True)
    p = np.exp(s - top)
    l = p.sum(-1, keepdims=True)
    p /= l
    o = (p @ vd).astype(np.float16)
    m = ((np.log(l) + top)[..., 0] / np.log(2)).astype(np.float32)  # the forward's log2-sum-exp
    pre = run(
        "triton_attention_bwd_pre",
        "_attn_bwd_preprocess",
        (n // 64, z * h, 1),
        [o, do, np.zeros((z * h, n), np.float32), n],
    )
    delta = pre[2]
    np.testing.assert_allclose(delta.reshape(z, h, n), (o.astype(np.float64) * dod).sum(-1), rtol=1e-4, atol=1e-4)
    RCP_LN2 = 1.4426950408889634
    arg_k = (k.astype(np.float32) * np.float32(sm_scale * RCP_LN2)).astype(np.float16)
    out = run(
        "triton_attention_bwd",
        "_attn_bwd",
        (n // 64, 1, z * h),
        [
            q,
            arg_k,
            v,
            np.float32(sm_scale),
            do,
            np.zeros(q.shape, np.float32),
            np.zeros_like(q),
            np.zeros_like(q),
            m,
            delta,
            h * n * d,
            n * d,
            d,
            h,
            n,
        ],
    )
    dq, dk, dv = out[5], out[6], out[7]
    # reference gradients with the kernel's own (f16) K scaling
    s2 = qd @ arg_k.astype(np.float64).transpose(0, 1, 3, 2)
    p2 = np.where(np.tril(np.ones((n, n), bool)), np.exp2(s2 - m[..., None].astype(np.float64)), 0)
    dv_ref = p2.transpose(0, 1, 3, 2) @ dod
    dp = dod @ vd.transpose(0, 1, 3, 2)
    ds = p2 * (dp - delta.reshape(z, h, n, 1))
    dk_ref = ds.transpose(0, 1, 3, 2) @ qd * sm_scale
    dq_ref = ds @ arg_k.astype(np.float64) * np.log(2)
    for name, got, ref in (("dv", dv, dv_ref), ("dk", dk, dk_ref), ("dq", dq, dq_ref)):
        err = np.abs(got.astype(np.float64) - ref).max()
        scale = np.abs(ref).max()
        print(f"  {name} max err {err:.3g} of {scale:.3g}")
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-2, atol=2e-2 * scale, err_msg=name)


def k_matmul_ws():
    m, n, k = 128, 192, 128
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    c = np.zeros((m, n), np.float16)
    tm = lambda arr: TensorMapArg.tiled(arr, box=(64, 64), swizzle=128)
    desc = lambda arr: [tm(arr), *arr.shape, arr.shape[1], 1]
    out = run("triton_matmul_ws", "matmul_ws_kernel", 2, [*desc(a), *desc(b), *desc(c), m, n, k])
    np.testing.assert_allclose(
        out[10].astype(np.float64), a.astype(np.float64) @ b.T.astype(np.float64), rtol=2e-3, atol=2e-3
    )


def k_ln():
    rows, n, stride = 5, 300, 304
    x = rng.standard_normal((rows, stride)).astype(np.float16)
    w = rng.standard_normal(n).astype(np.float32)
    bb = rng.standard_normal(n).astype(np.float32)
    out = run(
        "triton_layer_norm",
        "_layer_norm_fwd_fused",
        rows,
        [
            x,
            np.zeros_like(x),
            w,
            bb,
            np.zeros(rows, np.float32),
            np.zeros(rows, np.float32),
            stride,
            n,
            np.float32(1e-5),
        ],
    )
    xf = x[:, :n].astype(np.float64)
    mu = xf.mean(1)
    rs = 1 / np.sqrt(xf.var(1) + 1e-5)
    np.testing.assert_allclose(
        out[1][:, :n].astype(np.float64), (xf - mu[:, None]) * rs[:, None] * w + bb, rtol=3e-3, atol=3e-3
    )
    np.testing.assert_allclose(out[4], mu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[5], rs, rtol=1e-4)


def k_atomics2():
    n = 700
    x16 = rng.standard_normal(n).astype(np.float16)
    xb = rng.standard_normal(n).astype(bf16)
    xd = rng.standard_normal(n)
    xf = rng.standard_normal(n).astype(np.float32)
    xf[:4] = [-0.0, 0.0, -5e-40, np.float32(1e30)]
    out = run(
        "triton_atomics2",
        "atomics2_kernel",
        3,
        [
            x16,
            xb,
            xd,
            xf,
            np.zeros(4, np.float16),
            np.zeros(4, bf16),
            np.zeros(4),
            np.full(4, -np.inf, np.float32),
            np.full(4, np.inf, np.float32),
            n,
        ],
    )
    slot = np.arange(n) % 4
    for i, src in ((4, x16), (5, xb), (6, xd)):
        ref = np.array([src[slot == s].astype(np.float64).sum() for s in range(4)])
        np.testing.assert_allclose(
            out[i].astype(np.float64), ref, rtol=0.05 if i < 6 else 1e-12, atol=0.2 if i < 6 else 1e-12
        )
    np.testing.assert_array_equal(out[7], [xf[slot == s].max() for s in range(4)])
    np.testing.assert_array_equal(out[8], [xf[slot == s].min() for s in range(4)])


def k_intmath():
    n = 600
    x = rng.integers(-(2**31), 2**31, n).astype(np.int32)
    y = rng.integers(-(2**31), 2**31, n).astype(np.int32)
    x[:6] = [0, -1, 1, 2**31 - 1, -(2**31), 256]
    y[:6] = [1, -1, 0, 5, 3, -(2**31)]
    f = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    f[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3.0, 7.5]
    out = run(
        "triton_intmath", "intmath_kernel", 3, [x, y, f, np.zeros(10 * n, np.int32), np.zeros(9 * n, np.float32), n]
    )
    io, fo = out[3].reshape(10, n), out[4].reshape(9, n)
    u = x.view(np.uint32).astype(np.int64)
    clz = np.array([32 - int(v).bit_length() for v in u])
    popc = np.array([bin(int(v)).count("1") for v in u])
    brev = np.array([int(f"{int(v):032b}"[::-1], 2) for v in u]).astype(np.uint32).view(np.int32)
    ffs = np.array([(int(v) & -int(v)).bit_length() for v in u])

    def perm(a, b, s):
        bytes_ = list(int(a).to_bytes(4, "little")) + list(int(b).to_bytes(4, "little"))
        return int.from_bytes(bytes([bytes_[(s >> (4 * i)) & 7] for i in range(4)]), "little")

    bp = np.array([perm(a, b, 0x5140) for a, b in zip(u, y.view(np.uint32))]).astype(np.uint32).view(np.int32)
    mulhi = ((x.astype(np.int64) * y.astype(np.int64)) >> 32).astype(np.int32)
    sad = ((x.astype(np.int64) + y.astype(np.int64)) >> 1).astype(np.int32)
    for i, ref in enumerate([clz, popc, brev, ffs, bp, mulhi, sad]):
        np.testing.assert_array_equal(io[i], ref, err_msg=f"int part {i}")
    fin = np.isfinite(f) & (np.abs(f) >= np.finfo(np.float32).tiny)  # libdevice in ftz mode: subnormals are 0
    np.testing.assert_array_equal(
        io[7][fin], np.floor(np.log2(np.abs(f[fin].astype(np.float64)))).astype(np.int32), err_msg="ilogb"
    )
    np.testing.assert_array_equal(io[8] != 0, np.signbit(f), err_msg="signbit")
    np.testing.assert_array_equal(io[9], np.isnan(f) + 2 * np.isinf(f))
    np.testing.assert_array_equal(fo[0], np.copysign(f, x.astype(np.float32)), err_msg="copysign")
    normal = ~((np.abs(f) < np.finfo(np.float32).tiny) & (f != 0))  # libdevice's ftz mode: x + x for a subnormal
    np.testing.assert_array_equal(fo[1][normal], np.ldexp(f, np.fmod(y, 9))[normal], err_msg="ldexp")
    np.testing.assert_array_equal(fo[2][normal], np.fmod(f, np.float32(1.5))[normal], err_msg="fmod")
    np.testing.assert_array_equal(fo[3][normal], np.nextafter(f, np.float32(0))[normal], err_msg="nextafter")
    np.testing.assert_allclose(
        fo[4], np.exp(f.astype(np.float64)).astype(np.float32), rtol=2e-5, atol=1e-30, err_msg="fast_expf"
    )
    np.testing.assert_allclose(fo[5], np.tanh(f.astype(np.float64)), rtol=2e-6, atol=1e-7, err_msg="tanh")
    np.testing.assert_allclose(
        fo[6], (np.abs(f.astype(np.float64)) ** 2.5).astype(np.float32), rtol=1e-6, err_msg="pow"
    )
    np.testing.assert_allclose(fo[7], np.tanh(f.astype(np.float64)), rtol=2**-10, atol=2**-10, err_msg="tanh.approx")
    np.testing.assert_array_equal(
        fo[8],
        np.where(np.isnan(f), np.float32(-0.5), np.clip(f, np.float32(-0.5), np.float32(0.75))),
        err_msg="clamp",
    )  # max.f32(NaN, lo) = lo


def k_welford():
    rows, n = 3, 333
    x = (rng.standard_normal((rows, n)) * 3 + 10).astype(np.float32)
    out = run(
        "triton_welford", "welford_kernel", rows, [x, np.zeros(rows, np.float32), np.zeros(rows, np.float32), n]
    )
    np.testing.assert_allclose(out[1], x.astype(np.float64).mean(1), rtol=1e-5)
    np.testing.assert_allclose(out[2], x.astype(np.float64).var(1), rtol=1e-4)


def k_gather():
    rows, b = 2, 128
    x = rng.standard_normal((rows, b)).astype(np.float32)
    idx = rng.integers(0, b, (rows, b)).astype(np.int32)
    out = run("triton_gather_flip", "gather_flip_kernel", rows, [x, idx, np.zeros((3, rows, b), np.float32)])[2]
    np.testing.assert_array_equal(out[0], np.take_along_axis(x, idx, 1))
    np.testing.assert_array_equal(out[1], x[:, ::-1])
    np.testing.assert_array_equal(out[2], -np.sort(-x, 1))


def k_fp8up():
    n = 512
    a = np.arange(256).astype(np.uint8).view(ml_dtypes.float8_e4m3fn)
    a = np.concatenate([a, a])
    b = np.arange(256).astype(np.uint8).view(ml_dtypes.float8_e5m2)
    b = np.concatenate([b, b[::-1]])
    out = run("triton_fp8_upcast", "fp8_upcast_kernel", 2, [a, b, np.zeros(5 * n, np.float16), n])[2].reshape(5, n)

    def same(got, want, what):
        ok = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
        assert ok.all(), f"{what}: {np.flatnonzero(~ok)[:8]} got {got[~ok][:8]} want {want[~ok][:8]}"

    same(out[0], a.astype(np.float16), "e4m3->f16")
    same(out[1], b.astype(np.float16), "e5m2->f16")
    same(out[2], a.astype(bf16).astype(np.float16), "e4m3->bf16")
    same(out[3], a.astype(np.float32).astype(np.float16), "e4m3->f32")
    prod = a.astype(np.float16) * b.astype(np.float16)
    sat = np.where(np.isnan(prod), prod, np.clip(prod, -57344, 57344))  # cvt.rn.satfinite.e5m2x2.f16x2
    same(out[4], sat.astype(ml_dtypes.float8_e5m2).astype(np.float16), "f16 product -> e5m2")


def k_print():
    """tl.device_print and tl.device_assert: the executed printf is refused by name."""
    try:
        run("triton_print", "print_kernel", 1, [np.arange(100, dtype=np.float32), 100])
    except PtxExecutionError as error:
        assert "vprintf (printf)" in str(error), error
        return
    raise AssertionError("a kernel calling printf ran")


def dot_case(name, dtype, out_dtype, k, tol):
    a = rng.standard_normal((64, k)).astype(np.float32).astype(dtype)
    b = rng.standard_normal((k, 64)).astype(np.float32).astype(dtype)
    out = run(name, "dot_kernel", 1, [a, b, np.zeros((64, 64), out_dtype)])
    np.testing.assert_allclose(
        out[2].astype(np.float64), a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol
    )


def k_dot_bf16():
    dot_case("triton_dot_bf16", bf16, np.float32, 16, 1e-5)


def k_dot_tf32():
    dot_case("triton_dot_tf32", np.float32, np.float32, 16, 2e-2)


def k_dot_f16acc():
    dot_case("triton_dot_f16acc", np.float16, np.float16, 16, 1e-2)


def mm_case(name, bm):
    m, n, k = 100, 72, 80
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float16)
    grid = -(-m // bm) * -(-n // bm)
    out = run(name, "matmul_kernel", grid, [a, b, c, m, n, k, k, n, n])
    np.testing.assert_allclose(
        out[2].astype(np.float64), a.astype(np.float64) @ b.astype(np.float64), rtol=3e-3, atol=3e-3
    )


def k_mm90s():
    mm_case("triton_matmul_sm90_small", 64)


def k_mm80():
    mm_case("triton_matmul_sm80", 64)


def k_scan_sort():
    x = rng.integers(-1000, 1000, (3, 128)).astype(np.int32)
    out = run("triton_scan_sort", "scan_sort_kernel", 3, [x, np.zeros_like(x), np.zeros_like(x)])
    np.testing.assert_array_equal(out[1], np.cumsum(x, 1))
    np.testing.assert_array_equal(out[2], np.sort(x, 1))


def philox(seed, offsets, rounds=10):
    m = 0xFFFFFFFF
    out = []
    for off in offsets:
        c0, c1, c2, c3 = int(off) & m, 0, 0, 0
        k0, k1 = seed & m, (seed >> 32) & m
        for _ in range(rounds):
            a0, a2 = c0, c2
            c0 = (((0xCD9E8D57 * a2) >> 32) ^ c1 ^ k0) & m
            c2 = (((0xD2511F53 * a0) >> 32) ^ c3 ^ k1) & m
            c1 = (0xCD9E8D57 * a2) & m
            c3 = (0xD2511F53 * a0) & m
            k0, k1 = (k0 + 0x9E3779B9) & m, (k1 + 0xBB67AE85) & m
        out.append(c0)
    return np.array(out, np.uint32)


def k_rand():
    out = run("triton_randint", "rand_kernel", 2, [np.zeros(500, np.int32), 1234, 500])
    np.testing.assert_array_equal(out[0].view(np.uint32), philox(1234, range(500)))


def small_dot(suffix, dtype, out_dtype, tolerance):
    """A 16 x 32 by 32 x 32 tl.dot in one warp, on mma.sync."""
    if dtype == np.int8:
        a, b = (rng.integers(-128, 128, shape).astype(np.int8) for shape in ((16, 32), (32, 32)))
    else:
        a, b = (rng.standard_normal(shape).astype(np.float32).astype(dtype) for shape in ((16, 32), (32, 32)))
    out = run("triton_dot_mma16" + suffix, "_dot_small", 1, [a, b, np.zeros((16, 32), out_dtype)])
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out[2].astype(np.float64), exact, rtol=tolerance, atol=tolerance)


def k_dot16():
    small_dot("", np.float16, np.float32, 1e-5)


def k_dot16_bf16():
    small_dot("_bf16", bf16, np.float32, 1e-5)


def k_dot16_tf32():  # tf32 keeps 10 mantissa bits of each element
    small_dot("_tf32", np.float32, np.float32, 2e-2)


def k_dot16_fp8():
    small_dot("_fp8", ml_dtypes.float8_e4m3fn, np.float32, 1e-5)


def k_dot16_i8():
    small_dot("_i8", np.int8, np.int32, 0)


def k_hints():
    """Cache modifiers and eviction policies (createpolicy, .L2::cache_hint, .cg/.cv/.wt/.cs) leave values alone."""
    n = 700
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = run("triton_cache_hints", "cache_hints_kernel", 3, [x, y, np.zeros(2 * n, np.float32), n])[2]
    np.testing.assert_array_equal(out[:n], x * y)
    np.testing.assert_array_equal(out[n:], x + y)


def k_misc():
    n = 300
    x64 = rng.integers(-(2**62), 2**62, n).astype(np.int64)
    xd = rng.standard_normal(n) * 3
    out = run(
        "triton_misc",
        "misc_kernel",
        3,
        [
            x64,
            xd,
            np.zeros(n, np.float32),
            np.zeros(n, np.float32),
            np.zeros(2 * n, np.int64),
            np.zeros(3 * n),
            np.zeros(16, np.int32),
            np.arange(8, dtype=np.int64) * 0,
            np.zeros(4, np.float32),
            np.zeros(2, np.float32),
            77,
            n,
        ],
    )
    ru, rn = out[2], out[3]
    assert (ru >= 0).all() and (ru < 1).all() and abs(ru.mean() - 0.5) < 0.1 and abs(rn.std() - 1) < 0.2
    q = np.sign(x64) * (np.abs(x64) // 1000003)
    r = np.fmod(x64, -77)
    np.testing.assert_array_equal(out[4][:n], q)
    np.testing.assert_array_equal(out[4][n:], r)
    np.testing.assert_array_equal(out[5][:n], np.sqrt(np.abs(xd)) + 1.0 / xd)
    np.testing.assert_array_equal(out[5][n : 2 * n], xd * xd - 1.0)
    np.testing.assert_allclose(out[5][2 * n :], np.exp(xd), rtol=1e-15)
    ref_hist = np.zeros(16, np.int64)
    for cta in range(3):  # each program counts its BLOCK lanes (masked-off lanes load other=1)
        lanes = np.arange(cta * 128, cta * 128 + 128)
        vals = np.where(lanes < n, x64[np.minimum(lanes, n - 1)], 1).astype(np.int32) & 15
        ref_hist += np.bincount(vals, minlength=16)
    np.testing.assert_array_equal(out[6], ref_hist)
    np.testing.assert_allclose(
        out[9], [xd[0::2].astype(np.float32).sum(), xd[1::2].astype(np.float32).sum()], rtol=1e-4
    )
    np.testing.assert_array_equal(out[7], [100, 0, 0, 0, 0, 0, 0, 0])  # only lane 0's compare (slot 0 == 0) held


def k_join():
    x = rng.standard_normal(64).astype(np.float32)
    y = rng.standard_normal(64).astype(np.float32)
    out = run("triton_join", "join_kernel", 1, [x, y, np.zeros(6 * 64, np.float32)])[2]
    np.testing.assert_array_equal(out[:128], np.stack([x, y], 1).ravel())
    np.testing.assert_array_equal(out[128:192], x * 2 + y * 3)
    np.testing.assert_array_equal(out[192:256], x)
    np.testing.assert_array_equal(out[256:], 1)


def k_tmareduce():
    dest = rng.standard_normal((32, 32)).astype(np.float32)
    x = rng.standard_normal((4, 32, 32)).astype(np.float32)
    want = dest.astype(np.float64) + x.astype(np.float64).sum(0)
    out = run(
        "triton_tma_reduce",
        "tma_reduce_kernel",
        4,
        [TensorMapArg.tiled(dest, box=(32, 32), swizzle=128), 32, 32, 32, 1, x],
    )
    np.testing.assert_allclose(out[0], want, rtol=1e-5, atol=1e-5)


def main() -> None:
    global OUT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="*", metavar="KERNEL", help=f"any of {', '.join(KERNELS)}")
    parser.add_argument("--out", type=Path, help="scratch folder (default: a temporary one)")
    options = parser.parse_args()
    names = options.kernels or list(KERNELS)
    unknown = sorted(set(names) - set(KERNELS))
    if unknown:
        parser.error(f"unknown kernel(s) {', '.join(unknown)}")
    with tempfile.TemporaryDirectory() as scratch:
        OUT = options.out or Path(scratch)
        (OUT / "out").mkdir(parents=True, exist_ok=True)
        compile_kernels(names)
        for name in names:
            start = time.process_time()
            try:
                with np.errstate(all="ignore"):  # the references overflow to inf where the kernels do
                    globals()["k_" + name]()
                verdict = "OK"
            except Exception as error:  # the report names each failure and goes on
                verdict = f"FAIL {type(error).__name__}: {str(error).splitlines()[0][:300]}"
            print(f"{name:12s} {time.process_time() - start:6.1f} s  {verdict}", flush=True)


if __name__ == "__main__":
    main()
