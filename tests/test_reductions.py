"""Reductions between CTAs and fragment stores, the machinery of the attention backward
(`tessera.dialects.sm90_reductions`), at Target IR level (the CTA simulator) and as printed PTX (the PTX
executor, ptxas):

- red.global.add.f32 / atom.global.add.f32 from several CTAs run in permuted orders agree with NumPy within
  the f32 reordering error; atom returns the value before each add;
- cp.reduce.async.bulk ... .add.f32 from shared memory with commit_group / wait_group.read;
- the seeded bugs are reported, naming the op, the thread and the CTAs: a plain store to an address another
  CTA adds into, a reuse of the bulk reduction's shared source before wait_group.read, a CTA that ends with
  its reduction still reading, a read of the reduction target while other CTAs still add into it;
- stmatrix (.x4, .trans) writes the PTX ISA's fragment layout (`tessera.sm90.matrix`, tested here against the
  figure's table, not against itself).
"""

from __future__ import annotations

import itertools
import re
import textwrap

import numpy as np
import pytest

from tessera import toolchain
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.sm90 import run_target_kernel
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel
from tessera.ptx import launch, print_ptx
from tessera.sm90 import facts
from tessera.sm90 import matrix as matrix_facts
from text_edits import checked, filled, planted

CTAS = 4


def _kernel(text: str):
    return next(op for op in parse_module(text).walk() if is_target_kernel(op))


# region kernels


_STORE_SLICE = """\
%t64 = arith.index_cast %tid : index to i64
%s64 = arith.index_cast SLICE : index to i64
%c8 = arith.constant 8 : i64
%c256 = arith.constant 256 : i64
%row = arith.muli %t64, %c8 : i64
%slice = arith.muli %s64, %c256 : i64
%mine = arith.addi %slice, %row : i64
%xrows = vector.broadcast %mine : i64 to vector<2xi64>
%cols = arith.constant dense<[0, 4]> : vector<2xi64>
%xoffs = arith.addi %xrows, %cols : vector<2xi64>
%all = arith.constant dense<true> : vector<2xi1>
%v = sm90.ld_global %x[%xoffs], %all : vector<2xi64>, vector<2xi1> -> vector<2xf32>
%t32 = arith.index_cast %tid : index to i32
%c8i = arith.constant 8 : i32
%srow = arith.muli %t32, %c8i : i32
%sbase = arith.addi %buf, %srow : i32
%sb = vector.broadcast %sbase : i32 to vector<2xi32>
%scols = arith.constant dense<[0, 4]> : vector<2xi32>
%saddr = arith.addi %sb, %scols : vector<2xi32>
sm90.st_shared %saddr, %v : vector<2xi32>, vector<2xf32>
sm90.fence_proxy_async
"""
"""Each thread loads its row of x[SLICE] (2 f32) and stores it into %buf at 8 bytes a row, then fences the stores
for the async proxy (the source of a bulk reduction of %buf)."""


def _store_slice(index: str, indent: str) -> str:
    """`_STORE_SLICE` for the slice index `index` (an SSA index value), indented by `indent`."""
    return textwrap.indent(filled(_STORE_SLICE, SLICE=index), indent)


# Each of 4 CTAs adds its slice x[c] (32 threads x 2 f32) into out with red.global.add.f32; the atom variant
# also writes what each add saw into seen[c].
RED = """\
builtin.module {
  func.func @red(%x: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<4, 32, 2>, tile.role = "in"},
                 %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"},
                 %seen: i64 {sm90.source = 2 : i64, tile.dims = #tile.dims<4, 32, 2>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<4>,
                  sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64}} {
    %tid = sm90.special "tid.x" : index
    %cta = sm90.special "ctaid.x" : index
    %t64 = arith.index_cast %tid : index to i64
    %c64 = arith.index_cast %cta : index to i64
    %c8 = arith.constant 8 : i64
    %c256 = arith.constant 256 : i64
    %row = arith.muli %t64, %c8 : i64
    %slice = arith.muli %c64, %c256 : i64
    %mine = arith.addi %slice, %row : i64
    %rows = vector.broadcast %row : i64 to vector<2xi64>
    %xrows = vector.broadcast %mine : i64 to vector<2xi64>
    %cols = arith.constant dense<[0, 4]> : vector<2xi64>
    %offs = arith.addi %rows, %cols : vector<2xi64>
    %xoffs = arith.addi %xrows, %cols : vector<2xi64>
    %all = arith.constant dense<true> : vector<2xi1>
    %v = sm90.ld_global %x[%xoffs], %all : vector<2xi64>, vector<2xi1> -> vector<2xf32>
    sm90.red_global_add %out[%offs], %v, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>
    func.return
  }
}
"""

