"""Thread-block clusters in the PTX executor: the cluster special registers, distributed shared memory through
`mapa`, `barrier.cluster`, remote mbarrier arrives, TMA multicast and bulk forwarding between CTAs, the
launch limits the driver enforces, and the cluster hazards (a multicast mask bit outside the cluster, a remote
arrive before the cluster barrier that follows mbarrier.init, a CTA exiting while a remote operation on its
mbarriers is pending)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxExecutionError, PtxHazardError, TensorMapArg, launch
from tessera.sm90 import facts

from race_templates import INIT_LOCAL_BARRIER, REMOTE_ARRIVE_THEN_WAIT, SYNC_CLUSTER, WAIT_LOCAL_BARRIER, ptx_entry
from text_edits import checked, filled

REGS = """
    .reg .b32 %r<24>;
    .reg .b64 %rd<16>;
    .reg .pred %p<8>;
"""


def kernel(body: str, params: str = ".param .u64 out", extra: str = "", directives: str = "") -> str:
    return ptx_entry(body, REGS, params, extra, directives)


STORE_R9 = """
    ld.param.u64 %rd0, [out];
    mov.u32 %r15, %ctaid.x;
    mov.u32 %r14, %ntid.x;
    mad.lo.s32 %r15, %r15, %r14, %r0;
    mul.wide.u32 %rd1, %r15, 4;
    add.s64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r9;
"""


def per_thread(body: str, grid, block, cluster=None, extra: str = "", shared_bytes: int = 0, **kw):
    """Run `body` (thread index in %r0, result left in %r9) and return %r9 of every thread."""
    text = kernel("mov.u32 %r0, %tid.x;\n" + body + STORE_R9, extra=extra)
    n = int(np.prod(grid)) * block
    return launch(text, "k", grid, block, [np.zeros(n, np.uint32)], shared_bytes=shared_bytes, cluster=cluster,
                  **kw)[0]


# region special registers and launch limits
@pytest.mark.parametrize("special,expected", [
    ("%cluster_ctarank", lambda cta: cta % 2),
    ("%cluster_nctarank", lambda cta: 2),
    ("%clusterid.x", lambda cta: cta // 2),
    ("%nclusterid.x", lambda cta: 3),
    ("%cluster_ctaid.x", lambda cta: cta % 2),
    ("%cluster_nctaid.x", lambda cta: 2),
    ("%is_explicit_cluster", lambda cta: 1),
    ("%ctaid.x", lambda cta: cta),
])
def test_cluster_special_registers_describe_a_cta_in_its_cluster(special, expected):
    out = per_thread(f"mov.u32 %r9, {special};", grid=6, block=32, cluster=(2, 1, 1))
    np.testing.assert_array_equal(out, np.repeat([expected(c) for c in range(6)], 32))


def test_cluster_rank_is_x_fastest_in_a_2d_cluster():
    text = kernel("""
    mov.u32 %r0, %tid.x;
    mov.u32 %r9, %cluster_ctarank;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ctaid.y;
    mov.u32 %r3, %nctaid.x;
    mad.lo.s32 %r15, %r2, %r3, %r1;
    ld.param.u64 %rd0, [out];
    mul.wide.u32 %rd1, %r15, 4;
    add.s64 %rd0, %rd0, %rd1;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 st.global.u32 [%rd0], %r9;
    """)
    out = launch(text, "k", (4, 4), 32, [np.zeros(16, np.uint32)], cluster=(2, 2, 1))[0].reshape(4, 4)
    np.testing.assert_array_equal(out, [[0, 1, 0, 1], [2, 3, 2, 3], [0, 1, 0, 1], [2, 3, 2, 3]])


def test_a_launch_without_a_cluster_is_one_cta_per_cluster_and_not_explicit():
    out = per_thread("mov.u32 %r9, %cluster_nctarank; mov.u32 %r1, %is_explicit_cluster; add.u32 %r9, %r9, %r1;"
                     "mov.u32 %r1, %nclusterid.x; mul.lo.u32 %r1, %r1, 10; add.u32 %r9, %r9, %r1;", grid=3, block=32)
    assert (out == 31).all()


def test_reqnctapercluster_gives_the_cluster_shape_and_must_agree_with_the_launch():
    text = kernel("mov.u32 %r0, %tid.x; mov.u32 %r9, %cluster_nctarank;" + STORE_R9,
                  directives=" .reqnctapercluster 2, 1, 1")
    assert (launch(text, "k", 4, 32, [np.zeros(128, np.uint32)])[0] == 2).all()
    with pytest.raises(ValueError, match="requires clusters of"):
        launch(text, "k", 4, 32, [np.zeros(128, np.uint32)], cluster=(4, 1, 1))


@pytest.mark.parametrize("grid,cluster,message", [
    ((6, 1, 1), (4, 1, 1), "does not divide grid"),
    ((4, 3, 1), (1, 2, 1), "grid y = 3 is not a multiple of cluster y = 2"),
    ((16, 1, 1), (16, 1, 1), "more than the 8 a cluster may hold .up to 16 with the non-portable"),
])
def test_clusters_the_driver_refuses_are_refused(grid, cluster, message):
    text = kernel("ret;")
    with pytest.raises(ValueError, match=message):
        launch(text, "k", grid, 32, [np.zeros(1, np.uint32)], cluster=cluster)


def test_the_non_portable_opt_in_allows_16_ctas_and_no_more():
    out = per_thread("mov.u32 %r9, %cluster_nctarank;", grid=16, block=32, cluster=16,
                     non_portable_cluster_size=True)
    assert (out == facts.MAX_NONPORTABLE_CLUSTER_SIZE).all()
    with pytest.raises(ValueError, match="more than the 16"):
        per_thread("mov.u32 %r9, 0;", grid=32, block=32, cluster=32, non_portable_cluster_size=True)


# endregion
# region distributed shared memory and barrier.cluster
def test_mapa_stores_reach_the_peer_and_the_cluster_barrier_orders_them():
    """Each CTA writes (its rank + 1) * 100 + tid into its peer's buffer, then reads its own after the barrier."""
    body = """
    mov.u32 %r1, %cluster_ctarank;
    xor.b32 %r2, %r1, 1;
    mov.u32 %r3, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r3, %r3, %r4;
    mapa.shared::cluster.u32 %r5, %r3, %r2;
    add.u32 %r6, %r1, 1;
    mul.lo.u32 %r6, %r6, 100;
    add.u32 %r6, %r6, %r0;
    st.shared::cluster.u32 [%r5], %r6;
    """ + SYNC_CLUSTER + """
    ld.shared.u32 %r9, [%r3];
    """ + SYNC_CLUSTER
    out = per_thread(body, grid=4, block=64, cluster=2, extra=".shared .align 4 .b32 buf[64];").reshape(4, 64)
    peer_rank = np.array([1, 0, 1, 0])
    np.testing.assert_array_equal(out, (peer_rank[:, None] + 1) * 100 + np.arange(64))


