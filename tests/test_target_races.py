"""Happens-before in the CTA simulator (tessera/interpreters/sm90/happens_before.py): races reported whatever order
the strands ran in, with both sides named; proxy fences counted on any causality path (a library epilogue: every
thread stores, a barrier, one thread fences and issues the bulk copy); one bug of each kind seeded into the
warp-specialized flash kernel (tests/target_bug_seeds.py; the whole matrix on two shapes: bench/races_target.py);
seeded edits that are not races run clean; the adversarial schedule."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90 import run_target_kernel
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel
from tessera.reference_attention import attention_operands

from target_bug_seeds import BENIGN, SEEDS, kernel, one_per_kind, seeded
from text_edits import filled


def _run(sig, fn, inputs, **kw):
    arguments, sizes = prepare_arguments(sig, inputs)
    run_target_kernel(fn, arguments, sizes, **kw)
    return arguments


# region the seeded flash kernel


# What some kinds must say (both sides of the race named); the others: any KernelHazardError.
_EXPECTED = {
    "V release before wait_group 0": r"^sm90.tma_load %V_map128.*: the TMA copy (overwrites|writes) shared address "
                                     r"0x[0-9a-f]+ \(buffer 'v_ring' \+ \d+\),? (while|which) `%\d+ = "
                                     r"sm90.wgmma_mma_async .*` (of warpgroup \d )?.* in thread 256 ",
    # slot 0 is released once, by the first trip (which keeps its release): every later trip runs without, the
    # masked one too (its masks are under a branch, not in a tail loop of their own that still released)
    "K release deleted after the first trip": r"the kernel ends with the mbarrier at shared address 0x[0-9a-f]+ \(buffer 'k_ring_empty' "
                         r"\+ \d+\) released 1 times .* filled 2 times .* a consumer's release of the slot is missing",
    # scale-d 0: the zero is no access (an immediate it does not read); the previous trip's softmax read S's
    # registers after the P.V fence (memory_model.WGMMA_FENCE_SCALE_D)
    "loop S wgmma_fence moved before the loop": r"writes its accumulator registers \(scale-d 0\), which `%\w+ = math.fma .*` read "
                                  r"after warpgroup 0's latest wgmma_fence: the chain's previous result holds the "
                                  r"same registers \(race: missing wgmma_fence",
    "O store column shifted": r"^sm90.st_global .*: writes tensor %O\w* at byte offset \d+ in two threads at once "
                              r"\(thread \d+ .*\) writes it too\), and no synchronisation orders the two",
    # deleted on every trip after the first (one loop; before, the masked tail loop still synced, and the
    # kernel ended with the barrier half arrived): the other warpgroup's next bar_arrive finds it still open
    "ping-pong bar_sync deleted": r"^sm90.bar_arrive 1, 256: arrives at named barrier 1 twice before it completes",
}


@pytest.mark.parametrize("name", one_per_kind())
def test_one_bug_of_each_kind_is_reported_on_300_keys(name, rng):
    """300 keys: three K/V tiles, so some slots are never refilled (a missing release shows only at the end)."""
    sig, fn = seeded(name)
    with pytest.raises(KernelHazardError, match=_EXPECTED.get(name)):
        _run(sig, fn, attention_operands(rng, 64, 300, 64))


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_seeded_edits_that_are_not_races_run_clean(name, rng):
    """Each is ordered by another edge (BENIGN says which): reporting it would cry wolf. 700 keys: every slot
    is refilled after the edited release."""
    sig, fn = seeded(name)
    if BENIGN[name][1] == "gemm":
        _run(sig, fn, [rng.standard_normal((128, 64)), rng.standard_normal((64, 128))])
    else:
        _run(sig, fn, attention_operands(rng, 64, 700 if "release" in name else 300, 64))


def test_the_unseeded_kernel_runs_clean_and_the_same_under_the_adversarial_schedule(rng):
    sig, fn = kernel("pingpong")
    inputs = attention_operands(rng, 64, 300, 64)
    np.testing.assert_array_equal(_run(sig, fn, inputs, schedule="adversarial", seed=1)[3], _run(sig, fn, inputs)[3])


def test_an_unknown_schedule_is_refused(rng):
    sig, fn = kernel("specialized")
    with pytest.raises(ValueError, match=r"schedule must be one of round_robin, adversarial, got 'random'"):
        _run(sig, fn, attention_operands(rng, 64, 300, 64), schedule="random")


def test_every_seed_names_a_kind():
    kinds = {kind for kind, _, _ in SEEDS.values()}
    assert len(SEEDS) >= 33 and len(kinds) >= 17


# endregion
# region small kernels: a library epilogue, a handoff without a barrier

_EPILOGUE = """\
builtin.module {
  func.func @epilogue(%x: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "in"},
                      %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                  sm90.kernel = {threads = 64 : i64, smem_bytes = 512 : i64}} {
    %tid = sm90.special "tid.x" : index
    %buf = sm90.shared_buffer "tile" offset 0 size 512 align 128 swizzle 0 : i32
    %t32 = arith.index_cast %tid : index to i32
    %c8 = arith.constant 8 : i32
    %srow = arith.muli %t32, %c8 : i32
    %sbase = arith.addi %buf, %srow : i32
    %sb = vector.broadcast %sbase : i32 to vector<2xi32>
    %scols = arith.constant dense<[0, 4]> : vector<2xi32>
    %saddr = arith.addi %sb, %scols : vector<2xi32>
    %v = arith.constant dense<[1.0, 2.0]> : vector<2xf32>
    sm90.st_shared %saddr, %v : vector<2xi32>, vector<2xf32>
    %c0 = arith.constant 0 : index
    %first = arith.cmpi eq, %tid, %c0 : index
    EARLY
    BARRIER
    scf.if %first {
      LATE
      sm90.bulk_reduce_add %out, %buf, 256 : i64
      sm90.bulk_commit_group
      sm90.bulk_wait_group 0 read
    }
    sm90.bar_sync 0, 64
    func.return
  }
}
"""
_ISSUER_FENCE = "sm90.fence_proxy_async"


def _epilogue(early: str = "", barrier: str = "sm90.bar_sync 0, 64", late: str = _ISSUER_FENCE) -> np.ndarray:
    text = filled(_EPILOGUE, EARLY=early, BARRIER=barrier, LATE=late)
    fn = next(op for op in parse_module(text).walk() if is_target_kernel(op))
    out = np.zeros((32, 2), np.float32)
    run_target_kernel(fn, [np.zeros((32, 2), np.float32), out], {})
    return out


def test_a_fence_after_the_barrier_in_the_issuing_thread_covers_every_threads_stores():
    """The library epilogue of issue 31: the barrier carries every thread's store to the issuer's fence."""
    np.testing.assert_array_equal(_epilogue(), np.tile([1.0, 2.0], (32, 1)))


def test_every_thread_fencing_before_the_barrier_is_correct_too():
    np.testing.assert_array_equal(_epilogue(early=_ISSUER_FENCE, late=""), np.tile([1.0, 2.0], (32, 1)))


def test_a_fence_before_the_barrier_in_the_issuing_thread_covers_only_its_own_stores():
    early = "scf.if %first {\n      sm90.fence_proxy_async\n    }"
    with pytest.raises(KernelHazardError, match=r"sm90.bulk_reduce_add .*: reads the bulk reduction's source at "
                                                r"shared address 0x8 \(buffer 'tile' \+ 8\), which thread 1 stored "
                                                r"with st_shared and has not made visible to the async proxy \(missing "
                                                r"fence_proxy_async after the store: the store is ordered before this "
                                                r"read, but no fence_proxy_async lies on any synchronisation path "
                                                r"between them\) in thread 0 "):
        _epilogue(early=early, late="")


def test_without_the_barrier_the_other_threads_stores_are_unordered():
    with pytest.raises(KernelHazardError, match=r"which thread 1 stored with st_shared and has not made visible to "
                                                r"the async proxy \(missing fence_proxy_async after the store\)"):
        _epilogue(barrier="")


_HANDOFF = """\
builtin.module {
  func.func @handoff(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                  sm90.kernel = {threads = 64 : i64, smem_bytes = 256 : i64}} {
    %tid = sm90.special "tid.x" : index
    %buf = sm90.shared_buffer "box" offset 0 size 256 align 16 swizzle 0 : i32
    %t32 = arith.index_cast %tid : index to i32
    %c4 = arith.constant 4 : i32
    %mine = arith.muli %t32, %c4 : i32
    %c252 = arith.constant 252 : i32
    %next = arith.addi %mine, %c4 : i32
    %wrapped = arith.andi %next, %c252 : i32
    %a = arith.addi %buf, %mine : i32
    %b = arith.addi %buf, %wrapped : i32
    sm90.st_shared %a, %t32 : i32, i32
    sm90.bar_sync 0, 64
    %seen = sm90.ld_shared %b : i32 -> i32
    SYNC
    sm90.st_shared %a, %seen : i32, i32
    func.return
  }
}
"""


def _handoff(sync: str, **kw) -> None:
    fn = next(op for op in parse_module(filled(_HANDOFF, SYNC=sync)).walk() if is_target_kernel(op))
    run_target_kernel(fn, [np.zeros(64, np.int32)], {}, **kw)


def test_a_write_after_another_threads_read_needs_a_barrier_on_any_schedule():
    """Every thread reads its neighbour's word, then overwrites its own: the simulator runs all loads before all
    stores (one strand), so the values are right; nothing orders thread t+1's store after thread t's load."""
    _handoff("sm90.bar_sync 0, 64")
    with pytest.raises(KernelHazardError, match=r"^sm90.st_shared %a, %seen : i32, i32: st_shared writes shared "
                                                r"address 0x0 \(buffer 'box' \+ 0\), which `%seen = sm90.ld_shared %b "
                                                r": i32 -> i32` \(thread 63 \(warp 1, lane 31\) of CTA \(0, 0, 0\)\) "
                                                r"read, and no synchronisation orders the two \(race: a bar_sync or an "
                                                r"mbarrier release/wait between the read and this write is missing\) "
                                                r"in thread 0 "):
        _handoff("")
    _handoff("", races=False)  # the check is off: the schedule the simulator ran shows nothing


# endregion


# region a bar_arrive releases at its arrival [memory_model.BARRIER_ORDERING]

_ARRIVE = """\
builtin.module {
  func.func @arrive(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                  sm90.kernel = {threads = 64 : i64, smem_bytes = 256 : i64}} {
    %tid = sm90.special "tid.x" : index
    %buf = sm90.shared_buffer "box" offset 0 size 256 align 16 swizzle 0 : i32
    %t32 = arith.index_cast %tid : index to i32
    %c4 = arith.constant 4 : i32
    %c128 = arith.constant 128 : i32
    %mine = arith.muli %t32, %c4 : i32
    %a = arith.addi %buf, %mine : i32
    %c32 = arith.constant 32 : index
    %producer = arith.cmpi ult, %tid, %c32 : index
    scf.if %producer {
      sm90.st_shared %a, %t32 : i32, i32
      sm90.bar_arrive 1, 64
      AFTER
    } else {
      sm90.bar_sync 1, 64
      %from = arith.subi %a, %c128 : i32
      %seen = sm90.ld_shared %from : i32 -> i32
      sm90.st_shared %a, %seen : i32, i32
    }
    func.return
  }
}
"""


def _arrive(after: str) -> None:
    fn = next(op for op in parse_module(filled(_ARRIVE, AFTER=after)).walk() if is_target_kernel(op))
    run_target_kernel(fn, [np.zeros(64, np.int32)], {})


def test_a_bar_arrive_releases_only_what_its_thread_did_before_arriving():
    """Warp 0 stores, arrives on named barrier 1 and runs on; warp 1 waits there and reads warp 0's words. The
    simulator ran warp 0's second store before the barrier completed, yet only what warp 0 did before arriving is
    ordered before warp 1's reads: the store after the bar_arrive races them (as in the PTX executor)."""
    _arrive("")
    with pytest.raises(KernelHazardError, match=r"^%seen = sm90.ld_shared %from .*: reads shared address 0x0 \(buffer "
                                                r"'box' \+ 0\), which `sm90.st_shared %a, %c128 .*` \(thread 0 .*\) "
                                                r"wrote, and no synchronisation orders the two \(race: .*\) "
                                                r"in thread 32 "):
        _arrive("sm90.st_shared %a, %c128 : i32, i32")


