"""The online softmax's exponentials at the Tile level (`tile.exp_subtract`, `tile.exp_diff`,
`tile.exp2_subtract`): exp of the f32 difference, correctly rounded to f32 as the ops define it, on any machine
(NumPy's float32 exp is picked per CPU and is not), and the lowered `subtract_first` form beside it."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np

import tessera
from tessera.ir import parse_module

F32 = np.float32

EXPONENTIALS = """\
builtin.module {
  func.func @exponentials(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %MX: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>},
      %P: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %P2: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"},
      %ALPHA: !tile.tile<?xf32, global> {tile.dims = #tile.dims<M>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %mw = tile.view %MX[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    %m = tile.load %mw : !tile.tile<64xf32, global> -> !tile.tile<64xf32, register>
    %p = tile.exp_subtract %x, %m subtract_first : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %p2 = tile.exp2_subtract %x, %m : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
    %r = tile.row_max %x : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %alpha = tile.exp_diff %r, %m subtract_first : !tile.tile<64xf32, register>
    %pw = tile.view %P[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %p, %pw : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %p2w = tile.view %P2[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %p2, %p2w : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    %aw = tile.view %ALPHA[%m0] : !tile.tile<?xf32, global> -> !tile.tile<64xf32, global>
    tile.store_global %alpha, %aw : !tile.tile<64xf32, register>, !tile.tile<64xf32, global>
    func.return
  }
}
"""

# A score and its row maximum from an FP8 attention kernel (tests/test_fp8_lowering.py, 2 x 4 heads, 37 x 333,
# head_dim 256, causal): exp(4.2299914 - 6.556293) = 0.0976562544 is 0.59 f32 ulp above 25 / 256, an e4m3 midpoint
# of 2^8 P. NumPy's float32 exp (AVX-512) gave 25 / 256 exactly, which ties to e4m3 24; the correctly rounded
# 0.09765626, and the lowered kernel's, round to 26.
SCORE, ROW_MAX, P_ROUNDED = F32(4.2299914), F32(6.556293), F32(0.09765626)


def _inputs():
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((64, 64)) * 4).astype(F32)
    x[0, 0] = SCORE
    m = np.maximum(x.max(axis=1), F32(0)) + (rng.random(64) * 3).astype(F32)
    m[0] = ROW_MAX
    x[0, 1:] = np.minimum(x[0, 1:], ROW_MAX)
    m[-1] = -np.inf  # a fully masked row: m counts as 0
    return x, m.astype(F32)


def _run(x, m, level):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize: nothing to specialize in this kernel
        return tessera.interpret(parse_module(EXPONENTIALS), x, m, level=level)


def _correctly_rounded(function, d) -> np.ndarray:
    return np.array([F32(function(float(v))) for v in np.ravel(d)], F32).reshape(np.shape(d))


def test_tile_exponentials_are_correctly_rounded():
    x, m = _inputs()
    safe = np.where(np.isneginf(m), F32(0), m)
    d = (x - safe[:, None]).astype(F32)  # the f32 difference the ops exponentiate
    p, p2, alpha = _run(x, m, "tile")
    assert np.array_equal(p, _correctly_rounded(math.exp, d))
    assert np.array_equal(p2, _correctly_rounded(lambda v: 2.0**v, d))
    assert np.array_equal(alpha, _correctly_rounded(math.exp, (x.max(axis=1) - safe).astype(F32)))
    assert p[0, 0] == P_ROUNDED and (p[0, 0] * 256).astype(ml_dtypes.float8_e4m3fn) == 26


def test_lowered_subtract_first_gives_the_same_p_on_an_fp8_midpoint():
    """ex2((x - m) log2 e) in the CTA simulator: the same f32 P as the Tile level on the score above (so the
    same e4m3 2^8 P), and elsewhere within ex2's 2^-22 plus what the exponent's roundings move it by: d log2 e
    rounded to f32 (|d| 2^-24 relative in P) and log2 e itself an f32 (2^-26.2 off: |d| 2^-26)."""
    x, m = _inputs()
    (tile_p, _, tile_alpha), (p, _, alpha) = _run(x, m, "tile"), _run(x, m, "target")
    assert p[0, 0] == tile_p[0, 0] == P_ROUNDED
    d = np.abs(x - np.where(np.isneginf(m), F32(0), m)[:, None]).astype(np.float64)
    bound = (2.0**-22 + d * (2.0**-24 + 2.0**-26)) * np.abs(tile_p.astype(np.float64))
    assert np.all(np.abs(p.astype(np.float64) - tile_p) <= bound)
    assert np.allclose(alpha, tile_alpha, rtol=2.0**-20, atol=0)


def test_a_large_scale_subtracts_first():
    """A softmax scale past `ONE_FMA_SCALE_LIMIT` makes the flash kernel subtract before it scales: at scale 2^26
    and normal scores the one-fma exponent's rounding of m log2 e reached 2^7, the row's maximum got
    ex2(128) = inf and O had NaN rows below Tile IR (the Tile level was right); the kernel at the limit keeps
    its one fma (the default kernels' PTX is unchanged)."""
    from tessera import reference
    from tessera.dialects import tile
    from tessera.numerics import ONE_FMA_SCALE_LIMIT

    def subtracts_first(scale):
        module = tessera.kernels.flash_attention(head_dim=64, scale=scale)
        return {op.subtract_first is not None for op in module.walk() if isinstance(op, tile.ExpSubtractOp)}

    assert subtracts_first(ONE_FMA_SCALE_LIMIT) == {False} and subtracts_first(2.0**26) == {True}
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 177, 128)).astype(F32) for _ in range(3))
    module = tessera.kernels.flash_attention(head_dim=128, scale=2.0**26)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        o = tessera.launch(module, q, k, v, level="target")
    assert not np.isnan(o.astype(F32)).any()
    assert reference.check_attention(o, q, k, v, o.dtype, scale=2.0**26).ok


def test_two_and_three_pass_and_the_backward_at_a_large_scale():
    """Two- and three-pass attention subtract first past the limit too (their exponentials had NaN rows at scale
    2^26 below Tile IR); the backward, whose P is one fma from the LSE, refuses such a scale by name."""
    import pytest

    from tessera import reference

    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 1, 177, 128)).astype(F32) for _ in range(3))
    for builder in (tessera.kernels.two_pass_attention, tessera.kernels.three_pass_attention):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            o = tessera.launch(builder(head_dim=128, scale=2.0**26), q, k, v, level="target")
        assert reference.check_attention(o, q, k, v, o.dtype, scale=2.0**26).ok
    with pytest.raises(ValueError, match="scale 67108864.0 is not supported by the attention backward"):
        tessera.kernels.attention_backward(head_dim=64, scale=2.0**26)
