"""The CTA simulator (`run_target_kernel`, level "target") on hand-written Target IR for the idioms of
tests/test_unseen_ptx_sync_idioms.py and tests/test_unseen_ptx_async_idioms.py (unseen23x): a shared-memory tree
reduction of 128 threads with one `bar_sync` between two levels missing, two groups of warps on named barriers 1
and 2 with a read across them, a cp.async copy read after a `bar_sync` without its `cp_async_wait_group`,
cp.async copies completed on an mbarrier whose count is not the copying threads', and an arrive by an op of two
warps counted as the PTX ISA counts it, warp by warp. Each report names both sides (a deadlock the barrier and its
pending arrivals); each correct twin runs clean and right against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.sm90 import DeadlockError, run_target_kernel
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel

HEADER = """builtin.module {
  func.func @k(%x: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<128>, tile.role = "in",
                        sm90.element_type = i32},
               %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<128>, tile.role = "out",
                          sm90.element_type = i32})
      attributes {sm90.kernel = {threads = 128 : i64, smem_bytes = 520 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c4 = arith.constant 4 : index
    %true1 = arith.constant true
    %true = arith.constant dense<true> : vector<1xi1>
    %buf = sm90.shared_buffer "buf" offset 0 size 512 align 16 swizzle 0 : i32
    %tb = arith.muli %tid, %c4 : index
    %tb32 = arith.index_cast %tb : index to i32
    %mine = arith.addi %buf, %tb32 : i32
    %tb64 = arith.index_cast %tb : index to i64
    %own = vector.broadcast %tb64 : i64 to vector<1xi64>
"""
FOOTER = """    func.return
  }
}
"""
X = (np.arange(128) * 7 - 300).astype(np.int32)


def launch(body: str, x: np.ndarray = X) -> np.ndarray:
    kernel = next(op for op in parse_module(HEADER + body + FOOTER).walk() if is_target_kernel(op))
    out = np.zeros(128, np.int32)
    run_target_kernel(kernel, [x, out], {})
    return out


# region a tree reduction
LOAD_X = """    %xv = sm90.ld_global %x[%own], %true : vector<1xi64>, vector<1xi1> -> vector<1xi32>
    %x0 = vector.extract %xv[0] : i32 from vector<1xi32>
    sm90.st_shared %mine, %x0 : i32, i32
    sm90.bar_sync 0, 128
"""


def tree(missing: int | None = None) -> str:
    """Level s: threads t < s add word t + s into word t; a bar_sync after each level but `missing`; thread 0
    stores word 0 to out[0]."""
    body = LOAD_X
    for s in (64, 32, 16, 8, 4, 2, 1):
        body += f"""    %s{s} = arith.constant {s} : index
    %in{s} = arith.cmpi ult, %tid, %s{s} : index
    scf.if %in{s} {{
      %a{s} = sm90.ld_shared %mine : i32 -> i32
      %off{s} = arith.constant {4 * s} : i32
      %at{s} = arith.addi %mine, %off{s} : i32
      %b{s} = sm90.ld_shared %at{s} : i32 -> i32
      %sum{s} = arith.addi %a{s}, %b{s} : i32
      sm90.st_shared %mine, %sum{s} : i32, i32
    }}
"""
        if s != missing:
            body += "    sm90.bar_sync 0, 128\n"
    return body + """    %c0 = arith.constant 0 : index
    %first = arith.cmpi eq, %tid, %c0 : index
    scf.if %first {
      %total = sm90.ld_shared %buf : i32 -> i32
      %tv = vector.broadcast %total : i32 to vector<1xi32>
      sm90.st_global %out[%own], %tv, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
    }
"""


def test_a_tree_reduction_with_a_barrier_after_every_level_is_right():
    assert launch(tree())[0] == int(np.sum(X.astype(np.int64)))


@pytest.mark.parametrize("missing, writer", [(64, 32), (16, 8), (2, 1)])
def test_a_tree_reduction_missing_one_barrier_names_both_sides(missing, writer):
    """Level `missing`'s store of word `writer` by thread `writer` and the next level's load of it by thread 0."""
    half = missing // 2
    with pytest.raises(KernelHazardError, match=rf"^%b{half} = sm90.ld_shared %at{half} .*: reads shared .*, which "
                                                rf"`sm90.st_shared %mine, %sum{missing} .*` \(thread {writer} "
                                                rf"\(warp {writer // 32}, lane {writer % 32}\).*\) wrote, and no "
                                                r"synchronisation orders the two .* in thread 0 "):
        launch(tree(missing))


# endregion
# region two groups of warps on named barriers
GROUPS = LOAD_X.replace("    sm90.bar_sync 0, 128\n", "") + """    %c64 = arith.constant 64 : index
    %low = arith.cmpi ult, %tid, %c64 : index
    scf.if %low {
      sm90.bar_sync 1, 64
    } else {
      sm90.bar_sync 2, 64
    }
    %cp = arith.constant PARTNER : index
    %p = arith.xori %tid, %cp : index
    %pb = arith.muli %p, %c4 : index
    %pb32 = arith.index_cast %pb : index to i32
    %theirs = arith.addi %buf, %pb32 : i32
    %seen = sm90.ld_shared %theirs : i32 -> i32
    %sv = vector.broadcast %seen : i32 to vector<1xi32>
    sm90.st_global %out[%own], %sv, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