ATOM = planted(RED, "    sm90.red_global_add %out[%offs], %v, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>\n",
               "    %old = sm90.atom_global_add %out[%offs], %v, %all : vector<2xi64>, vector<2xf32>, vector<2xi1> "
               "-> vector<2xf32>\n"
               "    sm90.st_global %seen[%xoffs], %old, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>\n")

# Each CTA stores its slice into shared memory (st.shared), fences it for the async proxy, and one thread adds
# the 256 bytes into out with one bulk reduction, then waits until it has read its source.
BULK = """\
builtin.module {
  func.func @bulk(%x: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<4, 32, 2>, tile.role = "in"},
                  %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<4>,
                  sm90.kernel = {threads = 32 : i64, smem_bytes = 256 : i64}} {
    %tid = sm90.special "tid.x" : index
    %cta = sm90.special "ctaid.x" : index
    %buf = sm90.shared_buffer "dq" offset 0 size 256 align 128 swizzle 0 : i32
""" + _store_slice("%cta", "    ") + """\
    sm90.bar_sync 0, 32
    %c0 = arith.constant 0 : index
    %first = arith.cmpi eq, %tid, %c0 : index
    scf.if %first {
      sm90.bulk_reduce_add %out, %buf, 256 : i64
      sm90.bulk_commit_group
      sm90.bulk_wait_group 0 read
    }
    sm90.bar_sync 0, 32
    func.return
  }
}
"""

# One warp stores four 8x8 bf16 matrices with stmatrix (.x4, optionally .trans) into a 512-byte buffer, lane
# 8j + r addressing row r of matrix j at 128 j + 16 r; register j of lane l is x[l, j]; the buffer is copied
# out with ld.shared.
STMATRIX = """\
builtin.module {
  func.func @stmatrix(%x: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32, 4>, tile.role = "in"},
                      %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32, 4>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                  sm90.kernel = {threads = 32 : i64, smem_bytes = 512 : i64}} {
    %tid = sm90.special "tid.x" : index
    %buf = sm90.shared_buffer "p" offset 0 size 512 align 128 swizzle 0 : i32
    %t64 = arith.index_cast %tid : index to i64
    %c16x = arith.constant 16 : i64
    %row = arith.muli %t64, %c16x : i64
    %rows = vector.broadcast %row : i64 to vector<4xi64>
    %cols = arith.constant dense<[0, 4, 8, 12]> : vector<4xi64>
    %offs = arith.addi %rows, %cols : vector<4xi64>
    %all = arith.constant dense<true> : vector<4xi1>
    %v = sm90.ld_global %x[%offs], %all : vector<4xi64>, vector<4xi1> -> vector<4xi32>
    %t32 = arith.index_cast %tid : index to i32
    %c16 = arith.constant 16 : i32
    %c7 = arith.constant 7 : i32
    %c3 = arith.constant 3 : i32
    %r = arith.andi %t32, %c7 : i32
    %j = arith.shrui %t32, %c3 : i32
    %c128 = arith.constant 128 : i32
    %jb = arith.muli %j, %c128 : i32
    %rb = arith.muli %r, %c16 : i32
    %o = arith.addi %jb, %rb : i32
    %a = arith.addi %buf, %o : i32
    sm90.stmatrix %a, %v : i32, vector<4xi32>
    sm90.bar_sync 0, 32
    %lb = arith.muli %t32, %c16 : i32
    %l = arith.addi %buf, %lb : i32
    %lv = vector.broadcast %l : i32 to vector<4xi32>
    %lc = arith.constant dense<[0, 4, 8, 12]> : vector<4xi32>
    %la = arith.addi %lv, %lc : vector<4xi32>
    %back = sm90.ld_shared %la : vector<4xi32> -> vector<4xi32>
    %c16l = arith.constant 16 : i64
    %orow = arith.muli %t64, %c16l : i64
    %orows = vector.broadcast %orow : i64 to vector<4xi64>
    %ocols = arith.constant dense<[0, 4, 8, 12]> : vector<4xi64>
    %ooffs = arith.addi %orows, %ocols : vector<4xi64>
    sm90.st_global %out[%ooffs], %back, %all : vector<4xi64>, vector<4xi32>, vector<4xi1>
    func.return
  }
}
"""

