"""The 64-bit shared-memory matrix descriptor of `wgmma.mma_async` and the canonical layouts it describes.

Sources: PTX ISA 9.1, https://docs.nvidia.com/cuda/parallel-thread-execution/#x with x =
asynchronous-warpgroup-level-matrix-shared-memory-layout-matrix-descriptor (9.7.15.5.1.2.2),
asynchronous-warpgroup-level-leading-dimension-byte-offset / -stride-dimension-byte-offset (9.7.15.5.1.2.1.1-2),
asynchronous-warpgroup-level-canonical-layouts (9.7.15.5.1.2.1.3). The same fields are CUTLASS's
`GmmaDescriptor` (include/cute/arch/mma_sm90_desc.hpp).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from tessera.sm90.swizzle import (
    SWIZZLE_CHUNK_BYTES,
    check_swizzle_mode,
    swizzle_address,
    swizzle_period_bytes,
)
from tessera.sm90.wgmma import WGMMA_K_BYTES

# region Matrix descriptor [P#asynchronous-warpgroup-level-matrix-shared-memory-layout-matrix-descriptor]

DESCRIPTOR_ADDRESS_MASK = 0x3FFFF
"""matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4: an 18-bit byte value in 16-byte units (14 bits)."""

_ENCODED_BITS = 14
_FIELD_SHIFT = {"start_address": 0, "leading_byte_offset": 16, "stride_byte_offset": 32}
_BASE_OFFSET_SHIFT = 49
_BASE_OFFSET_BITS = 3
_SWIZZLE_SHIFT = 62

_SWIZZLE_CODE = {0: 0, 128: 1, 64: 2, 32: 3}
"""Descriptor bits 63-62: 0 none, 1 = 128-byte, 2 = 64-byte, 3 = 32-byte swizzle. Not the tensor map's order."""

_DEFINED_BITS = (
    sum(((1 << _ENCODED_BITS) - 1) << s for s in _FIELD_SHIFT.values())
    | (((1 << _BASE_OFFSET_BITS) - 1) << _BASE_OFFSET_SHIFT)
    | (0b11 << _SWIZZLE_SHIFT)
)


def descriptor_swizzle_code(mode: int) -> int:
    """The descriptor's 2-bit swizzle code (bits 63-62) for a swizzle of `mode` bytes (0/32/64/128)."""
    check_swizzle_mode(mode)
    return _SWIZZLE_CODE[mode]


def descriptor_encode(value: int, field: str) -> int:
    """matrix-descriptor-encode(value) for descriptor field `field`, refusing values the 14-bit field cannot
    hold exactly: negative, >= 2**18, or not a multiple of 16 bytes."""
    if not 0 <= value <= DESCRIPTOR_ADDRESS_MASK:
        raise ValueError(f"descriptor {field} must be in [0, {DESCRIPTOR_ADDRESS_MASK + 1}) bytes, got {value}")
    if value % SWIZZLE_CHUNK_BYTES:
        raise ValueError(f"descriptor {field} must be a multiple of 16 bytes, got {value}")
    return (value & DESCRIPTOR_ADDRESS_MASK) >> 4


@dataclass(frozen=True)
class MatrixDescriptor:
    """The fields of a wgmma matrix descriptor, in bytes (swizzle as its width: 0, 32, 64 or 128)."""

    start_address: int
    leading_byte_offset: int
    stride_byte_offset: int
    swizzle: int
    base_offset: int = 0


def encode_descriptor(start_address: int, lbo: int, sbo: int, swizzle: int, base_offset: int = 0) -> int:
    """The 64-bit descriptor: bits 13-0 enc(start), 29-16 enc(LBO), 45-32 enc(SBO), 51-49 base offset,
    63-62 swizzle code; all other bits 0. The base offset is only valid with a swizzle."""
    code = descriptor_swizzle_code(swizzle)
    if not 0 <= base_offset < 1 << _BASE_OFFSET_BITS:
        raise ValueError(f"descriptor base_offset must be in [0, {1 << _BASE_OFFSET_BITS}), got {base_offset}")
    if base_offset and swizzle == 0:
        raise ValueError("descriptor base_offset is not valid in the no-swizzle mode")
    fields = {"start_address": start_address, "leading_byte_offset": lbo, "stride_byte_offset": sbo}
    value = sum(descriptor_encode(fields[name], name) << shift for name, shift in _FIELD_SHIFT.items())
    return value | (base_offset << _BASE_OFFSET_SHIFT) | (code << _SWIZZLE_SHIFT)


def decode_descriptor(value: int) -> MatrixDescriptor:
    """The fields of a 64-bit descriptor; refuses bits outside the fields (the Blackwell tcgen05 descriptor,
    which sets bits 46-48 and a 3-bit swizzle at 61-63, is not an sm_90 descriptor)."""
    if not 0 <= value < 1 << 64:
        raise ValueError(f"a matrix descriptor is a 64-bit value, got {value:#x}")
    if value & ~_DEFINED_BITS:
        raise ValueError(f"matrix descriptor {value:#018x} sets undefined bits {value & ~_DEFINED_BITS:#x}")
    fields = {name: ((value >> shift) & ((1 << _ENCODED_BITS) - 1)) << 4 for name, shift in _FIELD_SHIFT.items()}
    code = value >> _SWIZZLE_SHIFT
    swizzle = next(mode for mode, c in _SWIZZLE_CODE.items() if c == code)
    base_offset = (value >> _BASE_OFFSET_SHIFT) & ((1 << _BASE_OFFSET_BITS) - 1)
    return MatrixDescriptor(swizzle=swizzle, base_offset=base_offset, **fields)


