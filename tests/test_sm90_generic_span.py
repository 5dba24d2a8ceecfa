"""The CTA simulator's shared memory keeps the hull of the bytes generic writes touched (`SharedMemory.generic_span`):
a write outside it skips the write-after-write check, a TMA copy landing outside it leaves `writer` as it is,
and the next CTA's generic-write records are refilled inside it only. Each fast path against the rule it
replaces (every write checked, every landing written, every record refilled, as once any generic write ran):
the same bits, the same records at each CTA's end, the same reports, and every lent array as `np.full` gives."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
import tessera.interpreters.sm90.record_pool as record_pool
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90 import run_target_kernel
from tessera.interpreters.sm90.shared_memory import SharedMemory
from tessera.kernel_abi import kernels, signature
from tessera.regalloc import allocate_registers


def _whole_memory(self, addresses) -> bool:
    """The rule before `generic_span`: any generic write anywhere makes every byte a candidate."""
    return self.generic_writes and len(addresses) > 0


def _everything_changed(self):
    return Ellipsis if self.generic_writes else None


@pytest.fixture(scope="module")
def causal_flash():
    """Causal flash d64 (its bias table is stored by every thread: generic writes in one corner of shared memory,
    TMA copies landing everywhere else)."""
    module = tessera.kernels.flash_attention(head_dim=64, causal=True)
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name)
    return sig, target, allocate_registers(target)


def _run(causal_flash, inputs, records: list):
    """The arguments after a launch one CTA at a time, with a copy of every record array each CTA leaves (but
    those lent unset, `RecordPool.unset`: their values where no copy tagged a byte are unspecified)."""
    sig, target, allocation = causal_flash
    arguments, sizes = prepare_arguments(sig, inputs)
    reclaim = record_pool.RecordPool.reclaim

    def keeping(self, launch=False):
        records.append([array.copy() for array, filled, _ in self._lent if filled])
        reclaim(self, launch)

    record_pool.RecordPool.reclaim = keeping
    try:
        run_target_kernel(target, arguments, sizes, allocation, batch_ctas=1)
    finally:
        record_pool.RecordPool.reclaim = reclaim
    return arguments


def test_generic_span_keeps_the_bits_and_records(causal_flash, rng, monkeypatch):
    q, k, v = (rng.standard_normal((1, 1, 200, 64)) for _ in range(3))
    fast_records, slow_records = [], []
    fast = _run(causal_flash, [q, k, v], fast_records)
    monkeypatch.setattr(SharedMemory, "may_hold_generic", _whole_memory)
    monkeypatch.setattr(SharedMemory, "_generic_records_changed", _everything_changed)
    slow = _run(causal_flash, [q, k, v], slow_records)
    for a, b in zip(fast, slow):
        assert a.tobytes() == b.tobytes()
    assert len(fast_records) == len(slow_records) > 1
    for mine, theirs in zip(fast_records, slow_records):
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_lent_records_are_fresh_after_a_cta_that_stored(causal_flash, rng, monkeypatch):
    """Every array a CTA borrows holds its initial value everywhere, though the CTA before stored its table
    (its generic-write records refilled over `generic_span` only)."""
    full = record_pool.RecordPool.full
    lent = []

    def checked(self, shape, value, dtype, launch=False, changed=None):
        array = full(self, shape, value, dtype, launch, changed)
        lent.append(array.tobytes() == np.full(shape, value, dtype).tobytes())
        return array

    monkeypatch.setattr(record_pool.RecordPool, "full", checked)
    q, k, v = (rng.standard_normal((1, 1, 200, 64)) for _ in range(3))
    for _ in range(2):  # the second launch borrows the first one's arrays
        _run(causal_flash, [q, k, v], [])
    assert len(lent) > 20 and all(lent)



def test_stores_over_each_others_words_race_inside_the_span(rng):
    """The write-after-write check still runs where a store meets earlier stores (inside `generic_span`): each
    thread storing over its neighbour's words (thread t ^ 1's) with no bar_sync between is reported."""
    from test_sm90_simulator import ST_SHARED_GEMM, _run_st_shared
    from text_edits import planted

    from tessera.interpreters.block_batch import KernelHazardError

    store = "    sm90.st_shared %s_addr, %img : vector<4xi32>, vector<4xi32>\n"
    again = store + ("    %c16_v = arith.constant dense<16> : vector<4xi32>\n"
                     "    %next_addr = arith.xori %s_addr, %c16_v : vector<4xi32>\n"
                     "    sm90.st_shared %next_addr, %img : vector<4xi32>, vector<4xi32>\n")
    with pytest.raises(KernelHazardError, match=r"st_shared writes shared address 0x810 \(buffer 'a' \+ 16\), which "
                                                r"`sm90.st_shared .*` \(thread 1 .*\) wrote, and no synchronisation "
                                                r"orders the two \(race: a bar_sync or an mbarrier release/wait "
                                                r"between the two writes is missing\)"):
        _run_st_shared(planted(ST_SHARED_GEMM, store, again), rng)