# endregion


def _slices(seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((CTAS, 32, 2)).astype(np.float32)


ORDERS = [list(range(CTAS)), [3, 1, 0, 2], [2, 3, 1, 0]]


def _f32_sum_bound(x: np.ndarray) -> np.ndarray:
    """|any f32 summation order - exact sum| <= (n - 1) u sum |x| (u = 2^-24)."""
    return (len(x) - 1) * 2.0**-24 * np.abs(x.astype(np.float64)).sum(axis=0)


# region red / atom


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: "".join(map(str, o)))
def test_red_from_ctas_in_any_order_sums_the_slices(order):
    x = _slices()
    out, seen = np.zeros((32, 2), np.float32), np.zeros((CTAS, 32, 2), np.float32)
    run_target_kernel(_kernel(RED), [x, out, seen], {}, cta_order=order)
    exact = x.astype(np.float64).sum(axis=0)
    assert (np.abs(out - exact) <= _f32_sum_bound(x)).all()


def test_atom_returns_the_running_sum_in_launch_order():
    x = _slices()
    order = [2, 0, 3, 1]
    out, seen = np.zeros((32, 2), np.float32), np.zeros((CTAS, 32, 2), np.float32)
    run_target_kernel(_kernel(ATOM), [x, out, seen], {}, cta_order=order)
    running = np.zeros((32, 2), np.float32)
    for c in order:
        np.testing.assert_array_equal(seen[c], running)
        running = running + x[c]
    np.testing.assert_array_equal(out, running)


PLAIN_STORE_IN_CTA_1 = planted(
    RED, "    sm90.red_global_add %out[%offs], %v, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>\n",
    "    %c1 = arith.constant 1 : index\n"
    "    %odd = arith.cmpi eq, %cta, %c1 : index\n"
    "    scf.if %odd {\n"
    "      sm90.st_global %out[%offs], %v, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>\n"
    "    } else {\n"
    "      sm90.red_global_add %out[%offs], %v, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>\n"
    "    }\n")
"""RED with CTA 1 storing its slice plainly instead of adding it: a race with the other CTAs' adds."""


def test_a_plain_store_to_an_address_another_cta_adds_into_is_a_race():
    for order in ([0, 1, 2, 3], [1, 0, 2, 3]):  # the store after the adds, and before them
        args = [_slices(), np.zeros((32, 2), np.float32), np.zeros((CTAS, 32, 2), np.float32)]
        with pytest.raises(KernelHazardError, match=r"race between CTAs") as error:
            run_target_kernel(_kernel(PLAIN_STORE_IN_CTA_1), args, {}, cta_order=order)
        assert "CTA (" in str(error.value) and "tensor %out at byte offset 0" in str(error.value)


