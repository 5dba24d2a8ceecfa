"""Bugs seeded into the PTX text Tessera prints are reported by the PTX executor, naming the instruction, its
line and the thread: the PTX twins of tests/test_target_hazards.py (single-stage flash attention) and of the
seeded pipeline bugs of tests/test_warp_specialize.py (the warp-specialized kernel), plus a missing
fence.proxy.async (the any-shape GEMM), an expect_tx that disagrees with the bytes delivered, a cp.async read
before its wait and bulk stores. Each mutation edits the text of `tessera.compile`'s PTX; the unseeded
kernels run clean and match NumPy."""

from __future__ import annotations

import re
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import find_kernel, reference
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx import PtxDeadlockError, PtxHazardError, launch
from tessera.interpreters.ptx.launcher import launch_described
from tessera.passes import PTX_PIPELINE
from tessera.reference_attention import attention_operands

from conftest import build_kernel
from race_templates import PTX_HEADER, STORE_TID_TO_TILE
from text_edits import checked, filled

THREAD = r"\(thread \(\d+, 0, 0\) of CTA \(0, 0, 0\)\)"


@lru_cache(maxsize=None)
def _compiled(kind: str, specialized: bool, **kw):
    """(signature, host description, PTX text) of a builder kernel through the single-stage pipeline or the
    default (warp-specialized) one."""
    module = build_kernel(kind, **kw)
    pipeline = None if specialized else PTX_PIPELINE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize has nothing to do on the any-shape GEMM
        lowered = tessera.compile(module, target="target", pipeline=pipeline)
        text = tessera.compile(module, target="ptx", pipeline=pipeline)
    return find_kernel(module), describe(lowered)[0], text


def _attention(specialized: bool):
    return _compiled("flash_attention", specialized, head_dim=64, causal=False, dtype="bf16")


def _run(compiled, text: str, inputs):
    sig, host, _ = compiled
    arrays, sizes = prepare_arguments(sig, inputs)
    launch_described(text, host, arrays, sizes, source="seeded.ptx")
    return arrays


def _seeded(compiled, edit) -> str:
    lines = compiled[2].splitlines()
    edit(lines)
    return "\n".join(lines) + "\n"


def _index(lines, predicate, start=0, stop=None) -> int:
    return next(i for i in range(start, len(lines) if stop is None else stop) if predicate(lines[i]))


# region single-stage flash attention: the twins of tests/test_target_hazards.py


def test_the_unseeded_kernel_runs_clean(rng):
    arrays = _run(_attention(False), _attention(False)[2], attention_operands(rng, 64, 70, 64))
    check = reference.check_attention(arrays[3], *arrays[:3], arrays[0].dtype, causal=False)
    assert check.ok, check


def _kv_wait(lines) -> int:
    """The try_wait on the K/V group's barrier inside the loop (after its Target IR comment)."""
    return _index(lines, lambda s: "mbarrier_try_wait_parity %group1_bar" in s) + 1


def test_missing_wait_on_the_kv_barrier_is_reported(rng):
    text = _seeded(_attention(False), lambda lines: lines.pop(_kv_wait(lines)))
    with pytest.raises(PtxHazardError, match=r"^seeded.ptx:\d+: error: wgmma.mma_async\S*: wgmma operand B reads "
                                             r"shared address 0x[0-9a-f]+ before it was signalled: the TMA load at "
                                             r"line \d+ .* has not completed on the mbarrier at shared address "
                                             rf"0x[0-9a-f]+ .*{THREAD}$"):
        _run(_attention(False), text, attention_operands(rng, 64, 70, 64))


def test_wgmma_result_used_before_wait_group_is_reported(rng):
    text = _seeded(_attention(False), lambda lines: lines.pop(_index(lines, lambda s: "wgmma.wait_group" in s)))
    with pytest.raises(PtxHazardError, match=r"^seeded.ptx:\d+: error: \S+: touches %\w+, an accumulator register of "
                                             r"the wgmma.mma_async at line \d+, before a wgmma.wait_group covers its "
                                             rf"group \(group 0 of warpgroup 0 is still pending\) {THREAD}$"):
        _run(_attention(False), text, attention_operands(rng, 64, 70, 64))


