"""Gradients of captured tensors a score_mod reads (FlexAttention's learned biases): `tessera.attention_backward(...,
captured_grads=)` for NumPy arrays, `tessera.runtime.autograd.attention` filling a tensor's `.grad`, against
torch's autograd through an eager float64 attention (`captured_grads_checks`), and torch's own flex_attention on CPU
(`-m slow`); what gets no gradient is refused by name. The kernels' `tile.scatter_add` is checked on its own first.
Skipped without torch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")

import tessera  # noqa: E402
from tessera.interpreters.launch import prepare_arguments, run_grid  # noqa: E402
from tessera.numerics import BF16, round_to  # noqa: E402
from tessera.variants import ModTraceError  # noqa: E402
from captured_grads_checks import assert_assembles_under_every_ptxas, assert_captured_grads, eager_captured_grads  # noqa: E402

SCATTER = """
func.func @scatter(%X: !tile.tile<?x8xf32, global> {tile.dims = #tile.dims<n, 8>},
                   %T: !tile.tile<5xf32, global> {tile.dims = #tile.dims<5>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<3>} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x8xf32, global> -> !tile.tile<4x8xf32, global>
  %x = tile.load %w : !tile.tile<4x8xf32, global> -> !tile.tile<4x8xf32, register>
  %rows = tile.iota rows offset %c0 : !tile.tile<4xi32, register>
  %cols = tile.iota cols offset %c2 : !tile.tile<1x8xi32, register>
  %i = tile.sub %cols, %rows : !tile.tile<1x8xi32, register>, !tile.tile<4xi32, register>
  tile.scatter_add %x, %T[%i] : !tile.tile<4x8xf32, register>, !tile.tile<5xf32, global>, !tile.tile<4x8xi32, register>
  func.return
}
"""


def test_scatter_add_sums_every_element_that_names_an_entry_and_drops_the_rest(rng):
    """T[j] += X[r, c] for every block and element with j = c + 2 - r, exactly the elements whose j is in [0, 5)."""
    module = tessera.parse_module(SCATTER)
    sig = tessera.find_kernel(module)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    arguments, sizes = prepare_arguments(sig, [x])
    run_grid(sig, module, arguments, sizes, order=[2, 0, 1])
    expected = np.zeros(5)
    for r in range(4):
        for c in range(8):
            if 0 <= c + 2 - r < 5:
                expected[c + 2 - r] += 3 * float(x[r, c])
    np.testing.assert_allclose(arguments[1], expected, rtol=1e-5, atol=1e-6)


def _inputs(batch, heads, heads_k, seq_q, seq_k, head_dim=64, seed=0):
    rng = np.random.default_rng(seed)
    q = round_to(rng.standard_normal((batch, heads, seq_q, head_dim)), BF16)
    k, v = (round_to(rng.standard_normal((batch, heads_k, seq_k, head_dim)), BF16) for _ in range(2))
    return q, k, v, round_to(rng.standard_normal(q.shape), BF16), rng


def _rel_causal(seq_q, seq_k):
    """rel[q - kv + seq_k - 1] (a relative-position table) under a bottom-right causal mask_mod."""
    def make(t):
        rel = t["rel"]
        return (lambda s, b, h, q, kv: s + rel[q - kv + seq_k - 1],
                lambda b, h, q, kv: q + (seq_k - seq_q) >= kv)
    return lambda rng: {"rel": rng.standard_normal(seq_q + seq_k - 1)}, make


def _slopes_and_table_twice(seq_q, seq_k):
    """Two captured tensors, one read twice: ALiBi slopes[h] and a per-head table at [h, q - kv] and [h, kv - q]."""
    def make(t):
        slopes, table = t["slopes"], t["table"]
        return (lambda s, b, h, q, kv: s + slopes[h] * (kv - q) + table[h, q - kv + seq_k - 1]
                - 0.5 * table[h, kv - q + seq_q - 1], None)
    return lambda rng, heads=2: {"slopes": rng.standard_normal(heads) * 0.3,
                                 "table": rng.standard_normal((heads, seq_q + seq_k - 1))}, make


def _tanh(x):
    return torch.tanh(x) if isinstance(x, torch.Tensor) else np.tanh(x)


def _bias(batch, heads, seq_q, seq_k):
    """A full [B, H, S, S] bias scaling a soft-capped score (its derivative reads the score and the bias)."""
    def make(t):
        bias = t["bias"]
        return lambda s, b, h, q, kv: 5 * _tanh(s / 5) * (1 + 0.1 * bias[b, h, q, kv]), None
    return lambda rng: {"bias": rng.standard_normal((batch, heads, seq_q, seq_k))}, make


def _numpy_case(make, tables, shape, head_dim=64, seed=0, level="tile"):
    """The kernels' gradients (NumPy API, backward at `level`) of `make(tables)` on inputs of `shape`, checked."""
    q, k, v, do, _ = _inputs(*shape, head_dim=head_dim, seed=seed)
    arrays = {name: np.asarray(t, np.float32) for name, t in tables.items()}
    score_mod, mask_mod = make(arrays)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
        dq, dk, dv, grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod,
                                                       level=level, captured_grads=True)
    assert sorted(grads) == sorted(arrays)
    assert_captured_grads(grads, q, k, v, do, o, lambda t: make(t), arrays)
    return grads


def test_two_captured_tensors_one_read_twice_with_gqa():
    """ALiBi slopes[h] and a per-head relative table read at [h, q - kv] and [h, kv - q], GQA (2 heads, 1 K/V
    head), seq_q 17, seq_k 30: each gradient the scatter-add of dS_mod times its read's derivative."""
    seq_q, seq_k = 17, 30
    tables, make = _slopes_and_table_twice(seq_q, seq_k)
    grads = _numpy_case(make, tables(np.random.default_rng(1)), (1, 2, 1, seq_q, seq_k))
    assert grads["table"].dtype == np.float32 and grads["table"].shape == (2, seq_q + seq_k - 1)


def test_autograd_fills_the_grad_of_a_learned_table_under_a_causal_mask():
    """loss.backward() through `tessera.runtime.autograd.attention` fills rel.grad (a relative-position table
    nn.Parameter) as torch's autograd of the float64 eager attention does; q.grad too."""
    from tessera.runtime import autograd

    seq_q, seq_k = 17, 17
    q, k, v, do, rng = _inputs(1, 2, 2, seq_q, seq_k, seed=3)
    rel = torch.nn.Parameter(torch.from_numpy(rng.standard_normal(seq_q + seq_k - 1).astype(np.float32)))
    qt, kt, vt = (torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16).requires_grad_(True)
                  for x in (q, k, v))
    score_mod = lambda s, b, h, q_idx, kv_idx: s + rel[q_idx - kv_idx + seq_k - 1]  # noqa: E731
    mask_mod = lambda b, h, q_idx, kv_idx: q_idx >= kv_idx  # noqa: E731
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        o = autograd.attention(qt, kt, vt, level="tile", score_mod=score_mod, mask_mod=mask_mod)
        (o.float() * torch.from_numpy(np.asarray(do, np.float32))).sum().backward()
    assert rel.grad is not None and rel.grad.dtype == torch.float32 and qt.grad is not None
    _, make = _rel_causal(seq_q, seq_k)
    assert_captured_grads({"rel": rel.grad}, q, k, v, do, o.detach().float().numpy(), make,
                          {"rel": rel.detach().numpy()})


