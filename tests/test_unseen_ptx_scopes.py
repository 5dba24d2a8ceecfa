"""Hand-written sm_90a PTX between CTAs where the scope of a strong access or a fence decides: one word stored or
added into by many CTAs (plain, `.relaxed.gpu`, `.volatile`, `.relaxed.cta`, `.relaxed.cluster`), a flag handshake
in global memory between two CTAs written the way pre-Volta CUDA wrote it (`volatile` flag, `__threadfence()` on both
sides), a spin lock in global memory taken by every thread of four CTAs, and strong accesses of a peer's shared
memory in a cluster, judged by the PTX ISA's memory consistency model, not by what the executor happens to run:

- "memory-consistency-model-morally-strong-operations": two operations are morally strong if "each operation is
  strong and specifies a scope that includes the thread executing the other operation" (and both go through the same
  proxy); `.volatile` is `.relaxed.sys` ("ld.volatile ... may be used with .global and .shared spaces ... treated as
  relaxed with .sys scope", the ld/st sections), so two `.relaxed.cta` stores of different CTAs are a data race and
  two `.volatile` or `.relaxed.gpu` ones are not;
- "memory-consistency-model-conflict-and-data-races": a data race is two conflicting operations "not related in
  causality order and ... not morally strong";
- "memory-consistency-model-memory-synchronization": a release pattern (a fence, `membar.gl` = `fence.sc.gpu`,
  then a strong write) synchronises with an acquire pattern (a strong read, then a fence) only if "the first
  operation in X and the last operation in Y are morally strong": the two fences, so `membar.cta`
  (`__threadfence_block()`) on both sides orders nothing between CTAs.

The scope rules were schedule-dependent or missing before (found by unseen23x): `.relaxed.cta` stores of several
CTAs were accepted when the CTAs ran the store in one step, a release pattern's fence had no scope, `.cluster` was
taken as `.gpu` (a launch without clusters gives each CTA its own), and in distributed shared memory any two strong
accesses were morally strong. The CTA-local cases: tests/test_unseen_ptx_sync_idioms.py."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from tessera.interpreters.ptx import PtxHazardError

from unseen_ptx import line_of, run

# region one word from many CTAs
MANY = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    .reg .pred %p<2>;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %ctaid.x;
    add.u32 %r1, %r1, 1;
    setp.eq.u32 %p0, %r0, 0;
    ld.param.u64 %rd0, [out];
    SPLIT
    @%p0 OP
    ret;
SECOND:
    @%p0 OP
    ret;
}
"""
"""Thread 0 of each of 4 CTAs performs OP on the one word `out` (%r1 = CTA index + 1); with SPLIT a branch sends
CTAs 1-3 to their own copy of OP, so the CTAs run it at different steps."""
APART = "setp.ne.u32 %p1, %r1, 1;\n    @%p1 bra SECOND;"


@pytest.mark.parametrize("split", ["", APART], ids=["together", "apart"])
@pytest.mark.parametrize("op, expected", [
    ("red.global.add.u32 [%rd0], %r1;", 10),
    ("atom.global.max.u32 %r2, [%rd0], %r1;", 4),
    ("st.relaxed.gpu.global.u32 [%rd0], 7;", 7),
    ("st.volatile.global.u32 [%rd0], 7;", 7),
    ("red.relaxed.sys.global.add.u32 [%rd0], %r1;", 10),
])
def test_strong_writes_of_gpu_scope_from_many_ctas_are_no_race(op, expected, split):
    out = run(MANY.replace("SPLIT", split).replace("OP", op), 4, 32, [np.zeros(1, np.uint32)])[0]
    assert out[0] == expected


