"""Hand-written sm_90a PTX a CUDA author writes for one CTA of 1-4 warps, each correct kernel beside its buggy twin,
judged by the PTX ISA's memory consistency model against a NumPy reference: a shared-memory tree reduction with
one `bar.sync` between two levels missing, its warp-synchronous tail with `bar.warp.sync` or on implicit lockstep
(plain or volatile), two groups of warps on named barriers whose ids are computed (`bar.sync %r, 64`), a histogram
and a spin lock made of shared-memory atomics, and a handoff whose consumer tests an mbarrier once and reads
whatever the answer (a race only some schedules show). Every report names both accesses (lines and threads); every
correct kernel runs clean and right. Between CTAs: tests/test_unseen_ptx_scopes.py; cp.async, mbarrier counts and
wgmma operands: tests/test_unseen_ptx_async_idioms.py."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxHazardError

from unseen_ptx import HEAD, line_of, run

# region a tree reduction in shared memory
LEVELS = (64, 32, 16, 8, 4, 2, 1)


def tree(missing: int | None = None, tail: str = "bar.sync 0;", access: str = "") -> str:
    """128 threads sum x[0:128] into out[0]: level s adds buf[t + s] into buf[t] for t < s, then a barrier (none
    after level `missing`; `tail` after the levels inside warp 0, s <= 16); `access` ".volatile" for those levels'
    loads and stores."""
    body = []
    for s in LEVELS:
        space = f"{access if s <= 16 else ''}.shared.f32"
        sync = tail if s <= 16 else ("" if s == missing else "bar.sync 0;")
        body.append(f"    setp.lt.u32 %p1, %r0, {s};\n    @%p1 ld{space} %f1, [%r3];\n"
                    f"    @%p1 ld{space} %f2, [%r3+{4 * s}];\n    add.f32 %f1, %f1, %f2;\n"
                    f"    @%p1 st{space} [%r3], %f1;  // level {s}\n    {sync}")
    return r"""
.visible .entry k(.param .u64 x, .param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;
    .reg .pred %p<4>;
    .shared .align 4 .f32 buf[128];
    mov.u32 %r0, %tid.x;
    ld.param.u64 %rd0, [x];
    mul.wide.u32 %rd1, %r0, 4;
    add.u64 %rd0, %rd0, %rd1;
    ld.global.f32 %f0, [%rd0];
    mov.u32 %r2, buf;
    shl.b32 %r1, %r0, 2;
    add.u32 %r3, %r2, %r1;
    st.shared.f32 [%r3], %f0;
    bar.sync 0;
""" + "\n".join(body) + r"""
    setp.eq.u32 %p2, %r0, 0;
    ld.param.u64 %rd2, [out];
    @%p2 st.global.f32 [%rd2], %f1;
    ret;
}
"""


X = (np.arange(128) * 0.75 - 40).astype(np.float32)  # sums of quarters: exact in f32 in any order
SUM = float(np.sum(X.astype(np.float64)))


def reduce(text: str, **kw) -> float:
    return float(run(text, 1, 128, [X, np.zeros(1, np.float32)], **kw)[1][0])


@pytest.mark.parametrize("tail", ["bar.sync 0;", "bar.warp.sync -1;"], ids=["bar.sync", "bar.warp.sync"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed-warp", 0), ("delayed-warp", 3),
                                            ("adversarial", 1)])
def test_a_tree_reduction_with_a_barrier_between_levels_is_right(tail, schedule, seed):
    assert reduce(tree(tail=tail), schedule=schedule, seed=seed) == SUM


@pytest.mark.parametrize("missing, reader, writer, address", [(64, 0, 32, 0x80), (32, 0, 16, 0x40)])
def test_a_tree_reduction_missing_one_barrier_names_both_levels(missing, reader, writer, address):
    """Level `missing`'s store by thread `writer` and the next level's load by thread `reader` of the same word:
    named by their lines and threads (warps 1 and 0; in one warp without bar.warp.sync alike)."""
    text = tree(missing)
    store, load = line_of(text, f"// level {missing}"), line_of(text, f"// level {missing // 2}") - 2
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{load}: error: ld.shared.f32: reads shared address "
                                             rf"{address:#x}, which the instruction at line {store} \(thread "
                                             rf"\({writer}, 0, 0\) of CTA \(0, 0, 0\)\) wrote, and no synchronisation "
                                             rf"orders the two .* \(thread \({reader}, 0, 0\) of CTA \(0, 0, 0\)\)"):
        reduce(text)


def test_a_warp_synchronous_tail_on_implicit_lockstep_is_a_race():
    """The pre-Volta idiom (no __syncwarp between the last five levels): the ISA gives threads of a warp no order
    without bar.warp.sync ("memory-consistency-model": only causality orders), reported at the first such level."""
    text = tree(tail="")
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, '// level 8') - 2}: error: ld.shared.f32: reads "
                                             rf"shared address 0x20, which the instruction at line "
                                             rf"{line_of(text, '// level 16')} \(thread \(8, 0, 0\)"):
        reduce(text)


def test_a_volatile_warp_synchronous_tail_is_no_data_race():
    """With `volatile` loads and stores (.relaxed.sys) every pair of accesses is morally strong, so by the ISA's
    definition ("memory-consistency-model-conflict-and-data-races") there is no data race to report; nothing
    orders the levels either, so a GPU may return a stale word (the Volta tuning guide asks for __syncwarp). The
    executor's warps run converged lanes together: the sum is right on every schedule."""
    for schedule, seed in [("min-pc", None), ("adversarial", 0), ("adversarial", 2)]:
        assert reduce(tree(tail="", access=".volatile"), schedule=schedule, seed=seed) == SUM


