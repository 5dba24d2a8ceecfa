"""Happens-before on global memory in the PTX executor (tessera/interpreters/ptx/global_order.py): plain global
accesses of two threads or two CTAs, one a write, with nothing ordering them are races reported with both
sides; atomics never race with each other; release/acquire pairs on a flag order a handoff between CTAs and
their relaxed twins do not [memory_model.DATA_RACE, MORALLY_STRONG, RELEASE_ACQUIRE]."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxDeadlockError, PtxHazardError, launch

from race_templates import PTX_HEADER, STORE_TID_TO_TILE
from text_edits import checked, filled


# Two threads of one CTA store to one word of `out` (threads 0 and 32, or one instruction for both).
_TWO_STORES = PTX_HEADER + """.visible .entry stores(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<1>;
    .reg .pred %p<2>;
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    setp.eq.u32 %p0, %r0, 0;
    setp.eq.u32 %p1, %r0, 32;
    @%p0 st.global.u32 [%rd0], 1;
    SYNC
    @%p1 st.global.u32 [%rd0], 2;
    ret;
}
"""


def test_two_threads_storing_one_word_without_a_barrier_race():
    with pytest.raises(PtxHazardError, match=r"^<ptx>:16: error: st.global.u32: writes global address 0x[0-9a-f]+ "
                                             r"\(argument 0 \(out\) at byte offset 0\) through the generic proxy, which "
                                             r"the instruction at line 14 \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) "
                                             r"wrote through the generic proxy, and no synchronisation orders the two "
                                             r"\(race: a bar.sync.*\) \(thread \(32, 0, 0\) of CTA \(0, 0, 0\)\)"):
        launch(filled(_TWO_STORES, SYNC=""), "stores", 1, 64, [np.zeros(1, np.uint32)])


def test_a_barrier_orders_the_two_stores():
    out = launch(filled(_TWO_STORES, SYNC="bar.sync 0;"), "stores", 1, 64, [np.zeros(1, np.uint32)])[0]
    assert out[0] == 2


# Thread 0 stores word 0 and thread 32 word 1, then, after a barrier, thread 0 stores word 1 too.
_STORES_THEN_ONE_AFTER = filled(_TWO_STORES, SYNC="").replace(
    "@%p1 st.global.u32 [%rd0], 2;",
    "@%p1 st.global.u32 [%rd0+4], 2;\n    bar.sync 0;\n    @%p0 st.global.u32 [%rd0+4], 3;")


def test_a_program_launched_again_starts_with_no_write_records():
    """The write records of a launch are kept for the next launch of the same program (its decoded machine), zeroed
    over the ranges its stores touched (`GlobalOrder._cleared_writes`): thread 32's store of word 1 in a later
    launch meets no record of thread 0's store there after the barrier in the launch before (which nothing orders
    before it: a race)."""
    for _ in range(3):
        assert launch(_STORES_THEN_ONE_AFTER, "stores", 1, 64, [np.zeros(2, np.uint32)])[0].tolist() == [1, 3]


def test_the_write_records_handed_to_the_next_launch_are_zeroed():
    """`GlobalOrder._cleared_writes`: after random stores and writes (some vectors, some strong, some async) the table
    the next launch's order takes at its first write (`spare`) holds no record, and is the one it uses."""
    from tessera.interpreters.ptx.global_accesses import STRONG_GPU, WEAK, Words
    from tessera.interpreters.ptx.global_order import GlobalOrder

    rng = np.random.default_rng(3)
    m, order = _order_machine(True)
    for line in range(40):
        lanes = np.sort(rng.choice(8, int(rng.integers(1, 4)), replace=False))
        k = int(rng.choice([1, 4, 16]))
        where = rng.choice(2048 // 16, len(lanes), replace=False) * 16
        index = Words.aligned(where, k, order.size) if k > 1 and len(lanes) > 1 else where[:, None] + np.arange(k)
        try:
            order.access(SimpleInst(line), lanes, index, True, int(rng.choice([WEAK, STRONG_GPU])))
        except PtxHazardError:
            pass
    assert any(np.count_nonzero(column) for column in order.records["write"].values())
    following = GlobalOrder(m, order.size, order)
    assert following.spare is not None and not any(np.count_nonzero(c) for c in following.spare.values())
    spare = following.spare
    following.access(SimpleInst(1), np.array([0]), np.array([[0]]), True, WEAK)
    assert following.records["write"] is spare
    assert GlobalOrder(m, order.size + 16, following).spare is None  # (another program's memory: a fresh table)


def test_two_threads_storing_one_word_in_one_instruction_race():
    text = checked(_TWO_STORES).replace("@%p0 st.global.u32 [%rd0], 1;", "").replace(
        "@%p1 st.global.u32 [%rd0], 2;", "st.global.u32 [%rd0], %r0;")
    with pytest.raises(PtxHazardError, match=r"^<ptx>:16: error: st.global.u32: writes global address .* which the "
                                             r"instruction at line 16 \(thread \(\d+, 0, 0\) of CTA \(0, 0, 0\)\) "
                                             r"wrote .* no synchronisation orders the two \(race: two threads store to one "
                                             r"location in one instruction\)"):
        launch(filled(text, SYNC=""), "stores", 1, 64, [np.zeros(1, np.uint32)])


# CTA 0's thread 0 writes `data` and signals `flag`; CTA 1's thread 0 waits for the flag and copies `data` to `out`.
# The producer's path comes first, so min-pc scheduling runs it before the consumer spins.
_HANDOFF = PTX_HEADER + """.visible .entry handoff(.param .u64 data, .param .u64 flag, .param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .reg .pred %p<3>;
    mov.u32 %r0, %tid.x;
    setp.ne.u32 %p0, %r0, 0;
    @%p0 bra DONE;
    ld.param.u64 %rd0, [data];
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %ctaid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra CONSUMER;
    st.global.u32 [%rd0], 42;
    SIGNAL
    bra DONE;
CONSUMER:
    WAIT
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra CONSUMER;
    ld.global.u32 %r3, [%rd0];
    st.global.u32 [%rd2], %r3;
DONE:
    ret;
}
"""
_RELEASE = "st.release.gpu.global.u32 [%rd1], 1;"
_ACQUIRE = "ld.acquire.gpu.global.u32 %r2, [%rd1];"


def _handoff(signal: str = _RELEASE, wait: str = _ACQUIRE) -> np.ndarray:
    text = filled(_HANDOFF, SIGNAL=signal, WAIT=wait)
    return launch(text, "handoff", 2, 32, [np.zeros(1, np.uint32), np.zeros(1, np.uint32), np.zeros(1, np.uint32)])[2]


@pytest.mark.parametrize("signal, wait", [
    (_RELEASE, _ACQUIRE),
    ("red.release.gpu.global.add.u32 [%rd1], 1;", _ACQUIRE),
    ("fence.acq_rel.gpu;\n    st.relaxed.gpu.global.u32 [%rd1], 1;", _ACQUIRE),
    (_RELEASE, "ld.relaxed.gpu.global.u32 %r2, [%rd1];\n    fence.acq_rel.gpu;"),
    ("membar.gl;\n    st.volatile.global.u32 [%rd1], 1;", "atom.acquire.gpu.global.or.b32 %r2, [%rd1], 0;"),
])
def test_a_release_acquire_pair_orders_the_handoff_between_ctas(signal, wait):
    assert _handoff(signal, wait)[0] == 42


# The same handoff with the consumer's spin first (lower pcs, as in CUTLASS's stream-K fixup, where the unit that
# waits for a partial tile runs ahead of the one that writes it): min-pc scheduling picks the spin every step.
_SPIN_FIRST = checked(_HANDOFF).replace("""    @%p1 bra CONSUMER;
    st.global.u32 [%rd0], 42;
    SIGNAL
    bra DONE;
CONSUMER:
    WAIT
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra CONSUMER;
    ld.global.u32 %r3, [%rd0];
    st.global.u32 [%rd2], %r3;
""", """    @%p1 bra CONSUMER;
    bra PRODUCER;
CONSUMER:
    WAIT
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra CONSUMER;
    ld.global.u32 %r3, [%rd0];
    st.global.u32 [%rd2], %r3;
    bra DONE;
PRODUCER:
    st.global.u32 [%rd0], 42;
    SIGNAL
""")


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("adversarial", 4)])
def test_a_spin_on_ld_acquire_lets_the_cta_that_writes_the_flag_run(schedule, seed):
    """CUTLASS's GenericBarrier spins on ld.acquire.gpu with no nanosleep: a thread that comes back to the same
    strong load with no write since parks until nothing else can run (a legal timing), so the producer, at a
    higher pc, gets on; the executor ran the spin until max_steps before (split-K in 3 on 128 x 128 x 192)."""
    text = filled(_SPIN_FIRST, SIGNAL="red.release.gpu.global.add.u32 [%rd1], 1;", WAIT=_ACQUIRE)
    out = launch(text, "handoff", 2, 32, [np.zeros(1, np.uint32), np.zeros(1, np.uint32), np.zeros(1, np.uint32)],
                 schedule=schedule, seed=seed)
    assert out[2][0] == 42