def test_wrong_parity_is_reported(rng):
    """The K/V wait tests the flipped parity: on the first trip (phase 0) parity 1 passes at once, before the
    copy landed, and the S wgmma reads the K tile in flight."""

    def flip(lines):
        i = _kv_wait(lines)
        parity = re.search(r"\], (%r\d+);", lines[i]).group(1)
        lines[i] = lines[i].replace(f"], {parity};", "], %flipped;")
        lines.insert(i, f"    xor.b32 %flipped, {parity}, 1;")
        lines.insert(_index(lines, lambda s: s.strip().startswith(".reg")), "    .reg .b32 %flipped;")

    with pytest.raises(PtxHazardError, match=r"wgmma operand B reads shared address 0x[0-9a-f]+ before it was "
                                             r"signalled: .*no completed mbarrier wait covers it: a missing wait, or "
                                             "one on the wrong parity"):
        _run(_attention(False), _seeded(_attention(False), flip), attention_operands(rng, 64, 70, 64))


def _kv_expect(lines) -> int:
    return _index(lines, lambda s: "mbarrier.arrive.expect_tx" in s and s.endswith(", 32768;"))


def test_missing_expect_tx_deadlocks(rng):
    text = _seeded(_attention(False), lambda lines: lines.pop(_kv_expect(lines)))
    with pytest.raises(PtxDeadlockError, match=r"^seeded.ptx: error: deadlock: no thread can make progress\n  256 "
                                               r"thread\(s\), first thread \(0, 0, 0\) of CTA \(0, 0, 0\): wait on the "
                                               r"mbarrier at shared address 0x[0-9a-f]+ \(in phase 0, parity 0, with 1 "
                                               r"of 1 arrivals pending and tx-count 0, 32768 bytes of copies in flight "
                                               r"on it: arrivals are missing; .*\) at line \d+ \(mbarrier.try_wait"):
        _run(_attention(False), text, attention_operands(rng, 64, 70, 64))


def test_expect_tx_smaller_than_the_copies_is_reported(rng):
    def halve(lines):
        i = _kv_expect(lines)
        lines[i] = lines[i].replace("32768;", "16384;")

    with pytest.raises(PtxHazardError, match=r"^seeded.ptx:\d+: error: cp.async.bulk.tensor\S*: the mbarrier at shared "
                                             r"address 0x[0-9a-f]+ completed phase 0 with 1 copies \(16384 bytes\) "
                                             r"still in flight on it: its expect_tx \(the arrive at line \d+, thread "
                                             r"\(0, 0, 0\) of CTA \(0, 0, 0\)\) announced fewer bytes than the "
                                             rf"copies deliver {THREAD}$"):
        _run(_attention(False), _seeded(_attention(False), halve), attention_operands(rng, 64, 70, 64))


def test_expect_tx_larger_than_the_copies_deadlocks(rng):
    def grow(lines):
        i = _kv_expect(lines)
        lines[i] = lines[i].replace("32768;", "49152;")

    with pytest.raises(PtxDeadlockError, match=r"with 0 of 1 arrivals pending and tx-count 16384: its expect_tx "
                                               r"announced 16384 bytes more than the copies delivered"):
        _run(_attention(False), _seeded(_attention(False), grow), attention_operands(rng, 64, 70, 64))


def test_p_fragment_register_reused_while_pv_runs_is_reported(rng):
    """A value written into a register of the P fragment between the P.V commit and its wait: the tensor core
    may still read it."""

    def clobber(lines):
        pv = max(i for i, s in enumerate(lines) if "wgmma.mma_async" in s and "}, {%r" in s)
        register = re.search(r"\}, \{(%r\d+),", lines[pv]).group(1)
        commit = _index(lines, lambda s: "wgmma.commit_group" in s, pv)
        lines.insert(commit + 1, f"    add.s32 {register}, {register}, 1;")

    with pytest.raises(PtxHazardError, match=r"^seeded.ptx:\d+: error: add.s32: touches %r\d+, an A-fragment register "
                                             r"of the wgmma.mma_async at line \d+, before a wgmma.wait_group covers "
                                             rf"its group \(group 1 of warpgroup 0 is still pending\) {THREAD}$"):
        _run(_attention(False), _seeded(_attention(False), clobber), attention_operands(rng, 64, 70, 64))


# endregion
# region warp-specialized flash attention: the twins of the seeded pipeline bugs of tests/test_warp_specialize.py