def test_generic_mapa_and_getctarank():
    body = """
    mov.u64 %rd2, buf;
    cvta.shared.u64 %rd3, %rd2;
    mapa.u64 %rd4, %rd3, 2;
    st.u32 [%rd4+4], %r0;
    getctarank.u64 %r9, %rd4;
    mov.u32 %r7, buf;
    getctarank.shared::cluster.u32 %r8, %r7;
    mad.lo.u32 %r9, %r8, 10, %r9;
    """ + SYNC_CLUSTER
    out = per_thread(body, grid=4, block=1, cluster=4, extra=".shared .align 4 .b32 buf[4];")
    np.testing.assert_array_equal(out, [2, 12, 22, 32])  # rank 2, plus 10 x own rank


def test_barrier_cluster_waits_for_every_cta_of_the_cluster():
    """CTA rank 1 writes into rank 0 only after a long loop; rank 0 reads after the cluster barrier."""
    body = """
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, buf;
    setp.eq.u32 %p1, %r1, 1;
    @!%p1 bra SYNC;
    mov.u32 %r10, 0;
LOOP:
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p2, %r10, 50;
    @%p2 bra LOOP;
    mapa.shared::cluster.u32 %r5, %r3, 0;
    st.shared::cluster.u32 [%r5], %r10;
SYNC:
    barrier.cluster.arrive;
    barrier.cluster.wait;
    ld.shared.u32 %r9, [%r3];
    """ + SYNC_CLUSTER
    out = per_thread(body, grid=2, block=32, cluster=2, extra=".shared .align 4 .b32 buf[1];")
    assert (out[:32] == 50).all() and (out[32:] == 0).all()


def test_exited_threads_do_not_block_the_cluster_barrier():
    body = """
    mov.u32 %r1, %cluster_ctarank;
    setp.eq.u32 %p1, %r1, 1;
    setp.ge.u32 %p2, %r0, 16;
    and.pred %p3, %p1, %p2;
    mov.u32 %r9, 7;
    @%p3 bra DONE;
    """ + SYNC_CLUSTER + """
    mov.u32 %r9, 1;
DONE:
    """
    out = per_thread(body, grid=2, block=32, cluster=2)
    assert (out[:48] == 1).all() and (out[48:] == 7).all()


def test_waiting_without_arriving_stops_the_run():
    with pytest.raises(PtxExecutionError, match="barrier.cluster.wait without a barrier.cluster.arrive"):
        per_thread("barrier.cluster.wait; mov.u32 %r9, 0;", grid=2, block=32, cluster=2)


def test_a_missing_arrive_in_a_peer_is_a_deadlock_naming_the_cluster_wait():
    """Rank 1 waits on an mbarrier nobody arrives at instead of arriving at the cluster barrier."""
    body = """
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r20, bar;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra ARRIVE;
    mbarrier.init.shared::cta.b64 [%r20], 1;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p6, [%r20], 0;
    @!%p6 bra WAIT;
ARRIVE:
    barrier.cluster.arrive;
    barrier.cluster.wait;
    mov.u32 %r9, 0;
    """
    with pytest.raises(PtxExecutionError, match=r"deadlock(.|\n)*CTA \(0, 0, 0\): waiting at barrier.cluster.wait"):
        per_thread(body, grid=2, block=1, cluster=2, extra=".shared .align 8 .b64 bar;")


# endregion
# region mbarriers across the cluster, multicast and forwarding

def test_remote_mbarrier_arrive_completes_the_peers_phase():
    """Rank 1 writes into rank 0's buffer and arrives on rank 0's barrier; rank 0 waits on it and reads."""
    body = INIT_LOCAL_BARRIER.format(count=1) + """
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, buf;
    setp.eq.u32 %p1, %r1, 1;
    @!%p1 bra CONSUMER;
    mapa.shared::cluster.u32 %r5, %r3, 0;
    st.shared::cluster.u32 [%r5], 41;
    mapa.shared::cluster.u32 %r6, %r20, 0;
    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r6];
    mov.u32 %r9, 0;
    bra END;
CONSUMER:
""" + WAIT_LOCAL_BARRIER.format(tag="0", parity=0) + """
    ld.shared.u32 %r9, [%r3];
END:
    """ + SYNC_CLUSTER
    out = per_thread(body, grid=2, block=1, cluster=2, extra=".shared .align 8 .b64 bar; .shared .align 4 .b32 buf[1];")
    np.testing.assert_array_equal(out, [41, 0])


