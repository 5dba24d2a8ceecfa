"""Happens-before in the PTX executor (tessera/interpreters/ptx/happens_before.py): proxy fences counted on the
causality path from a generic store to the async-proxy read (not only in the storing thread), races on
shared memory reported whatever order the executor ran the threads in, and one-edit bugs of the
warp-specialized flash kernel that the schedule alone does not expose (missing bar.sync after
mbarrier.init, missing wgmma.fence)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import reference
from tessera.interpreters.ptx import PtxHazardError, launch
from tessera.reference_attention import attention_operands

from race_templates import PTX_HEADER, STORE_TID_TO_TILE
from test_ptx_hazards import _attention, _run, _seeded
from text_edits import checked, filled

BOTH = r"\(thread \((\d+), 0, 0\) of CTA \(0, 0, 0\)\)"

# A library epilogue: every thread of a warpgroup stores its part of the tile, the warpgroup meets on a named
# barrier, one thread fences for the async proxy and issues the bulk store of the tile.
_EPILOGUE = PTX_HEADER + """.visible .entry epilogue(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .reg .pred %p<2>;
    .shared .align 128 .b8 tile[512];
""" + STORE_TID_TO_TILE + """    setp.eq.u32 %p0, %r0, 0;
    EARLY
    BARRIER
    LATE
    ld.param.u64 %rd0, [out];
    @%p0 cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r1], 512;
    @%p0 cp.async.bulk.commit_group;
    @%p0 cp.async.bulk.wait_group.read 0;
    ret;
}
"""
_ISSUER_FENCE = "@%p0 fence.proxy.async.shared::cta;"


def _epilogue(early: str = "", barrier: str = "bar.sync 1, 128;", late: str = _ISSUER_FENCE) -> np.ndarray:
    text = filled(_EPILOGUE, EARLY=early, BARRIER=barrier, LATE=late)
    return launch(text, "epilogue", 1, 128, [np.zeros(128, np.uint32)])[0]


def test_a_fence_after_the_barrier_in_the_issuing_thread_covers_every_threads_stores():
    """The named barrier puts every thread's store before the issuing thread's fence: correct."""
    np.testing.assert_array_equal(_epilogue(), np.arange(128))


@pytest.mark.parametrize("barrier", ["setp.lt.u32 %p1, %r0, 32;\n    @%p1 bar.sync 1, 128;\n    @!%p1 bar.arrive 1, 128;",
                                     "barrier.sync 1, 128;", "bar.sync 0;"])
def test_other_barriers_carry_the_stores_to_the_fence(barrier):
    """Warps that only arrive (producers) release their stores to the warp that syncs; the barrier spelling
    and the CTA barrier carry them too."""
    np.testing.assert_array_equal(_epilogue(barrier=barrier), np.arange(128))


def test_every_thread_fencing_its_own_stores_before_the_barrier_is_correct():
    np.testing.assert_array_equal(_epilogue(early="fence.proxy.async.shared::cta;", late=""), np.arange(128))


def test_without_the_barrier_the_other_threads_stores_are_unordered():
    with pytest.raises(PtxHazardError, match=r"^<ptx>:20: error: cp.async.bulk.global\S*: the bulk store reads "
                                             r"shared address 0x[0-9a-f]+, which thread \([1-9]\d*, 0, 0\) .* "
                                             r"\(missing fence.proxy.async after the store at line 14: no "
                                             r"synchronisation orders the store before this read\)"):
        _epilogue(barrier="")


def test_a_fence_before_the_barrier_in_the_issuing_thread_only_covers_its_own_stores():
    with pytest.raises(PtxHazardError, match=r"which thread \([1-9]\d*, 0, 0\) .* \(missing fence.proxy.async after "
                                             r"the store at line 14: no fence.proxy.async lies between the store "
                                             r"and this read on any synchronisation path\)"):
        _epilogue(early=_ISSUER_FENCE, late="")


# A warp writes a value that another warp reads. The executor runs warp 0 first, so the value read is right;
# only happens-before sees that nothing orders the two.
_HANDOFF = PTX_HEADER + """.visible .entry handoff(.param .u64 out)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;
    .reg .pred %p<2>;
    .shared .align 4 .b8 box[128];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, box;
    and.b32 %r2, %r0, 31;
    shl.b32 %r2, %r2, 2;
    add.u32 %r2, %r1, %r2;
    setp.lt.u32 %p0, %r0, 32;
    @%p0 st.shared.u32 [%r2], %r0;
    SYNC
    @!%p0 ld.shared.u32 %r3, [%r2];
    @!%p0 st.shared.u32 [%r2], 0;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    mul.wide.u32 %rd1, %r0, 4;
    add.s64 %rd0, %rd0, %rd1;
    @!%p0 st.global.u32 [%rd0], %r3;
    ret;
}
"""


def test_a_handoff_through_a_barrier_is_ordered():
    out = launch(filled(_HANDOFF, SYNC="bar.sync 0;"), "handoff", 1, 64,
                 [np.zeros(64, np.uint32)])[0]
    np.testing.assert_array_equal(out[32:], np.arange(32))


def test_a_handoff_without_a_barrier_is_a_race_on_any_schedule():
    """Both sides named: the load (line 18, a thread of warp 1) and the store (line 16, a thread of warp 0)."""
    with pytest.raises(PtxHazardError, match=r"^<ptx>:18: error: ld.shared.u32: reads shared address 0x[0-9a-f]+, "
                                             r"which the instruction at line 16 \(thread \((\d|[12]\d|3[01]), 0, 0\) "
                                             r"of CTA \(0, 0, 0\)\) wrote, and no synchronisation orders the two "
                                             r"\(race: .*\) \(thread \((3[2-9]|[45]\d|6[0-3]), 0, 0\)"):
        launch(filled(_HANDOFF, SYNC=""), "handoff", 1, 64, [np.zeros(64, np.uint32)])


def test_a_write_after_a_read_needs_an_order_too():
    """Warp 1 reads and overwrites the box after the barrier; warp 0 then stores into it again without a
    second barrier: unordered with warp 1's accesses."""
    text = checked(_HANDOFF).replace("SYNC", "bar.sync 0;").replace(
        "    ld.param.u64", "    @%p0 st.shared.u32 [%r2], 5;\n    ld.param.u64", 1)
    with pytest.raises(PtxHazardError, match=r"^<ptx>:\d+: error: st.shared.u32: writes shared address .* which the "
                                             r"instruction at line \d+ .* no synchronisation orders the two"):
        launch(text, "handoff", 1, 64, [np.zeros(64, np.uint32)])


