"""Observing an mbarrier phase travels along happens-before chains, at both levels: a thread that waited phase p of
barrier X and then arrives on barrier Y lets Y's waiters read the bytes X's phase p delivered (the CTA simulator
learnt a phase only through its own wait or a bar_sync, and refused the correct chain); an arrival made before that
wait carries nothing, and an arrival into a later phase of Y reaches only that phase's waiters (the PTX executor
carried every arrival to every waiter of the barrier, and missed the bug). A named barrier's `bar.arrive` carries
likewise only what its thread had observed when it arrived (the PTX executor shared what the participants had
observed when the barrier completed)."""

from __future__ import annotations

import numpy as np
import pytest

from race_templates import PTX_HEADER
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.ptx import PtxHazardError, launch
from tessera.interpreters.sm90 import run_target_kernel
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel
from text_edits import checked, filled

_SOURCE = np.arange(32, dtype=np.int32) + 100

# region Target IR: thread 0 copies a row with a TMA load (barrier x), waits for it, and arrives on y; warp 1
# waits on y only and reads the row

_WAIT = """scf.while () : () -> () {{
        %ok{tag} = sm90.mbarrier_try_wait_parity %{bar}, %{parity} : i32
        %again{tag} = arith.xori %ok{tag}, %true1 : i1
        scf.condition(%again{tag})
      }} do {{
        scf.yield
      }}"""

_TARGET = filled("""\
builtin.module {
  func.func @chain(%src: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<1, 32>, tile.role = "in",
                              sm90.element_type = i32},
                   %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32>, tile.role = "out",
                              sm90.element_type = i32},
                   %map: !sm90.tensormap {sm90.source = 0 : i64, sm90.box = [32 : i64, 1 : i64],
                                          sm90.swizzle = 0 : i64, tile.dims = #tile.dims<1, 32>})
      attributes {sm90.kernel = {threads = 64 : i64, smem_bytes = 256 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c0 = arith.constant 0 : index
    %c4 = arith.constant 4 : index
    %c32 = arith.constant 32 : index
    %c0_i32 = arith.constant 0 : i32
    %true1 = arith.constant true
    %true = arith.constant dense<true> : vector<1xi1>
    %box = sm90.shared_buffer "box" offset 0 size 128 align 128 swizzle 0 : i32
    %x = sm90.shared_buffer "x" offset 128 size 8 align 8 swizzle 0 : i32
    %y = sm90.shared_buffer "y" offset 136 size 8 align 8 swizzle 0 : i32
    %lead = arith.cmpi eq, %tid, %c0 : index
    scf.if %lead {
      sm90.mbarrier_init %x, 1
      sm90.mbarrier_init %y, 1
    }
    sm90.bar_sync 0, 64
    scf.if %lead {
      sm90.mbarrier_arrive_expect_tx %x, 128
      sm90.tma_load %map[%c0_i32, %c0_i32], %box, %x : i32, i32
      EARLY
      WAIT_X
      LATE
    }
    %reader = arith.cmpi uge, %tid, %c32 : index
    scf.if %reader {
      WAIT_Y
      %i = arith.subi %tid, %c32 : index
      %ib = arith.muli %i, %c4 : index
      %i32 = arith.index_cast %ib : index to i32
      %at = arith.addi %box, %i32 : i32
      %w = sm90.ld_shared %at : i32 -> i32
      %o64 = arith.index_cast %ib : index to i64
      %o = vector.broadcast %o64 : i64 to vector<1xi64>
      %wv = vector.broadcast %w : i32 to vector<1xi32>
      sm90.st_global %out[%o], %wv, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
    }
    func.return
  }
}
""", WAIT_X=_WAIT.format(tag="x", bar="x", parity="c0_i32"), WAIT_Y=_WAIT.format(tag="y", bar="y", parity="c0_i32"))
_ARRIVE_Y = "sm90.mbarrier_arrive %y"


def _target(early: str = "", late: str = _ARRIVE_Y) -> np.ndarray:
    text = filled(_TARGET, EARLY=early, LATE=late)
    kernel = next(op for op in parse_module(text).walk() if is_target_kernel(op))
    out = np.zeros(32, np.int32)
    run_target_kernel(kernel, [_SOURCE.reshape(1, 32), out], {})
    return out


def test_target_a_phase_observed_before_an_arrive_reaches_the_waiters_of_that_arrive():
    np.testing.assert_array_equal(_target(), _SOURCE)


def test_target_an_arrive_before_the_wait_carries_no_observation():
    with pytest.raises(KernelHazardError, match=r"^%w = sm90.ld_shared %at .*: reads at shared address 0x0 \(buffer "
                                                r"'box' \+ 0\) before the TMA signalled: this thread has not observed "
                                                r"phase 0 \(parity 0\) of the mbarrier at shared address 0x80 "
                                                r"\(buffer 'x' \+ 0\) complete .* in thread 32 "):
        _target(early=_ARRIVE_Y, late="")