MULTICAST = """
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, tile;
    @%p7 mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r20], 2048;
    // rank r loads rows [8r, 8r + 8) of the 16x32 f32 box... as two 8-row boxes multicast to both CTAs
    shl.b32 %r4, %r1, 3;
    shl.b32 %r5, %r1, 10;
    add.u32 %r6, %r3, %r5;
    mov.u64 %rd2, tmap;
    cvta.param.u64 %rd3, %rd2;
    mov.u16 %rs1, {mask};
    @%p7 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%r6], [%rd3, {{0, %r4}}], [%r20], %rs1;
""" + WAIT_LOCAL_BARRIER.format(tag="0", parity=0) + """
    shl.b32 %r7, %r0, 2;
    add.u32 %r7, %r3, %r7;
    ld.shared.u32 %r9, [%r7];
""" + SYNC_CLUSTER


def multicast_kernel(mask: str) -> str:
    body = "mov.u32 %r0, %tid.x;\n" + INIT_LOCAL_BARRIER.format(count=1) + MULTICAST.format(mask=mask) + STORE_R9
    return checked(kernel(body, params=".param .u64 out, .param .align 64 .b8 tmap[128]",
                          extra=".shared .align 1024 .b8 tile[2048]; .shared .align 8 .b64 bar;")).replace(
        "    .reg .pred %p<8>;", "    .reg .pred %p<8>;\n    .reg .b16 %rs<4>;")


def test_multicast_lands_in_every_member_and_completes_each_members_barrier():
    """Each of two CTAs loads half of a 16x32 f32 tensor with mask 0b11: both hold the whole tensor, and each
    CTA's barrier (expecting 2048 bytes) completes from the two halves."""
    x = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    out = launch(multicast_kernel("3"), "k", 2, 512, [np.zeros(1024, np.uint32), TensorMapArg.tiled(x, box=(32, 8))],
                 cluster=2)[0]
    np.testing.assert_array_equal(out.view(np.float32).reshape(2, 512), np.stack([x.reshape(-1)] * 2))


def test_multicast_mask_bit_outside_the_cluster_is_a_hazard():
    x = np.zeros((16, 32), np.float32)
    with pytest.raises(PtxExecutionError, match="hazard: .*mask 0x7 has a bit for a CTA rank outside the cluster of 2"):
        launch(multicast_kernel("7"), "k", 2, 512, [np.zeros(1024, np.uint32), TensorMapArg.tiled(x, box=(32, 8))],
               cluster=2)


def test_bulk_copy_forwards_shared_memory_to_the_peer():
    """Rank 0 fills 64 bytes and forwards them with cp.async.bulk.shared::cluster.shared::cta into rank 1, whose
    barrier (expecting 64 bytes) completes."""
    body = INIT_LOCAL_BARRIER.format(count=1) + """
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, src;
    mov.u32 %r4, dst;
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
    mov.u32 %r9, 0;
    bra END;
RECEIVER:
    @%p7 mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r20], 64;
""" + WAIT_LOCAL_BARRIER.format(tag="0", parity=0) + """
    shl.b32 %r5, %r0, 2;
    add.u32 %r5, %r4, %r5;
    ld.shared.u32 %r9, [%r5];
END:
    """ + SYNC_CLUSTER
    out = per_thread(body, grid=2, block=16, cluster=2,
                     extra=".shared .align 128 .b8 src[64]; .shared .align 128 .b8 dst[64]; .shared .align 8 .b64 bar;")
    np.testing.assert_array_equal(out, [0] * 16 + list(range(1000, 1016)))


# endregion
# region hazards
def test_remote_arrive_before_the_cluster_barrier_that_follows_init_is_a_hazard():
    """Rank 1 arrives on rank 0's barrier before the cluster barrier after rank 0's mbarrier.init."""
    body = """
    mov.u32 %r20, bar;
    mov.u32 %r1, %cluster_ctarank;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r20], 1;
    @%p1 fence.mbarrier_init.release.cluster;
    @%p1 bra SYNC;
    mapa.shared::cluster.u32 %r6, %r20, 0;
    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r6];
SYNC:
    """ + SYNC_CLUSTER + "mov.u32 %r9, 0;"
    with pytest.raises(PtxExecutionError, match=r"hazard: mbarrier.arrive.*a remote mbarrier.arrive on the mbarrier "
                                                r"at shared address 0x0 of CTA \(0, 0, 0\) before the cluster barrier "
                                                r"that follows its mbarrier.init .*thread \(0, 0, 0\) of CTA \(1, 0, 0\)"):
        per_thread(body, grid=2, block=1, cluster=2, extra=".shared .align 8 .b64 bar;")


def test_the_same_arrive_after_the_cluster_barrier_is_clean():
    body = INIT_LOCAL_BARRIER.format(count=1) + REMOTE_ARRIVE_THEN_WAIT
    out = per_thread(body, grid=2, block=1, cluster=2, extra=".shared .align 8 .b64 bar;")
    np.testing.assert_array_equal(out, [5, 5])


def test_a_cta_exiting_with_a_remote_arrive_on_its_barrier_pending_is_a_hazard():
    """Rank 1 arrives on rank 0's barrier; rank 0 exits without waiting on it and without a cluster barrier
    after the arrive (the bug CUTLASS's producer tail and final cluster sync prevent)."""
    body = INIT_LOCAL_BARRIER.format(count=1) + """
    mov.u32 %r1, %cluster_ctarank;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra END;
    mapa.shared::cluster.u32 %r6, %r20, 0;
    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r6];
END:
    mov.u32 %r9, 0;
    """
    with pytest.raises(PtxExecutionError, match=r"hazard: CTA \(0, 0, 0\) exited while a remote mbarrier.arrive on "
                                                r"its mbarrier at shared address 0x0 was pending.*CTA \(1, 0, 0\)"):
        per_thread(body, grid=2, block=1, cluster=2, extra=".shared .align 8 .b64 bar;")


