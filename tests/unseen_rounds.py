"""The scaffolding every round of unseen kernels shares (tests/test_unseen_kernels.py, _2, _3): a `Case` (a
kernel file of `tests/user_kernels/`, its inputs, its float64 reference and its bound), `run_case` (the kernel
through `tessera.launch` at a level against the reference: NaN where NumPy gives NaN, the same infinities, the
bound on every finite value) and `round_tests`, the four tests of a round: its fast cases by default, every case
at every level on every shape under `-m slow`, and under `-m slow` every ptxas found (no warning, no spill) and
`tessera-run --level ptx --check` on each kernel."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import inprocess
import tessera
from tessera.toolchain import compile_ptx, find_all_ptxas

KERNELS = Path(__file__).resolve().parent / "user_kernels"
LEVELS = ("tile", "target", "ptx")


@dataclass(frozen=True)
class Case:
    """A kernel file, its inputs for a shape (arrays, then sizes given at launch), its float64 reference (one
    array per output) and the bound |got - expected| <= atol + rtol |expected| (one for every output, or a tuple
    of one per output), each with its reason."""

    kernel: str
    inputs: Callable[[tuple, np.random.Generator], tuple[list, dict]]
    reference: Callable[..., tuple]
    rtol: float | tuple[float, ...]
    atol: float | tuple[float, ...]
    shapes: tuple


def f64(*arrays):
    """The arrays as float64 NumPy arrays (a reference's inputs)."""
    return [np.asarray(a).astype(np.float64) for a in arrays]


def run_case(case: Case, shape, level):
    """Launch `case`'s kernel at `level` on inputs of `shape` (seeded by the shape) and assert every output
    against the reference: NaN where it is NaN, the same infinities, the bound on every finite value."""
    rng = np.random.default_rng(sum(shape))
    arrays, sizes = case.inputs(shape, rng)
    module = tessera.parse_module((KERNELS / f"{case.kernel}.mlir").read_text(), f"{case.kernel}.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warp-specialize: nothing to specialize in these kernels
        got = tessera.launch(module, *arrays, level=level, **sizes)
    got = got if isinstance(got, tuple) else (got,)
    expected = case.reference(*arrays, *sizes.values())
    assert len(got) == len(expected)
    for k, (out, ref) in enumerate(zip(got, expected)):
        rtol, atol = (t[k] if isinstance(t, tuple) else t for t in (case.rtol, case.atol))
        assert out.shape == ref.shape
        out = out.astype(np.float64)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref), f"{case.kernel} at {level} {shape}: NaNs")
        infinite = np.isinf(ref)
        np.testing.assert_array_equal(out[infinite], ref[infinite], f"{case.kernel} at {level} {shape}: infinities")
        finite = np.isfinite(ref)
        err = np.abs(out[finite] - ref[finite])
        bound = atol + rtol * np.abs(ref[finite])
        assert np.all(err <= bound), f"{case.kernel} at {level} {shape}: max error {err.max():.3g}, " \
                                     f"worst excess {(err - bound).max():.3g}"


def check_tools(kernel: str, sizes: list[str]):
    """The kernel's Target IR verifies, every ptxas found assembles its PTX without a warning or a spill, and
    `tessera-run --level ptx --check -d SIZE ...` (the kernel against its own Tile IR in float64) passes."""
    module = tessera.parse_module((KERNELS / f"{kernel}.mlir").read_text(), f"{kernel}.mlir")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tessera.ir.verify(tessera.compile(module, target="target"))
        ptx = tessera.compile(module)
    assert_ptxas_clean(ptx, kernel)
    arguments = [arg for size in sizes for arg in ("-d", size)]
    result = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(KERNELS / f"{kernel}.mlir"),
                            "--level", "ptx", "--check", *arguments])
    assert result.returncode == 0, result.stdout + result.stderr


def assert_ptxas_clean(ptx: str, name: str) -> None:
    """Every ptxas found (13.x and 12.x where installed) assembles `ptx` without a warning or a spill."""
    for ptxas in find_all_ptxas():
        result = compile_ptx(ptx, source_name=name, ptxas=ptxas.path)
        assert result.warnings == (), f"ptxas {ptxas.release}: " + "\n".join(map(str, result.warnings))
        assert not any(entry.spills for entry in result.entries.values()), f"ptxas {ptxas.release} spills"


def round_tests(cases: dict[str, Case], fast: dict[str, tuple[str, ...]], tool_sizes: dict[str, list[str]],
                fast_shape: int = 0):
    """The tests of a round, to bind at module level under these names: `test_unseen_kernel` (the `fast` kernels
    at their levels, on shape `fast_shape` of each), `test_unseen_kernel_every_shape` (slow: every case, level and
    shape), `test_every_case_has_tool_sizes` and `test_unseen_kernel_tools` (slow: `check_tools` with
    `tool_sizes`, partial last blocks everywhere)."""

    @pytest.mark.parametrize("kernel, level", [(k, lv) for k, levels in fast.items() for lv in levels])
    def test_unseen_kernel(kernel, level):
        case = cases[kernel]
        run_case(case, case.shapes[fast_shape], level)

    @pytest.mark.slow
    @pytest.mark.parametrize("level", LEVELS)
    @pytest.mark.parametrize("kernel", cases)
    def test_unseen_kernel_every_shape(kernel, level):
        case = cases[kernel]
        for shape in case.shapes:
            run_case(case, shape, level)

    def test_every_case_has_tool_sizes():
        assert sorted(tool_sizes) == sorted(cases)

    @pytest.mark.slow
    @pytest.mark.parametrize("kernel", cases)
    def test_unseen_kernel_tools(kernel):
        check_tools(kernel, tool_sizes[kernel])

    return test_unseen_kernel, test_unseen_kernel_every_shape, test_every_case_has_tool_sizes, test_unseen_kernel_tools