def test_tessera_run_reports_the_missing_barrier_by_file_and_line(tmp_path, capsys):
    from tessera.tools import tessera_run

    path = tmp_path / "tree.ptx"
    args = ["--grid", "1", "--block", "128", "--arg", "f32[128]=arange", "--arg", "f32[1]=zeros"]
    path.write_text(HEAD + tree())
    assert tessera_run.main([str(path)] + args) == 0
    path.write_text(HEAD + tree(64))
    assert tessera_run.main([str(path)] + args) == 1
    err = capsys.readouterr().err
    assert f"tree.ptx:{line_of(tree(64), '// level 32') - 2}: error: ld.shared.f32: reads shared address 0x80" in err
    assert "Traceback" not in err


# endregion
# region two groups of warps on computed named barrier ids
GROUPS = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .reg .pred %p<4>;
    .shared .align 4 .b8 buf[512];
    mov.u32 %r0, %tid.x;
    shr.u32 %r1, %r0, 6;
    add.u32 %r2, %r1, 1;
    mov.u32 %r3, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r3, %r4;
    mul.lo.u32 %r6, %r0, 5;
    st.shared.u32 [%r5], %r6;
    bar.sync %r2, 64;
    xor.b32 %r7, %r0, PARTNER;
    shl.b32 %r8, %r7, 2;
    add.u32 %r9, %r3, %r8;
    ld.shared.u32 %r10, [%r9];
    ld.param.u64 %rd0, [out];
    mul.wide.u32 %rd1, %r0, 4;
    add.u64 %rd0, %rd0, %rd1;
    st.global.u32 [%rd0], %r10;
    ret;
}
"""
"""Thread t stores 5t, warps 0-1 meet on barrier 1 and warps 2-3 on barrier 2 (id 1 + t / 64, 64 threads each),
then t reads its partner t ^ PARTNER's word."""
SCHEDULES = [("min-pc", None), ("delayed-warp", 0), ("delayed-warp", 2), ("adversarial", 1)]


@pytest.mark.parametrize("partner", [32, 63])
@pytest.mark.parametrize("schedule, seed", SCHEDULES)
def test_a_read_inside_its_barrier_group_is_right(partner, schedule, seed):
    out = run(GROUPS.replace("PARTNER", str(partner)), 1, 128, [np.zeros(128, np.uint32)], schedule=schedule,
              seed=seed)[0]
    np.testing.assert_array_equal(out, 5 * (np.arange(128) ^ partner))


@pytest.mark.parametrize("partner", [64, 127])
@pytest.mark.parametrize("schedule, seed", SCHEDULES)
def test_a_read_across_barrier_groups_is_a_race_on_every_schedule(partner, schedule, seed):
    text = GROUPS.replace("PARTNER", str(partner))
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'ld.shared.u32')}: error: ld.shared.u32: reads "
                                             rf"shared address 0x\w+, which the instruction at line "
                                             rf"{line_of(text, 'st.shared.u32')} \(thread \(\d+, 0, 0\) .* wrote"):
        run(text, 1, 128, [np.zeros(128, np.uint32)], schedule=schedule, seed=seed)


