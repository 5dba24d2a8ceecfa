"""A bulk copy into a cluster member (`cp.async.bulk.shared::cluster.shared::cta`) reads its source in the issuing CTA
until its complete-tx on the destination's mbarrier: a write of the source is right only for a thread ordered after
that completion (through a successful wait on the barrier and the happens-before edges from it), whatever order the
executor ran the threads in (`tessera/interpreters/ptx/copy_sources.py`, docs/races.md).

Rank 0 of a cluster of two forwards its `src` into rank 1's `dst`; rank 1 waits on its barrier and reads. Rank 0
then overwrites `src` after rank 1's wait: through a relaxed flag only (the write comes after the landing under
every schedule, but nothing orders it: reported on each), or after a cluster barrier, a remote mbarrier arrive, or a
release/acquire flag pair (right on each). A ring of two stages forwarding six trips is right and keeps one record
per stage. A load from global memory that lands only in the peer (a bulk load to rank 1's address, a multicast with
rank 1's bit only) reads its global source until its complete-tx there, judged the same way. A bulk store's shared
source, read until its `.read` wait, was already judged by happens-before from that wait: its twin is reported on
every schedule."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxHazardError
from tessera.interpreters.ptx.copy_sources import CopySources
from race_templates import INIT_LOCAL_BARRIER, SYNC_CLUSTER, WAIT_LOCAL_BARRIER
from unseen_ptx import HEAD, line_of, run

SCHEDULES = [("min-pc", None), ("delayed", 0), ("delayed", 1), ("adversarial", 0), ("adversarial", 1)]
"""Every schedule that can change the order of the two CTAs: min-pc, each CTA delayed, two random ones."""

RECEIVER_TAIL = """RECEIVER:
    @%p7 mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r20], 64;
""" + WAIT_LOCAL_BARRIER.format(tag="0", parity=0) + """
    shl.b32 %r5, %r0, 2;
    add.u32 %r5, %r4, %r5;
    ld.shared.u32 %r9, [%r5];
