"""Both race detectors on kernels they were not written for (issue 31): one-edit bugs seeded into the attention
backward's main kernel (tests/backward_seeds.py: at head_dim 128 the warp-specialized kernel with dQ by
`red.global.add`, with dQ bulk-reduced by the producer as the default `atomic-add=auto` chooses, the single-stage
kernel, all 64 x 64, and the default keys-on-rows kernel, 64 x 128 with two consumer warpgroups, its dQ^T
bulk-reduced by the producer (auto), and the same with `atomic-add=red`; head_dim 64's 128 x 128 kernel with dQ
bulk-reduced (auto) and by red) are reported by the CTA simulator (Target IR)
and the PTX executor alike, naming both sides, and the edits each kernel's synchronisation covers run clean
with bitwise the unseeded outputs. One seed of each kind runs here on several trips; every seed on both shapes
at both levels is `-m slow` (and `python bench/races_target.py --backward`, `python bench/races.py --backward`).

CUTLASS's and FlashAttention-3's PTX (tests/library_seeds.py, built by tests/ptx_library/build.py; skipped when
not built) run clean unseeded and report the same kinds seeded.
"""

from __future__ import annotations

import re

import pytest

from backward_seeds import ALL, CATALOGUE, CELLS, SHAPES, one_per_kind, verdict
from library_seeds import LIBRARY
from race_templates import check_expectations

SEVERAL = "several trips"
WS_RED = "warp-specialized, red dQ"


def _seed(variant: str, index: int):
    return CATALOGUE[variant][index]


def _both_sides(level: str, text: str) -> bool:
    """The report names the other side (an op or line, a thread, a count) besides this side's thread."""
    if "deadlock" in text:
        return "wait" in text
    if level == "ptx":
        return re.search(r"line \d+|thread count is \d+|first wgmma|CTA exits|thread \(\d+, 0, 0\) of CTA",
                         text) is not None
    return re.search(r"`[^`]+`|which thread \d+|expects \d+|first wgmma|kernel ends|fence_mbarrier_init|exceeds|"
                     r"mbarrier at shared address", text) is not None


@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("variant,index", [s for s in one_per_kind() if s[0] == WS_RED],
                         ids=lambda x: x if isinstance(x, str) else None)
def test_one_seed_of_each_kind_is_reported_at_both_levels(variant, index, level):
    kind, name, edit, expected, _ = _seed(variant, index)
    got, text = verdict(level, variant, edit, SEVERAL)
    assert got == "R", f"{kind}: {name}: {text}"
    assert _both_sides(level, text), text


@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("name", ["bar.sync deleted: after the dS stores (P and dS read by every warp's wgmma)",
                                  "fence.proxy.async deleted: after the P stores"])
def test_a_store_read_by_another_warps_wgmma_needs_the_barrier_not_just_a_fence(name, level):
    """Each thread stores part of P and dS and fences: without the bar.sync after the dS stores, warp 1's wgmma
    reads bytes thread 0 stored (the PTX executor accepted any issuing thread's fence until these seeds); the
    first fence may go, as the fence after the dS stores and the barrier cover P too."""
    kind, seed_name, edit, expected, _ = next(s for s in CATALOGUE[WS_RED] if f"{s[0]}: {s[1]}" == name)
    got, text = verdict(level, WS_RED, edit, SEVERAL)
    assert got == expected[CELLS.index((level, SEVERAL))], text
    if got == "R":
        assert re.search(r"thread 0 stored .* this warp in thread 32|thread \(0, 0, 0\) of CTA \(0, 0, 0\) stored "
                         r"through the generic proxy .* \(thread \(32, 0, 0\)", text), text


def test_the_bulk_reduction_of_unfenced_staging_stores_is_reported_in_ptx():
    bulk = CATALOGUE["warp-specialized, bulk dQ"]
    kind, name, edit, _, _ = next(s for s in bulk if s[0] == "fence.proxy.async deleted")
    got, text = verdict("ptx", "warp-specialized, bulk dQ", edit, "one trip")
    assert got == "R" and "has not made visible to the async proxy" in text, text


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_the_producer_reduces_only_staged_dq_its_consumers_fenced(level):
    """dQ by bulk reduction in a pipelined kernel: the consumers store their partial into a staging slot, fence
    and arrive on its full barrier; the producer waits there and reduces. An arrive before the fence hands the
    producer stores the async proxy may not see yet."""
    bulk = CATALOGUE["warp-specialized, bulk dQ"]
    _, name, edit, expected, _ = next(s for s in bulk if s[0] == "staged dQ published early")
    got, text = verdict(level, "warp-specialized, bulk dQ", edit, "one trip")
    assert got == "R" == expected[0] and _both_sides(level, text), text