@pytest.mark.parametrize("rank0, rank1, reported", [
    (SYNC_CLUSTER, "REMOTE" + SYNC_CLUSTER, False),  # the final cluster sync after the release: correct
    ("barrier.cluster.arrive.release.aligned;", "REMOTE" + SYNC_CLUSTER, True),  # rank 0's final wait deleted
    (SYNC_CLUSTER, "barrier.cluster.arrive.release.aligned;\nREMOTE\nbarrier.cluster.wait.acquire.aligned;", True),
], ids=["final-sync", "exit-wait-deleted", "release-after-the-arrive"])
def test_a_cta_exits_only_after_waiting_for_a_cluster_barrier_its_peers_reached_after_their_remote_arrives(
        rank0, rank1, reported):
    """[memory_model.CLUSTER_EXIT_WAIT] Rank 1 releases a slot on rank 0's mbarrier (a remote arrive, as a
    consumer releasing a multicast slot does); nobody waits on that phase, so only the final cluster barrier
    orders it before rank 0 exits: rank 0 must wait for it, and rank 1 must arrive at it after the release.
    Exited threads do not hold a cluster barrier up, so rank 0 arriving and exiting lets the phase complete
    whenever rank 1 arrives, whatever order the executor happened to run them in (the CTA simulator's
    'arrivals pending at exit'; Tessera's cluster seed with the exit cluster wait deleted)."""
    remote = ("mapa.shared::cluster.u32 %r6, %r20, 0;\n"
              "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r6];\n")
    body = INIT_LOCAL_BARRIER.format(count=1) + f"""
    mov.u32 %r1, %cluster_ctarank;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra RANK0;
    {filled(rank1, REMOTE=remote)}
    bra END;
RANK0:
    {rank0}
END:
    mov.u32 %r9, 7;
    """
    run = lambda: per_thread(body, grid=2, block=1, cluster=2, extra=".shared .align 8 .b64 bar;")  # noqa: E731
    if not reported:
        np.testing.assert_array_equal(run(), [7, 7])
        return
    with pytest.raises(PtxExecutionError, match=r"hazard: .*CTA \(0, 0, 0\)(, which has exited| exited while a remote "
                                                r"mbarrier.arrive on its mbarrier at shared address 0x0 was pending)"):
        run()


def test_a_cta_exiting_while_a_multicast_into_it_is_pending_is_a_hazard():
    """Both CTAs multicast into each other, but rank 1 exits without waiting for its barrier (and without
    reading what lands: a read would be reported first, as a read before the TMA signalled)."""
    text = multicast_kernel("3")
    text = checked(text).replace("WAIT0:",
                                 "mov.u32 %r12, %cluster_ctarank; setp.eq.u32 %p5, %r12, 1; @%p5 bra SKIP;\nWAIT0:")
    head, brace, tail = text.rpartition("}")
    text = head + "SKIP:\n    ret;\n" + brace + tail
    text = checked(text).replace("barrier.cluster.arrive.release.aligned;\n"
                                 "    barrier.cluster.wait.acquire.aligned;\n\n    ld.param", "    ld.param")
    x = np.zeros((16, 32), np.float32)
    with pytest.raises(PtxExecutionError, match=r"hazard: CTA \(1, 0, 0\) exited while a copy into its shared memory "
                                                r"on its mbarrier at shared address 0x800 was pending"):
        launch(text, "k", 2, 512, [np.zeros(1024, np.uint32), TensorMapArg.tiled(x, box=(32, 8))], cluster=2)


# Each CTA's thread 0 multicasts its half of a 16x32 f32 box into both CTAs (mask 0b11) on the full barrier `bar`;
# every thread reads its word of the first row and releases the slot on the `empty` barriers (64 arrivals each):
# RELEASE; thread 0 waits on its own empty barrier (EMPTY_WAIT) and multicasts again; every thread reads again.
_REFILL = checked(INIT_LOCAL_BARRIER.format(count=1)).replace(
    "    @%p7 fence", "    mov.u32 %r21, empty;\n    @%p7 mbarrier.init.shared::cta.b64 [%r21], 64;\n    @%p7 fence") + """
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, tile;
    shl.b32 %r4, %r1, 3;
    shl.b32 %r5, %r1, 10;
    add.u32 %r6, %r3, %r5;
    mov.u64 %rd2, tmap;
    cvta.param.u64 %rd3, %rd2;
    mov.u16 %rs1, 3;
    @%p7 mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r20], 2048;
    @%p7 cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%r6], [%rd3, {0, %r4}], [%r20], %rs1;
""" + WAIT_LOCAL_BARRIER.format(tag="0", parity=0) + """
    shl.b32 %r7, %r0, 2;
    add.u32 %r7, %r3, %r7;
    ld.shared.u32 %r9, [%r7];
RELEASE
    @!%p7 bra CONSUME;
EMPTY_WAIT
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r20], 2048;
    cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%r6], [%rd3, {0, %r4}], [%r20], %rs1;
CONSUME:
""" + WAIT_LOCAL_BARRIER.format(tag="1", parity=1) + """
    ld.shared.u32 %r12, [%r7+128];
    add.u32 %r9, %r9, %r12;
""" + SYNC_CLUSTER
_RELEASE_TO = """
    mapa.shared::cluster.u32 %r10, %r21, {0};
    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r10];
    mapa.shared::cluster.u32 %r11, %r21, {1};
    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r11];
"""
_EMPTY_WAIT = """
EMPTY:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p5, [%r21], 0;
    @!%p5 bra EMPTY;
"""


