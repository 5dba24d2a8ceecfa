"""An f32 register tile cast to e4m3/e5m2 and stored (a quantize epilogue writing FP8,
`tests/user_kernels/fp8_quantize.mlir`): below Tile IR each pair of columns is rounded by
`cvt.rn.satfinite.<type>x2.f32` (`sm90.cvt_pack` to an 8-bit type) and stored two bytes at a time
(`st.global.b16`). Bitwise against the Tile interpreter at target and PTX level on M = 70, N = 98 (neither a
multiple of the 64 x 64 tile) with the values that test the conversion: +-MAX_NORM (448, 57344), past it
(saturated, not NaN or infinite), infinities, NaN, subnormals and values below the smallest one (to nearest
even), signed zeros. Every installed ptxas takes it; rows that may start on an odd byte are refused by name."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.sm90 import facts
from unseen_rounds import KERNELS, assert_ptxas_clean

TYPES = {"e4m3": "f8E4M3FN", "e5m2": "f8E5M2"}
DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
SMALLEST = {"e4m3": 2.0**-9, "e5m2": 2.0**-16}
"""The smallest subnormal of each format (e4m3: 2^-6 x 2^-3; e5m2: 2^-14 x 2^-2)."""


def _kernel(fmt: str, text: str | None = None):
    text = (KERNELS / "fp8_quantize.mlir").read_text() if text is None else text
    return tessera.parse_module(text.replace("f8E4M3FN", TYPES[fmt]), "fp8_quantize.mlir")


def _special(fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Inputs that test the conversion, and what `cvt.rn.satfinite` makes of each (NaN for NaN)."""
    big, tiny = facts.FP8_MAX_FINITE[fmt], SMALLEST[fmt]
    cases = [(big, big), (-big, -big), (big * 1.0625, big), (-big * 1.07, -big), (big * 3, big),
             (np.inf, big), (-np.inf, -big), (np.nan, np.nan), (tiny, tiny), (-tiny, -tiny),
             (tiny / 2, 0.0),           # a tie below the smallest subnormal: to even, 0
             (tiny * 0.75, tiny),       # past the tie: the smallest subnormal
             (tiny * 2.5, tiny * 2),    # a tie between subnormals 2 and 3: to even, 2
             (tiny * 3.5, tiny * 4), (1e-30, 0.0), (0.0, 0.0), (-0.0, -0.0), (1.0, 1.0)]
    return np.array([c[0] for c in cases], np.float32), np.array([c[1] for c in cases])


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_a_quantize_epilogue_is_bitwise_the_tile_interpreters_at_every_level(fmt):
    rng = np.random.default_rng(98)
    x = (rng.standard_normal((70, 98)) * facts.FP8_MAX_FINITE[fmt] / 4).astype(np.float32)
    special, expected = _special(fmt)
    for start in (0, 64 * 98 + 66):  # the first block, and the last block's partial rows and columns
        x.flat[start:start + len(special)] = special
    module = _kernel(fmt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = {level: tessera.launch(module, x, level=level) for level in ("tile", "target", "ptx")}
    tile = results["tile"]
    assert tile.dtype == DTYPES[fmt]
    nan = np.isnan(expected)
    for start in (0, 64 * 98 + 66):
        got = tile.flat[start:start + len(special)]
        assert np.isnan(got[nan].astype(np.float32)).all()
        assert np.array_equal(got[~nan].view(np.uint8), expected[~nan].astype(DTYPES[fmt]).view(np.uint8))  # -0 too
    finite = np.isfinite(x)
    assert np.array_equal(tile[finite].astype(np.float32), facts.satfinite_f32(x[finite], fmt).astype(np.float32))
    for level in ("target", "ptx"):
        assert np.array_equal(results[level].view(np.uint8), tile.view(np.uint8)), level


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_a_quantize_epilogue_prints_cvt_satfinite_pairs_and_every_ptxas_takes_it(fmt):
    text = tessera.compile(_kernel(fmt))
    assert text.count(f"cvt.rn.satfinite.{fmt}x2.f32") == text.count("st.global.b16") == 16  # 32 values a thread
    assert_ptxas_clean(text, "fp8_quantize")


def test_an_8_bit_store_in_rows_that_may_start_on_an_odd_byte_is_refused_by_name(tmp_path, capsys):
    """Without `tile.divisible = {N = 2}` a row of Y may start on an odd byte, where a byte pair's st.global.b16
    would be misaligned: refused at the store's line, exit status 1, no traceback; the Tile level runs it."""
    from tessera.tools import tessera_run

    text = (KERNELS / "fp8_quantize.mlir").read_text().replace(",\n                  tile.divisible = {N = 2 : i64}", "")
    assert "divisible" not in text
    x = np.linspace(-500, 500, 65 * 33, dtype=np.float32).reshape(65, 33)
    y = tessera.launch(_kernel("e4m3", text), x, level="tile")
    assert np.array_equal(y.view(np.uint8), facts.satfinite_f32(x, "e4m3").view(np.uint8))
    message = (r"fp8_quantize.mlir:\d+:\d+: .*an 8-bit register tile is stored in byte pairs at even addresses: .*"
               r"tile.divisible = \{N = 2\}")
    with pytest.raises(Exception, match=message):
        tessera.launch(_kernel("e4m3", text), x, level="target")
    path = tmp_path / "fp8_quantize.mlir"
    path.write_text(text)
    assert tessera_run.main([str(path), "--level", "ptx", "-d", "M=64", "-d", "N=33"]) == 1
    err = capsys.readouterr().err
    assert "stored in byte pairs at even addresses" in err and "Traceback" not in err, err