# endregion
# region PTX: the same chain with a bulk copy

_PTX = PTX_HEADER + """.visible .entry chain(.param .u64 data, .param .u64 out, .param .u64 flag)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<5>;
    .reg .pred %p<4>;
    .shared .align 128 .b8 box[128];
    .shared .align 8 .b64 x;
    .shared .align 8 .b64 y;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, box;
    mov.u32 %r2, x;
    mov.u32 %r3, y;
    ld.param.u64 %rd0, [data];
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [flag];
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 1;
    @%p0 mbarrier.init.shared::cta.b64 [%r3], Y_COUNT;
    bar.sync 0;
    setp.eq.u32 %p3, %r0, 1;
    SECOND
    @!%p0 bra READER;
    mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], 128;
    cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd0], 128, [%r2];
    EARLY
WAITX:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r2], 0;
    @!%p1 bra WAITX;
    LATE
    bra DONE;
READER:
    setp.lt.u32 %p2, %r0, 32;
    @%p2 bra DONE;
SPIN
WAITY:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r3], 0;
    @!%p3 bra WAITY;
    sub.u32 %r4, %r0, 32;
    shl.b32 %r4, %r4, 2;
    add.u32 %r5, %r1, %r4;
    ld.shared.u32 %r6, [%r5];
    cvt.u64.u32 %rd4, %r4;
    add.u64 %rd3, %rd1, %rd4;
    st.global.u32 [%rd3], %r6;
DONE:
    ret;
}
"""
_ARRIVE = "mbarrier.arrive.shared::cta.b64 _, [%r3];"
_NOT_OBSERVED = (r"^<ptx>:\d+: error: ld.shared.u32: reads shared address 0x0 before .*: this thread has not "
                 r"observed phase 0 \(parity 0\) of the mbarrier at shared address 0x80 complete .*\(thread \(32, 0, 0\)")


def _ptx(early: str = "", late: str = _ARRIVE, count: int = 1, second: str = "", spin: str = "", **kw) -> np.ndarray:
    text = filled(_PTX, Y_COUNT=str(count), SECOND=second, SPIN=spin)
    text = filled(text, EARLY=early, LATE=late)
    args = [_SOURCE.view(np.uint32).copy(), np.zeros(32, np.uint32), np.zeros(1, np.uint32)]
    return launch(text, "chain", 1, 64, args, **kw)[1]


@pytest.mark.parametrize("schedule", [{}, {"schedule": "adversarial", "seed": 3}])
def test_ptx_a_phase_observed_before_an_arrive_reaches_the_waiters_of_that_arrive(schedule):
    np.testing.assert_array_equal(_ptx(**schedule), _SOURCE)


def test_ptx_an_arrive_before_the_wait_carries_no_observation():
    with pytest.raises(PtxHazardError, match=_NOT_OBSERVED):
        _ptx(early=_ARRIVE, late="")


def test_ptx_an_arrive_into_a_later_phase_reaches_only_that_phases_waiters():
    """y counts two: phase 0 is thread 0's arrival before its wait on x and thread 1's; thread 0's arrival after
    the wait goes into phase 1. Warp 1 spins on a volatile flag thread 0 sets after that arrival (relaxed: no
    order), so it waits phase 0 of y after the arrival into phase 1: it has not observed x's phase."""
    flag = "    st.volatile.global.u32 [%rd2], 1;"
    spin = ("SPIN:\n    ld.volatile.global.u32 %r7, [%rd2];\n    setp.eq.u32 %p2, %r7, 0;\n"
            "    @%p2 bra SPIN;")
    with pytest.raises(PtxHazardError, match=_NOT_OBSERVED):
        _ptx(early=_ARRIVE, late=_ARRIVE + "\n" + flag, count=2, second="@%p3 " + _ARRIVE, spin=spin)