def _consumer_loop(lines) -> tuple[int, int]:
    """The consumer's steady-state loop: from the first label after the consumers' setmaxnreg.inc whose
    loop carries two mbarrier releases, to its back branch."""
    start = _index(lines, lambda s: "setmaxnreg.inc" in s)
    for i in range(start, len(lines)):
        label = re.match(r"(\$L__for\d+):", lines[i])
        if label:
            end = _index(lines, lambda s, name=label.group(1): f"bra {name};" in s, i)
            releases = [j for j in range(i, end) if lines[j].strip().startswith("mbarrier.arrive.shared")]
            if len(releases) == 2:
                return i, end
    raise AssertionError("no consumer loop with two releases")


def _releases(lines) -> list[int]:
    start, end = _consumer_loop(lines)
    return [j for j in range(start, end) if lines[j].strip().startswith("mbarrier.arrive.shared")]


def test_the_unseeded_pipeline_runs_clean(rng):
    arrays = _run(_attention(True), _attention(True)[2], attention_operands(rng, 64, 700, 64))
    check = reference.check_attention(arrays[3], *arrays[:3], arrays[0].dtype, causal=False)
    assert check.ok, check


def test_slot_released_before_it_is_read_is_reported(rng):
    """The consumers release the K and V slots right after their full barriers, before the wgmmas read them: the
    producer refills a slot while a wgmma of the consumers may still read it, or (the first trip's K, which no
    V release of a trip before orders) before the wgmma has read it at all: the wgmma reads a copy whose
    signal it has not waited for. Either report names the early release."""

    def release_early(lines):
        start, end = _consumer_loop(lines)
        waits = [j for j in range(start, end) if re.match(r"\s*@!%p\d+ bra \$L__while", lines[j])]
        k_release, v_release = (lines[j] for j in _releases(lines))
        for j in reversed(_releases(lines)):
            del lines[j]
        lines.insert(waits[1] + 1, v_release)
        lines.insert(waits[0] + 1, k_release)

    with pytest.raises(PtxHazardError, match=r"^seeded.ptx:\d+: error: (cp.async.bulk.tensor\S*: the TMA load "
                                             r"overwrites|wgmma.mma_async\S*: wgmma operand B reads) shared address "
                                             r"0x[0-9a-f]+ .* released it with the arrive on the mbarrier at shared "
                                             r"address 0x[0-9a-f]+ at line \d+,? before (a wgmma.wait_group covered "
                                             r"that wgmma|this read) \(a release before the consumer's last read\) "
                                             r"\(thread \(\d+, 0, 0\) of CTA \(0, 0, 0\)\)$"):
        _run(_attention(True), _seeded(_attention(True), release_early), attention_operands(rng, 64, 700, 64))


def test_slot_overwritten_while_a_wgmma_reads_it_is_reported(rng):
    """The V slot is released between the P.V commit and the wait_group that covers it: the producer's TMA
    refills the slot while the tensor core may still read it."""

    def release_before_wait(lines):
        v_release = _releases(lines)[-1]
        wait = max(j for j in range(v_release) if "wgmma.wait_group" in lines[j])
        lines.insert(wait, lines.pop(v_release))

    with pytest.raises(PtxHazardError, match=r"the TMA load overwrites shared address 0x[0-9a-f]+ while the wgmma at "
                                             r"line \d+ of warpgroup \d may still read it"):
        _run(_attention(True), _seeded(_attention(True), release_before_wait), attention_operands(rng, 64, 700, 64))


def _producer(lines) -> int:
    """The end of the producer branch (the consumers' setmaxnreg.inc)."""
    return _index(lines, lambda s: "setmaxnreg.inc" in s)


def test_parity_not_flipped_deadlocks(rng):
    """The producer waits on the empty barriers with the full barriers' parity: on its first trip it waits for
    a release that only comes after the consumers read data it has not loaded; a deadlock report, not a hang."""

    def no_flip(lines):
        for j in range(_producer(lines)):
            flip = re.match(r"\s*xor.b32 (%r\d+), (%r\d+), 1;", lines[j])
            if flip:
                lines[j] = f"    mov.b32 {flip.group(1)}, {flip.group(2)};"

    with pytest.raises(PtxDeadlockError, match=r"deadlock: no thread can make progress\n  1 thread\(s\), first thread "
                                               r"\(256, 0, 0\) .*: wait on the mbarrier at shared address 0x[0-9a-f]+ "
                                               r"\(in phase 0, parity 0, with 256 of 256 arrivals pending"):
        _run(_attention(True), _seeded(_attention(True), no_flip), attention_operands(rng, 64, 700, 64))


