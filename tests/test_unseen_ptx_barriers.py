"""Hand-written sm_90a PTX with ordering bugs of named barriers, beside correct twins that run clean and right:
`bar.sync` thread counts that do not match the threads arriving (too many at once, too few: a deadlock, one barrier
counted two ways in one phase, counts ptxas refuses), a barrier used by other warps that orders nothing for a
handoff, and a producer/consumer split on `bar.arrive`/`bar.sync` (stores after the arrive, a release before the
read, nobody waiting, a consumer on the wrong barrier: a `PtxDeadlockError`). The mbarrier cases:
tests/test_unseen_ptx_mbarriers.py; bulk copies, proxy fences and cp.async: tests/test_unseen_ptx_races.py."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxDeadlockError, PtxExecutionError, PtxHazardError

from unseen_ptx import line_of, run


# region bar.sync thread counts
COUNTED = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .pred %p<2>;
    mov.u32 %r0, %tid.x;
    setp.lt.u32 %p0, %r0, PART;
    @!%p0 bra DONE;
    bar.sync 1, COUNT;
DONE:
    ret;
}
"""
"""The first PART of 128 threads meet on barrier 1 counting COUNT."""


@pytest.mark.parametrize("part, count, error, message", [
    (64, 64, None, None),
    (48, 64, None, None),  # warp 1's half arrives for the warp: named barriers count warps
    (96, 64, PtxHazardError, r"bar.sync: 96 threads arrive on barrier 1 at once, whose thread count is 64"),
    (64, 96, PtxDeadlockError, r"64 thread\(s\), first thread \(0, 0, 0\) of CTA \(0, 0, 0\): wait at named barrier 1 "
                               r"at line 12 \(bar.sync\)"),
    (64, 48, PtxExecutionError, r"barrier thread count must be a non-zero multiple of the warp size 32, got 48"),
    (128, 256, PtxExecutionError, r"bar.sync: barrier thread count 256 exceeds the CTA's 128 threads"),
])
def test_a_named_barrier_thread_count_that_does_not_match_is_reported(part, count, error, message):
    text = COUNTED.replace("PART", str(part)).replace("COUNT", str(count))
    if error is None:
        run(text, 1, 128, [np.zeros(1, np.uint32)])
        return
    with pytest.raises(error, match=message):
        run(text, 1, 128, [np.zeros(1, np.uint32)])


REUSED = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 4 .b8 buf[128];
    mov.u32 %r0, %tid.x;
    mov.u32 %r2, buf;
    and.b32 %r3, %r0, 31;
    shl.b32 %r4, %r3, 2;
    add.u32 %r5, %r2, %r4;
    shr.u32 %r6, %r0, 5;
    mov.u32 %r8, 0;
    setp.eq.u32 %p0, %r6, 0;
    @%p0 st.shared.u32 [%r5], %r3;
    setp.lt.u32 %p1, %r6, 2;
    @%p1 bra FIRST;
    SECOND
    setp.eq.u32 %p2, %r6, 2;
    @%p2 ld.shared.u32 %r8, [%r5];
    bra OUT;
FIRST:
    bar.sync 1, 64;
OUT:
    ld.param.u64 %rd2, [out];
    mul.wide.u32 %rd3, %r0, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r8;
    ret;
}
"""
"""Warp 0 stores, warps 0-1 meet on barrier 1 (64); warps 2-3 meet on SECOND, then warp 2 reads warp 0's words."""


@pytest.mark.parametrize("second", ["bar.sync 1, 64;", "bar.sync 2, 64;"], ids=["same-id", "other-id"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed-warp", 0)])
def test_a_barrier_between_other_warps_does_not_order_a_handoff(second, schedule, seed):
    """Warps 2-3 meeting on the barrier warps 0-1 used (another phase), or on another barrier, learn nothing of
    warp 0's stores: a race whichever side runs first."""
    with pytest.raises(PtxHazardError, match=r"(ld|st).shared.u32: (reads|writes) shared address 0x0, which the "
                                             r"instruction at line \d+ .* no synchronisation orders the two"):
        run(REUSED.replace("SECOND", second), 1, 128, [np.zeros(128, np.uint32)], schedule=schedule, seed=seed)


def test_one_barrier_counted_differently_in_one_phase_is_a_hazard():
    """It was a bare PtxExecutionError; now a PtxHazardError, as 96 threads arriving on a count of 64 is."""
    text = REUSED.replace("SECOND", "bar.sync 1, 128;")
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'bar.sync 1, 64')}: error: bar.sync: barrier 1 "
                                             r"used with thread counts 128 and 64"):
        run(text, 1, 128, [np.zeros(128, np.uint32)])


