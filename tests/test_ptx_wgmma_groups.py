"""wgmma register ordering in the PTX executor, as the PTX ISA states it: each thread waits for its own wgmma
groups [memory_model.WGMMA_WAIT_PER_THREAD], and a wgmma.fence separates a thread's accesses of accumulator
registers from a later wgmma that writes them, scale-d false included, and from a wgmma of another shape
[memory_model.WGMMA_FENCE_SCALE_D]. One warpgroup, B read from zeroed shared memory (the products are 0)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxHazardError, launch
from text_edits import checked, filled

_KERNEL = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry groups(.param .u64 out)
.reqntid 128, 1, 1
{
    .reg .f32 %f<8>;
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    .reg .pred %p<3>;
    .shared .align 128 .b8 tile[4096];
    mov.u32 %r0, tile;
    cvt.u64.u32 %rd0, %r0;
    shr.u64 %rd0, %rd0, 4;
    and.b64 %rd0, %rd0, 0x3FFF;
    or.b64 %rd0, %rd0, 0x0000004000010000;
    mov.u32 %r1, %tid.x;
    setp.ne.b64 %p0, %rd0, %rd0;
    setp.lt.u32 %p1, %r1, WAITERS;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd1, %rd1, %rd2;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, %rd0, %rd0, %p0, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    @%p1 wgmma.wait_group.sync.aligned 0;
    st.global.f32 [%rd1], %f0;
SECOND
    ret;
}
"""
_SECOND = """    FENCE
    wgmma.mma_async.sync.aligned.SHAPE, %rd0, %rd0, %p0, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    st.global.f32 [%rd1], %f1;"""
_N16 = "m64n16k16.f32.bf16.bf16 {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}"
_N8 = "m64n8k16.f32.bf16.bf16 {%f0,%f1,%f2,%f3}"


def _run(waiters: int = 128, second: str = ""):
    text = filled(_KERNEL, WAITERS=str(waiters), SECOND=second)
    return launch(text, "groups", 1, 128, [np.full(128, 7, np.float32)], shared_bytes=4096)[0]


def test_every_thread_waiting_for_its_group_runs_clean():
    assert np.array_equal(_run(), np.zeros(128, np.float32))


@pytest.mark.parametrize("waiters, first", [(32, 32), (1, 1), (96, 96)])
def test_a_wait_group_of_some_threads_covers_none_of_the_others(waiters, first):
    """A predicated wait (one warp, one thread, three warps): the first thread that did not execute it touches
    its accumulator with its group still pending, whatever the other threads waited for."""
    with pytest.raises(PtxHazardError, match=rf"^<ptx>:\d+: error: st.global.f32: touches %f0, an accumulator "
                                             rf"register of the wgmma.mma_async at line 25, before a wgmma.wait_group "
                                             rf"covers its group \(group 0 of warpgroup 0 is still pending\): another "
                                             rf"thread's wgmma.wait_group covered it, and each thread waits only for "
                                             rf"itself .* \(thread \({first}, 0, 0\)"):
        _run(waiters)


def test_a_scale_d_false_wgmma_after_an_access_of_its_accumulators_needs_a_fence():
    """The second wgmma computes D = A*B (scale-d false) into the registers the thread just stored: it writes
    them, so the fence before it is required."""
    fenced = filled(_SECOND, FENCE="wgmma.fence.sync.aligned;", SHAPE=_N16)
    assert np.array_equal(_run(second=fenced), np.zeros(128, np.float32))
    with pytest.raises(PtxHazardError, match=r"^<ptx>:30: error: wgmma.mma_async\S*: uses %f0 as its accumulator "
                                             r"register after the instruction at line 28 accessed it, with no "
                                             r"wgmma.fence between them \(missing wgmma.fence\)"):
        _run(second=filled(_SECOND, FENCE="", SHAPE=_N16))


def test_wgmmas_of_two_shapes_on_one_accumulator_need_a_fence_between_them():
    """Back-to-back wgmmas on the same accumulators are ordered by default only when they have the same
    shape: an m64n8k16 after an m64n16k16 on %f0-%f3 needs a wgmma.fence."""
    text = checked(_KERNEL).replace("    st.global.f32 [%rd1], %f0;\nSECOND", "SECOND")
    text = checked(text).replace("    @%p1 wgmma.wait_group.sync.aligned 0;\n", "")
    text = checked(text).replace("    wgmma.commit_group.sync.aligned;\nSECOND", "SECOND")
    second = filled(_SECOND, SHAPE=_N8)
    same = filled(_SECOND, SHAPE=_N16, FENCE="")

    def run(body):
        return launch(filled(text, WAITERS="128", SECOND=body), "groups", 1, 128,
                      [np.full(128, 7, np.float32)], shared_bytes=4096)[0]

    assert np.array_equal(run(same), np.zeros(128, np.float32))
    assert np.array_equal(run(filled(second, FENCE="wgmma.fence.sync.aligned;")), np.zeros(128, np.float32))
    with pytest.raises(PtxHazardError, match=r"wgmma.mma_async\S*: uses %f0 as its accumulator register after the "
                                             r"wgmma.mma_async at line 25 of another shape or type "
                                             r"\(m64n16k16.f32.bf16.bf16\) accessed it, with no wgmma.fence between "
                                             r"them"):
        run(filled(second, FENCE=""))


