"""The race detector on one-edit bugs (tests/race_seeds.py): 33 bugs of 17 kinds seeded into the PTX of the
warp-specialized flash kernel are each reported (a hazard naming the instruction, its line, the thread and the
other side, or a deadlock naming what each blocked thread waits for), and edits the memory model accepts are
not. The fast slice runs the bugs the schedule alone did not expose on the 300-key shape; the full matrix on
300 and 700 keys is `-m slow` (and `python bench/races.py --matrix`). Rules that need a cluster or a thread
count are checked on small kernels here."""

from __future__ import annotations

import re
import warnings
from functools import lru_cache

import numpy as np
import pytest

import tessera
from tessera import find_kernel, reference
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx.launcher import launch_described
from tessera.passes import PIPELINED_PIPELINE, allocated
from tessera.interpreters.ptx import PtxDeadlockError, PtxHazardError
from tessera.reference_attention import attention_operands

from conftest import build_kernel
from race_kernels import KERNELS
from race_seeds import FLASH_BENIGN, FLASH_BUGS, GENERIC_BUGS, guarded, release, seed
from race_templates import INIT_LOCAL_BARRIER, REMOTE_ARRIVE_THEN_WAIT
from test_ptx_cluster import per_thread
from test_ptx_hazards import _attention, _run
from text_edits import checked

SHAPES = (300, 700)


def _bug(name: str):
    return next(b for b in FLASH_BUGS if f"{b[0]}: {b[1]}" == name)


def _ids(bugs):
    return [f"{kind}: {name}" for kind, name, _ in bugs]


def _run_flash(edit, seq_k: int):
    compiled = _attention(True)
    arrays = _run(compiled, seed(compiled[2], edit), attention_operands(np.random.default_rng(seq_k), 64, seq_k, 64))
    return reference.check_attention(arrays[3], *arrays[:3], arrays[0].dtype, causal=False)


def assert_reported(edit, seq_k: int) -> str:
    """The seeded kernel stops with a hazard naming both sides (or a deadlock naming the blocked threads; a
    warpgroup's first wgmma with no fence before it has no other side: the kernel's start is)."""
    with pytest.raises(PtxHazardError) as caught:
        _run_flash(edit, seq_k)
    message = str(caught.value)
    assert re.match(r"seeded\.ptx(:\d+)?: error: ", message), message
    if not isinstance(caught.value, PtxDeadlockError):
        assert re.search(r"\(thread \(\d+, 0, 0\) of CTA \(0, 0, 0\)\)$", message), message  # this side's thread
        others = re.findall(r"line \d+|thread count is \d+|first wgmma.mma_async", message.split(": ", 2)[2])
        assert others, f"the other side is not named: {message}"
    return message


FAST = ["bar.sync count wrong: the bar.sync after the inits counts only the consumers",
        "slot released before its wait_group: K in the loop, before the branch past the P.V update (on the first "
        "trip before any wait_group covers S, and no V release orders the refill)",
        "wgmma.fence deleted: before S = Q K^T in the loop, kept before the loop for the warpgroup's first"]


ONE_TRIP = 100
"""Keys for which the loop runs one trip (one key block: overlap-softmax's fold runs the first trip in the loop).
The chain of S = Q K^T starts with scale-d false (no zero fill touches S), so the loop's wgmma.fence matters once
the previous trip's softmax has read S: from the loop's second trip on, which 200 keys reach (the masked block
is the loop's last trip, under a branch)."""

TWO_TRIPS = 200
"""Keys for which the loop runs two trips and the producer refills no slot (two stages)."""

ONE_FULL_TRIP = 128
"""Keys for which the loop runs one trip and masks nothing (mask-by-mma's bias branch not taken)."""


@pytest.mark.parametrize("name", FAST)
def test_bugs_the_schedule_alone_missed_are_reported(name):
    assert_reported(_bug(name)[2], SHAPES[0])


def test_the_loops_wgmma_fence_has_nothing_to_order_when_the_loop_runs_once():
    """[memory_model.WGMMA_FENCE] On one trip no instruction of the thread touched S's registers between the
    fence moved before the loop and the S wgmma: the loop's missing fence orders nothing, and no rule can report
    it on that length."""
    name = "wgmma.fence deleted: before S = Q K^T in the loop, kept before the loop for the warpgroup's first"
    check = _run_flash(_bug(name)[2], ONE_TRIP)
    assert check.ok, check


@pytest.mark.parametrize("seq_k", [TWO_TRIPS, SHAPES[0]])
def test_a_k_release_deleted_where_no_refill_waits_for_it_has_nothing_to_order(seq_k):
    """The K release kept on the first trip only: on 200 keys (two trips, no refill) and 300 (the K slot of the
    loop's second trip is never refilled; the first trip's slot is, after its release) no thread waits for a
    deleted release: no access is left for happens-before to order and the kernel runs right. (The CTA simulator
    reports it by its end-of-kernel ledger, a rule for Tessera's kernels; the executor keeps none, since
    FlashAttention-3's forward skips the release of its last tile's Q slot by design.)"""
    check = _run_flash(guarded(release(0), when=True), seq_k)
    assert check.ok, check


