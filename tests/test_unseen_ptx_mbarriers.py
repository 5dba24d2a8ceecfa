"""Hand-written sm_90a PTX: mbarrier handoffs between warps, beside correct twins that run clean and right: a consumer
waiting on the wrong parity (as Triton writes the wait), a count one arrival too many, the wait written each way a
kernel writes it (try_wait with a suspend hint, .acquire.cta, a test_wait spin, a nanosleep poll), and a two-slot
ring with phase bits whose producer or consumer never flips them. A race is reported naming both sides; a barrier
that can never complete is a `PtxDeadlockError` naming the barrier, its phase and parity, never a spin. An mbarrier's
memory written before an mbarrier.inval (a store reusing it, a copy overflowing into it) is reported. The other
CTA-local cases: tests/test_unseen_ptx_races.py."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxDeadlockError, PtxHazardError

from unseen_ptx import WAIT, run


# region an mbarrier handoff between two warps
HANDOFF = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 8 .b64 bar;
    .shared .align 4 .b8 buf[128];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, bar;
    mov.u32 %r2, buf;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r1], COUNT;
    bar.sync 0;
    setp.lt.u32 %p1, %r0, 32;
    and.b32 %r3, %r0, 31;
    shl.b32 %r4, %r3, 2;
    add.u32 %r5, %r2, %r4;
    @!%p1 bra CONSUMER;
    mul.lo.u32 %r6, %r3, 3;
    st.shared.u32 [%r5], %r6;
    mbarrier.arrive.shared::cta.b64 %rd0, [%r1];
    bra DONE;
CONSUMER:
    WAIT
    ld.shared.u32 %r7, [%r5];
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r3, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r7;
DONE:
    ret;
}
""".replace("WAIT", WAIT)
"""Warp 0 stores a word each and arrives (32 arrivals complete phase 0); warp 1 waits and reads them."""


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("adversarial", 1), ("delayed-warp", 0)])
def test_an_mbarrier_handoff_waiting_on_phase_0_is_clean_and_right(schedule, seed):
    out = run(HANDOFF.replace("COUNT", "32").replace("PARITY", "0"), 1, 64, [np.zeros(32, np.uint32)],
              schedule=schedule, seed=seed)[0]
    np.testing.assert_array_equal(out, 3 * np.arange(32))


@pytest.mark.parametrize("seed", [0, 1])
def test_a_consumer_waiting_on_parity_1_of_a_fresh_mbarrier_is_reported(seed):
    """Parity 1 names the phase before phase 0, complete from the start: the wait passes at once and the read
    races the producer's store, whichever ran first (adversarial seeds put either side first)."""
    text = HANDOFF.replace("COUNT", "32").replace("PARITY", "1")
    with pytest.raises(PtxHazardError, match=r"(ld|st)\.shared\.u32: (reads|writes) shared address 0x\w+, which the "
                                             r"instruction at line \d+ .*no synchronisation orders the two"):
        run(text, 1, 64, [np.zeros(32, np.uint32)], schedule="adversarial", seed=seed)


def test_a_consumer_on_parity_1_after_the_producer_arrived_is_a_deadlock_naming_the_parity():
    """On min-pc the producer completes phase 0 first; parity 1 then waits for phase 1, which nobody arrives in:
    the GPU hangs there, and the executor names the wait, its phase and parity."""
    text = HANDOFF.replace("COUNT", "32").replace("PARITY", "1")
    with pytest.raises(PtxDeadlockError, match=r"wait on the mbarrier at shared address 0x0 \(in phase 1, parity 1, "
                                               r"with 32 of 32 arrivals pending .* one for parity 1 waits for this "
                                               r"phase\) at line \d+ \(mbarrier.try_wait.parity"):
        run(text, 1, 64, [np.zeros(32, np.uint32)])


def test_an_mbarrier_counting_one_arrival_too_many_is_a_deadlock():
    with pytest.raises(PtxDeadlockError, match=r"in phase 0, parity 0, with 1 of 33 arrivals pending"):
        run(HANDOFF.replace("COUNT", "33").replace("PARITY", "0"), 1, 64, [np.zeros(32, np.uint32)])


