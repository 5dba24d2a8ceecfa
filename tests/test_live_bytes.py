"""Peak live bytes per thread block: liveness over loops, and the seed's 3-pass / 2-pass / online table.

The expected numbers are derived by hand from the kernels' IR (tessera.kernels), in f32 bytes (F = 4):
with P = block_m queries, M = seq_k keys, M0 = block_n keys per tile, M1 = ceildiv(M, M0) tiles,
a score tile is T = M0 P F bytes and a row vector R = P F bytes.

- flash: in the key loop, right after `%p_sum = tile.row_sum %p`, the live values are P (T) and the row
  vectors m_new, alpha, l and p_sum (4R); the accumulator [P, D] feeds O and is not counted.
  Peak = T + 4R, i.e. M0 P floats (+ 4P).
- two-pass: in the statistics loop, right after `%lm = tile.row_max %s_masked`: the score tile (T), lm and
  the running gm (2R), and the block's rows of the LM and SLD buffers (2 M1 P F). The output loop holds
  one score tile too, but SLD is dead there and only LM, gm, gd and one LM column are live.
  Peak = T + 2R + 2 M1 P F, i.e. M0 P (+ M1 P statistics, twice) floats.
- three-pass: in pass 2, right after `%s_loaded = tile.load` of an S tile: both scratch buffers (S is still
  being read, E is being written: 2 M P F), the loaded tile (T) and the row vectors m and l (2R).
  Peak = 2 M P F + T + 2R, i.e. 2 M P floats (+ one tile and two rows).
"""

from __future__ import annotations

import pytest

from tessera.analysis import compare_attention_variants, format_comparison, peak_live_bytes
from tessera.ir import parse_module
from tessera.kernels import flash_attention, gemm, three_pass_attention

F = 4  # bytes per f32


