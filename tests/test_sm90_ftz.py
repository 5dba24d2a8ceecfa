"""`.ftz` (`numerics.flush_f32`, used by the PTX executor and the CTA simulator's ex2/rcp/lg2/rsqrt): bit for bit
the definition (an f32 below the smallest normal in magnitude becomes a zero of its sign) over special values
(signed zeros, the largest and smallest subnormals of both signs, the smallest normals, infinities, NaN), in
arrays with and without a subnormal; an array with no subnormal (zeros included) is passed through as it is,
without the flush's passes (an exponential's inputs and outputs hold zeros)."""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.numerics import flush_f32

BITS = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
        0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF]


def _definition(bits: np.ndarray) -> np.ndarray:
    """Flush by the bits: a zero exponent field with a nonzero fraction becomes the signed zero."""
    subnormal = ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)
    return np.where(subnormal, bits & 0x80000000, bits).astype(np.uint32)


def test_ftz_is_the_definition_bit_for_bit():
    values = np.array(BITS, np.uint32)
    for count in range(1, len(values) + 1):
        for start in range(len(values) - count + 1):
            bits = values[start:start + count].reshape(1, -1).repeat(3, axis=0)
            assert np.array_equal(flush_f32(bits.view(np.float32)).view(np.uint32), _definition(bits))


def test_ftz_flushes_subnormals_to_signed_zeros_and_passes_zeros_through():
    x = np.array([0x00000001, 0x807FFFFF, 0x00000000, 0x80000000, 0x3F800000], np.uint32).view(np.float32)
    assert flush_f32(x).view(np.uint32).tolist() == [0x00000000, 0x80000000, 0x00000000, 0x80000000, 0x3F800000]
    no_subnormal = np.array([0.0, -0.0, 1.0, -np.inf], np.float32)
    assert flush_f32(no_subnormal) is no_subnormal
