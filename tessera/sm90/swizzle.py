"""Shared-memory swizzle functions and banks of sm_90a.

Source: [P#tensor-swizzling-modes] = PTX ISA 9.1 section 5.5.7, "Swizzling Modes": each table cell is a 16-byte
chunk of a 128-byte shared-memory line; line r's chunk c is stored at chunk c ^ (r % n), n = 2/4/8 for the
32B/64B/128B modes, and the pattern repeats every 256/512/1024 bytes. CuTe writes the same functions as
`Swizzle<B,4,3>` (B = 1, 2, 3) on byte addresses (github.com/NVIDIA/cutlass include/cute/swizzle.hpp).
"""

from __future__ import annotations

# region Shared-memory swizzle [P#tensor-swizzling-modes]

SHARED_BANKS = 32
"""Shared memory has 32 banks of 4 bytes; a warp's accesses to distinct addresses in one bank serialise."""

BANK_BYTES = 4

SWIZZLE_CHUNK_BYTES = 16
"""Swizzling permutes 16-byte chunks inside each 128-byte line."""

SWIZZLE_LINE_BYTES = 128
"""The rows of the swizzle tables are 128-byte shared-memory lines (8 chunks)."""

SWIZZLE_MODES = (0, 32, 64, 128)
"""Swizzle widths in bytes (0 = none)."""


def swizzle_period_bytes(mode: int) -> int:
    """Bytes after which a swizzle pattern repeats: 8 lines of 128 B for 128B, 512 for 64B, 256 for 32B.
    A swizzled buffer must start on this boundary for the pattern (and a descriptor base offset of 0) to
    line up with the buffer."""
    check_swizzle_mode(mode)
    return 1 if mode == 0 else 8 * mode


def swizzle_bits(mode: int) -> tuple[int, int, int]:
    """(mask, line shift, chunk shift) of the swizzle of `mode` (> 0) bytes: the physical address is
    A ^ (((A >> line shift) & mask) << chunk shift), the form an emitter computes at run time."""
    check_swizzle_mode(mode)
    if mode == 0:
        raise ValueError("the swizzle of 0 bytes is the identity; it has no bits")
    return (mode // SWIZZLE_CHUNK_BYTES - 1, SWIZZLE_LINE_BYTES.bit_length() - 1,
            SWIZZLE_CHUNK_BYTES.bit_length() - 1)


def swizzle_address(address, mode: int):
    """The physical shared-memory byte address of logical byte `address` (int or integer array) under a
    swizzle of `mode` bytes: bits [4, 4+log2(mode/16)) are XORed with the same number of bits from bit 7.

    128B: A ^ (((A >> 7) & 7) << 4); 64B: A ^ (((A >> 7) & 3) << 4); 32B: A ^ (((A >> 7) & 1) << 4).
    The pattern follows the absolute shared address; the function is its own inverse."""
    check_swizzle_mode(mode)
    if mode == 0:
        return address
    mask, line_shift, chunk_shift = swizzle_bits(mode)
    return address ^ (((address >> line_shift) & mask) << chunk_shift)


def bank_of(address):
    """The shared-memory bank of a byte address."""
    return (address // BANK_BYTES) % SHARED_BANKS


def check_swizzle_mode(mode: int) -> None:
    """A ValueError unless `mode` is one of `SWIZZLE_MODES` (bytes)."""
    if mode not in SWIZZLE_MODES:
        raise ValueError(f"swizzle mode must be one of {SWIZZLE_MODES} bytes, got {mode}")


# endregion