"""
"""Thread t stores x[t] into word t; warps 0-1 meet on barrier 1, warps 2-3 on barrier 2; t reads t ^ PARTNER."""


@pytest.mark.parametrize("partner", [32, 63])
def test_a_read_inside_its_barrier_group_is_right(partner):
    np.testing.assert_array_equal(launch(GROUPS.replace("PARTNER", str(partner))), X[np.arange(128) ^ partner])


@pytest.mark.parametrize("partner", [64, 127])
def test_a_read_across_barrier_groups_is_a_race(partner):
    with pytest.raises(KernelHazardError, match=r"^%seen = sm90.ld_shared %theirs .*: reads shared .*, which "
                                                r"`sm90.st_shared %mine, %x0 .*` \(thread \d+ .*\) wrote, and no "
                                                r"synchronisation orders the two"):
        launch(GROUPS.replace("PARTNER", str(partner)))


# endregion
# region cp.async read before its wait_group
COPY = """    %x64 = arith.index_cast %tb : index to i64
    %c32 = arith.constant 32 : index
    %copier = arith.cmpi ult, %tid, %c32 : index
    scf.if %copier {
      %c16 = arith.constant 16 : index
      %sb = arith.muli %tid, %c16 : index
      %sb32 = arith.index_cast %sb : index to i32
      %sb64 = arith.index_cast %sb : index to i64
      %dst = arith.addi %buf, %sb32 : i32
      %src = arith.addi %x, %sb64 : i64
      %n16 = arith.constant 16 : i32
      sm90.cp_async %dst, %src, %n16, 16
      sm90.cp_async_commit_group
WAIT    }
    sm90.bar_sync 0, 128
    %w = sm90.ld_shared %mine : i32 -> i32
    %wv = vector.broadcast %w : i32 to vector<1xi32>
    sm90.st_global %out[%own], %wv, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
"""
"""Threads 0-31 copy 16 bytes each of x into `buf` with cp.async (WAIT: their wait_group), a bar_sync, and every
thread reads word t."""


def test_a_cp_async_waited_for_before_the_barrier_is_right():
    np.testing.assert_array_equal(launch(COPY.replace("WAIT", "      sm90.cp_async_wait_group 0\n")), X)


def test_a_cp_async_read_without_its_wait_group_is_reported():
    with pytest.raises(KernelHazardError, match=r"^%w = sm90.ld_shared %mine .*cp_async"):
        launch(COPY.replace("WAIT", ""))


# endregion
# region cp.async completed on an mbarrier
NOINC = """    %bar = sm90.shared_buffer "bar" offset 512 size 8 align 8 swizzle 0 : i32
    %c0 = arith.constant 0 : index
    %lead = arith.cmpi eq, %tid, %c0 : index
    scf.if %lead {
      sm90.mbarrier_init %bar, COUNT
    }
    sm90.bar_sync 0, 128
    %c32 = arith.constant 32 : index
    %copier = arith.cmpi ult, %tid, %c32 : index
    scf.if %copier {
      %c16 = arith.constant 16 : index
      %sb = arith.muli %tid, %c16 : index
      %sb32 = arith.index_cast %sb : index to i32
      %sb64 = arith.index_cast %sb : index to i64
      %dst = arith.addi %buf, %sb32 : i32
      %src = arith.addi %x, %sb64 : i64
      %n16 = arith.constant 16 : i32
      sm90.cp_async %dst, %src, %n16, 16
      sm90.cp_async_mbarrier_arrive_noinc %bar
    } else {
      %zero = arith.constant 0 : i32
      scf.while () : () -> () {
        %done = sm90.mbarrier_try_wait_parity %bar, %zero : i32
        %again = arith.xori %done, %true1 : i1
        scf.condition(%again)
      } do {
        scf.yield
      }
      %i = arith.subi %tid, %c32 : index
      %ib = arith.muli %i, %c4 : index
      %ib32 = arith.index_cast %ib : index to i32
      %at = arith.addi %buf, %ib32 : i32
      %w = sm90.ld_shared %at : i32 -> i32
      %wv = vector.broadcast %w : i32 to vector<1xi32>
      sm90.st_global %out[%own], %wv, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
    }
