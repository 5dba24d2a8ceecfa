"""When a write is there to read, and when a source may be written again, in PTX a user writes: a bulk store's (and a
bulk reduction's) global bytes are written once a `cp.async.bulk.wait_group` without `.read` of the issuing thread
covers its group (`.read` waits only until its shared source has been read); a `cp.async` reads its global source
until it lands (its thread's `cp.async.wait_group`); a bulk load, into the CTA or into a cluster member, reads its
source until its complete-tx; two writes of a byte through the generic and the async proxy need a
`fence.proxy.async` between them (an `st.global` prefill under a bulk store, an `st.shared` zero-fill under a bulk
load); data loaded through the non-coherent read-only path (`ld.global.nc`, `ldu`: `__ldg`, `const __restrict__`)
must be read-only for the whole launch. Each wrong kernel is reported naming both sides, each right twin runs clean
against NumPy, and `tessera-run` ends the wrong ones with exit status 1 and the located message
(docs/races-global.md, docs/races.md)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxHazardError
from race_templates import INIT_LOCAL_BARRIER, SYNC_CLUSTER, WAIT_LOCAL_BARRIER
from unseen_ptx import HEAD, line_of, run

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
"""64 threads store t^2 into `buf`, thread 0 bulk-stores it to `out` and waits (WAIT), then thread t reads
out[t ^ READER] into res[t] (READER 0: each its own word, thread 0 the one it stored; 1: a neighbour's)."""

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
                                             rf"{line} \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) wrote through the "
                                             r"async proxy, .* \(race: the store is in flight until a "
                                             r"cp.async.bulk.wait_group of its thread without .read covers its bulk "
                                             r"group"):
        _bulk(wait, reader)


READ_ONLY_PATH = r""".visible .entry k(.param .u64 data, .param .u64 flag, .param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [data];
    cvta.to.global.u64 %rd0, %rd0;
    ld.param.u64 %rd1, [flag];
    cvta.to.global.u64 %rd1, %rd1;
    ld.param.u64 %rd2, [out];
    cvta.to.global.u64 %rd2, %rd2;
    mul.wide.u32 %rd3, %r0, 4;
    add.s64 %rd4, %rd0, %rd3;
    add.s64 %rd5, %rd2, %rd3;
    mov.u32 %r1, %ctaid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra CONSUMER;
    mul.lo.u32 %r2, %r0, %r0;
    st.global.u32 [%rd4], %r2;
    bar.sync 0;
    setp.ne.u32 %p2, %r0, 0;
    @%p2 bra DONE;
    fence.acq_rel.gpu;
    st.relaxed.gpu.global.u32 [%rd1], 1;
    bra DONE;
CONSUMER:
    setp.ne.u32 %p2, %r0, 0;
    @%p2 bra WAITED;
SPIN:
    ld.acquire.gpu.global.u32 %r3, [%rd1];
    setp.eq.u32 %p3, %r3, 0;
    @%p3 bra SPIN;
WAITED:
    bar.sync 0;
    LOAD %r4, [%rd4];
    st.global.u32 [%rd5], %r4;
DONE:
    ret;
}
"""
"""CTA 0 writes data[t] = t^2 and releases a flag; CTA 1 acquires it, then each thread loads data[t] with LOAD into
out[t]."""


def _handoff(load: str) -> np.ndarray:
    args = [np.arange(32, dtype=np.uint32) + 7, np.zeros(1, np.uint32), np.zeros(32, np.uint32)]
    return run(READ_ONLY_PATH.replace("LOAD", load), 2, 32, args)[2]


def test_a_coherent_load_after_the_acquire_reads_the_other_ctas_data():
    np.testing.assert_array_equal(_handoff("ld.global.u32"), np.arange(32) ** 2)


@pytest.mark.parametrize("load", ["ld.global.nc.u32", "ld.global.nc.L1::no_allocate.u32", "ldu.global.u32"])
def test_a_read_only_load_of_data_this_launch_wrote_is_reported_however_ordered(load):
    line = line_of(READ_ONLY_PATH, "st.global.u32 [%rd4]")
    with pytest.raises(PtxHazardError, match=rf"{load}: reads global address .* \(argument 0 \(data\) at byte offset "
                                             r"0\) through the non-coherent read-only path, which the instruction at "
                                             rf"line {line} \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) wrote during "
                                             r"this launch: .* must be read-only for the whole launch"):
        _handoff(load)