def test_reading_the_reduction_target_while_other_ctas_add_into_it_is_reported():
    # CTA 3 reads out (and copies it to seen) instead of adding into it
    early = planted(RED, "    sm90.red_global_add %out[%offs], %v, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>\n",
                    "    %c3 = arith.constant 3 : index\n"
                    "    %last = arith.cmpi eq, %cta, %c3 : index\n"
                    "    scf.if %last {\n"
                    "      %read = sm90.ld_global %out[%offs], %all : vector<2xi64>, vector<2xi1> -> vector<2xf32>\n"
                    "      sm90.st_global %seen[%xoffs], %read, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>\n"
                    "    } else {\n"
                    "      sm90.red_global_add %out[%offs], %v, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>\n"
                    "    }\n")
    # CTA 3 after the adds: reported at its read; before them: at the first add that follows
    for order, where in (([0, 1, 2, 3], "reads the reduction target tensor %out at byte offset 0, which several other CTAs"),
                         ([3, 0, 1, 2], "adds into tensor %out at byte offset 0, which CTA (3, 0, 0) read")):
        args = [_slices(), np.zeros((32, 2), np.float32), np.zeros((CTAS, 32, 2), np.float32)]
        with pytest.raises(KernelHazardError, match=r"before every contribution landed") as error:
            run_target_kernel(_kernel(early), args, {}, cta_order=order)
        assert where in str(error.value)


# endregion
# region bulk reductions


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: "".join(map(str, o)))
def test_bulk_reduction_from_shared_memory_sums_the_slices(order):
    x = _slices()
    out = np.zeros((32, 2), np.float32)
    run_target_kernel(_kernel(BULK), [x, out], {}, cta_order=order)
    assert (np.abs(out - x.astype(np.float64).sum(axis=0)) <= _f32_sum_bound(x)).all()


SOURCE_REUSED_BEFORE_READ_WAIT = planted(
    BULK, "      sm90.bulk_wait_group 0 read\n    }\n",
    "    }\n"
    "    sm90.bar_sync 0, 32\n"
    "    sm90.st_shared %saddr, %v : vector<2xi32>, vector<2xf32>\n"
    "    scf.if %first {\n"
    "      sm90.bulk_wait_group 0 read\n"
    "    }\n")
"""BULK with the wait_group.read moved after a second store into the reduction's source buffer."""


def test_reusing_the_source_before_wait_group_read_is_reported():
    with pytest.raises(KernelHazardError, match=r"st_shared overwrites shared address 0x0 \(buffer 'dq' \+ 0\), the "
                                                r"source of `sm90.bulk_reduce_add .*before a bulk_wait_group ... read"):
        run_target_kernel(_kernel(SOURCE_REUSED_BEFORE_READ_WAIT), [_slices(), np.zeros((32, 2), np.float32)], {})


def test_wait_group_1_leaves_the_newest_group_reading():
    # wait_group.read 1 with only one group committed covers nothing: the reuse is still early
    reuse = planted(BULK, "      sm90.bulk_wait_group 0 read\n    }\n",
                    "      sm90.bulk_wait_group 1 read\n"
                    "    }\n"
                    "    sm90.bar_sync 0, 32\n"
                    "    sm90.st_shared %saddr, %v : vector<2xi32>, vector<2xf32>\n")
    with pytest.raises(KernelHazardError, match=r"the source of `sm90.bulk_reduce_add"):
        run_target_kernel(_kernel(reuse), [_slices(), np.zeros((32, 2), np.float32)], {})


def test_uncommitted_or_unwaited_reduction_at_the_end_is_reported():
    for seeded in (planted(BULK, "      sm90.bulk_wait_group 0 read\n", ""),
                   planted(BULK, "      sm90.bulk_commit_group\n", "")):
        with pytest.raises(KernelHazardError, match=r"kernel ends with this bulk reduction possibly still reading"):
            run_target_kernel(_kernel(seeded), [_slices(), np.zeros((32, 2), np.float32)], {})


def test_bulk_source_without_fence_proxy_async_is_reported():
    unfenced = planted(BULK, "    sm90.fence_proxy_async\n", "")
    with pytest.raises(KernelHazardError, match=r"missing fence_proxy_async"):
        run_target_kernel(_kernel(unfenced), [_slices(), np.zeros((32, 2), np.float32)], {})


# endregion
# region stmatrix

# The PTX ISA's stmatrix fragment figure (m8n8, .b16), one row per lane: (row, first column) of the pair the
# lane's register holds, read off the figure: lanes 4r .. 4r+3 hold row r, columns 0-1, 2-3, 4-5, 6-7.
STMATRIX_FIGURE = {0: (0, 0), 1: (0, 2), 2: (0, 4), 3: (0, 6), 4: (1, 0), 5: (1, 2), 13: (3, 2), 30: (7, 4),
                   31: (7, 6)}


