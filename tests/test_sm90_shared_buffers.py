"""A `sm90.shared_buffer`'s `Buffer` and address array are kept on the op (`machine._shared_buffer`): every CTA of
a launch declares the same buffers. What is kept is what a fresh read of the op gives, read-only, and a rewritten
property or another thread count makes a fresh one."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, i64

from tessera.dialects import sm90
from tessera.interpreters.sm90.machine import _shared_buffer
from tessera.interpreters.sm90.shared_memory import Buffer


def _fresh(op: sm90.SharedBufferOp, threads: int) -> tuple[Buffer, np.ndarray]:
    buffer = Buffer(op.sym.data, op.offset.value.data, op.size.value.data, op.swizzle.value.data)
    return buffer, np.full(threads, buffer.offset, np.int32)


def test_a_kept_shared_buffer_is_the_fresh_one():
    op = sm90.SharedBufferOp("k_ring", 1024, 45056, 1024, 128)
    first = _shared_buffer(op, 384)
    assert _shared_buffer(op, 384)[1] is first[1]  # kept
    for kept, fresh in zip(first, _fresh(op, 384)):
        assert np.array_equal(kept, fresh) if isinstance(fresh, np.ndarray) else kept == fresh
    assert not first[1].flags.writeable and first[1].dtype == np.int32
    op.properties["offset"] = IntegerAttr(2048, i64)  # a rewrite: read again
    moved = _shared_buffer(op, 384)
    assert moved[0] == _fresh(op, 384)[0] and np.array_equal(moved[1], _fresh(op, 384)[1])
    assert len(_shared_buffer(op, 128)[1]) == 128
