"""`tessera.gemm` given what a NumPy user passes next (round 6 of the unseen cases): layouts and shapes no earlier
test used (M = N = K = 1, a row or a column of output, K = 257, TT, batched TN, views with strides, Fortran
order), values at the edges (inf, NaN, subnormal bf16 inputs, a subnormal alpha, NaN and inf in c and the
bias) against float64 NumPy: the same NaNs and infinities, every finite value exact (integer inputs); FP8 and
f32 operands are refused by name. A NumPy scalar alpha or beta (`np.float32(0.5)`, what `x.dtype.type(0.5)`
gives) was refused as "not a finite number", and inf or NaN inputs made the interpreters emit NumPy
RuntimeWarnings. About 3 s."""

from __future__ import annotations

import importlib
import warnings

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.runtime.attention_base import UnsupportedKernel

BF16 = ml_dtypes.bfloat16


def _ints(rng, *shape):
    return rng.integers(-3, 4, shape).astype(BF16)


def _expected(a, b, transpose_a=False, transpose_b=False, alpha=1.0, beta=0.0, c=None, bias=None):
    a, b = a.astype(np.float64), b.astype(np.float64)
    a, b = (a.swapaxes(-1, -2) if transpose_a else a), (b.swapaxes(-1, -2) if transpose_b else b)
    with np.errstate(invalid="ignore", over="ignore"):
        out = float(alpha) * (a @ b)
        out = out if c is None else out + float(beta) * c
        return out if bias is None else out + bias


def _shapes(rng):
    """name: (a, b, options), integer inputs: every product and sum exact in f32."""
    strided = _ints(rng, 40, 66)[:, ::2]
    weird = _ints(rng, 9, 16)
    weird[0, 0], weird[1, 1], weird[2, 2] = np.inf, np.nan, BF16(1e-39)  # a bf16 subnormal
    c = rng.integers(-8, 8, (9, 8)).astype(np.float32)
    c[3, 3], c[4, 4] = np.nan, -np.inf
    return {
        "1x1x1": (_ints(rng, 1, 1), _ints(rng, 1, 1), {}),
        "one row, K = 17": (_ints(rng, 1, 17), _ints(rng, 17, 33), {}),
        "one column, K = 257": (_ints(rng, 7, 257), _ints(rng, 257, 1), {}),
        "TT 7x33x257": (_ints(rng, 257, 7), _ints(rng, 33, 257), dict(transpose_a=True, transpose_b=True)),
        "a view with a column stride": (strided, _ints(rng, 33, 9), {}),
        "Fortran order": (np.asfortranarray(_ints(rng, 9, 24)), _ints(rng, 24, 5), {}),
        "batched TN": (_ints(rng, 3, 17, 9), _ints(rng, 3, 17, 5), dict(transpose_a=True)),
        "batched, b strided": (_ints(rng, 3, 5, 9), _ints(rng, 3, 9, 10)[:, :, ::2], {}),
        "inf, NaN, subnormal in a": (weird, _ints(rng, 16, 8), {}),
        "alpha 0 times inf": (weird, _ints(rng, 16, 8), dict(alpha=0.0)),
        "subnormal alpha": (_ints(rng, 4, 8), _ints(rng, 8, 8), dict(alpha=2.0**-140)),
        "NaN and inf in c": (weird, _ints(rng, 16, 8), dict(c=c, beta=-2.0)),
        "NaN bias": (_ints(rng, 4, 8), _ints(rng, 8, 8), dict(bias=np.array([np.nan] + [0.5] * 7, np.float32))),
        "NumPy scalars": (_ints(rng, 4, 8), _ints(rng, 8, 8), dict(alpha=np.float32(0.5), beta=np.int64(2),
                                                                    c=np.ones((4, 8), np.float32))),
    }


CASES = _shapes(np.random.default_rng(12))


@pytest.mark.parametrize("name", CASES)
def test_gemm_of_unseen_layouts_and_values_is_exact(name):
    a, b, options = CASES[name]
    got = tessera.gemm(a, b, level="tile", **options)
    expected = _expected(a, b, **options)
    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected.astype(np.float32), name)  # NaNs where NumPy's, same infinities


@pytest.mark.parametrize("name", ["TT 7x33x257", "inf, NaN, subnormal in a", "NumPy scalars"])
def test_gemm_lowered_agrees_bit_for_bit(name):
    a, b, options = CASES[name]
    np.testing.assert_array_equal(tessera.gemm(a, b, level="target", **options),
                                  tessera.gemm(a, b, level="tile", **options))


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.float32])
def test_gemm_refuses_other_element_types_by_name(dtype):
    a = np.ones((4, 8), dtype)
    with pytest.raises(UnsupportedKernel, match=rf"gemm: element type {np.dtype(dtype).name} is not supported "
                                                r"\(supported: bfloat16, float16\)"):
        tessera.gemm(a, a.T.copy(), level="tile")