@pytest.mark.parametrize("release, empty_wait, reported", [
    (_RELEASE_TO.format(0, 1), _EMPTY_WAIT, False),  # every thread releases both producers' slots: correct
    (_RELEASE_TO.format("%r1", "%r1"), _EMPTY_WAIT, True),  # both releases sent home: the counts stay right
    (_RELEASE_TO.format(0, 1), "", True),  # the producer does not wait for the release
    (SYNC_CLUSTER, "", False),  # a cluster barrier orders every read before the refills
    # CUTLASS's form: .release at the default .cta scope and a .cta wait, which by the letter do not synchronize
    # across CTAs [memory_model.MBARRIER_ARRIVE_SCOPE]; the executor follows NVIDIA's kernels and accepts it
    (_RELEASE_TO.format(0, 1).replace(".release.cluster", ""), _EMPTY_WAIT.replace(".acquire.cluster", ""), False),
], ids=["released-to-both", "released-home", "no-empty-wait", "cluster-barrier", "cta-scope-as-cutlass"])
def test_a_multicast_into_a_peer_follows_the_peers_release_of_the_slot(release, empty_wait, reported):
    """[memory_model.WRITE_ORDER] A multicast refill writes the peer's slot too, so the issuing producer must be
    ordered after the peer's reads of it: the peer's threads arrive (remotely) on the producer's empty barrier,
    as CUTLASS's cluster pipelines do. Sent to their own CTA's barrier instead, every arrival count is still
    right, but nothing orders the peer's reads before the refill, whatever order the executor ran them in."""
    if not empty_wait and "mapa" in release:  # the releases' %r21 is set by the empty wait: their own register
        release = checked(release).replace("%r21", "%r22").replace("    mapa", "    mov.u32 %r22, empty;\n    mapa", 1)
    # without the empty wait the refill races the issuing CTA's own reads too, which may come first
    peer = r"\(1, 0, 0\)" if empty_wait else r"\(\d, 0, 0\)"
    _run_refill(filled(_REFILL, RELEASE=release, EMPTY_WAIT=empty_wait), "", reported,
                peer, r" .*\(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\)")


@pytest.mark.parametrize("release, empty_wait", [
    (_RELEASE_TO.format(0, 1).replace(".release.cluster", ".relaxed.cluster"), _EMPTY_WAIT),
    (_RELEASE_TO.format(0, 1), _EMPTY_WAIT.replace(".acquire.cluster", ".relaxed.cluster")),
], ids=["relaxed-arrive", "relaxed-wait"])
def test_a_relaxed_mbarrier_arrive_or_wait_is_refused_by_name(release, empty_wait):
    """[memory_model.MBARRIER_ARRIVE_SCOPE] A .relaxed arrive or wait orders nothing: only with a release fence
    before it (or an acquire fence after it) is it a release (acquire) pattern, which the executor does not model,
    so it refuses the instruction by name rather than count it as a release (or acquire) it is not."""
    with pytest.raises(PtxExecutionError, match=r"not supported by the PTX executor: mbarrier\.(arrive|try_wait)"
                                                r"\.relaxed: it orders nothing"):
        _run_refill(filled(_REFILL, RELEASE=release, EMPTY_WAIT=empty_wait), "", False)


def _run_refill(body: str, extra_shared: str, reported: bool, peer: str = r"\(\d, 0, 0\)", tail: str = ""):
    """Runs a `_REFILL` kernel body on a cluster of two: unreported, each CTA stores both rows' sum; reported, the
    multicast refill is named as racing a read of CTA `peer` (`tail`: more of the message to match)."""
    text = checked(kernel("mov.u32 %r0, %tid.x;\n" + body + STORE_R9,
                          params=".param .u64 out, .param .align 64 .b8 tmap[128]",
                          extra=".shared .align 1024 .b8 tile[2048]; .shared .align 8 .b64 bar; "
                                ".shared .align 8 .b64 empty;" + extra_shared)).replace(
        "    .reg .pred %p<8>;", "    .reg .pred %p<8>;\n    .reg .b16 %rs<4>;")
    x = np.arange(16 * 32, dtype=np.float32).reshape(16, 32)
    run = lambda: launch(text, "k", 2, 32, [np.zeros(64, np.uint32), TensorMapArg.tiled(x, box=(32, 8))],  # noqa: E731
                         cluster=2)[0]
    if not reported:
        words = x.reshape(-1).view(np.uint32)
        np.testing.assert_array_equal(run(), np.tile(words[:32] + words[32:64], 2))
        return
    with pytest.raises(PtxExecutionError, match=r"cp.async.bulk.tensor.*multicast::cluster: the TMA load writes "
                                                r"shared address 0x[0-9a-f]+ (of CTA " + peer + r")?, which the "
                                                r"instruction at line \d+ \(thread \(\d+, 0, 0\) of CTA " + peer + r"\) "
                                                r"read, and no synchronisation orders the two" + tail):
        run()