SPINS = {
    "try_wait-suspend-hint": ("""{
    .reg .pred c;
    wl:
    mbarrier.try_wait.parity.shared::cta.b64 c, [%r1], 0, 0x989680;
    @!c bra.uni wl;
    }""", r"wait on the mbarrier at shared address 0x0 \(in phase 0, parity 0, with 1 of 33 arrivals pending"),
    "try_wait-acquire-cta": ("""{
    .reg .pred c;
    wl:
    mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 c, [%r1], 0;
    @!c bra wl;
    }""", r"wait on the mbarrier at shared address 0x0 \(in phase 0, parity 0, with 1 of 33 arrivals pending"),
    "test_wait-spin": ("""{
    .reg .pred c;
    wl:
    mbarrier.test_wait.parity.shared::cta.b64 c, [%r1], 0;
    @!c bra wl;
    }""", r"wait on the mbarrier at shared address 0x0 \(in phase 0, parity 0, with 1 of 33 arrivals pending"),
    "test_wait-nanosleep": ("""{
    .reg .pred c;
    wl:
    mbarrier.test_wait.parity.shared::cta.b64 c, [%r1], 0;
    @c bra ok;
    nanosleep.u32 20;
    bra wl;
    ok:
    }""", r"sleep in a spin wait that nothing can end \(a nanosleep poll .* or an mbarrier test_wait whose phase "
          r"never completes"),
}
"""The consumer's wait written other ways: with try_wait's suspend-time hint, as .acquire.cta, as a test_wait spin,
and a test_wait polled with nanosleep; each with the message of its deadlock when one arrival never comes."""


@pytest.mark.parametrize("name", SPINS)
def test_an_mbarrier_wait_in_any_form_is_right_or_a_deadlock_never_a_spin(name):
    wait, deadlock = SPINS[name]
    text = HANDOFF.replace(WAIT, wait).replace("PARITY", "0")
    out = run(text.replace("COUNT", "32"), 1, 64, [np.zeros(32, np.uint32)])[0]
    np.testing.assert_array_equal(out, 3 * np.arange(32))
    with pytest.raises(PtxDeadlockError, match=deadlock):
        run(text.replace("COUNT", "33"), 1, 64, [np.zeros(32, np.uint32)])


RING = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<32>;
    .reg .b64 %rd<8>;
    .reg .pred %p<8>;
    .shared .align 8 .b64 full[2];
    .shared .align 8 .b64 empty[2];
    .shared .align 16 .b8 ring[256];
    mov.u32 %r0, %tid.x;
    and.b32 %r1, %r0, 31;
    mov.u32 %r2, full;
    mov.u32 %r3, empty;
    mov.u32 %r4, ring;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 32;
    add.u32 %r5, %r2, 8;
    @%p0 mbarrier.init.shared::cta.b64 [%r5], 32;
    @%p0 mbarrier.init.shared::cta.b64 [%r3], 32;
    add.u32 %r6, %r3, 8;
    @%p0 mbarrier.init.shared::cta.b64 [%r6], 32;
    bar.sync 0;
    shl.b32 %r7, %r1, 2;
    mov.u32 %r8, 0;
    mov.u32 %r9, 0;
    mov.u32 %r20, 0;
    setp.ge.u32 %p1, %r0, 32;
    @%p1 bra CONSUMER;
PLOOP:
    and.b32 %r10, %r8, 1;
    shr.u32 %r11, %r8, 1;
    and.b32 %r11, %r11, 1;
    xor.b32 %r12, %r11, 1;
    shl.b32 %r13, %r10, 3;
    add.u32 %r14, %r3, %r13;
    setp.ge.u32 %p2, %r8, 2;
    @!%p2 bra FILL;
    {
    .reg .pred c;
    we:
    mbarrier.try_wait.parity.shared::cta.b64 c, [%r14], EMPTY_PARITY;
    @!c bra.uni we;
    }
FILL:
    shl.b32 %r15, %r10, 7;
    add.u32 %r16, %r4, %r15;
    add.u32 %r16, %r16, %r7;
    mad.lo.u32 %r17, %r8, 100, %r1;
    st.shared.u32 [%r16], %r17;
    add.u32 %r18, %r2, %r13;
    mbarrier.arrive.shared::cta.b64 %rd0, [%r18];
    add.u32 %r8, %r8, 1;
    setp.lt.u32 %p3, %r8, TRIPS;
    @%p3 bra PLOOP;
    bra DONE;
CONSUMER:
    and.b32 %r10, %r9, 1;
    shr.u32 %r11, %r9, 1;
    and.b32 %r11, %r11, 1;
    shl.b32 %r13, %r10, 3;
    add.u32 %r18, %r2, %r13;
    {
    .reg .pred c;
    wf:
    mbarrier.try_wait.parity.shared::cta.b64 c, [%r18], FULL_PARITY;
    @!c bra.uni wf;
    }
    shl.b32 %r15, %r10, 7;
    add.u32 %r16, %r4, %r15;
    add.u32 %r16, %r16, %r7;
    ld.shared.u32 %r19, [%r16];
    add.u32 %r20, %r20, %r19;
    add.u32 %r14, %r3, %r13;
    mbarrier.arrive.shared::cta.b64 %rd0, [%r14];
    add.u32 %r9, %r9, 1;
    setp.lt.u32 %p3, %r9, TRIPS;
    @%p3 bra CONSUMER;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r20;