# endregion
# region shared-memory atomics: a histogram and a spin lock
HISTOGRAM = r"""
.visible .entry k(.param .u64 x, .param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .reg .pred %p<4>;
    .shared .align 4 .b8 bins[64];
    mov.u32 %r0, %tid.x;
    mov.u32 %r2, bins;
    setp.lt.u32 %p0, %r0, 16;
    shl.b32 %r1, %r0, 2;
    add.u32 %r3, %r2, %r1;
    @%p0 st.shared.u32 [%r3], 0;
    bar.sync 0;
    ld.param.u64 %rd0, [x];
    mul.wide.u32 %rd1, %r0, 4;
    add.u64 %rd0, %rd0, %rd1;
    ld.global.u32 %r4, [%rd0];
    and.b32 %r5, %r4, 15;
    shl.b32 %r5, %r5, 2;
    add.u32 %r6, %r2, %r5;
    ATOM
    bar.sync 0;
    @%p0 ld.shared.u32 %r7, [%r3];
    ld.param.u64 %rd2, [out];
    add.u64 %rd2, %rd2, %rd1;
    @%p0 st.global.u32 [%rd2], %r7;
    ret;
}
"""
"""128 threads count x & 15 into 16 shared bins with ATOM on bin %r6, then threads 0-15 copy the bins out."""
KEYS = np.random.default_rng(0).integers(0, 1000, 128).astype(np.uint32)


@pytest.mark.parametrize("atom", ["atom.shared.add.u32 %r8, [%r6], 1;", "red.shared.add.u32 [%r6], 1;",
                                  "atom.shared.inc.u32 %r8, [%r6], 1000;", "red.relaxed.cta.shared.add.u32 [%r6], 1;",
                                  "atom.acq_rel.cta.shared.add.u32 %r8, [%r6], 1;"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("adversarial", 2), ("delayed-warp", 1)])
def test_shared_atomics_from_every_thread_are_no_race(atom, schedule, seed):
    out = run(HISTOGRAM.replace("ATOM", atom), 1, 128, [KEYS, np.zeros(128, np.uint32)], schedule=schedule,
              seed=seed)[1]
    np.testing.assert_array_equal(out[:16], np.bincount(KEYS & 15, minlength=16))


LOCK = r"""
.visible .entry k(.param .u64 x, .param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .reg .pred %p<4>;
    .shared .align 4 .b32 lock;
    .shared .align 4 .b32 total;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, lock;
    mov.u32 %r2, total;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 st.shared.u32 [%r1], 0;
    @%p0 st.shared.u32 [%r2], 0;
    bar.sync 0;
    ld.param.u64 %rd0, [x];
    mul.wide.u32 %rd1, %r0, 4;
    add.u64 %rd0, %rd0, %rd1;
    ld.global.u32 %r4, [%rd0];
SPIN:
    ACQUIRE
    setp.ne.u32 %p1, %r5, 0;
    @%p1 bra SPIN;
    ld.shared.u32 %r6, [%r2];
    add.u32 %r6, %r6, %r4;
    st.shared.u32 [%r2], %r6;
    RELEASE
    bar.sync 0;
    ld.shared.u32 %r7, [%r2];
    ld.param.u64 %rd2, [out];
    @%p0 st.global.u32 [%rd2], %r7;
    ret;
}
"""
"""A mutex in shared memory: every thread takes the lock (ACQUIRE: %r5 the old value), adds x[t] into `total` with a
plain load and store, and gives it back (RELEASE); lanes of one warp contend (independent thread scheduling)."""
CAS_ACQUIRE = "atom.acquire.cta.shared.cas.b32 %r5, [%r1], 0, 1;"


@pytest.mark.parametrize("acquire, release", [
    (CAS_ACQUIRE, "st.release.cta.shared.u32 [%r1], 0;"),
    (CAS_ACQUIRE, "atom.release.cta.shared.exch.b32 %r8, [%r1], 0;"),
    ("atom.shared.cas.b32 %r5, [%r1], 0, 1;\n    fence.acq_rel.cta;",
     "fence.acq_rel.cta;\n    atom.shared.exch.b32 %r8, [%r1], 0;"),
], ids=["cas-acquire-st-release", "exch-release", "fences"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("adversarial", 1)])
def test_a_spin_lock_with_acquire_and_release_is_right(acquire, release, schedule, seed):
    text = LOCK.replace("ACQUIRE", acquire).replace("RELEASE", release)
    assert run(text, 1, 128, [KEYS, np.zeros(1, np.uint32)], schedule=schedule, seed=seed)[1][0] == KEYS.sum()