def expected_peaks(seq_k: int, block_m: int, block_n: int) -> dict[str, int]:
    p, m, m0 = block_m, seq_k, block_n
    m1 = -(-m // m0)
    tile_bytes, row_bytes = m0 * p * F, p * F
    return {
        "three_pass": 2 * m * p * F + tile_bytes + 2 * row_bytes,
        "two_pass": tile_bytes + 2 * row_bytes + 2 * m1 * p * F,
        "flash": tile_bytes + 4 * row_bytes,
    }


def test_seed_table_m1024_m0_256():
    reports = compare_attention_variants(seq_q=1024, seq_k=1024, block_n=256)
    peaks = {name: r.peak_bytes for name, r in reports.items()}
    assert peaks == expected_peaks(seq_k=1024, block_m=128, block_n=256)
    assert peaks == {"three_pass": 1_180_672, "two_pass": 136_192, "flash": 133_120}
    # The seed's ratios: three-pass ~ 2 M P, two-pass and online ~ M0 P, so about 2 M / M0 = 8x apart.
    assert 8 < peaks["three_pass"] / peaks["two_pass"] < 9
    assert 8 < peaks["three_pass"] / peaks["flash"] < 9


def test_where_the_peaks_are():
    reports = compare_attention_variants(seq_k=1024, block_n=256)
    three, two, flash = reports["three_pass"], reports["two_pass"], reports["flash"]
    assert three.peak_at == "tile.load %s_loaded in scf.for %j"
    assert [(v.name, v.bytes) for v in three.breakdown] == [
        ("%E", 524_288), ("%S", 524_288), ("%s_loaded", 131_072), ("%l", 512), ("%m_final", 512)
    ]
    assert three.scratch_bytes == 2 * 1024 * 128 * F
    assert two.peak_at == "tile.row_max %lm in scf.for %t"
    assert {v.name for v in two.breakdown} == {"%s_masked", "%LM", "%SLD", "%gm", "%lm"}
    assert flash.peak_at == "tile.row_sum %p_sum in scf.for %j"
    assert [v.name for v in flash.breakdown] == ["%p", "%alpha", "%l", "%m_new", "%p_sum"]
    assert flash.scratch_bytes == 0


@pytest.mark.parametrize("causal", [False, True])
def test_formulas_hold_for_other_tiles(causal):
    reports = compare_attention_variants(
        seq_q=256, seq_k=512, block_m=64, block_n=128, head_dim=64, dtype="f16", causal=causal, batch=2, heads=3
    )
    assert {n: r.peak_bytes for n, r in reports.items()} == expected_peaks(seq_k=512, block_m=64, block_n=128)


def test_scratch_share_per_block_and_missing_sizes():
    module = three_pass_attention(block_n=64)
    # [2, 4, 300, 100] f32 split over ceildiv(300, 128) * 4 * 2 = 24 blocks, rounded up.
    report = peak_live_bytes(module, dict(batch=2, heads=4, seq_q=300, seq_k=100))
    s = next(v for v in report.breakdown if v.name == "%S")
    assert s.bytes == -(-2 * 4 * 300 * 100 * F // 24)
    with pytest.raises(ValueError, match=r"needs the sizes \['batch', 'heads', 'seq_k', 'seq_q'\]"):
        peak_live_bytes(module)


def test_output_accumulator_is_not_counted():
    # GEMM holds nothing but its accumulator; flash's acc [128, 128] f32 (64 KiB) is not in its breakdown
    # although the score tile has the same shape at BN = 128.
    assert peak_live_bytes(gemm()).peak_bytes == 0
    report = peak_live_bytes(flash_attention(block_n=128))
    assert report.peak_bytes == 128 * 128 * F + 4 * 128 * F
    assert all(not v.name.startswith("%acc") for v in report.breakdown)


LOOP_KERNEL = """
func.func @loop(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                %Y: !tile.tile<?x1xf32, global> {tile.dims = #tile.dims<n, 1>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %big = tile.fill 1.0 : !tile.tile<64x64xf32, register>
  %init = tile.fill 0.0 : !tile.tile<64xf32, register>
  %res = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %init) -> (!tile.tile<64xf32, register>) {
    %rs = tile.row_sum %big : !tile.tile<64x64xf32, register> -> !tile.tile<64xf32, register>
    %tmp = tile.fill 2.0 : !tile.tile<64x32xf32, register>
    %ts = tile.row_sum %tmp : !tile.tile<64x32xf32, register> -> !tile.tile<64xf32, register>
    %sum = tile.add %rs, %ts : !tile.tile<64xf32, register>
    %acc_new = tile.add %acc, %sum : !tile.tile<64xf32, register>
    scf.yield %acc_new : !tile.tile<64xf32, register>
  }
  %col = tile.reshape %res : !tile.tile<64xf32, register> -> !tile.tile<64x1xf32, register>
  %y = tile.view %Y[%c0, %c0] : !tile.tile<?x1xf32, global> -> !tile.tile<64x1xf32, global>
  tile.store_global %col, %y : !tile.tile<64x1xf32, register>, !tile.tile<64x1xf32, global>
  func.return
}
"""


def test_value_used_in_a_loop_is_live_through_the_whole_body():
    # %big's last use is the first op of the body, but the next iteration reads it again: it is live when
    # %tmp is made, together with %rs and the carried %acc.
    report = peak_live_bytes(parse_module(LOOP_KERNEL))
    assert report.peak_at == "tile.fill %tmp in scf.for %i"
    assert [(v.name, v.bytes) for v in report.breakdown] == [
        ("%big", 64 * 64 * F), ("%tmp", 64 * 32 * F), ("%acc", 64 * F), ("%rs", 64 * F)
    ]


def test_format_comparison():
    reports = compare_attention_variants(seq_k=1024, block_n=256)
    text = format_comparison(reports, block_m=128)
    assert "three_pass    1,180,672      2306.0" in text
    assert "flash           133,120       260.0" in text
