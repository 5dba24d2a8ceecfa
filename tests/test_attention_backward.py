"""The attention backward at Tile level (tessera.kernels.attention_backward, tessera.attention_backward): dQ,
dK and dV within the rule of tessera.reference on the issue's matrix, rows that see no key, bitwise
reproducibility in deterministic mode whatever order the blocks run in, and the argument checks.

The matrix: (seq_q, seq_k) x head_dim 64/128 x causal or not x heads 6 with heads_k 6 or 2 x bf16/f16. The
shapes up to (128, 217) run in the default suite, (256, 512), (1023, 1024) and (1024, 1023) in the `slow` group
(`pytest -m slow tests/test_attention_backward.py`, 48 cases, a few minutes on two busy cores), and one long
case also by default. bench/attention_backward_tile.py prints the whole matrix's errors against the rule.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference, reference_attention
from tessera.runtime.attention_backward import BackwardNotLowered, check_backward_arguments, run_interpreted

NUMPY_DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
SHAPES = [(1, 1), (113, 203), (128, 217)]
SLOW_SHAPES = [(256, 512), (1023, 1024), (1024, 1023)]


def _problem(seq_q, seq_k, head_dim, causal, heads_k, dtype, heads=6, batch=1, seed=0):
    """Rounded q, k, v, dO; o the float64 forward rounded as the forward kernel writes it; lse in f32."""
    rng = np.random.default_rng(seed)
    t = NUMPY_DTYPES[dtype]
    q, do = (rng.standard_normal((batch, heads, seq_q, head_dim)).astype(t) for _ in range(2))
    k, v = (rng.standard_normal((batch, heads_k, seq_k, head_dim)).astype(t) for _ in range(2))
    lse = reference_attention.attention_lse(q, k, causal)
    # O = exp(S - LSE) V in float64, as the forward kernel writes it (rounded); 0 for a row that sees no key
    scores = np.matmul(q.astype(np.float64), np.swapaxes(np.repeat(k, heads // heads_k, 1), -1, -2).astype(np.float64))
    if causal:
        scores = np.where(reference_attention.causal_visible(seq_q, seq_k), scores, -np.inf)
    p = np.exp(scores / np.sqrt(head_dim) - np.where(np.isneginf(lse), 0, lse)[..., None])
    o = np.matmul(p, np.repeat(v, heads // heads_k, 1).astype(np.float64)).astype(t)
    return q, k, v, o, lse.astype(np.float32), do


def _run(problem, causal, deterministic=False, order_seed=None):
    config = check_backward_arguments(*problem, causal, None, deterministic, "tile")
    return run_interpreted(config, *problem, order_seed=order_seed)


def _check(grads, problem, dtype, causal):
    q, k, v, o, _, do = problem
    for name, grad, comparison in zip(("dq", "dk", "dv"), grads,
                                      reference.check_attention_backward(grads, q, k, v, o, do,
                                                                         NUMPY_DTYPES[dtype], causal)):
        assert not np.isnan(grad.astype(np.float32)).any(), name
        assert comparison.ok, f"{name}: {comparison}"


def _matrix(shapes):
    return [pytest.param(sq, sk, d, causal, hk, dtype, id=f"{sq}x{sk}-d{d}-{'causal' if causal else 'full'}-hk{hk}-{dtype}")
            for sq, sk in shapes for d in (64, 128) for causal in (False, True) for hk in (6, 2)
            for dtype in ("bf16", "f16")]


@pytest.mark.parametrize("seq_q, seq_k, head_dim, causal, heads_k, dtype", _matrix(SHAPES))
def test_gradients_within_the_rule(seq_q, seq_k, head_dim, causal, heads_k, dtype):
    problem = _problem(seq_q, seq_k, head_dim, causal, heads_k, dtype)
    grads = _run(problem, causal, order_seed=seq_q + seq_k)
    assert [g.shape for g in grads] == [problem[0].shape, problem[1].shape, problem[2].shape]
    assert all(g.dtype == NUMPY_DTYPES[dtype] for g in grads)
    _check(grads, problem, dtype, causal)


def test_a_long_sequence_by_default():
    problem = _problem(1024, 1023, 64, True, 2, "bf16")
    _check(_run(problem, True), problem, "bf16", True)


@pytest.mark.slow
@pytest.mark.parametrize("seq_q, seq_k, head_dim, causal, heads_k, dtype", _matrix(SLOW_SHAPES))
def test_long_sequences_within_the_rule(seq_q, seq_k, head_dim, causal, heads_k, dtype):
    problem = _problem(seq_q, seq_k, head_dim, causal, heads_k, dtype)
    _check(_run(problem, causal, order_seed=1), problem, dtype, causal)


def test_rows_that_see_no_key_have_zero_gradients():
    # causal with seq_q > seq_k: query i sees keys 0 .. i - 90, so rows 0 .. 89 see none (LSE -inf, O = 0)
    problem = _problem(203, 113, 64, True, 2, "bf16")
    assert np.isneginf(problem[4][:, :, :90]).all() and np.isfinite(problem[4][:, :, 90:]).all()
    dq, dk, dv = _run(problem, True)
    assert np.array_equal(dq[:, :, :90].astype(np.float32), np.zeros_like(dq[:, :, :90], np.float32))
    assert np.abs(dq[:, :, 90:].astype(np.float32)).max() > 0
    _check((dq, dk, dv), problem, "bf16", True)


def test_the_rule_rejects_a_wrong_gradient():
    problem = _problem(113, 203, 64, False, 2, "bf16")
    q, k, v, o, lse, do = problem
    wrong = _run((q, k, v, o, lse + np.float32(0.05), do), False)  # P 5% too small everywhere
    comparisons = reference.check_attention_backward(wrong, q, k, v, o, do, ml_dtypes.bfloat16)
    assert not any(c.ok for c in comparisons), [str(c) for c in comparisons]


@pytest.mark.parametrize("causal, heads_k", [(True, 2), (False, 6)])
def test_deterministic_mode_is_bitwise_reproducible_in_any_block_order(causal, heads_k):
    problem = _problem(300, 400, 64, causal, heads_k, "bf16", heads=4 if heads_k == 2 else 6)
    runs = [_run(problem, causal, deterministic=True, order_seed=seed) for seed in (None, 1, 2)]
    for grads in runs[1:]:
        for reference_grad, grad in zip(runs[0], grads):
            assert np.array_equal(reference_grad.view(np.uint16), grad.view(np.uint16))
    _check(runs[0], problem, "bf16", causal)


def test_without_deterministic_mode_the_order_changes_dq_within_the_rule():
    # Eight key blocks add into each dQ row: another order of the f32 additions survives the rounding of dq to
    # bf16 in a few elements (3 to 6 here, whichever BLAS kernel computes the partial products; with the four
    # blocks of seq_k 400 it was 1 or 0, depending on OPENBLAS_CORETYPE).
    problem = _problem(300, 1000, 64, False, 2, "bf16", heads=4)
    (dq1, dk1, dv1), (dq2, dk2, dv2) = (_run(problem, False, order_seed=seed) for seed in (1, 2))
    assert not np.array_equal(dq1.view(np.uint16), dq2.view(np.uint16))  # the f32 additions land in another order
    assert np.array_equal(dk1.view(np.uint16), dk2.view(np.uint16))  # dK, dV: one block each, no atomics
    assert np.array_equal(dv1.view(np.uint16), dv2.view(np.uint16))
    for grads in ((dq1, dk1, dv1), (dq2, dk2, dv2)):
        _check(grads, problem, "bf16", False)


# The builders.


def test_the_three_kernels_and_their_names():
    kernels = tessera.kernels.attention_backward(128, causal=True, dtype="f16", deterministic=True)
    names = [tessera.find_kernel(m).name for m in kernels.modules]
    assert names == ["attention_backward_preprocess_d128_f16_causal", "attention_backward_d128_f16_causal_deterministic",
                     "attention_backward_postprocess_d128_f16_causal"]
    main = tessera.find_kernel(kernels.main)
    assert main.kind == "attention_backward" and main.causal and main.scale == pytest.approx(128**-0.5)
    assert [(a.name, a.role) for a in main.args] == [
        ("Q", "in"), ("K", "in"), ("V", "in"), ("dO", "in"), ("LSE2", "in"), ("dPsum", "in"),
        ("dQaccum", "out"), ("dK", "out"), ("dV", "out"), ("dQsemaphore", "scratch")]
    assert str(main.grid) == "#tile.dims<ceildiv(seq_k, 128), heads_k, batch>"  # head_dim 128: 64 x 128 blocks
    for module in kernels.modules:  # the printed kernels read back
        text = tessera.print_module(module)
        assert tessera.print_module(tessera.parse_module(text)) == text


@pytest.mark.parametrize("options, message", [
    (dict(head_dim=256), "head_dim 256 is not supported by the attention backward"),
    (dict(head_dim=80), "head_dim must be one of 64, 96, 128, 192"),
    (dict(head_dim=64, dtype="f32"), "dtype must be one of 'bf16', 'f16'"),
    (dict(head_dim=64, deterministic=1), "deterministic must be True or False"),
    (dict(head_dim=64, block_m=100), "block_m must be a positive multiple of 16"),
])
def test_builder_refuses_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        tessera.kernels.attention_backward(**options)


# The public API.


def test_api_at_tile_level_matches_the_rule():
    problem = _problem(77, 130, 64, True, 2, "f16", heads=4, batch=2)
    grads = tessera.attention_backward(*problem, causal=True, level="tile")
    _check(grads, problem, "f16", True)


def _api_problem():
    return _problem(5, 7, 64, False, 2, "bf16", heads=4)


@pytest.mark.parametrize("change, error, message", [
    (dict(level="gpu"), ValueError, "level must be None"),
    (dict(q=np.zeros((1, 4, 5, 64), np.float32)), ValueError, "q, k, v, o and do must have one element type"),
    (dict(k=np.zeros((1, 3, 7, 64), ml_dtypes.bfloat16), v=np.zeros((1, 3, 7, 64), ml_dtypes.bfloat16)),
     ValueError, "k and v have 3 heads, which must divide q's 4 heads"),
    (dict(lse=np.zeros((1, 4, 6), np.float32)), ValueError, r"lse must be \[batch, heads, seq_q\]"),
    (dict(do=np.zeros((1, 4, 6, 64), ml_dtypes.bfloat16)), ValueError, "do must have q's shape"),
    (dict(v="v"), TypeError, "v must be a NumPy array"),
    (dict(causal="yes"), ValueError, "causal must be True or False"),
    (dict(scale=-1.0), ValueError, "scale must be a positive finite number"),
    (dict(deterministic=None), ValueError, "deterministic must be True or False"),
])
def test_api_checks_arguments_by_name(change, error, message):
    names = ("q", "k", "v", "o", "lse", "do")
    arguments = dict(zip(names, _api_problem()), level="tile")
    arguments.update(change)
    with pytest.raises(error, match=message):
        tessera.attention_backward(**arguments)


def test_api_refuses_head_dim_80():
    from tessera.runtime.attention import UnsupportedKernel

    q = np.zeros((1, 2, 5, 80), ml_dtypes.bfloat16)
    with pytest.raises(UnsupportedKernel, match="head_dim 80 is not supported by the backward kernels"):
        tessera.attention_backward(q, q, q, q, np.zeros((1, 2, 5), np.float32), q, level="tile")


def test_api_on_the_gpu_needs_one():
    from tessera.runtime import CudaUnavailable, cuda_unavailable_reason

    if cuda_unavailable_reason() is None:
        pytest.skip("a GPU is present")
    with pytest.raises(CudaUnavailable):
        tessera.attention_backward(*_api_problem())


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_api_below_tile_level_runs(level):
    """The backward's pipeline lowers all three kernels: the call runs, and its gradients are right."""
    problem = _problem(1, 1, 64, False, 2, "bf16", heads=4)
    _check(tessera.attention_backward(*problem, level=level), problem, "bf16", False)