@pytest.mark.parametrize("sync, reported", [
    ("", True),  # nothing orders rank 0's read of its word before rank 1's store into it
    ("RELEASE", False),  # rank 0 releases the word on rank 1's barrier, which rank 1 waits on before storing
], ids=["unordered", "released"])
def test_a_distributed_shared_memory_store_follows_the_owners_read(sync, reported):
    """[memory_model.WRITE_ORDER] Rank 0 reads its word, then rank 1 stores into it through `mapa` (a distributed
    shared memory store): the owner's read must happen before the peer's store, through a remote arrive on the
    peer's barrier that the peer waits on (its clocks travel as what the peer knows of rank 0)."""
    release = ("mapa.shared::cluster.u32 %r6, %r20, 1;\n"
               "    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r6];") if sync else ""
    wait = WAIT_LOCAL_BARRIER.format(tag="0", parity=0) if sync else ""
    body = INIT_LOCAL_BARRIER.format(count=1) + f"""
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, buf;
    setp.eq.u32 %p1, %r1, 1;
    @%p1 bra WRITER;
    ld.shared.u32 %r9, [%r3];
    {release}
    bra END;
WRITER:
    {wait}
    mapa.shared::cluster.u32 %r5, %r3, 0;
    st.shared::cluster.u32 [%r5], 41;
    mov.u32 %r9, 0;
END:
    """ + SYNC_CLUSTER
    extra = ".shared .align 8 .b64 bar; .shared .align 4 .b32 buf[1];"
    run = lambda: per_thread(body, grid=2, block=1, cluster=2, extra=extra)  # noqa: E731
    if not reported:
        np.testing.assert_array_equal(run(), [0, 0])
        return
    with pytest.raises(PtxExecutionError, match=r"st.shared::cluster.u32: writes shared address 0x\w+ of CTA \(0, 0, "
                                                r"0\), which the instruction at line \d+ \(thread \(0, 0, 0\) of CTA "
                                                r"\(0, 0, 0\)\) read, and no synchronisation orders the two"):
        run()


def test_access_to_a_rank_outside_the_cluster_is_a_hazard():
    with pytest.raises(PtxExecutionError, match="hazard: mapa.shared::cluster.u32: CTA rank 2 is outside the cluster of 2"):
        per_thread("mov.u32 %r3, buf; mapa.shared::cluster.u32 %r5, %r3, 2; mov.u32 %r9, 0;", grid=2, block=1,
                   cluster=2, extra=".shared .align 4 .b32 buf[1];")


# endregion


def _st_async(owner_reads_first: bool = False, owner_waits: bool = True) -> np.ndarray:
    """Rank 1 stores 41 into rank 0's word with `st.async`, completing 4 bytes on rank 0's barrier, which rank 0
    expects and (`owner_waits`) waits on before reading the word."""
    body = INIT_LOCAL_BARRIER.format(count=1) + f"""
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, buf;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra OWNER;
    mapa.shared::cluster.u32 %r5, %r3, 0;
    mapa.shared::cluster.u32 %r6, %r20, 0;
    mov.u32 %r7, 41;
    st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r5], %r7, [%r6];
    mov.u32 %r9, 0;
    bra END;
OWNER:
    {"ld.shared.u32 %r8, [%r3];" if owner_reads_first else ""}
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r20], 4;
    {WAIT_LOCAL_BARRIER.format(tag="0", parity=0) if owner_waits else ""}
    ld.shared.u32 %r9, [%r3];
END:
    """ + SYNC_CLUSTER
    return per_thread(body, grid=2, block=1, cluster=2, extra=".shared .align 8 .b64 bar; .shared .align 4 .b32 buf[1];")


def test_st_async_stores_into_a_peer_and_completes_on_its_barrier():
    np.testing.assert_array_equal(_st_async(), [41, 0])


@pytest.mark.parametrize("kw", [{"owner_waits": False}, {"owner_reads_first": True}], ids=["no-wait", "read-first"])
def test_st_async_bytes_are_in_flight_until_the_owner_waits(kw):
    with pytest.raises(PtxExecutionError, match=r"ld.shared.u32: reads shared address 0x8 of CTA \(0, 0, 0\) before it "
                                                r"was signalled: the st.async at line \d+ \(thread \(0, 0, 0\) of CTA "
                                                r"\(1, 0, 0\)\) into it has not completed"):
        _st_async(**kw)


def _red_async(owner_waits: bool = True, owner_store: bool = False, op: str = "add.u32", value: int = 41,
               owner_reads_first: bool = False, **kw) -> np.ndarray:
    """Both CTAs update rank 0's word (holding 5) with `red.async` (rank 0 with 1, rank 1 with `value`), each
    completing 4 bytes on rank 0's barrier, which rank 0 expects (8 bytes) and (`owner_waits`) waits on before
    reading the word; `owner_store`: rank 0 stores into the word after its red.async and before its wait."""
    body = INIT_LOCAL_BARRIER.format(count=1) + f"""
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, buf;
    setp.eq.u32 %p1, %r1, 0;
    mapa.shared::cluster.u32 %r5, %r3, 0;
    mapa.shared::cluster.u32 %r6, %r20, 0;
    selp.u32 %r7, 1, {value}, %p1;
    @%p1 bra OWNER;
    red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.{op} [%r5], %r7, [%r6];
    mov.u32 %r9, 0;
    bra END;
OWNER:
    {"ld.shared.u32 %r8, [%r3];" if owner_reads_first else ""}
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r20], 8;
    red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.{op} [%r5], %r7, [%r6];
    {"st.shared.u32 [%r3], 7;" if owner_store else ""}
    {WAIT_LOCAL_BARRIER.format(tag="0", parity=0) if owner_waits else ""}
    ld.shared.u32 %r9, [%r3];
END:
    """ + SYNC_CLUSTER
    return per_thread(checked(body).replace("    mov.u32 %r20, bar;", "    mov.u32 %r20, bar;\n    mov.u32 %r3, buf;\n"
                                   "    setp.eq.u32 %p7, %r0, 0;\n    @%p7 st.shared.u32 [%r3], 5;", 1),
                      grid=2, block=1, cluster=2, extra=".shared .align 8 .b64 bar; .shared .align 4 .b32 buf[1];",
                      **kw)


@pytest.mark.parametrize("op, value, expected", [("add.u32", 41, 47), ("max.s32", -3, 5), ("min.u32", 2, 1),
                                                 ("xor.b32", 12, 5 ^ 1 ^ 12), ("inc.u32", 6, 0)])
