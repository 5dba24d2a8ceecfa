"""`mask-causal-by-mma`: a masked trip's causal mask added by four bf16 k16 wgmmas per warpgroup reading windows
of one static -2^100 table, instead of a select per score, where every row of the block sees key 0; the select
kept for the other blocks (passes/mask_causal_by_mma.py, dialects/tile_causal_bias.py).

Every level runs it: the Tile IR interpreter (it reads the table's windows as the lowering's wgmmas do), the CTA
simulator and the PTX executor (the table's stores, fence and barrier checked for races; the accumulate branch's
group on the in-flight score accumulator), each bitwise equal to the select and within the float64 reference's
tolerance, on lengths around the key block, seq_q < seq_k and seq_q > seq_k (whose blind blocks keep the select:
rows of zeros), GQA and LSE; and ptxas where one is found."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
import tessera.kernels as kernels
from tessera import reference
from tessera.dialects import tile_causal_bias as causal_bias
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.ptx.state import PtxHazardError
from tessera.passes import DEFAULT_PIPELINE, apply_pipeline
from tessera.toolchain import find_all_ptxas, find_nvdisasm
from test_mask_by_mma import TILE_PASSES, inputs

SELECT_PIPELINE = DEFAULT_PIPELINE.replace("mask-causal-by-mma,", "")
"""The default pipeline with the causal masks selected per score."""

TABLE_PIPELINE = SELECT_PIPELINE.replace("mask-by-mma,", "mask-by-mma,mask-causal-by-mma,")
"""The default pipeline with the causal masks added by the tensor core."""

def tile_ir(module, table: bool = True):
    return apply_pipeline(module, TILE_PASSES + (",mask-causal-by-mma" if table else "")) or module


def test_the_table_is_written_once_and_the_bias_follows_the_score_mma():
    text = str(tile_ir(kernels.flash_attention(head_dim=128, causal=True)))
    assert text.count("tile.causal_bias_table %causal_table : !tile.tile<720x8xbf16, shared>") == 1
    assert text.count("tile.causal_bias %s, %causal_table") == 1
    assert text.count("tile.mask_causal") == 1  # kept for the blocks whose first row sees no key
    assert text.index("tile.causal_bias_table") < text.index("scf.for")
    assert text.index("%s = tile.mma") < text.index("scf.if %unbiased") < text.index("%acc_next = tile.mma")
    assert "%blind = arith.cmpi slt, %first_row_limit" in text and "scf.if %unselected" in text
    assert "%biased_from = arith.select %blind" in text


@pytest.mark.parametrize("builder, options", [
    ("flash_attention", dict(head_dim=128)),                      # no causal mask
    ("flash_attention_varlen", dict(head_dim=128, causal=True)),  # keys past a sequence: the next one's
    ("flash_attention_paged", dict(head_dim=128, causal=True)),   # keys past cache_seqlens: a page's leftovers
    ("flash_attention", dict(head_dim=64, causal=True, score_mod=lambda s, b, h, q, k: s * 0.5)),
    ("flash_attention", dict(head_dim=256, causal=True)),         # 48 keys a trip: the select is cheaper
    ("flash_attention", dict(head_dim=128, causal=True, scale=2.0 ** 27)),  # -2^100 x 2^27 x log2(e) overflows
    ("flash_attention", dict(head_dim=128, causal=True, bias=True)),  # a bias in the accumulator may be -inf
    ("two_pass_attention", dict(head_dim=64, causal=True)),       # exp against each tile's own maximum
    ("three_pass_attention", dict(head_dim=64, causal=True)),     # the masked scores are stored
])
def test_the_select_stays_where_the_preconditions_fail(builder, options):
    module = getattr(kernels, builder)(**options)
    assert str(tile_ir(module.clone())) == str(tile_ir(module, table=False))


def test_the_table_rows_are_the_windows_every_offset_reads():
    """Every (slice, column, chunk) a clamped offset gives reads a row of the bias windows, whose element i
    hides exactly where c - R > D (the op's docstring), for D well past both clamps; and each slice's A window,
    read as the lowering's descriptors read it (row m + 8 j, element i for K index 8 j + i), is the permuted
    identity: row 16 p + 8 (1 - j) + i of the warpgroup has its one at K index 8 j + i, the other rows none."""
    rows, keys = 128, 176
    table = causal_bias.table_rows(rows, keys)
    values = causal_bias.table_values(table)
    r = np.arange(rows)
    p, j, i = causal_bias.slice_position(r % 64)
    for d in range(-rows - 40, keys + 40):
        e = causal_bias.window_offset(d, r // 64, p, rows, keys)
        window = causal_bias.window_row(np.arange(keys)[None, :], j[:, None], e[:, None],
                                        causal_bias.table_origin(table))
        assert window.min() >= 0 and window.max() < causal_bias.bias_rows(table)
        hidden = values[window, i[:, None]] == -2.0 ** causal_bias.CAUSAL_BIAS_LOG2
        assert np.array_equal(hidden, np.arange(keys)[None, :] - r[:, None] > d), d
    m, k = np.arange(64)[:, None], np.arange(16)[None, :]
    for warp in range(4):
        a = values[causal_bias.a_window_row(table, warp) + m + 8 * (k // 8), k % 8]
        want = np.zeros((64, 16))
        mine = np.arange(16 * warp, 16 * warp + 16)
        wp, wj, wi = causal_bias.slice_position(mine)
        want[mine, 8 * wj + wi] = 1.0
        assert np.array_equal(a, want), warp


@pytest.mark.parametrize("head_dim, seq_q, seq_k", [
    (128, 1, 1), (128, 175, 175), (128, 176, 176), (128, 177, 177), (128, 300, 300), (128, 100, 333),
    (128, 333, 100), (128, 129, 1), (64, 300, 300), (64, 333, 100), (64, 1, 129), ("f16", 300, 177)])
def test_tile_ir_bitwise_as_the_select(head_dim, seq_q, seq_k):
    q, k, v = inputs(seq_q, seq_k, 128 if head_dim == "f16" else head_dim, heads=2)
    module = kernels.flash_attention(head_dim=128, causal=True, dtype="f16") if head_dim == "f16" else \
        kernels.flash_attention(head_dim=head_dim, causal=True)
    o = tessera.interpret(tile_ir(module.clone()), q, k, v)
    assert np.array_equal(o, tessera.interpret(tile_ir(module, table=False), q, k, v))
    assert reference.check_attention(o, q, k, v, o.dtype, causal=True).ok


def test_tile_ir_gqa_and_lse_bitwise_as_the_select():
    q, k, v = inputs(300, 333, 128, heads=4, kv_heads=2)
    module = kernels.flash_attention(head_dim=128, causal=True, grouped=True, return_lse=True)
    got = tessera.interpret(tile_ir(module.clone()), q, k, v)
    want = tessera.interpret(tile_ir(module, table=False), q, k, v)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("level, seq_q, seq_k", [("target", 100, 333), ("target", 333, 100), ("ptx", 177, 177),
                                                 ("ptx", 333, 100)])
def test_lowered_bitwise_as_the_select(level, seq_q, seq_k):
    q, k, v = inputs(seq_q, seq_k, 128)
    module = kernels.flash_attention(head_dim=128, causal=True)
    o = tessera.interpret(module, q, k, v, level=level, pipeline=TABLE_PIPELINE)
    assert np.array_equal(o, tessera.interpret(module, q, k, v, level=level, pipeline=SELECT_PIPELINE))
    assert reference.check_attention(o, q, k, v, o.dtype, causal=True).ok


@pytest.mark.slow
@pytest.mark.parametrize("options, shape", [
    (dict(head_dim=128, grouped=True, return_lse=True), dict(seq_q=200, seq_k=300, heads=4, kv_heads=2)),
    (dict(head_dim=64), dict(seq_q=300, seq_k=177)),
    (dict(head_dim=128, block_n=128), dict(seq_q=200, seq_k=130)),
    (dict(head_dim=128, dtype="f16"), dict(seq_q=300, seq_k=177)),   # bf16 bias wgmmas on f16 scores
    (dict(head_dim=128), dict(seq_q=1, seq_k=1)),
    (dict(head_dim=128), dict(seq_q=176, seq_k=176)),
])
def test_lowered_variants_bitwise_as_the_select(options, shape):
    q, k, v = inputs(shape["seq_q"], shape["seq_k"], options["head_dim"], shape.get("heads", 1), shape.get("kv_heads"))
    module = kernels.flash_attention(causal=True, **options)
    for level in ("target", "ptx"):
        got = tessera.interpret(module, q, k, v, level=level, pipeline=TABLE_PIPELINE)
        want = tessera.interpret(module, q, k, v, level=level, pipeline=SELECT_PIPELINE)
        assert all(np.array_equal(a, b) for a, b in zip(*((got, want) if isinstance(got, tuple) else ((got,), (want,)))))


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_a_table_published_without_the_proxy_fence_is_a_race(level, monkeypatch):
    """The table's generic-proxy stores need fence.proxy.async before the tensor core reads them: both race
    detectors report the seeded variant that only synchronizes the threads."""
    from tessera.dialects import sm90
    from tessera.passes.convert_tile_to_sm90.causal_bias import CausalBiasLowering

    monkeypatch.setattr(CausalBiasLowering, "_publish_table",
                        lambda self, e: e.op(sm90.BarSyncOp(0, self.threads)))
    q, k, v = inputs(177, 177, 128)
    with pytest.raises((KernelHazardError, PtxHazardError), match="fence.proxy.async"):
        tessera.interpret(kernels.flash_attention(head_dim=128, causal=True), q, k, v, level=level,
                          pipeline=TABLE_PIPELINE)


@pytest.mark.skipif(not find_all_ptxas() or find_nvdisasm() is None, reason="needs ptxas and nvdisasm")
def test_ptxas_assembles_it_and_the_masked_trip_is_within_fifteen_percent():
    from tessera.sass import disassemble, loop_trip, opcode_counts, parse_sass, trip_loops
    from tessera.toolchain import compile_ptx

    ptx = tessera.compile(kernels.flash_attention(head_dim=128, causal=True), pipeline=TABLE_PIPELINE)
    for tool in find_all_ptxas():
        result = compile_ptx(ptx, ptxas=tool.path)
        assert result.entry().spill_store_bytes == 0 and not result.log.diagnostics, tool.release
        code = parse_sass(disassemble(result.cubin))
        loop = trip_loops(code)[0]
        steady, masked = loop_trip(code, loop=loop), loop_trip(code, masked=True, loop=loop)
        assert (opcode_counts(steady)["HGMMA"], opcode_counts(masked)["HGMMA"]) == (19, 23)  # the bias: four more
        assert opcode_counts(masked)["FSEL"] == opcode_counts(steady)["FSEL"], tool.release  # no select per score
        assert len(masked) <= 1.15 * len(steady), tool.release


def test_minus_h_is_bf16s_two_to_the_hundred():
    import ml_dtypes

    assert causal_bias.CAUSAL_BIAS_BF16 == int(np.array(-2.0 ** causal_bias.CAUSAL_BIAS_LOG2,
                                                        ml_dtypes.bfloat16).view(np.uint16))


def test_a_hidden_score_becomes_exactly_minus_h_below_the_bound_in_the_tensor_cores_arithmetic():
    """Hopper's block FMA (`tessera.sm90.wgmma_numerics.block_fma`, the published bit-accurate model): S plus one
    product 1 x -2^100 among zero products is exactly -2^100 for |S| < 2^75 (`SCORE_BOUND_LOG2`: S truncated
    to the block's grid, 2^(100 - 25), contributes nothing), and not at 2^75; S plus products 1 x 0 stays S."""
    from tessera.sm90.wgmma_numerics import block_fma

    h = -2.0 ** causal_bias.CAUSAL_BIAS_LOG2
    bound = 2.0 ** causal_bias.SCORE_BOUND_LOG2
    a = np.zeros((1, 16))
    a[0, 5] = 1.0
    scores = np.array([0.0, 1.5, -3.25e4, np.nextafter(np.float32(bound), np.float32(0)), -float(np.nextafter(
        np.float32(bound), np.float32(0)))], np.float32)
    for s in scores:
        hidden = np.zeros((1, 16))
        hidden[0, 5], hidden[0, 6] = h, h  # the other -H meets a zero of A: 0 x -H
        assert block_fma(a, hidden, np.array([[s]]), "bf16", "f32")[0, 0] == h, s
        assert block_fma(a, np.zeros((1, 16)), np.array([[s]]), "bf16", "f32")[0, 0] == s, s
    hidden = np.zeros((1, 16))
    hidden[0, 5] = h
    assert block_fma(a, hidden, np.array([[bound]]), "bf16", "f32")[0, 0] != h


def test_the_select_stays_where_the_table_would_not_fit(monkeypatch):
    """A kernel whose shared memory with the table (11,520 bytes at 128 x 176, 12,288 in the bound) would pass a
    block's keeps its select: here the block's limit lowered to the kernel's own bound plus the table, or less."""
    import tessera.passes.mask_causal_by_mma as pass_module
    from tessera.passes.mask_by_mma import shared_bytes_bound
    from xdsl.dialects import func

    module = kernels.flash_attention(head_dim=128, causal=True)
    (fn,) = [op for op in tile_ir(module.clone(), table=False).walk() if isinstance(op, func.FuncOp)]
    for room, rewritten in ((12_288, True), (12_287, False)):  # the table rounded up to 1024 bytes
        monkeypatch.setattr(pass_module, "MAX_SHARED_MEMORY_PER_BLOCK", shared_bytes_bound(fn) + room)
        assert ("tile.causal_bias " in str(tile_ir(module.clone()))) is rewritten, room
