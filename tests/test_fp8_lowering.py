"""The FP8 attention forward lowered to sm_90a through convert-tile-to-sm90: `flash_attention(dtype="e4m3")` (V as
it is, [batch, heads_k, seq_k, head_dim], transposed in shared memory by the producer warpgroup into P8 key order,
passes/convert_tile_to_sm90/transpose.py) under the default (warp-specialized, two-stage) pipeline, and
`v_transposed="p8"` (V^T with its keys in P8 key order, `tile.key_order = "p8"`) under the single-stage one
(`PTX_PIPELINE`) too: k32 e4m3 wgmma for Q.K^T, `sm90.cvt_pack_fp8` for P (carried to the next trip by
overlap-softmax), the RS e4m3 P.V wgmma, descale loads and the bf16 O store. It runs in the CTA simulator and
the PTX executor through `tessera.attention(level=...)` on any key length (TMA zero-fills the tail key block),
within `reference.check_attention_fp8` and next to the Tile IR interpreter, and ptxas takes it without spill.
What is not lowered (V^T in its keys' own order, V without a producer to transpose it) is refused by name. The
full matrix of head dims and ragged lengths: `pytest -m slow tests/test_fp8_lowering.py`."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr
from xdsl.utils.exceptions import VerifyException

import tessera
from tessera import reference as R
from tessera.kernel_abi import KEY_ORDER_ATTR
from tessera.kernels import flash_attention
from tessera.passes import DEFAULT_PIPELINE, PTX_PIPELINE
from tessera.passes.convert_tile_to_sm90 import LoweringError
from tessera.sm90.fp8 import P8_KEY_ORDER, p8_key_positions
from fp8_inputs import fp8_inputs
from text_edits import checked

BF16_ULP = 2.0**-7  # of the bf16 output, relative


def test_p8_key_positions_permute_each_group_of_16_as_p8_key_order():
    keys = p8_key_positions(48)
    assert sorted(keys) == list(range(48))
    for start in (0, 16, 32):  # every group of 16 alone, in the order of the product's 32-key slices
        assert list(keys[start:start + 16] - start) == list(P8_KEY_ORDER[:16])
    assert list(keys[:32]) == list(P8_KEY_ORDER)
    assert list(keys[:16]) == [0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15]
    with pytest.raises(ValueError, match="groups of 16 keys; got 40"):
        p8_key_positions(40)


def test_v_transposed_p8_at_tile_level_is_the_kernel_on_v_with_the_keys_reordered():
    """The Tile IR interpreter restores the keys' own order of a `tile.key_order` input: bit for bit the
    kernel on V as it is (the same products, summed in the same order)."""
    q, k, v, ds = fp8_inputs(1, 1, 2, 1, 40, 48, 64)
    vt = np.ascontiguousarray(np.swapaxes(v, 2, 3))
    plain = tessera.launch(flash_attention(head_dim=64, dtype="e4m3", grouped=True), q, k, v, *ds, level="tile")
    module = flash_attention(head_dim=64, dtype="e4m3", v_transposed="p8", grouped=True)
    assert 'tile.key_order = "p8"' in str(module) and "tile.divisible = {seq_k = 16 : i64}" in str(module)
    ordered = tessera.launch(module, q, k, vt[..., p8_key_positions(48)], *ds, level="tile")
    assert np.array_equal(plain, ordered)
    with pytest.raises(ValueError, match="seq_k is a multiple of 16"):
        tessera.launch(module, q, k[:, :, :40], vt[..., :40], *ds, level="tile")


_RAGGED = [  # (batch, heads, heads_k, seq_q, seq_k, causal): key lengths of any residue, seq_q > seq_k causal
    (1, 2, 1, 100, 144, False), (1, 2, 1, 100, 203, True), (1, 2, 1, 1, 77, False), (1, 1, 1, 150, 100, True),
    (2, 4, 2, 37, 333, True),
]


@pytest.mark.parametrize("level, batch, heads, heads_k, seq_q, seq_k, d, causal, lse", [
    ("target", 1, 2, 1, 100, 203, 64, False, False),  # GQA, ragged query rows, a tail key block of 75 keys
    ("target", 1, 2, 1, 1, 77, 128, True, True),      # MQA, one query row (decoding), causal, head_dim 128, LSE
    ("target", 1, 1, 1, 70, 100, 256, True, False),   # head_dim 256 (64-key blocks), a tail of 36 keys
    ("ptx", 1, 2, 2, 65, 37, 64, True, False),        # fewer keys than one block, causal with seq_q > seq_k
] + [pytest.param(level, *shape[:5], d, shape[5], False, marks=pytest.mark.slow)
     for level in ("target", "ptx") for d in (64, 128, 256) for shape in _RAGGED])
def test_lowered_fp8_attention_through_the_public_api(level, batch, heads, heads_k, seq_q, seq_k, d, causal, lse):
    q, k, v, (dq, dk, dv) = fp8_inputs(seq_q + d, batch, heads, heads_k, seq_q, seq_k, d)
    kw = dict(causal=causal, descale_q=dq, descale_k=dk, descale_v=dv, return_lse=lse)
    got, tile = (tessera.attention(q, k, v, level=lv, **kw) for lv in (level, "tile"))
    if lse:
        (got, got_lse), (tile, tile_lse) = got, tile
        assert np.array_equal(got_lse, tile_lse)
    assert got.dtype == np.dtype(ml_dtypes.bfloat16) and got.shape == q.shape
    check = R.check_attention_fp8(got, q, k, v, dq, dk, dv, causal=causal)
    assert check.ok, check
    # next to the Tile level: the same e4m3 products; f32 sums in another order, a few bf16 ulps. P's f32 values
    # differ by a few ulps (scores summed in another order; ex2 of the rounded (s - m) log2 e against the
    # correctly rounded exp), so 2^8 P rounds to another e4m3 only within that of a midpoint: at 37 x 333, d 256
    # causal one P of 7e-5 (at [1, 1, 25, 128]) does, which moves O by far less than an ulp
    got, tile = got.astype(np.float64), tile.astype(np.float64)
    assert np.all(np.abs(got - tile) <= 4 * BF16_ULP * np.maximum(np.abs(tile), 2.0**-6))


def test_the_single_stage_pipeline_lowers_it_too():
    """The fallback ladder's last rung: one K/V tile in flight, no producer warpgroup."""
    q, k, v, ds = fp8_inputs(5, 1, 1, 1, 70, 208, 64)
    vt = np.ascontiguousarray(np.swapaxes(v, 2, 3)[..., p8_key_positions(208)])
    module = flash_attention(head_dim=64, dtype="e4m3", v_transposed="p8", causal=True)
    got = tessera.launch(module, q, k, vt, *ds, level="target", pipeline=PTX_PIPELINE)
    assert R.check_attention_fp8(got, q, k, v, *ds, causal=True).ok