def test_red_async_updates_a_word_of_the_cluster_and_completes_on_its_barrier(op, value, expected):
    """Two red.async updates of one word in flight at once do not race (atomic, relaxed at cluster scope); each
    applies to the word's value when it lands, in issue order (inc: rank 1's, bound 6, issued first, takes 5 to 6,
    then rank 0's, bound 1, wraps it to 0)."""
    np.testing.assert_array_equal(_red_async(op=op, value=value), [expected, 0])


def test_red_async_is_in_flight_until_the_owner_waits_and_races_a_plain_store():
    with pytest.raises(PtxExecutionError, match=r"ld.shared.u32: reads shared address 0x8 of CTA \(0, 0, 0\) before it "
                                                r"was signalled: the red.async at line \d+ \(thread \(0, 0, 0\) of CTA "
                                                r"\(\d, 0, 0\)\) into it has not completed"):
        _red_async(owner_waits=False)
    with pytest.raises(PtxExecutionError, match=r"st.shared.u32: the store writes shared address 0x8 of CTA "
                                                r"\(0, 0, 0\) while the red.async at line \d+ .* is still in flight"):
        _red_async(owner_store=True)
    # rank 0 reads the word that rank 1's update, unordered, may change: whichever runs first, it is reported
    with pytest.raises(PtxExecutionError, match=r"ld.shared.u32: reads shared address 0x8 .* before it was signalled: "
                                                r"the red.async at line \d+ \(thread \(0, 0, 0\) of CTA \(1, 0, 0\)\)"):
        _red_async(owner_reads_first=True)
    with pytest.raises(PtxExecutionError, match=r"red.async.relaxed.cluster.*: the red.async writes shared address "
                                                r"0x8 of CTA \(0, 0, 0\), which the instruction at line \d+ \(thread "
                                                r"\(0, 0, 0\) of CTA \(0, 0, 0\)\) read, and no synchronisation"):
        _red_async(owner_reads_first=True, schedule="adversarial", seed=2)


def test_red_async_forms_it_does_not_define_are_refused_by_name():
    with pytest.raises(PtxExecutionError, match=r"red.async.add on .f32 \(supported: .inc.u32, .*\.add.u64\)"):
        _red_async(op="add.f32")


def test_tessera_run_takes_a_cluster_shape(tmp_path, capsys):
    from tessera.interpreters.ptx.cli import main as tessera_run_ptx

    (tmp_path / "k.ptx").write_text(kernel("mov.u32 %r0, %tid.x; mov.u32 %r9, %cluster_ctarank;" + STORE_R9))
    assert tessera_run_ptx([str(tmp_path / "k.ptx"), "--grid", "4", "--block", "32", "--cluster", "2",
                            "--arg", "u32[128]=zeros", "--save", str(tmp_path)]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "arg0_out.npy"), np.repeat([0, 1, 0, 1], 32))
    assert tessera_run_ptx([str(tmp_path / "k.ptx"), "--grid", "3", "--block", "32", "--cluster", "2",
                            "--arg", "u32[96]=zeros"]) == 1
    assert "does not divide grid (3, 1, 1)" in capsys.readouterr().err


_OWNER_STORE = "    st.shared.u32 [%r3], 41;"
_OWNER_BULK = """    mov.u32 %r21, full;
    ld.param.u64 %rd4, [src];
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r21], 16;
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r3], [%rd4], 16, [%r21];
FULL:
    mbarrier.try_wait.parity.shared::cta.b64 %p5, [%r21], 0;
    @!%p5 bra FULL;"""


_OWNER_ST_ASYNC = """    mov.u32 %r21, full;
    mapa.shared::cluster.u32 %r22, %r3, 0;
    mapa.shared::cluster.u32 %r23, %r21, 0;
    mov.u32 %r19, 41;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r21], 4;
    st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%r22], %r19, [%r23];
FULL:
    mbarrier.try_wait.parity.shared::cta.b64 %p5, [%r21], 0;
    @!%p5 bra FULL;"""


@pytest.mark.parametrize("write", [_OWNER_STORE, _OWNER_BULK, _OWNER_ST_ASYNC], ids=["st.shared", "bulk-copy", "st.async"])
@pytest.mark.parametrize("sync, reported", [
    ("", True),  # nothing orders rank 1's read of rank 0's word before rank 0 overwrites it
    ("RELEASE", False),  # rank 1 releases the word on rank 0's barrier, which rank 0 waits on before writing
    ("CLUSTER", False),  # a cluster barrier between the read and the write
], ids=["unordered", "released", "cluster-barrier"])
def test_a_write_into_this_ctas_bytes_follows_a_peers_read_of_them(write, sync, reported):
    """[memory_model.WRITE_ORDER] Rank 1 reads rank 0's word through `mapa` (`ld.shared::cluster`), then rank 0
    overwrites it (a generic store, or a bulk copy landing): the peer's read must happen before the write. The
    peer's reads are kept with a column per thread of the cluster, so the write is judged by what the writer
    knows of the peer's threads, whatever order the executor ran the two in."""
    release = ("mapa.shared::cluster.u32 %r6, %r20, 0;\n"
               "    mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r6];") if sync == "RELEASE" else ""
    wait = WAIT_LOCAL_BARRIER.format(tag="0", parity=0) if sync == "RELEASE" else ""
    cluster = SYNC_CLUSTER if sync == "CLUSTER" else ""
    body = checked(INIT_LOCAL_BARRIER.format(count=1)).replace(
        "    @%p7 fence", "    mov.u32 %r21, full;\n    @%p7 mbarrier.init.shared::cta.b64 [%r21], 1;\n    @%p7 fence") + f"""
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r3, buf;
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra OWNER;
    mapa.shared::cluster.u32 %r5, %r3, 0;
    ld.shared::cluster.u32 %r9, [%r5];
    {release}
    {cluster}
    bra END;
OWNER:
    {cluster}
    {wait}
{write}
    mov.u32 %r9, 0;
END:
    """ + SYNC_CLUSTER
    text = kernel("mov.u32 %r0, %tid.x;\n" + body + STORE_R9, params=".param .u64 out, .param .u64 src",
                  extra=".shared .align 8 .b64 bar; .shared .align 8 .b64 full; .shared .align 16 .b32 buf[4];")
    run = lambda: launch(text, "k", 2, 1, [np.zeros(2, np.uint32), np.full(4, 7, np.uint32)],  # noqa: E731
                         cluster=2)[0]
    if not reported:
        np.testing.assert_array_equal(run(), [0, 0])  # rank 1 read the word before rank 0 overwrote it
        return
    with pytest.raises(PtxExecutionError, match=r"(st.shared.u32|cp.async.bulk\S*|st.async\S*): (the (bulk copy|st.async) )?"
                                                r"writes shared "
                                                r"address 0x\w+ of CTA \(0, 0, 0\), which the instruction at line \d+ "
                                                r"\(thread \(0, 0, 0\) of CTA \(1, 0, 0\)\) read through a "
                                                r"shared::cluster address, and no synchronisation orders the two"):
        run()


