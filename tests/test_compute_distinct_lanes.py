"""`compute-distinct-lanes` and the lowering of coordinate differences (`convert_tile_to_sm90/index_diagonals.py`):
the same arithmetic on fewer registers, so the kernel's results are bitwise those of the whole-tile lowering,
and the registers it saves are the ones the allocator counts. (Target and PTX level against float64 with
these modifiers: tests/test_attention_mods_ws.py; the figures: bench/attention_variants.py --backward.)"""

from __future__ import annotations

import numpy as np

import tessera
from tessera import passes
from tessera.kernels import flash_attention
from tessera.numerics import BF16, round_to
from text_edits import checked

SLOPES = np.array([0.5, 0.25])
TABLE = np.linspace(-1.0, 1.0, 2 * 63).reshape(2, 63)


def alibi_table(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h] * (kv_idx - q_idx) + TABLE[h, np.clip(q_idx - kv_idx + 31, 0, 62)]


def window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 40) & (3 <= kv_idx + q_idx)


def test_distinct_lanes_are_bitwise_the_whole_tile_lowering():
    """The forward with ALiBi, a table and a window, single-stage at target level, with and without the pass (the
    differences are lowered as views either way: without it, each op runs on all 64 registers)."""
    rng = np.random.default_rng(0)
    q, k, v = (round_to(rng.standard_normal((1, 1, n, 64)), BF16) for n in (70, 90, 90))
    module = flash_attention(64, score_mod=alibi_table, mask_mod=window, return_lse=True, block_n=64)
    arrays = [SLOPES.astype(np.float32), TABLE.astype(np.float32)]
    without = checked(passes.PTX_PIPELINE).replace("compute-distinct-lanes,", "")
    assert without != passes.PTX_PIPELINE
    runs = [tessera.interpret(module, q, k, v, *arrays, level="target", pipeline=p) for p in (passes.PTX_PIPELINE,
                                                                                                 without)]
    for a, b in zip(*runs):
        assert np.array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32), equal_nan=True)


def test_fewer_registers_with_the_pass():
    """ALiBi's product and the table's gather on the thread's 18 distinct offsets at 64 keys: the single-stage
    kernel's count drops by at least what a [BM, 64] tile of the product takes beyond them, 32 - 18 registers.
    (Without the pass the kernel at 128 keys does not fit single-stage: 273 registers.)"""
    module = flash_attention(64, score_mod=alibi_table, block_n=64)
    counts = []
    for pipeline in (passes.PTX_PIPELINE, checked(passes.PTX_PIPELINE).replace("compute-distinct-lanes,", "")):
        lowered = tessera.compile(module, target="target", pipeline=pipeline)
        (fn,) = [op for op in lowered.walk() if "sm90.registers" in op.attributes]
        counts.append(fn.attributes["sm90.registers"].data["peak"].value.data)
    assert counts[0] <= counts[1] - 14, counts


SYMMETRIC_ALIBI = """\
func.func @symmetric_alibi(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                           %S: !tile.tile<2xf32, global> {tile.dims = #tile.dims<2>},
                           %O: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 64)>} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %pid = tile.program_id x : index
  %m0 = arith.muli %pid, %c64 : index
  %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %h = tile.splat %c0 : index -> !tile.tile<64xi32, register>
  %slope = tile.gather %S[%h] : !tile.tile<2xf32, global>, !tile.tile<64xi32, register> -> !tile.tile<64xf32, register>
  %q = tile.iota rows offset %m0 : !tile.tile<64xi32, register>
  %k = tile.iota cols offset %c64 : !tile.tile<1x64xi32, register>
  %d = tile.sub %k, %q : !tile.tile<1x64xi32, register>, !tile.tile<64xi32, register>
  %a = tile.abs %d : !tile.tile<64x64xi32, register>
  %af = tile.cast %a : !tile.tile<64x64xi32, register> -> !tile.tile<64x64xf32, register>
  %bias = tile.mul %af, %slope : !tile.tile<64x64xf32, register>, !tile.tile<64xf32, register>
  %y = tile.sub %x, %bias : !tile.tile<64x64xf32, register>
  %o = tile.view %O[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %y, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}
"""


def test_symmetric_alibi_slabs_are_the_whole_tile_bits():
    """x - f32(|kv_idx - q_idx|) * slope computed 8 registers at a time from the thread's scalar (f32 abs of
    f32(s) + d_k) at target level is bitwise the Tile interpreter's i32 abs, conversion, product and difference,
    for differences of both signs (queries 0..127 against keys 64..127)."""
    from tessera.ir import parse_module

    module = parse_module(SYMMETRIC_ALIBI)
    x = np.random.default_rng(1).standard_normal((128, 64)).astype(np.float32)
    slopes = np.float32([0.3, 0.7])
    tile, target = (np.asarray(tessera.interpret(module, x, slopes, level=level)) for level in ("tile", "target"))
    assert np.array_equal(tile.view(np.uint32), target.view(np.uint32))
    kv, q = np.arange(64, 128)[None, :], np.arange(128)[:, None]
    assert np.array_equal(tile, x - np.abs(kv - q).astype(np.float32) * slopes[0])