@pytest.mark.parametrize("value", [np.float32(0.5), np.float16(-2), np.int32(3), np.float64(0.25)])
def test_numpy_scalar_factors_are_numbers(value):
    """Regression: `check_factor` took only Python int and float, so `alpha=np.float32(0.5)` was refused as
    "not a finite number" (np.float64 passed: it subclasses float); a NumPy bool is still refused."""
    check_factor = importlib.import_module("tessera.kernels.gemm").check_factor
    assert check_factor("alpha", value) == float(value)
    with pytest.raises(ValueError, match=r"beta must be a finite number; got np.True_"):
        check_factor("beta", np.bool_(True))


@pytest.mark.parametrize("level", ["tile", "target"])
def test_inf_and_nan_inputs_warn_of_nothing(level):
    """Regression: an inf or NaN input made the interpreters' own NumPy arithmetic (the Tile interpreter's
    products and scales, the CTA simulator's wgmma) emit RuntimeWarnings from inside Tessera, an exception
    under `-W error`; IEEE arithmetic raises nothing on the GPU, and `tessera.launch` now runs them quietly."""
    a, b, options = CASES["NaN and inf in c"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = tessera.gemm(a, b, level=level, alpha=0.0, **options)
    assert np.isnan(got[0, 0]) and np.isnan(got[3, 3]) and got[4, 4] == np.inf  # 0 inf; NaN c; -2 (-inf)


# region attention_with_kvcache: a refused append leaves the caches as they were

def _decoding(rng):
    q = rng.standard_normal((2, 1, 4, 64)).astype(BF16)
    caches = [rng.standard_normal((2, 40, 2, 64)).astype(BF16) for _ in range(2)]
    new = [rng.standard_normal((2, 1, 2, 64)).astype(BF16) for _ in range(2)]
    return q, caches, new, np.array([10, 20], np.int32)


def test_a_call_refused_for_want_of_a_gpu_appends_nothing():
    """Regression: with level=None and no usable GPU, k_new and v_new were written into the caches and then
    CudaUnavailable was raised, so a caller that retried at a CPU level (as the message suggests) found its
    cache already changed by a call that had failed."""
    from tessera.runtime import CudaUnavailable
    from tessera.runtime.launch import usable_device

    try:
        usable_device([])
        pytest.skip("a GPU is usable here: level=None runs")
    except CudaUnavailable:
        pass
    q, (k_cache, v_cache), (k_new, v_new), lengths = _decoding(np.random.default_rng(3))
    before = k_cache.copy(), v_cache.copy()
    with pytest.raises(CudaUnavailable, match="pass level='tile', 'target' or 'ptx'"):
        tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, k_new=k_new, v_new=v_new)
    assert np.array_equal(k_cache, before[0]) and np.array_equal(v_cache, before[1])


def test_a_read_only_cache_is_refused_by_name_before_either_is_written():
    """Regression: a read-only v_cache (a `np.broadcast_to` view) raised NumPy's bare "assignment destination is
    read-only" after k_new had been written into k_cache."""
    q, (k_cache, v_cache), (k_new, v_new), lengths = _decoding(np.random.default_rng(4))
    before = k_cache.copy()
    frozen = np.broadcast_to(v_cache[:1], v_cache.shape)
    with pytest.raises(ValueError, match=r"attention_with_kvcache: k_new and v_new are appended to the caches in "
                                         r"place, but v_cache is read-only"):
        tessera.attention_with_kvcache(q, k_cache, frozen, cache_seqlens=lengths, k_new=k_new, v_new=v_new,
                                       level="tile")
    assert np.array_equal(k_cache, before)

# endregion


def test_caches_sharing_memory_are_refused_when_appending():
    """One array passed as both caches (or two views of one buffer) would have v_new's rows overwrite the keys
    just appended: refused by name before either is written. Reading such caches without appending is fine."""
    q, (k_cache, v_cache), (k_new, v_new), lengths = _decoding(np.random.default_rng(5))
    before = k_cache.copy()
    with pytest.raises(ValueError, match="k_cache and v_cache share memory"):
        tessera.attention_with_kvcache(q, k_cache, k_cache, cache_seqlens=lengths, k_new=k_new, v_new=v_new,
                                       level="tile")
    both = np.stack([k_cache, v_cache])
    with pytest.raises(ValueError, match="k_cache and v_cache share memory"):
        tessera.attention_with_kvcache(q, both[0], both[0][...], cache_seqlens=lengths, k_new=k_new, v_new=v_new,
                                       level="tile")
    assert np.array_equal(k_cache, before)
    tessera.attention_with_kvcache(q, k_cache, k_cache, cache_seqlens=lengths, level="tile")
