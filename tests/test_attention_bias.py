"""Additive bias in the online attention kernel (issue 18): `flash_attention(bias=True)` computes
softmax(scale Q K^T + Bias [+ causal mask]) V with Bias [batch, heads, seq_q, seq_k] in the kernel's element
type (or size 1 in batch and/or heads: `bias_broadcast`), within the suite's tolerance rule
(`reference.check_attention(..., bias=)`) at Tile level over a grid (head_dim 64/128/256, causal or not,
seq_q != seq_k, lengths that are not multiples of the blocks, broadcast biases), and through the default
pipeline at target and PTX level on a slice; its LSE is that of the biased scores; `tessera.attention(...,
bias=)` at every level. ptxas checks: tests/test_compile.py."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference, reference_attention
from tessera.kernels import flash_attention
from tessera.numerics import BF16, F16, round_to
from tessera.passes import PTX_PIPELINE

DTYPES = {"bf16": BF16, "f16": F16}


def _inputs(rng, shape, head_dim, broadcast=(), dtype="bf16", bias_scale=2.0):
    """q, k, v and a bias (size 1 along the `broadcast` dimensions), rounded to the kernel's type."""
    batch, heads, seq_q, seq_k = shape
    q, k, v = (round_to(rng.standard_normal((batch, heads, s, head_dim)), DTYPES[dtype])
               for s in (seq_q, seq_k, seq_k))
    bias_shape = (1 if "batch" in broadcast else batch, 1 if "heads" in broadcast else heads, seq_q, seq_k)
    bias = round_to(bias_scale * rng.standard_normal(bias_shape), DTYPES[dtype])
    return q, k, v, bias


def _check(out, q, k, v, bias, dtype, causal, lse=None):
    check = reference.check_attention(out, q, k, v, DTYPES[dtype], causal=causal, bias=bias)
    assert check.ok, check
    if lse is not None:
        lse_check = reference.check_lse(lse, q, k, DTYPES[dtype], causal=causal, bias=bias)
        assert lse_check.ok, lse_check
    return check


TILE_GRID = [
    (d, causal, dtype, shape, broadcast)
    for d, dtype in ((64, "bf16"), (128, "f16"))
    for causal in (False, True)
    for shape, broadcast in (((2, 2, 200, 300), ()), ((2, 3, 300, 129), ("batch",)), ((2, 2, 77, 77), ("heads",)),
                             ((2, 2, 130, 250), ("batch", "heads")))
] + [(256, True, "bf16", (1, 2, 100, 130), ()), (256, False, "bf16", (2, 1, 64, 97), ("batch",))]


@pytest.mark.parametrize("head_dim,causal,dtype,shape,broadcast", TILE_GRID,
                         ids=[f"d{d}-{'causal' if c else 'full'}-{t}-{'x'.join(map(str, s))}-{'+'.join(b) or 'full'}"
                              for d, c, t, s, b in TILE_GRID])
def test_bias_matches_float64_at_tile_level(head_dim, causal, dtype, shape, broadcast, rng):
    q, k, v, bias = _inputs(rng, shape, head_dim, broadcast, dtype)
    module = flash_attention(head_dim, causal=causal, dtype=dtype, bias=True, bias_broadcast=broadcast,
                             return_lse=True)
    out, lse = tessera.interpret(module, q, k, v, bias)
    _check(out, q, k, v, bias, dtype, causal, lse)


SLICE = [  # each through the default pipeline (pipelined, warp-specialized), target then PTX level
    (64, False, "bf16", (2, 2, 200, 300), ("heads",), False),
    (64, True, "f16", (1, 2, 300, 190), (), True),
    (128, True, "bf16", (2, 1, 130, 257), ("batch",), True),
    (128, False, "f16", (1, 2, 129, 100), (), False),
    (256, True, "f16", (1, 1, 150, 197), (), True),
]