# Every reader since the last write (a read vector clock): thread 0 reads a word, thread 32 reads it too and then
# overwrites it. Thread 32's own read is ordered before its store (program order) and would hide thread 0's.
_READERS = PTX_HEADER + """.visible .entry readers(.param .u64 out)
{
    .reg .b32 %r<5>;
    .reg .b64 %rd<2>;
    .reg .pred %p<3>;
    .shared .align 4 .b8 word[4];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, word;
    setp.eq.u32 %p0, %r0, 0;
    setp.eq.u32 %p1, %r0, 32;
    FIRST
    @%p0 ld.shared.u32 %r3, [%r1];
    @%p1 ld.shared.u32 %r4, [%r1];
    SECOND
    @%p1 st.shared.u32 [%r1], 7;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    @%p0 st.global.u32 [%rd0], %r3;
    ret;
}
"""


def _readers(first: str = "", second: str = "") -> np.ndarray:
    return launch(filled(_READERS, FIRST=first, SECOND=second), "readers", 1, 64,
                  [np.zeros(1, np.uint32)])[0]


def test_a_write_racing_an_earlier_reader_is_reported_though_a_later_ordered_reader_read_since():
    """Line 15 (thread 0) and line 16 (thread 32) read the word concurrently; thread 32's store at line 18 is
    ordered after its own read only: the race with thread 0's read is reported, naming it."""
    with pytest.raises(PtxHazardError, match=r"^<ptx>:18: error: st.shared.u32: writes shared address 0x0, which the "
                                             r"instruction at line 15 \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) read, "
                                             r"and no synchronisation orders the two .*\(thread \(32, 0, 0\)"):
        _readers()