INPLACE = r""".visible .entry k(.param .u64 x, .param .u64 y)
{
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %ctaid.x;
    mad.lo.u32 %r2, %r1, 64, %r0;
    mul.wide.u32 %rd0, %r2, 16;
    ld.param.u64 %rd1, [x];
    cvta.to.global.u64 %rd1, %rd1;
    add.s64 %rd2, %rd1, %rd0;
    ld.global.nc.v4.f32 {%f0, %f1, %f2, %f3}, [%rd2];
    fma.rn.f32 %f0, %f0, %f1, %f2;
    max.f32 %f3, %f3, 0f00000000;
    st.global.v4.f32 [%rd2], {%f0, %f1, %f2, %f3};
    ld.param.u64 %rd3, [y];
    cvta.to.global.u64 %rd3, %rd3;
    add.s64 %rd4, %rd3, %rd0;
    ld.global.nc.v4.f32 {%f0, %f1, %f2, %f3}, [%rd4];
    st.global.v4.f32 [%rd2+2048], {%f0, %f1, %f2, %f3};
    ret;
}
"""
"""In place over x (float4 per thread): x = (a b + c, b, c, relu(d)) from its own `__ldg`, written after the read; then
x's second half gets y's float4 through the read-only path too (y is only read)."""


def test_an_in_place_update_after_its_read_only_load_and_a_read_only_input_are_right():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(2 * 4 * 128).astype(np.float32)
    y = rng.standard_normal(4 * 128).astype(np.float32)
    out = run(INPLACE, 2, 64, [x.copy(), y])[0].reshape(2, 128, 4)
    first = x[:512].reshape(128, 4).astype(np.float64)
    expected = np.stack([first[:, 0] * first[:, 1] + first[:, 2], first[:, 1], first[:, 2],
                         np.maximum(first[:, 3], 0)], axis=1)
    np.testing.assert_allclose(out[0], expected, rtol=2e-7, atol=1e-7)
    np.testing.assert_array_equal(out[1], y.reshape(128, 4))


REDUCE = BULK.replace("    st.shared.u32 [%r5], %r6;",
                      "    cvt.rn.f32.u32 %f0, %r6;\n    st.shared.f32 [%r5], %f0;").replace(
    "    .reg .pred %p<4>;", "    .reg .pred %p<4>;\n    .reg .f32 %f<2>;").replace(
    "cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r2], 256;",
    "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd0], [%r2], 256;")
"""BULK with thread 0 adding the floats t^2 into `out` (1.0 each) by a bulk reduction instead of storing them."""


def test_a_bulk_reduction_read_after_its_wait_group_is_right_and_after_read_only_is_reported():
    text = REDUCE.replace("READER", "1")
    out = run(text.replace("WAIT", FULL), 1, 64, [np.ones(64, np.float32), np.zeros(64, np.float32)])[1]
    np.testing.assert_array_equal(out, (np.arange(64) ^ 1) ** 2 + 1.0)
    with pytest.raises(PtxHazardError, match=rf"ld.global.u32: .* which the instruction at line "
                                             rf"{line_of(REDUCE, 'cp.reduce')} .* through the async proxy \(bulk "
                                             r"reduction\), .* the store is in flight until"):
        run(text.replace("WAIT", READ_ONLY), 1, 64, [np.ones(64, np.float32), np.zeros(64, np.float32)])


CP_ASYNC = r""".visible .entry k(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 buf[1024];
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [src];
    cvta.to.global.u64 %rd0, %rd0;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r0, 16;
    add.s64 %rd3, %rd0, %rd2;
    add.s64 %rd4, %rd1, %rd2;
    mov.u32 %r1, buf;
    shl.b32 %r2, %r0, 4;
    add.u32 %r3, %r1, %r2;
    cp.async.cg.shared.global [%r3], [%rd3], 16;
    cp.async.commit_group;
BEFORE
    cp.async.wait_group 0;
AFTER
    ld.shared.v4.u32 {%r4, %r5, %r6, %r7}, [%r3];
    st.global.v4.u32 [%rd4], {%r4, %r5, %r6, %r7};
    ret;
}
"""
"""64 threads each cp.async 16 bytes of `src` into `buf` and copy them to `out`; BEFORE and AFTER the wait go the
barrier and the overwrite of a source."""