def test_a_spin_on_a_flag_nobody_writes_is_a_deadlock_at_the_load():
    text = filled(_SPIN_FIRST, SIGNAL="", WAIT=_ACQUIRE)
    with pytest.raises(PtxDeadlockError, match=r"sleep in a spin wait that nothing can end \(a semaphore "
                                               r"wait, ld.acquire, .* at line 20 \(ld.acquire.gpu.global.u32\)"):
        launch(text, "handoff", 2, 32, [np.zeros(1, np.uint32), np.zeros(1, np.uint32), np.zeros(1, np.uint32)])


_UNORDERED = (r"^<ptx>:25: error: ld.global.u32: reads global address 0x[0-9a-f]+ \(argument 0 \(data\) at byte offset "
              r"0\) through the generic proxy, which the instruction at line 18 \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) "
              r"wrote through the generic proxy, and no synchronisation orders the two \(race: another CTA's access is "
              r"ordered only by a release .* \(thread \(0, 0, 0\) of CTA \(1, 0, 0\)\)")


@pytest.mark.parametrize("signal, wait", [
    (_RELEASE, "ld.relaxed.gpu.global.u32 %r2, [%rd1];"),  # no acquire
    ("st.relaxed.gpu.global.u32 [%rd1], 1;", _ACQUIRE),  # no release
    ("atom.relaxed.gpu.global.exch.b32 %r2, [%rd1], 1;", _ACQUIRE),
    (_RELEASE, "ld.volatile.global.u32 %r2, [%rd1];"),
])
def test_the_relaxed_twin_of_the_handoff_is_a_race(signal, wait):
    with pytest.raises(PtxHazardError, match=_UNORDERED):
        _handoff(signal, wait)


@pytest.mark.parametrize("signal, wait", [
    ("st.global.u32 [%rd1], 1;", "ld.global.u32 %r2, [%rd1];"),  # weak: never morally strong
    ("st.release.cta.global.u32 [%rd1], 1;", "ld.acquire.cta.global.u32 %r2, [%rd1];"),  # .cta excludes CTA 0
])
def test_the_flag_itself_races_unless_its_accesses_are_morally_strong(signal, wait):
    """The strong .gpu flag accesses above never race with each other; plain ones, or .cta-scoped ones of two CTAs,
    do."""
    with pytest.raises(PtxHazardError, match=r"^<ptx>:22: error: ld\S*: reads global address .*\(argument 1 "
                                             r"\(flag\) at byte offset 0\).* which the instruction at line 19 \(thread "
                                             r"\(0, 0, 0\) of CTA \(0, 0, 0\)\) wrote"):
        _handoff(signal, wait)


# Every thread of two CTAs reads `x[0]`, then (after its CTA's barrier) thread 0 of CTA 1 overwrites it: CTA 0's
# reads race with the write even though CTA 1's own reads (ordered before its write) came last.
_READ_THEN_WRITE = PTX_HEADER + """.visible .entry overwrite(.param .u64 x, .param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .reg .pred %p<2>;
    ld.param.u64 %rd0, [x];
    ld.param.u64 %rd1, [out];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %ctaid.x;
    ld.global.u32 %r2, [%rd0];
    or.b32 %r3, %r0, %r1;
    setp.eq.u32 %p0, %r3, 0;
    @%p0 st.global.u32 [%rd1], %r2;
    setp.eq.u32 %p1, %r1, 1;
    setp.eq.and.u32 %p1, %r0, 0, %p1;
    bar.sync 0;
    @%p1 st.global.u32 [%rd0], 9;
    ret;
}
"""


@pytest.mark.parametrize("grid, block, cta_order", [(2, 32, [0, 1]), (2, 32, [1, 0]), (3, 1024, None)])
def test_a_write_after_another_ctas_read_is_a_race(grid, block, cta_order):
    """In one batch of CTAs, or in the next batch (1024 threads: two CTAs a batch): records last the launch."""
    text = checked(_READ_THEN_WRITE).replace("setp.eq.u32 %p1, %r1, 1;", f"setp.eq.u32 %p1, %r1, {grid - 1};")
    with pytest.raises(PtxHazardError, match=r"^<ptx>:20: error: st.global.u32: writes global address .*\(argument 0 "
                                             r"\(x\) .* which the instruction at line 13 \(thread \(\d+, 0, 0\) of CTA "
                                             r"\([01], 0, 0\)\) read"):
        launch(text, "overwrite", grid, block, [np.full(1, 5, np.uint32), np.zeros(1, np.uint32)], cta_order=cta_order)


def test_atomics_of_every_thread_and_cta_never_race():
    text = PTX_HEADER + """.visible .entry count(.param .u64 x)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<1>;
    ld.param.u64 %rd0, [x];
    atom.global.add.u32 %r0, [%rd0], 1;
    red.global.add.u32 [%rd0], 1;
    ret;
}
"""
    assert launch(text, "count", 3, 64, [np.zeros(1, np.uint32)])[0][0] == 2 * 3 * 64


def test_races_false_turns_the_global_checks_off():
    out = launch(filled(_TWO_STORES, SYNC=""), "stores", 1, 64, [np.zeros(1, np.uint32)], races=False)[0]
    assert out[0] == 2


# Threads 0 and 32 read x[0] (two instructions, or all 64 threads in one), then thread 32 (or 63) overwrites it
# with no barrier: thread 0's read races with the write though the writer's own read, ordered before its write,
# came last. Every concurrent reader since the last write is kept.
_READERS_THEN_WRITE = PTX_HEADER + """.visible .entry readers(.param .u64 x, .param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .reg .pred %p<3>;
    ld.param.u64 %rd0, [x];
    ld.param.u64 %rd1, [out];
    mov.u32 %r0, %tid.x;
    setp.eq.u32 %p0, %r0, 0;
    setp.eq.u32 %p1, %r0, WRITER;
    READS
    @%p1 st.global.u32 [%rd0], 9;
    ret;
}
"""