_LINK = """
    setp.eq.u32 %p4, %r0, 1;
    @!%p4 bra NOLINK;
EARLY
EMPTY:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p5, [%r21], 0;
    @!%p5 bra EMPTY;
LATE
NOLINK:
"""
_ARRIVE_LINK = "    mbarrier.arrive.shared::cta.b64 _, [%r22];"
_WAIT_LINK = """
LINK:
    mbarrier.try_wait.parity.shared::cta.b64 %p5, [%r22], 0;
    @!%p5 bra LINK;
"""


@pytest.mark.parametrize("early, late, reported", [("", _ARRIVE_LINK, False), (_ARRIVE_LINK, "", True)],
                         ids=["arrive-after-the-empty-wait", "arrive-before-it"])
def test_a_producer_learns_a_peers_release_through_a_chain(early, late, reported):
    """The refill of `_REFILL`, but thread 1 waits on the empty barrier (both CTAs' consumers release on it) and
    then arrives on a local `link` barrier, which the producer (thread 0) waits on before it multicasts: the peer's
    reads reach the producer along that chain. Thread 1's arrival before its empty wait carries nothing."""
    release = _RELEASE_TO.format(0, 1) + filled(_LINK, EARLY=early, LATE=late)
    body = checked(_REFILL).replace("RELEASE", release).replace("EMPTY_WAIT", _WAIT_LINK).replace(
        "    @%p7 fence", "    mov.u32 %r22, link;\n    @%p7 mbarrier.init.shared::cta.b64 [%r22], 1;\n    @%p7 fence")
    _run_refill(body, " .shared .align 8 .b64 link;", reported)


# region what a cluster barrier orders [memory_model.CLUSTER_BARRIER_ORDERING]
_HANDOFF = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 16 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r2, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    mapa.shared::cluster.u32 %r6, %r5, 1;
    setp.eq.u32 %p0, %r1, 0;
    mov.u32 %r8, 0;
    @!%p0 bra READER;
    BEFORE
    st.shared::cluster.u32 [%r6], %r0;
    AFTER
    barrier.cluster.wait;
    bra OUT;
READER:
    barrier.cluster.arrive;
    barrier.cluster.wait;
    ld.shared.u32 %r8, [%r5];
OUT:
    ld.param.u64 %rd2, [out];
    mov.u32 %r11, %ctaid.x;
    mad.lo.u32 %r12, %r11, 64, %r0;
    mul.wide.u32 %rd3, %r12, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r8;
    ret;
}
"""
"""Rank 0 stores its thread index into rank 1's `buf` through `mapa` around its cluster barrier arrive (BEFORE,
AFTER); rank 1 reads `buf` after its wait."""


@pytest.mark.parametrize("before, after, reported", [
    ("", "barrier.cluster.arrive;", False),
    ("", "barrier.cluster.arrive.release;", False),
    ("", "fence.acq_rel.cluster;\n    barrier.cluster.arrive.relaxed;", False),  # a release fence, then the arrive
    ("barrier.cluster.arrive;", "", True),  # stored after arriving: not released, whenever the phase completes
    ("", "barrier.cluster.arrive.relaxed;", True),  # "no memory ordering and visibility guarantees"
], ids=["release", "explicit-release", "fence-then-relaxed", "store-after-arrive", "relaxed"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 1)])
def test_a_cluster_barrier_orders_what_each_release_arrival_did_before_it(before, after, reported, schedule, seed):
    """A barrier.cluster.arrive releases at its own point, like bar.arrive, and a .relaxed one releases nothing:
    both silent bugs ran clean before on min-pc and with the reader's CTA late, because the barrier joined every
    thread's clock when its phase completed (the store after the arrive, or before a .relaxed one, included)."""
    text = _HANDOFF.replace("BEFORE", before).replace("AFTER", after)
    run = lambda: launch(text, "k", 2, 64, [np.zeros(128, np.uint32)], cluster=2,  # noqa: E731
                         schedule=schedule, seed=seed)[0]
    if not reported:
        np.testing.assert_array_equal(run(), np.r_[np.zeros(64), np.arange(64)])
        return
    store = text.splitlines().index("    st.shared::cluster.u32 [%r6], %r0;") + 1
    with pytest.raises(PtxHazardError, match=r"ld.shared.u32: reads shared address 0x0 of CTA \(1, 0, 0\), which the "
                                             rf"instruction at line {store} \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) "
                                             r"wrote, and no synchronisation orders the two"):
        run()


# endregion
