"""Hand-written sm_90a PTX with the asynchronous copies and proxies of one CTA, each correct kernel beside its bug,
judged by the PTX ISA against a NumPy reference (unseen23x): `cp.async` waited for by a `wait_group 0` that no
`commit_group` gave a group (the ISA's `cp.async.wait_all` is "commit_group; wait_group 0", `wait_group` alone
waits for committed groups only), `cp.async.mbarrier.arrive` with and without `.noinc` against the barrier's
count, a bulk-copy ring whose last, shorter tile keeps the full tiles' `expect_tx` (a `PtxDeadlockError` naming the
missing bytes, not a spin to max_steps), and `st.shared` operands of a `wgmma` with the proxy fence in each place a
kernel author puts it. CTA-local ordering: tests/test_unseen_ptx_sync_idioms.py."""

from __future__ import annotations

import subprocess

import ml_dtypes
import numpy as np
import pytest

from tessera.interpreters.ptx import PtxDeadlockError, PtxHazardError
from tessera.sm90 import facts

from unseen_ptx import WAIT, line_of, run

# region cp.async: commit groups and mbarrier arrivals
COPY = r"""
.visible .entry k(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 8 .b64 bar;
    .shared .align 16 .b8 buf[512];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, bar;
    mov.u32 %r2, buf;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r1], COUNT;
    bar.sync 0;
    and.b32 %r6, %r0, 31;
    setp.lt.u32 %p1, %r0, 32;
    @!%p1 bra CONSUMER;
    ld.param.u64 %rd0, [src];
    cvta.to.global.u64 %rd0, %rd0;
    mul.wide.u32 %rd1, %r0, 16;
    add.u64 %rd2, %rd0, %rd1;
    shl.b32 %r4, %r0, 4;
    add.u32 %r5, %r2, %r4;
    cp.async.cg.shared.global [%r5], [%rd2], 16;
    PRODUCER
    bra DONE;
CONSUMER:
CONSUMER_WAIT
READ:
    shl.b32 %r7, %r6, 4;
    add.u32 %r8, %r2, %r7;
    ld.shared.u32 %r9, [%r8];
    ld.param.u64 %rd4, [out];
    mul.wide.u32 %rd5, %r6, 4;
    add.u64 %rd6, %rd4, %rd5;
    st.global.u32 [%rd6], %r9;
DONE:
    ret;
}
"""
"""Warp 0 copies 16 bytes a thread into `buf` with cp.async and completes them (PRODUCER); warp 1 waits
(CONSUMER_WAIT) and lane i reads the first word of lane i's copy."""
SRC = np.arange(128, dtype=np.uint32) * 3 + 1
MBAR_WAIT = WAIT.replace("PARITY", "0")
BARRIER = "    bar.sync 0;"  # producers complete their own copies, then one barrier orders them for warp 1


def copies(count: int, producer: str, consumer: str = MBAR_WAIT, **kw) -> np.ndarray:
    text = COPY.replace("COUNT", str(count)).replace("PRODUCER", producer).replace("CONSUMER_WAIT", consumer)
    return run(text, 1, 64, [SRC, np.zeros(32, np.uint32)], **kw)[1]


@pytest.mark.parametrize("count, producer, consumer", [
    (32, "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r1];", MBAR_WAIT),
    (32, "cp.async.mbarrier.arrive.shared::cta.b64 [%r1];\n    mbarrier.arrive.shared::cta.b64 %rd3, [%r1];",
     MBAR_WAIT),
    (1, "cp.async.wait_all;\n" + BARRIER, BARRIER),
    (1, "cp.async.commit_group;\n    cp.async.wait_group 0;\n" + BARRIER, BARRIER),
], ids=["noinc", "inc-and-arrive", "wait_all", "commit-wait0"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed-warp", 0), ("adversarial", 3)])
def test_cp_async_completed_for_the_reader_is_right(count, producer, consumer, schedule, seed):
    np.testing.assert_array_equal(copies(count, producer, consumer, schedule=schedule, seed=seed), SRC[::4])


def test_cp_async_wait_group_without_a_commit_waits_for_nothing():
    """The copy belongs to no group: wait_group 0 does not cover it, the read after the barrier is reported naming
    the copy."""
    text = COPY.replace("PRODUCER", "cp.async.wait_group 0;\n" + BARRIER).replace("CONSUMER_WAIT", BARRIER)
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'ld.shared.u32')}: error: ld.shared.u32: reads "
                                             r"shared address 0x\w+ before it was signalled: the cp.async at line "
                                             rf"{line_of(text, 'cp.async.cg')} into it has not landed"):
        run(text.replace("COUNT", "1"), 1, 64, [SRC, np.zeros(32, np.uint32)])