@pytest.mark.parametrize("pipeline", [DEFAULT_PIPELINE, pytest.param(PTX_PIPELINE, marks=pytest.mark.slow)])
def test_lowered_fp8_kernel_is_ptxas_clean_without_spill(pipeline):
    from tessera import toolchain

    v_transposed = False if pipeline == DEFAULT_PIPELINE else "p8"  # single-stage: no producer to transpose V
    text = tessera.compile(flash_attention(head_dim=64, dtype="e4m3", v_transposed=v_transposed), pipeline=pipeline)
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in text  # Q.K^T, both operands in shared
    assert "cvt.rn.satfinite.e4m3x2.f32" in text                            # P, packed in registers
    assert ("prmt.b32" in text) == (not v_transposed)                       # V transposed by the producer
    ptxases = toolchain.find_all_ptxas()
    if not ptxases:
        pytest.skip("no ptxas installed")
    for ptxas in ptxases:  # 12.x and 13.x where installed
        result = toolchain.compile_ptx(text, ptxas=ptxas.path)
        assert not result.log.diagnostics and result.entry().spill_store_bytes == 0, ptxas.release


def test_what_is_not_lowered_is_refused_by_name():
    # a kernel author's V^T with its keys in their own order (flash_attention refuses v_transposed=True): the p8
    # kernel without its tile.key_order
    natural = flash_attention(head_dim=64, dtype="e4m3", v_transposed="p8")
    fn = natural.body.block.first_op
    fn.arg_attrs = ArrayAttr([DictionaryAttr({k: v for k, v in a.data.items() if k != KEY_ORDER_ATTR})
                              for a in fn.arg_attrs.data])
    with pytest.raises(LoweringError, match=r"holds its keys in P8 key order, so the B operand must be copied by "
                                            r"TMA from an input in that order \(tile.key_order"):
        tessera.compile(natural, pipeline=PTX_PIPELINE)
    with pytest.raises(LoweringError, match=r"an 8-bit B given as V \[keys, head_dim\] \(not V\^T\) is transposed "
                                            r"in shared memory by the producer of a pipelined ring"):
        tessera.compile(flash_attention(head_dim=64, dtype="e4m3"), pipeline=PTX_PIPELINE)


def test_the_kernel_abi_checks_key_order():
    text = str(flash_attention(head_dim=64, dtype="e4m3", v_transposed="p8"))
    with pytest.raises(VerifyException, match="must promise .* that seq_k is a multiple of 16"):
        tessera.parse_module(checked(text).replace("tile.divisible = {seq_k = 16 : i64}",
                                                   "tile.divisible = {seq_k = 8 : i64}"))
    with pytest.raises(VerifyException, match="'tile.key_order' must be one of 'p8'"):
        tessera.parse_module(checked(text).replace('tile.key_order = "p8"', 'tile.key_order = "p4"'))