@pytest.mark.parametrize("reads, writer", [
    ("@%p0 ld.global.u32 %r1, [%rd0];\n    @%p1 ld.global.u32 %r2, [%rd0];", 32),
    ("@%p1 ld.global.u32 %r2, [%rd0];\n    @%p0 ld.global.u32 %r1, [%rd0];", 32),
    ("ld.global.u32 %r1, [%rd0];", 63),
    ("ld.global.u32 %r1, [%rd0];", 0),
])
def test_a_write_races_every_unordered_reader_since_the_last_write(reads, writer):
    text = filled(_READERS_THEN_WRITE, WRITER=str(writer), READS=reads)
    other = r"\(thread \((?!" + str(writer) + r",)\d+, 0, 0\) of CTA \(0, 0, 0\)\)"  # a reader, not the writer
    with pytest.raises(PtxHazardError, match=r"^<ptx>:1[56]: error: st.global.u32: writes global address .*\(argument "
                                             r"0 \(x\) at byte offset 0\) .* which the instruction at line 1[45] "
                                             + other + r" read through the generic proxy"):
        launch(text, "readers", 1, 64, [np.full(1, 5, np.uint32), np.zeros(1, np.uint32)])
    ordered = checked(text).replace("    @%p1 st.global", "    bar.sync 0;\n    @%p1 st.global")
    assert launch(ordered, "readers", 1, 64, [np.full(1, 5, np.uint32), np.zeros(1, np.uint32)])[0][0] == 9


def test_readers_of_three_ctas_are_all_kept():
    """CTAs 0, 1 and 2 read x[0], in every order; CTA 2's thread 0 writes it after its own read and a barrier:
    CTA 0's and CTA 1's reads race with it, whichever ran first."""
    text = checked(_READ_THEN_WRITE).replace("setp.eq.u32 %p1, %r1, 1;", "setp.eq.u32 %p1, %r1, 2;")
    for order in ([0, 1, 2], [1, 0, 2], [2, 0, 1]):
        with pytest.raises(PtxHazardError, match=r"^<ptx>:20: error: st.global.u32: .* which the instruction at line "
                                                 r"13 \(thread \(\d+, 0, 0\) of CTA \([01], 0, 0\)\) read"):
            launch(text, "overwrite", 3, 32, [np.full(1, 5, np.uint32), np.zeros(1, np.uint32)], cta_order=order)


# Every thread of a warp stores two words of `src` through the generic proxy; thread 0 then copies `src` into
# shared memory with a bulk copy, which reads global memory through the async proxy.
_STORE_THEN_BULK = PTX_HEADER + """.visible .entry store_then_bulk(.param .u64 src)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .reg .pred %p<2>;
    .shared .align 128 .b8 tile[256];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, tile;
    mov.u32 %r2, bar;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 1;
    ld.param.u64 %rd0, [src];
    mul.wide.u32 %rd1, %r0, 8;
    add.s64 %rd1, %rd0, %rd1;
    st.global.v2.u32 [%rd1], {%r0, %r0};
    EVERY
    bar.sync 0;
    ISSUER
    @%p0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], 256;
    @%p0 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd0], 256, [%r2];
LOOP:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r2], 0;
    @!%p1 bra LOOP;
    ret;
}
"""


@pytest.mark.parametrize("every, issuer, reported", [
    ("", "", "thread \\(0, 0, 0\\)"),  # no fence at all: even the issuer's own store
    ("", "@%p0 fence.proxy.async.shared::cta;", "thread \\(0, 0, 0\\)"),  # orders shared memory only
    ("@%p0 fence.proxy.async.global;", "", "thread \\([1-9]\\d*, 0, 0\\)"),  # before the barrier: its own stores
    ("", "@%p0 fence.proxy.async.global;", None),  # the barrier carries every store to the fence
    ("", "@%p0 fence.proxy.async;", None),
    ("fence.proxy.async.global;", "", None),  # each thread fences its own stores before the barrier
])
def test_generic_global_stores_read_by_a_bulk_copy_need_a_proxy_fence(every, issuer, reported):
    """[memory_model.PROXY_FENCE_STATE_SPACE]: a fence.proxy.async (or .global) on a path from each store to the
    async-proxy read; .shared::cta orders no global memory."""
    text = filled(_STORE_THEN_BULK, EVERY=every, ISSUER=issuer)
    src = np.zeros(64, np.uint32)
    if reported is None:
        out = launch(text, "store_then_bulk", 1, 32, [src])[0]
        assert np.array_equal(out, np.repeat(np.arange(32, dtype=np.uint32), 2))
        return
    with pytest.raises(PtxHazardError, match=r"^<ptx>:\d+: error: cp.async.bulk\S*: reads global address .*\(argument "
                                             r"0 \(src\) at byte offset \d+\) through the async proxy, which the "
                                             r"instruction at line 19 \(" + reported + r" of CTA \(0, 0, 0\)\) wrote "
                                             r"through the generic proxy and has not made visible to the async proxy "
                                             r"\(missing fence.proxy.async"):
        launch(text, "store_then_bulk", 1, 32, [src])


# The same through a TMA tensor load: each thread stores two words of `src`, thread 0 loads it back as a 64-word
# box through the tensor map of argument 0.
_STORE_THEN_TMA = PTX_HEADER + """.visible .entry store_then_tma(.param .u64 src, .param .align 64 .b8 tmap[128])
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .reg .pred %p<2>;
    .shared .align 128 .b8 tile[256];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, tile;
    mov.u32 %r2, bar;
    mov.u32 %r3, 0;
    mov.b64 %rd3, tmap;
    cvta.param.u64 %rd3, %rd3;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 1;
    ld.param.u64 %rd0, [src];
    mul.wide.u32 %rd1, %r0, 8;
    add.s64 %rd1, %rd0, %rd1;
    st.global.v2.u32 [%rd1], {%r0, %r0};
    bar.sync 0;
    FENCE
    @%p0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], 256;
    @%p0 cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd3, {%r3}], [%r2];
LOOP:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r2], 0;
    @!%p1 bra LOOP;
    ret;
}
"""


@pytest.mark.parametrize("fence, reported", [("", True), ("@%p0 fence.proxy.async.shared::cta;", True),
                                             ("@%p0 fence.proxy.async.global;", False)])
def test_generic_global_stores_read_by_a_tma_load_need_a_proxy_fence(fence, reported):
    from tessera.interpreters.ptx import TensorMapArg

    args = [np.zeros(64, np.uint32), TensorMapArg.tiled(0, (64,), shape=(64,), dtype=np.uint32)]
    text = filled(_STORE_THEN_TMA, FENCE=fence)
    if not reported:
        assert np.array_equal(launch(text, "store_then_tma", 1, 32, args)[0], np.repeat(np.arange(32), 2))
        return
    with pytest.raises(PtxHazardError, match=r"cp.async.bulk.tensor\S*: reads global address .* through the async "
                                             r"proxy, which the instruction at line 22 \(thread \(0, 0, 0\) of CTA "
                                             r"\(0, 0, 0\)\) wrote through the generic proxy and has not made visible "
                                             r"to the async proxy"):
        launch(text, "store_then_tma", 1, 32, args)


# Thread 0 loads `src` with a TMA load; every thread then overwrites its two words of it (BEFORE the wait on the
# load's mbarrier, or AFTER it): the load reads global memory until its complete-tx.
_TMA_THEN_STORE = PTX_HEADER + """.visible .entry tma_then_store(.param .u64 src, .param .align 64 .b8 tmap[128])
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .reg .pred %p<2>;
    .shared .align 128 .b8 tile[256];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, tile;
    mov.u32 %r2, bar;
    mov.u32 %r3, 0;
    mov.b64 %rd3, tmap;
    cvta.param.u64 %rd3, %rd3;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 1;
    bar.sync 0;
    ld.param.u64 %rd0, [src];
    mul.wide.u32 %rd1, %r0, 8;
    add.s64 %rd1, %rd0, %rd1;
    @%p0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], 256;
    @%p0 cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd3, {%r3}], [%r2];
BEFORE
LOOP:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r2], 0;
    @!%p1 bra LOOP;
AFTER
    ret;
}
"""
_OVERWRITE = "    st.global.v2.u32 [%rd1], {%r0, %r0};"