def _refused(score_mod, mask_mod=None, match="", level="tile", error=ModTraceError, **options):
    """attention_backward(captured_grads=...) refused with `error` matching `match`, before any kernel runs."""
    q, k, v, do, _ = _inputs(1, 2, 2, 8, 8)
    o, lse = np.zeros_like(q), np.zeros(q.shape[:3], np.float32)
    options.setdefault("captured_grads", True)
    with pytest.raises(error, match=match):
        tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, level=level,
                                   **options)


TABLE = np.linspace(-1, 1, 8).astype(np.float32)
INDEX_TABLE = np.arange(8).astype(np.float32)


def test_what_gets_no_gradient_is_refused_by_name():
    """A captured tensor used as an index, one a mask_mod reads, one read at constant indices, an integer one,
    a name the score_mod does not read, and captured gradients with deterministic=True (on the GPU too)."""
    def as_index(s, b, h, q, kv):
        return s + TABLE[INDEX_TABLE[kv].astype(np.int32)]
    _refused(as_index, match="uses INDEX_TABLE as an index", captured_grads=["INDEX_TABLE"])
    def masked(b, h, q, kv):
        return TABLE[kv] > 0
    _refused(lambda s, b, h, q, kv: s + TABLE[q], masked, match="mask_mod '.*masked' reads TABLE")
    _refused(lambda s, b, h, q, kv: s * TABLE[3] + TABLE[kv], match="read at constant indices")
    ints = np.arange(8, dtype=np.int32)
    _refused(lambda s, b, h, q, kv: s + ints[kv], match="ints, an integer or boolean array",
             captured_grads=["ints"])
    _refused(lambda s, b, h, q, kv: s + TABLE[kv], match="'other' is not an array", error=ValueError,
             captured_grads=["other"])
    _refused(lambda s, b, h, q, kv: s + TABLE[kv], match="deterministic=True", error=ValueError, deterministic=True)
    _refused(lambda s, b, h, q, kv: s + TABLE[kv], match="deterministic=True", error=ValueError, deterministic=True,
             level=None)
    _refused(None, lambda b, h, q, kv: q >= kv, match="needs a score_mod", error=ValueError)