KEY_ROWS, KEY_ROWS_RED = "keys on rows", "keys on rows, red dQ"
NEW_KINDS = ["staged dQ^T published early", "second warpgroup's barrier", "riding row left out"]
"""Kinds that exist only in the default keys-on-rows kernel (two consumer warpgroups; LSE2 riding on Q's barriers;
dQ^T staged for the producer's bulk reduction): one seed each, one trip."""


D64 = "head_dim 64, 128 x 128"


@pytest.mark.parametrize("level", ["target", "ptx"])
@pytest.mark.parametrize("variant,kind", [(KEY_ROWS, k) for k in NEW_KINDS] + [
    (KEY_ROWS_RED, "dQ^T added transposed without its wait"), (D64, NEW_KINDS[1])])
def test_the_two_warpgroup_kernels_own_kinds_are_reported_at_both_levels(variant, kind, level):
    _, name, edit, expected, _ = next(s for s in CATALOGUE[variant] if s[0] == kind)
    assert expected == ALL
    got, text = verdict(level, variant, edit, "one trip")
    assert got == "R", f"{kind}: {name}: {text}"
    assert _both_sides(level, text), text


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_deleting_the_end_of_trip_barrier_lets_one_warpgroup_overwrite_ds_the_other_still_reads(level):
    """pipeline-loops keeps the bar.sync at the end of the trip because the body writes dS^T, a plain shared
    tile: without it, warpgroup 1 stores the next trip's dS^T (its Q stage needs no release) while warpgroup 0's
    dQ^T wgmma may still read it. Both levels report it whatever order they ran the warpgroups in (the PTX
    executor judged one store instruction of both warpgroups by the join of their clocks until this seed)."""
    _, _, edit, expected, _ = next(s for s in CATALOGUE[KEY_ROWS] if s[0] == "end-of-trip barrier deleted")
    got, text = verdict(level, KEY_ROWS, edit, SEVERAL)
    assert got == "R" == expected[CELLS.index((level, SEVERAL))], text
    assert re.search(r"ds_smem.*warpgroup 0 read until|which a wgmma of warpgroup 0 read until its "
                     r"wgmma.wait_group at line \d+.*\(thread \(1[2-9]\d|2[0-5]\d", text), text


def test_every_seed_has_an_expectation_and_every_clean_one_a_reason():
    check_expectations(CATALOGUE, "RC", ALL, kinds=17)


@pytest.mark.slow
@pytest.mark.parametrize("level,shape", CELLS)
@pytest.mark.parametrize("variant,index", [(v, i) for v, seeds in CATALOGUE.items() for i in range(len(seeds))],
                         ids=[f"{v}: {s[0]}: {s[1]}" for v, seeds in CATALOGUE.items() for s in seeds])
def test_every_seed_gives_its_expected_outcome(variant, index, level, shape):
    """R: reported naming both sides; C: clean and bitwise the unseeded kernel's outputs (never a wrong answer in
    silence)."""
    kind, name, edit, expected, reason = _seed(variant, index)
    got, text = verdict(level, variant, edit, shape)
    assert got == expected[CELLS.index((level, shape))], f"{kind}: {name} [{shape}]: {text} ({reason})"
    if got == "R":
        assert _both_sides(level, text), text


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("variant", CATALOGUE)
def test_the_unseeded_backward_runs_clean_at_both_levels_under_the_adversarial_schedule(variant, shape):
    from backward_seeds import compiled, run_ptx, run_target, target_kernel

    run_target(variant, target_kernel(variant), shape, schedule="adversarial", seed=3)
    run_ptx(variant, compiled(variant)[2], shape, schedule="adversarial", seed=3)


# region library PTX (built by tests/ptx_library/build.py)
def _library(name: str):
    from ptx_library.library import built

    if not built(name):
        pytest.skip(f"{name} is not built (tests/ptx_library/build.py)")


LIBRARY_FAST = [("fa3_fwd_hdim128", "fence.proxy.async deleted: the epilogue's",
                 r"the TMA store reads shared address 0x0, which thread \(128, 0, 0\) of CTA \(0, 0, 0\) stored "
                 r"through the generic proxy"),
                ("fa3_fwd_hdim128", "bulk wait deleted: the epilogue's cp.async.bulk.wait_group.read",
                 r"overwrites shared address 0x0 while the bulk store at line \d+ .* may still read it")]


