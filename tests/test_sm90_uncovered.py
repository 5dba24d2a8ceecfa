"""The CTA simulator's check that generic stores read through the async proxy were fenced
(`SharedMemory._check_proxy_fenced`) compares every (writer, reader) pair at once (`SharedMemory._uncovered`):
for consecutive writers and readers (a bias table stored by whole warpgroups, read by a warpgroup) from a view of
the fenced times and kept pairs. Against the definition, a gather of every pair, for consecutive threads and
threads with gaps."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.sm90.shared_memory import SharedMemory


@pytest.mark.parametrize("writers, readers", [
    (np.arange(256), np.arange(128, 256)),  # a table stored by two warpgroups, read by the second
    (np.arange(256), np.arange(0, 128)),
    (np.arange(40, 100), np.arange(64, 96)),  # warps cut in the middle
    (np.array([3, 7, 64, 65, 300]), np.arange(256, 384)),  # writers with gaps: the gather
    (np.arange(32), np.array([5])),  # one reader (a bulk copy's thread): every pair
    (np.arange(128), np.array([0, 1, 2, 200])),  # readers with gaps
])
def test_uncovered_pairs_are_the_gathered_ones(writers, readers):
    """`SharedMemory._uncovered` (a view of the fenced times and kept pairs for consecutive threads) against its
    definition: a gather of every (writer, reader) time, compared with the writer's latest store, where the pair
    must see a fence (the reader outside the writer's warp, or the writer itself; every pair for one reader)."""
    from types import SimpleNamespace

    from tessera.sm90 import facts

    rng = np.random.default_rng(len(writers) * 1000 + len(readers))
    fenced = rng.integers(-1, 60, (384, 384)).astype(np.int32).T  # as `HappensBefore.fenced`: a transposed view
    latest = rng.integers(-1, 60, len(writers)).astype(np.int64)
    smem = SharedMemory.__new__(SharedMemory)
    smem.cta = SimpleNamespace(hb=SimpleNamespace(fenced=fenced))
    same_warp = readers[None, :] // facts.WARP_SIZE == writers[:, None] // facts.WARP_SIZE
    needed = ~same_warp | (readers[None, :] == writers[:, None]) if len(readers) > 1 else \
        np.ones((len(writers), len(readers)), bool)
    expected = (fenced[writers[:, None], readers[None, :]] <= latest[:, None]) & needed
    for _ in range(2):  # the second time from the kept pairs
        assert np.array_equal(smem._uncovered(writers, latest, readers), expected)  # noqa: SLF001


def test_kept_buffer_stores_decide_as_a_fresh_search(rng, monkeypatch):
    """`SharedMemory._buffer_fenced` keeps a buffer's stores while its lines are unchanged: along a causal
    flash run (its bias table checked by every consumer warpgroup of every CTA) each answer is the answer of a
    fresh search of the buffer's stores, and the kept stores are used."""
    import tessera
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.sm90 import run_target_kernel
    from tessera.kernel_abi import kernels, signature
    from tessera.regalloc import allocate_registers

    fenced = SharedMemory._buffer_fenced  # noqa: SLF001
    answers = {"kept": 0, "searched": 0}

    def checked(self, addresses, readers):
        kept = dict(self._buffer_writes)  # noqa: SLF001
        answer = fenced(self, addresses, readers)
        self._buffer_writes.clear()  # noqa: SLF001 - the same question, searched afresh
        assert fenced(self, addresses, readers) == answer
        answers["kept" if kept else "searched"] += 1
        return answer

    monkeypatch.setattr(SharedMemory, "_buffer_fenced", checked)
    module = tessera.kernels.flash_attention(head_dim=64, causal=True)
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name)
    q, k, v = (rng.standard_normal((1, 1, 300, 64)) for _ in range(3))
    arguments, sizes = prepare_arguments(sig, [q, k, v])
    run_target_kernel(target, arguments, sizes, allocate_registers(target), batch_ctas=1)
    assert answers["kept"] > 0 and answers["searched"] > 0


def test_whole_table_writes_are_the_gathered_ones(rng, monkeypatch):
    """`SharedMemory._latest_writes` of a buffer whose every byte is stored takes the range (a slice) and reads its
    records as views: along a causal flash run (its bias table), the writers and their latest write times are those
    of the gather of every stored byte."""
    import tessera
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.sm90 import run_target_kernel
    from tessera.kernel_abi import kernels, signature
    from tessera.regalloc import allocate_registers

    latest_writes = SharedMemory._latest_writes  # noqa: SLF001
    compared = [0]

    def checked(self, stored):
        writers, latest, covered = latest_writes(self, stored)
        if isinstance(stored, slice):
            kept = dict(self._latest_writes_of)  # noqa: SLF001
            self._latest_writes_of.clear()  # noqa: SLF001 - the same bytes, gathered
            gathered, gathered_latest, _ = latest_writes(self, np.arange(stored.start, stored.stop))
            self._latest_writes_of.clear()  # noqa: SLF001
            self._latest_writes_of.update(kept)  # noqa: SLF001
            assert np.array_equal(writers, gathered) and np.array_equal(latest, gathered_latest)
            compared[0] += 1
        return writers, latest, covered

    monkeypatch.setattr(SharedMemory, "_latest_writes", checked)
    module = tessera.kernels.flash_attention(head_dim=64, causal=True)
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name)
    q, k, v = (rng.standard_normal((1, 1, 300, 64)) for _ in range(3))
    arguments, sizes = prepare_arguments(sig, [q, k, v])
    run_target_kernel(target, arguments, sizes, allocate_registers(target), batch_ctas=1)
    assert compared[0] > 0
