"""FP8 (e4m3) attention as its users write it (unseen23f): decoding rows over odd cache lengths with GQA 8:1
and descales that differ per batch, inputs quantized from data with outliers, NaN inputs from a cast that
does not saturate, causal rows that see no key next to bf16's, head dims at the edges of the key block, torch
CPU tensors in FlashAttention-3's layout, descales of other types, the kernel through `tessera.launch` and
`tessera-run`, and what is refused by name. Each result is held to a float64 reference written here, on the
dequantized inputs (`_reference`), within `reference.check_attention_fp8`'s rule and `check_lse_fp8`'s.

Tile level for the grids and the NaN inputs, `tessera.launch` at every level by default; a slice at "target" and
"ptx" (decoding, outliers, rows that see no key, the key block's edges), the torch tensors' PTX run and
`tessera-run` with `pytest -m slow tests/test_unseen_fp8_attention.py` (about a minute).
"""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference as R
from tessera import reference_fp8
from tessera.runtime.attention_base import UnsupportedKernel

E4M3 = ml_dtypes.float8_e4m3fn


def _reference(q8, k8, v8, descales, causal, scale=None):
    """(O, LSE) in float64 of the dequantized inputs: x8 times its [batch, heads_k] descale (None: 1), query head
    h reading key head h // (heads // heads_k), bottom-right causal; a row that sees no key gives O = 0 and
    LSE = -inf."""
    (batch, heads, seq_q, d), (heads_k, seq_k) = q8.shape, k8.shape[1:3]
    group = heads // heads_k
    factors = [np.ones((batch, heads_k)) if x is None else np.asarray(x, np.float64) for x in descales]
    q = q8.astype(np.float64) * np.repeat(factors[0], group, axis=1)[:, :, None, None]
    k, v = (np.repeat(x.astype(np.float64) * f[:, :, None, None], group, axis=1)
            for x, f in ((k8, factors[1]), (v8, factors[2])))
    s = q @ k.swapaxes(-1, -2) * (1 / np.sqrt(d) if scale is None else scale)
    if causal:
        s = np.where(np.arange(seq_k)[None] <= np.arange(seq_q)[:, None] + seq_k - seq_q, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isneginf(m), 0, m)
    p = np.exp(s - m)
    total = p.sum(axis=-1, keepdims=True)
    o = np.where(total > 0, p @ v / np.where(total > 0, total, 1), 0)
    with np.errstate(divide="ignore"):
        return o, np.log(total[..., 0]) + m[..., 0]


def _draw(seed, batch, heads, heads_k, seq_q, seq_k, d, spread=2.0):
    rng = np.random.default_rng(seed)
    q, k, v = ((rng.standard_normal((batch, h, s, d)) * spread).astype(E4M3)
               for h, s in ((heads, seq_q), (heads_k, seq_k), (heads_k, seq_k)))
    return q, k, v, [(rng.random((batch, heads_k)) * 2).astype(np.float32) for _ in range(3)]


def _check(o, lse, q, k, v, descales, causal):
    """o and lse within the documented rules, and the dead rows exactly as the float64 reference has them."""
    ref_o, ref_lse = _reference(q, k, v, descales, causal)
    assert o.dtype == np.dtype(ml_dtypes.bfloat16) and o.shape == q.shape
    check = R.check_attention_fp8(o, q, k, v, *descales, causal=causal)
    assert check.ok, check
    np.testing.assert_allclose(reference_fp8.attention_fp8(q, k, v, *descales, causal=causal), ref_o, rtol=1e-9,
                               atol=1e-12)  # the rule's reference is this one
    if lse is not None:
        assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse))
        assert R.check_lse_fp8(lse, q, k, *descales[:2], causal=causal).ok


def _run(level, q, k, v, descales, causal):
    o, lse = tessera.attention(q, k, v, causal=causal, descale_q=descales[0], descale_k=descales[1],
                               descale_v=descales[2], return_lse=True, level=level)
    _check(o, lse, q, k, v, descales, causal)
    return o, lse