# endregion


# region happens-before edges before and after the first fence


class _Cta:
    """What `HappensBefore` reads of a CTA: its threads, its clock, the mbarrier phases its threads observed."""

    def __init__(self, threads: int):
        self.threads, self.cluster, self.rank, self.time = threads, None, 0, 0
        self.mbarriers = type("MBarriers", (), {"observed": np.zeros((0, threads), np.int64)})()

    def tick(self) -> int:
        self.time += 1
        return self.time


def test_edges_before_the_first_fence_carry_no_fenced_times():
    """Until a fence_proxy_async, a release carries the one read-only `unfenced` vector and acquires skip it; the
    clocks after edges before, across and after the first fence are those of the full maxima (a unit whose
    `fences` is on from the start)."""
    from tessera.interpreters.sm90.happens_before import HappensBefore

    def replay(eager: bool) -> HappensBefore:
        hb = HappensBefore(_Cta(8))
        hb.fences = eager
        early = hb.release(np.arange(0, 4))  # before any fence
        assert (early[1] is hb.unfenced) != eager
        hb.acquire(np.arange(4, 8), early)
        hb.fence_proxy_async(np.array([4]))
        later = hb.release(np.array([4]))
        hb.acquire(np.arange(0, 2), hb.join(early, later))
        hb.acquire(np.array([7, 5]), early)  # an index array, an early message after the fence
        hb.barrier(np.arange(8), np.arange(8))
        return hb

    lazy, eager = replay(False), replay(True)
    assert lazy.ordered.tobytes() == eager.ordered.tobytes() and lazy.fenced.tobytes() == eager.fenced.tobytes()
    # the fence by 4 covers what 0-3 released to it and its own accesses, and the barrier passes that on to all
    assert (lazy.fenced[:5] >= 0).all() and (lazy.fenced[5:] == -1).all()


# endregion