def test_readers_of_one_instruction_are_all_kept():
    """Both threads read the word in one instruction (one step of the executor): still two readers."""
    text = checked(_READERS).replace("@%p0 ld.shared.u32 %r3, [%r1];\n    @%p1 ld.shared.u32 %r4, [%r1];",
                                     "ld.shared.u32 %r3, [%r1];")
    with pytest.raises(PtxHazardError, match=r"^<ptx>:\d+: error: st.shared.u32: writes shared address 0x0, which the "
                                             r"instruction at line 15 \(thread \((?!32,)\d+, 0, 0\)"):
        launch(filled(text, FIRST="", SECOND=""), "readers", 1, 64, [np.zeros(1, np.uint32)])


@pytest.mark.parametrize("first, second", [("", "bar.sync 0;"), ("bar.sync 0;", "bar.sync 0;")])
def test_a_barrier_between_the_reads_and_the_write_orders_every_reader(first, second):
    assert _readers(first, second)[0] == 0


# the warp-specialized flash kernel (Tessera's default pipeline), one edit each


def _drop_first(prefix: str):
    def edit(lines):
        del lines[next(i for i, line in enumerate(lines) if line.strip().startswith(prefix))]
    return edit


def test_missing_bar_sync_after_mbarrier_init_is_a_race(rng):
    with pytest.raises(PtxHazardError, match=r"^seeded.ptx:\d+: error: mbarrier\.\S+: uses the mbarrier at shared "
                                             r"address 0x[0-9a-f]+, which the mbarrier.init at line \d+ \(thread "
                                             r"\(0, 0, 0\) .*\) initialises, with no synchronisation ordering the "
                                             r"init before this use \(race: missing bar.sync after mbarrier.init\) "
                                             r"\(thread \([1-9]\d*, 0, 0\)"):
        _run(_attention(True), _seeded(_attention(True), _drop_first("bar.sync 0, 384")),
             attention_operands(rng, 64, 128, 64))


def test_missing_first_wgmma_fence_is_reported(rng):
    """The first wgmma of the warpgroup starts its chain with scale-d false (no accumulator zeroing touches its
    registers), yet the PTX ISA asks for a wgmma.fence before a warpgroup's first wgmma.mma_async."""
    with pytest.raises(PtxHazardError, match=r"^seeded.ptx:\d+: error: wgmma.mma_async\S*: is the warpgroup's first "
                                             r"wgmma.mma_async and no wgmma.fence precedes it \(missing wgmma.fence\)"):
        _run(_attention(True), _seeded(_attention(True), _drop_first("wgmma.fence")),
             attention_operands(rng, 64, 128, 64))


# the rule for a slot an async read (a wgmma) used, on the bookkeeping alone: thread 0 is the consumer, thread 1
# the producer; the consumer's release reaches the producer through an mbarrier


class _Inst:
    line = 7


def _hb():
    from tessera.interpreters.ptx.happens_before import HappensBefore

    def hazard(inst, message, lane):
        return PtxHazardError(f"{inst.line}: {message} (thread {lane})")

    return HappensBefore(2, 2, 16, hazard, lambda flat: f"byte {flat}", lambda lane: f"thread {lane}")


@pytest.mark.parametrize("per_group,as_range", [(False, False), (True, False), (True, True)],
                         ids=["per-byte", "per-group", "per-group-range"])
