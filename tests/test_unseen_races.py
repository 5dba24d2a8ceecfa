"""Both race detectors on kernels they were not written for (issue 31), seeded mechanically at every
synchronisation op: ten of Tessera's kernels at both levels (tests/unseen_seeds.py: GEMMs of three layouts,
single-stage and with generic stores, the GEMM in clusters of 2 x 1, the FP8 forward with its V transpose in shared
memory, varlen, the paged gather, the deterministic backward, the forward with a bias, decoding over a TMA-paged
cache with GQA and two split-KV parts) and Triton's TMA matmul and flash attention PTX in the
PTX executor (tests/triton_seeds.py). Each seed has its expected outcome per level and shape, and every clean one
the reason the memory model accepts it. A slice runs here; every seed on every shape is `-m slow` (and `python
bench/races_target.py --unseen`, `python bench/races.py --unseen`, `python bench/races.py --triton`).
"""

from __future__ import annotations

import re

import pytest

import triton_seeds
import unseen_seeds
from race_templates import matches
from test_tessera_races import _both_sides

SLICE = [
    # (kernel, seed "kind: name", shape): a kind each, reported at both levels
    ("gemm cluster 2x1", "slot released before its wait_group: remote_release #1 before wait_group #0", "long"),
    ("gemm NT unaligned", "fence_proxy deleted: fence_proxy #1", "one block"),
]
"""The remote release before the wait_group (the peer's wgmma may still read the slot its producer multicasts
into: silent in the CTA simulator until it judged wgmma reads until their wait_group), a generic store read by
wgmma without its proxy fence (the FP8 transpose's fence: tests/test_fp8_vtranspose.py)."""


def _seed(kernel: str, label: str):
    return next(edit for kind, name, edit in unseen_seeds.mechanical(kernel) if f"{kind}: {name}" == label)


@pytest.mark.parametrize("level", unseen_seeds.LEVELS)
@pytest.mark.parametrize("kernel,label,shape", SLICE, ids=[s[0] for s in SLICE])
def test_seeds_in_unseen_kernels_are_reported_at_both_levels_naming_both_sides(kernel, label, shape, level):
    got, text = unseen_seeds.verdict(level, kernel, _seed(kernel, label), shape)
    assert got == "R", f"{kernel}: {label}: {text}"
    assert _both_sides(level, text), text


def test_the_ledger_pairs_each_ring_slot_with_its_own_release_barrier():
    """The decode kernel's producer wait before a first fill deleted (a first fill needs no wait; wait #1, the
    last before the producer's loop since overlap-softmax folds the consumers' first trip into theirs: the
    second K slot's first fill, wait #2 before, is now the loop's), on 1100 keys: the CTA simulator's
    end-of-kernel ledger took the barrier the producer waited on last, V's empty barrier, as that slot's release
    barrier and reported the pairing's counts, where the PTX executor ran it clean. It pairs k_ring_full[s] with
    k_ring_empty[s], the barriers of the buffers that own the slot, and runs it clean too; a slot whose release
    is deleted is still reported by it on one key block."""
    kernel = "paged TMA decode, GQA, 2 splits"
    got, text = unseen_seeds.verdict("target", kernel, _seed(kernel, "wait deleted: wait #1"), "long")
    assert got == "C", text
    got, text = unseen_seeds.verdict("target", kernel, _seed(kernel, "release deleted: release #0"), "one block")
    assert got == "R" and re.search(r"buffer 'k_ring_empty' \+ 0\) released 0 times .* filled 1 times through the "
                                    r"mbarrier at .* \(buffer 'k_ring_full' \+ 0\)", text), text


def test_triton_matmul_refill_without_the_wgmma_wait_is_reported_naming_both_sides():
    kernel = "triton matmul (TMA)"
    edit = next(e for kind, name, e in triton_seeds.edits(triton_seeds.source(kernel))
                if kind == "wait_group weakened" and name.startswith("wait_group #0 "))
    got, text = triton_seeds.verdict(kernel, edit, "eight k-blocks")
    assert got == "R" and _both_sides("ptx", text), text


def test_every_expectation_has_a_letter_per_cell_and_every_clean_one_a_reason():
    for table, cells in ((unseen_seeds.EXPECTED, len(unseen_seeds.CELLS)),
                         (triton_seeds.EXPECTED, None)):
        for kernel, rows in table.items():
            width = cells or len(triton_seeds.SHAPES[kernel])
            for pattern, expected, reason in rows:
                re.compile(pattern)
                assert re.fullmatch(f"[RC]{{{width}}}", expected) and "C" in expected and reason, (kernel, pattern)


@pytest.mark.slow
@pytest.mark.parametrize("level,shape", unseen_seeds.CELLS)
@pytest.mark.parametrize("kernel", unseen_seeds.KERNELS)
def test_every_seed_of_the_unseen_kernels_gives_its_expected_outcome(kernel, level, shape):
    """R: reported naming both sides; C: clean, bitwise the unseeded kernel's outputs."""
    misses = []
    for kind, name, edit, expected, reason in unseen_seeds.catalogue()[kernel]:
        got, text = unseen_seeds.verdict(level, kernel, edit, shape)
        if not matches(got, expected[unseen_seeds.CELLS.index((level, shape))]):
            misses.append(f"{kind}: {name}: {text} ({reason})")
    assert not misses, "\n".join(misses)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", triton_seeds.KERNELS)
def test_every_seed_of_tritons_ptx_gives_its_expected_outcome(kernel):
    misses = []
    for kind, name, edit, expected, reason in triton_seeds.catalogue()[kernel]:
        for shape, want in zip(triton_seeds.SHAPES[kernel], expected):
            got, text = triton_seeds.verdict(kernel, edit, shape)
            if got != want or got == "R" and not _both_sides("ptx", text):
                misses.append(f"{kind}: {name} [{shape}]: {text} ({reason})")
    assert not misses, "\n".join(misses)


@pytest.mark.slow
@pytest.mark.parametrize("level", unseen_seeds.LEVELS)
@pytest.mark.parametrize("kernel", unseen_seeds.KERNELS)
def test_the_unseeded_kernels_run_clean_under_the_adversarial_schedule(kernel, level):
    for shape in unseen_seeds.SHAPES:
        out = unseen_seeds.run(level, kernel, shape, schedule="adversarial", seed=5)
        assert tuple(a.tobytes() for a in out) == unseen_seeds.clean(level, kernel, shape)