"""
"""Warp 0 copies x into `buf` (16 bytes a thread) with cp.async and arrives on `bar` (init COUNT) with
cp_async_mbarrier_arrive_noinc; warps 1-3 wait on phase 0 and thread 32 + i copies word i to out[32 + i]."""


def test_cp_async_completed_on_an_mbarrier_counting_the_copiers_is_right():
    np.testing.assert_array_equal(launch(NOINC.replace("COUNT", "32"))[32:], X[:96])


def test_an_mbarrier_counting_more_copiers_than_arrive_is_a_deadlock_naming_it():
    with pytest.raises(DeadlockError, match=r"sm90.mbarrier_try_wait_parity %bar, %zero : i32: deadlock: .* mbarrier "
                                            r"at shared address 0x200 \(buffer 'bar' \+ 0\) waiting for parity 0, but "
                                            r"the barrier is in phase 0 \(parity 0\) with 32 of 64 arrivals pending"):
        launch(NOINC.replace("COUNT", "64"))


def test_an_mbarrier_counting_fewer_copiers_is_refused_at_the_arrive():
    """32 arrivals of one op on a count of 16. The PTX ISA (mbarrier-arrive-on): an arrive-on is "decrementing the
    pending arrival count by the value specified by count argument", then the transition "to the next phase" if
    "the current phase has been completed"; so the 17th arrival counts towards phase 1, which the same op completes
    too, and whether a waiter of parity 0 sees phase 0 complete depends on when it polls. Refused at the arrive,
    by the same name as the PTX executor (tests/test_unseen_ptx_async_idioms.py, which completed two phases and
    reported the waiter's deadlock)."""
    with pytest.raises(KernelHazardError, match=r"sm90.cp_async_mbarrier_arrive_noinc %bar: arrives on the mbarrier "
                                                r"at shared address 0x200 .* more threads arrive than the 16 the "
                                                r"barrier expects"):
        launch(NOINC.replace("COUNT", "16"))


# endregion


# region an arrive by an op of two warps
TWO_WARPS = """    %bar = sm90.shared_buffer "bar" offset 512 size 8 align 8 swizzle 0 : i32
    %c0 = arith.constant 0 : index
    %lead = arith.cmpi eq, %tid, %c0 : index
    scf.if %lead {
      sm90.mbarrier_init %bar, COUNT
    }
    sm90.bar_sync 0, 128
    %c64 = arith.constant 64 : index
    %producer = arith.cmpi ult, %tid, %c64 : index
    scf.if %producer {
""" + LOAD_X.replace("    sm90.bar_sync 0, 128\n", "").replace("\n    ", "\n      ").replace("    %xv", "      %xv", 1) + """      sm90.mbarrier_arrive %bar
    } else {
      %parity = arith.constant PARITY : i32
      scf.while () : () -> () {
        %done = sm90.mbarrier_try_wait_parity %bar, %parity : i32
        %again = arith.xori %done, %true1 : i1
        scf.condition(%again)
      } do {
        scf.yield
      }
      %back = arith.constant -256 : i32
      %theirs = arith.addi %mine, %back : i32
      %w = sm90.ld_shared %theirs : i32 -> i32
      %wv = vector.broadcast %w : i32 to vector<1xi32>
      sm90.st_global %out[%own], %wv, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
    }
"""
"""Warps 0 and 1 store x[t] into word t and arrive on `bar` (init COUNT) in one op; warps 2 and 3 wait for the phase
of parity PARITY and thread 64 + i copies word i to out[64 + i]."""


def two_warps(count: int, parity: int = 0) -> str:
    return TWO_WARPS.replace("COUNT", str(count)).replace("PARITY", str(parity))


def test_an_arrive_of_two_warps_on_a_barrier_counting_both_is_right():
    np.testing.assert_array_equal(launch(two_warps(64))[64:], X[:64])


def test_an_arrive_of_two_warps_counts_the_second_warp_into_the_next_phase():
    """A count of 32: the PTX ISA counts each thread's arrive-on (mbarrier-arrive-on: "the pending arrival count is
    decremented by count"; mbarrier-phase-completion: the phase completes when it "has reached zero", and the
    transition reinitialises it to the expected count), and the op is one instruction per warp: warp 0 completes
    phase 0, warp 1 phase 1, as the PTX executor counts them (`_arrive_each`). The simulator refused the 33rd
    arrival, counting the op as one. A wait for parity 1 then passes; a wait for parity 0 finds phase 2 under way
    and names it."""
    np.testing.assert_array_equal(launch(two_warps(32, parity=1))[64:], X[:64])
    with pytest.raises(DeadlockError, match=r"sm90.mbarrier_try_wait_parity %bar, %parity : i32: deadlock: .* "
                                            r"waiting for parity 0, but the barrier is in phase 2 \(parity 0\) with "
                                            r"32 of 32 arrivals pending"):
        launch(two_warps(32))


def test_an_arrive_of_two_warps_where_one_warp_over_arrives_is_refused_at_the_arrive():
    """A count of 48: warp 0's 32 arrivals leave 16 pending, warp 1's first 16 complete phase 0 and its 17th would
    count towards phase 1 in the same instruction: refused, as the PTX executor refuses it."""
    with pytest.raises(KernelHazardError, match=r"sm90.mbarrier_arrive %bar: arrives on the mbarrier at shared "
                                                r"address 0x200 .* after the earlier arrivals of its warp in this op "
                                                r"completed its phase 0: more threads arrive than the 48 the barrier "
                                                r"expects .*thread 48 "):
        launch(two_warps(48))


# endregion