@pytest.mark.parametrize("before, after, reported", [
    ("    bar.sync 0;\n" + _OVERWRITE, "", True),  # ordered after the issue, not after the read
    ("", _OVERWRITE, False),  # after the wait: the complete-tx released the read
    ("", "    @%p0 " + _OVERWRITE.strip(), False),  # the issuing thread after its wait
], ids=["after-a-barrier", "after-the-wait", "issuer-after-the-wait"])
def test_a_tma_loads_source_may_be_overwritten_only_after_its_phase_completes(before, after, reported):
    """[memory_model.TMA_READ_UNTIL_COMPLETE] The copy reads global memory until its complete-tx: a bar.sync after
    the issue orders the issue, not the read, before the stores; the wait on its phase orders the read."""
    from tessera.interpreters.ptx import TensorMapArg

    src = np.arange(64, dtype=np.uint32)
    args = [src, TensorMapArg.tiled(0, (64,), shape=(64,), dtype=np.uint32)]
    text = filled(_TMA_THEN_STORE, BEFORE=before, AFTER=after)
    if not reported:
        out = launch(text, "tma_then_store", 1, 32, args)[0]
        expected = np.repeat(np.arange(32, dtype=np.uint32), 2) if "@" not in after else \
            np.concatenate([[0, 0], np.arange(2, 64, dtype=np.uint32)])
        np.testing.assert_array_equal(out, expected)
        return
    with pytest.raises(PtxHazardError, match=r"st.global.v2.u32: writes global address .* \(argument 0 \(src\) at "
                                             r"byte offset 0\), which the TMA or bulk load at line 24 \(thread "
                                             r"\(0, 0, 0\) of CTA \(0, 0, 0\)\) reads through the async proxy until it "
                                             r"completes phase 0 of .*, which this thread has not observed"):
        launch(text, "tma_then_store", 1, 32, args)


# CTA 0's thread 0 stores 16 words and releases a flag; CTA 1's thread 0 acquires it and bulk-copies the words.
_HANDOFF_TO_BULK = PTX_HEADER + """.visible .entry handoff_bulk(.param .u64 data, .param .u64 flag)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    .reg .pred %p<3>;
    .shared .align 128 .b8 tile[64];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, tile;
    mov.u32 %r2, bar;
    ld.param.u64 %rd0, [data];
    ld.param.u64 %rd1, [flag];
    setp.ne.u32 %p0, %r0, 0;
    @%p0 bra CONSUMER;
    st.global.v4.u32 [%rd0], {%r0, %r0, %r0, %r0};
    st.global.v4.u32 [%rd0+16], {%r0, %r0, %r0, %r0};
    st.global.v4.u32 [%rd0+32], {%r0, %r0, %r0, %r0};
    st.global.v4.u32 [%rd0+48], {%r0, %r0, %r0, %r0};
    PRODUCER_FENCE
    st.release.gpu.global.u32 [%rd1], 1;
    bra DONE;
CONSUMER:
    ld.acquire.gpu.global.u32 %r3, [%rd1];
    setp.eq.u32 %p1, %r3, 0;
    @%p1 bra CONSUMER;
    CONSUMER_FENCE
    mbarrier.init.shared::cta.b64 [%r2], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], 64;
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd0], 64, [%r2];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r2], 0;
    @!%p2 bra WAIT;
DONE:
    ret;
}
"""


@pytest.mark.parametrize("producer, consumer, reported", [
    ("", "", True),
    ("fence.proxy.async.global;", "", False),  # before the release: carried with it
    ("", "fence.proxy.async.global;", False),  # after the acquire: on the path too
    ("", "fence.proxy.async.shared::cta;", True),
])
def test_another_ctas_generic_stores_read_by_a_bulk_copy_need_a_proxy_fence_on_the_path(producer, consumer, reported):
    text = filled(_HANDOFF_TO_BULK, PRODUCER_FENCE=producer, CONSUMER_FENCE=consumer)
    args = [np.zeros(16, np.uint32), np.zeros(1, np.uint32)]
    if not reported:
        launch(text, "handoff_bulk", 2, 1, args)
        return
    with pytest.raises(PtxHazardError, match=r"cp.async.bulk\S*: reads global address .*\(argument 0 \(data\) at byte "
                                             r"offset \d+\) through the async proxy, which the instruction at line \d+ "
                                             r"\(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) wrote through the generic "
                                             r"proxy and has not made visible to the async proxy .* \(thread \(0, 0, 0\) "
                                             r"of CTA \(1, 0, 0\)\)"):
        launch(text, "handoff_bulk", 2, 1, args)


# Thread 0 stores 4 floats of `out`, then adds a shared tile into them with a bulk reduction, which reads them
# through the async proxy.
_STORE_THEN_REDUCE = PTX_HEADER + """.visible .entry store_then_reduce(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<1>;
    .reg .f32 %f<1>;
    .shared .align 128 .b8 tile[16];
    mov.u32 %r0, tile;
    mov.f32 %f0, 0f3F800000;
    ld.param.u64 %rd0, [out];
    st.global.v4.f32 [%rd0], {%f0, %f0, %f0, %f0};
    st.shared.v4.f32 [%r0], {%f0, %f0, %f0, %f0};
    FENCE
    cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd0], [%r0], 16;
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
    ret;
}
"""


def test_a_bulk_reduction_into_generic_global_stores_needs_a_proxy_fence():
    """The reduction reads what it adds to: a fence.proxy.async covering global memory must come between."""
    out = launch(filled(_STORE_THEN_REDUCE, FENCE="fence.proxy.async;"), "store_then_reduce", 1, 1,
                 [np.zeros(4, np.float32)])[0]
    assert np.array_equal(out, np.full(4, 2, np.float32))
    with pytest.raises(PtxHazardError, match=r"cp.reduce.async.bulk\S*: reads global address .* through the async "
                                             r"proxy \(bulk reduction\), which the instruction at line 13 .* has not "
                                             r"made visible to the async proxy"):
        launch(filled(_STORE_THEN_REDUCE, FENCE="fence.proxy.async.shared::cta;"), "store_then_reduce", 1, 1,
               [np.zeros(4, np.float32)])


# Every thread stores its id into the shared tile, fences, meets at the barrier; then every lane of warp 0 issues
# a bulk store of the tile (CUTLASS's sm90 epilogue issues its TMA stores from a whole warp): LANE_ADDRESS picks
# the global address each lane stores to.
_WARP_BULK_STORE = PTX_HEADER + """.visible .entry warp_store(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .reg .pred %p<1>;
    .shared .align 128 .b8 tile[256];
""" + STORE_TID_TO_TILE + """    fence.proxy.async.shared::cta;
    bar.sync 0;
    setp.ge.u32 %p0, %r0, 32;
    @%p0 bra DONE;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    LANE_ADDRESS
    cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r1], 256;
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group.read 0;
DONE:
    ret;
}
"""


def test_a_warp_issuing_one_bulk_store_stores_once():
    """The lanes of a warp with the same operands issue one bulk store (TMA runs on the uniform datapath, once
    per warp and operand set): not 32 stores of one tile racing each other."""
    out = launch(filled(_WARP_BULK_STORE, LANE_ADDRESS=""), "warp_store", 1, 64, [np.zeros(64, np.uint32)])[0]
    np.testing.assert_array_equal(out, np.arange(64))


