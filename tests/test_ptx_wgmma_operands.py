"""How the PTX executor's wgmma moves its data: operands gathered for every CTA of a batch at once, a 16-byte
chunk at a time (`wgmma_operands.descriptor_tiles`), and a chain's accumulators kept in product order and written
where they lie at its wait (`wgmma_accumulators` over `state.lane_rows`): the same bits as a byte gather, and as a
gather, add in float64, rounding and scatter per wgmma, special values included; the product taken with its rows and columns in thread
order (`wgmma.thread_rows`) is the fragments of D = A x B (`wgmma.fragment_order`)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tessera.interpreters.ptx.state import lane_rows
from types import SimpleNamespace

from tessera.interpreters.ptx import wgmma_accumulators
from tessera.interpreters.ptx.wgmma import fragment_order, thread_rows
from tessera.interpreters.ptx.wgmma_operands import (descriptor_bytes, descriptor_tiles, register_operands,
                                                     register_words, tile_gathers)
from tessera.sm90 import facts


def test_lane_rows_views_equal_runs_at_equal_strides():
    array = np.arange(12 * 3).reshape(12, 3)
    lanes = np.array([1, 2, 5, 6, 9, 10])
    view = lane_rows(array, lanes)
    assert view.shape == (3, 2, 3) and np.shares_memory(view, array)
    assert np.array_equal(view.reshape(-1, 3), array[lanes])
    view[...] = -1
    assert (array[lanes] == -1).all() and (np.delete(array, lanes, axis=0) >= 0).all()
    assert lane_rows(array, np.arange(4, 9)).shape == (1, 5, 3)


@pytest.mark.parametrize("lanes", [[0, 1, 4], [0, 1, 3, 4, 7, 8, 9], [0, 1, 4, 5, 9, 10], [0, 2, 4, 6, 7]])
def test_lane_rows_refuses_irregular_runs(lanes):
    assert lane_rows(np.zeros((12, 2)), np.array(lanes)) is None


@pytest.mark.parametrize("n", [8, 64, 176, 256])
def test_product_in_thread_order_is_the_fragments(n):
    """A x B with A's rows gathered in `thread_rows`, then `fragment_order`: thread t's
    element v is D[row, col] of `facts.accumulator_coords`; the register A tile gathered in that order too."""
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal((2, 64, 16)), rng.standard_normal((2, n, 16))
    rows = thread_rows(n)
    fragments = fragment_order(np.matmul(a[:, rows], b.transpose(0, 2, 1)))
    d = np.matmul(a, b.transpose(0, 2, 1))
    row, col = facts.accumulator_coords(np.arange(n // 2)[None, :], np.arange(128)[:, None])
    assert np.array_equal(fragments.reshape(2, 128, n // 2), d[:, row, col])
    halves = rng.integers(0, 0x7F00, (3 * 384, 4, 2), dtype=np.uint32)  # finite bf16 pairs
    block = halves[..., 0] | halves[..., 1] << 16  # three CTAs' A registers [lanes, 4]
    lanes = (np.arange(3)[:, None] * 384 + np.arange(128, 384)).reshape(-1)  # their consumer warpgroups
    tiles = register_operands(block[lanes], register_words(np.arange(len(lanes))), "bf16")
    ordered = register_operands(block, register_words(lanes, rows), "bf16")  # in place, rows in thread order
    assert np.array_equal(ordered, tiles[:, rows])
    for half in (0, 1):  # thread t's register a[i] holds elements (row, k) of its tile (Figure 148)
        row, k = facts.a_fragment_coords(np.arange(4)[None, :], half, np.arange(128)[:, None])
        expected = (halves[lanes, :, half].reshape(6, 128, 4).astype(np.uint16)).view(ml_dtypes.bfloat16)
        assert np.array_equal(tiles[:, row, k], expected.astype(np.float64))


@pytest.mark.parametrize("first", [True, False])
def test_chain_kept_in_product_order_is_the_gathered_updates(first):
    """Three wgmmas of a chain (the first adding to the registers or not), kept in product order and written back
    once: the bits of a gather, add in float64, rounding to f32 and scatter per wgmma."""
    n, ctas, threads = 64, 3, 384  # two consumer warpgroups (lanes 128..383) of each CTA
    registers = n // 2
    lanes = (np.arange(ctas)[:, None] * threads + np.arange(128, threads)).reshape(-1)
    rng = np.random.default_rng(1)
    columns = np.exp2(rng.integers(-160, 130, (1, 1, n)))
    products = [rng.standard_normal((len(lanes) // 128, 64, n)) * columns for _ in range(3)]  # D' (`thread_rows`)
    products[0][0, 0, :4] = [np.inf, -np.inf, np.nan, 3e38]
    products[1][1, 2, :2] = [3e38, -1e-300]
    block = rng.standard_normal((ctas * threads, registers)).astype(np.float32)
    block[lanes[1], :3] = [np.float32(1e-45), np.inf, np.float32(3.4e38)]
    expected, original = block.copy(), block.copy()
    m = SimpleNamespace(deferred={})
    rows = lane_rows(block.view(np.uint32), lanes).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # values past f32 round to inf in both
        for i, product in enumerate(products):
            add = first or i > 0
            fragments = fragment_order(product)
            expected[lanes] = (fragments + expected[lanes].astype(np.float64) if add else fragments).astype(np.float32)
            wgmma_accumulators.accumulate(m, block, lanes, rows, product.copy(), add)
    assert m.deferred and np.array_equal(block.view(np.uint32), original.view(np.uint32))  # no register written yet
    wgmma_accumulators.write_back(m)
    assert not m.deferred
    assert np.array_equal(block.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("lanes, size", [([0, 1, 6, 7], 12), ([4, 5, 10, 11], 12), ([0, 1, 4, 5], 6),
                                         ([0, 1, 2, 3], 4)])
def test_lane_rows_every_way_of_viewing(lanes, size):
    """A reshaped slice from the first run, one ending at the last run, or strides past the array's end."""
    array = np.arange(size * 2).reshape(size, 2)
    lanes = np.array(lanes)
    view = lane_rows(array, lanes)
    assert np.shares_memory(view, array) and np.array_equal(view.reshape(-1, 2), array[lanes])