@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("head_dim,causal,dtype,shape,broadcast,return_lse", SLICE,
                         ids=[f"d{d}-{'causal' if c else 'full'}-{t}-{'+'.join(b) or 'full'}{'-lse' if lse else ''}"
                              for d, c, t, _, b, lse in SLICE])
def test_bias_matches_below_tile_level(head_dim, causal, dtype, shape, broadcast, return_lse, level, rng):
    q, k, v, bias = _inputs(rng, shape, head_dim, broadcast, dtype)
    module = flash_attention(head_dim, causal=causal, dtype=dtype, bias=True, bias_broadcast=broadcast,
                             return_lse=return_lse)
    outputs = tessera.interpret(module, q, k, v, bias, level=level)
    out, lse = outputs if return_lse else (outputs, None)
    _check(out, q, k, v, bias, dtype, causal, lse)
    tile = tessera.interpret(module, q, k, v, bias)
    tile_out = tile[0] if return_lse else tile
    # the same kernel one level up: within bf16/f16 rounding of the output (ex2.approx against exp)
    assert np.abs(np.asarray(out, np.float64) - np.asarray(tile_out, np.float64)).max() <= 2.0**-6


def test_a_zero_bias_is_the_kernel_without_bias(rng):
    """Bias / scale = 0 added to the accumulator changes nothing: bitwise the kernel without a bias at Tile
    level; below it within one bf16 ulp (the biased kernel's exponents subtract before they scale,
    `subtract_first`, and round differently from the unbiased kernel's one fma)."""
    q, k, v, bias = _inputs(rng, (1, 2, 150, 200), 64)
    for level in ("tile", "target"):
        plain = tessera.interpret(flash_attention(64, causal=True), q, k, v, level=level)
        biased = tessera.interpret(flash_attention(64, causal=True, bias=True), q, k, v, np.zeros_like(bias),
                                   level=level)
        if level == "tile":
            assert np.array_equal(plain, biased)
        plain, biased = np.asarray(plain, np.float64), np.asarray(biased, np.float64)
        assert np.all(np.abs(biased - plain) <= 2.0**-7 * np.abs(plain)), level


def test_minus_infinity_hides_keys_like_an_attention_mask(rng):
    """A -inf bias entry hides its key (PyTorch SDPA's float attn_mask); a row whose every key is hidden gives
    O = 0 and LSE = -inf, as a causal row that sees no key does."""
    q, k, v, bias = _inputs(rng, (1, 1, 130, 140), 64)
    bias[..., 5:, 70:] = -np.inf     # rows 5.. see the first 70 keys only
    bias[..., 3, :] = -np.inf        # row 3 sees none
    out, lse = tessera.interpret(flash_attention(64, bias=True, return_lse=True), q, k, v, bias, level="ptx")
    _check(out, q, k, v, bias, "bf16", False, lse)
    assert np.all(out[..., 3, :] == 0) and np.isneginf(lse[..., 3, 0]).all()


def test_plus_infinity_makes_its_row_nan_in_the_kernel_and_the_reference(rng):
    """A +inf bias entry makes its row NaN, O and LSE (the reference module's convention), in the kernel and in
    the float64 reference alike, so the check holds a right kernel right. Regression (unseen23f): the reference
    gave that row zeros, and check_attention called the kernel's NaN row a mismatch of infinite error."""
    q, k, v, bias = _inputs(rng, (1, 1, 40, 70), 64)
    bias[..., 7, 30] = np.inf
    out, lse = tessera.interpret(flash_attention(64, bias=True, return_lse=True), q, k, v, bias)
    assert np.isnan(out[..., 7, :].astype(np.float32)).all() and np.isnan(lse[..., 7, 0]).all()
    assert np.isnan(reference_attention.attention(q, k, v, bias=bias)[..., 7, :]).all()
    _check(out, q, k, v, bias, "bf16", False, lse)
    zeroed = np.where(np.isnan(out.astype(np.float32)), 0, out.astype(np.float32))  # a NaN row lost: a mismatch
    assert not reference.check_attention(zeroed, q, k, v, BF16, bias=bias).ok