@pytest.mark.parametrize("release_after_wait", [True, False])
def test_a_slot_is_free_only_after_the_wait_group_that_ends_the_read(release_after_wait, per_group, as_range):
    """The wait that ends the read, recorded per byte (`reads_completed`) or, as a wgmma.wait_group is, per
    wgmma group with the last group that read each byte (`wgmma_groups_completed`, `wgmma_reads`); the copy's
    bytes given one by one or as the range they fill (a swizzled TMA box), reported at the same byte."""
    hb, slot, consumer, producer = _hb(), np.arange(8), np.array([0]), np.array([1])
    key = (0, 0x100)

    def wait_ends_the_read():
        if per_group:
            hb.wgmma_reads = np.zeros((1, hb.chunk_count()), np.int32)  # a record per 16-byte chunk
            hb.wgmma_reads[0, hb.chunk_of(slot)] = 3  # read last by wgmma group 2 of the CTA's one warpgroup
            hb.wgmma_groups_completed(0, 1, 2, consumer, _Inst())
        else:
            hb.reads_completed(slot, consumer, _Inst(), 0)

    if release_after_wait:
        wait_ends_the_read()
        hb.arrive(_Inst(), key, consumer)
    else:  # the arrive releases the slot, then the wait_group ends the wgmma's read
        hb.arrive(_Inst(), key, consumer)
        wait_ends_the_read()
    hb.phase_completed(key)
    hb.waited(_Inst(), key, producer)
    written = slot[::-1] if as_range else slot  # a range's bytes come in any order (a swizzle)
    span = slice(0, 8) if as_range else None
    if release_after_wait:
        hb.async_write(_Inst(), producer, written, "the TMA load", span)
    else:
        with pytest.raises(PtxHazardError, match=rf"the TMA load overwrites byte {written[0]}, which a wgmma of "
                                                 r"warpgroup 0 read until its wgmma.wait_group at line 7, .*\(race: the "
                                                 r"slot was released before the wgmma reading it completed\) \(thread 1\)"):
            hb.async_write(_Inst(), producer, written, "the TMA load", span)



@pytest.mark.parametrize("as_range", [False, True], ids=["per-byte", "range"])
@pytest.mark.parametrize("ordered_after", [None, 0, 1], ids=["neither", "first-waiter", "second-waiter"])
def test_a_group_two_waits_complete_frees_its_bytes_after_either(ordered_after, as_range):
    """A wgmma group read bytes 0-15 until the waits of threads 0 and 1 (one completion, its readers both): a TMA
    load of thread 2 into them is ordered after the read when it comes after either wait (the first waiter's,
    asked first, or only the second's), and a race when after neither, at the first byte of those it names."""
    from tessera.interpreters.ptx.happens_before import HappensBefore

    def hazard(inst, message, lane):
        return PtxHazardError(f"{inst.line}: {message} (thread {lane})")

    hb = HappensBefore(3, 3, 16, hazard, lambda flat: f"byte {flat}", lambda lane: f"thread {lane}")
    hb.wgmma_reads = np.zeros((1, hb.chunk_count()), np.int32)
    hb.wgmma_reads[0, 0] = 1  # read last by wgmma group 0 of the CTA's one warpgroup
    for waiter in (0, 1):
        hb.clock[waiter, waiter] += 1  # (each waits after a step of its own)
        hb.wgmma_groups_completed(0, 0, 0, np.array([waiter]), _Inst())
    readers, epochs = hb.completions[0][:2]
    assert readers.tolist() == [0, 1] and (hb.clock[2, readers] < epochs).all()
    if ordered_after is not None:
        hb.barrier(np.array([ordered_after]), np.array([2]))
    slot, producer = np.arange(16), np.array([2])
    written, span = (slot[::-1], slice(0, 16)) if as_range else (slot, None)
    if ordered_after is not None:
        hb.async_write(_Inst(), producer, written, "the TMA load", span)
        return
    with pytest.raises(PtxHazardError, match=rf"the TMA load overwrites byte {written[0]}, which a wgmma of warpgroup 0 "
                                             r"read until its wgmma.wait_group at line 7, .*\(thread 2\)"):
        hb.async_write(_Inst(), producer, written, "the TMA load", span)


