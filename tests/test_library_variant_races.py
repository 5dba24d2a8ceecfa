"""The race detector on the seven library variants (tests/library_variant_seeds.py: CUTLASS's FP8 and bf16 bias +
ReLU GEMMs, stream-K on 2 and 4 SMs and split-K in 3, FA3's FP8, soft-cap, local and packed-GQA forwards) built
by tests/ptx_library/build.py (skipped where not built): the unseeded kernels run clean and right, every seed
gives its expected outcome (R reported, C clean and right for the reason the catalogue gives). Two cells of the
stream-K fixup run here, and the flag wait deleted on the long split-K size with a CTA delayed (stream-K's with -m slow); every
cell with -m slow (and `python bench/races.py --library`)."""

from __future__ import annotations

import re

import pytest

from tessera.interpreters.ptx import PtxHazardError

import library_variant_seeds as variants


def _need(label: str) -> None:
    if label not in variants.available():
        pytest.skip(f"{variants.VARIANTS[label][0]} is not built (tests/ptx_library/build.py)")


def _seeded(label: str, kind: str) -> str:
    edit = next(e for k, n, e in variants.seeds(label) if f"{k}: {n}".startswith(kind))
    return variants.seed(variants.base_text(label), edit)


FIXUP_FAST = [
    ("fixup: fence deleted", r"race"),
    ("fixup: flag increment deleted", r"deadlock: .*sleep in a spin wait that nothing can end"),
]


@pytest.mark.parametrize("kind,message", FIXUP_FAST, ids=[k for k, _ in FIXUP_FAST])
def test_split_k_fixup_seeded_is_reported(kind, message):
    """Split-K in 3 on 128 x 128 x 192: the units of the one tile meet in the workspace; the release deleted
    leaves the reducing unit's workspace reads unordered after its peers' stores (a race between CTAs), the flag
    increment deleted leaves it spinning on ld.acquire for a count no one will reach (a deadlock at the load)."""
    label = "cutlass split-K in 3"
    _need(label)
    got, text = variants.verdict(label, _seeded(label, kind), 0)
    assert got == "R" and re.search(message, text), text


@pytest.mark.parametrize("label", ["cutlass split-K in 3",
                                   pytest.param("cutlass stream-K, 2 SMs", marks=pytest.mark.slow)])
def test_fixup_wait_deleted_races_the_delayed_peer(label):
    """The long size, the flag's spin branch deleted: the reducing unit's one `ld.acquire` still acquires on
    min-pc, where its peer has stored and released long before; with CTA 0 delayed (`schedule="delayed"`) the
    reducer in CTA 1 reads the workspace before the peer has written it, and the peer's store is reported racing
    that read, both sides named (the answer would be wrong)."""
    _need(label)
    text = _seeded(label, "fixup: wait deleted")
    with pytest.raises(PtxHazardError) as caught:
        variants.run(label, text, 1, schedule="delayed", schedule_seed=0)
    message = str(caught.value)
    assert re.search(r"st\.global\.f32: writes global address .* which the instruction at line \d+ \(thread "
                     r"\(\d+, 0, 0\) of CTA \(0, 1, 0\)\) read .*no synchronisation orders the two \(race:.*of CTA "
                     r"\(0, 0, 0\)\)$", " ".join(message.split())), message


@pytest.mark.slow
@pytest.mark.parametrize("label", list(variants.VARIANTS))
def test_every_seed_of_the_library_variants_gives_its_expected_outcome(label):
    _need(label)
    lines: list[str] = []
    assert variants.matrix(out=lambda line, **_: lines.append(line), labels=[label]) == 0, "\n".join(
        line for line in lines if "MISMATCH" in line or "unseeded" in line)


def test_every_expectation_has_a_letter_per_size_and_every_clean_one_a_reason():
    for label, rows in variants.EXPECTED.items():
        assert label in variants.VARIANTS
        for pattern, expected, reason in rows:
            re.compile(pattern)
            assert re.fullmatch("[RC]{2}", expected) and "C" in expected and reason, (label, pattern)