RECEIVED
END:
""" + SYNC_CLUSTER + """
    ld.param.u64 %rd0, [out];
    mov.u32 %r15, %ctaid.x;
    mad.lo.s32 %r15, %r15, 16, %r0;
    mul.wide.u32 %rd1, %r15, 4;
    add.s64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r9;
    ret;
}
"""
"""Rank 1 of both forwarding clusters below: its thread 0 expects the 64 bytes on its barrier, every thread waits,
reads its word of `dst` and runs RECEIVED; then the cluster syncs and each thread stores its word to `out`."""


FORWARD = r""".visible .entry k(.param .u64 out, .param .u64 flag)
{
    .reg .b32 %r<24>;
    .reg .b64 %rd<8>;
    .reg .pred %p<8>;
    .shared .align 128 .b8 src[64];
    .shared .align 128 .b8 dst[64];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
""" + INIT_LOCAL_BARRIER.format(count=1) + """
    ld.param.u64 %rd6, [flag];
    cvta.to.global.u64 %rd6, %rd6;
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
    st.shared.u32 [%r5], 7;
    bra END;
""" + RECEIVER_TAIL
"""A cluster of two CTAs of 16 threads (`tests/test_unseen_ptx_completion.py`'s FORWARD with a global `flag`): rank 0
fills `src` with 1000 + t, thread 0 forwards it into rank 1's `dst` on rank 1's barrier, and rank 0's threads run
SENDER, then overwrite their word of `src` with 7; rank 1 waits, reads its word and runs RECEIVED."""


def _spin(load: str) -> str:
    """Rank 0's threads poll `flag` with `load` until rank 1 set it."""
    return f"""SPIN:
    {load}.global.u32 %r10, [%rd6];
    setp.eq.u32 %p2, %r10, 0;
    @%p2 bra SPIN;"""


RELAXED = (_spin("ld.relaxed.gpu"), "    @%p7 st.relaxed.gpu.global.u32 [%rd6], 1;")
"""Rank 1's thread 0 sets the flag after its wait and rank 0 sees it: an order in time, no happens-before."""

ORDERINGS = {
    "a cluster barrier": (SYNC_CLUSTER, SYNC_CLUSTER),
    "a release/acquire flag": (_spin("ld.acquire.gpu"), "    bar.sync 0;\n    @%p7 st.release.gpu.global.u32 [%rd6], 1;"),
    "a remote mbarrier arrive": (
        WAIT_LOCAL_BARRIER.format(tag="1", parity=0),
        "    bar.sync 0;\n    mapa.shared::cluster.u32 %r11, %r20, 0;\n"
        "    @%p7 mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r11];"),
}
"""Ways rank 1's wait is ordered before rank 0's write: the two CTAs meet at a cluster barrier; rank 1's thread 0
publishes the flag with a release after a bar.sync of its CTA and rank 0 acquires it; rank 1 arrives on rank 0's
barrier after a bar.sync and rank 0 waits on it. Rank 0's threads other than the issuer need no order after the
issue: the copy's read of the source is ordered before its complete-tx (a release at cluster scope
[memory_model.TMA_READ_UNTIL_COMPLETE]), not recorded as a read of the issuing thread."""

FORWARDED = [0] * 16 + list(range(1000, 1016))


def _forward(sender: str, received: str) -> str:
    return FORWARD.replace("SENDER", sender).replace("RECEIVED", received)


def _launch(text: str, schedule: str, seed: int | None) -> np.ndarray:
    return run(text, 2, 16, [np.zeros(32, np.uint32), np.zeros(1, np.uint32)], cluster=2, schedule=schedule,
               seed=seed)[0]


@pytest.mark.parametrize("schedule, seed", SCHEDULES)
def test_a_source_written_after_the_landing_with_no_order_from_the_wait_is_reported(schedule, seed):
    """Rank 0 writes `src` only once rank 1 has waited (it polls a flag rank 1 sets after), so the copy has landed
    in every run; but the flag is relaxed, so nothing orders the write after the completion: on hardware the copy may
    still read the bytes. Reported on every schedule, naming the write, the copy and its barrier."""
    text = _forward(*RELAXED)
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'st.shared.u32 [%r5], 7')}: error: "
                                             r"st.shared.u32: the store overwrites shared address 0x0 of CTA "
                                             r"\(0, 0, 0\) while the bulk copy at line "
                                             rf"{line_of(text, 'cp.async.bulk.shared::cluster')} \(thread \(0, 0, 0\) "
                                             r"of CTA \(0, 0, 0\)\), which completed on the mbarrier at shared address "
                                             r"0x\w+ of CTA \(1, 0, 0\), may still read it: no successful wait .* "
                                             r"\(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\)$"):
        _launch(text, schedule, seed)


@pytest.mark.parametrize("ordering", sorted(ORDERINGS))
@pytest.mark.parametrize("schedule, seed", SCHEDULES)
def test_a_source_written_after_a_path_from_the_wait_is_right(ordering, schedule, seed):
    np.testing.assert_array_equal(_launch(_forward(*ORDERINGS[ordering]), schedule, seed), FORWARDED)


def test_without_race_checks_only_the_copy_in_flight_is_judged():
    """`races=False` keeps no landed record (the rule is a race check); the unordered write runs clean."""
    out = run(_forward(*RELAXED), 2, 16, [np.zeros(32, np.uint32), np.zeros(1, np.uint32)], cluster=2, races=False)
    np.testing.assert_array_equal(out[0], FORWARDED)