OWN = "    st.global.u32 [%rd3], 99;"
NEIGHBOUR = ("    xor.b32 %r8, %r0, 1;\n    mul.wide.u32 %rd5, %r8, 16;\n    add.s64 %rd6, %rd0, %rd5;\n"
             "    st.global.u32 [%rd6], 99;")
"""A thread overwrites its own source word, or its neighbour's."""


def _cp_async(before: str, after: str, **kw) -> np.ndarray:
    text = CP_ASYNC.replace("BEFORE", before).replace("AFTER", after)
    return run(text, 1, 64, [np.arange(256, dtype=np.uint32), np.zeros(256, np.uint32)], **kw)


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 0), ("delayed-warp", 1)])
def test_a_cp_async_source_overwritten_after_every_copy_landed_is_right(schedule, seed):
    out = _cp_async("", OWN + "\n    bar.sync 0;\n" + NEIGHBOUR, schedule=schedule, seed=seed)
    np.testing.assert_array_equal(out[1], np.arange(256))
    np.testing.assert_array_equal(out[0][::4], 99)


@pytest.mark.parametrize("before, after", [
    (OWN, ""),  # the issuing thread, before its own wait
    ("    bar.sync 0;\n" + NEIGHBOUR, ""),  # a neighbour, ordered only after the issue
    ("    bar.sync 0;", NEIGHBOUR),  # ... also when the owner's wait happened to run first
], ids=["own-before-wait", "neighbour-before-wait", "neighbour-after-an-unordered-wait"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 0), ("delayed-warp", 1)])
def test_a_cp_async_source_overwritten_before_its_copy_lands_is_reported(before, after, schedule, seed):
    with pytest.raises(PtxHazardError, match=r"st.global.u32: writes global address .* \(argument 0 \(src\) at byte "
                                             r"offset \d+\)(, which the cp.async| through the generic proxy, which "
                                             rf"the instruction) at line {line_of(CP_ASYNC, 'cp.async.cg')} "):
        _cp_async(before, after, schedule=schedule, seed=seed)


BULK_LOAD = r""".visible .entry k(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 buf[256];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [src];
    cvta.to.global.u64 %rd0, %rd0;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, buf;
    mov.u32 %r2, bar;
PREFILL
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared.b64 [%r2], 1;
    bar.sync 0;
    @%p0 mbarrier.arrive.expect_tx.shared.b64 %rd7, [%r2], 256;
    @%p0 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd0], 256, [%r2];
BEFORE
WAIT:
    mbarrier.try_wait.parity.shared.b64 %p1, [%r2], 0;
    @!%p1 bra WAIT;
AFTER
    shl.b32 %r3, %r0, 2;
    add.u32 %r4, %r1, %r3;
    ld.shared.u32 %r5, [%r4];
    mul.wide.u32 %rd2, %r0, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
}
"""
"""Thread 0 bulk-loads 256 bytes of `src` into `buf` on an mbarrier; every thread waits for it and copies its word to
`out`. Each thread overwrites its source word with 99 BEFORE or AFTER its wait; at PREFILL it may first store into its
word of `buf`."""

OVERWRITE_SOURCE = "    mul.wide.u32 %rd4, %r0, 4;\n    add.s64 %rd5, %rd0, %rd4;\n    st.global.u32 [%rd5], 99;"


def test_a_bulk_load_source_overwritten_after_the_wait_is_right():
    text = BULK_LOAD.replace("BEFORE", "").replace("AFTER", OVERWRITE_SOURCE).replace("PREFILL", "")
    src, out = run(text, 1, 64, [np.arange(64, dtype=np.uint32), np.zeros(64, np.uint32)])
    np.testing.assert_array_equal(out, np.arange(64))
    np.testing.assert_array_equal(src, 99)


def test_a_bulk_load_source_overwritten_before_its_phase_completes_is_reported():
    """As a TMA load's: the non-tensor bulk copy reads its global source until its complete-tx."""
    text = BULK_LOAD.replace("BEFORE", "    bar.sync 0;\n" + OVERWRITE_SOURCE).replace("AFTER", "") \
        .replace("PREFILL", "")
    with pytest.raises(PtxHazardError, match=r"st.global.u32: writes global address .* \(argument 0 \(src\) at byte "
                                             rf"offset 0\), which the TMA or bulk load at line "
                                             rf"{line_of(BULK_LOAD, 'cp.async.bulk.shared')} .* until it completes "
                                             r"phase 0 of the mbarrier"):
        run(text, 1, 64, [np.arange(64, dtype=np.uint32), np.zeros(64, np.uint32)])