@pytest.mark.parametrize("count, producer, pending", [
    (32, "cp.async.mbarrier.arrive.shared::cta.b64 [%r1];", "32 of 32"),  # without .noinc it arrives for nobody
    (64, "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r1];", "32 of 64"),
], ids=["inc-alone", "count-64"])
def test_cp_async_arrivals_that_cannot_complete_the_phase_are_a_deadlock(count, producer, pending):
    """The ISA: without .noinc "the pending count of the mbarrier object is incremented by 1 prior to the
    asynchronous arrive-on operation", a net arrival of none."""
    with pytest.raises(PtxDeadlockError, match=rf"32 thread\(s\), first thread \(32, 0, 0\) .*: wait on the mbarrier "
                                               rf"at shared address 0x0 \(in phase 0, parity 0, with {pending} "
                                               r"arrivals pending"):
        copies(count, producer)


def test_an_mbarrier_arrive_does_not_complete_a_cp_async():
    """A plain arrive after cp.async, no wait: the consumer's read is reported naming the copy."""
    with pytest.raises(PtxHazardError, match=r"ld.shared.u32: reads shared address 0x\w+ before it was signalled: "
                                             r"the cp.async at line \d+ into it has not landed"):
        copies(32, "mbarrier.arrive.shared::cta.b64 %rd3, [%r1];")


OVER_ARRIVALS = [
    "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%r1];",  # 32 arrivals on a count of 16
    "cp.async.mbarrier.arrive.shared::cta.b64 [%r1];\n    mbarrier.arrive.shared::cta.b64 %rd3, [%r1];",
    "cp.async.mbarrier.arrive.shared::cta.b64 [%r1];\n    mbarrier.arrive.release.cta.shared::cta.b64 %rd3, [%r1], 2;",
]