def _decode(seq_k):
    """One query row per head, 8 query heads on 1 key head, batch 2 whose descales differ by 100x or more."""
    q, k, v, _ = _draw(seq_k, 2, 8, 1, 1, seq_k, 64)
    descales = [np.array([[0.5], [3.0]], np.float32), np.array([[0.02], [1.5]], np.float32),
                np.array([[7.0], [0.001]], np.float32)]
    return q, k, v, descales


@pytest.mark.parametrize("seq_k", [1, 17, 129, 300])
@pytest.mark.parametrize("causal", [False, True])
def test_decoding_rows_gqa_8_to_1_with_descales_per_batch(seq_k, causal):
    _run("tile", *_decode(seq_k), causal)


def _outliers():
    """One value of 1e4 per row among N(0, 1): quantized per (batch, head) with descale amax / 448 and the
    saturating cast (clip, then astype), most values land on e4m3's subnormals."""
    rng = np.random.default_rng(3)
    data = [rng.standard_normal(s) for s in ((1, 2, 70, 128), (1, 2, 100, 128), (1, 2, 100, 128))]
    quantized, descales = [], []
    for x in data:
        column = rng.integers(0, 128, size=x.shape[:3])[..., None]
        np.put_along_axis(x, column, 1e4 * np.sign(rng.standard_normal(column.shape)), axis=-1)
        descale = (np.abs(x).max(axis=(2, 3)) / 448).astype(np.float32)
        quantized.append(np.clip(x / descale[:, :, None, None], -448, 448).astype(E4M3))
        descales.append(descale)
    return (*quantized, descales)


def test_inputs_quantized_from_data_with_outliers():
    _run("tile", *_outliers(), causal=True)


def test_nan_inputs_give_nan_rows_at_every_level_and_the_reference_agrees():
    """ml_dtypes' cast does not saturate (|x| > 464 becomes NaN; torch's `.to(torch.float8_e4m3fn)` gives 448):
    a NaN in K makes every row NaN, in Q its row, in V one column of every row; at every level, as in the
    float64 reference, so check_attention_fp8 holds it right. Regression: the reference gave zeros for a row with
    a NaN score and the check called the kernel's NaN rows a mismatch of infinite error."""
    assert np.isnan(np.float32(500).astype(E4M3).astype(np.float32))
    q, k, v, descales = _draw(3, 1, 1, 1, 4, 20, 64)
    for name, index, nan_rows, nan_columns in (("k", (0, 0, 3, 5), 4, 64), ("q", (0, 0, 1, 5), 1, 64),
                                               ("v", (0, 0, 3, 5), 4, 1)):
        inputs = {"q": q.copy(), "k": k.copy(), "v": v.copy()}
        inputs[name][index] = np.float32(1000.0)
        for level in ("tile", "target", "ptx"):
            o, lse = tessera.attention(*inputs.values(), descale_q=descales[0], descale_k=descales[1],
                                       descale_v=descales[2], return_lse=True, level=level)
            nan = np.isnan(o.astype(np.float32))
            assert nan.sum() == nan_rows * nan_columns, (name, level)
            assert R.check_attention_fp8(o, *inputs.values(), *descales).ok, (name, level)
            assert R.check_lse_fp8(lse, inputs["q"], inputs["k"], *descales[:2]).ok, (name, level)
    k[0, 0, 3, 5] = np.float32(1000.0)
    o = tessera.attention(q, k, v, level="tile").astype(np.float32)
    assert not R.check_attention_fp8(np.where(np.isnan(o), 0, o), q, k, v).ok  # NaN rows lost: a mismatch
    q, k, v, _ = _draw(4, 1, 1, 1, 300, 300, 64)  # causal: a NaN key reaches only the rows that see it
    k[0, 0, 200, 5] = np.float32(1000.0)
    o = tessera.attention(q, k, v, causal=True, level="tile")
    assert np.array_equal(np.isnan(o.astype(np.float32)).any(axis=-1)[0, 0], np.arange(300) >= 200)
    assert R.check_attention_fp8(o, q, k, v, causal=True).ok