FORWARD = r""".visible .entry k(.param .u64 out)
{
    .reg .b32 %r<24>;
    .reg .b64 %rd<8>;
    .reg .pred %p<8>;
    .shared .align 128 .b8 src[64];
    .shared .align 128 .b8 dst[64];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
""" + INIT_LOCAL_BARRIER.format(count=1) + """
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, src;
    mov.u32 %r4, dst;
    mov.u32 %r9, 0;
    setp.eq.u32 %p1, %r1, 1;
    @%p1 bra RECEIVER;
    shl.b32 %r5, %r0, 2;
    add.u32 %r5, %r3, %r5;
    add.u32 %r6, %r0, 1000;
    st.shared.u32 [%r5], %r6;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    mapa.shared::cluster.u32 %r7, %r4, 1;
    mapa.shared::cluster.u32 %r8, %r20, 1;
    @%p7 cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r7], [%r3], 64, [%r8];
SENDER
    bra END;
RECEIVER:
    @%p7 mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r20], 64;
""" + WAIT_LOCAL_BARRIER.format(tag="0", parity=0) + """
    shl.b32 %r5, %r0, 2;
    add.u32 %r5, %r4, %r5;
    ld.shared.u32 %r9, [%r5];
END:
""" + SYNC_CLUSTER + """
AFTER
    ld.param.u64 %rd0, [out];
    mov.u32 %r15, %ctaid.x;
    mad.lo.s32 %r15, %r15, 16, %r0;
    mul.wide.u32 %rd1, %r15, 4;
    add.s64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r9;
    ret;
}
"""
"""A cluster of two CTAs of 16 threads: rank 0 fills `src` with 1000 + t and forwards it with
cp.async.bulk.shared::cluster.shared::cta into rank 1's `dst`, completing on rank 1's barrier, which rank 1 waits on
before reading; both then meet at a cluster barrier. Rank 0 overwrites its source word with 7 at SENDER (right
after the copy, before the cluster barrier) or at AFTER (after it: rank 1's wait happens before)."""

RESET_SOURCE = "    @!%p1 st.shared.u32 [%r5], 7;"


def test_a_bulk_copy_source_overwritten_after_the_peer_waited_is_right():
    out = run(FORWARD.replace("SENDER", "").replace("AFTER", RESET_SOURCE), 2, 16, [np.zeros(32, np.uint32)],
              cluster=2)[0]
    np.testing.assert_array_equal(out, [0] * 16 + list(range(1000, 1016)))


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 1)])
def test_a_bulk_copy_source_overwritten_before_the_copy_completes_is_reported(schedule, seed):
    """The copy reads `src` until its complete-tx on rank 1's barrier: rank 0's store right after issuing it (after a
    bar.sync, so not the issuing thread's program order alone) may change what lands."""
    text = FORWARD.replace("SENDER", "    bar.sync 0;\n" + RESET_SOURCE).replace("AFTER", "")
    with pytest.raises(PtxHazardError, match=r"st.shared.u32: the store overwrites shared address 0x0 of CTA "
                                             r"\(0, 0, 0\) while the bulk copy at line "
                                             rf"{line_of(FORWARD, 'cp.async.bulk.shared::cluster')} \(thread "
                                             r"\(0, 0, 0\) of CTA \(0, 0, 0\)\), completing on the mbarrier at shared "
                                             r"address 0x\w+ of CTA \(1, 0, 0\), may still read it"):
        run(text, 2, 16, [np.zeros(32, np.uint32)], cluster=2, schedule=schedule, seed=seed)


PREFILLED = r""".visible .entry k(.param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<6>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r2, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    st.shared.u32 [%r5], %r0;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    mul.wide.u32 %rd1, %r0, 4;
    add.s64 %rd2, %rd0, %rd1;
    st.global.u32 [%rd2], 77;
    FENCE
    bar.sync 0;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r2], 256;
    @%p0 cp.async.bulk.commit_group;
    @%p0 cp.async.bulk.wait_group 0;
    ret;
}
"""
"""Every thread prefills its word of `out` with 77 (st.global) and its word of `buf` with t, fences (FENCE), a
bar.sync, then thread 0 bulk-stores `buf` over `out`."""