def test_a_source_stored_without_a_proxy_fence_before_the_copy_is_reported():
    """The copy reads its source through the async proxy: the generic stores that filled it need a fence.proxy.async
    between them and the copy, as under a bulk store."""
    text = _forward(*ORDERINGS["a cluster barrier"]).replace("    fence.proxy.async.shared::cta;\n", "", 1)
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'cp.async.bulk.shared::cluster')}: error: "
                                             r"cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes: "
                                             r"the bulk copy reads shared address 0x0 of CTA \(0, 0, 0\), which thread "
                                             r"\(0, 0, 0\) of CTA \(0, 0, 0\) stored through the generic proxy .*missing "
                                             r"fence.proxy.async"):
        _launch(text, "min-pc", None)


GLOBAL_FORWARD = r""".visible .entry k(.param .u64 out, .param .u64 flag, .param .u64 gsrc)
{
    .reg .b32 %r<24>;
    .reg .b64 %rd<10>;
    .reg .pred %p<8>;
    .reg .b16 %rs<2>;
    .shared .align 128 .b8 dst[64];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
""" + INIT_LOCAL_BARRIER.format(count=1) + """
    ld.param.u64 %rd6, [flag];
    cvta.to.global.u64 %rd6, %rd6;
    ld.param.u64 %rd7, [gsrc];
    cvta.to.global.u64 %rd7, %rd7;
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r4, dst;
    mov.u32 %r9, 0;
    setp.eq.u32 %p1, %r1, 1;
    @%p1 bra RECEIVER;
    mapa.shared::cluster.u32 %r7, %r4, 1;
    mapa.shared::cluster.u32 %r8, %r20, 1;
    mov.b16 %rs1, 2;
    @%p7 COPY
SENDER
    mul.wide.u32 %rd8, %r0, 4;
    add.s64 %rd8, %rd7, %rd8;
    st.global.u32 [%rd8], 7;
    bra END;
""" + RECEIVER_TAIL
"""The same cluster with a global source: rank 0's thread 0 loads 64 bytes of `gsrc` (1000 + t) into rank 1's `dst`
only, on rank 1's barrier (COPY: a bulk load to a shared::cluster address of rank 1, or a multicast with mask 0b10);
rank 0's threads run SENDER and overwrite their word of `gsrc` with 7 (the load's read, at issue a read of thread 0,
is judged by its completion: the others need no order after the issue)."""

GLOBAL_COPIES = {
    "to a peer's address": "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r7], [%rd7], 64, [%r8];",
    "multicast to the peer only": "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
                                  "[%r4], [%rd7], 64, [%r20], %rs1;",
}


def _global_forward(copy: str, sender: str, received: str) -> str:
    return GLOBAL_FORWARD.replace("COPY", GLOBAL_COPIES[copy]).replace("SENDER", sender).replace("RECEIVED", received)


def _global_launch(text: str, schedule: str, seed: int | None) -> list[np.ndarray]:
    return run(text, 2, 16, [np.zeros(32, np.uint32), np.zeros(1, np.uint32), np.arange(1000, 1016, dtype=np.uint32)],
               cluster=2, schedule=schedule, seed=seed)


@pytest.mark.parametrize("copy", sorted(GLOBAL_COPIES))
@pytest.mark.parametrize("order", ["none", "relaxed flag"])
@pytest.mark.parametrize("schedule, seed", SCHEDULES)
def test_a_global_source_of_a_load_into_peers_only_written_with_no_order_from_the_wait_is_reported(copy, order,
                                                                                                  schedule, seed):
    """A load that lands only in peers reads its global source until its complete-tx there: a write right after the
    issue, or after the landing in time only (the relaxed flag), is reported on every schedule, naming the load and
    the peer's barrier (before, nothing recorded the read past the issue)."""
    text = _global_forward(copy, *(RELAXED if order == "relaxed flag" else ("", "")))
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'st.global.u32 [%rd8], 7')}: error: "
                                             r"st.global.u32: the write overwrites global address 0x\w+ \(argument 2 "
                                             r"\(gsrc\) at byte offset 0\) while the TMA or bulk load at line "
                                             rf"{line_of(text, 'cp.async.bulk.shared::cluster')} \(thread \(0, 0, 0\) "
                                             r"of CTA \(0, 0, 0\)\), (completing|which completed) on the mbarrier at "
                                             r"shared address 0x\w+ of CTA \(1, 0, 0\), may still read it"):
        _global_launch(text, schedule, seed)


