"""A st.shared of consecutive ascending words (a causal kernel's bias table, stored by whole warpgroups) writes its
bytes as a `ByteBox` of their range (`shared_memory._store_bytes`), so its checks read their records through views
and its records are written as slices. Against the index array of every byte: the same byte sets, and along a
causal flash run the same records after every store and the same outputs."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import tessera
import tessera.interpreters.sm90.shared_memory as shared_memory
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90 import run_target_kernel
from tessera.interpreters.sm90.shared_memory import SharedMemory
from tessera.interpreters.sm90.shared_tags import GENERIC, IN_FLIGHT, LANDED
from tessera.kernel_abi import kernels, signature
from tessera.regalloc import allocate_registers


def _every_byte(addresses: np.ndarray, nbytes: int) -> np.ndarray:
    return (addresses[:, None] + np.arange(nbytes)).reshape(-1)


@pytest.mark.parametrize("addresses, nbytes", [
    (np.arange(1024, 2048, 4), 4),  # consecutive words: the box
    (np.arange(64, 96, 2), 2),  # consecutive halves
    (np.array([8]), 4),  # one word
    (np.array([0, 8, 4]), 4),  # not ascending: every byte
    (np.array([0, 4, 12]), 4),  # a gap
])
def test_store_bytes_are_every_byte(addresses, nbytes):
    got = shared_memory._store_bytes(addresses, nbytes)  # noqa: SLF001
    assert np.array_equal(got, _every_byte(addresses, nbytes))
    consecutive = len(addresses) > 1 and np.array_equal(np.diff(addresses), np.full(len(addresses) - 1, nbytes))
    assert (getattr(got, "box", None) is not None) == consecutive


def _records(smem: SharedMemory) -> str:
    digest = hashlib.sha256()
    for name in ("state", "writer", "written_at", "write_op", "changed", "line_keys"):
        digest.update(np.ascontiguousarray(getattr(smem, name)).tobytes())
    # the bytes where something wrote them, a copy's barrier where a copy tagged them: unspecified elsewhere
    digest.update(np.where((smem.state == GENERIC) | (smem.state == LANDED), smem.data, 0).tobytes())
    digest.update(np.where((smem.state == IN_FLIGHT) | (smem.state == LANDED), smem.barrier, -1).tobytes())
    digest.update(repr(smem.generic_span).encode())
    return digest.hexdigest()


def _run(monkeypatch, every_byte: bool) -> tuple[list[str], list[np.ndarray]]:
    stored = SharedMemory.store_words
    digests = []

    def store(self, op, threads, addresses, words, nbytes=4):
        stored(self, op, threads, addresses, words, nbytes)
        digests.append(_records(self))

    monkeypatch.setattr(SharedMemory, "store_words", store)
    if every_byte:
        monkeypatch.setattr(shared_memory, "_store_bytes", _every_byte)
    module = tessera.kernels.flash_attention(head_dim=64, causal=True)
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name)
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((1, 1, 256, 64)) for _ in range(3)]
    arrays, sizes = prepare_arguments(sig, inputs)
    run_target_kernel(target, arrays, sizes, allocate_registers(target), batch_ctas=1)
    monkeypatch.undo()
    return digests, [np.asarray(a).copy() for a in arrays]


def test_table_stores_leave_the_records_of_every_byte(monkeypatch):
    boxed, boxed_out = _run(monkeypatch, False)
    indexed, indexed_out = _run(monkeypatch, True)
    assert boxed and boxed == indexed
    for a, b in zip(boxed_out, indexed_out):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