@pytest.mark.parametrize("fence", ["fence.proxy.async;",
                                   "fence.proxy.async.global;\n    fence.proxy.async.shared::cta;"])
def test_a_bulk_store_over_fenced_generic_stores_is_right(fence):
    out = run(PREFILLED.replace("FENCE", fence), 1, 64, [np.zeros(64, np.uint32)])[0]
    np.testing.assert_array_equal(out, np.arange(64))


def test_a_bulk_store_over_generic_stores_without_a_global_proxy_fence_is_reported():
    """Two writes of one byte through two proxies: without a fence.proxy.async covering global memory between them
    the generic store may land after the bulk store's (the shared::cta fence orders only the source)."""
    text = PREFILLED.replace("FENCE", "fence.proxy.async.shared::cta;")
    with pytest.raises(PtxHazardError, match=r"cp.async.bulk.global.shared::cta.bulk_group: writes global address .* "
                                             r"through the async proxy, which the instruction at line "
                                             rf"{line_of(PREFILLED, 'st.global')} .* wrote through the generic proxy "
                                             r"and has not made visible to the async proxy \(missing "
                                             r"fence.proxy.async between the store and this write"):
        run(text, 1, 64, [np.zeros(64, np.uint32)])


ZERO_FILL = "    shl.b32 %r3, %r0, 2;\n    add.u32 %r4, %r1, %r3;\n    st.shared.u32 [%r4], 5;\n"
"""Each thread zero-fills (with 5) its word of the bulk load's destination first, as a slot written by st.shared and
then refilled by a copy."""


def test_a_bulk_load_over_fenced_generic_stores_is_right():
    text = BULK_LOAD.replace("PREFILL", ZERO_FILL + "    fence.proxy.async.shared::cta;").replace("BEFORE", "") \
        .replace("AFTER", "")
    np.testing.assert_array_equal(run(text, 1, 64, [np.arange(64, dtype=np.uint32), np.zeros(64, np.uint32)])[1],
                                  np.arange(64))


def test_a_bulk_load_over_generic_stores_without_a_proxy_fence_is_reported():
    """Two writes of one shared byte through two proxies: the bar.sync orders them, only a fence.proxy.async makes the
    st.shared visible to the async proxy before the copy writes over it."""
    text = BULK_LOAD.replace("PREFILL", ZERO_FILL).replace("BEFORE", "").replace("AFTER", "")
    with pytest.raises(PtxHazardError, match=r"the bulk copy writes shared address 0x0, which thread \(0, 0, 0\) .* "
                                             r"stored through the generic proxy and has not made visible to the async "
                                             r"proxy \(missing fence.proxy.async after the store at line "
                                             rf"{line_of(BULK_LOAD.replace('PREFILL', ZERO_FILL), 'st.shared')}: no "
                                             r"fence.proxy.async lies between the store and this write"):
        run(text, 1, 64, [np.arange(64, dtype=np.uint32), np.zeros(64, np.uint32)])


def test_tessera_run_reports_the_read_only_load_and_the_early_bulk_read_by_file_and_line(tmp_path, capsys):
    """The command line ends both with exit status 1 and the located message, no traceback; the right twins with 0."""
    from tessera.tools import tessera_run

    cases = [(READ_ONLY_PATH.replace("LOAD", "ld.global.u32"), READ_ONLY_PATH.replace("LOAD", "ld.global.nc.u32"),
              ["--grid", "2", "--block", "32", "--arg", "u32[32]=arange", "--arg", "u32[1]=zeros", "--arg",
               "u32[32]=zeros"], "ld.global.nc.u32", "{LOAD}"),
             (BULK.replace("WAIT", FULL).replace("READER", "1"), BULK.replace("WAIT", READ_ONLY).replace("READER", "1"),
              ["--grid", "1", "--block", "64", "--arg", "u32[64]=zeros", "--arg", "u32[64]=zeros"], "ld.global.u32",
              "ld.global.u32 %r8")]
    for right, wrong, args, name, snippet in cases:
        path = tmp_path / "k.ptx"
        path.write_text(HEAD + right)
        assert tessera_run.main([str(path), *args]) == 0
        path.write_text(HEAD + wrong)
        assert tessera_run.main([str(path), *args]) == 1
        err = capsys.readouterr().err
        line = line_of(wrong, snippet.replace("{LOAD}", name))
        assert f"k.ptx:{line}: error: {name}: reads global address" in err, err
        assert "Traceback" not in err