def test_a_refused_lowering_is_named_and_a_bug_is_not_hidden(monkeypatch):
    """A pipeline whose pass refuses a backward kernel (`SPECIALIZED_PIPELINE`, which does not fall back, with
    setmaxnreg's largest budget made 128 here: the main kernel's consumers need more) is BackwardNotLowered naming
    the kernel; any other exception of the lowering propagates as itself, not as a refusal."""
    import tessera.runtime.attention_backward as backward
    from tessera import passes
    from tessera.sm90 import facts

    problem = _problem(1, 1, 64, False, 2, "bf16", heads=4)
    assert passes.SPECIALIZED_PIPELINE != passes.DEFAULT_PIPELINE  # not allocated: named, so it does not fall back
    monkeypatch.setattr(backward, "BACKWARD_PIPELINE", "SPECIALIZED_PIPELINE")
    monkeypatch.setattr(facts, "SETMAXNREG_MAX", 128)
    with pytest.raises(BackwardNotLowered, match=r"needs kernel @attention_backward\w* lowered to Target IR, "
                                                 r"and the default pipeline does not lower it yet: .*warp-specialize"):
        tessera.attention_backward(*problem, level="target")

    def broken(*args, **kwargs):
        raise KeyError("a bug in a pass")

    from tessera import api

    monkeypatch.setattr(api, "compile", broken)
    with pytest.raises(KeyError, match="a bug in a pass"):
        tessera.attention_backward(*problem, level="target")


def test_autograd_wrapper_gives_the_backward_kernels_gradients():
    torch = pytest.importorskip("torch")
    from tessera.runtime.autograd import attention

    problem = _problem(40, 70, 64, True, 2, "bf16", heads=4)
    q, k, v = (torch.tensor(x.astype(np.float32)).to(torch.bfloat16).requires_grad_() for x in problem[:3])
    do = torch.tensor(problem[5].astype(np.float32)).to(torch.bfloat16)
    o = attention(q, k, v, causal=True, level="tile")
    o.backward(do)
    expected = tessera.attention_backward(*problem, causal=True, level="tile")
    for tensor, grad in zip((q, k, v), expected):
        got = tensor.grad.float().numpy()
        np.testing.assert_allclose(got, grad.astype(np.float32), atol=2e-2, rtol=2e-2)