def test_lanes_of_a_warp_with_different_operands_issue_one_bulk_store_each():
    """Lanes 0-15 store the tile to out[0:64], lanes 16-31 to out[64:128]: two stores, both land."""
    per_half = ("shr.u32 %r3, %r0, 4;\n    mul.wide.u32 %rd1, %r3, 256;\n    add.s64 %rd0, %rd0, %rd1;")
    out = launch(filled(_WARP_BULK_STORE, LANE_ADDRESS=per_half), "warp_store", 1, 64,
                 [np.zeros(128, np.uint32)])[0]
    np.testing.assert_array_equal(out, np.tile(np.arange(64), 2))


def test_a_warp_issuing_one_bulk_load_loads_once():
    """`tessera.sm90.tma.BULK_COPY_ISSUED_PER_DISTINCT_OPERANDS` for loads: every lane of the warp executes the
    same bulk copy into shared memory after one expect_tx of 256 bytes: one copy is issued and completes the
    phase (32 copies would complete 32 times the bytes the barrier expects)."""
    text = (checked(_STORE_THEN_BULK).replace("EVERY", "fence.proxy.async.global;").replace("ISSUER", "")
            .replace("@%p0 cp.async.bulk", "cp.async.bulk"))
    out = launch(text, "store_then_bulk", 1, 32, [np.zeros(64, np.uint32)])[0]
    assert np.array_equal(out, np.repeat(np.arange(32, dtype=np.uint32), 2))


@pytest.mark.parametrize("wait, reported", [("cp.async.bulk.wait_group.read 0;", False),
                                            ("cp.async.bulk.wait_group 0;", False), ("", True),
                                            ("cp.async.bulk.wait_group.read 1;", True),
                                            ("cp.async.bulk.commit_group;\n    cp.async.bulk.wait_group.read 1;", False)])
def test_a_cta_exiting_before_its_bulk_store_read_the_tile_is_reported(wait, reported):
    """[memory_model.BULK_READ_BEFORE_EXIT] a bulk store reads its shared source until a wait_group(.read) of the
    issuing thread covers its group; the CTA exiting before frees the memory it reads (FA3's backward with its
    dK/dV epilogue's last wait deleted). A wait that leaves the store's group pending does not
    cover it; one that leaves only a newer (empty) group pending does."""
    text = checked(_WARP_BULK_STORE).replace("LANE_ADDRESS", "").replace("cp.async.bulk.wait_group.read 0;", wait)
    if not reported:
        out = launch(text, "warp_store", 1, 64, [np.zeros(64, np.uint32)])[0]
        np.testing.assert_array_equal(out, np.arange(64))
        return
    with pytest.raises(PtxHazardError, match="exits while this bulk store .* may still read its shared source"):
        launch(text, "warp_store", 1, 64, [np.zeros(64, np.uint32)])


# Warp 0 fills a shared buffer and publishes it (bar.arrive 1); thread 32 of warp 1 adds it into `out` with a bulk
# reduction and frees the buffer (bar.arrive 2) for warp 0's next stores: FA3's backward's dQ writer, one buffer.
# The stores come last in the text, so the executor's min-pc schedule runs the writer's later wait before them.
_REDUCE_THEN_FREE = PTX_HEADER + """.visible .entry dq(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<1>;
    .reg .pred %p<2>;
    .shared .align 128 .b8 buf[128];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, buf;
    setp.lt.u32 %p0, %r0, 32;
    @!%p0 bra WRITER;
    shl.b32 %r2, %r0, 2;
    add.u32 %r2, %r1, %r2;
    st.shared.u32 [%r2], 1065353216;
    fence.proxy.async.shared::cta;
    bar.arrive 1, 64;
    bar.sync 2, 64;
    bra.uni REFILL;
WRITER:
    setp.eq.u32 %p1, %r0, 32;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    bar.sync 1, 64;
    @%p1 cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd0], [%r1], 128;
    @%p1 cp.async.bulk.commit_group;
    BEFORE
    bar.arrive 2, 64;
    AFTER
    ret;
REFILL:
    st.shared.u32 [%r2], 0;
    ret;
}
"""


_BULK_STORE = "@%p1 cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r1], 128;"


@pytest.mark.parametrize("store", [False, True], ids=["reduction", "store"])
@pytest.mark.parametrize("before, after, reported", [("@%p1 cp.async.bulk.wait_group.read 0;", "", False),
                                                     ("", "@%p1 cp.async.bulk.wait_group.read 0;", True)])
def test_a_buffer_freed_before_the_bulk_copy_reading_it_is_waited_for_is_a_race(before, after, reported, store):
    """[memory_model.BULK_READ_BEFORE_EXIT] the reduction reads the buffer until the issuing thread's
    wait_group.read; the next stores into it must happen after that wait. Freeing the buffer first and waiting
    later is a race whatever order the executor runs the two warps in: the wait that covers the read comes after
    the release the stores acquire (FA3's dQ writer with its first bulk wait deleted)."""
    text = filled(_REDUCE_THEN_FREE, BEFORE=before, AFTER=after)
    if store:  # a bulk store of the buffer reads it the same way
        text = "\n".join(_BULK_STORE if "cp.reduce" in line else line for line in text.split("\n"))
    if not reported:
        out = launch(text, "dq", 1, 64, [np.zeros(32, np.float32)])[0]
        np.testing.assert_array_equal(out, np.ones(32, np.float32))
        return
    with pytest.raises(PtxHazardError, match=r"overwrites shared address 0x\d+, which the bulk (reduction|store) at "
                                             r"line \d+ \(thread \(32, 0, 0\).*\) read until its cp.async.bulk.wait_group"):
        launch(text, "dq", 1, 64, [np.zeros(32, np.float32)])


@pytest.mark.parametrize("before, reported", [
    ("", False),  # every thread waits
    ("    @%p0 barrier.arrive 1, 32;\n    @!%p0 barrier.sync 1, 32;\n    @!%p0 bra SKIP;", True),
], ids=["all-wait", "released-before-the-wait"])
def test_a_store_over_a_tma_copy_needs_the_copys_phase_observed(before, reported):
    """[memory_model.TMA_READ_UNTIL_COMPLETE] The copy writes the tile until its complete-tx: thread 0 releases the
    others on a named barrier before it waits for the copy, so their stores into the tile are not ordered after
    the copy's writes, although the executor landed it for thread 0's wait before they stored. (The warp splits
    between two barrier instructions: barrier.arrive/barrier.sync without .aligned, which allow it; bar.* are
    aligned and a warp reaching them at two instructions is itself a hazard, tests/test_ptx_exec.py.)"""
    from tessera.interpreters.ptx import TensorMapArg

    text = filled(_TMA_THEN_STORE, BEFORE=before, AFTER="SKIP:\n"
                                                                    "    mul.lo.u32 %r3, %r0, 4;\n"
                                                                    "    add.u32 %r3, %r1, %r3;\n"
                                                                    "    st.shared.u32 [%r3], %r0;")
    args = [np.arange(64, dtype=np.uint32), TensorMapArg.tiled(0, (64,), shape=(64,), dtype=np.uint32)]
    if not reported:
        launch(text, "tma_then_store", 1, 32, args)
        return
    with pytest.raises(PtxHazardError, match=r"st.shared.u32: the store writes shared address 0x4, which the TMA copy "
                                             r"completing phase 0 \(parity 0\) of the mbarrier at shared address "
                                             r"0x100 writes, and this thread has not observed that phase"):
        launch(text, "tma_then_store", 1, 32, args)


# TMA boxes' read records kept as one per box (`GlobalOrder.boxes`) against recording each read per byte


