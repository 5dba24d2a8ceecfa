"""The CTA simulator's `.ftz` (`machine._ftz`, used by ex2/rcp/lg2/rsqrt): bit for bit the PTX executor's
`numerics.flush_f32` over special values (signed zeros, the largest and smallest subnormals of both signs, the
smallest normals, infinities, NaN), in arrays with and without a subnormal; an array with no subnormal (zeros
included) is passed through as it is."""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.numerics import flush_f32
from tessera.interpreters.sm90.machine import _ftz

BITS = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
        0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x7F7FFFFF]


def test_ftz_is_flush_f32_bit_for_bit():
    values = np.array(BITS, np.uint32).view(np.float32)
    for count in range(1, len(values) + 1):
        for start in range(len(values) - count + 1):
            x = values[start:start + count].reshape(1, -1).repeat(3, axis=0)
            assert np.array_equal(_ftz(x).view(np.uint32), flush_f32(x).view(np.uint32))


def test_ftz_flushes_subnormals_to_signed_zeros_and_passes_zeros_through():
    x = np.array([0x00000001, 0x807FFFFF, 0x00000000, 0x80000000, 0x3F800000], np.uint32).view(np.float32)
    assert _ftz(x).view(np.uint32).tolist() == [0x00000000, 0x80000000, 0x00000000, 0x80000000, 0x3F800000]
    no_subnormal = np.array([0.0, -0.0, 1.0, -np.inf], np.float32)
    assert _ftz(no_subnormal) is no_subnormal