def test_autograd_refuses_a_table_it_cannot_differentiate_before_the_forward():
    """A parameter read by a mask_mod, a 0-d one, or one with deterministic=True (added by atomics), is refused by
    name when `autograd.attention` is called (no forward run whose backward would leave .grad unset)."""
    from tessera.runtime import autograd

    q, k, v, _, _ = _inputs(1, 2, 2, 8, 8)
    qt, kt, vt = (torch.from_numpy(np.asarray(x, np.float32)).to(torch.bfloat16) for x in (q, k, v))
    table = torch.nn.Parameter(torch.zeros(8))
    with pytest.raises(ValueError, match="the mask_mod reads table, which requires grad"):
        autograd.attention(qt, kt, vt, level="tile", mask_mod=lambda b, h, q_idx, kv_idx: table[kv_idx] >= 0)
    temperature = torch.nn.Parameter(torch.tensor(2.0))  # 0-d: a constant of the kernel (its .grad stayed None)
    with pytest.raises(ModTraceError, match="reads temperature, a 0-d tensor that requires grad"):
        autograd.attention(qt, kt, vt, level="tile", score_mod=lambda s, b, h, q_idx, kv_idx: s * temperature)
    with pytest.raises(ValueError, match="requires grad, and deterministic=True"):
        autograd.attention(qt, kt, vt, level=None, deterministic=True,
                           score_mod=lambda s, b, h, q_idx, kv_idx: s + table[kv_idx])


# region the matrix (-m slow): lengths 1/17/129/300, GQA, causal, tables by (h), (q - kv), (b, h, q, kv)

LENGTHS = (1, 17, 129, 300)


@pytest.mark.slow
@pytest.mark.parametrize("seq", LENGTHS)
@pytest.mark.parametrize("head_dim", (64, 128))
def test_matrix_slopes_and_table_twice_gqa(seq, head_dim):
    tables, make = _slopes_and_table_twice(seq, seq + 3)
    _numpy_case(make, tables(np.random.default_rng(seq), heads=4), (2, 4, 2, seq, seq + 3), head_dim=head_dim,
                seed=seq)


@pytest.mark.slow
@pytest.mark.parametrize("seq", LENGTHS)
def test_matrix_relative_table_causal(seq):
    tables, make = _rel_causal(seq, seq)
    _numpy_case(make, tables(np.random.default_rng(seq)), (1, 2, 1, seq, seq), seed=seq)


@pytest.mark.slow
@pytest.mark.parametrize("seq", LENGTHS)
def test_matrix_full_bias_table(seq):
    tables, make = _bias(2, 2, seq, seq)
    _numpy_case(make, tables(np.random.default_rng(seq)), (2, 2, 2, seq, seq), seed=seq)