@pytest.mark.parametrize("split", ["", APART], ids=["together", "apart"])
@pytest.mark.parametrize("op, why", [
    ("st.global.u32 [%rd0], 7;", "weak"),
    ("st.relaxed.cta.global.u32 [%rd0], 7;", "cta"),
    ("red.relaxed.cta.global.add.u32 [%rd0], %r1;", "cta"),
    ("atom.relaxed.cta.global.add.u32 %r2, [%rd0], %r1;", "cta"),
])
def test_plain_or_cta_scoped_writes_from_many_ctas_are_a_race(op, why, split):
    """A .cta scope does not hold the other CTA's thread: not morally strong, a data race, whether the CTAs store
    in one step (together: it was accepted) or apart."""
    text = MANY.replace("SPLIT", split).replace("OP", op)
    opcode = op.split()[0]
    note = r".*a \.cta scope holds no thread of another CTA" if why == "cta" else ""
    with pytest.raises(PtxHazardError, match=rf"<ptx>:\d+: error: {opcode}: writes global address 0x\w+ \(argument 0 "
                                             rf"\(out\) at byte offset 0\).* which the instruction at line "
                                             rf"{line_of(text, '@%p0 ' + opcode)}\d* \(thread \(0, 0, 0\) of CTA "
                                             rf"\(\d, 0, 0\)\) wrote.*no synchronisation orders the two{note}"):
        run(text, 4, 32, [np.zeros(1, np.uint32)])


@pytest.mark.parametrize("split", ["", APART], ids=["together", "apart"])
@pytest.mark.parametrize("op", ["st.relaxed.cluster.global.u32 [%rd0], 7;",
                                "red.relaxed.cluster.global.add.u32 [%rd0], %r1;"])
def test_cluster_scoped_writes_are_morally_strong_inside_the_launchs_cluster_only(op, split):
    """Without a cluster launch each CTA is its own cluster: .cluster holds no other CTA (it was taken as .gpu);
    in a cluster of the four, the writes are morally strong."""
    text = MANY.replace("SPLIT", split).replace("OP", op)
    run(text, 4, 32, [np.zeros(1, np.uint32)], cluster=(4, 1, 1))
    with pytest.raises(PtxHazardError, match=r"no synchronisation orders the two.*a \.cluster scope none outside the "
                                             r"launch's cluster"):
        run(text, 4, 32, [np.zeros(1, np.uint32)], cluster=(2, 1, 1) if split else None)


# endregion
# region a volatile flag handshake between two CTAs
HANDSHAKE = r"""
.visible .entry k(.param .u64 data, .param .u64 flag, .param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<6>;
    .reg .pred %p<4>;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %ctaid.x;
    ld.param.u64 %rd0, [data];
    ld.param.u64 %rd1, [flag];
    ld.param.u64 %rd2, [out];
    mul.wide.u32 %rd3, %r0, 4;
    add.u64 %rd4, %rd0, %rd3;
    setp.eq.u32 %p0, %r0, 0;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra CONSUMER;
    mul.lo.u32 %r2, %r0, 3;
    st.global.u32 [%rd4], %r2;
    bar.sync 0;
    RELEASE_FENCE
    @%p0 st.volatile.global.u32 [%rd1], 1;
    bra DONE;
CONSUMER:
    @!%p0 bra JOIN;
POLL:
    ld.volatile.global.u32 %r3, [%rd1];
    setp.eq.u32 %p2, %r3, 0;
    @%p2 bra POLL;
    ACQUIRE_FENCE
JOIN:
    bar.sync 0;
    ld.global.u32 %r4, [%rd4];
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r4;
DONE:
    ret;
}
"""
"""CTA 0's 64 threads store data[t] = 3t, meet, and thread 0 raises a volatile flag after RELEASE_FENCE; CTA 1's
thread 0 spins on the flag with volatile loads, ACQUIRE_FENCE, its CTA meets, and every thread copies data[t] to
out[t] (the CUDA of `volatile int *flag` with __threadfence() before the store and after the spin)."""


def handshake(release: str, acquire: str, **kw):
    text = HANDSHAKE.replace("RELEASE_FENCE", release and "@%p0 " + release).replace("ACQUIRE_FENCE", acquire)
    return text, lambda: run(text, 2, 64, [np.zeros(64, np.uint32), np.zeros(1, np.uint32), np.zeros(64, np.uint32)],
                             **kw)


@pytest.mark.parametrize("release, acquire, cluster", [("membar.gl;", "membar.gl;", None),
                                                       ("fence.acq_rel.gpu;", "fence.sc.gpu;", None),
                                                       ("membar.sys;", "fence.acq_rel.gpu;", None),
                                                       ("fence.acq_rel.cluster;", "fence.acq_rel.cluster;", (2, 1, 1))])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 0), ("delayed", 1)])