def test_stmatrix_fragment_facts_follow_the_ptx_isa_figure():
    for lane, (row, col) in STMATRIX_FIGURE.items():
        assert matrix_facts.stmatrix_coords(lane, 0) == (row, col)
        assert matrix_facts.stmatrix_coords(lane, 1) == (row, col + 1)
        assert matrix_facts.stmatrix_coords(lane, 0, trans=True) == (col, row)  # .trans: transposed positions
    assert matrix_facts.STMATRIX_COUNTS == (1, 2, 4)
    assert [int(matrix_facts.stmatrix_row_lane(j, 0)) for j in range(4)] == [0, 8, 16, 24]


def test_accumulator_pairs_are_stmatrix_fragments():
    """The pairs (d[8s+2j], d[8s+2j+1]) of a warp's accumulator registers are matrix j of an .x4 stmatrix at
    (`accumulator_stmatrix_block`), each lane holding that matrix's (row l/4, columns 2(l%4), +1)."""
    lane = np.arange(32)
    for s, j in itertools.product(range(4), range(4)):
        row0, col0 = matrix_facts.accumulator_stmatrix_block(j, s)
        for half in (0, 1):
            r, c = facts.accumulator_coords(8 * s + 2 * j + half, lane)  # warp 0 of the warpgroup
            mr, mc = matrix_facts.stmatrix_coords(lane, half)
            np.testing.assert_array_equal(r, row0 + mr)
            np.testing.assert_array_equal(c, col0 + mc)


def _matrices(x: np.ndarray, trans: bool) -> np.ndarray:
    """What the .x4 store writes: 4 matrices of 8 x 8 16-bit elements, from the figure's table."""
    halves = x.view(np.uint16).reshape(32, 4, 2)  # lane, register (matrix), half
    m = np.zeros((4, 8, 8), np.uint16)
    for lane, j, half in itertools.product(range(32), range(4), range(2)):
        row, col = lane // 4, 2 * (lane % 4) + half
        if trans:
            row, col = col, row
        m[j, row, col] = halves[lane, j, half]
    return m


@pytest.mark.parametrize("trans", [False, True])
def test_stmatrix_writes_the_figures_layout(trans):
    x = np.random.default_rng(5).integers(0, 2**32, (32, 4), dtype=np.uint64).astype(np.uint32).view(np.int32)
    text = STMATRIX if not trans else planted(STMATRIX, "sm90.stmatrix %a, %v :", "sm90.stmatrix %a, %v trans :")
    out = np.zeros_like(x)
    run_target_kernel(_kernel(text), [x, out], {})
    np.testing.assert_array_equal(out.view(np.uint16).reshape(4, 8, 8), _matrices(x, trans))


def test_stmatrix_row_address_not_16_byte_aligned_is_reported():
    bad = planted(STMATRIX, "    %a = arith.addi %buf, %o : i32\n", "    %c2 = arith.constant 2 : i32\n"
                  "    %o2 = arith.addi %o, %c2 : i32\n    %a = arith.addi %buf, %o2 : i32\n")
    with pytest.raises(KernelHazardError, match=r"stmatrix row .* not 16-byte aligned"):
        run_target_kernel(_kernel(bad), [np.zeros((32, 4), np.int32), np.zeros((32, 4), np.int32)], {})


# endregion
# region printed PTX


@pytest.mark.parametrize("text", [RED, ATOM, BULK, STMATRIX], ids=["red", "atom", "bulk", "stmatrix"])
def test_ptxas_accepts_the_printed_kernels(text, ptxas):
    ptx = print_ptx(parse_module(text))
    result = toolchain.compile_ptx(ptx, ptxas=ptxas)
    assert not result.log.diagnostics, result.text


