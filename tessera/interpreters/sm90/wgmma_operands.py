"""What a wgmma operand read through a shared-memory descriptor touches, for the CTA simulator's `wgmma`: its
element and byte addresses (`facts.descriptor_element_address`), the span of those bytes, the aligned 16-byte
chunks they fill, its bytes gathered from a CTA's shared memory (or a batch's followers') with its rows in a
product's order, and its per-byte records written by chunk. Kept per descriptor (`operand_addresses`): a ring's
few descriptors repeat every trip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from tessera.interpreters.sm90.registers import filled
from tessera.interpreters.truth import any_set, equal_arrays
from tessera.sm90 import facts

_CHUNK_BYTES = facts.SWIZZLE_CHUNK_BYTES
"""The unit of a swizzled operand's bytes: a wgmma reads whole aligned 16-byte chunks (`facts.swizzle` permutes
them), so its per-byte records are written chunk by chunk (`OperandBytes.chunks`)."""


@dataclass(frozen=True, eq=False)
class OperandBytes:
    """What a wgmma operand read through one descriptor touches (`operand_addresses`): its descriptor fields, the
    [extent, k] element addresses, their bytes flattened, the span [low, high) of those bytes, the aligned
    `_CHUNK_BYTES`-byte chunks they fill exactly (None where some chunk is filled only in part), and those chunks
    as aligned runs of `run_chunks` chunks (the most, a power of two, that they all come in: a k-step of a 128B
    swizzled K-major tile fills two chunks of each 128-byte line, next to each other; an MN-major tile's rows are
    whole runs of 16), `runs` the index of each run."""

    fields: object
    addresses: np.ndarray
    byte_addresses: np.ndarray
    span: tuple[int, int]
    chunks: np.ndarray | None
    runs: np.ndarray | None = None
    run_chunks: int = 1
    _orders: dict = field(default_factory=dict, repr=False)

    def ordered(self, order: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(element addresses, their bytes flattened) with the rows (the extent axis) taken in `order` (None: as
        they are), so that a gather reads the tile already in that order (`fragment_view.operand_order`); kept
        per order (the plans' orders are kept arrays)."""
        entry = self._ordered(order)
        return entry[1], entry[2]

    def _ordered(self, order: np.ndarray | None) -> tuple:
        """(order, addresses, byte addresses, the aligned `_CHUNK_BYTES`-byte chunks those bytes are in order or
        None where they are not whole chunks, the 16-bit elements they are in order or None), kept per order."""
        cached = self._orders.get(id(order))
        if cached is None or cached[0] is not order:
            if order is None:
                addresses, byte_addresses = self.addresses, self.byte_addresses
            else:
                addresses = self.addresses[order]
                byte_addresses = self.byte_addresses.reshape(len(self.addresses), -1)[order].reshape(-1)
                addresses.flags.writeable = byte_addresses.flags.writeable = False
            chunks = halves = None
            if byte_addresses.size % _CHUNK_BYTES == 0:
                runs = byte_addresses.reshape(-1, _CHUNK_BYTES)
                whole = equal_arrays(runs, runs[:, :1] + np.arange(_CHUNK_BYTES))
                if whole and not any_set(runs[:, 0] % _CHUNK_BYTES):
                    chunks = runs[:, 0] // _CHUNK_BYTES
                    chunks.flags.writeable = False
            if chunks is None and byte_addresses.size == 2 * addresses.size and not any_set(addresses % 2):
                halves = (addresses // 2).reshape(-1)  # 16-bit elements (an MN-major tile): one item each
                halves.flags.writeable = False
            cached = self._orders[id(order)] = (order, addresses, byte_addresses, chunks, halves)
        return cached

    def gather(self, data: np.ndarray, order: np.ndarray | None) -> np.ndarray:
        """The operand's bytes of `data` ([..., shared bytes] uint8: a CTA's shared memory, or its followers')
        with its rows in `order`, [..., bytes]: by 16-byte chunk where they are whole chunks (one item per chunk
        of a void dtype: a seventh of the time of a gather by byte), else by 16-bit element where the elements
        are two aligned bytes."""
        _, _, byte_addresses, chunks, halves = self._ordered(order)
        if data.flags.c_contiguous and data.shape[-1] % _CHUNK_BYTES == 0:
            if chunks is not None:
                return np.ascontiguousarray(data.view(chunk_dtype(1))[..., chunks]).view(np.uint8)
            if halves is not None:
                return np.ascontiguousarray(data.view(np.uint16)[..., halves]).view(np.uint8)
        return np.take(data, byte_addresses, axis=-1)

    def mark(self, records: np.ndarray, value) -> None:
        """`records[byte_addresses] = value` for a 1-D per-byte record array, by run of chunks where it can: each
        run's records one item of a void dtype as wide as them (one copy per run instead of one per byte; a third
        of the copies of one per chunk for flash attention's operands). The runs lie inside the records (the
        operand's span is checked first), so a tail shorter than a run is left out of the view."""
        if self.runs is not None:
            width = _CHUNK_BYTES * self.run_chunks
            usable = records[:records.size - records.size % width]
            if usable.flags.c_contiguous:
                run = chunk_dtype(records.itemsize * self.run_chunks)
                usable.view(run)[self.runs] = filled(width, value, records.dtype).view(run)[0]
            else:
                usable.reshape(-1, width)[self.runs] = value
        else:
            records[self.byte_addresses] = value


@lru_cache(maxsize=None)
def chunk_dtype(itemsize: int) -> np.dtype:
    """A void dtype as wide as one `_CHUNK_BYTES`-byte chunk's records of `itemsize` bytes (`OperandBytes.mark`:
    a run's records with `itemsize` the records' times the run's chunks; 1: the chunk's bytes themselves), so that
    a gather or scatter of whole chunks moves one item per chunk (NumPy's fancy indexing of rows of 16 bytes
    costs an order of magnitude more)."""
    return np.dtype((np.void, _CHUNK_BYTES * itemsize))


def _runs(chunks: np.ndarray) -> tuple[np.ndarray, int]:
    """(the index of each run, the chunks in a run) for ascending distinct `chunks`, where the runs are the
    longest aligned power-of-two blocks of chunks that they all fill whole."""
    length = 1
    while len(chunks) % (2 * length) == 0:
        blocks = chunks.reshape(-1, 2 * length)
        if any_set(blocks[:, 0] % (2 * length)) or not equal_arrays(blocks, blocks[:, :1] + np.arange(2 * length)):
            break
        length *= 2
    runs = chunks[::length] // length
    runs.flags.writeable = False
    return runs, length


@lru_cache(maxsize=4096)
def operand_addresses(descriptor: int, major: str, extent: int, k: int, element_bytes: int) -> OperandBytes:
    """The `OperandBytes` of a wgmma operand read through `descriptor` (read-only arrays; a ring's few descriptors
    repeat every trip). ValueError: a bad descriptor."""
    fields = facts.decode_descriptor(descriptor)
    addresses = np.asarray(facts.descriptor_element_address(fields, major, element_bytes, np.arange(extent)[:, None],
                                                            np.arange(k)[None, :]), np.int64)
    byte_addresses = (addresses.reshape(-1, 1) + np.arange(element_bytes)).reshape(-1)
    distinct = np.unique(byte_addresses)
    chunks = np.unique(distinct // _CHUNK_BYTES)
    whole = len(distinct) == _CHUNK_BYTES * len(chunks)
    for array in (addresses, byte_addresses, chunks):
        array.flags.writeable = False
    runs, run_chunks = _runs(chunks) if whole else (None, 1)
    return OperandBytes(fields, addresses, byte_addresses, (int(addresses.min()), int(addresses.max()) + element_bytes),
                        chunks if whole else None, runs, run_chunks)


__all__ = ["OperandBytes", "operand_addresses"]