@pytest.mark.parametrize("seq_q, seq_k, d, heads, heads_k", [(150, 17, 256, 2, 1), (129, 128, 64, 8, 1),
                                                             (65, 1, 128, 2, 2)])
def test_causal_rows_that_see_no_key_match_bf16(seq_q, seq_k, d, heads, heads_k):
    """Causal with seq_q > seq_k: the first seq_q - seq_k rows see no key; FP8 gives O = 0 and LSE = -inf there,
    as bf16 does on the same values; the other rows within the rule."""
    q, k, v, descales = _draw(seq_q + seq_k, 1, heads, heads_k, seq_q, seq_k, d)
    o8, lse8 = _run("tile", q, k, v, descales, causal=True)
    dead = seq_q - seq_k
    assert not o8[:, :, :dead].astype(np.float32).any() and np.isneginf(lse8[:, :, :dead]).all()
    ob, lseb = tessera.attention(*(x.astype(ml_dtypes.bfloat16) for x in (q, k, v)), causal=True, return_lse=True,
                                 level="tile")
    np.testing.assert_array_equal(np.isneginf(lseb), np.isneginf(lse8))
    np.testing.assert_array_equal(ob[:, :, :dead].astype(np.float32), o8[:, :, :dead].astype(np.float32))


EDGES = [(256, 128, 63, False), (256, 129, 65, True), (256, 64, 64, True), (64, 127, 129, True),
         (64, 128, 128, False), (128, 1, 300, False), (256, 1, 17, True)]


def _edge(d, seq_q, seq_k, causal):
    """Key blocks of 64 at head_dim 256 and 128 at 64 (`FP8_BLOCK_N`): seq_k one short, exact, one over; GQA
    8:1, batch 2."""
    return _draw(d + seq_q + seq_k, 2, 8, 1, seq_q, seq_k, d)


@pytest.mark.parametrize("d, seq_q, seq_k, causal", EDGES)
def test_head_dims_at_the_edges_of_the_key_block(d, seq_q, seq_k, causal):
    _run("tile", *_edge(d, seq_q, seq_k, causal), causal)


