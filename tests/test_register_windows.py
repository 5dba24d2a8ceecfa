"""The register-file check compares only the reads a write can reach (`tessera.interpreters.sm90.register_windows`):
a correct allocation leaves none to compare, and seeded wrong allocations of kinds the other tests do not plant
are still reported: a register reused one op after its value's last read in a loop body (too early: the loop's
back edge reads it again), a loop-carried value's register reused before its last read in a trip, and two
values sharing a register across an `scf.if` whose branches the threads split over. Sharing a register between
a value read only in the else-branch and one made only in the then-branch is legal (each thread runs one
branch) and passes."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func

from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.sm90 import run_target_kernel
from tessera.interpreters.sm90.register_check import RegisterLayout
from tessera.interpreters.sm90.register_windows import check_windows
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel
from tessera.regalloc import allocate_registers

THREADS = 32


def _kernel(body: str) -> func.FuncOp:
    """A 32-thread kernel storing `%result` (i32) of each thread at out[tid]; `body` may use %tid (index), %t
    (i32), %one, %five (i32), %c0, %c1, %c3, %c16 (index)."""
    text = f"""builtin.module {{
  func.func @k(%out: i64 {{sm90.source = 0 : i64, tile.dims = #tile.dims<{THREADS}>, tile.role = "out"}})
      attributes {{sm90.kernel = {{threads = {THREADS} : i64, smem_bytes = 0 : i64}},
                  tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>}} {{
    %tid = sm90.special "tid.x" : index
    %t = arith.index_cast %tid : index to i32
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c16 = arith.constant 16 : index
    %one = arith.constant 1 : i32
    %five = arith.constant 5 : i32
{body}
    %t64 = arith.index_cast %tid : index to i64
    %four = arith.constant 4 : i64
    %byte = arith.muli %t64, %four : i64
    %off = vector.broadcast %byte : i64 to vector<1xi64>
    %stored = vector.broadcast %result : i32 to vector<1xi32>
    %all = arith.constant dense<true> : vector<1xi1>
    sm90.st_global %out[%off], %stored, %all : vector<1xi64>, vector<1xi32>, vector<1xi1>
    func.return
  }}
}}"""
    return next(op for op in parse_module(text).walk() if is_target_kernel(op))


def _value(kernel: func.FuncOp, name: str):
    """The op result or block argument named `name`."""
    values = [r for op in kernel.walk() for r in op.results] + [
        a for op in kernel.walk() for region in op.regions for block in region.blocks for a in block.args]
    return next(v for v in values if v.name_hint == name)


def _run(kernel: func.FuncOp, allocation) -> np.ndarray:
    out = np.zeros(THREADS, np.int32)
    run_target_kernel(kernel, [out], {}, allocation)
    return out


def _sharing(kernel: func.FuncOp, value: str, holder: str):
    """The allocator's allocation with `value` moved into `holder`'s registers."""
    allocation = allocate_registers(kernel)
    assert allocation.names[_value(kernel, value)] != allocation.names[_value(kernel, holder)]
    allocation.names[_value(kernel, value)] = list(allocation.names[_value(kernel, holder)])
    return allocation


def _compared(kernel: func.FuncOp, allocation) -> dict[str, list[str]]:
    """The reads the check compares at run time: reader's first result (or op name) -> values."""
    windows = check_windows(kernel, RegisterLayout(allocation))
    return {(op.results[0].name_hint if op.results else op.name): [op.operands[i].name_hint for i in positions]
            for op, positions in windows.reads.items()}


# %v (made before the loop) is read by %x in every trip; %u, made right after that read, may not take %v's
# register: the next trip reads %v again.
LOOP = """\
    %v = arith.addi %t, %five : i32
    %result = scf.for %i = %c0 to %c3 step %c1 iter_args(%s = %t) -> (i32) {
      %x = arith.addi %s, %v : i32
      %u = arith.muli %x, %x : i32
      %s2 = arith.addi %u, %one : i32
      scf.yield %s2 : i32
    }"""


def _loop_reference() -> np.ndarray:
    t = np.arange(THREADS, dtype=np.int64)
    s = t.copy()
    for _ in range(3):
        x = s + t + 5
        s = (x * x + 1).astype(np.int32).astype(np.int64)
    return s.astype(np.int32)


def test_a_correct_allocation_leaves_no_read_to_compare():
    kernel = _kernel(LOOP)
    allocation = allocate_registers(kernel)
    assert _compared(kernel, allocation) == {}
    np.testing.assert_array_equal(_run(kernel, allocation), _loop_reference())


def test_a_register_reused_one_op_early_across_a_loops_back_edge_is_reported():
    kernel = _kernel(LOOP)
    allocation = _sharing(kernel, "u", "v")
    assert _compared(kernel, allocation)["x"] == ["v"]  # the back edge brings %u's write before the read
    with pytest.raises(KernelHazardError, match=r"%x = arith.addi %s, %v .*: register %r\d+ no longer holds %v "
                                                r"\(another value was allocated to it while it was live\) in thread 0"):
        _run(kernel, allocation)


# %s, carried by the loop, is read twice in each trip: %u may not take its registers before the second read.
CARRIED = """\
    %v = arith.addi %t, %five : i32
    %result = scf.for %i = %c0 to %c3 step %c1 iter_args(%s = %v) -> (i32) {
      %u = arith.muli %s, %s : i32
      %s2 = arith.addi %u, %s : i32
      scf.yield %s2 : i32
    }"""


def test_a_loop_carried_value_is_compared_in_the_registers_the_moves_write():
    """The loop's entry and its yields move values into the carried registers: %s is read from them."""
    kernel = _kernel(CARRIED)
    allocation = allocate_registers(kernel)
    assert _compared(kernel, allocation) == {}
    s = np.arange(THREADS, dtype=np.int32) + 5
    for _ in range(3):
        s = s * s + s
    np.testing.assert_array_equal(_run(kernel, allocation), s)
    seeded = _sharing(kernel, "u", "s")
    assert _compared(kernel, seeded) == {"s2": ["s"]}
    with pytest.raises(KernelHazardError, match=r"%s2 = arith.addi %u, %s .*: register %r\d+ no longer holds %s .* "
                                                r"in thread 0"):
        _run(kernel, seeded)


# Threads 0-15 take the then-branch, which makes %u; the else-branch reads %v; %v may be read after the if.
BRANCH = """\
    %v = arith.addi %t, %five : i32
    %low = arith.cmpi ult, %tid, %c16 : index
    %w = scf.if %low -> (i32) {{
      %u = arith.muli %t, %t : i32
      scf.yield %u : i32
    }} else {{
      %e = arith.addi %v, %one : i32
      scf.yield %e : i32
    }}
    %result = arith.addi %w, {after} : i32"""


def test_two_values_sharing_a_register_across_a_branch_are_reported_in_the_threads_of_the_branch():
    kernel = _kernel(BRANCH.format(after="%v"))
    allocation = _sharing(kernel, "u", "v")
    assert _compared(kernel, allocation) == {"result": ["v"]}
    with pytest.raises(KernelHazardError, match=r"%result = arith.addi %w, %v .*: register %r\d+ no longer holds "
                                                r"%v .* in thread 0"):
        _run(kernel, allocation)


def test_a_register_shared_by_the_two_branches_of_an_if_is_legal():
    """%v is read only in the else-branch, %u made only in the then-branch: each thread runs one of them."""
    kernel = _kernel(BRANCH.format(after="%one"))
    allocation = _sharing(kernel, "u", "v")
    assert _compared(kernel, allocation) == {}
    t = np.arange(THREADS, dtype=np.int32)
    np.testing.assert_array_equal(_run(kernel, allocation), np.where(t < 16, t * t, t + 6) + 1)


def test_a_view_placed_outside_its_sources_registers_is_compared():
    """A view (here the broadcast of %result into the stored vector) prints no instruction: registers other
    than its source's hold something else, found at its first read."""
    kernel = _kernel(LOOP)
    allocation = _sharing(kernel, "stored", "v")
    with pytest.raises(KernelHazardError, match=r"sm90.st_global .*: register %r\d+ no longer holds %stored"):
        _run(kernel, allocation)


def _flash_swaps():
    """The bench's kernel, inputs and swaps (bench/register_windows.py)."""
    import random
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
    import register_windows as bench

    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 1, 64, 64)) for _ in range(3)]
    sig, kernel = bench.flash_kernel(64, causal=False)
    base = allocate_registers(kernel)
    return bench, sig, kernel, inputs, base, bench.swaps(base, random.Random(0))


def test_a_seeded_flash_allocation_is_reported_as_comparing_every_read_reports_it():
    """%col_base in the registers of %peeled_trips: both are live in the peeled loop."""
    bench, sig, kernel, inputs, base, _ = _flash_swaps()
    (full, _), (windowed, _) = bench.compare(sig, kernel, inputs, base, _value(kernel, "col_base"),
                                             _value(kernel, "peeled_trips"))
    assert full[0] == "KernelHazardError" and "no longer holds %col_base" in full[1]
    assert windowed == full


@pytest.mark.slow
def test_random_seeded_flash_allocations_end_as_comparing_every_read_ends():
    bench, sig, kernel, inputs, base, drawn = _flash_swaps()
    for _ in range(12):
        (full, _), (windowed, _) = bench.compare(sig, kernel, inputs, base, *next(drawn))
        assert windowed == full
