"""`mask-by-mma`: a masked trip's bounds mask added by one more wgmma (a bias tile of +0 / -inf) instead of a
select per score, where the keys past the limit are a tensor's zero-filled end (passes/mask_by_mma.py).

Every level runs it: the Tile IR interpreter (`tile.key_bias`), the CTA simulator and the PTX executor (the
accumulate branch's wgmma group on the in-flight score accumulator, the bias tile's stores, fence and
barriers, checked for races), each bitwise equal to the select (the pipeline without the pass) on ragged
shapes, and ptxas where one is found."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
import tessera.kernels as kernels
from tessera import reference
from tessera.passes import DEFAULT_PIPELINE, apply_pipeline
from tessera.toolchain import find_all_ptxas, find_nvdisasm

SELECT_PIPELINE = DEFAULT_PIPELINE.replace("mask-by-mma,", "")
"""The default pipeline with the masks selected per score (before mask-by-mma)."""

TILE_PASSES = "assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations{branch=true}"


def tile_ir(module, mask_by_mma: bool = True):
    return apply_pipeline(module, TILE_PASSES + (",mask-by-mma" if mask_by_mma else "")) or module


def inputs(seq_q: int, seq_k: int, head_dim: int, heads: int = 1, kv_heads: int | None = None, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((1, heads, seq_q, head_dim), dtype=np.float32)
    k, v = (rng.standard_normal((1, kv_heads or heads, seq_k, head_dim), dtype=np.float32) for _ in range(2))
    return q, k, v


def test_the_flash_mask_becomes_a_bias_mma_after_the_score_mma():
    text = str(tile_ir(kernels.flash_attention(head_dim=128)))
    assert "tile.mask_bounds" not in text
    assert text.count("tile.key_bias") == 1
    assert "tile.alloc_shared : !tile.tile<176x16xbf16, shared, swizzle 32>" in text
    score = text.index("%s = tile.mma")
    bias = text.index("tile.mma %ones, %key_bias, %s transpose_b")
    assert score < text.index("scf.if %unmasked") < bias < text.index("%acc_next = tile.mma")  # before P.V


@pytest.mark.parametrize("builder, options", [
    ("flash_attention", dict(head_dim=128, causal=True)),       # the diagonal: a causal mask, kept
    ("flash_attention_varlen", dict(head_dim=128)),             # keys past a sequence: the next one's
    ("flash_attention_paged", dict(head_dim=128)),              # keys past cache_seqlens: a page's leftovers
    ("flash_attention", dict(head_dim=64, block_sparse=True, mask_mod=lambda b, h, q, k: (k - q) % 3 != 0)),
    ("two_pass_attention", dict(head_dim=128)),                 # two stages would not fit with the bias tile
])
def test_the_select_stays_where_keys_past_the_limit_are_not_known_zero(builder, options):
    module = getattr(kernels, builder)(**options)
    assert str(tile_ir(module.clone())) == str(tile_ir(module, mask_by_mma=False))


@pytest.mark.parametrize("head_dim, seq_k", [(128, 1), (128, 175), (128, 176), (128, 177), (128, 200), (128, 1000),
                                             (64, 177), (256, 300)])
def test_tile_ir_bitwise_as_the_select(head_dim, seq_k):
    q, k, v = inputs(100, seq_k, head_dim)
    module = kernels.flash_attention(head_dim=head_dim)
    o = tessera.interpret(tile_ir(module.clone()), q, k, v)
    assert np.array_equal(o, tessera.interpret(tile_ir(module, mask_by_mma=False), q, k, v))
    assert reference.check_attention(o, q, k, v, o.dtype).ok


@pytest.mark.parametrize("level, seq_k", [("target", 1), ("target", 177), ("ptx", 200)])
def test_lowered_bitwise_as_the_select(level, seq_k):
    q, k, v = inputs(64, seq_k, 128)
    module = kernels.flash_attention(head_dim=128)
    o = tessera.interpret(module, q, k, v, level=level)
    assert np.array_equal(o, tessera.interpret(module, q, k, v, level=level, pipeline=SELECT_PIPELINE))
    assert reference.check_attention(o, q, k, v, o.dtype).ok


@pytest.mark.slow
@pytest.mark.parametrize("options, shape", [
    (dict(head_dim=128, grouped=True), dict(heads=4, kv_heads=2)),
    (dict(head_dim=128, cluster=2), dict(seq_q=200)),
    (dict(head_dim=64), dict(seq_k=130)),
    (dict(head_dim=256), dict(seq_k=90)),
])
def test_lowered_variants_bitwise_as_the_select(options, shape):
    sizes = dict(seq_q=64, seq_k=177, heads=1, kv_heads=None) | shape
    q, k, v = inputs(sizes["seq_q"], sizes["seq_k"], options["head_dim"], sizes["heads"], sizes["kv_heads"])
    module = kernels.flash_attention(**options)
    for level in ("target", "ptx"):
        o = tessera.interpret(module, q, k, v, level=level)
        assert np.array_equal(o, tessera.interpret(module, q, k, v, level=level, pipeline=SELECT_PIPELINE))


def test_lse_bitwise_as_the_select():
    q, k, v = inputs(64, 177, 128)
    module = kernels.flash_attention(head_dim=128, return_lse=True)
    got = tessera.interpret(module, q, k, v, level="target")
    want = tessera.interpret(module, q, k, v, level="target", pipeline=SELECT_PIPELINE)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


@pytest.mark.skipif(not find_all_ptxas() or find_nvdisasm() is None, reason="needs ptxas and nvdisasm")
def test_ptxas_assembles_it_and_the_masked_trip_is_within_fifteen_percent():
    from tessera.sass import disassemble, loop_trip, opcode_counts, parse_sass, trip_loops
    from tessera.toolchain import compile_ptx

    ptx = tessera.compile(kernels.flash_attention(head_dim=128))
    for tool in find_all_ptxas():
        result = compile_ptx(ptx, ptxas=tool.path)
        assert result.entry().spill_store_bytes == 0 and not result.log.diagnostics, tool.release
        code = parse_sass(disassemble(result.cubin))
        loop = trip_loops(code)[0]
        steady, masked = loop_trip(code, loop=loop), loop_trip(code, masked=True, loop=loop)
        assert (opcode_counts(steady)["HGMMA"], opcode_counts(masked)["HGMMA"]) == (19, 20)  # the bias: one more
        assert opcode_counts(masked)["FSEL"] == opcode_counts(steady)["FSEL"], tool.release  # no select per score
        assert len(masked) <= 1.15 * len(steady), tool.release


def test_the_bias_tiles_minus_infinity_is_each_formats_own():
    """The -inf the lowering stores into a bias tile (`clear_rows.NEG_INF_HALF`) is the format's -inf, as
    ml_dtypes (bfloat16) and NumPy (IEEE binary16) encode it, not a number taken on trust."""
    import ml_dtypes
    from xdsl.dialects.builtin import BFloat16Type, Float16Type

    from tessera.passes.convert_tile_to_sm90.clear_rows import NEG_INF_HALF

    for kind, dtype in ((BFloat16Type, ml_dtypes.bfloat16), (Float16Type, np.float16)):
        assert NEG_INF_HALF[kind] == int(np.array(-np.inf, dtype).view(np.uint16))