def test_printed_instructions():
    red = print_ptx(parse_module(RED))  # an all-true mask: no predicate (a masked red: tests/lit/ptx/reductions.mlir)
    assert "    red.global.add.f32 [%rd" in red and "@%p0 red" not in red and "mov.pred" not in red
    assert "atom.global.add.f32 %f" in print_ptx(parse_module(ATOM))
    bulk = print_ptx(parse_module(BULK))
    assert "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%rd1], [%r0], 256;" in bulk
    assert "cp.async.bulk.commit_group;" in bulk and "cp.async.bulk.wait_group.read 0;" in bulk
    assert "stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r" in print_ptx(parse_module(STMATRIX))


# endregion
# region the PTX executor

from tessera.interpreters.ptx.state import PtxExecutionError, PtxHazardError  # noqa: E402
from tessera.ptx.kernel import launch_smem_bytes  # noqa: E402


def _run_ptx(text: str, name: str, args: list, order=None) -> list:
    module = parse_module(text)
    smem = launch_smem_bytes(_kernel(text))
    return launch(print_ptx(module), name, (CTAS, 1, 1), (32, 1, 1), args, smem, cta_order=order)


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: "".join(map(str, o)))
def test_ptx_red_and_bulk_from_ctas_in_any_order_sum_the_slices(order):
    x = _slices()
    bound = _f32_sum_bound(x)
    _, out, _ = _run_ptx(RED, "red", [x, np.zeros((32, 2), np.float32), np.zeros((CTAS, 32, 2), np.float32)], order)
    assert (np.abs(out - x.astype(np.float64).sum(axis=0)) <= bound).all()
    _, out = _run_ptx(BULK, "bulk", [x, np.zeros((32, 2), np.float32)], order)
    assert (np.abs(out - x.astype(np.float64).sum(axis=0)) <= bound).all()


def test_ptx_atom_returns_the_running_sum_in_launch_order():
    # the CTAs of a batch execute each atom together, in slot order, which is the launch order
    x = _slices()
    order = [2, 0, 3, 1]
    _, out, seen = _run_ptx(ATOM, "red", [x, np.zeros((32, 2), np.float32), np.zeros((CTAS, 32, 2), np.float32)], order)
    running = np.zeros((32, 2), np.float32)
    for c in order:
        np.testing.assert_array_equal(seen[c], running)
        running = running + x[c]
    np.testing.assert_array_equal(out, running)


def test_ptx_plain_store_racing_an_add_and_early_read_are_reported():
    args = [_slices(), np.zeros((32, 2), np.float32), np.zeros((CTAS, 32, 2), np.float32)]
    # races, so `PtxHazardError`s as happens_before's are (they were bare PtxExecutionErrors)
    with pytest.raises(PtxHazardError, match=r"race between CTAs"):
        _run_ptx(PLAIN_STORE_IN_CTA_1, "red", args, [1, 0, 2, 3])
    early = planted(RED, "    func.return\n",
                    "    %read = sm90.ld_global %out[%offs], %all : vector<2xi64>, vector<2xi1> -> vector<2xf32>\n"
                    "    sm90.st_global %seen[%xoffs], %read, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>\n"
                    "    func.return\n")
    with pytest.raises(PtxHazardError, match=r"before every contribution landed"):
        _run_ptx(early, "red", args)


def test_ptx_reuse_of_the_bulk_source_before_wait_group_read_is_reported():
    with pytest.raises(PtxHazardError, match=r"st.shared.b32: overwrites shared memory that cp.reduce.async.bulk "
                                                r"at line \d+ .* may still be reading"):
        _run_ptx(SOURCE_REUSED_BEFORE_READ_WAIT, "bulk", [_slices(), np.zeros((32, 2), np.float32)])
    unwaited = planted(BULK, "      sm90.bulk_wait_group 0 read\n", "")
    with pytest.raises(PtxHazardError, match=r"CTA exits while this bulk reduction may still read"):
        _run_ptx(unwaited, "bulk", [_slices(), np.zeros((32, 2), np.float32)])


