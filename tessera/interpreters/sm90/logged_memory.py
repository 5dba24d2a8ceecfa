"""Global memory and tensor maps that log the bytes each CTA reads and writes, for a group of CTAs run in a
worker (`tessera.interpreters.parallel`): the CTA simulator's accesses behave exactly as in `GlobalMemory` and
`TensorMap`, and are noted in an `AccessLog` by tensor (the `sm90.source` index) and byte offset.

Loads and stores through pointers name their CTA; a TMA load is charged to the log's current CTA (the one the
worker runs, or the first CTA of the cluster it runs)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters.parallel import AccessLog
from tessera.interpreters.sm90.global_memory import TENSOR_SPACING_BITS, GlobalMemory
from tessera.interpreters.sm90.global_races import grid_rank
from tessera.interpreters.sm90.registers import WORD_BYTES
from tessera.interpreters.sm90.tma import TensorMap


class LoggedGlobalMemory(GlobalMemory):
    """`GlobalMemory` whose pointer loads and stores are noted in `log`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log = AccessLog([b.size for b in self._bytes])

    def flat_bytes(self) -> list[np.ndarray]:
        """Each tensor's bytes (empty for a strided view, which no pointer reaches)."""
        return self._bytes

    def _note(self, cta, addresses: np.ndarray, nbytes: int, write: bool) -> None:
        addresses = np.asarray(addresses, np.int64)
        tensor = (addresses >> TENSOR_SPACING_BITS) - 1
        offset = addresses & ((1 << TENSOR_SPACING_BITS) - 1)
        for k in np.unique(tensor):
            self.log.note(int(k), offset[tensor == k][:, None] + np.arange(nbytes), grid_rank(cta), write)

    def load_words(self, cta, op: Operation, addresses, threads, nbytes: int = WORD_BYTES, atomic: bool = False):
        words = super().load_words(cta, op, addresses, threads, nbytes, atomic)
        self._note(cta, addresses, nbytes, False)
        return words

    def load_bytes(self, cta, op: Operation, addresses, threads, nbytes: int):
        data = super().load_bytes(cta, op, addresses, threads, nbytes)
        self._note(cta, addresses, nbytes, False)
        return data

    def store_words(self, cta, op: Operation, addresses, threads, words, nbytes: int = WORD_BYTES,
                    atomic: bool = False) -> None:
        super().store_words(cta, op, addresses, threads, words, nbytes, atomic)
        self._note(cta, addresses, nbytes, True)


@dataclass(frozen=True, eq=False)
class LoggedTensorMap(TensorMap):
    """A `TensorMap` whose box reads are noted in `log` as reads of tensor `source` (row-major tensors only:
    a strided view is never written through a pointer, so nothing can race with its reads)."""

    log: AccessLog | None = None
    source: int = 0

    @classmethod
    def of(cls, tensor_map: TensorMap, log: AccessLog, source: int) -> LoggedTensorMap:
        return cls(tensor_map.name, tensor_map.array, tensor_map.spec, tensor_map.swizzle, tensor_map.memory, log,
                   source)

    def read_box(self, coords: list[int]) -> np.ndarray:
        data = super().read_box(coords)
        if self.log is not None and self.array.flags.c_contiguous:
            offsets, valid = self.spec.box_byte_offsets(coords)
            index = offsets[valid][:, None] + np.arange(self.spec.element_bytes)
            self.log.note(self.source, index, self.log.current, False)
        return data