@lru_cache(maxsize=None)
def _pingpong():
    """(signature, host description, PTX) of the flash kernel with ping-pong consumer warpgroups
    (`warp-specialize{pingpong=true}`: each warpgroup's loop waits on one named barrier and arrives on the other's)."""
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    pipeline = allocated(PIPELINED_PIPELINE + ",warp-specialize{pingpong=true}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = tessera.compile(module, target="target", pipeline=pipeline)
        return find_kernel(module), describe(lowered)[0], tessera.compile(module, target="ptx", pipeline=pipeline)


def _pingpong_barrier(action: str):
    """The first `bar.<action>` of the first consumer loop (the ping-pong barrier of the first warpgroup)."""
    def pick(lines):
        start, stop = _consumer_loop_of(lines)
        return next(i for i in range(start, stop) if lines[i].strip().startswith(f"bar.{action} "))
    return pick


def _consumer_loop_of(lines) -> tuple[int, int]:
    """The first loop (label to back branch) after the first named barrier inside a loop."""
    for i, line in enumerate(lines):
        label = re.match(r"(\$L__for\d+):", line.strip())
        if label:
            end = next(j for j in range(i, len(lines)) if lines[j].strip().endswith(f"bra {label.group(1)};"))
            if any(lines[k].strip().startswith("bar.sync 1,") for k in range(i, end)):
                return i, end
    raise LookupError("no ping-pong loop")


@pytest.mark.slow
@pytest.mark.parametrize("action, seq_k, reported", [("sync", ONE_FULL_TRIP, False), ("sync", ONE_TRIP, True),
                                                     ("sync", TWO_TRIPS, True), ("arrive", TWO_TRIPS, True)])
def test_a_ping_pong_barrier_deleted_is_reported_where_its_arrivals_go_unmatched(action, seq_k, reported):
    """The ping-pong named barriers order no memory access (each warpgroup's rows are its own, the K/V slots both
    read are refilled after the empty barrier counting both): the loop's bar.sync deleted on one unmasked trip
    (128 keys: the loop runs its first trip too) leaves the other warpgroup's bar.arrive armed at exit, which the
    executor does not report (FlashAttention-3 exits so); on one masked trip (100 keys: mask-by-mma's bias tile
    is written between two bar.syncs of both consumer warpgroups) and on two trips (200 keys) the unmatched
    arrivals deadlock, and a deleted bar.arrive deadlocks on any length."""
    sig, host, text = _pingpong()
    lines = text.splitlines()
    del lines[_pingpong_barrier(action)(lines)]
    arrays, sizes = prepare_arguments(sig, attention_operands(np.random.default_rng(seq_k), 64, seq_k, 64))
    if not reported:
        launch_described("\n".join(lines) + "\n", host, arrays, sizes, source="seeded.ptx")
        assert reference.check_attention(arrays[3], *arrays[:3], arrays[0].dtype, causal=False).ok
        return
    with pytest.raises(PtxDeadlockError, match=r"deadlock: no thread can make progress"):
        launch_described("\n".join(lines) + "\n", host, arrays, sizes, source="seeded.ptx")


def test_the_catalogue_has_33_bugs_of_17_kinds():
    assert len(FLASH_BUGS) == 33 and len({kind for kind, _, _ in FLASH_BUGS}) == 17


@pytest.mark.parametrize("kind,name,edit", FLASH_BENIGN[1:2], ids=_ids(FLASH_BENIGN[1:2]))
def test_edits_the_memory_model_accepts_run_clean(kind, name, edit):
    check = _run_flash(edit, SHAPES[0])
    assert check.ok, check


@pytest.mark.slow
@pytest.mark.parametrize("seq_k", SHAPES)
@pytest.mark.parametrize("kind,name,edit", FLASH_BUGS, ids=_ids(FLASH_BUGS))
def test_every_seeded_bug_is_reported_on_every_shape(kind, name, edit, seq_k):
    assert_reported(edit, seq_k)


@pytest.mark.slow
@pytest.mark.parametrize("seq_k", SHAPES)
@pytest.mark.parametrize("kind,name,edit", FLASH_BENIGN, ids=_ids(FLASH_BENIGN))
def test_every_benign_edit_runs_clean_on_every_shape(kind, name, edit, seq_k):
    check = _run_flash(edit, seq_k)
    assert check.ok, check


# region fence.mbarrier_init in a cluster [memory_model.MBARRIER_INIT_FENCE]
_REMOTE_ARRIVE = INIT_LOCAL_BARRIER.format(count=1) + REMOTE_ARRIVE_THEN_WAIT
_FENCE = "    @%p7 fence.mbarrier_init.release.cluster;\n"
_ARRIVE = "barrier.cluster.arrive.release.aligned;"


def _remote(fence: bool, arrive: str):
    body = checked(_REMOTE_ARRIVE).replace(_FENCE, _FENCE if fence else "").replace(_ARRIVE, arrive, 1)
    return per_thread(body, grid=2, block=1, cluster=2, extra=".shared .align 8 .b64 bar;")


@pytest.mark.parametrize("fence,arrive", [(True, "barrier.cluster.arrive.relaxed.aligned;"), (False, _ARRIVE)])
def test_an_init_released_by_the_fence_or_by_a_releasing_cluster_arrive_is_clean(fence, arrive):
    np.testing.assert_array_equal(_remote(fence, arrive), [5, 5])


def test_a_relaxed_cluster_arrive_without_fence_mbarrier_init_is_reported():
    """The peer's remote arrive may find the mbarrier uninitialised: .relaxed releases nothing."""
    with pytest.raises(PtxHazardError, match=r"hazard: mbarrier.arrive\S*: a remote mbarrier.arrive on the mbarrier at shared "
                                             r"address 0x0 of CTA \(0, 0, 0\), whose mbarrier.init by thread \(0, 0, 0\) "
                                             r"of CTA \(0, 0, 0\) was never released to the cluster: .*\(missing "
                                             r"fence.mbarrier_init\) \(thread \(0, 0, 0\) of CTA \(1, 0, 0\)\)"):
        _remote(False, "barrier.cluster.arrive.relaxed.aligned;")


# endregion
# region the thread count of a named barrier [memory_model.BARRIER_COUNT]
_COUNTED = """
    bar.sync 1, {count};
    mov.u32 %r9, 1;
"""


def test_more_threads_at_once_than_the_barrier_count_is_reported():
    with pytest.raises(PtxHazardError, match=r"bar.sync: 128 threads arrive on barrier 1 at once, whose thread count "
                                             r"is 64: .*\(wrong barrier thread count\)"):
        per_thread(_COUNTED.format(count=64), grid=1, block=128)


def test_warps_meeting_in_pairs_at_a_counted_barrier_are_clean():
    """Warps 0-1 and 2-3 each complete `bar.sync 1, 64` separately (one after the other): no overflow."""
    body = """
    setp.lt.u32 %p1, %r0, 64;
    @%p1 bar.sync 1, 64;
    bar.sync 2;
    @!%p1 bar.sync 1, 64;
    mov.u32 %r9, 1;
    """
    np.testing.assert_array_equal(per_thread(body, grid=1, block=128), np.ones(128))


# endregion


# region the same kinds in other kernels (tests/race_kernels.py): Tessera's GEMM and clustered flash, Triton's PTX
def _generic(name: str):
    return next(b for b in GENERIC_BUGS if f"{b[0]}: {b[1]}" == name)


GENERIC_FAST = [("triton matmul (TMA)", "fence.proxy.async deleted: the first", r"missing fence.proxy.async after the "
                 r"store at line \d+"),
                ("triton matmul (TMA)", "bar.sync deleted: after the first fence.proxy.async", r"which thread \(\d+, 0, "
                 r"0\) of CTA \(0, 0, 0\) stored through the generic proxy .*no synchronisation orders the store"),
                ("triton flash attention forward (cp.async)", "cp.async.wait_group deleted: the first",
                 r"before it was signalled: the cp.async at line \d+ into it has not landed"),
                ("triton flash attention forward (cp.async)", "fence.proxy.async deleted: the first",
                 r"missing fence.proxy.async after the store at line \d+"),
                ("tessera gemm (default pipeline)", "expect_tx too small: the first",
                 r"delivered 8192 bytes more than its expect_tx announced for phase 0 \(the arrive at line \d+"),
                ("triton matmul (TMA)", "mbarrier count wrong: the first mbarrier.init counts one more arrival",
                 r"deadlock: no thread can make progress"),
                ("triton flash attention forward (cp.async)", "bar.sync count wrong: the first bar.sync counts one warp",
                 r"bar.sync: 128 threads arrive on barrier 0 at once, whose thread count is 32")]


@pytest.mark.parametrize("kernel,bug,message", GENERIC_FAST, ids=[f"{k}: {b}" for k, b, _ in GENERIC_FAST])
def test_the_same_kinds_are_reported_in_other_kernels(kernel, bug, message):
    text, run = KERNELS[kernel]()
    with pytest.raises(PtxHazardError, match=message):
        run(seed(text, _generic(bug)[2]))


@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
def test_no_correct_kernel_is_reported(kernel):
    """(The default suite runs each of these clean elsewhere: test_ptx_hazards, test_ptx_external, test_clusters,
    test_ptx_matrix.)"""
    text, run = KERNELS[kernel]()
    assert run(text)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_generic_bug_is_reported_or_benign(kernel):
    """Each edit either stops the run with a hazard or leaves the output right (an edit the kernel's other
    synchronisation covers, e.g. a wait whose bar.sync follows, or the first trip's empty wait); never a wrong
    answer in silence. bench/races.py --matrix prints which is which."""
    text, run = KERNELS[kernel]()
    assert run(text)
    for kind, name, edit in GENERIC_BUGS:
        try:
            seeded = seed(text, edit)
        except LookupError:
            continue
        try:
            assert run(seeded), f"{kind}: {name}: a wrong answer and no report"
        except PtxHazardError:
            pass


# endregion