def test_a_spin_lock_on_relaxed_atomics_does_not_order_the_critical_section():
    """A relaxed cas and exch are morally strong with each other (no race on the lock) but form no release or
    acquire pattern: the next owner's plain load of `total` races the last owner's store."""
    text = LOCK.replace("ACQUIRE", "atom.shared.cas.b32 %r5, [%r1], 0, 1;").replace(
        "RELEASE", "atom.shared.exch.b32 %r8, [%r1], 0;")
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'ld.shared.u32 %r6')}: error: ld.shared.u32: "
                                             r"reads shared address 0x4, which the instruction at line "
                                             rf"{line_of(text, 'st.shared.u32 [%r2], %r6')} \(thread \(0, 0, 0\)"):
        run(text, 1, 128, [KEYS, np.zeros(1, np.uint32)])


def test_a_plain_store_releasing_the_lock_races_the_other_threads_cas():
    text = LOCK.replace("ACQUIRE", CAS_ACQUIRE).replace("RELEASE", "st.shared.u32 [%r1], 0;")
    release = line_of(text, "st.shared.u32 [%r2], %r6") + 1
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{release}: error: "
                                             rf"st.shared.u32: writes shared address 0x0, which the instruction at "
                                             rf"line {line_of(text, 'atom.acquire')} \(thread \(\d+, 0, 0\)"):
        run(text, 1, 128, [KEYS, np.zeros(1, np.uint32)])


# endregion
# region a race only some schedules show
ONCE = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .reg .pred %p<4>;
    .shared .align 8 .b64 bar;
    .shared .align 4 .b8 buf[128];
    mov.u32 %r0, %tid.x;
    and.b32 %r1, %r0, 31;
    mov.u32 %r2, bar;
    mov.u32 %r3, buf;
    shl.b32 %r4, %r1, 2;
    add.u32 %r5, %r3, %r4;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 32;
    bar.sync 0;
    setp.lt.u32 %p1, %r0, 32;
    @%p1 bra CONSUMER;
    mul.lo.u32 %r6, %r1, 9;
    st.shared.u32 [%r5], %r6;
    mbarrier.arrive.shared::cta.b64 %rd0, [%r2];
    ret;
CONSUMER:
WAIT
    ld.shared.u32 %r7, [%r5];
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %r7;
    ret;
}
"""
"""Warp 1 stores 32 words and arrives on `bar`; warp 0 tests phase 0 (WAIT) and reads the words."""
TEST_ONCE = "    mbarrier.test_wait.parity.shared::cta.b64 %p2, [%r2], 0;"
TEST_LOOP = "LOOP:\n" + TEST_ONCE + "\n    @!%p2 bra LOOP;"


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed-warp", 0), ("delayed-warp", 1),
                                            ("adversarial", 1)])
def test_a_consumer_polling_the_mbarrier_is_right_on_every_schedule(schedule, seed):
    out = run(ONCE.replace("WAIT", TEST_LOOP), 1, 64, [np.zeros(32, np.uint32)], schedule=schedule, seed=seed)[0]
    np.testing.assert_array_equal(out, 9 * np.arange(32))


@pytest.mark.parametrize("schedule, seed, reported", [("min-pc", None, False), ("delayed-warp", 0, False),
                                                      ("delayed-warp", 1, True), ("adversarial", 1, True)])
def test_a_consumer_testing_the_mbarrier_once_races_only_where_the_producer_is_late(schedule, seed, reported):
    """test_wait does not block: where the producer warp has arrived first (min-pc runs it first; so does delaying
    warp 0) the one test passes and orders the read; delaying warp 1, the producer, or a random order lets the
    test fail, and the read races the producer's store, both named. The schedule search of
    docs/races-schedules.md finds what one schedule does not."""
    text = ONCE.replace("WAIT", TEST_ONCE)
    if not reported:
        out = run(text, 1, 64, [np.zeros(32, np.uint32)], schedule=schedule, seed=seed)[0]
        np.testing.assert_array_equal(out, 9 * np.arange(32))
        return
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'ld.shared.u32')}: error: ld.shared.u32: reads "
                                             rf"shared address 0x\w+, which the instruction at line "
                                             rf"{line_of(text, 'st.shared.u32')} \(thread \(3\d, 0, 0\) .* wrote"):
        run(text, 1, 64, [np.zeros(32, np.uint32)], schedule=schedule, seed=seed)


# endregion