def test_missing_expect_tx_in_the_producer_deadlocks(rng):
    def no_expect(lines):
        for j in reversed(range(_producer(lines))):
            if "mbarrier.arrive.expect_tx" in lines[j]:
                del lines[j]

    with pytest.raises(PtxDeadlockError, match=r"with 1 of 1 arrivals pending and tx-count 0, 16384 bytes of copies "
                                               r"in flight on it: arrivals are missing"):
        _run(_attention(True), _seeded(_attention(True), no_expect), attention_operands(rng, 64, 700, 64))


# endregion
# region generic stores read by the async proxy, cp.async, bulk stores


def _gemm():
    return _compiled("gemm", False, dtype="bf16", aligned=False)


def test_the_any_shape_gemm_runs_clean(rng):
    a, b = rng.standard_normal((70, 40)), rng.standard_normal((40, 24))
    arrays = _run(_gemm(), _gemm()[2], [a, b])
    check = reference.check_gemm(arrays[2], arrays[0], arrays[1], arrays[0].dtype)
    assert check.ok, check


def test_missing_proxy_fence_is_reported(rng):
    """The any-shape GEMM stores A and B with st.shared and fences them for the async proxy before its wgmmas:
    without the fence, a wgmma reads generic stores the async proxy may not see."""

    def no_fence(lines):
        for j in reversed(range(len(lines))):
            if lines[j].strip().startswith("fence.proxy.async"):
                del lines[j]

    a, b = rng.standard_normal((70, 40)), rng.standard_normal((40, 24))
    with pytest.raises(PtxHazardError, match=r"^seeded.ptx:\d+: error: wgmma.mma_async\S*: wgmma operand [AB] reads "
                                             r"shared address 0x[0-9a-f]+, which thread \(\d+, 0, 0\) of CTA \(0, 0, "
                                             r"0\) stored through the generic proxy and has not made visible to the "
                                             r"async proxy \(missing fence.proxy.async after the store"):
        _run(_gemm(), _seeded(_gemm(), no_fence), [a, b])


def test_cp_async_read_before_its_wait_is_reported():
    """tests/ptx_kernels/cp_async_pipeline.ptx without its cp.async.wait_group: the tile is read in flight."""
    text = (Path(__file__).parent / "ptx_kernels" / "cp_async_pipeline.ptx").read_text()
    seeded = re.sub(r"\n\s*cp\.async\.wait_group 1;", "\n", text)
    x = np.ones((2, 260), np.float32)
    args = [x, np.zeros_like(x), np.zeros(2, np.float32), 257, 260, np.float32(0.5)]
    launch(text, "row_scale_sum", (2, 1, 1), (64, 1, 1), args)
    with pytest.raises(PtxHazardError, match=r"ld.shared.f32: reads shared address 0x[0-9a-f]+ of CTA \(0, 0, 0\) "
                                             r"before it was signalled: the cp.async at line \d+ into it has not "
                                             r"landed"):
        launch(seeded, "row_scale_sum", (2, 1, 1), (64, 1, 1), args)


_BULK_STORE = checked(PTX_HEADER + """.visible .entry bulk_store(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .shared .align 128 .b8 tile[256];
""" + STORE_TID_TO_TILE + """    FENCE
    bar.sync 0;
    setp.eq.u32 %p0, %r0, 0;
    ld.param.u64 %rd0, [out];
    @%p0 cp.async.bulk.global.shared::cta.bulk_group [%rd0], [%r1], 256;
    @%p0 cp.async.bulk.commit_group;
    WAIT
    st.shared.u32 [%r2], 7;
    ret;
}
""").replace(".reg .b64 %rd<3>;", ".reg .b64 %rd<3>;\n    .reg .pred %p0;")


def test_bulk_stores_need_the_proxy_fence_and_their_read_wait():
    """A bulk store reads shared memory through the async proxy: the stores before it need fence.proxy.async,
    and shared memory it reads may be overwritten only after cp.async.bulk.wait_group.read covers it."""
    fence, wait = "fence.proxy.async.shared::cta;", "@%p0 cp.async.bulk.wait_group.read 0;\n    bar.sync 0;"
    out = launch(filled(_BULK_STORE, FENCE=fence, WAIT=wait), "bulk_store", 1, 64,
                 [np.zeros(64, np.uint32)])[0]
    np.testing.assert_array_equal(out, np.arange(64))
    with pytest.raises(PtxHazardError, match=r":19: error: cp.async.bulk.global.shared::cta.bulk_group: the bulk store "
                                             r"reads shared address 0x0, which thread \(0, 0, 0\) .* \(missing "
                                             r"fence.proxy.async after the store"):
        launch(filled(_BULK_STORE, FENCE="", WAIT=wait), "bulk_store", 1, 64, [np.zeros(64, np.uint32)])
    with pytest.raises(PtxHazardError, match=r"st.shared.u32: the store overwrites shared address 0x[0-9a-f]+ while "
                                             r"the bulk store at line 19 .* may still read it"):
        launch(filled(_BULK_STORE, FENCE=fence, WAIT="bar.sync 0;"), "bulk_store", 1, 64,
               [np.zeros(64, np.uint32)])