# endregion
# region a named-barrier producer/consumer split
SPLIT = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 4 .b8 buf[512];
    mov.u32 %r0, %tid.x;
    mov.u32 %r2, buf;
    and.b32 %r3, %r0, 127;
    shl.b32 %r4, %r3, 2;
    add.u32 %r5, %r2, %r4;
    setp.lt.u32 %p0, %r0, 128;
    @!%p0 bra CONSUMER;
    mul.lo.u32 %r6, %r3, 5;
    st.shared.u32 [%r5], %r6;
    PRODUCED
    bra DONE;
CONSUMER:
    FULL
    xor.b32 %r8, %r4, 4;
    add.u32 %r9, %r2, %r8;
    ld.shared.u32 %r7, [%r9];
    ld.param.u64 %rd2, [out];
    mul.wide.u32 %rd3, %r3, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r7;
    EMPTY
DONE:
    ret;
}
"""
"""Warpgroup 0 stores word i and arrives on barrier 1 (PRODUCED); warpgroup 1 syncs on it (FULL) and reads word
i ^ 1, then (EMPTY) may release the buffer on barrier 2, which the producer syncs on before storing again."""
REFILL = "bar.arrive 1, 256;\n    bar.sync 2, 256;\n    st.shared.u32 [%r5], 0;"


def split(produced="bar.arrive 1, 256;", full="bar.sync 1, 256;", empty=""):
    return SPLIT.replace("PRODUCED", produced).replace("FULL", full).replace("EMPTY", empty)


@pytest.mark.parametrize("text", [split(), split(REFILL, empty="bar.arrive 2, 256;"),
                                  split("barrier.arrive.aligned 1, 256;", "barrier.sync.aligned 1, 256;")],
                         ids=["arrive-sync", "ping-back", "barrier-aligned"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("adversarial", 0), ("delayed-warp", 4)])
def test_a_named_barrier_producer_consumer_split_is_clean_and_right(text, schedule, seed):
    out = run(text, 1, 256, [np.zeros(128, np.uint32)], schedule=schedule, seed=seed)[0]
    np.testing.assert_array_equal(out, (np.arange(128) ^ 1) * 5)


@pytest.mark.parametrize("text, writer", [
    (split("bar.arrive 1, 256;\n    st.shared.u32 [%r5], 0;"), "st.shared.u32 [%r5], 0"),  # stores after its arrive
    (split(REFILL, "bar.sync 1, 256;\n    bar.arrive 2, 256;"), "st.shared.u32 [%r5], 0"),  # released before its read
    (split(full="bar.arrive 1, 256;"), "st.shared.u32 [%r5], %r6"),  # both arrive: nobody waits
], ids=["store-after-arrive", "release-before-read", "nobody-waits"])
def test_a_named_barrier_split_with_an_ordering_bug_is_reported(text, writer):
    with pytest.raises(PtxHazardError, match=rf"ld.shared.u32: reads shared address 0x4, which the instruction at line "
                                             rf"{line_of(text, writer)} \(thread \(1, 0, 0\) .* wrote, and no "
                                             r"synchronisation orders the two"):
        run(text, 1, 256, [np.zeros(128, np.uint32)])


@pytest.mark.parametrize("produced, full", [("bar.arrive 1, 256;", "bar.sync 2, 256;"),
                                            ("bar.arrive 1, 128;", "bar.sync 1, 256;")], ids=["wrong-id", "count"])
def test_a_consumer_on_a_barrier_the_producer_never_completes_is_a_deadlock(produced, full):
    text = split(produced, full)
    with pytest.raises(PtxDeadlockError, match=rf"128 thread\(s\), first thread \(128, 0, 0\) .*: wait at named "
                                               rf"barrier \d at line {line_of(text, full)} \(bar.sync\)"):
        run(text, 1, 256, [np.zeros(128, np.uint32)])


# endregion