_RELEASE = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry release(.param .u64 out)
.reqntid 160, 1, 1
{
    .reg .f32 %f<8>;
    .reg .b64 %rd<4>;
    .reg .b32 %r<4>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 tile[4096];
    .shared .align 8 .b64 empty;
    mov.u32 %r0, tile;
    mov.u32 %r2, empty;
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p0, %r1, 0;
    @%p0 bra INITED;
    mbarrier.init.shared::cta.b64 [%r2], 1;
INITED:
    bar.sync 0;
    setp.ge.u32 %p1, %r1, 128;
    @%p1 bra PRODUCER;
    cvt.u64.u32 %rd0, %r0;
    shr.u64 %rd0, %rd0, 4;
    and.b64 %rd0, %rd0, 0x3FFF;
    or.b64 %rd0, %rd0, 0x0000004000010000;
    setp.ne.b64 %p0, %rd0, %rd0;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd1, %rd1, %rd2;
    setp.ne.u32 %p2, %r1, 96;
    shr.u32 %r3, %r1, 5;
    setp.eq.u32 %p3, %r3, 3;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, %rd0, %rd0, %p0, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
EARLY
    @%p3 bra DETOUR;
BACK:
    wgmma.wait_group.sync.aligned 0;
LATE
    st.global.f32 [%rd1], %f0;
    ret;
DETOUR:
    add.u32 %r3, %r3, 1;
    bra BACK;
PRODUCER:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r2], 0;
    @!%p3 bra PRODUCER;
    st.shared.u32 [%r0], 0;
    ret;
}
"""
_RELEASE_ARRIVE = "    @!%p2 mbarrier.arrive.shared::cta.b64 _, [%r2];"


@pytest.mark.parametrize("schedule", [{}, {"schedule": "adversarial", "seed": 1}], ids=["min-pc", "adversarial"])
def test_a_slot_released_after_the_releasing_warps_own_wait_is_free_whichever_warp_waited_first(schedule):
    """CUTLASS's and FA3's consumer_release: one thread of the warpgroup (thread 96, warp 3) arrives on the empty
    barrier after its own warp's wgmma.wait_group, and the producer then overwrites the slot the wgmma read. Warp
    3 takes a detour, so warps 0-2 complete the group first: the group is one per warpgroup, so warp 3's later
    wait frees the bytes as well [memory_model.WGMMA_WAIT_PER_THREAD] (it was reported as a race when only the
    first wait of the warpgroup counted). The arrive moved before the wait is reported."""
    def run(where):
        text = filled(_RELEASE, **{place: _RELEASE_ARRIVE if place == where else "" for place in ("EARLY", "LATE")})
        return launch(text, "release", 1, 160, [np.full(128, 7, np.float32)], shared_bytes=4096, **schedule)[0]

    assert np.array_equal(run("LATE"), np.zeros(128, np.float32))
    with pytest.raises(PtxHazardError, match=r"st.shared.u32: the store overwrites shared address 0x0(, which| while) "):
        run("EARLY")


_OWN_ROWS = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry own_rows(.param .u64 out)
.reqntid 128, 1, 1
{
    .reg .f32 %f<8>;
    .reg .b64 %rd<5>;
    .reg .b32 %r<8>;
    .reg .pred %p<2>;
    .shared .align 1024 .b8 tile[4096];
    mov.u32 %r0, tile;
    mov.u32 %r1, %tid.x;
    shr.u32 %r2, %r1, 5;
    and.b32 %r3, %r1, 31;
    add.u32 %r2, %r2, SHIFT;
    and.b32 %r2, %r2, 3;
    shl.b32 %r2, %r2, 9;
    shl.b32 %r3, %r3, 4;
    add.u32 %r4, %r0, %r2;
    add.u32 %r4, %r4, %r3;
    mov.u32 %r5, 0;
    st.shared.v4.u32 [%r4], {%r5, %r5, %r5, %r5};
    fence.proxy.async.shared::cta;
    bar.warp.sync -1;
    cvt.u64.u32 %rd0, %r0;
    shr.u64 %rd0, %rd0, 4;
    or.b64 %rd0, %rd0, 0x0000001000080000;
    add.u64 %rd3, %rd0, 128;
    setp.ne.b64 %p0, %rd0, %rd0;
    wgmma.fence.sync.aligned;
    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, %rd0, %rd3, %p0, 1, 1, 0, 0;
    wgmma.commit_group.sync.aligned;
    wgmma.wait_group.sync.aligned 0;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd1, %rd1, %rd2;
    st.global.f32 [%rd1], %f0;
    ret;
}
"""


