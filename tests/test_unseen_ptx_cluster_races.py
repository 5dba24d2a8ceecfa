"""Hand-written sm_90a PTX with ordering bugs between CTAs, beside correct twins that run clean and right: `red` and
`atom` against a plain read-modify-write from many CTAs (and a relaxed one: no data race, lost updates), a plain
load of a word other CTAs `red` into, distributed shared memory exchanged through a cluster barrier (and without
one, or through a .relaxed arrive), `st.async.v2` into a peer on its mbarrier with a wrong `expect_tx` or parity.
The CTA-local cases: tests/test_unseen_ptx_races.py, tests/test_unseen_ptx_mbarriers.py,
tests/test_unseen_ptx_barriers.py."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxDeadlockError, PtxHazardError

from unseen_ptx import WAIT, line_of, run

# region adding into one word from many CTAs
ADD = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %ctaid.x;
    add.u32 %r2, %r1, 1;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    mul.wide.u32 %rd1, %r0, 4;
    add.u64 %rd2, %rd0, %rd1;
BODY
    ret;
}
"""
"""Each of 4 CTAs adds its index + 1 into word tid of `out` (BODY)."""
RMW = "    ld{s}.global.u32 %r3, [%rd2];\n    add.u32 %r4, %r3, %r2;\n    st{s}.global.u32 [%rd2], %r4;"


@pytest.mark.parametrize("body", ["    red.global.add.u32 [%rd2], %r2;", "    atom.global.add.u32 %r5, [%rd2], %r2;"],
                         ids=["red", "atom"])
def test_atomic_adds_from_many_ctas_sum_right_in_any_order(body):
    out = run(ADD.replace("BODY", body), 4, 32, [np.zeros(32, np.uint32)], cta_order=[2, 0, 3, 1])[0]
    np.testing.assert_array_equal(out, np.full(32, 1 + 2 + 3 + 4))


def test_a_relaxed_read_modify_write_from_many_ctas_is_no_data_race_but_loses_updates():
    """ld.relaxed / st.relaxed are morally strong, so by the memory model no data race, and not reported; the
    read-modify-write is not atomic, and the CTAs of one batch all read 0 before any stores: one CTA's update
    survives (a legal outcome on a GPU too), not the sum."""
    out = run(ADD.replace("BODY", RMW.format(s=".relaxed.gpu")), 4, 32, [np.zeros(32, np.uint32)])[0]
    assert len(set(out.tolist())) == 1 and int(out[0]) in (1, 2, 3, 4)


@pytest.mark.parametrize("order", [None, [3, 2, 1, 0]])
def test_a_plain_read_modify_write_from_many_ctas_is_a_race(order):
    text = ADD.replace("BODY", RMW.format(s=""))
    with pytest.raises(PtxHazardError, match=r"st.global.u32: writes global address 0x\w+ \(argument 0 \(out\) at byte "
                                             r"offset 0\) through the generic proxy, which the instruction at line "
                                             rf"{line_of(text, 'ld.global')} \(thread \(0, 0, 0\) of CTA "
                                             r"\(\d, 0, 0\)\) "
                                             r"read"):
        run(text, 4, 32, [np.zeros(32, np.uint32)], cta_order=order)


def test_a_plain_load_of_a_word_other_ctas_red_into_is_a_hazard():
    """It was a bare PtxExecutionError ("which several other CTAs adds into")."""
    text = ADD.replace("BODY", "    red.global.add.u32 [%rd2], %r2;\n    ld.global.u32 %r3, [%rd2];")
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'ld.global')}: error: ld.global.u32: reads global "
                                             r"address 0x\w+, which several other CTAs add into in this launch \(it "
                                             r"reads before every contribution landed\)"):
        run(text, 4, 32, [np.zeros(32, np.uint32)])


