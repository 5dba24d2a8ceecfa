"""When a write is there to read, in PTX a user writes: a bulk store's global bytes (`cp.async.bulk.global.shared::cta`)
are written once a `cp.async.bulk.wait_group` without `.read` of the issuing thread covers its group (`.read` waits
only until its shared source has been read). Each wrong kernel is reported naming both sides, each right twin runs
clean against NumPy (docs/races-global.md)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxHazardError
from unseen_ptx import line_of, run

BULK = r""".visible .entry k(.param .u64 out, .param .u64 res)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<6>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r2, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    mul.lo.u32 %r6, %r0, %r0;
    st.shared.u32 [%r5], %r6;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    setp.eq.u32 %p0, %r0, 0;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    @%p0 cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r2], 256;
    @%p0 cp.async.bulk.commit_group;
WAIT
    xor.b32 %r7, %r0, READER;
    mul.wide.u32 %rd1, %r7, 4;
    add.s64 %rd2, %rd0, %rd1;
    ld.global.u32 %r8, [%rd2];
    ld.param.u64 %rd3, [res];
    cvta.to.global.u64 %rd3, %rd3;
    mul.wide.u32 %rd4, %r0, 4;
    add.s64 %rd5, %rd3, %rd4;
    st.global.u32 [%rd5], %r8;
    ret;
}
"""
"""64 threads store t^2 into `buf`, thread 0 bulk-stores it to `out` and waits (WAIT), then thread t reads out[t ^ READER]
into res[t] (READER 0: each its own word, thread 0 the one it stored; 1: a neighbour's)."""

FULL = "    @%p0 cp.async.bulk.wait_group 0;\n    bar.sync 0;"
READ_ONLY = "    @%p0 cp.async.bulk.wait_group.read 0;\n    bar.sync 0;"


def _bulk(wait: str, reader: int = 1) -> np.ndarray:
    text = BULK.replace("WAIT", wait).replace("READER", str(reader))
    return run(text, 1, 64, [np.zeros(64, np.uint32), np.zeros(64, np.uint32)])[1]


@pytest.mark.parametrize("reader", [0, 1])
def test_a_bulk_store_read_after_its_wait_group_completes_is_right(reader):
    np.testing.assert_array_equal(_bulk(FULL, reader), (np.arange(64) ^ reader) ** 2)


@pytest.mark.parametrize("wait, reader", [
    (READ_ONLY, 1),  # the others, after a barrier
    (READ_ONLY.replace("    bar.sync 0;", ""), 0),  # the issuing thread itself
    ("    bar.sync 0;", 1),  # no wait at all
    ("    @%p0 cp.async.bulk.wait_group.read 0;\n    @%p0 cp.async.bulk.wait_group 1;\n    bar.sync 0;", 1),
], ids=["read-then-barrier", "read-own-thread", "no-wait", "wait-leaving-it-pending"])
def test_a_bulk_store_read_before_its_writes_complete_is_reported(wait, reader):
    line = line_of(BULK, "cp.async.bulk.global")
    with pytest.raises(PtxHazardError, match=r"ld.global.u32: reads global address .* \(argument 0 \(out\) at byte "
                                             r"offset \d+\) through the generic proxy, which the instruction at line "
                                             rf"{line} \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) wrote through the async "
                                             r"proxy, .* \(race: the store is in flight until a "
                                             r"cp.async.bulk.wait_group of its thread without .read covers its bulk "
                                             r"group"):
        _bulk(wait, reader)
