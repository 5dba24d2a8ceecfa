"""tile.clear_rows: the V rows of a key block past the sequence's keys are zeroed before P.V (P = 0 times a NaN
there would be NaN), in the Tile interpreter's ring rules, and end to end at every level: a NaN or inf past a
cache's length or in the next packed sequence changes no bit of O (the -m slow matrix at target and ptx)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.interpreters.block_batch import KernelHazardError
from test_pipeline_loops import COPY0, STAGE, WAIT, _read, _run_ring

BF16 = ml_dtypes.bfloat16


def _clear(k0: int, seq_k: int) -> list[str]:
    return [f"%k0 = arith.constant {k0} : index", f"%seq_k = arith.constant {seq_k} : index",
            f"tile.clear_rows %s0, %k0, %seq_k : {STAGE}"]


# region the Tile interpreter


@pytest.mark.parametrize("k0,seq_k,kept", [(100, 103, 3), (0, 16, 16), (0, 40, 16), (20, 7, 0)])
def test_rows_at_or_past_seq_k_become_zero_and_the_others_stay(k0, seq_k, kept):
    out, a = _run_ring(COPY0, WAIT, *_clear(k0, seq_k), _read("r"))
    np.testing.assert_array_equal(out[:kept], a[:kept])
    assert not out[kept:16].any()


def test_clearing_a_stage_whose_copy_is_in_flight_is_reported():
    with pytest.raises(KernelHazardError, match=r"^tile.clear_rows %s0, %k0, %seq_k .*: reads the tile whose rows it "
                                                r"clears \(ring kv_ring\) whose contents are still in flight"):
        _run_ring(COPY0, "tile.cp_commit_group", *_clear(0, 3), "tile.cp_wait_group 0", _read("r"))


@pytest.mark.parametrize("head_dim", [96, 192])
def test_rows_of_chunks_that_do_not_divide_the_threads_lower(head_dim):
    """Regression: a [BN, 96] or [BN, 192] bf16 stage (12 or 24 16-byte chunks a row) was refused by
    convert-tile-to-sm90 ("the block's 256 threads must divide into rows of 12 16-byte chunks"), so the paged
    TMA kernel at head_dim 96 and 192 did not lower; the threads past the last whole row of chunks now idle."""
    module = tessera.kernels.flash_attention_paged(head_dim, page_size=128 if head_dim == 96 else 112)
    assert "st.shared" in tessera.compile(module)


# endregion
# region end to end


def _poison(x: np.ndarray, where: np.ndarray, value: float) -> np.ndarray:
    return np.where(where, np.asarray(value, BF16), x).astype(BF16)


def _varlen(level: str, v: np.ndarray, causal: bool, splits: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    q, k = (rng.standard_normal((n, h, 64)).astype(BF16) for n, h in ((140, 4), (150, 2)))
    return tessera.attention(q, k, v, cu_seqlens_q=np.array([0, 5, 9, 140], np.int32),
                             cu_seqlens_k=np.array([0, 7, 140, 150], np.int32), max_seqlen_q=131,
                             max_seqlen_k=133, causal=causal, num_splits=splits, level=level)


def _paged(level: str, v_cache: np.ndarray, splits: int) -> np.ndarray:
    rng = np.random.default_rng(2)
    d = v_cache.shape[-1]
    q, k_cache = rng.standard_normal((2, 1, 4, d)).astype(BF16), rng.standard_normal((4, 128, 2, d)).astype(BF16)
    return tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array([130, 77], np.int32),
                                          page_table=np.array([[2, 0], [1, 3]], np.int32), num_splits=splits,
                                          level=level)


LEVELS = ["tile", pytest.param("target", marks=pytest.mark.slow), pytest.param("ptx", marks=pytest.mark.slow)]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("causal,splits", [(False, 2), (True, 1)])
def test_the_next_packed_sequences_nan_and_inf_change_no_bit_of_a_sequences_o(level, causal, splits):
    """Three packed sequences with GQA: sequence 0 (7 keys) and 1 (133) read the next sequence's V rows in their
    last key block; poisoning every V row of the later sequences changes no bit of the earlier ones' O."""
    v = np.random.default_rng(3).standard_normal((150, 2, 64)).astype(BF16)
    rows = np.arange(150)[:, None, None]
    clean = _varlen(level, v, causal, splits)
    for value, later in ((np.nan, rows >= 7), (np.inf, rows >= 140)):
        poisoned = _varlen(level, _poison(v, later, value), causal, splits)
        first = 5 if value is np.nan else 9  # the query rows of the sequences whose keys are all clean
        assert np.array_equal(poisoned[:first].view(np.uint16), clean[:first].view(np.uint16))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("head_dim", [64, 96])
def test_nan_past_cache_seqlens_in_tma_pages_changes_no_bit_of_o(level, head_dim):
    """Pages of 128 rows (TMA boxes), two split-KV parts, GQA: NaN in every V row past cache_seqlens (a
    torch.empty cache) gives O bitwise that of a cache holding zeros there. At head_dim 96 a row is 12 16-byte
    chunks, which do not divide the block's 256 threads (regression: the lowering refused it; now 4 threads
    idle)."""
    v = np.random.default_rng(4).standard_normal((4, 128, 2, head_dim)).astype(BF16)
    pages, lens = np.array([[2, 0], [1, 3]]), [130, 77]
    past = np.zeros(v.shape, bool)
    for b, n in enumerate(lens):
        for t in range(n, 2 * 128):
            past[pages[b, t // 128], t % 128] = True
    zeroed = _paged(level, _poison(v, past, 0.0), splits=2)
    assert np.array_equal(_paged(level, _poison(v, past, np.nan), splits=2).view(np.uint16), zeroed.view(np.uint16))


# endregion