@pytest.mark.parametrize("producer", OVER_ARRIVALS, ids=["noinc", "arrive", "arrive-count-2"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed-warp", 0), ("adversarial", 3)])
def test_more_arrivals_in_one_instruction_than_the_phase_expects_are_refused_at_the_arrive(producer, schedule, seed):
    """The PTX ISA (mbarrier-arrive-on): an arrive-on operation consists of "decrementing the pending arrival count
    by the value specified by count argument" and, "if the current phase has been completed", the transition "to
    the next phase"; (mbarrier-phase-completion) the phase completes when "the pending arrival count reaches zero"
    and the transition reinitialises it to the expected count. So an arrival past the pending count is not lost: it
    counts towards the next phase, and the warp's 32 arrive-ons on a barrier of 16 complete phase 0 and phase 1 in
    one instruction. Whether the warp waiting on parity 0 sees phase 0 complete then depends on when it polls
    (between the two completions it passes, after them parity 0 names phase 2 and it spins): no schedule is what
    the kernel means. Both simulators refuse it at the arrive, by the same name (the executor completed two phases
    and reported the consumer's deadlock; the CTA simulator: tests/test_unseen_target_races.py)."""
    text = COPY.replace("PRODUCER", producer)
    arrive = line_of(text, "    mbarrier.arrive" if "\n" in producer else "cp.async.mbarrier.arrive")
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{arrive}: error: \S*mbarrier.arrive\S*: arrives on the mbarrier "
                                             r"at shared address 0x0 after the earlier arrivals of its warp in this "
                                             r"instruction completed its phase 0: more threads arrive than the 16 "
                                             r"the barrier expects \(thread \((16|8), 0, 0\) of CTA \(0, 0, 0\)\)"):
        copies(16, producer, schedule=schedule, seed=seed)


def test_arrivals_of_two_each_that_complete_the_phase_exactly_are_right():
    """The count-2 arrive of the 32 threads on a barrier of 64 completes phase 0 with the last one: right."""
    np.testing.assert_array_equal(copies(64, OVER_ARRIVALS[2]), SRC[::4])


def test_the_over_arrival_kernels_pass_ptxas(ptxas, tmp_path):
    from unseen_ptx import HEAD
    for i, producer in enumerate(OVER_ARRIVALS):
        path = tmp_path / f"k{i}.ptx"
        path.write_text(HEAD + COPY.replace("COUNT", "16").replace("PRODUCER", producer).replace("CONSUMER_WAIT",
                                                                                                 MBAR_WAIT))
        done = subprocess.run([ptxas, "-arch=sm_90a", "-o", str(tmp_path / "k.cubin"), str(path)],
                              capture_output=True, text=True)
        assert done.returncode == 0 and not done.stderr, (producer, done.stderr)


# endregion
# region a bulk-copy ring whose last tile is short
RING = r"""
.visible .entry k(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<6>;
    .shared .align 8 .b64 bar;
    .shared .align 128 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, bar;
    mov.u32 %r2, buf;
    ld.param.u64 %rd0, [src];
    cvta.to.global.u64 %rd0, %rd0;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r1], 1;
    bar.sync 0;
    mov.u32 %r8, 0;
    mov.u32 %r9, 0;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
TRIP:
    shl.b32 %r10, %r8, 8;
    sub.u32 %r11, 640, %r10;
    min.u32 %r11, %r11, 256;
    cvt.u64.u32 %rd5, %r10;
    add.u64 %rd6, %rd0, %rd5;
    @%p0 mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [%r1], EXPECT;
    @%p0 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd6], %r11, [%r1];
    and.b32 %r12, %r8, 1;
""" + WAIT.replace("PARITY", "%r12") + r"""
    setp.lt.u32 %p2, %r4, %r11;
    @%p2 ld.shared.u32 %r7, [%r5];
    @%p2 add.u32 %r9, %r9, %r7;
    bar.sync 0;
    add.u32 %r8, %r8, 1;
    setp.lt.u32 %p3, %r8, 3;
    @%p3 bra TRIP;
    ld.param.u64 %rd2, [out];
    mul.wide.u32 %rd3, %r0, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r9;
    ret;
}
"""
"""640 bytes in three trips of one slot (256, 256, 128 bytes: %r11): thread 0 announces EXPECT bytes and copies the
tile, the 64 threads wait on phase j & 1, lane t adds word t of the tile where it has one, and meet before the
refill."""
WORDS = np.arange(160, dtype=np.uint32) * 7


def test_a_ring_announcing_each_tiles_bytes_is_right():
    expected = np.zeros(64, np.int64)
    for start in (0, 64, 128):
        part = WORDS[start:start + 64]
        expected[:len(part)] += part
    out = run(RING.replace("EXPECT", "%r11"), 1, 64, [WORDS, np.zeros(64, np.uint32)])[1]
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed-warp", 1)])
def test_a_short_last_tile_announced_as_a_full_one_is_a_deadlock_naming_the_missing_bytes(schedule, seed):
    text = RING.replace("EXPECT", "256")
    with pytest.raises(PtxDeadlockError, match=r"64 thread\(s\), first thread \(0, 0, 0\) .*: wait on the mbarrier "
                                               r"at shared address 0x0 \(in phase 2, parity 0, with 0 of 1 arrivals "
                                               r"pending and tx-count 128: its expect_tx announced 128 bytes more than "
                                               rf"the copies delivered; .*\) at line {line_of(text, 'try_wait')}"):
        run(text, 1, 64, [WORDS, np.zeros(64, np.uint32)], schedule=schedule, seed=seed)


def test_an_expect_tx_counted_in_elements_is_reported_at_the_copy():
    text = RING.replace("EXPECT", "64")  # 64 words, 256 bytes
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'cp.async.bulk')}: error: cp.async.bulk.*: the "
                                             r"copies on the mbarrier at shared address 0x0 delivered 192 bytes more "
                                             rf"than its expect_tx announced for phase 0 \(the arrive at line "
                                             rf"{line_of(text, 'expect_tx')}"):
        run(text, 1, 64, [WORDS, np.zeros(64, np.uint32)])


# endregion
# region st.shared operands of a wgmma
WGMMA = r"""
.visible .entry k(.param .u64 out, .param .u64 src, .param .u64 adesc, .param .u64 bdesc)
{
    .reg .b32 %r<16>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 smem[2304];
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd1, [src];
    mov.u32 %r1, smem;
    shl.b32 %r2, %r0, 4;
    cvt.u64.u32 %rd2, %r2;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.v4.b32 {%r3, %r4, %r5, %r6}, [%rd3];
    add.u32 %r7, %r1, %r2;
    st.shared.v4.b32 [%r7], {%r3, %r4, %r5, %r6};
    setp.lt.u32 %p1, %r2, 256;
    @%p1 ld.global.v4.b32 {%r3, %r4, %r5, %r6}, [%rd3+2048];
    @%p1 st.shared.v4.b32 [%r7+2048], {%r3, %r4, %r5, %r6};
    setp.eq.u32 %p2, %r0, 0;
SYNC
    ld.param.u64 %rd4, [adesc];
    ld.param.u64 %rd5, [bdesc];
    mov.f32 %f0, 0f00000000;
    mov.f32 %f1, 0f00000000;
    mov.f32 %f2, 0f00000000;
    mov.f32 %f3, 0f00000000;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%f0, %f1, %f2, %f3}, %rd4, %rd5, 1, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    ld.param.u64 %rd1, [out];
    add.s64 %rd3, %rd1, %rd2;
    st.global.v4.f32 [%rd3], {%f0, %f1, %f2, %f3};
    ret;
}
"""
"""One warpgroup: thread t copies bytes 16t..16t+15 of A's shared image (64 x 16 bf16, no swizzle, K-major) and the
first 16 threads B's (8 x 16 at 2048) from `src` with st.shared, then SYNC, then D = A B^T by one m64n8k16 wgmma."""
LBO, SBO = 128, 256  # no-swizzle K-major: core matrices (8 rows x 16 bytes) step K by LBO, rows by SBO
RNG = np.random.default_rng(5)
A = RNG.standard_normal((64, 16)).astype(ml_dtypes.bfloat16)
B = RNG.standard_normal((8, 16)).astype(ml_dtypes.bfloat16)


