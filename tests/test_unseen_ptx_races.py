"""Hand-written sm_90a PTX with ordering bugs inside one CTA that the seeded lists do not have, each beside a correct
twin that must run clean and right (against NumPy), through `tessera.interpreters.ptx.launch`: a `cp.async.bulk`
read before its mbarrier completes (an `expect_tx` too short or too long), a bulk store fenced for the wrong state
space or its source reused before `wait_group.read`, overlapping stores of two warps, `cp.async.wait_group`
counting the wrong groups. Each is reported naming the instruction and its line; a barrier that can never complete
is a `PtxDeadlockError`, not a spin. mbarrier handoffs and rings: tests/test_unseen_ptx_mbarriers.py; named
barriers: tests/test_unseen_ptx_barriers.py; between CTAs and in clusters: tests/test_unseen_ptx_cluster_races.py;
odd but legal PTX: tests/test_unseen_ptx_odd.py. The regressions these found live with the code they test:
tests/test_reductions.py, tests/test_ptx_cluster.py (what a cluster barrier orders), tests/test_ptx_exec.py (a
collective outside its member mask), tests/test_ptx_races.py (a plain flag store racing a strong poll)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxDeadlockError, PtxHazardError

from unseen_ptx import WAIT, line_of, run


# region cp.async.bulk into shared memory on an mbarrier
BULK = r"""
.visible .entry k(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 8 .b64 bar;
    .shared .align 128 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, bar;
    mov.u32 %r2, buf;
    ld.param.u64 %rd0, [src];
    cvta.to.global.u64 %rd0, %rd0;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r1], 1;
    fence.mbarrier_init.release.cluster;
    bar.sync 0;
    @%p0 mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [%r1], EXPECT;
    @%p0 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd0], 256, [%r1];
SYNC
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    ld.shared.u32 %r7, [%r5];
    ld.param.u64 %rd2, [out];
    mul.wide.u32 %rd3, %r0, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r7;
    ret;
}
"""
"""Thread 0 copies 256 bytes from global memory into `buf` with one bulk copy on `bar`; 64 threads read a word each
after SYNC."""
SRC = np.arange(64, dtype=np.uint32) * 7
LEADER_WAITS_THEN_BARRIER = "@!%p0 bra SKIP;\n" + WAIT.replace("PARITY", "0") + "\nSKIP:\n    bar.sync 0;"


@pytest.mark.parametrize("sync", [WAIT.replace("PARITY", "0"), LEADER_WAITS_THEN_BARRIER], ids=["all-wait", "leader"])
def test_a_bulk_copy_read_after_its_phase_completes_is_right(sync):
    out = run(BULK.replace("SYNC", sync).replace("EXPECT", "256"), 1, 64, [SRC, np.zeros(64, np.uint32)])[1]
    np.testing.assert_array_equal(out, SRC)


def test_a_bulk_copy_read_before_its_mbarrier_completes_is_reported():
    text = BULK.replace("SYNC", "").replace("EXPECT", "256")
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'ld.shared.u32')}: error: ld.shared.u32: reads "
                                             rf"shared address 0x80 before it was signalled: the bulk copy at line "
                                             rf"{line_of(text, 'cp.async.bulk')} .* has not completed on the "
                                             r"mbarrier at shared address 0x0"):
        run(text, 1, 64, [SRC, np.zeros(64, np.uint32)])


def test_a_barrier_before_the_leaders_wait_does_not_order_the_copy():
    """Every thread but 0 passes a bar.sync right after the copy was issued: no thread had observed the phase."""
    text = BULK.replace("SYNC", "    bar.sync 0;").replace("EXPECT", "256")
    with pytest.raises(PtxHazardError, match=r"ld.shared.u32: reads shared address 0x\w+ before "
                                             r"(the TMA copy into )?it "
                                             r"was signalled"):
        run(text, 1, 64, [SRC, np.zeros(64, np.uint32)])


def test_an_expect_tx_that_disagrees_with_the_copy_is_reported_or_deadlocks():
    short = BULK.replace("SYNC", WAIT.replace("PARITY", "0")).replace("EXPECT", "128")
    with pytest.raises(PtxHazardError, match=r"delivered 128 bytes more than its expect_tx announced for phase 0 "
                                             rf"\(the arrive at line {line_of(short, 'expect_tx')}"):
        run(short, 1, 64, [SRC, np.zeros(64, np.uint32)])
    long = BULK.replace("SYNC", WAIT.replace("PARITY", "0")).replace("EXPECT", "512")
    with pytest.raises(PtxDeadlockError, match=r"its expect_tx announced 256 bytes more than the copies delivered"):
        run(long, 1, 64, [SRC, np.zeros(64, np.uint32)])


# endregion
# region a bulk store from shared memory: which fence
STORE = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r2, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    mul.lo.u32 %r6, %r0, %r0;
    st.shared.u32 [%r5], %r6;
    bar.sync 0;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 FENCE;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    @%p0 cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r2], 256;
    @%p0 cp.async.bulk.commit_group;
    @%p0 cp.async.bulk.wait_group.read 0;
    ret;
}
"""
"""Every thread stores a word, a bar.sync, thread 0 fences (FENCE) and bulk-stores the 256 bytes to global memory."""


