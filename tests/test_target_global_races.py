"""Happens-before for global memory (tessera/interpreters/sm90/global_races.py, `memory_model.DATA_RACE` and
`ATOMICS_ARE_INDIVISIBLE`) and the read vector clocks of shared memory (happens_before.py) in the CTA simulator,
on the smallest Target IR kernels that show each rule: a race is reported with both sides (op, thread, CTA), the
same kernel with the synchronisation put back runs clean."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.sm90 import run_target_kernel
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel
from text_edits import checked, filled


def _kernel(body: str, threads: int = 32, ctas: int = 1, smem: int = 0) -> str:
    """A kernel of `ctas` CTAs of `threads` threads over a [4, 32] i32 output `%out` (byte offsets computed in
    `body` from %tid, %cta and the constants below)."""
    return f"""builtin.module {{
  func.func @k(%out: i64 {{sm90.source = 0 : i64, tile.dims = #tile.dims<4, 32>, tile.role = "out",
                          sm90.element_type = i32}})
      attributes {{sm90.kernel = {{threads = {threads} : i64, smem_bytes = {smem} : i64}},
                  tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<{ctas}>}} {{
    %tid = sm90.special "tid.x" : index
    %cta = sm90.special "ctaid.x" : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c32 = arith.constant 32 : index
    %true = arith.constant dense<true> : vector<1xi1>
    %t32 = arith.index_cast %tid : index to i32
    %vals = vector.broadcast %t32 : i32 to vector<1xi32>
{body}
    func.return
  }}
}}
"""


def _offsets(name: str, word: str) -> str:
    """`%name`: the vector<1xi64> byte offset of i32 word `word` (an index value)."""
    return (f"    %{name}_b = arith.muli {word}, %c4 : index\n"
            f"    %{name}_64 = arith.index_cast %{name}_b : index to i64\n"
            f"    %{name} = vector.broadcast %{name}_64 : i64 to vector<1xi64>\n")


def _run(text: str) -> np.ndarray:
    kernel = next(op for op in parse_module(text).walk() if is_target_kernel(op))
    out = np.zeros((4, 32), np.int32)
    run_target_kernel(kernel, [out], {})
    return out


STORE_OWN = _offsets("own", "%tid") + "    sm90.st_global %out[%own], %vals, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>\n"
NEXT = "    %n1 = arith.addi %tid, %c1 : index\n    %next = arith.remui %n1, %c32 : index\n" + _offsets("nxt", "%next")
LOAD_NEXT = ("    %got = sm90.ld_global %out[%nxt], %true : vector<1xi64>, vector<1xi1> -> vector<1xi32>\n"
             + "    %row1 = arith.addi %tid, %c32 : index\n" + _offsets("second", "%row1")
             + "    sm90.st_global %out[%second], %got, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>\n")


def test_a_load_of_another_threads_store_needs_a_barrier():
    racy = _kernel(STORE_OWN + NEXT + LOAD_NEXT)
    with pytest.raises(KernelHazardError, match=r"^%got = sm90.ld_global .*: reads tensor %out at byte offset 4, which "
                                                r"`sm90.st_global .*` \(thread 1 \(warp 0, lane 1\) of CTA \(0, 0, 0\)\) "
                                                r"wrote, and no synchronisation orders the two \(race: a bar_sync .* "
                                                r"missing\) in thread 0 "):
        _run(racy)
    out = _run(_kernel(STORE_OWN + "    sm90.bar_sync 0, 32\n" + NEXT + LOAD_NEXT))
    assert out[1].tolist() == [(t + 1) % 32 for t in range(32)]


def test_two_ctas_storing_the_same_bytes_are_reported_with_both_sides():
    both = _kernel(_offsets("row0", "%tid") + "    %v2 = vector.broadcast %t32 : i32 to vector<1xi32>\n"
                   "    sm90.st_global %out[%row0], %v2, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>\n", ctas=2)
    with pytest.raises(KernelHazardError, match=r"writes tensor %out at byte offset 0, which `sm90.st_global .*` "
                                                r"\(thread 0 of CTA \(0, 0, 0\)\) wrote, .* \(race: nothing orders "
                                                r"accesses of two CTAs .* semaphore.*\) in thread 0 .* of CTA \(1, 0, 0\)"):
        _run(both)


def test_two_threads_of_one_store_writing_the_same_bytes_are_a_race():
    same = _kernel(_offsets("zero", "%c0") +
                   "    sm90.st_global %out[%zero], %vals, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>\n")
    with pytest.raises(KernelHazardError, match=r"writes tensor %out at byte offset 0 in two threads at once "
                                                r"\(thread 0 .*\) writes it too\), .* in thread 1 "):
        _run(same)


def test_atomic_adds_never_race_each_other_but_a_plain_load_of_them_does():
    add = (_offsets("zero", "%c0") + "    %one = arith.constant dense<1.0> : vector<1xf32>\n"
           "    sm90.red_global_add %out[%zero], %one, %true : vector<1xi64>, vector<1xf32>, vector<1xi1>\n")
    out = _run(_kernel(add, ctas=2))
    assert out.view(np.float32)[0, 0] == 64.0  # 2 CTAs x 32 threads, in one word, reported nowhere
    load = ("    %seen = sm90.ld_global %out[%zero], %true : vector<1xi64>, vector<1xi1> -> vector<1xf32>\n"
            "    %row1 = arith.addi %tid, %c32 : index\n" + _offsets("second", "%row1") +
            "    sm90.st_global %out[%second], %seen, %true : vector<1xi64>, vector<1xf32>, vector<1xi1>\n")
    with pytest.raises(KernelHazardError, match=r"^%seen = sm90.ld_global .*: reads tensor %out at byte offset 0, which "
                                                r"`sm90.red_global_add .*` \(thread \d+ .*\) atomically wrote"):
        _run(_kernel(add + load))
    _run(_kernel(add + "    sm90.bar_sync 0, 32\n" + load))


# region shared memory: a read vector clock per byte


def _shared(between: str) -> str:
    """Thread 0 stores word 0 of shared memory; after a barrier, threads 0 and 32 read it (each alone); then,
    after `between`, thread 32 writes it."""
    def alone(thread: int, ops: str) -> str:
        return (f"    %is{thread} = arith.cmpi eq, %tid, %c{thread} : index\n"
                f"    scf.if %is{thread} {{\n{ops}    }}\n")

    read = "      %r{t} = sm90.ld_shared %s0 : i32 -> i32\n"
    return _kernel(
        "    %s0 = sm90.shared_buffer \"w\" offset 0 size 64 align 16 swizzle 0 : i32\n"
        "    %c32i = arith.constant 32 : index\n"
        + alone(0, "      sm90.st_shared %s0, %t32 : i32, i32\n")
        + "    sm90.bar_sync 0, 64\n"
        + checked(alone(0, read.format(t=0))).replace("%is0 =", "%again0 =").replace("scf.if %is0", "scf.if %again0")
        + checked(alone(32, read.format(t=32))).replace("%c32 :", "%c32i :")
        + between
        + checked(alone(32, "      sm90.st_shared %s0, %t32 : i32, i32\n")).replace("%is32 =", "%w32 =")
        .replace("scf.if %is32", "scf.if %w32").replace("%c32 :", "%c32i :"),
        threads=64, smem=64)


def test_a_write_racing_an_earlier_reader_is_reported_though_a_later_reader_is_ordered_before_it():
    """Thread 32 reads after thread 0 (concurrently) and then writes: its own read is ordered before its write,
    thread 0's is not. One reader per byte would remember only thread 32's read."""
    with pytest.raises(KernelHazardError, match=r"^sm90.st_shared .*: st_shared writes shared address 0x0 \(buffer "
                                                r"'w' \+ 0\), which `%r0 = sm90.ld_shared .*` \(thread 0 .*\) read, "
                                                r"and no synchronisation orders the two \(race: .* a later read "
                                                r"ordered before this write does not order this one\) in thread 32 "):
        _run(_shared(""))
    _run(_shared("    sm90.bar_sync 1, 64\n"))


# region between CTAs: a semaphore orders them


def _handoff(wait: bool, lead_waits: bool = False, before_signal: str = "      sm90.bar_sync 0, 32\n",
             after_wait: str = "") -> str:
    """CTA 0 stores row 0 and (after `before_signal`) its thread 0 signals the semaphore; CTA 1 (after waiting for
    it, if `wait`: every thread, or thread 0 alone if `lead_waits`, then `after_wait`) copies row 0 into row 1."""
    waiting = ("      %one = arith.constant 1 : i32\n"
               "      %done = sm90.sem_try_wait %sem, %one : i64, i32\n") if wait else ""
    if wait and lead_waits:
        waiting = ("      %one = arith.constant 1 : i32\n      %waiter = arith.cmpi eq, %tid, %c0 : index\n"
                   "      scf.if %waiter {\n  " + waiting.splitlines()[1] + "\n      }\n")
    waiting += after_wait
    return f"""builtin.module {{
  func.func @k(%out: i64 {{sm90.source = 0 : i64, tile.dims = #tile.dims<4, 32>, tile.role = "out",
                          sm90.element_type = i32}},
               %sem: i64 {{sm90.source = 1 : i64, tile.dims = #tile.dims<1>, tile.role = "out",
                          sm90.element_type = i32}})
      attributes {{sm90.kernel = {{threads = 32 : i64, smem_bytes = 0 : i64}},
                  tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<2>}} {{
    %tid = sm90.special "tid.x" : index
    %cta = sm90.special "ctaid.x" : index
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c32 = arith.constant 32 : index
    %true = arith.constant dense<true> : vector<1xi1>
    %b = arith.muli %tid, %c4 : index
    %b64 = arith.index_cast %b : index to i64
    %row0 = vector.broadcast %b64 : i64 to vector<1xi64>
    %first = arith.cmpi eq, %cta, %c0 : index
    scf.if %first {{
      %t32 = arith.index_cast %tid : index to i32
      %vals = vector.broadcast %t32 : i32 to vector<1xi32>
      sm90.st_global %out[%row0], %vals, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
{before_signal}      %lead = arith.cmpi eq, %tid, %c0 : index
      scf.if %lead {{
        sm90.sem_signal %sem : i64
      }}
    }} else {{
{waiting}      %got = sm90.ld_global %out[%row0], %true : vector<1xi64>, vector<1xi1> -> vector<1xi32>
      %r1 = arith.addi %tid, %c32 : index
      %b1 = arith.muli %r1, %c4 : index
      %b164 = arith.index_cast %b1 : index to i64
      %row1 = vector.broadcast %b164 : i64 to vector<1xi64>
      sm90.st_global %out[%row1], %got, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
    }}
    func.return
  }}
}}
"""


def test_a_semaphore_orders_a_ctas_stores_before_another_ctas_loads():
    def run(wait: bool) -> np.ndarray:
        kernel = next(op for op in parse_module(_handoff(wait)).walk() if is_target_kernel(op))
        out, sem = np.zeros((4, 32), np.int32), np.zeros(1, np.int32)
        run_target_kernel(kernel, [out, sem], {})
        return out

    assert run(True)[1].tolist() == list(range(32))
    with pytest.raises(KernelHazardError, match=r"^%got = sm90.ld_global .*: reads tensor %out at byte offset 0, "
                                                r"which `sm90.st_global .*` \(thread 0 of CTA \(0, 0, 0\)\) wrote, .* "
                                                r"no sem_signal of that CTA after its access .* was acquired by a "
                                                r"sem_try_wait of this thread .*\) in thread 0 .* of CTA \(1, 0, 0\)"):
        run(False)


def _run_handoff(text: str) -> np.ndarray:
    kernel = next(op for op in parse_module(text).walk() if is_target_kernel(op))
    out, sem = np.zeros((4, 32), np.int32), np.zeros(1, np.int32)
    run_target_kernel(kernel, [out, sem], {})
    return out


def test_a_semaphore_orders_threads_not_ctas():
    """The edge is per thread (`memory_model.RELEASE_ACQUIRE`): thread 0's wait orders thread 0 only, and the other
    threads of its CTA after a bar_sync; thread 0's signal releases what a bar_sync before it ordered before it.
    (FlashAttention-3's and the deterministic backward's pattern: one thread spins, a CTA barrier, ...)"""
    barrier = "      sm90.bar_sync 0, 32\n"
    assert _run_handoff(_handoff(True, lead_waits=True, after_wait=barrier))[1].tolist() == list(range(32))
    # thread 1 of CTA 1 loads after thread 0's wait, but no barrier carries that wait to it
    with pytest.raises(KernelHazardError, match=r"^%got = sm90.ld_global .*: reads tensor %out at byte offset 4, which "
                                                r"`sm90.st_global .*` \(thread 1 of CTA \(0, 0, 0\)\) wrote, .* "
                                                r"sem_try_wait of this thread .*\) in thread 1 .* of CTA \(1, 0, 0\)"):
        _run_handoff(_handoff(True, lead_waits=True))
    # every thread of CTA 1 waits, but thread 0 of CTA 0 signals without the barrier that orders the others' stores
    with pytest.raises(KernelHazardError, match=r"^%got = sm90.ld_global .*: reads tensor %out at byte offset 4, which "
                                                r"`sm90.st_global .*` \(thread 1 of CTA \(0, 0, 0\)\) wrote"):
        _run_handoff(_handoff(True, before_signal=""))


# region TMA copies read global memory through the async proxy (memory_model.PROXY_FENCE_STATE_SPACE)


def _tma(before: str, row: str = "%c0_i32", ctas: int = 1) -> str:
    """Every thread stores its word of row %cta (`before` comes after the store), then thread 0 copies row `row`
    with a TMA load (the same tensor through a tensor map) and every thread waits for it."""
    text = _kernel(_offsets("mine", "%word") + filled("""\
    %box = sm90.shared_buffer "box" offset 0 size 128 align 128 swizzle 0 : i32
    %bar = sm90.shared_buffer "bar" offset 128 size 8 align 8 swizzle 0 : i32
    %lead = arith.cmpi eq, %tid, %c0 : index
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %cta32 = arith.index_cast %cta : index to i32
    %other = arith.subi %c1_i32, %cta32 : i32
    scf.if %lead {
      sm90.mbarrier_init %bar, 1
    }
    sm90.bar_sync 1, 32
    sm90.st_global %out[%mine], %vals, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