def _order_machine(keep_boxes: bool):
    """A GlobalOrder over 4 CTAs of 2 threads and 2 KiB of global memory, on a stub machine."""
    from types import SimpleNamespace

    from tessera.interpreters.ptx.global_order import GlobalOrder
    from tessera.interpreters.ptx.happens_before import HappensBefore
    from tessera.interpreters.ptx.state import GLOBAL_BASE

    def hazard(inst, message, lane):
        return PtxHazardError(f"{inst.line}: {message} (lane {lane})")

    hb = HappensBefore(8, 2, 64, hazard, str, lambda lane: f"lane {lane}")
    tracker = SimpleNamespace(hb=hb, observed=np.zeros((2, 8), np.int64), barrier_name=lambda b: f"barrier {b}",
                              bulk_open=np.zeros(8, np.int64), global_sources=())
    memory = SimpleNamespace(_starts=np.array([GLOBAL_BASE]), segments=[SimpleNamespace(name="t", start=GLOBAL_BASE)])
    m = SimpleNamespace(grid=(4, 1, 1), block=(2, 1, 1), threads=2, lanes=8, lane_cta=np.arange(8) // 2,
                        ctaid=np.array([[r, 0, 0] for r in range(4)]), tracker=tracker, memory=memory,
                        cluster=(1, 1, 1), cluster_size=1)
    order = GlobalOrder(m, 2048)
    order.keep_boxes = keep_boxes
    return m, order


def _replay(keep_boxes: bool, ops: list, ctas_alone: bool = False, words: bool = True) -> tuple[list[str], object]:
    """(each op's outcome, the order): "ctas" reads a box by one thread of each of several CTAs (`lane`: their lanes,
    ascending) through `read_box_ctas`, or thread by thread where it declines or `ctas_alone`; "store" writes `extra`
    bytes at each of the flat positions `where` (aligned) by `lane` (their lanes), given as `Words` (`words`, as
    `memory.access` gives a plain store) or as the bytes' index."""
    from tessera.interpreters.ptx.global_accesses import ASYNC, WEAK, Words

    m, order = _order_machine(keep_boxes)
    hb, outcomes = m.tracker.hb, []
    order.together = 0
    for line, (op, lane, where, extra) in enumerate(ops, 1):
        inst = SimpleInst(line)
        try:
            if op == "ctas":
                if not ctas_alone and order.read_box_ctas(inst, np.array(lane), where, ASYNC):
                    order.together += 1
                else:
                    for one in lane:
                        order.read_box(inst, one, where, ASYNC)
            elif op == "box":
                order.read_box(inst, lane, where, ASYNC)
            elif op == "until":
                order.read_until(inst, lane, where, 0, extra)
            elif op == "sync":  # lane acquires what `extra` released
                hb.clock[lane] = np.maximum(hb.clock[lane], hb._release(np.array([extra]))[0])
            elif op == "observe":
                m.tracker.observed[0, lane] = extra
            elif op == "store":
                index = Words.aligned(where, extra, order.size) if words else where[:, None] + np.arange(extra)
                order.access(inst, np.array(lane), index, True, WEAK)
            else:
                order.access(inst, np.array([lane]), where, op == "write", WEAK if extra else ASYNC)
            outcomes.append("ok")
        except PtxHazardError as error:
            outcomes.append(str(error))
    order._settle(0, order.size)
    return outcomes, order


class SimpleInst:
    def __init__(self, line):
        self.line, self.name = line, "op"


def test_box_records_kept_as_one_equal_recording_each_read():
    """Random TMA box reads by the threads of 4 CTAs (two column halves of a tile, an overlapping box, one the
    tensor's edge clips), their `until`s, generic reads and writes (some into a box's hull between its rows),
    and synchronisation: every report, and every per-byte record once the boxes are written out, is the same
    with the records kept per box as with each read recorded per byte."""
    from tessera.interpreters.ptx.global_accesses import StridedBox

    rng = np.random.default_rng(11)
    boxes = [StridedBox(512, (4, 32), (64, 1)), StridedBox(544, (4, 32), (64, 1)), StridedBox(600, (3, 40), (64, 1)),
             StridedBox(1024, (2, 32), (64, 1)), StridedBox(1200, (2, 2, 8), (128, 32, 1))]
    for trial in range(4):
        ops = []
        for _ in range(50):
            kind = rng.choice(["box", "box", "box", "until", "sync", "observe", "read", "write"],
                              p=[.2, .2, .15, .15, .1, .05, .05, .1])
            lane = int(rng.integers(0, 8))
            if kind in ("box", "until"):
                ops.append((str(kind), lane, boxes[int(rng.integers(len(boxes)))], int(rng.integers(0, 3))))
            elif kind in ("sync", "observe"):
                ops.append((str(kind), lane, None, int(rng.integers(0, 8 if kind == "sync" else 4))))
            else:
                start = int(rng.choice([512 + 32, 512 + 64 * int(rng.integers(4)), 640, 1030, 1200 + 40]))
                ops.append((str(kind), lane, np.arange(start, start + int(rng.integers(1, 24))), bool(rng.random() < .8)))
        kept, eager = _replay(True, ops), _replay(False, ops)
        assert kept[0] == eager[0], trial
        assert any(o != "ok" for o in kept[0]) or trial  # reports happen (the first trial has some)
        assert not kept[1].boxes
        _assert_same_records(kept[1], eager[1])


