"""Global memory as the CTA simulator sees it: the kernel's tensors (NumPy arrays, row-major contiguous where a
pointer reaches them) at made-up 64-bit addresses.

Tensor k of the Tile-level argument list starts at `(k + 1) << 40`, so a pointer plus a byte offset maps back to
one tensor and one byte in it. `ld_global`/`st_global` move 32-bit words (`ld_global_u16` 16-bit ones); an access outside every
tensor, or not aligned to its size, is an error naming the op and the thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import Operation

from tessera.interpreters import serving_checks
from tessera.interpreters.sm90.registers import WORD_BYTES

if TYPE_CHECKING:
    from tessera.interpreters.sm90.cta import CtaState

TENSOR_SPACING_BITS = 40
"""Each tensor gets a 1 TiB window of the address space."""


class GlobalMemory:
    def __init__(self, arrays: list[np.ndarray], names: list[str]):
        """`arrays` in argument order. A strided view (read through a tensor map only) has no pointer window:
        `address` refuses it."""
        self.arrays = arrays
        self.names = names
        self._bytes = [array.reshape(-1).view(np.uint8) if array.flags.c_contiguous else np.zeros(0, np.uint8)
                       for array in arrays]

    def pointer(self, index: int) -> int:
        """The address of tensor `index` for a pointer argument; ValueError for a strided view."""
        if not self.arrays[index].flags.c_contiguous:
            raise ValueError(f"tensor {self.names[index]} is passed by pointer, so it must be row-major contiguous "
                             f"(byte strides {self.arrays[index].strides}); only tensor maps take strided views")
        return self.address(index)

    @staticmethod
    def address(index: int) -> int:
        """The address of the first byte of tensor `index`."""
        return (index + 1) << TENSOR_SPACING_BITS

    def _resolve(self, cta: CtaState, op: Operation, addresses: np.ndarray, threads: np.ndarray, what: str,
                 nbytes: int = WORD_BYTES):
        tensor = (addresses >> TENSOR_SPACING_BITS) - 1
        offset = addresses & ((1 << TENSOR_SPACING_BITS) - 1)
        sizes = np.array([b.size for b in self._bytes] + [0], np.int64)
        known = (tensor >= 0) & (tensor < len(self._bytes))
        inside = known & (offset + nbytes <= sizes[np.where(known, tensor, len(self._bytes))])
        if not inside.all():
            i = int(np.argmax(~inside))
            where = (f"outside tensor {self.names[tensor[i]]} ({sizes[tensor[i]]} bytes) at byte offset {offset[i]}"
                     if known[i] else "outside every tensor of the kernel")
            cta.fail(op, f"{what} {nbytes} bytes at global address {int(addresses[i]):#x}, {where}",
                     int(threads[i]))
        misaligned = offset % nbytes != 0
        if misaligned.any():
            i = int(np.argmax(misaligned))
            cta.fail(op, f"{what} {nbytes} bytes at global address {int(addresses[i]):#x}, which is not "
                         f"{nbytes}-byte aligned",
                     int(threads[i]))
        return tensor, offset

    def load_words(self, cta: CtaState, op: Operation, addresses: np.ndarray, threads: np.ndarray,
                   nbytes: int = WORD_BYTES) -> np.ndarray:
        """The little-endian words of `nbytes` (4, or 2: zero-extended) at `addresses`, as uint32."""
        tensor, offset = self._resolve(cta, op, addresses, threads, "loads", nbytes)
        words = np.zeros(len(addresses), np.uint32)
        for k in np.unique(tensor):
            sel = tensor == k
            start = offset[sel][:, None] + np.arange(nbytes)
            words[sel] = self._bytes[k][start].view("<u4" if nbytes == 4 else "<u2").reshape(-1)
        return words

    def store_words(self, cta: CtaState, op: Operation, addresses: np.ndarray, threads: np.ndarray,
                    words: np.ndarray) -> None:
        tensor, offset = self._resolve(cta, op, addresses, threads, "stores")
        if serving_checks.active():
            for k in np.unique(tensor):
                problem = serving_checks.check_byte_store(self.names[k], offset[tensor == k], cta.cta_id[2])
                if problem:
                    cta.fail(op, problem, int(threads[np.argmax(tensor == k)]))
        data = words.astype("<u4").view(np.uint8).reshape(-1, WORD_BYTES)
        for k in np.unique(tensor):
            sel = tensor == k
            self._bytes[k][offset[sel][:, None] + np.arange(WORD_BYTES)] = data[sel]