def test_wgmma_read_records_are_kept_per_16_byte_chunk_of_each_cta():
    """Chunks are numbered per CTA (a CTA of 40 bytes has chunks of 16, 16 and 8 bytes); a write ends the records
    of the chunks it covers whole only."""
    from tessera.interpreters.ptx.happens_before import HappensBefore

    hb = HappensBefore(4, 2, 80, None, str, str)  # two CTAs of 40 bytes
    assert hb.chunk_count() == 6
    assert hb.chunk_of(np.array([0, 15, 16, 39, 40, 79])).tolist() == [0, 0, 1, 2, 3, 5]
    assert hb.chunk_span(slice(44, 72)) == slice(3, 5)
    assert hb._whole_chunks(slice(32, 40)) == slice(2, 3)  # the short last chunk, whole
    assert hb._whole_chunks(slice(4, 36)) == slice(1, 2)
    assert hb._whole_chunks(slice(40, 50)) == slice(3, 3)
    assert hb._whole_chunks(np.concatenate([np.arange(56, 72), [72, 40]])).tolist() == [4]
    assert hb._whole_chunks(np.arange(72, 80)[::-1]).tolist() == [5]


@pytest.mark.parametrize("first", [np.arange(0, 4), np.arange(0, 16)], ids=["part", "whole"])
def test_a_chunk_written_in_part_keeps_its_wgmma_read_for_its_other_bytes(first):
    """A wgmma read bytes 0-15 until a wait of thread 0; thread 1, ordered after that wait, writes `first`; thread
    2, ordered after nothing, writes bytes 8-11: a race with the wgmma's read when the first write left them
    unwritten (the chunk's record stands for them), else a race with that write."""
    from tessera.interpreters.ptx.happens_before import HappensBefore

    def hazard(inst, message, lane):
        return PtxHazardError(f"{inst.line}: {message} (thread {lane})")

    hb = HappensBefore(3, 3, 16, hazard, lambda flat: f"byte {flat}", lambda lane: f"thread {lane}")
    hb.wgmma_reads = np.zeros((1, hb.chunk_count()), np.int32)
    hb.wgmma_reads[0, 0] = 1  # read last by wgmma group 0 of the CTA's one warpgroup
    hb.wgmma_groups_completed(0, 0, 0, np.array([0]), _Inst())
    hb.barrier(np.array([0]), np.array([1]))  # thread 1 is ordered after the wait
    hb.write(_Inst(), np.array([1]), first[None, :])
    expected = (r"writes byte 8, which the instruction at line 7 \(thread 1\) wrote" if len(first) == 16 else
                r"the store overwrites byte 8, which a wgmma of warpgroup 0 read until its wgmma.wait_group at line 7")
    with pytest.raises(PtxHazardError, match=expected):
        hb.write(_Inst(), np.array([2]), np.arange(8, 12)[None, :])

# the adversarial schedule: random interleavings, replayed by a seed


def test_an_adversarial_schedule_runs_the_pipelined_kernel_clean(rng):
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.ptx.launcher import launch_described

    sig, host, text = _attention(True)
    inputs = attention_operands(rng, 64, 300, 64)
    arrays, sizes = prepare_arguments(sig, inputs)
    launch_described(text, host, arrays, sizes, schedule="adversarial", seed=3)
    check = reference.check_attention(arrays[3], *arrays[:3], arrays[0].dtype, causal=False)
    assert check.ok, check


def test_a_race_is_reported_on_adversarial_schedules_too():
    messages = []
    for seed in (0, 1, 1):
        with pytest.raises(PtxHazardError, match=r"reads shared address 0x[0-9a-f]+, which the instruction at line "
                                                 r"16 .* no synchronisation orders the two") as caught:
            launch(filled(_HANDOFF, SYNC=""), "handoff", 1, 64, [np.zeros(64, np.uint32)], schedule="adversarial",
                   seed=seed)
        messages.append(str(caught.value))
    assert messages[1] == messages[2]  # the same seed replays the same interleaving


@pytest.mark.parametrize("kw,message", [({"schedule": "random"}, "schedule must be one of min-pc, adversarial"),
                                        ({"seed": 1}, "seed= replays an adversarial schedule"),
                                        ({"schedule": "adversarial", "seed": -1}, "seed must be a non-negative")])