def test_the_bias_is_added_after_the_scale(rng):
    """With scale 0.5 the result is softmax(0.5 Q K^T + Bias): a kernel that scaled the bias too is refused by
    the check (the bias is large against the scores here)."""
    q, k, v, bias = _inputs(rng, (1, 2, 100, 100), 64, bias_scale=4.0)
    out = tessera.interpret(flash_attention(64, scale=0.5, bias=True), q, k, v, bias)
    assert reference.check_attention(out, q, k, v, BF16, scale=0.5, bias=bias).ok
    assert not reference.check_attention(out, q, k, v, BF16, scale=0.5, bias=0.5 * bias).ok


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_public_api_takes_a_bias_at_every_level(level, rng):
    """`tessera.attention(q, k, v, bias=)` with a bias broadcast over batch ([1, heads, Sq, Sk]) and the LSE."""
    q, k, v, bias = _inputs(rng, (2, 2, 140, 170), 64, ("batch",))
    q, k, v, bias = (x.astype(BF16) for x in (q, k, v, bias))
    o, lse = tessera.attention(q, k, v, causal=True, bias=bias, return_lse=True, level=level)
    assert o.dtype == BF16 and lse.shape == (2, 2, 140)
    _check(o, q, k, v, bias, "bf16", True, lse)


def test_kernel_names_and_signature_say_bias():
    module = flash_attention(64, causal=True, bias=True, bias_broadcast=("heads",), return_lse=True)
    sig = tessera.find_kernel(module)
    assert sig.name == "flash_attention_d64_bf16_causal_bias_h1_lse" and sig.bias
    assert [a.name for a in sig.inputs] == ["Q", "K", "V", "Bias"]
    assert str(sig.inputs[3].dims) == "#tile.dims<batch, 1, seq_q, seq_k>"
    assert not tessera.find_kernel(flash_attention(64)).bias


def test_word_loads_of_the_bias_where_seq_k_is_promised_even(rng):
    """A kernel that promises seq_k even (`tile.divisible`) reads its bias rows one 32-bit word per pair
    (`ld.global.b32`) instead of one `ld.global.u16` per element: the same result, bit for bit."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr

    q, k, v, bias = _inputs(rng, (1, 2, 130, 200), 64)
    per_element = tessera.interpret(flash_attention(64, causal=True, bias=True), q, k, v, bias, level="ptx")
    module = flash_attention(64, causal=True, bias=True)
    next(op for op in module.walk() if isinstance(op, func.FuncOp)).attributes["tile.divisible"] = DictionaryAttr(
        {"seq_k": IntegerAttr(2, 64)})
    assert "ld.global.u16" in tessera.compile(flash_attention(64, causal=True, bias=True))
    assert "ld.global.u16" not in tessera.compile(module)
    assert np.array_equal(tessera.interpret(module, q, k, v, bias, level="ptx"), per_element)


# region Finite mask fills (a bias beyond f32's range once divided by scale)

BF16_LOWEST = float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)
"""-3.39e38: what HuggingFace's masked_fill(mask, torch.finfo(bf16).min) writes; / scale (x 8) is beyond f32."""


