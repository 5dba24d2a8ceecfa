"""The in-process memo of lowered modules (`tessera.lowering.memo`), which the suite lowers through
(tests/conftest.py): a hit gives a copy of the stored result and the lowering's warnings again; the key holds the
module's text and source locations, the spec and the spill configuration; a refusal is not stored."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from xdsl.dialects.builtin import StringAttr

import tessera
from tessera.lowering.fallback import without_spilling
from tessera.lowering.memo import LoweringMemo, lower_memoized, memo_key, memoized_lowering, unmemoized_lowering

ROW_SCALE = (Path(__file__).parent / "user_kernels" / "row_scale.mlir").read_text()


def module(filename: str = "row_scale.mlir"):
    return tessera.parse_module(ROW_SCALE, filename)


class Lowering:
    """A stand-in for a pipeline: marks the module, warns, and counts its runs (or raises)."""

    def __init__(self, fail: bool = False) -> None:
        self.runs, self.fail = 0, fail

    def __call__(self, m) -> None:
        self.runs += 1
        if self.fail:
            raise ValueError("refused")
        m.body.block.first_op.attributes["lowered"] = StringAttr(f"run {self.runs}")
        warnings.warn("fell back", UserWarning)


def test_a_second_lowering_is_a_copy_of_the_first_with_its_warnings():
    lower, memo = Lowering(), LoweringMemo()
    with memoized_lowering(memo):
        first = module()
        with pytest.warns(UserWarning, match="fell back"):
            lower_memoized(first, "spec", lower)
        first.body.block.first_op.attributes["edited"] = StringAttr("by the caller")  # not in the memo's copy
        second = module()
        with pytest.warns(UserWarning, match="fell back"):
            lower_memoized(second, "spec", lower)
    assert lower.runs == 1 and (memo.hits, memo.misses) == (1, 1)
    fn = second.body.block.first_op
    assert fn.attributes["lowered"] == StringAttr("run 1") and "edited" not in fn.attributes


def test_the_key_holds_text_locations_spec_and_spilling():
    key = memo_key(module(), "spec")
    assert key == memo_key(module(), "spec")
    assert key != memo_key(module("elsewhere.mlir"), "spec")  # diagnostics name the file
    assert key != memo_key(module(), "other-spec")
    with without_spilling():
        assert key != memo_key(module(), "spec")
    changed = module()
    changed.body.block.first_op.attributes["tile.extra"] = StringAttr("x")
    assert key != memo_key(changed, "spec")


def test_refusals_reports_and_blocks_without_the_memo_lower_every_time():
    refuse, lower = Lowering(fail=True), Lowering()
    with memoized_lowering() as memo:
        for _ in range(2):
            with pytest.raises(ValueError, match="refused"):
                lower_memoized(module(), "spec", refuse)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for spec in ("assign-swizzle{report=true}", "assign-swizzle{report=true}", "spec", "spec"):
                with unmemoized_lowering() if spec == "spec" else memoized_lowering(memo):
                    lower_memoized(module(), spec, lower)
    assert refuse.runs == 2 and lower.runs == 4 and not memo.entries


def test_the_least_recently_used_module_is_dropped_first():
    memo = LoweringMemo(capacity=2)
    for key in ("a", "b", "a", "c"):
        if memo.get(key) is None:
            memo.put(key, module(), ())
    assert list(memo.entries) == ["a", "c"]
    with pytest.raises(ValueError, match="at least one module"):
        LoweringMemo(capacity=0)


def test_the_pipeline_through_the_memo_gives_the_kernel_lowered_afresh():
    with memoized_lowering() as memo:
        ptx = [tessera.compile(module(), target="ptx") for _ in range(2)]
    with unmemoized_lowering():
        assert ptx == [tessera.compile(module(), target="ptx")] * 2
    assert (memo.hits, memo.misses) == (1, 1)