def test_a_volatile_flag_between_gpu_scope_fences_orders_the_handoff(release, acquire, cluster, schedule, seed):
    """A fence then a strong (volatile) write is a release pattern, a strong read then a fence an acquire pattern;
    .gpu fences are morally strong across CTAs (.cluster ones inside a cluster). Clean and right on each CTA
    delayed."""
    _, launch = handshake(release, acquire, schedule=schedule, seed=seed, cluster=cluster)
    np.testing.assert_array_equal(launch()[2], 3 * np.arange(64))


@pytest.mark.parametrize("release, acquire", [
    ("", ""),                            # volatile alone: morally strong flag, but no pattern orders the data
    ("membar.gl;", ""),                  # the consumer's fence missing
    ("", "membar.gl;"),                  # the producer's fence missing
    ("membar.cta;", "membar.cta;"),      # __threadfence_block(): .cta fences are not morally strong across CTAs
    ("fence.acq_rel.cta;", "fence.acq_rel.gpu;"),
    ("fence.sc.gpu;", "fence.sc.cta;"),
    ("fence.acq_rel.cluster;", "fence.acq_rel.cluster;"),  # no cluster launch: each CTA its own cluster
])
def test_a_flag_handshake_without_a_morally_strong_fence_pair_is_a_race(release, acquire):
    """The data load of CTA 1 is reported against CTA 0's store, naming both (it was accepted with .cta fences)."""
    text, launch = handshake(release, acquire)
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{line_of(text, 'ld.global.u32')}: error: ld.global.u32: reads "
                                             r"global address 0x\w+ \(argument 0 \(data\) at byte offset 0\) .* which "
                                             rf"the instruction at line {line_of(text, 'st.global.u32 [%rd4]')} "
                                             r"\(thread \(0, 0, 0\) of CTA \(0, 0, 0\)\) wrote .*\(a \.cta fence or "
                                             r"membar\.cta does not, a \.cluster one only inside the launch's "
                                             r"cluster\).* "
                                             r"\(thread \(0, 0, 0\) of CTA \(1, 0, 0\)\)"):
        launch()


# endregion
# region a spin lock in global memory between CTAs
LOCK = r"""
.visible .entry k(.param .u64 lock, .param .u64 total, .param .u64 x)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %ctaid.x;
    ld.param.u64 %rd0, [lock];
    ld.param.u64 %rd1, [total];
    ld.param.u64 %rd2, [x];
    mad.lo.u32 %r2, %r1, 32, %r0;
    mul.wide.u32 %rd3, %r2, 4;
    add.u64 %rd4, %rd2, %rd3;
    ld.global.u32 %r4, [%rd4];
SPIN:
    ACQUIRE
    setp.ne.u32 %p1, %r5, 0;
    @%p1 bra SPIN;
    ld.global.u32 %r6, [%rd1];
    add.u32 %r6, %r6, %r4;
    st.global.u32 [%rd1], %r6;
    RELEASE
    ret;
}
"""
"""Every thread of 4 CTAs of 32 takes a global lock (ACQUIRE: %r5 the old value), adds x[i] into `total` with a plain
load and store, and gives the lock back (RELEASE)."""
KEYS = np.arange(128, dtype=np.uint32) * 3 + 1


def locked(acquire: str, release: str, **kw) -> int:
    text = LOCK.replace("ACQUIRE", acquire).replace("RELEASE", release)
    return int(run(text, 4, 32, [np.zeros(1, np.uint32), np.zeros(1, np.uint32), KEYS], **kw)[1][0])


@pytest.mark.parametrize("acquire, release", [
    ("atom.acquire.gpu.global.cas.b32 %r5, [%rd0], 0, 1;", "st.release.gpu.global.u32 [%rd0], 0;"),
    ("atom.global.cas.b32 %r5, [%rd0], 0, 1;\n    membar.gl;", "membar.gl;\n    atom.global.exch.b32 %r7, [%rd0], 0;"),
], ids=["acquire-release", "membar.gl"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 2)])
def test_a_global_spin_lock_with_gpu_scope_acquire_and_release_is_right(acquire, release, schedule, seed):
    assert locked(acquire, release, schedule=schedule, seed=seed) == KEYS.sum()