def _fill_masked_inputs(rng, shape, head_dim):
    """q, k, v and a bias in which ~30% of the keys of every row have the bf16-lowest fill (partly masked rows),
    rows 2 and seq_q - 1 have it on every key (padded query rows), row 4 has -inf on every key (a row that
    sees no key) and row 6 the fill on its first half of keys and -inf on the rest."""
    q, k, v, bias = _inputs(rng, shape, head_dim)
    seq_q, seq_k = shape[2:]
    bias[rng.random(bias.shape) < 0.3] = BF16_LOWEST
    for row in (2, seq_q - 1):
        bias[..., row, :] = BF16_LOWEST
    bias[..., 4, :] = -np.inf
    bias[..., 6, : seq_k // 2] = BF16_LOWEST
    bias[..., 6, seq_k // 2:] = -np.inf
    return q, k, v, bias


FILL_CASES = [(64, False, (1, 2, 130, 150)), (128, True, (1, 1, 150, 200))]


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
@pytest.mark.parametrize("head_dim,causal,shape", FILL_CASES,
                         ids=[f"d{d}-{'causal' if c else 'full'}" for d, c, _ in FILL_CASES])
def test_finite_mask_fills_stay_finite(head_dim, causal, shape, level, rng):
    """A bias of bf16's lowest value is finite: Bias / scale saturates at -V (`tile.saturating_scale`,
    `numerics.bias_bound`) instead of overflowing to -inf. A row whose every key has the fill averages V
    uniformly over the keys it sees (the float64 reference and PyTorch's eager attention do too, not O = 0);
    partly masked rows weigh the filled keys 0; -inf still hides its key (row 4: O = 0, LSE = -inf; row 6:
    the average of the filled half). Two key blocks at least: the running maximum of a padded row is the same
    -V scale from one block to the next (exp_diff must give exactly 1 there). O and LSE within the reference's rule (`reference_attention.saturate_bias`)."""
    q, k, v, bias = _fill_masked_inputs(rng, shape, head_dim)
    module = flash_attention(head_dim, causal=causal, bias=True, return_lse=True)
    out, lse = tessera.interpret(module, q, k, v, bias, level=level)
    _check(out, q, k, v, bias, "bf16", causal, lse)
    seq_q, seq_k = shape[2:]
    visible = reference_attention.causal_visible(seq_q, seq_k) if causal else np.ones((seq_q, seq_k), bool)
    out64, v64 = np.asarray(out, np.float64), np.asarray(v, np.float64)
    for row in (2, seq_q - 1, 6):
        keys = visible[row] & np.isfinite(bias[0, 0, row])
        uniform = v64[:, :, keys].mean(axis=2)
        assert np.abs(out64[:, :, row] - uniform).max() <= 2.0**-7, row
        assert np.isfinite(lse[:, :, row]).all()
    assert np.all(out64[:, :, 4] == 0) and np.isneginf(lse[:, :, 4]).all()


def test_a_fill_beside_any_visible_key_weighs_nothing(rng):
    """Rows with the fill on all but one key give that key's V row (the fill's weight is exp(-V scale) = 0)."""
    q, k, v, bias = _inputs(rng, (1, 1, 128, 130), 64)
    bias[...] = BF16_LOWEST
    chosen = rng.integers(0, 130, size=128)
    bias[0, 0, np.arange(128), chosen] = 0.0
    out = tessera.interpret(flash_attention(64, bias=True), q, k, v, bias, level="target")
    expected = np.asarray(v, np.float64)[0, 0, chosen]
    assert np.abs(np.asarray(out, np.float64)[0, 0] - expected).max() <= 2.0**-8


def test_positive_fills_saturate_too(rng):
    """bf16's largest value on some keys of a row (beyond f32 once divided by scale) averages those keys,
    as the float64 reference does, instead of giving NaN (inf - inf in the exponent)."""
    q, k, v, bias = _inputs(rng, (1, 1, 64, 100), 64)
    bias[..., 10, ::3] = -BF16_LOWEST
    out, lse = tessera.interpret(flash_attention(64, bias=True, return_lse=True), q, k, v, bias, level="ptx")
    _check(out, q, k, v, bias, "bf16", False, lse)
    uniform = np.asarray(v, np.float64)[0, 0, ::3].mean(axis=0)
    assert np.abs(np.asarray(out, np.float64)[0, 0, 10] - uniform).max() <= 2.0**-7


HUGE_FILL_ROWS = {5: -1e20, 7: -1e12, 9: -1e30}
"""Rows whose every key has a huge finite fill below V scale, not +-2^k: not saturated, yet far past the range in
which ex2(x C - m log2 e) as one fma keeps ex2(0) = 1 for the row's maximum (|m log2 e| past ~2^31)."""


@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_huge_unsaturated_fills_below_tile_level(head_dim, level, rng):
    """A huge finite fill on every key of a row (-1e12, -1e20, -1e30: Q K^T is below the f32 ulp of Bias / scale,
    so the row's scores are all equal) averages V uniformly, as at Tile level: the biased kernel's exponents
    subtract before they scale (`subtract_first` on tile.exp_subtract and tile.exp_diff), so the row's maximum
    gets exactly ex2(0) = 1 below Tile level too. Row 11 has -1e20 on every third key (those weigh 0); row 13
    has -1.01e20 on the first key block and -1e20 on the others (the maximum rises between key blocks: the
    rescale factor is exactly 0 and O the average over the later keys). Three key blocks."""
    q, k, v, bias = _inputs(rng, (1, 1, 64, 300), head_dim)
    for row, fill in HUGE_FILL_ROWS.items():
        bias[..., row, :] = fill
    bias[..., 11, ::3] = -1e20
    bias[..., 13, :128] = -1.01e20
    bias[..., 13, 128:] = -1e20
    bias = round_to(bias, BF16)
    module = flash_attention(head_dim, bias=True, return_lse=True)
    tile, tile_lse = tessera.interpret(module, q, k, v, bias)
    out, lse = tessera.interpret(module, q, k, v, bias, level=level)
    out, tile = np.asarray(out, np.float64), np.asarray(tile, np.float64)
    v64 = np.asarray(v, np.float64)[0, 0]
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    for row in HUGE_FILL_ROWS:
        assert np.abs(out[0, 0, row] - v64.mean(axis=0)).max() <= 2.0**-7, row
    assert np.abs(out[0, 0, 13] - v64[128:].mean(axis=0)).max() <= 2.0**-7
    assert np.abs(out - tile).max() <= 2.0**-6
    assert np.allclose(lse, tile_lse, rtol=1e-6, atol=1e-4)


SATURATE = """
func.func @saturate(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                    %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %y = tile.saturating_scale %x by 8.0 bound 1.70141183e+38 : !tile.tile<64x64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}
"""


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_saturating_scale_semantics_at_every_level(level, rng):
    """tile.saturating_scale: x * factor, clamped to +-bound where x is finite (also where the product
    overflows), +-inf where x is +-inf, NaN where x is NaN; the same at every level (the lowering's max/min,
    predicates and selects in place)."""
    x = rng.standard_normal((64, 64)).astype(np.float32)
    special = [1.5, -2.0, 3e37, -3e37, 2.2e37, -2.1e37, np.inf, -np.inf, np.nan, -3.4e38, 3.4e38, 0.0, -0.0]
    x.flat[: len(special)] = special
    lowering = {} if level == "tile" else {"pipeline": PTX_PIPELINE}  # no ring for warp-specialize to split
    y = tessera.interpret(tessera.parse_module(SATURATE), x, level=level, **lowering)
    bound = np.float32(2.0**127)
    with np.errstate(over="ignore"):
        scaled = x * np.float32(8.0)
    expected = np.where(np.isfinite(x), np.clip(scaled, -bound, bound), scaled)
    assert np.array_equal(y, expected, equal_nan=True)
    assert np.array_equal(np.signbit(y.flat[11:13]), [False, True])


def test_bias_bound_is_a_power_of_two_whose_exponent_product_is_finite():
    """V = 2^127 for the default scales; smaller where scale log2 e >= 1 so that V scale log2 e stays finite."""
    from tessera.numerics import F32_LARGEST, bias_bound, exp2_factor

    for d in (64, 128, 256):
        assert bias_bound(1 / np.sqrt(d)) == 2.0**127
        assert exp2_factor(1 / np.sqrt(d)) == float(np.float32(1 / np.sqrt(d) * np.log2(np.e)))
    for scale in (0.7, 1.0, 3.0, 1e6):
        bound = bias_bound(scale)
        assert bound * exp2_factor(scale) <= F32_LARGEST < 2 * bound * exp2_factor(scale)
        assert np.frexp(bound)[0] == 0.5


# endregion