def shared_image() -> np.ndarray:
    image = np.zeros(2048 + 256, np.uint8)
    for base, matrix in ((0, A), (2048, B)):
        rows = np.ascontiguousarray(matrix).view(np.uint8).reshape(matrix.shape[0], 32)
        r, kb = np.meshgrid(np.arange(rows.shape[0]), np.arange(32), indexing="ij")
        image[base + (r // 8) * SBO + (kb // 16) * LBO + (r % 8) * 16 + kb % 16] = rows
    return image


def wgmma(sync: str) -> np.ndarray:
    """D [64, 8] from the accumulator fragments (thread t, register v: row 16(t / 32) + (t % 32) / 4 + 8(v / 2),
    column 2(t % 4) + v % 2)."""
    out = run(WGMMA.replace("SYNC", sync), 1, 128, [np.zeros((128, 4), np.float32), shared_image(),
                                                    facts.encode_descriptor(0, LBO, SBO, 0),
                                                    facts.encode_descriptor(2048, LBO, SBO, 0)])[0]
    t, v = np.arange(128)[:, None], np.arange(4)[None, :]
    d = np.zeros((64, 8), np.float32)
    d[16 * (t // 32) + (t % 32) // 4 + 8 * (v // 2), 2 * (t % 4) + v % 2] = out
    return d


@pytest.mark.parametrize("sync", [
    "    bar.sync 0;\n    fence.proxy.async.shared::cta;",   # every thread fences after the barrier
    "    fence.proxy.async.shared::cta;\n    bar.sync 0;",   # every thread fences its own stores, then the barrier
    "    bar.sync 0;\n    fence.proxy.async;",                # the fence for every state space
    "    bar.sync 0;\n    @%p2 fence.proxy.async.shared::cta;\n    bar.sync 0;",  # one fence, a barrier carries it
], ids=["barrier-fence", "fence-barrier", "fence-all-spaces", "one-fence-then-barrier"])
def test_st_shared_operands_fenced_for_the_async_proxy_are_right(sync):
    """Exact products of bf16 summed and rounded once to f32: the float64 product rounded to f32 (K = 16)."""
    expected = (A.astype(np.float64) @ B.astype(np.float64).T).astype(np.float32)
    np.testing.assert_array_equal(wgmma(sync), expected)


@pytest.mark.parametrize("sync, reader", [
    ("    bar.sync 0;", 0),                                       # no proxy fence at all
    ("    bar.sync 0;\n    fence.proxy.async.global;", 0),        # a proxy fence for global memory only
    ("    bar.sync 0;\n    fence.acq_rel.cta;", 0),               # a memory fence is no proxy fence
    ("    bar.sync 0;\n    @%p2 fence.proxy.async.shared::cta;", 32),  # thread 0's fence reaches no other warp
], ids=["no-fence", "global-fence", "memory-fence", "one-fence"])
def test_st_shared_operands_without_a_proxy_fence_on_the_path_are_reported(sync, reader):
    text = WGMMA.replace("SYNC", sync)
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'wgmma.mma_async')}: error: wgmma.mma_async.*: "
                                             r"wgmma operand B reads shared address 0x800, which thread \(0, 0, 0\) "
                                             r".* stored through the generic proxy and has not made visible to the "
                                             r"async proxy \(missing fence.proxy.async after the store at line "
                                             rf"{line_of(text, 'st.shared.v4.b32 [%r7+2048]')}.*\(thread "
                                             rf"\({reader}, 0, 0\)"):
        wgmma(sync)


# endregion