def test_a_store_given_as_aligned_words_equals_its_bytes_index():
    """A plain store of aligned words (`memory.access`: st.global.b32 and its vectors) reaches `GlobalOrder.access` as
    `Words`, its bytes' index built only where a check or record needs it: among random box reads, their `until`s,
    generic reads and writes and synchronisation, stores of 2-16 bytes per lane by several lanes (some meeting a
    word another lane stores at once, or a byte another thread wrote or read) report and record exactly what the
    same stores given as their bytes' index do; and `Words.store` writes a buffer as the index's assignment does
    (a word two lanes store holds the later lane's bytes)."""
    from tessera.interpreters.ptx.global_accesses import StridedBox, Words

    rng = np.random.default_rng(29)
    boxes = [StridedBox(512, (4, 32), (64, 1)), StridedBox(1024, (2, 32), (64, 1))]
    stores = 0
    for trial in range(6):
        ops = []
        for _ in range(60):
            kind = rng.choice(["box", "until", "sync", "read", "write", "store"], p=[.15, .1, .15, .15, .1, .35])
            lane = int(rng.integers(0, 8))
            if kind in ("box", "until"):
                ops.append((str(kind), lane, boxes[int(rng.integers(len(boxes)))], int(rng.integers(0, 3))))
            elif kind == "sync":
                ops.append(("sync", lane, None, int(rng.integers(0, 8))))
            elif kind == "store":
                k = int(rng.choice([2, 4, 8, 16]))
                lanes = np.sort(rng.choice(8, int(rng.integers(2, 9)), replace=False))
                base = int(rng.choice([0, 512, 1024]))
                words = rng.choice((128 if trial % 2 else 512) // k, len(lanes), replace=bool(rng.random() < .2))
                ops.append(("store", lanes.tolist(), base + words * k, k))
            else:
                start = int(rng.choice([0, 512 + 32, 1024, 1040]))
                ops.append((str(kind), lane, np.arange(start, start + int(rng.integers(1, 24))), bool(rng.random() < .8)))
        given, indexed = _replay(True, ops), _replay(True, ops, words=False)
        assert given[0] == indexed[0], trial
        assert any(o != "ok" for o in given[0])
        _assert_same_records(given[1], indexed[1])
        for _, lanes, where, k in (op for op in ops if op[0] == "store"):
            data = rng.integers(0, 256, (len(lanes), k), np.uint8)
            a, b = rng.integers(0, 256, 2048 + 3, np.uint8), None  # (a buffer not of whole words)
            b = a.copy()
            Words.aligned(where, k, 2048).store(a, data)
            b[where[:, None] + np.arange(k)] = data
            assert np.array_equal(a, b)
            stores += 1
    assert stores > 100


def test_an_access_held_by_one_segment_is_inside_and_own_epochs_are_the_clocks_diagonal():
    """`GlobalMemory.holds` (an access whose lowest and highest address lie in one segment) decides only where
    `outside` finds every lane inside; `HappensBefore.own_epochs` (flat positions) gives clock[lane, lane % threads]."""
    from tessera.interpreters.ptx.happens_before import HappensBefore
    from tessera.interpreters.ptx.state import GlobalMemory

    rng = np.random.default_rng(7)
    memory = GlobalMemory()
    for size in (100, 256, 4, 1000):
        memory.allocate(f"a{size}", bytes(size))
    memory.finish()
    starts, ends = memory._starts, memory._ends
    held = 0
    for _ in range(500):
        nbytes = int(rng.choice([1, 4, 16]))
        segment = int(rng.integers(len(starts)))
        low, high = int(starts[segment]) - 8, int(ends[segment]) + 8
        addresses = rng.integers(low, high, int(rng.integers(1, 20)))
        if memory.holds(addresses, nbytes):
            held += 1
            assert not memory.outside(addresses, nbytes).any()
    assert held > 50
    hb = HappensBefore(12, 4, 64, None, str, str)
    hb.clock[...] = rng.integers(0, 100, hb.clock.shape)
    lanes = rng.choice(12, 7)
    assert np.array_equal(hb.own_epochs(lanes), hb.clock[lanes, lanes % 4])


def test_a_box_read_by_several_ctas_at_once_equals_reading_it_thread_by_thread():
    """`TmaReadRecords.read_box_ctas`: a box read by one thread of each of several CTAs as one read, a box no thread has
    read yet (a main loop's next K or V tile) or one read before, among single threads' box reads, `until`s,
    generic reads and writes and synchronisation: every report and every per-byte record once the boxes are
    written out are those of the threads reading it one by one, in order."""
    from tessera.interpreters.ptx.global_accesses import StridedBox

    rng = np.random.default_rng(12)
    boxes = [StridedBox(512, (4, 32), (64, 1)), StridedBox(544, (4, 32), (64, 1)), StridedBox(600, (3, 40), (64, 1)),
             StridedBox(1024, (2, 32), (64, 1)), StridedBox(1200, (2, 2, 8), (128, 32, 1))]
    together = 0
    for trial in range(6):
        ops = []
        for _ in range(50):
            kind = rng.choice(["ctas", "box", "until", "sync", "read", "write"], p=[.35, .15, .15, .15, .05, .15])
            lane = int(rng.integers(0, 8))
            if kind == "ctas":  # 2-4 CTAs, one thread each
                ctas = np.sort(rng.choice(4, int(rng.integers(2, 5)), replace=False))
                ops.append(("ctas", tuple((ctas * 2 + rng.integers(0, 2, len(ctas))).tolist()),
                            boxes[int(rng.integers(len(boxes)))], None))
            elif kind in ("box", "until"):
                ops.append((str(kind), lane, boxes[int(rng.integers(len(boxes)))], int(rng.integers(0, 3))))
            elif kind == "sync":
                ops.append(("sync", lane, None, int(rng.integers(0, 8))))
            else:
                start = int(rng.choice([512 + 32, 512 + 64 * int(rng.integers(4)), 640, 1030, 1200 + 40]))
                ops.append((str(kind), lane, np.arange(start, start + int(rng.integers(1, 24))), bool(rng.random() < .8)))
        at_once, alone = _replay(True, ops), _replay(True, ops, ctas_alone=True)
        assert at_once[0] == alone[0], trial
        _assert_same_records(at_once[1], alone[1])
        together += at_once[1].together
    assert together > 10  # (the box read at once: fresh boxes and boxes read before)


def _assert_same_records(a, b) -> None:
    """The same records per byte: last write, readers (the read set's, else the "read" table's one reader), and
    the TMA load reading it until a phase completes."""
    def fields(order, table, names):
        return [np.zeros(order.size, np.int64) if table is None else table[n].astype(np.int64) for n in names]

    for side in ("write", "until"):
        names = ("who", "epoch", "line") if side == "write" else ("who", "barrier", "phase", "line")
        for x, y in zip(*(fields(o, o.records.get("write") if side == "write" else o.until, names) for o in (a, b))):
            assert np.array_equal(x, y), side
    ids = [o.read_set if o.read_set is not None else np.zeros(o.size, np.int32) for o in (a, b)]
    alone = ids[0] == 0
    assert np.array_equal(alone, ids[1] == 0)
    for x, y in zip(*(fields(o, o.records.get("read"), ("who", "epoch", "line")) for o in (a, b))):
        assert np.array_equal(x[alone], y[alone])
    for i, j in set(zip(ids[0][~alone].tolist(), ids[1][~alone].tolist())):
        assert all(np.array_equal(x, y) for x, y in zip(a.sets[i], b.sets[j]))


def test_the_bytes_of_a_box_inside_the_tensor_are_a_box_when_the_edge_clips_it():
    """`tma_boxes.box_offsets`' layout: the bytes inside the tensor as one strided box (a box wholly inside, or clipped by
    the tensor's edge on any side), None when none is inside; where the edge clips it, `box_data` reads that box into
    its window and gives the bytes of the gather by offsets, the elements outside filled (zeros, or NaN)."""
    import types

    import ml_dtypes

    from tessera.interpreters.ptx.global_accesses import StridedBox
    from tessera.interpreters.ptx.state import GLOBAL_BASE
    from tessera.interpreters.ptx.tma_boxes import TensorMapObject, box_data, box_offsets
    from tessera.interpreters.sm90.tma import TensorMap
    from tessera.sm90 import facts

    rng = np.random.default_rng(4)
    nan = facts.TensorMapFloatOOBFill.NAN_REQUEST_ZERO_FMA
    for shape, box, dtype, fill in [((300, 128), (64, 64), ml_dtypes.bfloat16, facts.TensorMapFloatOOBFill.NONE),
                                    ((5, 77, 96), (32, 16, 2), np.float32, nan)]:
        spec = replace(TensorMap.encode("t", np.zeros(shape, dtype), box, 0).spec, oob_fill=fill)
        m = types.SimpleNamespace(memory=types.SimpleNamespace(
            buffer=rng.integers(0, 256, int(np.prod(shape)) * spec.element_bytes, np.uint8)))
        tmap = TensorMapObject("t", spec, GLOBAL_BASE)
        clipped = 0
        for _ in range(10):
            coords = tuple(int(rng.integers(-box[-1 - k] - 2, shape[-1 - k] + 2)) for k in range(len(shape)))
            offsets, valid, layout, window = box_offsets(spec, coords)
            if not valid.any():
                assert layout is None
                continue
            assert layout is not None, coords
            assert (window is None) == valid.all(), coords
            inside = (offsets[valid][:, None] + np.arange(spec.element_bytes)).reshape(-1)
            assert np.array_equal(StridedBox(*layout).index().reshape(-1), inside), coords
            read = box_data(m, tmap, offsets, valid, StridedBox(*layout), window)
            assert np.array_equal(read, box_data(m, tmap, offsets, valid, None)), coords
            clipped += window is not None
        assert clipped


def test_a_swizzled_box_is_staged_in_the_order_it_lies_in_shared_memory():
    """`tma_boxes.in_shared_order`: a box's bytes (row-major) put where the swizzle places them (`swizzled`'s offsets),
    for every swizzle and a few shared offsets, read as the range they fill."""
    from tessera.interpreters.ptx.tma_boxes import in_shared_order, swizzled

    rng = np.random.default_rng(5)
    for swizzle in (0, 32, 64, 128):
        for smem, size in [(0, 8192), (1024, 4096), (3072, 2048), (128 * 5, 1024)]:
            offsets, dense, chunks = swizzled(smem, size, swizzle)
            if dense is None or chunks is None:
                continue
            data = rng.integers(0, 256, size, np.uint8)
            placed = np.zeros(dense[1], np.uint8)
            placed[offsets] = data
            assert np.array_equal(in_shared_order(data, smem, size, swizzle), placed[dense[0]:]), (swizzle, smem)


def test_releases_at_a_location_are_kept_joined_per_cta_and_scope():
    """A lock handed over many times: the releases published at its word are one joined entry per releasing CTA
    and scope, and an acquire takes in what each release carried (the clock of every releasing thread)."""
    from tessera.interpreters.ptx.global_accesses import CTA, GPU, STRONG_CTA, STRONG_GPU

    m, order = _order_machine(True)
    hb = m.tracker.hb
    for round_ in range(5):
        for lane in (0, 1, 2):  # CTA 0's threads 0, 1 and CTA 1's thread 0
            hb.clock[lane, lane % 2] += 1
            order.release(np.array([lane]), np.array([64]), STRONG_GPU)
    order.release(np.array([3]), np.array([64]), STRONG_CTA)
    assert sorted(order.releases[64]) == [(0, GPU), (1, CTA), (1, GPU)]  # (releasing CTA, scope)
    order.acquire(np.array([1]), np.array([64]), STRONG_GPU, now=True)
    assert hb.clock[1, 0] == hb.clock[0, 0] - 1  # thread 0's last release (its clock advanced past it)
    assert hb.remote[1][1][0] == hb.clock[2, 0] - 1  # what it knows of CTA 1: its thread 0's last release
    order.acquire(np.array([0]), np.array([64]), STRONG_CTA, now=True)
    assert 1 not in hb.remote.get(0, {})  # a .cta acquire takes in its own CTA's releases only


class _Found(Exception):
    pass


class _Stub:  # what `_check_together` reaches on a finding, reduced to the byte and the lanes it names
    def __init__(self):
        self.m = self
        self.tracker = self.hb = self
        self.lane_rank = np.zeros(64, np.int64)
        self.threads = 64
        self.line = 1

    def hazard(self, inst, message, lane):
        return _Found(self.byte, lane)

    def where(self, b):
        self.byte = b
        return ""

    def describe(self, rank, tid):
        return ""


def test_one_run_per_thread_stores_judged_by_their_marks_or_starts_as_byte_by_byte():
    """`_check_together` on stores of one run of k bytes per thread, over a narrow span (its bytes marked in a
    table, no sort) and a wide one (its starts sorted, no argsort), finds a byte stored twice exactly where a pass
    over every byte does, and reports it as that pass does."""
    from tessera.interpreters.ptx.global_accesses import WEAK
    from tessera.interpreters.ptx.global_checks import MARKED_SPAN, GlobalRaceChecks

    check = GlobalRaceChecks._check_together
    rng = np.random.default_rng(5)
    found = 0
    for trial in range(400):
        k, n = int(rng.choice([1, 2, 4, 8, 16])), int(rng.integers(2, 40))
        starts = rng.choice(np.arange(0, 40 * 16, k), n, replace=trial % 2 == 0)  # half the trials may repeat a start
        spread = 1 if trial % 4 < 2 else 64 * 16 * MARKED_SPAN  # the bytes marked in a table, or the starts sorted
        index = starts[:, None] * spread + np.arange(k)
        lanes = np.arange(n)
        twice = len(np.unique(index)) < index.size
        for rows in (index, index[:, ::-1]):  # runs in order (the fast path), then reversed (byte by byte)
            try:
                check(_Stub(), _Stub(), lanes, rows, WEAK, int(rows.min()), int(rows.max()) + 1)
                reported = None
            except _Found as e:
                reported = e.args
            assert (reported is not None) == twice
        if twice:
            found += 1
            flat = index.reshape(-1)
            order = np.argsort(flat, kind="stable")
            b = int(flat[order][1:][flat[order][1:] == flat[order][:-1]][0])
            try:
                check(_Stub(), _Stub(), lanes, index, WEAK, int(index.min()), int(index.max()) + 1)
            except _Found as e:
                assert e.args[0] == b
    assert found > 100


# Every thread of a warp stores one word (thread t at word t), then, SYNC, each stores again at word t + SHIFT with
# another width: both instructions' bytes are recorded a word at a time (`global_accesses.Words`), and a second
# store that meets a byte another thread wrote is reported naming it, whatever the two widths.
_SHIFTED_STORES = PTX_HEADER + """.visible .entry shifted(.param .u64 out)
{
    .reg .b16 %rs<1>;
    .reg .b32 %r<3>;
    .reg .b64 %rd<4>;
    mov.u32 %r0, %tid.x;
    cvt.u16.u32 %rs0, %r0;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    FIRST_INDEX
    mul.wide.u32 %rd1, %r2, FIRST_BYTES;
    add.s64 %rd2, %rd0, %rd1;
    FIRST_STORE [%rd2], FIRST_VALUE;
    SYNC
    add.u32 %r1, %r0, SHIFT;
    mul.wide.u32 %rd1, %r1, SECOND_BYTES;
    add.s64 %rd3, %rd0, %rd1;
    SECOND_STORE [%rd3], SECOND_VALUE;
    ret;
}
"""

_STORES = {2: ("st.global.u16", "%rs0"), 4: ("st.global.u32", "%r0"), 8: ("st.global.v2.u32", "{%r0, %r0}"),
           16: ("st.global.v4.u32", "{%r0, %r0, %r0, %r0}")}


def _shifted(first: int, second: int, shift: int, sync: str, first_index: str = "mov.u32 %r2, %r0;") -> str:
    return filled(_SHIFTED_STORES, FIRST_INDEX=first_index, FIRST_BYTES=str(first), FIRST_STORE=_STORES[first][0],
                  FIRST_VALUE=_STORES[first][1], SECOND_BYTES=str(second), SECOND_STORE=_STORES[second][0],
                  SECOND_VALUE=_STORES[second][1], SHIFT=str(shift), SYNC=sync)


@pytest.mark.parametrize("first, second", [(4, 4), (8, 8), (16, 16), (2, 2), (4, 2), (2, 4), (16, 4), (4, 8)])
def test_a_store_meeting_another_threads_word_races_and_a_barrier_orders_it(first, second):
    out = np.zeros(64 * 16 // 4, np.uint32)
    shift = max(first // second, 1)  # thread t's second store starts at the first byte thread t + 1 (or t + k) stored
    with pytest.raises(PtxHazardError, match=r"which the instruction at line \d+ \(thread \(\d+, 0, 0\) of CTA "
                                             r"\(0, 0, 0\)\) wrote .* no synchronisation orders the two"):
        launch(_shifted(first, second, shift, ""), "shifted", 1, 32, [out.copy()])
    result = launch(_shifted(first, second, shift, "bar.sync 0;"), "shifted", 1, 32, [out.copy()])[0]
    expected = np.zeros(out.nbytes, np.uint8)
    for size, start in ((first, 0), (second, shift)):
        for t in range(32):
            word = np.full(size // min(size, 4), t, np.uint16 if size == 2 else np.uint32).view(np.uint8)
            expected[(t + start) * size:(t + start + 1) * size] = word
    assert np.array_equal(result.view(np.uint8), expected)


@pytest.mark.parametrize("width", [2, 4, 8, 16])
def test_one_store_of_the_same_word_by_two_threads_races_whatever_its_width(width):
    text = _shifted(width, width, 0, "", first_index="shr.u32 %r2, %r0, 1;")  # threads 2i and 2i + 1: word i
    with pytest.raises(PtxHazardError, match=r"^<ptx>:16: error: .*race: two threads store to one location in one "
                                             r"instruction"):
        launch(text, "shifted", 1, 32, [np.zeros(1024, np.uint32)])