DONE:
    ret;
}
"""
"""A two-slot ring over TRIPS trips, phase bits as CUTLASS keeps them: warp 0 stores 32 words into slot j % 2 and
arrives on full[j % 2] (after waiting on empty[j % 2] from trip 2, parity EMPTY_PARITY); warp 1 waits on full[j % 2]
(parity FULL_PARITY), adds its word and arrives on empty[j % 2]. %r11 is (j >> 1) & 1, the phase bit of trip j;
%r12 its complement, the empty barrier's."""


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed-warp", 0), ("delayed-warp", 1),
                                            ("adversarial", 2)])
def test_a_two_slot_mbarrier_ring_with_phase_bits_is_right(schedule, seed):
    text = RING.replace("EMPTY_PARITY", "%r12").replace("FULL_PARITY", "%r11").replace("TRIPS", "6")
    out = run(text, 1, 64, [np.zeros(32, np.uint32)], schedule=schedule, seed=seed)[0]
    np.testing.assert_array_equal(out, sum(100 * j for j in range(6)) + 6 * np.arange(32))


@pytest.mark.parametrize("empty, full", [("%r12", "0"), ("0", "%r11"), ("%r12", "%r12")],
                         ids=["consumer-never-flips", "producer-never-flips", "consumer-flips-wrong-way"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed-warp", 0)])
def test_a_ring_whose_phase_bit_is_wrong_is_a_deadlock_naming_the_barrier(empty, full, schedule, seed):
    """A wrong phase bit waits on a phase that never completes (the other side has finished or waits too): a
    PtxDeadlockError naming the mbarrier, its phase and parity, on every schedule, never a spin or a wrong sum."""
    text = RING.replace("EMPTY_PARITY", empty).replace("FULL_PARITY", full).replace("TRIPS", "6")
    with pytest.raises(PtxDeadlockError, match=r"wait on the mbarrier at shared address 0x(0|8|10|18) \(in phase \d, "
                                               r"parity \d, with 32 of 32 arrivals pending"):
        run(text, 1, 64, [np.zeros(32, np.uint32)], schedule=schedule, seed=seed)


# endregion
# region the memory of an mbarrier
REUSE = r"""
.visible .entry k(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 16 .b8 buf[256];
    .shared .align 8 .b64 bar;
    .shared .align 16 .b8 tail[64];
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [src];
    mov.u32 %r1, buf;
    mov.u32 %r2, bar;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared.b64 [%r2], 1;
    bar.sync 0;
    @%p0 mbarrier.arrive.expect_tx.shared.b64 %rd7, [%r2], SIZE;
    @%p0 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd0], SIZE, [%r2];
WAIT:
    mbarrier.try_wait.parity.shared.b64 %p1, [%r2], 0;
    @!%p1 bra WAIT;
    bar.sync 0;
INVAL
    @%p0 st.shared.u32 [%r2], 7;
    bar.sync 0;
    ld.shared.u32 %r3, [%r2];
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r0, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r3;
    ret;
}
"""
"""`bar` sits right after the 256-byte `buf`: thread 0 bulk-loads SIZE bytes into `buf` on it; once it completed,
thread 0 (after INVAL) reuses the barrier's word for a 7 that every thread reads back."""


def _reuse(size: int, inval: str) -> np.ndarray:
    text = REUSE.replace("SIZE", str(size)).replace("INVAL", inval)
    return run(text, 1, 32, [np.arange(128, dtype=np.uint32), np.zeros(32, np.uint32)])[1]


def test_an_mbarrier_invalidated_before_its_memory_is_reused_is_right():
    np.testing.assert_array_equal(_reuse(256, "    @%p0 mbarrier.inval.shared.b64 [%r2];"), 7)


def test_a_store_over_a_live_mbarrier_is_reported():
    """An mbarrier's memory is for mbarrier instructions until an mbarrier.inval (Triton invalidates its barriers
    before reusing their shared memory)."""
    with pytest.raises(PtxHazardError, match=r"st.shared.u32: the store writes shared address 0x100, which holds the "
                                             r"mbarrier the mbarrier.init at line \d+ \(thread \(0, 0, 0\) of CTA "
                                             r"\(0, 0, 0\)\) initialised: its memory may be used for anything else "
                                             r"only after an mbarrier.inval"):
        _reuse(256, "")


def test_a_copy_overflowing_its_buffer_into_the_mbarrier_is_reported():
    """A shared-memory layout off by 16 bytes: the copy's last bytes land on the barrier it completes on."""
    with pytest.raises(PtxHazardError, match=r"cp.async.bulk\S*: the bulk copy writes shared address 0x100, which "
                                             r"holds the mbarrier the mbarrier.init at line"):
        _reuse(272, "    @%p0 mbarrier.inval.shared.b64 [%r2];")


# endregion