# endregion


# region what a CTA leaves behind


_BULK_LOAD = PTX_HEADER + """.visible .entry bulk_load(.param .u64 src, .param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    .reg .pred %p<2>;
    .shared .align 128 .b8 tile[256];
    .shared .align 8 .b64 bar;
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, tile;
    mov.u32 %r2, bar;
    setp.eq.u32 %p0, %r0, 0;
    @%p0 mbarrier.init.shared::cta.b64 [%r2], 1;
    bar.sync 0;
    ld.param.u64 %rd0, [src];
    @%p0 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], 256;
    @%p0 cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd0], 256, [%r2];
WAIT
    ret;
}
"""


def test_a_cta_that_ends_with_a_copy_in_flight_is_reported():
    wait = """LOOP:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r2], 0;
    @!%p1 bra LOOP;"""
    src = np.arange(64, dtype=np.uint32)
    launch(filled(_BULK_LOAD, WAIT=wait), "bulk_load", 1, 32, [src, np.zeros(4, np.uint32)])
    with pytest.raises(PtxHazardError, match=r":19: error: cp.async.bulk.shared::cluster\S*: the CTA ends with this "
                                             r"bulk copy in flight \(no thread waited on its mbarrier at shared address "
                                             r"0x100 once its arrivals were in\) \(thread \(0, 0, 0\)"):
        launch(filled(_BULK_LOAD, WAIT=""), "bulk_load", 1, 32, [src, np.zeros(4, np.uint32)])


def test_generic_reads_of_copied_bytes_need_an_observed_phase():
    """ld.shared of the bytes a bulk copy writes: before any wait (in flight), after a wait on the wrong parity
    (passes at once, still in flight), and by a thread that neither waited nor synchronised with one that did."""
    src = np.arange(64, dtype=np.uint32)
    read = "\n    ld.shared.u32 %r3, [%r1];"
    loop = """LOOP:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r2], {parity};
    @!%p1 bra LOOP;"""
    mine = loop.format(parity=0) + read
    launch(filled(_BULK_LOAD, WAIT=mine), "bulk_load", 1, 32, [src, np.zeros(4, np.uint32)])
    in_flight = r"reads shared address 0x0 before it was signalled: the bulk copy at line 19 .* has not completed"
    with pytest.raises(PtxHazardError, match=r":21: error: ld.shared.u32: " + in_flight):
        launch(filled(_BULK_LOAD, WAIT=read), "bulk_load", 1, 32, [src, np.zeros(4, np.uint32)])
    with pytest.raises(PtxHazardError, match=in_flight + r".*a missing wait, or one on the wrong parity"):
        launch(filled(_BULK_LOAD, WAIT=loop.format(parity=1) + read), "bulk_load", 1, 32,
               [src, np.zeros(4, np.uint32)])
    only_thread_0 = "@!%p0 bra SKIP;\n" + loop.format(parity=0) + "\nSKIP:" + read
    with pytest.raises(PtxHazardError, match=r"ld.shared.u32: reads shared address 0x0 before the TMA copy into it was "
                                             r"signalled: this thread has not observed phase 0 \(parity 0\) of the "
                                             r"mbarrier at shared address 0x100 complete .* \(thread \(1, 0, 0\)"):
        launch(filled(_BULK_LOAD, WAIT=only_thread_0), "bulk_load", 1, 32, [src, np.zeros(4, np.uint32)])
    synchronised = checked(only_thread_0).replace("SKIP:", "SKIP:\n    bar.sync 0;")
    launch(filled(_BULK_LOAD, WAIT=synchronised), "bulk_load", 1, 32, [src, np.zeros(4, np.uint32)])