@pytest.mark.parametrize("acquire, release, message", [
    ("atom.global.cas.b32 %r5, [%rd0], 0, 1;", "atom.global.exch.b32 %r7, [%rd0], 0;",
     r"ld.global.u32: reads global address 0x\w+ \(argument 1 \(total\) .* which the instruction at line 25"),
    ("atom.acquire.cta.global.cas.b32 %r5, [%rd0], 0, 1;", "st.release.cta.global.u32 [%rd0], 0;",
     r"atom.acquire.cta.global.cas.b32: writes global address 0x\w+ \(argument 0 \(lock\) .* a \.cta scope holds "
     r"no thread of another CTA"),
    ("atom.global.cas.b32 %r5, [%rd0], 0, 1;\n    membar.cta;", "membar.cta;\n    atom.global.exch.b32 %r7, [%rd0], 0;",
     r"ld.global.u32: reads global address 0x\w+ \(argument 1 \(total\) .*\(a \.cta fence or membar\.cta does not"),
], ids=["relaxed", "cta-scope", "membar.cta"])
def test_a_global_spin_lock_without_gpu_scope_synchronisation_is_a_race(acquire, release, message):
    """Relaxed atomics order nothing; .cta atomics are not even morally strong between CTAs; .cta fences make no
    release or acquire pattern between CTAs."""
    with pytest.raises(PtxHazardError, match=message):
        locked(acquire, release)


# endregion
# region distributed shared memory between the CTAs of a cluster
EXCHANGE = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %cluster_ctarank;
    xor.b32 %r10, %r1, 1;
    mov.u32 %r2, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    mapa.shared::cluster.u32 %r6, %r5, %r10;
    mad.lo.u32 %r7, %r1, 1000, %r0;
    STORE
    LOAD
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
"""Each CTA of a cluster of two stores 1000 rank + tid into the peer's `buf` (STORE, through `mapa`) and loads its
own word (LOAD) with no barrier between: only morally strong pairs are no data race (the values are then either)."""


@pytest.mark.parametrize("store, load", [
    ("st.relaxed.cluster.shared::cluster.u32 [%r6], %r7;", "ld.relaxed.cluster.shared.u32 %r8, [%r5];"),
    ("red.relaxed.cluster.shared::cluster.add.u32 [%r6], %r7;", "ld.volatile.shared.u32 %r8, [%r5];"),
])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 0), ("delayed", 1)])
def test_strong_cluster_scoped_accesses_between_ctas_are_no_race(store, load, schedule, seed):
    out = run(EXCHANGE.replace("STORE", store).replace("LOAD", load), 2, 64, [np.zeros(128, np.uint32)], cluster=2,
              schedule=schedule, seed=seed)[0].reshape(2, 64)
    for rank in (0, 1):  # each word is the peer's value or still zero
        assert np.isin(out[rank], [0, 1000 * (1 - rank)] + np.arange(64)[:, None]).all()


@pytest.mark.parametrize("store, load", [
    ("st.relaxed.cta.shared::cluster.u32 [%r6], %r7;", "ld.relaxed.cta.shared.u32 %r8, [%r5];"),
    ("st.relaxed.cluster.shared::cluster.u32 [%r6], %r7;", "ld.relaxed.cta.shared.u32 %r8, [%r5];"),
    ("red.relaxed.cta.shared::cluster.add.u32 [%r6], %r7;", "ld.relaxed.cluster.shared.u32 %r8, [%r5];"),
    ("atom.relaxed.cta.shared::cluster.exch.b32 %r9, [%r6], %r7;", "ld.acquire.cluster.shared.u32 %r8, [%r5];"),
])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 1)])
def test_a_cta_scoped_side_between_ctas_of_a_cluster_is_a_race(store, load, schedule, seed):
    """.cta holds no thread of the peer CTA: not morally strong (they were, whatever the scope), reported whichever
    side ran first, naming the other."""
    text = EXCHANGE.replace("STORE", store).replace("LOAD", load)
    store_line, load_line = line_of(text, store.split()[0]), line_of(text, "%r8, [%r5]")
    with pytest.raises(PtxHazardError, match=rf"<ptx>:({store_line}|{load_line}): error: .* shared address 0x0 of CTA "
                                             rf"\(\d, 0, 0\), which the instruction at line ({store_line}|{load_line}) "
                                             r"\(thread \(0, 0, 0\) of CTA \(\d, 0, 0\)\) (wrote|read), and no "
                                             r"synchronisation orders the two"):
        run(text, 2, 64, [np.zeros(128, np.uint32)], cluster=2, schedule=schedule, seed=seed)