def test_bad_schedules_are_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        launch(filled(_HANDOFF, SYNC="bar.sync 0;"), "handoff", 1, 64, [np.zeros(64, np.uint32)], **kw)


def test_tessera_run_takes_the_schedule_and_the_race_switch(tmp_path, capsys):
    from tessera.tools import tessera_run

    path = tmp_path / "handoff.ptx"
    path.write_text(filled(_HANDOFF, SYNC=""))
    base = [str(path), "--block", "64", "--arg", "u32[64]=zeros"]
    assert tessera_run.main(base + ["--schedule", "adversarial", "--schedule-seed", "5"]) == 1
    assert "no synchronisation orders the two (race:" in capsys.readouterr().err
    assert tessera_run.main(base + ["--no-races"]) == 0  # the check off: the run completes
    assert tessera_run.main(base + ["--schedule-seed", "5"]) == 1
    assert "--schedule-seed replays --schedule adversarial" in capsys.readouterr().err


def test_read_clock_rows_are_compacted_and_still_name_every_reader():
    """ReadClocks alone: 600 rounds of two concurrent readers of a byte (each round a new row), most bytes
    rewritten since; the pool is compacted and the last round's readers are still both known."""
    from tessera.interpreters.ptx.read_clocks import ReadClocks

    reads = ReadClocks(64, threads=4)
    clocks = np.ones((4, 4), np.int32)  # no thread has seen another's epoch 2
    lanes = np.array([1, 2])
    for round_ in range(600):
        byte = round_ % 64
        reads.record(lanes, np.full((2, 1), byte), np.array([2, 2]), 10 + round_, clocks)
        if round_ < 599:
            reads.clear(np.array([byte]))
    assert reads.shared and len(reads.pool_clock) <= 4096
    for writer in (1, 2):  # each reader's own read is ordered before its write; the other's is not
        found = reads.unordered(np.array([writer]), np.array([[599 % 64]]), clocks)
        assert found is not None and found[2] == 3 - writer and found[3] == 609
    assert reads.unordered(np.array([3]), np.array([[0]]), np.full((4, 4), 2, np.int32)) is None


# A flag in shared memory: thread 0 stores the data and signals, thread 32 spins on the flag and reads the data.
_SHARED_FLAG = PTX_HEADER + """.visible .entry flag(.param .u64 out)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<2>;
    .reg .pred %p<3>;
    .shared .align 4 .b8 data[4];
    .shared .align 4 .b8 ready[4];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, data;
    mov.u32 %r2, ready;
    setp.ne.u32 %p0, %r0, 0;
    @%p0 bra CONSUMER;
    st.shared.u32 [%r1], 42;
    SIGNAL
    bra DONE;
CONSUMER:
    setp.ne.u32 %p1, %r0, 32;
    @%p1 bra DONE;
SPIN:
    WAIT
    setp.eq.u32 %p2, %r3, 0;
    @%p2 bra SPIN;
    ld.shared.u32 %r4, [%r1];
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    st.global.u32 [%rd0], %r4;
DONE:
    ret;
}
"""


@pytest.mark.parametrize("signal, wait", [
    ("st.release.cta.shared.u32 [%r2], 1;", "ld.acquire.cta.shared.u32 %r3, [%r2];"),
    ("atom.release.cta.shared.exch.b32 %r5, [%r2], 1;", "ld.relaxed.cta.shared.u32 %r3, [%r2];\n    fence.acq_rel.cta;"),
])
def test_a_release_acquire_flag_in_shared_memory_orders_the_handoff(signal, wait):
    """The flag's strong accesses are morally strong (never a race), and the pair orders the data."""
    text = filled(_SHARED_FLAG, SIGNAL=signal, WAIT=wait)
    assert launch(text, "flag", 1, 64, [np.zeros(1, np.uint32)])[0][0] == 42


