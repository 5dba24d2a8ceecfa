"""Shared tiles of 32-, 64- and 128-byte swizzles end to end: a K block of 32 bf16 (64-byte rows) or 16 (32-byte
rows), or of 96 (192-byte rows: three 64-byte spans, what an unpadded head_dim 96 would be), gets the widest
swizzle its rows allow (assign-swizzle), tensor maps of that swizzle and box width (CU_TENSOR_MAP_SWIZZLE_32B /
64B), and wgmma descriptors of its layout type (SBO = 8 rows x W). The facts themselves (the chunk tables of
the PTX ISA's swizzling modes, the descriptor's swizzle codes and canonical layouts, CuTe's Swizzle<B,4,3>)
are checked against NVIDIA's documentation in test_sm90_facts.py; here the lowering, the CTA simulator and
the PTX executor compute GEMMs through them, and ptxas takes the result."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tessera
from tessera import reference, reference_gemm
from tessera.kernels import gemm
from tessera.numerics import dtype_from_name
from tessera.passes import apply_pipeline
from tessera.sm90 import facts

LAYOUTS = {"NN": (False, False), "NT": (False, True), "TN": (True, False), "TT": (True, True)}


def _kernel(block_k, layout, **options):
    ta, tb = LAYOUTS[layout]
    return gemm(block_k=block_k, transpose_a=ta, transpose_b=tb, **options)


def _run(block_k, layout, shape, level, rng, **options):
    ta, tb = LAYOUTS[layout]
    inputs, expected = reference_gemm.gemm_operands(rng, *shape, transpose_a=ta, transpose_b=tb)
    out = tessera.interpret(_kernel(block_k, layout, **options), *inputs, level=level)
    comparison = reference.check_gemm(out, inputs[0], inputs[1], dtype_from_name("bf16"), **expected)
    assert comparison.ok, str(comparison)


def _swizzles(target_text: str) -> dict[str, set[int]]:
    """The swizzle of each shared buffer and tensor map of a Target IR kernel."""
    buffers = set(int(w) for w in re.findall(r"sm90.shared_buffer \"\w+\" offset \d+ size \d+ align \d+ swizzle (\d+)",
                                              target_text)) - {0}
    maps = set(int(w) for w in re.findall(r"sm90.swizzle = (\d+)", target_text))
    return {"buffers": buffers, "maps": maps}


@pytest.mark.parametrize("block_k, k_major_swizzle", [(16, 32), (32, 64), (48, 32), (96, 64)])
def test_k_major_tiles_get_the_widest_swizzle_their_rows_allow(block_k, k_major_swizzle):
    """NT: A [BM, BK] and B^T [BN, BK] are both K-major, rows of BK x 2 bytes."""
    target = tessera.print_module(tessera.compile(_kernel(block_k, "NT"), "target"))
    assert k_major_swizzle in _swizzles(target)["maps"] and k_major_swizzle in _swizzles(target)["buffers"]
    box = k_major_swizzle // 2  # one swizzle span per box row
    assert re.search(rf"sm90.box = \[{box} : i64, 128 : i64\]", target)
    # descriptors of that layout type: SBO = 8 rows of W bytes
    assert re.search(rf"sm90.make_descriptor %\S+ lbo 16 sbo {8 * k_major_swizzle} swizzle {k_major_swizzle} ", target)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_block_k_32_every_layout_target(layout, rng):
    """64-byte K-major rows (A in NN/NT, B^T in NT/TT) next to 256-byte MN-major ones; two K blocks and a
    ragged edge (the specialized any-shape path at K = 7)."""
    _run(32, layout, (72, 40, 96), "target", rng)
    _run(32, layout, (5, 3, 7), "target", rng)


@pytest.mark.parametrize("block_k, layout", [(32, "NN"), (32, "TT"), (16, "NT"), (96, "NT")])
def test_narrow_swizzles_in_the_ptx_executor(block_k, layout, rng):
    _run(block_k, layout, (8, 16, 2 * block_k), "ptx", rng)


def test_block_k_16_and_96_target(rng):
    _run(16, "NN", (72, 40, 96), "target", rng)
    _run(96, "TN", (72, 40, 200), "target", rng)


def test_tile_level_agrees(rng):
    _run(32, "NT", (33, 17, 70), "tile", rng)


@pytest.mark.usefixtures("ptxas")
@pytest.mark.parametrize("block_k", [16, 32, 96])
def test_ptxas_accepts_narrow_swizzles(block_k):
    for layout in ("NN", "NT"):
        result = tessera.compile(_kernel(block_k, layout), target="cubin")
        entry = result.entry()
        assert not result.warnings and not result.log.diagnostics, [str(w) for w in result.warnings]
        assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0


def test_unswizzlable_rows_are_refused_at_their_source_location():
    """assign-swizzle rebuilds the alloc and keeps its location: the refusal says file:line:col, and does not
    ask for assign-swizzle, which ran."""
    text = """func.func @k(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>}) attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %s = tile.alloc_shared : !tile.tile<64x8xbf16, shared>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  func.return
}"""
    module = tessera.parse_module(text, "rows16.mlir")
    with pytest.raises(Exception, match=r"^rows16.mlir:2:3: kernel @k: convert-tile-to-sm90: .*shared tiles need rows of "
                                        r"a multiple of 32 bytes .*got rows of 8 x 2 = 16 bytes: widen the tile$"):
        apply_pipeline(module, "assign-swizzle,convert-tile-to-sm90")


def test_pipeline_loops_rings_keep_the_location():
    module = tessera.parse_module(tessera.print_module(_kernel(32, "NN")), "gemm.mlir")
    apply_pipeline(module, "assign-swizzle,pipeline-loops{stages=2}")
    from tessera.dialects import tile
    from tessera.ir.diagnostics import source_location

    rings = [op for op in module.walk() if isinstance(op, tile.AllocSharedOp) and op.result.type.rank == 3]
    assert rings and all((source_location(op) or "").startswith("gemm.mlir:") for op in rings)


def test_swizzle_widths_facts_agree_with_cute():
    """An outside anchor: CuTe's Swizzle<B, 4, 3> (B = 1, 2, 3 for 32B, 64B, 128B) XORs address bits [7, 7 + B)
    into bits [4, 4 + B): the function the lowering, TMA and wgmma models all take from tessera.sm90."""
    addresses = np.arange(0, 4096)
    for bits, width in ((1, 32), (2, 64), (3, 128)):
        mask = ((1 << bits) - 1) << 7
        assert np.array_equal(facts.swizzle_address(addresses, width), addresses ^ ((addresses & mask) >> 3))
        assert facts.swizzle_period_bytes(width) == 8 * width