@pytest.mark.parametrize("fence", ["fence.proxy.async.shared::cta", "fence.proxy.async"])
def test_a_bulk_store_fenced_for_shared_memory_is_right(fence):
    out = run(STORE.replace("FENCE", fence), 1, 64, [np.zeros(64, np.uint32)])[0]
    np.testing.assert_array_equal(out, np.arange(64) ** 2)


@pytest.mark.parametrize("fence", ["fence.proxy.async.global", "fence.acq_rel.cta", "membar.cta"])
def test_a_bulk_store_fenced_for_another_state_space_or_proxy_is_reported(fence):
    """fence.proxy.async.global orders global memory only; a memory fence is no proxy fence."""
    text = STORE.replace("FENCE", fence)
    with pytest.raises(PtxHazardError, match=r"cp.async.bulk.global.shared::cta.bulk_group: the bulk store reads "
                                             r"shared address 0x0, which thread \(0, 0, 0\) .* \(missing "
                                             rf"fence.proxy.async after the store at line "
                                             rf"{line_of(text, 'st.shared')}"):
        run(text, 1, 64, [np.zeros(64, np.uint32)])


WAIT_READ = "    @%p0 cp.async.bulk.wait_group.read 0;\n"
OVERWRITE = "    @%p0 st.shared.u32 [%r2], 5;\n"


@pytest.mark.parametrize("after_store, message", [
    ("", r"the CTA exits while this bulk store \(bulk group 0\) may still read its shared source"),
    (WAIT_READ + OVERWRITE, None),
    (WAIT_READ.replace("read 0", "read 1") + OVERWRITE, r"st.shared.u32: the store overwrites shared address 0x0 while "
                                                        r"the bulk store at line \d+ .* may still read it"),
], ids=["no-wait", "overwrite-after-wait", "overwrite-after-wait-1"])
def test_a_bulk_store_source_is_read_until_its_wait_group_read(after_store, message):
    text = STORE.replace("FENCE", "fence.proxy.async.shared::cta").replace(WAIT_READ, after_store)
    if message is None:
        run(text, 1, 64, [np.zeros(64, np.uint32)])
        return
    with pytest.raises(PtxHazardError, match=message):
        run(text, 1, 64, [np.zeros(64, np.uint32)])


# endregion
# region two warps' overlapping stores
OVERLAP = r"""
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
    setp.lt.u32 %p0, %r0, 32;
    @%p0 st.shared.WIDTH [%r5], %r3;
SYNC
    add.u32 %r6, %r5, 2;
    @!%p0 st.shared.u16 [%r6], 0x7777;
    bar.sync 0;
    ld.shared.u32 %r7, [%r5];
    ld.param.u64 %rd2, [out];
    mul.wide.u32 %rd3, %r0, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r7;
    ret;
}
"""
"""Warp 0 stores word i (WIDTH u32) or its low half (u16); warp 1 stores the high half of the same word."""