@pytest.mark.parametrize("name,bug,message", LIBRARY_FAST, ids=[f"{n}: {b}" for n, b, _ in LIBRARY_FAST])
def test_library_ptx_seeded_is_reported(name, bug, message):
    from library_seeds import LIBRARY_BUGS, run, seed, sizes_of
    from ptx_library.library import BUILD
    from tessera.interpreters.ptx import PtxHazardError

    _library(name)
    edit = next(e for k, b, e in LIBRARY_BUGS if f"{k}: {b}" == bug)
    with pytest.raises(PtxHazardError, match=message):
        run(name, seed((BUILD / name / "kernel.ptx").read_text(), edit), sizes_of(name)[0])


@pytest.mark.parametrize("bug,message", [
    ("dQ: fence.proxy.async deleted",
     r"cp.reduce.async.bulk\S*: the bulk reduction reads shared address 0x10000, which thread \(128, 0, 0\) of CTA "
     r"\(0, 0, 0\) stored through the generic proxy"),
    ("dQ: bar.arrive deleted", r"(?s)deadlock: .* wait at named barrier 13 at line \d+ \(bar.sync\)")])
def test_fa3_backward_dq_accumulation_seeded_is_reported(bug, message):
    """FA3's backward adds dQ through shared memory: consumers store and fence, a named barrier hands the buffer
    to the writer warp, which adds it into dQaccum with cp.reduce.async.bulk."""
    from library_seeds import FA3_BACKWARD, FA3_BACKWARD_BUGS, FA3_BACKWARD_SIZES, run_backward, seed
    from ptx_library.library import BUILD
    from tessera.interpreters.ptx import PtxExecutionError

    _library(FA3_BACKWARD)
    edit = next(e for k, b, e, _, _ in FA3_BACKWARD_BUGS if k == bug)
    with pytest.raises(PtxExecutionError, match=message):
        run_backward(seed((BUILD / FA3_BACKWARD / "kernel.ptx").read_text(), edit), FA3_BACKWARD_SIZES[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fa3_bwd_hdim128", "fa3_bwd_hdim64"])
def test_fa3_backward_runs_right_and_every_seed_gives_its_expected_outcome(name):
    """R reported, C clean and right (the catalogue says why), G a known gap: clean and right
    (`python bench/races.py --fa3-backward` prints every cell)."""
    from library_seeds import FA3_BACKWARD_BUGS, FA3_BACKWARDS, run_backward, seed
    from ptx_library.library import BUILD
    from tessera.interpreters.ptx import PtxExecutionError

    _library(name)
    text = (BUILD / name / "kernel.ptx").read_text()
    for sizes in FA3_BACKWARDS[name]:
        assert run_backward(None, sizes, name)[0]
    for kind, bug, edit, expected, reason in FA3_BACKWARD_BUGS:
        seeded = seed(text, edit)
        for sizes, want in zip(FA3_BACKWARDS[name], expected):
            try:
                got = "C" if run_backward(seeded, sizes, name)[0] else "WRONG"
            except PtxExecutionError:
                got = "R"
            assert got == want or (want == "G" and got == "C"), f"{kind}: {bug} {sizes}: {got} ({reason})"


@pytest.mark.slow
@pytest.mark.parametrize("name", LIBRARY)
def test_library_ptx_runs_clean_and_every_seed_is_reported_or_right(name):
    """No false report on NVIDIA's and Tri Dao's code; each seeded edit is reported or leaves the output right
    (`python bench/races.py --library` prints which)."""
    from library_seeds import CLUSTER_BUGS, LIBRARY_BUGS, run, seed, sizes_of
    from ptx_library.library import BUILD
    from tessera.interpreters.ptx import PtxExecutionError

    _library(name)
    text = (BUILD / name / "kernel.ptx").read_text()
    for sizes in sizes_of(name):
        assert run(name, text, sizes)
    for kind, bug, edit in LIBRARY_BUGS + (CLUSTER_BUGS if "cluster" in name else []):
        try:
            seeded = seed(text, edit)
        except LookupError:
            continue
        for sizes in sizes_of(name):
            try:
                assert run(name, seeded, sizes), f"{kind}: {bug} {sizes}: a wrong answer and no report"
            except PtxExecutionError:
                pass


# endregion