@pytest.mark.parametrize("copy", sorted(GLOBAL_COPIES))
@pytest.mark.parametrize("ordering", sorted(ORDERINGS))
@pytest.mark.parametrize("schedule, seed", SCHEDULES[:3])
def test_a_global_source_of_a_load_into_peers_only_written_after_a_path_from_the_wait_is_right(copy, ordering,
                                                                                               schedule, seed):
    out, _, src = _global_launch(_global_forward(copy, *ORDERINGS[ordering]), schedule, seed)
    np.testing.assert_array_equal(out, FORWARDED)
    np.testing.assert_array_equal(src, 7)


@pytest.mark.parametrize("copy", sorted(GLOBAL_COPIES))
def test_the_peer_that_waited_may_overwrite_the_global_source(copy):
    """Rank 1's threads, after their own wait on the load's barrier, overwrite `gsrc` (rank 0 does not): ordered
    after the completion by program order, and not a race with the load's read at issue by rank 0's thread 0."""
    text = _global_forward(copy, "", "    mul.wide.u32 %rd8, %r0, 4;\n    add.s64 %rd8, %rd7, %rd8;\n"
                                     "    st.global.u32 [%rd8], 7;").replace("    st.global.u32 [%rd8], 7;\n    bra END;",
                                                                         "    bra END;")
    out, _, src = _global_launch(text, "min-pc", None)
    np.testing.assert_array_equal(out, FORWARDED)
    np.testing.assert_array_equal(src, 7)


def test_a_source_record_of_scattered_bytes_is_judged_byte_by_byte():
    """A TMA box's global bytes need not be one range: a record of flat positions hits those only, and covers
    another only where it holds each of its bytes."""
    from tessera.interpreters.ptx.copy_sources import Source

    box = Source((1, 0), 0, 100, 164, np.concatenate([np.arange(100, 116), np.arange(148, 164)]), None)
    np.testing.assert_array_equal(box.hits(np.array([99, 100, 115, 116, 147, 148, 163, 164])),
                                  [False, True, True, False, False, True, True, False])
    assert box.covers(Source((1, 0), 0, 148, 164, None, None))
    assert not box.covers(Source((1, 0), 0, 110, 150, None, None))
    assert Source((1, 0), 0, 100, 164, None, None).covers(box)


