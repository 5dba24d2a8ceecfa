"""PTX fundamental types as the executor stores and reads them.

Every register holds a bit pattern: a NumPy array over lanes of the unsigned integer of its declared width
(`bool` for `.pred`). An instruction reads a register *as its own type*: the bits are reinterpreted
(`add.f32` views `uint32` bits as `float32`), truncated when the register is wider than the type (PTX allows a
wider register for bit-size, `ld`/`st`/`cvt` operands), and a result narrower than its destination register is
zero-extended (sign-extended for `.s` types), as PTX specifies for `ld` and `cvt` into wider registers.
Packed `.f16x2`/`.bf16x2` are 32-bit words; `half_pair` splits them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class PtxType:
    """A PTX type: `name` ("u32"), `bits`, `kind`: "b" bits, "u" unsigned, "s" signed, "f" float, "pred",
    or "x2" (a packed pair of 16-bit floats, `half` naming the element type)."""

    name: str
    bits: int
    kind: str
    half: str | None = None

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype an instruction of this type computes on."""
        return _dtype(self.name, self.bits, self.kind)

    @property
    def storage(self) -> np.dtype:
        """The dtype of a register declared with this type (its bits)."""
        return _storage(self.bits, self.kind)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("b", "u", "s")


@lru_cache(maxsize=None)
def _dtype(name: str, bits: int, kind: str) -> np.dtype:
    if kind == "pred":
        return np.dtype(bool)
    if kind == "f":
        return np.dtype({16: np.float16, 32: np.float32, 64: np.float64}[bits]) if name != "bf16" \
            else np.dtype(ml_dtypes.bfloat16)
    if kind == "s":
        return np.dtype(f"int{bits}")
    return np.dtype(f"uint{bits}")


@lru_cache(maxsize=None)
def _storage(bits: int, kind: str) -> np.dtype:
    return np.dtype(bool) if kind == "pred" else np.dtype(f"uint{bits}")


_TYPES: dict[str, PtxType] = {"pred": PtxType("pred", 1, "pred")}
for _bits in (8, 16, 32, 64):
    for _kind in "bus":
        _TYPES[f"{_kind}{_bits}"] = PtxType(f"{_kind}{_bits}", _bits, _kind)
for _name, _bits in (("f16", 16), ("bf16", 16), ("f32", 32), ("f64", 64)):
    _TYPES[_name] = PtxType(_name, _bits, "f")
_TYPES["f16x2"] = PtxType("f16x2", 32, "x2", "f16")
_TYPES["bf16x2"] = PtxType("bf16x2", 32, "x2", "bf16")


def ptx_type(name: str) -> PtxType | None:
    """The type called `name` (without the dot), or None when it is not a PTX type the executor knows."""
    return _TYPES.get(name)


def is_type(name: str) -> bool:
    return name in _TYPES


def half_pair(words: np.ndarray, half: str) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) halves of packed 32-bit words as float32 values of the 16-bit type `half`."""
    dtype = ml_dtypes.bfloat16 if half == "bf16" else np.float16
    words = np.asarray(words, np.uint32)
    lo = (words & 0xFFFF).astype(np.uint16).view(dtype).astype(np.float32)
    hi = (words >> 16).astype(np.uint16).view(dtype).astype(np.float32)
    return lo, hi


def pack_pair(lo_bits: np.ndarray, hi_bits: np.ndarray) -> np.ndarray:
    """A 32-bit word from two 16-bit patterns: lo in bits 15:0."""
    return np.asarray(lo_bits, np.uint16).astype(np.uint32) | (np.asarray(hi_bits, np.uint16).astype(np.uint32) << 16)