BEFORE    scf.if %lead {
      sm90.mbarrier_arrive_expect_tx %bar, 128
      sm90.tma_load %map[%c0_i32, ROW], %box, %bar : i32, i32
    }
    scf.while () : () -> () {
      %ok = sm90.mbarrier_try_wait_parity %bar, %c0_i32 : i32
      %again = arith.xori %ok, %true1 : i1
      scf.condition(%again)
    } do {
      scf.yield
    }
""", BEFORE=before, ROW=row), ctas=ctas, smem=256)
    text = checked(text).replace("    %true = arith", "    %true1 = arith.constant true\n"
                        "    %rowb = arith.muli %cta, %c32 : index\n    %word = arith.addi %rowb, %tid : index\n"
                        "    %true = arith", 1)
    return checked(text).replace("sm90.element_type = i32})", "sm90.element_type = i32},\n"
                        "          %map: !sm90.tensormap {sm90.source = 0 : i64, sm90.box = [32 : i64, 1 : i64], "
                        "sm90.swizzle = 0 : i64, tile.dims = #tile.dims<4, 32>})", 1)


def test_a_tma_load_of_bytes_a_thread_stored_is_a_race_without_a_barrier():
    with pytest.raises(KernelHazardError, match=r"^sm90.tma_load %map.*: reads tensor %map at byte offset 4, which "
                                                r"`sm90.st_global .*` \(thread 1 .*\) wrote, and no synchronisation "
                                                r"orders the two \(race: .*\) in thread 0 "):
        _run(_tma(""))


def test_an_ordered_generic_store_still_needs_a_global_proxy_fence_before_the_tma_load():
    """A bar_sync orders the stores before the copy, but the async proxy sees them only after a proxy fence for
    global memory, which Target IR does not have: reported naming the store, even thread 0's own."""
    with pytest.raises(KernelHazardError, match=r"^sm90.tma_load %map.*: reads tensor %map at byte offset 0 through "
                                                r"the async proxy \(a TMA copy\), which `sm90.st_global .*` \(thread 0 "
                                                r".*\) wrote through the generic proxy in this launch: .* "
                                                r"fence.proxy.async covering global memory .* in thread 0 "):
        _run(_tma("    sm90.bar_sync 0, 32\n"))