RING = r""".visible .entry k(.param .u64 out)
{
    .reg .b32 %r<32>;
    .reg .b64 %rd<8>;
    .reg .pred %p<8>;
    .shared .align 128 .b8 src[128];
    .shared .align 128 .b8 dst[128];
    .shared .align 8 .b64 full[2];
    .shared .align 8 .b64 empty[2];
    mov.u32 %r0, %tid.x;
    mov.u32 %r20, full;
    mov.u32 %r21, empty;
    setp.eq.u32 %p7, %r0, 0;
    @%p7 mbarrier.init.shared::cta.b64 [%r20], 1;
    @%p7 mbarrier.init.shared::cta.b64 [%r20+8], 1;
    @%p7 mbarrier.init.shared::cta.b64 [%r21], 1;
    @%p7 mbarrier.init.shared::cta.b64 [%r21+8], 1;
    @%p7 fence.mbarrier_init.release.cluster;
""" + SYNC_CLUSTER + """
    mov.u32 %r1, %cluster_ctarank;
    setp.eq.u32 %p1, %r1, 1;
    shl.b32 %r2, %r0, 2;
    mov.u32 %r9, 0;
    mov.u32 %r10, 0;
LOOP:
    and.b32 %r11, %r10, 1;
    shl.b32 %r12, %r11, 6;
    shl.b32 %r13, %r11, 3;
    add.u32 %r14, %r20, %r13;
    add.u32 %r15, %r21, %r13;
    shr.u32 %r16, %r10, 1;
    and.b32 %r16, %r16, 1;
    @%p1 bra CONSUME;
    setp.lt.u32 %p2, %r10, 2;
    @%p2 bra FILL;
    xor.b32 %r17, %r16, 1;
EMPTY:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p6, [%r15], %r17;
    @!%p6 bra EMPTY;
FILL:
    mov.u32 %r3, src;
    add.u32 %r3, %r3, %r12;
    add.u32 %r5, %r3, %r2;
    mad.lo.u32 %r6, %r10, 1000, %r0;
    st.shared.u32 [%r5], %r6;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    mov.u32 %r4, dst;
    add.u32 %r4, %r4, %r12;
    mapa.shared::cluster.u32 %r7, %r4, 1;
    mapa.shared::cluster.u32 %r8, %r14, 1;
    @%p7 cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%r7], [%r3], 64, [%r8];
    bra NEXT;
CONSUME:
    @%p7 mbarrier.arrive.expect_tx.shared::cta.b64 %rd5, [%r14], 64;
FULL:
    mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p6, [%r14], %r16;
    @!%p6 bra FULL;
    mov.u32 %r4, dst;
    add.u32 %r4, %r4, %r12;
    add.u32 %r5, %r4, %r2;
    ld.shared.u32 %r6, [%r5];
    add.u32 %r9, %r9, %r6;
    bar.sync 0;
    mapa.shared::cluster.u32 %r18, %r15, 0;
    @%p7 mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%r18];
NEXT:
    add.u32 %r10, %r10, 1;
    setp.lt.u32 %p3, %r10, TRIPS;
    @%p3 bra LOOP;
""" + SYNC_CLUSTER + """
    ld.param.u64 %rd0, [out];
    mov.u32 %r19, %ctaid.x;
    mad.lo.s32 %r19, %r19, 16, %r0;
    mul.wide.u32 %rd1, %r19, 4;
    add.s64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r9;
    ret;
}
"""
"""A two-stage ring over a cluster of two CTAs of 16 threads, TRIPS trips: at trip i (stage s = i % 2) rank 0 waits
until rank 1 released stage s (from trip 2 on), writes 1000 i + t into `src[s]` and forwards it into rank 1's
`dst[s]` on rank 1's `full[s]`; rank 1 waits on `full[s]`, adds its word to a sum, meets at a bar.sync and arrives on
rank 0's `empty[s]`. Rank 1's threads leave the sum over the trips, rank 0's 0."""


@pytest.mark.parametrize("schedule, seed", SCHEDULES)
def test_a_ring_refilling_its_forwarded_sources_is_right_and_keeps_one_record_per_stage(schedule, seed, monkeypatch):
    """Each refill of `src[s]` follows rank 1's wait on the previous copy from it through `empty[s]`: right. A copy
    landing on `full[s]` replaces the record of the one before it, so the records stay at one per stage, however
    many trips."""
    kept = []  # (landed, in flight) records after each landing
    completed = CopySources.completed

    def counted(self, keys):
        completed(self, keys)
        kept.append((sum(len(records) for records in self.landed.values()), len(self.flying)))

    monkeypatch.setattr(CopySources, "completed", counted)
    trips = 6
    out = run(RING.replace("TRIPS", str(trips)), 2, 16, [np.zeros(32, np.uint32)], cluster=2, schedule=schedule,
              seed=seed)[0]
    sums = sum(1000 * i for i in range(trips)) + trips * np.arange(16)
    np.testing.assert_array_equal(out, [0] * 16 + sums.tolist())
    assert len(kept) == trips and max(landed for landed, _ in kept) <= 2 and max(flying for _, flying in kept) <= 2