_NAMED = PTX_HEADER + """.visible .entry named(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .reg .pred %p<4>;
    .shared .align 8 .b64 bar;
    .shared .align 128 .b8 buf[128];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, bar;
    mov.u32 %r2, buf;
    ld.param.u64 %rd0, [src];
    cvta.to.global.u64 %rd0, %rd0;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r1], 1;
    bar.sync 0;
    setp.lt.u32 %p1, %r0, 32;
    @!%p1 bra READER;
    @%p0 mbarrier.arrive.expect_tx.shared::cta.b64 %rd1, [%r1], 128;
    @%p0 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r2], [%rd0], 128, [%r1];
    ORDER
    bra DONE;
READER:
    bar.sync 1, 64;
    shl.b32 %r4, %r0, 2;
    add.u32 %r5, %r2, %r4;
    ld.shared.u32 %r7, [%r5 + -128];
    ld.param.u64 %rd2, [out];
    mul.wide.u32 %rd3, %r0, 4;
    add.u64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4 + -128], %r7;
DONE:
    ret;
}
"""
"""Warp 0 copies a row into buf on `bar` (thread 0), waits for it (WAIT) and arrives on named barrier 1 (ORDER);
warp 1 meets it there and reads the row without waiting on `bar` itself."""
_NAMED_WAIT = """{
    .reg .pred c;
    wl:
    mbarrier.try_wait.parity.shared::cta.b64 c, [%r1], 0;
    @!c bra.uni wl;
    }"""


@pytest.mark.parametrize("schedule", [{}, {"schedule": "delayed-warp", "seed": 1},
                                      {"schedule": "adversarial", "seed": 1}])
@pytest.mark.parametrize("wait_first", [True, False], ids=["wait-then-arrive", "arrive-then-wait"])
def test_ptx_a_bar_arrive_carries_what_its_thread_observed_before_it_only(wait_first, schedule):
    """A named barrier shared the phases its participants had observed when it completed, so a warp that arrived
    (bar.arrive) and only then waited on the copy's phase let the reader read the row unreported on min-pc and with
    the reader late; now what an arrival carries is what its thread had observed at the arrive."""
    order = _NAMED_WAIT + "\n    bar.arrive 1, 64;" if wait_first else "bar.arrive 1, 64;\n    " + _NAMED_WAIT
    text = _NAMED.replace("ORDER", order)
    args = [_SOURCE.view(np.uint32).copy(), np.zeros(32, np.uint32)]
    if wait_first:
        np.testing.assert_array_equal(launch(text, "named", 1, 64, args, **schedule)[1], _SOURCE.view(np.uint32))
        return
    with pytest.raises(PtxHazardError, match=r"ld.shared.u32: reads shared address 0x80 before (the TMA copy into )?it "
                                             r"was signalled"):
        launch(text, "named", 1, 64, args, **schedule)


# endregion


# region Target IR, clusters of two: what a thread knows of the peers' releases travels along chains too. CTA 0's
# thread 0 multicasts a row into both CTAs; each CTA's thread 32 reads it and releases it on CTA 0's `empty`
# barrier (remote arrives); CTA 0's thread 1 waits on `empty` and arrives on `link`; thread 0 waits on `link` only,
# then multicasts the next row. (The PTX executor's clocks carry the same: tests/test_ptx_cluster.py.)

_CLUSTER = filled("""\
builtin.module {
  func.func @chain(%src: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<2, 32>, tile.role = "in",
                              sm90.element_type = i32},
                   %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<2, 32>, tile.role = "out",
                              sm90.element_type = i32},
                   %map: !sm90.tensormap {sm90.source = 0 : i64, sm90.box = [32 : i64, 1 : i64],
                                          sm90.swizzle = 0 : i64, tile.dims = #tile.dims<2, 32>})
      attributes {sm90.kernel = {threads = 64 : i64, smem_bytes = 256 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<2>, tile.cluster = array<i64: 2, 1, 1>} {
    %tid = sm90.special "tid.x" : index
    %cta = sm90.special "ctaid.x" : index
    %rank = sm90.special "cluster_ctarank" : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c32 = arith.constant 32 : index
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %true1 = arith.constant true
    %true = arith.constant dense<true> : vector<1xi1>
    %box = sm90.shared_buffer "box" offset 0 size 128 align 128 swizzle 0 : i32
    %full = sm90.shared_buffer "full" offset 128 size 8 align 8 swizzle 0 : i32
    %empty = sm90.shared_buffer "empty" offset 136 size 8 align 8 swizzle 0 : i32
    %link = sm90.shared_buffer "link" offset 144 size 8 align 8 swizzle 0 : i32
    %lead = arith.cmpi eq, %tid, %c0 : index
    %second = arith.cmpi eq, %tid, %c1 : index
    %reader = arith.cmpi eq, %tid, %c32 : index
    %first_cta = arith.cmpi eq, %rank, %c0 : index
    scf.if %lead {
      sm90.mbarrier_init %full, 1
      sm90.mbarrier_init %empty, 2
      sm90.mbarrier_init %link, 1
      sm90.fence_mbarrier_init
    }
    sm90.cluster_arrive
    sm90.cluster_wait
    %warp0 = arith.cmpi ult, %tid, %c32 : index
    scf.if %warp0 {
      scf.if %lead {
        sm90.mbarrier_arrive_expect_tx %full, 128
        scf.if %first_cta {
          sm90.tma_load_multicast %map[%c0_i32, %c0_i32], %box, %full mask 3 : i32, i32
        }
      }
      %lead0 = arith.andi %lead, %first_cta : i1
      %second0 = arith.andi %second, %first_cta : i1
      scf.if %second0 {
        EARLY
        WAIT_EMPTY
        LATE
      }
      scf.if %lead0 {
        WAIT_LINK
      }
      scf.if %lead {
        WAIT_FULL0
        sm90.mbarrier_arrive_expect_tx %full, 128
        scf.if %first_cta {
          sm90.tma_load_multicast %map[%c0_i32, %c1_i32], %box, %full mask 3 : i32, i32
        }
      }
    } else {
      scf.if %reader {
        WAIT_FULL0R
        %w0 = sm90.ld_shared %box : i32 -> i32
        %home = sm90.mapa %empty, %c0 : index
        sm90.mbarrier_arrive_cluster %home
        WAIT_FULL1
        %w1 = sm90.ld_shared %box : i32 -> i32
        %sum = arith.addi %w0, %w1 : i32
        %row = arith.muli %cta, %c32 : index
        %rowb = arith.muli %row, %c4 : index
        %o64 = arith.index_cast %rowb : index to i64
        %o = vector.broadcast %o64 : i64 to vector<1xi64>
        %sv = vector.broadcast %sum : i32 to vector<1xi32>
        sm90.st_global %out[%o], %sv, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
      }
    }
    sm90.cluster_arrive
    sm90.cluster_wait
    func.return
  }
}
""", WAIT_EMPTY=_WAIT.format(tag="e", bar="empty", parity="c0_i32"),
    WAIT_LINK=_WAIT.format(tag="l", bar="link", parity="c0_i32"),
    WAIT_FULL0R=_WAIT.format(tag="r", bar="full", parity="c0_i32"),
    WAIT_FULL0=_WAIT.format(tag="f", bar="full", parity="c0_i32"),
    WAIT_FULL1=_WAIT.format(tag="g", bar="full", parity="c1_i32"))
