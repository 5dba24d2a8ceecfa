"""Running the library kernels built by build.py in the PTX executor, and their NumPy references (used by
tests/test_ptx_library.py and bench/ptx_exec.py).

    launch_library("cutlass_cooperative_128x128x64", (256, 256, 128, 1), sms=2)

runs the configuration's `describe` program (the library's host code on the CPU) for the problem sizes, loads
the launch description it prints (`params.load_description`, tensors made from the seed), launches the PTX
through `tessera.ptx.launch` and returns the tensors (updated in place) with the seconds the launch took.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np

from tessera.interpreters.ptx import launch
from tessera.interpreters.ptx.cli import _array
from tessera.interpreters.ptx.params import load_description
from tessera.interpreters.ptx.parse import parse_ptx

BUILD = Path(__file__).parent / "build"


def built(name: str) -> bool:
    """Whether build.py has built configuration `name` here."""
    return (BUILD / name / "kernel.ptx").exists() and (BUILD / name / "describe").exists()


def describe(name: str, sizes: tuple[int, ...], sms: int, options: dict | None = None) -> dict:
    """The launch description the library's host code gives for `sizes` (GEMM: M, N, K, L; attention: B, H,
    SQ, SK, D) on a device of `sms` SMs, with the configuration's `options` (KEY=VALUE arguments: src/*.cu)."""
    extra = [f"{key}={value}" for key, value in (options or {}).items()]
    result = subprocess.run([str(BUILD / name / "describe"), *map(str, sizes), str(sms), *extra],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


_MODULES: dict[str, object] = {}


def launch_library(name: str, sizes: tuple[int, ...], sms: int = 1, seed: int = 0, text: str | None = None,
                   options: dict | None = None, prepare=None, schedule_seed: int | None = None, **limits):
    """(tensors by name, launch description, seconds): one launch of configuration `name` (of PTX `text`
    instead of the built kernel.ptx if given: a seeded edit of it, tests/library_seeds.py) with the describe
    program's `options`; `prepare(tensors, rng)` may set the tensors' values before the launch. `seed` draws the
    inputs; `schedule_seed` is `launch`'s seed (with schedule="adversarial" in `limits`)."""
    if schedule_seed is not None:
        limits["seed"] = schedule_seed
    description = describe(name, sizes, sms, options)
    rng = np.random.default_rng(seed)
    loaded = load_description(description, lambda _, spec: _array(spec, rng), name)
    if prepare is not None:
        prepare(loaded.tensors, rng)
    path = BUILD / name / "kernel.ptx"
    if text is not None:
        module = parse_ptx(text, f"{path} (seeded)")
    else:
        if name not in _MODULES:
            _MODULES[name] = parse_ptx(path.read_text(), str(path))
        module = _MODULES[name]
    (kernel,) = module.entries
    start = time.perf_counter()
    launch(module, kernel, loaded.grid, loaded.block, [loaded.struct], loaded.shared_bytes, str(BUILD / name),
           cluster=loaded.cluster, **limits)
    return loaded.tensors, description, time.perf_counter() - start


def gemm_reference(tensors: dict) -> np.ndarray:
    """D = A B^T per batch, in float64 (A: [L, M, K], B: [L, N, K])."""
    a, b = tensors["A"].astype(np.float64), tensors["B"].astype(np.float64)
    return np.einsum("lmk,lnk->lmn", a, b)


def _attention_weights(tensors: dict, causal: bool, window: tuple[int, int] | None, softcap: float):
    """(P, V, top, total): the softmax weights [B, H, SQ, SK] (rows of a query that sees no key are zero), V with
    its descale factor and its heads repeated to H, the rows' maximum score and sum of exp(score - maximum), in
    float64 (see attention_reference)."""
    q, k, v = (tensors[n].astype(np.float64).transpose(0, 2, 1, 3) for n in "QKV")
    heads, kv_heads = q.shape[1], k.shape[1]
    if "q_descale" in tensors:
        q, k, v = (x * tensors[f"{n}_descale"].astype(np.float64)[:, :, None, None]
                   for x, n in ((q, "q"), (k, "k"), (v, "v")))
    k, v = (np.repeat(x, heads // kv_heads, axis=1) for x in (k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    s_q, s_k = scores.shape[-2:]
    left, right = window if window is not None else (-1, 0 if causal else -1)
    offset = np.arange(s_k)[None, :] - np.arange(s_q)[:, None] - (s_k - s_q)   # key - aligned query
    seen = ((offset >= -left) | (left < 0)) & ((offset <= right) | (right < 0))
    scores = np.where(seen, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(top)
    weights = np.exp(scores - np.where(empty, 0.0, top))
    total = weights.sum(axis=-1, keepdims=True)
    return np.where(empty, 0.0, weights / np.where(empty, 1.0, total)), v, top, total


def attention_reference(tensors: dict, causal: bool = False, window: tuple[int, int] | None = None,
                        softcap: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(O, LSE) of softmax(S) V in float64, S = Q K^T / sqrt(D), FA3's layouts (Q, O: [B, SQ, H, D], K, V: [B, SK,
    HK, D], query head h reading K/V head h // (H / HK); LSE: [B, H, SQ], natural log). causal aligns the last
    query with the last key, as FA3 does; window (left, right) lets query i see keys i + SK - SQ - left ..
    i + SK - SQ + right (-1: unbounded); softcap > 0 makes S = softcap tanh(S / softcap). With descale factors
    (FP8: q_descale, k_descale, v_descale [B, HK]) Q, K and V are the stored values times their factors. A query
    that sees no key has O = 0 and LSE = -inf (FA3's convention)."""
    p, v, top, total = _attention_weights(tensors, causal, window, softcap)
    lse = np.where(np.isfinite(top), top + np.log(np.where(np.isfinite(top), total, 1.0)), -np.inf)
    return (p @ v).transpose(0, 2, 1, 3), lse[..., 0]


E4M3_UNIT_ROUNDOFF, E4M3_SUBNORMAL_STEP = 2.0 ** -4, 2.0 ** -9
"""e4m3 keeps 3 mantissa bits (round to nearest: relative error <= 2^-4 for normal values) and its subnormals are
multiples of 2^-9 (absolute error <= 2^-10)."""


def attention_fp8_bound(tensors: dict, causal: bool = False, window: tuple[int, int] | None = None,
                        softcap: float = 0.0) -> np.ndarray:
    """The bound on |O - attention_reference's O| of FA3's FP8 forward, [B, SQ, H, D]: it rounds the unnormalised
    weights exp(s - running max) to e4m3 before the P V product (each off by at most 2^-4 relatively or 2^-10
    absolutely, and the running max is at most the row's, so relative to the final weights too) while the row
    sums add the f32 weights, then rounds O to bf16 (2^-8): |dO| <= (2^-4 sum p|v| + 2^-10 sum |v| / total) +
    2^-8 |O|, with a 1e-5 margin for the f32 arithmetic."""
    p, v, top, total = _attention_weights(tensors, causal, window, softcap)
    absolute = (np.where(p > 0, 1.0, 0.0) @ np.abs(v)) / np.where(np.isfinite(top), total, np.inf)
    bound = E4M3_UNIT_ROUNDOFF * (p @ np.abs(v)) + E4M3_SUBNORMAL_STEP / 2 * absolute
    bound += 2.0 ** -8 * np.abs(p @ v) + 1e-5
    return bound.transpose(0, 2, 1, 3)


BACKWARD_KERNELS = ("FlashAttnBwdPreprocess", "FlashAttnBwdSm90", "FlashAttnBwdPostprocessConvertdQ")
"""FA3's backward entries, in the order its host code launches them (src/fa3_bwd_run.cu)."""


def launch_backward(name: str, sizes: tuple[int, ...], sms: int = 1, seed: int = 0, text: str | None = None,
                    schedule_seed: int | None = None, **limits) -> dict:
    """The tensors by name after FA3's backward (configuration `name`, sizes B, H, SQ, SK, D) ran as its host code
    launches it: the preprocess, the main kernel (of PTX `text` instead of the built kernel.ptx if given: a seeded
    edit of it) and the postprocess, on the same tensors. O and LSE are the forward's, computed in NumPy (O rounded
    to f16), as FA3's autograd function passes them. `seed` and `schedule_seed` as `launch_library`'s."""
    if schedule_seed is not None:
        limits["seed"] = schedule_seed
    lines = subprocess.run([str(BUILD / name / "describe"), *map(str, sizes), str(sms)], capture_output=True,
                           text=True, check=True).stdout
    decoder, descriptions, at = json.JSONDecoder(), [], 0
    while lines[at:].strip():
        description, at = decoder.raw_decode(lines, at + len(lines[at:]) - len(lines[at:].lstrip()))
        descriptions.append(description)
    rng = np.random.default_rng(seed)
    tensors: dict[str, np.ndarray] = {}

    def tensor(key, spec):
        if key not in tensors:
            tensors[key] = _array(spec, rng)
        return tensors[key]

    loaded = [load_description(d, tensor, name) for d in descriptions]
    out, lse = attention_reference(tensors, causal=False)
    tensors["O"][...] = out.astype(np.float16)
    tensors["LSE"][...] = lse.astype(np.float32)
    path = BUILD / name / "kernel.ptx"
    unseeded = name not in _MODULES
    if text is not None:
        module = parse_ptx(text, f"{path} (seeded)")
    else:
        if unseeded:
            _MODULES[name] = parse_ptx(path.read_text(), str(path))
        module = _MODULES[name]
    for kernel, launched in zip(BACKWARD_KERNELS, loaded, strict=True):
        (entry,) = [e for e in module.entries if kernel in e]
        launch(module, entry, launched.grid, launched.block, [launched.struct], launched.shared_bytes,
               str(BUILD / name), cluster=launched.cluster, **limits)
    return tensors


def backward_reference(tensors: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dQ, dK, dV) of softmax(Q K^T / sqrt(D)) V for the upstream gradient dO, in float64, FA3's layouts."""
    q, k, v, do = (tensors[n].astype(np.float64).transpose(0, 2, 1, 3) for n in ("Q", "K", "V", "dO"))
    scale = 1 / np.sqrt(q.shape[-1])
    scores = q @ k.transpose(0, 1, 3, 2) * scale
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    dv = p.transpose(0, 1, 3, 2) @ do
    dp = do @ v.transpose(0, 1, 3, 2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True)) * scale
    dq, dk = ds @ k, ds.transpose(0, 1, 3, 2) @ q
    return tuple(x.transpose(0, 2, 1, 3) for x in (dq, dk, dv))