def descriptor_base_offset(pattern_start: int, swizzle: int) -> int:
    """The descriptor's base offset: 0 when the swizzle pattern starts on its repeat boundary (1024/512/256
    bytes for 128B/64B/32B), otherwise (pattern_start >> 7) & 7."""
    if swizzle == 0 or pattern_start % swizzle_period_bytes(swizzle) == 0:
        return 0
    return (pattern_start >> 7) & ((1 << _BASE_OFFSET_BITS) - 1)


def swizzled_buffer_alignment(mode: int) -> int:
    """The alignment a wgmma operand buffer needs for base offset 0: the swizzle period (1024/512/256 bytes)
    or, without swizzle, the 16 bytes the descriptor can address."""
    return max(swizzle_period_bytes(mode), SWIZZLE_CHUNK_BYTES)


# endregion

# region Canonical layouts [P#asynchronous-warpgroup-level-canonical-layouts]

Major = Literal["K", "MN"]


def canonical_layout_offset(major: Major, swizzle: int, elem_bytes: int, lbo: int, sbo: int, mn, k):
    """Byte offset, before swizzling, of element (mn, k) of a wgmma operand in the canonical layout
    (mn = M index of A or N index of B, k < 32 bytes / elem_bytes, the K of one wgmma), vectorised.
    With T = 16 / elem_bytes elements per 16-byte chunk and W = swizzle bytes (16 without swizzle):
      K-major, none:     (mn/8)*SBO + (mn%8)*16 + (k/T)*LBO + (k%T)*e   ((8,m),(T,2k)):((1T,SBO),(1,LBO))
      K-major, swizzled: (mn/8)*SBO + (mn%8)*W  + k*e   (LBO unused)    ((8,m),(T,2k)):((W/e,SBO),(1,T))
      MN-major, none:    (mn/T)*SBO + (mn%T)*e  + (k/8)*LBO + (k%8)*16  ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
      MN-major, swizzled:(mn/(W/e))*LBO + (mn%(W/e))*e + (k/8)*SBO + (k%8)*W
                                                                        ((T,W/16,m),(8,k)):((1,T,LBO),(W/e,SBO))"""
    check_swizzle_mode(swizzle)
    if elem_bytes not in (1, 2, 4):
        raise ValueError(f"wgmma operands in shared memory have 1-, 2- or 4-byte elements, got {elem_bytes}")
    mn = np.asarray(mn, dtype=np.int64)
    k = np.asarray(k, dtype=np.int64)
    if np.any(mn < 0) or np.any((k < 0) | (k * elem_bytes >= WGMMA_K_BYTES)):
        raise ValueError(f"need mn >= 0 and 0 <= k < {WGMMA_K_BYTES // elem_bytes} (one wgmma's K)")
    chunk = SWIZZLE_CHUNK_BYTES // elem_bytes
    if major == "K":
        if swizzle == 0:
            return (mn // 8) * sbo + (mn % 8) * SWIZZLE_CHUNK_BYTES + (k // chunk) * lbo + (k % chunk) * elem_bytes
        return (mn // 8) * sbo + (mn % 8) * swizzle + k * elem_bytes
    if major == "MN":
        if swizzle == 0:
            return (mn // chunk) * sbo + (mn % chunk) * elem_bytes + (k // 8) * lbo + (k % 8) * SWIZZLE_CHUNK_BYTES
        row = swizzle // elem_bytes
        return (mn // row) * lbo + (mn % row) * elem_bytes + (k // 8) * sbo + (k % 8) * swizzle
    raise ValueError(f"major must be 'K' or 'MN', got {major!r}")


def descriptor_element_address(descriptor: int | MatrixDescriptor, major: Major, elem_bytes: int, mn, k):
    """The physical shared-memory byte address wgmma reads for operand element (mn, k) through `descriptor`:
    swizzle(start + canonical_layout_offset(...)), the swizzle taken on the absolute address. A non-zero
    base offset is refused: its effect on the addresses is not stated by the PTX ISA."""
    d = decode_descriptor(descriptor) if isinstance(descriptor, int) else descriptor
    if d.base_offset:
        raise ValueError("descriptor_element_address models base offset 0 only")
    offset = canonical_layout_offset(
        major, d.swizzle, elem_bytes, d.leading_byte_offset, d.stride_byte_offset, mn, k
    )
    return swizzle_address(d.start_address + offset, d.swizzle)


# endregion


def descriptor_start_delta(offset_bytes: int) -> int:
    """What to add to a descriptor (as a 64-bit integer) to move its start address `offset_bytes` further:
    the start field holds address >> 4 in bits 13-0, so desc(a + d) == desc(a) + d >> 4 for 16-byte aligned
    a and d as long as a + d stays below 2^18 (every shared-memory address does: 228 KiB < 256 KiB), with
    no carry out of the field. This is how CUTLASS steps a descriptor along K."""
    if offset_bytes % 16 or not 0 <= offset_bytes < 1 << 18:
        raise ValueError(f"a descriptor start offset must be a multiple of 16 in [0, 2^18), got {offset_bytes}")
    return offset_bytes >> 4
