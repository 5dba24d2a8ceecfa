"""Triton 3.9 kernels of kinds gen.py-gen3.py do not cover (normalisations, scans, argmax, GEMM epilogues, FP8 and
int4 GEMMs, rotary embedding, spin locks, rounding conversions, math functions, attention backward), compiled for
sm_90a without a GPU: `cd generators && TRITON_DEFAULT_FP_FUSION=1 python gen4.py [NAME ...]` writes out/NAME.ptx."""
import os
import sys

import triton
import triton.language as tl
from gen_common import compile_one
from triton.language.extra import libdevice

os.makedirs("out", exist_ok=True)
PTXV = 85


@triton.jit
def rmsnorm_kernel(X, W, Y, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rms = tl.math.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(W + cols, mask=mask, other=0.0)
    tl.store(Y + row * stride + cols, (x * rms * w).to(tl.float16), mask=mask)


@triton.jit
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP_SIZE_M: tl.constexpr,
                             BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = (x - mean) * rstd
    wdy = w * dy
    xhat = tl.where(mask, xhat, 0.)
    wdy = tl.where(mask, wdy, 0.)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    dx = (wdy - (xhat * c1 + c2)) * rstd
    tl.store(DX + cols, dx, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = (dy).to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.debug_barrier()
    tl.atomic_xchg(Lock, 0)


@triton.jit
def masked_softmax_kernel(OUT, X, MASK, stride, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    keep = tl.load(MASK + row * stride + cols, mask=inside, other=0) != 0
    x = tl.load(X + row * stride + cols, mask=inside, other=0.0).to(tl.float32) * scale
    x = tl.where(keep & inside, x, -float("inf"))
    top = tl.max(x, axis=0)
    e = tl.where(keep & inside, tl.exp(x - top), 0.0)
    tl.store(OUT + row * stride + cols, (e / tl.sum(e, axis=0)).to(tl.float16), mask=inside)


@triton.jit
def _first_order(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b)


@triton.jit
def scan_kernel(X, A, CUM, REC, CMAX, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0)
    a = tl.load(A + row * n_cols + cols, mask=mask, other=1.0)
    tl.store(CUM + row * n_cols + cols, tl.cumsum(x, 0), mask=mask)
    _, h = tl.associative_scan((a, x), 0, _first_order)
    tl.store(REC + row * n_cols + cols, h, mask=mask)
    xi = tl.load(X + row * n_cols + cols, mask=mask, other=-float("inf"))
    tl.store(CMAX + row * n_cols + cols, tl.associative_scan(xi, 0, _maximum), mask=mask)


@triton.jit
def argmax_kernel(X, IMAX, IMIN, VMAX, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(X + rows[:, None] * n_cols + cols[None, :], mask=mask, other=-float("inf"))
    value, index = tl.max(x, axis=1, return_indices=True)
    tl.store(IMAX + rows, index, mask=rows < n_rows)
    tl.store(VMAX + rows, value, mask=rows < n_rows)
    y = tl.where(mask, x, float("inf"))
    tl.store(IMIN + rows, tl.argmin(y, axis=1), mask=rows < n_rows)


@triton.jit
def gemm_bias_gelu_kernel(A, B, BIAS, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                          TANH: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(A + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * N + rn[None, :], mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    acc += tl.load(BIAS + rn, mask=rn < N, other=0.0)[None, :]
    if TANH:
        out = 0.5 * acc * (1.0 + libdevice.tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)))
    else:
        out = 0.5 * acc * (1.0 + libdevice.erf(acc * 0.7071067811865476))
    tl.store(C + rm[:, None] * N + rn[None, :], out.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def fp8_gemm_kernel(A, B, SA, SB, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(A + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + rn[:, None] * K + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
        acc = tl.dot(a, b.T, acc)
    sa = tl.load(SA + rm, mask=rm < M, other=0.0)
    sb = tl.load(SB + rn, mask=rn < N, other=0.0)
    out = acc * sa[:, None] * sb[None, :]
    tl.store(C + rm[:, None] * N + rn[None, :], out.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def int4_gemm_kernel(A, BQ, SCALE, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # BQ: int8[K // 2, N], low nibble = row 2k, high nibble = row 2k + 1, signed 4-bit; SCALE: f16[N]
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K // BK):
        rk = k * BK + tl.arange(0, BK)
        a = tl.load(A + rm[:, None] * K + rk[None, :], mask=rm[:, None] < M, other=0.0)
        rq = k * (BK // 2) + tl.arange(0, BK // 2)
        q = tl.load(BQ + rq[:, None] * N + rn[None, :], mask=rn[None, :] < N, other=0)
        lo = (q << 4).to(tl.int8) >> 4
        hi = q >> 4
        b = tl.join(lo, hi).permute(0, 2, 1).reshape(BK, BN)
        acc = tl.dot(a, b.to(tl.float16), acc)
    s = tl.load(SCALE + rn, mask=rn < N, other=0.0).to(tl.float32)
    tl.store(C + rm[:, None] * N + rn[None, :], (acc * s[None, :]).to(tl.float16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def rotary_kernel(X, COS, SIN, OUT, seq, HALF: tl.constexpr, BLOCK_S: tl.constexpr):
    pid = tl.program_id(0)
    head = tl.program_id(1)
    rs = pid * BLOCK_S + tl.arange(0, BLOCK_S)
    rd = tl.arange(0, HALF)
    mask = rs[:, None] < seq
    base = X + head * seq * 2 * HALF + rs[:, None] * 2 * HALF + rd[None, :]
    x1 = tl.load(base, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + HALF, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(COS + rs[:, None] * HALF + rd[None, :], mask=mask, other=0.0)
    s = tl.load(SIN + rs[:, None] * HALF + rd[None, :], mask=mask, other=0.0)
    out = OUT + head * seq * 2 * HALF + rs[:, None] * 2 * HALF + rd[None, :]
    tl.store(out, (x1 * c - x2 * s).to(tl.bfloat16), mask=mask)
    tl.store(out + HALF, (x2 * c + x1 * s).to(tl.bfloat16), mask=mask)


@triton.jit
def spinlock_sum_kernel(X, SUM, COUNT, LOCK, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    part = tl.sum(tl.load(X + offs, mask=offs < n, other=0.0), axis=0)
    while tl.atomic_cas(LOCK, 0, 1, sem="acquire") == 1:
        pass
    # Every thread of the program reads SUM and one writes it: with a plain tl.store that write would race (by
    # the PTX memory model) with the other threads' reads, so it is an atomic (morally strong with them).
    total = tl.load(SUM, volatile=True)
    tl.atomic_xchg(SUM, total + part, sem="relaxed")
    tl.atomic_add(COUNT, 1, sem="relaxed")
    tl.atomic_xchg(LOCK, 0, sem="release")


@triton.jit
def convert_kernel(X, OUT_BF, OUT_H, OUT_F8, OUT_F8B, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.store(OUT_BF + offs, x.to(tl.bfloat16), mask=mask)
    tl.store(OUT_BF + n + offs, x.to(tl.bfloat16, fp_downcast_rounding="rtz"), mask=mask)
    tl.store(OUT_H + offs, x.to(tl.float16), mask=mask)
    tl.store(OUT_H + n + offs, x.to(tl.float16, fp_downcast_rounding="rtz"), mask=mask)
    tl.store(OUT_F8 + offs, x.to(tl.float8e4nv), mask=mask)
    tl.store(OUT_F8B + offs, x.to(tl.float8e5), mask=mask)


@triton.jit
def math2_kernel(X, Y, OUT, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=1.0)
    y = tl.load(Y + offs, mask=mask, other=1.0)
    ax = tl.abs(x) + 0.125
    tl.store(OUT + offs, tl.math.rsqrt(ax), mask=mask)
    tl.store(OUT + n + offs, tl.math.exp2(x), mask=mask)
    tl.store(OUT + 2 * n + offs, tl.math.log2(ax), mask=mask)
    tl.store(OUT + 3 * n + offs, tl.math.sin(x), mask=mask)
    tl.store(OUT + 4 * n + offs, tl.math.cos(x), mask=mask)
    tl.store(OUT + 5 * n + offs, tl.math.div_rn(x, y), mask=mask)
    tl.store(OUT + 6 * n + offs, tl.math.fma(x, y, ax), mask=mask)
    tl.store(OUT + 7 * n + offs, tl.math.sqrt_rn(ax), mask=mask)
    tl.store(OUT + 8 * n + offs, x / y, mask=mask)
    tl.store(OUT + 9 * n + offs, tl.sqrt(ax), mask=mask)
    tl.store(OUT + 10 * n + offs, libdevice.exp(x), mask=mask)
    tl.store(OUT + 11 * n + offs, libdevice.log(ax), mask=mask)
    tl.store(OUT + 12 * n + offs, tl.sigmoid(x), mask=mask)
    tl.store(OUT + 13 * n + offs, libdevice.rint(x * 3.0), mask=mask)


@triton.jit
def _attn_bwd_preprocess(O, DO, Delta, N_CTX, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    off_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_hz = tl.program_id(1)
    off_n = tl.arange(0, HEAD_DIM)
    o = tl.load(O + off_hz * HEAD_DIM * N_CTX + off_m[:, None] * HEAD_DIM + off_n[None, :])
    do = tl.load(DO + off_hz * HEAD_DIM * N_CTX + off_m[:, None] * HEAD_DIM + off_n[None, :]).to(tl.float32)
    tl.store(Delta + off_hz * N_CTX + off_m, tl.sum(o * do, axis=1))


@triton.jit
def _attn_bwd_dkdv(dk, dv, Q, k, v, DO, M, D, stride_tok, stride_d, BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr,
                   HEAD_DIM: tl.constexpr, start_n, start_m, num_steps, MASK: tl.constexpr):
    offs_m = start_m + tl.arange(0, BLOCK_M1)
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    offs_k = tl.arange(0, HEAD_DIM)
    qT_ptrs = Q + offs_m[None, :] * stride_tok + offs_k[:, None] * stride_d
    do_ptrs = DO + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d
    curr_m = start_m
    for _ in range(num_steps):
        qT = tl.load(qT_ptrs)
        offs_m = curr_m + tl.arange(0, BLOCK_M1)
        m = tl.load(M + offs_m)
        pT = tl.math.exp2(tl.dot(k, qT) - m[None, :])
        if MASK:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        do = tl.load(do_ptrs)
        dv += tl.dot(pT.to(tl.float16), do)
        Di = tl.load(D + offs_m)
        dpT = tl.dot(v, tl.trans(do)).to(tl.float32)
        dsT = (pT * (dpT - Di[None, :])).to(tl.float16)
        dk += tl.dot(dsT, tl.trans(qT))
        curr_m += BLOCK_M1
        qT_ptrs += BLOCK_M1 * stride_tok
        do_ptrs += BLOCK_M1 * stride_tok
    return dk, dv


@triton.jit
def _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
                 HEAD_DIM: tl.constexpr, start_m, start_n, num_steps, MASK: tl.constexpr):
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    offs_n = start_n + tl.arange(0, BLOCK_N2)
    offs_k = tl.arange(0, HEAD_DIM)
    kT_ptrs = K + offs_n[None, :] * stride_tok + offs_k[:, None] * stride_d
    vT_ptrs = V + offs_n[None, :] * stride_tok + offs_k[:, None] * stride_d
    Di = tl.load(D + offs_m)
    curr_n = start_n
    for _ in range(num_steps):
        kT = tl.load(kT_ptrs)
        vT = tl.load(vT_ptrs)
        p = tl.math.exp2(tl.dot(q, kT) - m)
        if MASK:
            offs_n = curr_n + tl.arange(0, BLOCK_N2)
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        dp = tl.dot(do, vT).to(tl.float32)
        ds = (p * (dp - Di[:, None])).to(tl.float16)
        dq += tl.dot(ds, tl.trans(kT))
        curr_n += BLOCK_N2
        kT_ptrs += BLOCK_N2 * stride_tok
        vT_ptrs += BLOCK_N2 * stride_tok
    return dq


@triton.jit
def _attn_bwd(Q, K, V, sm_scale, DO, DQ, DK, DV, M, D, stride_z, stride_h, stride_tok, stride_d, H, N_CTX,
              BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
              BLK_SLICE_FACTOR: tl.constexpr, HEAD_DIM: tl.constexpr):
    # Tutorial 06's causal backward: K arrives scaled by sm_scale / ln 2, M is the forward's log2-sum-exp.
    LN2: tl.constexpr = 0.6931471824645996
    bhid = tl.program_id(2)
    off_chz = (bhid * N_CTX).to(tl.int64)
    adj = (stride_h * (bhid % H) + stride_z * (bhid // H)).to(tl.int64)
    pid = tl.program_id(0)
    Q += adj
    K += adj
    V += adj
    DO += adj
    DQ += adj
    DK += adj
    DV += adj
    M += off_chz
    D += off_chz
    offs_k = tl.arange(0, HEAD_DIM)
    start_n = pid * BLOCK_N1
    start_m = start_n
    MASK_BLOCK_M1: tl.constexpr = BLOCK_M1 // BLK_SLICE_FACTOR
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    dv = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    dk = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    k = tl.load(K + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d)
    v = tl.load(V + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d)
    num_steps = BLOCK_N1 // MASK_BLOCK_M1
    dk, dv = _attn_bwd_dkdv(dk, dv, Q, k, v, DO, M, D, stride_tok, stride_d, MASK_BLOCK_M1, BLOCK_N1, HEAD_DIM,
                            start_n, start_m, num_steps, MASK=True)
    start_m += num_steps * MASK_BLOCK_M1
    num_steps = (N_CTX - start_m) // BLOCK_M1
    dk, dv = _attn_bwd_dkdv(dk, dv, Q, k, v, DO, M, D, stride_tok, stride_d, BLOCK_M1, BLOCK_N1, HEAD_DIM,
                            start_n, start_m, num_steps, MASK=False)
    tl.store(DV + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d, dv)
    dk *= sm_scale
    tl.store(DK + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d, dk)
    start_m = pid * BLOCK_M2
    end_n = start_m + BLOCK_M2
    MASK_BLOCK_N2: tl.constexpr = BLOCK_N2 // BLK_SLICE_FACTOR
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    q = tl.load(Q + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d)
    dq = tl.zeros([BLOCK_M2, HEAD_DIM], dtype=tl.float32)
    do = tl.load(DO + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d)
    m = tl.load(M + offs_m)[:, None]
    num_steps = BLOCK_M2 // MASK_BLOCK_N2
    dq = _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, BLOCK_M2, MASK_BLOCK_N2, HEAD_DIM, start_m,
                      end_n - num_steps * MASK_BLOCK_N2, num_steps, MASK=True)
    end_n -= num_steps * MASK_BLOCK_N2
    num_steps = end_n // BLOCK_N2
    dq = _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, BLOCK_M2, BLOCK_N2, HEAD_DIM, start_m,
                      end_n - num_steps * BLOCK_N2, num_steps, MASK=False)
    dq *= LN2
    tl.store(DQ + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d, dq)


@triton.jit
def atomics2_kernel(X16, XB, XD, XF, ACC16, ACCB, ACCD, FMAX, FMIN, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    slot = offs % 4
    tl.atomic_add(ACC16 + slot, tl.load(X16 + offs, mask=mask, other=0.0), mask=mask)
    tl.atomic_add(ACCB + slot, tl.load(XB + offs, mask=mask, other=0.0), mask=mask)
    tl.atomic_add(ACCD + slot, tl.load(XD + offs, mask=mask, other=0.0), mask=mask)
    x = tl.load(XF + offs, mask=mask, other=0.0)
    tl.atomic_max(FMAX + slot, x, mask=mask)
    tl.atomic_min(FMIN + slot, x, mask=mask)


@triton.jit
def _welford(m1, s1, c1, m2, s2, c2):
    c = c1 + c2
    w = tl.where(c == 0, 0.0, c2 / tl.where(c == 0, 1.0, c))
    d = m2 - m1
    return m1 + d * w, s1 + s2 + d * d * c1 * w, c


@triton.jit
def intmath_kernel(X, Y, F, OUT, FOUT, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0)
    y = tl.load(Y + offs, mask=mask, other=1)
    f = tl.load(F + offs, mask=mask, other=1.0)
    tl.store(OUT + offs, libdevice.clz(x), mask=mask)
    tl.store(OUT + n + offs, libdevice.popc(x), mask=mask)
    tl.store(OUT + 2 * n + offs, libdevice.brev(x), mask=mask)
    tl.store(OUT + 3 * n + offs, libdevice.ffs(x), mask=mask)
    tl.store(OUT + 4 * n + offs, libdevice.byte_perm(x, y, 0x5140), mask=mask)
    tl.store(OUT + 5 * n + offs, libdevice.mulhi(x, y), mask=mask)
    tl.store(OUT + 6 * n + offs, libdevice.hadd(x, y), mask=mask)
    tl.store(OUT + 7 * n + offs, libdevice.ilogb(f), mask=mask)
    tl.store(OUT + 8 * n + offs, libdevice.signbit(f), mask=mask)
    tl.store(OUT + 9 * n + offs, libdevice.isnan(f).to(tl.int32) + 2 * libdevice.isinf(f).to(tl.int32), mask=mask)
    tl.store(FOUT + offs, libdevice.copysign(f, x.to(tl.float32)), mask=mask)
    tl.store(FOUT + n + offs, libdevice.ldexp(f, y % 9), mask=mask)
    tl.store(FOUT + 2 * n + offs, libdevice.fmod(f, 1.5), mask=mask)
    tl.store(FOUT + 3 * n + offs, libdevice.nextafter(f, 0.0), mask=mask)
    tl.store(FOUT + 4 * n + offs, libdevice.fast_expf(f), mask=mask)
    tl.store(FOUT + 5 * n + offs, libdevice.tanh(f), mask=mask)
    tl.store(FOUT + 6 * n + offs, libdevice.pow(tl.abs(f), 2.5), mask=mask)
    tl.store(FOUT + 7 * n + offs, tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [f], dtype=tl.float32,
                                                             is_pure=True, pack=1), mask=mask)
    tl.store(FOUT + 8 * n + offs, tl.clamp(f, -0.5, 0.75), mask=mask)


@triton.jit
def welford_kernel(X, MEAN, VAR, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0)
    mean, m2, count = tl.reduce((x, tl.zeros_like(x), mask.to(tl.float32)), 0, _welford)
    tl.store(MEAN + row, mean)
    tl.store(VAR + row, m2 / count)


@triton.jit
def gather_flip_kernel(X, IDX, OUT, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + row * BLOCK + offs)
    idx = tl.load(IDX + row * BLOCK + offs)
    tl.store(OUT + row * BLOCK + offs, tl.gather(x, idx, 0))
    tl.store(OUT + (tl.num_programs(0) + row) * BLOCK + offs, tl.flip(x, 0))
    tl.store(OUT + (2 * tl.num_programs(0) + row) * BLOCK + offs, tl.sort(x, 0, descending=True))


@triton.jit
def fp8_upcast_kernel(X8, X5, OUT, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(X8 + offs, mask=mask, other=0.0)
    b = tl.load(X5 + offs, mask=mask, other=0.0)
    tl.store(OUT + offs, a.to(tl.float16), mask=mask)
    tl.store(OUT + n + offs, b.to(tl.float16), mask=mask)
    tl.store(OUT + 2 * n + offs, a.to(tl.bfloat16).to(tl.float16), mask=mask)
    tl.store(OUT + 3 * n + offs, a.to(tl.float32).to(tl.float16), mask=mask)
    tl.store(OUT + 4 * n + offs, (a.to(tl.float16) * b.to(tl.float16)).to(tl.float8e5).to(tl.float16), mask=mask)


@triton.jit
def print_kernel(X, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    tl.device_assert(x >= 0, "negative")
    tl.device_print("x", x)



@triton.jit
def _dot_small(A, B, C, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(A + rm[:, None] * BK + rk[None, :])
    b = tl.load(B + rk[:, None] * BN + rn[None, :])
    tl.store(C + rm[:, None] * BN + rn[None, :], tl.dot(a, b))



@triton.jit
def cache_hints_kernel(X, Y, OUT, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0, eviction_policy="evict_last")
    y = tl.load(Y + offs, mask=mask, other=0.0, cache_modifier=".cg")
    w = tl.load(X + offs, mask=mask, other=0.0, eviction_policy="evict_first")
    z = tl.load(Y + offs, mask=mask, other=0.0, cache_modifier=".cv")
    tl.store(OUT + offs, x * y, mask=mask, cache_modifier=".wt")
    tl.store(OUT + n + offs, w + z, mask=mask, cache_modifier=".cs")



@triton.jit
def misc_kernel(X64, XD, RU, RN, QR, DOUT, HIST, CAS64, XCHG, ACC, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(RU + offs, tl.rand(seed, offs), mask=mask)
    tl.store(RN + offs, tl.randn(seed, offs), mask=mask)
    a = tl.load(X64 + offs, mask=mask, other=1)
    tl.store(QR + offs, a // 1000003, mask=mask)
    tl.store(QR + n + offs, a % -77, mask=mask)
    d = tl.load(XD + offs, mask=mask, other=1.0)
    tl.store(DOUT + offs, tl.sqrt(tl.abs(d)) + 1.0 / d, mask=mask)
    tl.store(DOUT + n + offs, tl.math.fma(d, d, -1.0), mask=mask)
    tl.store(DOUT + 2 * n + offs, tl.exp(d), mask=mask)
    h = tl.histogram(a.to(tl.int32) & 15, 16)
    tl.atomic_add(HIST + tl.arange(0, 16), h, sem="relaxed", scope="gpu")
    tl.atomic_cas(CAS64 + offs % 8, offs.to(tl.int64) % 8, offs.to(tl.int64) + 100, sem="acq_rel", scope="cta")
    tl.atomic_xchg(XCHG + offs % 4, d.to(tl.float32), mask=mask, sem="relaxed", scope="sys")
    tl.atomic_add(ACC + offs % 2, d.to(tl.float32), mask=mask, sem="release", scope="gpu")


@triton.jit
def join_kernel(X, Y, OUT, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    y = tl.load(Y + offs)
    inter = tl.interleave(x, y)
    tl.store(OUT + tl.arange(0, 2 * BLOCK), inter)
    lo, hi = tl.split(tl.join(x * 2, y * 3))
    tl.store(OUT + 2 * BLOCK + offs, lo + hi)
    z = tl.reshape(x, (BLOCK // 16, 16))
    tl.store(OUT + 3 * BLOCK + offs, tl.reshape(tl.trans(tl.trans(z) * 1.0), (BLOCK,)))
    tl.store(OUT + 4 * BLOCK + tl.arange(0, 2 * BLOCK), tl.cat(x, y, can_reorder=True) * 0 + 1)


@triton.jit
def tma_reduce_kernel(desc, X, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    x = tl.load(X + pid * BM * BN + rm[:, None] * BN + rn[None, :])
    desc.atomic_add([0, 0], x)


which = sys.argv[1:]


def want(name):
    return not which or name in which


if want("rmsnorm"):
    compile_one(rmsnorm_kernel, {"X": "*fp16", "W": "*fp32", "Y": "*fp16", "stride": "i32", "N": "i32", "eps": "fp32",
                                 "BLOCK": "constexpr"}, {"BLOCK": 256}, 90, "triton_rmsnorm",
                divisible=("X", "W", "Y", "stride"), num_warps=4, ptx_version=PTXV)
if want("ln_bwd"):
    compile_one(_layer_norm_bwd_dx_fused, {"DX": "*fp32", "DY": "*fp32", "DW": "*fp32", "DB": "*fp32", "X": "*fp32",
                "W": "*fp32", "Mean": "*fp32", "Rstd": "*fp32", "Lock": "*i32", "stride": "i32", "N": "i32",
                "GROUP_SIZE_M": "constexpr", "BLOCK_SIZE_N": "constexpr"}, {"GROUP_SIZE_M": 4, "BLOCK_SIZE_N": 128}, 90,
                "triton_layer_norm_bwd", divisible=("DX", "DY", "DW", "DB", "X", "W", "Mean", "Rstd", "Lock", "stride"),
                num_warps=4, ptx_version=PTXV)
if want("msoftmax"):
    compile_one(masked_softmax_kernel, {"OUT": "*fp16", "X": "*fp16", "MASK": "*i8", "stride": "i32", "n_cols": "i32",
                "scale": "fp32", "BLOCK": "constexpr"}, {"BLOCK": 128}, 90, "triton_masked_softmax",
                divisible=("OUT", "X", "MASK", "stride"), num_warps=4, ptx_version=PTXV)
if want("scan"):
    compile_one(scan_kernel, {"X": "*fp32", "A": "*fp32", "CUM": "*fp32", "REC": "*fp32", "CMAX": "*fp32",
                "n_cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256}, 90, "triton_scan",
                num_warps=4, ptx_version=PTXV)
if want("argmax"):
    compile_one(argmax_kernel, {"X": "*fp32", "IMAX": "*i32", "IMIN": "*i32", "VMAX": "*fp32", "n_rows": "i32",
                "n_cols": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}, {"BLOCK_M": 4, "BLOCK_N": 128}, 90,
                "triton_argmax", num_warps=4, ptx_version=PTXV)
for tanh in (False, True):
    name = "gelu_tanh" if tanh else "gelu"
    if want(name):
        compile_one(gemm_bias_gelu_kernel, {"A": "*fp16", "B": "*fp16", "BIAS": "*fp32", "C": "*fp16", "M": "i32",
                    "N": "i32", "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "TANH": "constexpr"},
                    {"BM": 64, "BN": 64, "BK": 32, "TANH": tanh}, 90, f"triton_gemm_{name}",
                    divisible=("A", "B", "BIAS", "C"), num_warps=4, num_stages=2, ptx_version=PTXV)
if want("fp8gemm"):
    compile_one(fp8_gemm_kernel, {"A": "*fp8e4nv", "B": "*fp8e4nv", "SA": "*fp32", "SB": "*fp32", "C": "*bf16",
                "M": "i32", "N": "i32", "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
                {"BM": 64, "BN": 64, "BK": 64}, 90, "triton_fp8_gemm", divisible=("A", "B", "SA", "SB", "C", "K"),
                num_warps=4, num_stages=2, ptx_version=PTXV)
if want("int4gemm"):
    compile_one(int4_gemm_kernel, {"A": "*fp16", "BQ": "*i8", "SCALE": "*fp16", "C": "*fp16", "M": "i32", "N": "i32",
                "K": "i32", "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}, {"BM": 64, "BN": 64, "BK": 32},
                90, "triton_int4_gemm", divisible=("A", "BQ", "SCALE", "C", "N", "K"), num_warps=4, num_stages=2,
                ptx_version=PTXV)
if want("rotary"):
    compile_one(rotary_kernel, {"X": "*bf16", "COS": "*fp32", "SIN": "*fp32", "OUT": "*bf16", "seq": "i32",
                "HALF": "constexpr", "BLOCK_S": "constexpr"}, {"HALF": 32, "BLOCK_S": 16}, 90, "triton_rotary",
                divisible=("X", "COS", "SIN", "OUT"), num_warps=4, ptx_version=PTXV)
if want("spinlock"):
    compile_one(spinlock_sum_kernel, {"X": "*fp32", "SUM": "*fp32", "COUNT": "*i32", "LOCK": "*i32", "n": "i32",
                "BLOCK": "constexpr"}, {"BLOCK": 256}, 90, "triton_spinlock", divisible=("X",), num_warps=4,
                ptx_version=PTXV)
if want("convert"):
    compile_one(convert_kernel, {"X": "*fp32", "OUT_BF": "*bf16", "OUT_H": "*fp16", "OUT_F8": "*fp8e4nv",
                "OUT_F8B": "*fp8e5", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 256}, 90, "triton_convert",
                divisible=("X", "OUT_BF", "OUT_H", "OUT_F8", "OUT_F8B"), num_warps=4, ptx_version=PTXV)
if want("math2"):
    compile_one(math2_kernel, {"X": "*fp32", "Y": "*fp32", "OUT": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 256}, 90, "triton_math2", divisible=("X", "Y", "OUT"), num_warps=4, ptx_version=PTXV)
if want("attn_bwd"):
    compile_one(_attn_bwd_preprocess, {"O": "*fp16", "DO": "*fp16", "Delta": "*fp32", "N_CTX": "i32",
                "BLOCK_M": "constexpr", "HEAD_DIM": "constexpr"}, {"BLOCK_M": 64, "HEAD_DIM": 64}, 90,
                "triton_attention_bwd_pre", divisible=("O", "DO", "Delta", "N_CTX"), num_warps=4, ptx_version=PTXV)
    sig = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "sm_scale": "fp32", "DO": "*fp16", "DQ": "*fp32", "DK": "*fp16",
           "DV": "*fp16", "M": "*fp32", "D": "*fp32", "stride_z": "i32", "stride_h": "i32", "stride_tok": "i32",
           "stride_d": "constexpr", "H": "i32", "N_CTX": "i32", **{n: "constexpr" for n in (
               "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2", "BLK_SLICE_FACTOR", "HEAD_DIM")}}
    compile_one(_attn_bwd, sig, {"stride_d": 1, "BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 32,
                "BLK_SLICE_FACTOR": 2, "HEAD_DIM": 64}, 90, "triton_attention_bwd",
                divisible=[n for n, t in sig.items() if t in ("*fp16", "*fp32") or n.startswith("stride_") and t == "i32"]
                + ["N_CTX"], num_warps=4, num_stages=2, ptx_version=PTXV)
if want("atomics2"):
    compile_one(atomics2_kernel, {"X16": "*fp16", "XB": "*bf16", "XD": "*fp64", "XF": "*fp32", "ACC16": "*fp16",
                "ACCB": "*bf16", "ACCD": "*fp64", "FMAX": "*fp32", "FMIN": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 256}, 90, "triton_atomics2", num_warps=4, ptx_version=PTXV)
if want("intmath"):
    compile_one(intmath_kernel, {"X": "*i32", "Y": "*i32", "F": "*fp32", "OUT": "*i32", "FOUT": "*fp32", "n": "i32",
                "BLOCK": "constexpr"}, {"BLOCK": 256}, 90, "triton_intmath", divisible=("X", "Y", "F", "OUT", "FOUT"),
                num_warps=4, ptx_version=PTXV)
if want("welford"):
    compile_one(welford_kernel, {"X": "*fp32", "MEAN": "*fp32", "VAR": "*fp32", "n_cols": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 512}, 90, "triton_welford", num_warps=4, ptx_version=PTXV)
if want("gather"):
    compile_one(gather_flip_kernel, {"X": "*fp32", "IDX": "*i32", "OUT": "*fp32", "BLOCK": "constexpr"},
                {"BLOCK": 128}, 90, "triton_gather_flip", divisible=("X", "IDX", "OUT"), num_warps=4, ptx_version=PTXV)
if want("fp8up"):
    compile_one(fp8_upcast_kernel, {"X8": "*fp8e4nv", "X5": "*fp8e5", "OUT": "*fp16", "n": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 256}, 90, "triton_fp8_upcast", divisible=("X8", "X5", "OUT"), num_warps=4, ptx_version=PTXV)
if want("print"):
    compile_one(print_kernel, {"X": "*fp32", "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}, 90, "triton_print",
                num_warps=4, ptx_version=PTXV, debug=True)
# M = 16 per program: below a warpgroup's 64 rows Triton picks mma.sync (MMAv2) on sm_90: m16n8k16 for f16 and bf16
# (and fp8, converted to f16), m16n8k8 for tf32, m16n8k32 .satfinite for int8
for name, element, out in (("dot16", "fp16", "fp32"), ("dot16_bf16", "bf16", "fp32"), ("dot16_tf32", "fp32", "fp32"),
                           ("dot16_fp8", "fp8e4nv", "fp32"), ("dot16_i8", "i8", "i32")):
    if want(name):
        compile_one(_dot_small, {"A": f"*{element}", "B": f"*{element}", "C": f"*{out}", "BM": "constexpr",
                    "BN": "constexpr", "BK": "constexpr"}, {"BM": 16, "BN": 32, "BK": 32}, 90,
                    "triton_dot_mma16" + name[5:], divisible=("A", "B", "C"), num_warps=1, ptx_version=PTXV)
if want("hints"):
    compile_one(cache_hints_kernel, {"X": "*fp32", "Y": "*fp32", "OUT": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 256}, 90, "triton_cache_hints", divisible=("X", "Y", "OUT"), num_warps=4, ptx_version=PTXV)
if want("misc"):
    compile_one(misc_kernel, {"X64": "*i64", "XD": "*fp64", "RU": "*fp32", "RN": "*fp32", "QR": "*i64",
                "DOUT": "*fp64", "HIST": "*i32", "CAS64": "*i64", "XCHG": "*fp32", "ACC": "*fp32", "seed": "i32",
                "n": "i32", "BLOCK": "constexpr"}, {"BLOCK": 128}, 90, "triton_misc", num_warps=4, ptx_version=PTXV)
if want("join"):
    compile_one(join_kernel, {"X": "*fp32", "Y": "*fp32", "OUT": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 64}, 90,
                "triton_join", divisible=("X", "Y", "OUT"), num_warps=4, ptx_version=PTXV)
if want("tmareduce"):
    compile_one(tma_reduce_kernel, {"desc": "tensordesc<fp32[32, 32]>", "X": "*fp32", "BM": "constexpr",
                "BN": "constexpr"}, {"BM": 32, "BN": 32}, 90, "triton_tma_reduce", divisible=("X",), num_warps=4,
                ptx_version=87)