@pytest.mark.slow
def test_against_torch_flex_attention_on_cpu():
    """torch's own flex_attention (eager, CPU, float64) and its autograd give the table's gradient the kernels do,
    within the same tolerance."""
    from torch.nn.attention.flex_attention import flex_attention

    seq_q, seq_k = 129, 129
    tables, make = _slopes_and_table_twice(seq_q, seq_k)
    arrays = {n: np.asarray(t, np.float32) for n, t in tables(np.random.default_rng(5), heads=2).items()}
    q, k, v, do, _ = _inputs(1, 2, 1, seq_q, seq_k, seed=5)
    score_mod, _ = make(arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, return_lse=True, level="tile")
        *_, grads = tessera.attention_backward(q, k, v, o, lse, do, score_mod=score_mod, level="tile",
                                               captured_grads=True)
        leaves = {n: torch.tensor(np.asarray(t, np.float64), requires_grad=True) for n, t in arrays.items()}
        torch_mod, _ = make(leaves)
        out = flex_attention(*(torch.from_numpy(np.asarray(x, np.float64)) for x in (q, k, v)), score_mod=torch_mod,
                             enable_gqa=True)
        (out * torch.from_numpy(np.asarray(do, np.float64))).sum().backward()
    assert_captured_grads(grads, q, k, v, do, o, make, arrays)
    exact = eager_captured_grads(q, k, v, do, make, arrays)
    for name, leaf in leaves.items():  # torch's flex_attention and the eager reference agree
        np.testing.assert_allclose(leaf.grad.numpy(), exact[name], rtol=1e-9, atol=1e-9 * np.abs(exact[name]).max())


def _rel_slopes_causal(seq_q, seq_k):
    """slopes[h] and a per-head table read twice, under a bottom-right causal mask_mod."""
    tables, make = _slopes_and_table_twice(seq_q, seq_k)

    def masked(t):
        score_mod, _ = make(t)
        return score_mod, lambda b, h, q, kv: q + (seq_k - seq_q) >= kv
    return tables, masked


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("head_dim", (64, 128))
def test_below_tile_level_the_scatter_is_red_global_add(level, head_dim):
    """The lowered main kernel (`tile.scatter_add` as one red.global.add.f32 a register) in the CTA simulator and
    the PTX executor: GQA, a causal mask_mod, two tensors, one read twice (at head_dim 128 the head split, with the
    warning naming it: tests/test_captured_gradients_head_split.py)."""
    tables, make = _rel_slopes_causal(17, 30)
    _numpy_case(make, tables(np.random.default_rng(9)), (1, 2, 1, 17, 30), head_dim=head_dim, seed=9, level=level)


@pytest.mark.slow
def test_the_main_kernel_with_captured_gradients_assembles_under_every_ptxas():
    """At head_dim 64 the main kernel with a table read twice and slopes (three scatters) takes the default
    pipeline's single-stage rung (warp-specialized needs 251 registers of 240) and every ptxas found assembles it
    without a warning or a spill."""
    from tessera.kernels import attention_backward

    tables, make = _rel_slopes_causal(17, 30)
    score_mod, mask_mod = make({n: np.asarray(t, np.float32) for n, t in tables(np.random.default_rng(9)).items()})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's warning
        main = attention_backward(64, score_mod=score_mod, mask_mod=mask_mod, block_sparse=True,
                                  captured_grads=("score_mod_slopes", "score_mod_table")).main
        ptx = tessera.compile(main, target="ptx")
    assert ptx.count("red.global.add.f32") >= 3 * 32
    assert_assembles_under_every_ptxas(ptx)

# endregion


@pytest.mark.slow
def test_the_keys_on_rows_main_kernel_scatters_the_transposed_scores():
    """The head_dim 128 main kernel with keys on its rows (64 x 128 blocks, S^T: what the GPU path tries first)
    scatters dS_mod^T at the transposed coordinates: the same gradients, at Tile level."""
    from tessera.runtime import flex

    seq_q, seq_k = 17, 30
    tables, make = _rel_slopes_causal(seq_q, seq_k)
    arrays = {n: np.asarray(t, np.float32) for n, t in tables(np.random.default_rng(4)).items()}
    score_mod, mask_mod = make(arrays)
    q, k, v, do, _ = _inputs(1, 2, 1, seq_q, seq_k, head_dim=128, seed=4)
    names = ("score_mod_slopes", "score_mod_table")
    options = dict(score_mod=score_mod, mask_mod=mask_mod, level="tile", deterministic=False, captured_grads=names)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.simplefilter("ignore")
        o, lse = tessera.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, return_lse=True, level="tile")
        kernels, sparse = flex.backward_kernels(q, causal=False, scale=None, head_dim=128, dtype="bf16",
                                                blocks=(64, 128), head_split=1, **options)
        assert kernels.config.key_rows
        *_, grads = flex._backward(kernels, sparse, q, k, v, o, lse, do, **options)
    assert_captured_grads(dict(zip(("slopes", "table"), grads)), q, k, v, do, o, make, arrays)