_ARRIVE_LINK = "sm90.mbarrier_arrive %link"


def _cluster(early: str = "", late: str = _ARRIVE_LINK) -> np.ndarray:
    text = filled(_CLUSTER, EARLY=early, LATE=late)
    kernel = next(op for op in parse_module(text).walk() if is_target_kernel(op))
    out = np.zeros((2, 32), np.int32)
    run_target_kernel(kernel, [np.arange(64, dtype=np.int32).reshape(2, 32), out], {})
    return out


def test_target_a_producer_learns_a_peers_release_through_a_chain():
    """(The CTA simulator learnt a peer's release only through the producer's own wait: it reported the refill.)"""
    np.testing.assert_array_equal(_cluster()[:, 0], [32, 32])  # row 0's word 0 plus row 1's, in both CTAs


def test_target_an_arrive_before_the_empty_wait_carries_no_release():
    with pytest.raises(KernelHazardError, match=r"^sm90.tma_load_multicast %map\[%c0_i32, %c1_i32\].*: the TMA copy "
                                                r"writes shared address 0x0 \(buffer 'box' \+ 0\), which `%w0 = "
                                                r"sm90.ld_shared %box .*` \(thread 32 .*\) read, and no "
                                                r"synchronisation orders the two"):
        _cluster(early=_ARRIVE_LINK, late="")


def test_target_one_warps_remote_arrivals_past_the_phase_are_refused_at_the_arrive():
    """Warp 1 of each CTA arrives on CTA 0's `empty` (a count of 2) in one op: the warp's second arrival completes
    the phase and its third would count towards the next one in the same instruction, refused by the name the
    CTA's own arrives and the PTX executor give it (the cluster path counted it into the next phase silently)."""
    text = str(checked(filled(_CLUSTER, EARLY="", LATE=_ARRIVE_LINK)).replace(
        "    } else {\n      scf.if %reader {",
        "    } else {\n      %all = sm90.mapa %empty, %c0 : index\n      sm90.mbarrier_arrive_cluster %all\n"
        "      scf.if %reader {"))
    kernel = next(op for op in parse_module(text).walk() if is_target_kernel(op))
    with pytest.raises(KernelHazardError, match=r"^sm90.mbarrier_arrive_cluster %all: arrives on the mbarrier at "
                                                r"shared address 0x88 \(buffer 'empty' \+ 0\) of CTA rank 0 after the "
                                                r"earlier arrivals of its warp in this op completed its phase 0: more "
                                                r"threads arrive than the 2 the barrier expects .*thread 34 "):
        run_target_kernel(kernel, [np.arange(64, dtype=np.int32).reshape(2, 32), np.zeros((2, 32), np.int32)], {})


# endregion