def test_ptx_bulk_reduction_of_unfenced_stores_is_reported():
    """cp.reduce.async.bulk reads its source through the async proxy: every thread's st.shared needs a
    fence.proxy.async on the way to it (tests/backward_seeds.py found it silent)."""
    unfenced = planted(BULK, "    sm90.fence_proxy_async\n", "")
    with pytest.raises(PtxExecutionError, match=r"cp.reduce.async.bulk\S*: the bulk reduction reads shared address "
                                                r"0x0 of CTA \(0, 0, 0\), which thread \(0, 0, 0\) of CTA \(\d, 0, 0\) "
                                                r"stored through the generic proxy .*\(missing fence.proxy.async "
                                                r"after the store"):
        _run_ptx(unfenced, "bulk", [_slices(), np.zeros((32, 2), np.float32)])


@pytest.mark.parametrize("trans", [False, True])
def test_ptx_stmatrix_matches_the_simulator(trans):
    x = np.random.default_rng(5).integers(0, 2**32, (32, 4), dtype=np.uint64).astype(np.uint32).view(np.int32)
    text = STMATRIX if not trans else planted(STMATRIX, "sm90.stmatrix %a, %v :", "sm90.stmatrix %a, %v trans :")
    module = parse_module(text)
    _, out = launch(print_ptx(module), "stmatrix", (1, 1, 1), (32, 1, 1), [x, np.zeros_like(x)],
                    launch_smem_bytes(_kernel(text)))
    np.testing.assert_array_equal(out.view(np.uint16).reshape(4, 8, 8), _matrices(x, trans))


# endregion


def test_ptx_bulk_reduction_with_a_cache_hint_sums_the_slices():
    """The `.L2::cache_hint` form (FlashAttention-3's dQ accumulation) takes a fourth operand, the cache policy:
    a hint that does not change the sum."""
    x = _slices()
    ptx = print_ptx(parse_module(BULK))
    hinted = re.sub(r"cp\.reduce\.async\.bulk\.global\.shared::cta\.bulk_group\.add\.f32 (\[%rd\d+\], \[%r\d+\], \d+);",
                    lambda m: "cp.reduce.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.add.f32 "
                              f"{m.group(1)}, %rd_policy;", ptx)
    hinted = checked(hinted).replace("{\n",
                                     "{\n    .reg .b64 %rd_policy;\n    mov.u64 %rd_policy, 1508705875169116160;\n", 1)
    assert "L2::cache_hint" in hinted
    _, out = launch(hinted, "bulk", (CTAS, 1, 1), (32, 1, 1), [x, np.zeros((32, 2), np.float32)],
                    launch_smem_bytes(_kernel(BULK)))
    assert (np.abs(out - x.astype(np.float64).sum(axis=0)) <= _f32_sum_bound(x)).all()


# region a staging slot the producer drains (convert-tile-to-sm90's reduction slots; MBarriers.check_drained_at_end)

