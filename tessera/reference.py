"""NumPy references for the kernels Tessera builds, and the tolerance rule that compares against them.

Conventions (the same as the kernels'):
- attention inputs are [batch, heads, seq, head_dim]; `scale` defaults to 1/sqrt(head_dim);
- causal masking is aligned bottom-right (FlashAttention >= 2.1): query i sees keys 0 .. i + seq_k - seq_q,
  so with seq_q = 1 the single query sees the whole cache; a query row that sees no key gives zeros.

Tolerance (DESIGN.md section 9, in the FlashAttention style): a kernel's error against the fp64 reference
computed from the same rounded inputs may be at most twice the error of a straightforward computation in
the kernel's precision, plus a small absolute term. With an additive bias (rounded to the kernel's type, as
the kernel reads it) the rule is the same: the bias enters the reference in float64 and the straightforward
computation as PyTorch's eager attention adds it, to the rounded scores, rounding the sum.

Bias conventions (the kernels' and the float64 reference's alike): a -inf bias entry hides its key, and a row
that sees no key gives O = 0 and LSE = -inf (FlashAttention's convention; PyTorch's eager softmax gives NaN
there); a +inf entry makes its row NaN. A finite bias stays finite: the kernels hold it as Bias / scale in
f32, saturated at +-V (`tessera.numerics.bias_bound(scale)`, 2^127 for scale < 1.38), so a bias beyond
+-V scale (bf16's lowest, -3.39e38, a common mask fill, with scale 1/8) is taken as +-V scale, and the float64
reference takes it so too (`saturate_bias`). O does not see the difference where such fills are all equal
(a row whose every key has the fill averages V uniformly, as PyTorch's eager attention does; beside any
other key they weigh 0); the LSE of such a row is -V scale + ln(keys) instead of fill + ln(keys). The
straightforward computation is PyTorch's and keeps the bias as given.

The attention backward (`attention_backward`, `check_attention_backward`) follows the same rule for each of
dQ, dK and dV: its error against the float64 analytic gradient (O recomputed in float64 from the rounded
q, k, v) may be at most twice the error of the straightforward same-precision computation
(`attention_backward_same_precision`: f32 S and softmax, dPsum = rowsum(dO * O) in f32 from the forward's
rounded O, P and dS rounded to bf16/f16 where the kernel rounds them, f32 accumulation), plus
BACKWARD_ABSOLUTE_TOLERANCE x max(1, max |reference gradient|).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.numerics import F32, bias_bound, round_to

ABSOLUTE_TOLERANCE = 1e-3
"""The small absolute term of the attention tolerance (outputs are O(1): convex combinations of V rows)."""


def causal_visible(seq_q: int, seq_k: int) -> np.ndarray:
    """[seq_q, seq_k] mask of the keys each query sees under the bottom-right causal convention."""
    query = np.arange(seq_q)[:, None]
    key = np.arange(seq_k)[None, :]
    return key <= query + (seq_k - seq_q)


def _scores(q: np.ndarray, k: np.ndarray, scale: float, dtype) -> np.ndarray:
    """scale * Q K^T in `dtype` through BLAS (np.einsum loops in C without BLAS: 7x slower at 1000 x 1000)."""
    return np.matmul(q.astype(dtype), np.swapaxes(k.astype(dtype), -1, -2)) * dtype(scale)


def _add_bias(scores: np.ndarray, bias) -> np.ndarray:
    """scores + bias, the bias [batch, heads, seq_q, seq_k] or with 1 in the batch and/or heads dimension
    (broadcast, as PyTorch's SDPA broadcasts attn_mask); scores unchanged when bias is None."""
    return scores if bias is None else scores + np.asarray(bias).astype(scores.dtype)


def saturate_bias(bias, scale: float):
    """The bias as the attention kernels compute with it (module docstring): finite entries clipped to
    [-V scale, V scale] with V = `bias_bound(scale)`, +-inf and NaN unchanged; None stays None. float64."""
    if bias is None:
        return None
    bias = np.asarray(bias).astype(np.float64)
    limit = bias_bound(scale) * scale
    return np.where(np.isfinite(bias), np.clip(bias, -limit, limit), bias)


def _softmax_rows(scores: np.ndarray, visible: np.ndarray | None) -> np.ndarray:
    """softmax over the last axis of `scores` where `visible`; a row that sees nothing (or sums to no positive
    number) is zeros. One new array, worked on in place."""
    if visible is not None:
        scores = np.where(visible, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max[np.isneginf(row_max)] = 0
    weights = np.subtract(scores, row_max, out=scores if visible is not None else None)
    np.exp(weights, out=weights)
    total = weights.sum(axis=-1, keepdims=True)
    positive = total > 0
    np.divide(weights, total, out=weights, where=positive)
    weights[~positive[..., 0]] = 0
    return weights


def attention(q, k, v, causal: bool = False, scale: float | None = None, bias=None) -> np.ndarray:
    """softmax(Q K^T * scale [+ bias] [+ causal mask]) V in float64 on the given (already rounded) inputs; `bias`
    is [batch, heads, seq_q, seq_k] or broadcast over batch and/or heads (size 1 there), and saturated as the
    kernels saturate it (`saturate_bias`; a row that sees no key gives zeros)."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    visible = causal_visible(q.shape[2], k.shape[2]) if causal else None
    scores = _add_bias(_scores(q, k, scale, np.float64), saturate_bias(bias, scale))
    return np.matmul(_softmax_rows(scores, visible), v)


def attention_same_precision(q, k, v, dtype, causal: bool = False, scale: float | None = None,
                             bias=None) -> np.ndarray:
    """The straightforward computation in the kernel's precision: scores rounded to `dtype` (and again after
    adding the bias), softmax in f32 rounded to `dtype`, P V accumulated in f32 and rounded to `dtype` (what
    PyTorch's eager attention does)."""
    q, k, v = (np.asarray(x).astype(F32) for x in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    visible = causal_visible(q.shape[2], k.shape[2]) if causal else None
    scores = round_to(_scores(q, k, scale, np.float32), dtype).astype(F32)
    if bias is not None:
        scores = round_to(_add_bias(scores, bias), dtype).astype(F32)
    p = round_to(_softmax_rows(scores, visible).astype(F32), dtype).astype(F32)
    return round_to(np.matmul(p, v), dtype)


LSE_TOLERANCE = 1e-4
"""The bound on |LSE - float64 logsumexp| (issues 14 and 15). The kernels' own error is far below it, for O(1)
inputs and any sequence length the launch limits allow: f32 scores (a D-term f32 dot product, about
D 2^-24 |q| |k| scale), ex2.approx in each term of the row sum (2 ulp relative, so ~2^-23 on ln l), and the log
through lg2.approx.f32, whose error the PTX ISA bounds by 2^-22 absolute for l in (0.5, 2) and 2^-22 relative
elsewhere (`tessera.sm90.approx`): with 1 <= l <= seq_k (the row maximum contributes 1) that is at most
2^-22 max(1, log2 seq_k) ln 2, about 5e-6 at seq_k = 2^31; the simulators compute the
correctly rounded log2, so this part of the bound is analytical. bf16/f16 rounding of the inputs is no error
here: the reference reads the same rounded inputs."""


LSE_F32_ROUNDING = 2.0**-23
"""The relative part of `check_lse`'s rule: two f32 roundings (of m and of m + ln l) of the LSE's magnitude."""


def check_lse(lse, q, k, dtype, causal: bool = False, scale: float | None = None, bias=None) -> Comparison:
    """Compare an LSE output ([batch, heads, seq_q], or with a trailing 1) with `attention_lse` on the inputs
    rounded to `dtype`: within `LSE_TOLERANCE` where the reference is finite, beyond the f32 rounding of the
    LSE's own magnitude (2^-23 |LSE|: the row maximum and the sum m + ln l are f32; it matters only for a row
    of huge bias fills, e.g. -V scale + ln(keys), `saturate_bias`), and exactly -inf where it is -inf (a row
    that sees no key); anything else (NaN, a finite value for an empty row) is an infinite error."""
    q, k = (round_to(np.asarray(x), dtype) for x in (q, k))
    ref = attention_lse(q, k, causal, scale, None if bias is None else round_to(np.asarray(bias), dtype))
    out = np.asarray(lse, np.float64)
    out = out.reshape(out.shape[:-1]) if out.shape == ref.shape + (1,) else out
    if out.shape != ref.shape:
        return Comparison(float("inf"), LSE_TOLERANCE)
    empty = np.isneginf(ref)
    if not np.array_equal(np.isneginf(out), empty):
        return Comparison(float("inf"), LSE_TOLERANCE)
    error = np.nan_to_num(np.abs(out[~empty] - ref[~empty]) - LSE_F32_ROUNDING * np.abs(ref[~empty]), nan=np.inf)
    return Comparison(float(error.max()) if error.size else 0.0, LSE_TOLERANCE)


def gemm(a, b) -> np.ndarray:
    """A @ B in float64 on the given (already rounded) inputs."""
    return np.matmul(np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))


@dataclass(frozen=True)
class Comparison:
    """The outcome of checking a kernel's output against its reference."""

    max_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return bool(self.max_error <= self.tolerance)

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "MISMATCH"
        return f"max error {self.max_error:.3e}, tolerance {self.tolerance:.3e}: {verdict}"


def _max_error(out, ref) -> float:
    out = np.asarray(out).astype(np.float64)
    if out.shape != ref.shape:
        return float("inf")
    if out.size == 0:
        return 0.0
    return float(np.nan_to_num(np.abs(out - ref), nan=np.inf).max())


def check_attention(out, q, k, v, dtype, causal: bool = False, scale: float | None = None,
                    bias=None) -> Comparison:
    """Compare an attention output with the fp64 reference under the tolerance rule (the module docstring);
    with a `bias`, it is rounded to `dtype` like q, k, v and enters both the reference and the baseline."""
    q, k, v = (round_to(np.asarray(x), dtype) for x in (q, k, v))
    bias = None if bias is None else round_to(np.asarray(bias), dtype)
    ref = attention(q, k, v, causal, scale, bias)
    baseline = attention_same_precision(q, k, v, dtype, causal, scale, bias)
    tolerance = 2 * _max_error(baseline, ref) + ABSOLUTE_TOLERANCE
    return Comparison(_max_error(out, ref), tolerance)


def check_attention_kernel(sig, out, inputs, dtype) -> Comparison:
    """`check_attention` for the output of the "attention" kernel `sig` (a KernelSignature) run on `inputs`
    (Q, K, V, and Bias when the kernel takes one)."""
    q, k, v, *rest = inputs
    return check_attention(out, q, k, v, dtype, causal=sig.causal, scale=sig.scale,
                           bias=rest[0] if sig.bias else None)


def check_gemm(out, a, b, dtype, *, c=None, bias=None, transpose_a: bool = False, transpose_b: bool = False,
               alpha: float = 1.0, beta: float = 0.0) -> Comparison:
    """Compare a GEMM output (f32 accumulation) with the fp64 reference alpha op(A) op(B) + beta C + bias
    (op transposes the last two axes where asked; a leading axis is a batch): twice the error of a plain f32
    matmul, plus the worst-case bound of any f32 summation order, K * 2^-24 * max(|A| |B|), scaled by
    |alpha|; with an epilogue (alpha != 1, C or bias), 4 f32 roundings of its largest term on top."""
    a, b = (round_to(np.asarray(x), dtype) for x in (a, b))
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    product = gemm(a, b)
    baseline = np.matmul(a.astype(F32), b.astype(F32))
    magnitude = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    bound = a.shape[-1] * 2.0**-24 * (float(magnitude.max()) if magnitude.size else 0.0)
    tolerance = abs(alpha) * (2 * _max_error(baseline, product) + bound)
    ref, terms = alpha * product, abs(alpha) * magnitude
    for addend, factor in ((c, beta), (bias, 1.0)):
        if addend is not None and factor != 0:
            addend = np.asarray(addend, np.float64)
            ref, terms = ref + factor * addend, terms + abs(factor * addend)
    if alpha != 1 or c is not None or bias is not None:
        tolerance += 4 * 2.0**-24 * (float(terms.max()) if terms.size else 0.0)
    return Comparison(_max_error(out, ref), tolerance)


def _gemm_inputs(sig, inputs) -> dict:
    """check_gemm's keywords for a "gemm" kernel's signature and inputs (A, B, [C_in], [bias])."""
    g = sig.gemm
    rest = list(inputs[2:])
    c = rest.pop(0) if g.beta != 0 else None
    bias = rest.pop(0) if g.bias else None
    return dict(c=c, bias=bias, transpose_a=g.transpose_a, transpose_b=g.transpose_b, alpha=g.alpha, beta=g.beta)


def gemm_operands(rng: np.random.Generator, m: int, n: int, k: int, *, transpose_a: bool = False,
                  transpose_b: bool = False, batch: int | None = None, alpha: float | None = None,
                  beta: float | None = None) -> tuple[list[np.ndarray], dict]:
    """Standard-normal inputs of a GEMM in the kernel's argument order (A as [K, M] when `transpose_a`, else
    [M, K]; B as [N, K] when `transpose_b`, else [K, N]; with an epilogue, `alpha` and `beta` given, also an
    f32 C_in [M, N] and an f32 bias [N]), each led by `batch` when given, and the keywords `check_gemm`
    takes for them. Drawn in that order from `rng`."""
    lead = (batch,) if batch else ()
    a = rng.standard_normal(lead + ((k, m) if transpose_a else (m, k)))
    b = rng.standard_normal(lead + ((n, k) if transpose_b else (k, n)))
    inputs, options = [a, b], dict(transpose_a=transpose_a, transpose_b=transpose_b)
    if alpha is not None and beta is not None:
        c, bias = rng.standard_normal(lead + (m, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        inputs += [c, bias]
        options.update(c=c, bias=bias, alpha=alpha, beta=beta)
    return inputs, options


def check_gemm_kernel(sig, out, inputs, dtype) -> Comparison:
    """`check_gemm` for the output of the "gemm" kernel `sig` (a KernelSignature) run on `inputs`."""
    return check_gemm(out, inputs[0], inputs[1], dtype, **_gemm_inputs(sig, inputs))


def gemm_kernel(sig, inputs) -> np.ndarray:
    """The float64 reference output of the "gemm" kernel `sig` on (already rounded) `inputs`."""
    o = _gemm_inputs(sig, inputs)
    a, b = (np.swapaxes(x, -1, -2) if t else x for x, t in ((inputs[0], o["transpose_a"]), (inputs[1], o["transpose_b"])))
    ref = o["alpha"] * np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64))
    if o["c"] is not None:
        ref = ref + o["beta"] * np.asarray(o["c"], np.float64)
    if o["bias"] is not None:
        ref = ref + np.asarray(o["bias"], np.float64)
    return ref


# region Attention backward
#
# The rule (the forward's, applied to each of dQ, dK, dV): the error of a kernel's gradient against the float64
# analytic gradient of the same rounded inputs (q, k, v, dO; O recomputed in float64) may be at most twice the
# error of a straightforward same-precision computation, plus a small absolute term. The straightforward
# computation (`attention_backward_same_precision`) is what an eager framework in the kernel's precision does
# with the same kernel inputs: f32 scores and softmax, dPsum = rowsum(dO * O) in f32 from the forward's rounded
# O, P rounded to bf16/f16 for P^T dO, dS = P * (dP - dPsum) in f32 rounded to bf16/f16 for dS K and dS^T Q
# (where the kernel rounds them), products accumulated in f32, each gradient rounded to bf16/f16. The absolute
# term is BACKWARD_ABSOLUTE_TOLERANCE times the largest magnitude of that gradient's reference (at least 1):
# gradients are not O(1) like attention outputs (a key that every query attends to gathers all their dO).


def check_packed_attention(o, lse, q, k, v, cu_seqlens_q, cu_seqlens_k, dtype, causal: bool = False,
                           scale: float | None = None) -> list[tuple[Comparison, Comparison | None] | None]:
    """Packed (varlen) results against each sequence's own reference: o [total_q, heads, D] under the
    tolerance rule (`check_attention`) and lse [heads, total_q] (None: not checked) within `LSE_TOLERANCE`
    (`check_lse`), for q [total_q, heads, D] and k, v [total_k, heads_k, D] (GQA: heads_k divides heads),
    sequence b holding the rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) and the keys [cu_seqlens_k[b],
    cu_seqlens_k[b + 1]). A sequence without keys must give O = 0 and LSE = -inf (an infinite error
    otherwise). Returns, per sequence, (O comparison, LSE comparison or None), or None for a sequence
    without rows."""
    cu_q, cu_k = np.asarray(cu_seqlens_q), np.asarray(cu_seqlens_k)
    results: list[tuple[Comparison, Comparison | None] | None] = []
    for b in range(len(cu_q) - 1):
        rows, keys = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        if rows.stop == rows.start:
            results.append(None)
            continue
        lse_rows = None if lse is None else np.asarray(lse)[:, rows]
        if keys.stop == keys.start:
            zero = np.all(np.asarray(o[rows]).astype(np.float64) == 0)
            results.append((Comparison(0.0 if zero else float("inf"), ABSOLUTE_TOLERANCE),
                            None if lse is None else
                            Comparison(0.0 if np.all(np.isneginf(lse_rows)) else float("inf"), LSE_TOLERANCE)))
            continue
        qh, kh, vh = (np.asarray(x).transpose(1, 0, 2)[None] for x in (q[rows], k[keys], v[keys]))
        kh, vh = _expand_heads(kh, qh.shape[1]), _expand_heads(vh, qh.shape[1])
        results.append((check_attention(np.asarray(o[rows]).transpose(1, 0, 2)[None], qh, kh, vh, dtype, causal,
                                        scale),
                        None if lse is None else check_lse(lse_rows[None], qh, kh, dtype, causal, scale)))
    return results


BACKWARD_ABSOLUTE_TOLERANCE = 1e-3
"""The small absolute term of the backward's rule, relative to max(1, max |reference gradient|)."""


def _expand_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """K or V with heads_k heads repeated to `heads` (GQA: query head h reads K/V head h // (heads / heads_k))."""
    return np.repeat(x, heads // x.shape[1], axis=1)


def _sum_groups(dx: np.ndarray, heads_k: int) -> np.ndarray:
    """The gradient of each K/V head: the sum over the query heads of its group."""
    b, h, s, d = dx.shape
    return dx.reshape(b, heads_k, h // heads_k, s, d).sum(axis=2)


def attention_lse(q, k, causal: bool = False, scale: float | None = None, bias=None) -> np.ndarray:
    """The forward's log-sum-exp in float64: LSE[b, h, i] = log sum_j exp(scale q_i . k_j [+ bias_ij]) over the
    keys row i sees, -inf for a row that sees none (or whose every bias is -inf); the bias saturated as the
    kernels saturate it (`saturate_bias`). k may have fewer heads (GQA)."""
    q = np.asarray(q).astype(np.float64)
    k = _expand_heads(np.asarray(k).astype(np.float64), q.shape[1])
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = _add_bias(_scores(q, k, scale, np.float64), saturate_bias(bias, scale))
    if causal:
        scores = np.where(causal_visible(q.shape[2], k.shape[2]), scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    safe = np.where(np.isneginf(row_max), 0, row_max)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(scores - safe).sum(axis=-1, keepdims=True)) + safe)[..., 0]


def _backward(q, k, v, o, do, causal, scale, dtype, round_p):
    """Shared body of the float64 gradient (dtype float64, no rounding) and the same-precision one."""
    heads_k = k.shape[1]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    k, v = _expand_heads(k, q.shape[1]), _expand_heads(v, q.shape[1])
    visible = causal_visible(q.shape[2], k.shape[2]) if causal else None
    p = _softmax_rows(_scores(q, k, scale, dtype), visible).astype(dtype)
    t = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    if o is None:
        o = np.matmul(p, v)
    dpsum = np.sum(do * o, axis=-1, dtype=dtype)[..., None]
    dv = np.matmul(t(round_p(p)), do)
    ds = round_p(p * (np.matmul(do, t(v)) - dpsum))
    dq = np.matmul(ds, k) * dtype(scale)
    dk = np.matmul(t(ds), q) * dtype(scale)
    return dq, _sum_groups(dk, heads_k), _sum_groups(dv, heads_k)


def attention_backward(q, k, v, do, causal: bool = False, scale: float | None = None):
    """The float64 analytic gradient (dq, dk, dv) of attention at the given (already rounded) q, k, v, dO, with
    O recomputed in float64. k and v may have fewer heads than q (GQA: dk, dv sum over each group). A query row
    that sees no key has P = 0, so its dq is 0 and it adds nothing to dk and dv."""
    q, k, v, do = (np.asarray(x).astype(np.float64) for x in (q, k, v, do))
    return _backward(q, k, v, None, do, causal, scale, np.float64, lambda x: x)


def attention_backward_same_precision(q, k, v, o, do, dtype, causal: bool = False, scale: float | None = None):
    """The straightforward computation in the kernel's precision that the rule compares with (see above):
    f32 throughout, P and dS rounded to `dtype` where they enter the tensor-core products, dPsum from the
    given (rounded) o, and each gradient rounded to `dtype`."""
    q, k, v, o, do = (np.asarray(x).astype(F32) for x in (q, k, v, o, do))
    rounded = lambda x: round_to(x, dtype).astype(F32)  # noqa: E731
    return tuple(round_to(g, dtype) for g in _backward(q, k, v, o, do, causal, scale, np.float32, rounded))


def check_attention_backward(grads, q, k, v, o, do, dtype, causal: bool = False,
                             scale: float | None = None) -> tuple[Comparison, Comparison, Comparison]:
    """Compare (dq, dk, dv) with the float64 gradient under the backward's rule (see above); one Comparison per
    gradient. q, k, v, dO are rounded to `dtype` first (as the kernels read them); o is the forward's output
    as the kernel was given it."""
    q, k, v, o, do = (round_to(np.asarray(x), dtype) for x in (q, k, v, o, do))
    refs = attention_backward(q, k, v, do, causal, scale)
    baselines = attention_backward_same_precision(q, k, v, o, do, dtype, causal, scale)
    comparisons = []
    for out, ref, baseline in zip(grads, refs, baselines):
        magnitude = max(1.0, float(np.abs(ref).max()) if ref.size else 0.0)
        tolerance = 2 * _max_error(baseline, ref) + BACKWARD_ABSOLUTE_TOLERANCE * magnitude
        comparisons.append(Comparison(_max_error(out, ref), tolerance))
    return tuple(comparisons)


# endregion


# region FlexAttention-style modifiers (tessera.variants.trace)


def mod_scores(q, k, scale: float | None, score_mod=None, mask_mod=None, dtype=np.float64) -> np.ndarray:
    """mask_mod(score_mod(scale Q K^T)) in `dtype`: the user's functions run unchanged on NumPy index grids
    (b [B,1,1,1], h [1,H,1,1], q_idx [1,1,Sq,1], kv_idx [1,1,1,Sk], int64), through
    `attention_mods.bounds_checked` (an index outside a captured array is an error, not NumPy's wrap-around);
    hidden scores are -inf. K may have fewer heads than Q (GQA: repeated)."""
    from tessera.variants.bounds_checks import bounds_checked

    q, k = np.asarray(q), np.asarray(k)
    k = _expand_heads(k, q.shape[1])
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = _scores(q, k, scale, dtype)
    batch, heads, seq_q, seq_k = scores.shape
    grids = (np.arange(batch).reshape(-1, 1, 1, 1), np.arange(heads).reshape(1, -1, 1, 1),
             np.arange(seq_q).reshape(1, 1, -1, 1), np.arange(seq_k).reshape(1, 1, 1, -1))
    if score_mod is not None:
        scores = np.broadcast_to(np.asarray(bounds_checked(score_mod, "score_mod")(scores, *grids), dtype),
                                 scores.shape)
    if mask_mod is not None:
        visible = np.broadcast_to(np.asarray(bounds_checked(mask_mod, "mask_mod")(*grids), bool), scores.shape)
        scores = np.where(visible, scores, -np.inf)
    return scores


def attention_mods(q, k, v, score_mod=None, mask_mod=None, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(O, LSE) of softmax(mask_mod(score_mod(scale Q K^T))) V in float64 (`mod_scores`); a row that sees no
    key gives O = 0 and LSE = -inf."""
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    scores = mod_scores(q, k, scale, score_mod, mask_mod)
    out = np.matmul(_softmax_rows(scores, None), _expand_heads(v, q.shape[1]))
    top = scores.max(axis=-1)
    safe = np.where(np.isneginf(top), 0, top)
    with np.errstate(divide="ignore"):
        lse = safe + np.log(np.exp(scores - safe[..., None]).sum(axis=-1))
    return out, np.where(np.isneginf(top), -np.inf, lse)


def check_attention_mods(out, q, k, v, dtype, score_mod=None, mask_mod=None, scale: float | None = None,
                         lse=None) -> Comparison:
    """`check_attention`'s rule for a kernel with modifiers: the error of O against the float64 reference at
    most twice that of the same-precision computation (f32 scores through the modifiers, P rounded to
    `dtype`) plus `ABSOLUTE_TOLERANCE`; with `lse`, an LSE that is not -inf exactly where the reference's is,
    or further than `LSE_TOLERANCE` (plus the f32 rounding of its magnitude), fails."""
    q, k, v = (round_to(np.asarray(x), dtype) for x in (q, k, v))
    ref, ref_lse = attention_mods(q, k, v, score_mod, mask_mod, scale)
    scores = mod_scores(q.astype(F32), k.astype(F32), scale, score_mod, mask_mod, np.float32)
    p = round_to(_softmax_rows(scores.astype(F32), None).astype(F32), dtype).astype(F32)
    baseline = round_to(np.matmul(p, _expand_heads(v.astype(F32), q.shape[1])), dtype)
    tolerance = 2 * _max_error(baseline, ref) + ABSOLUTE_TOLERANCE
    error = _max_error(out, ref)
    if lse is not None:
        got = np.asarray(lse, np.float64).reshape(ref_lse.shape)
        empty = np.isneginf(ref_lse)
        if not np.array_equal(np.isneginf(got), empty):
            return Comparison(float("inf"), tolerance)
        lse_error = np.abs(got[~empty] - ref_lse[~empty]) - LSE_F32_ROUNDING * np.abs(ref_lse[~empty])
        if lse_error.size and np.nan_to_num(lse_error, nan=np.inf).max() > LSE_TOLERANCE:
            return Comparison(float("inf"), tolerance)
    return Comparison(error, tolerance)


def _score_mod_slope(q, k, scale, score_mod) -> np.ndarray | None:
    """d score_mod / d score at scale Q K^T, float64, by central differences (step 2^-20 |s|, at least 2^-20):
    an estimate independent of the kernel's traced derivative; None without a score_mod. Where a step of the
    function (np.floor, `//`, np.round of the score) lies within the differences, the forward and the
    backward difference disagree, and the one of smaller magnitude is taken: a step function's derivative
    is 0 almost everywhere, as the traced one is."""
    if score_mod is None:
        return None
    from tessera.variants.bounds_checks import bounds_checked

    fn = bounds_checked(score_mod, "score_mod")
    raw = _scores(q, _expand_heads(k, q.shape[1]), 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale,
                  np.float64)
    grids = (np.arange(raw.shape[0]).reshape(-1, 1, 1, 1), np.arange(raw.shape[1]).reshape(1, -1, 1, 1),
             np.arange(raw.shape[2]).reshape(1, 1, -1, 1), np.arange(raw.shape[3]).reshape(1, 1, 1, -1))
    step = np.maximum(np.abs(raw), 1.0) * 2.0**-20
    up, mid, down = (np.broadcast_to(np.asarray(fn(raw + d, *grids), np.float64), raw.shape)
                     for d in (step, 0.0, -step))
    with np.errstate(invalid="ignore"):
        forward, backward = (up - mid) / step, (mid - down) / step
        jump = np.abs(forward - backward) > 2.0**-6 * (1.0 + np.abs(forward) + np.abs(backward))
    one_sided = np.where(np.abs(forward) < np.abs(backward), forward, backward)
    return np.where(jump, one_sided, (up - down) / (2 * step))


def _mods_backward(q, k, v, o, do, score_mod, mask_mod, scale, dtype, round_p, slope):
    heads_k = k.shape[1]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    p = _softmax_rows(mod_scores(q, k, scale, score_mod, mask_mod, dtype), None).astype(dtype)
    k, v = _expand_heads(k, q.shape[1]), _expand_heads(v, q.shape[1])
    t = lambda x: np.swapaxes(x, -1, -2)  # noqa: E731
    if o is None:
        o = np.matmul(p, v)
    dpsum = np.sum(do * o, axis=-1, dtype=dtype)[..., None]
    dv = np.matmul(t(round_p(p)), do)
    ds = p * (np.matmul(do, t(v)) - dpsum)
    if slope is not None:
        ds = np.where(p > 0, ds * slope.astype(dtype), 0).astype(dtype)
    ds = round_p(ds)
    dq = np.matmul(ds, k) * dtype(scale)
    dk = np.matmul(t(ds), q) * dtype(scale)
    return dq, _sum_groups(dk, heads_k), _sum_groups(dv, heads_k)


def attention_mods_backward(q, k, v, do, score_mod=None, mask_mod=None, scale: float | None = None):
    """The float64 gradient (dq, dk, dv) of `attention_mods` (O recomputed in float64); dS is multiplied by
    d score_mod / d score estimated by central differences of the user's function (`_score_mod_slope`)."""
    q, k, v, do = (np.asarray(x).astype(np.float64) for x in (q, k, v, do))
    slope = _score_mod_slope(q, k, scale, score_mod)
    return _mods_backward(q, k, v, None, do, score_mod, mask_mod, scale, np.float64, lambda x: x, slope)


def check_attention_mods_backward(grads, q, k, v, o, do, dtype, score_mod=None, mask_mod=None,
                                  scale: float | None = None) -> tuple[Comparison, Comparison, Comparison]:
    """`check_attention_backward`'s rule for kernels with modifiers: against `attention_mods_backward`, with
    the same-precision baseline computed in f32 (P and dS rounded to `dtype`)."""
    q, k, v, o, do = (round_to(np.asarray(x), dtype) for x in (q, k, v, o, do))
    refs = attention_mods_backward(q, k, v, do, score_mod, mask_mod, scale)
    slope = _score_mod_slope(q.astype(np.float64), k.astype(np.float64), scale, score_mod)
    rounded = lambda x: round_to(x, dtype).astype(F32)  # noqa: E731
    f32s = (np.asarray(x).astype(F32) for x in (q, k, v, o, do))
    baselines = tuple(round_to(g, dtype) for g in _mods_backward(*f32s, score_mod, mask_mod, scale, np.float32,
                                                                  rounded, slope))
    comparisons = []
    for out, ref, baseline in zip(grads, refs, baselines):
        magnitude = max(1.0, float(np.abs(ref).max()) if ref.size else 0.0)
        tolerance = 2 * _max_error(baseline, ref) + BACKWARD_ABSOLUTE_TOLERANCE * magnitude
        comparisons.append(Comparison(_max_error(out, ref), tolerance))
    return tuple(comparisons)


# endregion


# region FP8 attention (e4m3 inputs with per-(batch, kv-head) descale factors)

FP8_P_OFFSET = 2.0**8
"""The factor P is rounded to e4m3 at, in the FP8 kernel and in its same-precision computation
(`tessera.kernels.attention_fp8.P_OFFSET_LOG2`, FlashAttention-3's Max_offset)."""


def dequantize_fp8(x8, descale, heads: int | None = None) -> np.ndarray:
    """x8 [batch, heads_k, seq, d] times its descale [batch, heads_k] (None: 1) in float64, with the heads
    repeated to `heads` (GQA: query head h belongs to key head h // (heads / heads_k))."""
    x = np.asarray(x8).astype(np.float64)
    if descale is not None:
        x = x * np.asarray(descale, np.float64)[:, :, None, None]
    return x if heads is None else _expand_heads(x, heads)


def _fp8_descales(q8, k8, descale_q, descale_k, descale_v):
    """(descale_q, descale_k, descale_v) as float64 [batch, heads_k] arrays, 1 where None."""
    ones = np.ones(np.asarray(k8).shape[:2])
    return tuple(ones if d is None else np.asarray(d, np.float64) for d in (descale_q, descale_k, descale_v))


def attention_fp8(q8, k8, v8, descale_q=None, descale_k=None, descale_v=None, causal: bool = False,
                  scale: float | None = None) -> np.ndarray:
    """softmax(scale Q K^T [+ causal mask]) V in float64 on the dequantized inputs (q8 descale_q, ...; query
    head h takes the descale of its key head); k8 and v8 may have fewer heads (GQA)."""
    heads = np.asarray(q8).shape[1]
    dq, dk, dv = _fp8_descales(q8, k8, descale_q, descale_k, descale_v)
    q = np.asarray(q8).astype(np.float64) * _expand_heads(dq[:, :, None, None], heads)
    return attention(q, dequantize_fp8(k8, dk, heads), dequantize_fp8(v8, dv, heads), causal, scale)


def attention_fp8_same_precision(q8, k8, v8, descale_q=None, descale_k=None, descale_v=None,
                                 causal: bool = False, scale: float | None = None,
                                 normalized: bool = True) -> np.ndarray:
    """The straightforward computation in the FP8 kernel's precision: f32 scores from the e4m3 inputs,
    (q8 k8^T) f32(scale descale_q descale_k); the softmax in f32; P rounded to e4m3 (as 2^8 P, the kernel's
    offset, `FP8_P_OFFSET`); P v8 accumulated in f32, times descale_v, rounded to bf16. `normalized=False`
    rounds the unnormalized exp(s - rowmax) instead (as FlashAttention-3 and the kernel do) and divides the
    product by the f32 row sum of the unrounded terms: the two roundings land on different points of e4m3's
    grid (steps of 1/16 of 1 near a row's maximum), so either may be the exact one for a given row."""
    from tessera.numerics import BF16, F8E4M3

    q, k, v = (np.asarray(x).astype(F32) for x in (q8, k8, v8))
    heads = q.shape[1]
    dq, dk, dv = (_expand_heads(d.astype(F32)[:, :, None, None], heads)
                  for d in _fp8_descales(q8, k8, descale_q, descale_k, descale_v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    factor = (dq * dk * np.float32(scale)).astype(F32)
    scores = (np.matmul(q, np.swapaxes(_expand_heads(k, heads), -1, -2)) * factor).astype(F32)
    visible = causal_visible(q.shape[2], k.shape[2]) if causal else None
    p = _softmax_rows(scores, visible).astype(F32)
    row_sum = np.ones(p.shape[:-1] + (1,), F32)
    if not normalized:  # exp(s - m) = P l / max P, with l = sum exp(s - m), as the kernel holds it
        peak = p.max(axis=-1, keepdims=True)
        row_sum = np.where(peak > 0, np.float32(1) / np.where(peak > 0, peak, 1), 1).astype(F32)
        p = (p * row_sum).astype(F32)
    p = round_to(p * np.float32(FP8_P_OFFSET), F8E4M3).astype(F32) / np.float32(FP8_P_OFFSET)
    o = np.matmul(p, _expand_heads(v, heads)) / row_sum * dv
    return round_to(o.astype(F32), BF16)


def check_attention_fp8(out, q8, k8, v8, descale_q=None, descale_k=None, descale_v=None, causal: bool = False,
                        scale: float | None = None) -> Comparison:
    """Compare an FP8 attention output with `attention_fp8` (float64, dequantized inputs) under the rule of the
    module docstring: at most twice the error of `attention_fp8_same_precision` (the larger of its two
    roundings of P, normalized or not: with few keys one of them may happen to be exact), plus
    ABSOLUTE_TOLERANCE times max(1, max |dequantized V|) (the output is a convex combination of V's rows)."""
    ref = attention_fp8(q8, k8, v8, descale_q, descale_k, descale_v, causal, scale)
    baseline = max(_max_error(attention_fp8_same_precision(q8, k8, v8, descale_q, descale_k, descale_v, causal,
                                                           scale, normalized), ref) for normalized in (True, False))
    v_max = float(np.abs(dequantize_fp8(v8, _fp8_descales(q8, k8, descale_q, descale_k, descale_v)[2])).max())
    tolerance = 2 * baseline + ABSOLUTE_TOLERANCE * max(1.0, v_max)
    return Comparison(_max_error(out, ref), tolerance)


def attention_fp8_lse(q8, k8, descale_q=None, descale_k=None, causal: bool = False,
                      scale: float | None = None) -> np.ndarray:
    """The FP8 forward's log-sum-exp in float64 (`attention_lse` of the dequantized q and k)."""
    heads = np.asarray(q8).shape[1]
    dq, dk, _ = _fp8_descales(q8, k8, descale_q, descale_k, None)
    q = np.asarray(q8).astype(np.float64) * _expand_heads(dq[:, :, None, None], heads)
    return attention_lse(q, dequantize_fp8(k8, dk), causal, scale)


FP8_LSE_ROUNDINGS = 8
"""The f32 roundings of the FP8 forward's LSE magnitude that `check_lse_fp8` allows beyond `LSE_TOLERANCE`, each
2^-24 |LSE|: the score factor descale_q descale_k scale (two) and, below Tile level, its log2(e) (one), the
scaled score (one), the f32 dot product of e4m3 rows once it passes 2^24 (one), m + ln l (one), and the
conversion from base 2 back to e (two: the product and ln 2's own rounding). `check_lse`'s two cover a bf16
kernel's O(1) scores; FP8 descales (300 x 300, saturated rows) make the scores, and so the LSE, ~1e4 to 1e6,
where these roundings outgrow LSE_TOLERANCE (seen: 1.2 x 2^-23 |LSE| at |LSE| = 1.4e4, CTA simulator)."""


def check_lse_fp8(lse, q8, k8, descale_q=None, descale_k=None, causal: bool = False,
                  scale: float | None = None) -> Comparison:
    """Compare an FP8 forward's LSE ([batch, heads, seq_q]) with `attention_fp8_lse` (float64, dequantized
    inputs): within `LSE_TOLERANCE` beyond FP8_LSE_ROUNDINGS f32 roundings of |LSE| where the reference is
    finite, exactly -inf where it is -inf (a row that sees no key); NaN or any other mismatch is infinite."""
    ref = attention_fp8_lse(q8, k8, descale_q, descale_k, causal, scale)
    out = np.asarray(lse, np.float64)
    if out.shape != ref.shape:
        return Comparison(float("inf"), LSE_TOLERANCE)
    empty = np.isneginf(ref)
    if not np.array_equal(np.isneginf(out), empty):
        return Comparison(float("inf"), LSE_TOLERANCE)
    error = np.abs(out[~empty] - ref[~empty]) - FP8_LSE_ROUNDINGS * 2.0**-24 * np.abs(ref[~empty])
    error = np.nan_to_num(error, nan=np.inf)
    return Comparison(float(error.max()) if error.size else 0.0, LSE_TOLERANCE)

# endregion