def test_the_relaxed_twin_of_the_shared_flag_races_on_the_data():
    text = filled(_SHARED_FLAG, SIGNAL="st.relaxed.cta.shared.u32 [%r2], 1;",
                  WAIT="ld.relaxed.cta.shared.u32 %r3, [%r2];")
    with pytest.raises(PtxHazardError, match=r"^<ptx>:26: error: ld.shared.u32: reads shared address 0x0, which the "
                                             r"instruction at line 16 \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) wrote"):
        launch(text, "flag", 1, 64, [np.zeros(1, np.uint32)])


@pytest.mark.parametrize("wait", ["ld.volatile.shared.u32 %r3, [%r2];", "ld.acquire.cta.shared.u32 %r3, [%r2];"])
@pytest.mark.parametrize("schedule, seed, message", [
    ("min-pc", None, r"^<ptx>:\d+: error: ld.(volatile|acquire.cta).shared.u32: reads shared address 0x4, which the "
                     r"instruction at line 17 \(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) wrote"),
    ("delayed-warp", 0, r"^<ptx>:17: error: st.shared.u32: writes shared address 0x4, which the instruction at line "
                        r"\d+ \(thread \(32, 0, 0\) of CTA \(0, 0, 0\)\) read"),
], ids=["poll-after-store", "store-after-poll"])
def test_a_plain_flag_store_racing_a_strong_poll_is_reported_on_either_order(wait, schedule, seed, message):
    """[memory_model.DATA_RACE] A plain store and a strong load are not morally strong (both must be strong): the
    flag itself races. Strong shared accesses were kept out of the race records, so this ran silent (and a
    one-shot volatile poll with the producer warp late read 0, a wrong answer with no report)."""
    text = filled(_SHARED_FLAG, SIGNAL="st.shared.u32 [%r2], 1;", WAIT=wait)
    with pytest.raises(PtxHazardError, match=message):
        launch(text, "flag", 1, 64, [np.zeros(1, np.uint32)], schedule=schedule, seed=seed)


# Warp 1 stores a word and arrives (bar.arrive 1, 64), then STORES_AFTER; warp 0 waits (bar.sync 1, 64) and reads
# the words. Warp 0's wait is last in the text, so the executor's min-pc schedule runs warp 1 to its end first.
_ARRIVE_THEN_STORE = PTX_HEADER + """.visible .entry arrive(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    .reg .pred %p<1>;
    .shared .align 4 .b32 words[2];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, words;
    setp.lt.u32 %p0, %r0, 32;
    @%p0 bra.uni READER;
    st.shared.u32 [%r1], 5;
    bar.arrive 1, 64;
    STORES_AFTER
    ret;
READER:
    bar.sync 1, 64;
    ld.shared.u32 %r2, [%r1];
    ld.shared.u32 %r3, [%r1+4];
    add.u32 %r2, %r2, %r3;
    ld.param.u64 %rd0, [out];
    cvta.to.global.u64 %rd0, %rd0;
    mul.wide.u32 %rd1, %r0, 4;
    add.s64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r2;
    ret;
}
"""


@pytest.mark.parametrize("after, reported", [("", False), ("st.shared.u32 [%r1+4], 7;", True)])
def test_a_bar_arrive_releases_only_what_its_thread_did_before_arriving(after, reported):
    """[memory_model.BARRIER_ORDERING] bar.arrive orders the arriving thread's earlier accesses before the
    waiters; a store after it races the waiters' reads, even when the executor ran that store before the barrier
    completed (it released the arrivals' clocks at completion, and missed this race)."""
    text = filled(_ARRIVE_THEN_STORE, STORES_AFTER=after)
    if not reported:
        out = launch(text, "arrive", 1, 64, [np.zeros(64, np.uint32)])[0]
        np.testing.assert_array_equal(out[:32], 5)
        return
    with pytest.raises(PtxHazardError, match=r"reads shared address 0x4, which the instruction at line \d+ "
                                             r"\(thread \(\d+, 0, 0\).*\) wrote, and no synchronisation orders"):
        launch(text, "arrive", 1, 64, [np.zeros(64, np.uint32)])