def test_a_warp_that_stores_and_fences_its_own_rows_of_a_needs_no_barrier():
    """FA3's forward with P through shared memory: each warp stores its 16 rows of the A tile (no-swizzle K-major,
    LBO 128, SBO 256: warp w's rows are bytes 512w..512w+511), fences and meets only its own warp before the wgmma.
    Each warp's part of the wgmma reads its own rows [memory_model.WGMMA_A_ROWS_PER_WARP], so that is enough; a
    warp storing the next warp's rows needs a barrier into it, and is reported without one. (B, read by every
    warp, is a tile nothing wrote.)"""
    def run(shift):
        return launch(filled(_OWN_ROWS, SHIFT=str(shift)), "own_rows", 1, 128, [np.full(128, 7, np.float32)],
                      shared_bytes=4096)[0]

    assert np.array_equal(run(0), np.zeros(128, np.float32))
    with pytest.raises(PtxHazardError, match=r"wgmma operand A reads shared address 0x0, which thread \(32, 0, 0\) of "
                                             r"CTA \(0, 0, 0\) stored through the generic proxy .* no synchronisation "
                                             r"orders the store before this read\) \(thread \(0, 0, 0\)"):
        run(3)  # warp 1 stores warp 0's rows


_CHAIN = checked(_KERNEL[:_KERNEL.index("    wgmma.fence.sync.aligned;")]).replace(
    "entry groups", "entry chain").replace(".reg .b32 %r<2>;", ".reg .b32 %r<16>;") + """    mov.b32 %r4, 0;
    mov.b32 %r5, 0;
    mov.b32 %r6, 0;
    mov.b32 %r7, 0;
EARLY
    wgmma.fence.sync.aligned;
LATE
    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, {%r4,%r5,%r6,%r7}, %rd0, %p0, 1, 1, 0;
    add.s64 %rd0, %rd0, 2;
    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, {%r8,%r9,%r10,%r11}, %rd0, 1, 1, 1, 0;
    add.s64 %rd0, %rd0, 2;
    wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, {%r4,%r5,%r6,%r7}, %rd0, 1, 1, 1, 0;
    wgmma.commit_group.sync.aligned;
WAIT
    st.global.f32 [%rd1], %f0;
    ret;
}
"""
_SECOND_A = """    mov.b32 %r8, 0;
    mov.b32 %r9, 0;
    mov.b32 %r10, 0;
    mov.b32 %r11, 0;"""


def _chain(early: str = _SECOND_A, late: str = "", wait: str = "    wgmma.wait_group.sync.aligned 0;"):
    text = filled(_CHAIN, WAITERS="128", EARLY=early, LATE=late, WAIT=wait)
    return launch(text, "chain", 1, 128, [np.full(128, 7, np.float32)], shared_bytes=4096)[0]


def test_a_chain_of_wgmmas_is_checked_as_each_wgmma_alone():
    """Three wgmmas on one accumulator, register A, nothing between them but descriptor arithmetic: the chain's
    later wgmmas are checked through the state the first left (`WgmmaTracking.chain_continues`), and report
    what each would alone: an A register of the second written after the fence, an accumulator read before the
    wait naming the chain's last wgmma."""
    assert np.array_equal(_chain(), np.zeros(128, np.float32))
    with pytest.raises(PtxHazardError, match=r"^<ptx>:36: error: wgmma.mma_async\S*: uses %r8 as its A-fragment "
                                             r"register after the instruction at line 30 accessed it, with no "
                                             r"wgmma.fence between them \(missing wgmma.fence\)"):
        _chain(early="", late=_SECOND_A)
    with pytest.raises(PtxHazardError, match=r"^<ptx>:41: error: st.global.f32: touches %f0, an accumulator register "
                                             r"of the wgmma.mma_async at line 38, before a wgmma.wait_group covers its "
                                             r"group"):
        _chain(wait="")