# Warp 0 (the consumers) stores x[trip] into one staging slot per trip: it waits for the slot's empty barrier, stores,
# fences and arrives on its full barrier; thread 128 (the producer, in warpgroup 1) waits on the full barrier, adds
# the slot into out with one bulk reduction, waits for its read and frees the slot on the empty barrier. TRIPS trips,
# one slot.
STAGED = """\
builtin.module {
  func.func @staged(%x: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<4, 32, 2>, tile.role = "in"},
                    %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                  sm90.kernel = {threads = 256 : i64, smem_bytes = 272 : i64}} {
    %tid = sm90.special "tid.x" : index
    %buf = sm90.shared_buffer "staging" offset 0 size 256 align 128 swizzle 0 : i32
    %full = sm90.shared_buffer "full" offset 256 size 8 align 8 swizzle 0 : i32
    %empty = sm90.shared_buffer "empty" offset 264 size 8 align 8 swizzle 0 : i32
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c32 = arith.constant 32 : index
    %c128 = arith.constant 128 : index
    %trips = arith.constant TRIPS : index
    %true = arith.constant true
    %first = arith.cmpi eq, %tid, %c0 : index
    scf.if %first {
      sm90.mbarrier_init %full, 32
      sm90.mbarrier_init %empty, 1
    }
    sm90.bar_sync 0, 256
    %consumer = arith.cmpi ult, %tid, %c32 : index
    scf.if %consumer {
      scf.for %i = %c0 to %trips step %c1 {
        %i32 = arith.index_cast %i : index to i32
        %one = arith.constant 1 : i32
        %p = arith.andi %i32, %one : i32
        %ep = arith.xori %p, %one : i32
        scf.while () : () -> () {
          %ok = sm90.mbarrier_try_wait_parity %empty, %ep : i32
          %again = arith.xori %ok, %true : i1
          scf.condition(%again)
        } do {
          scf.yield
        }
""" + _store_slice("%i", "        ") + """\
        sm90.mbarrier_arrive %full
      }
    } else {
    %producer = arith.cmpi eq, %tid, %c128 : index
    scf.if %producer {
      scf.for %i = %c0 to %PRODUCER_TRIPS step %c1 {
        %i32 = arith.index_cast %i : index to i32
        %one = arith.constant 1 : i32
        %p = arith.andi %i32, %one : i32
        scf.while () : () -> () {
          %ok = sm90.mbarrier_try_wait_parity %full, %p : i32
          %again = arith.xori %ok, %true : i1
          scf.condition(%again)
        } do {
          scf.yield
        }
        sm90.bulk_reduce_add %out, %buf, 256 : i64
        sm90.bulk_commit_group
        sm90.bulk_wait_group 0 read
        sm90.mbarrier_arrive %empty
      }
    }
    }
    func.return
  }
}
"""


def _staged(trips: int, producer_trips: str = "%trips", edit: tuple[str, str] | None = None) -> np.ndarray:
    text = checked(STAGED).replace("%PRODUCER_TRIPS", producer_trips).replace("TRIPS", str(trips))
    if edit is not None:
        text = planted(text, *edit)
    x, out = _slices(), np.zeros((32, 2), np.float32)
    run_target_kernel(_kernel(text), [x, out], {})
    return out


def test_a_staging_slot_drained_once_per_fill_and_released_once_per_drain_is_clean():
    x = _slices()
    for trips in (1, 3):
        out = _staged(trips)
        assert (np.abs(out - x[:trips].astype(np.float64).sum(axis=0)) <= _f32_sum_bound(x[:trips])).all()


def test_a_staging_slot_never_released_is_reported_even_where_no_one_waits_for_it_again():
    release = ("        sm90.bulk_wait_group 0 read\n        sm90.mbarrier_arrive %empty\n",
               "        sm90.bulk_wait_group 0 read\n")
    with pytest.raises(KernelHazardError, match=r"^sm90.mbarrier_init %empty, 1: the kernel ends with the mbarrier at "
                                                r"shared address 0x108 \(buffer 'empty' \+ 0\) released 0 times .* "
                                                r"drained 1 times through the mbarrier at shared address 0x100 .*: a "
                                                r"release of the slot after its drain is missing"):
        _staged(1, edit=release)  # one trip: the consumers never wait for the slot again


def test_a_staging_slot_filled_and_not_drained_by_the_end_is_reported():
    # the producer's loop runs one trip fewer than the consumers': the last fill never reaches global memory
    with pytest.raises(KernelHazardError, match=r"^sm90.mbarrier_init %full, 32: the kernel ends with the staging "
                                                r"slot behind the mbarrier at shared address 0x100 \(buffer 'full' "
                                                r"\+ 0\) filled 2 times and drained after 1 of them"):
        _staged(2, producer_trips="%c1")


def test_a_staging_slot_drained_before_its_stores_are_published_is_reported():
    # the producer's wait deleted: its bulk reduction reads stores no arrival has ordered before it
    wait = ("          %ok = sm90.mbarrier_try_wait_parity %full, %p : i32\n"
            "          %again = arith.xori %ok, %true : i1\n", "          %again = arith.constant false\n")
    with pytest.raises(KernelHazardError, match=r"^sm90.bulk_reduce_add .*: reads the bulk reduction.s source at "
                                                r"shared address 0x0 \(buffer .staging. \+ 0\), which thread 0 stored"):
        _staged(1, edit=wait)