def test_a_ring_refill_that_skips_the_release_is_reported():
    """The same ring with rank 0's wait on `empty[s]` gone: the refill of `src[s]` at trip 2 is not ordered after
    rank 1's wait on trip 0's copy (it may still read), whether that copy is still in flight or landed in the run."""
    text = RING.replace("TRIPS", "4").replace("    @!%p6 bra EMPTY;\n", "")
    text = text.replace("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 %p6, [%r15], %r17;", "")
    for schedule, seed in SCHEDULES:
        with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'st.shared.u32 [%r5], %r6')}: error: "
                                                 r"st.shared.u32: the store overwrites shared address 0x\w+ of CTA "
                                                 r"\(0, 0, 0\) while the bulk copy at line "
                                                 rf"{line_of(text, 'cp.async.bulk.shared::cluster')} .* may still "
                                                 r"read it"):
            run(text, 2, 16, [np.zeros(32, np.uint32)], cluster=2, schedule=schedule, seed=seed)


BULK_STORE = r""".visible .entry k(.param .u64 out, .param .u64 flag)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r2, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    st.shared.u32 [%r5], %r0;
    fence.proxy.async.shared::cta;
    bar.sync 0;
    ld.param.u64 %rd6, [flag];
    cvta.to.global.u64 %rd6, %rd6;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 bra ISSUER;
SPIN:
    ld.relaxed.gpu.global.u32 %r10, [%rd6];
    setp.eq.u32 %p2, %r10, 0;
    @%p2 bra SPIN;
    st.shared.u32 [%r5], 7;
    bra END;
ISSUER:
    cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r2], 256;
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group.read 0;
    st.relaxed.gpu.global.u32 [%rd6], 1;
END:
    ret;
}
"""
"""64 threads fill `buf`; thread 0 bulk-stores it to `out`, waits with `.read` and sets a relaxed flag; the others
poll the flag, then overwrite their word of `buf`."""


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("adversarial", 0), ("delayed-warp", 1)])
def test_a_bulk_store_source_written_after_its_read_wait_with_no_order_from_it_is_reported(schedule, seed):
    """The shared source of a bulk (or TMA) store has no such gap: its `.read` wait is recorded as the end of the
    read (`HappensBefore.reads_completed`) and a later write must happen after that wait, so the relaxed flag, an
    order in time only, is reported on every schedule."""
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(BULK_STORE, 'st.shared.u32 [%r5], 7')}: error: "
                                             r"st.shared.u32: the store overwrites shared address 0x\w+, which the "
                                             rf"bulk store at line {line_of(BULK_STORE, 'cp.async.bulk.global')} .* "
                                             r"read until its cp.async.bulk.wait_group"):
        run(BULK_STORE, 1, 64, [np.zeros(64, np.uint32), np.zeros(1, np.uint32)], schedule=schedule, seed=seed)


def test_tessera_run_reports_the_unordered_source_write_by_file_and_line(tmp_path, capsys):
    """The command line ends the unordered write with exit status 1 and the located message, no traceback; its
    cluster-barrier twin with 0."""
    from tessera.tools import tessera_run

    args = ["--grid", "2", "--cluster", "2", "--block", "16", "--arg", "u32[32]=zeros", "--arg", "u32[1]=zeros"]
    path = tmp_path / "k.ptx"
    path.write_text(HEAD + _forward(*ORDERINGS["a cluster barrier"]))
    assert tessera_run.main([str(path), *args]) == 0
    wrong = _forward(*RELAXED)
    path.write_text(HEAD + wrong)
    assert tessera_run.main([str(path), *args, "--schedule", "delayed", "--schedule-seed", "1"]) == 1
    err = capsys.readouterr().err
    assert f"k.ptx:{line_of(wrong, 'st.shared.u32 [%r5], 7')}: error: st.shared.u32: the store overwrites" in err, err
    assert "Traceback" not in err
