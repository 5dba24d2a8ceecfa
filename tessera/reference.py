"""The tolerance rule that judges a kernel's output against its NumPy reference: `Comparison` and the `check_*`
verdicts. The references themselves are float64 computations beside the straightforward ones in a kernel's
precision: `tessera.reference_attention` (the forward, its LSE, FlexAttention-style modifiers),
`tessera.reference_backward` (gradients), `tessera.reference_fp8` (e4m3 inputs), `tessera.reference_gemm`.

Conventions (the same as the kernels'):
- attention inputs are [batch, heads, seq, head_dim]; `scale` defaults to 1/sqrt(head_dim);
- causal masking is aligned bottom-right (FlashAttention >= 2.1): query i sees keys 0 .. i + seq_k - seq_q,
  so with seq_q = 1 the single query sees the whole cache; a query row that sees no key gives zeros.

Tolerance (DESIGN.md section 9, in the FlashAttention style): a kernel's error against the fp64 reference
computed from the same rounded inputs may be at most twice the error of a straightforward computation in
the kernel's precision, plus a small absolute term. An element that is NaN (or the same infinity) in both the
output and the reference is no error: NaN inputs make NaN rows in the kernels and the references alike; NaN on
one side only is an infinite error. With an additive bias (rounded to the kernel's type, as the kernel reads it)
the rule is the same: the bias enters the reference in float64 and the straightforward
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

import functools
from dataclasses import dataclass

import numpy as np

from tessera.host_arrays import host_numpy
from tessera.numerics import BF16, F32, round_to
from tessera.reference_attention import (
    attention,
    attention_lse,
    attention_mods,
    attention_same_precision,
    expand_heads,
    mod_scores,
    softmax_rows,
)
from tessera.reference_backward import (
    attention_backward,
    attention_backward_same_precision,
    attention_mods_backward,
    mods_backward_gradients,
    score_mod_slope,
)
from tessera.reference_fp8 import (
    attention_fp8,
    attention_fp8_lse,
    attention_fp8_same_precision,
    dequantize_fp8,
    fp8_descales,
)
from tessera.reference_gemm import gemm, gemm_inputs


def _host_inputs(check):
    """`check` taking PyTorch tensors (CPU or CUDA; bf16 and FP8 too, as `tessera.attention` returns them) as
    well as NumPy arrays: every tensor argument, and each tensor of a tuple or list argument (gradients), is
    converted bit for bit before `check` sees it (`tessera.host_arrays.host_numpy`)."""

    @functools.wraps(check)
    def checked(*args, **kwargs):
        return check(*(host_numpy(a) for a in args), **{k: host_numpy(v) for k, v in kwargs.items()})
    return checked

ABSOLUTE_TOLERANCE = 1e-3
"""The small absolute term of the attention tolerance (outputs are O(1): convex combinations of V rows)."""


@dataclass(frozen=True)
class Comparison:
    """The outcome of checking a kernel's output against its reference."""

    max_error: float
    tolerance: float
    note: str = ""
    """What the numbers alone do not say (`check_attention_fp8`: an output element that is not finite where the
    exact one is, or exact outputs past the output type's range); printed after the verdict."""

    @property
    def ok(self) -> bool:
        return bool(self.max_error <= self.tolerance)

    def __str__(self) -> str:
        verdict = "ok" if self.ok else "MISMATCH"
        text = f"max error {self.max_error:.3e}, tolerance {self.tolerance:.3e}: {verdict}"
        return f"{text} ({self.note})" if self.note else text