# endregion
# region distributed shared memory in a cluster of two
DSMEM = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 16 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %cluster_ctarank;
    xor.b32 %r10, %r1, 1;
    mov.u32 %r2, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    mapa.shared::cluster.u32 %r6, %r5, %r10;
    mad.lo.u32 %r7, %r1, 1000, %r0;
    st.shared::cluster.u32 [%r6], %r7;
    SYNC
    ld.shared.u32 %r8, [%r5];
    ld.param.u64 %rd2, [out];
    mov.u32 %r11, %ctaid.x;
    mad.lo.u32 %r12, %r11, 64, %r0;
    mul.wide.u32 %rd3, %r12, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r8;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    ret;
}
"""
"""Each CTA's threads store 1000 rank + tid into the peer's `buf`, meet (SYNC), and read their own `buf`."""


@pytest.mark.parametrize("sync", ["barrier.cluster.arrive.release;\n    barrier.cluster.wait.acquire;",
                                  "barrier.cluster.arrive;\n    barrier.cluster.wait;"], ids=["explicit", "default"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 1)])
def test_a_distributed_shared_memory_exchange_through_a_cluster_barrier_is_right(sync, schedule, seed):
    out = run(DSMEM.replace("SYNC", sync), 2, 64, [np.zeros(128, np.uint32)], cluster=2, schedule=schedule,
              seed=seed)[0]
    np.testing.assert_array_equal(out, np.r_[1000 + np.arange(64), np.arange(64)])


@pytest.mark.parametrize("sync", ["", "bar.sync 0;", "fence.acq_rel.cluster;",
                                  "barrier.cluster.arrive.relaxed;\n    barrier.cluster.wait;"],
                         ids=["none", "cta-barrier", "fence-only", "relaxed"])
def test_a_distributed_shared_memory_exchange_without_a_releasing_cluster_barrier_is_reported(sync):
    text = DSMEM.replace("SYNC", sync)
    with pytest.raises(PtxHazardError, match=r"ld.shared.u32: reads shared address 0x0 of CTA \(0, 0, 0\), which the "
                                             rf"instruction at line {line_of(text, 'st.shared::cluster')} \(thread "
                                             r"\(0, 0, 0\) of CTA \(1, 0, 0\)\) wrote"):
        run(text, 2, 64, [np.zeros(128, np.uint32)], cluster=2)


@pytest.mark.parametrize("store", ["atom.shared::cluster.add.u32 %r9, [%r6], %r7;",
                                   "red.shared::cluster.add.u32 [%r6], %r7;",
                                   "st.relaxed.cluster.shared::cluster.u32 [%r6], %r7;"],
                         ids=["atom", "red", "relaxed"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 1)])
def test_a_strong_or_atomic_store_into_the_peer_races_its_plain_read_without_a_barrier(store, schedule, seed):
    """Morally strong only with other strong accesses: the owner's plain ld.shared races it, whichever runs first;
    with the cluster barrier between them it is ordered (an add into a zero word: the peer's value)."""
    text = DSMEM.replace("st.shared::cluster.u32 [%r6], %r7;", store)
    out = run(text.replace("SYNC", "barrier.cluster.arrive;\n    barrier.cluster.wait;"), 2, 64,
              [np.zeros(128, np.uint32)], cluster=2, schedule=schedule, seed=seed)[0]
    np.testing.assert_array_equal(out, np.r_[1000 + np.arange(64), np.arange(64)])
    with pytest.raises(PtxHazardError, match=r"shared address 0x0 of CTA \(0, 0, 0\), which the instruction at line "
                                             r"\d+ \(thread \(0, 0, 0\) of CTA \([01], 0, 0\)\) (wrote|read), and no "
                                             r"synchronisation orders the two"):
        run(text.replace("SYNC", ""), 2, 64, [np.zeros(128, np.uint32)], cluster=2, schedule=schedule, seed=seed)


def test_mapa_to_a_rank_outside_the_launch_cluster_is_a_hazard():
    with pytest.raises(PtxHazardError, match=r"hazard: mapa.shared::cluster.u32: CTA rank 1 is outside the cluster of "
                                             r"1"):
        run(DSMEM.replace("SYNC", ""), 2, 64, [np.zeros(128, np.uint32)])


ST_ASYNC = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<24>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 16 .b8 buf[512];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
    mov.u32 %r2, %cluster_ctarank;
    xor.b32 %r10, %r2, 1;
    mov.u32 %r3, buf;
    mov.u32 %r1, bar;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r1], 1;
    fence.mbarrier_init.release.cluster;
    barrier.cluster.arrive.release;
    barrier.cluster.wait.acquire;
    @%p0 mbarrier.arrive.expect_tx.shared::cta.b64 %rd0, [%r1], EXPECT;
    shl.b32 %r4, %r0, 3;
    add.u32 %r5, %r3, %r4;
    mapa.shared::cluster.u32 %r6, %r5, %r10;
    mapa.shared::cluster.u32 %r13, %r1, %r10;
    mad.lo.u32 %r7, %r2, 1000, %r0;
    add.u32 %r14, %r7, 500;
    st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.u32 [%r6], {%r7, %r14}, [%r13];
    WAIT
    ld.shared.v2.u32 {%r8, %r9}, [%r5];
    add.u32 %r8, %r8, %r9;
    ld.param.u64 %rd2, [out];
    mov.u32 %r11, %ctaid.x;
    mad.lo.u32 %r12, %r11, 64, %r0;
    mul.wide.u32 %rd3, %r12, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r8;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    ret;
}
""".replace("WAIT", WAIT)
"""Each thread st.async's two words (v2) into the peer's `buf`, completing 8 bytes on the peer's barrier, which
expects EXPECT bytes; each CTA waits on its own barrier (PARITY) and reads its words."""


def test_st_async_v2_into_the_peer_completes_on_its_barrier():
    out = run(ST_ASYNC.replace("EXPECT", "512").replace("PARITY", "0"), 2, 64, [np.zeros(128, np.uint32)],
              cluster=2)[0]
    np.testing.assert_array_equal(out, np.r_[2 * (1000 + np.arange(64)) + 500, 2 * np.arange(64) + 500])


@pytest.mark.parametrize("expect, parity, error, message", [
    (256, 0, PtxHazardError, r"completed phase 0 with 32 copies \(256 bytes\) still in flight on it: its expect_tx "
                             r"\(the arrive at line \d+, thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) announced fewer "
                             r"bytes"),
    (1024, 0, PtxDeadlockError, r"its expect_tx announced 512 bytes more than the copies delivered"),
    (512, 1, PtxHazardError, r"ld.shared.v2.u32: reads shared address 0x0 of CTA \(0, 0, 0\) before it was signalled: "
                             r"the st.async at line \d+ \(thread \(0, 0, 0\) of CTA \(1, 0, 0\)\) into it has not "
                             r"completed"),
], ids=["expect-short", "expect-long", "wrong-parity"])
def test_st_async_with_a_wrong_expect_tx_or_parity_is_reported(expect, parity, error, message):
    text = ST_ASYNC.replace("EXPECT", str(expect)).replace("PARITY", str(parity))
    with pytest.raises(error, match=message):
        run(text, 2, 64, [np.zeros(128, np.uint32)], cluster=2)


# endregion


# region mbarrier inits released by fence.mbarrier_init before a .relaxed cluster arrive
INIT = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, bar;
    setp.ne.u32 %p0, %r0, 0;
    @%p0 bra after_init;
    mov.u32 %r2, 64;
    mbarrier.init.shared::cta.b64 [%r1], %r2;
after_init:
    FENCE
    barrier.cluster.arrive.relaxed.aligned;
    barrier.cluster.wait.aligned;
    mbarrier.arrive.shared::cta.b64 %rd1, [%r1];
    WAIT
    ld.param.u64 %rd2, [out];
    mov.u32 %r11, %ctaid.x;
    mad.lo.u32 %r12, %r11, 64, %r0;
    mul.wide.u32 %rd3, %r12, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r12;
    ret;
}
""".replace("WAIT", WAIT.replace("PARITY", "0"))
"""CUTLASS's cluster kernels' start: thread 0 inits an mbarrier, `fence_barrier_init(); cluster_arrive_relaxed();
cluster_wait();` (FENCE), no bar.sync, then every thread arrives on it and waits."""


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 1)])
def test_a_fence_mbarrier_init_before_a_relaxed_cluster_arrive_orders_the_init(schedule, seed):
    """fence.mbarrier_init.release.cluster is a release of the thread's inits that the .relaxed arrive carries to
    every wait (a release fence, then the arrive), inside the CTA too: CUTLASS's cluster GEMMs start this way.
    The merged unseen22r rule (a .relaxed arrive releases nothing but a general release fence) reported it."""
    text = INIT.replace("FENCE", "fence.mbarrier_init.release.cluster;")
    out = run(text, 2, 64, [np.zeros(128, np.uint32)], cluster=2, schedule=schedule, seed=seed)[0]
    np.testing.assert_array_equal(out, np.arange(128))


def test_without_the_fence_a_relaxed_cluster_arrive_leaves_the_init_unordered():
    text = INIT.replace("FENCE", "")
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'mbarrier.arrive')}: error: mbarrier.arrive"
                                             r".*which the mbarrier.init at line \d+ \(thread \(0, 0, 0\) of CTA "
                                             r"\(\d, 0, 0\)\) initialises, with no synchronisation ordering the init"):
        run(text, 2, 64, [np.zeros(128, np.uint32)], cluster=2)
# endregion