@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 0), ("delayed", 1)])
def test_a_peers_strong_store_after_the_owners_cta_load_is_a_race(schedule, seed):
    """Only CTA 1 stores (.cluster) and only CTA 0 loads (.cta): with CTA 1 delayed the load comes first, and the
    store is reported naming it (it was missed: the owner's strong loads were checked against plain stores only)."""
    text = EXCHANGE.replace(".reg .b64 %rd<8>;", ".reg .b64 %rd<8>;\n    .reg .pred %p<2>;").replace(
        "STORE", "setp.eq.u32 %p1, %r1, 1;\n    @%p1 st.relaxed.cluster.shared::cluster.u32 [%r6], %r7;").replace(
        "LOAD", "mov.u32 %r8, 0;\n    @!%p1 ld.relaxed.cta.shared.u32 %r8, [%r5];")
    store, load = line_of(text, "@%p1 st.relaxed"), line_of(text, "@!%p1 ld.relaxed")
    first, second = (store, load) if seed == 1 else (load, store)
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{first}: error: .* shared address 0x0 of CTA \(0, 0, 0\), which "
                                             rf"the instruction at line {second} .* and no synchronisation orders the "
                                             r"two"):
        run(text, 2, 64, [np.zeros(128, np.uint32)], cluster=2, schedule=schedule, seed=seed)



@pytest.mark.parametrize("own, reported", [("st.relaxed.cta.shared.u32 [%r5], %r7;", True),
                                           ("st.relaxed.cluster.shared.u32 [%r5], %r7;", False)],
                         ids=["cta", "cluster"])
@pytest.mark.parametrize("schedule, seed", [("min-pc", None), ("delayed", 1)])
def test_an_owners_store_and_a_peers_strong_store_of_one_word(own, reported, schedule, seed):
    """CTA 1 stores .relaxed.cluster into CTA 0's word, CTA 0 stores the word itself: two writes, morally strong only
    if the owner's scope holds the peer too (the owner's .cta store was exempt when it came second)."""
    text = EXCHANGE.replace(".reg .b64 %rd<8>;", ".reg .b64 %rd<8>;\n    .reg .pred %p<2>;").replace(
        "STORE", "setp.eq.u32 %p1, %r1, 1;\n    @%p1 st.relaxed.cluster.shared::cluster.u32 [%r6], %r7;").replace(
        "LOAD", "mov.u32 %r8, 0;\n    @!%p1 " + own)
    args = [np.zeros(128, np.uint32)]
    if not reported:
        run(text, 2, 64, args, cluster=2, schedule=schedule, seed=seed)
        return
    with pytest.raises(PtxHazardError, match=r"writes shared address 0x0 of CTA \(0, 0, 0\), which the instruction at "
                                             r"line \d+ \(thread \(0, 0, 0\) of CTA \([01], 0, 0\)\) wrote, and no "
                                             r"synchronisation orders the two .*a \.cta scope holds no thread of "
                                             r"another CTA"):
        run(text, 2, 64, args, cluster=2, schedule=schedule, seed=seed)