LOWERED = {  # name: (inputs, causal), run in the CTA simulator and the PTX executor
    "decode-gqa8:1-300-causal": (lambda: _decode(300), True),
    "decode-gqa8:1-17-causal": (lambda: _decode(17), True),
    "outliers-d128-causal": (_outliers, True),
    "no-key-rows-d256-150x17": (lambda: _draw(167, 1, 2, 1, 150, 17, 256), True),
    "edge-d256-129x65-causal": (lambda: _edge(256, 129, 65, True), True),
    "edge-d64-127x129-causal": (lambda: _edge(64, 127, 129, True), True),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", LOWERED)
def test_lowered_slice_in_the_cta_simulator_and_the_ptx_executor(name):
    """Each case within the rules at both levels, and the two bit for bit (the PTX printed from that Target IR)."""
    make, causal = LOWERED[name]
    q, k, v, descales = make()
    target = _run("target", q, k, v, descales, causal)
    ptx = _run("ptx", q, k, v, descales, causal)
    np.testing.assert_array_equal(ptx[0].view(np.uint16), target[0].view(np.uint16))
    np.testing.assert_array_equal(ptx[1], target[1])


@pytest.mark.parametrize("level", ["tile", pytest.param("ptx", marks=pytest.mark.slow)])
def test_torch_cpu_tensors_in_fa3_layout_with_descales_of_other_types(level):
    """torch float8_e4m3fn CPU tensors given as FlashAttention-3's [batch, seq, heads, d] transposed (views, not
    contiguous), descales f32, f64 and bf16 tensors: CPU tensors back (bf16 O, f32 LSE), the same numbers as the
    NumPy arrays of the same bytes, at Tile level and in the PTX executor."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    q, k, v = ((torch.randn(2, s, h, 128) * 2).to(torch.float8_e4m3fn) for s, h in ((33, 4), (70, 1), (70, 1)))
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    assert not q.is_contiguous()
    descales = [torch.rand(2, 1) * 2, torch.rand(2, 1, dtype=torch.float64) * 2, (torch.rand(2, 1) * 2).bfloat16()]
    arrays = [x.contiguous().view(torch.uint8).numpy().view(E4M3) for x in (q, k, v)]
    host = [x.float().numpy() for x in descales]
    o, lse = tessera.attention(q, k, v, causal=True, descale_q=descales[0], descale_k=descales[1],
                               descale_v=descales[2], return_lse=True, level=level)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    _check(o.float().numpy().astype(ml_dtypes.bfloat16), lse.numpy(), *arrays, host, causal=True)


def test_descales_of_any_real_type_are_the_same_factors():
    """f64, int and bf16 descale arrays holding the same values as the f32 ones give the same bits."""
    q, k, v, _ = _draw(8, 1, 4, 2, 10, 24, 64)
    f32 = np.array([[0.5, 2.0]], np.float32)
    base = tessera.attention(q, k, v, descale_q=f32, level="tile")
    for other in (f32.astype(np.float64), f32.astype(ml_dtypes.bfloat16)):
        np.testing.assert_array_equal(base.view(np.uint16),
                                      tessera.attention(q, k, v, descale_q=other, level="tile").view(np.uint16))
    ints = tessera.attention(q, k, v, descale_v=np.array([[3, 1]], np.int32), level="tile")
    _check(ints, None, q, k, v, [None, None, np.array([[3.0, 1.0]])], causal=False)


def test_the_rule_holds_each_head_to_its_own_descales():
    """Descales 100x apart between (batch, head)s: the kernel is within the rule in every head, and a head lost
    (zeros where its descale_v is 0.01) or doubled is a mismatch. Regression: check_attention_fp8 took one
    tolerance for all heads, from the largest |V| and baseline error of any, and passed both."""
    q, k, v, _ = _draw(18, 2, 3, 3, 40, 77, 128)
    descales = [np.array([[0.1, 1, 10], [3, 0.3, 0.03]], np.float32),
                np.array([[2, 0.5, 0.05], [0.7, 7, 0.07]], np.float32),
                np.array([[1, 100, 0.01], [5, 0.5, 50]], np.float32)]
    o = _run("tile", q, k, v, descales, causal=True)[0].astype(np.float32)
    for head, change in (((0, 2), 0.0), ((0, 0), 2.0)):
        wrong = o.copy()
        wrong[head] *= change
        assert not R.check_attention_fp8(wrong, q, k, v, *descales, causal=True).ok, head


def _small():
    return _draw(1, 1, 4, 2, 10, 24, 64)[:3]


@pytest.mark.parametrize("call, error, message", [
    (lambda q, k, v: tessera.attention(*(x.astype(np.float32) for x in (q, k, v)), descale_q=np.ones((1, 2)),
                                       level="tile"),
     ValueError, r"apply to FP8 attention .* got float32 inputs .* convert with \.astype\(ml_dtypes\.float8_e4m3fn\)"),
    (lambda q, k, v: tessera.attention(*(x.astype(np.float32) for x in (q, k, v)), level="tile"),
     UnsupportedKernel, r"element type float32 is not supported"),
    (lambda q, k, v: tessera.attention(*(x.view(np.uint8) for x in (q, k, v)), level="tile"),
     UnsupportedKernel, r"element type uint8 is not supported"),
    (lambda q, k, v: tessera.attention(q, k, v, descale_q=0.5, level="tile"),
     TypeError, r"descale_q must be a NumPy array or a PyTorch tensor, got float"),
    (lambda q, k, v: tessera.attention(q, k, v, descale_q=np.float32(0.5), level="tile"),
     ValueError, r"descale_q must have shape \[batch, heads_k\] = \(1, 2\), got \(\)"),
    (lambda q, k, v: tessera.attention(q, k, v, descale_k=np.ones((1, 4), np.float32), level="tile"),
     ValueError, r"descale_k must have shape \[batch, heads_k\] = \(1, 2\), got \(1, 4\)"),
    (lambda q, k, v: tessera.attention(q, k, v, descale_v=np.ones((1, 2), E4M3), level="tile"),
     TypeError, r"descale_v must be an array or tensor of real numbers, got float8_e4m3fn"),
    (lambda q, k, v: tessera.attention(q, k, np.ascontiguousarray(v.swapaxes(2, 3)), level="tile"),
     ValueError, r"k and v the same heads .* got shapes \(1, 4, 10, 64\), \(1, 2, 24, 64\), \(1, 2, 64, 24\)"),
    (lambda q, k, v: tessera.attention(*(x.astype(ml_dtypes.float8_e4m3fnuz) for x in (q, k, v)), level="tile"),
     UnsupportedKernel, r"element type float8_e4m3fnuz is not supported; FP8 attention takes float8_e4m3fn"),
    (lambda q, k, v: tessera.attention(q, k, v, bias=np.zeros((1, 4, 10, 24), ml_dtypes.bfloat16), level="tile"),
     ValueError, r"FP8 attention .* not supported with bias"),
    (lambda q, k, v: tessera.attention(q, k, v, score_mod=lambda s, b, h, i, j: s, level="tile"),
     ValueError, r"FP8 attention .* not supported with score_mod/mask_mod/block_mask"),
    (lambda q, k, v: tessera.attention(q, k, v, enable_gqa=False, level="tile"),
     ValueError, r"enable_gqa=False, but q has 4 heads and k 2"),
])
def test_what_a_user_gets_wrong_is_refused_by_name(call, error, message):
    with pytest.raises(error, match=message):
        call(*_small())


def test_the_fp8_kernel_through_tessera_launch_at_every_level():
    """`flash_attention(dtype="e4m3", grouped=True, causal=True, return_lse=True)` launched directly: Q, K, V,
    then DescaleQ, DescaleK, DescaleV [batch, heads_k]; missing descales and per-query-head ones refused by name."""
    from tessera.kernels import flash_attention

    module = flash_attention(head_dim=64, dtype="e4m3", causal=True, grouped=True, return_lse=True)
    q, k, v, descales = _draw(9, 1, 4, 2, 20, 48, 64)
    for level in ("tile", "target", "ptx"):
        o, lse = tessera.launch(module, q, k, v, *descales, level=level)
        _check(o, lse[..., 0], q, k, v, descales, causal=True)
    with pytest.raises(ValueError, match=r"takes 6 inputs \(Q, K, V, DescaleQ, DescaleK, DescaleV\), got 3"):
        tessera.launch(module, q, k, v, level="tile")
    with pytest.raises(ValueError, match=r"input DescaleQ .* dimension 1 \(heads_k\): 'heads_k' is 2 elsewhere"):
        tessera.launch(module, q, k, v, np.ones((1, 4), np.float32), *descales[1:], level="tile")


@pytest.mark.slow
def test_tessera_run_checks_an_fp8_kernel_file_below_tile_level(tmp_path):
    """`tessera-run FILE --check --level ptx` on the printed FP8 kernel (GQA 4:1, odd lengths): exit status 0."""
    from tessera.kernels import flash_attention

    path = tmp_path / "fp8.mlir"
    path.write_text(str(flash_attention(head_dim=64, dtype="e4m3", causal=True, grouped=True, return_lse=True)))
    sizes = [arg for size in ("batch=1", "heads=4", "heads_k=1", "seq_q=20", "seq_k=45") for arg in ("-d", size)]
    done = subprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(path), *sizes, "--check",
                           "--level", "ptx"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "check: max error" in done.stdout and ": ok" in done.stdout