def test_a_cta_that_ends_with_a_wgmma_pending_is_reported():
    """tests/ptx_samples/wgmma_early_read.ptx without its wait_group and the uses of the accumulator."""
    text = (Path(__file__).parent / "ptx_samples" / "wgmma_early_read.ptx").read_text()
    seeded = "\n".join(line for line in text.splitlines()
                       if not any(s in line for s in ("add.f32 %f0", "wgmma.wait_group", "st.global.f32")))
    with pytest.raises(PtxHazardError, match=r":\d+: error: wgmma.mma_async\S*: the CTA ends with this wgmma of "
                                             r"warpgroup 0 pending: no wgmma.commit_group and wgmma.wait_group cover it"):
        launch(seeded, "wgmma_early_read", 1, 128, [np.zeros(128, np.float32)], shared_bytes=16384)


def test_the_sample_that_reads_an_accumulator_early_is_reported():
    """ptxas accepts tests/ptx_samples/wgmma_early_read.ptx with an advisory (C7517) and serialises the wgmma;
    the executor names the read."""
    text = (Path(__file__).parent / "ptx_samples" / "wgmma_early_read.ptx").read_text()
    with pytest.raises(PtxHazardError, match=r":24: error: add.f32: touches %f0, an accumulator register of the "
                                             r"wgmma.mma_async at line 22, before a wgmma.wait_group covers its group"):
        launch(text, "wgmma_early_read", 1, 128, [np.zeros(128, np.float32)], shared_bytes=16384)


# endregion


# region a generic store into a tile TMA landed (the executor keeps landed boxes as ranges)
_TMA_GEMM = Path(__file__).parent / "ptx_kernels" / "tma_wgmma_gemm.ptx"


def _gemm_storing_into_b(after_store: str) -> str:
    """gemm_tn of tests/ptx_kernels/tma_wgmma_gemm.ptx with thread 0 storing a word into the B tile the TMA
    load just landed, then `after_store`, before the wgmmas read it."""
    text = _TMA_GEMM.read_text()
    text = text[:text.index(".visible .entry gemm_nn(")]
    anchor = "\tsetp.ne.s32 \t%p2, %r16, 0;"
    return checked(text).replace(anchor, f"\t@%p1 st.shared.u32 [%r12+4100], %r4;\n{after_store}{anchor}", 1)


@pytest.mark.parametrize("after_store, bad", [("", True), ("\t@%p1 fence.proxy.async.shared::cta;\n", True),
                                              ("\t@%p1 fence.proxy.async.shared::cta;\n\tbar.sync 0;\n", False)])
def test_a_generic_store_into_a_landed_tma_tile_needs_a_proxy_fence(after_store, bad):
    """A box the TMA load landed whole is judged as one range by the wgmmas that read it; a generic store into
    it ends that: without fence.proxy.async, or with the fence only in the storing thread and no barrier to
    carry it to the other warps, the wgmma reads a generic store the async proxy may not see; fenced and
    followed by a bar.sync, the kernel is correct and computes A Bt with the stored word."""
    import ml_dtypes

    from tessera.interpreters.ptx import TensorMapArg

    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    bt = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    maps = [TensorMapArg.tiled(a, (64, 64), 128), TensorMapArg.tiled(bt, (64, 64), 128)]
    args = [*maps, np.zeros((64, 64), np.float32), 64, 64, 64]
    text = _gemm_storing_into_b(after_store)
    if bad:
        with pytest.raises(PtxHazardError, match=r"wgmma operand B reads shared address 0x[0-9a-f]+, which thread "
                                                 r"\(0, 0, 0\) of CTA \(0, 0, 0\) stored through the generic proxy "
                                                 r"and has not made visible to the async proxy \(missing "
                                                 r"fence.proxy.async after the store at line \d+"):
            launch(text, "gemm_tn", (1, 1, 1), (128, 1, 1), args, shared_bytes=16384 + 1024)
        return
    out = launch(text, "gemm_tn", (1, 1, 1), (128, 1, 1), args, shared_bytes=16384 + 1024)
    c = [x for x in out if isinstance(x, np.ndarray) and x.dtype == np.float32][-1]
    stored = bt.copy().view(np.uint16).reshape(-1)
    # byte 4100 of the 128B-swizzled B tile: row 32 (4096 / 128), 16-byte chunk 0 ^ (32 % 8) = 0, word 1
    stored[32 * 64 + 2:32 * 64 + 4] = [0, 0]  # thread 0 stores %r4 = 0
    a64, b64 = a.astype(np.float64), stored.view(ml_dtypes.bfloat16).reshape(64, 64).astype(np.float64)
    assert np.abs(c - a64 @ b64.T).max() <= 2.0**-14 * (np.abs(a64) @ np.abs(b64).T).max()


# endregion