def test_a_tma_load_racing_another_ctas_store_is_reported_with_both_sides():
    """CTA 0 copies row 1, which CTA 1 stores; nothing orders two CTAs of one launch."""
    with pytest.raises(KernelHazardError, match=r"^sm90.st_global .*: writes tensor %map at byte offset 128, which "
                                                r"`sm90.tma_load %map.*` \(thread 0 of CTA \(0, 0, 0\)\) read, .* "
                                                r"in thread 0 .* of CTA \(1, 0, 0\)"):
        _run(_tma("", row="%other", ctas=2))


def test_a_tma_load_of_bytes_no_one_writes_in_the_launch_is_clean():
    """Row 2 is written by no CTA: the copies read it beside the stores."""
    out = _run(checked(_tma("", row="%c2_i32", ctas=2)).replace("    %c0_i32 = arith.constant 0 : i32\n",
                                                       "    %c0_i32 = arith.constant 0 : i32\n"
                                                       "    %c2_i32 = arith.constant 2 : i32\n"))
    assert out[1].tolist() == list(range(32))


def _tma_then_store(before: str, after: str, waiters: str = "") -> np.ndarray:
    """Thread 0 copies row 0 with a TMA load; every thread then stores its word of row 0 (`before` the wait on the
    copy's mbarrier, or `after` it). `waiters`: the i1 value that selects the threads that wait (all if empty)."""
    text = _kernel(_offsets("mine", "%tid") + filled("""\
    %box = sm90.shared_buffer "box" offset 0 size 128 align 128 swizzle 0 : i32
    %bar = sm90.shared_buffer "bar" offset 128 size 8 align 8 swizzle 0 : i32
    %lead = arith.cmpi eq, %tid, %c0 : index
    %c0_i32 = arith.constant 0 : i32
    scf.if %lead {
      sm90.mbarrier_init %bar, 1
    }
    sm90.bar_sync 1, 32
    scf.if %lead {
      sm90.mbarrier_arrive_expect_tx %bar, 128
      sm90.tma_load %map[%c0_i32, %c0_i32], %box, %bar : i32, i32
    }
BEFORE    scf.while () : () -> () {
      %ok = sm90.mbarrier_try_wait_parity %bar, %c0_i32 : i32
      %again = arith.xori %ok, %true1 : i1
      scf.condition(%again)
    } do {
      scf.yield
    }
AFTER""", BEFORE=before, AFTER=after), smem=256)
    text = checked(text).replace("    %true = arith", "    %true1 = arith.constant true\n    %true = arith", 1)
    if waiters:
        head, loop = text.split("    scf.while", 1)
        loop, tail = loop.split("      scf.yield\n    }\n", 1)
        text = f"{head}    scf.if {waiters} {{\n    scf.while{loop}      scf.yield\n    }}\n    }}\n{tail}"
    return _run(checked(text).replace("sm90.element_type = i32})", "sm90.element_type = i32},\n"
                             "          %map: !sm90.tensormap {sm90.source = 0 : i64, sm90.box = [32 : i64, 1 : i64], "
                             "sm90.swizzle = 0 : i64, tile.dims = #tile.dims<4, 32>})", 1))