# endregion
# region a peer's strong load and the owner's write of one word
PEER_OWNER = r"""
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<2>;
    .shared .align 16 .b8 buf[256];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, %cluster_ctarank;
    mov.u32 %r2, buf;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    mapa.shared::cluster.u32 %r6, %r5, 0;
    mov.u32 %r7, %r0;
    mov.u32 %r8, 0;
    st.shared.u32 [%r5], 7;
    barrier.cluster.arrive;
    barrier.cluster.wait;
    setp.eq.u32 %p1, %r1, 1;
    @%p1 PEER
    SYNC
    @!%p1 OWNER
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
"""Each CTA of a cluster of two sets its own `buf` word t to 7 and meets; then CTA 1 (the peer) performs PEER on CTA
0's word t through `mapa` (its result in %r8, out[64 + t]) and CTA 0 (the owner) performs OWNER on it (%r7 = t),
with SYNC (a cluster barrier, or nothing) between."""
CLUSTER_BARRIER = "barrier.cluster.arrive;\n    barrier.cluster.wait;"
PEER_LOAD = "ld.relaxed.cluster.shared::cluster.u32 %r8, [%r6];"
PEER_ADD = "atom.relaxed.cluster.shared::cluster.add.u32 %r8, [%r6], 1;"
OWNER_CTA_STORE = "st.relaxed.cta.shared.u32 [%r5], %r7;"


def peer_and_owner(peer: str, owner: str, sync: str = "", **kw) -> np.ndarray:
    text = PEER_OWNER.replace("PEER", peer).replace("OWNER", owner).replace("SYNC", sync)
    return run(text, 2, 64, [np.zeros(128, np.uint32)], cluster=2, **kw)[0]


PEER_OWNER_RACES = [
    (PEER_LOAD, OWNER_CTA_STORE),  # .cta holds no thread of the peer (it was missed when the load came first)
    (PEER_LOAD, "st.shared.u32 [%r5], %r7;"),  # a plain store (missed the same way)
    ("ld.volatile.shared::cluster.u32 %r8, [%r6];", OWNER_CTA_STORE),  # .volatile is .relaxed.sys
    ("ld.acquire.cluster.shared::cluster.u32 %r8, [%r6];", "atom.relaxed.cta.shared.exch.b32 %r9, [%r5], %r7;"),
    (PEER_LOAD, "red.relaxed.cta.shared.add.u32 [%r5], %r7;"),
    (PEER_ADD, OWNER_CTA_STORE),
    (PEER_ADD, "atom.relaxed.cta.shared.add.u32 %r9, [%r5], 1;"),
    (PEER_ADD, "ld.relaxed.cta.shared.u32 %r9, [%r5];"),
]
PEER_OWNER_CLEAN = [
    (PEER_LOAD, "st.relaxed.cluster.shared.u32 [%r5], %r7;"),
    ("ld.acquire.cluster.shared::cluster.u32 %r8, [%r6];", "st.release.cluster.shared.u32 [%r5], %r7;"),
    ("ld.relaxed.gpu.shared::cluster.u32 %r8, [%r6];", "st.volatile.shared.u32 [%r5], %r7;"),
    (PEER_LOAD, "red.relaxed.cluster.shared.add.u32 [%r5], %r7;"),
    (PEER_ADD, "atom.relaxed.cluster.shared.add.u32 %r9, [%r5], 1;"),
    (PEER_ADD, "ld.relaxed.cluster.shared.u32 %r9, [%r5];"),
]
ORDERS = [("min-pc", None), ("delayed", 0), ("delayed", 1)]
"""Schedules: CTA 1's access runs first on min-pc and delayed seed 0, CTA 0's on delayed seed 1."""


@pytest.mark.parametrize("peer, owner", PEER_OWNER_RACES)
@pytest.mark.parametrize("schedule, seed", ORDERS)
def test_a_peers_strong_access_and_the_owners_access_not_morally_strong_race(peer, owner, schedule, seed):
    """The PTX ISA (memory-consistency-model-morally-strong-operations): morally strong only if "each operation is
    strong and specifies a scope that includes the thread executing the other operation"; the owner's .cta (or
    plain) access and the peer's .cluster one are not, so unordered they race (memory-consistency-model-conflict-
    and-data-races). Reported whichever runs first, at the second, naming both instructions and both CTAs (a
    peer's .cluster load followed by the owner's store was missed: a peer's strong loads were not recorded)."""
    text = PEER_OWNER.replace("PEER", peer).replace("OWNER", owner).replace("SYNC", "")
    peer_line, owner_line = line_of(text, "@%p1 "), line_of(text, "@!%p1 ")
    second, first = (peer_line, owner_line) if seed == 1 else (owner_line, peer_line)
    with pytest.raises(PtxHazardError, match=rf"<ptx>:{second}: error: .* shared address 0x0 of CTA \(0, 0, 0\), which "
                                             rf"the instruction at line {first} \(thread \(0, 0, 0\) of CTA "
                                             r"\([01], 0, 0\)\) .*and no synchronisation orders the two") as error:
        run(text, 2, 64, [np.zeros(128, np.uint32)], cluster=2, schedule=schedule, seed=seed)
    assert set(re.findall(r"thread \(0, 0, 0\) of CTA \((\d), 0, 0\)", str(error.value))) == {"0", "1"}


@pytest.mark.parametrize("peer, owner", PEER_OWNER_CLEAN)
@pytest.mark.parametrize("schedule, seed", ORDERS)
def test_a_peers_strong_access_and_the_owners_cluster_scoped_one_are_no_race(peer, owner, schedule, seed):
    """Both strong with scopes holding the other thread: morally strong, no race on any schedule; the peer reads
    the 7 (its add: returns 7) or what the owner made of it (t stored, 7 + t added, 8 after the owner's add)."""
    out = peer_and_owner(peer, owner, schedule=schedule, seed=seed)
    t = np.arange(64)
    assert (out[64:] == np.stack([t * 0 + 7, t * 0 + 8, t, t + 7])).any(axis=0).all()  # 7, 7 + 1, t, 7 + t


@pytest.mark.parametrize("peer, owner, peer_first, owner_first", [
    (PEER_LOAD, OWNER_CTA_STORE, 7, np.arange(64)),
    (PEER_LOAD, "st.shared.u32 [%r5], %r7;", 7, np.arange(64)),
    (PEER_ADD, OWNER_CTA_STORE, 7, np.arange(64)),
    (PEER_ADD, "atom.relaxed.cta.shared.add.u32 %r9, [%r5], 1;", 7, 8),
])
def test_a_cluster_barrier_between_the_peer_and_the_owner_orders_them(peer, owner, peer_first, owner_first):
    """The race cases with a cluster barrier between: clean, and the peer reads the 7 when it goes first, the
    owner's value when the owner does (the owner's access moved before the barrier)."""
    np.testing.assert_array_equal(peer_and_owner(peer, owner, CLUSTER_BARRIER)[64:],
                                  np.broadcast_to(peer_first, 64))
    text = PEER_OWNER.replace("@%p1 PEER\n    SYNC\n    @!%p1 OWNER",
                              f"@!%p1 {owner}\n    {CLUSTER_BARRIER}\n    @%p1 {peer}")
    out = run(text, 2, 64, [np.zeros(128, np.uint32)], cluster=2, schedule="delayed", seed=1)[0]
    np.testing.assert_array_equal(out[64:], np.broadcast_to(owner_first, 64))


@pytest.mark.parametrize("store, reported", [("st.relaxed.cta.shared::cluster.u32 [%r9], %r7;", False),
                                             ("red.relaxed.cta.shared::cluster.add.u32 [%r9], %r7;", False),
                                             ("st.shared::cluster.u32 [%r9], %r7;", True)])
def test_a_cta_scoped_store_of_the_peer_that_loaded_the_word_is_morally_strong_with_the_load(store, reported):
    """CTA 1's thread t loads CTA 0's word t (.cluster) and its thread t ^ 1 stores the word (.cta, through
    `mapa`): both threads are of CTA 1, so the .cta scope holds the loading thread and the two are morally strong
    (no race, as between any two threads of one CTA); a plain store is a race."""
    peer = (PEER_LOAD + "\n    xor.b32 %r13, %r4, 4;\n    add.u32 %r14, %r2, %r13;\n"
            "    mapa.shared::cluster.u32 %r9, %r14, 0;\n    @%p1 " + store)
    if not reported:
        peer_and_owner(peer, "mov.u32 %r9, 0;")
        return
    with pytest.raises(PtxHazardError, match=r"st.shared::cluster.u32: writes shared address 0x4 of CTA \(0, 0, 0\), "
                                             r"which the instruction at line \d+ \(thread \(1, 0, 0\) of CTA "
                                             r"\(1, 0, 0\)\) read through a shared::cluster address"):
        peer_and_owner(peer, "mov.u32 %r9, 0;")


def test_the_peer_and_owner_cases_pass_ptxas(ptxas, tmp_path):
    """Every kernel above is sm_90a PTX ptxas takes without a diagnostic."""
    from unseen_ptx import HEAD
    pairs = PEER_OWNER_RACES + PEER_OWNER_CLEAN
    for i, (peer, owner) in enumerate(pairs):
        for sync in ("", CLUSTER_BARRIER):
            path = tmp_path / f"k{i}.ptx"
            path.write_text(HEAD + PEER_OWNER.replace("PEER", peer).replace("OWNER", owner).replace("SYNC", sync))
            done = subprocess.run([ptxas, "-arch=sm_90a", "-o", str(tmp_path / "k.cubin"), str(path)],
                                  capture_output=True, text=True)
            assert done.returncode == 0 and not done.stderr, (peer, owner, done.stderr)


# endregion
