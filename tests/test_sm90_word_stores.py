"""A plain store of aligned 4-byte words is checked and recorded word by word where nothing needs a byte's detail
(`global_races.GlobalAccesses.store_words`), else byte by byte (`access`): random sequences of stores by a few
CTAs and threads, some writing words twice, some over earlier stores, some of 2 bytes, leave the same records,
bytes and reports (races among them) both ways."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerAttr, i32

from tessera.interpreters.sm90 import global_race_records
from tessera.interpreters.sm90.cta import NamesThreads
from tessera.interpreters.sm90.global_memory import GlobalMemory
from tessera.interpreters.sm90.strands import HazardUnwind

WORDS, THREADS = 2048, 64
OP = arith.ConstantOp(IntegerAttr(0, i32))


class _Cta(NamesThreads):
    """What a store reads of its CTA: its id in a grid of 3, its clock, its threads' happens-before `ordered`."""

    def __init__(self, rank: int, ordered: np.ndarray):
        self.cta_id, self.grid, self.clock = (rank, 0, 0), (3, 1, 1), 0
        self.races, self.cluster = True, None
        self.hb = type("HappensBefore", (), {"ordered": ordered, "grid": {}})()


def _stores(seed: int) -> list[tuple]:
    """(CTA rank, ordered: whether its threads are ordered after earlier accesses, word indices, threads, bytes
    per store) for a random sequence of stores."""
    rng = np.random.default_rng(seed)
    stores = []
    for _ in range(8):
        count = int(rng.integers(1, 64))
        shape = rng.integers(5)
        if shape == 0:  # a contiguous run of words
            start = int(rng.integers(0, WORDS - count))
            words = rng.permutation(np.arange(start, start + count))
        elif shape == 1:  # scattered, distinct
            words = rng.choice(WORDS, count, replace=False)
        elif shape == 2:  # scattered, some written twice
            words = rng.integers(0, WORDS, count // 4 + 1)[rng.integers(0, count // 4 + 1, count)]
        else:  # over the words of an earlier store
            words = stores[-1][2] if stores else rng.choice(WORDS, count, replace=False)
            count = len(words)
        threads = rng.integers(0, THREADS, count) if shape != 2 or rng.integers(4) == 0 else \
            np.full(count, int(rng.integers(THREADS)))
        rank = int(rng.integers(1, 3)) if rng.integers(12) == 0 else 0  # mostly one CTA, its threads mostly ordered
        stores.append((rank, rng.integers(6) > 0, words.astype(np.int64), threads.astype(np.int64),
                       2 if rng.integers(8) == 0 else 4))
    return stores


def _replay(stores: list[tuple], by_word: bool):
    """Make `stores` (stopping at the first hazard); the records, bytes and report they leave, how many went word
    by word and how many were made."""
    out = np.zeros(WORDS * 4, np.uint8)
    memory = GlobalMemory([out], ["out"], grid=(3, 1, 1))
    ctas = {}
    taken = [0]
    store_words = memory.accesses.store_words

    def counted(*args):
        done = by_word and store_words(*args)
        taken[0] += done
        return done

    memory.accesses.store_words = counted
    report, made = None, 0
    for rank, ordered, words, threads, nbytes in stores:
        made += 1
        matrix = np.full((THREADS, THREADS), 1 << 40 if ordered else 0, np.int64)
        cta = ctas.setdefault(rank, _Cta(rank, matrix))
        cta.hb.ordered = matrix
        addresses = memory.address(0) + words * 4
        try:
            memory.store_words(cta, OP, addresses, threads, (words * 7 + threads).astype(np.uint32), nbytes)
        except HazardUnwind as unwind:
            report = str(unwind.error)
            break
    record = memory.accesses.tensors.get(0)
    sides = {} if record is None else {
        (name, field): getattr(side, field).copy()
        for name, side in (("write", record.write), ("read", record.read), ("other_read", record.other_read))
        if side.recorded for field in global_race_records._SIDE_FIELDS}  # noqa: SLF001
    return sides, out.copy(), report, taken[0], made


@pytest.mark.parametrize("seed", range(40))
def test_word_stores_record_and_report_as_byte_stores(seed):
    stores = _stores(seed)
    by_word, by_byte = _replay(stores, True), _replay(stores, False)
    assert by_byte[3] == 0
    assert by_word[2] == by_byte[2]
    assert by_word[1].tobytes() == by_byte[1].tobytes()
    assert by_word[0].keys() == by_byte[0].keys()
    for key, records in by_word[0].items():
        assert records.tobytes() == by_byte[0][key].tobytes(), key


def test_the_sequences_take_both_ways_and_report_races():
    """The seeds above exercise the word path, its fallback to bytes and races found either way."""
    runs = [_replay(_stores(seed), True) for seed in range(40)]
    by_word, made = sum(run[3] for run in runs), sum(run[4] for run in runs)
    assert by_word > 20 and made - by_word > 20
    reports = [run[2] for run in runs if run[2] is not None]
    assert any("two threads store to the same bytes" in report for report in reports)
    assert any("which `" in report for report in reports)  # a race with an earlier store, both sides named


def test_a_second_ctas_store_over_the_same_words_is_reported_with_both_sides():
    memory = GlobalMemory([np.zeros(WORDS * 4, np.uint8)], ["out"], grid=(3, 1, 1))
    words, threads = np.arange(8, dtype=np.int64), np.arange(8, dtype=np.int64)
    first, second = (_Cta(rank, np.zeros((THREADS, THREADS), np.int64)) for rank in (0, 1))
    memory.store_words(first, OP, memory.address(0) + words * 4, threads, words.astype(np.uint32))
    with pytest.raises(HazardUnwind, match=r"writes tensor out at byte offset 0, which .* \(thread 0 of CTA "
                                           r"\(0, 0, 0\)\) wrote"):
        memory.store_words(second, OP, memory.address(0) + words * 4, threads, words.astype(np.uint32))