@pytest.mark.parametrize("major", ["K", "MN"])
@pytest.mark.parametrize("swizzle", [0, 128])
@pytest.mark.parametrize("size", [32 * 1024, 32 * 1024 + 15])
@pytest.mark.parametrize("k_rows", [False, True])
@pytest.mark.parametrize("ordered", [False, True])
def test_descriptor_tiles_of_several_ctas_are_their_bytes(major, swizzle, size, k_rows, ordered):
    """Tiles [extent, K] or [K, extent] (`k_rows`), their extent as stored or in thread order (`ordered`), gathered a
    chunk at a time whichever way round the descriptor stores them: a byte gather's bits. Also where a CTA's
    window is not whole chunks (the flash kernel's 215,039 bytes)."""
    rng = np.random.default_rng(2)
    m = SimpleNamespace(shared=rng.integers(0, 0x7F, 3 * size, np.uint8), shared_bytes=size)  # finite bf16 pairs
    width = swizzle or 16
    descriptor = facts.encode_descriptor(1024, 16 if not swizzle else 1024, 8 * width if swizzle else 128, swizzle)
    key = (descriptor, major, 2, 64)
    decoded = descriptor_bytes(*key)
    assert (decoded[7] is None) == (major == "MN")  # MN-major: whole chunks, out of order
    ctas = [2, 0]
    rows = thread_rows(64) if ordered else None
    gather = tile_gathers(m, [(cta, key, decoded) for cta in ctas], rows, k_rows)
    assert gather.transpose == ((major == "K") == k_rows)  # gathered along the chunks, swapped where not wanted so
    tiles = descriptor_tiles(m, gather, "bf16")
    assert tiles.flags.c_contiguous
    for tile, cta in zip(tiles, ctas):
        raw = m.shared[cta * size + decoded[1]].view(np.uint16).view(ml_dtypes.bfloat16).astype(np.float64)
        expected = raw.reshape(decoded[0].shape)[slice(None) if rows is None else rows]
        assert np.array_equal(tile, expected.T if k_rows else expected)


@pytest.mark.parametrize("lanes, whole", [(range(0, 256), [0, 1]), ([*range(0, 128), *range(256, 384)], [0, 2]),
                                          (range(64, 192), None), (range(0, 192), None), (range(0, 127), None)])
def test_a_wgmma_runs_whole_warpgroups(lanes, whole):
    """The warpgroups a wgmma's lanes make up (128 lanes whose ends lie in one warpgroup are all of it), or the
    error naming a thread of one that is not whole: 128 lanes across two warpgroups too."""
    from tessera.interpreters.ptx.wgmma import _warpgroups

    lane_ids = np.arange(3 * 128)
    m = SimpleNamespace(unit_of={128: lane_ids // 128},
                        error=lambda inst, message, lane: ValueError(f"{message} (lane {lane})"))
    lanes = np.array(lanes)
    if whole is None:
        with pytest.raises(ValueError, match="wgmma needs all 128 threads of the warpgroup"):
            _warpgroups(m, None, lanes)
        return
    starts, groups = _warpgroups(m, None, lanes)
    assert starts.tolist() == [0, 128] and groups.tolist() == whole