@pytest.mark.parametrize("width, sync", [("u32", "    bar.sync 0;"), ("u16", "")])
def test_stores_of_two_warps_ordered_or_disjoint_are_right(width, sync):
    out = run(OVERLAP.replace("WIDTH", width).replace("SYNC", sync), 1, 64, [np.zeros(64, np.uint32)])[0]
    np.testing.assert_array_equal(out, np.tile(np.arange(32) | 0x77770000, 2))


@pytest.mark.parametrize("sync", ["", "    bar.warp.sync -1;", "    membar.cta;"], ids=["none", "warp", "membar"])
def test_a_half_word_store_over_another_warps_word_is_reported(sync):
    """bar.warp.sync orders a warp with itself, membar orders no other thread: the u16 store races the u32."""
    text = OVERLAP.replace("WIDTH", "u32").replace("SYNC", sync)
    with pytest.raises(PtxHazardError, match=r"st.shared.u16: writes shared address 0x2, which the instruction at line "
                                             rf"{line_of(text, 'st.shared.u32')} \(thread \(0, 0, 0\) .* wrote"):
        run(text, 1, 64, [np.zeros(64, np.uint32)])


# endregion
# region cp.async groups
GROUPS = r"""
.visible .entry k(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 buf[1024];
    mov.u32 %r0, %tid.x;
    mov.u32 %r2, buf;
    ld.param.u64 %rd0, [src];
    cvta.to.global.u64 %rd0, %rd0;
    mul.wide.u32 %rd1, %r0, 16;
    add.u64 %rd2, %rd0, %rd1;
    shl.b32 %r4, %r0, 4;
    add.u32 %r5, %r2, %r4;
    cp.async.cg.shared.global [%r5], [%rd2], 16;
    cp.async.commit_group;
    add.u32 %r6, %r5, 512;
    add.u64 %rd3, %rd2, 512;
    cp.async.cg.shared.global [%r6], [%rd3], 16;
    cp.async.commit_group;
    WAIT
    ld.shared.u32 %r7, [READ];
    ld.param.u64 %rd4, [out];
    mul.wide.u32 %rd5, %r0, 4;
    add.u64 %rd6, %rd4, %rd5;
    st.global.u32 [%rd6], %r7;
    ret;
}
"""
"""Each of 32 threads copies 16 bytes into the first half of `buf` (group 0) and 16 into the second (group 1), waits
(WAIT) and reads the first word of one of its copies (READ: %r5 group 0's, %r6 group 1's, %r9 its neighbour's
group-0 copy after a bar.sync)."""
NEIGHBOUR = "    bar.sync 0;\n    xor.b32 %r8, %r4, 16;\n    add.u32 %r9, %r2, %r8;"
GSRC = np.arange(256, dtype=np.uint32) + 1000


@pytest.mark.parametrize("wait, read, expected", [
    ("cp.async.wait_group 0;", "%r6", GSRC[128::4]),
    ("cp.async.wait_group 1;", "%r5", GSRC[0:128:4]),  # one group may stay pending: the first has landed
    ("cp.async.wait_all;" + NEIGHBOUR, "%r9", GSRC[(np.arange(32) ^ 1) * 4]),
])
def test_cp_async_read_after_a_wait_that_covers_its_group_is_right(wait, read, expected):
    out = run(GROUPS.replace("WAIT", wait).replace("READ", read), 1, 32, [GSRC, np.zeros(32, np.uint32)])[1]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("wait, read, copy", [
    ("cp.async.wait_group 1;", "%r6", "[%r6]"),  # the newest group may still be in flight
    ("cp.async.wait_group 2;", "%r5", "[%r5]"),
    (NEIGHBOUR, "%r9", "[%r5]"),  # a bar.sync without the wait: the neighbour's copy has not landed
])
def test_cp_async_read_that_the_wait_does_not_cover_is_reported(wait, read, copy):
    text = GROUPS.replace("WAIT", wait).replace("READ", read)
    with pytest.raises(PtxHazardError, match=rf"ld.shared.u32: reads shared address 0x\w+ before it was signalled: the "
                                             rf"cp.async at line {line_of(text, 'cp.async.cg.shared.global ' + copy)} "
                                             r"into it has not landed"):
        run(text, 1, 32, [GSRC, np.zeros(32, np.uint32)])


# endregion