_STORE_MINE = "    sm90.st_global %out[%mine], %vals, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>\n"


def test_a_tma_loads_source_may_be_overwritten_once_its_phase_completed():
    """[memory_model.TMA_READ_UNTIL_COMPLETE] The copy reads global memory until its complete-tx, which the wait
    acquires: every thread may then overwrite what it read (as the PTX executor judges it too)."""
    assert _tma_then_store("", _STORE_MINE)[0].tolist() == list(range(32))


def test_a_store_ordered_only_after_the_tma_loads_issue_races_its_read():
    """A bar_sync after the issue orders the issue before the stores, not the copy's read of global memory."""
    with pytest.raises(KernelHazardError, match=r"^sm90.st_global %out\[%mine\].*: writes tensor %map at byte offset "
                                                r"0, which `sm90.tma_load %map.*` \(thread 0 .*\) reads through the "
                                                r"async proxy until it completes phase 0 of the mbarrier at shared "
                                                r"address 0x80 \(buffer 'bar' \+ 0\), which this thread has not "
                                                r"observed \(race: .*\) in thread 0 "):
        _tma_then_store("    sm90.bar_sync 0, 32\n" + _STORE_MINE, "")


_HALVES = """\
    %c16 = arith.constant 16 : index
    %high = arith.cmpi uge, %tid, %c16 : index
    %low = arith.cmpi ult, %tid, %c16 : index
"""
_STORE_BOX = """\
    scf.if %high {
      %word = arith.index_cast %tid : index to i32
      %c4_i32 = arith.constant 4 : i32
      %at = arith.muli %word, %c4_i32 : i32
      %slot = arith.addi %box, %at : i32
      sm90.st_shared %slot, %word : i32, i32
    }
"""


def test_a_store_over_a_tma_copy_needs_the_copys_phase_observed():
    """[memory_model.TMA_READ_UNTIL_COMPLETE] Threads 0-15 wait for the copy (the simulator lands it there); threads
    16-31 then store into the tile without having waited: the copy may still be writing it (as the PTX executor
    reports it). Waiting in every thread first is correct."""
    _tma_then_store(_HALVES, _STORE_BOX)
    with pytest.raises(KernelHazardError, match=r"sm90.st_shared %slot, %word .*: writes shared address 0x40 \(buffer "
                                                r"'box' \+ 64\), which the TMA copy completing phase 0 of the mbarrier "
                                                r"at shared address 0x80 \(buffer 'bar' \+ 0\) writes, and this thread "
                                                r"has not observed that phase .* in thread 16 "):
        _tma_then_store(_HALVES, _STORE_BOX, waiters="%low")
