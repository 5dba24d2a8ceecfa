"""Shapes nobody picked, through the public entry points (tests/shape_sweep.py draws them), and bad shapes and
types at each entry point: a named refusal, never a traceback or a silently wrong result.

The default suite runs a small slice of the Tile-level sweep and the refusals; `pytest -m slow
tests/test_shape_sweep.py` runs the whole sweep (seeds 0 and 1, every family), the same shapes' distinct code
paths in the CTA simulator and the PTX executor, and ptxas 13.0 on their kernels (docs/testing.md).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import reference

import shape_sweep

bf16 = ml_dtypes.bfloat16


DEFAULT_SLICE = 3
"""Cases per family in the default suite: the first of seed 0 whose `shape_sweep.cost` is at most SMALL."""
SMALL = 500_000
SLOW_SEEDS, SLOW_COUNT = (0, 1), 40


def _default_slice() -> list:
    params = []
    for family in shape_sweep.FAMILIES:
        small = [(i, c) for i, c in enumerate(shape_sweep.cases(family, 0, 40)) if shape_sweep.cost(c) <= SMALL]
        for i, case in small[:DEFAULT_SLICE]:
            params.append(pytest.param(family, case, id=f"{family}-0-{i}"))
    return params


def _whole_sweep() -> list:
    params = []
    for seed in SLOW_SEEDS:
        for family in shape_sweep.FAMILIES:
            for i, case in enumerate(shape_sweep.cases(family, seed, SLOW_COUNT)):
                params.append(pytest.param(family, case, seed, id=f"{family}-{seed}-{i}"))
    return params


@pytest.mark.parametrize("family, case", _default_slice())
def test_the_sweeps_default_slice_matches_float64(family, case):
    assert shape_sweep.run(family, case) == [], case


@pytest.mark.slow
@pytest.mark.parametrize("family, case, seed", _whole_sweep())
def test_the_whole_sweep_matches_float64(family, case, seed):
    assert shape_sweep.run(family, case, seed) == [], (seed, case)


def _bf16(rng, *shape):
    return rng.standard_normal(shape).astype(bf16)


# region Appending into a shared page


def test_an_append_onto_a_row_another_sequence_reads_is_refused_by_name(rng):
    """Two sequences sharing pages 0 and 1 with 5 cached tokens each would both append token 5 to page 0,
    row 5: the second append overwrote the first, and sequence 0 attended to sequence 1's key (O off by 0.15,
    tolerance 0.008). Refused before anything is written."""
    k_cache, v_cache = _bf16(rng, 4, 16, 1, 64), _bf16(rng, 4, 16, 1, 64)
    before = k_cache.copy()
    q, k_new, v_new = _bf16(rng, 2, 1, 1, 64), _bf16(rng, 2, 1, 1, 64), _bf16(rng, 2, 1, 1, 64)
    with pytest.raises(ValueError, match=r"k_new would overwrite a key that is read: sequence 0's token 5 is "
                                         r"appended to page 0, row 5, which sequence 1 reads as its token 5"):
        tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array([5, 5], np.int32),
                                       page_table=np.array([[0, 1], [0, 1]], np.int32), k_new=k_new,
                                       v_new=v_new, level="tile")
    assert np.array_equal(k_cache.view(np.uint16), before.view(np.uint16))


def test_an_append_onto_a_page_listed_twice_in_one_table_row_is_refused(rng):
    """Page 0 twice in one sequence's table: its token 16 would overwrite its own token 0."""
    k_cache, v_cache = _bf16(rng, 2, 16, 1, 64), _bf16(rng, 2, 16, 1, 64)
    with pytest.raises(ValueError, match=r"sequence 0's token 16 is appended to page 0, row 0, which sequence 0 "
                                         r"reads as its token 0"):
        tessera.attention_with_kvcache(_bf16(rng, 1, 1, 1, 64), k_cache, v_cache,
                                       cache_seqlens=np.array([16], np.int32),
                                       page_table=np.array([[0, 0]], np.int32), k_new=_bf16(rng, 1, 1, 1, 64),
                                       v_new=_bf16(rng, 1, 1, 1, 64), level="tile")


def test_a_shared_prefix_page_with_appends_into_own_pages_runs(rng):
    """Sharing a full prefix page is fine when each sequence appends into its own page."""
    k_cache, v_cache = _bf16(rng, 3, 16, 1, 64), _bf16(rng, 3, 16, 1, 64)
    table, lengths = np.array([[0, 1], [0, 2]], np.int32), np.array([16, 20], np.int32)
    q, k_new, v_new = _bf16(rng, 2, 1, 1, 64), _bf16(rng, 2, 1, 1, 64), _bf16(rng, 2, 1, 1, 64)
    o = tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, page_table=table, k_new=k_new,
                                       v_new=v_new, level="tile")
    for s in range(2):
        keys, values = (np.concatenate([c[table[s]].reshape(-1, 1, 64)[: lengths[s]], new[s]])
                        for c, new in ((k_cache, k_new), (v_cache, v_new)))
        assert np.array_equal(keys[-1], k_new[s, 0])  # appended in place before attending
        head = lambda x: x.transpose(1, 0, 2)[None]  # noqa: E731
        assert reference.check_attention(head(o[s]), head(q[s]), head(keys), head(values), bf16).ok


# endregion