def _element_errors(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|out - ref| element by element in float64: 0 where both hold the same value, a NaN or an infinity
    included (a NaN input gives NaN rows in the kernels and the references alike), infinite where only one is
    NaN or they are different infinities."""
    with np.errstate(invalid="ignore"):
        error = np.nan_to_num(np.abs(out - ref), nan=np.inf)
    return np.where((out == ref) | (np.isnan(out) & np.isnan(ref)), 0.0, error)


def _max_error(out, ref) -> float:
    out = np.asarray(out).astype(np.float64)
    if out.shape != ref.shape:
        return float("inf")
    if out.size == 0:
        return 0.0
    return float(_element_errors(out, np.asarray(ref, np.float64)).max())


# region Attention forward


@_host_inputs
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


@_host_inputs
def check_attention_kernel(sig, out, inputs, dtype) -> Comparison:
    """`check_attention` for the output of the "attention" kernel `sig` (a KernelSignature) run on `inputs`
    (Q, K, V, and Bias when the kernel takes one)."""
    q, k, v, *rest = inputs
    return check_attention(out, q, k, v, dtype, causal=sig.causal, scale=sig.scale,
                           bias=rest[0] if sig.bias else None)


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


@_host_inputs
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
    return _lse_comparison(out, ref, LSE_F32_ROUNDING)


def _lse_comparison(out: np.ndarray, ref: np.ndarray, relative: float) -> Comparison:
    """An LSE `out` against its float64 `ref`: within `LSE_TOLERANCE` beyond `relative` |ref| where `ref` is
    finite, exactly -inf where it is -inf, NaN where it is NaN (a NaN input); a shape mismatch, NaN where the
    reference is not, or any other mismatch is an infinite error."""
    if out.shape != ref.shape:
        return Comparison(float("inf"), LSE_TOLERANCE)
    empty = np.isneginf(ref)
    if not np.array_equal(np.isneginf(out), empty):
        return Comparison(float("inf"), LSE_TOLERANCE)
    error = _element_errors(out[~empty], ref[~empty]) - relative * np.abs(np.nan_to_num(ref[~empty]))
    return Comparison(float(error.max()) if error.size else 0.0, LSE_TOLERANCE)


@_host_inputs
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
        kh, vh = expand_heads(kh, qh.shape[1]), expand_heads(vh, qh.shape[1])
        results.append((check_attention(np.asarray(o[rows]).transpose(1, 0, 2)[None], qh, kh, vh, dtype, causal,
                                        scale),
                        None if lse is None else check_lse(lse_rows[None], qh, kh, dtype, causal, scale)))
    return results


# endregion


# region GEMM


@_host_inputs
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


@_host_inputs
def check_gemm_kernel(sig, out, inputs, dtype) -> Comparison:
    """`check_gemm` for the output of the "gemm" kernel `sig` (a KernelSignature) run on `inputs`."""
    return check_gemm(out, inputs[0], inputs[1], dtype, **gemm_inputs(sig, inputs))


# endregion


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


BACKWARD_ABSOLUTE_TOLERANCE = 1e-3
"""The small absolute term of the backward's rule, relative to max(1, max |reference gradient|)."""


@_host_inputs
def check_attention_backward(grads, q, k, v, o, do, dtype, causal: bool = False,
                             scale: float | None = None) -> tuple[Comparison, Comparison, Comparison]:
    """Compare (dq, dk, dv) with the float64 gradient under the backward's rule (see above); one Comparison per
    gradient. q, k, v, dO are rounded to `dtype` first (as the kernels read them); o is the forward's output
    as the kernel was given it."""
    q, k, v, o, do = (round_to(np.asarray(x), dtype) for x in (q, k, v, o, do))
    refs = attention_backward(q, k, v, do, causal, scale)
    baselines = attention_backward_same_precision(q, k, v, o, do, dtype, causal, scale)
    return _gradient_comparisons(grads, refs, baselines)


def _gradient_comparisons(grads, refs, baselines) -> tuple[Comparison, ...]:
    """The backward's rule for each gradient: its error against `refs` at most twice that of `baselines`, plus
    BACKWARD_ABSOLUTE_TOLERANCE x max(1, max |reference gradient|)."""
    comparisons = []
    for out, ref, baseline in zip(grads, refs, baselines):
        magnitude = max(1.0, float(np.abs(ref).max()) if ref.size else 0.0)
        tolerance = 2 * _max_error(baseline, ref) + BACKWARD_ABSOLUTE_TOLERANCE * magnitude
        comparisons.append(Comparison(_max_error(out, ref), tolerance))
    return tuple(comparisons)


# endregion


# region FlexAttention-style modifiers (tessera.variants.trace)


@_host_inputs
def check_attention_mods(out, q, k, v, dtype, score_mod=None, mask_mod=None, scale: float | None = None,
                         lse=None) -> Comparison:
    """`check_attention`'s rule for a kernel with modifiers: the error of O against the float64 reference at
    most twice that of the same-precision computation (f32 scores through the modifiers, P rounded to
    `dtype`) plus `ABSOLUTE_TOLERANCE`; with `lse`, an LSE that is not -inf exactly where the reference's is,
    or further than `LSE_TOLERANCE` (plus the f32 rounding of its magnitude), fails."""
    q, k, v = (round_to(np.asarray(x), dtype) for x in (q, k, v))
    ref, ref_lse = attention_mods(q, k, v, score_mod, mask_mod, scale)
    scores = mod_scores(q.astype(F32), k.astype(F32), scale, score_mod, mask_mod, np.float32)
    p = round_to(softmax_rows(scores.astype(F32), None).astype(F32), dtype).astype(F32)
    baseline = round_to(np.matmul(p, expand_heads(v.astype(F32), q.shape[1])), dtype)
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


@_host_inputs
def check_attention_mods_backward(grads, q, k, v, o, do, dtype, score_mod=None, mask_mod=None,
                                  scale: float | None = None) -> tuple[Comparison, Comparison, Comparison]:
    """`check_attention_backward`'s rule for kernels with modifiers: against `attention_mods_backward`, with
    the same-precision baseline computed in f32 (P and dS rounded to `dtype`)."""
    q, k, v, o, do = (round_to(np.asarray(x), dtype) for x in (q, k, v, o, do))
    refs = attention_mods_backward(q, k, v, do, score_mod, mask_mod, scale)
    slope = score_mod_slope(q.astype(np.float64), k.astype(np.float64), scale, score_mod)
    rounded = lambda x: round_to(x, dtype).astype(F32)  # noqa: E731
    f32s = (np.asarray(x).astype(F32) for x in (q, k, v, o, do))
    gradients = mods_backward_gradients(*f32s, score_mod, mask_mod, scale, np.float32, rounded, slope)
    baselines = tuple(round_to(g, dtype) for g in gradients)
    return _gradient_comparisons(grads, refs, baselines)


# endregion


# region FP8 attention (e4m3 inputs with per-(batch, kv-head) descale factors)


@_host_inputs
def check_attention_fp8(out, q8, k8, v8, descale_q=None, descale_k=None, descale_v=None, causal: bool = False,
                        scale: float | None = None) -> Comparison:
    """Compare an FP8 attention output with `attention_fp8` (float64, dequantized inputs) under the rule of the
    module docstring, head by head: in each (batch, query head), at most twice the error of
    `attention_fp8_same_precision` there (the larger of its two roundings of P, normalized or not: with few
    keys one of them may happen to be exact), plus ABSOLUTE_TOLERANCE times max(1, max |dequantized V|) of its
    key head (the output is a convex combination of those rows). Per head because the descales are: one
    tolerance for all would let a head whose descale_v is 100x smaller than another's be lost entirely. The
    Comparison returned is the head's whose error is the largest part of its tolerance.

    Range: the output is held to the float64 output where bf16 holds it, to +-inf where the exact output is past
    bf16's range (what its rounding gives; the note says how many and where). An inf or NaN where the exact output
    is finite in bf16 is a MISMATCH named in the note by (batch, head, row), whatever the same-precision
    computation does there (its own overflow made the head's tolerance infinite: any output passed)."""
    exact = attention_fp8(q8, k8, v8, descale_q, descale_k, descale_v, causal, scale)
    out = np.asarray(out).astype(np.float64)
    if out.shape != exact.shape:
        return Comparison(float("inf"), ABSOLUTE_TOLERANCE)
    with np.errstate(over="ignore"):  # past bf16's range, in the rounding and in the same-precision run
        ref = round_to(exact, BF16).astype(np.float64)
        ref = np.where(np.isinf(ref), ref, exact)  # +-inf where the exact output is past bf16's range, else exact
        baseline = np.maximum.reduce([_finite_head_errors(attention_fp8_same_precision(
            q8, k8, v8, descale_q, descale_k, descale_v, causal, scale, normalized).astype(np.float64), ref)
            for normalized in (True, False)])
    v = dequantize_fp8(v8, fp8_descales(q8, k8, descale_q, descale_k, descale_v)[2], ref.shape[1])
    v_max = np.abs(np.where(np.isnan(v), 0, v)).max(axis=(2, 3))  # a NaN in V: its NaN rows are held as NaN
    tolerance = 2 * baseline + ABSOLUTE_TOLERANCE * np.maximum(1.0, v_max)
    error = _head_errors(out, ref)
    worst = np.unravel_index(np.argmax(error / tolerance), error.shape)
    return Comparison(float(error[worst]), float(tolerance[worst]), _fp8_range_note(out, exact, ref))


def _finite_head_errors(baseline: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """`_head_errors` of the same-precision computation, whose elements that are not finite where the reference
    is count 0: an f32 overflow of its own must not make the head's tolerance infinite (it let any output pass)."""
    return np.where(np.isfinite(ref) & ~np.isfinite(baseline), 0.0, _element_errors(baseline, ref)).max(axis=(2, 3))


def _fp8_range_note(out: np.ndarray, exact: np.ndarray, ref: np.ndarray) -> str:
    """`check_attention_fp8`'s note: the first (batch, head, row) whose output is inf or NaN where the exact output
    is finite in bf16 (a MISMATCH: its error is infinite), and how many exact outputs overflow bf16 (held to
    +-inf there, as the output's rounding gives them)."""
    notes = []
    lost = ~np.isfinite(out) & np.isfinite(ref)
    if lost.any():
        b, h, row, column = np.argwhere(lost)[0].tolist()
        notes.append(f"output[{b}, {h}, {row}, {column}] (batch {b}, head {h}, row {row}) is {out[b, h, row, column]} "
                     f"where the exact output {exact[b, h, row, column]:.6g} is finite in bf16")
    past = np.isfinite(exact) & np.isinf(ref)
    if past.any():
        b, h, row, column = np.argwhere(past)[0].tolist()
        notes.append(f"the exact output overflows bf16 in {int(past.sum())} element(s), first output[{b}, {h}, {row}, "
                     f"{column}] = {exact[b, h, row, column]:.6g}: held to +-inf there")
    return "; ".join(notes)


def _head_errors(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """The largest element error (`_element_errors`) of each [batch, head] of [batch, heads, seq, d] arrays."""
    return _element_errors(out, ref).max(axis=(2, 3))


FP8_LSE_ROUNDINGS = 8
"""The f32 roundings of the FP8 forward's LSE magnitude that `check_lse_fp8` allows beyond `LSE_TOLERANCE`, each
2^-24 |LSE|: the score factor descale_q descale_k scale (two) and, below Tile level, its log2(e) (one), the
scaled score (one), the f32 dot product of e4m3 rows once it passes 2^24 (one), m + ln l (one), and the
conversion from base 2 back to e (two: the product and ln 2's own rounding). `check_lse`'s two cover a bf16
kernel's O(1) scores; FP8 descales (300 x 300, saturated rows) make the scores, and so the LSE, ~1e4 to 1e6,
where these roundings outgrow LSE_TOLERANCE (seen: 1.2 x 2^-23 |LSE| at |LSE| = 1.4e4, CTA simulator)."""


@_host_inputs
def check_lse_fp8(lse, q8, k8, descale_q=None, descale_k=None, causal: bool = False,
                  scale: float | None = None) -> Comparison:
    """Compare an FP8 forward's LSE ([batch, heads, seq_q]) with `attention_fp8_lse` (float64, dequantized
    inputs): within `LSE_TOLERANCE` beyond FP8_LSE_ROUNDINGS f32 roundings of |LSE| where the reference is
    finite, exactly -inf where it is -inf (a row that sees no key); NaN or any other mismatch is infinite."""
    ref = attention_fp8_lse(q8, k8, descale_q, descale_k, causal, scale)
    return _lse_comparison(np.asarray(lse, np.float64), ref, FP8_LSE_ROUNDINGS * 2.0**-24)


# endregion
